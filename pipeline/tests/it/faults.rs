//! The fault suite: `gen run` under injected faults, each scenario audited by `gen verify`.
//!
//! - seeded `kill -9` during preparation and generation, then a clean rerun: nothing lost,
//!   nothing duplicated (`kill_nine_during_preparation_and_generation_loses_nothing`; the
//!   20-kill soak is the ignored `soak_twenty_kills`, run by `scripts/soak.sh`);
//! - a torn or corrupted completions tail, repaired by the next run; damage, lost and empty
//!   answers, failing servers and refusals ([`outcomes`]);
//! - run files damaged or foreign, every file three ways: repaired, run and verify agree
//!   ([`run_files`]);
//! - a corpus of malformed inputs, each with its expected outcome ([`corpus`]);
//! - bad configs: exit 2 and `file:line:column` ([`configs`]);
//! - two runs on one run directory (the run lock); SIGTERM mid-generation;
//! - secrets never reach the run directory or any output; private file modes;
//! - disk full while writing output: a 1 MiB tmpfs as the run directory ([`disk`]);
//! - the real llama-server stopped with `SIGSTOP` mid-run, then continued, and launched on a
//!   port another process holds ([`llama`]);
//! - `--shard auto` tasks: duplicates refused, a task frozen past its lease fenced ([`shards`]).
//!
//! Every `gen` is spawned from the built binary against the fake OpenAI server on
//! `127.0.0.1:0`. Faults are timed from observed progress (`status.json`, the server's request
//! counter), never from fixed sleeps.

mod configs;
mod corpus;
mod disk;
mod llama;
mod outcomes;
mod run_edges;
mod run_files;
mod shards;

use std::time::Duration;

use crate::support::{Config, Project, Rng, completion_ids, done, phase_of, wait_for, walk};
use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use serde_json::Value;

const SOURCES: [&str; 3] = ["alpha", "beta", "gamma"];

/// The scenarios' config against `url`: answers of up to 16 tokens, 4 at a time.
fn config(url: &str) -> Config {
    Config::new(url).generation("max-tokens = 16\nconcurrency = 4")
}

/// A project with one source, `alpha`, of `rows` (JSONL text), against the server at `url`.
fn alpha_project(url: &str, rows: String) -> Project {
    let project = Project::new();
    project.write("data/alpha.jsonl", rows);
    project.config(&config(url).source("alpha", "data/alpha.jsonl"));
    project
}

/// `rows` distinct prompt rows.
fn rows(tag: &str, rows: usize) -> String {
    (0..rows)
        .map(|i| {
            format!("{{\"prompt\": \"{tag} question {i}: why is the sky blue at {i} nm?\"}}\n")
        })
        .collect()
}

/// The files in `source`'s directory whose names start with `prefix`, by name.
fn files_starting(project: &Project, source: &str, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<std::path::PathBuf> =
        std::fs::read_dir(project.run_path(&format!("sources/{source}")))
            .expect("read_dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .collect();
    files.sort();
    files
}

/// Asserts the audit of a finished run: every prompt completed exactly once.
fn assert_complete(audit: &Value, expected_prompts: u64) {
    let totals = &audit["totals"];
    assert_eq!(audit["consistent"], true, "{audit:#}");
    assert_eq!(totals["lost"], 0, "{audit:#}");
    assert_eq!(totals["duplicated"], 0, "{audit:#}");
    assert_eq!(totals["unknown"], 0, "{audit:#}");
    assert_eq!(totals["pending"], 0, "{audit:#}");
    assert_eq!(totals["prompts"], expected_prompts, "{audit:#}");
    assert_eq!(totals["completed"], expected_prompts, "{audit:#}");
}

/// One injected `kill -9`: where it landed.
#[derive(Debug)]
struct Kill {
    /// What `status.json` showed at the kill: `preparation`, `generation`, or `both` (one
    /// source generating while another is prepared).
    during: &'static str,
    /// Chat requests the server had received when the kill was sent.
    requests: usize,
    /// Completions on disk after the kill.
    stored: usize,
}

#[derive(Debug)]
struct KillReport {
    seed: u64,
    kills: Vec<Kill>,
    prompts: u64,
    completed: u64,
    lost: u64,
    duplicated: u64,
    requests: usize,
}

/// `prep_kills` kills during preparation then `gen_kills` during generation, each at a seeded
/// point, then a clean rerun; every killed state and the final one are audited.
async fn kill_scenario(
    seed: u64,
    prep_kills: usize,
    gen_kills: usize,
    rows_per_source: usize,
    limit: usize,
) -> KillReport {
    let mut rng = Rng::new(seed);
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(4),
        ..Knobs::default()
    })
    .await;
    let project = Project::new();
    for name in SOURCES {
        project.write(&format!("data/{name}.jsonl"), rows(name, rows_per_source));
    }
    let extra = format!("limit = {limit}");
    let mut config = config(&server.url()).run("max-parallel-prep = 1");
    for name in SOURCES {
        config = config.source_with(name, &format!("data/{name}.jsonl"), &extra);
    }
    project.config(&config);
    let total = (SOURCES.len() * limit) as u64;
    let stored = |project: &Project| -> usize {
        SOURCES
            .iter()
            .map(|s| completion_ids(&project.source_path(s, "completions.jsonl.zst")).len())
            .sum()
    };
    let mut kills = Vec::new();
    for k in 0..prep_kills + gen_kills {
        // A fresh status per run: the last run's file would satisfy the wait at once.
        std::fs::remove_file(project.run_path("status.json")).ok();
        let mut child = project.start(&["run", "cfg.toml"]);
        let status = if k < prep_kills {
            let status = child
                .until_run_status(
                    &project,
                    "a source in preparation",
                    Duration::from_secs(60),
                    |s| SOURCES.iter().any(|n| phase_of(s, n) == "preparing"),
                )
                .await;
            // The seeded delay picks the point inside the preparation.
            tokio::time::sleep(Duration::from_millis(rng.range(0, 120))).await;
            status
        } else {
            let before = server.chat_requests();
            let left = total.saturating_sub(stored(&project) as u64) as usize;
            let step = (left / (prep_kills + gen_kills - k + 1)).max(2);
            let target = before + rng.range(1, step as u64) as usize;
            child
                .until(
                    &format!("request {target}"),
                    Duration::from_secs(60),
                    || server.chat_requests() >= target,
                )
                .await;
            project.status().unwrap_or_default()
        };
        let any = |phase: &str| SOURCES.iter().any(|n| phase_of(&status, n) == phase);
        let during = match (any("preparing"), any("generating")) {
            (true, true) => "both",
            (true, false) => "preparation",
            _ => "generation",
        };
        let requests = server.chat_requests();
        assert!(
            child.exited().is_none(),
            "kill {k} must hit a running `gen run`"
        );
        let exit = child.kill9().await;
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&exit),
            Some(9),
            "{exit}"
        );
        // A killed run directory is consistent: pending work, never a duplicate.
        let (code, audit) = project.verify().await;
        assert_eq!(code, Some(0), "after kill {k}: {audit:#}");
        assert_eq!(audit["totals"]["duplicated"], 0, "{audit:#}");
        kills.push(Kill {
            during,
            requests,
            stored: stored(&project),
        });
    }
    let last = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(last.code, Some(0), "{}", last.stderr);
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, total);
    // Independently of `gen verify`: each file holds each prompt exactly once.
    for name in SOURCES {
        let mut ids = completion_ids(&project.source_path(name, "completions.jsonl.zst"));
        let count = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!((ids.len(), count), (limit, limit), "{name}");
    }
    let again = project.run(&["run", "cfg.toml"]).await;
    assert!(again.stderr.contains("nothing to do"), "{}", again.stderr);
    KillReport {
        seed,
        kills,
        prompts: audit["totals"]["prompts"].as_u64().unwrap_or(0),
        completed: audit["totals"]["completed"].as_u64().unwrap_or(0),
        lost: audit["totals"]["lost"].as_u64().unwrap_or(0),
        duplicated: audit["totals"]["duplicated"].as_u64().unwrap_or(0),
        requests: server.chat_requests(),
    }
}

fn print_report(report: &KillReport) {
    eprintln!("seed {:#x}: {} kills", report.seed, report.kills.len());
    eprintln!(
        "{:>4}  {:<11}{:>10}{:>10}",
        "kill", "during", "requests", "stored"
    );
    for (i, kill) in report.kills.iter().enumerate() {
        eprintln!(
            "{:>4}  {:<11}{:>10}{:>10}",
            i + 1,
            kill.during,
            kill.requests,
            kill.stored
        );
    }
    eprintln!(
        "final: {} prompts, {} completed, {} lost, {} duplicated, {} requests sent",
        report.prompts, report.completed, report.lost, report.duplicated, report.requests
    );
}

fn seed() -> u64 {
    std::env::var("GEN_FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0007)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_during_preparation_and_generation_loses_nothing() {
    let report = kill_scenario(seed(), 2, 3, 20_000, 40).await;
    print_report(&report);
    assert_eq!(report.kills.len(), 5);
    assert!(
        report.kills.iter().any(|k| k.during != "preparation"),
        "some kill must land during generation: {report:?}"
    );
    assert!(
        report.kills.iter().any(|k| k.during != "generation"),
        "some kill must land during preparation: {report:?}"
    );
}

/// The long version: 20 seeded kills (`scripts/soak.sh` runs it in release mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: 20 kills, minutes long; run by scripts/soak.sh"]
async fn soak_twenty_kills() {
    let kills: usize = std::env::var("GEN_SOAK_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    // Enough rows that a preparation lasts long enough to be seen and hit in release mode too
    // (with 50 000 rows a release-mode worker is done between two polls of `status.json`).
    let rows: usize = std::env::var("GEN_SOAK_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400_000);
    let prep_kills = kills / 4;
    let report = kill_scenario(seed(), prep_kills, kills - prep_kills, rows, 200).await;
    print_report(&report);
    assert_eq!(report.kills.len(), kills);
}

/// A finished run with `n` prompts in source `alpha` (several completion frames).
async fn finished_run(server: &FakeOpenAi, n: usize) -> Project {
    let project = alpha_project(&server.url(), rows("alpha", n));
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    project
}

#[tokio::test]
async fn garbage_after_the_last_frame_is_a_torn_tail_cut_by_the_next_run() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = finished_run(&server, 10).await;
    let path = project.source_path("alpha", "completions.jsonl.zst");
    let mut bytes = std::fs::read(&path).expect("read");
    let whole = bytes.len();
    bytes.extend_from_slice(b"\x28\xb5\x2f\xfd garbage from a crash");
    std::fs::write(&path, &bytes).expect("write");

    let before = project.run(&["verify", &project.run_dir()]).await;
    assert_eq!(before.code, Some(0), "{}", before.stdout);
    assert!(
        before.stdout.contains("torn tail of 25 bytes"),
        "{}",
        before.stdout
    );
    let (_, audit) = project.verify().await;
    assert_eq!(
        audit["sources"][0]["notes"][0],
        "`completions.jsonl.zst`: torn tail of 25 bytes (repaired on the next run)"
    );
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        std::fs::metadata(&path).expect("meta").len() as usize,
        whole
    );
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0));
    assert_complete(&audit, 10);
    assert!(
        audit["sources"][0]["notes"]
            .as_array()
            .is_some_and(Vec::is_empty),
        "{audit:#}"
    );
    assert_eq!(server.chat_requests(), 10, "nothing was sent again");
}

#[tokio::test]
async fn a_frame_cut_in_the_middle_is_repaired_and_its_prompts_generated_again() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    // 100 prompts: a first frame of 64 records, then the rest.
    let project = finished_run(&server, 100).await;
    let path = project.source_path("alpha", "completions.jsonl.zst");
    let bytes = std::fs::read(&path).expect("read");
    let first = zstd::zstd_safe::find_frame_compressed_size(&bytes).expect("first frame");
    assert!(first < bytes.len(), "expected at least two frames");
    let cut = first + (bytes.len() - first) / 2;
    std::fs::write(&path, &bytes[..cut]).expect("truncate");
    let kept = completion_ids(&path).len();
    assert!(kept < 100);

    // Before the rerun the audit sees the torn tail and the prompts it lost.
    let (code, audit) = project.verify().await;
    assert_eq!(
        code,
        Some(1),
        "status says done but prompts are missing: {audit:#}"
    );
    assert_eq!(audit["totals"]["lost"], 100 - kept as u64, "{audit:#}");
    let notes = audit["sources"][0]["notes"].to_string();
    assert!(notes.contains("torn tail of"), "{notes}");

    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(server.chat_requests(), 100 + (100 - kept));
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, 100);
}

#[tokio::test]
async fn damage_in_the_middle_of_a_file_fails_the_audit() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = finished_run(&server, 100).await;
    let path = project.source_path("alpha", "completions.jsonl.zst");
    let mut bytes = std::fs::read(&path).expect("read");
    let first = zstd::zstd_safe::find_frame_compressed_size(&bytes).expect("first frame");
    // Flip bytes inside the first frame: the checksum no longer matches.
    for b in &mut bytes[first / 2..first / 2 + 8] {
        *b ^= 0xff;
    }
    std::fs::write(&path, &bytes).expect("write");
    let out = project.run(&["verify", &project.run_dir()]).await;
    assert_eq!(out.code, Some(1), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("problem: `alpha`: `completions.jsonl.zst` is damaged:"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("verdict: "))
    );
    assert!(
        out.stdout.lines().all(|l| l.chars().count() <= 80),
        "{}",
        out.stdout
    );
}

#[tokio::test]
async fn sigterm_mid_generation_exits_cleanly_and_a_rerun_completes_the_rest() {
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(20),
        ..Knobs::default()
    })
    .await;
    let project = alpha_project(&server.url(), rows("alpha", 120));
    let mut child = project.start(&["run", "cfg.toml"]);
    child
        .until("20 requests", Duration::from_secs(60), || {
            server.chat_requests() >= 20
        })
        .await;
    child.signal("TERM");
    let out = child.finish(Duration::from_secs(120)).await;
    let stderr = out.stderr;
    assert_eq!(out.code, Some(1), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let status = project.status().expect("status.json");
    assert_eq!(status["finished"], true, "{status:#}");
    let stored = done(&status);
    assert!(stored < 120, "interrupted before the end: {status:#}");
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(
        audit["totals"]["pending"],
        120 - audit["totals"]["completed"].as_u64().unwrap_or(0)
    );

    let rerun = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(rerun.code, Some(0), "{}", rerun.stderr);
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, 120);
}

#[tokio::test]
async fn the_run_lock_is_released_when_its_holder_is_killed() {
    use gen_pipeline::run::lock::{LockError, RunLock};
    use gen_pipeline::store::RunDir;
    let project = Project::new();
    let run_dir = RunDir::new(project.path("held"));
    std::fs::create_dir_all(run_dir.root()).expect("mkdir");
    let lock_path = run_dir.root().join("lock");
    std::fs::write(
        &lock_path,
        "{\"pid\": 4242, \"host\": \"gpu-node-7\", \"started\": 0}\n",
    )
    .expect("write");
    // Another process holds the flock: `flock` locks the shell's descriptor 9 and exits,
    // then the shell becomes `sleep`, which keeps the descriptor (and the lock) until killed.
    let mut holder = tokio::process::Command::new("sh")
        .arg("-c")
        .arg("exec 9<>\"$0\" && flock 9 && exec sleep 60")
        .arg(&lock_path)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sh");
    let error = wait_for("the holder to take the lock", Duration::from_secs(10))
        .every(Duration::from_millis(5))
        .until_some(|| match RunLock::acquire(&run_dir) {
            Err(error) => Some(error),
            // `flock` has not taken it yet.
            Ok(lock) => {
                drop(lock);
                // The probe may have rewritten the file; put the holder's record back.
                std::fs::write(
                    &lock_path,
                    "{\"pid\": 4242, \"host\": \"gpu-node-7\", \"started\": 0}\n",
                )
                .expect("write");
                None
            }
        })
        .await;
    assert!(
        matches!(&error, LockError::Held { pid: 4242, host, .. } if host == "gpu-node-7"),
        "{error:?}"
    );
    assert!(
        error.to_string().starts_with(&format!(
            "run directory `{}` is in use by another `gen run` (pid 4242 on host `gpu-node-7`",
            run_dir.root().display()
        )),
        "{error}"
    );
    holder.start_kill().expect("kill -9");
    holder.wait().await.expect("wait");
    let lock = RunLock::acquire(&run_dir).expect("free once the holder is gone");
    assert_eq!(lock.holder().pid, std::process::id());
}

#[tokio::test]
async fn a_second_gen_run_on_the_same_run_dir_is_refused_naming_the_holder() {
    use gen_pipeline::run::lock::RunLock;
    use gen_pipeline::store::RunDir;
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = alpha_project(&server.url(), rows("alpha", 3));
    let lock = RunLock::acquire(&RunDir::new(project.run_path(""))).expect("lock");
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "is in use by another `gen run` (pid {} on host `",
            std::process::id()
        )),
        "{}",
        out.stderr
    );
    assert_eq!(server.chat_requests(), 0, "the refused run sent nothing");
    drop(lock);

    // Two real runs: the second is refused while the first holds the directory.
    let slow = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(50),
        ..Knobs::default()
    })
    .await;
    let project = alpha_project(&slow.url(), rows("alpha", 40));
    let mut first = project.start(&["run", "cfg.toml"]);
    first
        .until("a first request", Duration::from_secs(30), || {
            slow.chat_requests() > 0
        })
        .await;
    let second = project.run(&["run", "cfg.toml"]).await;
    let pid = first.pid();
    assert_eq!(second.code, Some(1), "{}", second.stderr);
    assert!(
        second.stderr.contains(&format!("pid {pid} on host")),
        "{}",
        second.stderr
    );
    let first_exit = first.finish(Duration::from_secs(120)).await;
    assert_eq!(first_exit.code, Some(0), "{}", first_exit.stderr);
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0));
    assert_complete(&audit, 40);
}

const API_KEY: &str = "sk-faults-Zq8vW3kS1cR7";
const HF_TOKEN: &str = "hf_faultsTk9Lp2Xm4Nb6";

/// Every secret found in `text`.
fn leaks(text: &str, secrets: &[&str]) -> Vec<String> {
    secrets
        .iter()
        .filter(|s| text.contains(*s))
        .map(|s| (*s).to_owned())
        .collect()
}

#[tokio::test]
async fn secrets_never_reach_the_run_directory_or_any_output_and_files_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let server = FakeOpenAi::start(Knobs::default()).await;
    let mut project = Project::new();
    project.env("GEN_FAULTS_API_KEY", API_KEY);
    project.env("HF_TOKEN", HF_TOKEN);
    project.write(
        "data/alpha.jsonl",
        "{\"prompt\": \"one\"}\n{\"prompt\": \"REJECT two\"}\nnot json\n",
    );
    // A source whose preparation fails (an HTML error page saved as the data file).
    project.write("data/broken.json", "<html>502 Bad Gateway</html>");
    project.config(
        &Config::new(&server.url())
            .server("api-key-env = \"GEN_FAULTS_API_KEY\"")
            .source("alpha", "data/alpha.jsonl")
            .source("broken", "data/broken.json"),
    );
    let run_dir = project.run_dir();
    let mut outputs = Vec::new();
    for args in [
        &["run", "cfg.toml"][..],
        &["status", "cfg.toml"],
        &["status", "cfg.toml", "--json"],
        &["status", &run_dir],
        &["diagnose", "alpha", "--config", "cfg.toml"],
        &["diagnose", "broken", "--config", "cfg.toml", "--json"],
        &["verify", &run_dir],
        &["check", "cfg.toml"],
    ] {
        let out = project.run(args).await;
        assert_ne!(out.code, Some(101), "{args:?} panicked: {}", out.stderr);
        outputs.push((args.join(" "), out));
    }
    assert_eq!(outputs[0].1.code, Some(1), "{}", outputs[0].1.stderr);
    assert!(
        outputs[1].1.stdout.contains("alpha"),
        "status must have run: {}",
        outputs[1].1.stdout
    );
    let secrets = [API_KEY, HF_TOKEN];
    for (args, out) in &outputs {
        assert_eq!(
            leaks(&out.stdout, &secrets),
            Vec::<String>::new(),
            "stdout of `gen {args}`"
        );
        assert_eq!(
            leaks(&out.stderr, &secrets),
            Vec::<String>::new(),
            "stderr of `gen {args}`"
        );
    }
    let files = walk(&project.path("runs"));
    assert!(files.len() > 10, "{files:?}");
    for path in &files {
        if path.is_file() {
            let text = String::from_utf8_lossy(&std::fs::read(path).expect("read")).into_owned();
            assert_eq!(
                leaks(&text, &secrets),
                Vec::<String>::new(),
                "{}",
                path.display()
            );
            // Compressed files: look inside too.
            if path.extension().is_some_and(|e| e == "zst") {
                let inner = zstd::stream::decode_all(&std::fs::read(path).expect("read")[..])
                    .expect("zstd");
                let inner = String::from_utf8_lossy(&inner);
                assert_eq!(
                    leaks(&inner, &secrets),
                    Vec::<String>::new(),
                    "{}",
                    path.display()
                );
            }
        }
    }
    // Modes: every directory 0700; files holding prompts or outputs 0600.
    let mut checked = 0;
    for path in files.iter().chain([&project.run_path("")]) {
        let mode = std::fs::metadata(path).expect("meta").permissions().mode() & 0o777;
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            assert_eq!(mode, 0o700, "{}", path.display());
            checked += 1;
        } else if [
            "prompts.jsonl.zst",
            "completions.jsonl.zst",
            "rejected.jsonl",
        ]
        .contains(&name)
        {
            assert_eq!(mode, 0o600, "{}", path.display());
            checked += 1;
        }
    }
    assert!(checked >= 6, "{checked}");
}

#[tokio::test]
async fn credentials_in_the_server_url_are_redacted() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    project.write("data/alpha.jsonl", "{\"prompt\": \"one\"}\n");
    let url = server.url().replace("http://", "http://user:urlpass-Qx7@");
    project.config(&config(&url).source("alpha", "data/alpha.jsonl"));
    let run = project.run(&["run", "cfg.toml"]).await;
    let status = project.run(&["status", "cfg.toml", "--json"]).await;
    for text in [&run.stdout, &run.stderr, &status.stdout, &status.stderr] {
        assert!(!text.contains("urlpass-Qx7"), "{text}");
    }
    for path in walk(&project.path("runs")) {
        if path.is_file() {
            let text = String::from_utf8_lossy(&std::fs::read(&path).expect("read")).into_owned();
            assert!(!text.contains("urlpass-Qx7"), "{}", path.display());
        }
    }
}
