//! The session's `TimeZone`, as PostgreSQL's: `SET TIME ZONE 'Europe/Paris'`,
//! `SET timezone = ...`, `SHOW TimeZone`, `current_setting('TimeZone')`.
//!
//! ```text
//!   SET ─▶ zone (a tz database name, UTC/GMT, LOCAL/DEFAULT, hours east) ─▶ settings["timezone"]
//!                                                                       └─▶ datafusion.execution.time_zone
//! ```
//!
//! DataFusion's `execution.time_zone` is what makes `now()`, `'...'::timestamptz`
//! and casts of `timestamp` to `timestamptz` carry the zone; the session
//! converts every `timestamptz` result to it (`in_session_zone`), so a value
//! prints in the zone the client set, as in PostgreSQL. Stored values are
//! instants (UTC) whatever the zone.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use foam_common::{FoamError, FoamResult};

/// The setting's name as the session keeps it (lower case, as `SHOW` and
/// `current_setting` look names up) and as PostgreSQL spells it.
pub const TIME_ZONE: &str = "timezone";
pub const TIME_ZONE_SHOWN: &str = "TimeZone";

/// The zone a session starts in: the server's, as the startup message says.
pub const DEFAULT_ZONE: &str = "Etc/UTC";

/// The largest offset from UTC, in hours, a number may set (PostgreSQL's).
const OFFSET_HOURS_MAX: f64 = 15.0;

/// A zone a client may set: what `SHOW` prints and what DataFusion's
/// `execution.time_zone` takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    pub shown: String,
    pub datafusion: String,
}

/// The zone `value` names (22023 for none): a tz database name in any case,
/// `UTC`/`GMT`, `LOCAL` or `DEFAULT` (the session's first zone), or a
/// number of hours east of Greenwich (`-7`, `5.5`), as `SET TIME ZONE`
/// takes it.
pub fn parse(value: &str) -> FoamResult<Zone> {
    let value = value.trim().trim_matches('\'');
    let invalid = || FoamError::Query {
        message: format!("invalid value for parameter \"{TIME_ZONE_SHOWN}\": \"{value}\""),
        sqlstate: foam_common::SqlState::InvalidParameterValue,
    };
    if value.eq_ignore_ascii_case("local") || value.eq_ignore_ascii_case("default") {
        return parse(DEFAULT_ZONE);
    }
    if ["utc", "gmt", "etc/utc", "etc/gmt", "universal", "uct"].contains(&value.to_lowercase().as_str()) {
        return Ok(Zone { shown: value.to_string(), datafusion: "UTC".into() });
    }
    // The form SHOW gives a zone set by hours (`<-07>+07`), as SET LOCAL
    // puts it back.
    if let Some(offset) = value.strip_prefix('<').and_then(|rest| rest.split_once('>')).map(|(offset, _)| offset) {
        let (hours, minutes) = offset.split_once(':').unwrap_or((offset, "0"));
        let (Ok(hours), Ok(minutes)) = (hours.parse::<i64>(), minutes.parse::<i64>()) else { return Err(invalid()) };
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let minutes = hours * 60 + sign * minutes;
        return parse(&(minutes as f64 / 60.0).to_string());
    }
    if let Ok(hours) = value.parse::<f64>() {
        let minutes = (hours * 60.0).round();
        if !minutes.is_finite() || minutes.abs() > OFFSET_HOURS_MAX * 60.0 {
            return Err(invalid());
        }
        let minutes = minutes as i64;
        let sign = if minutes < 0 { '-' } else { '+' };
        let (hours, rest) = (minutes.abs() / 60, minutes.abs() % 60);
        let offset = format!("{sign}{hours:02}:{rest:02}");
        // PostgreSQL shows such a zone in POSIX form, west positive.
        let west = if minutes > 0 { '-' } else { '+' };
        let shown = match rest {
            0 => format!("<{sign}{hours:02}>{west}{hours:02}"),
            m => format!("<{offset}>{west}{hours:02}:{m:02}"),
        };
        return Ok(Zone { shown, datafusion: offset });
    }
    // tz database names are matched without regard to case, as PostgreSQL does.
    let zone = chrono_tz::TZ_VARIANTS.iter().find(|zone| zone.name().eq_ignore_ascii_case(value)).ok_or_else(invalid)?;
    Ok(Zone { shown: zone.name().to_string(), datafusion: zone.name().to_string() })
}

/// `data_type` named in `zone` (DataFusion's name for it) when it is a
/// `timestamptz` of another zone: the same instants, read and shown in
/// `zone`; `None` for any other type.
pub fn in_zone(data_type: &DataType, zone: &str) -> Option<DataType> {
    match data_type {
        DataType::Timestamp(unit, Some(z)) if z.as_ref() != zone => Some(DataType::Timestamp(*unit, Some(zone.into()))),
        _ => None,
    }
}

/// `schema` with its `timestamptz` columns in `zone` (DataFusion's name for
/// it); `None` when none has another zone.
pub fn session_schema(schema: &SchemaRef, zone: &str) -> Option<SchemaRef> {
    if !schema.fields().iter().any(|f| in_zone(f.data_type(), zone).is_some()) {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| match in_zone(field.data_type(), zone) {
            Some(zoned) => field.as_ref().clone().with_data_type(zoned),
            None => field.as_ref().clone(),
        })
        .collect();
    Some(Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())))
}

/// `batch` in `schema` (from [`session_schema`]): the same instants, named in
/// the session's zone (Arrow keeps UTC values; only the zone changes).
pub fn in_session_zone(schema: &SchemaRef, batch: RecordBatch) -> datafusion::arrow::error::Result<RecordBatch> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| if column.data_type() == field.data_type() { Ok(column.clone()) } else { datafusion::arrow::compute::cast(column, field.data_type()) })
        .collect::<datafusion::arrow::error::Result<_>>()?;
    RecordBatch::try_new(schema.clone(), columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_are_named_as_postgresql_names_them() {
        assert_eq!(parse("europe/paris").unwrap(), Zone { shown: "Europe/Paris".into(), datafusion: "Europe/Paris".into() });
        assert_eq!(parse("'UTC'").unwrap(), Zone { shown: "UTC".into(), datafusion: "UTC".into() });
        assert_eq!(parse("LOCAL").unwrap().datafusion, "UTC");
        assert_eq!(parse("-7").unwrap(), Zone { shown: "<-07>+07".into(), datafusion: "-07:00".into() });
        assert_eq!(parse("5.5").unwrap(), Zone { shown: "<+05:30>-05:30".into(), datafusion: "+05:30".into() });
        assert!(parse("Z").is_err());
        assert_eq!(parse("<-07>+07").unwrap(), parse("-7").unwrap());
        assert_eq!(parse("<+05:30>-05:30").unwrap(), parse("5.5").unwrap());
        assert_eq!(parse("<-00:30>+00:30").unwrap(), parse("-0.5").unwrap());
        assert!(matches!(parse("Mars/Olympus"), Err(FoamError::Query { sqlstate: foam_common::SqlState::InvalidParameterValue, .. })));
        assert!(parse("100").is_err());
    }

    #[test]
    fn results_move_to_the_session_zone() {
        use datafusion::arrow::array::{Array, TimestampMicrosecondArray};
        use datafusion::arrow::datatypes::TimeUnit;
        let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let schema = Arc::new(Schema::new(vec![Field::new("t", utc, true), Field::new("n", DataType::Timestamp(TimeUnit::Microsecond, None), true)]));
        let moved = session_schema(&schema, "Asia/Tokyo").unwrap();
        assert!(session_schema(&moved, "Asia/Tokyo").is_none());
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(TimestampMicrosecondArray::from(vec![Some(5)]).with_timezone("UTC")), Arc::new(TimestampMicrosecondArray::from(vec![Some(5)]))],
        )
        .unwrap();
        let batch = in_session_zone(&moved, batch).unwrap();
        assert_eq!(batch.column(0).data_type(), &DataType::Timestamp(TimeUnit::Microsecond, Some("Asia/Tokyo".into())));
        assert_eq!(batch.column(0).as_any().downcast_ref::<TimestampMicrosecondArray>().unwrap().value(0), 5);
        assert_eq!(batch.column(1).data_type(), &DataType::Timestamp(TimeUnit::Microsecond, None));
        assert!(!batch.column(0).is_null(0));
    }
}
