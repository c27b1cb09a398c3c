//! `gen k8s CONFIG --shards N --image IMAGE`: prints a Kubernetes Indexed Job whose pod `k`
//! runs `gen run CONFIG --shard auto` on shard `k` (`JOB_COMPLETION_INDEX`), with the shard
//! count in `GEN_SHARDS` since Kubernetes does not pass it. The run root must be on a volume
//! every pod mounts (a ReadWriteMany claim, `--volume-claim`), which is also their working
//! directory and holds the Hugging Face cache they share. Paths are the pods': nothing here
//! needs the config.
//!
//! With `--nodes-per-shard K` (a model larger than one node) the shards are the groups of a
//! LeaderWorkerSet instead: the leader pod runs `gen` and rank 0 of the launch, `K − 1`
//! worker pods run their rank, placed through LWS's variables (`super::nodes`' placeholders).
//!
//! Printed as JSON, which is YAML too: `kubectl apply -f` takes it as it is.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::nodes::{self, HEAD, NNODES, NODE_RANK};

/// The label LeaderWorkerSet puts on a group's pods with the group's index: the shard.
const GROUP_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-index";

/// The port a worker pod's part of the launch is given for `{port}` (`gen` picks the leader's;
/// only rank 0 serves HTTP).
const WORKER_PORT: &str = "30000";

/// What the manifest describes. Paths are as the pods see them.
#[derive(Debug, Clone)]
pub struct K8sJob {
    pub name: String,
    pub image: String,
    pub config: String,
    pub root: String,
    pub shards: u32,
    pub server_launch: Option<String>,
    /// A PersistentVolumeClaim mounted at `mount_path` in every pod, its working directory.
    pub volume_claim: Option<String>,
    pub mount_path: String,
    /// GPUs per pod (`nvidia.com/gpu`), for the inference server.
    pub gpus: Option<u32>,
    /// CPUs requested per pod.
    pub cpus: Option<u32>,
    /// Memory per pod (requested and the limit), in Kubernetes' notation (`64Gi`).
    pub memory: Option<String>,
    /// The size of `/dev/shm` (a memory volume; servers' tensor-parallel workers share
    /// memory through it, and a container's default 64 MiB stops them).
    pub shm_size: Option<String>,
    /// A Secret whose key `token` becomes `HF_TOKEN`.
    pub hf_token_secret: Option<String>,
    /// Retries of one index before it counts as failed (`backoffLimitPerIndex`).
    pub retries_per_index: u32,
    /// Pods (nodes) per shard: above 1, a LeaderWorkerSet group of this size per shard.
    pub nodes_per_shard: u32,
}

/// Exit code of `gen` for a usage or config error: another pod of the index would fail alike.
const EXIT_USAGE: i32 = 2;

/// `path` as the pods see it: a relative one is on the volume (their working directory).
pub fn in_pod(path: &Path, volume: Option<&str>) -> PathBuf {
    match volume {
        Some(mount) if path.is_relative() => Path::new(mount).join(path),
        _ => path.to_path_buf(),
    }
}

/// Refuses a run root off the shared volume (each pod would write a root of its own that dies
/// with it, and no shard would see another), and a shard across pods without a launch that
/// says each pod's rank.
pub fn check(job: &K8sJob) -> anyhow::Result<()> {
    if job.nodes_per_shard > 1 {
        let launch = job.server_launch.as_deref().ok_or_else(|| {
            anyhow::anyhow!(
                "a shard across {} pods starts its server across them: give the launch with \
                 `--server-launch CMD` (or `[server] launch` in a config that is here too)",
                job.nodes_per_shard
            )
        })?;
        let words = shlex::split(launch)
            .ok_or_else(|| anyhow::anyhow!("`--server-launch {launch}` is not shell words"))?;
        if let Some((_, problem)) = nodes::launch_problems(Some(&words), job.nodes_per_shard)
            .into_iter()
            .next()
        {
            anyhow::bail!("{problem}");
        }
    }
    if job.volume_claim.is_some() {
        anyhow::ensure!(
            Path::new(&job.root).starts_with(&job.mount_path),
            "the run root `{}` is not on the volume the pods share (mounted at `{}`): pass \
             `--run-dir` under it",
            job.root,
            job.mount_path
        );
    }
    Ok(())
}

/// The manifest: a `List` of the preparation Job (with a shared volume: `gen prepare` into
/// `RUN_ROOT/prepared`, once) and the Indexed Job, whose pods first wait for it.
pub fn manifest(job: &K8sJob) -> Value {
    let mut items = Vec::new();
    if job.volume_claim.is_some() {
        items.push(preparation(job));
    }
    items.push(match job.nodes_per_shard {
        1 => indexed_job(job),
        _ => leader_worker_set(job),
    });
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

fn prepared_dir(job: &K8sJob) -> String {
    Path::new(&job.root).join("prepared").display().to_string()
}

/// `command` as a container `name` with the volumes, working directory and Hub settings
/// every container of the job gets.
fn container(job: &K8sJob, name: &str, command: &[&str]) -> Value {
    let mut env =
        vec![json!({"name": super::launcher::SHARDS_ENV, "value": job.shards.to_string()})];
    let mut mounts = Vec::new();
    if job.volume_claim.is_some() {
        // One download of each dataset for every pod, on the volume they share.
        let cache = Path::new(&job.mount_path).join("hf-cache");
        env.push(json!({"name": "HF_HOME", "value": cache.display().to_string()}));
        mounts.push(json!({"name": "runs", "mountPath": job.mount_path}));
    }
    mounts.push(json!({"name": "dshm", "mountPath": "/dev/shm"}));
    if let Some(secret) = &job.hf_token_secret {
        env.push(json!({
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}},
        }));
    }
    let mut container = json!({
        "name": name,
        "image": job.image,
        "command": command,
        "env": env,
        "volumeMounts": mounts,
    });
    if job.volume_claim.is_some() {
        container["workingDir"] = json!(job.mount_path);
    }
    container
}

/// Gives `container` CPU, memory and (with `gpus`) GPU requests and limits, if any are set.
fn add_resources(container: &mut Value, job: &K8sJob, gpus: bool) {
    let (mut requests, mut limits) = (json!({}), json!({}));
    if let Some(cpus) = job.cpus {
        requests["cpu"] = json!(cpus.to_string());
    }
    if let Some(memory) = &job.memory {
        requests["memory"] = json!(memory);
        limits["memory"] = json!(memory);
    }
    if let Some(gpus) = job.gpus.filter(|_| gpus) {
        requests["nvidia.com/gpu"] = json!(gpus);
        limits["nvidia.com/gpu"] = json!(gpus);
    }
    if requests == json!({}) {
        return;
    }
    let mut resources = json!({"requests": requests});
    if limits != json!({}) {
        resources["limits"] = limits;
    }
    container["resources"] = resources;
}

/// A pod of `containers` (and `init` containers) with the job's volumes.
fn pod(job: &K8sJob, containers: Vec<Value>, init: Vec<Value>) -> Value {
    let mut volumes = Vec::new();
    if let Some(claim) = &job.volume_claim {
        volumes.push(json!({"name": "runs", "persistentVolumeClaim": {"claimName": claim}}));
    }
    let mut shm = json!({"medium": "Memory"});
    if let Some(size) = &job.shm_size {
        shm["sizeLimit"] = json!(size);
    }
    volumes.push(json!({"name": "dshm", "emptyDir": shm}));
    let mut pod = json!({
        "restartPolicy": "Never",
        // `gen` stops gracefully on SIGTERM: in-flight requests get 30 s to finish.
        "terminationGracePeriodSeconds": 60,
        "containers": containers,
        "volumes": volumes,
    });
    if !init.is_empty() {
        pod["initContainers"] = json!(init);
    }
    pod
}

fn metadata(name: &str) -> Value {
    json!({"name": name, "labels": {"app.kubernetes.io/name": "gen"}})
}

/// The Job that prepares every source once into `RUN_ROOT/prepared` (no GPU).
fn preparation(job: &K8sJob) -> Value {
    let prepared = prepared_dir(job);
    let mut prepare = container(
        job,
        "prepare",
        &["gen", "prepare", &job.config, "--run-dir", &prepared],
    );
    add_resources(&mut prepare, job, false);
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(&format!("{}-prepare", job.name)),
        "spec": {
            "backoffLimit": job.retries_per_index,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "gen"}},
                "spec": pod(job, vec![prepare], Vec::new()),
            },
        },
    })
}

/// `gen run` of a shard, the server from `launch`.
fn run_command<'a>(job: &'a K8sJob, shards: &'a str, launch: Option<&'a str>) -> Vec<&'a str> {
    let mut args = vec![
        "gen",
        "run",
        &job.config,
        "--shard",
        "auto",
        "--shards",
        &shards,
        "--run-dir",
        &job.root,
    ];
    if let Some(launch) = launch {
        args.extend(["--server-launch", launch]);
    }
    args
}

/// The init container that waits for the preparation, when there is one to wait for: each
/// pod then takes the shared preparation instead of downloading every dataset itself.
fn wait_prepared(job: &K8sJob) -> Vec<Value> {
    let prepared = prepared_dir(job);
    (job.volume_claim.is_some())
        .then(|| {
            container(
                job,
                "wait-prepared",
                &[
                    "gen",
                    "prepare",
                    &job.config,
                    "--run-dir",
                    &prepared,
                    "--wait",
                ],
            )
        })
        .into_iter()
        .collect()
}

/// The Indexed Job: pod `k` runs shard `k`, once the preparation is done.
fn indexed_job(job: &K8sJob) -> Value {
    let shards = job.shards.to_string();
    let args = run_command(job, &shards, job.server_launch.as_deref());
    let mut gen_ = container(job, "gen", &args);
    add_resources(&mut gen_, job, true);
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(&job.name),
        "spec": {
            "completionMode": "Indexed",
            "completions": job.shards,
            "parallelism": job.shards,
            "backoffLimitPerIndex": job.retries_per_index,
            "maxFailedIndexes": job.shards,
            // A replacement starts once the pod it replaces has stopped (and let its shard
            // go), not while it is still terminating.
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {"rules": [
                // Evicted, preempted or drained: not the shard's fault, no retry spent.
                {"action": "Ignore", "onPodConditions": [
                    {"type": "DisruptionTarget", "status": "True"},
                ]},
                // A usage or config error fails the same way every time.
                {"action": "FailIndex", "onExitCodes": {
                    "containerName": "gen", "operator": "In", "values": [EXIT_USAGE],
                }},
            ]},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "gen"}},
                "spec": pod(job, vec![gen_], wait_prepared(job)),
            },
        },
    })
}

/// The launch of the pod of rank `rank` in a group: `{nnodes}` the group's size, `{head}` the
/// leader's address, as Kubernetes expands `$(VAR)` from LWS's variables.
fn launch_in_group(launch: &[String], nodes: u32, rank: &str) -> Vec<String> {
    (launch.iter())
        .map(|arg| {
            arg.replace(NNODES, &nodes.to_string())
                .replace(HEAD, "$(LWS_LEADER_ADDRESS)")
                .replace(NODE_RANK, rank)
        })
        .collect()
}

/// A LeaderWorkerSet of a group of `nodes_per_shard` pods per shard: the leader runs `gen`
/// (rank 0 of the launch, started by it), the workers their rank of the launch.
fn leader_worker_set(job: &K8sJob) -> Value {
    let nodes = job.nodes_per_shard;
    let launch = (job.server_launch.as_deref())
        .and_then(shlex::split)
        .unwrap_or_default();
    let shards = job.shards.to_string();
    let leader_launch: Vec<String> = (launch_in_group(&launch, nodes, "0").iter())
        .map(|w| nodes::quote(w))
        .collect();
    let leader_launch = leader_launch.join(" ");
    // A group's pods restart (LWS runs them as StatefulSets): a `gen` whose shard is done
    // stays, rather than running again and again, until the set is deleted.
    let mut command = vec!["/bin/sh", "-c", "\"$0\" \"$@\" && exec sleep infinity"];
    command.extend(run_command(job, &shards, Some(&leader_launch)));
    let mut leader = container(job, "gen", &command);
    leader["env"].as_array_mut().expect("env is a list").push(json!({
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.labels['{GROUP_INDEX_LABEL}']")}},
    }));
    let worker_launch = launch_in_group(&launch, nodes, "$(LWS_WORKER_INDEX)");
    let worker_launch: Vec<String> = (worker_launch.iter())
        .map(|w| w.replace("{port}", WORKER_PORT))
        .collect();
    let worker_launch: Vec<&str> = worker_launch.iter().map(String::as_str).collect();
    let mut worker = container(job, "server", &worker_launch);
    add_resources(&mut leader, job, true);
    add_resources(&mut worker, job, true);
    let template = |pod: Value| {
        let mut pod = pod;
        pod["restartPolicy"] = json!("Always");
        json!({"metadata": {"labels": {"app.kubernetes.io/name": "gen"}}, "spec": pod})
    };
    json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": metadata(&job.name),
        "spec": {
            "replicas": job.shards,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": nodes,
                // One pod's part gone is the server gone: the group starts again whole.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": template(pod(job, vec![leader], wait_prepared(job))),
                "workerTemplate": template(pod(job, vec![worker], Vec::new())),
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> K8sJob {
        K8sJob {
            name: "gen-datasets".into(),
            image: "registry.example/gen:0.1".into(),
            config: "/data/datasets.toml".into(),
            root: "/data/runs/datasets".into(),
            shards: 4,
            server_launch: Some("vllm serve Qwen/Qwen3-8B --port {port}".into()),
            volume_claim: Some("gen-runs".into()),
            mount_path: "/data".into(),
            gpus: Some(1),
            cpus: Some(8),
            memory: Some("64Gi".into()),
            shm_size: Some("16Gi".into()),
            hf_token_secret: Some("hf-token".into()),
            retries_per_index: 2,
            nodes_per_shard: 1,
        }
    }

    #[test]
    fn the_manifest_is_an_indexed_job_with_the_count_in_the_pod() {
        let text = serde_json::to_string_pretty(&indexed_job(&job())).expect("json");
        let value: Value = serde_json::from_str(&text).expect("parses back");
        assert_eq!(value["apiVersion"], "batch/v1");
        assert_eq!(value["kind"], "Job");
        let spec = &value["spec"];
        assert_eq!(spec["completionMode"], "Indexed");
        assert_eq!(spec["completions"], 4);
        assert_eq!(spec["parallelism"], 4);
        assert_eq!(spec["backoffLimitPerIndex"], 2);
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Never");
        let container = &pod["containers"][0];
        let command: Vec<&str> = container["command"]
            .as_array()
            .expect("command")
            .iter()
            .map(|v| v.as_str().expect("string"))
            .collect();
        assert_eq!(
            command,
            [
                "gen",
                "run",
                "/data/datasets.toml",
                "--shard",
                "auto",
                "--shards",
                "4",
                "--run-dir",
                "/data/runs/datasets",
                "--server-launch",
                "vllm serve Qwen/Qwen3-8B --port {port}"
            ]
        );
        assert_eq!(container["env"][0]["name"], "GEN_SHARDS");
        assert_eq!(container["env"][0]["value"], "4");
        assert_eq!(container["resources"]["limits"]["nvidia.com/gpu"], 1);
        assert_eq!(container["volumeMounts"][0]["mountPath"], "/data");
        assert_eq!(
            pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "gen-runs"
        );
    }

    /// Issue 29 item 5: what a site cluster needs beyond the Indexed Job itself.
    #[test]
    fn pods_work_on_the_volume_survive_evictions_and_get_their_resources() {
        let value = indexed_job(&job());
        let spec = &value["spec"];
        assert_eq!(spec["podReplacementPolicy"], "Failed");
        let rules = &spec["podFailurePolicy"]["rules"];
        assert_eq!(rules[0]["action"], "Ignore");
        assert_eq!(rules[0]["onPodConditions"][0]["type"], "DisruptionTarget");
        assert_eq!(rules[1]["action"], "FailIndex");
        assert_eq!(rules[1]["onExitCodes"]["values"][0], 2);
        let pod = &spec["template"]["spec"];
        let container = &pod["containers"][0];
        assert_eq!(container["workingDir"], "/data");
        let env = container["env"].as_array().expect("env");
        let named = |name: &str| {
            env.iter()
                .find(|e| e["name"] == name)
                .unwrap_or_else(|| panic!("{name} in {env:?}"))
        };
        assert_eq!(named("HF_HOME")["value"], "/data/hf-cache");
        assert_eq!(
            named("HF_TOKEN")["valueFrom"]["secretKeyRef"],
            json!({"name": "hf-token", "key": "token"})
        );
        let resources = &container["resources"];
        assert_eq!(
            resources["requests"],
            json!({"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 1})
        );
        assert_eq!(
            resources["limits"],
            json!({"memory": "64Gi", "nvidia.com/gpu": 1})
        );
        assert_eq!(container["volumeMounts"][1]["mountPath"], "/dev/shm");
        assert_eq!(
            pod["volumes"][1]["emptyDir"],
            json!({"medium": "Memory", "sizeLimit": "16Gi"})
        );
    }

    /// Prepare once: a Job prepares every source into `RUN_ROOT/prepared` on the volume (no
    /// GPU), and each shard's pod waits for it (an init container) before `gen run` takes it.
    #[test]
    fn the_sources_are_prepared_once_by_a_job_the_shards_wait_for() {
        let value = manifest(&job());
        assert_eq!(
            (&value["apiVersion"], &value["kind"]),
            (&json!("v1"), &json!("List"))
        );
        let items = value["items"].as_array().expect("items");
        assert_eq!(items.len(), 2);
        let (preparation, shards) = (&items[0], &items[1]);
        assert_eq!(preparation["metadata"]["name"], "gen-datasets-prepare");
        assert!(preparation["spec"]["completionMode"].is_null());
        let prepare = &preparation["spec"]["template"]["spec"]["containers"][0];
        let command = |c: &Value| -> Vec<String> {
            serde_json::from_value(c["command"].clone()).expect("command")
        };
        assert_eq!(
            command(prepare),
            [
                "gen",
                "prepare",
                "/data/datasets.toml",
                "--run-dir",
                "/data/runs/datasets/prepared"
            ]
        );
        assert_eq!(
            prepare["resources"],
            json!({"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"memory": "64Gi"}})
        );
        assert_eq!(prepare["workingDir"], "/data");
        assert_eq!(prepare["env"][1]["value"], "/data/hf-cache");
        let pod = &shards["spec"]["template"]["spec"];
        let wait = &pod["initContainers"][0];
        assert_eq!(
            command(wait),
            [
                "gen",
                "prepare",
                "/data/datasets.toml",
                "--run-dir",
                "/data/runs/datasets/prepared",
                "--wait"
            ]
        );
        assert_eq!(wait["volumeMounts"][0]["mountPath"], "/data");
        assert_eq!(command(&pod["containers"][0])[1], "run");
        // Without a shared volume there is nothing to share: the pods prepare themselves.
        let alone = manifest(&K8sJob {
            volume_claim: None,
            ..job()
        });
        assert_eq!(alone["items"].as_array().map(Vec::len), Some(1));
        assert!(alone["items"][0]["spec"]["template"]["spec"]["initContainers"].is_null());
    }

    /// Issue 29 item 6 on Kubernetes: a shard across two pods is a LeaderWorkerSet group. The
    /// leader runs `gen` (its shard: the group's index) and, through it, rank 0 of the launch;
    /// the worker runs rank `LWS_WORKER_INDEX`; both are told the group's size and the
    /// leader's address.
    #[test]
    fn a_shard_across_pods_is_a_leader_worker_set_group() {
        let job = K8sJob {
            nodes_per_shard: 2,
            server_launch: Some(
                "python -m sglang.launch_server --model-path M --tp 16 --nnodes {nnodes} \
                 --node-rank {node_rank} --dist-init-addr {head}:5000 --port {port}"
                    .into(),
            ),
            ..job()
        };
        check(&job).expect("a launch across pods");
        let value = manifest(&job);
        assert_eq!(
            value["items"][0]["metadata"]["name"],
            "gen-datasets-prepare"
        );
        let set = &value["items"][1];
        assert_eq!(set["apiVersion"], "leaderworkerset.x-k8s.io/v1");
        assert_eq!(set["kind"], "LeaderWorkerSet");
        let spec = &set["spec"];
        assert_eq!(spec["replicas"], 4);
        let group = &spec["leaderWorkerTemplate"];
        assert_eq!(group["size"], 2);
        assert_eq!(group["restartPolicy"], "RecreateGroupOnPodRestart");
        let words = |c: &Value| -> Vec<String> {
            serde_json::from_value(c["command"].clone()).expect("command")
        };
        let leader = &group["leaderTemplate"]["spec"];
        let gen_ = words(&leader["containers"][0]);
        assert_eq!(
            gen_[..5],
            [
                "/bin/sh",
                "-c",
                "\"$0\" \"$@\" && exec sleep infinity",
                "gen",
                "run"
            ]
        );
        assert_eq!(gen_[gen_.len() - 2], "--server-launch");
        let rank0 = shlex::split(&gen_[gen_.len() - 1]).expect("words");
        let tail = |words: &[String]| words[words.len() - 8..].to_vec();
        assert_eq!(
            tail(&rank0),
            [
                "--nnodes",
                "2",
                "--node-rank",
                "0",
                "--dist-init-addr",
                "$(LWS_LEADER_ADDRESS):5000",
                "--port",
                "{port}"
            ]
        );
        let env = leader["containers"][0]["env"].as_array().expect("env");
        let index = env
            .iter()
            .find(|e| e["name"] == "JOB_COMPLETION_INDEX")
            .expect("index");
        assert_eq!(
            index["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.labels['leaderworkerset.sigs.k8s.io/group-index']"
        );
        assert_eq!(leader["initContainers"][0]["name"], "wait-prepared");
        assert_eq!(leader["restartPolicy"], "Always");
        let worker = &group["workerTemplate"]["spec"];
        let rank = words(&worker["containers"][0]);
        assert_eq!(rank[..3], ["python", "-m", "sglang.launch_server"]);
        assert_eq!(
            tail(&rank),
            [
                "--nnodes",
                "2",
                "--node-rank",
                "$(LWS_WORKER_INDEX)",
                "--dist-init-addr",
                "$(LWS_LEADER_ADDRESS):5000",
                "--port",
                "30000"
            ]
        );
        assert!(worker["initContainers"].is_null());
        for pod in [leader, worker] {
            assert_eq!(
                pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
                1
            );
            assert_eq!(pod["containers"][0]["workingDir"], "/data");
        }

        // A launch that never says its rank, or none at all, cannot be spread over pods.
        for launch in [Some("vllm serve M --port {port}"), None] {
            let error = check(&K8sJob {
                server_launch: launch.map(str::to_owned),
                ..job.clone()
            })
            .expect_err("no rank");
            assert!(
                error.to_string().contains("{node_rank}")
                    || error.to_string().contains("--server-launch"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_run_root_off_the_shared_volume_is_refused() {
        check(&job()).expect("on the volume");
        let error = check(&K8sJob {
            root: "/scratch/runs/datasets".into(),
            ..job()
        })
        .expect_err("off the volume");
        assert!(
            error
                .to_string()
                .contains("is not on the volume the pods share"),
            "{error}"
        );
        assert_eq!(
            in_pod(Path::new("runs/job"), Some("/data")),
            Path::new("/data/runs/job")
        );
        assert_eq!(
            in_pod(Path::new("/etc/job.toml"), Some("/data")),
            Path::new("/etc/job.toml")
        );
    }

    #[test]
    fn a_pod_of_the_job_finds_its_shard() {
        let value = indexed_job(&job());
        let env = &value["spec"]["template"]["spec"]["containers"][0]["env"][0];
        let shards: u32 = env["value"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("n");
        // What the Job controller sets in pod 3, plus the manifest's own variable.
        let auto = super::super::launcher::detect(
            |name| (name == "JOB_COMPLETION_INDEX").then(|| "3".to_owned()),
            Some(shards),
        )
        .expect("shard");
        assert_eq!((auto.shard.index, auto.shard.count), (3, 4));
    }
}
