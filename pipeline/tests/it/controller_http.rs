//! Auto concurrency end to end: real `gen run` against the fake server in its simulated mode
//! (`gen_tests::fake_openai::SimKnobs`) on 127.0.0.1, which answers like SGLang, vLLM or
//! llama.cpp — chat streams decoded by a simulated continuous-batching engine on the real
//! clock, and that server's own capacity and load endpoints. The tuner reads them over HTTP as
//! it reads a real server.
//!
//! `bench_controller_http` (ignored) measures whole jobs (makespan from the first request to the
//! last answer) at fixed levels and with `"auto"`: `scripts/bench-controller.sh`
//! (`GEN_BENCH_GEN=/path/to/gen` runs another build, e.g. an older one, against the same
//! servers).

use crate::support;

use std::time::Duration;

use gen_tests::fake_openai::{FakeOpenAi, Knobs, SimKnobs};
use gen_tests::sim::{Flavour, ServerConfig, Workload};
use support::{Config, Project};

/// Virtual seconds of the engine per real second: a job that takes the simulated engine 45
/// minutes takes 27 s.
const SPEED: f64 = 100.0;

/// Runs a job of `prompts` distinct prompts at `concurrency` against a fresh simulated
/// server; returns its makespan and `gen run`'s stderr.
async fn job(
    flavour: Flavour,
    server: ServerConfig,
    prompts: usize,
    concurrency: &str,
) -> (Duration, String, Project) {
    job_on(SimKnobs::new(flavour, server, SPEED), prompts, concurrency).await
}

/// [`job`] on a server built from `knobs`. With `prompt_tokens_from_text`, each prompt's text
/// is as long as its tokens (4 bytes a token, drawn from the workload's prompt range), so
/// `gen` can estimate them before sending; `max-tokens` is the workload's longest output.
async fn job_on(knobs: SimKnobs, prompts: usize, concurrency: &str) -> (Duration, String, Project) {
    let max_tokens = knobs.workload.output_max;
    let mut lengths = knobs.workload.reseeded(0x5eed);
    let from_text = knobs.prompt_tokens_from_text;
    let fake = FakeOpenAi::start(Knobs {
        sim: Some(knobs),
        ..Knobs::default()
    })
    .await;
    let gen_ = Project::new();
    let rows: String = (0..prompts)
        .map(|i| {
            let mut text = format!("Tell me about item {i}.");
            if from_text {
                let bytes = 4 * lengths.next_request().prompt_tokens as usize;
                while text.len() < bytes {
                    text.push_str(" and more");
                }
            }
            format!("{{\"prompt\": \"{text}\"}}\n")
        })
        .collect();
    gen_.write("data/job.jsonl", &rows);
    gen_.config(
        &Config::new(&fake.url())
            .generation(&format!(
                "max-tokens = {max_tokens}\nconcurrency = {concurrency}"
            ))
            .source("job", "data/job.jsonl"),
    );
    let mut run = gen_.command(&["run", "cfg.toml"]);
    // Another build of `gen` (an older one, to measure what changed).
    if let Ok(binary) = std::env::var("GEN_BENCH_GEN") {
        run = run.binary(&binary);
    }
    let out = run.output().await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let makespan = fake.sim_makespan().expect("the job ran");
    (makespan, out.stderr, gen_)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tuner_reads_each_servers_caps_over_http_and_starts_there() {
    // (flavour, server, what the start-up line says)
    let cases = [
        (
            Flavour::Sglang,
            ServerConfig::cap_bound(),
            "concurrency auto: starting at 192 (the server runs 128 at once, 64 more wait there); read from SGLang: /server_info, /v1/loads, /metrics (128 running at most, 5000000 KV tokens)",
        ),
        (
            Flavour::Vllm,
            ServerConfig::kv_bound(),
            "concurrency auto: starting at 32 (the KV cache fits about 32 requests of 11.0k tokens at 90% use); read from vLLM: /metrics (running cap unknown, 400000 KV tokens)",
        ),
        (
            Flavour::LlamaCpp,
            ServerConfig::new(8 * 32_768, 8),
            "concurrency auto: starting at 12 (the server runs 8 at once, 4 more wait there); read from llama.cpp: /props, /slots, /metrics (8 running at most, KV unknown)",
        ),
    ];
    for (flavour, server, says) in cases {
        let (_, stderr, gen_) = job(flavour, server, 24, "\"auto\"").await;
        assert!(stderr.contains(says), "{flavour:?}: {stderr}");
        let status: serde_json::Value =
            serde_json::from_str(&gen_.read_run("status.json")).expect("status");
        let line = status["servers"][0]["decision"]
            .as_str()
            .expect("decision")
            .to_owned();
        for symbol in ["E_resident", "u=", "L_kv"] {
            assert!(!line.contains(symbol), "{line}");
        }
        let saved: serde_json::Value =
            serde_json::from_str(&gen_.read_run("controller.json")).expect("saved");
        assert!(saved["reached"]["limit"].as_u64().is_some(), "{saved}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_a_job_goes_to_the_server_at_once() {
    // 80 prompts of 0.3k tokens and answers of 2k–4k tokens on a 100k-token cache: auto starts
    // at 38, at 56 once the prompts' length is known; the run tells its tuner what is left to
    // send, so the rest goes at once (the cache has room while the requests are young) instead
    // of as the first ones end.
    let mut workload = Workload::long_outputs(0);
    (
        workload.output_median,
        workload.output_min,
        workload.output_max,
    ) = (3000.0, 2000, 4000);
    let knobs = SimKnobs {
        workload,
        prompt_tokens_from_text: true,
        ..SimKnobs::new(Flavour::Vllm, ServerConfig::new(100_000, 256), 10.0)
    };
    let (_, stderr, _) = job_on(knobs, 80, "\"auto\"").await;
    assert!(stderr.contains("starting at 38"), "{stderr}");
    assert!(stderr.contains("prompts: 56 → "), "{stderr}");
}

/// The end-to-end table in `BENCHMARKS.md`: run with `scripts/bench-controller.sh`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with scripts/bench-controller.sh"]
async fn bench_controller_http() {
    let prompts: usize = std::env::var("GEN_BENCH_HTTP_PROMPTS")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(800);
    let servers = [
        (
            "SGLang, KV-bound",
            Flavour::Sglang,
            ServerConfig::kv_bound(),
            vec![32, 48, 64, 96],
        ),
        (
            "vLLM, KV-bound",
            Flavour::Vllm,
            ServerConfig::kv_bound(),
            vec![32, 48, 64, 96],
        ),
        (
            "SGLang, cap-bound",
            Flavour::Sglang,
            ServerConfig::cap_bound(),
            vec![96, 128, 160],
        ),
        (
            "vLLM, cap-bound",
            Flavour::Vllm,
            ServerConfig::cap_bound(),
            vec![96, 128, 160],
        ),
    ];
    println!("| server | prompts | fixed levels: makespan | best fixed | auto | **auto / best** |");
    println!("|---|---|---|---|---|---|");
    let only = std::env::var("GEN_BENCH_HTTP_ONLY").unwrap_or_default();
    for (name, flavour, server, levels) in servers {
        if !name.contains(&only) {
            continue;
        }
        let mut fixed = Vec::new();
        for level in levels {
            let (span, _, _) = job(flavour, server.clone(), prompts, &level.to_string()).await;
            fixed.push((level, span.as_secs_f64()));
        }
        let (auto, stderr, _) = job(flavour, server.clone(), prompts, "\"auto\"").await;
        let auto = auto.as_secs_f64();
        let (best_l, best) = fixed
            .iter()
            .copied()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("levels");
        let cells: Vec<String> = fixed
            .iter()
            .map(|(l, s)| format!("{l}: {s:.1} s"))
            .collect();
        println!(
            "| {name} | {prompts} | {} | {best_l} | {auto:.1} s | **{:.3}** |",
            cells.join(", "),
            best / auto
        );
        for line in stderr
            .lines()
            .filter(|l| l.contains("concurrency"))
            .take(12)
        {
            eprintln!("    {line}");
        }
    }
}

/// Issue 23's jobs end to end: a few minutes of engine time each, sped up `speed` times (each
/// job ~20–40 s of real time), prompts whose text is as long as their tokens. Run with
/// `TABLES=short scripts/bench-controller.sh`; `GEN_BENCH_HTTP_ONLY` picks rows by name,
/// `GEN_BENCH_GEN` another build for auto (fixed levels do not depend on the build, so
/// `GEN_BENCH_AUTO_ONLY=1` skips them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with scripts/bench-controller.sh"]
async fn bench_short_jobs_http() {
    // (name, flavour, server, lengths, prompts, speed, fixed levels). "Dear recompute":
    // prefill 1.5·10⁻⁴ s a token, the engine shape whose best fixed level is the KV knee, as
    // on the simulator issue 23 measured (best fixed 44–48 KV-bound).
    let short = Workload::short(0);
    let dear = |kv_tokens| ServerConfig {
        prefill_per_token: 1.5e-4,
        ..ServerConfig::new(kv_tokens, 256)
    };
    let rows = [
        (
            "vLLM, KV-bound (22k KV, dear recompute), short answers",
            Flavour::Vllm,
            dear(22_000),
            short.clone(),
            800,
            SHORT_SPEED,
            vec![40, 48, 56, 64],
        ),
        (
            "vLLM, KV-bound (22k KV, dear recompute), short answers",
            Flavour::Vllm,
            dear(22_000),
            short.clone(),
            2000,
            SHORT_SPEED,
            vec![48, 56, 64],
        ),
        (
            "vLLM, prefill-heavy (110k KV, dear recompute)",
            Flavour::Vllm,
            dear(110_000),
            Workload::prefill_heavy(0),
            800,
            SHORT_SPEED,
            vec![40, 48, 56],
        ),
        (
            "vLLM, reasoning-length (250k KV, dear recompute)",
            Flavour::Vllm,
            dear(250_000),
            Workload::long_outputs(0),
            300,
            SHORT_SPEED,
            vec![128, 192, 256],
        ),
        (
            "vLLM, cap-bound (cap 48 not reported)",
            Flavour::Vllm,
            ServerConfig::new(1_000_000, 48),
            short.clone(),
            800,
            SHORT_SPEED,
            vec![48, 56],
        ),
        (
            "llama.cpp, 8 slots",
            Flavour::LlamaCpp,
            ServerConfig::new(8 * 4096, 8),
            short.clone(),
            800,
            4.0 * SHORT_SPEED,
            vec![8, 10],
        ),
        (
            "vLLM, KV-bound (22k KV), short answers",
            Flavour::Vllm,
            ServerConfig::new(22_000, 256),
            short,
            800,
            SHORT_SPEED,
            vec![48, 64, 96],
        ),
    ];
    let only = std::env::var("GEN_BENCH_HTTP_ONLY").unwrap_or_default();
    let auto_only = std::env::var_os("GEN_BENCH_AUTO_ONLY").is_some();
    println!(
        "| server | prompts | speed | fixed levels: makespan | best fixed | auto | **auto / best** |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, flavour, server, workload, prompts, speed, levels) in rows {
        if !format!("{name} {prompts}").contains(&only) {
            continue;
        }
        let knobs = SimKnobs {
            workload,
            prompt_tokens_from_text: true,
            ..SimKnobs::new(flavour, server, speed)
        };
        let mut fixed = Vec::new();
        for level in levels.iter().filter(|_| !auto_only) {
            let (span, _, _) = job_on(knobs.clone(), prompts, &level.to_string()).await;
            fixed.push((*level, span.as_secs_f64()));
        }
        let (auto, stderr, _) = job_on(knobs.clone(), prompts, "\"auto\"").await;
        let auto = auto.as_secs_f64();
        let cells: Vec<String> = fixed
            .iter()
            .map(|(l, s)| format!("{l}: {s:.1} s"))
            .collect();
        let best = fixed.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1));
        let (best_l, ratio) = best.map_or((String::from("–"), String::from("–")), |(l, b)| {
            (l.to_string(), format!("{:.3}", b / auto))
        });
        println!(
            "| {name} | {prompts} | {speed}× | {} | {best_l} | {auto:.1} s | **{ratio}** |",
            cells.join(", "),
        );
        for line in stderr
            .lines()
            .filter(|l| l.contains("concurrency"))
            .take(12)
        {
            eprintln!("    {line}");
        }
    }
}

/// Virtual seconds per real second for issue 23's jobs: a job of ~2 minutes of engine time
/// takes ~30 s.
const SHORT_SPEED: f64 = 4.0;
