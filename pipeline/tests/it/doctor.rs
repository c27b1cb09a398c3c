//! `gen doctor` end to end: a plan over a small memory budget (given through
//! `GEN_TEST_MEM_AVAILABLE`) is refused with the numbers and exit 1; one that fits exits 0;
//! the server is probed (the fake OpenAI server), and one that does not answer is a warning.

use crate::support;

use gen_tests::fake_hub::{FakeHub, FakeRepo};
use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use support::{Config, Output, Project};

fn config(url: &str) -> Config {
    Config::new(url)
        .run("max-parallel-prep = 2")
        .server("host-memory = \"1G\"")
        .generation("max-tokens = 16")
        .source_with("alpha", "data/a.jsonl", "memory-limit = \"512M\"")
        .source_with("beta", "data/b.jsonl", "memory-limit = \"256M\"")
}

/// The sources' files: a missing one is a FAIL line of its own.
fn write_data(gen_: &Project) {
    gen_.write("data/a.jsonl", "{\"prompt\": \"a\"}\n");
    gen_.write("data/b.jsonl", "{\"prompt\": \"b\"}\n");
}

async fn doctor(gen_: &Project, mem_available: &str) -> Output {
    gen_.run_with_env(
        &["doctor", "cfg.toml"],
        &[("GEN_TEST_MEM_AVAILABLE", mem_available)],
    )
    .await
}

/// The line of `check`, with the lines its message wrapped onto joined back.
fn line(out: &Output, check: &str) -> String {
    let mut lines = out.stdout.lines();
    let first = lines
        .by_ref()
        .find(|l| l.split_whitespace().nth(1) == Some(check))
        .unwrap_or_else(|| panic!("no `{check}` line in:\n{}", out.stdout));
    let mut joined = first.to_owned();
    for more in lines.take_while(|l| l.starts_with("               ")) {
        joined.push(' ');
        joined.push_str(more.trim());
    }
    joined
}

#[tokio::test]
async fn a_plan_over_a_small_memory_budget_is_refused_with_the_numbers() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.config(&config(&server.url()));
    write_data(&gen_);

    let refused = doctor(&gen_, "1073741824").await;
    assert_eq!(
        refused.code,
        Some(1),
        "{}\n{}",
        refused.stdout,
        refused.stderr
    );
    let memory = line(&refused, "memory");
    assert!(
        memory.starts_with("FAIL  memory   needs 2 GiB host RAM, 1 GiB"),
        "{memory}"
    );
    assert!(
        memory.ends_with("available: 2 workers × 512 MiB memory-limit + 1 GiB server host-memory"),
        "{memory}"
    );
    assert_eq!(
        line(&refused, "server"),
        format!(
            "ok    server   `{}` serves `fake-model` (the first it lists; `[server] model` pins one)",
            server.url()
        )
    );
    assert_eq!(
        refused.stdout.lines().last(),
        Some("the plan does not fit: 1 problem(s) marked FAIL above")
    );

    let fits = doctor(&gen_, "1T").await;
    assert_eq!(fits.code, Some(0), "{}\n{}", fits.stdout, fits.stderr);
    assert!(
        line(&fits, "memory").starts_with("ok    memory   needs 2 GiB host RAM of 1 TiB available"),
        "{}",
        fits.stdout
    );
    // The sources' local files hold a row each: at most 2 prompts, not twice the default
    // `limit` of 10,000.
    assert!(line(&fits, "disk").contains("(2 prompts × 16 max-tokens"));
    assert!(line(&fits, "duration").starts_with("ok    duration up to 2 prompts to go"));
    assert!(
        fits.stdout.ends_with("the plan fits\n") || fits.stdout.contains("the plan fits, with"),
        "{}",
        fits.stdout
    );
}

#[tokio::test]
async fn a_server_that_does_not_answer_is_a_warning_not_a_failure() {
    let port = crate::support::free_port();
    let gen_ = Project::new();
    let url = format!("http://127.0.0.1:{port}");
    gen_.config(&config(&url));
    write_data(&gen_);
    let out = doctor(&gen_, "1T").await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let server = line(&out, "server");
    assert!(
        server.starts_with(&format!(
            "warn  server   server not reachable at `{url}/v1/models` within 5 s (connection refused): `gen run`"
        )) && server.ends_with("): `gen run` prepares the sources meanwhile and waits for it (`[server] startup-timeout-secs`)"),
        "{server}"
    );
}

/// The context must hold the largest budget of any source, a `[source.generation]` one too.
#[tokio::test]
async fn the_context_check_takes_the_largest_budget_of_any_source() {
    let server = FakeOpenAi::start(Knobs {
        context_length: Some(2000),
        shorten_to_context: true,
        ..Knobs::default()
    })
    .await;
    let gen_ = Project::new();
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 16")
            .source("alpha", "data/a.jsonl")
            .source_with(
                "beta",
                "data/b.jsonl",
                "[source.generation]\nmax-tokens = 4000",
            ),
    );
    write_data(&gen_);
    let out = doctor(&gen_, "68719476736").await;
    let context = line(&out, "context");
    assert!(
        context.starts_with("FAIL  context  2000 tokens")
            && context.contains("cannot hold max-tokens 4000"),
        "{context}"
    );
}

/// A server `gen` launches on the fixed port of `url`: a port another process holds fails
/// the plan (as `gen run` would refuse it), a free one is said; Hub sources say where they
/// download, how much (the selected files' sizes as the fake hub lists them: 3 KiB of the
/// repository's 4 KiB; before, no size at all) and the room there.
#[tokio::test]
async fn a_launch_port_in_use_fails_and_hub_sources_say_where_and_how_much_they_download() {
    let fake_hub = FakeHub::start(vec![FakeRepo::new(
        "org/set",
        vec![
            ("data/a.parquet", vec![0; 1024]),
            ("data/b.parquet", vec![0; 2048]),
            ("README.md", vec![b'#'; 1024]),
        ],
    )]);
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = held.local_addr().expect("addr").port();
    let mut gen_ = Project::new();
    // Every `gen doctor` here asks the fake hub, never the real one.
    gen_.env("HF_ENDPOINT", &fake_hub.endpoint);
    gen_.config(
        &Config::new(&format!("http://127.0.0.1:{port}"))
            .server("launch = [\"/bin/true\", \"--port\", \"{port}\"]")
            .generation("max-tokens = 16")
            .source("alpha", "data/a.jsonl")
            .source_table(
                "hubbed",
                "repo = \"org/set\"\nfiles = [\"data/*.parquet\"]\nlimit = 5",
            ),
    );
    write_data(&gen_);
    let hub = gen_.path("hf");
    let out = gen_
        .run_with_env(
            &["doctor", "cfg.toml"],
            &[
                ("GEN_TEST_MEM_AVAILABLE", "1T"),
                ("HF_HUB_CACHE", &hub.to_string_lossy()),
            ],
        )
        .await;
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        line(&out, "server").starts_with(&format!(
            "FAIL  server   port {port} of `url` is already in use by another process"
        )),
        "{}",
        out.stdout
    );
    let hub_line = line(&out, "hub");
    assert!(
        hub_line.contains(&format!(
            "1 source(s) download 3 KiB from the Hub into `{}` (hubbed)",
            hub.display()
        )) && hub_line.contains(" free on `"),
        "{hub_line}"
    );
    drop(held);
    let out = doctor(&gen_, "1T").await;
    assert!(
        line(&out, "server").starts_with(&format!(
            "ok    server   launched by `gen` on port {port}, free now"
        )),
        "{}",
        out.stdout
    );
}

/// Issue 29, a model larger than one node: a launch with `{node_rank}` is refused by `gen
/// doctor` and `gen bench` without `--nodes-per-shard`, as `gen run` refuses it (before,
/// doctor said "the plan fits" and bench started the server with the placeholders unfilled);
/// with it, doctor says whose machine it checked and bench wants a Slurm job of those nodes.
#[tokio::test]
async fn a_launch_across_nodes_needs_its_nodes_in_doctor_and_bench() {
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", "{\"prompt\": \"hi\"}\n");
    gen_.config(
        &Config::new("http://127.0.0.1:{port}/v1")
            .server(
                "launch = [\"sglang\", \"--nnodes\", \"{nnodes}\", \"--node-rank\", \
                 \"{node_rank}\", \"--dist-init-addr\", \"{head}:5000\", \"--port\", \"{port}\"]",
            )
            .source("alpha", "data/a.jsonl"),
    );
    for command in ["doctor", "bench"] {
        let out = gen_.run(&[command, "cfg.toml"]).await;
        assert_eq!(out.code, Some(2), "{command}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr
                .contains("`launch` uses `{node_rank}`, which only a server across"),
            "{command}: {}",
            out.stderr
        );
    }
    let across = gen_
        .run(&["doctor", "cfg.toml", "--nodes-per-shard", "2"])
        .await;
    assert!(
        line(&across, "nodes").contains("the server starts across 2 nodes"),
        "{}",
        across.stdout
    );
    let bench = gen_
        .run_with_env(
            &["bench", "cfg.toml", "--nodes-per-shard", "2"],
            &[("SLURM_JOB_NUM_NODES", "1")],
        )
        .await;
    assert_eq!(bench.code, Some(2), "{}", bench.stderr);
    assert!(
        bench.stderr.contains("but this Slurm job has 1"),
        "{}",
        bench.stderr
    );
}
