//! The Parquet form of an export: rows buffered into Arrow record batches and written with
//! zstd compression. `messages` is `list<struct<role: string, content: string,
//! reasoning_content: string (nullable)>>`, the shape `datasets` and pyarrow read as a list
//! of dicts. Memory stays bounded: a batch is at most [`BATCH_ROWS`] rows and a row group is
//! flushed once its encoded size passes [`ROW_GROUP_BYTES`].

use std::sync::Arc;

use anyhow::Context as _;
use arrow_array::{ArrayRef, Int64Array, ListArray, RecordBatch, StringArray, StructArray};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::ExportRow;

const BATCH_ROWS: usize = 1024;
const ROW_GROUP_BYTES: usize = 64 << 20;

fn message_fields() -> Fields {
    Fields::from(vec![
        Field::new("role", DataType::Utf8, false),
        Field::new("content", DataType::Utf8, false),
        Field::new("reasoning_content", DataType::Utf8, true),
    ])
}

fn message_item() -> Arc<Field> {
    Arc::new(Field::new(
        "item",
        DataType::Struct(message_fields()),
        false,
    ))
}

/// The export's Arrow schema.
pub(super) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("source_key", DataType::Utf8, true),
        Field::new("messages", DataType::List(message_item()), false),
        Field::new("reasoning_content", DataType::Utf8, true),
        Field::new("finish_reason", DataType::Utf8, true),
        Field::new("model", DataType::Utf8, false),
        Field::new("prompt_tokens", DataType::Int64, true),
        Field::new("completion_tokens", DataType::Int64, true),
    ]))
}

/// Writes rows to a Parquet file.
pub(super) struct ParquetSink {
    writer: ArrowWriter<fs_err::File>,
    schema: SchemaRef,
    pending: Vec<ExportRow>,
}

impl ParquetSink {
    pub(super) fn new(file: fs_err::File) -> anyhow::Result<ParquetSink> {
        let schema = schema();
        let level = ZstdLevel::try_new(3).context("zstd level 3 is valid")?;
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .build();
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(properties))
            .context("cannot start the Parquet file")?;
        Ok(ParquetSink {
            writer,
            schema,
            pending: Vec::with_capacity(BATCH_ROWS),
        })
    }

    pub(super) fn push(&mut self, row: ExportRow) -> anyhow::Result<()> {
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
        let batch = record_batch(&self.schema, &self.pending)?;
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

fn tokens(value: Option<u64>) -> Option<i64> {
    value.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

/// The rows as one Arrow batch of [`schema`].
pub(super) fn record_batch(schema: &SchemaRef, rows: &[ExportRow]) -> anyhow::Result<RecordBatch> {
    let messages = rows.iter().flat_map(|r| &r.messages);
    let roles = StringArray::from_iter_values(messages.clone().map(|m| m.role.as_str()));
    let contents = StringArray::from_iter_values(messages.clone().map(|m| m.content.as_str()));
    let reasoning: StringArray = messages.map(|m| m.reasoning_content.as_deref()).collect();
    let structs = StructArray::try_new(
        message_fields(),
        vec![
            Arc::new(roles) as ArrayRef,
            Arc::new(contents),
            Arc::new(reasoning),
        ],
        None,
    )?;
    let offsets = OffsetBuffer::from_lengths(rows.iter().map(|r| r.messages.len()));
    let lists = ListArray::try_new(message_item(), offsets, Arc::new(structs), None)?;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.id.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.source.as_str()),
        )),
        Arc::new(
            rows.iter()
                .map(|r| r.source_key.as_deref())
                .collect::<StringArray>(),
        ),
        Arc::new(lists),
        Arc::new(
            rows.iter()
                .map(|r| r.reasoning_content.as_deref())
                .collect::<StringArray>(),
        ),
        Arc::new(
            rows.iter()
                .map(|r| r.finish_reason.as_deref())
                .collect::<StringArray>(),
        ),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.model.as_str()),
        )),
        Arc::new(
            rows.iter()
                .map(|r| tokens(r.prompt_tokens))
                .collect::<Int64Array>(),
        ),
        Arc::new(
            rows.iter()
                .map(|r| tokens(r.completion_tokens))
                .collect::<Int64Array>(),
        ),
    ];
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::ExportMessage;
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
                },
                ExportMessage {
                    role: "assistant".into(),
                    content: answer.into(),
                    reasoning_content: reasoning.map(str::to_owned),
                },
            ],
            reasoning_content: reasoning.map(str::to_owned),
            finish_reason: Some("stop".into()),
            model: "m".into(),
            prompt_tokens: Some(3),
            completion_tokens: None,
        }
    }

    #[test]
    fn a_batch_holds_the_messages_as_a_list_of_structs() {
        let batch = record_batch(
            &schema(),
            &[row("a", "A", Some("think")), row("b", "B", None)],
        )
        .expect("batch");
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
