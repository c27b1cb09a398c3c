//! The real `datasets.toml` through `gen run`, unchanged but for the server URL: ten
//! preparation worker processes download the ten datasets' fixtures (each in its real layout
//! and schema) from the fake hub named by `HF_ENDPOINT` into the `HF_HUB_CACHE`, extract
//! exactly the prompts each must give, and the dispatcher answers every one once, across
//! sources too (an earlier source wins; the fixtures are smaller than `limit`, so a later
//! source's duplicates are settled, not sampled around).

use crate::support;

use std::collections::HashSet;

use gen_tests::datasets::{self, Expected};
use gen_tests::fake_hub::FakeHub;
use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use serde_json::Value;
use support::{Project, completions};

/// A prompt as `(role, content)` turns.
type Turns = Vec<(String, String)>;

fn turns(messages: &Value) -> Turns {
    messages
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().expect("role").to_owned(),
                m["content"].as_str().expect("content").to_owned(),
            )
        })
        .collect()
}

fn expected_turns(expected: &Expected) -> Vec<Turns> {
    expected
        .prompts
        .iter()
        .map(|p| {
            p.iter()
                .map(|(r, c)| ((*r).to_owned(), c.clone()))
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn the_real_datasets_toml_runs_through_gen_against_the_fake_hub() {
    let fixtures = datasets::all();
    let mut repos: Vec<_> = fixtures.iter().map(|f| f.repo.clone()).collect();
    repos.extend(datasets::resolve_repos());
    let hub = FakeHub::start(repos);
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    let real = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets.toml"),
    )
    .expect("datasets.toml");
    let local_server = "url = \"http://127.0.0.1:30000\"";
    assert_eq!(real.matches(local_server).count(), 1);
    gen_.write(
        "datasets.toml",
        real.replace(local_server, &format!("url = \"{}\"", server.url())),
    );
    gen_.use_config("datasets.toml");
    let cache = tempfile::tempdir().expect("tempdir");
    let cache_dir = cache.path().to_string_lossy().into_owned();
    let out = gen_
        .run_with_env(
            &["run", "datasets.toml"],
            &[
                ("HF_ENDPOINT", hub.endpoint.as_str()),
                ("HF_HUB_CACHE", cache_dir.as_str()),
                ("HF_HOME", cache_dir.as_str()),
            ],
        )
        .await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);

    let status: Value = serde_json::from_str(&gen_.read_run("status.json")).expect("status.json");
    let mut earlier: HashSet<Turns> = HashSet::new();
    let mut answered = 0;
    for (i, fixture) in fixtures.iter().enumerate() {
        let name = fixture.expected.source;
        let dir = gen_.run_path(&format!("sources/{name}"));
        // Exactly the prompts the fixture must give, in order, through the worker process.
        let prompts: Vec<Turns> = completions(&dir.join("prompts.jsonl.zst"))
            .iter()
            .map(|p| turns(&p["messages"]))
            .collect();
        assert_eq!(
            prompts,
            expected_turns(&fixture.expected),
            "source `{name}`"
        );
        let manifest: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("manifest.json")).expect("manifest"),
        )
        .expect("manifest json");
        assert_eq!(manifest["repo"], fixture.repo.id.as_str(), "{name}");
        assert_eq!(manifest["commit"], fixture.repo.sha.as_str(), "{name}");
        // Each prompt answered once: here, or by the earlier source that has it.
        let duplicates = prompts.iter().filter(|p| earlier.contains(*p)).count() as u64;
        let source = &status["sources"][i];
        assert_eq!(source["name"], name);
        assert_eq!(
            (
                source["phase"].as_str(),
                source["done"].as_u64(),
                source["duplicates"].as_u64()
            ),
            (
                Some("done"),
                Some(prompts.len() as u64 - duplicates),
                Some(duplicates)
            ),
            "source `{name}`"
        );
        let records = completions(&dir.join("completions.jsonl.zst"));
        assert_eq!(records.len() as u64, prompts.len() as u64 - duplicates);
        answered += records.len();
        earlier.extend(prompts);
    }
    // One request per user turn of every answered conversation; nothing else was sent.
    let user_turns: usize = fixtures
        .iter()
        .enumerate()
        .flat_map(|(i, f)| {
            let seen: HashSet<Turns> = fixtures[..i]
                .iter()
                .flat_map(|g| expected_turns(&g.expected))
                .collect();
            expected_turns(&f.expected)
                .into_iter()
                .filter(move |p| !seen.contains(p))
        })
        .map(|p| p.iter().filter(|(role, _)| role == "user").count())
        .sum();
    assert!(answered > 0);
    // The fixtures share one prompt (ShareGPT's, again in WildChat), left to the earlier one.
    let wildchat = fixtures
        .iter()
        .position(|f| f.expected.source == "wildchat")
        .expect("wildchat");
    assert_eq!(status["sources"][wildchat]["duplicates"], 1);
    assert_eq!(server.chat_requests(), user_turns);
    // Every download went to the fake hub, into the cache `HF_HUB_CACHE` named.
    assert!(hub.seen().iter().any(|s| s.path.contains("/resolve/")));
    assert!(
        std::fs::read_dir(cache.path())
            .expect("cache")
            .flatten()
            .any(|e| e.file_name() == "datasets--nvidia--OpenCodeReasoning")
    );
}
