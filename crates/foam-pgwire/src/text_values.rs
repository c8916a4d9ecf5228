//! Text-format result columns as PostgreSQL prints them, where arrow-pg's
//! encoder prints them otherwise: each value as `foam_query`'s
//! `exec/pg_text.rs` writes it (floats, timestamps, times, dates,
//! intervals, wide NUMERICs, arrays), and an `int2vector` or `oidvector`
//! (a list described as text) as its values with a space between.
//!
//! ```text
//!   batch ─▶ each text-format column whose PostgreSQL text is not Arrow's, as that text ─▶ arrow-pg
//! ```

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::{DataType, Schema};
use arrow::record_batch::RecordBatch;
use foam_query::exec::pg_text::values_as_text;
use pgwire::api::Type;
use pgwire::api::results::{FieldFormat, FieldInfo};

/// `batch` with its text-format columns whose PostgreSQL text is not
/// Arrow's turned into that text, and the fields to encode it with: the
/// RowDescription's, but `text` for an array made text (pgwire quotes a
/// string sent as an array as one element).
pub fn postgres_text(batch: RecordBatch, fields: &Arc<Vec<FieldInfo>>) -> (RecordBatch, Arc<Vec<FieldInfo>>) {
    let converted: Vec<Option<ArrayRef>> = batch
        .columns()
        .iter()
        .zip(fields.iter())
        .map(|(column, field)| match field.format() {
            // A list described as text is an int2vector or oidvector.
            _ if *field.datatype() == Type::TEXT && matches!(column.data_type(), DataType::List(_)) => vector_text(column),
            FieldFormat::Text => values_as_text(column),
            _ => None,
        })
        .collect();
    if converted.iter().all(Option::is_none) {
        return (batch, fields.clone());
    }
    let encode_fields: Vec<FieldInfo> = fields
        .iter()
        .zip(batch.columns().iter().zip(&converted))
        .map(|(field, (column, converted))| match column.data_type() {
            DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) if converted.is_some() => {
                FieldInfo::new(field.name().to_string(), field.table_id(), field.column_id(), Type::TEXT, field.format())
            }
            _ => field.clone(),
        })
        .collect();
    let schema = batch.schema();
    let mut columns = Vec::with_capacity(batch.num_columns());
    let mut schema_fields = Vec::with_capacity(batch.num_columns());
    for ((column, field), converted) in batch.columns().iter().zip(schema.fields()).zip(converted) {
        match converted {
            Some(text) => {
                schema_fields.push(Arc::new(field.as_ref().clone().with_data_type(DataType::Utf8)));
                columns.push(text);
            }
            None => {
                schema_fields.push(field.clone());
                columns.push(column.clone());
            }
        }
    }
    match RecordBatch::try_new(Arc::new(Schema::new(schema_fields)), columns) {
        Ok(converted) => (converted, Arc::new(encode_fields)),
        Err(_) => (batch, fields.clone()),
    }
}

/// Whether a column of `data_type` is an array of arrays: those go out in
/// text only (arrow-pg's binary encoder has no list of lists).
pub fn is_nested_array(data_type: &DataType) -> bool {
    let is_list = |data_type: &DataType| matches!(data_type, DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..));
    matches!(data_type, DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) if is_list(item.data_type()))
}

/// `schema` as the client is told it: an array of arrays is an array of
/// the innermost type (PostgreSQL's `int8[]` has any number of
/// dimensions; arrow-pg has no type for a list of lists).
pub fn described(schema: &Schema) -> Schema {
    fn innermost(data_type: &DataType) -> Option<DataType> {
        match data_type {
            DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => match item.data_type() {
                DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => innermost(item.data_type()),
                _ => Some(DataType::List(item.clone())),
            },
            _ => None,
        }
    }
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .map(|field| match innermost(field.data_type()) {
            Some(list) if &list != field.data_type() => Arc::new(field.as_ref().clone().with_data_type(list)),
            _ => field.clone(),
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// A list column described as text (an `int2vector` or `oidvector`), as
/// PostgreSQL prints those: the values with a space between (`1 2`).
fn vector_text(column: &ArrayRef) -> Option<ArrayRef> {
    let lists = column.as_list_opt::<i32>()?;
    let texts: StringArray = (0..lists.len())
        .map(|row| {
            if lists.is_null(row) {
                return None;
            }
            let values = lists.value(row);
            let texts: Vec<String> = (0..values.len())
                .map(|i| arrow::util::display::array_value_to_string(&values, i).unwrap_or_default())
                .collect();
            Some(texts.join(" "))
        })
        .collect();
    Some(Arc::new(texts))
}
