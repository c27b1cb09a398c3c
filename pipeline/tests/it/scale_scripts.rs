//! The job scripts `gen slurm` and `gen k8s` write, checked without a scheduler: the batch
//! script run by bash as a Slurm task would run it, the Indexed Job as the pods would see it.
//! (On a real Slurm cluster: `slurm`.)

use std::path::PathBuf;
use std::process::Command;

use crate::support::{Config, Output, Project, copy_examples};

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

/// `gen k8s CONFIG --shards 2` of an image, the run root on the claim `runs`, and `extra`.
async fn k8s(gen_: &Project, config: &str, extra: &[&str]) -> Output {
    let args = [
        "k8s",
        config,
        "--shards",
        "2",
        "--image",
        "registry.example/gen:1",
        "--volume-claim",
        "runs",
    ];
    gen_.run(&[&args[..], extra].concat()).await
}

/// Issue 29 item 5: the config path is the pods' (`/data/...`, not on this machine): before,
/// `gen k8s` loaded it here and exited 2. The run root then lies next to it, on the volume.
#[tokio::test]
async fn gen_k8s_takes_the_config_as_the_pods_see_it() {
    let gen_ = Project::new();
    let out = k8s(&gen_, "/data/jobs/job.toml", &[]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let list: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let job = &list["items"][1];
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
    let off = k8s(
        &gen_,
        "/data/jobs/job.toml",
        &["--run-dir", "/tmp/runs/job"],
    )
    .await;
    assert_eq!(off.code, Some(2), "{}", off.stderr);
    assert!(
        off.stderr.contains("is not on the volume the pods share"),
        "{}",
        off.stderr
    );
}

/// Issue 29 item 7 on Kubernetes, without a cluster: the commands of `gen k8s`'s manifest
/// run as its pods would, on a directory standing in for the shared volume. A shard pod's init
/// container waits while nothing is prepared and ends (exit 0) once the preparation Job's
/// command has prepared every source.
#[tokio::test]
async fn a_shard_pod_waits_for_the_preparation_job() {
    use tokio::io::AsyncBufReadExt as _;
    let gen_ = Project::new();
    gen_.write("local.jsonl", "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n");
    gen_.config(&Config::new("http://127.0.0.1:9/v1").source("local", "local.jsonl"));
    let volume = gen_.path("");
    let volume = volume.to_str().expect("utf-8").trim_end_matches('/');
    let out = k8s(&gen_, "cfg.toml", &["--mount-path", volume]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let list: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let command = |container: &serde_json::Value| -> Vec<String> {
        let command: Vec<String> =
            serde_json::from_value(container["command"].clone()).expect("command");
        assert_eq!(command[0], "gen");
        command[1..].to_vec()
    };
    let pod = |item: usize| &list["items"][item]["spec"]["template"]["spec"];
    let prepare = command(&pod(0)["containers"][0]);
    let wait = command(&pod(1)["initContainers"][0]);
    let wait: Vec<&str> = wait.iter().map(String::as_str).collect();

    let mut waiter = gen_.command(&wait).start();
    let mut said = tokio::io::BufReader::new(waiter.child.stderr.take().expect("stderr")).lines();
    let first = said.next_line().await.expect("read").expect("a line");
    assert!(
        first.starts_with("gen: waiting for local to be prepared in "),
        "{first}"
    );
    let prepare: Vec<&str> = prepare.iter().map(String::as_str).collect();
    let prepared = gen_.run(&prepare).await;
    assert_eq!(prepared.code, Some(0), "{}", prepared.stderr);
    let exit = waiter.exit(std::time::Duration::from_secs(30)).await;
    assert!(exit.success(), "{exit}");
    let last = said.next_line().await.expect("read").expect("a line");
    assert!(
        last.starts_with("gen: every source is prepared in "),
        "{last}"
    );
    // Once prepared, a pod's wait ends at once.
    let again = gen_.run(&wait).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
}

/// `kubernetes-validate` (`GEN_K8S_VALIDATE` names the program, as `scripts/test.sh` installs
/// it), or `None` with a printed reason when it is not installed, unless
/// `GEN_REQUIRE_K8S_VALIDATE` is set.
fn validator() -> Option<String> {
    let validate =
        std::env::var("GEN_K8S_VALIDATE").unwrap_or_else(|_| "kubernetes-validate".to_owned());
    let present = Command::new(&validate)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if present {
        return Some(validate);
    }
    let reason = "`kubernetes-validate` is not installed (pip install kubernetes-validate)";
    assert!(
        std::env::var_os("GEN_REQUIRE_K8S_VALIDATE").is_none(),
        "GEN_REQUIRE_K8S_VALIDATE is set but {reason}"
    );
    eprintln!("skipped: {reason}");
    None
}

/// `gen k8s` with every option and `extra`: the printed `List`'s items.
async fn every_option(gen_: &Project, extra: &[&str]) -> Vec<serde_json::Value> {
    let args = [
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
    ];
    let out = gen_.run(&[&args[..], extra].concat()).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let list: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    list["items"].as_array().expect("items").clone()
}

/// Each of `documents` against the offline schemas of each supported Kubernetes version
/// (strict: no field the version does not know). `kubernetes-validate` does not look inside a
/// `List`, and passes a kind it has no schema for: each document is checked on its own, and
/// each must be said to pass.
fn validate(validate: &str, gen_: &Project, documents: &[serde_json::Value]) {
    let text: Vec<String> = documents.iter().map(|d| format!("---\n{d}\n")).collect();
    let manifest = gen_.path("manifest.yaml");
    std::fs::write(&manifest, text.concat()).expect("write");
    for minor in 29..=37 {
        let checked = Command::new(validate)
            .args(["--strict", "-k", &format!("1.{minor}.0")])
            .arg(&manifest)
            .output()
            .expect("kubernetes-validate");
        let said = String::from_utf8_lossy(&checked.stdout);
        assert_eq!(
            said.matches(" passed for resource ").count(),
            documents.len(),
            "1.{minor}: {said}"
        );
        assert!(
            checked.status.success(),
            "1.{minor}: {said}{}",
            String::from_utf8_lossy(&checked.stderr)
        );
    }
}

/// The manifest with every option, against the offline `batch/v1` schemas of each supported
/// Kubernetes version.
#[tokio::test]
async fn the_k8s_manifest_validates_against_every_supported_version() {
    let Some(validator) = validator() else {
        return;
    };
    let gen_ = Project::new();
    let items = every_option(
        &gen_,
        &["--server-launch", "vllm serve Qwen/Qwen3-8B --port {port}"],
    )
    .await;
    let kinds: Vec<(&str, &str)> = (items.iter())
        .map(|i| {
            (
                i["kind"].as_str().expect("kind"),
                i["metadata"]["name"].as_str().expect("name"),
            )
        })
        .collect();
    assert_eq!(kinds, [("Job", "gen-job-prepare"), ("Job", "gen-job")]);
    validate(&validator, &gen_, &items);
}

/// Issue 29 item 6 on Kubernetes, offline: `--nodes-per-shard 2` gives a LeaderWorkerSet
/// (`leaderworkerset.x-k8s.io/v1`), checked against its CRD's schema (the fixture
/// `fixtures/leaderworkerset-v1.schema.json`, which names where it comes from) with the
/// `jsonschema` that `kubernetes-validate` runs on; its leader's and worker's pod templates
/// as core/v1 `PodTemplate`s and the preparation Job against every supported version.
#[tokio::test]
async fn a_shard_across_pods_validates_as_a_leader_worker_set() {
    let Some(validator) = validator() else {
        return;
    };
    let gen_ = Project::new();
    let launch = "python -m sglang.launch_server --model-path M --tp 16 --nnodes {nnodes} \
                  --node-rank {node_rank} --dist-init-addr {head}:5000 --port {port}";
    let items = every_option(
        &gen_,
        &["--nodes-per-shard", "2", "--server-launch", launch],
    )
    .await;
    let set = &items[1];
    assert_eq!(set["kind"], "LeaderWorkerSet");
    let group = &set["spec"]["leaderWorkerTemplate"];
    let template = |name: &str, role: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": name}, "template": group[role]})
    };
    validate(
        &validator,
        &gen_,
        &[
            items[0].clone(),
            template("leader", "leaderTemplate"),
            template("worker", "workerTemplate"),
        ],
    );

    // `jsonschema`, which kubernetes-validate runs on: from the program's own interpreter, or
    // `python3` where the program is a wrapper (a pyenv shim).
    let program = if validator.contains('/') {
        PathBuf::from(&validator)
    } else {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join(&validator))
            .find(|path| path.is_file())
            .expect("on PATH")
    };
    let script = std::fs::read_to_string(&program).unwrap_or_default();
    let shebang = (script.lines().next())
        .and_then(|l| l.strip_prefix("#!"))
        .map(|l| l.trim().to_owned());
    let python = (shebang.into_iter().chain(["python3".to_owned()]))
        .find(|python| {
            Command::new(python)
                .args(["-c", "import jsonschema"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("the Python of kubernetes-validate, with jsonschema");
    let schema = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/fixtures/leaderworkerset-v1.schema.json"
    );
    let check = |set: &serde_json::Value| {
        let path = gen_.path("set.json");
        std::fs::write(&path, set.to_string()).expect("write");
        Command::new(&python)
            .args([
                "-c",
                "import json, sys, jsonschema\n\
                 jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))",
                schema,
            ])
            .arg(&path)
            .output()
            .expect("python")
    };
    let checked = check(set);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    // The schema does refuse what LWS does not know.
    let mut wrong = set.clone();
    wrong["spec"]["leaderWorkerTemplate"]["nodes"] = serde_json::json!(2);
    let refused = check(&wrong);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("'nodes' was unexpected"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
