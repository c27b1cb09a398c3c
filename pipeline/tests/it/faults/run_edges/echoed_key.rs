//! A gateway that quotes the API key in its error bodies (a 400 for one prompt, then a 401 for
//! everything): the key reaches no output of `gen` — not stderr, `status.json`, `events.jsonl`
//! or `rejected.jsonl` — while the errors themselves are kept, with the key masked.

use gen_tests::key_echo::KeyEcho;

use super::count;
use crate::support::{Config, Project, walk};

const KEY: &str = "sk-echoed-Hq4vZ81mTx";
const HF_TOKEN: &str = "hf_echoedTk2Pw7Lq9Zr";

#[tokio::test]
async fn an_api_key_quoted_by_the_server_is_masked_in_every_output() {
    let gateway = KeyEcho::start().await;
    let mut project = Project::new();
    project.env("GEN_ECHO_KEY", KEY);
    project.env("HF_TOKEN", HF_TOKEN);
    project.write(
        "data/alpha.jsonl",
        "{\"prompt\": \"one\"}\n{\"prompt\": \"REJECT two\"}\n{\"prompt\": \"three\"}\n",
    );
    project.write(
        "data/beta.jsonl",
        "{\"prompt\": \"four\"}\n{\"prompt\": \"five\"}\n",
    );
    project.config(
        &Config::new(&gateway.url())
            .server("api-key-env = \"GEN_ECHO_KEY\"")
            .generation("max-tokens = 16\nconcurrency = 1")
            .source("alpha", "data/alpha.jsonl")
            .source("beta", "data/beta.jsonl"),
    );
    let run_dir = project.run_dir();
    let mut outputs = Vec::new();
    // The 400 quoting the key: a rejection with its reason.
    outputs.push(project.run(&["run", "cfg.toml", "--source", "alpha"]).await);
    // The 401 quoting the key: the run stops with the server's words.
    gateway.unauthorized();
    outputs.push(project.run(&["run", "cfg.toml"]).await);
    assert_eq!(outputs[1].code, Some(1), "{}", outputs[1].stderr);
    for args in [
        &["status", "cfg.toml"][..],
        &["status", "cfg.toml", "--json"],
        &["verify", &run_dir],
        &["diagnose", "alpha", "--config", "cfg.toml"],
    ] {
        outputs.push(project.run(args).await);
    }
    assert!(gateway.chat_requests() >= 4, "{}", gateway.chat_requests());
    for out in &outputs {
        assert_ne!(out.code, Some(101), "panicked: {}", out.stderr);
        for text in [&out.stdout, &out.stderr] {
            assert!(!text.contains(KEY) && !text.contains(HF_TOKEN), "{text}");
        }
    }
    // The server's words are kept, the key masked.
    assert!(
        outputs[1]
            .stderr
            .contains("Invalid proxy server token passed. Received API Key = ***,"),
        "{}",
        outputs[1].stderr
    );
    let rejected =
        std::fs::read_to_string(project.run_path("").join("sources/alpha/rejected.jsonl"))
            .expect("rejected.jsonl");
    assert_eq!(
        count(&rejected, "Invalid request from key ***"),
        1,
        "{rejected}"
    );
    let files = walk(&project.run_path(""));
    assert!(files.len() > 10, "{files:?}");
    for path in files.iter().filter(|p| p.is_file()) {
        let bytes = std::fs::read(path).expect("read");
        let mut texts = vec![String::from_utf8_lossy(&bytes).into_owned()];
        if path.extension().is_some_and(|e| e == "zst") && !bytes.is_empty() {
            let inner = zstd::stream::decode_all(&bytes[..])
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            texts.push(String::from_utf8_lossy(&inner).into_owned());
        }
        for text in texts {
            assert!(
                !text.contains(KEY) && !text.contains(HF_TOKEN),
                "{}: {text}",
                path.display()
            );
        }
    }
}
