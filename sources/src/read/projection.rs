//! What a reader must produce: the top-level fields normalization reads, and, for the turn list,
//! only the role and content of each turn. Only Parquet uses it (text formats parse whole rows
//! anyway); there it decides which columns are decoded and which strings are copied.

use std::collections::BTreeSet;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_schema::DataType;
use serde_json::{Map, Value};

use super::arrow_value::{column_values, value_at};
use crate::prompt::{Role, TOOL_KEYS, is_call_role};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Projection {
    /// Top-level fields to decode; the others are skipped.
    pub columns: BTreeSet<String>,
    /// The turn list, when normalization reads one.
    pub turns: Option<TurnsProjection>,
}

/// A `list<struct>` of turns of which only the role and the content are read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnsProjection {
    pub field: String,
    /// Candidate role keys, first present wins (as normalization tries them).
    pub role_keys: Vec<String>,
    pub content_keys: Vec<String>,
    /// Assistant answers are never used (turn modes `first` and `all`): leave their content
    /// out instead of copying long answers that are dropped right after.
    pub skip_assistant_content: bool,
}

/// The values of a turn-list column under `turns`, or `None` when the column is not a list of
/// structs (it is then converted as any other column).
pub(super) fn turn_values(array: &dyn Array, turns: &TurnsProjection) -> Option<Vec<Value>> {
    let (offsets, items): (Vec<usize>, _) = match array.data_type() {
        DataType::List(_) => {
            let list = array.as_list::<i32>();
            let offsets = list.value_offsets().iter().map(|o| *o as usize).collect();
            (offsets, list.values())
        }
        DataType::LargeList(_) => {
            let list = array.as_list::<i64>();
            let offsets = list.value_offsets().iter().map(|o| *o as usize).collect();
            (offsets, list.values())
        }
        _ => return None,
    };
    let DataType::Struct(fields) = items.data_type() else {
        return None;
    };
    let structs = items.as_struct();
    let find = |keys: &[String]| {
        keys.iter().find_map(|key| {
            fields
                .iter()
                .position(|f| f.name() == key)
                .map(|i| (key.clone(), structs.column(i)))
        })
    };
    let role = find(&turns.role_keys);
    let content = find(&turns.content_keys);
    let tool_fields: Vec<(&str, &arrow_array::ArrayRef)> = TOOL_KEYS
        .iter()
        .filter_map(|key| {
            let index = fields.iter().position(|f| f.name() == key)?;
            Some((*key, structs.column(index)))
        })
        .collect();
    let role_at = |turn: usize| {
        role.as_ref()
            .and_then(|(_, column)| value_at(column.as_ref(), turn).as_str().map(str::to_owned))
    };
    let mut rows = Vec::with_capacity(array.len());
    for row in 0..array.len() {
        if array.is_null(row) {
            rows.push(Value::Null);
            continue;
        }
        let mut list = Vec::with_capacity(offsets[row + 1] - offsets[row]);
        for turn in offsets[row]..offsets[row + 1] {
            let mut object = Map::new();
            if structs.is_null(turn) {
                list.push(Value::Null);
                continue;
            }
            let mut answer = false;
            if let Some((key, column)) = &role {
                let value = value_at(column.as_ref(), turn);
                // An assistant turn's text is an answer unless it is a tool's call.
                answer = value.as_str().is_some_and(|raw| {
                    Role::parse(raw) == Some(Role::Assistant) && !is_call_role(raw)
                }) && (turn + 1 == offsets[row + 1]
                    || role_at(turn + 1).as_deref().and_then(Role::parse) != Some(Role::Tool));
                object.insert(key.clone(), value);
            }
            for (key, column) in &tool_fields {
                let value = value_at(column.as_ref(), turn);
                answer &= value.is_null() || value.as_array().is_some_and(Vec::is_empty);
                object.insert((*key).to_owned(), value);
            }
            if let Some((key, column)) = &content
                && !(answer && turns.skip_assistant_content)
            {
                object.insert(key.clone(), value_at(column.as_ref(), turn));
            }
            list.push(Value::Object(object));
        }
        rows.push(Value::Array(list));
    }
    Some(rows)
}

/// The values of one top-level column under `projection`.
pub(super) fn projected_values(
    name: &str,
    array: &dyn Array,
    projection: Option<&Projection>,
) -> Vec<Value> {
    projection
        .and_then(|p| p.turns.as_ref())
        .filter(|turns| turns.field == name)
        .and_then(|turns| turn_values(array, turns))
        .unwrap_or_else(|| column_values(array))
}
