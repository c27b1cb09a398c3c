//! The job scripts `gen slurm` writes, checked without a scheduler: the batch script run by
//! bash as a Slurm task would run it. (On a real Slurm cluster: `slurm`.)

use std::path::PathBuf;
use std::process::Command;

use crate::support::{Gen, copy_examples};

/// Issue 29 item 3, without a cluster: the batch script run as Slurm runs it (its output into
/// `%A_%a.out`) with a `gen` binary that does not exist. Before, `gen status` showed the shard
/// `not started` forever, with no pointer to the log saying why.
#[tokio::test]
async fn a_task_whose_gen_never_started_is_shown_failed_with_its_log() {
    let gen_ = Gen::new();
    copy_examples(&gen_);
    let root: PathBuf = gen_.run_path("");
    let written = gen_
        .run(&[
            "slurm",
            "examples/quickstart.toml",
            "--shards",
            "2",
            "--gen-bin",
            "/nonexistent/gen",
        ])
        .await;
    assert_eq!(written.code, Some(0), "{}", written.stderr);
    let log = root.join("slurm/14_1.out");
    let out = std::fs::File::create(&log).expect("log");
    let task = Command::new("bash")
        .arg(root.join("slurm/gen.sbatch"))
        .env("SLURM_ARRAY_JOB_ID", "14")
        .env("SLURM_ARRAY_TASK_ID", "1")
        .stdout(out.try_clone().expect("dup"))
        .stderr(out)
        .status()
        .expect("bash");
    assert_eq!(task.code(), Some(127));

    let status = gen_
        .run(&["status", root.to_str().expect("utf-8"), "--json"])
        .await;
    let view: serde_json::Value = serde_json::from_str(&status.stdout).expect("json");
    let shard = &view["shards"][1];
    assert_eq!(shard["state"], "failed", "{view}");
    assert_eq!(shard["log"], log.display().to_string(), "{view}");
    let why = shard["stopped_by"].as_str().expect("stopped_by");
    assert!(
        why.starts_with("task 14_1 exited with 127 on ")
            && why.ends_with("/nonexistent/gen: No such file or directory"),
        "{why}"
    );
    assert_eq!(view["shards"][0]["state"], "not_started", "{view}");
    let table = gen_.run(&["status", root.to_str().expect("utf-8")]).await;
    assert!(
        table.stdout.contains(&format!("log: {}", log.display())),
        "{}",
        table.stdout
    );
}
