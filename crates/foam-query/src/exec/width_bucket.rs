//! `width_bucket(operand, low, high, count)`: which of `count` equal-width
//! buckets between `low` and `high` the operand falls in, 0 below the
//! range and `count + 1` above it (the range may run downwards), as
//! PostgreSQL computes it in double precision; 2201G for a count below
//! 1, equal bounds, NaN, or infinite bounds. The thresholds-array form is
//! not here ("Invalid function").

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int32Array};
use arrow::datatypes::{DataType, Float64Type};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use foam_common::{FoamError, SqlState};

pub fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(WidthBucket { signature: Signature::uniform(4, vec![DataType::Float64], Volatility::Immutable) })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct WidthBucket {
    signature: Signature,
}

fn refused(message: &str) -> DataFusionError {
    FoamError::Query { message: message.into(), sqlstate: SqlState::InvalidArgumentForWidthBucket }.into()
}

/// PostgreSQL's `width_bucket_float8`.
fn bucket(operand: f64, low: f64, high: f64, count: f64) -> Result<i32> {
    if count.fract() != 0.0 || count < 1.0 || count > f64::from(i32::MAX) {
        return Err(refused("count must be greater than zero"));
    }
    if operand.is_nan() || low.is_nan() || high.is_nan() {
        return Err(refused("operand, lower bound, and upper bound cannot be NaN"));
    }
    if low.is_infinite() || high.is_infinite() {
        return Err(refused("lower and upper bounds must be finite"));
    }
    let count = count as i32;
    let above = || count.checked_add(1).ok_or_else(|| FoamError::Query { message: "integer out of range".into(), sqlstate: SqlState::NumericValueOutOfRange }.into());
    if low < high {
        if operand < low {
            return Ok(0);
        }
        if operand >= high {
            return above();
        }
        Ok((f64::from(count) * ((operand - low) / (high - low))) as i32 + 1)
    } else if low > high {
        if operand > low {
            return Ok(0);
        }
        if operand <= high {
            return above();
        }
        Ok((f64::from(count) * ((low - operand) / (low - high))) as i32 + 1)
    } else {
        Err(refused("lower bound cannot equal upper bound"))
    }
}

impl ScalarUDFImpl for WidthBucket {
    fn name(&self) -> &str {
        "width_bucket"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args.args.iter().all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let arrays = args.args.iter().map(|arg| arg.to_array(rows)).collect::<Result<Vec<_>>>()?;
        let columns: Vec<_> = arrays.iter().map(|a| a.as_primitive::<Float64Type>()).collect();
        let buckets = (0..rows)
            .map(|row| match columns.iter().any(|c| c.is_null(row)) {
                true => Ok(None),
                false => bucket(columns[0].value(row), columns[1].value(row), columns[2].value(row), columns[3].value(row)).map(Some),
            })
            .collect::<Result<Int32Array>>()?;
        let buckets: Arc<dyn Array> = Arc::new(buckets);
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&buckets, 0)?),
            false => ColumnarValue::Array(buckets),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_as_postgresql_counts_them() {
        assert_eq!(bucket(5.35, 0.024, 10.06, 5.0).unwrap(), 3);
        assert_eq!((bucket(-1.0, 0.0, 10.0, 5.0).unwrap(), bucket(10.0, 0.0, 10.0, 5.0).unwrap()), (0, 6));
        assert_eq!(bucket(5.0, 10.0, 0.0, 5.0).unwrap(), 3);
        assert_eq!((bucket(11.0, 10.0, 0.0, 5.0).unwrap(), bucket(0.0, 10.0, 0.0, 5.0).unwrap()), (0, 6));
        assert!(bucket(5.0, 0.0, 10.0, 0.0).is_err());
        assert!(bucket(5.0, 1.0, 1.0, 3.0).is_err());
        assert!(bucket(f64::NAN, 0.0, 1.0, 3.0).is_err());
    }
}
