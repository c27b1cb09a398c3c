//! Reading a row's turns and texts: role and content keys, content parts, `[TAG]` wrappers.

use std::borrow::Cow;

use serde_json::Value;

use super::{DropReason, TOOLS_FIELD, Turn};
use crate::prompt::{FunctionCall, Role, ToolCall, is_call_role};

/// A row's list of turns; `role_keys`/`content_keys` are tried in order. Tool turns keep
/// their payload: an assistant turn's `tool_calls` (OpenAI; or its older `function_call`), a
/// ShareGPT call turn (Glaive's `function_call`, [`is_call_role`]) as an assistant turn whose
/// text is parsed into calls where it is JSON with a `name` (else the text stays: a call in
/// the model's own syntax, as Hermes writes `<tool_call>`), a `tool` turn's `tool_call_id`
/// and `name`. A call without an id gets `call_<n>`, `n` counting the row's calls.
pub(super) fn parse_turns(
    field: &str,
    value: Value,
    role_keys: &[String],
    content_keys: &[String],
) -> Result<Vec<Turn<'static>>, DropReason> {
    let list = match value {
        Value::Array(list) => list,
        // Parquet has null lists where JSON has `[]`: both are empty conversations.
        Value::Null => return Ok(Vec::new()),
        _ => return Err(DropReason::WrongType(field.to_owned())),
    };
    let mut turns = Vec::with_capacity(list.len());
    let mut calls = 0;
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
        let call_turn = is_call_role(role);
        let role = Role::parse(role).ok_or_else(|| DropReason::UnknownRole(role.to_owned()))?;
        let content = match content_keys.iter().find_map(|k| turn.remove(k)) {
            Some(content) => text_of(&format!("{field}[].content"), content)?,
            None => String::new(),
        };
        let mut parsed = Turn::new(role, Cow::Owned(content));
        match role {
            Role::Assistant if call_turn => {
                if let Some(called) = calls_in_text(&parsed.content, &mut calls) {
                    parsed.tool_calls = called;
                    parsed.content = Cow::Borrowed("");
                }
            }
            Role::Assistant => {
                let wrong = || DropReason::WrongType(format!("{field}[].tool_calls"));
                match (turn.remove("tool_calls"), turn.remove("function_call")) {
                    (Some(Value::Array(list)), _) => {
                        for call in &list {
                            parsed
                                .tool_calls
                                .push(tool_call(call, &mut calls).ok_or_else(wrong)?);
                        }
                    }
                    (Some(Value::Null) | None, Some(Value::Null) | None) => {}
                    (Some(Value::Null) | None, Some(call)) => {
                        parsed
                            .tool_calls
                            .push(tool_call(&call, &mut calls).ok_or_else(wrong)?);
                    }
                    (Some(_), _) => return Err(wrong()),
                }
            }
            Role::Tool => {
                let mut text = |key: &str| match turn.remove(key) {
                    Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
                    Some(Value::String(_) | Value::Null) | None => Ok(None),
                    Some(_) => Err(DropReason::WrongType(format!("{field}[].{key}"))),
                };
                parsed.tool_call_id = text("tool_call_id")?;
                parsed.name = text("name")?;
            }
            Role::System | Role::User => {}
        }
        turns.push(parsed);
    }
    Ok(turns)
}

/// The calls a ShareGPT call turn's text holds, when it is JSON: one call object or a list of
/// them; `None` when it is not (the text is then the call).
pub(super) fn calls_in_text(text: &str, calls: &mut usize) -> Option<Vec<ToolCall>> {
    match serde_json::from_str::<Value>(text.trim()).ok()? {
        Value::Array(list) => list.iter().map(|call| tool_call(call, calls)).collect(),
        call => tool_call(&call, calls).map(|call| vec![call]),
    }
}

/// One call in OpenAI's shape (`{id, type, function: {name, arguments}}`) or a bare
/// `{name, arguments}`; `arguments` that are not text are kept as their JSON text.
fn tool_call(value: &Value, calls: &mut usize) -> Option<ToolCall> {
    let object = value.as_object()?;
    let function = match object.get("function") {
        Some(Value::Object(function)) => function,
        _ => object,
    };
    let name = function.get("name")?.as_str()?.to_owned();
    let arguments = match function
        .get("arguments")
        .or_else(|| function.get("parameters"))
    {
        Some(Value::String(text)) => text.clone(),
        None | Some(Value::Null) => "{}".to_owned(),
        Some(other) => other.to_string(),
    };
    let id = match object.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => format!("call_{calls}"),
    };
    *calls += 1;
    let kind = object
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("function");
    Some(ToolCall {
        id,
        kind: kind.to_owned(),
        function: FunctionCall { name, arguments },
    })
}

/// The row's tool definitions (its `tools` column: a list, or JSON text of one, as the Hermes
/// and Glaive ShareGPT sets store it); `None` when absent or empty.
pub(super) fn tools_of(value: Value) -> Result<Option<Value>, DropReason> {
    let wrong = || DropReason::WrongType(TOOLS_FIELD.to_owned());
    let value = match value {
        Value::String(text) if text.trim().is_empty() => return Ok(None),
        Value::String(text) => serde_json::from_str(&text).map_err(|_| wrong())?,
        other => other,
    };
    match value {
        Value::Null => Ok(None),
        Value::Array(list) if list.is_empty() => Ok(None),
        list @ Value::Array(_) => Ok(Some(list)),
        _ => Err(wrong()),
    }
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
