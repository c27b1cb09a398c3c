//! Runs one preparation worker as a child process and watches it until it ends.
//!
//! The worker is executed directly (no shell), in its own process group, with stdout and
//! stderr going to its log file. While it runs, the RSS of its whole process tree is sampled
//! every [`SAMPLE_EVERY`]; it is reaped with `wait4` so its own peak RSS is known too. On
//! cancellation the group gets SIGTERM, then SIGKILL after [`GRACE`]; every signal sent is
//! recorded, because a kill `gen` sent is never an OOM.
//!
//! The supervisor reports facts ([`WorkerReport`], kept in `worker.json`); deciding what they mean is the
//! diagnostics crate's job, and what to do about it is the orchestrator's.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::cgroup::{self, MemoryCgroup};
use super::rss;
use crate::store::worker::{ExitRecord, MemoryCounters, RssSample, WorkerReport};
use crate::sys::{self, unix_ms};

pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);
pub const GRACE: Duration = Duration::from_secs(5);
/// RSS samples kept (the most recent ones).
const HISTORY: usize = 240;

/// What to run.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub envs: Vec<(String, String)>,
    pub log: PathBuf,
    /// Memory cap for the worker's own cgroup (`memory-limit` of the source).
    pub memory_limit: Option<u64>,
    /// Kill the worker when none of `progress_files` (nor its log) grew for this long.
    pub stall_timeout: Option<Duration>,
    pub progress_files: Vec<PathBuf>,
    /// Name used for the worker's cgroup.
    pub name: String,
}

/// Spawns `command` and supervises it to the end.
pub async fn supervise(
    command: &WorkerCommand,
    cancel: CancellationToken,
) -> std::io::Result<WorkerReport> {
    let mut process = worker_process(command)?;
    let (cgroup, mut memory) = memory_cgroup(command);
    sys::prepare_worker_child(&mut process, cgroup.as_ref().map(MemoryCgroup::procs_fd));
    let started = Instant::now();
    let started_unix_ms = unix_ms();
    let spawn_usec = sys::monotonic_usec();
    let child = match process.spawn() {
        Ok(child) => child,
        Err(e) => {
            if let Some(cgroup) = cgroup {
                cgroup.remove();
            }
            return Err(e);
        }
    };
    let pid = i32::try_from(child.id()).expect("pids fit in i32");
    // The std handle is dropped without waiting: `wait4` below reaps the child instead.
    drop(child);
    let mut watch = Watch::new(command, started);
    let reaped = watch.until_reaped(pid, command, &cancel).await?;
    let exit_usec = sys::monotonic_usec();
    // Leftover grandchildren must not outlive their worker.
    sys::kill_group(pid, libc::SIGKILL)?;
    memory.vmstat_oom_kill_after = cgroup::vmstat_oom_kills();
    if let Some(cgroup) = cgroup {
        // Counters are read before the cgroup is removed; they vanish with it.
        memory.oom_kill_after = cgroup.oom_kills();
        memory.cgroup_peak_bytes = cgroup.peak_bytes();
        tokio::task::spawn_blocking(move || cgroup.remove());
    }
    let exit = match (reaped.code, reaped.signal) {
        (Some(code), _) => ExitRecord::Code(code),
        (None, Some(signal)) => ExitRecord::Signal {
            signal,
            sent_by_gen: watch.signals_sent.contains(&signal),
        },
        (None, None) => ExitRecord::Code(-1),
    };
    Ok(WorkerReport {
        pid,
        child_pids: watch.children.into_iter().collect(),
        exit,
        peak_rss_bytes: watch
            .peak
            .max(reaped.max_rss_bytes)
            .max(memory.cgroup_peak_bytes.unwrap_or(0)),
        rss_samples: watch.samples,
        started_unix_ms,
        duration_ms: u64::try_from(watch.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        signals_sent: watch.signals_sent,
        comm: watch.comm,
        spawn_usec,
        exit_usec,
        memory,
        timed_out: watch.timed_out,
    })
}

/// The worker's process, not yet spawned: no shell, its own process group, stdout and stderr
/// to its log, unbuffered and uncoloured.
fn worker_process(command: &WorkerCommand) -> std::io::Result<std::process::Command> {
    use std::os::unix::process::CommandExt;

    let log = crate::store::private::open_private(&command.log)?;
    let log_err = log.try_clone()?;
    let mut process = std::process::Command::new(&command.program);
    process
        .args(&command.args)
        .envs(command.envs.iter().map(|(k, v)| (k, v)))
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONFAULTHANDLER", "1")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.into_parts().0))
        .stderr(Stdio::from(log_err.into_parts().0))
        .process_group(0);
    sys::kill_with_parent(&mut process);
    Ok(process)
}

/// The worker's memory cgroup when it has a cap and one can be made (else it runs uncapped,
/// with the reason recorded), and the counters read before it starts.
fn memory_cgroup(command: &WorkerCommand) -> (Option<MemoryCgroup>, MemoryCounters) {
    let mut memory = MemoryCounters {
        vmstat_oom_kill_before: cgroup::vmstat_oom_kills(),
        ..MemoryCounters::default()
    };
    let limit = command.memory_limit;
    let cgroup = limit.and_then(|limit| match MemoryCgroup::create(&command.name, limit) {
        Ok(cgroup) => {
            memory.cgroup_path = Some(cgroup.path().display().to_string());
            memory.limit_bytes = Some(limit);
            memory.oom_kill_before = cgroup.oom_kills();
            Some(cgroup)
        }
        Err(reason) => {
            tracing::warn!(
                "worker `{}` runs without its memory cap: {reason}",
                command.name
            );
            memory.cgroup_unavailable = Some(reason);
            None
        }
    });
    (cgroup, memory)
}

/// What is observed of a running worker, and the signals sent to its group.
struct Watch {
    started: Instant,
    samples: Vec<RssSample>,
    peak: u64,
    children: BTreeSet<i32>,
    signals_sent: Vec<i32>,
    /// When the group gets SIGKILL (after a SIGTERM and [`GRACE`]).
    kill_at: Option<tokio::time::Instant>,
    comm: Option<String>,
    timed_out: bool,
    progress: Progress,
}

impl Watch {
    fn new(command: &WorkerCommand, started: Instant) -> Watch {
        Watch {
            started,
            samples: Vec::new(),
            peak: 0,
            children: BTreeSet::new(),
            signals_sent: Vec::new(),
            kill_at: None,
            comm: None,
            timed_out: false,
            progress: Progress::new(&command.log, &command.progress_files),
        }
    }

    /// Samples worker `pid` every [`SAMPLE_EVERY`] until `wait4` reaps it; stops it when it
    /// stalls or the run is cancelled.
    async fn until_reaped(
        &mut self,
        pid: i32,
        command: &WorkerCommand,
        cancel: &CancellationToken,
    ) -> std::io::Result<sys::Reaped> {
        let mut reaper = tokio::task::spawn_blocking(move || sys::wait4(pid));
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        loop {
            let kill_at = self.kill_at;
            let kill_deadline = async move {
                match kill_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                reaped = &mut reaper => return reaped.map_err(std::io::Error::other)?,
                _ = tick.tick() => {
                    self.sample(pid);
                    if let Some(limit) = command.stall_timeout
                        && self.kill_at.is_none()
                        && self.progress.stalled_for() >= limit
                    {
                        tracing::warn!("worker `{}` made no progress for {} s: stopping it", command.name, limit.as_secs());
                        self.timed_out = true;
                        self.terminate(pid)?;
                    }
                }
                () = cancel.cancelled(), if kill_at.is_none() => self.terminate(pid)?,
                () = kill_deadline => {
                    sys::kill_group(pid, libc::SIGKILL)?;
                    self.signals_sent.push(libc::SIGKILL);
                    self.kill_at = Some(tokio::time::Instant::now() + Duration::from_secs(3600));
                }
            }
        }
    }

    /// Reads the RSS of the worker's process tree and its current name.
    fn sample(&mut self, pid: i32) {
        let (bytes, tree) = rss::tree_rss_bytes(pid);
        if bytes > 0 {
            self.peak = self.peak.max(bytes);
            self.children.extend(tree.into_iter().filter(|p| *p != pid));
            if self.samples.len() == HISTORY {
                self.samples.remove(0);
            }
            let at_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.samples.push(RssSample { at_ms, bytes });
        }
        // The latest name: a launcher (a pyenv shim, `uv run`) may exec the real worker.
        if let Ok(name) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
            self.comm = Some(name.trim().to_owned());
        }
    }

    /// SIGTERM to the worker's group; SIGKILL follows after [`GRACE`].
    fn terminate(&mut self, pid: i32) -> std::io::Result<()> {
        sys::kill_group(pid, libc::SIGTERM)?;
        self.signals_sent.push(libc::SIGTERM);
        self.kill_at = Some(tokio::time::Instant::now() + GRACE);
        Ok(())
    }
}

/// Watches the sizes of a worker's log and output files: growth is progress.
struct Progress {
    files: Vec<PathBuf>,
    sizes: Vec<u64>,
    since: Instant,
}

impl Progress {
    fn new(log: &std::path::Path, outputs: &[PathBuf]) -> Progress {
        let files: Vec<PathBuf> = std::iter::once(log.to_path_buf())
            .chain(outputs.iter().cloned())
            .collect();
        let sizes = vec![0; files.len()];
        Progress {
            files,
            sizes,
            since: Instant::now(),
        }
    }

    /// How long nothing grew.
    fn stalled_for(&mut self) -> Duration {
        let sizes: Vec<u64> = self
            .files
            .iter()
            .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
            .collect();
        if sizes != self.sizes {
            self.sizes = sizes;
            self.since = Instant::now();
        }
        self.since.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, log: PathBuf) -> WorkerCommand {
        WorkerCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            envs: vec![("GEN_TEST_VALUE".into(), "42".into())],
            log,
            memory_limit: None,
            stall_timeout: None,
            progress_files: Vec::new(),
            name: "test".into(),
        }
    }

    #[tokio::test]
    async fn records_exit_code_log_and_rss() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("w.log");
        let report = supervise(
            &sh(
                "echo out $GEN_TEST_VALUE; echo err >&2; exit 3",
                log.clone(),
            ),
            CancellationToken::new(),
        )
        .await
        .expect("supervise");
        assert_eq!(report.exit, ExitRecord::Code(3));
        assert!(report.peak_rss_bytes > 0);
        let text = fs_err::read_to_string(&log).expect("log");
        assert_eq!(text, "out 42\nerr\n");
    }

    #[tokio::test]
    async fn external_signal_is_not_ours() {
        let dir = tempfile::tempdir().expect("tempdir");
        let report = supervise(
            &sh("kill -KILL $$", dir.path().join("w.log")),
            CancellationToken::new(),
        )
        .await
        .expect("supervise");
        assert_eq!(
            report.exit,
            ExitRecord::Signal {
                signal: libc::SIGKILL,
                sent_by_gen: false
            }
        );
    }

    #[tokio::test]
    async fn cancellation_terminates_the_group_and_is_recorded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cancel = CancellationToken::new();
        cancel.cancel();
        let report = supervise(&sh("sleep 30 & wait", dir.path().join("w.log")), cancel)
            .await
            .expect("supervise");
        assert_eq!(
            report.exit,
            ExitRecord::Signal {
                signal: libc::SIGTERM,
                sent_by_gen: true
            }
        );
        assert_eq!(report.signals_sent, [libc::SIGTERM]);
    }
}
