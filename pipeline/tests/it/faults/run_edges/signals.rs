//! Signals from outside: SIGHUP when the SSH session closes (the terminal gone with it, so
//! every write to stderr fails) must stop the run like SIGTERM — every answer received stored,
//! `status.json` saying it stopped and why — and after two quick SIGTERMs `status.json` must
//! not say the run is still running. With every server down nothing is in flight: a signal
//! stops the run at once, without the grace period for requests in flight.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use tokio::io::AsyncReadExt as _;

use crate::faults::{alpha_project, assert_complete, rows};
use crate::support::{Config, Project, completion_ids, sources};

/// What a stopped run's status must say: finished, why, and no source still at work.
fn assert_stopped(project: &Project, reason: &str) {
    let status = project.status().expect("status.json");
    assert_eq!(status["finished"], true, "{status:#}");
    assert!(
        status["stopped_by"]
            .as_str()
            .is_some_and(|s| s.contains(reason)),
        "{status:#}"
    );
    for source in sources(&status) {
        assert!(
            !["generating", "preparing"].contains(&source["phase"].as_str().unwrap_or("")),
            "{status:#}"
        );
    }
}

#[tokio::test]
async fn sighup_with_the_terminal_gone_stops_gracefully_and_keeps_every_answer() {
    const PROMPTS: usize = 60;
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(100),
        ..Knobs::default()
    })
    .await;
    let project = alpha_project(&server.url(), rows("alpha", PROMPTS));
    let mut child = project.start(&["run", "cfg.toml"]);
    child
        .until("8 requests", Duration::from_secs(60), || {
            server.chat_requests() >= 8
        })
        .await;
    // The session closes: its terminal goes (writes fail with EPIPE here, EIO on a real one),
    // then the hangup arrives.
    drop(child.child.stderr.take());
    child.signal("HUP");
    let exit = child.exit(Duration::from_secs(60)).await;
    assert_eq!(exit.code(), Some(1), "a graceful stop, not a kill: {exit}");
    assert_stopped(&project, "SIGHUP");
    // Every request the server answered is stored: none is asked for twice.
    let stored = completion_ids(&project.source_path("alpha", "completions.jsonl.zst"));
    let answered = server.chat_requests();
    assert!(stored.len() < PROMPTS, "stopped mid-run");
    assert_eq!(stored.len(), answered, "answers lost on the hangup");
    let rerun = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(rerun.code, Some(0), "{}", rerun.stderr);
    assert_eq!(server.chat_requests() - answered, PROMPTS - stored.len());
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, PROMPTS as u64);
}

/// Ctrl-C stops the run gracefully and says the one line that resumes it.
#[tokio::test]
async fn ctrl_c_says_how_to_resume() {
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(100),
        ..Knobs::default()
    })
    .await;
    let project = alpha_project(&server.url(), rows("alpha", 60));
    let mut child = project.start(&["run", "cfg.toml", "--source", "alpha"]);
    child
        .until("8 requests", Duration::from_secs(60), || {
            server.chat_requests() >= 8
        })
        .await;
    child.signal("INT");
    let out = child.finish(Duration::from_secs(60)).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .lines()
            .any(|l| l == "gen: interrupted; run `gen run cfg.toml --source alpha` again to resume"),
        "{}",
        out.stderr
    );
}

/// Before: the requests waiting for a server to come back held the run for the whole 30 s
/// grace, although none was in flight.
#[tokio::test]
async fn a_signal_while_every_server_is_down_stops_at_once() {
    const PROMPTS: usize = 40;
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(50),
        ..Knobs::default()
    })
    .await;
    let project = alpha_project(&server.url(), rows("alpha", PROMPTS));
    let mut child = project.start(&["run", "cfg.toml"]);
    child
        .until("4 requests", Duration::from_secs(60), || {
            server.chat_requests() >= 4
        })
        .await;
    drop(server);
    child
        .until_run_status(&project, "the server down", Duration::from_secs(60), |s| {
            s["servers"][0]["down_since_unix_ms"].is_u64() && s["servers"][0]["in_flight"] == 0
        })
        .await;
    let signalled = std::time::Instant::now();
    child.signal("HUP");
    let exit = child.exit(Duration::from_secs(60)).await;
    let took = signalled.elapsed();
    assert_eq!(exit.code(), Some(1), "a graceful stop: {exit}");
    assert!(
        took < Duration::from_secs(10),
        "stopped {took:?} after the signal: it waited out the grace period"
    );
    assert_stopped(&project, "SIGHUP");
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert!(audit["totals"]["pending"].as_u64() > Some(0), "{audit:#}");
}

#[tokio::test]
async fn after_two_quick_sigterms_status_says_stopped_not_running() {
    let server = FakeOpenAi::start(Knobs {
        // Requests in flight outlast the test: only the second signal ends the run.
        delay: Duration::from_secs(120),
        ..Knobs::default()
    })
    .await;
    let project = alpha_project(&server.url(), rows("alpha", 20));
    let mut child = project.start(&["run", "cfg.toml"]);
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut pipe = child.child.stderr.take().expect("stderr");
    let reader = tokio::spawn({
        let stderr = stderr.clone();
        async move {
            let mut buffer = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buffer).await {
                let text = String::from_utf8_lossy(&buffer[..n]).into_owned();
                stderr.lock().expect("lock").push_str(&text);
            }
        }
    });
    child
        .until("requests in flight", Duration::from_secs(60), || {
            server.chat_requests() >= 4
        })
        .await;
    child.signal("TERM");
    child
        .until("the first signal handled", Duration::from_secs(30), || {
            stderr.lock().expect("lock").contains("no new requests")
        })
        .await;
    child.signal("TERM");
    let exit = child.exit(Duration::from_secs(30)).await;
    reader.await.expect("reader");
    let stderr = stderr.lock().expect("lock").clone();
    assert_eq!(exit.code(), Some(130), "{stderr}");
    assert!(stderr.contains("second signal"), "{stderr}");
    assert_stopped(&project, "second signal");
    let shown = project.run(&["status", "cfg.toml"]).await;
    assert!(!shown.stdout.contains("running"), "{}", shown.stdout);
    assert!(shown.stdout.contains("stopped"), "{}", shown.stdout);
}

#[tokio::test]
async fn under_nohup_a_hangup_is_still_ignored_and_the_run_finishes() {
    const PROMPTS: usize = 30;
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(50),
        ..Knobs::default()
    })
    .await;
    let project = alpha_project(&server.url(), rows("alpha", PROMPTS));
    let mut child = project.command(&["run", "cfg.toml"]).under("nohup").start();
    child
        .until("4 requests", Duration::from_secs(60), || {
            server.chat_requests() >= 4
        })
        .await;
    // `nohup` execs `gen`: the same pid.
    child.signal("HUP");
    let exit = child.exit(Duration::from_secs(120)).await;
    assert_eq!(exit.code(), Some(0), "{exit}");
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, PROMPTS as u64);
}

/// Issue 29 item 2: Slurm's `scancel` sends SIGTERM to every process of the task, the server
/// included, which closes its port while its streams hang (llama-server). Requests in flight
/// there cannot finish; before, `gen` waited out the whole grace period for them anyway.
#[tokio::test]
async fn a_sigterm_that_stopped_the_server_too_ends_the_grace_at_once() {
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_secs(600),
        ..Knobs::default()
    })
    .await;
    let project = alpha_project(&server.url(), rows("alpha", 20));
    let mut child = project
        .command(&["run", "cfg.toml"])
        .env("GEN_SHUTDOWN_GRACE_SECS", "600")
        .start();
    child
        .until("requests in flight", Duration::from_secs(60), || {
            server.chat_requests() >= 4
        })
        .await;
    // The fake stops listening; the connections it accepted stay open, their answers never
    // coming.
    drop(server);
    child.signal("TERM");
    let out = child.finish(Duration::from_secs(60)).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("the 4 in flight cannot finish, stopping now"),
        "{}",
        out.stderr
    );
    assert_stopped(&project, "SIGTERM");
}

/// A signal while `gen run` waits for its server (one still loading, say) stops the run
/// there: the worker still preparing is stopped, no source is marked failed, and
/// `status.json` says why it stopped. Servers' start-up is an event of the run's one loop.
#[tokio::test]
async fn a_signal_while_waiting_for_the_server_stops_the_run_and_fails_no_source() {
    let port = crate::support::free_port();
    let project = Project::new();
    project.write("data/a.jsonl", rows("alpha", 3));
    let slow = "import time, json\nprint(json.dumps({'prompt': 'b'}), flush=True)\ntime.sleep(120)";
    project.config(
        &Config::new(&format!("http://127.0.0.1:{port}"))
            .server("startup-timeout-secs = 300")
            .source("alpha", "data/a.jsonl")
            .python_source("beta", slow, ""),
    );
    let mut child = project.start(&["run", "cfg.toml"]);
    let waiting = child
        .until_run_status(
            &project,
            "alpha prepared, beta preparing",
            Duration::from_secs(60),
            |s| {
                let sources = sources(s);
                s["waiting_for"].is_string()
                    && sources[0]["prepared"].is_u64()
                    && sources[1]["phase"] == "preparing"
            },
        )
        .await;
    assert!(
        waiting["waiting_for"]
            .as_str()
            .is_some_and(|w| w.contains("server to answer")),
        "{waiting:#}"
    );
    child.signal("INT");
    let out = child.finish(Duration::from_secs(60)).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("(SIGINT) while waiting for the inference server"),
        "{}",
        out.stderr
    );
    assert_stopped(&project, "SIGINT");
    let status = project.status().expect("status.json");
    for source in sources(&status) {
        assert_ne!(source["phase"], "failed", "{status:#}");
    }
}
