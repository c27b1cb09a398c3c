//! `gen bench` end to end against fake OpenAI servers: a sweep over two servers side by side
//! with a plot, fresh prompts per level and servers taking turns (checked by what the fake
//! servers received), `--json`, `auto`, and the errors a user meets first.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use gen_tests::fake_openai::{FakeOpenAi, Knobs, Received};
use support::{Config, Project};

fn slow_server(delay_ms: u64) -> Knobs {
    Knobs {
        delay: Duration::from_millis(delay_ms),
        ..Knobs::default()
    }
}

/// A project with two prepared sources (6 prompts), prepared and generated against `url`.
async fn prepared(url: &str) -> (Project, String) {
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n{\"prompt\": \"three\"}\n",
    );
    gen_.write(
        "data/b.jsonl",
        "{\"prompt\": \"four\"}\n{\"prompt\": \"five\"}\n{\"prompt\": \"six\"}\n",
    );
    let config = gen_.config(
        &Config::new(url)
            .source("alpha", "data/a.jsonl")
            .source("beta", "data/b.jsonl"),
    );
    let run = gen_.run(&["run", &config]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    (gen_, config)
}

/// The tok/s cells of the table row for level `level`: one per server, markers stripped.
fn tokens_per_second(table: &str, level: usize) -> Vec<f64> {
    let row = table
        .lines()
        .find(|line| line.split_whitespace().next() == Some(&level.to_string()))
        .unwrap_or_else(|| panic!("no row for L={level}:\n{table}"));
    row.split_whitespace()
        .skip(1)
        .step_by(4)
        .map(|cell| {
            cell.trim_end_matches(['*', '!'])
                .parse()
                .unwrap_or_else(|e| panic!("tok/s cell `{cell}`: {e}\n{table}"))
        })
        .collect()
}

#[tokio::test]
async fn sweeps_two_servers_side_by_side_and_plots_them() {
    let fast = FakeOpenAi::start(slow_server(100)).await;
    let slow = FakeOpenAi::start(slow_server(300)).await;
    let (gen_, config) = prepared(&fast.url()).await;
    let before = fast.chat_requests();

    let (fast_url, slow_url) = (fast.url(), slow.url());
    let bench = gen_
        .run(&[
            "bench",
            &config,
            "--concurrency",
            "1,4",
            "--requests",
            "8",
            "--url",
            &fast_url,
            "--url",
            &slow_url,
            "--plot",
            "out.svg",
        ])
        .await;
    assert_eq!(bench.code, Some(0), "{}", bench.stderr);
    // A level's progress line is drawn only on a terminal: a pipe gets one line per level.
    assert!(
        !bench.stderr.contains("requests finished") && !bench.stderr.contains('\r'),
        "{}",
        bench.stderr
    );
    let table = &bench.stdout;
    assert!(
        table.contains(&fast_url) && table.contains(&slow_url),
        "{table}"
    );
    assert!(table.lines().all(|l| l.chars().count() <= 80), "{table}");
    assert!(table.contains("tok/s") && table.contains("TTFT"), "{table}");
    let at_1 = tokens_per_second(table, 1);
    let at_4 = tokens_per_second(table, 4);
    assert_eq!((at_1.len(), at_4.len()), (2, 2), "{table}");
    assert!(at_4[0] > at_1[0], "the fast server scales with L:\n{table}");
    assert!(
        at_1[0] > at_1[1],
        "the slow server is slower at L=1:\n{table}"
    );
    let best_row = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some("4"))
        .expect("L=4 row");
    assert!(best_row.contains('*'), "L=4 is the best level:\n{table}");
    assert_eq!(fast.chat_requests() - before, 16, "8 requests per level");
    assert_eq!(slow.chat_requests(), 16);

    let svg = gen_.read("out.svg");
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    assert!(svg.contains("tok/s"), "axis label in the plot");
}

/// The prompts of `received`, `per_level` at a time: one set per level, in order.
fn prompts_per_level(received: &[Received], per_level: usize) -> Vec<BTreeSet<String>> {
    received
        .chunks(per_level)
        .map(|chunk| chunk.iter().map(|r| r.prompt.clone()).collect())
        .collect()
}

#[tokio::test]
async fn each_level_gets_new_prompts_and_servers_take_turns() {
    let preparer = FakeOpenAi::start(Knobs::default()).await;
    let (gen_, config) = prepared(&preparer.url()).await;
    let a = FakeOpenAi::start(slow_server(20)).await;
    let b = FakeOpenAi::start(slow_server(20)).await;
    let (a_url, b_url) = (a.url(), b.url());
    let bench = gen_
        .run(&[
            "bench",
            &config,
            "--concurrency",
            "1,2,4",
            "--requests",
            "3",
            "--url",
            &a_url,
            "--url",
            &b_url,
        ])
        .await;
    assert_eq!(bench.code, Some(0), "{}", bench.stderr);

    // 6 prepared prompts, 3 per level: L=1 and L=2 get disjoint halves, L=4 must reuse.
    let a_levels = prompts_per_level(&a.received(), 3);
    let b_levels = prompts_per_level(&b.received(), 3);
    assert_eq!(a_levels.len(), 3, "{a_levels:?}");
    assert_eq!(
        a_levels, b_levels,
        "both servers get the same prompts per level"
    );
    assert!(a_levels[0].is_disjoint(&a_levels[1]), "{a_levels:?}");
    assert_eq!(a_levels[0].len() + a_levels[1].len(), 6, "{a_levels:?}");
    assert!(
        a_levels[2].is_subset(&(&a_levels[0] | &a_levels[1])),
        "{a_levels:?}"
    );
    assert!(
        bench
            .stdout
            .contains("! prompts ran out at L=4: from there levels reuse prompts sent before"),
        "{}",
        bench.stdout
    );
    assert!(
        bench
            .stderr
            .contains("the 6 prepared prompts ran out at L=4"),
        "{}",
        bench.stderr
    );

    // Merged by arrival time, the requests come in turns: A L=1, B L=1, A L=2, B L=2, ….
    let mut arrivals: Vec<(std::time::Instant, &str)> = a
        .received()
        .into_iter()
        .map(|r| (r.at, "A"))
        .chain(b.received().into_iter().map(|r| (r.at, "B")))
        .collect();
    arrivals.sort();
    let mut turns: Vec<&str> = arrivals.iter().map(|(_, server)| *server).collect();
    turns.dedup();
    assert_eq!(turns, ["A", "B", "A", "B", "A", "B"]);
    assert!(
        bench.stdout.contains("servers take turns at each level"),
        "{}",
        bench.stdout
    );
    assert!(
        bench.stdout.lines().all(|l| l.chars().count() <= 80),
        "{}",
        bench.stdout
    );
}

#[tokio::test]
async fn json_reports_every_level_of_the_config_server() {
    let server = FakeOpenAi::start(slow_server(20)).await;
    let (gen_, config) = prepared(&server.url()).await;
    let bench = gen_
        .run(&[
            "bench",
            &config,
            "--concurrency",
            "1,2",
            "--requests",
            "4",
            "--json",
        ])
        .await;
    assert_eq!(bench.code, Some(0), "{}", bench.stderr);
    let report: serde_json::Value = serde_json::from_str(&bench.stdout).expect("--json parses");
    assert_eq!(report["requests_per_level"], 4);
    assert_eq!(report["prompts"], 6);
    assert_eq!(report["prompts_reused_from"], 2, "8 requests, 6 prompts");
    assert_eq!(report["sources"], serde_json::json!(["alpha", "beta"]));
    let servers = report["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0]["url"], server.url());
    assert_eq!(servers[0]["model"], "fake-model");
    let levels = servers[0]["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 2);
    for (level, expected) in levels.iter().zip([1, 2]) {
        assert_eq!(level["concurrency"], expected);
        assert_eq!(level["completed"], 4);
        assert_eq!(level["failed"], 0);
        assert!(level["output_tokens"].as_u64() > Some(0), "{level}");
        assert!(level["output_tokens_per_s"].as_f64() > Some(0.0), "{level}");
        for key in ["latency_p50_s", "latency_p95_s", "ttft_p50_s"] {
            assert!(level[key].as_f64() >= Some(0.02), "{key}: {level}");
        }
    }
    assert!(servers[0]["best_concurrency"].is_u64());
}

#[tokio::test]
async fn auto_doubles_until_a_level_could_not_fill() {
    let server = FakeOpenAi::start(slow_server(50)).await;
    let (gen_, config) = prepared(&server.url()).await;
    let bench = gen_
        .run(&["bench", &config, "--requests", "8", "--json"])
        .await;
    assert_eq!(bench.code, Some(0), "{}", bench.stderr);
    let report: serde_json::Value = serde_json::from_str(&bench.stdout).expect("--json parses");
    let server_report = &report["servers"][0];
    let levels: Vec<u64> = server_report["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .filter_map(|l| l["concurrency"].as_u64())
        .collect();
    assert_eq!(levels, [1, 2, 4, 8], "{server_report}");
    assert!(
        server_report["stopped"]
            .as_str()
            .is_some_and(|s| s.contains("8 requests per level")),
        "{server_report}"
    );
}

#[tokio::test]
async fn without_prepared_prompts_it_says_to_run_gen_prepare_first() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", "{\"prompt\": \"one\"}\n");
    let config = gen_.config(&Config::new(&server.url()).source("alpha", "data/a.jsonl"));
    let bench = gen_.run(&["bench", &config, "--concurrency", "1"]).await;
    assert_eq!(bench.code, Some(1), "{}", bench.stderr);
    assert!(
        bench.stderr.contains("no prepared prompts")
            && bench
                .stderr
                .contains("run `gen prepare cfg.toml` first (it needs no server)"),
        "{}",
        bench.stderr
    );
    assert_eq!(server.chat_requests(), 0);

    let usage = gen_
        .run(&["bench", &config, "--concurrency", "1,zero"])
        .await;
    assert_eq!(usage.code, Some(2), "{}", usage.stderr);
    assert!(
        usage.stderr.contains("`zero` is not a positive integer"),
        "{}",
        usage.stderr
    );
}

/// Against the real llama-server: slow, so `.config/nextest.toml` leaves `llama` modules out of
/// the default profile.
mod llama {
    use super::*;

    #[tokio::test]
    async fn a_config_that_launches_its_server_is_benched_on_the_server_it_launches() {
        if let Some(reason) = support::llama_skip_reason() {
            eprintln!("skipped: {reason}");
            return;
        }
        let (bin, model) = gen_tests::llama::installed().expect("installed");
        let gen_ = Project::new();
        support::llama_fruit_project(&gen_, &bin, &model, 4, "max-tokens = 8");
        let prepared = gen_.run(&["prepare", "cfg.toml"]).await;
        assert_eq!(prepared.code, Some(0), "{}", prepared.stderr);
        let bench = gen_
            .run(&[
                "bench",
                "cfg.toml",
                "--concurrency",
                "1,2",
                "--requests",
                "2",
            ])
            .await;
        assert_eq!(bench.code, Some(0), "{}{}", bench.stdout, bench.stderr);
        assert!(
            bench
                .stderr
                .contains("gen bench: starting the inference server (log: ")
                && bench.stderr.contains("gen bench: A = http://127.0.0.1:")
                && !bench.stderr.contains("builder error"),
            "{}",
            bench.stderr
        );
        assert!(bench.stdout.contains("L"), "{}", bench.stdout);
    }
}

/// A request the server did not take (a keep-alive connection it had just closed, as the real
/// llama-server does now and then; here a 503 while "loading") is asked once more, as `gen
/// run` would: the level completes every request and says how many were asked again. Before,
/// each was a failure of the level.
#[tokio::test]
async fn a_request_the_server_did_not_take_is_asked_again_not_failed() {
    let preparer = FakeOpenAi::start(Knobs::default()).await;
    let (gen_, config) = prepared(&preparer.url()).await;
    let server = FakeOpenAi::start(Knobs {
        fail_first: 1,
        ..Knobs::default()
    })
    .await;
    let url = server.url();
    let args = ["bench", &config, "--url", &url, "--concurrency", "1"];
    let bench = gen_
        .run(&[&args[..], &["--requests", "4", "--json"]].concat())
        .await;
    assert_eq!(bench.code, Some(0), "{}\n{}", bench.stdout, bench.stderr);
    let report: serde_json::Value = serde_json::from_str(&bench.stdout).expect("--json parses");
    let level = &report["servers"][0]["levels"][0];
    assert_eq!(
        (&level["completed"], &level["failed"], &level["retried"]),
        (
            &serde_json::json!(4),
            &serde_json::json!(0),
            &serde_json::json!(1)
        ),
        "{level}"
    );
    assert_eq!(server.chat_requests(), 5);
}
