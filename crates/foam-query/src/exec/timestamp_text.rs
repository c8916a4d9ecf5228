//! Timestamps as PostgreSQL writes them as text: `2024-01-01 10:30:00`, a
//! fraction of a second only when there is one (`.5`), `BC` before year 1,
//! and a `timestamptz` in the zone its Arrow type names (the session's)
//! with its offset (`-05`, `+05:30`), where Arrow's cast writes ISO 8601
//! (`2024-01-01T10:30:00-05:00`). `exec/pg_text.rs` prints timestamps with
//! these, in result columns and in casts to text.

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType};
use chrono::{Datelike, NaiveDateTime, Timelike};

/// The fraction of a second, `.5` for half, empty for none; nanoseconds
/// round to microseconds, PostgreSQL's precision.
pub fn fraction(nanos: u32) -> String {
    if nanos == 0 {
        return String::new();
    }
    let micros = (nanos as u64 + 500) / 1000;
    if micros == 0 || micros >= 1_000_000 {
        return String::new();
    }
    format!(".{micros:06}").trim_end_matches('0').to_string()
}

/// A `timestamp` as PostgreSQL writes it.
pub fn timestamp(at: NaiveDateTime) -> String {
    let time = format!("{:02}:{:02}:{:02}{}", at.hour(), at.minute(), at.second(), fraction(at.nanosecond()));
    if at.year() <= 0 {
        format!("{:04}-{:02}-{:02} {time} BC", 1 - at.year(), at.month(), at.day())
    } else {
        format!("{:04}-{:02}-{:02} {time}", at.year(), at.month(), at.day())
    }
}

/// An instant (`micros` since the epoch) as PostgreSQL writes a
/// `timestamptz` in time zone `zone`: the local time, then the offset in
/// hours, with minutes and seconds only when it has them (`+05:30`).
pub fn timestamp_in_zone(micros: i64, zone: &arrow::array::timezone::Tz) -> Option<String> {
    use chrono::{Offset, TimeZone};
    let utc = chrono::DateTime::from_timestamp_micros(micros)?;
    let local = zone.from_utc_datetime(&utc.naive_utc());
    let seconds = local.offset().fix().local_minus_utc();
    let sign = if seconds < 0 { '-' } else { '+' };
    let magnitude = seconds.unsigned_abs();
    let mut offset = format!("{sign}{:02}", magnitude / 3600);
    if magnitude % 3600 != 0 {
        offset.push_str(&format!(":{:02}", magnitude / 60 % 60));
        if magnitude % 60 != 0 {
            offset.push_str(&format!(":{:02}", magnitude % 60));
        }
    }
    let text = timestamp(local.naive_local());
    Some(match text.strip_suffix(" BC") {
        Some(ad) => format!("{ad}{offset} BC"),
        None => format!("{text}{offset}"),
    })
}

/// A timestamp column (of any unit, with or without a zone) as
/// PostgreSQL's text; `None` for a column of another type.
pub fn timestamps_as_text(column: &ArrayRef) -> Option<StringArray> {
    let DataType::Timestamp(unit, zone) = column.data_type() else { return None };
    let micros: Vec<Option<i64>> = match unit {
        TimeUnit::Second => column.as_primitive::<TimestampSecondType>().iter().map(|v| v.and_then(|v| v.checked_mul(1_000_000))).collect(),
        TimeUnit::Millisecond => column.as_primitive::<TimestampMillisecondType>().iter().map(|v| v.and_then(|v| v.checked_mul(1000))).collect(),
        TimeUnit::Microsecond => column.as_primitive::<TimestampMicrosecondType>().iter().collect(),
        TimeUnit::Nanosecond => column.as_primitive::<TimestampNanosecondType>().iter().map(|v| v.map(|v| v.div_euclid(1000) + i64::from(v.rem_euclid(1000) >= 500))).collect(),
    };
    match zone {
        None => Some(micros.into_iter().map(|v| v.and_then(chrono::DateTime::from_timestamp_micros).map(|d| timestamp(d.naive_utc()))).collect()),
        Some(zone) => {
            let zone: arrow::array::timezone::Tz = zone.parse().ok()?;
            Some(micros.into_iter().map(|v| v.and_then(|micros| timestamp_in_zone(micros, &zone))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn timestamps_with_time_zone_show_their_offset() {
        let utc: arrow::array::timezone::Tz = "UTC".parse().unwrap();
        let new_york: arrow::array::timezone::Tz = "America/New_York".parse().unwrap();
        let kolkata: arrow::array::timezone::Tz = "Asia/Kolkata".parse().unwrap();
        // 2024-01-01 08:00:00 UTC and 2024-07-01 12:00:00.5 UTC.
        let winter = 1_704_096_000_000_000;
        let summer = 1_719_835_200_500_000;
        assert_eq!(timestamp_in_zone(winter, &utc).unwrap(), "2024-01-01 08:00:00+00");
        assert_eq!(timestamp_in_zone(winter, &new_york).unwrap(), "2024-01-01 03:00:00-05");
        assert_eq!(timestamp_in_zone(summer, &new_york).unwrap(), "2024-07-01 08:00:00.5-04");
        assert_eq!(timestamp_in_zone(winter, &kolkata).unwrap(), "2024-01-01 13:30:00+05:30");
    }

    #[test]
    fn columns_of_any_unit_read_as_text() {
        let naive: ArrayRef = Arc::new(arrow::array::TimestampNanosecondArray::from(vec![Some(1_500_000_000), None]));
        let text = timestamps_as_text(&naive).unwrap();
        assert_eq!(text.value(0), "1970-01-01 00:00:01.5");
        assert!(text.is_null(1));
        let zoned: ArrayRef = Arc::new(arrow::array::TimestampSecondArray::from(vec![Some(0)]).with_timezone("Asia/Tokyo"));
        assert_eq!(timestamps_as_text(&zoned).unwrap().value(0), "1970-01-01 09:00:00+09");
    }
}
