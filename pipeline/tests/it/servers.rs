//! `gen run` against several fake servers (`[server] urls`): one shared queue, a server down
//! from the start or stalling mid-run hands its requests to the others, giving up after
//! `max-outage-secs` leaves everything resumable; and the dispatch order and cross-source
//! deduplication that decide what is sent at all.

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use serde_json::Value;
use support::{Config, Project, wait_for};

/// Waits (polling, bounded) until `server` has received `n` chat requests.
async fn received(server: &FakeOpenAi, n: usize) {
    wait_for(
        &format!("{n} requests at the server"),
        Duration::from_secs(60),
    )
    .until(|| server.chat_requests() >= n)
    .await;
}

fn prompts(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"prompt\": \"prompt number {i}\"}}\n"))
        .collect()
}

fn contents(gen_: &Project, source: &str) -> Vec<String> {
    let mut contents: Vec<String> = gen_
        .completions_of(source)
        .iter()
        .map(|r| r["content"].as_str().unwrap_or("").to_owned())
        .collect();
    contents.sort();
    contents
}

fn expected(n: usize) -> Vec<String> {
    let mut all: Vec<String> = (0..n).map(|i| format!("echo: prompt number {i}")).collect();
    all.sort();
    all
}

fn status(gen_: &Project) -> Value {
    serde_json::from_str(&gen_.read_run("status.json")).expect("status.json")
}

#[tokio::test]
async fn two_servers_share_one_queue_and_every_prompt_is_answered_once() {
    let slow = || Knobs {
        delay: Duration::from_millis(30),
        ..Knobs::default()
    };
    let a = FakeOpenAi::start(slow()).await;
    let b = FakeOpenAi::start(slow()).await;
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", prompts(24));
    gen_.config(
        &Config::with_server(&format!("urls = [\"{}\", \"{}\"]", a.url(), b.url()))
            .generation("max-tokens = 16\nconcurrency = 2")
            .source("alpha", "data/a.jsonl"),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(contents(&gen_, "alpha"), expected(24));
    // Both servers worked, and nothing was sent twice.
    assert_eq!(a.chat_requests() + b.chat_requests(), 24);
    assert!(
        a.chat_requests() >= 4 && b.chat_requests() >= 4,
        "{} / {}",
        a.chat_requests(),
        b.chat_requests()
    );
    let servers = status(&gen_)["servers"].clone();
    let completed: Vec<u64> = servers
        .as_array()
        .expect("servers")
        .iter()
        .map(|s| s["completed"].as_u64().expect("completed"))
        .collect();
    assert_eq!(
        completed,
        [a.chat_requests() as u64, b.chat_requests() as u64]
    );
}

#[tokio::test]
async fn a_server_down_from_the_start_gets_nothing_and_the_others_do_the_work() {
    let a = FakeOpenAi::start(Knobs::default()).await;
    // A port nothing listens on.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", listener.local_addr().expect("addr"))
    };
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", prompts(6));
    gen_.config(
        &Config::with_server(&format!("urls = [\"{dead}\", \"{}\"]", a.url()))
            .generation("max-tokens = 16\nconcurrency = 2")
            .source("alpha", "data/a.jsonl"),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(contents(&gen_, "alpha"), expected(6));
    assert!(
        out.stderr.contains(&format!("server {dead} is down")),
        "{}",
        out.stderr
    );
    let servers = status(&gen_)["servers"].clone();
    assert!(servers[0]["down_since_unix_ms"].is_u64(), "{servers}");
    assert_eq!(servers[0]["completed"], 0);
    assert_eq!(servers[1]["completed"], 6);
    let table = gen_.run(&["status", "cfg.toml"]).await;
    assert!(
        table.stdout.contains(&format!("server {dead} DOWN since"))
            && table
                .stdout
                .contains("its requests went to the other servers, nothing lost"),
        "{}",
        table.stdout
    );
}

#[tokio::test]
async fn a_server_that_stalls_and_dies_hands_its_requests_to_the_other() {
    let a = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(20),
        ..Knobs::default()
    })
    .await;
    // Accepts requests and never answers them.
    let b = FakeOpenAi::start(Knobs {
        delay: Duration::from_secs(3600),
        ..Knobs::default()
    })
    .await;
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", prompts(10));
    gen_.config(
        &Config::with_server(&format!(
            "urls = [\"{}\", \"{}\"]\nstall-secs = 2",
            a.url(),
            b.url()
        ))
        .generation("max-tokens = 16\nconcurrency = 2")
        .source("alpha", "data/a.jsonl"),
    );
    let kill_b = async {
        received(&b, 2).await;
        // Its listener closes: `/health` no longer answers, the two requests hang on.
        drop(b);
    };
    let (out, ()) = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(gen_.run(&["run", "cfg.toml"]), kill_b)
    })
    .await
    .expect("the run does not wait on a dead server");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(contents(&gen_, "alpha"), expected(10));
    assert_eq!(a.chat_requests(), 10, "b's two requests moved to a");
    assert!(
        out.stderr.contains("no token on any of its 2 streams"),
        "{}",
        out.stderr
    );
    let records = gen_.completions_of("alpha");
    assert!(
        records.iter().all(|r| r["attempts"] == 1),
        "moving to another server costs no attempt"
    );
}

#[tokio::test]
async fn with_every_server_down_gen_gives_up_after_max_outage_secs_and_a_rerun_resumes() {
    let knobs = || Knobs {
        delay: Duration::from_millis(50),
        ..Knobs::default()
    };
    let server = FakeOpenAi::start(knobs()).await;
    let addr = server.addr;
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", prompts(8));
    gen_.config(
        &Config::new(&server.url())
            .server("max-outage-secs = 1")
            .generation("max-tokens = 16\nconcurrency = 1")
            .source("alpha", "data/a.jsonl"),
    );
    let stop = async {
        received(&server, 3).await;
        drop(server);
    };
    let (out, ()) = tokio::join!(gen_.run(&["run", "cfg.toml"]), stop);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("giving up: no server has answered for 1 s (`max-outage-secs`)"),
        "{}",
        out.stderr
    );
    let after_outage = status(&gen_);
    let source = &after_outage["sources"][0];
    assert_eq!(source["phase"], "prepared", "resumable, not failed");
    assert_eq!(source["failed"], 0);
    let done_before = source["done"].as_u64().expect("done");
    assert!((2..8).contains(&done_before), "{done_before}");
    assert!(
        !gen_.source_path("alpha", "rejected.jsonl").exists(),
        "no prompt was set aside"
    );

    let _back = FakeOpenAi::start_at(addr, knobs()).await;
    let again = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(contents(&gen_, "alpha"), expected(8));
}

#[tokio::test]
async fn longest_first_sends_the_longest_prompts_first() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    let lengths = [3, 40, 12, 25, 7];
    let rows: String = lengths
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{{\"prompt\": \"{i}{}\"}}\n", "x".repeat(*n)))
        .collect();
    gen_.write("data/a.jsonl", &rows);
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 16\nconcurrency = 1")
            .source_with("alpha", "data/a.jsonl", "order = \"longest-first\""),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let sent: Vec<usize> = server
        .received()
        .iter()
        .map(|r| r.prompt.len() - 1)
        .collect();
    assert_eq!(sent, [40, 25, 12, 7, 3]);
}

#[tokio::test]
async fn a_prompt_in_two_sources_is_answered_once_by_the_earlier_source() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"shared\"}\n{\"prompt\": \"only a\"}\n",
    );
    // Six rows, a sample of five: the first sample holds `shared` and leaves one `b` out.
    gen_.write(
        "data/b.jsonl",
        "{\"question\": \"b1\"}\n{\"question\": \"shared\"}\n{\"question\": \"b2\"}\n{\"question\": \"b3\"}\n{\"question\": \"b4\"}\n{\"question\": \"b5\"}\n",
    );
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 16\nconcurrency = 2")
            .source("alpha", "data/a.jsonl")
            .source_with(
                "beta",
                "data/b.jsonl",
                "prompt-field = \"question\"\nlimit = 5",
            ),
    );
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(contents(&gen_, "alpha"), ["echo: only a", "echo: shared"]);
    // Prepared again without alpha's prompts: still `limit` prompts of its own.
    assert!(
        out.stderr
            .contains("`beta`: preparing again: 1 of its prompts are in earlier sources"),
        "{}",
        out.stderr
    );
    assert_eq!(
        contents(&gen_, "beta"),
        ["echo: b1", "echo: b2", "echo: b3", "echo: b4", "echo: b5"]
    );
    assert_eq!(server.chat_requests(), 7);
    let manifest: Value =
        serde_json::from_str(&gen_.read_run("sources/beta/manifest.json")).expect("json");
    assert_eq!(
        (
            manifest["kept"].as_u64(),
            manifest["duplicates_across"].as_u64()
        ),
        (Some(5), Some(1))
    );
    assert!(!gen_.source_path("beta", "rejected.jsonl").exists());
    // The first sample, set aside while the second was drawn, is gone.
    for first in ["prompts.first.jsonl.zst", "manifest.first.json"] {
        assert!(!gen_.source_path("beta", first).exists());
    }
    let beta = &status(&gen_)["sources"][1];
    assert_eq!(
        (
            beta["phase"].as_str(),
            beta["done"].as_u64(),
            beta["rejected"].as_u64(),
            beta["duplicates"].as_u64()
        ),
        (Some("done"), Some(5), Some(0), Some(1))
    );
    let verify = gen_.run(&["verify", "cfg.toml"]).await;
    assert_eq!(verify.code, Some(0), "{}{}", verify.stdout, verify.stderr);
    let again = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(server.chat_requests(), 7, "a rerun sends nothing");
    assert_eq!(
        status(&gen_)["sources"][1]["duplicates"],
        1,
        "counted once across runs"
    );
    let ids: HashSet<String> = gen_
        .completions_of("beta")
        .iter()
        .map(|r| r["id"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(ids.len(), 5);
}

#[tokio::test]
async fn an_earlier_source_prepared_late_does_not_answer_again_what_a_later_source_answered() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    // alpha's file is empty in the first run: its preparation fails (no prompt) and beta
    // generates.
    gen_.write("data/a.jsonl", "");
    gen_.write(
        "data/b.jsonl",
        "{\"question\": \"only b\"}\n{\"question\": \"shared\"}\n",
    );
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 16\nconcurrency = 2")
            .source("alpha", "data/a.jsonl")
            .source_with("beta", "data/b.jsonl", "prompt-field = \"question\""),
    );
    let first = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(first.code, Some(1), "alpha failed: {}", first.stderr);
    assert_eq!(contents(&gen_, "beta"), ["echo: only b", "echo: shared"]);
    assert_eq!(server.chat_requests(), 2);

    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"shared\"}\n{\"prompt\": \"only a\"}\n",
    );
    let second = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert_eq!(contents(&gen_, "alpha"), ["echo: only a"]);
    assert_eq!(contents(&gen_, "beta"), ["echo: only b", "echo: shared"]);
    assert_eq!(server.chat_requests(), 3, "`shared` is not generated twice");
    assert!(
        second
            .stderr
            .contains("1 prompts were already answered in later sources"),
        "{}",
        second.stderr
    );
    let rejected: Value =
        serde_json::from_str(gen_.read_run("sources/alpha/rejected.jsonl").trim_end())
            .expect("one record");
    assert_eq!(rejected["kind"], "duplicate");
    assert_eq!(
        rejected["reason"],
        "the same prompt was already answered in the later source `beta` (this source was prepared after it had generated)"
    );
    let alpha = &status(&gen_)["sources"][0];
    assert_eq!(
        (
            alpha["phase"].as_str(),
            alpha["done"].as_u64(),
            alpha["rejected"].as_u64(),
            alpha["duplicates"].as_u64()
        ),
        (Some("done"), Some(1), Some(1), Some(1))
    );
    let verify = gen_.run(&["verify", "cfg.toml"]).await;
    assert_eq!(verify.code, Some(0), "{}{}", verify.stdout, verify.stderr);
}
