//! `Verdict`: the classifier's answer, with the evidence it used and the next action for people.
//!
//! Holds data and its one-line renderings (`headline`, `next_action`); deciding which verdict
//! applies is `classify`'s job, and what to do about it (rerun, keep, quarantine) is policy that
//! lives in `gen-pipeline`.

use serde::{Deserialize, Serialize};

use crate::observation::Exit;
use crate::text::{basename, human_bytes, limit_setting, truncate};

/// Top-level outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Exit 0 with verified outputs.
    Success,
    /// Killed for memory (kernel, cgroup counter, userspace killer, or suspected), refused
    /// memory (a Rust allocation failure), or a server that ran out of GPU memory.
    Oom,
    /// The program reported an error: Python exception, Rust panic, or a last stderr line.
    Traceback,
    /// Outputs were verified complete; the process died afterwards (teardown crash or hang).
    CleanupAfterCompletion,
    /// Anything else: signals, aborts, segfaults, timeouts, external kills, bare exit codes.
    Other,
}

/// Finer label within a [`Class`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Subtype {
    /// Kernel `Killed process` line inside a memory cgroup limit.
    KernelMemcg,
    /// Kernel `Killed process` line from a system-wide OOM.
    KernelGlobal,
    /// The worker cgroup's `oom_kill` counter rose, no kernel line found.
    CgroupCounter,
    /// Kernel `Killed process` line whose context (memcg or global) was rate-limited or cut.
    Kernel,
    /// SIGKILL near the memory limit with the kernel evidence missing.
    SuspectedFromRss,
    /// SIGKILL with no other cause and no record either way (a shell's `Killed`, exit 137, a
    /// child `killed by signal: Killed`): most often the kernel OOM killer.
    SuspectedSigkill,
    /// The scheduler or container runtime counted the OOM kill (Slurm oom_kill events,
    /// Kubernetes `OOMKilled`, docker, systemd `oom-kill`, PBS, LSF).
    SchedulerReport,
    /// earlyoom or systemd-oomd killed it.
    UserspaceKiller,
    /// An allocation was refused and the process stopped itself (Rust's `memory allocation of
    /// N bytes failed`, then SIGABRT): a per-process limit or an impossible size, not a kill.
    AllocationFailure,
    /// Python exception.
    Python,
    /// Rust panic or allocation failure.
    Rust,
    /// A last stderr line without a traceback (e.g. `sys.exit("message")`).
    LastLine,
    /// Died by a signal not otherwise classified (SIGBUS, SIGILL, SIGFPE, ...).
    Signal,
    /// SIGABRT: glibc heap check, C++ terminate, `Fatal Python error`.
    Abort,
    /// SIGSEGV.
    Segfault,
    /// `gen`'s watchdog fired and `gen` killed it.
    Timeout,
    /// A scheduler's time limit or another watchdog (coreutils `timeout`, systemd, a liveness
    /// probe) stopped it.
    TimeLimit,
    /// `gen` stopped it for a cancel or shutdown.
    Cancelled,
    /// SIGKILL/SIGTERM/SIGINT from outside `gen`, no OOM evidence.
    ExternalKill,
    /// Non-zero exit code with nothing on stderr (or exit 0 without complete outputs).
    ExitCode,
    /// Server: CUDA OOM while capturing CUDA graphs (SGLang).
    CudaGraphCapture,
    /// Server: no memory left for the KV cache (vLLM).
    KvCache,
    /// Server: the GPU's free memory is below the requested utilization (shared GPU).
    GpuMemoryInUse,
    /// Server: a device/host buffer allocation failed (llama.cpp, CUDA OOM at run time).
    GpuAllocation,
    /// Server: the model could not be opened or loaded.
    ModelLoad,
    /// Server: the HTTP port was already in use.
    PortInUse,
}

/// How sure the classifier is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Direct evidence (counter, matching kernel line, parsed traceback).
    High,
    /// Indirect but consistent evidence.
    Medium,
    /// A guess; the evidence names what was missing.
    Low,
}

/// Language of a parsed error report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    /// CPython traceback.
    Python,
    /// Rust panic or allocation failure.
    Rust,
}

/// Where an exception was raised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// File as printed (full path).
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// Function name, when printed (`<module>` for top level).
    pub function: Option<String>,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", basename(&self.file), self.line)?;
        if let Some(function) = &self.function {
            write!(f, " in {function}")?;
        }
        Ok(())
    }
}

/// One raised exception or panic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Raised {
    /// `KeyError`, `json.decoder.JSONDecodeError`, `panic`, `allocation failure`.
    pub exception_type: String,
    /// Message as printed, possibly multi-line; empty for a bare `MemoryError`.
    pub message: String,
    /// Innermost frame of its traceback, or the panic location.
    pub location: Option<Location>,
}

impl Raised {
    /// `KeyError: 'prompt' at x.py:12`: the exception and, when known, where it was raised.
    pub(crate) fn located(&self) -> String {
        match &self.location {
            Some(location) => format!("{self} at {location}"),
            None => self.to_string(),
        }
    }
}

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let first_line = self.message.lines().next().unwrap_or("");
        if first_line.is_empty() {
            write!(f, "{}", self.exception_type)
        } else {
            write!(f, "{}: {first_line}", self.exception_type)
        }
    }
}

/// A parsed error report (Python traceback or Rust panic).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReport {
    /// Python or Rust.
    pub language: Language,
    /// The failure to report: the last block's exception (Python) or the first panic (Rust).
    pub exception: Raised,
    /// First block of a chained exception ("direct cause" / "during handling"), if chained.
    pub root_cause: Option<Raised>,
    /// Leaf exceptions of an exception group, outermost first.
    #[serde(default)]
    pub group_leaves: Vec<Raised>,
    /// `MemoryError`, CUDA OOM or a Rust allocation failure: memory, but not an OOM kill.
    pub memory_related: bool,
}

impl ErrorReport {
    /// The exception people should fix: a group's first leaf, else the exception itself.
    pub fn primary(&self) -> &Raised {
        self.group_leaves.first().unwrap_or(&self.exception)
    }
}

/// The classifier's answer for one worker (or one server log).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Top-level outcome.
    pub class: Class,
    /// Finer label; `None` only for `success`.
    pub subtype: Option<Subtype>,
    /// How sure the classifier is.
    pub confidence: Confidence,
    /// Human-readable lines quoting the log lines and numbers used.
    #[serde(default)]
    pub evidence: Vec<String>,
    /// Concrete next steps, most useful first.
    #[serde(default)]
    pub advice: Vec<String>,
    /// Outputs were verified complete (policy may keep them even after an OOM).
    #[serde(default)]
    pub outputs_complete: bool,
    /// The wait status; `None` for server logs.
    pub exit: Option<Exit>,
    /// Parsed traceback or panic, when one was found.
    pub error: Option<ErrorReport>,
    /// Distinctive line for aborts, crashes and server errors (`Fatal Python error: ...`).
    pub signature: Option<String>,
    /// Memory limit that was hit (OOM verdicts), bytes.
    pub limit_bytes: Option<u64>,
    /// Peak memory observed (OOM verdicts), bytes.
    pub peak_bytes: Option<u64>,
    /// Memory limit to set next (OOM verdicts), bytes: sized from the limit hit, the peak seen
    /// and the largest input row.
    pub suggested_limit_bytes: Option<u64>,
    /// Where that limit is set: `memory-limit` in `datasets.toml` unless the evidence names a
    /// scheduler (Slurm's `--mem`, a pod's `resources.limits.memory`, ...).
    pub limit_knob: Option<String>,
}

impl Verdict {
    /// An empty verdict of a class; rules fill in the rest.
    pub fn new(class: Class, subtype: Option<Subtype>, confidence: Confidence) -> Self {
        Verdict {
            class,
            subtype,
            confidence,
            evidence: Vec::new(),
            advice: Vec::new(),
            outputs_complete: false,
            exit: None,
            error: None,
            signature: None,
            limit_bytes: None,
            peak_bytes: None,
            suggested_limit_bytes: None,
            limit_knob: None,
        }
    }

    /// Adds a line of evidence.
    pub(crate) fn note(&mut self, line: impl Into<String>) {
        self.evidence.push(line.into());
    }

    /// Adds a line of advice.
    pub(crate) fn advise(&mut self, line: impl Into<String>) {
        self.advice.push(line.into());
    }

    /// One short line (≤ 60 chars) for events and messages, e.g. `oom (kernel memcg): killed
    /// at 96 MiB limit`.
    pub fn headline(&self) -> String {
        truncate(&self.full_headline(), 60)
    }

    /// [`Verdict::headline`] not shortened, for places that wrap it rather than cut it (`gen
    /// diagnose`, the lines under a failed source in `gen status`).
    pub fn full_headline(&self) -> String {
        match (self.class, self.subtype) {
            (Class::Success, _) => "success".to_string(),
            (Class::Oom, Some(subtype)) if subtype.is_server() => {
                format!(
                    "oom ({}): {}",
                    subtype_label(subtype),
                    self.signature_or("GPU memory")
                )
            }
            (Class::Oom, Some(Subtype::AllocationFailure)) => format!(
                "oom (allocation refused): {}",
                self.signature_or("an allocation was refused")
            ),
            (Class::Oom, subtype) => {
                let label = subtype.map(subtype_label).unwrap_or("unknown");
                match (&self.error, self.limit_bytes, self.peak_bytes) {
                    (Some(error), ..) => {
                        format!("oom of a child ({label}) behind {}", error.primary())
                    }
                    (None, Some(limit), _) => {
                        format!("oom ({label}): killed at {} limit", human_bytes(limit))
                    }
                    (None, None, Some(peak)) => {
                        format!("oom ({label}): killed at {}", human_bytes(peak))
                    }
                    (None, None, None) => format!("oom ({label})"),
                }
            }
            (Class::Traceback, _) => match &self.error {
                Some(error) => format!("traceback: {}", error.primary()),
                None => format!("failed: {}", self.signature_or("non-zero exit")),
            },
            (Class::CleanupAfterCompletion, _) => "cleanup crash after complete output".to_string(),
            (Class::Other, Some(Subtype::Timeout)) => "timeout: killed by gen".to_string(),
            (Class::Other, Some(Subtype::Cancelled)) => "cancelled by gen".to_string(),
            (Class::Other, Some(Subtype::TimeLimit)) => {
                format!("time limit: {}", self.signature_or("killed by a watchdog"))
            }
            (Class::Other, Some(Subtype::ExitCode)) => match self.exit {
                Some(Exit::Code(0)) => "exit 0 but outputs incomplete".to_string(),
                Some(Exit::Unknown) => "no known failure in the logs given".to_string(),
                Some(exit) => format!("{exit}, nothing on stderr"),
                None => "failed".to_string(),
            },
            (Class::Other, Some(subtype)) => match (&self.signature, self.exit) {
                (Some(signature), _) => format!("{}: {signature}", subtype_label(subtype)),
                (None, Some(exit)) => format!("{}: {exit}", subtype_label(subtype)),
                (None, None) => subtype_label(subtype).to_string(),
            },
            (Class::Other, None) => format!("failed: {}", self.signature_or("unknown cause")),
        }
    }

    /// A short next step, e.g. `raise memory-limit to 192M`.
    pub fn next_action(&self) -> String {
        match (self.class, self.subtype) {
            (Class::Success, _) => "none".to_string(),
            (Class::CleanupAfterCompletion, _) => "none: output kept".to_string(),
            (Class::Oom, Some(Subtype::KernelGlobal)) => {
                "free host memory or run fewer workers at once".to_string()
            }
            (Class::Oom, Some(Subtype::CudaGraphCapture)) => {
                "lower --mem-fraction-static (e.g. 0.85)".to_string()
            }
            (Class::Oom, Some(Subtype::KvCache)) => {
                "lower --max-model-len or raise --gpu-memory-utilization".to_string()
            }
            (Class::Oom, Some(Subtype::GpuMemoryInUse)) => {
                "free the GPU or lower --gpu-memory-utilization".to_string()
            }
            (Class::Oom, Some(Subtype::GpuAllocation)) => "lower -c, -ngl or slots".to_string(),
            (Class::Oom, Some(Subtype::AllocationFailure))
                if self
                    .advice
                    .first()
                    .is_some_and(|a| a.starts_with("the size asked for is impossible")) =>
            {
                "find where the impossible size comes from".to_string()
            }
            (Class::Oom, Some(Subtype::AllocationFailure)) => {
                "lift the per-process memory limit or hold less at once".to_string()
            }
            (Class::Oom, Some(Subtype::UserspaceKiller)) => {
                "leave the host more free memory, or exempt the worker from the killer".to_string()
            }
            (Class::Oom, _) => {
                let knob = self.limit_knob.as_deref().unwrap_or(GEN_LIMIT_KNOB);
                match self.suggested_limit_bytes.or(self
                    .limit_bytes
                    .or(self.peak_bytes)
                    .map(|b| b.saturating_mul(2)))
                {
                    Some(bytes) => format!("raise {knob} to {}", limit_setting(bytes)),
                    None => format!("raise {knob}, then rerun with --only-failed"),
                }
            }
            (Class::Traceback, _) if self.error.as_ref().is_some_and(|e| e.memory_related) => {
                "reduce memory use, then rerun with --only-failed".to_string()
            }
            (Class::Traceback, _) => "fix the error, then rerun with --only-failed".to_string(),
            (Class::Other, Some(Subtype::Timeout)) => {
                "find the hang or raise the timeout; rerun --only-failed".to_string()
            }
            (Class::Other, Some(Subtype::Cancelled)) => "rerun with --only-failed".to_string(),
            (Class::Other, Some(Subtype::TimeLimit)) => {
                "find why it ran long or hung, or raise the time limit".to_string()
            }
            (Class::Other, Some(Subtype::ExternalKill)) => {
                "find who killed it, then rerun with --only-failed".to_string()
            }
            (Class::Other, Some(Subtype::PortInUse)) => "pick a free port".to_string(),
            (Class::Other, Some(Subtype::ModelLoad)) => "check the model path and file".to_string(),
            (Class::Other, _) => "rerun with --only-failed; report if it repeats".to_string(),
        }
    }

    fn signature_or<'a>(&'a self, fallback: &'a str) -> &'a str {
        self.signature.as_deref().unwrap_or(fallback)
    }
}

/// The `datasets.toml` key that caps a worker's memory, named in advice.
pub const GEN_LIMIT_KNOB: &str = "memory-limit";

impl Subtype {
    /// Only an inference server's log has this signature (`classify_server_log`).
    pub fn is_server(self) -> bool {
        matches!(
            self,
            Subtype::CudaGraphCapture
                | Subtype::KvCache
                | Subtype::GpuMemoryInUse
                | Subtype::GpuAllocation
                | Subtype::ModelLoad
                | Subtype::PortInUse
        )
    }
}

/// Words for a subtype in headlines (`kernel memcg`).
pub fn subtype_label(subtype: Subtype) -> &'static str {
    match subtype {
        Subtype::KernelMemcg => "kernel memcg",
        Subtype::KernelGlobal => "kernel global",
        Subtype::CgroupCounter => "cgroup counter",
        Subtype::Kernel => "kernel",
        Subtype::SuspectedFromRss => "suspected",
        Subtype::SuspectedSigkill => "suspected: SIGKILL",
        Subtype::SchedulerReport => "scheduler",
        Subtype::UserspaceKiller => "userspace killer",
        Subtype::AllocationFailure => "allocation refused",
        Subtype::Python => "python",
        Subtype::Rust => "rust",
        Subtype::LastLine => "last line",
        Subtype::Signal => "signal",
        Subtype::Abort => "abort",
        Subtype::Segfault => "segfault",
        Subtype::Timeout => "timeout",
        Subtype::TimeLimit => "time limit",
        Subtype::Cancelled => "cancelled",
        Subtype::ExternalKill => "external kill",
        Subtype::ExitCode => "exit code",
        Subtype::CudaGraphCapture => "cuda graph capture",
        Subtype::KvCache => "kv cache",
        Subtype::GpuMemoryInUse => "gpu in use",
        Subtype::GpuAllocation => "allocation",
        Subtype::ModelLoad => "model load",
        Subtype::PortInUse => "port in use",
    }
}
