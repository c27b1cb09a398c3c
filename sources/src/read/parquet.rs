//! Parquet through the Arrow reader, one record batch at a time: memory follows the batch size,
//! not the row group (field notes §6). Only the columns normalization reads are decoded, so a
//! dataset's long answer columns (`output`, `response`) cost nothing.

use std::io;
use std::path::Path;

use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Map, Value};

use super::open::Row;
use super::projection::{Projection, projected_values};

/// Rows decoded at once (~20 MB for chat datasets).
pub const PARQUET_BATCH_SIZE: usize = 1024;

fn invalid(error: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// Streams the rows of the Parquet file at `path` to `on_row`, decoding only what `projection`
/// asks for when given.
pub fn for_each_parquet_row(
    path: &Path,
    projection: Option<&Projection>,
    on_row: &mut dyn FnMut(Row),
) -> io::Result<()> {
    let (file, _) = fs_err::File::open(path)?.into_parts();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(invalid)?;
    let builder = match projection.map(|p| &p.columns) {
        Some(columns) => {
            let roots: Vec<usize> = builder
                .schema()
                .fields()
                .iter()
                .enumerate()
                .filter(|(_, field)| columns.contains(field.name()))
                .map(|(i, _)| i)
                .collect();
            let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
            builder.with_projection(mask)
        }
        None => builder,
    };
    let reader = builder
        .with_batch_size(PARQUET_BATCH_SIZE)
        .build()
        .map_err(invalid)?;
    let mut next_row = 0u64;
    for batch in reader {
        let batch = batch.map_err(invalid)?;
        let schema = batch.schema();
        let mut values: Vec<Vec<Value>> = schema
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(field, column)| projected_values(field.name(), column.as_ref(), projection))
            .collect();
        for row in 0..batch.num_rows() {
            let object: Map<String, Value> = schema
                .fields()
                .iter()
                .zip(values.iter_mut())
                .map(|(field, column)| (field.name().clone(), std::mem::take(&mut column[row])))
                .collect();
            on_row((next_row, Ok(Value::Object(object))));
            next_row += 1;
        }
    }
    Ok(())
}
