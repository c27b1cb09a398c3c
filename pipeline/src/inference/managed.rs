//! A server `gen` launches itself: started in its own process group with its output in the
//! run directory, waited on until `/health` answers 200 — while also waiting on the process,
//! so a server that dies is reported at once with the tail of its log — and stopped at the end.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::config::ServerPlan;
use crate::run::sys;

/// Lines of the server log quoted when it fails.
const TAIL_LINES: usize = 25;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("launch argument `{arg}` uses `${{{var}}}`, which is not set")]
    MissingVariable { arg: String, var: String },
    #[error("failed to start `{program}`")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the inference server exited during start-up ({status}); last lines of `{}`:\n{tail}\n{diagnosis}", log.display())]
    Exited {
        status: String,
        log: PathBuf,
        tail: String,
        diagnosis: String,
    },
    #[error("the inference server did not become healthy within {} s; last lines of `{}`:\n{tail}\n{diagnosis}", timeout.as_secs(), log.display())]
    NotHealthy {
        timeout: Duration,
        log: PathBuf,
        tail: String,
        diagnosis: String,
    },
    #[error("failed to prepare the server launch")]
    Io(#[from] std::io::Error),
}

/// A running server `gen` started.
#[derive(Debug)]
pub struct ManagedServer {
    child: tokio::process::Child,
    pgid: i32,
    pub url: String,
    pub log: PathBuf,
    /// The expanded command line, for restarts (same port, same URL).
    args: Vec<String>,
    health_timeout: Duration,
    /// Restarts so far.
    pub restarts: u32,
}

/// Expands `${VAR}`, `${VAR:-default}` and `{port}` in one launch argument.
pub fn expand(
    arg: &str,
    port: u16,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, LaunchError> {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        match (env(name).filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(LaunchError::MissingVariable {
                    arg: arg.to_owned(),
                    var: name.to_owned(),
                });
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out.replace("{port}", &port.to_string()))
}

fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// The last `n` lines of a file (lossy UTF-8), indented for an error message.
pub fn tail(path: &Path, n: usize) -> String {
    let text = fs_err::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The diagnostics crate's reading of a server log: verdict, evidence and advice, indented.
pub fn diagnosis(log: &Path) -> String {
    let text = fs_err::read(log)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let verdict = gen_diagnostics::classify_server_log(&text);
    let mut out = format!("diagnosis: {}", verdict.headline());
    for line in &verdict.evidence {
        out.push_str(&format!("\n  evidence: {line}"));
    }
    for line in &verdict.advice {
        out.push_str(&format!("\n  advice: {line}"));
    }
    out
}

impl ManagedServer {
    /// Starts the server and waits until it is healthy, it dies, or the timeout passes.
    pub async fn start(
        plan: &ServerPlan,
        launch: &[String],
        log: &Path,
    ) -> Result<ManagedServer, LaunchError> {
        let port = free_port()?;
        let env = |name: &str| std::env::var(name).ok();
        let args = launch
            .iter()
            .map(|a| expand(a, port, &env))
            .collect::<Result<Vec<_>, _>>()?;
        let url = expand(plan.url(), port, &env)?;
        ManagedServer::launch(args, url, log.to_path_buf(), plan.health_timeout, 0).await
    }

    /// Starts the same command again after the server died (its log is appended to).
    pub async fn restart(self) -> Result<ManagedServer, LaunchError> {
        let restarts = self.restarts + 1;
        ManagedServer::launch(self.args, self.url, self.log, self.health_timeout, restarts).await
    }

    async fn launch(
        args: Vec<String>,
        url: String,
        log: PathBuf,
        health_timeout: Duration,
        restarts: u32,
    ) -> Result<ManagedServer, LaunchError> {
        use std::os::unix::process::CommandExt as _;
        let log = log.as_path();
        let program = args.first().cloned().unwrap_or_default();
        let out = crate::store::frames::open_private(log)?;
        let err = out.try_clone()?;
        let mut command = std::process::Command::new(&program);
        command
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.into_parts().0))
            .stderr(Stdio::from(err.into_parts().0))
            .process_group(0);
        sys::kill_with_parent(&mut command);
        let mut child = tokio::process::Command::from(command)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| LaunchError::Spawn {
                program: program.clone(),
                source,
            })?;
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .unwrap_or(0);
        tracing::info!(%url, log = %log.display(), "started inference server (pid {pgid})");
        let healthy = async {
            loop {
                if let Ok(true) = super::probe::health(&url).await {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        };
        tokio::select! {
            status = child.wait() => {
                let status = status.map_or_else(|e| e.to_string(), describe_status);
                Err(LaunchError::Exited { status, log: log.to_path_buf(), tail: tail(log, TAIL_LINES), diagnosis: diagnosis(log) })
            }
            () = healthy => Ok(ManagedServer { child, pgid, url, log: log.to_path_buf(), args, health_timeout, restarts }),
            () = tokio::time::sleep(health_timeout) => {
                sys::kill_group(pgid, libc::SIGKILL).ok();
                Err(LaunchError::NotHealthy { timeout: health_timeout, log: log.to_path_buf(), tail: tail(log, TAIL_LINES), diagnosis: diagnosis(log) })
            }
        }
    }

    /// `Some(description)` once the server has exited.
    pub fn exited(&mut self) -> Option<String> {
        self.child.try_wait().ok().flatten().map(describe_status)
    }

    /// SIGTERM to the group, SIGKILL after a grace period.
    pub async fn stop(mut self) {
        sys::kill_group(self.pgid, libc::SIGTERM).ok();
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            sys::kill_group(self.pgid, libc::SIGKILL).ok();
            self.child.wait().await.ok();
        }
    }
}

fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by {}", sys::signal_name(signal)),
        _ => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_variables_defaults_and_port() {
        let env = |name: &str| (name == "MODEL").then(|| "/m.gguf".to_owned());
        assert_eq!(expand("${MODEL}", 9, &env).expect("set"), "/m.gguf");
        assert_eq!(
            expand("${BIN:-llama-server}", 9, &env).expect("default"),
            "llama-server"
        );
        assert_eq!(
            expand("http://127.0.0.1:{port}/x", 8080, &env).expect("port"),
            "http://127.0.0.1:8080/x"
        );
        let err = expand("-m=${NOPE}", 9, &env).expect_err("unset");
        assert_eq!(
            err.to_string(),
            "launch argument `-m=${NOPE}` uses `${NOPE}`, which is not set"
        );
    }

    #[tokio::test]
    async fn a_server_that_exits_is_reported_at_once_with_its_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("server.log");
        let plan = ServerPlan {
            urls: vec!["http://127.0.0.1:{port}".into()],
            model: None,
            api_key_env: None,
            launch: None,
            health_timeout: Duration::from_secs(3600),
            max_restarts: 0,
            log: None,
            max_outage: None,
            stall_after: Duration::from_secs(60),
        };
        let launch = [
            "/bin/sh",
            "-c",
            "echo loading model; echo 'error: failed to load model' >&2; exit 1",
        ]
        .map(str::to_owned);
        let err = ManagedServer::start(&plan, &launch, &log)
            .await
            .expect_err("exits");
        let text = err.to_string();
        assert!(
            text.starts_with("the inference server exited during start-up (exit code 1)"),
            "{text}"
        );
        assert!(text.contains("    error: failed to load model"), "{text}");
    }
}
