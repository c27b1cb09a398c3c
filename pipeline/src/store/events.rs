//! `events.jsonl`: the run's append-only history — runs started and finished, every phase
//! change of a source (with its note), worker verdicts, server outages and concurrency
//! changes — one JSON object per line, so a multi-day run can be reconstructed after the fact.

use std::path::PathBuf;

use serde::Serialize;

/// One line of `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event<'a> {
    pub unix_ms: u64,
    /// `run_started`, `run_finished`, `source_phase`, `worker_verdict`, `server_down`,
    /// `server_up`, `concurrency`, `server_restart`, `server_restart_failed`, `inputs_changed`,
    /// …
    pub event: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'a str>,
    pub detail: String,
}

/// Appends events to one `events.jsonl`; the run's reporter decides what a failure means
/// (said once, never stopping the run).
#[derive(Debug)]
pub struct EventLog {
    path: PathBuf,
}

/// An event could not be appended.
#[derive(Debug, thiserror::Error)]
#[error("cannot append to `{}`: {error}", path.display())]
pub struct AppendError {
    pub path: PathBuf,
    pub error: std::io::Error,
}

impl EventLog {
    pub fn new(path: PathBuf) -> EventLog {
        EventLog { path }
    }

    pub fn append(
        &mut self,
        event: &str,
        source: Option<&str>,
        detail: impl Into<String>,
    ) -> Result<(), AppendError> {
        let event = Event {
            unix_ms: crate::sys::unix_ms(),
            event,
            source,
            detail: detail.into(),
        };
        super::append::json_lines(&self.path, &[event], false).map_err(|error| AppendError {
            path: self.path.clone(),
            error,
        })
    }
}
