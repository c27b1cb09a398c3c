//! Arrow arrays → `serde_json` values, so a Parquet row looks exactly like the same row read from
//! JSON: nested `list<struct>` columns become arrays of objects, timestamps ISO-8601 strings,
//! binary columns text when they are UTF-8.

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::temporal_conversions::{as_date, as_datetime};
use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, Date64Type, Float32Type, Float64Type, Int8Type, Int16Type,
    Int32Type, Int64Type, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_schema::{DataType, TimeUnit};
use serde_json::{Map, Number, Value};

/// Every value of `array`, in row order.
pub(crate) fn column_values(array: &dyn Array) -> Vec<Value> {
    if let DataType::Dictionary(..) = array.data_type() {
        // Decode the dictionary once instead of once per row.
        let dictionary = array.as_any_dictionary();
        let values = column_values(dictionary.values().as_ref());
        return dictionary
            .normalized_keys()
            .into_iter()
            .enumerate()
            .map(|(row, key)| {
                if array.is_null(row) {
                    Value::Null
                } else {
                    values.get(key).cloned().unwrap_or(Value::Null)
                }
            })
            .collect();
    }
    (0..array.len()).map(|row| value_at(array, row)).collect()
}

fn number<T: ArrowPrimitiveType>(array: &dyn Array, row: usize) -> Value
where
    T::Native: Into<Number>,
{
    Value::Number(array.as_primitive::<T>().value(row).into())
}

fn float(value: f64) -> Value {
    Number::from_f64(value).map_or(Value::Null, Value::Number)
}

fn timestamp<T: ArrowPrimitiveType<Native = i64>>(
    array: &dyn Array,
    row: usize,
    utc: bool,
) -> Value {
    let raw = array.as_primitive::<T>().value(row);
    match as_datetime::<T>(raw) {
        Some(time) => {
            let mut text = time.format("%Y-%m-%dT%H:%M:%S%.f").to_string();
            if utc {
                // Arrow stores zoned timestamps as UTC instants.
                text.push('Z');
            }
            Value::String(text)
        }
        None => Value::Null,
    }
}

fn date(days_or_millis: Option<impl std::fmt::Display>) -> Value {
    days_or_millis.map_or(Value::Null, |d| Value::String(d.to_string()))
}

fn text(bytes: &[u8]) -> Value {
    std::str::from_utf8(bytes).map_or(Value::Null, |s| Value::String(s.to_owned()))
}

/// The value of one cell.
pub(super) fn value_at(array: &dyn Array, row: usize) -> Value {
    if array.is_null(row) {
        return Value::Null;
    }
    match array.data_type() {
        DataType::Null => Value::Null,
        DataType::Boolean => Value::Bool(array.as_boolean().value(row)),
        DataType::Int8 => number::<Int8Type>(array, row),
        DataType::Int16 => number::<Int16Type>(array, row),
        DataType::Int32 => number::<Int32Type>(array, row),
        DataType::Int64 => number::<Int64Type>(array, row),
        DataType::UInt8 => number::<UInt8Type>(array, row),
        DataType::UInt16 => number::<UInt16Type>(array, row),
        DataType::UInt32 => number::<UInt32Type>(array, row),
        DataType::UInt64 => number::<UInt64Type>(array, row),
        DataType::Float32 => float(f64::from(array.as_primitive::<Float32Type>().value(row))),
        DataType::Float64 => float(array.as_primitive::<Float64Type>().value(row)),
        DataType::Utf8 => Value::String(array.as_string::<i32>().value(row).to_owned()),
        DataType::LargeUtf8 => Value::String(array.as_string::<i64>().value(row).to_owned()),
        DataType::Utf8View => Value::String(array.as_string_view().value(row).to_owned()),
        DataType::Binary => text(array.as_binary::<i32>().value(row)),
        DataType::LargeBinary => text(array.as_binary::<i64>().value(row)),
        DataType::BinaryView => text(array.as_binary_view().value(row)),
        DataType::List(_) => {
            Value::Array(column_values(array.as_list::<i32>().value(row).as_ref()))
        }
        DataType::LargeList(_) => {
            Value::Array(column_values(array.as_list::<i64>().value(row).as_ref()))
        }
        DataType::FixedSizeList(..) => Value::Array(column_values(
            array.as_fixed_size_list().value(row).as_ref(),
        )),
        DataType::Struct(fields) => {
            let columns = array.as_struct().columns();
            let object: Map<String, Value> = fields
                .iter()
                .zip(columns)
                .map(|(field, column)| (field.name().clone(), value_at(column.as_ref(), row)))
                .collect();
            Value::Object(object)
        }
        DataType::Map(..) => {
            let entries = array.as_map().value(row);
            let keys = column_values(entries.column(0).as_ref());
            let values = column_values(entries.column(1).as_ref());
            let object: Map<String, Value> = keys
                .into_iter()
                .zip(values)
                .map(|(key, value)| match key {
                    Value::String(key) => (key, value),
                    other => (other.to_string(), value),
                })
                .collect();
            Value::Object(object)
        }
        DataType::Timestamp(unit, zone) => {
            let utc = zone.is_some();
            match unit {
                TimeUnit::Second => timestamp::<TimestampSecondType>(array, row, utc),
                TimeUnit::Millisecond => timestamp::<TimestampMillisecondType>(array, row, utc),
                TimeUnit::Microsecond => timestamp::<TimestampMicrosecondType>(array, row, utc),
                TimeUnit::Nanosecond => timestamp::<TimestampNanosecondType>(array, row, utc),
            }
        }
        DataType::Date32 => date(as_date::<Date32Type>(i64::from(
            array.as_primitive::<Date32Type>().value(row),
        ))),
        DataType::Date64 => date(as_date::<Date64Type>(
            array.as_primitive::<Date64Type>().value(row),
        )),
        DataType::Dictionary(..) => {
            let dictionary = array.as_any_dictionary();
            let key = dictionary.normalized_keys()[row];
            value_at(dictionary.values().as_ref(), key)
        }
        // Decimals, durations, unions…: no dataset we read has them in a prompt field.
        _ => Value::Null,
    }
}
