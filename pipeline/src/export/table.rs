//! The shape every schema is written in: a list of [`Column`]s and, per row, one [`Cell`] per
//! column. JSONL ([`JsonRow`]) and Parquet (`columnar`) are written from this one description,
//! so a schema is a table of columns plus one mapping function (`schema`), never a writer.

use serde::ser::{Serialize, SerializeMap, Serializer};

/// How the keys of one chat turn are spelled in a schema.
#[derive(Debug)]
pub(super) struct TurnKeys {
    pub(super) role: &'static str,
    pub(super) content: &'static str,
    /// The key of the turn's reasoning, when the schema carries it.
    pub(super) reasoning: Option<&'static str>,
    /// Whether a turn's tool fields go in OpenAI's keys (`tool_calls`, `tool_call_id`,
    /// `name`), each only when the turn has it.
    pub(super) tools: bool,
}

/// What a column holds.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    Text,
    OptionalText,
    Count,
    Turns(&'static TurnKeys),
    /// A list of token ids (or a loss mask of 0 and 1).
    Ids,
}

#[derive(Debug)]
pub(super) struct Column {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
}

/// One chat turn, already in the schema's vocabulary (`human`/`gpt` for ShareGPT).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Turn {
    pub(super) role: String,
    pub(super) content: String,
    pub(super) reasoning: Option<String>,
    pub(super) tool_calls: Vec<gen_sources::prompt::ToolCall>,
    pub(super) tool_call_id: Option<String>,
    pub(super) name: Option<String>,
}

/// One value of a row, matching its column's [`Kind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cell {
    Text(String),
    OptionalText(Option<String>),
    Count(Option<u64>),
    Turns(Vec<Turn>),
    Ids(Vec<u32>),
}

/// A row as a JSON object, keys in column order.
pub(super) struct JsonRow<'a> {
    pub(super) columns: &'a [Column],
    pub(super) cells: &'a [Cell],
}

impl Serialize for JsonRow<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.columns.len()))?;
        for (column, cell) in self.columns.iter().zip(self.cells) {
            match (cell, column.kind) {
                (Cell::Text(text), _) => map.serialize_entry(column.name, text)?,
                (Cell::OptionalText(text), _) => map.serialize_entry(column.name, text)?,
                (Cell::Count(count), _) => map.serialize_entry(column.name, count)?,
                (Cell::Ids(ids), _) => map.serialize_entry(column.name, ids)?,
                (Cell::Turns(turns), Kind::Turns(keys)) => {
                    let turns: Vec<JsonTurn<'_>> =
                        turns.iter().map(|turn| JsonTurn { keys, turn }).collect();
                    map.serialize_entry(column.name, &turns)?;
                }
                (Cell::Turns(_), _) => {
                    return Err(serde::ser::Error::custom(format!(
                        "column `{}` is not a list of turns",
                        column.name
                    )));
                }
            }
        }
        map.end()
    }
}

struct JsonTurn<'a> {
    keys: &'a TurnKeys,
    turn: &'a Turn,
}

impl Serialize for JsonTurn<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry(self.keys.role, &self.turn.role)?;
        map.serialize_entry(self.keys.content, &self.turn.content)?;
        if let Some(key) = self.keys.reasoning {
            map.serialize_entry(key, &self.turn.reasoning)?;
        }
        if self.keys.tools {
            if !self.turn.tool_calls.is_empty() {
                map.serialize_entry("tool_calls", &self.turn.tool_calls)?;
            }
            if let Some(id) = &self.turn.tool_call_id {
                map.serialize_entry("tool_call_id", id)?;
            }
            if let Some(name) = &self.turn.name {
                map.serialize_entry("name", name)?;
            }
        }
        map.end()
    }
}
