//! How FoamDB's scalar functions take DataFusion's columnar values: an
//! argument that is one value for every row (a literal, `Scalar`) is worked
//! on as an array of one and answered as one value again; an array as it is.

use datafusion::arrow::array::ArrayRef;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::ColumnarValue;

/// `compute` applied to `value` (of a batch of `rows` rows), answered in
/// the form `value` came in.
pub fn per_value(value: &ColumnarValue, rows: usize, compute: impl FnOnce(&ArrayRef) -> Result<ArrayRef>) -> Result<ColumnarValue> {
    let scalar = matches!(value, ColumnarValue::Scalar(_));
    answered(compute(&value.to_array(if scalar { 1 } else { rows })?)?, scalar)
}

/// `computed` (an array of one row when every argument was `scalar`) in
/// the form the arguments came in.
pub fn answered(computed: ArrayRef, scalar: bool) -> Result<ColumnarValue> {
    Ok(if scalar { ColumnarValue::Scalar(ScalarValue::try_from_array(&computed, 0)?) } else { ColumnarValue::Array(computed) })
}
