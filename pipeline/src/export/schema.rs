//! The trainers' schemas: for each [`ExportSchema`], its columns (a table) and one function
//! from an [`ExportRow`] to its cells. Each schema is what its trainer's reader reads (the
//! readers are named in `ARCHITECTURE.md` and checked in `pipeline/tests/it/export.rs`):
//!
//! * `messages`: gen's own; every field of the row, with `sample` (which answer to its prompt)
//!   and `settings` (what the request asked for, drawn values as drawn, as JSON text).
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
};
const ROLE_CONTENT: TurnKeys = TurnKeys {
    role: "role",
    content: "content",
    reasoning: None,
};
const FROM_VALUE: TurnKeys = TurnKeys {
    role: "from",
    content: "value",
    reasoning: None,
};

const fn column(name: &'static str, kind: Kind) -> Column {
    Column { name, kind }
}

const MESSAGES: [Column; 11] = [
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
    }
}

/// The system prompt (a leading system message) and the other turns as `human`/`gpt`, which
/// must alternate starting with `human`.
fn sharegpt_turns(messages: Vec<ExportMessage>) -> Result<(Option<String>, Vec<Turn>), Unfit> {
    let mut messages = messages.into_iter().peekable();
    let system = messages.next_if(|m| m.role == "system").map(|m| m.content);
    let mut turns = Vec::new();
    for (index, message) in messages.enumerate() {
        let (from, expected) = match message.role.as_str() {
            "user" => ("human", index % 2 == 0),
            "assistant" => ("gpt", index % 2 == 1),
            _ => return Err(SYSTEM_INSIDE),
        };
        if !expected {
            return Err(NOT_ALTERNATING);
        }
        turns.push(Turn {
            role: from.to_owned(),
            content: message.content,
            reasoning: None,
        });
    }
    Ok((system, turns))
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
}
