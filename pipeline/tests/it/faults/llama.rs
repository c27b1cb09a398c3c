//! The real llama-server frozen mid-run: `SIGSTOP` for a few seconds (shorter than the client's
//! 120 s per-chunk idle timeout), then `SIGCONT`. The run must simply resume: no prompt marked
//! failed or rejected, every prompt completed exactly once, audited by `gen verify`.
//!
//! Skipped with a printed reason when llama-server is not installed, unless `GEN_REQUIRE_LLAMA`
//! is set (as in `pipeline/tests/llama.rs`). The `kill -9` + restart scenario lives there; a
//! launch onto a port another process holds is [`busy_port`].

use std::time::{Duration, Instant};

use gen_tests::llama::LlamaServer;
use serde_json::Value;

use super::assert_complete;
use crate::support::{Config, Project, completion_ids, llama_skip_reason, signal};

mod busy_port;

/// How long the server stays frozen: the one deliberate sleep of the test.
const STOP: Duration = Duration::from_secs(4);
/// Small enough for the CI budget (a loaded 2-core machine generates ~8 tokens/s), large
/// enough that the first completion comes long before the last.
const PROMPTS: u64 = 12;

fn source(status: &Value) -> &Value {
    &status["sources"][0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigstopped_llama_server_resumes_after_sigcont_with_nothing_failed_or_lost() {
    if let Some(reason) = llama_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let project = Project::new();
    let server = LlamaServer::start(&project.path(""), 2)
        .await
        .expect("llama-server");
    let rows: String = (0..PROMPTS)
        .map(|i| format!("{{\"prompt\": \"Count from {i} to {}.\"}}\n", i + 5))
        .collect();
    project.write("data/a.jsonl", rows);
    project.config(
        &Config::new(&server.url())
            .generation("max-tokens = 12\nconcurrency = 2")
            .source("counting", "data/a.jsonl"),
    );
    let started = Instant::now();
    let mut child = project.start(&["run", "cfg.toml"]);
    let before = child
        .until_run_status(
            &project,
            "a first completion",
            Duration::from_secs(120),
            |s| source(s)["done"].as_u64().unwrap_or(0) >= 1,
        )
        .await;
    let done_at_stop = source(&before)["done"].as_u64().unwrap_or(0);
    assert!(done_at_stop < PROMPTS, "stopped mid-run: {before:#}");

    signal(server.pid(), "STOP");
    let stopped = Instant::now();
    // The deliberate freeze; `status.json` is sampled meanwhile, to see what gen made of it.
    let mut saw_down = false;
    let mut max_failed = 0;
    while stopped.elapsed() < STOP {
        if let Some(status) = project.status() {
            saw_down |= status["servers"][0]["down_since_unix_ms"].is_u64();
            max_failed = max_failed.max(source(&status)["failed"].as_u64().unwrap_or(0));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let frozen = project.status().expect("status.json");
    assert!(
        frozen["servers"][0]["in_flight"].as_u64().unwrap_or(0) > 0,
        "requests were in flight on the frozen server: {frozen:#}"
    );
    assert!(
        child.exited().is_none(),
        "gen must still be running while the server is stopped"
    );
    signal(server.pid(), "CONT");
    let resumed = Instant::now();

    let output = child.finish(Duration::from_secs(120)).await;
    let stderr = output.stderr;
    eprintln!(
        "SIGSTOP at {done_at_stop} done, {:?} after start; frozen {:?}: done {}, in flight {}, \
         server shown down: {saw_down}; finished {:?} after SIGCONT\n{stderr}",
        stopped - started,
        STOP,
        source(&frozen)["done"],
        frozen["servers"][0]["in_flight"],
        resumed.elapsed()
    );
    assert_eq!(output.code, Some(0), "{stderr}");
    assert_eq!(max_failed, 0, "no prompt failed during the stop");

    let status = project.status().expect("status.json");
    assert_eq!(status["finished"], true, "{status:#}");
    assert_eq!(source(&status)["phase"], "done", "{status:#}");
    assert_eq!(source(&status)["done"], PROMPTS, "{status:#}");
    assert_eq!(source(&status)["failed"], 0, "{status:#}");
    assert_eq!(source(&status)["rejected"], 0, "{status:#}");
    assert!(
        !project.source_path("counting", "rejected.jsonl").exists(),
        "nothing rejected"
    );
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, PROMPTS);
    let mut ids = completion_ids(&project.source_path("counting", "completions.jsonl.zst"));
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!((ids.len(), count), (PROMPTS as usize, PROMPTS as usize));
}
