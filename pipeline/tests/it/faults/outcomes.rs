//! Honest outcomes: `gen run` never reports success for work that is lost, empty or refused,
//! never blames a prompt for the server's or the config's fault, and `gen verify` says the same.
//!
//! - a damaged frame early in `completions.jsonl.zst`: the intact frames after it are kept,
//!   the damaged bytes set aside in a named file, only the lost prompts generated again;
//! - stored records that are not answers (an older `gen` kept aborted and empty answers): not
//!   done, set aside, generated again; aborted or empty answers as they arrive: retried, then
//!   recorded as failures with the reason;
//! - a cut or malformed stream while `/health` answers: recorded as such;
//! - an engine that fails every request while `/health` is 200: an outage, no attempt spent;
//! - a refusal every request gets (the settings' fault): the run stops, prompts pending; a
//!   prompt's own refusal: recorded, exit 1, sent again by `--retry-rejected` or new settings.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use serde_json::Value;

use super::{alpha_project, assert_complete, files_starting, finished_run, rows};
use crate::support::{Config, Project, completion_ids};

fn completions_path(project: &Project) -> PathBuf {
    project.source_path("alpha", "completions.jsonl.zst")
}

/// Every record of a completions file's whole data frames, in order (entries skipped).
fn records(path: &Path) -> Vec<Value> {
    let bytes = std::fs::read(path).expect("read");
    let text = zstd::stream::decode_all(&bytes[..]).expect("decodes");
    String::from_utf8(text)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

fn rejected(project: &Project) -> Vec<Value> {
    project.rejected_of("alpha")
}

/// `cfg.toml` of one source `alpha` against `server`.
fn config(server: &FakeOpenAi, max_tokens: u32, concurrency: u32) -> Config {
    Config::new(&server.url())
        .generation(&format!(
            "max-tokens = {max_tokens}\nconcurrency = {concurrency}"
        ))
        .source("alpha", "data/alpha.jsonl")
}

fn events(project: &Project) -> String {
    std::fs::read_to_string(project.run_path("events.jsonl")).unwrap_or_default()
}

/// One flipped region inside the first frame of a finished run's completions: `gen verify`
/// calls it damage and counts the frames after it; `gen run` keeps them, moves the damaged
/// bytes to a named file, says so on stderr, in `status.json` and `events.jsonl`, and asks
/// the server for exactly the prompts of the damaged frame. (Before: everything from the
/// damage on was cut as a "torn tail" and generated again, silently.)
#[tokio::test]
async fn a_damaged_frame_early_in_the_file_costs_only_its_own_records() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = finished_run(&server, 200).await;
    let path = completions_path(&project);
    let mut bytes = std::fs::read(&path).expect("read");
    let first = zstd::zstd_safe::find_frame_compressed_size(&bytes).expect("first frame");
    let entry = zstd::zstd_safe::find_frame_compressed_size(&bytes[first..]).expect("its entry");
    let lost = String::from_utf8(zstd::stream::decode_all(&bytes[..first]).expect("decodes"))
        .expect("utf-8")
        .lines()
        .count();
    assert!(
        first + entry < bytes.len() && lost < 200,
        "expected several frames"
    );
    for b in &mut bytes[first / 2..first / 2 + 8] {
        *b ^= 0xff;
    }
    std::fs::write(&path, &bytes).expect("write");
    let damaged = bytes[..first + entry].to_vec();

    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(1), "{audit:#}");
    let source = &audit["sources"][0];
    assert_eq!(source["completed"], 200 - lost as u64, "{audit:#}");
    assert_eq!(source["lost"], lost as u64, "{audit:#}");
    let problem = source["problems"][0].as_str().unwrap_or_default();
    assert!(
        problem.starts_with(&format!(
            "`completions.jsonl.zst` is damaged: {} bytes (at 0..{}) do not decode",
            first + entry,
            first + entry
        )) && problem.contains(&format!("keeps the {} completions", 200 - lost)),
        "{problem}"
    );

    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "gen: WARNING: `alpha`: `completions.jsonl.zst` was damaged: {} bytes (at 0..{}) did not decode; moved them to `completions.damaged-",
            first + entry,
            first + entry
        )),
        "{}",
        out.stderr
    );
    assert_eq!(
        server.chat_requests(),
        200 + lost,
        "only the lost prompts are asked again"
    );
    let aside = files_starting(&project, "alpha", "completions.damaged-");
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read(&aside[0]).expect("read"), damaged);
    let status = project.status().expect("status");
    let warning = status["sources"][0]["warnings"][0]
        .as_str()
        .unwrap_or_default();
    assert!(warning.contains("was damaged"), "{status:#}");
    assert!(events(&project).contains("\"event\":\"completions_repaired\""));
    let mut ids = completion_ids(&path);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 200);

    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, 200);
    let notes = audit["sources"][0]["notes"].to_string();
    assert!(
        notes.contains("damaged bytes of the completions, set aside by `gen run`"),
        "{notes}"
    );
}

/// An older `gen` stored aborted and empty answers as completions. `gen verify` flags them and
/// does not count them as done, `gen export` leaves them out, and the next `gen run` moves them
/// to a named file and generates those prompts again. (Before: counted done, verified clean,
/// exported as training rows.)
#[tokio::test]
async fn stored_records_that_are_not_answers_are_not_done_and_are_generated_again() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = finished_run(&server, 10).await;
    let path = completions_path(&project);
    let mut stored = records(&path);
    // What an older `gen` kept: an aborted answer, and a stream with nothing in it.
    stored[2]["finish_reason"] = "abort".into();
    stored[2]["content"] = "echo: ".into();
    stored[5]["content"] = "".into();
    stored[5]["reasoning_content"] = Value::Null;
    stored[5]["finish_reason"] = Value::Null;
    stored[5]["usage"] = Value::Null;
    let text: String = stored.iter().map(|r| format!("{r}\n")).collect();
    // One plain frame, as files were written before the id index.
    std::fs::write(
        &path,
        zstd::stream::encode_all(text.as_bytes(), 3).expect("encode"),
    )
    .expect("write");

    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(1), "{audit:#}");
    let source = &audit["sources"][0];
    assert_eq!(
        (
            &source["completed"],
            &source["not_answers"],
            &source["lost"]
        ),
        (&Value::from(8), &Value::from(2), &Value::from(2)),
        "{audit:#}"
    );
    let problems = source["problems"].to_string();
    assert!(
        problems.contains("2 stored completions are not answers (e.g. `")
            && problems.contains("the server aborted the answer (finish_reason = abort)"),
        "{problems}"
    );
    let export = project
        .run(&[
            "export",
            &project.run_dir(),
            "-o",
            "out",
            "--allow-incomplete",
        ])
        .await;
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    assert!(
        export.stdout.starts_with("exported 8 rows")
            && export
                .stdout
                .contains("skipped 2: stored records that are not answers"),
        "{}",
        export.stdout
    );

    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("gen: WARNING: `alpha`: 2 stored completions were not answers"),
        "{}",
        out.stderr
    );
    assert_eq!(server.chat_requests(), 12);
    let aside = files_starting(&project, "alpha", "completions.not-answers-");
    assert_eq!(aside.len(), 1, "{aside:?}");
    let moved: Vec<Value> = std::fs::read_to_string(&aside[0])
        .expect("read")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(moved, [stored[2].clone(), stored[5].clone()]);
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, 10);
    assert!(
        records(&path)
            .iter()
            .all(|r| r["finish_reason"] == "stop" && r["content"] != ""),
        "only answers are stored"
    );
}

/// Aborted answers (`finish_reason: "abort"` then `[DONE]`, as vLLM sends) and empty streams
/// are failed attempts: retried, never stored; a prompt that keeps getting one is recorded as
/// a failure with that reason. (Before: stored as completions.)
#[tokio::test]
async fn aborted_and_empty_answers_are_retried_and_never_stored() {
    let server = FakeOpenAi::start(Knobs {
        abort_first: 1,
        empty_first: 1,
        ..Knobs::default()
    })
    .await;
    let mut data = rows("alpha", 6);
    data.push_str("{\"prompt\": \"ABORT every time\"}\n{\"prompt\": \"EMPTY every time\"}\n");
    let project = alpha_project(&server.url(), data);
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let stored = records(&completions_path(&project));
    assert_eq!(stored.len(), 6, "{stored:#?}");
    assert!(
        stored.iter().all(|r| r["finish_reason"] == "stop"
            && r["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("echo: alpha"))),
        "{stored:#?}"
    );
    let failures = rejected(&project);
    let reasons: Vec<&str> = failures
        .iter()
        .map(|r| {
            assert_eq!(r["kind"], "exhausted", "{r}");
            r["reason"].as_str().unwrap_or_default()
        })
        .collect();
    assert_eq!(reasons.len(), 2, "{failures:#?}");
    assert!(
        reasons.iter().any(|r| r.starts_with(
            "the server aborted the answer (finish_reason = abort) (4 attempts; the server answered other requests meanwhile)"
        )),
        "{reasons:#?}"
    );
    assert!(
        reasons.iter().any(|r| r.starts_with(
            "empty answer: the stream ended without content, reasoning or finish_reason (4 attempts;"
        )),
        "{reasons:#?}"
    );
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(audit["totals"]["pending"], 2, "{audit:#}");
    assert_eq!(audit["totals"]["completed"], 6, "{audit:#}");
}

/// A stream cut mid-answer or with an unreadable chunk, while `/health` answers, is recorded
/// as what it was, not as "the server went down 4 times".
#[tokio::test]
async fn a_cut_or_malformed_stream_is_recorded_as_such() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let mut data = rows("alpha", 4);
    data.push_str("{\"prompt\": \"CUT every time\"}\n{\"prompt\": \"MALFORMED every time\"}\n");
    let project = alpha_project(&server.url(), data);
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let mut reasons: Vec<String> = rejected(&project)
        .iter()
        .map(|r| r["reason"].as_str().unwrap_or_default().to_owned())
        .collect();
    reasons.sort();
    assert_eq!(reasons.len(), 2, "{reasons:#?}");
    assert!(
        reasons[0].starts_with(
            "stream ended without [DONE], while the server answered /health (4 attempts; the server answered other requests meanwhile)"
        ),
        "{reasons:#?}"
    );
    assert!(
        reasons[1].starts_with("unreadable stream chunk: ") && reasons[1].contains("(4 attempts;"),
        "{reasons:#?}"
    );
    assert!(
        reasons.iter().all(|r| !r.contains("went down")),
        "{reasons:#?}"
    );
    assert!(!out.stderr.contains("is down"), "{}", out.stderr);
}

/// An engine that answers HTTP 500 to every request while `/health` says 200 is an outage:
/// `gen run` pauses, says why (status and events), spends no prompt's attempts, and resumes
/// when a small real request is answered again — with many requests in flight, and with one
/// at a time. (Before: every prompt exhausted its 4 attempts in seconds, exit 1.)
#[tokio::test]
async fn an_engine_failing_every_request_while_health_is_up_is_an_outage_not_failed_prompts() {
    const ENGINE_DEAD: &str =
        "EngineCore encountered an issue. See stack trace (above) for the root cause.";
    for concurrency in [4, 1] {
        let server = FakeOpenAi::start(Knobs::default()).await;
        server.set_failing(Some((500, ENGINE_DEAD)));
        let project = Project::new();
        project.write("data/alpha.jsonl", rows("alpha", 12));
        project.config(&config(&server, 16, concurrency));
        let mut child = project.start(&["run", "cfg.toml"]);
        let status = child
            .until_run_status(
                &project,
                "the failing server marked down",
                Duration::from_secs(60),
                |s| s["servers"][0]["down_since_unix_ms"].is_u64(),
            )
            .await;
        let why = status["servers"][0]["down_reason"]
            .as_str()
            .unwrap_or_default();
        assert!(
            why.contains(&format!("HTTP 500: {ENGINE_DEAD}"))
                && why.contains("its /health answers, but requests fail"),
            "concurrency {concurrency}: {status:#}"
        );
        assert_eq!(status["sources"][0]["failed"], 0, "{status:#}");
        assert!(rejected(&project).is_empty(), "no prompt was blamed");
        server.set_failing(None);
        let exit = child.finish(Duration::from_secs(300)).await;
        assert_eq!(exit.code, Some(0), "concurrency {concurrency}");
        let stored = records(&completions_path(&project));
        assert_eq!(stored.len(), 12);
        assert!(
            stored.iter().all(|r| r["attempts"] == 1),
            "concurrency {concurrency}: the outage cost no attempt: {:?}",
            stored.iter().map(|r| &r["attempts"]).collect::<Vec<_>>()
        );
        assert!(rejected(&project).is_empty());
        let events = events(&project);
        assert!(
            events.contains("\"event\":\"server_down\"") && events.contains("requests fail"),
            "{events}"
        );
        let (code, audit) = project.verify().await;
        assert_eq!(code, Some(0), "{audit:#}");
        assert_complete(&audit, 12);
    }
}

/// `max-tokens` beyond the model's context: the server refuses every request the same way,
/// even a one-line test prompt. That is the config's fault: the run stops at once with the
/// server's reason and what to change (exit 1), nothing is recorded against the prompts, and
/// the run with the setting fixed completes without `--allow-config-change` (nothing was
/// generated under the old one). (Before: every prompt "rejected", exit 0.)
#[tokio::test]
async fn a_refusal_every_request_gets_stops_the_run_with_the_prompts_pending() {
    let server = FakeOpenAi::start(Knobs {
        context_length: Some(100),
        ..Knobs::default()
    })
    .await;
    let project = Project::new();
    project.write("data/alpha.jsonl", rows("alpha", 10));
    project.config(&config(&server, 200, 4));
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "the server refuses every request, even a one-line test prompt with the run's settings: HTTP 400: This model's maximum context length is 100 tokens."
        ) && out
            .stderr
            .contains("lower `max-tokens` in `[generation]` (now 200)"),
        "{}",
        out.stderr
    );
    assert!(rejected(&project).is_empty(), "no prompt was blamed");
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(audit["totals"]["pending"], 10, "{audit:#}");
    let status = project.status().expect("status");
    assert!(
        status["stopped_by"]
            .as_str()
            .is_some_and(|s| s.contains("refuses every request")),
        "{status:#}"
    );

    project.config(&config(&server, 16, 4));
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, 10);
}

/// Prompts too long for the context with the configured budget, while others are answered:
/// their own refusals, recorded in `rejected.jsonl` with the reason, and the run exits 1 (as
/// the README says) — also when a rerun has nothing else to do. `--retry-rejected` sends
/// exactly them again; a smaller `max-tokens` sends them again by itself, and they are
/// answered. (Before: exit 0, and nothing ever sent them again.)
#[tokio::test]
async fn a_prompts_own_refusal_is_recorded_exits_1_and_is_sent_again_on_request() {
    let server = FakeOpenAi::start(Knobs {
        context_length: Some(60),
        ..Knobs::default()
    })
    .await;
    let project = Project::new();
    let long = |n: usize| {
        format!(
            "{{\"prompt\": \"long {n}: {}\"}}\n",
            (0..28)
                .map(|w| format!("w{w}"))
                .collect::<Vec<_>>()
                .join(" ")
        )
    };
    let mut data = rows("alpha", 6);
    data.push_str(&long(1));
    data.push_str(&long(2));
    project.write("data/alpha.jsonl", data);
    project.config(&config(&server, 40, 4));
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("gen: 2 prompt(s) refused by the server (alpha 2)")
            && out
                .stderr
                .contains("`gen run --retry-rejected` sends them again"),
        "{}",
        out.stderr
    );
    let refusals = rejected(&project);
    assert_eq!(refusals.len(), 2, "{refusals:#?}");
    assert!(
        refusals.iter().all(|r| r["kind"] == "rejected"
            && r["settings"].is_string()
            && r["reason"]
                .as_str()
                .is_some_and(|m| m
                    .starts_with("HTTP 400: This model's maximum context length is 60 tokens."))),
        "{refusals:#?}"
    );
    assert_eq!(records(&completions_path(&project)).len(), 6);

    let sent = server.chat_requests();
    let again = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(again.code, Some(1), "{}", again.stderr);
    assert!(again.stderr.contains("nothing to send"), "{}", again.stderr);
    assert_eq!(server.chat_requests(), sent, "a plain rerun sends nothing");

    let retried = project.run(&["run", "cfg.toml", "--retry-rejected"]).await;
    assert_eq!(retried.code, Some(1), "{}", retried.stderr);
    // The two refused prompts, and once per run the one-line test prompt that tells the
    // prompts' fault from the settings'.
    let mut resent: Vec<String> = server.received()[sent..]
        .iter()
        .map(|r| r.prompt.clone())
        .collect();
    resent.sort();
    assert_eq!(resent.len(), 3, "{resent:?}");
    assert!(
        resent[0] == "Reply with the single word OK."
            && resent[1..].iter().all(|p| p.starts_with("long ")),
        "{resent:?}"
    );

    project.config(&config(&server, 16, 4));
    let fixed = project
        .run(&["run", "cfg.toml", "--allow-config-change"])
        .await;
    assert_eq!(fixed.code, Some(0), "{}", fixed.stderr);
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, 8);
}
