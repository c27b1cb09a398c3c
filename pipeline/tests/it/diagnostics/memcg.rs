//! A real kernel OOM kill or an 80 MB source inside the worker's memory cgroup: slow, and one
//! at a time (each reads the kernel log for its own worker's kill line), so
//! `.config/nextest.toml` runs the tests of this module in the `memcg` group and leaves them
//! out of the default profile. Each skips with a printed reason where no memory cgroup can
//! be made.

use gen_tests::fake_openai::{FakeOpenAi, Knobs};

use super::{config, oom_skip_reason, status, worker};
use crate::support::Project;

#[tokio::test]
async fn a_worker_over_its_memory_limit_is_oom_killed_and_classified_from_the_kernel_line() {
    if let Some(reason) = oom_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write("data/ok.jsonl", "{\"prompt\": \"fine\"}\n");
    let hog = "import time\nchunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n    time.sleep(0.01)\n";
    gen_.config(
        &config(&server.url())
            .python_source("hog", hog, "memory-limit = \"64M\"")
            .source("ok", "data/ok.jsonl"),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);

    let record = worker(&gen_, "hog");
    let verdict = &record["verdict"];
    assert_eq!(verdict["class"], "oom", "{verdict:#}");
    assert_eq!(verdict["subtype"], "kernel_memcg", "{record:#}");
    let evidence = verdict["evidence"].to_string();
    assert!(evidence.contains("Killed process"), "{evidence}");
    let status = status(&gen_).await;
    assert_eq!(status["sources"][0]["phase"], "failed");
    assert!(
        status["sources"][0]["verdict"]["next_action"]
            .as_str()
            .unwrap_or("")
            .contains("memory-limit"),
        "{status:#}"
    );
    // The other source was not affected.
    assert_eq!(status["sources"][1]["phase"], "done");

    let explained = gen_.run(&["diagnose", "hog", "--config", "cfg.toml"]).await;
    assert_eq!(explained.code, Some(0), "{}", explained.stderr);
    assert!(
        explained
            .stdout
            .starts_with("source `hog`: oom (kernel memcg)"),
        "{}",
        explained.stdout
    );
}

#[tokio::test]
async fn without_dev_kmsg_the_kernel_line_comes_from_dmesg_after_the_fact() {
    if let Some(reason) = oom_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    let hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))\n";
    gen_.config(&config(&server.url()).python_source("hog", hog, "memory-limit = \"48M\""));
    let out = gen_
        .run_with_env(
            &["run", "cfg.toml"],
            &[("GEN_TEST_KMSG", "/nonexistent/kmsg")],
        )
        .await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let record = worker(&gen_, "hog");
    let verdict = &record["verdict"];
    assert_eq!(verdict["class"], "oom", "{record:#}");
    assert_eq!(verdict["subtype"], "kernel_memcg", "{record:#}");
    assert!(
        verdict["evidence"].to_string().contains("Killed process"),
        "{record:#}"
    );
}

/// Keeping every row of a source larger than its worker's memory limit: the sample goes on on
/// disk instead of holding the prompts, so the worker is not OOM-killed.
#[tokio::test]
async fn keeping_every_row_of_a_source_larger_than_the_memory_limit_succeeds() {
    if let Some(reason) = oom_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    // 2,000 distinct prompts of 40 KB: 81 MB of input, more than the 64 MiB limit (held in
    // memory, as before, they took 125 MB).
    let rows = 2_000;
    let filler = "lorem ipsum dolor sit amet ".repeat(1500);
    let mut data = String::with_capacity(rows * (filler.len() + 64));
    for i in 0..rows {
        data.push_str(&format!("{{\"prompt\": \"row {i}: {filler}\"}}\n"));
    }
    gen_.write("data/big.jsonl", &data);
    drop(data);
    gen_.config(&config(&server.url()).source_with(
        "big",
        "data/big.jsonl",
        "limit = 100000000\nmemory-limit = \"64M\"",
    ));
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let manifest: serde_json::Value =
        serde_json::from_str(&gen_.read_run("sources/big/manifest.json")).expect("manifest");
    assert_eq!(manifest["prompts"], rows, "{manifest:#}");
    let record = worker(&gen_, "big");
    let peak = record["report"]["peak_rss_bytes"]
        .as_u64()
        .expect("peak RSS");
    assert!(
        peak < 64 << 20,
        "peak RSS {peak} under the limit: {record:#}"
    );
    let records = gen_.completions_of("big");
    assert_eq!(records.len(), rows);
}

/// A row too large for the worker's memory limit: the advice after the OOM kill is sized from
/// the input's largest row (a row takes several times its size to hold and parse), not only
/// from the old limit, which would advise a limit that dies again.
#[tokio::test]
async fn an_oom_on_a_huge_row_advises_a_limit_sized_from_that_row() {
    if let Some(reason) = oom_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    let huge = "x".repeat(48 << 20);
    gen_.write(
        "data/huge.jsonl",
        format!("{{\"prompt\": \"small\"}}\n{{\"prompt\": \"{huge}\"}}\n"),
    );
    drop(huge);
    gen_.config(&config(&server.url()).source_with(
        "huge",
        "data/huge.jsonl",
        "memory-limit = \"64M\"",
    ));
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);

    let record = worker(&gen_, "huge");
    let verdict = &record["verdict"];
    assert_eq!(verdict["class"], "oom", "{record:#}");
    let advice: Vec<&str> = verdict["advice"]
        .as_array()
        .expect("advice")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    let advice = advice.join("\n");
    assert!(
        advice.contains("the largest input row is 48 MiB"),
        "{advice}"
    );
    // At least the limit (or the peak) + 5 × 48 MiB; twice the old limit would be 128 MiB.
    let suggested: u64 = advice
        .split("memory-limit = \"")
        .nth(1)
        .and_then(|rest| rest.split('M').next())
        .and_then(|mib| mib.parse().ok())
        .expect("a suggested memory-limit in MiB");
    assert!(suggested >= 64 + 5 * 48, "{advice}");
}
