//! PostgreSQL SQLSTATEs as a type: the codes FoamDB raises, by name, and
//! any other five-character code as a peer or a client library reported it.
//! Decisions about an error (retry it, blame the statement) read the code's
//! class here instead of comparing strings where they are made.

use std::fmt;

macro_rules! sqlstates {
    ($($(#[$doc:meta])* $name:ident = $code:literal,)*) => {
        /// A PostgreSQL SQLSTATE (PostgreSQL's appendix A names them).
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub enum SqlState {
            $($(#[$doc])* $name,)*
            /// A well-formed code FoamDB does not raise itself.
            Other([u8; 5]),
        }

        impl SqlState {
            /// The five-character code.
            pub fn code(&self) -> &str {
                match self {
                    $(SqlState::$name => $code,)*
                    // Built only from five ASCII alphanumerics (`from_code`).
                    SqlState::Other(bytes) => std::str::from_utf8(bytes).unwrap_or("XX000"),
                }
            }

            /// The state a code names; `None` unless it is five ASCII
            /// letters or digits.
            pub fn from_code(code: &str) -> Option<SqlState> {
                match code {
                    $($code => Some(SqlState::$name),)*
                    other => {
                        let bytes: [u8; 5] = other.as_bytes().try_into().ok()?;
                        bytes.iter().all(u8::is_ascii_alphanumeric).then_some(SqlState::Other(bytes))
                    }
                }
            }
        }
    };
}

sqlstates! {
    SuccessfulCompletion = "00000",
    ConnectionFailure = "08006",
    TransactionResolutionUnknown = "08007",
    FeatureNotSupported = "0A000",
    /// A scalar subquery gave more than one row.
    CardinalityViolation = "21000",
    DataException = "22000",
    StringDataRightTruncation = "22001",
    NumericValueOutOfRange = "22003",
    InvalidDatetimeFormat = "22007",
    DatetimeFieldOverflow = "22008",
    NullValueNotAllowed = "22004",
    DivisionByZero = "22012",
    IntervalFieldOverflow = "22015",
    InvalidUseOfEscapeCharacter = "2200C",
    InvalidEscapeSequence = "22025",
    SequenceGeneratorLimitExceeded = "2200H",
    InvalidParameterValue = "22023",
    InvalidArgumentForWidthBucket = "2201G",
    InvalidTextRepresentation = "22P02",
    BadCopyFileFormat = "22P04",
    NotNullViolation = "23502",
    UniqueViolation = "23505",
    CheckViolation = "23514",
    ActiveSqlTransaction = "25001",
    ReadOnlySqlTransaction = "25006",
    NoActiveSqlTransaction = "25P01",
    InvalidSqlStatementName = "26000",
    InvalidCursorName = "34000",
    DependentObjectsStillExist = "2BP01",
    InvalidSavepointSpecification = "3B001",
    InFailedSqlTransaction = "25P02",
    TransactionRollback = "40000",
    SerializationFailure = "40001",
    SyntaxErrorOrAccessRuleViolation = "42000",
    DuplicateCursor = "42P03",
    GeneratedAlways = "428C9",
    InsufficientPrivilege = "42501",
    InvalidGrantOperation = "0LP01",
    InvalidPassword = "28P01",
    InvalidCatalogName = "3D000",
    InvalidSchemaName = "3F000",
    InvalidAuthorization = "28000",
    DuplicateObject = "42710",
    ReservedName = "42939",
    SyntaxError = "42601",
    AmbiguousColumn = "42702",
    GroupingError = "42803",
    WindowingError = "42P20",
    DatatypeMismatch = "42804",
    UndefinedColumn = "42703",
    UndefinedObject = "42704",
    UndefinedFunction = "42883",
    UndefinedTable = "42P01",
    DuplicateTable = "42P07",
    DuplicateColumn = "42701",
    InvalidColumnReference = "42P10",
    InvalidTableDefinition = "42P16",
    WrongObjectType = "42809",
    InvalidObjectDefinition = "42P17",
    OutOfMemory = "53200",
    ObjectNotInPrerequisiteState = "55000",
    TooManyConnections = "53300",
    ProgramLimitExceeded = "54000",
    StatementTooComplex = "54001",
    QueryCanceled = "57014",
    CannotConnectNow = "57P03",
    IoError = "58030",
    UndefinedFile = "58P01",
    InternalError = "XX000",
    DataCorrupted = "XX001",
}

impl SqlState {
    /// The class: the code's first two characters.
    pub fn class(&self) -> &str {
        &self.code()[..2]
    }

    /// Whether the statement itself is at fault, so running it again cannot
    /// help: bad data (22), a broken constraint (23), a syntax or access
    /// rule (42), a prepared statement it names that does not exist (26),
    /// a role it drops that still owns or holds something (2B),
    /// an unsupported feature (0A), exhausted resources or limits (53, 54),
    /// or a stop its own timeout or client asked for.
    pub fn is_the_statements_fault(&self) -> bool {
        matches!(self.class(), "22" | "23" | "26" | "2B" | "42" | "0A" | "53" | "54") || *self == SqlState::QueryCanceled
    }
}

impl fmt::Display for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl fmt::Debug for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// Compares with a code as text, as tests and client code state them.
impl PartialEq<&str> for SqlState {
    fn eq(&self, other: &&str) -> bool {
        self.code() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_and_other_codes_round_trip() {
        for code in ["42P01", "40001", "XX000", "3F000", "P0001", "2F000"] {
            let state = SqlState::from_code(code).unwrap();
            assert_eq!(state.code(), code);
        }
        assert_eq!(SqlState::from_code("42P01"), Some(SqlState::UndefinedTable));
        assert!(matches!(SqlState::from_code("2F000"), Some(SqlState::Other(_))));
    }

    #[test]
    fn malformed_codes_are_refused() {
        for code in ["", "4200", "420000", "42 01", "4200é"] {
            assert_eq!(SqlState::from_code(code), None, "{code:?}");
        }
    }

    #[test]
    fn the_statements_fault_is_decided_by_class() {
        assert!(SqlState::DivisionByZero.is_the_statements_fault());
        assert!(SqlState::from_code("54001").unwrap().is_the_statements_fault());
        assert!(SqlState::QueryCanceled.is_the_statements_fault());
        assert!(!SqlState::SerializationFailure.is_the_statements_fault());
        assert!(!SqlState::CannotConnectNow.is_the_statements_fault());
        assert!(!SqlState::ConnectionFailure.is_the_statements_fault());
    }
}
