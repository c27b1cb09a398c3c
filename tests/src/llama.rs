//! A real `llama-server` for end-to-end tests, found through `LLAMA_SERVER_BIN` and
//! `GEN_TEST_MODEL` (set by `scripts/install-llama-server.sh`, which the README test command
//! runs). Started on a free port of 127.0.0.1 with `--metrics`, stopped by pid when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary and model, or why they are not available.
pub fn installed() -> Result<(PathBuf, PathBuf), String> {
    let bin = std::env::var_os("LLAMA_SERVER_BIN").map(PathBuf::from);
    let model = std::env::var_os("GEN_TEST_MODEL").map(PathBuf::from);
    match (bin, model) {
        (Some(bin), Some(model)) if bin.exists() && model.exists() => Ok((bin, model)),
        _ => Err("LLAMA_SERVER_BIN / GEN_TEST_MODEL not set or missing: run ./scripts/test.sh, which installs them".into()),
    }
}

#[derive(Debug)]
pub struct LlamaServer {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl LlamaServer {
    /// Starts llama-server with `slots` parallel slots and waits until `/health` is 200.
    pub async fn start(log_dir: &std::path::Path, slots: u32) -> anyhow::Result<LlamaServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        LlamaServer::start_on(log_dir, slots, port).await
    }

    /// Starts on a given port (e.g. the port of a server that was killed, to restart it).
    pub async fn start_on(
        log_dir: &std::path::Path,
        slots: u32,
        port: u16,
    ) -> anyhow::Result<LlamaServer> {
        let (bin, model) = installed().map_err(anyhow::Error::msg)?;
        let log = log_dir.join(format!("llama-server-{port}-{}.log", std::process::id()));
        let log = if log.exists() {
            log.with_extension("restarted.log")
        } else {
            log
        };
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .args([
                "-m",
                &model.to_string_lossy(),
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
            ])
            .args([
                "-np",
                &slots.to_string(),
                "-c",
                &(1024 * slots).to_string(),
                "-t",
                "2",
                // As the quickstart launches it: spinning threads collapse on a busy machine.
                "--poll",
                "0",
                "--metrics",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()?;
        let mut server = LlamaServer { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = server.child.try_wait()? {
                anyhow::bail!(
                    "llama-server exited ({status}); see {}",
                    server.log.display()
                );
            }
            if let Ok(r) = reqwest::get(format!("{}/health", server.url())).await
                && r.status().is_success()
            {
                return Ok(server);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "llama-server not healthy after 120 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A counter from `/metrics` (e.g. `llamacpp:prompt_tokens_total`).
    pub async fn metric(&self, name: &str) -> anyhow::Result<f64> {
        let text = reqwest::get(format!("{}/metrics", self.url()))
            .await?
            .text()
            .await?;
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("metric `{name}` not found"))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9` the server, as a crash would.
    pub fn kill(&mut self) -> std::io::Result<()> {
        self.child.kill()?;
        self.child.wait().map(|_| ())
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        // Best effort: the process may already be gone.
        if self.child.kill().is_ok() {
            self.child.wait().ok();
        }
    }
}
