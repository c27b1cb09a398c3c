//! Parquet through the Arrow reader, one record batch at a time: memory follows the batch size,
//! not the row group (the Arrow reader decodes a batch, never a whole row group). Only the columns normalization reads are decoded, so a
//! dataset's long answer columns (`output`, `response`) cost nothing, and of a turn list only
//! the role and content fields (WildChat's turns carry a dozen more).
//!
//! Parquet needs random access (its footer is at the end), so a `.parquet.zst` or `.parquet.gz`
//! is first decompressed, streaming, into an anonymous temporary file in the system temporary
//! directory (`TMPDIR`): it has no name, and the OS frees it when it is closed, even after a
//! crash. It takes the decompressed size on that disk while the file is read.
//!
//! A string column with invalid UTF-8 in one row cannot be read past: the Arrow reader checks
//! every UTF8-annotated column (even one read as binary) and fails the whole batch, with no way
//! to skip the value. Such a file stops with [`InvalidUtf8Column`], which names the column, the
//! row the reader stopped at and the first row not delivered (that of the failed batch), and
//! says how to fix the file. (Dropping just that row would mean decoding such columns ourselves.)

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{ConvertedType, LogicalType};
use parquet::schema::types::SchemaDescriptor;
use serde_json::{Map, Value};

use super::open::{Row, is_compressed, open_decoded};
use super::projection::{Projection, TurnsProjection, projected_values};
use crate::prompt::TOOL_KEYS;

/// Rows decoded at once (~20 MB for chat datasets).
pub const PARQUET_BATCH_SIZE: usize = 1024;

fn invalid(error: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// The compressed stream of a `.parquet.zst`/`.parquet.gz` ended early or is damaged.
#[derive(Debug, thiserror::Error)]
#[error("the compressed data is truncated or corrupt (download or copy the file again)")]
pub(crate) struct DecompressError {
    #[source]
    pub(crate) source: io::Error,
}

/// The decompressed copy of a compressed Parquet file could not be written.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot write the decompressed Parquet data to a temporary file in `{}` (set `TMPDIR` to a \
     directory with room for it)",
    directory.display()
)]
pub(crate) struct TempFileError {
    pub(crate) directory: PathBuf,
    #[source]
    pub(crate) source: io::Error,
}

/// The Parquet file at `path`, ready for random access: the file itself, or its decompressed
/// copy in an anonymous temporary file.
fn open_parquet(path: &Path) -> io::Result<File> {
    if !is_compressed(path) {
        return Ok(fs_err::File::open(path)?.into_parts().0);
    }
    let mut decoded = open_decoded(path)?;
    let temp_error = |source: io::Error| {
        let kind = source.kind();
        let directory = std::env::temp_dir();
        io::Error::new(kind, TempFileError { directory, source })
    };
    let mut copy = tempfile::tempfile().map_err(temp_error)?;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = match decoded.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(invalid(DecompressError { source })),
        };
        copy.write_all(&buffer[..n]).map_err(temp_error)?;
    }
    copy.rewind().map_err(temp_error)?;
    Ok(copy)
}

/// A string column holds bytes that are not UTF-8; the Arrow reader cannot skip them.
#[derive(Debug, thiserror::Error)]
#[error(
    "column `{column}` holds invalid UTF-8 (reading stopped at row {row}); the Parquet reader \
     cannot skip a value, so rows {unread_from} onwards are not read: rewrite the file with that \
     column decoded as UTF-8 (pyarrow: read it as binary, decode with `errors=\"replace\"`), or \
     leave the file out of the source"
)]
pub struct InvalidUtf8Column {
    pub column: String,
    /// The row reading the column alone stopped at: the bad value's, or the first of its row
    /// group when the value is in the column chunk's dictionary.
    pub row: u64,
    /// The first row of the batch that failed; rows before it were delivered.
    pub unread_from: u64,
}

/// Whether a reader error is its UTF-8 check (the parquet crate has no typed error for it).
fn heuristic_is_invalid_utf8(error: &impl std::error::Error) -> bool {
    error.to_string().contains("non UTF-8 data")
}

/// The string column and row a batch starting at `first_row` failed on for invalid UTF-8:
/// each string leaf of `mask` is read alone, one row at a time, through that batch.
fn locate_invalid_utf8(
    file: &File,
    mask: &ProjectionMask,
    first_row: u64,
) -> Option<InvalidUtf8Column> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(file.try_clone().ok()?).ok()?;
    let schema = builder.parquet_schema();
    let strings = (0..schema.num_columns()).filter(|&leaf| {
        let column = schema.column(leaf);
        mask.leaf_included(leaf)
            && (column.converted_type() == ConvertedType::UTF8
                || matches!(column.logical_type_ref(), Some(LogicalType::String)))
    });
    for leaf in strings {
        let reader = ParquetRecordBatchReaderBuilder::try_new(file.try_clone().ok()?)
            .ok()?
            .with_projection(ProjectionMask::leaves(schema, [leaf]))
            .with_offset(usize::try_from(first_row).ok()?)
            .with_limit(PARQUET_BATCH_SIZE)
            .with_batch_size(1)
            .build()
            .ok()?;
        for (batch, row) in reader.zip(first_row..) {
            if batch.is_err_and(|e| heuristic_is_invalid_utf8(&e)) {
                let column = schema.column(leaf).path().string();
                return Some(InvalidUtf8Column {
                    column,
                    row,
                    unread_from: first_row,
                });
            }
        }
    }
    None
}

/// Streams the record batches of the Parquet file at `path` to `on_batch`, with the index of
/// each batch's first row, decoding only what `projection` asks for when given: its columns,
/// and of the turn list only the role and content fields (see [`projection_mask`]).
pub fn for_each_parquet_batch(
    path: &Path,
    projection: Option<&Projection>,
    on_batch: &mut dyn FnMut(&RecordBatch, u64),
) -> io::Result<()> {
    let file = open_parquet(path)?;
    let spare = file.try_clone()?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(invalid)?;
    let mask = match projection {
        Some(projection) => projection_mask(builder.schema(), builder.parquet_schema(), projection),
        None => ProjectionMask::all(),
    };
    let reader = builder
        .with_projection(mask.clone())
        .with_batch_size(PARQUET_BATCH_SIZE)
        .build()
        .map_err(invalid)?;
    let mut next_row = 0u64;
    for batch in reader {
        let batch = batch.map_err(|error| {
            match heuristic_is_invalid_utf8(&error)
                .then(|| locate_invalid_utf8(&spare, &mask, next_row))
                .flatten()
            {
                Some(located) => invalid(located),
                None => invalid(error),
            }
        })?;
        on_batch(&batch, next_row);
        next_row += batch.num_rows() as u64;
    }
    Ok(())
}

/// The top-level column names of the Parquet file at `path` (read from its footer).
pub fn parquet_columns(path: &Path) -> io::Result<Vec<String>> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(open_parquet(path)?).map_err(invalid)?;
    Ok(builder
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect())
}

/// The rows of one batch as JSON objects, numbered from `first_row`.
pub fn batch_rows(
    batch: &RecordBatch,
    projection: Option<&Projection>,
    first_row: u64,
    on_row: &mut dyn FnMut(Row),
) {
    let schema = batch.schema();
    let mut values: Vec<Vec<Value>> = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, column)| projected_values(field.name(), column.as_ref(), projection))
        .collect();
    for (row, index) in (0..batch.num_rows()).zip(first_row..) {
        let object: Map<String, Value> = schema
            .fields()
            .iter()
            .zip(values.iter_mut())
            .map(|(field, column)| (field.name().clone(), std::mem::take(&mut column[row])))
            .collect();
        on_row((index, Ok(Value::Object(object))));
    }
}

/// Streams the rows of the Parquet file at `path` to `on_row`, decoding only what `projection`
/// asks for when given.
pub fn for_each_parquet_row(
    path: &Path,
    projection: Option<&Projection>,
    on_row: &mut dyn FnMut(Row),
) -> io::Result<()> {
    for_each_parquet_batch(path, projection, &mut |batch, first_row| {
        batch_rows(batch, projection, first_row, on_row);
    })
}

/// The leaf columns to decode: every leaf of the projected columns, except that of the turn
/// list only the fields named by the role and content keys, and the tool fields, are read (WildChat's turns carry a
/// dozen metadata fields). Leaves are matched to the Arrow struct's fields by counting, in
/// schema order; when the counts disagree the whole column is read.
fn projection_mask(
    arrow: &SchemaRef,
    parquet: &SchemaDescriptor,
    projection: &Projection,
) -> ProjectionMask {
    let mut leaves = Vec::new();
    let mut next_leaf = 0usize;
    for field in arrow.fields() {
        let count = leaf_count(field.data_type());
        let range = next_leaf..next_leaf + count;
        next_leaf += count;
        if !projection.columns.contains(field.name()) {
            continue;
        }
        let turn_fields = projection
            .turns
            .as_ref()
            .filter(|turns| &turns.field == field.name())
            .and_then(|turns| turn_leaves(field.data_type(), range.start, turns));
        leaves.extend(turn_fields.unwrap_or_else(|| range.collect()));
    }
    if next_leaf != parquet.num_columns() {
        // The Arrow schema does not map leaf by leaf (an unusual encoding): whole columns.
        let roots = arrow
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, field)| projection.columns.contains(field.name()))
            .map(|(i, _)| i);
        return ProjectionMask::roots(parquet, roots);
    }
    ProjectionMask::leaves(parquet, leaves)
}

/// The leaves of the role, content and tool fields of a `list<struct>` turn column starting at leaf
/// `first`; `None` when it is not one, or has neither field.
fn turn_leaves(data_type: &DataType, first: usize, turns: &TurnsProjection) -> Option<Vec<usize>> {
    let item = match data_type {
        DataType::List(item) | DataType::LargeList(item) => item,
        _ => return None,
    };
    let DataType::Struct(fields) = item.data_type() else {
        return None;
    };
    let mut leaves = Vec::new();
    let mut next = first;
    for field in fields {
        let count = leaf_count(field.data_type());
        let wanted = turns.role_keys.contains(field.name())
            || turns.content_keys.contains(field.name())
            || TOOL_KEYS.contains(&field.name().as_str());
        if wanted {
            leaves.extend(next..next + count);
        }
        next += count;
    }
    (!leaves.is_empty()).then_some(leaves)
}

/// How many Parquet leaf columns an Arrow type is stored in.
fn leaf_count(data_type: &DataType) -> usize {
    match data_type {
        DataType::Struct(fields) => fields.iter().map(|f| leaf_count(f.data_type())).sum(),
        DataType::List(item)
        | DataType::LargeList(item)
        | DataType::ListView(item)
        | DataType::LargeListView(item)
        | DataType::FixedSizeList(item, _)
        | DataType::Map(item, _) => leaf_count(item.data_type()),
        _ => 1,
    }
}
