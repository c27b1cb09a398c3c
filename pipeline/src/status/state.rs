//! `status.json`: written atomically by `gen run` on every change and at least every second
//! (the heartbeat), read by `gen status` from any shell. Every write goes through [`write`] or
//! [`mark_stopped`], one at a time, so the last word of a run that stops at once (a second
//! signal) is not overwritten by a tick of its loop.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

/// Where a source is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Pending,
    Preparing,
    Prepared,
    Generating,
    Done,
    Failed,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Pending => "pending",
            Phase::Preparing => "preparing",
            Phase::Prepared => "prepared",
            Phase::Generating => "generating",
            Phase::Done => "done",
            Phase::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceStatus {
    pub name: String,
    pub phase: Phase,
    /// Prompts prepared (known once preparation completed); with `samples` above 1, these
    /// and the other counts are of samples, each a record of its own.
    pub prepared: Option<u64>,
    /// Answers per prompt (`samples`).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub samples: u32,
    /// Prompts with a stored completion.
    pub done: u64,
    /// Prompts that ran out of attempts in this run (the next run retries them).
    pub failed: u64,
    /// Prompts settled without an answer: rejected by the server (400), truncated and dropped,
    /// or duplicates of another source's prompts.
    #[serde(default)]
    pub rejected: u64,
    /// Prompts another source answers (cross-source duplicates): left out of this source's
    /// sample (`duplicates_across` in its manifest) or settled in `rejected`.
    #[serde(default)]
    pub duplicates: u64,
    /// Completions cut by `max-tokens` (`finish_reason = "length"`).
    #[serde(default)]
    pub truncated: u64,
    /// Completions cut by the context instead (`cut_by = "context"`): the server stopped them
    /// before `max-tokens`, where a larger budget cannot help.
    #[serde(default)]
    pub cut_by_context: u64,
    /// Prepared prompts that keep tool turns (calls and results).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub with_tool_turns: u64,
    /// Completions of such prompts answered without their tool turns: the server refused
    /// them (the conversation ended before its first tool turn).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_turns_cut: u64,
    /// Output tokens (reasoning included) generated for this source in this run.
    #[serde(default)]
    pub output_tokens: u64,
    /// Output tokens per second for this source since it started generating in this run.
    pub tokens_per_sec: Option<f64>,
    /// Estimated seconds to finish, from tokens (not items): remaining prompts × mean output
    /// tokens per completion ÷ tokens per second.
    pub eta_secs: Option<u64>,
    /// One line: why it failed, or what is going on.
    #[serde(default)]
    pub note: String,
    /// How the last preparation worker ended, when it did not simply succeed.
    pub verdict: Option<VerdictLine>,
    /// What deserves a look: a preparation that dropped more than half its rows for one
    /// reason (likely a setting that does not fit the data), and what went wrong with its
    /// stored data in this run and what `gen` did about it (damaged completions set aside,
    /// stored records that were not answers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl SourceStatus {
    /// A source with nothing counted yet.
    pub fn new(name: &str, phase: Phase) -> SourceStatus {
        SourceStatus {
            name: name.to_owned(),
            phase,
            prepared: None,
            samples: 1,
            done: 0,
            failed: 0,
            rejected: 0,
            duplicates: 0,
            truncated: 0,
            cut_by_context: 0,
            with_tool_turns: 0,
            tool_turns_cut: 0,
            output_tokens: 0,
            tokens_per_sec: None,
            eta_secs: None,
            note: String::new(),
            verdict: None,
            warnings: Vec::new(),
        }
    }
}

/// A worker verdict in brief: its class, one line, and what to do next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictLine {
    pub class: String,
    pub headline: String,
    pub next_action: String,
}

impl From<&gen_diagnostics::Verdict> for VerdictLine {
    fn from(verdict: &gen_diagnostics::Verdict) -> VerdictLine {
        let class = serde_json::to_value(verdict.class)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        VerdictLine {
            class,
            headline: verdict.full_headline(),
            next_action: verdict.next_action(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerStatus {
    pub url: String,
    pub model: String,
    /// The model its answers name, when that is not `model` (a gateway naming its deployment);
    /// the answers are stored under this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    /// The server's version as it reported it (`/version`, `/get_server_info`, `/props`),
    /// when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub concurrency: usize,
    /// Set while the server is down: dispatch is paused, nothing is marked failed.
    pub down_since_unix_ms: Option<u64>,
    /// Why it is down, while it is: unreachable, or failing every request although `/health`
    /// answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down_reason: Option<String>,
    /// Requests in flight now.
    pub in_flight: Option<u32>,
    /// With `concurrency = "auto"`: the controller's ceiling and its last decision.
    pub ceiling: Option<u32>,
    pub decision: Option<String>,
    /// Requests this server answered in this run.
    #[serde(default)]
    pub completed: u64,
    /// Output tokens per second this server generated in this run.
    pub tokens_per_sec: Option<f64>,
    /// Requests waiting in the server's own queue (from its metrics, when it has them).
    pub queued: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStatus {
    pub layout: u32,
    pub config: String,
    pub pid: u32,
    pub host: String,
    pub started_unix_ms: u64,
    pub heartbeat_unix_ms: u64,
    /// `gen run` ended (normally or by a handled signal).
    pub finished: bool,
    /// Every server of the run, in config order (empty before they are contacted).
    #[serde(default)]
    pub servers: Vec<ServerStatus>,
    pub sources: Vec<SourceStatus>,
    /// The machine `gen run` runs on.
    pub machine: Option<MachineStatus>,
    /// Why the run stopped early, when an error or a signal stopped it.
    pub stopped_by: Option<String>,
    /// What the run waits for before it can send (a server it launched starting, or an
    /// external one not answering yet); preparation goes on meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// What is left of the whole run, at its tokens per completion and rate (the ETA of
    /// `gen run`'s progress line); absent until something completed in this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_secs: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineStatus {
    pub memory_total_bytes: u64,
    pub memory_available_bytes: u64,
    /// The largest peak RSS of any preparation worker in this run.
    pub peak_worker_rss_bytes: Option<u64>,
}

impl MachineStatus {
    /// Reads `/proc/meminfo`.
    pub fn read(peak_worker_rss_bytes: Option<u64>) -> Option<MachineStatus> {
        let text = fs_err::read_to_string("/proc/meminfo").ok()?;
        let field = |name| crate::sys::meminfo_field(&text, name);
        Some(MachineStatus {
            memory_total_bytes: field("MemTotal")?,
            memory_available_bytes: field("MemAvailable")?,
            peak_worker_rss_bytes,
        })
    }
}

/// Held while `status.json` is written (see the module documentation).
static WRITING: Mutex<()> = Mutex::new(());

/// Writes `status` to `path` atomically.
pub fn write(path: &Path, status: &RunStatus) -> std::io::Result<()> {
    let _writing = WRITING.lock().unwrap_or_else(PoisonError::into_inner);
    crate::store::atomic::write_json(path, status)
}

/// Says in the status at `path` that the run stopped and why, if that status is this process's
/// run: `finished`, `stopped_by = reason`, and no source left preparing or generating. Returns
/// the write lock: while it is held, nothing else writes `status.json` (a caller about to exit
/// keeps it).
pub fn mark_stopped(path: &Path, reason: &str) -> MutexGuard<'static, ()> {
    let writing = WRITING.lock().unwrap_or_else(PoisonError::into_inner);
    let Ok(Some(mut status)) = crate::store::atomic::read_json::<RunStatus>(path) else {
        return writing;
    };
    if status.pid != std::process::id() && !status.finished {
        // Another run's status (e.g. this one was refused by the lock): not ours to change.
        // An earlier run's that ended is: this run stopped before writing its own, and the
        // status must not go on saying the earlier one finished.
        return writing;
    }
    status.finished = true;
    status.stopped_by = Some(reason.to_owned());
    status.heartbeat_unix_ms = crate::sys::unix_ms();
    for source in &mut status.sources {
        source.tokens_per_sec = None;
        source.eta_secs = None;
        match source.phase {
            Phase::Preparing => {
                source.phase = Phase::Pending;
                source.note = "interrupted during preparation".to_owned();
            }
            Phase::Generating => source.phase = Phase::Prepared,
            _ => {}
        }
    }
    for server in &mut status.servers {
        server.in_flight = Some(0);
    }
    crate::store::atomic::write_json(path, &status).ok();
    writing
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
