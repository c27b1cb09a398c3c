//! The trainers' schemas: for each [`ExportSchema`], its columns (a table) and one function
//! from an [`ExportRow`] to its cells. Each schema is what its trainer's reader reads (the
//! readers are named in `ARCHITECTURE.md` and checked in `pipeline/tests/it/export.rs`):
//!
//! * `messages`: gen's own; every field of the row, with `sample` (which answer to its prompt),
//!   `settings` (what the request asked for, drawn values as drawn, as JSON text) and `tools`
//!   (the tool definitions sent, as JSON text); tool turns as OpenAI message objects.
//! * `specforge`: `id`, `conversations` [{role, content, reasoning_content}], `status`. SpecForge
//!   passes every column besides `conversations`, `id` and `tools` to the tokenizer's chat
//!   template as keyword arguments, so nothing else is added; its reasoning expander needs
//!   `status = "success"`. speculators reads the same `conversations`.
//! * `speculators`: with every answer's token ids stored (`token-ids = true`), `id`,
//!   `input_ids` (the prompt as the server's chat template rendered it, then the answer's
//!   tokens) and `loss_mask` (0 on the prompt, 1 on the answer), one row per answer: the rows
//!   speculators' own regeneration writes, which its `prepare-data` passes through without
//!   rendering. Otherwise `specforge`'s columns, for speculators to render.
//! * `sharegpt`: `id`, `system`, `conversations` [{from: human|gpt, value}] (SafeAILab EAGLE
//!   asserts strict human/gpt alternation and knows no other role, so the system prompt has
//!   its own column and a row that does not alternate cannot be carried).
//! * `modelopt`: `conversation_id`, `conversations` [{role, content}] (ModelOpt's
//!   `examples/speculative_decoding` reads only these).

use super::table::{Cell, Column, Kind, Turn, TurnKeys};
use super::{ExportMessage, ExportRow};
use crate::cli::ExportSchema;

const WITH_REASONING: TurnKeys = TurnKeys {
    role: "role",
    content: "content",
    reasoning: Some("reasoning_content"),
    tools: true,
};
const ROLE_CONTENT: TurnKeys = TurnKeys {
    role: "role",
    content: "content",
    reasoning: None,
    tools: true,
};
const FROM_VALUE: TurnKeys = TurnKeys {
    role: "from",
    content: "value",
    reasoning: None,
    tools: false,
};

const fn column(name: &'static str, kind: Kind) -> Column {
    Column { name, kind }
}

const MESSAGES: [Column; 12] = [
    column("id", Kind::Text),
    column("source", Kind::Text),
    column("source_key", Kind::OptionalText),
    column("messages", Kind::Turns(&WITH_REASONING)),
    column("reasoning_content", Kind::OptionalText),
    column("finish_reason", Kind::OptionalText),
    column("model", Kind::Text),
    column("prompt_tokens", Kind::Count),
    column("completion_tokens", Kind::Count),
    column("sample", Kind::Count),
    // A JSON object as text: its keys differ between sources (sampling, `chat_template_kwargs`,
    // extra body keys), which a fixed column type cannot hold.
    column("settings", Kind::OptionalText),
    // The tool definitions sent with the messages, as JSON text (OpenAI function schemas);
    // null without any.
    column("tools", Kind::OptionalText),
];
const SPECFORGE: [Column; 3] = [
    column("id", Kind::Text),
    column("conversations", Kind::Turns(&WITH_REASONING)),
    column("status", Kind::Text),
];
const TOKEN_ROWS: [Column; 3] = [
    column("id", Kind::Text),
    column("input_ids", Kind::Ids),
    column("loss_mask", Kind::Ids),
];
const SHAREGPT: [Column; 3] = [
    column("id", Kind::Text),
    column("system", Kind::OptionalText),
    column("conversations", Kind::Turns(&FROM_VALUE)),
];
const MODELOPT: [Column; 2] = [
    column("conversation_id", Kind::Text),
    column("conversations", Kind::Turns(&ROLE_CONTENT)),
];

/// The per-row fields every schema but `messages` leaves out; they are in `provenance.json`
/// as totals.
const ROW_METADATA: &str = "`source`, `source_key`, `finish_reason`, `model` and token counts per row \
     (the schema has no columns for them; totals are in `provenance.json`)";

/// Why a row cannot be written in a schema.
pub(super) type Unfit = &'static str;

const NOT_ALTERNATING: Unfit =
    "turns do not alternate user/assistant (ShareGPT needs human/gpt in turn)";
const NO_TOKEN_IDS: Unfit = "an answer stored without its token ids";
const SYSTEM_INSIDE: Unfit =
    "a system message after the first turn (ShareGPT has one `system` column)";

impl ExportSchema {
    pub(super) fn name(self) -> &'static str {
        match self {
            ExportSchema::Messages => "messages",
            ExportSchema::Specforge => "specforge",
            ExportSchema::Speculators | ExportSchema::SpeculatorsTokens => "speculators",
            ExportSchema::Sharegpt => "sharegpt",
            ExportSchema::Modelopt => "modelopt",
        }
    }

    pub(super) fn columns(self) -> &'static [Column] {
        match self {
            ExportSchema::Messages => &MESSAGES,
            ExportSchema::Specforge | ExportSchema::Speculators => &SPECFORGE,
            ExportSchema::SpeculatorsTokens => &TOKEN_ROWS,
            ExportSchema::Sharegpt => &SHAREGPT,
            ExportSchema::Modelopt => &MODELOPT,
        }
    }

    /// What of a run's data this schema cannot carry, for the card and stderr.
    pub(super) fn not_carried(self) -> Vec<&'static str> {
        match self {
            ExportSchema::Messages => vec![],
            ExportSchema::Specforge | ExportSchema::Speculators => vec![ROW_METADATA],
            ExportSchema::SpeculatorsTokens => vec![
                "the text (`messages`, reasoning): the rows are the tokens the model read and \
                 wrote; `gen export --schema messages` has the text",
                ROW_METADATA,
            ],
            ExportSchema::Sharegpt => vec![
                "reasoning (`reasoning_content`): ShareGPT turns have only `from` and `value`",
                ROW_METADATA,
                "rows whose turns do not alternate user/assistant, or with a system message \
                 after the first turn (left out and counted)",
            ],
            ExportSchema::Modelopt => vec![
                "reasoning (`reasoning_content`): ModelOpt reads only `role` and `content`",
                ROW_METADATA,
            ],
        }
    }

    /// `row` as this schema's cells, or why it cannot be carried.
    pub(super) fn cells(self, row: ExportRow) -> Result<Vec<Cell>, Unfit> {
        Ok(match self {
            ExportSchema::Messages => vec![
                Cell::Text(row.id),
                Cell::Text(row.source),
                Cell::OptionalText(row.source_key),
                Cell::Turns(row.messages.into_iter().map(turn).collect()),
                Cell::OptionalText(row.reasoning_content),
                Cell::OptionalText(row.finish_reason),
                Cell::Text(row.model),
                Cell::Count(row.prompt_tokens),
                Cell::Count(row.completion_tokens),
                Cell::Count(Some(u64::from(row.sample))),
                Cell::OptionalText(
                    row.settings
                        .map(|s| serde_json::Value::Object(s).to_string()),
                ),
                Cell::OptionalText(row.tools.map(|tools| tools.to_string())),
            ],
            ExportSchema::SpeculatorsTokens => {
                let ids = row
                    .messages
                    .last()
                    .and_then(|m| m.answer.as_ref())
                    .and_then(|a| a.token_ids.clone())
                    .ok_or(NO_TOKEN_IDS)?;
                let mut loss_mask = vec![0; ids.prompt.len()];
                loss_mask.resize(ids.prompt.len() + ids.completion.len(), 1);
                let mut input_ids = ids.prompt;
                input_ids.extend(ids.completion);
                vec![
                    Cell::Text(row.id),
                    Cell::Ids(input_ids),
                    Cell::Ids(loss_mask),
                ]
            }
            ExportSchema::Specforge | ExportSchema::Speculators => vec![
                Cell::Text(row.id),
                Cell::Turns(row.messages.into_iter().map(turn).collect()),
                // Only answers are exported (`store::records::answer_defect`).
                Cell::Text("success".to_owned()),
            ],
            ExportSchema::Sharegpt => {
                let (system, turns) = sharegpt_turns(row.messages)?;
                vec![
                    Cell::Text(row.id),
                    Cell::OptionalText(system),
                    Cell::Turns(turns),
                ]
            }
            ExportSchema::Modelopt => vec![
                Cell::Text(row.id),
                Cell::Turns(
                    row.messages
                        .into_iter()
                        .map(|m| Turn {
                            reasoning: None,
                            ..turn(m)
                        })
                        .collect(),
                ),
            ],
        })
    }
}

fn turn(message: ExportMessage) -> Turn {
    Turn {
        role: message.role,
        content: message.content,
        reasoning: message.reasoning_content,
        tool_calls: message.tool_calls,
        tool_call_id: message.tool_call_id,
        name: message.name,
    }
}

/// The system prompt (a leading system message) and the other turns as `human`/`gpt`, which
/// must alternate starting with `human`. Tool turns take the places LLaMA-Factory's ShareGPT
/// format gives them: a call is a `function_call` turn where `gpt` would be (its value the
/// call as JSON, `{name, arguments}`, a list for several), the results after it one
/// `observation` turn where `human` would be (a JSON list of them when there are several).
fn sharegpt_turns(messages: Vec<ExportMessage>) -> Result<(Option<String>, Vec<Turn>), Unfit> {
    let mut messages = messages.into_iter().peekable();
    let system = messages.next_if(|m| m.role == "system").map(|m| m.content);
    let mut turns: Vec<Turn> = Vec::new();
    while let Some(message) = messages.next() {
        // `human` and `observation` at even places, `gpt` and `function_call` at odd ones.
        let even = turns.len().is_multiple_of(2);
        let call = message.role == "assistant"
            && (!message.tool_calls.is_empty()
                || messages.peek().is_some_and(|m| m.role == "tool"));
        let (from, expected, value) = match message.role.as_str() {
            "user" => ("human", even, message.content),
            "assistant" if call => ("function_call", !even, call_value(message)),
            "assistant" => ("gpt", !even, message.content),
            "tool" => {
                let mut results = vec![message.content];
                while let Some(next) = messages.next_if(|m| m.role == "tool") {
                    results.push(next.content);
                }
                let value = match <[String; 1]>::try_from(results) {
                    Ok([one]) => one,
                    Err(many) => serde_json::Value::from(many).to_string(),
                };
                ("observation", even, value)
            }
            _ => return Err(SYSTEM_INSIDE),
        };
        if !expected {
            return Err(NOT_ALTERNATING);
        }
        turns.push(Turn {
            role: from.to_owned(),
            content: value,
            ..Turn::default()
        });
    }
    Ok((system, turns))
}

/// A call turn's ShareGPT value: its calls as `{name, arguments}` JSON (arguments as an
/// object where they parse), a list for several; the text of a call in the model's own
/// syntax.
fn call_value(message: ExportMessage) -> String {
    let calls: Vec<serde_json::Value> = message
        .tool_calls
        .iter()
        .map(|call| {
            let arguments = serde_json::from_str(&call.function.arguments)
                .unwrap_or_else(|_| serde_json::Value::from(call.function.arguments.clone()));
            serde_json::json!({"name": call.function.name, "arguments": arguments})
        })
        .collect();
    match <[serde_json::Value; 1]>::try_from(calls) {
        Ok([one]) => one.to_string(),
        Err(none) if none.is_empty() => message.content,
        Err(many) => serde_json::Value::from(many).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(roles: &[&str]) -> Vec<ExportMessage> {
        roles
            .iter()
            .map(|role| ExportMessage {
                role: (*role).to_owned(),
                content: format!("{role} text"),
                reasoning_content: (*role == "assistant").then(|| "why".to_owned()),
                answer: None,
                ..ExportMessage::default()
            })
            .collect()
    }

    #[test]
    fn sharegpt_takes_the_system_prompt_aside_and_refuses_what_eagle_would_assert_on() {
        let (system, turns) =
            sharegpt_turns(messages(&["system", "user", "assistant"])).expect("alternates");
        assert_eq!(system.as_deref(), Some("system text"));
        let from: Vec<&str> = turns.iter().map(|t| t.role.as_str()).collect();
        assert_eq!(from, ["human", "gpt"]);
        assert!(turns.iter().all(|t| t.reasoning.is_none()));
        assert_eq!(
            sharegpt_turns(messages(&["user", "user", "assistant"])),
            Err(NOT_ALTERNATING)
        );
        assert_eq!(
            sharegpt_turns(messages(&["assistant", "user"])),
            Err(NOT_ALTERNATING)
        );
        assert_eq!(
            sharegpt_turns(messages(&["user", "system", "assistant"])),
            Err(SYSTEM_INSIDE)
        );
    }

    /// A call and its results take LLaMA-Factory's `function_call` and `observation` places;
    /// the `messages` form keeps OpenAI's keys.
    #[test]
    fn tool_turns_go_in_each_schemas_shape() {
        let call = gen_sources::prompt::ToolCall {
            id: "c1".into(),
            kind: "function".into(),
            function: gen_sources::prompt::FunctionCall {
                name: "convert".into(),
                arguments: r#"{"amount":5}"#.into(),
            },
        };
        let mut conversation = messages(&["user", "assistant", "tool", "tool", "assistant"]);
        conversation[1].tool_calls = vec![call.clone(), call];
        conversation[2].tool_call_id = Some("c1".into());
        let (_, turns) = sharegpt_turns(conversation.clone()).expect("alternates");
        let shown: Vec<(&str, &str)> = turns
            .iter()
            .map(|t| (t.role.as_str(), t.content.as_str()))
            .collect();
        let calls = r#"[{"arguments":{"amount":5},"name":"convert"},{"arguments":{"amount":5},"name":"convert"}]"#;
        assert_eq!(
            shown,
            [
                ("human", "user text"),
                ("function_call", calls),
                ("observation", r#"["tool text","tool text"]"#),
                ("gpt", "assistant text"),
            ]
        );
        let turns: Vec<Turn> = conversation.into_iter().map(turn).collect();
        let json = serde_json::to_value(super::super::table::JsonRow {
            columns: &[column("messages", Kind::Turns(&ROLE_CONTENT))],
            cells: &[Cell::Turns(turns)],
        })
        .expect("serializes");
        assert_eq!(
            json["messages"][1]["tool_calls"][0]["function"]["name"],
            "convert"
        );
        assert_eq!(json["messages"][2]["tool_call_id"], "c1");
        assert!(json["messages"][0].get("tool_calls").is_none());
    }
}
