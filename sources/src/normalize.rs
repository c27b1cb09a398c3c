//! One dataset row → OpenAI-style messages.
//!
//! Rules (field-notes §1.2): roles are mapped ([`Role::parse`]); leading assistant turns are
//! dropped; empty turns are skipped; a system turn is kept only before the first user turn and
//! only if the policy says so; `first` keeps the first user turn, `all` keeps every user turn
//! (dataset answers are dropped: the model writes its own).

use serde_json::{Map, Value};

use crate::prompt::{Message, Role};
use crate::spec::{SourceSpec, SystemPolicy, TurnMode};

const PROMPT_FIELDS: [&str; 4] = ["prompt", "instruction", "question", "problem"];
const MESSAGES_FIELDS: [&str; 3] = ["messages", "conversations", "conversation"];
const ROLE_KEYS: [&str; 2] = ["role", "from"];
const CONTENT_KEYS: [&str; 2] = ["content", "value"];

/// Why a readable row yields no prompt. Counted per reason in the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropReason {
    /// None of the expected fields is present.
    MissingField(String),
    /// A field has the wrong JSON type.
    WrongType(String),
    /// A turn's role is not one we know.
    UnknownRole(String),
    /// The conversation is empty or has no non-empty user turn.
    NoUserTurn,
    TooShort,
    TooLong,
}

impl DropReason {
    pub fn reason(&self) -> &'static str {
        match self {
            DropReason::MissingField(_) => "missing_field",
            DropReason::WrongType(_) => "wrong_type",
            DropReason::UnknownRole(_) => "unknown_role",
            DropReason::NoUserTurn => "no_user_turn",
            DropReason::TooShort => "too_short",
            DropReason::TooLong => "too_long",
        }
    }

    pub fn detail(&self) -> String {
        match self {
            DropReason::MissingField(f) => format!("missing field `{f}`"),
            DropReason::WrongType(f) => format!("field `{f}` has the wrong type"),
            DropReason::UnknownRole(r) => format!("unknown role `{r}`"),
            DropReason::NoUserTurn => "no non-empty user turn".to_owned(),
            DropReason::TooShort => "prompt shorter than `min-chars`".to_owned(),
            DropReason::TooLong => "prompt longer than `max-chars`".to_owned(),
        }
    }
}

/// Normalization settings resolved from a [`SourceSpec`].
#[derive(Debug, Clone)]
pub struct Normalizer {
    prompt_field: Option<String>,
    messages_field: Option<String>,
    turns: TurnMode,
    system: SystemPolicy,
    system_text: Option<String>,
    min_chars: usize,
    max_chars: usize,
}

impl Normalizer {
    pub fn new(spec: &SourceSpec) -> Normalizer {
        let bound = |v: &Option<toml::Spanned<i64>>, default: usize| {
            v.as_ref()
                .map_or(default, |v| usize::try_from(*v.get_ref()).unwrap_or(default))
        };
        Normalizer {
            prompt_field: spec.prompt_field.clone(),
            messages_field: spec.messages_field.clone(),
            turns: spec.turns,
            system: spec.system_prompt,
            system_text: spec
                .system_prompt_text
                .as_ref()
                .map(|t| t.get_ref().clone()),
            min_chars: bound(&spec.min_chars, 1),
            max_chars: bound(&spec.max_chars, usize::MAX),
        }
    }

    /// Normalizes one row object.
    pub fn normalize(&self, row: &Map<String, Value>) -> Result<Vec<Message>, DropReason> {
        let turns = self.turns_of(row)?;
        let messages = self.select(turns)?;
        let chars: usize = messages
            .iter()
            .filter(|m| m.role == Role::User)
            .map(|m| m.content.chars().count())
            .sum();
        if chars < self.min_chars {
            return Err(DropReason::TooShort);
        }
        if chars > self.max_chars {
            return Err(DropReason::TooLong);
        }
        Ok(messages)
    }

    /// The row's turns, before any policy.
    fn turns_of(&self, row: &Map<String, Value>) -> Result<Vec<Message>, DropReason> {
        if let Some(field) = &self.messages_field {
            let value = row
                .get(field)
                .ok_or_else(|| DropReason::MissingField(field.clone()))?;
            return parse_turns(field, value);
        }
        if let Some(field) = &self.prompt_field {
            let value = row
                .get(field)
                .ok_or_else(|| DropReason::MissingField(field.clone()))?;
            return Ok(vec![Message::new(Role::User, text_of(field, value)?)]);
        }
        if let Some((field, value)) = MESSAGES_FIELDS
            .iter()
            .find_map(|f| row.get(*f).map(|v| (*f, v)))
        {
            return parse_turns(field, value);
        }
        if let Some((field, value)) = PROMPT_FIELDS
            .iter()
            .find_map(|f| row.get(*f).map(|v| (*f, v)))
        {
            let mut text = text_of(field, value)?;
            // Alpaca-style rows: the instruction's optional `input` belongs to the prompt.
            if field == "instruction"
                && let Some(input) = row.get("input")
            {
                let input = text_of("input", input)?;
                if !input.trim().is_empty() {
                    text = format!("{text}\n\n{input}");
                }
            }
            return Ok(vec![Message::new(Role::User, text)]);
        }
        Err(DropReason::MissingField(format!(
            "one of {}",
            MESSAGES_FIELDS
                .iter()
                .chain(PROMPT_FIELDS.iter())
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }

    /// Applies the system, leading-assistant, empty-turn and turn-mode rules.
    fn select(&self, turns: Vec<Message>) -> Result<Vec<Message>, DropReason> {
        let mut system = None;
        let mut users = Vec::new();
        for turn in turns {
            if turn.content.trim().is_empty() {
                continue;
            }
            match turn.role {
                // A system turn counts only before the first user turn.
                Role::System if users.is_empty() && system.is_none() => system = Some(turn),
                Role::System | Role::Assistant => {}
                Role::User => users.push(turn),
            }
        }
        if users.is_empty() {
            return Err(DropReason::NoUserTurn);
        }
        let system = match self.system {
            SystemPolicy::Keep => system,
            SystemPolicy::Drop => None,
            SystemPolicy::Replace => self
                .system_text
                .clone()
                .filter(|t| !t.trim().is_empty())
                .map(|t| Message::new(Role::System, t)),
        };
        if self.turns == TurnMode::First {
            users.truncate(1);
        }
        Ok(system.into_iter().chain(users).collect())
    }
}

fn parse_turns(field: &str, value: &Value) -> Result<Vec<Message>, DropReason> {
    let list = value
        .as_array()
        .ok_or_else(|| DropReason::WrongType(field.to_owned()))?;
    let mut turns = Vec::with_capacity(list.len());
    for turn in list {
        let turn = turn
            .as_object()
            .ok_or_else(|| DropReason::WrongType(field.to_owned()))?;
        let role = ROLE_KEYS
            .iter()
            .find_map(|k| turn.get(*k))
            .ok_or_else(|| DropReason::MissingField(format!("{field}[].role")))?;
        let role = role
            .as_str()
            .ok_or_else(|| DropReason::WrongType(format!("{field}[].role")))?;
        let role = Role::parse(role).ok_or_else(|| DropReason::UnknownRole(role.to_owned()))?;
        let content = match CONTENT_KEYS.iter().find_map(|k| turn.get(*k)) {
            Some(content) => text_of(&format!("{field}[].content"), content)?,
            None => String::new(),
        };
        turns.push(Message::new(role, content));
    }
    Ok(turns)
}

/// A string field, or OpenAI content parts (`[{"type":"text","text":…}]`) joined; `null` is
/// empty.
fn text_of(field: &str, value: &Value) -> Result<String, DropReason> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match part.get("text").and_then(Value::as_str) {
                    Some(t) => text.push_str(t),
                    None => return Err(DropReason::WrongType(field.to_owned())),
                }
            }
            Ok(text)
        }
        _ => Err(DropReason::WrongType(field.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(extra: &str) -> SourceSpec {
        toml::from_str(&format!("name = \"t\"\npath = \"x.jsonl\"\n{extra}")).expect("spec")
    }

    fn run(extra: &str, row: Value) -> Result<Vec<(Role, String)>, &'static str> {
        let normalizer = Normalizer::new(&spec(extra));
        let row = row.as_object().expect("object").clone();
        normalizer
            .normalize(&row)
            .map(|m| m.into_iter().map(|m| (m.role, m.content)).collect())
            .map_err(|e| e.reason())
    }

    fn u(s: &str) -> (Role, String) {
        (Role::User, s.to_owned())
    }

    fn s(s: &str) -> (Role, String) {
        (Role::System, s.to_owned())
    }

    #[test]
    fn table() {
        let sharegpt = json!({"conversations": [
            {"from": "gpt", "value": "leading answer"},
            {"from": "human", "value": "  "},
            {"from": "human", "value": "q1"},
            {"from": "gpt", "value": "a1"},
            {"from": "human", "value": "q2"}]});
        let with_system = json!({"messages": [
            {"role": "system", "content": "detailed thinking on"},
            {"role": "user", "content": "q"}]});
        let cases: Vec<(&str, &str, Value, Result<Vec<(Role, String)>, &str>)> = vec![
            ("plain prompt", "", json!({"prompt": "hi"}), Ok(vec![u("hi")])),
            (
                "instruction + input",
                "",
                json!({"instruction": "sum", "input": "1 2"}),
                Ok(vec![u("sum\n\n1 2")]),
            ),
            ("empty input ignored", "", json!({"instruction": "x", "input": ""}), Ok(vec![u("x")])),
            ("sharegpt first turn", "", sharegpt.clone(), Ok(vec![u("q1")])),
            ("sharegpt all turns", "turns = \"all\"", sharegpt, Ok(vec![u("q1"), u("q2")])),
            ("system kept", "", with_system.clone(), Ok(vec![s("detailed thinking on"), u("q")])),
            ("system dropped", "system-prompt = \"drop\"", with_system.clone(), Ok(vec![u("q")])),
            (
                "system replaced",
                "system-prompt = \"replace\"\nsystem-prompt-text = \"be brief\"",
                with_system,
                Ok(vec![s("be brief"), u("q")]),
            ),
            (
                "late system turn ignored",
                "",
                json!({"messages": [{"role": "user", "content": "q"}, {"role": "system", "content": "x"}]}),
                Ok(vec![u("q")]),
            ),
            (
                "content parts",
                "",
                json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
                Ok(vec![u("ab")]),
            ),
            ("empty conversation", "", json!({"conversations": []}), Err("no_user_turn")),
            (
                "only assistant",
                "",
                json!({"messages": [{"role": "assistant", "content": "a"}]}),
                Err("no_user_turn"),
            ),
            ("empty prompt", "", json!({"prompt": ""}), Err("no_user_turn")),
            ("null prompt", "", json!({"prompt": null}), Err("no_user_turn")),
            ("numeric prompt", "", json!({"prompt": 5}), Err("wrong_type")),
            ("messages not a list", "", json!({"messages": "x"}), Err("wrong_type")),
            (
                "unknown role",
                "",
                json!({"messages": [{"role": "wizard", "content": "x"}]}),
                Err("unknown_role"),
            ),
            ("no known field", "", json!({"text": "x"}), Err("missing_field")),
            ("mapped field", "prompt-field = \"text\"", json!({"text": "x"}), Ok(vec![u("x")])),
            ("mapped field missing", "prompt-field = \"text\"", json!({"prompt": "x"}), Err("missing_field")),
            ("too short", "min-chars = 3", json!({"prompt": "ab"}), Err("too_short")),
            ("too long", "max-chars = 3", json!({"prompt": "abcd"}), Err("too_long")),
        ];
        for (name, extra, row, expected) in cases {
            assert_eq!(run(extra, row), expected, "case `{name}`");
        }
    }
}
