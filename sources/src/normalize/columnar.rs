//! Normalization straight from an Arrow record batch, without building a JSON value per row:
//! the turns of a `list<struct<role, content>>` column (any key names the settings allow) and
//! plain string columns are borrowed from the batch's buffers.
//!
//! It knows the shapes Parquet datasets use for prompts (string columns; lists of structs of
//! strings). For anything else ([`Normalizer::columnar`] returns `None`) the caller converts
//! the batch to JSON rows and takes the generic path. Both must give the same prompts and the
//! same drop reasons: each rule below mirrors [`Normalizer::normalize_into`] on the JSON object
//! [`crate::read::batch_rows`] would build (a column of the batch is a present key; a null cell
//! is `null`), and the selection and bounds rules are shared code.

use std::borrow::Cow;

use arrow_array::cast::AsArray;
use arrow_array::{Array, GenericStringArray, RecordBatch, StringViewArray, StructArray};
use arrow_buffer::NullBuffer;
use arrow_schema::DataType;
use serde_json::Value;

use super::turns::{calls_in_text, compare_text};
use super::{
    ALPACA_INPUT, DropReason, MESSAGES_FIELDS, Normalizer, PROMPT_FIELDS, TOOLS_FIELD, Turn,
    no_known_field, with_alpaca_input,
};
use crate::prompt::{Role, TOOL_KEYS, is_call_role};
use crate::read::column_values;
use crate::spec::TurnMode;

/// A string column, read in place.
#[derive(Clone, Copy)]
enum Text<'a> {
    Utf8(&'a GenericStringArray<i32>),
    LargeUtf8(&'a GenericStringArray<i64>),
    View(&'a StringViewArray),
}

impl<'a> Text<'a> {
    fn of(array: &'a dyn Array) -> Option<Text<'a>> {
        match array.data_type() {
            DataType::Utf8 => Some(Text::Utf8(array.as_string::<i32>())),
            DataType::LargeUtf8 => Some(Text::LargeUtf8(array.as_string::<i64>())),
            DataType::Utf8View => Some(Text::View(array.as_string_view())),
            _ => None,
        }
    }

    /// The cell's text; `None` when null.
    fn get(self, row: usize) -> Option<&'a str> {
        match self {
            Text::Utf8(a) => (!a.is_null(row)).then(|| a.value(row)),
            Text::LargeUtf8(a) => (!a.is_null(row)).then(|| a.value(row)),
            Text::View(a) => (!a.is_null(row)).then(|| a.value(row)),
        }
    }
}

/// A column read for its value as text (filters, the row's own key).
enum Cell<'a> {
    Text(Text<'a>),
    /// Any other type, converted as the generic path converts it.
    Values(Vec<Value>),
}

impl Cell<'_> {
    fn of(array: &dyn Array) -> Cell<'_> {
        match Text::of(array) {
            Some(text) => Cell::Text(text),
            None => Cell::Values(column_values(array)),
        }
    }

    /// As `compare_text` gives it for the JSON value.
    fn compare_text(&self, row: usize) -> Option<Cow<'_, str>> {
        match self {
            Cell::Text(text) => text.get(row).map(Cow::Borrowed),
            Cell::Values(values) => compare_text(&values[row]),
        }
    }

    /// As the source key of the JSON value: strings as they are, other values as JSON.
    fn key(&self, row: usize) -> Option<String> {
        match self {
            Cell::Text(text) => text.get(row).map(str::to_owned),
            Cell::Values(values) => match &values[row] {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                other => Some(other.to_string()),
            },
        }
    }
}

/// Offsets of a list column.
#[derive(Clone, Copy)]
enum Offsets<'a> {
    Small(&'a [i32]),
    Large(&'a [i64]),
}

impl Offsets<'_> {
    fn range(self, row: usize) -> std::ops::Range<usize> {
        // Arrow offsets are non-negative and fit in memory.
        match self {
            Offsets::Small(o) => o[row] as usize..o[row + 1] as usize,
            Offsets::Large(o) => o[row] as usize..o[row + 1] as usize,
        }
    }
}

/// A `list<struct>` turn column.
struct TurnColumn<'a> {
    field: &'a str,
    offsets: Offsets<'a>,
    lists: Option<&'a NullBuffer>,
    structs: Option<&'a NullBuffer>,
    /// The first role key that is a field of the struct.
    role: Option<Text<'a>>,
    content: Option<Text<'a>>,
    /// Assistant contents are never forwarded (turn modes `first` and `all`); the generic path
    /// does not read them either, so their type never matters.
    skip_assistant_content: bool,
}

impl<'a> TurnColumn<'a> {
    fn new(
        field: &'a str,
        array: &'a dyn Array,
        normalizer: &Normalizer,
        projected: bool,
    ) -> Option<TurnColumn<'a>> {
        let (offsets, items) = match array.data_type() {
            DataType::List(_) => {
                let list = array.as_list::<i32>();
                (Offsets::Small(list.value_offsets()), list.values())
            }
            DataType::LargeList(_) => {
                let list = array.as_list::<i64>();
                (Offsets::Large(list.value_offsets()), list.values())
            }
            _ => return None,
        };
        let DataType::Struct(fields) = items.data_type() else {
            return None;
        };
        // Structured tool fields: the generic path reads them.
        if fields
            .iter()
            .any(|f| TOOL_KEYS.contains(&f.name().as_str()))
        {
            return None;
        }
        let structs: &StructArray = items.as_struct();
        // A role or content field of another type: the generic path decides.
        let find = |keys: &[String]| -> Option<Option<Text<'a>>> {
            let Some(index) = keys
                .iter()
                .find_map(|key| fields.iter().position(|f| f.name() == key))
            else {
                return Some(None);
            };
            Text::of(structs.column(index).as_ref()).map(Some)
        };
        let role = find(&normalizer.role_keys)?;
        let content = find(&normalizer.content_keys)?;
        Some(TurnColumn {
            field,
            offsets,
            lists: array.nulls(),
            structs: structs.nulls(),
            role,
            content,
            skip_assistant_content: projected && normalizer.turns != TurnMode::History,
        })
    }

    /// Reads row `row`'s turns into `turns`, as `parse_turns` reads them.
    fn read(&self, row: usize, turns: &mut Vec<Turn<'a>>) -> Result<(), DropReason> {
        turns.clear();
        // A null list is an empty conversation.
        if self.lists.is_some_and(|n| n.is_null(row)) {
            return Ok(());
        }
        let range = self.offsets.range(row);
        let end = range.end;
        let mut calls = 0;
        for turn in range {
            if self.structs.is_some_and(|n| n.is_null(turn)) {
                return Err(DropReason::WrongType(self.field.to_owned()));
            }
            let raw = self.role(turn)?;
            let role = Role::parse(raw).ok_or_else(|| DropReason::UnknownRole(raw.to_owned()))?;
            // An answer's text is skipped unless it is a tool's call (a result follows it).
            let skipped = self.skip_assistant_content
                && role == Role::Assistant
                && !is_call_role(raw)
                && (turn + 1 == end
                    || self.role(turn + 1).ok().and_then(Role::parse) != Some(Role::Tool));
            let content = if skipped {
                ""
            } else {
                self.content.and_then(|c| c.get(turn)).unwrap_or("")
            };
            let mut parsed = Turn::new(role, Cow::Borrowed(content));
            if is_call_role(raw)
                && let Some(called) = calls_in_text(content, &mut calls)
            {
                parsed.tool_calls = called;
                parsed.content = Cow::Borrowed("");
            }
            turns.push(parsed);
        }
        Ok(())
    }

    /// The role of turn `turn` as its dataset spells it.
    fn role(&self, turn: usize) -> Result<&'a str, DropReason> {
        self.role
            .ok_or_else(|| DropReason::MissingField(format!("{}[].role", self.field)))?
            .get(turn)
            .ok_or_else(|| DropReason::WrongType(format!("{}[].role", self.field)))
    }
}

/// Where a row's prompt comes from.
enum Body<'a> {
    Turns(TurnColumn<'a>),
    Plain {
        text: Text<'a>,
        /// The Alpaca `input` column, read with a default `instruction`.
        input: Option<Text<'a>>,
    },
    /// Every row is dropped for this reason (the field is not in the file).
    Missing(DropReason),
}

/// One record batch, ready to normalize row by row.
pub(crate) struct BatchNormalizer<'a> {
    normalizer: &'a Normalizer,
    body: Body<'a>,
    filters: Vec<(&'a str, Cell<'a>)>,
    id: Option<Cell<'a>>,
    /// Scratch space for a row's turns.
    turns: Vec<Turn<'a>>,
}

impl Normalizer {
    /// Normalization of `batch` straight from its arrays; `None` when a column the settings
    /// read has a shape this path does not know (the caller then goes row by row).
    /// `projected`: the batch was read with [`Normalizer::projection`].
    pub(crate) fn columnar<'a>(
        &'a self,
        batch: &'a RecordBatch,
        projected: bool,
    ) -> Option<BatchNormalizer<'a>> {
        let schema = batch.schema_ref();
        let column = |name: &str| -> Option<&'a dyn Array> {
            schema.index_of(name).ok().map(|i| batch.column(i).as_ref())
        };
        let turns = |field: &'a str, projected: bool| {
            let array = column(field)?;
            TurnColumn::new(field, array, self, projected).map(Body::Turns)
        };
        let plain = |field: &str, alpaca: bool| -> Option<Body<'a>> {
            let text = Text::of(column(field)?)?;
            let input = match column(ALPACA_INPUT) {
                Some(input) if alpaca => Some(Text::of(input)?),
                _ => None,
            };
            Some(Body::Plain { text, input })
        };
        // Tool definitions are JSON of any shape: the generic path reads them.
        if column(TOOLS_FIELD).is_some() {
            return None;
        }
        if let Some(placeholder) = &self.resolve_placeholder {
            // A batch with rows to resolve from another dataset goes the JSON way, where they
            // are rewritten first; a batch without any is normalized here.
            let prompts = Text::of(column(self.prompt_field.as_deref()?)?)?;
            if (0..batch.num_rows()).any(|row| prompts.get(row) == Some(placeholder.as_str())) {
                return None;
            }
        }
        let missing = |field: &str| Body::Missing(DropReason::MissingField(field.to_owned()));
        let body = if let Some(field) = &self.messages_field {
            match column(field) {
                Some(_) => turns(field, projected)?,
                None => missing(field),
            }
        } else if let Some(field) = &self.prompt_field {
            match column(field) {
                Some(_) => plain(field, false)?,
                None => missing(field),
            }
        } else if let Some(field) = MESSAGES_FIELDS.iter().find(|f| column(f).is_some()) {
            // Without `messages-field` the generic path gets whole structs: no skipping.
            turns(field, false)?
        } else if let Some(field) = PROMPT_FIELDS.iter().find(|f| column(f).is_some()) {
            plain(field, *field == "instruction")?
        } else {
            Body::Missing(no_known_field())
        };
        let filters = self
            .filter
            .fields()
            .filter_map(|field| column(field).map(|array| (field.as_str(), Cell::of(array))))
            .collect();
        let id = self.id_field.as_deref().and_then(column).map(Cell::of);
        Some(BatchNormalizer {
            normalizer: self,
            body,
            filters,
            id,
            turns: Vec::new(),
        })
    }
}

impl<'a> BatchNormalizer<'a> {
    /// Normalizes `row` of the batch into `kept` (cleared first); the row's tool definitions,
    /// as the generic path returns them (a batch with any goes that way).
    pub(crate) fn normalize_into(
        &mut self,
        row: usize,
        kept: &mut Vec<Turn<'a>>,
    ) -> Result<Option<Value>, DropReason> {
        let normalizer = self.normalizer;
        let filters = &self.filters;
        normalizer.filter.check(|field| {
            filters
                .iter()
                .find(|(name, _)| *name == field)
                .and_then(|(_, cell)| cell.compare_text(row))
        })?;
        match &self.body {
            Body::Missing(reason) => return Err(reason.clone()),
            Body::Turns(column) => {
                column.read(row, &mut self.turns)?;
                normalizer.select(self.turns.drain(..), kept)?;
            }
            Body::Plain { text, input } => {
                let text = Cow::Borrowed(text.get(row).unwrap_or(""));
                let text = match input {
                    Some(input) => with_alpaca_input(text, Some(input.get(row).unwrap_or(""))),
                    None => text,
                };
                let turn = normalizer.plain(text)?;
                normalizer.select([turn], kept)?;
            }
        }
        normalizer.check_bounds(kept)?;
        Ok(None)
    }

    /// The row's own key (`id-field`), as the generic path reads it.
    pub(crate) fn source_key(&self, row: usize) -> Option<String> {
        self.id.as_ref().and_then(|cell| cell.key(row))
    }
}
