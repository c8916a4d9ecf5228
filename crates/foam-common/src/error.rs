//! The one error type of FoamDB's service boundaries. Every variant names the
//! problem in its message and maps to a PostgreSQL SQLSTATE, so a client sees
//! `42P01 relation "x" does not exist` rather than a Rust debug string. Errors
//! from a remote node travel as `(sqlstate, message)` and are rebuilt as
//! [`FoamError::Remote`], keeping their code and text across the network.
//! Inside one node an error keeps its variant through DataFusion's error
//! type (`DataFusionError::External`).

use datafusion_common::DataFusionError;

use crate::sqlstate::SqlState;

pub type FoamResult<T> = Result<T, FoamError>;

#[derive(Debug, thiserror::Error)]
pub enum FoamError {
    #[error("syntax error: {message}")]
    Syntax { message: String },

    #[error("relation \"{name}\" does not exist")]
    UndefinedTable { name: String },

    #[error("relation \"{name}\" already exists")]
    DuplicateTable { name: String },

    #[error("column \"{column}\" does not exist in \"{table}\"")]
    UndefinedColumn { table: String, column: String },

    #[error("invalid table definition: {message}")]
    InvalidTableDefinition { message: String },

    #[error("{feature} is not supported")]
    FeatureNotSupported { feature: String },

    #[error("invalid parameter: {message}")]
    InvalidParameter { message: String },

    /// A data file given to COPY could not be parsed. `line` is 1-based and
    /// counts the header line, like an editor's line numbers.
    #[error("COPY {table}{}{}: {message}", line_part(*line), column.as_ref().map(|c| format!(", column {c}")).unwrap_or_default())]
    CopyData { table: String, line: u64, column: Option<String>, message: String },

    /// The client may not do this (PostgreSQL's "permission denied").
    #[error("permission denied: {message}")]
    InsufficientPrivilege { message: String },

    #[error("could not read file \"{path}\": {message}")]
    FileAccess { path: String, message: String },

    #[error("invalid input value: {message}")]
    DataException { message: String },

    #[error("node {node_id} at {addr} is unreachable: {message}")]
    NodeUnavailable { node_id: u32, addr: String, message: String },

    #[error("the cluster catalog is not available: {message}")]
    CatalogUnavailable { message: String },

    #[error("transaction aborted: {message}")]
    TransactionAborted { message: String },

    /// A partition's replicas changed while the statement ran (a copy caught
    /// up, a node failed); nothing was applied and the statement may be retried.
    #[error("could not serialize access: {message}; retry the statement")]
    PlacementChanged { message: String },

    /// No copy of a partition is reachable.
    #[error("{message}")]
    PartitionUnavailable { message: String },

    #[error("I/O error on {path}: {source}")]
    Io { path: String, #[source] source: std::io::Error },

    #[error("data corrupted in {path}: {message}")]
    Corrupted { path: String, message: String },

    #[error("{message}")]
    Query { message: String, sqlstate: SqlState },

    /// A read stopped before it finished: it ran past `statement_timeout`, or
    /// the client sent a cancel request. Worded as PostgreSQL words it.
    #[error("canceling statement due to {reason}")]
    QueryCanceled { reason: &'static str },

    /// An error raised on another node, carried with its original code and text.
    #[error("{message}")]
    Remote { sqlstate: SqlState, message: String },

    /// A bug in FoamDB: an invariant of our own code did not hold.
    #[error("internal error: {message}")]
    Internal { message: String },
}

fn line_part(line: u64) -> String {
    if line == 0 { String::new() } else { format!(", line {line}") }
}

impl FoamError {
    /// The PostgreSQL SQLSTATE a client sees for this error.
    pub fn sqlstate(&self) -> SqlState {
        match self {
            FoamError::Syntax { .. } => SqlState::SyntaxError,
            FoamError::UndefinedTable { .. } => SqlState::UndefinedTable,
            FoamError::DuplicateTable { .. } => SqlState::DuplicateTable,
            FoamError::UndefinedColumn { .. } => SqlState::UndefinedColumn,
            FoamError::InvalidTableDefinition { .. } => SqlState::InvalidTableDefinition,
            FoamError::FeatureNotSupported { .. } => SqlState::FeatureNotSupported,
            FoamError::InvalidParameter { .. } => SqlState::InvalidParameterValue,
            FoamError::CopyData { .. } => SqlState::BadCopyFileFormat,
            FoamError::InsufficientPrivilege { .. } => SqlState::InsufficientPrivilege,
            FoamError::FileAccess { .. } => SqlState::UndefinedFile,
            FoamError::DataException { .. } => SqlState::DataException,
            FoamError::NodeUnavailable { .. } => SqlState::ConnectionFailure,
            FoamError::CatalogUnavailable { .. } => SqlState::CannotConnectNow,
            FoamError::TransactionAborted { .. } => SqlState::TransactionRollback,
            FoamError::PlacementChanged { .. } => SqlState::SerializationFailure,
            FoamError::PartitionUnavailable { .. } => SqlState::CannotConnectNow,
            FoamError::Io { .. } => SqlState::IoError,
            FoamError::Corrupted { .. } => SqlState::DataCorrupted,
            FoamError::Query { sqlstate, .. } => *sqlstate,
            FoamError::QueryCanceled { .. } => SqlState::QueryCanceled,
            FoamError::Remote { sqlstate, .. } => *sqlstate,
            FoamError::Internal { .. } => SqlState::InternalError,
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        FoamError::Internal { message: message.into() }
    }

    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        FoamError::Io { path: path.as_ref().display().to_string(), source }
    }

    /// Packs this error for the wire as `SQLSTATE|message`.
    pub fn to_wire(&self) -> String {
        format!("{}|{}", self.sqlstate(), self)
    }

    /// Rebuilds an error packed by [`FoamError::to_wire`]; text from a peer that
    /// does not follow the format is kept whole as an internal error.
    pub fn from_wire(text: &str) -> Self {
        match text.split_once('|').and_then(|(code, message)| Some((SqlState::from_code(code)?, message))) {
            Some((sqlstate, message)) => FoamError::Remote { sqlstate, message: message.to_string() },
            None => FoamError::internal(text.to_string()),
        }
    }

    /// Whether a write was refused because a partition's copies changed
    /// under it (raised here or on a peer): it may run again on the new
    /// placement.
    pub fn is_placement_change(&self) -> bool {
        self.sqlstate() == SqlState::SerializationFailure
    }
}

/// Marker prefix of a [`FoamError`] carried through DataFusion's error type
/// as text: datafusion-distributed relays a worker's error to the
/// coordinator as its message, so the code must be in the message.
const WRAPPED_PREFIX: &str = "foam-error:";

/// A [`FoamError`] inside a `DataFusionError::External` (out of a
/// `DataSink`, a scan, a rule): taken back whole on this node, and printed
/// with its code for the trip to another.
impl From<FoamError> for DataFusionError {
    fn from(error: FoamError) -> Self {
        DataFusionError::External(Box::new(WrappedFoamError(error)))
    }
}

#[derive(Debug)]
struct WrappedFoamError(FoamError);

impl std::fmt::Display for WrappedFoamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{WRAPPED_PREFIX}{}", self.0.to_wire())
    }
}

impl std::error::Error for WrappedFoamError {}

impl From<DataFusionError> for FoamError {
    fn from(error: DataFusionError) -> Self {
        classify_datafusion_error(error)
    }
}

/// The [`FoamError`] `error` carries on this node, or `error` unchanged.
fn take_foam_error(error: DataFusionError) -> Result<FoamError, DataFusionError> {
    match error {
        DataFusionError::External(inner) => match inner.downcast::<WrappedFoamError>() {
            Ok(wrapped) => Ok(wrapped.0),
            Err(inner) => Err(DataFusionError::External(inner)),
        },
        DataFusionError::Context(context, inner) => take_foam_error(*inner).map_err(|inner| DataFusionError::Context(context, Box::new(inner))),
        DataFusionError::Shared(shared) => match std::sync::Arc::try_unwrap(shared) {
            Ok(inner) => take_foam_error(inner),
            Err(shared) => Err(DataFusionError::Shared(shared)),
        },
        other => Err(other),
    }
}

impl From<std::io::Error> for FoamError {
    fn from(source: std::io::Error) -> Self {
        FoamError::Io { path: String::from("(unnamed)"), source }
    }
}

/// Maps a DataFusion error (possibly wrapping a FoamError, possibly relayed from
/// a remote worker as text) to the SQLSTATE a PostgreSQL user would expect.
/// The message decides first, because the same problem reaches us in different
/// DataFusion variants depending on where it was found (planner, optimizer,
/// remote worker).
pub fn classify_datafusion_error(error: DataFusionError) -> FoamError {
    let error = match take_foam_error(error) {
        Ok(foam) => return foam,
        Err(error) => error,
    };
    let root = error.find_root();
    let text = root.to_string();
    // Raised on another node and relayed as text.
    if let Some(index) = text.find(WRAPPED_PREFIX) {
        return FoamError::from_wire(&text[index + WRAPPED_PREFIX.len()..]);
    }
    let message = strip_datafusion_prefixes(&text);
    if let Some(name) = missing_table_name(&message) {
        return FoamError::UndefinedTable { name };
    }
    let by_variant = match root {
        DataFusionError::SQL(..) => SqlState::SyntaxError,
        DataFusionError::NotImplemented(_) => SqlState::FeatureNotSupported,
        DataFusionError::ResourcesExhausted(_) => SqlState::OutOfMemory,
        DataFusionError::ArrowError(arrow, _) => arrow_sqlstate(arrow),
        DataFusionError::Plan(_) | DataFusionError::SchemaError(..) => SqlState::SyntaxErrorOrAccessRuleViolation,
        _ => SqlState::InternalError,
    };
    let sqlstate = sqlstate_from_message(&message).unwrap_or(by_variant);
    let message = postgresql_words(&message).map(str::to_string).or_else(|| outer_reference_words(&message)).unwrap_or(message);
    FoamError::Query { message, sqlstate }
}

/// The SQLSTATE of an Arrow kernel's error: bad values are the data's
/// fault; a kernel handed arrays it cannot take (`Invalid comparison
/// operation: Int32 >= Int64`) is a planning bug, not bad input.
fn arrow_sqlstate(error: &arrow::error::ArrowError) -> SqlState {
    use arrow::error::ArrowError::*;
    match error {
        // A number its target type cannot hold ("Can't cast value 2147483648
        // to type Int32"), as PostgreSQL's "integer out of range".
        CastError(message) if message.starts_with("Can't cast value") => SqlState::NumericValueOutOfRange,
        CastError(_) | ParseError(_) | CsvError(_) | JsonError(_) => SqlState::InvalidTextRepresentation,
        DivideByZero => SqlState::DivisionByZero,
        ArithmeticOverflow(_) => SqlState::NumericValueOutOfRange,
        MemoryError(_) => SqlState::OutOfMemory,
        NotYetImplemented(_) => SqlState::FeatureNotSupported,
        _ => SqlState::InternalError,
    }
}

/// PostgreSQL's message for an Arrow kernel's error a PostgreSQL user
/// knows by it: a number out of its integer type's range, a division by
/// zero (from the text, as a worker's error arrives as text).
fn postgresql_words(message: &str) -> Option<&'static str> {
    let integer_type = |name: &str| match name.trim() {
        "Int16" | "Int16Array" => Some("smallint out of range"),
        "Int32" | "Int32Array" => Some("integer out of range"),
        "Int64" | "Int64Array" => Some("bigint out of range"),
        _ => None,
    };
    if message.contains("Can't cast value") {
        return message.rsplit("to type ").next().and_then(integer_type);
    }
    if let Some((_, rest)) = message.split_once("Compute error: ") {
        return rest.split_once(" overflow on abs(").and_then(|(array, _)| integer_type(array));
    }
    message.contains("Divide by zero error").then_some("division by zero")
}

/// DataFusion's refusal of an outer reference it could not decorrelate
/// (`Physical plan does not support logical expression
/// OuterReferenceColumn(Field {..}, Column { relation: Some(Bare { table:
/// "t" }), name: "k" })`) in words naming the column.
fn outer_reference_words(message: &str) -> Option<String> {
    let (_, column) = message.split_once("logical expression OuterReferenceColumn(")?;
    let (_, column) = column.split_once("Column {")?;
    let quoted_after = |text: &str, key: &str| -> Option<String> { text.split_once(key).and_then(|(_, rest)| rest.split_once('"')).map(|(value, _)| value.to_string()) };
    let name = quoted_after(column, "name: \"")?;
    let qualified = match quoted_after(column, "table: \"") {
        Some(table) => format!("{table}.{name}"),
        None => name,
    };
    Some(format!(
        "the reference to {qualified} from a subquery or LATERAL item cannot be planned in this position (DataFusion could not decorrelate it)"
    ))
}

/// The table name in DataFusion's "table 'catalog.schema.name' not found".
fn missing_table_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("table '")?;
    let (qualified, tail) = rest.split_once('\'')?;
    if !tail.trim_start().starts_with("not found") {
        return None;
    }
    Some(qualified.rsplit('.').next().unwrap_or(qualified).to_string())
}

fn sqlstate_from_message(message: &str) -> Option<SqlState> {
    use SqlState::*;
    const PATTERNS: &[(&str, SqlState)] = &[
        // A peer's Flight stream broke (gRPC UNAVAILABLE: a connection
        // reset, an HTTP/2 keepalive that timed out): the network's fault.
        ("The service is currently unavailable", ConnectionFailure),
        ("No field named", UndefinedColumn),
        ("Prepared statement '", InvalidSqlStatementName),
        ("declared as non-nullable but contains null values", NotNullViolation),
        ("not found", UndefinedTable),
        ("Divide by zero", DivisionByZero),
        ("divide by zero", DivisionByZero),
        ("No function matches", UndefinedFunction),
        ("Invalid function", UndefinedFunction),
        ("Can't cast value", NumericValueOutOfRange),
        ("Cannot cast", InvalidTextRepresentation),
        ("Cast error", InvalidTextRepresentation),
        ("Error parsing", InvalidTextRepresentation),
        ("Error while parsing", InvalidTextRepresentation),
        ("overflow", NumericValueOutOfRange),
        ("Ambiguous reference", AmbiguousColumn),
        ("is not implemented", FeatureNotSupported),
        // Correlated subqueries DataFusion cannot decorrelate (under OR,
        // grouped by an uncorrelated key): its limits, not the statement's
        // error (fuzz seed 59391 write 37).
        ("A GROUP BY clause in a scalar correlated subquery cannot contain non-correlated columns", FeatureNotSupported),
        ("Correlated column is not allowed in predicate", FeatureNotSupported),
        ("Accessing outer reference columns is not allowed", FeatureNotSupported),
        ("Physical plan does not support logical expression ScalarSubquery", FeatureNotSupported),
        ("Physical plan does not support logical expression OuterReferenceColumn", FeatureNotSupported),
        ("Unsupported", FeatureNotSupported),
        ("sql parser error", SyntaxError),
    ];
    PATTERNS.iter().find(|(pattern, _)| message.contains(pattern)).map(|(_, state)| *state)
}

/// DataFusion prefixes messages with layers such as "Error during planning: ";
/// a SQL user needs only the innermost sentence.
fn strip_datafusion_prefixes(text: &str) -> String {
    const PREFIXES: &[&str] = &[
        "External error: ",
        "Error during planning: ",
        "Execution error: ",
        "Arrow error: ",
        "Schema error: ",
        "SQL error: ",
        "This feature is not implemented: ",
        "Invalid argument error: ",
        "Parser error: ",
        "Cast error: ",
        "Optimizer rule '",
    ];
    let mut rest = text.trim();
    loop {
        let before = rest;
        for prefix in PREFIXES {
            if let Some(stripped) = rest.strip_prefix(prefix) {
                rest = stripped;
            }
        }
        if rest == before {
            break;
        }
    }
    rest.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_stream_that_broke_is_a_connection_failure() {
        // As a worker's broken Flight stream reached a client in a fuzz run.
        let text = "code: 'The service is currently unavailable', message: \"http2 error\", source: tonic::transport::Error(Transport, hyper::Error(Http2, KeepAliveTimedOut))";
        let error = FoamError::from(DataFusionError::External(Box::new(std::io::Error::other(text))));
        assert_eq!(error.sqlstate(), "08006", "{error}");
    }

    #[test]
    fn wire_round_trip_keeps_code_and_text() {
        let original = FoamError::CopyData {
            table: "t".into(),
            line: 7001,
            column: Some("b".into()),
            message: "cannot parse \"x\" as INT".into(),
        };
        let rebuilt = FoamError::from_wire(&original.to_wire());
        assert_eq!(rebuilt.sqlstate(), "22P04");
        assert_eq!(rebuilt.to_string(), original.to_string());
        assert!(rebuilt.to_string().contains("line 7001, column b"));
    }

    #[test]
    fn foam_error_survives_a_trip_through_datafusion() {
        let original = FoamError::UndefinedTable { name: "missing".into() };
        let through: DataFusionError = original.into();
        let back = FoamError::from(DataFusionError::Context("scan".into(), Box::new(through)));
        assert_eq!(back.sqlstate(), "42P01");
        assert_eq!(back.to_string(), "relation \"missing\" does not exist");
        assert!(matches!(back, FoamError::UndefinedTable { .. }), "the variant itself comes back: {back:?}");
    }

    #[test]
    fn an_error_relayed_as_text_by_another_node_keeps_its_code() {
        // datafusion-distributed sends a worker's error as its message only.
        let on_worker: DataFusionError = FoamError::PlacementChanged { message: "copy moved".into() }.into();
        let relayed = DataFusionError::External(Box::new(std::io::Error::other(on_worker.to_string())));
        let back = FoamError::from(relayed);
        assert!(matches!(back, FoamError::Remote { sqlstate: SqlState::SerializationFailure, .. }), "{back:?}");
        assert!(back.is_placement_change());
        assert!(back.to_string().contains("copy moved"), "{back}");
    }

    #[test]
    fn a_subquery_datafusion_cannot_decorrelate_is_not_supported() {
        for message in [
            "A GROUP BY clause in a scalar correlated subquery cannot contain non-correlated columns",
            "Physical plan does not support logical expression ScalarSubquery(<subquery>)",
        ] {
            assert_eq!(FoamError::from(DataFusionError::Plan(message.into())).sqlstate(), "0A000", "{message}");
        }
        let outer = r#"Physical plan does not support logical expression OuterReferenceColumn(Field { name: "id", data_type: Int32, nullable: true }, Column { relation: Some(Bare { table: "la" }), name: "id" })"#;
        let error = FoamError::from(DataFusionError::NotImplemented(outer.into()));
        assert_eq!(error.sqlstate(), "0A000");
        assert!(error.to_string().starts_with("the reference to la.id from a subquery or LATERAL item"), "{error}");
    }

    #[test]
    fn missing_table_reads_like_postgres() {
        let error = FoamError::from(DataFusionError::Plan("table 'foam.public.nope' not found".into()));
        assert_eq!(error.sqlstate(), "42P01");
        assert_eq!(error.to_string(), "relation \"nope\" does not exist");
        let error = FoamError::from(DataFusionError::SchemaError(
            Box::new(datafusion_common::SchemaError::FieldNotFound {
                field: Box::new(datafusion_common::Column::from_name("zz")),
                valid_fields: vec![],
            }),
            Box::new(None),
        ));
        assert_eq!(error.sqlstate(), "42703", "{error}");
    }

    #[test]
    fn an_arrow_kernel_error_is_bad_data_only_when_the_data_is_bad() {
        let arrow = |e: arrow::error::ArrowError| FoamError::from(DataFusionError::ArrowError(Box::new(e), None)).sqlstate();
        use arrow::error::ArrowError;
        assert_eq!(arrow(ArrowError::CastError("Cannot cast string 'x' to value of Int32 type".into())), "22P02");
        assert_eq!(arrow(ArrowError::CastError("Can't cast value 2147483648 to type Int32".into())), "22003", "a number out of its type's range");
        assert_eq!(arrow(ArrowError::ParseError("bad date".into())), "22P02");
        assert_eq!(arrow(ArrowError::DivideByZero), "22012");
        // In PostgreSQL's words.
        let words = |e: arrow::error::ArrowError| FoamError::from(DataFusionError::ArrowError(Box::new(e), None)).to_string();
        assert!(words(ArrowError::CastError("Can't cast value 2147483648 to type Int32".into())).contains("integer out of range"));
        assert!(words(ArrowError::ComputeError("Int16Array overflow on abs(-32768)".into())).contains("smallint out of range"));
        assert!(words(ArrowError::DivideByZero).contains("division by zero"));
        // Relayed from a worker as text, the same code and words.
        let relayed = FoamError::from(DataFusionError::External("Arrow error: Cast error: Can't cast value 70000 to type Int16".into()));
        assert_eq!((relayed.sqlstate(), relayed.to_string().contains("smallint out of range")), (SqlState::NumericValueOutOfRange, true));
        assert!(words(ArrowError::CastError("Can't cast value 1e40 to type Decimal128(38, 0)".into())).contains("Can't cast value"), "others keep Arrow's");
        // Arrays of different types reaching a comparison: a planning bug
        // (fuzz seed 42045), not the user's input.
        assert_eq!(arrow(ArrowError::InvalidArgumentError("Invalid comparison operation: Int32 >= Int64".into())), "XX000");
        assert_eq!(arrow(ArrowError::ComputeError("kernel failed".into())), "XX000");
    }

    #[test]
    fn malformed_wire_text_is_internal() {
        assert_eq!(FoamError::from_wire("no code here").sqlstate(), "XX000");
    }
}
