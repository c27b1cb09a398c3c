//! A server `gen` launches itself: started in its own process group with its output in the
//! run directory, waited on until `/health` answers 200 — while also waiting on the process,
//! so a server that dies is reported at once with the tail of its log — and stopped at the end.
//!
//! Healthy means *its own* process is alive when the port answers: a port another process
//! already holds is refused before the launch (the launched server could not bind it, and
//! `/health` would reach the other process, which would then get the run's requests).
//!
//! A server across several nodes (`--nodes-per-shard`) is one `srun` step started the same way
//! (`crate::scale::nodes`): the step's exit, when any node's part ends, is the server's.
//!
//! The server's output reaches its log through `gen`, line by line, with every known secret
//! taken out: servers print their arguments (vLLM logs its `api_key`), and the key passed with
//! `--api-key ${…}` must not land on disk.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

use crate::config::ServerPlan;
use crate::config::launch::{UnsetVariable, expand};
use crate::sys;

/// Lines of the server log quoted when it fails.
const TAIL_LINES: usize = 25;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    MissingVariable(#[from] UnsetVariable),
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
    #[error(
        "port {port} is already in use by another process{seen}, so the inference server `gen` launches cannot listen on it and `{url}` would reach that other process; stop it, or write `{{port}}` in `[server] launch` and `url` so `gen` picks a free port"
    )]
    PortInUse {
        port: u16,
        url: String,
        /// How it was found: ` (…)`, or empty.
        seen: String,
    },
    #[error("failed to prepare the server launch")]
    Io(#[from] std::io::Error),
}

/// Whether the process `gen` launched (the latest, after restarts) runs: the server's liveness
/// reads it, so that while it does not, an answer on its port does not count, and it hears at
/// once when the process exits.
#[derive(Debug, Clone)]
pub struct ProcessGate(Arc<watch::Sender<u32>>);

impl Default for ProcessGate {
    fn default() -> ProcessGate {
        ProcessGate(Arc::new(watch::channel(0).0))
    }
}

/// The gate's value once `gen` stops the server on purpose.
const STOPPED_BY_GEN: u32 = u32::MAX;

impl ProcessGate {
    /// The server's process runs (it answered `/health` and has not exited since).
    pub fn running(&self) -> bool {
        !matches!(*self.0.borrow(), 0 | STOPPED_BY_GEN)
    }

    /// Waits until the server's process is not running (at once if it is not); `false` when
    /// `gen` stopped it on purpose, for good.
    pub async fn stopped(&self) -> bool {
        let mut receiver = self.0.subscribe();
        let stopped = receiver
            .wait_for(|pid| matches!(*pid, 0 | STOPPED_BY_GEN))
            .await;
        stopped.is_ok_and(|pid| *pid == 0)
    }

    /// Waits until a server's process runs again.
    pub async fn started(&self) {
        self.0.subscribe().wait_for(|pid| *pid != 0).await.ok();
    }

    /// `pid` exited: closes the gate, unless a newer process holds it.
    fn exited(&self, pid: u32) {
        self.0.send_if_modified(|current| {
            let ours = *current == pid;
            if ours {
                *current = 0;
            }
            ours
        });
    }
}

/// A running server `gen` started.
#[derive(Debug)]
pub struct ManagedServer {
    /// Its exit, once it has exited (the task that waits for it holds the process).
    exit: watch::Receiver<Option<String>>,
    /// Waits for the process; dropped with the server, it kills the process (kill on drop).
    _waiter: AbortOnDropHandle<()>,
    gate: ProcessGate,
    /// The tasks copying its stdout and stderr into its log.
    copying: Vec<tokio::task::JoinHandle<()>>,
    pgid: i32,
    pub url: String,
    pub log: PathBuf,
    /// The expanded command line, for restarts (same port, same URL).
    args: Vec<String>,
    health_timeout: Duration,
    /// Restarts so far.
    pub restarts: u32,
}

/// How a launched server's start-up ended.
enum Startup {
    Healthy,
    Exited,
    TimedOut,
}

/// Starts the server's process (`args[0]` with the rest) in its own process group, its output
/// piped (to reach `log` through [`copy_redacted`]), killed with `gen`.
fn spawn_server(args: &[String], log: &Path) -> Result<tokio::process::Child, LaunchError> {
    use std::os::unix::process::CommandExt as _;
    let program = args.first().cloned().unwrap_or_default();
    // Created (owner-only) before the server starts, so a launch that fails has a log.
    drop(crate::store::private::open_private(log)?);
    let mut command = std::process::Command::new(&program);
    command
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    sys::kill_with_parent(&mut command);
    tokio::process::Command::from(command)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| LaunchError::Spawn { program, source })
}

/// Copies the output of server process `pid` into `log`, and waits on it: the receiver says
/// how it exited, once it has (closing `gate` for it).
fn follow(
    mut child: tokio::process::Child,
    pid: u32,
    gate: &ProcessGate,
    log: &Path,
) -> (
    watch::Receiver<Option<String>>,
    AbortOnDropHandle<()>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let mut copying = Vec::new();
    if let Some(out) = child.stdout.take() {
        copying.push(tokio::spawn(copy_redacted(out, log.to_path_buf())));
    }
    if let Some(err) = child.stderr.take() {
        copying.push(tokio::spawn(copy_redacted(err, log.to_path_buf())));
    }
    let (exit_tx, exit) = watch::channel(None);
    let waiter = AbortOnDropHandle::new(tokio::spawn({
        let gate = gate.clone();
        async move {
            let status = child.wait().await;
            gate.exited(pid);
            exit_tx.send_replace(Some(status.map_or_else(|e| e.to_string(), describe_status)));
        }
    }));
    (exit, waiter, copying)
}

/// Waits until `/health` at `url` answers, the process exits, or `health_timeout` passes.
/// Healthy counts only if process `pid` is still there to have given the answer; the gate
/// then opens for it.
async fn until_healthy(
    url: &str,
    exit: &watch::Receiver<Option<String>>,
    gate: &ProcessGate,
    pid: u32,
    health_timeout: Duration,
) -> Startup {
    let healthy = async {
        loop {
            if let Ok(true) = super::probe::health(url).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    let mut exiting = exit.clone();
    let exited = async move {
        exiting.wait_for(Option::is_some).await.ok();
    };
    tokio::select! {
        () = exited => Startup::Exited,
        () = healthy => {
            if exit.borrow().is_none() {
                gate.0.send_replace(pid);
                if exit.borrow().is_none() {
                    return Startup::Healthy;
                }
                gate.exited(pid);
            }
            Startup::Exited
        }
        () = tokio::time::sleep(health_timeout) => Startup::TimedOut,
    }
}

/// What `{port}` stands for in the launch command: the port `url` names (so the server listens
/// where `gen` will ask it), or a free one when `url` says `{port}` too.
fn launch_port(url: &str) -> std::io::Result<u16> {
    if !url.contains("{port}")
        && let Some(port) = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.port_or_known_default())
    {
        return Ok(port);
    }
    free_port()
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
    let mut out = format!("diagnosis: {}", verdict.full_headline());
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
        let port = launch_port(plan.url())?;
        let env = |name: &str| std::env::var(name).ok();
        let args = launch
            .iter()
            .map(|a| expand(a, port, &env))
            .collect::<Result<Vec<_>, _>>()?;
        // Across nodes, the `srun` step is the server: its exit is the server's death.
        let args = match plan.nodes {
            0 | 1 => args,
            nodes => crate::scale::nodes::across(&args, nodes, &sys::host_name()),
        };
        let url = expand(plan.url(), port, &env)?;
        let gate = ProcessGate::default();
        ManagedServer::launch(args, url, log.to_path_buf(), plan.health_timeout, 0, gate).await
    }

    /// Starts the same command again after the server died (its log is appended to).
    pub async fn restart(self) -> Result<ManagedServer, LaunchError> {
        let restarts = self.restarts + 1;
        let (args, url, log) = (self.args, self.url, self.log);
        ManagedServer::launch(args, url, log, self.health_timeout, restarts, self.gate).await
    }

    /// Whether this server's process runs, also after restarts (see [`ProcessGate`]).
    pub fn gate(&self) -> ProcessGate {
        self.gate.clone()
    }

    async fn launch(
        args: Vec<String>,
        url: String,
        log: PathBuf,
        health_timeout: Duration,
        restarts: u32,
        gate: ProcessGate,
    ) -> Result<ManagedServer, LaunchError> {
        if let Some(port) = answering_port(&url).await {
            return Err(LaunchError::PortInUse {
                port,
                url: super::probe::redact(&url),
                seen: " (it accepts connections before the server is started)".to_owned(),
            });
        }
        let log = log.as_path();
        let child = spawn_server(&args, log)?;
        let pid = child.id().unwrap_or(0);
        let pgid = i32::try_from(pid).unwrap_or(0);
        let (exit, waiter, copying) = follow(child, pid, &gate, log);
        tracing::info!(url = %super::probe::redact(&url), log = %log.display(), "started inference server (pid {pid})");
        match until_healthy(&url, &exit, &gate, pid, health_timeout).await {
            Startup::Healthy => Ok(ManagedServer {
                exit,
                _waiter: waiter,
                gate,
                copying,
                pgid,
                url,
                log: log.to_path_buf(),
                args,
                health_timeout,
                restarts,
            }),
            Startup::TimedOut => {
                sys::kill_group(pgid, libc::SIGKILL).ok();
                logged(copying).await;
                Err(LaunchError::NotHealthy {
                    timeout: health_timeout,
                    log: log.to_path_buf(),
                    tail: tail(log, TAIL_LINES),
                    diagnosis: diagnosis(log),
                })
            }
            Startup::Exited => {
                logged(copying).await;
                let status = exit.borrow().clone().unwrap_or_default();
                Err(exited_error(&url, log, status))
            }
        }
    }

    /// Waits (briefly) until what the exited server wrote is in its log.
    pub async fn log_complete(&mut self) {
        logged(std::mem::take(&mut self.copying)).await;
    }

    /// `Some(description)` once the server has exited.
    pub fn exited(&self) -> Option<String> {
        self.exit.borrow().clone()
    }

    /// SIGTERM to the group, SIGKILL after a grace period.
    pub async fn stop(mut self) {
        self.gate.0.send_replace(STOPPED_BY_GEN);
        sys::kill_group(self.pgid, libc::SIGTERM).ok();
        let mut exit = self.exit.clone();
        let exited = exit.wait_for(Option::is_some);
        if tokio::time::timeout(Duration::from_secs(10), exited)
            .await
            .is_err()
        {
            sys::kill_group(self.pgid, libc::SIGKILL).ok();
            exit.wait_for(Option::is_some).await.ok();
        }
        self.log_complete().await;
    }
}

/// Longest piece of server output held back waiting for the end of its line.
const MAX_LINE: usize = 64 * 1024;

/// Appends what `from` says to `log`, a line at a time, secrets taken out. Ends at end of file
/// (the server closed its output) or when the log cannot be written.
async fn copy_redacted(from: impl tokio::io::AsyncRead + Unpin, log: PathBuf) {
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _};
    let mut from = tokio::io::BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut from)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if crate::store::append::lines(&log, &line, false).is_err() {
                    return;
                }
            }
        }
    }
}

/// Waits for the copying tasks to reach the end of the server's output: at most a second, as
/// a process the server left behind may hold its output open.
async fn logged(copying: Vec<tokio::task::JoinHandle<()>>) {
    let all = futures_util::future::join_all(copying);
    tokio::time::timeout(Duration::from_secs(1), all).await.ok();
}

/// Why a launched server exited during start-up: a port another process holds (its log says
/// it could not bind) is named as such, anything else quotes the log.
fn exited_error(url: &str, log: &Path, status: String) -> LaunchError {
    let text = fs_err::read(log)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let verdict = gen_diagnostics::classify_server_log(&text);
    let port = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.port_or_known_default());
    match (verdict.subtype, port) {
        (Some(gen_diagnostics::Subtype::PortInUse), Some(port)) => LaunchError::PortInUse {
            port,
            url: super::probe::redact(url),
            seen: format!(
                " (the server exited, {status}: `{}`)",
                verdict.evidence.first().map_or("", |l| l.trim())
            ),
        },
        _ => LaunchError::Exited {
            status,
            log: log.to_path_buf(),
            tail: tail(log, TAIL_LINES),
            diagnosis: diagnosis(log),
        },
    }
}

/// The port of `url` when something already accepts connections there.
async fn answering_port(url: &str) -> Option<u16> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let port = parsed.port_or_known_default()?;
    let host = parsed
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']');
    let connect = tokio::net::TcpStream::connect((host, port));
    match tokio::time::timeout(Duration::from_secs(2), connect).await {
        Ok(Ok(_)) => Some(port),
        _ => None,
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

    fn plan(url: &str) -> ServerPlan {
        ServerPlan {
            urls: vec![url.into()],
            model: None,
            api_key_env: None,
            launch: None,
            health_timeout: Duration::from_secs(3600),
            max_restarts: 0,
            log: None,
            max_outage: None,
            startup_timeout: Duration::from_secs(60),
            stall_after: Duration::from_secs(60),
            nodes: 1,
        }
    }

    #[tokio::test]
    async fn a_port_another_process_answers_on_is_refused_before_the_launch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = taken.local_addr().expect("addr").port();
        let marker = dir.path().join("launched");
        let launch = ["/bin/sh", "-c", "touch \"$0\"; sleep 60"]
            .map(str::to_owned)
            .into_iter()
            .chain([marker.display().to_string()])
            .collect::<Vec<_>>();
        let url = format!("http://127.0.0.1:{port}");
        let err = ManagedServer::start(&plan(&url), &launch, &dir.path().join("server.log"))
            .await
            .expect_err("port taken");
        assert_eq!(
            err.to_string(),
            format!(
                "port {port} is already in use by another process (it accepts connections before \
                 the server is started), so the inference server `gen` launches cannot listen on \
                 it and `{url}` would reach that other process; stop it, or write `{{port}}` in \
                 `[server] launch` and `url` so `gen` picks a free port"
            )
        );
        assert!(!marker.exists(), "nothing was launched");
    }

    #[tokio::test]
    async fn a_server_that_cannot_bind_its_port_is_named_as_such() {
        let dir = tempfile::tempdir().expect("tempdir");
        // llama-server's own words when its port is taken (quoted in
        // PiDanShouRouZhouXD/Sakura_Launcher_GUI#71), then its exit.
        let launch = [
            "/bin/sh",
            "-c",
            "echo 'main: binding port with default address family'; \
             echo 'main: couldn'\\''t bind HTTP server socket, hostname: 127.0.0.1, port: 8080' >&2; \
             echo 'srv    operator (): operator (): cleaning up before exit...'; exit 1",
        ]
        .map(str::to_owned);
        let port = free_port().expect("port");
        let url = format!("http://127.0.0.1:{port}");
        let err = ManagedServer::start(&plan(&url), &launch, &dir.path().join("server.log"))
            .await
            .expect_err("exits");
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "port {port} is already in use by another process (the server exited, exit code \
                 1: `main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080`)"
            )),
            "{text}"
        );
        assert!(
            text.contains("write `{port}` in `[server] launch`"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_server_log_never_holds_the_api_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("server.log");
        crate::secrets::register("sk-managed-Log4Kq9");
        // vLLM prints its arguments at start-up, `--api-key` included.
        let launch = [
            "/bin/sh",
            "-c",
            "echo \"INFO args: Namespace(host=None, port=8000, api_key='sk-managed-Log4Kq9')\"; \
             echo 'error: no GPU' >&2; exit 1",
        ]
        .map(str::to_owned);
        let err = ManagedServer::start(&plan("http://127.0.0.1:{port}"), &launch, &log)
            .await
            .expect_err("exits");
        let text = fs_err::read_to_string(&log).expect("log");
        assert!(
            text.contains("INFO args: Namespace(host=None, port=8000, api_key='***')"),
            "{text}"
        );
        assert!(text.contains("error: no GPU"), "{text}");
        assert!(!err.to_string().contains("sk-managed"), "{err}");
    }

    #[tokio::test]
    async fn port_in_the_launch_command_is_the_port_the_url_names() {
        // README's config: `url = "http://127.0.0.1:30000"` with `launch = [..., "{port}"]`.
        // The server must listen where gen asks it, not on a free port of its own.
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("server.log");
        let port = free_port().expect("port");
        let launch = ["/bin/sh", "-c", "echo listening on {port}; exit 1"].map(str::to_owned);
        let url = format!("http://127.0.0.1:{port}");
        let err = ManagedServer::start(&plan(&url), &launch, &log)
            .await
            .expect_err("exits");
        assert!(
            err.to_string().contains(&format!("listening on {port}")),
            "{err}"
        );
        // With `{port}` in the url too, a free port is picked for both.
        let err = ManagedServer::start(&plan("http://127.0.0.1:{port}"), &launch, &log)
            .await
            .expect_err("exits");
        assert!(!err.to_string().contains("{port}"), "{err}");
    }

    #[tokio::test]
    async fn a_server_that_exits_is_reported_at_once_with_its_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("server.log");
        let launch = [
            "/bin/sh",
            "-c",
            "echo loading model; echo 'error: failed to load model' >&2; exit 1",
        ]
        .map(str::to_owned);
        let err = ManagedServer::start(&plan("http://127.0.0.1:{port}"), &launch, &log)
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
