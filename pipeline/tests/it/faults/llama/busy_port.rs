//! A launched server whose port another process holds: the real llama-server cannot bind it,
//! and `/health` on that port answers from the other process. `gen` must say so once and send
//! the other process nothing — at the start, and when a restart finds the port taken.
//!
//! Skipped with a printed reason when llama-server is not installed, unless `GEN_REQUIRE_LLAMA`
//! is set.

use std::time::Duration;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use gen_tests::llama;

use crate::faults::rows;
use crate::faults::run_edges::count;
use crate::support::{Config, Project, llama_skip_reason, signal};

/// `cfg.toml` launching the real llama-server on `port` (a number, or `{port}`).
fn write_launch_config(project: &Project, port: &str, prompts: usize) {
    let (bin, model) = llama::installed().expect("installed");
    project.write("data/alpha.jsonl", rows("alpha", prompts));
    project.config(
        &Config::launching(&bin, &model, port, &["-c", "1024", "-np", "1", "-t", "2"])
            .server("health-timeout-secs = 120\nmax-restarts = 3")
            .generation("max-tokens = 24\nconcurrency = 1")
            .source("alpha", "data/alpha.jsonl"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_on_a_port_another_server_holds_is_one_error_and_sends_it_nothing() {
    if let Some(reason) = llama_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let other = FakeOpenAi::start(Knobs::default()).await;
    let port = other.addr.port();
    let project = Project::new();
    write_launch_config(&project, &port.to_string(), 3);
    let out = project.run(&["run", "cfg.toml"]).await;
    eprintln!("{}", out.stderr);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert_eq!(other.chat_requests(), 0, "the other process got the run");
    let said = format!("port {port} is already in use by another process");
    assert_eq!(count(&out.stderr, &said), 1, "said once: {}", out.stderr);
    assert!(
        out.stderr.contains("write `{port}` in `[server] launch`"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("restarting"), "{}", out.stderr);
    let status = project.status().expect("status.json");
    assert_eq!(status["finished"], true, "{status:#}");
    assert!(
        status["stopped_by"]
            .as_str()
            .is_some_and(|s| s.contains(&said)),
        "{status:#}"
    );
}

/// The pid of the llama-server listening on `port`, from `/proc/*/cmdline`.
fn llama_pid(port: u16) -> Option<u32> {
    let port = port.to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let is_llama = args.first().is_some_and(|a| a.ends_with(b"llama-server"));
            let on_port = args
                .windows(2)
                .any(|w| w[0] == b"--port" && w[1] == port.as_bytes());
            (is_llama && on_port).then_some(pid)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_onto_a_port_taken_meanwhile_stops_once_and_sends_it_nothing() {
    if let Some(reason) = llama_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let project = Project::new();
    write_launch_config(&project, "{port}", 40);
    let mut child = project.start(&["run", "cfg.toml"]);
    let status = child
        .until_run_status(
            &project,
            "a first completion",
            Duration::from_secs(180),
            |s| s["sources"][0]["done"].as_u64().unwrap_or(0) >= 1,
        )
        .await;
    let url = status["servers"][0]["url"]
        .as_str()
        .expect("url")
        .to_owned();
    let port: u16 = url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let pid = llama_pid(port).expect("the launched llama-server");
    signal(pid, "KILL");
    // Another server takes the port before `gen` (ticking every second) restarts its own.
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let other = loop {
        // `start_at` panics while the port is still held (slowly: a backtrace each time), so
        // the port is tried first; in a task, a panic of the rare lost race is an `Err`.
        let free = std::net::TcpListener::bind(addr).is_ok();
        if free && let Ok(server) = tokio::spawn(FakeOpenAi::start_at(addr, Knobs::default())).await
        {
            break server;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let out = child.finish(Duration::from_secs(120)).await;
    let stderr = out.stderr;
    eprintln!("{stderr}");
    assert_eq!(out.code, Some(1), "{stderr}");
    assert_eq!(other.chat_requests(), 0, "the other process got requests");
    let said = format!("port {port} is already in use by another process");
    assert_eq!(count(&stderr, &said), 1, "said once: {stderr}");
    assert!(stderr.contains("could not be restarted"), "{stderr}");
    assert_eq!(
        count(&stderr, "restarting the inference server"),
        1,
        "{stderr}"
    );
}
