//! Signals from outside: SIGHUP when the SSH session closes (the terminal gone with it, so
//! every write to stderr fails) must stop the run like SIGTERM — every answer received stored,
//! `status.json` saying it stopped and why — and after two quick SIGTERMs `status.json` must
//! not say the run is still running.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use tokio::io::AsyncReadExt as _;

use super::alpha_project;
use crate::faults::harness::{Project, completion_ids, sources};
use crate::faults::llama::signal;
use crate::faults::{RUN, assert_complete, rows};

/// Polls `ready` every few milliseconds until it holds, or panics after `secs` seconds.
async fn wait_until(what: &str, secs: u64, mut ready: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(secs);
    while !ready() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// What a stopped run's status must say: finished, why, and no source still at work.
fn assert_stopped(project: &Project, reason: &str) {
    let status = project.status(RUN).expect("status.json");
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
    let mut child = project.spawn(&["run", "cfg.toml"]);
    wait_until("requests", 60, || server.chat_requests() >= 8).await;
    // The session closes: its terminal goes (writes fail with EPIPE here, EIO on a real one),
    // then the hangup arrives.
    drop(child.stderr.take());
    let pid = child.id().expect("pid");
    signal(pid, "HUP");
    let exit = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("gen stops within the grace period")
        .expect("wait");
    assert_eq!(exit.code(), Some(1), "a graceful stop, not a kill: {exit}");
    assert_stopped(&project, "SIGHUP");
    // Every request the server answered is stored: none is asked for twice.
    let stored = completion_ids(
        &project
            .path(RUN)
            .join("sources/alpha/completions.jsonl.zst"),
    );
    let answered = server.chat_requests();
    assert!(stored.len() < PROMPTS, "stopped mid-run");
    assert_eq!(stored.len(), answered, "answers lost on the hangup");
    let rerun = project.run_gen(&["run", "cfg.toml"]).await;
    assert_eq!(rerun.code, Some(0), "{}", rerun.stderr);
    assert_eq!(server.chat_requests() - answered, PROMPTS - stored.len());
    let (code, audit) = project.verify(RUN).await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, PROMPTS as u64);
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
    let mut child = project.spawn(&["run", "cfg.toml"]);
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut pipe = child.stderr.take().expect("stderr");
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
    wait_until("requests in flight", 60, || server.chat_requests() >= 4).await;
    let pid = child.id().expect("pid");
    signal(pid, "TERM");
    wait_until("the first signal handled", 30, || {
        stderr.lock().expect("lock").contains("no new requests")
    })
    .await;
    signal(pid, "TERM");
    let exit = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("gen stops at once")
        .expect("wait");
    reader.await.expect("reader");
    let stderr = stderr.lock().expect("lock").clone();
    assert_eq!(exit.code(), Some(130), "{stderr}");
    assert!(stderr.contains("second signal"), "{stderr}");
    assert_stopped(&project, "second signal");
    let shown = project.run_gen(&["status", "cfg.toml"]).await;
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
    let mut child = tokio::process::Command::new("nohup")
        .arg(env!("CARGO_BIN_EXE_gen"))
        .args(["run", "cfg.toml"])
        .current_dir(project.path(""))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn nohup gen");
    wait_until("requests", 60, || server.chat_requests() >= 4).await;
    // `nohup` execs `gen`: the same pid.
    signal(child.id().expect("pid"), "HUP");
    let exit = tokio::time::timeout(Duration::from_secs(120), child.wait())
        .await
        .expect("gen finishes")
        .expect("wait");
    assert_eq!(exit.code(), Some(0), "{exit}");
    let (code, audit) = project.verify(RUN).await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, PROMPTS as u64);
}
