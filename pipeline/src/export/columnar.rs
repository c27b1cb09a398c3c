//! The Parquet form of an export: rows buffered into Arrow record batches and written with
//! zstd compression. A list of turns is `list<struct<…>>` with the schema's keys (`role`,
//! `content`, `reasoning_content` nullable; `from`, `value` for ShareGPT), the shape
//! `datasets` and pyarrow read as a list of dicts. Memory stays bounded: a batch is at most
//! [`BATCH_ROWS`] rows and a row group is flushed once its encoded size passes
//! [`ROW_GROUP_BYTES`].

use std::sync::Arc;

use anyhow::Context as _;
use arrow_array::{ArrayRef, Int64Array, ListArray, RecordBatch, StringArray, StructArray};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::table::{Cell, Column, Kind, Turn, TurnKeys};

const BATCH_ROWS: usize = 1024;
const ROW_GROUP_BYTES: usize = 64 << 20;

fn turn_fields(keys: &TurnKeys) -> Fields {
    let mut fields = vec![
        Field::new(keys.role, DataType::Utf8, false),
        Field::new(keys.content, DataType::Utf8, false),
    ];
    if let Some(reasoning) = keys.reasoning {
        fields.push(Field::new(reasoning, DataType::Utf8, true));
    }
    Fields::from(fields)
}

fn turn_item(keys: &TurnKeys) -> Arc<Field> {
    Arc::new(Field::new(
        "item",
        DataType::Struct(turn_fields(keys)),
        false,
    ))
}

fn id_item() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::Int64, false))
}

fn ids_array(lists: &[&Vec<u32>]) -> anyhow::Result<ListArray> {
    let values =
        Int64Array::from_iter_values(lists.iter().flat_map(|l| l.iter().map(|&n| i64::from(n))));
    let offsets = OffsetBuffer::from_lengths(lists.iter().map(|l| l.len()));
    Ok(ListArray::try_new(
        id_item(),
        offsets,
        Arc::new(values),
        None,
    )?)
}

/// The Arrow schema of `columns`.
pub(super) fn schema(columns: &[Column]) -> SchemaRef {
    let fields: Vec<Field> = columns
        .iter()
        .map(|column| match column.kind {
            Kind::Text => Field::new(column.name, DataType::Utf8, false),
            Kind::OptionalText => Field::new(column.name, DataType::Utf8, true),
            Kind::Count => Field::new(column.name, DataType::Int64, true),
            Kind::Turns(keys) => Field::new(column.name, DataType::List(turn_item(keys)), false),
            Kind::Ids => Field::new(column.name, DataType::List(id_item()), false),
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// Writes rows to a Parquet file.
pub(super) struct ParquetSink {
    writer: ArrowWriter<fs_err::File>,
    columns: &'static [Column],
    schema: SchemaRef,
    pending: Vec<Vec<Cell>>,
}

impl ParquetSink {
    pub(super) fn new(
        file: fs_err::File,
        columns: &'static [Column],
    ) -> anyhow::Result<ParquetSink> {
        let schema = schema(columns);
        let level = ZstdLevel::try_new(3).context("zstd level 3 is valid")?;
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .build();
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(properties))
            .context("cannot start the Parquet file")?;
        Ok(ParquetSink {
            writer,
            columns,
            schema,
            pending: Vec::with_capacity(BATCH_ROWS),
        })
    }

    pub(super) fn push(&mut self, row: Vec<Cell>) -> anyhow::Result<()> {
        self.pending.push(row);
        if self.pending.len() >= BATCH_ROWS {
            self.write_pending()?;
        }
        Ok(())
    }

    fn write_pending(&mut self) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = record_batch(&self.schema, self.columns, &self.pending)?;
        self.pending.clear();
        self.writer
            .write(&batch)
            .context("cannot write a Parquet batch")?;
        if self.writer.in_progress_size() > ROW_GROUP_BYTES {
            self.writer
                .flush()
                .context("cannot write a Parquet row group")?;
        }
        Ok(())
    }

    pub(super) fn finish(mut self) -> anyhow::Result<()> {
        self.write_pending()?;
        let file = self
            .writer
            .into_inner()
            .context("cannot finish the Parquet file")?;
        file.sync_all()?;
        Ok(())
    }
}

fn count(value: Option<u64>) -> Option<i64> {
    value.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

/// Column `index` of `rows`, each row's cell at that index as `T` (a cell of another kind
/// is a bug in the schema's mapping, reported rather than written wrong).
fn cells<'a, T>(
    rows: &'a [Vec<Cell>],
    index: usize,
    name: &str,
    pick: impl Fn(&'a Cell) -> Option<T>,
) -> anyhow::Result<Vec<T>> {
    rows.iter()
        .map(|row| {
            row.get(index)
                .and_then(&pick)
                .with_context(|| format!("a row has no value of the right kind for `{name}`"))
        })
        .collect()
}

fn turns_array(keys: &TurnKeys, lists: &[&Vec<Turn>]) -> anyhow::Result<ListArray> {
    let turns = || lists.iter().flat_map(|turns| turns.iter());
    let mut arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            turns().map(|t| t.role.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            turns().map(|t| t.content.as_str()),
        )),
    ];
    if keys.reasoning.is_some() {
        let reasoning: StringArray = turns().map(|t| t.reasoning.as_deref()).collect();
        arrays.push(Arc::new(reasoning));
    }
    let structs = StructArray::try_new(turn_fields(keys), arrays, None)?;
    let offsets = OffsetBuffer::from_lengths(lists.iter().map(|turns| turns.len()));
    Ok(ListArray::try_new(
        turn_item(keys),
        offsets,
        Arc::new(structs),
        None,
    )?)
}

/// The rows as one Arrow batch of [`schema`].
pub(super) fn record_batch(
    schema: &SchemaRef,
    columns: &[Column],
    rows: &[Vec<Cell>],
) -> anyhow::Result<RecordBatch> {
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for (index, column) in columns.iter().enumerate() {
        let name = column.name;
        let array: ArrayRef = match column.kind {
            Kind::Text => Arc::new(StringArray::from_iter_values(cells(
                rows,
                index,
                name,
                |c| match c {
                    Cell::Text(text) => Some(text.as_str()),
                    _ => None,
                },
            )?)),
            Kind::OptionalText => {
                Arc::new(StringArray::from(cells(rows, index, name, |c| match c {
                    Cell::OptionalText(text) => Some(text.as_deref()),
                    _ => None,
                })?))
            }
            Kind::Count => Arc::new(Int64Array::from(cells(rows, index, name, |c| match c {
                Cell::Count(n) => Some(count(*n)),
                _ => None,
            })?)),
            Kind::Turns(keys) => Arc::new(turns_array(
                keys,
                &cells(rows, index, name, |c| match c {
                    Cell::Turns(turns) => Some(turns),
                    _ => None,
                })?,
            )?),
            Kind::Ids => Arc::new(ids_array(&cells(rows, index, name, |c| match c {
                Cell::Ids(ids) => Some(ids),
                _ => None,
            })?)?),
        };
        arrays.push(array);
    }
    Ok(RecordBatch::try_new(schema.clone(), arrays)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::ExportSchema;
    use crate::export::{ExportMessage, ExportRow};
    use arrow_array::Array as _;

    fn row(id: &str, answer: &str, reasoning: Option<&str>) -> ExportRow {
        ExportRow {
            id: id.into(),
            source: "alpha".into(),
            source_key: Some(format!("row-{id}")),
            messages: vec![
                ExportMessage {
                    role: "user".into(),
                    content: format!("q {id}"),
                    reasoning_content: None,
                    answer: None,
                    ..ExportMessage::default()
                },
                ExportMessage {
                    role: "assistant".into(),
                    content: answer.into(),
                    reasoning_content: reasoning.map(str::to_owned),
                    answer: None,
                    ..ExportMessage::default()
                },
            ],
            tools: None,
            reasoning_content: reasoning.map(str::to_owned),
            finish_reason: Some("stop".into()),
            model: "m".into(),
            prompt_tokens: Some(3),
            completion_tokens: None,
            sample: 0,
            settings: None,
        }
    }

    #[test]
    fn a_batch_holds_the_messages_as_a_list_of_structs() {
        let columns = ExportSchema::Messages.columns();
        let rows = [row("a", "A", Some("think")), row("b", "B", None)]
            .map(|r| ExportSchema::Messages.cells(r).expect("cells"));
        let batch = record_batch(&schema(columns), columns, &rows).expect("batch");
        assert_eq!(batch.num_rows(), 2);
        let lists = batch
            .column_by_name("messages")
            .and_then(|c| c.as_any().downcast_ref::<ListArray>())
            .expect("messages is a list");
        let second = lists.value(1);
        let second = second
            .as_any()
            .downcast_ref::<StructArray>()
            .expect("struct items");
        let contents = second
            .column_by_name("content")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .expect("content strings");
        assert_eq!((contents.value(0), contents.value(1)), ("q b", "B"));
        let reasoning = second
            .column_by_name("reasoning_content")
            .expect("reasoning column");
        assert_eq!(reasoning.null_count(), 2);
        let completion = batch
            .column_by_name("completion_tokens")
            .expect("completion_tokens");
        assert_eq!(completion.null_count(), 2);
    }
}

#[cfg(test)]
mod sharegpt_tests {
    use super::*;
    use crate::cli::ExportSchema;

    #[test]
    fn sharegpt_turns_are_from_and_value_without_reasoning() {
        let columns = ExportSchema::Sharegpt.columns();
        let turns = vec![Turn {
            role: "human".into(),
            content: "hi".into(),
            ..Turn::default()
        }];
        let rows = [vec![
            Cell::Text("a".into()),
            Cell::OptionalText(None),
            Cell::Turns(turns),
        ]];
        let batch = record_batch(&schema(columns), columns, &rows).expect("batch");
        let field = batch
            .schema()
            .field_with_name("conversations")
            .cloned()
            .expect("field");
        let DataType::List(item) = field.data_type() else {
            panic!("a list: {field:?}")
        };
        let DataType::Struct(fields) = item.data_type() else {
            panic!("structs: {item:?}")
        };
        let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["from", "value"]);
    }
}
