//! End to end on a real Slurm cluster (slurmctld + slurmd + munge on this machine, started by
//! `scripts/slurm/cluster.sh start`, which `scripts/test.sh` runs) with a real llama-server
//! per array task: `gen slurm --submit` on the quickstart, `squeue` until the array is gone,
//! `gen status RUN_ROOT` over every shard, the merged output holding every prompt exactly once;
//! a duplicate task for a live shard refused, `scancel` of one task mid-run (its server gets the
//! SIGTERM too: `gen` stops at once), and `gen slurm --only-failed` resubmitting only the
//! cancelled shard; a task whose `gen` binary is wrong shown `failed` with its log; a job
//! that prepares once, its dataset fetched from a fake hub (`HF_ENDPOINT`) exactly once; a
//! shard across the two nodes of partition `gen-multi` (`--nodes-per-shard 2`).
//!
//! Skipped with a printed reason when no cluster answers or llama-server is missing, unless
//! `GEN_REQUIRE_SLURM` (or `GEN_REQUIRE_LLAMA`) is set, as `scripts/test.sh` does.

use crate::support;

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gen_tests::fake_hub::{FakeHub, FakeRepo};
use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use support::{
    Config, Project, completions, copy_examples, llama_skip_reason, read_json, wait_for,
};

/// The longest a wait on the array may take: on 2 CPUs shared with the rest of the suite the
/// two tests' llama-servers run at a few tokens per second (one wait took over 600 s at a load
/// average of 16).
const JOB_DEADLINE: Duration = Duration::from_secs(900);

fn slurm_skip_reason() -> Option<String> {
    let answered = Command::new("sinfo")
        .args(["-h", "-o", "%T"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let reason = match answered {
        Some(states)
            if states
                .lines()
                .any(|s| !s.starts_with("down") && !s.starts_with("drain")) =>
        {
            return None;
        }
        Some(states) => format!("the Slurm cluster has no usable node ({})", states.trim()),
        None => "no Slurm cluster answers `sinfo`: run `scripts/slurm/cluster.sh start`".to_owned(),
    };
    if std::env::var_os("GEN_REQUIRE_SLURM").is_some() {
        panic!("GEN_REQUIRE_SLURM is set but {reason}");
    }
    Some(reason)
}

/// The quickstart (each task's llama-server from [`SERVER_LAUNCH`]) with answers of up to
/// `max_tokens`: 256 keeps a shard generating long enough to be cancelled and duplicated (the
/// duplicate starts only once the cancelled task has left, ~20 s later).
fn project(max_tokens: u32) -> Project {
    let gen_ = Project::new();
    copy_examples(&gen_);
    let config = gen_
        .read("examples/quickstart.toml")
        .replace("max-tokens = 48", &format!("max-tokens = {max_tokens}"));
    gen_.write("examples/quickstart.toml", &config);
    gen_
}

const SERVER_LAUNCH: &str = "${LLAMA_SERVER_BIN} -m ${GEN_TEST_MODEL} --alias smollm2-135m \
     --host 127.0.0.1 --port {port} -np 2 -c 2048 -t 1 --metrics";

fn squeue(job: &str) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "-r", "-o", "%i %T", "-j", job])
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Polls `squeue` until none of `jobs`' tasks is left, within [`JOB_DEADLINE`].
async fn wait_gone(jobs: &[&str], root: &Path) {
    wait_for(&format!("jobs {jobs:?} to leave the queue"), JOB_DEADLINE)
        .every(Duration::from_millis(500))
        .context(|| format!("logs:\n{}", logs(root)))
        .until_ok(|| {
            let left: Vec<String> = jobs.iter().flat_map(|j| squeue(j)).collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still in the queue: {left:?}"))
            }
        })
        .await;
}

/// Polls `squeue` until `ready` holds for the lines of `job`, within [`JOB_DEADLINE`].
async fn wait_queue(job: &str, root: &Path, what: &str, ready: impl Fn(&[String]) -> bool) {
    wait_for(what, JOB_DEADLINE)
        .every(Duration::from_millis(300))
        .context(|| format!("logs:\n{}", logs(root)))
        .until_ok(|| {
            let state = squeue(job);
            if ready(&state) {
                Ok(())
            } else {
                Err(format!("squeue: {state:?}"))
            }
        })
        .await;
}

/// Every task log under `RUN_ROOT/slurm/`, for failure messages.
fn logs(root: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(root.join("slurm"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if entry.path().extension().is_some_and(|e| e == "out") {
            text.push_str(&format!("--- {}\n", entry.path().display()));
            text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    text
}

/// Polls shard `dir`'s `status.json` until `ready` holds.
async fn wait_for_shard(
    dir: &Path,
    root: &Path,
    what: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) {
    wait_for(&format!("{what} in {}", dir.display()), JOB_DEADLINE)
        .every(Duration::from_millis(200))
        .context(|| format!("logs:\n{}", logs(root)))
        .until(|| read_json(&dir.join("status.json")).is_some_and(|s| ready(&s)))
        .await;
}

fn done_count(status: &serde_json::Value) -> u64 {
    status["sources"]
        .as_array()
        .map_or(0, |s| s.iter().filter_map(|s| s["done"].as_u64()).sum())
}

/// Ids of the prepared prompts of `source` in a run directory.
fn prompt_ids(run_dir: &Path, source: &str) -> HashSet<String> {
    completions(&run_dir.join(format!("sources/{source}/prompts.jsonl.zst")))
        .iter()
        .map(|p| p["id"].as_str().expect("id").to_owned())
        .collect()
}

fn sbatch(args: &[&str]) -> String {
    let out = Command::new("sbatch")
        .arg("--parsable")
        .args(args)
        .output()
        .expect("sbatch");
    assert!(
        out.status.success(),
        "sbatch {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .expect("job id")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slurm_array_runs_every_shard_survives_a_cancel_and_refuses_a_duplicate() {
    if let Some(reason) = llama_skip_reason().or_else(slurm_skip_reason) {
        eprintln!("skipped: {reason}");
        return;
    }
    let gen_ = project(256);
    let root: PathBuf = gen_.run_path("");
    let started = Instant::now();
    let step = |what: &str| eprintln!("[{:>5.1}s] {what}", started.elapsed().as_secs_f64());
    let submitted = gen_
        .run(&[
            "slurm",
            "examples/quickstart.toml",
            "--shards",
            "2",
            "--submit",
            "--server-launch",
            SERVER_LAUNCH,
            "--",
            "--cpus-per-task=1",
        ])
        .await;
    assert_eq!(submitted.code, Some(0), "{}", submitted.stderr);
    let job = submitted.stdout.trim().to_owned();
    assert!(job.parse::<u64>().is_ok(), "job id: {job:?}");
    let script = std::fs::read_to_string(root.join("slurm/gen.sbatch")).expect("script");
    assert!(script.contains("#SBATCH --array=0-1\n"), "{script}");
    assert!(script.contains("#SBATCH --cpus-per-task=1\n"), "{script}");

    step(&format!("submitted job {job}"));
    // Both tasks generate.
    let (shard0, shard1) = (root.join("shard-000"), root.join("shard-001"));
    wait_for_shard(&shard0, &root, "shard 0 generating", |s| done_count(s) > 0).await;
    wait_for_shard(&shard1, &root, "shard 1 generating", |s| done_count(s) > 0).await;
    step("both shards generating");
    // At once: task 1 is cancelled mid-run, and a duplicate of task 0 is submitted while the
    // original owns shard 0.
    let cancel = Command::new("scancel")
        .arg(format!("{job}_1"))
        .status()
        .expect("scancel");
    assert!(cancel.success());
    let owner_before = read_json(&shard0.join("owner.json")).expect("owner");
    let duplicate = sbatch(&[
        "--array=0",
        root.join("slurm/gen.sbatch").to_str().expect("utf-8"),
    ]);
    step(&format!(
        "cancelled task 1, submitted duplicate {duplicate}"
    ));

    wait_queue(&job, &root, "task 1 to leave", |state| {
        !state.iter().any(|t| t.starts_with(&format!("{job}_1 ")))
    })
    .await;
    step("task 1 gone");
    // Its own server got the SIGTERM too: what it had in flight could not finish, and gen did
    // not wait out the grace for it (issue 29 item 2): it saw the server go quiet, or the
    // streams broke as the server died (with the prompts prepared once, a task generates
    // within a second of its server answering, and the cancel finds its streams open).
    let cancelled_log =
        std::fs::read_to_string(root.join(format!("slurm/{job}_1.out"))).expect("log");
    assert!(
        !cancelled_log.contains("in flight get")
            || cancelled_log.contains("cannot finish, stopping now")
            || cancelled_log.contains("is down (stream broke"),
        "{cancelled_log}"
    );
    let cancelled = read_json(&shard1.join("status.json")).expect("shard 1 status");
    assert_eq!(
        cancelled["finished"], true,
        "gen stopped gracefully: {cancelled}"
    );
    assert!(
        cancelled["sources"]
            .as_array()
            .expect("sources")
            .iter()
            .any(|s| s["phase"] != "done"),
        "the cancel came mid-run: {cancelled}"
    );

    // The duplicate was refused and wrote nothing.
    wait_gone(&[&duplicate], &root).await;
    let duplicate_log =
        std::fs::read_to_string(root.join(format!("slurm/{duplicate}_0.out"))).expect("log");
    assert!(
        duplicate_log.contains("is owned by a live task")
            && duplicate_log.contains(&format!("job {job}_0")),
        "{duplicate_log}"
    );
    let owner_after = read_json(&shard0.join("owner.json")).expect("owner");
    assert_eq!(owner_after["epoch"], owner_before["epoch"], "{owner_after}");
    assert_eq!(owner_after["job"], format!("{job}_0"));
    step("duplicate refused");

    // Only the cancelled shard is resubmitted (shard 0 is either done or still owned).
    let again = gen_
        .run(&[
            "slurm",
            "examples/quickstart.toml",
            "--only-failed",
            "--submit",
        ])
        .await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    let rerun = again.stdout.trim().to_owned();
    let script =
        std::fs::read_to_string(root.join("slurm/gen-only-failed.sbatch")).expect("script");
    assert!(
        script.contains("#SBATCH --array=1\n"),
        "{script}\n{}",
        again.stderr
    );
    // ... the way the job was submitted: its sbatch options and server launch kept (before,
    // the rerun dropped both: on a real cluster it would get no GPU or another server).
    assert!(
        script.contains("#SBATCH --cpus-per-task=1\n")
            && script.contains("--server-launch ")
            && script.contains("--alias smollm2-135m"),
        "{script}"
    );
    assert!(
        again
            .stderr
            .contains("resubmitting with sbatch --cpus-per-task=1"),
        "{}",
        again.stderr
    );
    let tasks: BTreeSet<String> = squeue(&rerun)
        .iter()
        .filter_map(|t| t.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(
        tasks.iter().all(|t| t == &format!("{rerun}_1")),
        "only task 1 resubmitted: {tasks:?}"
    );
    step(&format!("resubmitted shard 1 as {rerun}"));
    wait_gone(&[&job, &rerun], &root).await;
    step("every task gone");
    let taken = read_json(&shard1.join("owner.json")).expect("owner");
    assert_eq!(taken["job"], format!("{rerun}_1"), "{taken}");
    assert_eq!(taken["epoch"], 2, "the rerun took the shard over: {taken}");

    // One view of the job: every shard done, merged by the last one to finish.
    let status = gen_
        .run(&["status", root.to_str().expect("utf-8"), "--json"])
        .await;
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let view: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    let shards = view["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 2, "{view}");
    assert!(
        shards.iter().all(|s| s["state"] == "done"),
        "{view}\n{}",
        logs(&root)
    );
    assert_eq!(view["merged"], true, "{view}\n{}", logs(&root));
    let table = gen_.run(&["status", root.to_str().expect("utf-8")]).await;
    for line in [
        format!("{job}_0 e1"),
        format!("{rerun}_1 e2"),
        "slurm  sbatch --cpus-per-task=1".to_owned(),
    ] {
        assert!(table.stdout.contains(&line), "{line}:\n{}", table.stdout);
    }

    for source in SOURCES {
        assert_eq!(
            prompt_ids(&shard0, source),
            prompt_ids(&shard1, source),
            "{source}: same preparation"
        );
    }
    assert_merged_exactly_once(&gen_, &root, &shard0).await;
}

/// The quickstart's sources.
const SOURCES: [&str; 3] = ["tutor-chats", "arithmetic", "haiku"];

/// The merged output of `root` holds every prompt prepared in `shard` of every source exactly
/// once, and `gen verify` agrees.
async fn assert_merged_exactly_once(gen_: &Project, root: &Path, shard: &Path) {
    let merged = root.join("merged");
    let mut total = 0;
    for source in SOURCES {
        let prompts = prompt_ids(shard, source);
        let records = completions(&merged.join(format!("sources/{source}/completions.jsonl.zst")));
        let ids: Vec<String> = records
            .iter()
            .map(|r| r["id"].as_str().expect("id").to_owned())
            .collect();
        let unique: HashSet<String> = ids.iter().cloned().collect();
        assert_eq!(unique.len(), ids.len(), "{source}: a prompt answered twice");
        assert_eq!(unique, prompts, "{source}: every prompt answered");
        total += ids.len();
    }
    assert!(total >= 55, "{total}");
    let verify = gen_.run(&["verify", merged.to_str().expect("utf-8")]).await;
    assert_eq!(verify.code, Some(0), "{}{}", verify.stdout, verify.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_told_its_time_is_up_stops_requeues_itself_and_takes_its_shard_back() {
    if let Some(reason) = llama_skip_reason().or_else(slurm_skip_reason) {
        eprintln!("skipped: {reason}");
        return;
    }
    let gen_ = project(48);
    let root: PathBuf = gen_.run_path("");
    let started = Instant::now();
    let step = |what: &str| eprintln!("[{:>5.1}s] {what}", started.elapsed().as_secs_f64());
    let submitted = gen_
        .run(&[
            "slurm",
            "examples/quickstart.toml",
            "--shards",
            "1",
            "--requeue",
            "--submit",
            "--server-launch",
            SERVER_LAUNCH,
            "--",
            "--cpus-per-task=1",
        ])
        .await;
    assert_eq!(submitted.code, Some(0), "{}", submitted.stderr);
    let job = submitted.stdout.trim().to_owned();
    let task = format!("{job}_0");
    let shard = root.join("shard-000");
    wait_for_shard(&shard, &root, "shard 0 generating", |s| done_count(s) > 0).await;
    step("generating; SIGUSR1 to the batch shell, as ahead of the time limit");
    let signal = Command::new("scancel")
        .args(["--batch", "--signal=USR1", &task])
        .status()
        .expect("scancel");
    assert!(signal.success());
    // The script requeues the task once gen has stopped; the requeued task waits out the
    // credential lifetime (10 s on the test cluster), then starts again.
    wait_queue(&job, &root, "the task requeued", |state| {
        state.iter().any(|t| t.ends_with("PENDING"))
    })
    .await;
    step("requeued");
    let stopped = read_json(&shard.join("status.json")).expect("status");
    assert_eq!(stopped["finished"], true, "stopped gracefully: {stopped}");
    wait_gone(&[&job], &root).await;
    step("done");

    let log = logs(&root);
    assert!(
        log.contains("stopped before the time limit; requeueing this task")
            && log.contains("(restart 1)"),
        "{log}"
    );
    let owner = read_json(&shard.join("owner.json")).expect("owner");
    assert_eq!(owner["job"], task, "{owner}");
    assert_eq!(
        owner["epoch"], 2,
        "the requeued task took its shard back: {owner}"
    );
    let merged = root.join("merged");
    let verify = gen_
        .run(&["verify", merged.to_str().expect("utf-8"), "--json"])
        .await;
    assert_eq!(verify.code, Some(0), "{}{}", verify.stdout, verify.stderr);
    let audit: serde_json::Value = serde_json::from_str(&verify.stdout).expect("json");
    assert_eq!(audit["totals"]["pending"], 0, "{audit}");
    assert_eq!(audit["totals"]["duplicated"], 0, "{audit}");
    assert_eq!(
        audit["totals"]["completed"], audit["totals"]["prompts"],
        "{audit}"
    );
}

/// Issue 29 item 3 on the cluster: a job whose `gen` binary does not exist fails before `gen`
/// starts. First its preparation job (exit 127): `gen status RUN_ROOT` shows the preparation
/// failed with its log and what the shell said, and the shards it kept from starting to run
/// again. Then, prepared by hand, the rerun's array task: its shard failed, with the task's
/// log (before: `not started` forever).
#[tokio::test(flavor = "multi_thread")]
async fn a_task_whose_gen_binary_is_wrong_is_shown_failed_with_its_log() {
    if let Some(reason) = slurm_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let gen_ = project(48);
    let root: PathBuf = gen_.run_path("");
    let root_arg = root.to_str().expect("utf-8");
    let submitted = gen_
        .run(&[
            "slurm",
            "examples/quickstart.toml",
            "--shards",
            "1",
            "--submit",
            "--gen-bin",
            "/nonexistent/gen",
            "--",
            "--cpus-per-task=1",
        ])
        .await;
    assert_eq!(submitted.code, Some(0), "{}", submitted.stderr);
    let job = submitted.stdout.trim().to_owned();
    let jobs = std::fs::read_to_string(root.join("slurm/jobs.jsonl")).expect("jobs.jsonl");
    let first: serde_json::Value =
        serde_json::from_str(jobs.lines().next().expect("a line")).expect("json");
    assert_eq!(first["array"], "prepare", "{jobs}");
    let prepare = first["job_id"].as_str().expect("job id").to_owned();
    wait_gone(&[&prepare, &job], &root).await;
    let status = gen_.run(&["status", root_arg, "--json"]).await;
    assert_eq!(status.code, Some(1), "{}", status.stdout);
    let view: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    let preparation = &view["preparation"];
    assert_eq!(preparation["state"], "failed", "{view}\n{}", logs(&root));
    let log = root.join(format!("slurm/prepare-{prepare}.out"));
    assert_eq!(preparation["log"], log.display().to_string(), "{view}");
    let why = preparation["stopped_by"].as_str().expect("stopped_by");
    assert!(
        why.starts_with(&format!("job {prepare} exited with 127 on "))
            && why.ends_with("/nonexistent/gen: No such file or directory"),
        "{why}"
    );
    let table = gen_.run(&["status", root_arg]).await;
    assert!(
        table.stdout.contains("rerun  shards 0: `gen slurm "),
        "{}",
        table.stdout
    );

    // Prepared by hand on the run root: the rerun submits no preparation, and its task fails.
    let prepared = gen_.run(&["prepare", "examples/quickstart.toml"]).await;
    assert_eq!(prepared.code, Some(0), "{}", prepared.stderr);
    assert!(root.join("prepared/status.json").is_file());
    let again = gen_
        .run(&[
            "slurm",
            "examples/quickstart.toml",
            "--only-failed",
            "--submit",
        ])
        .await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    let job = again.stdout.trim().to_owned();
    wait_gone(&[&job], &root).await;
    let status = gen_.run(&["status", root_arg, "--json"]).await;
    let view: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    assert_eq!(view["preparation"]["state"], "done", "{view}");
    let shard = &view["shards"][0];
    assert_eq!(shard["state"], "failed", "{view}\n{}", logs(&root));
    let log = root.join(format!("slurm/{job}_0.out"));
    assert_eq!(shard["log"], log.display().to_string(), "{view}");
    let why = shard["stopped_by"].as_str().expect("stopped_by");
    assert!(
        why.starts_with(&format!("task {job}_0 exited with 127 on "))
            && why.ends_with("/nonexistent/gen: No such file or directory"),
        "{why}"
    );
}

/// Prompts of the fake hub's dataset: `n` one-turn conversations with ids.
fn hub_rows(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| {
            serde_json::json!({
                "id": format!("q{i:03}"),
                "messages": [{"role": "user", "content": format!("question number {i}")}],
            })
            .to_string()
                + "\n"
        })
        .collect::<String>()
        .into_bytes()
}

/// Requests of the fake hub that fetched the dataset: its listing (`info`) and its data
/// file's bytes (not the `bytes=0-0` probe of its size).
fn hub_fetches(hub: &FakeHub) -> (usize, usize) {
    let seen = hub.seen();
    let listings = seen
        .iter()
        .filter(|s| s.path.contains("/revision/"))
        .count();
    let downloads = seen
        .iter()
        .filter(|s| s.path.contains("/resolve/") && s.range.as_deref() != Some("bytes=0-0"))
        .count();
    (listings, downloads)
}

/// Issue 29 item 7 on the cluster: a 3-shard job prepares once. `gen slurm --submit` submits
/// a preparation job and the array after it; the dataset is fetched from the hub exactly once
/// (before: once per shard), every shard takes the prepared prompts, and the merged output
/// has every prompt exactly once. A shard run again (`--only-failed`) takes them again
/// without a preparation job and without touching the hub.
#[tokio::test(flavor = "multi_thread")]
async fn a_sharded_job_prepares_once_and_every_shard_reads_the_shared_preparation() {
    if let Some(reason) = slurm_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let hub = FakeHub::start(vec![FakeRepo::new(
        "gen-test/questions",
        vec![("data/train.jsonl", hub_rows(90))],
    )]);
    let server = FakeOpenAi::start(Knobs::default()).await;
    let mut gen_ = Project::new();
    gen_.write(
        "local.jsonl",
        "{\"prompt\": \"a local one\"}\n{\"prompt\": \"another\"}\n",
    );
    gen_.config(
        &Config::new(&server.url())
            .source_table(
                "questions",
                "repo = \"gen-test/questions\"\nrevision = \"main\"\nsplit = \"train\"\n\
                 files = [\"data/train.jsonl\"]\nformat = \"jsonl\"\n\
                 messages-field = \"messages\"\nid-field = \"id\"",
            )
            .source("local", "local.jsonl"),
    );
    let cache = gen_.path("hf-home");
    let cache = cache.to_str().expect("utf-8");
    gen_.env("HF_ENDPOINT", &hub.endpoint);
    gen_.env("HF_HOME", cache);
    gen_.env("HF_HUB_CACHE", &format!("{cache}/hub"));
    let root: PathBuf = gen_.run_path("");
    let root_arg = root.to_str().expect("utf-8");

    let submitted = gen_
        .run(&[
            "slurm",
            "cfg.toml",
            "--shards",
            "3",
            "--submit",
            "--",
            "--cpus-per-task=1",
        ])
        .await;
    assert_eq!(submitted.code, Some(0), "{}", submitted.stderr);
    let job = submitted.stdout.trim().to_owned();
    wait_gone(&[&job], &root).await;
    assert_eq!(
        hub_fetches(&hub),
        (1, 1),
        "one listing and one download for the whole job\n{}",
        logs(&root)
    );
    assert!(
        submitted
            .stderr
            .contains("prepares questions, local once into"),
        "{}",
        submitted.stderr
    );
    let prepare = std::fs::read_to_string(root.join("slurm/gen-prepare.sbatch")).expect("script");
    assert!(
        prepare.contains(" prepare ") && prepare.contains("#SBATCH --cpus-per-task=1\n"),
        "{prepare}"
    );
    let prepared = prompt_ids(&root.join("prepared"), "questions");
    assert_eq!(prepared.len(), 90);
    for shard in ["shard-000", "shard-001", "shard-002"] {
        assert_eq!(
            prompt_ids(&root.join(shard), "questions"),
            prepared,
            "{shard}"
        );
    }
    let shard_logs = logs(&root);
    assert_eq!(
        shard_logs.matches("gen: prepared once in").count(),
        3,
        "{shard_logs}"
    );

    let status = gen_.run(&["status", root_arg, "--json"]).await;
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let view: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    assert_eq!(view["preparation"]["state"], "done", "{view}");
    assert!(
        view["shards"]
            .as_array()
            .expect("shards")
            .iter()
            .all(|s| s["state"] == "done"),
        "{view}\n{shard_logs}"
    );
    let merged = root.join("merged");
    let records = completions(&merged.join("sources/questions/completions.jsonl.zst"));
    let ids: Vec<String> = records
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect();
    let unique: HashSet<String> = ids.iter().cloned().collect();
    assert_eq!(unique.len(), ids.len(), "a prompt answered twice");
    assert_eq!(unique, prepared, "every prompt answered");
    let verify = gen_.run(&["verify", merged.to_str().expect("utf-8")]).await;
    assert_eq!(verify.code, Some(0), "{}{}", verify.stdout, verify.stderr);

    // Shard 2 lost (its directory gone): the rerun resubmits it alone, with no preparation
    // job, and its task takes the prepared prompts again without asking the hub.
    std::fs::remove_dir_all(root.join("shard-002")).expect("remove shard 2");
    std::fs::remove_dir_all(&merged).expect("remove merged");
    let again = gen_
        .run(&["slurm", "cfg.toml", "--only-failed", "--submit"])
        .await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(!again.stderr.contains("once into"), "{}", again.stderr);
    let rerun = again.stdout.trim().to_owned();
    wait_gone(&[&rerun], &root).await;
    assert_eq!(hub_fetches(&hub), (1, 1), "{}", logs(&root));
    assert_eq!(prompt_ids(&root.join("shard-002"), "questions"), prepared);
    assert!(merged.is_dir(), "merged again\n{}", logs(&root));
}

/// Issue 29 item 7: a preparation that fails (the dataset is not on the hub) ends the job's
/// array before any task starts (no shard downloads it again), and `gen status RUN_ROOT`
/// says which source failed and why, exit 1, with the rerun; `--only-failed` then prepares
/// only that source again and runs every shard.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_preparation_stops_the_array_and_says_why() {
    if let Some(reason) = slurm_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let empty = FakeHub::start(Vec::new());
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write("local.jsonl", "{\"prompt\": \"a local one\"}\n");
    gen_.config(
        &Config::new(&server.url())
            .source_table(
                "questions",
                "repo = \"gen-test/questions\"\nrevision = \"main\"\nsplit = \"train\"\n\
                 files = [\"data/train.jsonl\"]\nformat = \"jsonl\"\n\
                 messages-field = \"messages\"\nid-field = \"id\"",
            )
            .source("local", "local.jsonl"),
    );
    let cache = gen_.path("hf-home");
    let cache = cache.to_str().expect("utf-8");
    let env = |endpoint: &str| {
        [
            ("HF_ENDPOINT", endpoint.to_owned()),
            ("HF_HOME", cache.to_owned()),
            ("HF_HUB_CACHE", format!("{cache}/hub")),
        ]
    };
    let root: PathBuf = gen_.run_path("");
    let root_arg = root.to_str().expect("utf-8");
    let submit = async |args: &[&str], endpoint: &str| {
        let env = env(endpoint);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = gen_.run_with_env(args, &env).await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        out.stdout.trim().to_owned()
    };
    let job = submit(
        &["slurm", "cfg.toml", "--shards", "2", "--submit"],
        &empty.endpoint,
    )
    .await;
    wait_gone(&[&job], &root).await;
    assert!(
        !root.join("shard-000").exists() && !root.join("shard-001").exists(),
        "no task ran\n{}",
        logs(&root)
    );
    let status = gen_.run(&["status", root_arg, "--json"]).await;
    assert_eq!(status.code, Some(1), "{}", status.stderr);
    let view: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    assert_eq!(view["preparation"]["state"], "stopped", "{view}");
    assert_eq!(view["preparation"]["failed"][0], "questions", "{view}");
    let questions = &view["sources"][0];
    assert_eq!(
        (questions["name"].as_str(), questions["phase"].as_str()),
        (Some("questions"), Some("failed")),
        "{view}"
    );
    let verdict = questions["verdict"].to_string();
    assert!(verdict.contains("gen-test/questions"), "{verdict}");
    let table = gen_.run(&["status", root_arg]).await;
    for line in [
        "prep   stopped on ",
        "1 of 2 sources prepared once; failed: questions",
        "why: `gen diagnose questions --run-dir ",
        "rerun  shards 0,1: `gen slurm ",
    ] {
        assert!(table.stdout.contains(line), "{line}:\n{}", table.stdout);
    }

    let prepared = root.join("prepared");
    let diagnosis = gen_
        .run(&[
            "diagnose",
            "questions",
            "--run-dir",
            prepared.to_str().expect("utf-8"),
        ])
        .await;
    assert!(
        diagnosis.stdout.contains("gen-test/questions"),
        "{}{}",
        diagnosis.stdout,
        diagnosis.stderr
    );

    // The dataset appears: the rerun prepares it alone, then runs both shards.
    let hub = FakeHub::start(vec![FakeRepo::new(
        "gen-test/questions",
        vec![("data/train.jsonl", hub_rows(20))],
    )]);
    let rerun = submit(
        &["slurm", "cfg.toml", "--only-failed", "--submit"],
        &hub.endpoint,
    )
    .await;
    wait_gone(&[&rerun], &root).await;
    assert_eq!(hub_fetches(&hub), (1, 1), "{}", logs(&root));
    let status = gen_.run(&["status", root_arg, "--json"]).await;
    assert_eq!(status.code, Some(0), "{}\n{}", status.stdout, logs(&root));
    let view: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    assert_eq!(view["merged"], true, "{view}");
}

/// `Some(reason)` when the cluster has no two-node partition `gen-multi` to take a job (it is
/// `scripts/slurm/cluster.sh`'s: two more `slurmd` daemons on this host).
fn two_nodes_skip_reason() -> Option<String> {
    let states = Command::new("sinfo")
        .args(["-h", "-N", "-p", "gen-multi", "-o", "%N %T"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let usable = states
        .lines()
        .filter(|l| !l.contains(" down") && !l.contains(" drain"))
        .count();
    if usable >= 2 {
        return None;
    }
    let reason = format!(
        "the Slurm cluster has no two usable nodes in partition `gen-multi` ({:?}): run \
         `scripts/slurm/cluster.sh start`",
        states.trim()
    );
    if std::env::var_os("GEN_REQUIRE_SLURM").is_some() {
        panic!("GEN_REQUIRE_SLURM is set but {reason}");
    }
    Some(reason)
}

/// A stand-in for a server across nodes (SGLang's `--nnodes --node-rank --dist-init-addr`):
/// each node records that it ran its part (rank, node count, head, its pid) in
/// `CHECKINS/rank-RANK-NODE`; rank 0 waits until every rank has checked in, then serves (the
/// real llama-server, the rest of its arguments); the other ranks stay until killed.
const NODE_PART: &str = r#"rank=$1; nnodes=$2; head=$3; checkins=$4; shift 4
echo "$rank $nnodes $head $$" >> "$checkins/rank-$rank-$SLURMD_NODENAME"
if [ "$rank" != 0 ]; then exec sleep infinity; fi
while [ "$(ls "$checkins" | grep -c '^rank-')" -lt "$nnodes" ]; do sleep 0.2; done
exec "$@"
"#;

/// Issue 29 item 6: a shard across two nodes of the real cluster (`--nodes-per-shard 2`, in
/// the two-node partition): the array task gets both nodes, `gen` runs on the first, and the
/// server's launch runs on each node with its own `{node_rank}` (the stand-in [`NODE_PART`]
/// proves it: ranks 0 and 1 on two distinct nodes, rank 0 on `gen`'s). When rank 1's part
/// dies mid-run, `gen` sees its server die and starts it again, across both nodes again; the
/// shard then answers every prompt and merges. Before: `--nodes-per-shard` did not exist.
#[tokio::test(flavor = "multi_thread")]
async fn a_shard_spans_two_nodes_and_a_dead_node_part_is_the_server_dying() {
    if let Some(reason) = llama_skip_reason()
        .or_else(slurm_skip_reason)
        .or_else(two_nodes_skip_reason)
    {
        eprintln!("skipped: {reason}");
        return;
    }
    let gen_ = project(48);
    gen_.write("node-part.sh", NODE_PART);
    let checkins = gen_.path("checkins");
    std::fs::create_dir_all(&checkins).expect("checkins");
    let root: PathBuf = gen_.run_path("");
    let started = Instant::now();
    let step = |what: &str| eprintln!("[{:>5.1}s] {what}", started.elapsed().as_secs_f64());
    let launch = format!(
        "/bin/sh {} {{node_rank}} {{nnodes}} {{head}} {} {SERVER_LAUNCH}",
        gen_.path("node-part.sh").display(),
        checkins.display()
    );
    let submitted = gen_
        .run(&[
            "slurm",
            "examples/quickstart.toml",
            "--shards",
            "1",
            "--nodes-per-shard",
            "2",
            "--submit",
            "--server-launch",
            &launch,
            "--",
            "--partition=gen-multi",
            "--cpus-per-task=1",
        ])
        .await;
    assert_eq!(submitted.code, Some(0), "{}", submitted.stderr);
    let job = submitted.stdout.trim().to_owned();
    let script = std::fs::read_to_string(root.join("slurm/gen.sbatch")).expect("script");
    for line in [
        "#SBATCH --nodes=2\n",
        "#SBATCH --ntasks-per-node=1\n",
        " --nodes-per-shard 2",
    ] {
        assert!(script.contains(line), "{line}:\n{script}");
    }
    step(&format!("submitted job {job}"));

    // Both nodes ran their part, and the shard generates through rank 0's server.
    let shard = root.join("shard-000");
    wait_for_shard(&shard, &root, "shard 0 generating", |s| done_count(s) > 0).await;
    let parts = |rank: u32| -> Vec<(String, Vec<String>)> {
        std::fs::read_dir(&checkins)
            .expect("checkins")
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let node = name.strip_prefix(&format!("rank-{rank}-"))?.to_owned();
                let text = std::fs::read_to_string(e.path()).expect("checkin");
                Some((node, text.lines().map(str::to_owned).collect()))
            })
            .collect()
    };
    let (rank0, rank1) = (parts(0), parts(1));
    assert_eq!(rank0.len(), 1, "{rank0:?}");
    assert_eq!(rank1.len(), 1, "{rank1:?}");
    let (head_node, node1) = (rank0[0].0.clone(), rank1[0].0.clone());
    assert_ne!(head_node, node1, "two distinct nodes");
    let nodes: BTreeSet<&str> = [head_node.as_str(), node1.as_str()].into();
    assert_eq!(nodes, BTreeSet::from(["gen-n1", "gen-n2"]));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    for (_, lines) in rank0.iter().chain(&rank1) {
        let fields: Vec<&str> = lines[0].split(' ').collect();
        assert_eq!(fields[1..3], ["2", host.trim()], "{lines:?}");
    }
    let owner = read_json(&shard.join("owner.json")).expect("owner");
    assert_eq!(owner["job"], format!("{job}_0"), "{owner}");
    // gen runs in the batch script, on the node where rank 0 serves.
    let batch_host = Command::new("squeue")
        .args(["-h", "-j", &job, "-o", "%B"])
        .output()
        .expect("squeue");
    let batch_host = String::from_utf8_lossy(&batch_host.stdout)
        .trim()
        .to_owned();
    assert_eq!(batch_host, head_node, "{}", logs(&root));
    step(&format!(
        "ranks 0 on {head_node} and 1 on {node1} checked in"
    ));

    // Rank 1's part dies: the step ends, gen sees its server die and starts it again.
    let pid = rank1[0].1[0].split(' ').nth(3).expect("pid").to_owned();
    let killed = Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    wait_for("both parts to start again", JOB_DEADLINE)
        .every(Duration::from_millis(300))
        .context(|| format!("logs:\n{}", logs(&root)))
        .until(|| parts(0)[0].1.len() == 2 && parts(1)[0].1.len() == 2)
        .await;
    step("rank 1 killed; the server started again on both nodes");

    wait_gone(&[&job], &root).await;
    step("done");
    let server_log = std::fs::read_to_string(shard.join("server.log")).expect("server log");
    assert!(
        server_log.contains(&format!("srun: error: {node1}: task 1: Killed")),
        "{server_log}"
    );
    let status = read_json(&shard.join("status.json")).expect("status");
    let view = gen_
        .run(&["status", root.to_str().expect("utf-8"), "--json"])
        .await;
    assert_eq!(view.code, Some(0), "{}\n{}", view.stdout, logs(&root));
    let view: serde_json::Value = serde_json::from_str(&view.stdout).expect("json");
    assert_eq!(view["shards"][0]["state"], "done", "{view}");
    assert_eq!(view["merged"], true, "{view}\n{status}");
    let table = gen_.run(&["status", root.to_str().expect("utf-8")]).await;
    assert!(
        table.stdout.contains("2 nodes per shard"),
        "{}",
        table.stdout
    );
    assert_merged_exactly_once(&gen_, &root, &shard).await;
}

/// A shared cluster whose `MaxArraySize` (3 on the test cluster: task ids 0-2) is below the
/// shard count: `--shards 5 --max-running 1` is submitted as two arrays, task ids 0-2 and then
/// 0-1 from shard 3, each throttled as Slurm sees it (`ArrayTaskThrottle`) and both recorded
/// in `submit.json`; a cancelled task of the second array is shown by `gen status RUN_ROOT` and
/// resubmitted alone by `--only-failed` (with the throttle and its offset), and every shard
/// runs exactly once: every prompt asked and merged once.
#[tokio::test(flavor = "multi_thread")]
async fn more_shards_than_max_array_size_are_split_into_throttled_arrays_each_shard_run_once() {
    if let Some(reason) = slurm_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    let prompts: String = (0..40)
        .map(|i| format!("{{\"prompt\": \"question {i}\"}}\n"))
        .collect();
    gen_.write("local.jsonl", &prompts);
    gen_.config(&Config::new(&server.url()).source("local", "local.jsonl"));
    let root: PathBuf = gen_.run_path("");
    let root_arg = root.to_str().expect("utf-8");

    // Held, so that the throttle is seen before anything runs.
    let submitted = gen_
        .run(&[
            "slurm",
            "cfg.toml",
            "--shards",
            "5",
            "--max-running",
            "1",
            "--submit",
            "--",
            "--hold",
        ])
        .await;
    assert_eq!(submitted.code, Some(0), "{}", submitted.stderr);
    let arrays: Vec<String> = submitted.stdout.lines().map(str::to_owned).collect();
    assert_eq!(arrays.len(), 2, "{}", submitted.stderr);
    assert!(
        submitted
            .stderr
            .contains("`MaxArraySize` 3: 5 shards go in 2 arrays"),
        "{}",
        submitted.stderr
    );
    let jobs: Vec<serde_json::Value> = (std::fs::read_to_string(root.join("slurm/jobs.jsonl"))
        .expect("jobs.jsonl"))
    .lines()
    .map(|l| serde_json::from_str(l).expect("json"))
    .collect();
    let ids: Vec<String> = (jobs.iter())
        .map(|j| j["job_id"].as_str().expect("job id").to_owned())
        .collect();
    let kept = read_json(&root.join("slurm/submit.json")).expect("submit.json");
    let kept: Vec<(&str, &str, u64)> = (kept["arrays"].as_array().expect("arrays").iter())
        .map(|a| {
            let text = |key: &str| a[key].as_str().expect("text");
            (
                text("job_id"),
                text("array"),
                a["offset"].as_u64().expect("offset"),
            )
        })
        .collect();
    assert_eq!(
        kept,
        [
            (arrays[0].as_str(), "0-2", 0),
            (arrays[1].as_str(), "0-1", 3)
        ]
    );
    for job in &arrays {
        let shown = Command::new("scontrol")
            .args(["show", "job", job])
            .output()
            .expect("scontrol");
        let shown = String::from_utf8_lossy(&shown.stdout);
        assert!(shown.contains("ArrayTaskThrottle=1"), "{job}: {shown}");
    }
    // Task 1 of the second array is shard 4: cancelled before it runs.
    let cancelled = Command::new("scancel")
        .arg(format!("{}_1", arrays[1]))
        .status()
        .expect("scancel");
    assert!(cancelled.success());
    let released = Command::new("scontrol")
        .arg("release")
        .arg(ids.join(","))
        .status()
        .expect("scontrol release");
    assert!(released.success());
    wait_gone(&ids.iter().map(String::as_str).collect::<Vec<_>>(), &root).await;

    let status = gen_.run(&["status", root_arg, "--json"]).await;
    let view: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    let states: Vec<&str> = (view["shards"].as_array().expect("shards").iter())
        .map(|s| s["state"].as_str().expect("state"))
        .collect();
    assert_eq!(
        states,
        ["done", "done", "done", "done", "not_started"],
        "{view}\n{}",
        logs(&root)
    );
    let table = gen_.run(&["status", root_arg]).await;
    for line in [
        format!(
            "job {} (array 0-2), {} (array 0-1 from shard 3)",
            arrays[0], arrays[1]
        ),
        "one task at a time".to_owned(),
    ] {
        assert!(table.stdout.contains(&line), "{line}:\n{}", table.stdout);
    }

    let again = gen_
        .run(&["slurm", "cfg.toml", "--only-failed", "--submit"])
        .await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    let rerun = again.stdout.trim().to_owned();
    let script =
        std::fs::read_to_string(root.join("slurm/gen-only-failed.sbatch")).expect("script");
    assert!(
        script.lines().any(|l| l == "#SBATCH --array=1%1"),
        "{script}"
    );
    // Submitted as the job was: held too.
    let released = Command::new("scontrol")
        .args(["release", &rerun])
        .status()
        .expect("scontrol release");
    assert!(released.success());
    wait_gone(&[&rerun], &root).await;

    // Each shard's one owner: the task its array and offset give it.
    let expected = [
        format!("{}_0", arrays[0]),
        format!("{}_1", arrays[0]),
        format!("{}_2", arrays[0]),
        format!("{}_0", arrays[1]),
        format!("{rerun}_1"),
    ];
    for (index, task) in expected.iter().enumerate() {
        let owner = read_json(&root.join(format!("shard-{index:03}/owner.json"))).expect("owner");
        assert_eq!(
            (owner["job"].as_str(), owner["epoch"].as_u64()),
            (Some(task.as_str()), Some(1)),
            "shard {index}: {owner}"
        );
    }
    let status = gen_.run(&["status", root_arg, "--json"]).await;
    assert_eq!(status.code, Some(0), "{}\n{}", status.stdout, logs(&root));
    let merged = root.join("merged");
    let ids: Vec<String> = completions(&merged.join("sources/local/completions.jsonl.zst"))
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect();
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(
        (ids.len(), unique.len()),
        (40, 40),
        "every prompt merged once"
    );
    assert_eq!(server.chat_requests(), 40, "every prompt asked once");
    let verify = gen_.run(&["verify", merged.to_str().expect("utf-8")]).await;
    assert_eq!(verify.code, Some(0), "{}{}", verify.stdout, verify.stderr);
}
