//! End to end against a real llama-server with SmolLM2-135M: the quickstart as the README
//! runs it, and resume asserted from the server's own `/metrics` counters.
//!
//! These tests skip with a printed reason when llama-server is not installed, unless
//! `GEN_REQUIRE_LLAMA=1` (set by `scripts/test.sh`, so CI never skips them).

use crate::support;
use gen_tests::llama::{self, LlamaServer};
use std::time::Duration;

use support::{Config, Project, copy_examples, llama_project, llama_skip_reason};

#[tokio::test]
async fn quickstart_completes_every_prompt_and_reruns_as_a_no_op() {
    if let Some(reason) = llama_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let gen_ = Project::new();
    copy_examples(&gen_);
    let first = gen_.run(&["run", "examples/quickstart.toml"]).await;
    assert_eq!(first.code, Some(0), "stderr:\n{}", first.stderr);

    let status = gen_
        .run(&["status", "examples/quickstart.toml", "--json"])
        .await;
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("status json");
    let mut total = 0;
    for source in status["sources"].as_array().expect("sources") {
        let name = source["name"].as_str().expect("name");
        assert_eq!(source["phase"], "done", "{source}");
        let prepared = source["prepared"].as_u64().expect("prepared");
        assert!(prepared >= 18, "{name}: {prepared} prompts");
        let records = gen_.completions_of(name);
        assert_eq!(
            records.len() as u64,
            prepared,
            "{name}: one completion per prompt"
        );
        let ids: std::collections::HashSet<&str> = records
            .iter()
            .map(|r| r["id"].as_str().expect("id"))
            .collect();
        assert_eq!(ids.len(), records.len(), "{name}: no duplicate ids");
        for record in &records {
            assert!(
                !record["content"].as_str().unwrap_or("").trim().is_empty(),
                "{record}"
            );
            assert!(
                record["usage"]["completion_tokens"].as_u64().unwrap_or(0) > 0,
                "{record}"
            );
            assert!(record["finish_reason"].is_string(), "{record}");
        }
        total += records.len();
    }
    assert!(total >= 55, "{total}");

    // Second run: nothing left, so the server is not even started.
    let log_before = std::fs::metadata(gen_.run_path("server.log"))
        .expect("server log")
        .len();
    let second = gen_.run(&["run", "examples/quickstart.toml"]).await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert!(second.stderr.contains("nothing to do"), "{}", second.stderr);
    assert_eq!(
        std::fs::metadata(gen_.run_path("server.log"))
            .expect("log")
            .len(),
        log_before
    );

    let table = gen_.run(&["status", "examples/quickstart.toml"]).await;
    assert!(
        table.stdout.lines().all(|l| l.chars().count() <= 80),
        "{}",
        table.stdout
    );
    for name in ["tutor-chats", "arithmetic", "haiku"] {
        let row = table
            .stdout
            .lines()
            .find(|l| l.starts_with(name))
            .expect("row");
        assert!(row.contains(" done "), "{row}");
    }
}

#[tokio::test]
async fn resume_sends_no_request_according_to_the_server() {
    let Some((gen_, server)) = llama_project(2).await else {
        return;
    };
    let rows: String = (0..6)
        .map(|i| format!("{{\"prompt\": \"Name a colour. ({i})\"}}\n"))
        .collect();
    gen_.write("data/a.jsonl", &rows);
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 8\nconcurrency = 2")
            .source("colours", "data/a.jsonl"),
    );
    let first = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let predicted = server
        .metric("llamacpp:tokens_predicted_total")
        .await
        .expect("metric");
    let prompt_tokens = server
        .metric("llamacpp:prompt_tokens_total")
        .await
        .expect("metric");
    assert!(predicted > 0.0);

    let second = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert_eq!(
        server
            .metric("llamacpp:tokens_predicted_total")
            .await
            .expect("metric"),
        predicted
    );
    assert_eq!(
        server
            .metric("llamacpp:prompt_tokens_total")
            .await
            .expect("metric"),
        prompt_tokens
    );
    assert_eq!(gen_.completions_of("colours").len(), 6);
}

#[tokio::test]
async fn a_killed_server_pauses_the_run_and_a_restart_resumes_it_with_nothing_lost() {
    let Some((gen_, mut server)) = llama_project(2).await else {
        return;
    };
    let port = server.port;
    let rows: String = (0..16)
        .map(|i| format!("{{\"prompt\": \"Count from {i} to {}.\"}}\n", i + 5))
        .collect();
    gen_.write("data/a.jsonl", &rows);
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 24\nconcurrency = 2")
            .source("counting", "data/a.jsonl"),
    );
    let mut run = gen_.start(&["run", "cfg.toml"]);
    let done_count = |s: &serde_json::Value| s["sources"][0]["done"].as_u64().unwrap_or(0);
    run.until_run_status(&gen_, "3 answers", Duration::from_secs(120), |s| {
        done_count(s) >= 3
    })
    .await;

    server.kill().expect("kill -9 llama-server");
    let paused = run
        .until_run_status(
            &gen_,
            "the killed server shown down",
            Duration::from_secs(30),
            |s| s["servers"][0]["down_since_unix_ms"].is_u64(),
        )
        .await;
    assert_eq!(
        paused["sources"][0]["failed"], 0,
        "an outage fails no prompt: {paused:#}"
    );
    let table = gen_.run(&["status", "cfg.toml"]).await;
    assert!(table.stdout.contains("DOWN since"), "{}", table.stdout);

    let _restarted = LlamaServer::start_on(&gen_.path(""), 2, port)
        .await
        .expect("restart llama-server");
    let output = run.finish(Duration::from_secs(600)).await;
    let stderr = output.stderr;
    assert_eq!(output.code, Some(0), "{stderr}");
    assert!(stderr.contains("is back after"), "{stderr}");
    let records = gen_.completions_of("counting");
    let ids: std::collections::HashSet<&str> = records
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    assert_eq!(records.len(), 16, "every prompt completed");
    assert_eq!(ids.len(), 16, "exactly once");
    assert!(!gen_.source_path("counting", "rejected.jsonl").exists());
}

#[tokio::test]
async fn auto_concurrency_settles_within_the_servers_slots() {
    let Some((gen_, server)) = llama_project(4).await else {
        return;
    };
    let rows: String = (0..12)
        .map(|i| format!("{{\"prompt\": \"Say hello {i}.\"}}\n"))
        .collect();
    gen_.write("data/a.jsonl", &rows);
    // No `concurrency`: auto is the default.
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 12")
            .source("hello", "data/a.jsonl"),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("concurrency auto: starting at 6")
            && out.stderr.contains("read from llama.cpp: /props")
            && out.stderr.contains("4 running at most"),
        "{}",
        out.stderr
    );
    let status: serde_json::Value =
        serde_json::from_str(&gen_.read_run("status.json")).expect("status");
    let limit = status["servers"][0]["concurrency"].as_u64().expect("limit");
    let ceiling = status["servers"][0]["ceiling"].as_u64().expect("ceiling");
    // The ceiling is the 4 slots plus a queue headroom of 2 (a finished slot is refilled at once).
    assert!(ceiling <= 6, "{status:#}");
    // Never under the slots: llama.cpp's per-slot context is no shared KV pool to plan against.
    assert!((4..=ceiling).contains(&limit), "{status:#}");
    let saved: serde_json::Value =
        serde_json::from_str(&gen_.read_run("controller.json")).expect("controller.json");
    assert!(
        saved["stats"].is_object(),
        "length statistics persisted: {saved}"
    );
    assert_eq!(gen_.completions_of("hello").len(), 12);
}

#[tokio::test]
async fn a_launched_server_that_dies_mid_run_is_restarted_and_the_run_completes() {
    if let Some(reason) = llama_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let (bin, model) = llama::installed().expect("installed");
    let gen_ = Project::new();
    support::llama_fruit_project(&gen_, &bin, &model, 10, "max-tokens = 16\nconcurrency = 2");
    let mut run = gen_.start(&["run", "cfg.toml"]);
    let gen_pid = run.pid();
    run.until_run_status(&gen_, "2 answers", Duration::from_secs(120), |s| {
        s["sources"][0]["done"].as_u64().unwrap_or(0) >= 2
    })
    .await;
    let servers = support::children_of(gen_pid);
    assert_eq!(servers.len(), 1, "one llama-server child: {servers:?}");
    // kill -9 the server gen launched (our own process tree).
    support::signal(servers[0], "KILL");
    let output = run.finish(Duration::from_secs(600)).await;
    let stderr = output.stderr;
    assert_eq!(output.code, Some(0), "{stderr}");
    assert!(
        stderr.contains("restarting the inference server (1 of 3)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the inference server is back (restart 1)"),
        "{stderr}"
    );
    let records = gen_.completions_of("fruit");
    let ids: std::collections::HashSet<&str> = records
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    assert_eq!((records.len(), ids.len()), (10, 10));
}

/// Issue 26 against the real server: each source's budget and sampling keys (a weighted
/// `temperature`, `top-k`, `min-p`) are accepted and honoured, and `samples = 3` stores three
/// answers per prompt, seeds `seed`, `seed + 1`, `seed + 2`.
#[tokio::test]
async fn per_source_settings_and_samples_are_honoured_by_llama_server() {
    let Some((gen_, server)) = llama_project(2).await else {
        return;
    };
    let rows = |topic: &str| -> String {
        (0..3)
            .map(|i| format!("{{\"prompt\": \"Write a long story about {topic} number {i}.\"}}\n"))
            .collect()
    };
    gen_.write("data/chat.jsonl", rows("a cat"));
    gen_.write("data/math.jsonl", rows("a triangle"));
    let math = "[source.generation]
max-tokens = 12
samples = 3
temperature = [{ value = 0.6, weight = 3 }, { value = 1.0, weight = 1 }]
top-k = 20
min-p = 0.05";
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 6\nconcurrency = 2\nseed = 7")
            .source("chat", "data/chat.jsonl")
            .source_with("math", "data/math.jsonl", math),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let budget_kept = |record: &serde_json::Value, budget: u64| {
        let tokens = record["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        tokens > 0 && tokens <= budget && (record["finish_reason"] != "length" || tokens == budget)
    };
    let chat = gen_.completions_of("chat");
    assert_eq!(chat.len(), 3);
    for record in &chat {
        assert!(budget_kept(record, 6), "{record}");
        assert_eq!(record["settings"]["seed"], 7, "{record}");
    }
    let math = gen_.completions_of("math");
    assert_eq!(math.len(), 9);
    let mut seeds = std::collections::BTreeMap::<String, Vec<i64>>::new();
    for record in &math {
        assert!(budget_kept(record, 12), "{record}");
        assert_eq!(record["settings"]["top_k"], 20, "{record}");
        let prompt = record["messages"][0]["content"].as_str().unwrap_or("");
        let seed = record["settings"]["seed"].as_i64().unwrap_or(-1);
        seeds.entry(prompt.to_owned()).or_default().push(seed);
    }
    for seeds in seeds.values_mut() {
        seeds.sort_unstable();
        assert_eq!(seeds, &[7, 8, 9]);
    }
    assert!(
        math.iter()
            .any(|r| r["usage"]["completion_tokens"].as_u64() > Some(6)),
        "the source's budget, not `[generation]`'s: {math:?}"
    );
    let (code, audit) = gen_.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(audit["totals"]["completed"], 12, "{audit:#}");
}

/// The README's "Your first project" as a newcomer types it: its prompts file and its config
/// (`url` on port 30000, `launch` with `{port}`: the shape that once polled the wrong port),
/// taken from README.md itself so the two cannot drift, then `gen check`, `gen run`, `gen
/// status` and the export it shows.
#[tokio::test]
async fn the_readmes_first_project_runs_as_written() {
    if let Some(reason) = llama_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"));
    let section = readme
        .split("\n## Your first project\n")
        .nth(1)
        .expect("README has a `Your first project` section");
    let block = |lang: &str| -> String {
        let start = section
            .find(&format!("```{lang}\n"))
            .unwrap_or_else(|| panic!("no ```{lang} block in the section"))
            + lang.len()
            + 4;
        let end = section[start..].find("```").expect("closed block");
        section[start..start + end].to_owned()
    };
    let gen_ = Project::new();
    gen_.write("prompts.jsonl", block("jsonl"));
    gen_.write("first.toml", block("toml"));
    gen_.use_config("first.toml");
    for command in ["check", "run", "status"] {
        let out = gen_.run(&[command, "first.toml"]).await;
        assert_eq!(
            out.code,
            Some(0),
            "gen {command}:\n{}{}",
            out.stdout,
            out.stderr
        );
    }
    let records = gen_.completions_of("mine");
    let mut keys: Vec<&str> = records
        .iter()
        .map(|r| r["source_key"].as_str().expect("source_key"))
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["q1", "q2", "q3"]);
    let export = gen_
        .run(&["export", "first.toml", "--schema", "specforge", "-o", "out"])
        .await;
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    // The small model now and then talks past the README's 256 tokens: such an answer is cut,
    // and the export leaves it out and says so (`--keep-cut` keeps it).
    let cut = records
        .iter()
        .filter(|r| r["finish_reason"] == "length")
        .count();
    assert_eq!(
        gen_.read("out/data/train.jsonl").lines().count(),
        3 - cut,
        "{}",
        export.stdout
    );
    if cut > 0 {
        assert!(
            export.stdout.contains(&format!("left out {cut}: cut")),
            "{}",
            export.stdout
        );
    }
}

/// `token-ids = true` against the real llama-server, met as an external server: it streams
/// answers without token ids whatever the request asks (`return_token_ids`, `return_tokens`:
/// checked on this build), so `gen run` refuses at the start, before any prompt, saying why
/// and what to do.
#[tokio::test]
async fn token_ids_are_refused_by_a_real_llama_server_before_any_prompt() {
    let Some((gen_, server)) = llama_project(2).await else {
        return;
    };
    gen_.write("data/a.jsonl", "{\"prompt\": \"Name a fruit.\"}\n");
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 8\ntoken-ids = true")
            .source("fruit", "data/a.jsonl"),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("source `fruit`")
            && out
                .stderr
                .contains("carried neither `prompt_token_ids` nor `token_ids`")
            && out.stderr.contains("llama.cpp has no such option")
            && out
                .stderr
                .contains("serve the model with vLLM or a recent SGLang, or remove `token-ids`"),
        "{}",
        out.stderr
    );
    // Nothing generated: no completions file, or an empty one.
    let stored = gen_.source_path("fruit", "completions.jsonl.zst");
    assert!(
        std::fs::metadata(&stored).map_or(true, |m| m.len() == 0),
        "{}",
        stored.display()
    );
}
