//! `gen k8s CONFIG --shards N --image IMAGE`: prints a Kubernetes Indexed Job whose pod `k`
//! runs `gen run CONFIG --shard auto` on shard `k` (`JOB_COMPLETION_INDEX`), with the shard
//! count in `GEN_SHARDS` since Kubernetes does not pass it. The run root must be on a volume
//! every pod mounts (a ReadWriteMany claim, `--volume-claim`).
//!
//! Printed as JSON, which is YAML too: `kubectl apply -f` takes it as it is.

use serde_json::{Value, json};

/// What the manifest describes.
#[derive(Debug, Clone)]
pub struct K8sJob {
    pub name: String,
    pub image: String,
    pub config: String,
    pub root: String,
    pub shards: u32,
    pub server_launch: Option<String>,
    /// A PersistentVolumeClaim mounted at `mount_path` in every pod.
    pub volume_claim: Option<String>,
    pub mount_path: String,
    /// GPUs per pod (`nvidia.com/gpu`), for the inference server.
    pub gpus: Option<u32>,
    /// Retries of one index before it counts as failed (`backoffLimitPerIndex`).
    pub retries_per_index: u32,
}

/// The Indexed Job manifest.
pub fn manifest(job: &K8sJob) -> Value {
    let shards = job.shards.to_string();
    let mut command = vec![
        "gen".to_owned(),
        "run".to_owned(),
        job.config.clone(),
        "--shard".to_owned(),
        "auto".to_owned(),
        "--shards".to_owned(),
        shards.clone(),
        "--run-dir".to_owned(),
        job.root.clone(),
    ];
    if let Some(launch) = &job.server_launch {
        command.extend(["--server-launch".to_owned(), launch.clone()]);
    }
    let mut container = json!({
        "name": "gen",
        "image": job.image,
        "command": command,
        "env": [{"name": super::launcher::SHARDS_ENV, "value": shards}],
    });
    if let Some(gpus) = job.gpus {
        container["resources"] = json!({"limits": {"nvidia.com/gpu": gpus}});
    }
    let mut pod = json!({
        "restartPolicy": "Never",
        // `gen` stops gracefully on SIGTERM: in-flight requests get 30 s to finish.
        "terminationGracePeriodSeconds": 60,
        "containers": [container],
    });
    if let Some(claim) = &job.volume_claim {
        pod["containers"][0]["volumeMounts"] =
            json!([{"name": "runs", "mountPath": job.mount_path}]);
        pod["volumes"] = json!([{"name": "runs", "persistentVolumeClaim": {"claimName": claim}}]);
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.name, "labels": {"app.kubernetes.io/name": "gen"}},
        "spec": {
            "completionMode": "Indexed",
            "completions": job.shards,
            "parallelism": job.shards,
            "backoffLimitPerIndex": job.retries_per_index,
            "maxFailedIndexes": job.shards,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "gen"}},
                "spec": pod,
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
            retries_per_index: 2,
        }
    }

    #[test]
    fn the_manifest_is_an_indexed_job_with_the_count_in_the_pod() {
        let text = serde_json::to_string_pretty(&manifest(&job())).expect("json");
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

    #[test]
    fn a_pod_of_the_job_finds_its_shard() {
        let value = manifest(&job());
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
