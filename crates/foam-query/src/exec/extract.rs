//! `EXTRACT(field FROM x)` and `date_part('field', x)` as PostgreSQL 15
//! answers them (`frontend/spellings.rs` writes them as these functions).
//!
//! DataFusion's `date_part` dropped the fraction of seconds (`EXTRACT(second
//! FROM TIME '10:11:12.5')` was 12, not 12.5), counted a year of an
//! interval as 360 days for `epoch` (PostgreSQL: 365.25), went through a
//! double for a timestamp's `epoch` (its last microsecond digit could
//! round away), and typed EXTRACT as an integer or a double, where
//! PostgreSQL's EXTRACT is NUMERIC:
//!
//! ```text
//!   field                        EXTRACT (numeric, scale)            date_part (double)
//!   epoch of a date              0                                   same value
//!   epoch of anything else       6: exact from the microseconds      same value
//!   second / millisecond(s)      6 / 3: from `microsecond`           same value
//!   decade, century, millennium  0: from the year                    same value
//!   microsecond(s), the rest     0: DataFusion's value               DataFusion's value
//! ```
//!
//! EXTRACT of a time of day from a date is 0A000, as in PostgreSQL.
//! An interval's epoch is PostgreSQL's: 365.25 days a year, 30 a month; a
//! difference of timestamps (a duration to DataFusion) is read as the
//! interval of days and time PostgreSQL's difference is. A BC year is
//! PostgreSQL's (1 BC is -1, DataFusion's 0). Other fields (and any field
//! on a timestamptz, in its zone) are DataFusion's `date_part`, whose
//! values agree with PostgreSQL's.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, Float64Array};
use arrow::datatypes::{DataType, Field, FieldRef, IntervalMonthDayNanoType, TimeUnit};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

/// EXTRACT's function: NUMERIC results.
pub const EXTRACT: &str = "foam_extract";
/// date_part's function for the fields DataFusion answers otherwise: doubles.
pub const DATE_PART: &str = "foam_date_part";
/// Digits before the point an extracted value may have.
const INTEGER_DIGITS: u8 = 20;
const MICROS_PER_SECOND: i128 = 1_000_000;
const SECONDS_PER_DAY: i128 = 86_400;

/// The two functions.
pub fn udfs() -> Vec<ScalarUDF> {
    vec![ScalarUDF::new_from_impl(Extract::new(true)), ScalarUDF::new_from_impl(Extract::new(false))]
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Extract {
    signature: Signature,
    /// EXTRACT (NUMERIC) rather than date_part (double).
    numeric: bool,
}

impl Extract {
    fn new(numeric: bool) -> Self {
        Extract { signature: Signature::any(2, Volatility::Immutable), numeric }
    }
}

/// The fields this module computes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Epoch,
    Second,
    Millisecond,
    Microsecond,
    /// Counted from the year, which DataFusion does not do.
    Decade,
    Century,
    Millennium,
    /// `year` and `isoyear`, which count BC years as PostgreSQL does.
    Year,
    Other,
}

impl Part {
    fn of(name: &str) -> Self {
        match name.trim().to_lowercase().as_str() {
            "epoch" => Part::Epoch,
            "second" | "seconds" | "sec" | "secs" | "s" => Part::Second,
            "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" | "msecond" | "mseconds" | "millisecon" => Part::Millisecond,
            "microsecond" | "microseconds" | "us" | "usec" | "usecs" | "usecond" | "useconds" => Part::Microsecond,
            "year" | "years" | "isoyear" => Part::Year,
            "decade" | "decades" => Part::Decade,
            "century" | "centuries" => Part::Century,
            "millennium" | "millennia" | "millenniums" => Part::Millennium,
            _ => Part::Other,
        }
    }

    /// Digits after the point of EXTRACT's NUMERIC for a value of `source`.
    fn scale(self, source: &DataType) -> i8 {
        match self {
            Part::Epoch if matches!(source, DataType::Date32 | DataType::Date64) => 0,
            Part::Epoch | Part::Second => 6,
            Part::Millisecond => 3,
            Part::Microsecond | Part::Decade | Part::Century | Part::Millennium | Part::Year | Part::Other => 0,
        }
    }
}

fn field_name(arg: Option<&ScalarValue>) -> Result<String> {
    match arg {
        Some(ScalarValue::Utf8(Some(name)) | ScalarValue::Utf8View(Some(name)) | ScalarValue::LargeUtf8(Some(name))) => Ok(name.clone()),
        _ => Err(DataFusionError::Plan("EXTRACT and date_part take the field as a literal".into())),
    }
}

impl ScalarUDFImpl for Extract {
    fn name(&self) -> &str {
        if self.numeric { EXTRACT } else { DATE_PART }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Err(DataFusionError::Internal(format!("{} is typed from its arguments", self.name())))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let field = Part::of(&field_name(args.scalar_arguments.first().copied().flatten())?);
        let source = args.arg_fields.get(1).map(|f| f.data_type().clone()).unwrap_or(DataType::Null);
        let data_type = match self.numeric {
            true => {
                let scale = field.scale(&source);
                DataType::Decimal128(INTEGER_DIGITS + scale as u8, scale)
            }
            false => DataType::Float64,
        };
        Ok(Arc::new(Field::new(self.name(), data_type, true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = match &args.args[0] {
            ColumnarValue::Scalar(value) => field_name(Some(value))?,
            ColumnarValue::Array(_) => field_name(None)?,
        };
        let field = Part::of(&name);
        let scalar = matches!(args.args[1], ColumnarValue::Scalar(_));
        let rows = if scalar { 1 } else { args.number_rows };
        let source = args.args[1].to_array(rows)?;
        let scale = field.scale(source.data_type());
        // PostgreSQL's EXTRACT from a date has no time of day (date_part
        // reads the date as a timestamp at midnight).
        let time_of_day = matches!(field, Part::Second | Part::Millisecond | Part::Microsecond)
            || matches!(name.trim().to_lowercase().as_str(), "hour" | "hours" | "minute" | "minutes" | "min" | "mins" | "timezone" | "timezone_hour" | "timezone_minute");
        if self.numeric && time_of_day && matches!(source.data_type(), DataType::Date32 | DataType::Date64) {
            let message = format!("unit \"{}\" not supported for type date", name.trim().to_lowercase());
            return Err(foam_common::FoamError::Query { message, sqlstate: foam_common::SqlState::FeatureNotSupported }.into());
        }
        let unscaled: Vec<Option<i128>> = match (field, source.data_type()) {
            // A difference of timestamps (DataFusion's duration) read as
            // PostgreSQL's interval of days and time.
            (_, DataType::Duration(unit)) => of_duration(field, &name, &source, *unit)?,
            (Part::Epoch, _) => epoch(&source, &args)?,
            // `microsecond` counts the seconds too (12.5 s: 12500000),
            // which is each field at its own scale.
            (Part::Second | Part::Millisecond | Part::Microsecond, _) => rounded(&date_part("microsecond", &source, &args)?),
            // An interval's years are a count: truncated.
            (Part::Decade | Part::Century | Part::Millennium, DataType::Interval(_)) => {
                let per = match field {
                    Part::Decade => 10,
                    Part::Century => 100,
                    _ => 1000,
                };
                rounded(&date_part("year", &source, &args)?).into_iter().map(|year| year.map(|year| year / per)).collect()
            }
            (Part::Decade | Part::Century | Part::Millennium, _) => {
                rounded(&date_part("year", &source, &args)?).into_iter().map(|year| year.map(|year| of_year(field, year))).collect()
            }
            // DataFusion counts years astronomically (1 BC is 0);
            // PostgreSQL's year of 1 BC is -1.
            (Part::Year, DataType::Interval(_)) => rounded(&date_part(&name, &source, &args)?),
            (Part::Year, _) => rounded(&date_part(&name, &source, &args)?).into_iter().map(|year| year.map(|y| if y <= 0 { y - 1 } else { y })).collect(),
            (Part::Other, _) => rounded(&date_part(&name, &source, &args)?),
        };
        let result: ArrayRef = match self.numeric {
            true => Arc::new(Decimal128Array::from(unscaled).with_precision_and_scale(INTEGER_DIGITS + scale as u8, scale)?),
            false => {
                let divisor = 10f64.powi(i32::from(scale));
                Arc::new(unscaled.into_iter().map(|v| v.map(|v| v as f64 / divisor)).collect::<Float64Array>())
            }
        };
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&result, 0)?),
            false => ColumnarValue::Array(result),
        })
    }
}

/// A field of durations (differences of timestamps) as PostgreSQL reads the
/// interval such a difference is: whole days, then the time of day, its
/// sign the duration's. Months and what is counted from them are 0.
fn of_duration(part: Part, name: &str, source: &ArrayRef, unit: TimeUnit) -> Result<Vec<Option<i128>>> {
    let per_second: i128 = match unit {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    };
    const MICROS_PER_DAY: i128 = SECONDS_PER_DAY * MICROS_PER_SECOND;
    let name = name.trim().to_lowercase();
    let values = arrow::compute::cast(source, &DataType::Int64)?;
    let field = |micros: i128| -> Result<i128> {
        let time = micros % MICROS_PER_DAY;
        Ok(match part {
            Part::Epoch => micros,
            Part::Second | Part::Millisecond | Part::Microsecond => time % (60 * MICROS_PER_SECOND),
            Part::Decade | Part::Century | Part::Millennium | Part::Year => 0,
            Part::Other => match name.as_str() {
                "day" | "days" => micros / MICROS_PER_DAY,
                "hour" | "hours" => time / (3600 * MICROS_PER_SECOND),
                "minute" | "minutes" | "min" | "mins" => time / (60 * MICROS_PER_SECOND) % 60,
                "month" | "months" | "quarter" => 0,
                other => return Err(DataFusionError::Execution(format!("unit \"{other}\" not supported for type interval"))),
            },
        })
    };
    values
        .as_primitive::<arrow::datatypes::Int64Type>()
        .iter()
        // PostgreSQL's intervals hold microseconds: a nanosecond rest is dropped.
        .map(|v| v.map(|v| field(i128::from(v) * MICROS_PER_SECOND / per_second)).transpose())
        .collect()
}

/// The decade, century or millennium of a year as PostgreSQL counts them
/// (year 0 is 1 BC; the first century is years 1 to 100).
fn of_year(part: Part, year: i128) -> i128 {
    match part {
        Part::Decade if year >= 0 => year / 10,
        Part::Decade => -((8 - (year - 1)) / 10),
        Part::Century if year > 0 => (year + 99) / 100,
        Part::Century => -((99 - (year - 1)) / 100),
        Part::Millennium if year > 0 => (year + 999) / 1000,
        Part::Millennium => -((999 - (year - 1)) / 1000),
        _ => year,
    }
}

/// DataFusion's `date_part(field, source)`, as doubles.
fn date_part(field: &str, source: &ArrayRef, args: &ScalarFunctionArgs) -> Result<ArrayRef> {
    let udf = datafusion::functions::datetime::date_part();
    let field_value = ScalarValue::Utf8(Some(field.to_string()));
    let arg_fields: Vec<FieldRef> = vec![Arc::new(Field::new("field", DataType::Utf8, false)), Arc::new(Field::new("source", source.data_type().clone(), true))];
    let return_field = udf.return_field_from_args(ReturnFieldArgs { arg_fields: &arg_fields, scalar_arguments: &[Some(&field_value), None] })?;
    let values = udf
        .invoke_with_args(ScalarFunctionArgs {
            args: vec![ColumnarValue::Scalar(field_value), ColumnarValue::Array(source.clone())],
            arg_fields,
            number_rows: source.len(),
            return_field,
            config_options: args.config_options.clone(),
        })?
        .to_array(source.len())?;
    Ok(arrow::compute::cast(&values, &DataType::Float64)?)
}

/// Doubles rounded to integers (NULL stays NULL).
fn rounded(values: &ArrayRef) -> Vec<Option<i128>> {
    values.as_primitive::<arrow::datatypes::Float64Type>().iter().map(|v| v.map(|v| v.round() as i128)).collect()
}

/// The epoch of each value, in microseconds (whole seconds for a date):
/// exact for timestamps, dates and intervals, DataFusion's for the rest.
fn epoch(source: &ArrayRef, args: &ScalarFunctionArgs) -> Result<Vec<Option<i128>>> {
    let per_second = |unit: &TimeUnit| -> i128 {
        match unit {
            TimeUnit::Second => 1,
            TimeUnit::Millisecond => 1_000,
            TimeUnit::Microsecond => 1_000_000,
            TimeUnit::Nanosecond => 1_000_000_000,
        }
    };
    Ok(match source.data_type() {
        DataType::Timestamp(unit, _) => {
            let values = arrow::compute::cast(source, &DataType::Int64)?;
            let per_second = per_second(unit);
            // Microseconds, a nanosecond timestamp's rest dropped toward
            // the past as PostgreSQL's microseconds are.
            let to_micros = |v: i64| (i128::from(v) * MICROS_PER_SECOND).div_euclid(per_second);
            values.as_primitive::<arrow::datatypes::Int64Type>().iter().map(|v| v.map(to_micros)).collect()
        }
        DataType::Date32 => source.as_primitive::<arrow::datatypes::Date32Type>().iter().map(|v| v.map(|days| i128::from(days) * SECONDS_PER_DAY)).collect(),
        DataType::Date64 => source.as_primitive::<arrow::datatypes::Date64Type>().iter().map(|v| v.map(|ms| i128::from(ms).div_euclid(1_000))).collect(),
        DataType::Interval(arrow::datatypes::IntervalUnit::MonthDayNano) => source
            .as_primitive::<IntervalMonthDayNanoType>()
            .iter()
            .map(|v| {
                v.map(|interval| {
                    let months = i128::from(interval.months);
                    // PostgreSQL's: 365.25 days a year (times 4 to stay in
                    // integers), 30 days a month.
                    let quarter_days = 1461 * (months / 12) + 120 * (months % 12) + 4 * i128::from(interval.days);
                    quarter_days * (SECONDS_PER_DAY / 4) * MICROS_PER_SECOND + i128::from(interval.nanoseconds) / 1_000
                })
            })
            .collect(),
        _ => date_part("epoch", source, args)?
            .as_primitive::<arrow::datatypes::Float64Type>()
            .iter()
            .map(|v| v.map(|seconds| (seconds * MICROS_PER_SECOND as f64).round() as i128))
            .collect(),
    })
}
