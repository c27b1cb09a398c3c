//! `Observation`: everything the supervisor collected about one dead worker, as plain data.
//!
//! The supervisor (in `gen-pipeline`) fills it from `wait4`, cgroup files, `/dev/kmsg` and the
//! captured stderr; this crate only reads it. It must not grow fields that need I/O to interpret.
//!
//! # JSON schema
//!
//! Every field except `exit` and `pid` may be omitted and takes the documented default. A pid
//! of 0 means unknown (logs captured without it); `{"unknown": true}` is an unknown exit.
//! Times are CLOCK_MONOTONIC: `*_usec` in microseconds since boot (the unit of `/dev/kmsg`),
//! RSS sample times in milliseconds.
//!
//! ```json
//! {
//!   "exit": {"signal": 9, "sent_by_gen": false},
//!   "pid": 9142,
//!   "child_pids": [9150],
//!   "comm": "python3",
//!   "cgroup_path": "/gen/run-1/wildchat",
//!   "spawn_usec": 355041267,
//!   "exit_usec": 355158915,
//!   "rss_samples": [{"at_ms": 355100, "bytes": 50331648}],
//!   "peak_rss_bytes": 67108864,
//!   "memory_limit_bytes": 67108864,
//!   "host_memory_bytes": 8589934592,
//!   "oom_kill_before": 0,
//!   "oom_kill_after": 1,
//!   "vmstat_oom_kill_before": 3,
//!   "vmstat_oom_kill_after": 4,
//!   "kernel_log": {"kind": "text", "text": "3,423,355150418,-;Memory cgroup out of memory: Killed process 9142 (python3) total-vm:75160kB, anon-rss:65280kB, file-rss:6636kB, shmem-rss:0kB, UID:0 pgtables:188kB oom_score_adj:0"},
//!   "oom_killer_log": "",
//!   "stderr_head": "",
//!   "stderr_tail": "",
//!   "outputs_complete": false,
//!   "timed_out": false,
//!   "started_at": "2026-11-30T00:03:01",
//!   "exited_at": "2026-11-30T00:05:51",
//!   "other_log": "",
//!   "largest_row_bytes": 209715200
//! }
//! ```
//!
//! `exit` is either `{"code": N}` or `{"signal": N, "sent_by_gen": bool}`; `kernel_log` is either
//! `{"kind": "text", "text": "..."}` or `{"kind": "unavailable", "reason": "..."}`.

use serde::{Deserialize, Serialize};

/// How the worker ended, from its wait status.
///
/// Serialized flat: `{"code": 1}`, `{"signal": 9, "sent_by_gen": false}` or `{"unknown": true}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ExitRepr", into = "ExitRepr")]
pub enum Exit {
    /// Exited normally with this status code.
    Code(i32),
    /// Terminated by a signal.
    Signal {
        /// Signal number (9 = SIGKILL, 15 = SIGTERM, 6 = SIGABRT, 11 = SIGSEGV).
        signal: i32,
        /// `gen` itself sent this signal (timeout, cancel, shutdown), as recorded by the supervisor.
        sent_by_gen: bool,
    },
    /// Not known (`gen diagnose --stderr F` without `--exit-code` or `--signal`): the classifier
    /// reads it from the logs when they say (a shell's `Killed`, a traceback, `Exit Code: 137`).
    #[default]
    Unknown,
}

/// Wire shape of [`Exit`]; exactly one of `code` and `signal` must be present.
#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExitRepr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sent_by_gen: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unknown: Option<bool>,
}

impl TryFrom<ExitRepr> for Exit {
    type Error = String;

    fn try_from(repr: ExitRepr) -> Result<Self, Self::Error> {
        if repr.unknown == Some(true) {
            return match (repr.code, repr.signal, repr.sent_by_gen) {
                (None, None, None) => Ok(Exit::Unknown),
                _ => Err("`unknown` goes alone".to_string()),
            };
        }
        match (repr.code, repr.signal) {
            (Some(code), None) if repr.sent_by_gen.is_none() => Ok(Exit::Code(code)),
            (Some(_), None) => Err("`sent_by_gen` only goes with `signal`".to_string()),
            (None, Some(signal)) => Ok(Exit::Signal {
                signal,
                sent_by_gen: repr.sent_by_gen.unwrap_or(false),
            }),
            (Some(_), Some(_)) => Err("exit has both `code` and `signal`".to_string()),
            (None, None) => Err("exit needs `code` or `signal`".to_string()),
        }
    }
}

impl From<Exit> for ExitRepr {
    fn from(exit: Exit) -> Self {
        match exit {
            Exit::Code(code) => ExitRepr {
                code: Some(code),
                ..ExitRepr::default()
            },
            Exit::Unknown => ExitRepr {
                unknown: Some(true),
                ..ExitRepr::default()
            },
            Exit::Signal {
                signal,
                sent_by_gen,
            } => ExitRepr {
                signal: Some(signal),
                sent_by_gen: Some(sent_by_gen),
                ..ExitRepr::default()
            },
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Exit::Code(code) => write!(f, "exit code {code}"),
            Exit::Unknown => write!(f, "exit status unknown"),
            Exit::Signal {
                signal,
                sent_by_gen,
            } => {
                write!(f, "signal {signal} ({})", signal_name(signal))?;
                if sent_by_gen {
                    write!(f, " sent by gen")?;
                }
                Ok(())
            }
        }
    }
}

/// Conventional name of a Linux signal number (`SIGKILL`), or `SIG?` when unknown.
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        _ => "SIG?",
    }
}

/// The kernel log text covering the worker's lifetime, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KernelLog {
    /// The log could not be read (e.g. `dmesg_restrict=1` without CAP_SYSLOG).
    Unavailable {
        /// Human-readable reason, quoted in evidence ("dmesg_restrict").
        reason: String,
    },
    /// Raw text in any supported format: `/dev/kmsg` records, `dmesg`, `dmesg -T`,
    /// `journalctl -k` (short or short-monotonic) or syslog lines.
    Text {
        /// The raw log text.
        text: String,
    },
}

impl Default for KernelLog {
    fn default() -> Self {
        KernelLog::Unavailable {
            reason: "not collected".to_string(),
        }
    }
}

/// One RSS sample of the worker's cgroup (or process tree).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RssSample {
    /// CLOCK_MONOTONIC time of the sample, milliseconds.
    pub at_ms: u64,
    /// Resident set size in bytes.
    pub bytes: u64,
}

/// Everything known about one worker at the moment it was reaped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    /// How the process ended (wait status).
    pub exit: Exit,
    /// Worker pid in the init pid namespace (the namespace of kernel log lines); 0 when
    /// unknown.
    pub pid: u32,
    /// Every descendant pid seen during the run (pool workers, DataLoader workers, ...).
    #[serde(default)]
    pub child_pids: Vec<u32>,
    /// The worker's comm (≤ 15 chars, as in `/proc/PID/comm`); checked against kernel lines.
    pub comm: Option<String>,
    /// The worker's own leaf memory cgroup path (e.g. `/gen/run-1/wildchat`); matched by suffix.
    pub cgroup_path: Option<String>,
    /// CLOCK_MONOTONIC at spawn, microseconds since boot.
    pub spawn_usec: Option<u64>,
    /// CLOCK_MONOTONIC at reap, microseconds since boot.
    pub exit_usec: Option<u64>,
    /// RSS history, oldest first.
    #[serde(default)]
    pub rss_samples: Vec<RssSample>,
    /// Best high-water mark: `memory.peak`, `max_usage_in_bytes`, `ru_maxrss` or `VmHWM`.
    pub peak_rss_bytes: Option<u64>,
    /// Effective memory limit of the worker's cgroup; `None` when unlimited.
    pub memory_limit_bytes: Option<u64>,
    /// Host `MemTotal`, the limit that applies when the cgroup has none.
    pub host_memory_bytes: Option<u64>,
    /// Cgroup `oom_kill` counter at spawn; `None` when unreadable.
    pub oom_kill_before: Option<u64>,
    /// Cgroup `oom_kill` counter at exit (read before removing the cgroup); `None` when unreadable.
    pub oom_kill_after: Option<u64>,
    /// `/proc/vmstat oom_kill` at spawn (host-wide hint); `None` when unreadable.
    pub vmstat_oom_kill_before: Option<u64>,
    /// `/proc/vmstat oom_kill` at exit; `None` when unreadable.
    pub vmstat_oom_kill_after: Option<u64>,
    /// Kernel log covering [spawn − 1 s, exit + 5 s], or why it was unavailable.
    #[serde(default)]
    pub kernel_log: KernelLog,
    /// Lines from userspace OOM killers (earlyoom, systemd-oomd) for the window, any log format.
    #[serde(default)]
    pub oom_killer_log: String,
    /// Any other log about the run, read for every kind of evidence: a scheduler's job output
    /// (Slurm, `kubectl describe`), a journal, a launcher's log.
    #[serde(default)]
    pub other_log: String,
    /// First bytes of stderr; empty when the whole stderr fits in `stderr_tail`.
    #[serde(default)]
    pub stderr_head: String,
    /// Last bytes of stderr (where tracebacks are).
    #[serde(default)]
    pub stderr_tail: String,
    /// Outputs were verified complete (done marker + counts), not merely present.
    #[serde(default)]
    pub outputs_complete: bool,
    /// `gen`'s watchdog fired (deadline or no-progress timeout) before the worker died. With a
    /// `code` exit the death is attributed to `gen` (a wrapper reported its signal as 128 + N);
    /// with a signal, `sent_by_gen` decides.
    #[serde(default)]
    pub timed_out: bool,
    /// Wall-clock time the worker started (any format logs print, e.g. `2026-11-30T00:03:01`),
    /// for logs stamped in wall-clock time. A kernel record before it is another process's.
    pub started_at: Option<String>,
    /// Wall-clock time the worker ended; a kernel record well after it is another process's.
    pub exited_at: Option<String>,
    /// Size of the largest input row the worker had to hold, bytes (sizes OOM advice).
    pub largest_row_bytes: Option<u64>,
}

impl Observation {
    /// A minimal observation: given exit and pid, everything else empty or unknown.
    pub fn new(exit: Exit, pid: u32) -> Self {
        Observation {
            exit,
            pid,
            ..Observation::default()
        }
    }

    /// Highest RSS known: the recorded peak or the largest sample.
    pub fn peak_rss(&self) -> Option<u64> {
        let sampled = self.rss_samples.iter().map(|s| s.bytes).max();
        // `None` orders below every `Some`.
        self.peak_rss_bytes.max(sampled)
    }

    /// The limit that applies: the cgroup's, else the host's, labelled for evidence.
    pub fn effective_limit(&self) -> Option<(u64, &'static str)> {
        self.memory_limit_bytes
            .map(|l| (l, "memory limit"))
            .or(self.host_memory_bytes.map(|h| (h, "host memory")))
    }

    /// The stderr text to mine: head and tail joined, without repeating the head.
    pub fn stderr(&self) -> String {
        if self.stderr_head.is_empty() || self.stderr_tail.starts_with(&self.stderr_head) {
            self.stderr_tail.clone()
        } else {
            format!("{}\n[...]\n{}", self.stderr_head, self.stderr_tail)
        }
    }
}
