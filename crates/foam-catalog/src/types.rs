//! The SQL column types FoamDB stores, and the Arrow type each is held as.

use arrow::datatypes::{DataType, TimeUnit};
use serde::{Deserialize, Serialize};

/// Largest DECIMAL precision; Arrow's Decimal128 holds 38 digits.
pub const DECIMAL_PRECISION_MAX: u8 = 38;

/// The zone a `timestamptz` column's Arrow type names: its values are UTC.
pub const UTC: &str = "UTC";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SqlType {
    Boolean,
    SmallInt,
    Int,
    BigInt,
    Real,
    Double,
    Decimal { precision: u8, scale: i8 },
    Varchar { length_max: Option<u32> },
    Text,
    Char { length: u32 },
    Date,
    Timestamp,
    /// `timestamp with time zone`: an instant, kept in UTC and shown in
    /// the session's TimeZone.
    TimestampTz,
}

impl SqlType {
    pub fn arrow_type(&self) -> DataType {
        match self {
            SqlType::Boolean => DataType::Boolean,
            SqlType::SmallInt => DataType::Int16,
            SqlType::Int => DataType::Int32,
            SqlType::BigInt => DataType::Int64,
            SqlType::Real => DataType::Float32,
            SqlType::Double => DataType::Float64,
            SqlType::Decimal { precision, scale } => DataType::Decimal128(*precision, *scale),
            SqlType::Varchar { .. } | SqlType::Text | SqlType::Char { .. } => DataType::Utf8View,
            SqlType::Date => DataType::Date32,
            SqlType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            SqlType::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
        }
    }

    /// The type as PostgreSQL spells it in `information_schema.columns`.
    pub fn sql_name(&self) -> String {
        match self {
            SqlType::Boolean => "boolean".into(),
            SqlType::SmallInt => "smallint".into(),
            SqlType::Int => "integer".into(),
            SqlType::BigInt => "bigint".into(),
            SqlType::Real => "real".into(),
            SqlType::Double => "double precision".into(),
            SqlType::Decimal { precision, scale } => format!("numeric({precision},{scale})"),
            SqlType::Varchar { length_max: Some(n) } => format!("character varying({n})"),
            SqlType::Varchar { length_max: None } => "character varying".into(),
            SqlType::Text => "text".into(),
            SqlType::Char { length } => format!("character({length})"),
            SqlType::Date => "date".into(),
            SqlType::Timestamp => "timestamp without time zone".into(),
            SqlType::TimestampTz => "timestamp with time zone".into(),
        }
    }

    /// The type a value is cast to before it is stored in a column of this
    /// type, as DataFusion names it: a string type without its length (the
    /// write path checks lengths with PostgreSQL's message; DataFusion
    /// refuses `CHARACTER VARYING(n)` as a cast target).
    pub fn cast_name(&self) -> String {
        match self {
            SqlType::Varchar { .. } | SqlType::Char { .. } => "text".into(),
            other => other.sql_name(),
        }
    }
}
