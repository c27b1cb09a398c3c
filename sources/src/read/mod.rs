//! Streaming row readers: JSON Lines, JSON arrays and Parquet, each optionally compressed.
//! Files are never loaded whole; a malformed row is a counted [`RowError`], never a crash, and a
//! file that cannot be read on (corrupt Parquet, truncated zstd) is an `io::Error` the caller
//! names the file in.

mod arrow_value;
mod json_array;
mod jsonl;
mod open;
mod parquet;
mod projection;
mod rows;

pub(crate) use arrow_value::column_values;
pub use json_array::{JsonArrayError, MAX_ELEMENT_BYTES, for_each_array_row};
pub use jsonl::JsonlRows;
pub use open::{Row, RowError, open_decoded};
pub use parquet::{
    InvalidUtf8Column, PARQUET_BATCH_SIZE, batch_rows, for_each_parquet_batch,
    for_each_parquet_row, parquet_columns,
};
pub use projection::{Projection, TurnsProjection};
pub use rows::{Columns, for_each_row, format_of};
