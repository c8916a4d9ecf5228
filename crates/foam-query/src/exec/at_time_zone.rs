//! `x AT TIME ZONE zone`, as PostgreSQL computes it:
//!
//! ```text
//!   timestamptz AT TIME ZONE z  ─▶  timestamp: the local time in z of that instant
//!   timestamp   AT TIME ZONE z  ─▶  timestamptz: the instant whose local time in z it is
//! ```
//!
//! DataFusion plans it as a cast to a timestamp in `z`, which keeps a
//! timestamptz a timestamptz (FoamDB then shows it in the session's zone,
//! so the expression did nothing) and reads a timestamp as UTC. The front
//! end writes it as `foam_at_time_zone(x, z)` (`frontend/at_time_zone.rs`).
//! A zone is a tz database name in any case, `UTC`, or an ISO offset
//! (`+05:30`); another is 22023.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use chrono::{Offset, TimeZone};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use foam_common::{FoamError, SqlState};

use crate::exec::function_values::answered;

/// The function the front end writes `AT TIME ZONE` as; workers register
/// it (`worker_udfs`).
pub const AT_TIME_ZONE: &str = "foam_at_time_zone";

/// The zone `timestamptz` results name (their values are UTC instants).
const UTC: &str = "UTC";

pub fn at_time_zone_udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(AtTimeZone { signature: Signature::any(2, Volatility::Immutable) })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct AtTimeZone {
    signature: Signature,
}

impl ScalarUDFImpl for AtTimeZone {
    fn name(&self) -> &str {
        AT_TIME_ZONE
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types.first() {
            Some(DataType::Timestamp(_, Some(_))) => Ok(DataType::Timestamp(TimeUnit::Microsecond, None)),
            Some(DataType::Timestamp(_, None) | DataType::Date32 | DataType::Date64 | DataType::Null) => {
                Ok(DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())))
            }
            other => Err(DataFusionError::from(FoamError::Query {
                message: format!("AT TIME ZONE takes a timestamp or timestamptz, not {}; cast it (::timestamptz)", other.map(|t| t.to_string()).unwrap_or_default()),
                sqlstate: SqlState::UndefinedFunction,
            })),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value, zone] = args.args.as_slice() else { return Err(DataFusionError::Internal(format!("{AT_TIME_ZONE} takes two arguments"))) };
        let scalar = args.args.iter().all(|arg| matches!(arg, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let values = value.to_array(rows)?;
        let zones = match zone {
            ColumnarValue::Scalar(one) => one.to_array_of_size(1)?,
            ColumnarValue::Array(zones) => Arc::clone(zones),
        };
        let to_local = matches!(values.data_type(), DataType::Timestamp(_, Some(_)));
        // The values as microseconds, of UTC (timestamptz) or local time.
        let micros = match values.data_type() {
            DataType::Timestamp(_, Some(_)) => arrow::compute::cast(&values, &DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())))?,
            DataType::Timestamp(..) => arrow::compute::cast(&values, &DataType::Timestamp(TimeUnit::Microsecond, None))?,
            _ => arrow::compute::cast(&values, &DataType::Timestamp(TimeUnit::Microsecond, None))?,
        };
        let micros = micros.as_primitive::<TimestampMicrosecondType>();
        let zone_named = |row: usize| -> Result<arrow::array::timezone::Tz> {
            zone_of(&match ScalarValue::try_from_array(&zones, row)? {
                ScalarValue::Utf8(Some(z)) | ScalarValue::Utf8View(Some(z)) | ScalarValue::LargeUtf8(Some(z)) => z,
                other => other.to_string(),
            })
        };
        // One zone for every row (a cast's, the session's) is looked up
        // once, when a value first needs it: a NULL value or zone gives
        // NULL without a look-up, as PostgreSQL's strict function does.
        let zone_nulls = zones.logical_nulls();
        let one_zone = matches!(zone, ColumnarValue::Scalar(_));
        let mut looked_up = None;
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            let zone_row = if one_zone { 0 } else { row };
            if micros.is_null(row) || zone_nulls.as_ref().is_some_and(|nulls| nulls.is_null(zone_row)) {
                out.push(None);
                continue;
            }
            let zone = match looked_up {
                Some(zone) if one_zone => zone,
                _ => {
                    let zone = zone_named(zone_row)?;
                    looked_up = Some(zone);
                    zone
                }
            };
            let value = micros.value(row);
            let naive = chrono::DateTime::from_timestamp_micros(value).ok_or_else(out_of_range)?.naive_utc();
            let offset_seconds = if to_local {
                zone.offset_from_utc_datetime(&naive).fix().local_minus_utc()
            } else {
                // A local time skipped or repeated by a change of offset
                // takes the later offset, as PostgreSQL's.
                zone.offset_from_local_datetime(&naive)
                    .latest()
                    .or_else(|| zone.offset_from_local_datetime(&(naive - chrono::Duration::hours(1))).earliest())
                    .map(|o| o.fix().local_minus_utc())
                    .ok_or_else(out_of_range)?
            };
            let shift = i64::from(offset_seconds) * 1_000_000;
            out.push(Some(if to_local { value + shift } else { value - shift }));
        }
        let array = TimestampMicrosecondArray::from(out);
        let array: ArrayRef = if to_local { Arc::new(array) } else { Arc::new(array.with_timezone(UTC)) };
        answered(array, scalar)
    }
}

fn out_of_range() -> DataFusionError {
    DataFusionError::from(FoamError::Query { message: "timestamp out of range".into(), sqlstate: SqlState::DatetimeFieldOverflow })
}

/// The zone `name` names (see the module documentation).
fn zone_of(name: &str) -> Result<arrow::array::timezone::Tz> {
    let named = chrono_tz::TZ_VARIANTS.iter().find(|zone| zone.name().eq_ignore_ascii_case(name.trim())).map(|zone| zone.name().to_string());
    named
        .unwrap_or_else(|| name.trim().to_string())
        .parse()
        .map_err(|_| DataFusionError::from(FoamError::Query { message: format!("time zone \"{name}\" not recognized"), sqlstate: SqlState::InvalidParameterValue }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;

    fn at(value: ScalarValue, zone: &str) -> ScalarValue {
        let returned = at_time_zone_udf().return_type(&[value.data_type(), DataType::Utf8]).unwrap();
        let args = ScalarFunctionArgs {
            arg_fields: vec![Arc::new(Field::new("v", value.data_type(), true)), Arc::new(Field::new("z", DataType::Utf8, true))],
            args: vec![ColumnarValue::Scalar(value), ColumnarValue::Scalar(ScalarValue::Utf8(Some(zone.into())))],
            number_rows: 1,
            return_field: Arc::new(Field::new("r", returned, true)),
            config_options: Arc::new(Default::default()),
        };
        match at_time_zone_udf().invoke_with_args(args).unwrap() {
            ColumnarValue::Scalar(value) => value,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn instants_become_local_times_and_back() {
        // 2024-01-01 08:00:00 UTC.
        let instant = ScalarValue::TimestampMicrosecond(Some(1_704_096_000_000_000), Some(UTC.into()));
        assert_eq!(at(instant, "america/new_york"), ScalarValue::TimestampMicrosecond(Some(1_704_078_000_000_000), None));
        let local = ScalarValue::TimestampMicrosecond(Some(1_704_078_000_000_000), None);
        assert_eq!(at(local, "America/New_York"), ScalarValue::TimestampMicrosecond(Some(1_704_096_000_000_000), Some(UTC.into())));
        let instant = ScalarValue::TimestampMicrosecond(Some(1_704_096_000_000_000), Some(UTC.into()));
        assert_eq!(at(instant, "+05:30"), ScalarValue::TimestampMicrosecond(Some(1_704_115_800_000_000), None));
    }
}
