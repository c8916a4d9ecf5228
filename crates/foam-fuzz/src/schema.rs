//! Random tables: their layouts on the cluster and their rows.
//!
//! Every table has the same columns (one of each type the fuzzer covers), so
//! any two tables can be joined on any pair of columns of one type; what
//! varies is the layout (distributed by one key, by two, by a text or date
//! column, replicated; the default or a chosen partition count) and the rows:
//! empty and one-row tables, NULLs, duplicates and skew. Values come from
//! small domains so that joins, groups and set operations find matches.
//! A database also has the session time zone its queries run in: the
//! timestamptz column's values are written with offsets and read in it.

use crate::choices::Choices;

/// The value families the generators type expressions by. INT and BIGINT are
/// one family: they compare, join and union with each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    Int,
    Text,
    Float,
    Bool,
    Date,
    Decimal,
    /// TIMESTAMP (without time zone): local date and time.
    Timestamp,
    /// TIMESTAMPTZ: an instant, read in the session's time zone.
    TimestampTz,
}

impl Ty {
    /// A SQL type of this family, for casts.
    pub fn sql(self) -> &'static str {
        match self {
            Ty::Int => "BIGINT",
            Ty::Text => "TEXT",
            Ty::Float => "DOUBLE PRECISION",
            Ty::Bool => "BOOLEAN",
            Ty::Date => "DATE",
            Ty::Decimal => "DECIMAL(12,2)",
            Ty::Timestamp => "TIMESTAMP",
            Ty::TimestampTz => "TIMESTAMPTZ",
        }
    }

    /// Whether a value of this family compares with (and joins on) one of
    /// `other`: its own family, and timestamps with timestamptz (read as
    /// local time in the session's zone).
    pub fn compares_with(self, other: Ty) -> bool {
        self == other || matches!((self, other), (Ty::Timestamp, Ty::TimestampTz) | (Ty::TimestampTz, Ty::Timestamp))
    }

    /// Whether `sum` and `avg` take this family.
    pub fn numeric(self) -> bool {
        matches!(self, Ty::Int | Ty::Float | Ty::Decimal)
    }
}

/// A column every fuzz table has: name, SQL type, family.
pub struct ColumnDef {
    pub name: &'static str,
    pub sql_type: &'static str,
    pub ty: Ty,
}

/// The columns of every fuzz table.
pub const COLUMNS: &[ColumnDef] = &[
    ColumnDef { name: "a", sql_type: "INT", ty: Ty::Int },
    ColumnDef { name: "b", sql_type: "INT", ty: Ty::Int },
    ColumnDef { name: "c", sql_type: "BIGINT", ty: Ty::Int },
    ColumnDef { name: "d", sql_type: "TEXT", ty: Ty::Text },
    ColumnDef { name: "e", sql_type: "DOUBLE PRECISION", ty: Ty::Float },
    ColumnDef { name: "f", sql_type: "BOOLEAN", ty: Ty::Bool },
    ColumnDef { name: "g", sql_type: "DATE", ty: Ty::Date },
    ColumnDef { name: "h", sql_type: "DECIMAL(10,2)", ty: Ty::Decimal },
    ColumnDef { name: "i", sql_type: "TIMESTAMP", ty: Ty::Timestamp },
    ColumnDef { name: "j", sql_type: "TIMESTAMPTZ", ty: Ty::TimestampTz },
];

/// Session time zones a database's queries run in: UTC (where FoamDB's
/// time zone rewrites do not fire), one west of UTC whose local day
/// differs from UTC's in the evening and that has a daylight saving
/// change in the data's range, and one with a half-hour offset.
pub const TIME_ZONES: &[&str] = &["UTC", "America/New_York", "Asia/Kolkata"];

/// Percent of databases whose session runs in a time zone other than UTC.
const ZONED_PERCENT: u32 = 50;

/// Distribution keys a table may have (column names), `[]` for replicated.
const LAYOUTS: &[&[&str]] =
    &[&["a"], &["b"], &["a", "b"], &["c"], &["d"], &["b", "a"], &["a", "d"], &["g"], &[], &["c", "b"], &["j"], &["i"], &["a", "j"]];

/// Partition counts a table may ask for (`None`: the cluster's default).
const PARTITION_COUNTS: &[Option<u32>] = &[None, Some(1), Some(2), Some(3), Some(5), Some(8), Some(16)];

/// Percent of distributed tables whose distribution key is declared UNIQUE.
const UNIQUE_PERCENT: u32 = 30;

/// Percent of tables whose columns have defaults.
const DEFAULTS_PERCENT: u32 = 35;

/// Tables in one fuzz database, at most.
pub const TABLES_MAX: u32 = 4;

/// Rows in one table, at most (a rare larger table is skewed).
const ROWS_MAX: u32 = 100;
const ROWS_LARGE: u32 = 300;

/// How a table is laid out over the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Distribution key columns; empty means DISTRIBUTED REPLICATED.
    pub keys: Vec<&'static str>,
    pub partitions: Option<u32>,
}

/// One table: its name, layout and rows as SQL literals (`NULL` for null).
#[derive(Clone, Debug)]
pub struct Table {
    pub name: String,
    pub layout: Layout,
    /// Column `a` declared NOT NULL (then it has no NULLs).
    pub a_not_null: bool,
    /// Its distribution key declared UNIQUE in FoamDB (then no two rows
    /// share a key without a NULL in it), so point reads through the key's
    /// index are compared too; the reference has no key.
    pub unique: bool,
    /// Some columns have a DEFAULT ([`DEFAULTS`]), which INSERTs that leave
    /// them out (or say DEFAULT) take, on FoamDB and on the write judge.
    pub defaults: bool,
    pub rows: Vec<Vec<String>>,
}

/// The column defaults of a table with [`Table::defaults`].
pub const DEFAULTS: &[(&str, &str)] = &[
    ("b", "7"),
    ("d", "'dflt'"),
    ("g", "DATE '2024-01-05'"),
    ("h", "1.25"),
    ("i", "TIMESTAMP '2024-01-02 12:00:00'"),
    ("j", "TIMESTAMPTZ '2024-01-02 23:30:00+00'"),
];

impl Table {
    /// The column list of CREATE TABLE.
    fn columns_sql(&self) -> String {
        COLUMNS
            .iter()
            .map(|c| {
                let not_null = if c.name == "a" && self.a_not_null { " NOT NULL" } else { "" };
                let default = match DEFAULTS.iter().find(|(name, _)| *name == c.name).filter(|_| self.defaults) {
                    Some((_, value)) => format!(" DEFAULT {value}"),
                    None => String::new(),
                };
                format!("{} {}{not_null}{default}", c.name, c.sql_type)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// CREATE TABLE for FoamDB, with the layout.
    pub fn create_foam(&self) -> String {
        let layout = if self.layout.keys.is_empty() {
            "DISTRIBUTED REPLICATED".to_string()
        } else {
            let partitions = self.layout.partitions.map(|n| format!(" PARTITIONS {n}")).unwrap_or_default();
            format!("DISTRIBUTED BY ({}){partitions}", self.layout.keys.join(", "))
        };
        let unique = if self.unique { format!(", UNIQUE ({})", self.layout.keys.join(", ")) } else { String::new() };
        format!("CREATE TABLE {} ({}{unique}) {layout}", self.name, self.columns_sql())
    }

    /// CREATE TABLE for PostgreSQL judging writes: no layout, the same
    /// UNIQUE key as on FoamDB, checked when the statement ends as SQL
    /// and FoamDB check it (PostgreSQL checks a plain UNIQUE after each
    /// row, so `SET d = d || 'x'` failed there on a key a later row frees).
    pub fn create_postgres(&self) -> String {
        self.create_postgres_checked(" DEFERRABLE INITIALLY IMMEDIATE")
    }

    /// CREATE TABLE for PostgreSQL judging an upsert write: the UNIQUE key
    /// checked row by row, as ON CONFLICT wants its arbiter.
    pub fn create_postgres_arbiter(&self) -> String {
        self.create_postgres_checked("")
    }

    fn create_postgres_checked(&self, checked: &str) -> String {
        let unique = if self.unique { format!(", UNIQUE ({}){checked}", self.layout.keys.join(", ")) } else { String::new() };
        format!("CREATE TABLE {} ({}{unique})", self.name, self.columns_sql())
    }

    /// CREATE TABLE for the reference (plain DataFusion, no layout), which
    /// only reads: no defaults.
    pub fn create_reference(&self) -> String {
        format!("CREATE TABLE {} ({})", self.name, Table { defaults: false, ..self.clone() }.columns_sql())
    }

    /// INSERT statements holding every row, `chunk` rows each.
    pub fn inserts(&self, chunk: usize) -> Vec<String> {
        self.rows
            .chunks(chunk.max(1))
            .map(|rows| {
                let values: Vec<String> = rows.iter().map(|r| format!("({})", r.join(", "))).collect();
                format!("INSERT INTO {} VALUES {}", self.name, values.join(", "))
            })
            .collect()
    }
}

/// A random value of column `column` as a SQL literal; `skewed` makes one
/// value most of them.
fn value(choices: &mut Choices, column: &ColumnDef, nullable: bool, skewed: bool) -> String {
    if nullable && choices.chance(12) {
        return "NULL".into();
    }
    if skewed && choices.chance(70) {
        return match column.ty {
            Ty::Int => "1".into(),
            Ty::Text => "'x'".into(),
            Ty::Float => "1.5".into(),
            Ty::Bool => "true".into(),
            Ty::Date => "'2024-01-01'".into(),
            Ty::Decimal => "1.50".into(),
            Ty::Timestamp => "'2024-01-01 00:00:00'".into(),
            Ty::TimestampTz => "'2024-01-01 00:00:00+00'".into(),
        };
    }
    match (column.ty, column.name) {
        (Ty::Int, "a") => choices.below(10).to_string(),
        (Ty::Int, "b") => (choices.below(7) as i64 - 1).to_string(),
        (Ty::Int, _) => (choices.below(25) as i64 - 5).to_string(),
        (Ty::Text, _) => format!("'{}'", choices.pick(&["x", "y", "z", "xy", "", "Ab", "x%y", "zz z"])),
        (Ty::Float, _) => choices.pick(&["0.5", "1.5", "-2.25", "3", "0", "100.125", "-0.75"]).to_string(),
        (Ty::Bool, _) => choices.pick(&["false", "true"]).to_string(),
        (Ty::Date, _) => format!("'2024-0{}-{:02}'", choices.between(1, 3), choices.between(1, 4)),
        (Ty::Decimal, _) => choices.pick(&["0.00", "1.50", "-3.25", "10.01", "2.00", "99.99", "-0.10"]).to_string(),
        (Ty::Timestamp, _) => format!("'2024-01-0{} {}'", choices.between(1, 3), choices.pick(&["00:00:00", "03:00:00", "12:30:00", "23:00:00.5"])),
        // Written with offsets, so every session reads the same instants;
        // the evening ones are the next day in UTC, and one is an hour
        // before New York's clocks went forward.
        (Ty::TimestampTz, _) if choices.chance(5) => "'2024-03-10 06:30:00+00'".into(),
        (Ty::TimestampTz, _) => format!(
            "'2024-01-0{} {}{}'",
            choices.between(1, 3),
            choices.pick(&["00:00:00", "03:00:00", "21:30:00", "23:00:00.5"]),
            choices.pick(&["+00", "-05", "+05:30"])
        ),
    }
}

/// A key's value as compared for uniqueness: a literal, except that one
/// instant written with two offsets (`'2024-01-02 03:00:00+05:30'` and
/// `'2024-01-01 21:30:00+00'`) is one value.
fn key_value(literal: &str) -> String {
    crate::compare::canonical_timestamp(literal.trim_matches('\'')).unwrap_or_else(|| literal.to_string())
}

/// A fuzz database: its tables, the session time zone its queries run
/// in, and the FoamDB rule switches they run with off.
#[derive(Clone, Debug)]
pub struct Database {
    pub tables: Vec<Table>,
    pub time_zone: &'static str,
    pub rules_off: Vec<&'static str>,
}

/// The statement that puts a session (FoamDB's or PostgreSQL's) in `zone`.
pub fn set_time_zone(zone: &str) -> String {
    format!("SET timezone = '{zone}'")
}

/// A random session time zone: UTC or, for [`ZONED_PERCENT`] of
/// databases, another of [`TIME_ZONES`].
pub fn time_zone(choices: &mut Choices) -> &'static str {
    if choices.chance(ZONED_PERCENT) { *choices.pick(&TIME_ZONES[1..]) } else { TIME_ZONES[0] }
}

/// A random database of 2 to [`TABLES_MAX`] tables named `{prefix}0`, ...
pub fn generate(choices: &mut Choices, prefix: &str) -> Vec<Table> {
    let count = choices.between(1, TABLES_MAX).max(2);
    (0..count)
        .map(|index| {
            let keys = choices.pick(LAYOUTS).to_vec();
            let partitions = if keys.is_empty() { None } else { *choices.pick(PARTITION_COUNTS) };
            let a_not_null = choices.chance(30);
            let rows = match choices.below(10) {
                0 => 0,
                1 => 1,
                2 => ROWS_LARGE,
                _ => choices.between(2, ROWS_MAX),
            };
            let skewed = choices.chance(20);
            let mut rows: Vec<Vec<String>> = (0..rows)
                .map(|_| COLUMNS.iter().map(|c| value(choices, c, !(c.name == "a" && a_not_null), skewed)).collect())
                .collect();
            let unique = !keys.is_empty() && choices.chance(UNIQUE_PERCENT);
            if unique {
                // The first row of each key stays; NULL keys never collide.
                let at: Vec<usize> = keys.iter().map(|k| COLUMNS.iter().position(|c| c.name == *k).expect("a key is a column")).collect();
                let mut seen = std::collections::HashSet::new();
                rows.retain(|row| at.iter().any(|i| row[*i] == "NULL") || seen.insert(at.iter().map(|i| key_value(&row[*i])).collect::<Vec<_>>()));
            }
            let defaults = choices.chance(DEFAULTS_PERCENT);
            Table { name: format!("{prefix}{index}"), layout: Layout { keys, partitions }, a_not_null, unique, defaults, rows }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_have_layouts_and_rows_that_fit_their_columns() {
        let mut seen_replicated = false;
        let mut seen_empty = false;
        let mut seen_unique = false;
        let mut seen_defaults = false;
        for seed in 0..200 {
            let tables = generate(&mut Choices::random(seed), "t");
            assert!((2..=TABLES_MAX as usize).contains(&tables.len()));
            for table in &tables {
                seen_replicated |= table.layout.keys.is_empty();
                seen_empty |= table.rows.is_empty();
                assert!(table.rows.iter().all(|r| r.len() == COLUMNS.len()));
                if table.a_not_null {
                    assert!(table.rows.iter().all(|r| r[0] != "NULL"), "a NOT NULL column got a NULL");
                }
                let plain = Table { defaults: false, ..table.clone() };
                assert!(plain.create_foam().starts_with(table.create_reference().trim_end_matches(')')), "the same columns");
                seen_defaults |= table.defaults && table.create_foam().contains(" DEFAULT 'dflt'");
                if table.unique {
                    let at: Vec<usize> = table.layout.keys.iter().map(|k| COLUMNS.iter().position(|c| c.name == *k).unwrap()).collect();
                    let keys: Vec<Vec<String>> = table.rows.iter().map(|r| at.iter().map(|i| key_value(&r[*i])).collect::<Vec<_>>()).filter(|k| !k.contains(&"NULL".to_string())).collect();
                    assert_eq!(keys.len(), keys.iter().collect::<std::collections::HashSet<_>>().len(), "a duplicate key in {}", table.create_foam());
                    seen_unique = true;
                }
            }
        }
        assert!(seen_replicated && seen_empty && seen_unique && seen_defaults, "the generator covers replicated, empty, keyed and defaulted tables");
    }
}
