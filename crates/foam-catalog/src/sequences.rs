//! Sequences: `CREATE SEQUENCE`, and the ones behind `SERIAL` and identity
//! columns. The catalog keeps each sequence's parameters and the next value
//! no node has been handed. A node draws a block of values with one Raft
//! command ([`SequenceDef::allocate`]) and hands them out itself, so values
//! are unique across the cluster and increase in the order blocks were
//! drawn; a block unused when its node stops is a gap, as PostgreSQL's
//! `CACHE` leaves one. `setval` starts a new epoch: blocks of an older one
//! are dropped by the nodes holding them.

use serde::{Deserialize, Serialize};

use foam_common::{FoamError, FoamResult, SqlState};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SequenceDef {
    pub name: String,
    pub increment: i64,
    pub min: i64,
    pub max: i64,
    pub start: i64,
    pub cycle: bool,
    /// Values a node draws at once beyond those a statement needs.
    pub cache: i64,
    /// The next value to hand out.
    pub next: i64,
    /// The sequence has handed out its last value (no CYCLE).
    #[serde(default)]
    pub exhausted: bool,
    /// Bumped by `setval`: blocks drawn before are void.
    #[serde(default)]
    pub epoch: u64,
    /// The column whose default draws from it (`SERIAL`, identity): dropped
    /// with its table.
    #[serde(default)]
    pub owned_by: Option<(String, String)>,
    /// Its owner and grants (`owner` and `grants` in its JSON).
    #[serde(flatten)]
    pub acl: crate::privileges::Acl,
    /// The catalog version it was created at: a block a node drew from an
    /// older sequence of the same name is not one of its values.
    #[serde(default)]
    pub created: u64,
    /// The largest value of its type (`AS smallint | integer | bigint`).
    #[serde(default = "bigint_max")]
    pub type_max: i64,
    /// `next` was set, not reached by handing out values: by CREATE,
    /// `setval(.., false)` or RESTART (PostgreSQL's `is_called` false).
    #[serde(default)]
    pub uncalled: bool,
}

fn bigint_max() -> i64 {
    i64::MAX
}

/// A column default that draws from `sequence`, as PostgreSQL writes it
/// (the name quoted where it must be).
pub fn nextval_default(sequence: &str) -> String {
    format!("nextval('{}'::regclass)", quoted_name(sequence).replace('\'', "''"))
}

/// A sequence's name as PostgreSQL prints it: double-quoted unless it is
/// lowercase letters, digits and underscores.
pub fn quoted_name(sequence: &str) -> String {
    let simple = sequence.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && sequence.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if simple { sequence.to_string() } else { format!("\"{}\"", sequence.replace('"', "\"\"")) }
}

/// Values handed to a node: `first`, `first + increment`, ... (`count` of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceBlock {
    pub first: i64,
    pub count: u64,
    pub increment: i64,
    pub epoch: u64,
    pub created: u64,
}

impl SequenceDef {
    /// A sequence with PostgreSQL's defaults for what `options` leave out
    /// (`INCREMENT 1`, `MINVALUE 1`, `MAXVALUE` the type's largest, `START`
    /// the minimum, or the maximum of a descending one); 22023 for
    /// parameters PostgreSQL refuses.
    pub fn new(name: &str, options: SequenceOptions, type_max: i64) -> FoamResult<SequenceDef> {
        let increment = options.increment.unwrap_or(1);
        if increment == 0 {
            return Err(invalid("INCREMENT must not be zero".into()));
        }
        let type_min = if type_max == i64::MAX { i64::MIN } else { -type_max - 1 };
        let (min, max) = match increment > 0 {
            true => (options.min.unwrap_or(1), options.max.unwrap_or(type_max)),
            false => (options.min.unwrap_or(type_min), options.max.unwrap_or(-1)),
        };
        if min >= max {
            return Err(invalid(format!("MINVALUE ({min}) must be less than MAXVALUE ({max})")));
        }
        if min < type_min || max > type_max {
            return Err(invalid(format!("MINVALUE ({min}) and MAXVALUE ({max}) must be within the sequence's type")));
        }
        let start = options.start.unwrap_or(if increment > 0 { min } else { max });
        if start < min || start > max {
            return Err(invalid(format!("START value ({start}) cannot be outside MINVALUE ({min}) and MAXVALUE ({max})")));
        }
        let cache = options.cache.unwrap_or(1);
        if cache < 1 {
            return Err(invalid(format!("CACHE ({cache}) must be greater than zero")));
        }
        Ok(SequenceDef {
            name: name.to_string(),
            increment,
            min,
            max,
            start,
            cycle: options.cycle,
            cache,
            next: start,
            exhausted: false,
            epoch: 0,
            owned_by: None,
            acl: crate::privileges::Acl::default(),
            created: 0,
            type_max,
            uncalled: true,
        })
    }

    /// `last_value` and `is_called` as PostgreSQL shows them when the
    /// sequence is read as a relation (`SELECT last_value, is_called FROM
    /// s`, which pg_dump restores with `setval`): the last value handed to
    /// a node, or the next one, not yet called, after CREATE, RESTART or
    /// `setval(.., false)`.
    pub fn state(&self) -> (i64, bool) {
        let step = i128::from(self.increment);
        if self.exhausted {
            let room = match self.increment > 0 {
                true => (i128::from(self.max) - i128::from(self.next)) / step,
                false => (i128::from(self.next) - i128::from(self.min)) / -step,
            };
            return ((i128::from(self.next) + room * step) as i64, true);
        }
        let before = i128::from(self.next) - step;
        match !self.uncalled && before >= i128::from(self.min) && before <= i128::from(self.max) {
            true => (before as i64, true),
            false => (self.next, false),
        }
    }

    /// Hands out up to `count` values from `next` on (at least one): fewer
    /// when the bound comes first, after which a cycling sequence starts
    /// again at its other end. 2200H when a sequence without CYCLE is done.
    pub fn allocate(&mut self, count: u64) -> FoamResult<SequenceBlock> {
        if self.exhausted {
            if !self.cycle {
                let bound = if self.increment > 0 { ("maximum", self.max) } else { ("minimum", self.min) };
                return Err(FoamError::Query {
                    message: format!("nextval: reached {} value of sequence \"{}\" ({})", bound.0, self.name, bound.1),
                    sqlstate: SqlState::SequenceGeneratorLimitExceeded,
                });
            }
            self.next = if self.increment > 0 { self.min } else { self.max };
            self.exhausted = false;
        }
        // Values left before the bound, counting `next`.
        let step = i128::from(self.increment).unsigned_abs();
        let room = match self.increment > 0 {
            true => (i128::from(self.max) - i128::from(self.next)) as u128 / step + 1,
            false => (i128::from(self.next) - i128::from(self.min)) as u128 / step + 1,
        };
        let taken = u128::from(count.max(1)).min(room);
        self.uncalled = false;
        let block = SequenceBlock { first: self.next, count: taken as u64, increment: self.increment, epoch: self.epoch, created: self.created };
        let after = i128::from(self.next) + i128::from(self.increment) * taken as i128;
        if taken == room {
            self.exhausted = true;
        } else {
            self.next = after as i64;
        }
        Ok(block)
    }

    /// `setval(name, value, is_called)`: the next value is `value` (not
    /// called) or the one after it. 22003 outside the bounds.
    pub fn set(&mut self, value: i64, is_called: bool) -> FoamResult<()> {
        if value < self.min || value > self.max {
            return Err(FoamError::Query {
                message: format!("setval: value {value} is out of bounds for sequence \"{}\" ({}..{})", self.name, self.min, self.max),
                sqlstate: SqlState::NumericValueOutOfRange,
            });
        }
        self.exhausted = false;
        self.next = value;
        self.uncalled = !is_called;
        if is_called {
            let after = i128::from(value) + i128::from(self.increment);
            if after > i128::from(self.max) || after < i128::from(self.min) {
                self.exhausted = true;
            } else {
                self.next = after as i64;
            }
        }
        self.epoch += 1;
        Ok(())
    }
}

/// What `ALTER SEQUENCE` changes; `None` keeps what the sequence has.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SequenceAlter {
    pub type_max: Option<i64>,
    pub increment: Option<i64>,
    pub min: Option<Setting>,
    pub max: Option<Setting>,
    pub start: Option<i64>,
    pub restart: Option<Setting>,
    pub cache: Option<i64>,
    pub cycle: Option<bool>,
}

/// A bound or RESTART value: PostgreSQL's default (`NO MINVALUE`, `NO
/// MAXVALUE`, RESTART at the start), or this value. (Not an `Option`:
/// `Some(None)` would not survive JSON on its way to the Raft leader.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Setting {
    Default,
    To(i64),
}

impl SequenceDef {
    /// `ALTER SEQUENCE`'s parameters, as PostgreSQL applies them: a bound
    /// at its type's end follows a new type, an omitted bound its default
    /// for the increment's direction, the next value is the last plus the
    /// (new) increment unless RESTART sets it; 22023 for parameters
    /// PostgreSQL refuses, the current value outside new bounds among
    /// them. Blocks nodes hold become void (they count by the old
    /// increment).
    pub fn alter(&mut self, alter: &SequenceAlter) -> FoamResult<()> {
        let (last, called) = self.state();
        let type_min = |type_max: i64| if type_max == i64::MAX { i64::MIN } else { -type_max - 1 };
        let type_max = alter.type_max.unwrap_or(self.type_max);
        let increment = alter.increment.unwrap_or(self.increment);
        if increment == 0 {
            return Err(invalid("INCREMENT must not be zero".into()));
        }
        // A bound at the old type's end follows a new type, NO MAXVALUE too.
        let (reset_max, reset_min) = match alter.type_max {
            Some(_) => (self.max == self.type_max, self.min == type_min(self.type_max)),
            None => (false, false),
        };
        let max = match alter.max {
            Some(Setting::To(max)) => max,
            Some(Setting::Default) => if increment > 0 || reset_max { type_max } else { -1 },
            None if reset_max => type_max,
            None => self.max,
        };
        let min = match alter.min {
            Some(Setting::To(min)) => min,
            Some(Setting::Default) => if increment < 0 || reset_min { type_min(type_max) } else { 1 },
            None if reset_min => type_min(type_max),
            None => self.min,
        };
        if max > type_max || min < type_min(type_max) {
            return Err(invalid(format!("MINVALUE ({min}) and MAXVALUE ({max}) must be within the sequence's type")));
        }
        if min >= max {
            return Err(invalid(format!("MINVALUE ({min}) must be less than MAXVALUE ({max})")));
        }
        let start = alter.start.unwrap_or(self.start);
        if start < min || start > max {
            return Err(invalid(format!("START value ({start}) cannot be outside MINVALUE ({min}) and MAXVALUE ({max})")));
        }
        let cache = alter.cache.unwrap_or(self.cache);
        if cache < 1 {
            return Err(invalid(format!("CACHE ({cache}) must be greater than zero")));
        }
        let (value, is_called) = match alter.restart {
            Some(Setting::To(value)) => (value, false),
            Some(Setting::Default) => (start, false),
            None => (last, called),
        };
        if value < min || value > max {
            return Err(invalid(format!("RESTART value ({value}) cannot be outside MINVALUE ({min}) and MAXVALUE ({max})")));
        }
        (self.type_max, self.increment, self.min, self.max, self.start, self.cache) = (type_max, increment, min, max, start, cache);
        self.cycle = alter.cycle.unwrap_or(self.cycle);
        // The value and whether it was called, under the new parameters.
        self.set(value, is_called)
    }
}

/// What `CREATE SEQUENCE` (or `GENERATED ... AS IDENTITY (...)`) sets;
/// `None` takes PostgreSQL's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SequenceOptions {
    pub increment: Option<i64>,
    pub min: Option<i64>,
    pub max: Option<i64>,
    pub start: Option<i64>,
    pub cache: Option<i64>,
    pub cycle: bool,
}

fn invalid(message: String) -> FoamError {
    FoamError::Query { message, sqlstate: SqlState::InvalidParameterValue }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(sequence: &mut SequenceDef, mut wanted: u64) -> FoamResult<Vec<i64>> {
        let mut out = Vec::new();
        while wanted > 0 {
            let block = sequence.allocate(wanted)?;
            out.extend((0..block.count as i64).map(|i| block.first + i * block.increment));
            wanted -= block.count;
        }
        Ok(out)
    }

    #[test]
    fn ascending_descending_and_bounds_as_postgresql() {
        let mut s = SequenceDef::new("s", SequenceOptions::default(), i64::from(i32::MAX)).unwrap();
        assert_eq!(values(&mut s, 3).unwrap(), vec![1, 2, 3]);
        assert_eq!((s.min, s.max), (1, i64::from(i32::MAX)));
        let options = SequenceOptions { increment: Some(-2), ..Default::default() };
        let mut down = SequenceDef::new("d", options, i64::MAX).unwrap();
        assert_eq!(values(&mut down, 3).unwrap(), vec![-1, -3, -5]);
        let options = SequenceOptions { start: Some(8), max: Some(10), increment: Some(2), ..Default::default() };
        let mut short = SequenceDef::new("x", options, i64::MAX).unwrap();
        assert_eq!(values(&mut short, 2).unwrap(), vec![8, 10]);
        let error = short.allocate(1).unwrap_err();
        assert_eq!(error.sqlstate(), "2200H");
        assert!(error.to_string().contains("reached maximum value of sequence \"x\" (10)"), "{error}");
        let options = SequenceOptions { max: Some(3), cycle: true, ..Default::default() };
        let mut cycling = SequenceDef::new("c", options, i64::MAX).unwrap();
        assert_eq!(values(&mut cycling, 7).unwrap(), vec![1, 2, 3, 1, 2, 3, 1]);
        let mut last = SequenceDef::new("l", SequenceOptions { start: Some(i64::MAX - 1), ..Default::default() }, i64::MAX).unwrap();
        assert_eq!(values(&mut last, 2).unwrap(), vec![i64::MAX - 1, i64::MAX]);
        assert!(last.allocate(1).is_err());
    }

    #[test]
    fn setval_and_refused_parameters() {
        let mut s = SequenceDef::new("s", SequenceOptions::default(), i64::MAX).unwrap();
        s.set(41, true).unwrap();
        assert_eq!((s.allocate(1).unwrap().first, s.epoch), (42, 1));
        s.set(7, false).unwrap();
        assert_eq!(s.allocate(1).unwrap().first, 7);
        assert_eq!(s.set(0, true).unwrap_err().sqlstate(), "22003");
        for options in [
            SequenceOptions { increment: Some(0), ..Default::default() },
            SequenceOptions { min: Some(5), max: Some(5), ..Default::default() },
            SequenceOptions { start: Some(0), ..Default::default() },
            SequenceOptions { cache: Some(0), ..Default::default() },
            SequenceOptions { max: Some(i64::from(i32::MAX) + 1), ..Default::default() },
        ] {
            assert_eq!(SequenceDef::new("s", options.clone(), i64::from(i32::MAX)).unwrap_err().sqlstate(), "22023", "{options:?}");
        }
    }

    /// A sequence stored before grants existed (`"owner"` beside its other
    /// fields) reads with that owner and no grants, and is stored alike.
    #[test]
    fn sequences_stored_before_grants_keep_their_owner() {
        let old = r#"{"name":"s","increment":1,"min":1,"max":9,"start":1,"cycle":false,"cache":1,"next":3,"owner":"alice"}"#;
        let read: SequenceDef = serde_json::from_str(old).unwrap();
        assert_eq!((read.acl.owner.as_deref(), read.acl.grants.len(), read.type_max, read.uncalled), (Some("alice"), 0, i64::MAX, false));
        let written = serde_json::to_value(&read).unwrap();
        assert_eq!(written["owner"], "alice");
        assert_eq!(serde_json::from_value::<SequenceDef>(written).unwrap(), read);
    }

    /// ALTER SEQUENCE reaches the Raft leader as JSON: a default bound or
    /// RESTART survives the trip, and applies as PostgreSQL's does.
    #[test]
    fn alter_survives_json_and_applies() {
        let alter = SequenceAlter { restart: Some(Setting::Default), max: Some(Setting::Default), increment: Some(-1), ..Default::default() };
        let back: SequenceAlter = serde_json::from_str(&serde_json::to_string(&alter).unwrap()).unwrap();
        assert_eq!(back, alter);
        let mut s = SequenceDef::new("s", SequenceOptions { start: Some(5), max: Some(10), ..Default::default() }, i64::MAX).unwrap();
        assert_eq!(values(&mut s, 2).unwrap(), vec![5, 6]);
        let alter = SequenceAlter { restart: Some(Setting::Default), max: Some(Setting::Default), ..Default::default() };
        s.alter(&alter).unwrap();
        assert_eq!((s.max, s.state()), (i64::MAX, (5, false)));
        s.alter(&SequenceAlter { increment: Some(10), ..Default::default() }).unwrap();
        assert_eq!(values(&mut s, 2).unwrap(), vec![5, 15]);
        assert_eq!(s.alter(&SequenceAlter { min: Some(Setting::To(100)), ..Default::default() }).unwrap_err().sqlstate(), "22023");
        // An ascending smallint sequence made bigint with NO MAXVALUE: its
        // bound at the old type's end follows the new type.
        let mut small = SequenceDef::new("m", SequenceOptions::default(), i64::from(i16::MAX)).unwrap();
        small.alter(&SequenceAlter { type_max: Some(i64::MAX), max: Some(Setting::Default), ..Default::default() }).unwrap();
        assert_eq!((small.min, small.max), (1, i64::MAX));
    }

    #[test]
    fn state_is_postgresqls() {
        let mut s = SequenceDef::new("s", SequenceOptions { start: Some(10), increment: Some(5), ..Default::default() }, i64::MAX).unwrap();
        assert_eq!(s.state(), (10, false));
        assert_eq!(values(&mut s, 2).unwrap(), vec![10, 15]);
        assert_eq!(s.state(), (15, true));
        s.set(50, false).unwrap();
        assert_eq!(s.state(), (50, false));
        s.set(50, true).unwrap();
        assert_eq!(s.state(), (50, true));
        let mut extreme = SequenceDef::new("e", SequenceOptions { increment: Some(i64::MAX), min: Some(i64::MIN), ..Default::default() }, i64::MAX).unwrap();
        assert_eq!(values(&mut extreme, 2).unwrap(), vec![i64::MIN, -1]);
        assert_eq!(extreme.state(), (-1, true));
        assert_eq!(values(&mut extreme, 1).unwrap(), vec![i64::MAX - 1]);
        assert_eq!(extreme.state(), (i64::MAX - 1, true));
    }

    /// A sequence's `(last_value, is_called)` given to `setval` on a fresh
    /// copy (as a pg_dump restore does) leaves the copy handing out what
    /// the original would next, or failing as it would.
    #[test]
    fn state_restores_through_setval() {
        let ascending = SequenceOptions { max: Some(10), ..Default::default() };
        let descending = SequenceOptions { increment: Some(-3), min: Some(-10), ..Default::default() };
        let cycling = SequenceOptions { max: Some(4), cycle: true, start: Some(2), ..Default::default() };
        for options in [ascending, descending, cycling] {
            for drawn in 0..12 {
                for setval in [None, Some((3, false)), Some((3, true)), Some((-4, false))] {
                    let mut original = SequenceDef::new("s", options.clone(), i64::MAX).unwrap();
                    if let Some((value, called)) = setval {
                        let _ = original.set(value, called);
                    }
                    let _ = values(&mut original, drawn);
                    let (last, called) = original.state();
                    let mut copy = SequenceDef::new("s", options.clone(), i64::MAX).unwrap();
                    copy.set(last, called).unwrap();
                    let next = |s: &mut SequenceDef| s.allocate(1).map(|b| b.first).map_err(|e| e.sqlstate());
                    assert_eq!(next(&mut copy), next(&mut original), "{options:?} drawn {drawn} setval {setval:?}: state ({last}, {called})");
                }
            }
        }
    }
}
