//! `generate_series` and `range` over timestamps as FoamDB types them.
//!
//! DataFusion's table functions take a timestamp bound only at
//! nanoseconds; FoamDB's timestamps are microseconds (`TIMESTAMP '...'`,
//! `date ± interval`), so `generate_series(TIMESTAMP '2024-01-01',
//! TIMESTAMP '2024-01-07', INTERVAL '1 day')` and `generate_series(
//! current_date - INTERVAL '6 days', current_date, INTERVAL '1 day')`
//! failed to plan ("First argument must be a timestamp or NULL"). These
//! wrappers hand DataFusion's functions each timestamp bound at
//! nanoseconds, and a date beside a timestamp bound as its midnight (as
//! PostgreSQL picks its timestamp series); a bound past nanoseconds'
//! range (1677 to 2262) is 22008, and a timestamptz bound beside a date or
//! timestamp is refused (0A000: DataFusion would read both in one zone).

use std::sync::Arc;

use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions_table::generate_series::{GenerateSeriesFunc, RangeFunc};
use datafusion::logical_expr::Expr;
use foam_common::{FoamError, SqlState};

/// The table functions (name, function) sessions and views register in
/// place of DataFusion's.
pub fn table_functions() -> Vec<(&'static str, Arc<dyn TableFunctionImpl>)> {
    vec![("generate_series", Arc::new(Series(Arc::new(GenerateSeriesFunc {})))), ("range", Arc::new(Series(Arc::new(RangeFunc {}))))]
}

/// DataFusion's series function `.0`, given nanosecond bounds.
#[derive(Debug)]
struct Series(Arc<dyn TableFunctionImpl>);

impl TableFunctionImpl for Series {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let exprs = nanosecond_bounds(args.exprs())?;
        self.0.call_with_args(TableFunctionArgs::new(&exprs, args.session()))
    }
}

/// `exprs` with each literal timestamp among the two bounds at
/// nanoseconds, and a date bound beside one as a timestamp.
fn nanosecond_bounds(exprs: &[Expr]) -> Result<Vec<Expr>> {
    use datafusion::arrow::datatypes::DataType;
    let is_timestamp = |e: &Expr| matches!(e, Expr::Literal(value, _) if matches!(value.data_type(), DataType::Timestamp(..)));
    let timestamps = exprs.iter().take(2).any(is_timestamp);
    // DataFusion reads both bounds in the first one's zone: a timestamptz
    // beside a date or timestamp (which PostgreSQL reads in the session's
    // zone) would give other rows.
    let zoned = |e: &Expr| match e {
        Expr::Literal(value, _) if !value.is_null() => match value.data_type() {
            DataType::Timestamp(_, zone) => Some(zone.is_some()),
            DataType::Date32 => Some(false),
            _ => None,
        },
        _ => None,
    };
    if let [first, second, ..] = exprs
        && let (Some(a), Some(b)) = (zoned(first), zoned(second))
        && a != b
    {
        return Err(FoamError::FeatureNotSupported { feature: "generate_series between a timestamptz and a date or timestamp (cast both bounds to one type)".into() }.into());
    }
    let mut out = exprs.to_vec();
    for bound in out.iter_mut().take(2) {
        let Expr::Literal(value, metadata) = bound else { continue };
        let nanoseconds = match value {
            ScalarValue::TimestampSecond(v, tz) => Some((v.map(|v| (i128::from(v), 1_000_000_000)), tz.clone())),
            ScalarValue::TimestampMillisecond(v, tz) => Some((v.map(|v| (i128::from(v), 1_000_000)), tz.clone())),
            ScalarValue::TimestampMicrosecond(v, tz) => Some((v.map(|v| (i128::from(v), 1_000)), tz.clone())),
            ScalarValue::Date32(v) if timestamps => Some((v.map(|v| (i128::from(v), 86_400_000_000_000)), None)),
            _ => None,
        };
        let Some((value_and_scale, tz)) = nanoseconds else { continue };
        let value_ns = match value_and_scale {
            Some((v, scale)) => Some(i64::try_from(v * scale).map_err(|_| {
                FoamError::Query { message: "timestamp out of range for generate_series (1677 to 2262)".into(), sqlstate: SqlState::DatetimeFieldOverflow }
            })?),
            None => None,
        };
        *bound = Expr::Literal(ScalarValue::TimestampNanosecond(value_ns, tz), metadata.clone());
    }
    Ok(out)
}
