//! Parquet fixtures built at test time with the Arrow writer, in the shapes pyarrow writes for
//! the Hub's datasets (strings, integers, booleans, UTC timestamps, `list<struct<…>>` turns).

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BooleanArray, Int64Array, ListArray, RecordBatch, StringArray, StructArray,
    TimestampMicrosecondArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::arrow::ArrowWriter;

/// One column of a fixture.
pub enum Col {
    Str(Vec<Option<&'static str>>),
    Int(Vec<Option<i64>>),
    Bool(Vec<bool>),
    /// Microseconds since the epoch, zoned UTC.
    Time(Vec<i64>),
    /// `list<struct<keys…>>` of string fields; `None` is a null list.
    Turns {
        keys: &'static [&'static str],
        rows: Vec<Option<Vec<Vec<&'static str>>>>,
    },
    /// Like `Turns`, each turn also carrying the metadata WildChat's turns have, of every
    /// type a reader must step over: `header: struct<accept-language, user-agent>`,
    /// `timestamp` (UTC), `toxic` and `redacted` (booleans), `turn_identifier` (int64).
    TurnsWithMeta {
        keys: &'static [&'static str],
        rows: Vec<Option<Vec<Vec<&'static str>>>>,
    },
}

/// Per-turn metadata columns (see [`Col::TurnsWithMeta`]) for `n` turns.
fn turn_meta(n: usize) -> Vec<(Field, ArrayRef)> {
    let header_fields: Fields = ["accept-language", "user-agent"]
        .iter()
        .map(|k| Field::new(*k, DataType::Utf8, true))
        .collect();
    let header = StructArray::new(
        header_fields.clone(),
        vec![
            Arc::new(StringArray::from(vec![Some("en-US,en;q=0.9"); n])) as ArrayRef,
            Arc::new(StringArray::from(vec![Some("Mozilla/5.0"); n])) as ArrayRef,
        ],
        None,
    );
    let stamps: Vec<i64> = (0..n as i64).map(|i| 1_681_000_000_000_000 + i).collect();
    let timestamp = TimestampMicrosecondArray::from(stamps).with_timezone("UTC");
    let ids: Vec<Option<i64>> = (0..n as i64).map(|i| Some(1000 + i)).collect();
    vec![
        (
            Field::new("header", DataType::Struct(header_fields), true),
            Arc::new(header) as ArrayRef,
        ),
        (
            Field::new("timestamp", timestamp.data_type().clone(), true),
            Arc::new(timestamp),
        ),
        (
            Field::new("toxic", DataType::Boolean, true),
            Arc::new(BooleanArray::from(vec![false; n])),
        ),
        (
            Field::new("redacted", DataType::Boolean, true),
            Arc::new(BooleanArray::from(
                (0..n).map(|i| i % 2 == 1).collect::<Vec<_>>(),
            )),
        ),
        (
            Field::new("turn_identifier", DataType::Int64, true),
            Arc::new(Int64Array::from(ids)),
        ),
    ]
}

fn turns(keys: &[&str], rows: &[Option<Vec<Vec<&str>>>], meta: bool) -> (ArrayRef, DataType) {
    let mut fields: Vec<Field> = keys
        .iter()
        .map(|k| Field::new(*k, DataType::Utf8, true))
        .collect();
    let flat: Vec<&Vec<&str>> = rows.iter().flatten().flatten().collect();
    let mut children: Vec<ArrayRef> = (0..keys.len())
        .map(|i| {
            let values: Vec<Option<&str>> = flat.iter().map(|turn| turn.get(i).copied()).collect();
            Arc::new(StringArray::from(values)) as ArrayRef
        })
        .collect();
    if meta {
        for (field, array) in turn_meta(flat.len()) {
            fields.push(field);
            children.push(array);
        }
    }
    let fields = Fields::from(fields);
    let structs = StructArray::new(fields.clone(), children, None);
    let item = Arc::new(Field::new("item", DataType::Struct(fields), true));
    let lengths = rows.iter().map(|r| r.as_ref().map_or(0, Vec::len));
    let nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<bool>>());
    let list = ListArray::new(
        Arc::clone(&item),
        OffsetBuffer::from_lengths(lengths),
        Arc::new(structs),
        Some(nulls),
    );
    (Arc::new(list), DataType::List(item))
}

/// A Parquet file (snappy, small row groups) with the given columns.
pub fn parquet(columns: Vec<(&str, Col)>) -> Vec<u8> {
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for (name, column) in columns {
        let (array, data_type): (ArrayRef, DataType) = match column {
            Col::Str(v) => (Arc::new(StringArray::from(v)), DataType::Utf8),
            Col::Int(v) => (Arc::new(Int64Array::from(v)), DataType::Int64),
            Col::Bool(v) => (Arc::new(BooleanArray::from(v)), DataType::Boolean),
            Col::Time(v) => {
                let array = TimestampMicrosecondArray::from(v).with_timezone("UTC");
                let data_type = array.data_type().clone();
                (Arc::new(array), data_type)
            }
            Col::Turns { keys, rows } => turns(keys, &rows, false),
            Col::TurnsWithMeta { keys, rows } => turns(keys, &rows, true),
        };
        fields.push(Field::new(name, data_type, true));
        arrays.push(array);
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(Arc::clone(&schema), arrays).expect("consistent columns");
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .set_max_row_group_row_count(Some(2))
        .build();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, schema, Some(properties)).expect("writer");
    writer.write(&batch).expect("write batch");
    writer.close().expect("close");
    bytes
}
