//! What a stream says beyond its text: a stream that stays busy without a token is a stall,
//! not progress; the model its chunks name is the model that wrote the answer.

use std::time::Duration;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use serde_json::Value;

use crate::faults::{alpha_project, config, rows};
use crate::support::{Project, read_json};

/// The kinds of the run's `events.jsonl` entries.
fn event_kinds(project: &Project) -> Vec<String> {
    std::fs::read_to_string(project.run_path("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e["event"].as_str().map(str::to_owned))
        .collect()
}

/// A server that keeps a stream busy with chunks that carry no token (an empty delta every
/// 100 ms, no reasoning, no finish) and never ends it: the stream is abandoned after twice
/// `stall-secs` without a token and retried like a stall. Two streams stall once and are
/// answered on their retry; one prompt stalls every time and is set aside after its attempts,
/// while the server answers the others. Before, the 100 ms chunks kept the per-chunk idle
/// limit from ever firing: the run never ended.
#[tokio::test]
async fn a_stream_that_sends_chunks_without_tokens_is_abandoned_and_retried() {
    let server = FakeOpenAi::start(Knobs {
        stall_first: 2,
        ..Knobs::default()
    })
    .await;
    let mut data = rows("alpha", 6);
    data.push_str("{\"prompt\": \"STALL every time\"}\n");
    let project = Project::new();
    project.write("data/alpha.jsonl", data);
    project.config(
        &config(&server.url())
            .server("stall-secs = 1")
            .source("alpha", "data/alpha.jsonl"),
    );
    let out = project
        .start(&["run", "cfg.toml"])
        .finish(Duration::from_secs(120))
        .await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let stored = project.completions_of("alpha");
    assert_eq!(stored.len(), 6, "{stored:#?}");
    assert!(
        stored.iter().all(|r| r["finish_reason"] == "stop"),
        "{stored:#?}"
    );
    let retried = stored.iter().filter(|r| r["attempts"] == 2).count();
    assert_eq!(
        retried, 2,
        "the two stalled streams were asked again: {stored:#?}"
    );
    let failures = project.rejected_of("alpha");
    assert_eq!(failures.len(), 1, "{failures:#?}");
    let reason = failures[0]["reason"].as_str().unwrap_or_default();
    assert_eq!(failures[0]["kind"], "exhausted", "{failures:#?}");
    assert!(
        reason.starts_with("no token for 2 s (")
            && reason.contains(
                " chunks without one) (4 attempts; the server answered other requests meanwhile)"
            ),
        "{reason}"
    );
    // A stall while `/health` answers is the stream's, not an outage.
    assert!(!out.stderr.contains("is down"), "{}", out.stderr);
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(audit["totals"]["completed"], 6, "{audit:#}");
}

/// A gateway that answers under another name than `/v1/models` lists (LiteLLM names the
/// deployment that answered, BerriAI/litellm#22709): said once, loudly, recorded in
/// `events.jsonl` and `status.json`, and every answer stored under the model its chunks name.
/// Before: stored as `fake-model`, nothing said.
#[tokio::test]
async fn answers_under_another_model_name_are_stored_as_such_and_said_once() {
    let server = FakeOpenAi::start(Knobs {
        answer_model: Some("Qwen/Qwen3-8B-AWQ".into()),
        ..Knobs::default()
    })
    .await;
    let project = alpha_project(&server.url(), rows("alpha", 6));
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let warning = format!(
        "gen: WARNING: server {} answers as model `Qwen/Qwen3-8B-AWQ`, not `fake-model`",
        server.url()
    );
    assert_eq!(out.stderr.matches(&warning).count(), 1, "{}", out.stderr);
    let stored = project.completions_of("alpha");
    assert_eq!(stored.len(), 6);
    assert!(
        stored.iter().all(|r| r["model"] == "Qwen/Qwen3-8B-AWQ"),
        "{stored:#?}"
    );
    let status = read_json(&project.run_path("status.json")).expect("status.json");
    assert_eq!(
        status["servers"][0]["answered_by"], "Qwen/Qwen3-8B-AWQ",
        "{status:#}"
    );
    let kinds = event_kinds(&project);
    assert_eq!(
        kinds.iter().filter(|k| *k == "model_mismatch").count(),
        1,
        "{kinds:?}"
    );
    let shown = project.run(&["status", "cfg.toml"]).await;
    assert!(
        shown
            .stdout
            .contains("its answers name model `Qwen/Qwen3-8B-AWQ`"),
        "{}",
        shown.stdout
    );
}

/// A router that switches models mid-run: the first answer that names another model than the
/// run's answers so far stops the run (exit 1, said and in `stopped_by`); that answer is not
/// stored, the rest stay pending, and the stored answers all name the first model. Before:
/// every answer stored as `fake-model`, exit 0.
#[tokio::test]
async fn a_model_that_changes_mid_run_stops_the_run_with_the_rest_pending() {
    let server = FakeOpenAi::start(Knobs {
        answer_model: Some("tiny-fallback".into()),
        answer_model_from: 3,
        ..Knobs::default()
    })
    .await;
    let project = Project::new();
    project.write("data/alpha.jsonl", rows("alpha", 10));
    project.config(
        &crate::support::Config::new(&server.url())
            .generation("max-tokens = 16\nconcurrency = 1")
            .source("alpha", "data/alpha.jsonl"),
    );
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let said = format!(
        "server {} answered as model `tiny-fallback`, but this run's answers so far are by `fake-model`",
        server.url()
    );
    assert!(out.stderr.contains(&said), "{}", out.stderr);
    let stored = project.completions_of("alpha");
    assert_eq!(stored.len(), 3, "{stored:#?}");
    assert!(
        stored.iter().all(|r| r["model"] == "fake-model"),
        "{stored:#?}"
    );
    let status = read_json(&project.run_path("status.json")).expect("status.json");
    assert!(
        status["stopped_by"]
            .as_str()
            .is_some_and(|s| s.contains("changed mid-run")),
        "{status:#}"
    );
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(audit["totals"]["pending"], 7, "{audit:#}");
    assert_eq!(audit["totals"]["completed"], 3, "{audit:#}");
}
