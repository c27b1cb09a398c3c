//! Reading a row's turns and texts: role and content keys, content parts, `[TAG]` wrappers.

use std::borrow::Cow;

use serde_json::Value;

use super::{DropReason, Turn};
use crate::prompt::{Role, is_tool_role};

/// A row's list of turns; `role_keys`/`content_keys` are tried in order. The conversation
/// ends before its first tool turn ([`is_tool_role`]); whether it did is returned with it.
pub(super) fn parse_turns(
    field: &str,
    value: Value,
    role_keys: &[String],
    content_keys: &[String],
) -> Result<(Vec<Turn<'static>>, bool), DropReason> {
    let list = match value {
        Value::Array(list) => list,
        // Parquet has null lists where JSON has `[]`: both are empty conversations.
        Value::Null => return Ok((Vec::new(), false)),
        _ => return Err(DropReason::WrongType(field.to_owned())),
    };
    let mut turns = Vec::with_capacity(list.len());
    for turn in list {
        let Value::Object(mut turn) = turn else {
            return Err(DropReason::WrongType(field.to_owned()));
        };
        let role = role_keys
            .iter()
            .find_map(|k| turn.get(k))
            .ok_or_else(|| DropReason::MissingField(format!("{field}[].role")))?;
        let role = role
            .as_str()
            .ok_or_else(|| DropReason::WrongType(format!("{field}[].role")))?;
        if is_tool_role(role) {
            return Ok((turns, true));
        }
        let role = Role::parse(role).ok_or_else(|| DropReason::UnknownRole(role.to_owned()))?;
        let content = match content_keys.iter().find_map(|k| turn.remove(k)) {
            Some(content) => text_of(&format!("{field}[].content"), content)?,
            None => String::new(),
        };
        turns.push(Turn::new(role, Cow::Owned(content)));
    }
    Ok((turns, false))
}

/// A string field, or OpenAI content parts (`[{"type":"text","text":…}]`) joined; `null` is
/// empty.
pub(super) fn text_of(field: &str, value: Value) -> Result<String, DropReason> {
    match value {
        Value::String(s) => Ok(s),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in &parts {
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

/// Removes a `[TAG]`…`[/TAG]` wrapper around the whole text (R2E-Gym wraps some issues in
/// `[ISSUE]`); inner text and texts without the wrapper are left alone.
pub(super) fn strip_wrappers<'t>(text: &'t str, tags: &[String]) -> &'t str {
    let mut text = text.trim();
    for tag in tags {
        let open = format!("[{tag}]");
        let close = format!("[/{tag}]");
        if let Some(inner) = text.strip_prefix(open.as_str()) {
            text = inner.strip_suffix(close.as_str()).unwrap_or(inner).trim();
        }
    }
    text
}

/// A field's value as text for comparisons: strings as they are, other scalars as JSON.
pub(super) fn compare_text(value: &Value) -> Option<Cow<'_, str>> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(Cow::Borrowed(s)),
        other => Some(Cow::Owned(other.to_string())),
    }
}
