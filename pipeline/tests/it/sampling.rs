//! Issue 26: request settings per source (`[source.generation]`, weighted lists drawn per
//! request), several samples per prompt (`samples = k`), and the run pin per source, end to
//! end against the fake server, whose recorded request bodies say what was asked.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::{Config, Project};
use gen_tests::fake_openai::{FakeOpenAi, Knobs, Received};
use serde_json::Value;

/// `n` distinct prompt rows tagged `tag`.
fn rows(tag: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"prompt\": \"{tag} question {i}\"}}\n"))
        .collect()
}

/// The bodies the server received for prompts tagged `tag`, by prompt.
fn bodies(received: &[Received], tag: &str) -> Vec<(String, Value)> {
    received
        .iter()
        .filter(|r| r.prompt.starts_with(tag))
        .map(|r| (r.prompt.clone(), r.body.clone()))
        .collect()
}

const MATH: &str = "[source.generation]
max-tokens = 24
temperature = [{ value = 0.6, weight = 3 }, { value = 1.0, weight = 1 }]
reasoning-effort = \"high\"";

/// Sources `chat` and `math` with `chat` and `math` added to their tables.
fn two_sources(url: &str, chat: &str, math: &str) -> Config {
    Config::new(url)
        .generation("max-tokens = 16\nconcurrency = 3\ntemperature = 0.7")
        .source_with("chat", "data/chat.jsonl", chat)
        .source_with("math", "data/math.jsonl", math)
}

#[tokio::test]
async fn each_source_asks_with_its_own_settings_draws_by_id_and_records_them() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    project.write("data/chat.jsonl", rows("chat", 4));
    project.write("data/math.jsonl", rows("math", 40));
    project.config(&two_sources(&server.url(), "", MATH));
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    let received = server.received();
    for (_, body) in bodies(&received, "chat") {
        assert_eq!(body["temperature"], 0.7, "{body}");
        assert_eq!(body["max_tokens"], 16, "{body}");
        assert!(body.get("reasoning_effort").is_none(), "{body}");
    }
    let math = bodies(&received, "math");
    assert_eq!(math.len(), 40);
    let mut drawn = BTreeMap::new();
    for (prompt, body) in &math {
        assert_eq!(body["max_tokens"], 24, "{body}");
        assert_eq!(body["reasoning_effort"], "high", "{body}");
        drawn.insert(prompt.clone(), body["temperature"].clone());
    }
    let values: BTreeSet<String> = drawn.values().map(Value::to_string).collect();
    assert_eq!(values, BTreeSet::from(["0.6".into(), "1.0".into()]));

    // Each record carries what its request asked for.
    for record in project.completions_of("math") {
        let prompt = record["messages"][0]["content"].as_str().unwrap_or("");
        let settings = &record["settings"];
        assert_eq!(settings["temperature"], drawn[prompt], "{record}");
        assert_eq!(settings["max_tokens"], 24, "{record}");
        assert_eq!(settings["reasoning_effort"], "high", "{record}");
    }
    for record in project.completions_of("chat") {
        assert_eq!(record["settings"]["temperature"], 0.7, "{record}");
    }

    // The export's provenance says each source's settings, the weighted list included.
    let export = project.run(&["export", "cfg.toml", "-o", "out"]).await;
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    let provenance: Value =
        serde_json::from_str(&project.read("out/provenance.json")).expect("provenance");
    let settings = |name: &str| -> Value {
        provenance["sources"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == name))
            .map(|s| s["settings"].clone())
            .unwrap_or_default()
    };
    assert_eq!(settings("chat")["max_tokens"], 16, "{provenance}");
    assert_eq!(settings("math")["max_tokens"], 24, "{provenance}");
    let math = settings("math").to_string();
    assert!(
        math.contains("0.6") && math.contains("1.0") && math.contains("high"),
        "{math}"
    );
    // And each row the temperature its own answer was drawn with (`settings`, JSON text).
    let rows = project.read("out/data/train.jsonl");
    let mut math_rows = 0;
    for row in rows
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("row"))
    {
        let settings: Value =
            serde_json::from_str(row["settings"].as_str().expect("settings")).expect("JSON");
        assert_eq!(row["sample"], 0, "{row}");
        if row["source"] == "math" {
            math_rows += 1;
            let prompt = row["messages"][0]["content"].as_str().unwrap_or("");
            assert_eq!(settings["temperature"], drawn[prompt], "{row}");
        }
    }
    assert_eq!(math_rows, 40);

    // A new run directory draws the same values for the same prompts.
    let again = project
        .run(&["run", "cfg.toml", "--run-dir", "runs/again"])
        .await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    let received = server.received();
    let redrawn: BTreeMap<String, Value> = bodies(&received[44..], "math")
        .into_iter()
        .map(|(prompt, body)| (prompt, body["temperature"].clone()))
        .collect();
    assert_eq!(redrawn, drawn);
}

#[tokio::test]
async fn the_pin_refuses_a_change_only_for_the_source_whose_answers_it_touches() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    project.write("data/chat.jsonl", rows("chat", 2));
    project.write("data/math.jsonl", rows("math", 3));
    let url = server.url();
    project.config(&two_sources(&url, "", MATH));
    let out = project.run(&["run", "cfg.toml", "--source", "math"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    // `chat` has nothing stored: it takes new settings.
    let chat = "[source.generation]\ntemperature = 0.2";
    project.config(&two_sources(&url, chat, MATH));
    let out = project.run(&["check", "cfg.toml"]).await;
    assert!(
        out.stdout.contains("settings are pinned per source"),
        "{}",
        out.stdout
    );
    let out = project.run(&["run", "cfg.toml", "--source", "chat"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for record in project.completions_of("chat") {
        assert_eq!(record["settings"]["temperature"], 0.2, "{record}");
    }

    // `math` has answers: a change to its settings is refused, naming it and the rule (more
    // samples give the run work to do); more samples alone change nothing stored.
    let more_samples = MATH.replace("max-tokens = 24", "max-tokens = 24\nsamples = 2");
    let changed = more_samples.replace("weight = 3", "weight = 1");
    project.config(&two_sources(&url, chat, &changed));
    let refused = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains(
            "  source `math`: temperature: was [{\"value\":0.6,\"weight\":3.0},{\"value\":1.0,\"weight\":1.0}], now [{\"value\":0.6,\"weight\":1.0},{\"value\":1.0,\"weight\":1.0}]"
        ),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("settings are pinned per source"),
        "{}",
        refused.stderr
    );
    assert!(
        !refused.stderr.contains("source `chat`"),
        "{}",
        refused.stderr
    );
    project.config(&two_sources(&url, chat, &more_samples));
    let grown = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(grown.code, Some(0), "{}", grown.stderr);
    assert_eq!(project.completions_of("math").len(), 6);

    // A finished source whose settings changed stands as it is, and the run says so and how
    // to take the change: `--regenerate math` sets its answers aside and generates it again;
    // `chat` is not sent again. With work to do, the refusal names the same way.
    let shorter = more_samples.replace("max-tokens = 24", "max-tokens = 20");
    project.config(&two_sources(&url, chat, &shorter));
    let finished = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert!(
        finished.stderr.contains(
            "gen: note: `math`'s settings changed since its answers were generated \
             (max-tokens: was 24, now 20)"
        ) && finished
            .stderr
            .contains("--regenerate math` generates it again"),
        "{}",
        finished.stderr
    );
    let shorter = shorter.replace("samples = 2", "samples = 3");
    project.config(&two_sources(&url, chat, &shorter));
    let refused = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("pass `--regenerate math` to generate it again under the new settings"),
        "{}",
        refused.stderr
    );
    let unknown = project
        .run(&["run", "cfg.toml", "--regenerate", "maths"])
        .await;
    assert_eq!(unknown.code, Some(2), "{}", unknown.stderr);
    assert!(
        unknown
            .stderr
            .contains("has no source `maths`; its sources are: chat, math"),
        "{}",
        unknown.stderr
    );
    let before = server.chat_requests();
    let again = project
        .run(&["run", "cfg.toml", "--regenerate", "math"])
        .await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(
        again
            .stderr
            .contains("`math`: its answers are set aside in"),
        "{}",
        again.stderr
    );
    assert_eq!(
        server.chat_requests() - before,
        9,
        "only math, its three samples"
    );
    let math = project.completions_of("math");
    assert_eq!(math.len(), 9);
    for record in &math {
        assert_eq!(record["settings"]["max_tokens"], 20, "{record}");
    }
    let dir = project.run_path("sources/math");
    let aside: Vec<String> = std::fs::read_dir(&dir)
        .expect("math's directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("completions.superseded-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    let export = project
        .run(&["export", "cfg.toml", "-o", "regenerated"])
        .await;
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    // Each of the three answers to a prompt is a row of its own, with its sample index.
    let mut samples = BTreeMap::<String, BTreeSet<u64>>::new();
    for line in project.read("regenerated/data/train.jsonl").lines() {
        let row: Value = serde_json::from_str(line).expect("row");
        if row["source"] == "math" {
            let prompt = row["messages"][0]["content"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            samples
                .entry(prompt)
                .or_default()
                .insert(row["sample"].as_u64().expect("sample"));
        }
    }
    assert_eq!(samples.len(), 3, "{samples:?}");
    assert!(
        samples.values().all(|s| s == &BTreeSet::from([0, 1, 2])),
        "{samples:?}"
    );
}

/// Samples are units of work: three records per prompt, ids from the prompt id and the
/// sample index, a seed each, siblings sent back to back; a `kill -9` in the middle loses
/// and repeats none, and `gen verify` accounts for three per prompt.
#[tokio::test]
async fn samples_are_sent_back_to_back_with_their_own_seeds_and_survive_kill_nine() {
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(5),
        ..Knobs::default()
    })
    .await;
    let project = Project::new();
    project.write("data/math.jsonl", rows("math", 30));
    let config = Config::new(&server.url())
        .generation("max-tokens = 16\nconcurrency = 1\nsamples = 3")
        .source("math", "data/math.jsonl");
    project.config(&config);
    let mut child = project.start(&["run", "cfg.toml"]);
    child
        .until("40 requests", Duration::from_secs(60), || {
            server.chat_requests() >= 40
        })
        .await;
    child.signal("KILL");
    child.finish(Duration::from_secs(60)).await;
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    let records = project.completions_of("math");
    assert_eq!(records.len(), 90);
    let ids: BTreeSet<&str> = records.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(ids.len(), 90, "every sample stored once");
    let mut per_prompt: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for record in &records {
        let prompt = record["messages"][0]["content"].as_str().unwrap_or("");
        let sample = record["sample"].as_u64().unwrap_or(0);
        let id = record["id"].as_str().unwrap_or("");
        assert!(sample == 0 || id.ends_with(&format!("#{sample}")), "{id}");
        per_prompt
            .entry(prompt.to_owned())
            .or_default()
            .push(sample);
    }
    assert!(
        per_prompt.values().all(|s| {
            let mut s = s.clone();
            s.sort_unstable();
            s == [0, 1, 2]
        }),
        "{per_prompt:?}"
    );
    let seeds: BTreeSet<i64> = records
        .iter()
        .filter_map(|r| r["settings"]["seed"].as_i64())
        .collect();
    assert_eq!(seeds.len(), 90, "a seed per sample");
    // One at a time: a prompt's samples follow each other.
    let received = server.received();
    let sent: Vec<&str> = received.iter().map(|r| r.prompt.as_str()).collect();
    let first_run: Vec<&str> = sent[..39].to_vec();
    for triple in first_run.chunks(3) {
        assert!(triple.iter().all(|p| *p == triple[0]), "{first_run:?}");
    }

    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(audit["totals"]["completed"], 90, "{audit:#}");
    assert_eq!(audit["totals"]["duplicated"], 0, "{audit:#}");
    let status = project.run(&["status", "cfg.toml"]).await.stdout;
    assert!(status.contains("30 prompts × 3 samples each"), "{status}");
}

/// Shards of a run with `samples = 2` merge into one directory `gen verify` accounts for:
/// two ids per prompt, no gap.
#[tokio::test]
async fn shards_with_samples_merge_and_verify() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    project.write("data/math.jsonl", rows("math", 12));
    let config = Config::new(&server.url())
        .generation("max-tokens = 16\nconcurrency = 3\nsamples = 2")
        .source("math", "data/math.jsonl");
    project.config(&config);
    for (shard, dir) in [("0/2", "host-1"), ("1/2", "host-2")] {
        let out = project
            .run(&["run", "cfg.toml", "--shard", shard, "--run-dir", dir])
            .await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    let merged = project
        .run(&["merge", "--output", "merged", "host-1", "host-2"])
        .await;
    assert_eq!(merged.code, Some(0), "{}{}", merged.stdout, merged.stderr);
    assert!(
        merged.stdout.contains("0 gaps, 0 duplicates"),
        "{}",
        merged.stdout
    );
    let (code, audit) = project.verify_at("merged").await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(audit["totals"]["completed"], 24, "{audit:#}");
    assert_eq!(audit["totals"]["unknown"], 0, "{audit:#}");
}

/// A prompt an earlier source answers is settled in the later one for each of its samples:
/// the audit adds up and a rerun sends nothing.
#[tokio::test]
async fn a_duplicate_of_an_earlier_source_is_settled_for_every_sample() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    let shared = "{\"prompt\": \"shared question\"}\n";
    project.write("data/chat.jsonl", format!("{}{shared}", rows("chat", 3)));
    project.write("data/math.jsonl", format!("{}{shared}", rows("math", 3)));
    let config = Config::new(&server.url())
        .generation("max-tokens = 16\nconcurrency = 3\nsamples = 2")
        .source("chat", "data/chat.jsonl")
        .source("math", "data/math.jsonl");
    project.config(&config);
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(server.chat_requests(), 14);
    let duplicates: Vec<Value> = project.rejected_of("math");
    let ids: BTreeSet<&str> = duplicates.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(ids.len(), 2, "{duplicates:?}");
    assert!(
        duplicates.iter().all(|r| r["kind"] == "duplicate"),
        "{duplicates:?}"
    );
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(audit["totals"]["completed"], 14, "{audit:#}");
    assert_eq!(audit["totals"]["rejected"], 2, "{audit:#}");
    let again = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(server.chat_requests(), 14, "nothing sent again");
}

/// `gen bench` measures what `gen run` sends: each source's settings and drawn values, its
/// samples back to back with their seeds, and token ids when the source asks for them (here
/// SGLang's way, after its 400). Before, a bench sent `[generation]`'s settings only.
#[tokio::test]
async fn a_bench_sends_what_the_run_sends() {
    let knobs = || Knobs {
        sglang_token_ids: true,
        ..Knobs::default()
    };
    let (runner, bencher) = (
        FakeOpenAi::start(knobs()).await,
        FakeOpenAi::start(knobs()).await,
    );
    let project = Project::new();
    project.write("data/chat.jsonl", rows("chat", 4));
    project.write("data/math.jsonl", rows("math", 4));
    let math = MATH.replace(
        "max-tokens = 24",
        "max-tokens = 24\nsamples = 2\ntoken-ids = true",
    );
    project.config(&two_sources(&runner.url(), "", &math));
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let url = bencher.url();
    let args = ["bench", "cfg.toml", "--url", &url, "--concurrency", "1,2"];
    let bench = project
        .run(&[&args[..], &["--requests", "6"]].concat())
        .await;
    assert_eq!(bench.code, Some(0), "{}\n{}", bench.stdout, bench.stderr);

    // Every body the bench sent is one the run sent (4 + 4 × 2 requests: none reused).
    let sent_by_run: BTreeSet<String> = (runner.received().iter())
        .map(|r| r.body.to_string())
        .collect();
    let answered: Vec<Received> = (bencher.received().into_iter())
        .filter(|r| r.body.get("return_token_ids").is_none())
        .collect();
    assert_eq!(answered.len(), 12, "{answered:?}");
    for request in &answered {
        assert!(
            sent_by_run.contains(&request.body.to_string()),
            "{}",
            request.body
        );
    }
    // A prompt's two samples go back to back, with a seed each.
    let math = bodies(&answered, "math");
    assert_eq!(math.len(), 8);
    for pair in math.chunks(2) {
        assert_eq!(pair[0].0, pair[1].0, "{math:?}");
        assert_ne!(pair[0].1["seed"], pair[1].1["seed"], "{math:?}");
        assert_eq!(pair[0].1["max_tokens"], 24);
        assert_eq!(pair[0].1["return_output_ids_in_sglext"], true);
    }
    assert!(
        bench.stdout.contains("  math: max_tokens 24, samples 2, "),
        "{}",
        bench.stdout
    );
}
