//! `gen run` end to end against the fake OpenAI server: resume, retries, rejections, failing
//! sources, an unreachable or dying server, and config errors. The real llama-server scenarios
//! are in `llama.rs`.

use crate::support;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use std::time::Duration;

use support::{Config, Project, Running, completions, wait_for};

const ROWS: &str = r#"{"prompt": "one"}
{"prompt": "two"}
{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "three"}]}
{"conversations": [{"from": "gpt", "value": "lead"}, {"from": "human", "value": "four"}]}
{"prompt": "two"}
not json
"#;

#[tokio::test]
async fn completes_every_prompt_once_and_a_second_run_sends_nothing() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", ROWS);
    gen_.write(
        "data/b.jsonl",
        "{\"prompt\": \"five\"}\n{\"prompt\": \"six\"}\n",
    );
    let config = gen_.config(
        &Config::new(&server.url())
            .source("alpha", "data/a.jsonl")
            .source("beta", "data/b.jsonl"),
    );

    let first = gen_.run(&["run", &config]).await;
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let alpha = gen_.completions_of("alpha");
    // Stored in completion order; each prompt exactly once.
    let mut contents: Vec<&str> = alpha
        .iter()
        .map(|r| r["content"].as_str().unwrap_or(""))
        .collect();
    contents.sort_unstable();
    assert_eq!(
        contents,
        ["echo: four", "echo: one", "echo: three", "echo: two"]
    );
    let three = alpha
        .iter()
        .find(|r| r["content"] == "echo: three")
        .expect("three");
    assert!(
        alpha
            .iter()
            .all(|r| r["reasoning_content"] == "thinking" && r["finish_reason"] == "stop")
    );
    assert!(
        alpha
            .iter()
            .all(|r| r["usage"]["completion_tokens"].as_u64() == Some(2))
    );
    assert_eq!(three["messages"][0]["role"], "system");
    assert_eq!(gen_.completions_of("beta").len(), 2);
    assert_eq!(server.chat_requests(), 6);
    let events: Vec<serde_json::Value> = gen_
        .read_run("events.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("event line"))
        .collect();
    let alpha: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "source_phase" && e["source"] == "alpha")
        .map(|e| e["detail"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(alpha.first(), Some(&"pending"), "{alpha:?}");
    assert_eq!(alpha.last(), Some(&"done"), "{alpha:?}");
    assert!(alpha.contains(&"generating"), "{alpha:?}");
    assert_eq!(
        events.first().map(|e| e["event"].clone()),
        Some("run_started".into())
    );
    assert_eq!(
        events.last().map(|e| e["detail"].clone()),
        Some("finished".into())
    );

    let second = gen_.run(&["run", &config]).await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert!(second.stderr.contains("nothing to do"), "{}", second.stderr);
    assert_eq!(
        server.chat_requests(),
        6,
        "the second run must not send a request"
    );

    let status = gen_.run(&["status", &config]).await;
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let rows: Vec<&str> = status
        .stdout
        .lines()
        .filter(|l| l.starts_with("alpha") || l.starts_with("beta"))
        .collect();
    assert_eq!(
        rows,
        [
            "alpha          done              4       4     0     0      -      -     -",
            "beta           done              2       2     0     0      -      -     -"
        ]
    );
    assert!(status.stdout.lines().all(|l| l.chars().count() <= 80));
}

#[tokio::test]
async fn server_errors_are_retried_and_a_loading_server_is_waited_for() {
    for (status, attempts) in [(500, 4), (503, 1)] {
        let knobs = Knobs {
            fail_first: 3,
            fail_status: Some(status),
            ..Knobs::default()
        };
        let server = FakeOpenAi::start(knobs).await;
        let gen_ = Project::new();
        gen_.write("data/a.jsonl", "{\"prompt\": \"one\"}\n");
        let config = gen_.config(&Config::new(&server.url()).source("alpha", "data/a.jsonl"));
        let out = gen_.run(&["run", &config]).await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let records = gen_.completions_of("alpha");
        assert_eq!(records.len(), 1);
        // A 500 costs an attempt; a 503 (loading) is an outage: waited out, costing none.
        assert_eq!(records[0]["attempts"], attempts, "HTTP {status}");
        assert_eq!(server.chat_requests(), 4);
    }
}

#[tokio::test]
async fn rejected_prompts_fail_their_source_only_and_a_broken_source_does_not_stop_others() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"fine\"}\n{\"prompt\": \"REJECT me\"}\n",
    );
    gen_.write("data/b.jsonl", "{\"prompt\": \"ok\"}\n");
    // There, but not Parquet: found by the preflight, broken only when read.
    gen_.write("data/g.parquet", "not parquet at all");
    let config = gen_.config(
        &Config::new(&server.url())
            .source("alpha", "data/a.jsonl")
            .source("beta", "data/b.jsonl")
            .source("gamma", "data/g.parquet"),
    );
    let out = gen_.run(&["run", &config]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("1 source(s) not finished: gamma"),
        "{}",
        out.stderr
    );
    let rejected = gen_.read_run("sources/alpha/rejected.jsonl");
    assert!(
        rejected.contains("\"kind\":\"rejected\"")
            && rejected.contains("HTTP 400: prompt too long"),
        "{rejected}"
    );
    assert_eq!(gen_.completions_of("beta").len(), 1);
    let status = gen_.run(&["status", &config, "--json"]).await;
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("status json");
    let phases: Vec<&str> = status["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| s["phase"].as_str().unwrap_or(""))
        .collect();
    // A prompt the server refuses (400) is settled with its reason: its source is done.
    assert_eq!(phases, ["done", "done", "failed"]);
    assert_eq!(status["sources"][0]["rejected"], 1);
    assert_eq!(status["sources"][0]["done"], 1);
    assert_eq!(
        status["sources"][2]["verdict"]["class"], "traceback",
        "{status:#}"
    );
    let worker = gen_.read_run("sources/gamma/worker.json");
    assert!(worker.contains("Corrupt footer"), "{worker}");
}

#[tokio::test]
async fn a_server_that_starts_listening_late_is_waited_for_and_sources_are_prepared_meanwhile() {
    use tokio::io::AsyncBufReadExt as _;
    // A free port, on which the server starts only once `gen run` says it waits for it.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n",
    );
    let url = format!("http://{addr}");
    let config = gen_.config(
        &Config::new(&url)
            .server("startup-timeout-secs = 120")
            .source("alpha", "data/a.jsonl"),
    );
    let mut child = gen_.start(&["run", &config]);
    let mut lines = tokio::io::BufReader::new(child.child.stderr.take().expect("stderr")).lines();
    let mut seen = String::new();
    loop {
        let line = lines
            .next_line()
            .await
            .expect("read stderr")
            .unwrap_or_else(|| panic!("gen ended without waiting:\n{seen}"));
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with(&format!("gen: waiting for {url}: ")) {
            break;
        }
    }
    // Preparation needs no server: it is done while gen waits (the worker's manifest is
    // written when its source is prepared).
    let manifest = gen_.source_path("alpha", "manifest.json");
    wait_for(
        "the source prepared while gen waits for the server",
        Duration::from_secs(60),
    )
    .every(Duration::from_millis(50))
    .context(|| seen.clone())
    .until(|| manifest.exists())
    .await;
    // While gen waits, it is alive to `gen status`: the heartbeat goes on and the state line
    // says what it waits for.
    let first = gen_.status().expect("status")["heartbeat_unix_ms"]
        .as_u64()
        .expect("heartbeat");
    wait_for(
        "the heartbeat to go on while gen waits",
        Duration::from_secs(20),
    )
    .context(|| seen.clone())
    .until(|| {
        gen_.status()
            .and_then(|s| s["heartbeat_unix_ms"].as_u64())
            .is_some_and(|h| h > first)
    })
    .await;
    let table = gen_.run(&["status", &config]).await;
    assert_eq!(table.code, Some(0), "{}", table.stdout);
    assert!(
        table
            .stdout
            .contains("running, waiting for the inference server to answer"),
        "{}",
        table.stdout
    );
    let _server = FakeOpenAi::start_at(addr, Knobs::default()).await;
    while let Some(line) = lines.next_line().await.expect("read stderr") {
        seen.push_str(&line);
        seen.push('\n');
    }
    let status = child.exit(Duration::from_secs(120)).await;
    assert_eq!(status.code(), Some(0), "{seen}");
    assert_eq!(gen_.completions_of("alpha").len(), 2);
}

#[tokio::test]
async fn unreachable_server_is_named_and_no_source_is_marked_failed() {
    let port = crate::support::free_port();
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", "{\"prompt\": \"one\"}\n");
    let url = format!("http://127.0.0.1:{port}");
    let config = gen_.config(
        &Config::new(&url)
            .server("startup-timeout-secs = 3")
            .source("alpha", "data/a.jsonl"),
    );
    let started = std::time::Instant::now();
    let out = gen_.run(&["run", &config]).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("gen: waiting for {url}: "))
            && out
                .stderr
                .contains(", connection refused; a server loading its model takes minutes")
            && out.stderr.contains(&format!(
                "error: inference server at `{url}` is not reachable"
            ))
            && out.stderr.contains(
                "(waited 3s for it to answer; `[server] startup-timeout-secs` waits longer)"
            ),
        "{}",
        out.stderr
    );
    let status: serde_json::Value =
        serde_json::from_str(&gen_.read_run("status.json")).expect("json");
    // Prepared while gen waited (or still pending when the machine was slow): never failed.
    let phase = &status["sources"][0]["phase"];
    assert!(phase == "prepared" || phase == "pending", "{status}");
}

#[tokio::test]
async fn a_launched_server_that_dies_is_reported_with_its_log() {
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", "{\"prompt\": \"one\"}\n");
    gen_.config(
        &Config::with_server(
            r#"url = "http://127.0.0.1:{port}"
launch = ["/bin/sh", "-c", "echo 'llama_model_load: error loading model: failed to open x.gguf' >&2; exit 1"]"#,
        )
        .generation("max-tokens = 8")
        .source("alpha", "data/a.jsonl"),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("error: the inference server exited during start-up (exit code 1)"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("failed to open x.gguf"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn config_errors_name_file_line_and_column_and_exit_2() {
    let gen_ = Project::new();
    gen_.write(
        "bad.toml",
        "[server]\nurl = \"http://127.0.0.1:1\"\ncolour = 1\n\n[generation]\nmax-tokens = 0\n\n[[source]]\nname = \"a b\"\npath = \"x\"\n",
    );
    gen_.write("x", "{\"prompt\": \"hi\"}\n");
    let out = gen_.run(&["check", "bad.toml"]).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert_eq!(
        out.stderr.lines().take(4).collect::<Vec<_>>(),
        [
            "error: `bad.toml` has 3 problems",
            "  bad.toml:3:1  unknown key `colour` in `[server]`, expected one of `url`, `urls`, `model`, `api-key-env`, `launch`, `health-timeout-secs`, `max-restarts`, `log`, `host-memory`, `max-outage-secs`, `startup-timeout-secs`, `stall-secs`",
            "  bad.toml:6:14  `max-tokens` must be between 1 and 4294967295",
            "  bad.toml:9:8  source name `a b` has whitespace: use only letters, digits, `-`, `_` and `.`",
        ]
    );
    let missing = gen_.run(&["run", "nope.toml"]).await;
    assert_eq!(missing.code, Some(2));
    assert!(
        missing
            .stderr
            .starts_with("error: failed to read config `nope.toml`"),
        "{}",
        missing.stderr
    );
}

#[tokio::test]
async fn only_failed_restarts_just_the_failed_source() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n",
    );
    // An error page saved instead of the data: the source fails when it is read.
    gen_.write("data/b.json", "<html>502 Bad Gateway</html>");
    let config = gen_.config(
        &Config::new(&server.url())
            .source("alpha", "data/a.jsonl")
            .source("beta", "data/b.json"),
    );
    let first = gen_.run(&["run", &config]).await;
    assert_eq!(first.code, Some(1), "{}", first.stderr);
    assert_eq!(server.chat_requests(), 2);
    let alpha_file = gen_.source_path("alpha", "completions.jsonl.zst");
    let alpha_before = std::fs::read(&alpha_file).expect("alpha completions");

    // The user fixes the source, then restarts only what failed.
    gen_.write("data/b.json", "[{\"prompt\": \"three\"}]");
    let second = gen_.run(&["run", &config, "--only-failed"]).await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert!(
        !second.stderr.contains("preparing `alpha`"),
        "{}",
        second.stderr
    );
    assert_eq!(server.chat_requests(), 3, "only beta's prompt is sent");
    assert_eq!(std::fs::read(&alpha_file).expect("read"), alpha_before);
    let status = gen_.run(&["status", &config, "--json"]).await;
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    assert_eq!(status["sources"][0]["phase"], "done");
    assert_eq!(status["sources"][1]["phase"], "done");

    let nothing = gen_.run(&["run", &config, "--only-failed"]).await;
    assert_eq!(nothing.code, Some(0));
    assert!(
        nothing.stderr.contains("no source failed"),
        "{}",
        nothing.stderr
    );
    let unknown = gen_.run(&["run", &config, "--source", "gamma"]).await;
    assert_eq!(unknown.code, Some(2));
    assert!(
        unknown
            .stderr
            .contains("has no source `gamma`; its sources are: alpha, beta"),
        "{}",
        unknown.stderr
    );
}

#[tokio::test]
async fn multi_turn_prompts_are_answered_turn_by_turn_on_the_models_own_answers() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"q1\"}, {\"role\": \"assistant\", \"content\": \"dataset answer\"}, {\"role\": \"user\", \"content\": \"q2\"}]}\n",
    );
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 16")
            .source_with("chat", "data/a.jsonl", "turns = \"all\""),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let records = gen_.completions_of("chat");
    assert_eq!(records.len(), 1, "one record per conversation");
    let turns: Vec<&str> = records[0]["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .map(|t| t["content"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(turns, ["echo: q1", "echo: q2"]);
    assert_eq!(records[0]["content"], "echo: q2");
    assert_eq!(
        records[0]["usage"]["completion_tokens"], 4,
        "usage summed over turns"
    );
    assert_eq!(server.chat_requests(), 2);
}

#[tokio::test]
async fn truncated_answers_follow_the_sources_length_policy() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"LONG one\"}\n{\"prompt\": \"short\"}\n",
    );
    let mut config = Config::new(&server.url()).generation("max-tokens = 60");
    for (name, policy) in [("kept", "keep"), ("dropped", "drop"), ("retried", "retry")] {
        // Same prompts in every source: without `dedup = false`, later sources would leave
        // them to the first.
        config = config.source_with(
            name,
            "data/a.jsonl",
            &format!("on-length = \"{policy}\"\ndedup = false"),
        );
    }
    gen_.config(&config);
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let finish = |name: &str| -> Vec<String> {
        let mut reasons: Vec<String> = gen_
            .completions_of(name)
            .iter()
            .map(|r| {
                format!(
                    "{}:{}",
                    r["content"].as_str().unwrap_or(""),
                    r["finish_reason"].as_str().unwrap_or("")
                )
            })
            .collect();
        reasons.sort();
        reasons
    };
    assert_eq!(
        finish("kept"),
        ["echo: LONG one:length", "echo: short:stop"]
    );
    assert_eq!(finish("dropped"), ["echo: short:stop"]);
    assert!(
        gen_.read_run("sources/dropped/rejected.jsonl")
            .contains("\"kind\":\"truncated\"")
    );
    assert_eq!(
        finish("retried"),
        ["echo: LONG one:stop", "echo: short:stop"]
    );
    // 2 + 2 + 3 requests: the retry asked once more with twice the budget.
    assert_eq!(server.chat_requests(), 7);
    let status = gen_.run(&["status", "cfg.toml", "--json"]).await;
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    assert_eq!(status["sources"][0]["truncated"], 1);
    assert_eq!(status["sources"][1]["phase"], "done");
}

/// Runs `gen` with `max-tokens = 64` on source `name` (its `lines` added), whose rows are made
/// from a 570-word prompt (`{}` in `rows`), against the fake server as vLLM with a context of
/// 600 tokens: a request for 64 tokens after that prompt gets 30 at most, silently.
async fn run_at_a_600_token_context(
    name: &str,
    lines: &str,
    rows: &str,
) -> (FakeOpenAi, Project, support::Output) {
    let server = FakeOpenAi::start(Knobs {
        context_length: Some(600),
        shorten_to_context: true,
        ..Knobs::default()
    })
    .await;
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        rows.replace("{}", &vec!["w"; 570].join(" ")),
    );
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 64")
            .source_with(name, "data/a.jsonl", lines),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    (server, gen_, out)
}

/// Issue 23 item 5: when the prompt fits but prompt + `max_tokens` does not, vLLM shortens
/// `max_tokens` without a word and the answer ends `length` short of its budget. That answer
/// is stored as cut by the context, counted apart from `max-tokens` cuts, and never asked
/// again with a larger budget, which cannot help.
#[tokio::test]
async fn an_answer_cut_by_the_context_is_counted_apart_and_never_retried() {
    let (server, gen_, out) = run_at_a_600_token_context(
        "alpha",
        "on-length = \"retry\"",
        "{\"prompt\": \"LONG one\"}\n{\"prompt\": \"short\"}\n{\"prompt\": \"{}\"}\n",
    )
    .await;
    let filling = vec!["w"; 570].join(" ");
    let asked = |prompt: &str| {
        server
            .received()
            .iter()
            .filter(|r| r.prompt == prompt)
            .count()
    };
    assert_eq!(asked(&filling), 1, "a context cut is not asked again");
    assert_eq!(asked("LONG one"), 2, "a max-tokens cut still is");
    let records = gen_.completions_of("alpha");
    let cut = records
        .iter()
        .find(|r| r["usage"]["prompt_tokens"] == 570)
        .expect("the answer to the filling prompt is kept");
    assert_eq!(cut["finish_reason"], "length");
    assert_eq!(cut["usage"]["completion_tokens"], 30);
    assert_eq!(cut["cut_by"], "context");
    assert!(
        records
            .iter()
            .filter(|r| r["usage"]["prompt_tokens"] != 570)
            .all(|r| r["finish_reason"] == "stop" && r.get("cut_by").is_none()),
        "{records:?}"
    );
    assert!(
        out.stderr
            .contains("gen: `alpha` done: 3 completions; 1 cut by the context"),
        "{}",
        out.stderr
    );
    let events = gen_.read_run("events.jsonl");
    let said: Vec<&str> = events
        .lines()
        .filter(|l| l.contains("\"context_cut\""))
        .collect();
    assert_eq!(said.len(), 1, "{events}");
    assert!(
        said[0].contains("not asked again with a larger budget"),
        "{}",
        said[0]
    );
    let json = gen_.run(&["status", "cfg.toml", "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(json["sources"][0]["truncated"], 0);
    assert_eq!(json["sources"][0]["cut_by_context"], 1);
    let table = gen_.run(&["status", "cfg.toml"]).await.stdout;
    assert!(
        table.contains("1 answer (33%) cut by the context: a larger `max-tokens` cannot help"),
        "{table}"
    );
    // Counted from the file again on the next start (the tally survives a rerun).
    std::fs::remove_file(gen_.source_path("alpha", "tally.json")).ok();
    assert_eq!(gen_.run(&["run", "cfg.toml"]).await.code, Some(0));
    let json = gen_.run(&["status", "cfg.toml", "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(json["sources"][0]["cut_by_context"], 1);
    assert_eq!(json["sources"][0]["truncated"], 0);
}

/// In a conversation, what cut an answer is stored on its turn, and the record's own
/// `cut_by` is its last turn's (as `finish_reason` is).
#[tokio::test]
async fn a_later_turn_cut_by_the_context_is_marked_on_that_turn() {
    let (server, gen_, _) = run_at_a_600_token_context(
        "chat",
        "turns = \"all\"",
        r#"{"messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "{}"}]}"#,
    )
    .await;
    let records = gen_.completions_of("chat");
    let turns = records[0]["turns"].as_array().expect("turns");
    assert_eq!(turns[0]["finish_reason"], "stop");
    assert!(turns[0].get("cut_by").is_none(), "{turns:?}");
    // q1 + "echo: q1" + 570 words leave 27 of the 600.
    assert_eq!(turns[1]["usage"]["completion_tokens"], 27);
    assert_eq!(turns[1]["cut_by"], "context");
    assert_eq!(records[0]["cut_by"], "context");
    assert_eq!(server.chat_requests(), 2);
}

#[tokio::test]
async fn resuming_under_changed_generation_settings_is_refused_unless_allowed() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", "{\"prompt\": \"one\"}\n");
    let settings = Config::new(&server.url()).source("alpha", "data/a.jsonl");
    let config = gen_.config(&settings);
    assert_eq!(gen_.run(&["run", &config]).await.code, Some(0));
    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n",
    );
    // Prepared again (its answer to "one" stays): new settings would mix two datasets.
    std::fs::remove_file(gen_.source_path("alpha", "manifest.json")).ok();
    gen_.config(&settings.generation("max-tokens = 32\nconcurrency = 3"));
    let refused = gen_.run(&["run", &config]).await;
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("this run was generated with different settings:"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("  max-tokens: was 16, now 32"),
        "{}",
        refused.stderr
    );
    let allowed = gen_.run(&["run", &config, "--allow-config-change"]).await;
    assert_eq!(allowed.code, Some(0), "{}", allowed.stderr);
}

#[tokio::test]
async fn shards_split_the_prompts_and_merge_puts_them_back_together() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    let rows: String = (0..40)
        .map(|i| format!("{{\"prompt\": \"p{i}\"}}\n"))
        .collect();
    gen_.write("data/a.jsonl", &rows);
    let config = gen_.config(&Config::new(&server.url()).source("alpha", "data/a.jsonl"));
    let mut counts = Vec::new();
    // Shares count from 0, as Slurm task ids and `shard-NNN` directories do.
    let last = gen_
        .run(&["run", &config, "--shard", "2/2", "--run-dir", "host-2"])
        .await;
    assert_eq!(last.code, Some(2), "{}", last.stderr);
    assert!(
        last.stderr.contains("shards count from 0") && last.stderr.contains("`0/2` … `1/2`"),
        "{}",
        last.stderr
    );
    for (shard, dir) in [("0/2", "host-1"), ("1/2", "host-2")] {
        let out = gen_
            .run(&["run", &config, "--shard", shard, "--run-dir", dir])
            .await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        counts.push(
            completions(&gen_.path(&format!("{dir}/sources/alpha/completions.jsonl.zst"))).len(),
        );
    }
    assert_eq!(counts.iter().sum::<usize>(), 40, "{counts:?}");
    assert!(
        counts.iter().all(|c| (8..=32).contains(c)),
        "both shares have work: {counts:?}"
    );
    assert_eq!(server.chat_requests(), 40, "no prompt sent twice");

    let merged = gen_
        .run(&["merge", "--output", "merged", "host-1", "host-2"])
        .await;
    assert_eq!(merged.code, Some(0), "{}{}", merged.stdout, merged.stderr);
    assert!(
        merged.stdout.contains("0 gaps, 0 duplicates"),
        "{}",
        merged.stdout
    );
    let records = completions(&gen_.path("merged/sources/alpha/completions.jsonl.zst"));
    let ids: std::collections::HashSet<&str> = records
        .iter()
        .map(|r| r["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!((records.len(), ids.len()), (40, 40));

    let partial = gen_.run(&["merge", "--output", "partial", "host-1"]).await;
    assert_eq!(partial.code, Some(1));
    assert!(
        partial
            .stdout
            .contains(&format!("{} gaps, 0 duplicates", counts[1])),
        "{}",
        partial.stdout
    );
    let twice = gen_
        .run(&["merge", "--output", "twice", "host-1", "host-1", "host-2"])
        .await;
    assert_eq!(twice.code, Some(1));
    assert!(
        twice
            .stdout
            .contains(&format!("0 gaps, {} duplicates", counts[0])),
        "{}",
        twice.stdout
    );

    let changed = gen_
        .run(&["run", &config, "--shard", "2/3", "--run-dir", "host-1"])
        .await;
    assert_eq!(changed.code, Some(2), "{}", changed.stderr);
    assert!(
        changed.stderr.contains("shard: was 0/2, now 2/3"),
        "{}",
        changed.stderr
    );
}

#[tokio::test]
async fn a_plan_that_cannot_fit_the_machine_is_refused_before_anything_starts() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", "{\"prompt\": \"one\"}\n");
    let config = gen_.config(&Config::new(&server.url()).source_with(
        "alpha",
        "data/a.jsonl",
        "memory-limit = \"8G\"",
    ));
    // 1 GiB available, one worker capped at 8 GiB.
    let out = gen_
        .run_with_env(
            &["run", &config],
            &[("GEN_TEST_MEM_AVAILABLE", "1073741824")],
        )
        .await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("error: the plan does not fit this machine: needs"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("needs 8 GiB host RAM, 1 GiB available: 1 worker × 8 GiB memory-limit"),
        "{}",
        out.stderr
    );
    assert_eq!(server.chat_requests(), 0);
    assert!(
        !gen_.source_path("alpha", "prompts.jsonl.zst").exists(),
        "nothing was prepared"
    );
}

/// `gen run CONFIG` in the background, once it has sent its first request.
async fn run_until_it_sends(gen_: &Project, config: &str, server: &FakeOpenAi) -> Running {
    let mut child = gen_.start(&["run", config]);
    child
        .until("a first request", Duration::from_secs(30), || {
            server.chat_requests() > 0
        })
        .await;
    child
}

#[tokio::test]
async fn after_gen_run_is_killed_status_says_it_is_not_running() {
    let server = FakeOpenAi::start(Knobs {
        delay: std::time::Duration::from_millis(200),
        ..Knobs::default()
    })
    .await;
    let gen_ = Project::new();
    let rows: String = (0..50)
        .map(|i| format!("{{\"prompt\": \"p{i}\"}}\n"))
        .collect();
    gen_.write("data/a.jsonl", &rows);
    let config = gen_.config(&Config::new(&server.url()).source("alpha", "data/a.jsonl"));
    let mut child = run_until_it_sends(&gen_, &config, &server).await;
    child.kill9().await;
    // Age the heartbeat instead of waiting 15 s: what a later `gen status` would find.
    let path = gen_.run_path("status.json");
    let mut status: serde_json::Value =
        serde_json::from_str(&gen_.read_run("status.json")).expect("json");
    assert_eq!(status["finished"], false);
    let beat = status["heartbeat_unix_ms"].as_u64().expect("heartbeat");
    status["heartbeat_unix_ms"] = (beat - 5 * 60_000).into();
    std::fs::write(&path, serde_json::to_vec(&status).expect("json")).expect("write");
    // Not running although it did not finish: exit 1, and `--watch` has nothing to wait for.
    let out = gen_.run(&["status", &config]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("state  not running: last heartbeat 5 min ago (pid "),
        "{}",
        out.stdout
    );
    let watched = gen_.run(&["status", &config, "--watch", "1"]).await;
    assert_eq!(watched.code, Some(1), "{}", watched.stderr);
    assert_eq!(watched.stdout, out.stdout, "one view, then exit");
}

#[tokio::test]
async fn status_watch_follows_a_running_run_and_exits_with_its_code_when_it_ends() {
    let server = FakeOpenAi::start(Knobs {
        delay: std::time::Duration::from_millis(100),
        ..Knobs::default()
    })
    .await;
    let gen_ = Project::new();
    let rows: String = (0..20)
        .map(|i| format!("{{\"prompt\": \"p{i}\"}}\n"))
        .collect();
    gen_.write("data/a.jsonl", &rows);
    let config = gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 16\nconcurrency = 1")
            .source("alpha", "data/a.jsonl"),
    );
    let mut run = run_until_it_sends(&gen_, &config, &server).await;
    // Started while the run generates (20 answers one at a time take 2 s or more).
    let watched = gen_.run(&["status", &config, "--watch", "1"]).await;
    let status: serde_json::Value =
        serde_json::from_str(&gen_.read_run("status.json")).expect("json");
    assert_eq!(status["finished"], true, "--watch returned before the end");
    assert_eq!(watched.code, Some(0), "{}", watched.stderr);
    assert!(
        watched.stdout.matches("\nstate  ").count() + 1 >= 2
            && watched.stdout.contains("state  running (pid")
            && watched.stdout.contains("state  finished"),
        "piped: one plain view after another, the last finished:\n{}",
        watched.stdout
    );
    assert!(
        !watched.stdout.contains('\x1b'),
        "no cursor movement when piped"
    );
    assert_eq!(run.exit(Duration::from_secs(120)).await.code(), Some(0));
}

#[tokio::test]
async fn thinking_without_a_reasoning_parser_is_refused_before_generating() {
    for (inline, code) in [(false, Some(0)), (true, Some(1))] {
        let server = FakeOpenAi::start(Knobs {
            inline_reasoning: inline,
            ..Knobs::default()
        })
        .await;
        let gen_ = Project::new();
        gen_.write("data/a.jsonl", "{\"prompt\": \"one\"}\n");
        let config = gen_.config(
            &Config::new(&server.url())
                .generation(
                    "max-tokens = 16\nchat-template-kwargs = { enable_thinking = true }\nconcurrency = 3",
                )
                .source("alpha", "data/a.jsonl"),
        );
        let out = gen_.run(&["run", &config]).await;
        assert_eq!(out.code, code, "{}", out.stderr);
        if inline {
            assert!(
                out.stderr.contains("reasoning arrives inside `content`"),
                "{}",
                out.stderr
            );
            assert_eq!(server.chat_requests(), 1, "only the probe");
        } else {
            assert_eq!(server.chat_requests(), 2, "the probe and the prompt");
        }
    }
}

#[tokio::test]
async fn the_real_datasets_toml_checks() {
    let gen_ = Project::new();
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets.toml");
    let out = gen_.run(&["check", &config.to_string_lossy()]).await;
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("is valid: 10 sources"),
        "{}",
        out.stdout
    );
}

#[tokio::test]
async fn a_rerun_says_it_resumes_and_the_plain_progress_line_says_where_the_run_stands() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n",
    );
    gen_.write("data/b.jsonl", "{\"prompt\": \"three\"}\n");
    let config = gen_.config(
        &Config::new(&server.url())
            .source("alpha", "data/a.jsonl")
            .source("beta", "data/b.jsonl"),
    );
    // stderr is a pipe here: plain lines, no bars; the last progress line is the run's total.
    let first = gen_.run(&["run", &config, "--source", "alpha"]).await;
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    assert!(!first.stderr.contains("resuming"), "{}", first.stderr);
    let last = |stderr: &str| {
        stderr
            .lines()
            .rfind(|l| l.starts_with("gen: [") && l.contains(" completed"))
            .map(str::to_owned)
            .unwrap_or_default()
    };
    assert!(
        last(&first.stderr).contains("] 2/2 completed (100%), 0 failed, "),
        "{}",
        first.stderr
    );

    let second = gen_.run(&["run", &config]).await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert!(
        second
            .stderr
            .contains("gen: resuming: 2 of 2 prepared prompts already completed"),
        "{}",
        second.stderr
    );
    assert!(
        last(&second.stderr).contains("] 3/3 completed (100%), 0 failed, "),
        "{}",
        second.stderr
    );
    assert_eq!(server.chat_requests(), 3, "nothing is sent twice");
}

#[tokio::test]
async fn prepare_needs_no_server_and_run_then_generates_from_its_prompts() {
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", ROWS);
    // Nothing listens on port 9 (discard): preparing must not need the server.
    let config = gen_.config(&Config::new("http://127.0.0.1:9").source("alpha", "data/a.jsonl"));
    let prepared = gen_.run(&["prepare", &config]).await;
    assert_eq!(prepared.code, Some(0), "{}", prepared.stderr);
    assert!(
        prepared
            .stderr
            .contains("every selected source is prepared; `gen run cfg.toml` generates"),
        "{}",
        prepared.stderr
    );
    assert!(gen_.source_path("alpha", "manifest.json").exists());
    let again = gen_.run(&["prepare", &config, "--source", "alpha"]).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    let unknown = gen_.run(&["prepare", &config, "--source", "nope"]).await;
    assert_eq!(unknown.code, Some(2), "{}", unknown.stderr);

    let server = FakeOpenAi::start(Knobs::default()).await;
    let config = gen_.config(&Config::new(&server.url()).source("alpha", "data/a.jsonl"));
    let run = gen_.run(&["run", &config]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!run.stderr.contains("preparing `alpha`"), "{}", run.stderr);
    assert_eq!(gen_.completions_of("alpha").len(), 4);
}
