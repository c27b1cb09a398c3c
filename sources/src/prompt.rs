//! The normalized prompt record every source produces, and its stable id.

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

/// A chat role after normalization (dataset spellings such as `human`/`gpt` are mapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    /// Maps the role spellings found in public datasets; `None` for anything else.
    pub fn parse(raw: &str) -> Option<Role> {
        const SPELLINGS: [(&str, Role); 10] = [
            ("system", Role::System),
            ("user", Role::User),
            ("human", Role::User),
            ("prompter", Role::User),
            ("assistant", Role::Assistant),
            ("gpt", Role::Assistant),
            ("chatgpt", Role::Assistant),
            ("bing", Role::Assistant),
            ("bard", Role::Assistant),
            ("model", Role::Assistant),
        ];
        // Compared in place: this runs for every turn of every row.
        let raw = raw.trim();
        SPELLINGS
            .iter()
            .find(|(spelling, _)| spelling.eq_ignore_ascii_case(raw))
            .map(|(_, role)| *role)
    }
}

/// One chat turn.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
        }
    }
}

/// A prompt ready for generation: the line format of `prompts.jsonl.zst`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    /// Stable id: derived from the source name and the normalized messages, so the same input
    /// always gets the same id across runs and machines.
    pub id: String,
    pub source: String,
    pub messages: Vec<Message>,
    /// The dataset's own key for the row (`id`, `prompt_id`, …) when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_key: Option<String>,
    /// Zero-based row number in the input, for tracing a prompt back to its origin.
    pub row: u64,
}

/// The content hash of normalized messages (xxh3-64: a fixed spec, stable across versions).
pub fn content_hash(messages: &[Message]) -> u64 {
    let canonical = serde_json::to_vec(messages).expect("messages always serialize");
    xxh3_64(&canonical)
}

/// The stable prompt id: `<source>-<16 hex digits of the content hash>`, plus `-<n>` for the
/// n-th deliberate repeat of the same content (only when deduplication is off), so repeats stay
/// distinct on resume.
pub fn prompt_id(source: &str, hash: u64, occurrence: u32) -> String {
    let mut seeded = Vec::with_capacity(source.len() + 9);
    seeded.extend_from_slice(source.as_bytes());
    seeded.push(0);
    seeded.extend_from_slice(&hash.to_le_bytes());
    let id = xxh3_64(&seeded);
    if occurrence == 0 {
        format!("{source}-{id:016x}")
    } else {
        format!("{source}-{id:016x}-{occurrence}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_map_dataset_spellings() {
        assert_eq!(Role::parse("human"), Some(Role::User));
        assert_eq!(Role::parse("GPT"), Some(Role::Assistant));
        assert_eq!(Role::parse("bard"), Some(Role::Assistant));
        assert_eq!(Role::parse("system"), Some(Role::System));
        assert_eq!(Role::parse("tool"), None);
    }

    #[test]
    fn ids_are_stable_and_depend_on_source_and_content() {
        let a = vec![Message::new(Role::User, "hi")];
        let b = vec![Message::new(Role::User, "hello")];
        let id = prompt_id("s", content_hash(&a), 0);
        assert_eq!(id, prompt_id("s", content_hash(&a), 0));
        assert_ne!(id, prompt_id("t", content_hash(&a), 0));
        assert_ne!(id, prompt_id("s", content_hash(&b), 0));
        assert_eq!(prompt_id("s", content_hash(&a), 2), format!("{id}-2"));
        // Pinned: a change here silently breaks resume of every existing run.
        assert_eq!(id.len(), "s-".len() + 16);
    }
}
