//! The job scripts `gen slurm` and `gen k8s` write, checked without a scheduler: the batch
//! script run by bash as a Slurm task would run it, the Indexed Job as the pods would see it.
//! (On a real Slurm cluster: `slurm`.)

use std::path::PathBuf;
use std::process::Command;

use crate::support::{Project, copy_examples};

/// Issue 29 item 3, without a cluster: the batch script run as Slurm runs it (its output into
/// `%A_%a.out`) with a `gen` binary that does not exist. Before, `gen status` showed the shard
/// `not started` forever, with no pointer to the log saying why.
#[tokio::test]
async fn a_task_whose_gen_never_started_is_shown_failed_with_its_log() {
    let gen_ = Project::new();
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

/// Issue 29 item 5: the config path is the pods' (`/data/...`, not on this machine): before,
/// `gen k8s` loaded it here and exited 2. The run root then lies next to it, on the volume.
#[tokio::test]
async fn gen_k8s_takes_the_config_as_the_pods_see_it() {
    let gen_ = Project::new();
    let out = gen_
        .run(&[
            "k8s",
            "/data/jobs/job.toml",
            "--shards",
            "2",
            "--image",
            "registry.example/gen:1",
            "--volume-claim",
            "runs",
        ])
        .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let job: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    let command: Vec<&str> = container["command"]
        .as_array()
        .expect("command")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(
        command[2..],
        [
            "/data/jobs/job.toml",
            "--shard",
            "auto",
            "--shards",
            "2",
            "--run-dir",
            "/data/jobs/runs/job"
        ]
    );
    assert_eq!(container["workingDir"], "/data");
    assert_eq!(job["metadata"]["name"], "gen-job");

    // A run root off the volume is refused: every pod would write its own.
    let off = gen_
        .run(&[
            "k8s",
            "/data/jobs/job.toml",
            "--shards",
            "2",
            "--image",
            "registry.example/gen:1",
            "--volume-claim",
            "runs",
            "--run-dir",
            "/tmp/runs/job",
        ])
        .await;
    assert_eq!(off.code, Some(2), "{}", off.stderr);
    assert!(
        off.stderr.contains("is not on the volume the pods share"),
        "{}",
        off.stderr
    );
}

/// The manifest with every option, against the offline `batch/v1` schemas of each supported
/// Kubernetes version (PyPI `kubernetes-validate`, strict: no field the version does not
/// know; `GEN_K8S_VALIDATE` names the program, as `scripts/test.sh` installs it). Skipped with
/// a printed reason when it is not installed, unless `GEN_REQUIRE_K8S_VALIDATE` is set.
#[tokio::test]
async fn the_k8s_manifest_validates_against_every_supported_version() {
    let validate =
        std::env::var("GEN_K8S_VALIDATE").unwrap_or_else(|_| "kubernetes-validate".to_owned());
    let present = Command::new(&validate)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        let reason = "`kubernetes-validate` is not installed (pip install kubernetes-validate)";
        assert!(
            std::env::var_os("GEN_REQUIRE_K8S_VALIDATE").is_none(),
            "GEN_REQUIRE_K8S_VALIDATE is set but {reason}"
        );
        eprintln!("skipped: {reason}");
        return;
    }
    let gen_ = Project::new();
    let out = gen_
        .run(&[
            "k8s",
            "jobs/job.toml",
            "--shards",
            "4",
            "--image",
            "registry.example/gen:1",
            "--volume-claim",
            "runs",
            "--gpus",
            "1",
            "--cpus",
            "8",
            "--memory",
            "64Gi",
            "--shm-size",
            "16Gi",
            "--hf-token-secret",
            "hf-token",
            "--server-launch",
            "vllm serve Qwen/Qwen3-8B --port {port}",
        ])
        .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let manifest = gen_.path("job.json");
    std::fs::write(&manifest, &out.stdout).expect("write");
    for minor in 29..=37 {
        let checked = Command::new(&validate)
            .args(["--strict", "-k", &format!("1.{minor}.0")])
            .arg(&manifest)
            .output()
            .expect("kubernetes-validate");
        assert!(
            checked.status.success(),
            "1.{minor}: {}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
    }
}
