//! `token-ids = true` refused where the server cannot honour it: a server that ignores
//! `return_token_ids` (the fake OpenAI server, as a plain OpenAI-compatible server does) is
//! refused before any prompt is sent, with what to do; a `[server] launch` of llama-server is
//! refused by `gen check` at the key; SGLang, which refuses vLLM's flag on a streamed chat, is
//! asked its own way. The real vLLM's token ids are checked in `vllm.rs`.

use crate::support::{Config, Project};
use gen_tests::fake_openai::{FakeOpenAi, Knobs};

#[tokio::test]
async fn a_server_that_ignores_return_token_ids_is_refused_before_any_prompt() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n",
    );
    gen_.config(
        &Config::new(&server.url())
            .source("plain", "data/a.jsonl")
            .source_with(
                "ids",
                "data/a.jsonl",
                "[source.generation]\ntoken-ids = true",
            ),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("source `ids`")
            && out
                .stderr
                .contains("carried neither `prompt_token_ids` nor `token_ids`")
            && out
                .stderr
                .contains("serve the model with vLLM or a recent SGLang, or remove `token-ids`"),
        "{}",
        out.stderr
    );
    // Only the test prompt was sent, asking for the ids; nothing was generated.
    let received = server.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0].body["return_token_ids"], true);
    for source in ["ids", "plain"] {
        let stored = gen_.source_path(source, "completions.jsonl.zst");
        assert!(!stored.exists() || gen_.completions_of(source).is_empty());
    }

    let doctor = gen_.run(&["doctor", "cfg.toml"]).await;
    assert!(
        doctor.stdout.contains("token ids") && doctor.stdout.contains("remove `token-ids`"),
        "{}{}",
        doctor.stdout,
        doctor.stderr
    );
}

#[tokio::test]
async fn token_ids_with_a_launched_llama_server_is_a_located_config_error() {
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", "{\"prompt\": \"one\"}\n");
    let text = "[server]\nurl = \"http://127.0.0.1:{port}\"\n\
                launch = [\"llama-server\", \"--port\", \"{port}\"]\n\n\
                [generation]\nmax-tokens = 16\ntoken-ids = true\n\n\
                [[source]]\nname = \"a\"\npath = \"data/a.jsonl\"\n\n\
                [source.generation]\ntoken-ids = [{ value = true, weight = 1 }]\n";
    gen_.write("cfg.toml", text);
    let out = gen_.run(&["check", "cfg.toml"]).await;
    assert_eq!(out.code, Some(2), "{}{}", out.stdout, out.stderr);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains("cfg.toml:7:13  `token-ids` needs a server that returns token ids, and `[server] launch` starts llama.cpp's `llama-server`, which does not"),
        "{all}"
    );
    assert!(
        all.contains("cfg.toml:14:13  `token-ids` takes one value, not a weighted list"),
        "{all}"
    );
}

/// SGLang refuses vLLM's `return_token_ids` on a streamed chat (HTTP 400) and answers its own
/// `return_*_ids_in_sglext` flags in a last `sglext` chunk: `gen` asks again its way, and the
/// run stores every answer with its ids, none recorded as a refused prompt.
#[tokio::test]
async fn sglang_is_asked_for_token_ids_its_own_way() {
    let server = FakeOpenAi::start(Knobs {
        sglang_token_ids: true,
        ..Knobs::default()
    })
    .await;
    let gen_ = Project::new();
    let rows: String = (0..12)
        .map(|i| format!("{{\"prompt\": \"question {i}\"}}\n"))
        .collect();
    gen_.write("data/a.jsonl", &rows);
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 16\nconcurrency = 4\ntoken-ids = true")
            .source("a", "data/a.jsonl"),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let records = gen_.completions_of("a");
    assert_eq!(records.len(), 12, "{}", out.stderr);
    for record in &records {
        let ids = &record["token_ids"];
        assert_eq!(
            ids["prompt"],
            serde_json::json!([1, 2, 3, 4, 5]),
            "{record}"
        );
        let answer = ids["completion"].as_array().expect("answer ids");
        assert_eq!(
            answer.len() as u64,
            record["usage"]["completion_tokens"].as_u64().unwrap_or(0),
            "{record}"
        );
        assert_eq!(answer.first(), Some(&serde_json::json!(1000)), "{record}");
    }
    assert!(gen_.rejected_of("a").is_empty());
    // Every chat request after the refused ones asked SGLang's way.
    let received = server.received();
    let sglang_way = received
        .iter()
        .filter(|r| r.body["return_output_ids_in_sglext"] == true)
        .count();
    assert!(sglang_way >= 13, "{} requests", received.len());
    assert!(
        received
            .iter()
            .filter(|r| r.body["return_output_ids_in_sglext"] == true)
            .all(|r| r.body.get("return_token_ids").is_none())
    );

    let doctor = gen_.run(&["doctor", "cfg.toml"]).await;
    assert!(
        doctor
            .stdout
            .contains("answers carry their prompt's and their own token ids"),
        "{}{}",
        doctor.stdout,
        doctor.stderr
    );
    let export = gen_
        .run(&["export", "cfg.toml", "--schema", "speculators", "-o", "out"])
        .await;
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    let first = gen_.read("out/data/train.jsonl");
    let row: serde_json::Value =
        serde_json::from_str(first.lines().next().unwrap_or_default()).expect("row");
    assert!(
        row["input_ids"].is_array() && row["loss_mask"].is_array(),
        "{row}"
    );
}
