//! The records stored per source: one [`CompletionRecord`] per completed prompt in
//! `completions.jsonl.zst`, one [`RejectedRecord`] per prompt given up on in `rejected.jsonl`,
//! the readers of their ids ([`completed_ids`], [`settled_ids`]), the one rule of what
//! counts as an answer ([`answer_defect`]), which `gen run` (before storing), the done-set,
//! `gen verify` and `gen export` all apply, and what cut an answer short ([`CutBy`]).

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::store::atomic::if_exists;
use crate::store::ids::{self, IdSet};
use gen_sources::Message;

/// Token counts as the server reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

/// Why a stream that ended with `[DONE]` is still not an answer to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    /// `finish_reason = "abort"`: SGLang and vLLM end a request they aborted (engine shutdown,
    /// a pause, a scheduler abort) this way, with HTTP 200 and `[DONE]`.
    Aborted,
    /// `finish_reason = "error"`: vLLM's retryable request-level internal error.
    EngineError,
    /// No finish reason at all; `empty` when there was no content or reasoning either.
    NoFinishReason { empty: bool },
    /// A finish reason, but neither content nor reasoning (whitespace does not count).
    Empty,
}

impl std::fmt::Display for Defect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Defect::Aborted => "the server aborted the answer (finish_reason = abort)",
            Defect::EngineError => {
                "the server ended the answer with an error (finish_reason = error)"
            }
            Defect::NoFinishReason { empty: true } => {
                "empty answer: the stream ended without content, reasoning or finish_reason"
            }
            Defect::NoFinishReason { empty: false } => {
                "the stream ended without a finish_reason (the answer may be cut)"
            }
            Defect::Empty => "empty answer: no content and no reasoning",
        })
    }
}

/// Why an answer is not one to keep, if it is not: the one rule `gen run` (before storing),
/// `gen verify` and the done-set apply to every answer.
pub fn answer_defect(
    content: &str,
    reasoning: Option<&str>,
    finish_reason: Option<&str>,
) -> Option<Defect> {
    let empty = content.trim().is_empty() && reasoning.is_none_or(|r| r.trim().is_empty());
    match finish_reason {
        Some("abort") => Some(Defect::Aborted),
        Some("error") => Some(Defect::EngineError),
        None => Some(Defect::NoFinishReason { empty }),
        Some(_) if empty => Some(Defect::Empty),
        Some(_) => None,
    }
}

/// What cut an answer short (`finish_reason = "length"`), stored with it as `cut_by`. Records
/// of older `gen`s have none: theirs count as cut by `max-tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CutBy {
    /// The `max-tokens` budget the turn was sent with: a larger one may let it finish.
    MaxTokens,
    /// The model's context: prompt and answer filled it before the budget ran out (vLLM
    /// silently shortens `max_tokens` to what the context has left, llama.cpp stops a full
    /// slot). A larger budget cannot help.
    Context,
}

/// What cut an answer with `finish_reason` and `usage` that was sent with a budget of
/// `max_tokens`, on a server whose context is `context` tokens when it says so: the context
/// when the answer stopped short of its budget and, where the context is known, prompt and
/// answer reach it. `None` for an answer that was not cut. A guess when the context is not
/// known (a server-side cap on `max_tokens` looks the same), and without usage (then the
/// budget is assumed).
pub fn heuristic_cut_by(
    finish_reason: Option<&str>,
    usage: Option<&Usage>,
    max_tokens: u32,
    context: Option<u64>,
) -> Option<CutBy> {
    if finish_reason != Some("length") {
        return None;
    }
    let by_context = usage.is_some_and(|u| {
        u.completion_tokens < u64::from(max_tokens)
            && context.is_none_or(|c| u.prompt_tokens + u.completion_tokens >= c)
    });
    Some(if by_context {
        CutBy::Context
    } else {
        CutBy::MaxTokens
    })
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionRecord {
    /// The prompt's stable id: the key that makes resume exactly-once.
    pub id: String,
    pub source: String,
    /// The dataset's own key of the prompt (a source's `id-field`), for exports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_key: Option<String>,
    pub model: String,
    /// The prompt's messages as sent, tool turns included; the answers go after the indices
    /// [`gen_sources::prompt::answer_points`] gives, in the order of `turns`.
    pub messages: Vec<Message>,
    /// The tool definitions sent with the messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<serde_json::Value>,
    /// The prompt's tool turns were left out (the conversation ends before the first): the
    /// server refused them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tool_turns_cut: bool,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    pub finish_reason: Option<String>,
    /// What cut the last answer short, when `finish_reason` is `length`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_by: Option<CutBy>,
    /// Summed over every turn.
    pub usage: Option<Usage>,
    /// Every answered turn of a conversation answered more than once, in order (empty for
    /// one answer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnRecord>,
    pub attempts: u32,
    pub latency_ms: u64,
    pub created_unix_ms: u64,
    /// Which answer to its prompt this is, with `samples = k` (0 to k − 1; the id is the
    /// prompt's with `#sample` after it, except for the first).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sample: u32,
    /// What the request asked for besides the messages: `max_tokens` and the sampling
    /// parameters, drawn values as drawn. Records of older `gen`s have none: theirs are in
    /// `run.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<serde_json::Map<String, serde_json::Value>>,
    /// The last turn's tokens as the server saw and wrote them, with `token-ids = true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<TokenIds>,
}

/// A turn's tokens, as the server reported them (`return_token_ids`): the prompt as its chat
/// template rendered it, history included, and the answer, reasoning and end token included.
/// Stored as two JSON arrays of numbers: in the completions file's zstd frames they take
/// about as little as a binary packing would (see BENCHMARKS.md), and stay readable with
/// `zstd -dc | jq`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenIds {
    pub prompt: Vec<u32>,
    pub completion: Vec<u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One answered turn of a multi-turn regeneration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_by: Option<CutBy>,
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<TokenIds>,
}

impl CompletionRecord {
    /// Why this stored record is not an answer to keep (its last turn, or an earlier one),
    /// when it is not: see [`answer_defect`].
    pub fn defect(&self) -> Option<Defect> {
        conversation_defect(
            (
                &self.content,
                self.reasoning_content.as_deref(),
                self.finish_reason.as_deref(),
            ),
            self.turns.iter().map(|t| {
                (
                    t.content.as_str(),
                    t.reasoning_content.as_deref(),
                    t.finish_reason.as_deref(),
                )
            }),
        )
    }
}

/// An answer as the check reads it: content, reasoning, finish reason.
type AnswerParts<'a> = (&'a str, Option<&'a str>, Option<&'a str>);

/// The defect of a record's last answer, else of the first turn that has one.
fn conversation_defect<'a>(
    last: AnswerParts<'a>,
    mut turns: impl Iterator<Item = AnswerParts<'a>>,
) -> Option<Defect> {
    answer_defect(last.0, last.1, last.2).or_else(|| {
        turns.find_map(|(content, reasoning, finish)| answer_defect(content, reasoning, finish))
    })
}

/// The fields of a stored record the answer check reads; the rest is skipped unparsed.
#[derive(Deserialize)]
struct StoredAnswer<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    content: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    reasoning_content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    turns: Vec<StoredTurn<'a>>,
}

#[derive(Deserialize)]
struct StoredTurn<'a> {
    #[serde(default, borrow)]
    content: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    reasoning_content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<std::borrow::Cow<'a, str>>,
}

/// The id and defect of one stored JSONL record that is not an answer to keep
/// ([`CompletionRecord::defect`]); `None` for a good one. Records as `gen` writes them are
/// passed by a byte search when they cannot hold a defect; only the others are parsed, so
/// checking a million records costs little more than reading them.
pub fn line_defect(line: &[u8]) -> io::Result<Option<(String, Defect)>> {
    if !heuristic_maybe_defective(line) {
        return Ok(None);
    }
    let record: StoredAnswer<'_> = serde_json::from_slice(line).map_err(io::Error::other)?;
    let defect = conversation_defect(
        (
            &record.content,
            record.reasoning_content.as_deref(),
            record.finish_reason.as_deref(),
        ),
        record.turns.iter().map(|t| {
            (
                t.content.as_ref(),
                t.reasoning_content.as_deref(),
                t.finish_reason.as_deref(),
            )
        }),
    );
    Ok(defect.map(|d| (record.id.into_owned(), d)))
}

/// Whether a record could hold a defect. Serialized compactly (as `gen` writes), a string can
/// never contain an unescaped `"`, so `"finish_reason":null` or `"content":"` can only be a
/// key and its value; a record not written that way is always parsed.
fn heuristic_maybe_defective(line: &[u8]) -> bool {
    use memchr::memmem::{find, find_iter};
    if !line.starts_with(br#"{"id":""#) || find(line, br#""finish_reason":"#).is_none() {
        return true;
    }
    for bad in [
        &br#""finish_reason":null"#[..],
        br#""finish_reason":"abort""#,
        br#""finish_reason":"error""#,
    ] {
        if find(line, bad).is_some() {
            return true;
        }
    }
    // An empty or whitespace-only content (the prompt's messages too: then the parse decides).
    const KEY: &[u8] = br#""content":""#;
    find_iter(line, KEY).any(|at| {
        let mut rest = &line[at + KEY.len()..];
        loop {
            match rest {
                [b'"', ..] => return true,
                [b' ', tail @ ..] => rest = tail,
                [b'\\', b'n' | b't' | b'r', tail @ ..] => rest = tail,
                _ => return false,
            }
        }
    })
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectKind {
    /// The server refused the prompt itself (e.g. HTTP 400): retrying will not help.
    Rejected,
    /// Transient errors used up every attempt: the next `gen run` tries again.
    Exhausted,
    /// Cut by `max-tokens`, or by the context, with `on-length = "drop"`: final, not retried.
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
    /// For a refusal: the fingerprint of the generation settings it was refused under
    /// ([`settings_fingerprint`]). Under other settings the prompt is sent again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<String>,
}

/// A fingerprint of what every request of a run sends besides the prompt: `max_tokens` and
/// the sampling parameters (what a refusal may be caused by).
pub fn settings_fingerprint(
    max_tokens: u32,
    params: &serde_json::Map<String, serde_json::Value>,
) -> String {
    let text = serde_json::json!({"max_tokens": max_tokens, "params": params}).to_string();
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// Which refusals a run sends again instead of keeping them settled.
#[derive(Debug, Clone, Default)]
pub struct Resend {
    /// Every refusal (`gen run --retry-rejected`).
    pub all_refused: bool,
    /// The run's settings ([`settings_fingerprint`]): a refusal recorded under other settings
    /// is sent again. `None` keeps every refusal settled.
    pub settings: Option<String>,
}

impl Resend {
    fn resends(&self, record: &RejectedRecord) -> bool {
        record.kind == RejectKind::Rejected
            && (self.all_refused
                || matches!(
                    (&record.settings, &self.settings),
                    (Some(then), Some(now)) if then != now
                ))
    }
}

/// Moves the lines of `rejected.jsonl` at `path` that are not records (damage, a torn last
/// line) to `to`, keeping the others in order (rewritten atomically, after `to` is on disk).
/// Returns how many were moved. Their prompts are then not settled and are sent again.
pub fn set_aside_unreadable_rejections(path: &Path, to: &Path) -> io::Result<u64> {
    let Some(bytes) = if_exists(fs_err::read(path))? else {
        return Ok(0);
    };
    let (mut kept, mut moved, mut count) = (Vec::new(), Vec::new(), 0);
    for line in bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
    {
        let out = if serde_json::from_slice::<RejectedRecord>(line).is_ok() {
            &mut kept
        } else {
            count += 1;
            &mut moved
        };
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    if count == 0 {
        return Ok(0);
    }
    let mut aside = crate::store::private::create_private(to)?;
    io::Write::write_all(&mut aside, &moved)?;
    aside.sync_all()?;
    crate::store::atomic::write(path, &kept)?;
    Ok(count)
}

/// What `rejected.jsonl` settles.
#[derive(Debug, Default)]
pub struct Settled {
    /// Ids settled without a completion.
    pub ids: IdSet,
    /// How many of them another source answers (kind `duplicate`).
    pub duplicates: u64,
    /// Those the server refused (kind `rejected`).
    pub refused: IdSet,
}

/// Ids settled without a completion: permanently rejected, truncated-and-dropped or duplicate
/// prompts, except the refusals `resend` sends again. Prompts that merely ran out of attempts
/// are not settled: the next run retries them.
pub fn settled_ids(path: &Path, resend: &Resend) -> io::Result<Settled> {
    let Some(text) = if_exists(fs_err::read(path))? else {
        return Ok(Settled::default());
    };
    let mut settled = Settled::default();
    let (mut keys, mut refused) = (Vec::new(), Vec::new());
    // A torn last line (a crash mid-append) is skipped: that prompt is simply retried.
    for line in text
        .split(|b| *b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
    {
        if let Ok(record) = serde_json::from_slice::<RejectedRecord>(line)
            && record.kind != RejectKind::Exhausted
            && !resend.resends(&record)
        {
            settled.duplicates += u64::from(record.kind == RejectKind::Duplicate);
            let key = ids::key(&record.id);
            if record.kind == RejectKind::Rejected {
                refused.push(key);
            }
            keys.push(key);
        }
    }
    settled.ids = IdSet::from_keys(keys);
    settled.refused = IdSet::from_keys(refused);
    Ok(settled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        }
    }

    #[test]
    fn an_answer_stopped_short_of_its_budget_at_the_context_is_cut_by_the_context() {
        let length = Some("length");
        // vLLM 0.32 with `--max-model-len 2048`: a 2,031-token prompt, 17 of 64 tokens.
        let shortened = usage(2031, 17);
        let cut = |u: &Usage, context| heuristic_cut_by(length, Some(u), 64, context);
        assert_eq!(cut(&shortened, Some(2048)), Some(CutBy::Context));
        // The context unknown: stopping short of the budget is the sign.
        assert_eq!(cut(&shortened, None), Some(CutBy::Context));
        // The whole budget spent: `max-tokens`, whatever the context.
        assert_eq!(cut(&usage(100, 64), Some(2048)), Some(CutBy::MaxTokens));
        assert_eq!(cut(&usage(100, 64), None), Some(CutBy::MaxTokens));
        // Short of the budget, but far from a known context: not the context.
        assert_eq!(cut(&usage(100, 17), Some(2048)), Some(CutBy::MaxTokens));
        // Without usage nothing tells them apart: `max-tokens`, as before.
        assert_eq!(
            heuristic_cut_by(length, None, 64, Some(2048)),
            Some(CutBy::MaxTokens)
        );
        // Not cut at all.
        assert_eq!(
            heuristic_cut_by(Some("stop"), Some(&shortened), 64, Some(2048)),
            None
        );
        assert_eq!(heuristic_cut_by(None, Some(&shortened), 64, None), None);
    }

    #[test]
    fn what_cut_an_answer_is_stored_and_older_records_without_it_still_read() {
        let older = r#"{"id":"a","source":"s","model":"m","messages":[],"content":"x","finish_reason":"length","usage":null,"turns":[{"content":"x","finish_reason":"length","usage":null}],"attempts":1,"latency_ms":1,"created_unix_ms":1}"#;
        let mut record: CompletionRecord = serde_json::from_str(older).expect("older record");
        assert_eq!(record.cut_by, None);
        assert_eq!(record.turns[0].cut_by, None);
        assert!(
            !serde_json::to_string(&record)
                .expect("serializes")
                .contains("cut_by"),
            "nothing written for an answer nothing is known to have cut"
        );
        record.cut_by = Some(CutBy::Context);
        record.turns[0].cut_by = Some(CutBy::MaxTokens);
        let text = serde_json::to_string(&record).expect("serializes");
        assert!(text.contains(r#""cut_by":"context""#), "{text}");
        assert!(text.contains(r#""cut_by":"max_tokens""#), "{text}");
        let back: CompletionRecord = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back, record);
    }
}
