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
    /// Summed over every turn.
    pub usage: Option<Usage>,
    /// Every answered turn of a multi-turn conversation, in order (empty for one turn).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnRecord>,
    pub attempts: u32,
    pub latency_ms: u64,
    pub created_unix_ms: u64,
}

/// One answered turn of a multi-turn regeneration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
}

impl From<crate::inference::client::Completion> for TurnRecord {
    fn from(c: crate::inference::client::Completion) -> TurnRecord {
        TurnRecord {
            content: c.content,
            reasoning_content: c.reasoning_content,
            finish_reason: c.finish_reason,
            usage: c.usage,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectKind {
    /// The server refused the prompt itself (e.g. HTTP 400): retrying will not help.
    Rejected,
    /// Transient errors used up every attempt: the next `gen run` tries again.
    Exhausted,
    /// Cut by `max-tokens` with `on-length = "drop"`: final, not retried.
    Truncated,
    /// The same prompt (after normalization) is in another source, which answers it: an
    /// earlier one, or a later one that answered it before this source was prepared.
    Duplicate,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedRecord {
    pub id: String,
    pub kind: RejectKind,
    pub reason: String,
    pub attempts: u32,
    pub created_unix_ms: u64,
}

/// Ids with a stored completion (the done-set), cutting a torn tail first.
pub fn completed_ids(path: &Path) -> io::Result<HashSet<String>> {
    crate::store::done::completed_ids(path)
}

/// What `rejected.jsonl` settles.
#[derive(Debug, Default)]
pub struct Settled {
    /// Ids settled without a completion.
    pub ids: HashSet<String>,
    /// How many of them another source answers (kind `duplicate`).
    pub duplicates: u64,
}

/// Ids settled without a completion: permanently rejected, truncated-and-dropped or duplicate
/// prompts. Prompts that merely ran out of attempts are not settled: the next run retries them.
pub fn settled_ids(path: &Path) -> io::Result<Settled> {
    let text = match fs_err::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Settled::default()),
        Err(e) => return Err(e),
    };
    let mut settled = Settled::default();
    // A torn last line (a crash mid-append) is skipped: that prompt is simply retried.
    for line in text
        .split(|b| *b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
    {
        if let Ok(record) = serde_json::from_slice::<RejectedRecord>(line)
            && record.kind != RejectKind::Exhausted
        {
            settled.duplicates += u64::from(record.kind == RejectKind::Duplicate);
            settled.ids.insert(record.id);
        }
    }
    Ok(settled)
}
