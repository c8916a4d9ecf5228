//! `nextval`, `currval`, `lastval` and `setval`: drawing values from the
//! catalog's sequences (foam-catalog `sequences.rs`).
//!
//! Each node keeps, per sequence, the block of values it last drew with
//! one Raft command ([`SequenceBlocks`]); a batch of `n` rows that calls
//! `nextval` takes `n` values at once, drawing `max(n, CACHE)` more when
//! the block runs out. A block of an older epoch (`setval` since) is
//! dropped. `nextval` runs wherever its expression runs, on any node's
//! worker as well; `currval` and `lastval` read what this session drew,
//! so only `nextval` calls run by this session's own node count for them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility};
use foam_catalog::model::CommandOutcome;
use foam_catalog::CatalogCommand;
use foam_catalog::privileges::Privilege;
use foam_common::{FoamError, FoamResult, SqlState};

use crate::context::NodeContext;

/// The blocks of values this node drew, by sequence.
#[derive(Debug, Default)]
pub struct SequenceBlocks {
    blocks: Mutex<HashMap<String, Block>>,
}

#[derive(Debug, Clone, Copy)]
struct Block {
    next: i64,
    left: u64,
    increment: i64,
    epoch: u64,
    created: u64,
}

impl SequenceBlocks {
    /// `count` values of sequence `name`, in order.
    pub async fn draw(&self, node: &NodeContext, name: &str, count: usize) -> FoamResult<Vec<i64>> {
        let mut values = Vec::with_capacity(count);
        let mut catalog = node.catalog.current();
        if !catalog.sequences.contains_key(name) {
            catalog = node.catalog.refresh().await?;
        }
        let Some(sequence) = catalog.sequences.get(name) else {
            return Err(FoamError::Query { message: format!("relation \"{name}\" does not exist"), sqlstate: SqlState::UndefinedTable });
        };
        let (mut epoch, mut created, cache) = (sequence.epoch, sequence.created, sequence.cache.max(1) as u64);
        while values.len() < count {
            {
                let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(block) = blocks.get_mut(name).filter(|b| b.created == created && b.epoch >= epoch) {
                    while block.left > 0 && values.len() < count {
                        values.push(block.next);
                        block.left -= 1;
                        block.next = block.next.wrapping_add(block.increment);
                    }
                }
            }
            let wanted = (count - values.len()) as u64;
            if wanted == 0 {
                break;
            }
            let command = CatalogCommand::AllocateSequence { name: name.to_string(), count: wanted.max(cache) };
            let CommandOutcome::SequenceValues { block } = node.catalog.apply(command).await?.1 else {
                return Err(FoamError::internal("the catalog answered a sequence allocation without values"));
            };
            // The leader's catalog is the newest: this node's may lag behind
            // a re-created sequence or a setval.
            (created, epoch) = (block.created, epoch.max(block.epoch));
            let drawn = Block { next: block.first, left: block.count, increment: block.increment, epoch: block.epoch, created: block.created };
            self.blocks.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), drawn);
        }
        Ok(values)
    }
}

/// What this session drew last, for `currval` and `lastval`, and who it
/// acts as, for `setval` (an owner's or a superuser's).
#[derive(Debug)]
pub struct SessionSequences {
    last: Mutex<(HashMap<String, i64>, Option<String>)>,
    session_user: String,
    /// The session's `SET ROLE`, shared with it.
    role: Arc<Mutex<Option<String>>>,
    insecure: bool,
}

impl SessionSequences {
    pub fn new(session_user: &str, role: Arc<Mutex<Option<String>>>, insecure: bool) -> Self {
        SessionSequences { last: Mutex::default(), session_user: session_user.to_string(), role, insecure }
    }

    /// 42501 unless the session's role holds one of `any_of` on sequence
    /// `name` (its owner and superusers hold them all), as `function`
    /// needs. The functions check as they run what the statement's text
    /// did not show (a name computed, bound, or read through a view);
    /// an identity column's sequence, which an INSERT draws from without
    /// a grant, `nextval` takes without one.
    fn check(&self, catalog: &foam_catalog::Catalog, name: &str, function: Function) -> FoamResult<()> {
        let Some(sequence) = catalog.sequences.get(name) else {
            return Err(FoamError::Query { message: format!("relation \"{name}\" does not exist"), sqlstate: SqlState::UndefinedTable });
        };
        if function == Function::Next && is_identity_sequence(catalog, sequence) {
            return Ok(());
        }
        let Some(any_of) = privileges_needed(function.sql_name()) else { return Ok(()) };
        let acting = self.role.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_else(|| self.session_user.clone());
        let superuser = self.insecure || catalog.roles.get(&acting).is_some_and(|r| r.superuser);
        if superuser || any_of.iter().any(|privilege| sequence.acl.allows(&acting, *privilege)) {
            return Ok(());
        }
        let names: Vec<&str> = any_of.iter().map(|p| p.name()).collect();
        Err(FoamError::InsufficientPrivilege { message: format!("permission denied for sequence {name} (needs {} privilege)", names.join(" or ")) })
    }
}

/// The privileges on its sequence, any one of them, that PostgreSQL's
/// sequence function `function` needs: `nextval` USAGE or UPDATE,
/// `currval` SELECT or USAGE, `setval` UPDATE; `None` for another name
/// (`lastval` reads what the session drew).
pub fn privileges_needed(function: &str) -> Option<&'static [Privilege]> {
    match function {
        "nextval" => Some(&[Privilege::Usage, Privilege::Update]),
        "currval" => Some(&[Privilege::Select, Privilege::Usage]),
        "setval" => Some(&[Privilege::Update]),
        _ => None,
    }
}

/// Whether `sequence` is an identity column's.
pub fn is_identity_sequence(catalog: &foam_catalog::Catalog, sequence: &foam_catalog::sequences::SequenceDef) -> bool {
    let Some((table, column)) = &sequence.owned_by else { return false };
    catalog.tables.get(table).and_then(|t| t.columns.iter().find(|c| &c.name == column)).is_some_and(|c| c.identity.is_some())
}

/// A sequence named in a string, as PostgreSQL reads `nextval('name')`:
/// lowercased unless double-quoted, a `public.` schema taken off.
pub fn sequence_name(text: &str) -> String {
    let text = text.trim();
    let text = text.strip_prefix("public.").or_else(|| text.strip_prefix("\"public\".")).unwrap_or(text);
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => text.to_lowercase(),
    }
}

/// Runs `future` to its end from a function DataFusion calls synchronously
/// on a multi-threaded runtime.
fn wait<T>(future: impl std::future::Future<Output = T>) -> Result<T> {
    let handle = tokio::runtime::Handle::try_current().map_err(|e| DataFusionError::Execution(format!("sequence functions need a runtime: {e}")))?;
    if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return Err(DataFusionError::Execution("sequence functions need a multi-threaded runtime".into()));
    }
    Ok(tokio::task::block_in_place(|| handle.block_on(future)))
}

/// [`SequenceBlocks::draw`] from synchronous code on a runtime's thread
/// (COPY's reader).
pub fn draw_blocking(node: &NodeContext, name: &str, count: usize) -> FoamResult<Vec<i64>> {
    wait(node.sequences.draw(node, name, count)).map_err(FoamError::from)?
}

fn foam(error: FoamError) -> DataFusionError {
    DataFusionError::from(error)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Function {
    Next,
    Current,
    Last,
    Set,
}

impl Function {
    fn sql_name(self) -> &'static str {
        match self {
            Function::Next => "nextval",
            Function::Current => "currval",
            Function::Last => "lastval",
            Function::Set => "setval",
        }
    }
}

/// One of the sequence functions, bound to this node and, on a session,
/// to what the session drew.
#[derive(Debug)]
struct SequenceFunction {
    function: Function,
    node: Arc<NodeContext>,
    session: Option<Arc<SessionSequences>>,
    signature: Signature,
}

impl PartialEq for SequenceFunction {
    fn eq(&self, other: &Self) -> bool {
        self.function == other.function
    }
}
impl Eq for SequenceFunction {}
impl std::hash::Hash for SequenceFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.function.hash(state)
    }
}

/// The session's functions: `nextval`, `currval`, `lastval`, `setval`.
pub fn session_udfs(node: Arc<NodeContext>, session: Arc<SessionSequences>) -> Vec<ScalarUDF> {
    [Function::Next, Function::Current, Function::Last, Function::Set].into_iter().map(|f| udf(f, node.clone(), Some(session.clone()))).collect()
}

/// `nextval` for plan fragments a worker runs.
pub fn worker_udf(node: Arc<NodeContext>) -> ScalarUDF {
    udf(Function::Next, node, None)
}

fn udf(function: Function, node: Arc<NodeContext>, session: Option<Arc<SessionSequences>>) -> ScalarUDF {
    let signature = match function {
        Function::Next | Function::Current => Signature::exact(vec![DataType::Utf8], Volatility::Volatile),
        Function::Last => Signature::exact(vec![], Volatility::Volatile),
        Function::Set => Signature::one_of(
            vec![TypeSignature::Exact(vec![DataType::Utf8, DataType::Int64]), TypeSignature::Exact(vec![DataType::Utf8, DataType::Int64, DataType::Boolean])],
            Volatility::Volatile,
        ),
    };
    ScalarUDF::new_from_impl(SequenceFunction { function, node, session, signature })
}

impl ScalarUDFImpl for SequenceFunction {
    fn name(&self) -> &str {
        self.function.sql_name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays: Vec<ArrayRef> = args.args.iter().map(|a| a.to_array(rows)).collect::<Result<_>>()?;
        let name_at = |row: usize| -> Option<String> {
            let names = arrays.first()?.as_string_opt::<i32>()?;
            names.is_valid(row).then(|| sequence_name(names.value(row)))
        };
        let values: Vec<Option<i64>> = match self.function {
            Function::Next => match &args.args[0] {
                // One sequence for the whole batch: its values at once.
                ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))) => {
                    let name = sequence_name(name);
                    self.check(&name)?;
                    let drawn = wait(self.node.sequences.draw(&self.node, &name, rows))?.map_err(foam)?;
                    self.remember(&name, drawn.last().copied());
                    drawn.into_iter().map(Some).collect()
                }
                _ => {
                    let mut values = Vec::with_capacity(rows);
                    for row in 0..rows {
                        let Some(name) = name_at(row) else {
                            values.push(None);
                            continue;
                        };
                        self.check(&name)?;
                        let drawn = wait(self.node.sequences.draw(&self.node, &name, 1))?.map_err(foam)?;
                        self.remember(&name, drawn.first().copied());
                        values.push(drawn.first().copied());
                    }
                    values
                }
            },
            Function::Current => (0..rows)
                .map(|row| {
                    name_at(row)
                        .map(|name| {
                            self.check(&name)?;
                            self.current(&name)
                        })
                        .transpose()
                })
                .collect::<Result<_>>()?,
            Function::Last => vec![Some(self.last()?); rows],
            Function::Set => {
                let targets = arrays[1].as_primitive::<datafusion::arrow::datatypes::Int64Type>();
                let called = arrays.get(2).map(|a| a.as_boolean().clone());
                let mut values = Vec::with_capacity(rows);
                for row in 0..rows {
                    let (Some(name), true) = (name_at(row), targets.is_valid(row)) else {
                        values.push(None);
                        continue;
                    };
                    self.check(&name)?;
                    let value = targets.value(row);
                    let is_called = called.as_ref().is_none_or(|c| !c.is_valid(row) || c.value(row));
                    let command = CatalogCommand::SetSequence { name: name.clone(), value, is_called };
                    wait(self.node.catalog.apply(command))?.map_err(foam)?;
                    if is_called {
                        self.remember_current(&name, value);
                    }
                    values.push(Some(value));
                }
                values
            }
        };
        let array: ArrayRef = Arc::new(Int64Array::from(values));
        crate::exec::function_values::answered(array, args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) && rows == 1)
    }
}

impl SequenceFunction {
    /// The session's privilege to run this function on `name` (a worker,
    /// without a session, was sent a plan whose statement was checked).
    fn check(&self, name: &str) -> Result<()> {
        match &self.session {
            Some(session) => session.check(&self.node.catalog.current(), name, self.function).map_err(foam),
            None => Ok(()),
        }
    }

    fn remember(&self, name: &str, value: Option<i64>) {
        let (Some(session), Some(value)) = (&self.session, value) else { return };
        let mut last = session.last.lock().unwrap_or_else(|p| p.into_inner());
        last.0.insert(name.to_string(), value);
        last.1 = Some(name.to_string());
    }

    /// `setval(..., true)`: `currval` answers the value, `lastval` is unchanged.
    fn remember_current(&self, name: &str, value: i64) {
        if let Some(session) = &self.session {
            session.last.lock().unwrap_or_else(|p| p.into_inner()).0.insert(name.to_string(), value);
        }
    }

    fn current(&self, name: &str) -> Result<i64> {
        if !self.node.catalog.current().sequences.contains_key(name) {
            return Err(foam(FoamError::Query { message: format!("relation \"{name}\" does not exist"), sqlstate: SqlState::UndefinedTable }));
        }
        let drawn = self.session.as_ref().and_then(|s| s.last.lock().unwrap_or_else(|p| p.into_inner()).0.get(name).copied());
        drawn.ok_or_else(|| {
            foam(FoamError::Query {
                message: format!("currval of sequence \"{name}\" is not yet defined in this session"),
                sqlstate: SqlState::ObjectNotInPrerequisiteState,
            })
        })
    }

    fn last(&self) -> Result<i64> {
        let last = self.session.as_ref().and_then(|s| {
            let last = s.last.lock().unwrap_or_else(|p| p.into_inner());
            last.1.as_ref().and_then(|name| last.0.get(name).copied())
        });
        last.ok_or_else(|| {
            foam(FoamError::Query { message: "lastval is not yet defined in this session".into(), sqlstate: SqlState::ObjectNotInPrerequisiteState })
        })
    }
}

/// `pg_get_serial_sequence(table, column)`: `public.<sequence>` of the
/// SERIAL or identity column, NULL for any other. The table is read as an
/// identifier, the column as it is written (PostgreSQL's rules).
pub fn serial_sequence_udf(node: Arc<NodeContext>) -> ScalarUDF {
    let signature = Signature::exact(vec![DataType::Utf8, DataType::Utf8], Volatility::Stable);
    ScalarUDF::new_from_impl(SerialSequence { node, signature })
}

#[derive(Debug)]
struct SerialSequence {
    node: Arc<NodeContext>,
    signature: Signature,
}

impl PartialEq for SerialSequence {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}
impl Eq for SerialSequence {}
impl std::hash::Hash for SerialSequence {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "pg_get_serial_sequence".hash(state)
    }
}

impl ScalarUDFImpl for SerialSequence {
    fn name(&self) -> &str {
        "pg_get_serial_sequence"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let scalar = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays: Vec<ArrayRef> = args.args.iter().map(|a| a.to_array(if scalar { 1 } else { rows })).collect::<Result<_>>()?;
        let (tables, columns) = (arrays[0].as_string::<i32>(), arrays[1].as_string::<i32>());
        let catalog = self.node.catalog.current();
        let answer: datafusion::arrow::array::StringArray = (0..tables.len())
            .map(|row| {
                if tables.is_null(row) || columns.is_null(row) {
                    return None;
                }
                let (table, column) = (sequence_name(tables.value(row)), columns.value(row));
                catalog
                    .sequences
                    .values()
                    .find(|s| s.owned_by.as_ref().is_some_and(|(t, c)| *t == table && c == column))
                    .map(|s| format!("public.{}", crate::frontend::sequence_ddl::quoted_name(&s.name)))
            })
            .collect();
        crate::exec::function_values::answered(Arc::new(answer), scalar)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_read_as_postgresql_reads_them() {
        assert_eq!(super::sequence_name("T_id_seq"), "t_id_seq");
        assert_eq!(super::sequence_name("public.s"), "s");
        assert_eq!(super::sequence_name("\"Mixed\"\"q\""), "Mixed\"q");
    }
}
