//! Parameters a client binds to a prepared statement: Arrow record
//! batches, one row per execution, each column one `$n` in order. A value
//! is cast to the type the statement infers for its parameter (a Python
//! `int` arrives as Int64 for an INT column); one that does not fit fails
//! with 22023 naming the parameter, text that reads as no value of the
//! type with 22P02 as in PostgreSQL.

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{ParamValues, ScalarValue};
use foam_common::{FoamError, FoamResult, SqlState};

/// Each row of `batches` as the parameters of one execution.
pub(crate) fn rows(batches: &[RecordBatch], types: &[Option<DataType>]) -> FoamResult<Vec<ParamValues>> {
    let mut rows = Vec::new();
    for batch in batches {
        if batch.num_columns() != types.len() {
            return Err(FoamError::InvalidParameter {
                message: format!("the statement has {} parameters and the client bound {} columns", types.len(), batch.num_columns()),
            });
        }
        for row in 0..batch.num_rows() {
            let values = batch
                .columns()
                .iter()
                .zip(types)
                .enumerate()
                .map(|(at, (column, wanted))| {
                    let value = ScalarValue::try_from_array(column, row).map_err(FoamError::from)?;
                    let value = match wanted {
                        Some(wanted) if value.data_type() != *wanted => value.cast_to(wanted).map_err(|error| match &value {
                            // Text that reads as no value of the type, as PostgreSQL reports it.
                            ScalarValue::Utf8(Some(text)) | ScalarValue::Utf8View(Some(text)) | ScalarValue::LargeUtf8(Some(text)) => FoamError::Query {
                                message: format!("invalid input syntax for type {wanted} of parameter ${}: \"{text}\"", at + 1),
                                sqlstate: SqlState::InvalidTextRepresentation,
                            },
                            _ => FoamError::InvalidParameter {
                                message: format!("parameter ${} is {} and the statement takes {wanted}: {error}", at + 1, value.data_type()),
                            },
                        })?,
                        _ => value,
                    };
                    Ok(value.into())
                })
                .collect::<FoamResult<Vec<_>>>()?;
            rows.push(ParamValues::List(values));
        }
    }
    Ok(rows)
}

/// The parameter schema a prepared statement reports: `$1`, `$2`, ... of
/// the inferred types (text where none could be inferred).
pub(crate) fn schema(types: &[Option<DataType>]) -> Schema {
    Schema::new(types.iter().enumerate().map(|(at, t)| Field::new(format!("${}", at + 1), t.clone().unwrap_or(DataType::Utf8), true)).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn rows_are_cast_to_the_statements_types() {
        let batch = RecordBatch::try_from_iter([
            ("a", Arc::new(Int64Array::from(vec![Some(1), None])) as _),
            ("b", Arc::new(StringArray::from(vec!["x", "y"])) as _),
        ])
        .unwrap();
        let rows = rows(&[batch.clone()], &[Some(DataType::Int32), None]).unwrap();
        assert_eq!(rows.len(), 2);
        let ParamValues::List(first) = &rows[0] else { panic!() };
        assert_eq!(first[0].value, ScalarValue::Int32(Some(1)));
        assert_eq!(first[1].value, ScalarValue::Utf8(Some("x".into())));
        let ParamValues::List(second) = &rows[1] else { panic!() };
        assert_eq!(second[0].value, ScalarValue::Int32(None));

        let error = super::rows(&[batch.clone()], &[Some(DataType::Int32)]).unwrap_err();
        assert_eq!(error.sqlstate().code(), "22023", "{error}");
        let error = super::rows(&[batch.clone()], &[Some(DataType::Int32), Some(DataType::Int32)]).unwrap_err();
        assert_eq!(error.sqlstate().code(), "22P02", "{error}");
        assert!(error.to_string().contains("parameter $2: \"x\""), "{error}");
        let too_big = RecordBatch::try_from_iter([("a", Arc::new(Int64Array::from(vec![1i64 << 40])) as _)]).unwrap();
        let error = super::rows(&[too_big], &[Some(DataType::Int32)]).unwrap_err();
        assert!(error.to_string().contains("parameter $1"), "{error}");
    }
}
