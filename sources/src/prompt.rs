//! The normalized prompt record every source produces, and its stable id.

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

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
        // Compared in place: this runs for every turn of every row. The usual spellings first.
        match raw {
            "user" | "human" => return Some(Role::User),
            "assistant" | "gpt" => return Some(Role::Assistant),
            "system" => return Some(Role::System),
            _ => {}
        }
        let raw = raw.trim();
        SPELLINGS
            .iter()
            .find(|(spelling, _)| spelling.eq_ignore_ascii_case(raw))
            .map(|(_, role)| *role)
    }
}

/// Whether `raw` names a tool's turn: a call (`function_call`, `tool_call`) or its result
/// (`tool`, `function`, `observation`, `ipython`, `tool_response`): what follows it depends on
/// a tool's output, which a prompt does not carry.
pub fn is_tool_role(raw: &str) -> bool {
    const SPELLINGS: [&str; 8] = [
        "tool",
        "function",
        "observation",
        "ipython",
        "function_call",
        "tool_call",
        "tool_response",
        "tool_result",
    ];
    let raw = raw.trim();
    SPELLINGS.iter().any(|s| s.eq_ignore_ascii_case(raw))
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

/// The content hash of normalized messages (xxh3-64 of their compact JSON rendering, as
/// `serde_json` writes it: a fixed spec, stable across versions).
pub fn content_hash(messages: &[Message]) -> u64 {
    content_hash_with(
        messages.iter().map(|m| (m.role, m.content.as_str())),
        &mut Vec::new(),
    )
}

/// [`content_hash`] of `(role, content)` pairs, rendering into `buffer` (reused across rows).
/// The rendering is written by hand, byte for byte what `serde_json::to_vec` gives for the
/// same messages, because `serde_json`'s string escaping was the largest cost of preparing a
/// large source after Parquet decoding.
pub(crate) fn content_hash_with<'a>(
    messages: impl IntoIterator<Item = (Role, &'a str)>,
    buffer: &mut Vec<u8>,
) -> u64 {
    buffer.clear();
    buffer.push(b'[');
    for (i, (role, content)) in messages.into_iter().enumerate() {
        if i > 0 {
            buffer.push(b',');
        }
        buffer.extend_from_slice(match role {
            Role::System => br#"{"role":"system","content":""#,
            Role::User => br#"{"role":"user","content":""#,
            Role::Assistant => br#"{"role":"assistant","content":""#,
        });
        push_json_escaped(buffer, content);
        buffer.extend_from_slice(b"\"}");
    }
    buffer.push(b']');
    xxh3_64(buffer)
}

/// What two prompts must share to be duplicates, as the manifest names it: their messages,
/// each turn's content stripped of surrounding whitespace. Prompt ids are still taken over the
/// content as it is, so ids stored before this key stay valid.
pub const DEDUP_KEY: &str = "messages with each turn stripped of surrounding whitespace";

/// The deduplication key of normalized messages ([`DEDUP_KEY`]): their [`content_hash`] with
/// each turn's content stripped of surrounding whitespace, so it is the content hash itself
/// when no turn has any.
pub fn dedup_hash(messages: &[Message]) -> u64 {
    dedup_hash_with(
        messages.iter().map(|m| (m.role, m.content.as_str())),
        &mut Vec::new(),
    )
}

/// [`dedup_hash`] of `(role, content)` pairs, rendering into `buffer`.
pub(crate) fn dedup_hash_with<'a>(
    messages: impl IntoIterator<Item = (Role, &'a str)>,
    buffer: &mut Vec<u8>,
) -> u64 {
    content_hash_with(
        messages.into_iter().map(|(role, text)| (role, text.trim())),
        buffer,
    )
}

/// Bytes JSON strings escape: controls, `"` and `\` (`serde_json`'s table).
fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// `text` as the inside of a JSON string, escaped as `serde_json` does: short forms for
/// `\b \t \n \f \r \" \\`, `\u00xx` (lowercase) for other controls, nothing else.
fn push_json_escaped(out: &mut Vec<u8>, text: &str) {
    const CHUNK: usize = 32;
    let bytes = text.as_bytes();
    let mut run = 0;
    let mut i = 0;
    while i < bytes.len() {
        let end = (i + CHUNK).min(bytes.len());
        // A whole chunk is checked without branches (vectorized); most have nothing to escape.
        if !bytes[i..end]
            .iter()
            .fold(false, |any, &b| any | needs_escape(b))
        {
            i = end;
            continue;
        }
        for (j, &byte) in bytes.iter().enumerate().take(end).skip(i) {
            if !needs_escape(byte) {
                continue;
            }
            out.extend_from_slice(&bytes[run..j]);
            run = j + 1;
            let short = match byte {
                b'"' => b'"',
                b'\\' => b'\\',
                0x08 => b'b',
                0x0c => b'f',
                b'\n' => b'n',
                b'\r' => b'r',
                b'\t' => b't',
                _ => 0,
            };
            if short == 0 {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(byte >> 4)],
                    HEX[usize::from(byte & 0xf)],
                ]);
            } else {
                out.extend_from_slice(&[b'\\', short]);
            }
        }
        i = end;
    }
    out.extend_from_slice(&bytes[run..]);
}

/// The stable prompt id: `<source>-<16 hex digits of the content hash>`, plus `-<n>` for the
/// n-th deliberate repeat of the same content (only when deduplication is off), so repeats stay
/// distinct on resume.
pub fn prompt_id(source: &str, hash: u64, occurrence: u32) -> String {
    let mut id = String::new();
    prompt_id_into(&mut id, source, hash, occurrence);
    id
}

/// [`prompt_id`] written into `id` (cleared first), for callers that reuse one buffer.
pub(crate) fn prompt_id_into(id: &mut String, source: &str, hash: u64, occurrence: u32) {
    use std::fmt::Write as _;
    let mut digest = Xxh3::new();
    digest.update(source.as_bytes());
    digest.update(&[0]);
    digest.update(&hash.to_le_bytes());
    let digest = digest.digest();
    id.clear();
    let written = if occurrence == 0 {
        write!(id, "{source}-{digest:016x}")
    } else {
        write!(id, "{source}-{digest:016x}-{occurrence}")
    };
    written.expect("writing to a String cannot fail");
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
        assert_eq!(id, "s-2350214433552fa5");
    }

    /// The deduplication key ignores whitespace around each turn; the id does not, so an id
    /// stored before the key existed is the id the same prompt gets now.
    #[test]
    fn the_dedup_key_strips_turns_and_the_id_does_not() {
        let plain = vec![
            Message::new(Role::User, "hi"),
            Message::new(Role::Assistant, "a b"),
        ];
        let padded = vec![
            Message::new(Role::User, "  hi\n"),
            Message::new(Role::Assistant, "\ta b "),
        ];
        assert_eq!(dedup_hash(&plain), content_hash(&plain));
        assert_eq!(dedup_hash(&padded), dedup_hash(&plain));
        assert_ne!(content_hash(&padded), content_hash(&plain));
        let inner = vec![
            Message::new(Role::User, "hi"),
            Message::new(Role::Assistant, "a  b"),
        ];
        assert_ne!(
            dedup_hash(&inner),
            dedup_hash(&plain),
            "only the ends are stripped"
        );
    }

    #[test]
    fn hash_rendering_is_serde_jsons() {
        let mut texts: Vec<String> = (0u8..0x80).map(|b| format!("a{}z", b as char)).collect();
        let every_ascii: String = (0u8..0x80).map(char::from).collect();
        texts.extend([
            String::new(),
            every_ascii.repeat(3),
            "quote \" backslash \\ slash / tab\t nl\n cr\r bell\u{7} del\u{7f}".to_owned(),
            "héllo wörld ✓ 🦀 \u{2028} \u{feff}".repeat(20),
            "x".repeat(31) + "\"" + &"y".repeat(64) + "\n",
        ]);
        for text in &texts {
            for role in [Role::System, Role::User, Role::Assistant] {
                let messages = vec![
                    Message::new(role, text.as_str()),
                    Message::new(Role::User, "second"),
                ];
                let expected = serde_json::to_vec(&messages).expect("serialize");
                let mut rendered = Vec::new();
                let hash = content_hash_with(
                    messages.iter().map(|m| (m.role, m.content.as_str())),
                    &mut rendered,
                );
                assert_eq!(
                    String::from_utf8_lossy(&rendered),
                    String::from_utf8_lossy(&expected)
                );
                assert_eq!(hash, xxh3_64(&expected));
            }
        }
        assert_eq!(content_hash(&[]), xxh3_64(b"[]"));
    }
}
