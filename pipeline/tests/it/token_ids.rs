//! `token-ids = true` refused where the server cannot honour it: a server that ignores
//! `return_token_ids` (the fake OpenAI server, as a plain OpenAI-compatible server does) is
//! refused before any prompt is sent, with what to do; a `[server] launch` of llama-server is
//! refused by `gen check` at the key. The real vLLM's token ids are checked in `vllm.rs`.

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
                .contains("serve the model with vLLM, or remove `token-ids`"),
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
