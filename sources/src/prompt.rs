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
    /// A tool's result, answering the assistant's call before it (OpenAI's `tool` message).
    Tool,
}

impl Role {
    /// Maps the role spellings found in public datasets; `None` for anything else. A tool's
    /// *call* (`function_call`, `tool_call` turns) is an assistant turn: see [`is_call_role`].
    pub fn parse(raw: &str) -> Option<Role> {
        const SPELLINGS: [(&str, Role); 18] = [
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
            ("tool", Role::Tool),
            ("function", Role::Tool),
            ("observation", Role::Tool),
            ("ipython", Role::Tool),
            ("tool_response", Role::Tool),
            ("tool_result", Role::Tool),
            ("function_call", Role::Assistant),
            ("tool_call", Role::Assistant),
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

/// Whether `raw` names a turn that is a tool's call in ShareGPT's shape (Glaive's
/// `function_call`, `tool_call`): an assistant turn whose text is the call.
pub fn is_call_role(raw: &str) -> bool {
    let raw = raw.trim();
    ["function_call", "tool_call"]
        .iter()
        .any(|s| s.eq_ignore_ascii_case(raw))
}

/// The keys of a dataset's turn that hold tool fields besides its role and content.
pub(crate) const TOOL_KEYS: [&str; 4] = ["tool_calls", "function_call", "tool_call_id", "name"];

/// One tool call of an assistant message, in OpenAI's shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

/// The function a [`ToolCall`] calls; `arguments` is JSON text, as OpenAI sends it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

fn function_type() -> String {
    "function".to_owned()
}

/// One chat turn, in OpenAI's message shape: an assistant turn may carry `tool_calls`, a
/// `tool` turn the `tool_call_id` (and `name`) of the call it answers. The tool fields are
/// left out of the JSON when empty, so plain messages read and write as they always did.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    /// Whether this is a tool's turn: a result, or an assistant turn calling a tool.
    pub fn is_tool_turn(&self) -> bool {
        self.role == Role::Tool || !self.tool_calls.is_empty()
    }
}

/// Where the model answers in a prompt's `messages`: after each index this yields.
///
/// A prompt that keeps the dataset's own answers as context (`turns = "history"`: an
/// assistant message that is no tool's call) is answered once, at its end. Otherwise the
/// model answers each user turn, after the tool exchange that follows it, if any: after
/// every user or tool message that the conversation's end or a user turn follows. The
/// dataset's tool calls (assistant messages followed by `tool` results) and results stay as
/// they are: they are context, never regenerated.
pub fn answer_points(messages: &[Message]) -> impl Iterator<Item = usize> + '_ {
    let is_call = |i: usize| {
        !messages[i].tool_calls.is_empty()
            || messages.get(i + 1).is_some_and(|m| m.role == Role::Tool)
    };
    let with_history = messages
        .iter()
        .enumerate()
        .any(|(i, m)| m.role == Role::Assistant && !is_call(i));
    let last = messages.len().checked_sub(1);
    (0..messages.len()).filter(move |&i| {
        if with_history {
            return Some(i) == last;
        }
        matches!(messages[i].role, Role::User | Role::Tool)
            && messages.get(i + 1).is_none_or(|m| m.role == Role::User)
    })
}

/// `messages` ended before their first tool turn (a call or a result), and on a user turn:
/// the conversation as a server that refuses tool turns can answer it.
pub fn before_first_tool_turn(messages: &[Message]) -> &[Message] {
    let end = messages
        .iter()
        .position(Message::is_tool_turn)
        .unwrap_or(messages.len());
    let end = messages[..end]
        .iter()
        .rposition(|m| m.role == Role::User)
        .map_or(0, |last| last + 1);
    &messages[..end]
}

/// A prompt ready for generation: the line format of `prompts.jsonl.zst`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    /// Stable id: derived from the source name and the normalized messages, so the same input
    /// always gets the same id across runs and machines.
    pub id: String,
    pub source: String,
    pub messages: Vec<Message>,
    /// The tools the dataset row declares (its `tools` column, OpenAI's function schemas),
    /// sent with every request so the chat template shows them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<serde_json::Value>,
    /// The dataset's own key for the row (`id`, `prompt_id`, …) when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_key: Option<String>,
    /// Zero-based row number in the input, for tracing a prompt back to its origin.
    pub row: u64,
}

/// A turn as the content hash renders it: a [`Message`]'s fields, borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HashTurn<'a> {
    pub(crate) role: Role,
    pub(crate) content: &'a str,
    pub(crate) tool_calls: &'a [ToolCall],
    pub(crate) tool_call_id: Option<&'a str>,
    pub(crate) name: Option<&'a str>,
}

impl Message {
    pub(crate) fn hashed(&self) -> HashTurn<'_> {
        HashTurn {
            role: self.role,
            content: &self.content,
            tool_calls: &self.tool_calls,
            tool_call_id: self.tool_call_id.as_deref(),
            name: self.name.as_deref(),
        }
    }
}

impl Prompt {
    /// Whether this prompt carries tool turns or tool definitions.
    pub fn has_tool_content(&self) -> bool {
        self.tools.is_some() || self.messages.iter().any(Message::is_tool_turn)
    }
}

/// The content hash of normalized messages (xxh3-64 of their compact JSON rendering, as
/// `serde_json` writes it: a fixed spec, stable across versions), and of the row's tool
/// definitions when it has any.
pub fn content_hash(messages: &[Message], tools: Option<&serde_json::Value>) -> u64 {
    content_hash_with(messages.iter().map(Message::hashed), tools, &mut Vec::new())
}

/// [`content_hash`] of borrowed turns, rendering into `buffer` (reused across rows).
/// The rendering is written by hand, byte for byte what `serde_json::to_vec` gives for the
/// same messages, because `serde_json`'s string escaping was the largest cost of preparing a
/// large source after Parquet decoding. Tool fields (rare) go through `serde_json`; the
/// tool definitions follow the list after a `+`, so prompts without any hash as they always
/// did.
pub(crate) fn content_hash_with<'a>(
    messages: impl IntoIterator<Item = HashTurn<'a>>,
    tools: Option<&serde_json::Value>,
    buffer: &mut Vec<u8>,
) -> u64 {
    buffer.clear();
    buffer.push(b'[');
    for (i, turn) in messages.into_iter().enumerate() {
        if i > 0 {
            buffer.push(b',');
        }
        buffer.extend_from_slice(match turn.role {
            Role::System => br#"{"role":"system","content":""#,
            Role::User => br#"{"role":"user","content":""#,
            Role::Assistant => br#"{"role":"assistant","content":""#,
            Role::Tool => br#"{"role":"tool","content":""#,
        });
        push_json_escaped(buffer, turn.content);
        buffer.push(b'"');
        push_tool_fields(buffer, &turn);
        buffer.push(b'}');
    }
    buffer.push(b']');
    if let Some(tools) = tools {
        buffer.push(b'+');
        serde_json::to_writer(&mut *buffer, tools).expect("a JSON value renders");
    }
    xxh3_64(buffer)
}

/// A turn's tool fields as `serde_json` renders them after its content (nothing for a
/// turn without any).
fn push_tool_fields(buffer: &mut Vec<u8>, turn: &HashTurn<'_>) {
    const RENDERS: &str = "a tool field renders as JSON";
    if !turn.tool_calls.is_empty() {
        buffer.extend_from_slice(br#","tool_calls":"#);
        serde_json::to_writer(&mut *buffer, turn.tool_calls).expect(RENDERS);
    }
    if let Some(id) = turn.tool_call_id {
        buffer.extend_from_slice(br#","tool_call_id":"#);
        serde_json::to_writer(&mut *buffer, id).expect(RENDERS);
    }
    if let Some(name) = turn.name {
        buffer.extend_from_slice(br#","name":"#);
        serde_json::to_writer(&mut *buffer, name).expect(RENDERS);
    }
}

/// What two prompts must share to be duplicates, as the manifest names it: their messages,
/// each turn's content stripped of surrounding whitespace. Prompt ids are still taken over the
/// content as it is, so ids stored before this key stay valid.
pub const DEDUP_KEY: &str = "messages with each turn stripped of surrounding whitespace";

/// The deduplication key of normalized messages ([`DEDUP_KEY`]): their [`content_hash`] with
/// each turn's content stripped of surrounding whitespace, so it is the content hash itself
/// when no turn has any.
pub fn dedup_hash(messages: &[Message], tools: Option<&serde_json::Value>) -> u64 {
    dedup_hash_with(messages.iter().map(Message::hashed), tools, &mut Vec::new())
}

/// [`dedup_hash`] of borrowed turns, rendering into `buffer`.
pub(crate) fn dedup_hash_with<'a>(
    messages: impl IntoIterator<Item = HashTurn<'a>>,
    tools: Option<&serde_json::Value>,
    buffer: &mut Vec<u8>,
) -> u64 {
    content_hash_with(
        messages.into_iter().map(|turn| HashTurn {
            content: turn.content.trim(),
            ..turn
        }),
        tools,
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
                out.extend_from_slice(b"\\u00");
                out.extend([HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
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
        assert_eq!(Role::parse("tool"), Some(Role::Tool));
        assert_eq!(Role::parse("observation"), Some(Role::Tool));
        assert_eq!(Role::parse("function_call"), Some(Role::Assistant));
        assert_eq!(Role::parse("wizard"), None);
    }

    #[test]
    fn ids_are_stable_and_depend_on_source_and_content() {
        let a = vec![Message::new(Role::User, "hi")];
        let b = vec![Message::new(Role::User, "hello")];
        let id = prompt_id("s", content_hash(&a, None), 0);
        assert_eq!(id, prompt_id("s", content_hash(&a, None), 0));
        assert_ne!(id, prompt_id("t", content_hash(&a, None), 0));
        assert_ne!(id, prompt_id("s", content_hash(&b, None), 0));
        assert_eq!(prompt_id("s", content_hash(&a, None), 2), format!("{id}-2"));
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
        assert_eq!(dedup_hash(&plain, None), content_hash(&plain, None));
        assert_eq!(dedup_hash(&padded, None), dedup_hash(&plain, None));
        assert_ne!(content_hash(&padded, None), content_hash(&plain, None));
        let inner = vec![
            Message::new(Role::User, "hi"),
            Message::new(Role::Assistant, "a  b"),
        ];
        assert_ne!(
            dedup_hash(&inner, None),
            dedup_hash(&plain, None),
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
        let call = ToolCall {
            id: "call_0".to_owned(),
            kind: "function".to_owned(),
            function: FunctionCall {
                name: "get \"weather\"".to_owned(),
                arguments: r#"{"city": "Paris\n"}"#.to_owned(),
            },
        };
        for text in &texts {
            for role in [Role::System, Role::User, Role::Assistant, Role::Tool] {
                let mut first = Message::new(role, text.as_str());
                match role {
                    Role::Assistant => first.tool_calls = vec![call.clone(), call.clone()],
                    Role::Tool => {
                        first.tool_call_id = Some("call_0".to_owned());
                        first.name = Some(text.clone());
                    }
                    Role::System | Role::User => {}
                }
                let messages = vec![first, Message::new(Role::User, "second")];
                let expected = serde_json::to_vec(&messages).expect("serialize");
                let mut rendered = Vec::new();
                let hash =
                    content_hash_with(messages.iter().map(Message::hashed), None, &mut rendered);
                assert_eq!(
                    String::from_utf8_lossy(&rendered),
                    String::from_utf8_lossy(&expected)
                );
                assert_eq!(hash, xxh3_64(&expected));
            }
        }
        assert_eq!(content_hash(&[], None), xxh3_64(b"[]"));
        // Tool definitions change the hash; without them it is the messages' alone.
        let tools = serde_json::json!([{"type": "function", "function": {"name": "f"}}]);
        let plain = [Message::new(Role::User, "q")];
        assert_ne!(
            content_hash(&plain, Some(&tools)),
            content_hash(&plain, None)
        );
    }

    /// Where the model answers: after each user turn and its tool exchange; at the end only
    /// when the dataset's answers are context (`history`); never in place of a source's call.
    #[test]
    fn answer_points_follow_user_turns_and_tool_exchanges() {
        let call = |id: &str| {
            let mut m = Message::new(Role::Assistant, "");
            m.tool_calls = vec![ToolCall {
                id: id.to_owned(),
                kind: "function".to_owned(),
                function: FunctionCall {
                    name: "f".to_owned(),
                    arguments: "{}".to_owned(),
                },
            }];
            m
        };
        let s = Message::new(Role::System, "s");
        let u = |t: &str| Message::new(Role::User, t);
        let r = Message::new(Role::Tool, "r");
        let a = Message::new(Role::Assistant, "a");
        let hermes = Message::new(Role::Assistant, "<tool_call>{}</tool_call>");
        let cases: Vec<(Vec<Message>, Vec<usize>)> = vec![
            (vec![u("q")], vec![0]),
            (vec![s.clone(), u("q1"), u("q2")], vec![1, 2]),
            (vec![u("q1"), a.clone(), u("q2")], vec![2]),
            (vec![s, u("q"), call("1"), r.clone(), r.clone()], vec![4]),
            (
                vec![u("q1"), call("1"), r.clone(), u("q2"), call("2"), r.clone()],
                vec![2, 5],
            ),
            (vec![u("q"), hermes, r.clone(), u("q2")], vec![2, 3]),
            (vec![u("q1"), call("1"), r.clone(), a, u("q2")], vec![4]),
        ];
        for (messages, expected) in cases {
            let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
            assert_eq!(
                answer_points(&messages).collect::<Vec<_>>(),
                expected,
                "{roles:?}"
            );
        }
    }
}
