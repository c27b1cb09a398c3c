//! `gen run --shard auto` as array tasks would run it, without a scheduler: the launcher's
//! variables set by hand, the fake server on `127.0.0.1:0`. A missing launcher is refused; two
//! tasks fill their shards and the last merges; a duplicate task for a live shard is refused;
//! a task frozen past its lease never writes again and a new task takes the shard over.

use std::time::Duration;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};

use super::{config, rows};
use crate::support::{Project, Running, completion_ids, done, process_state, read_json, wait_for};

/// The variables Slurm sets in array task `task` of `sbatch --array=0-(count-1)`.
fn slurm_task(project: &mut Project, job: u32, task: u32, count: u32) {
    for (name, value) in [
        ("SLURM_ARRAY_JOB_ID", job.to_string()),
        ("SLURM_JOB_ID", (job + task + 1).to_string()),
        ("SLURM_ARRAY_TASK_ID", task.to_string()),
        ("SLURM_ARRAY_TASK_MIN", "0".to_owned()),
        ("SLURM_ARRAY_TASK_MAX", (count - 1).to_string()),
        ("SLURM_ARRAY_TASK_COUNT", count.to_string()),
    ] {
        project.env(name, &value);
    }
}

/// A project with one source of `prompts` rows whose run directory is the job's run root.
fn project(url: &str, prompts: usize) -> Project {
    let project = Project::new();
    project.write("data/alpha.jsonl", rows("alpha", prompts));
    project.config(
        &config(url)
            .run("dir = \"runs/job\"")
            .source("alpha", "data/alpha.jsonl"),
    );
    project
}

#[tokio::test]
async fn shard_auto_without_a_launcher_is_refused_with_what_to_do() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = project(&server.url(), 4);
    let out = project.run(&["run", "cfg.toml", "--shard", "auto"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("`--shard auto` found no launcher variables")
            && out.stderr.contains("hint: run it as a Slurm array task"),
        "{}",
        out.stderr
    );
    assert_eq!(server.chat_requests(), 0);
    assert!(!project.run_path("").exists(), "nothing written");
}

#[tokio::test]
async fn two_array_tasks_fill_their_shards_and_the_last_one_merges() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let mut first = project(&server.url(), 40);
    slurm_task(&mut first, 90, 0, 2);
    let out = first.run(&["run", "cfg.toml", "--shard", "auto"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("shard 0 of 2 (0-based), from Slurm array job 90: SLURM_ARRAY_TASK_ID=0"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("1 of 2 shards done"), "{}", out.stderr);
    assert!(!first.run_path("merged").exists());

    // The second task: same project, its own variables.
    let mut second = first;
    slurm_task(&mut second, 90, 1, 2);
    let out = second.run(&["run", "cfg.toml", "--shard", "auto"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("merged 2 shards"), "{}", out.stderr);
    let merged = format!("{}/merged", second.run_dir());
    let (code, audit) = second.verify_at(&merged).await;
    assert_eq!(code, Some(0), "{audit:#}");
    let ids = completion_ids(&second.run_path("merged/sources/alpha/completions.jsonl.zst"));
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), unique.len()), (40, 40), "every prompt once");
    assert_eq!(server.chat_requests(), 40, "no prompt sent twice");

    let status = second.run(&["status", &second.run_dir(), "--json"]).await;
    let view: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    assert_eq!(view["merged"], true, "{view:#}");
    for shard in view["shards"].as_array().expect("shards") {
        assert_eq!(shard["state"], "done", "{view:#}");
        assert_eq!(shard["owner"]["job"], format!("90_{}", shard["index"]));
    }
    assert_eq!(view["sources"][0]["done"], 40, "{view:#}");

    // A rerun of a finished task takes its released shard back and has nothing to do.
    let out = second.run(&["run", "cfg.toml", "--shard", "auto"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("released by its last owner"),
        "{}",
        out.stderr
    );
    assert_eq!(server.chat_requests(), 40);
}

#[tokio::test]
async fn a_duplicate_task_for_a_live_shard_is_refused_and_the_owner_finishes() {
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(50),
        ..Knobs::default()
    })
    .await;
    // 400 prompts, 4 at a time, 50 ms each: the owner is still at it when the duplicate starts.
    let mut owner = project(&server.url(), 400);
    slurm_task(&mut owner, 91, 0, 1);
    let mut child = owner.start(&["run", "cfg.toml", "--shard", "auto"]);
    let shard = format!("{}/shard-000", owner.run_dir());
    child
        .until_status(
            &owner,
            &shard,
            "the first answers",
            Duration::from_secs(60),
            |s| done(s) > 0,
        )
        .await;

    // The scheduler starts the same task again (another job's copy of array task 0).
    let mut duplicate = owner;
    slurm_task(&mut duplicate, 92, 0, 1);
    let out = duplicate.run(&["run", "cfg.toml", "--shard", "auto"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("is owned by a live task (job 91_0, pid")
            && out.stderr.contains("refuses to write to it"),
        "{}",
        out.stderr
    );

    let exit = child.finish(Duration::from_secs(300)).await;
    assert_eq!(exit.code, Some(0), "{}", exit.stderr);
    let (code, audit) = duplicate.verify_at(&shard).await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(audit["totals"]["completed"], 400, "{audit:#}");
    assert_eq!(server.chat_requests(), 400, "the duplicate sent nothing");
}

#[tokio::test]
async fn a_task_frozen_past_its_lease_never_writes_again_and_is_taken_over() {
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(30),
        ..Knobs::default()
    })
    .await;
    let mut stale = project(&server.url(), 120);
    // A 4 s lease: renewed every 0.67 s, expired after 2 s without a renewal.
    stale.env("GEN_SHARD_LEASE_SECS", "4");
    slurm_task(&mut stale, 93, 0, 1);
    let mut child = stale.start(&["run", "cfg.toml", "--shard", "auto"]);
    let shard = format!("{}/shard-000", stale.run_dir());
    child
        .until_status(
            &stale,
            &shard,
            "the first answers",
            Duration::from_secs(60),
            |s| done(s) >= 10,
        )
        .await;
    // Frozen (a stalled node, a suspended VM) for longer than half its lease.
    child.signal("STOP");
    // `kill` returns once the signal is sent; the files are read once it has taken effect.
    let pid = child.pid();
    wait_for("gen stopped by SIGSTOP", Duration::from_secs(10))
        .until(|| process_state(pid) == Some('T'))
        .await;
    let completions = stale.path(&format!("{shard}/sources/alpha/completions.jsonl.zst"));
    let status_path = stale.path(&format!("{shard}/status.json"));
    let frozen = (
        std::fs::read(&completions).unwrap_or_default(),
        std::fs::read(&status_path).expect("status"),
    );
    let owner_path = stale.path(&format!("{shard}/owner.json"));
    wait_for("the heartbeat to age past 3 s", Duration::from_secs(30))
        .every(Duration::from_millis(50))
        .until(|| {
            let owner = read_json(&owner_path).expect("owner.json");
            let beat = owner["heartbeat_unix_ms"].as_u64().expect("heartbeat");
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_millis() as u64;
            now.saturating_sub(beat) > 3_000
        })
        .await;
    child.signal("CONT");
    let out = child.finish(Duration::from_secs(300)).await;
    let stderr = out.stderr;
    assert_eq!(out.code, Some(1), "{stderr}");
    assert!(stderr.contains("was not renewed for"), "{stderr}");
    assert_eq!(
        std::fs::read(&completions).unwrap_or_default(),
        frozen.0,
        "a completion was written after the lease expired"
    );
    assert_eq!(
        std::fs::read(&status_path).expect("status"),
        frozen.1,
        "status.json was written after the lease expired"
    );

    // Its replacement takes the shard over (the old process is gone) and finishes it.
    let mut taker = stale;
    slurm_task(&mut taker, 94, 0, 1);
    let out = taker.run(&["run", "cfg.toml", "--shard", "auto"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("took over") && out.stderr.contains("epoch 2"),
        "{}",
        out.stderr
    );
    let (code, audit) = taker.verify_at(&shard).await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(audit["totals"]["completed"], 120, "{audit:#}");
    assert_eq!(
        audit["totals"]["duplicated"].as_u64().unwrap_or(0),
        0,
        "{audit:#}"
    );
}

/// Issue 29 item 4: the successor starts while the owner is still frozen, holding the run
/// directory's `flock`. Before, it claimed epoch 2 and died at the lock ("in use by another
/// `gen run`"); the owner, resumed, fenced itself, and nothing finished the shard.
#[tokio::test]
async fn a_task_takes_over_from_an_owner_still_frozen_and_finishes_the_shard() {
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(30),
        ..Knobs::default()
    })
    .await;
    let mut stale = project(&server.url(), 120);
    stale.env("GEN_SHARD_LEASE_SECS", "4");
    slurm_task(&mut stale, 95, 0, 1);
    let mut child = stale.start(&["run", "cfg.toml", "--shard", "auto"]);
    let shard = format!("{}/shard-000", stale.run_dir());
    child
        .until_status(
            &stale,
            &shard,
            "the first answers",
            Duration::from_secs(60),
            |s| done(s) >= 10,
        )
        .await;
    child.signal("STOP");
    let pid = child.pid();
    wait_for("gen stopped by SIGSTOP", Duration::from_secs(10))
        .until(|| process_state(pid) == Some('T'))
        .await;

    let mut taker = stale;
    slurm_task(&mut taker, 96, 0, 1);
    let out = taker.run(&["run", "cfg.toml", "--shard", "auto"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("took over") && out.stderr.contains("going on under the lease"),
        "{}",
        out.stderr
    );
    let completions = taker.path(&format!("{shard}/sources/alpha/completions.jsonl.zst"));
    let finished = std::fs::read(&completions).expect("completions");

    // Resumed, the old owner finds the higher epoch and writes nothing more.
    child.signal("CONT");
    let out = child.finish(Duration::from_secs(300)).await;
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(std::fs::read(&completions).expect("completions"), finished);
    let (code, audit) = taker.verify_at(&shard).await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_eq!(audit["totals"]["completed"], 120, "{audit:#}");
    assert_eq!(
        audit["totals"]["duplicated"].as_u64().unwrap_or(0),
        0,
        "{audit:#}"
    );
}

#[tokio::test]
async fn the_batch_script_passes_sigusr1_on_and_gen_stops_gracefully() {
    let server = FakeOpenAi::start(Knobs {
        delay: Duration::from_millis(50),
        ..Knobs::default()
    })
    .await;
    let project = project(&server.url(), 400);
    let written = project.run(&["slurm", "cfg.toml", "--shards", "1"]).await;
    assert_eq!(written.code, Some(0), "{}", written.stderr);
    let script = written.stdout.trim().to_owned();
    assert!(
        script.ends_with(&format!("{}/slurm/gen.sbatch", project.run_dir())),
        "{script}"
    );

    // The batch shell as Slurm starts it for array task 0 (Slurm itself is not needed here:
    // the real cluster runs the same script in tests/slurm.rs).
    let mut shell: Running = tokio::process::Command::new("bash")
        .arg(&script)
        .current_dir(project.path(""))
        .envs([
            ("SLURM_ARRAY_JOB_ID", "95"),
            ("SLURM_JOB_ID", "96"),
            ("SLURM_ARRAY_TASK_ID", "0"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_MAX", "0"),
            ("SLURM_ARRAY_TASK_COUNT", "1"),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("bash")
        .into();
    let shard = format!("{}/shard-000", project.run_dir());
    shell
        .until_status(&project, &shard, "answers", Duration::from_secs(60), |s| {
            done(s) >= 10
        })
        .await;
    // What `--signal=B:USR1@SECS` does ahead of the time limit: SIGUSR1 to the shell only.
    shell.signal("USR1");
    let out = shell.finish(Duration::from_secs(300)).await;
    let stderr = out.stderr;
    assert_eq!(out.code, Some(1), "{stderr}");
    assert!(stderr.contains("gen: interrupted"), "{stderr}");
    let status = project.status_at(&shard).expect("status");
    assert_eq!(status["finished"], true, "stopped gracefully: {status:#}");
    assert!(done(&status) < 400, "stopped mid-run: {status:#}");
    let owner = read_json(&project.path(&format!("{shard}/owner.json"))).expect("owner");
    assert!(owner["released_unix_ms"].is_u64(), "let go: {owner:#}");
    let (code, audit) = project.verify_at(&shard).await;
    assert_eq!(code, Some(0), "{audit:#}");
}
