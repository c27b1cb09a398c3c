//! The records stored per source: one [`CompletionRecord`] per completed prompt in
//! `completions.jsonl.zst`, one [`RejectedRecord`] per prompt given up on in `rejected.jsonl`.

use std::collections::HashSet;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::inference::client::Usage;
use gen_sources::Message;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionRecord {
    /// The prompt's stable id: the key that makes resume exactly-once.
    pub id: String,
    pub source: String,
    pub model: String,
    pub messages: Vec<Message>,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    pub attempts: u32,
    pub latency_ms: u64,
    pub created_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectKind {
    /// The server refused the prompt itself (e.g. HTTP 400): retrying will not help.
    Rejected,
    /// Transient errors used up every attempt: the next `gen run` tries again.
    Exhausted,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedRecord {
    pub id: String,
    pub kind: RejectKind,
    pub reason: String,
    pub attempts: u32,
    pub created_unix_ms: u64,
}

#[derive(Deserialize)]
struct IdOnly {
    id: String,
}

/// Ids with a stored completion (the done-set), cutting a torn tail first.
pub fn completed_ids(path: &Path) -> io::Result<HashSet<String>> {
    super::super::store::frames::repair(path)?;
    let mut ids = HashSet::new();
    super::super::store::frames::scan(path, |line| {
        let record: IdOnly = serde_json::from_slice(line).map_err(io::Error::other)?;
        ids.insert(record.id);
        Ok(())
    })?;
    Ok(ids)
}
