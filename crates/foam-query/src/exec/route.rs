//! One-sided shuffle: send only the other side of a join to the nodes that
//! own the matching partitions of a FoamDB table.
//!
//! When one input of a partitioned join is a FoamDB table distributed on the
//! join key, its rows stay where they are stored (task `t` of the join stage
//! holds partitions `p` with `task_of(p) = t`, see `distributed/mod.rs`), and the
//! other input is shuffled so each row lands in exactly that task and partition:
//!
//! ```text
//!   FoamRoutedExec: Hash(keys, N), FoamDB's layout
//!     [NetworkShuffleExec]                 consumer task t reads producer outputs t·N .. t·N+N
//!       RepartitionExec: Hash([foam_route(keys, N, L, task_of)], N·T)
//! ```
//! datafusion-distributed only shuffles through DataFusion's `RepartitionExec`,
//! which sends a row to output `hash_df(value) mod (N·T)`, with `T` the join
//! stage's task count (decided later, between 1 and the number of workers
//! `W`). `foam_route` therefore computes FoamDB's partition `p` of the row's
//! key and returns a value whose DataFusion hash `H` satisfies
//! `H mod N = p` and `(H div N) mod L = task index`, where `L = lcm(1..W)`:
//! then `H mod (N·T) = (task index mod T)·N + p` for every `T ≤ W`, which
//! is exactly where task `task index mod T` reads partition `p`. The values are
//! found once per `(N, W)` by trying candidates (about `N·L·ln(N·W)` hashes)
//! and cached. The route value is the repartition's hash expression, not a
//! column: it is computed where the rows are split and never travels with them.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use arrow::array::{ArrayRef, UInt32Array};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::hash_utils::create_hashes;
use datafusion::common::{ScalarValue, tree_node::TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::repartition::{REPARTITION_RANDOM_STATE, RepartitionExec};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use foam_common::NodeId;
use serde::{Deserialize, Serialize};

/// The name of the routing function.
pub const ROUTE_FUNCTION: &str = "foam_route";

/// Most hashes the route table of one `(N, W)` may take to find; beyond it
/// (very wide clusters with many partitions) joins shuffle both sides.
const ROUTE_SEARCH_HASHES_MAX: u64 = 20_000_000;
// Route values are the candidates tried, stored as UInt32.
const _: () = assert!(ROUTE_SEARCH_HASHES_MAX < u32::MAX as u64);

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// `lcm(1..=workers)`: a task index modulo this is the index modulo every
/// possible task count.
pub fn task_period(workers: u64) -> u64 {
    (1..=workers.max(1)).fold(1u64, |l, t| l / gcd(l, t) * t)
}

/// The DataFusion repartition hash of `values` as a UInt32 column, the type
/// `foam_route` returns.
fn df_hashes(values: &UInt32Array) -> Result<Vec<u64>> {
    let mut hashes = vec![0u64; values.len()];
    let column: ArrayRef = Arc::new(values.clone());
    create_hashes(&[column], REPARTITION_RANDOM_STATE.random_state(), &mut hashes)?;
    Ok(hashes)
}

/// For each (task index < workers, partition < n): a value whose DataFusion
/// hash `H` has `H mod n = partition` and `(H div n) mod period = task index`.
fn route_table(n: u64, workers: u64) -> Result<Arc<Vec<u32>>> {
    static TABLES: OnceLock<Mutex<HashMap<(u64, u64), Arc<Vec<u32>>>>> = OnceLock::new();
    let tables = TABLES.get_or_init(Default::default);
    if let Some(table) = tables.lock().unwrap_or_else(|p| p.into_inner()).get(&(n, workers)) {
        return Ok(table.clone());
    }
    let period = task_period(workers);
    let slots = (n * workers) as usize;
    let mut table = vec![u32::MAX; slots];
    let mut missing = slots;
    let mut next = 0u32;
    const CHUNK: u32 = 4096;
    while missing > 0 {
        if u64::from(next) > ROUTE_SEARCH_HASHES_MAX {
            return Err(DataFusionError::Plan(format!("no route table for {n} partitions and {workers} workers")));
        }
        let candidates = UInt32Array::from_iter_values(next..next + CHUNK);
        for (value, hash) in (next..next + CHUNK).zip(df_hashes(&candidates)?) {
            let partition = hash % n;
            let task = (hash / n) % period;
            if task < workers {
                let slot = (task * n + partition) as usize;
                if table[slot] == u32::MAX {
                    table[slot] = value;
                    missing -= 1;
                }
            }
        }
        next += CHUNK;
    }
    let table = Arc::new(table);
    tables.lock().unwrap_or_else(|p| p.into_inner()).insert((n, workers), table.clone());
    Ok(table)
}

/// True when routing to `n` partitions over up to `workers` tasks is cheap
/// enough to set up.
pub fn routable(n: u64, workers: u64) -> bool {
    n > 0 && n.saturating_mul(task_period(workers)).saturating_mul(8) < ROUTE_SEARCH_HASHES_MAX
}

/// `foam_route(key..., n, workers, task_of)`: the route value of each row
/// (see the module documentation). `task_of` lists each partition's task
/// index, comma separated.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FoamRoute {
    signature: Signature,
}

impl FoamRoute {
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(FoamRoute { signature: Signature::variadic_any(Volatility::Immutable) })
    }
}

fn literal_u64(value: &ColumnarValue) -> Result<u64> {
    match value {
        ColumnarValue::Scalar(ScalarValue::UInt64(Some(v))) => Ok(*v),
        other => Err(DataFusionError::Internal(format!("{ROUTE_FUNCTION}: expected a UInt64 literal, got {other:?}"))),
    }
}

impl ScalarUDFImpl for FoamRoute {
    fn name(&self) -> &str {
        ROUTE_FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::UInt32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let count = args.args.len();
        if count < 4 {
            return Err(DataFusionError::Internal(format!("{ROUTE_FUNCTION} needs keys, n, workers and task_of")));
        }
        let n = literal_u64(&args.args[count - 3])?;
        let workers = literal_u64(&args.args[count - 2])?;
        let task_of: Vec<u64> = match &args.args[count - 1] {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(list))) => {
                list.split(',').map(|v| v.parse::<u64>()).collect::<std::result::Result<_, _>>().map_err(|e| DataFusionError::Internal(e.to_string()))?
            }
            other => return Err(DataFusionError::Internal(format!("{ROUTE_FUNCTION}: bad task list {other:?}"))),
        };
        if task_of.len() as u64 != n {
            return Err(DataFusionError::Internal(format!("{ROUTE_FUNCTION}: {} task indices for {n} partitions", task_of.len())));
        }
        if task_of.iter().any(|t| *t >= workers) {
            return Err(DataFusionError::Internal(format!("{ROUTE_FUNCTION}: a task index is not below {workers} workers")));
        }
        let keys: Vec<ArrayRef> =
            args.args[..count - 3].iter().map(|k| k.to_array(args.number_rows)).collect::<Result<_>>()?;
        let table = route_table(n, workers)?;
        // The route value of each partition, looked up once per batch.
        let route_of: Vec<u32> = (0..n).map(|p| table[(task_of[p as usize] * n + p) as usize]).collect();
        let hashes = foam_common::hash::hash_rows(&keys).map_err(|e| DataFusionError::Execution(e.to_string()))?;
        let partition_of = foam_common::hash::PartitionOfHash::new(n as u32);
        let values = UInt32Array::from_iter_values(hashes.iter().map(|hash| route_of[partition_of.partition(*hash) as usize]));
        Ok(ColumnarValue::Array(Arc::new(values)))
    }
}

/// The keys of the moving side, as columns of its rows, and the FoamDB layout
/// they are routed to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteSpec {
    /// Input column indices of the keys, in the FoamDB table's key order.
    pub key_columns: Vec<usize>,
    /// Owner of each partition of the layout routed to.
    pub owners: Vec<NodeId>,
    /// The rows are laid out by only some of `key_columns` (a join on more
    /// keys than a distribution key, `copartition.rs`): the declaration holds
    /// for the join it feeds, but no other FoamDB layout on these keys
    /// matches it.
    #[serde(default)]
    pub by_some_keys: bool,
}

/// The task index of an owner node: its position among a layout's distinct
/// owners. Scans put a partition in task `index mod T` (`distributed/mod.rs`) and
/// routed shuffles deliver to the same task; both number owners here.
pub fn owner_index(owners: &[NodeId]) -> impl Fn(NodeId) -> u64 + use<> {
    let mut distinct: Vec<NodeId> = owners.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    move |owner| distinct.binary_search(&owner).unwrap_or(0) as u64
}

/// The task index of each partition of a layout (see `owner_index`).
pub fn task_indices(owners: &[NodeId]) -> Vec<u64> {
    let index = owner_index(owners);
    owners.iter().map(|o| index(*o)).collect()
}

/// Builds the routed shuffle of `input` (see the module documentation), or
/// `None` when the keys are not plain columns or routing is too costly.
pub fn routed_shuffle(input: Arc<dyn ExecutionPlan>, keys: &[Arc<dyn PhysicalExpr>], owners: &[NodeId], workers: u64) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    routed_shuffle_declaring(input, keys, None, owners, workers)
}

/// [`routed_shuffle`], whose output declares itself laid out on the
/// `declared` columns when given, of which `keys` are some (see
/// [`RouteSpec::by_some_keys`]).
pub fn routed_shuffle_declaring(
    input: Arc<dyn ExecutionPlan>,
    keys: &[Arc<dyn PhysicalExpr>],
    declared: Option<Vec<usize>>,
    owners: &[NodeId],
    workers: u64,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let n = owners.len() as u64;
    if !routable(n, workers) {
        return Ok(None);
    }
    let Some(key_columns) = keys.iter().map(|k| k.downcast_ref::<Column>().map(|c| c.index())).collect::<Option<Vec<usize>>>() else {
        return Ok(None);
    };
    let schema = input.schema();
    let task_of = task_indices(owners).iter().map(|t| t.to_string()).collect::<Vec<_>>().join(",");
    let mut args: Vec<Arc<dyn PhysicalExpr>> = keys.to_vec();
    args.push(Arc::new(Literal::new(ScalarValue::UInt64(Some(n)))));
    args.push(Arc::new(Literal::new(ScalarValue::UInt64(Some(workers)))));
    args.push(Arc::new(Literal::new(ScalarValue::Utf8(Some(task_of)))));
    let route = datafusion::physical_expr::ScalarFunctionExpr::try_new(
        Arc::new(FoamRoute::udf()),
        args,
        &schema,
        Arc::new(datafusion::config::ConfigOptions::default()),
    )?;
    let shuffle = Arc::new(RepartitionExec::try_new(input, Partitioning::Hash(vec![Arc::new(route)], n as usize))?);
    let spec = match declared {
        Some(declared) => RouteSpec { key_columns: declared, owners: owners.to_vec(), by_some_keys: true },
        None => RouteSpec { key_columns, owners: owners.to_vec(), by_some_keys: false },
    };
    Ok(Some(Arc::new(FoamRoutedExec::try_new(shuffle, spec)?)))
}

/// The receiving end of a routed shuffle: declares the FoamDB partitioning
/// the rows now have (they pass through unchanged). Also declares a join
/// input distributed on some of the join keys as laid out on all of them
/// (`copartition.rs`, `route_on_some_keys`).
#[derive(Debug)]
pub struct FoamRoutedExec {
    input: Arc<dyn ExecutionPlan>,
    spec: RouteSpec,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl FoamRoutedExec {
    pub fn try_new(input: Arc<dyn ExecutionPlan>, spec: RouteSpec) -> Result<Self> {
        let schema = input.schema();
        let keys: Vec<Arc<dyn PhysicalExpr>> = spec
            .key_columns
            .iter()
            .map(|i| -> Result<Arc<dyn PhysicalExpr>> {
                let field = schema.fields().get(*i).ok_or_else(|| DataFusionError::Internal(format!("route key {i} out of range")))?;
                Ok(Arc::new(Column::new(field.name(), *i)))
            })
            .collect::<Result<_>>()?;
        // Each partition passes through as it is, so what holds of the
        // input's rows (constants, equalities, each partition's order) holds
        // here: plans above may rely on it (a sort the optimizer shortened
        // to the columns a filter left non-constant, checked again last).
        let properties = Arc::new(PlanProperties::new(
            input.properties().equivalence_properties().clone(),
            Partitioning::Hash(keys, spec.owners.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(FoamRoutedExec { input, spec, schema, properties })
    }

    pub fn spec(&self) -> &RouteSpec {
        &self.spec
    }
}

impl DisplayAs for FoamRoutedExec {
    fn fmt_as(&self, _format: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = self.spec.key_columns.iter().map(|i| self.schema.field(*i).name().as_str()).collect();
        write!(f, "FoamRoutedExec: keys=[{}], partitions={} (laid out as the owners' partitions)", names.join(","), self.spec.owners.len())
    }
}

impl ExecutionPlan for FoamRoutedExec {
    fn name(&self) -> &str {
        "FoamRoutedExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(DataFusionError::Internal("FoamRoutedExec has one input".into()));
        }
        Ok(Arc::new(FoamRoutedExec::try_new(children.remove(0), self.spec.clone())?))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_values_land_on_the_owners_task_for_every_task_count() {
        for (n, workers) in [(12u64, 3u64), (16, 4), (7, 5)] {
            let table = route_table(n, workers).unwrap();
            let values = UInt32Array::from(table.as_ref().clone());
            let hashes = df_hashes(&values).unwrap();
            for task in 0..workers {
                for partition in 0..n {
                    let hash = hashes[(task * n + partition) as usize];
                    for tasks in 1..=workers {
                        // RepartitionExec output, and the task and partition reading it.
                        let output = hash % (n * tasks);
                        assert_eq!(output / n, task % tasks, "n={n} task={task} tasks={tasks}");
                        assert_eq!(output % n, partition);
                    }
                }
            }
        }
    }

    #[test]
    fn a_routed_input_keeps_its_constants_and_order() {
        use arrow::datatypes::{DataType, Field, Schema};
        use datafusion::physical_expr::expressions::{lit, binary};
        use datafusion::physical_plan::filter::FilterExec;
        use datafusion::physical_plan::sorts::sort::SortExec;
        let schema = Arc::new(Schema::new(vec![Field::new("g", DataType::Int32, true), Field::new("h", DataType::Int32, true)]));
        let empty = Arc::new(datafusion::physical_plan::empty::EmptyExec::new(schema.clone()).with_partitions(3));
        let h_is_10 = binary(Arc::new(Column::new("h", 1)), datafusion::logical_expr::Operator::Eq, lit(10i32), &schema).unwrap();
        let filtered = Arc::new(FilterExec::try_new(h_is_10, empty).unwrap());
        let by_g = datafusion::physical_expr::LexOrdering::new(vec![datafusion::physical_expr::PhysicalSortExpr::new_default(Arc::new(Column::new("g", 0)))]).unwrap();
        let sorted = Arc::new(SortExec::new(by_g, filtered).with_preserve_partitioning(true));
        let routed = FoamRoutedExec::try_new(sorted, RouteSpec { key_columns: vec![0], owners: vec![1, 2, 3], by_some_keys: false }).unwrap();
        let properties = routed.properties().equivalence_properties();
        assert!(properties.is_expr_constant(&(Arc::new(Column::new("h", 1)) as Arc<dyn PhysicalExpr>)).is_some(), "h = 10 still holds");
        let by_h_g = vec![
            datafusion::physical_expr::PhysicalSortExpr::new_default(Arc::new(Column::new("h", 1))),
            datafusion::physical_expr::PhysicalSortExpr::new_default(Arc::new(Column::new("g", 0))),
        ];
        assert!(properties.ordering_satisfy(by_h_g).unwrap(), "sorted by g is sorted by (h, g) when h is constant");
    }

    #[test]
    fn task_indices_number_distinct_owners_in_order() {
        assert_eq!(task_indices(&[3, 1, 2, 3, 1, 2]), vec![2, 0, 1, 2, 0, 1]);
    }
}
