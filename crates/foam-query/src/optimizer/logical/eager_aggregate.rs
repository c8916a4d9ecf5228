//! Aggregates the far side of an inner join tree by its join keys before it
//! meets the side the query groups by: a logical optimizer rule run on the
//! coordinating node.
//!
//! TPC-H Q10 groups the revenue of returned lineitems by customer (and the
//! customer's nation). DataFusion keeps the FROM order: it joins customers
//! with orders first, carries every customer column through the join with
//! lineitem, and groups by all of them. On a cluster that routes the wide
//! joined rows by orderkey and shuffles the partial groups again. Grouping
//! the orders-lineitem join by `o_custkey` first needs neither: orders and
//! lineitem join where they are stored, one partial sum per customer and node
//! is routed to the customer's owner, and the customer rows never move.
//!
//! ```text
//!   Aggregate [G cols] f(A cols)              Projection [G cols, cast(f' AS type of f)]
//!     inner joins of leaves                ─▶   Aggregate [G cols] f'(p)
//!       G: leaves the grouping reads              G-tree ⋈ (Aggregate [A keys] f(A cols) AS p ON g.k = a.k
//!       A: leaves the aggregates read                        A-tree)
//! ```
//! `A` is every leaf connected to the aggregated leaves without passing a
//! leaf the grouping reads; the other leaves are `G`; `A keys` are `A`'s
//! columns of the equi-conditions between the two. Each `G` row met, before,
//! every `A` row with its keys, and now meets one pre-aggregated row of them,
//! so `sum`, `min`, `max` and `count` (merged as the sum of the counts) give
//! the same answer; NULL keys matched nothing before and match nothing now.
//!
//! The rewrite only runs where it should pay off, since statistics give no
//! distinct counts to estimate with: every `G` leaf must be an unfiltered
//! table (a filtered one, or a semi join, could drop most `A` rows after the
//! join, and pre-aggregating them would be wasted work: TPC-H Q5's region,
//! Q18's `IN` subquery), every join an inner equi-join on columns without
//! another condition, and every aggregate a plain `sum`, `min`, `max` or
//! `count` (no DISTINCT, FILTER or ORDER BY) of `A` columns. A merged result
//! whose type would differ other than in a decimal's precision keeps the
//! original plan. `SET foam.eager_aggregates = false` turns the rule off.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, NullEquality, Result};
use datafusion::functions_aggregate::expr_fn::{count, max, min};
use datafusion::logical_expr::{
    Aggregate, Expr, ExprSchemable, Join, JoinConstraint, JoinType, LogicalPlan, LogicalPlanBuilder, cast,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::options::FoamOptions;
use crate::optimizer::logical::checked_arithmetic::sum;
use crate::optimizer::logical::eager_count::PRE_COUNT_PREFIX;
use crate::optimizer::logical::plan_shape::{columns_only, unfiltered_table};

/// Prefix of the pre-aggregates' column names (internal; never in a result).
/// An aggregate of such a column (or of `eager_count.rs`'s pre-counts) was
/// made by a rule and is not rewritten again.
const PRE_AGGREGATE_PREFIX: &str = "__foam_pre_aggregate_";

/// Most leaves of one join tree the rule looks at; a bigger tree is left alone.
const LEAVES_MAX: usize = 16;

/// The optimizer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct EagerAggregate;

impl OptimizerRule for EagerAggregate {
    fn name(&self) -> &str {
        "foam_eager_aggregate"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(&self, plan: LogicalPlan, config: &dyn OptimizerConfig) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Aggregate(aggregate) = &plan else { return Ok(Transformed::no(plan)) };
        if config.options().extensions.get::<FoamOptions>().is_some_and(|o| !o.eager_aggregates) {
            return Ok(Transformed::no(plan));
        }
        match aggregate_before_join(aggregate)? {
            Some(rewritten) => Ok(Transformed::yes(rewritten)),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// The aggregate functions the rule splits, and how each is merged.
#[derive(Debug, Clone, Copy)]
enum Split {
    Sum,
    Min,
    Max,
    Count,
}

impl Split {
    /// The split of `expr` and the one argument it aggregates.
    fn of(expr: &Expr) -> Option<(Split, &Expr)> {
        let function = match expr {
            Expr::AggregateFunction(function) => function,
            // The name is the original output's, restored at the end.
            Expr::Alias(alias) => match alias.expr.as_ref() {
                Expr::AggregateFunction(function) => function,
                _ => return None,
            },
            _ => return None,
        };
        let params = &function.params;
        if params.distinct || params.filter.is_some() || !params.order_by.is_empty() || params.null_treatment.is_some() {
            return None;
        }
        let split = match function.func.name() {
            "sum" => Split::Sum,
            "min" => Split::Min,
            "max" => Split::Max,
            "count" => Split::Count,
            _ => return None,
        };
        match params.args.as_slice() {
            [arg] => Some((split, arg)),
            _ => None,
        }
    }

    /// The aggregate over `A`, grouped by its keys.
    fn partial(self, arg: Expr) -> Expr {
        match self {
            Split::Sum => sum(arg),
            Split::Min => min(arg),
            Split::Max => max(arg),
            Split::Count => count(arg),
        }
    }

    /// The aggregate of the partial results, grouped as the query groups.
    fn merge(self, partial: Expr) -> Expr {
        match self {
            Split::Sum | Split::Count => sum(partial),
            Split::Min => min(partial),
            Split::Max => max(partial),
        }
    }
}

/// One equi-condition of a join tree: the leaves of its two columns.
struct Edge {
    left: usize,
    right: usize,
    left_column: Column,
    right_column: Column,
}

/// An inner join tree: its leaves and the conditions joining them.
struct JoinTree {
    leaves: Vec<Arc<LogicalPlan>>,
    edges: Vec<Edge>,
}

impl JoinTree {
    /// `plan` as inner equi-joins of leaves, through projections of plain
    /// columns, or `None` when a join has another condition, a key that is
    /// not a column, or a column no single leaf has.
    fn of(plan: &Arc<LogicalPlan>) -> Option<JoinTree> {
        let mut tree = JoinTree { leaves: Vec::new(), edges: Vec::new() };
        let mut on = Vec::new();
        tree.add(plan, &mut on)?;
        if tree.leaves.len() < 2 || tree.leaves.len() > LEAVES_MAX {
            return None;
        }
        for (left_column, right_column) in on {
            let (left, right) = (tree.leaf_of(&left_column)?, tree.leaf_of(&right_column)?);
            tree.edges.push(Edge { left, right, left_column, right_column });
        }
        Some(tree)
    }

    fn add(&mut self, plan: &Arc<LogicalPlan>, on: &mut Vec<(Column, Column)>) -> Option<()> {
        match plan.as_ref() {
            LogicalPlan::Join(join) if join.join_type == JoinType::Inner => {
                if join.filter.is_some() || join.null_aware || join.null_equality != NullEquality::NullEqualsNothing || join.on.is_empty() {
                    return None;
                }
                for (l, r) in &join.on {
                    let (Expr::Column(l), Expr::Column(r)) = (l, r) else { return None };
                    on.push((l.clone(), r.clone()));
                }
                self.add(&join.left, on)?;
                self.add(&join.right, on)
            }
            LogicalPlan::Projection(projection) if columns_only(projection) => self.add(&projection.input, on),
            _ => {
                self.leaves.push(Arc::clone(plan));
                Some(())
            }
        }
    }

    /// The one leaf that has `column`.
    fn leaf_of(&self, column: &Column) -> Option<usize> {
        let mut found = self.leaves.iter().enumerate().filter(|(_, leaf)| leaf.schema().has_column(column)).map(|(i, _)| i);
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// The leaves `expr` reads.
    fn leaves_of(&self, expr: &Expr) -> Option<HashSet<usize>> {
        expr.column_refs().into_iter().map(|c| self.leaf_of(c)).collect()
    }

    /// The leaves in `set` joined in their original order (each next leaf
    /// the first that joins those already taken), or `None` when they are
    /// not connected by the tree's conditions.
    fn join_of(&self, set: &[usize]) -> Result<Option<LogicalPlan>> {
        let mut taken = vec![set[0]];
        let mut plan = Arc::clone(&self.leaves[set[0]]);
        while taken.len() < set.len() {
            let next = set.iter().copied().filter(|i| !taken.contains(i)).find_map(|i| {
                let on: Vec<(Expr, Expr)> = self
                    .edges
                    .iter()
                    .filter_map(|e| {
                        let (l, r) = (Expr::Column(e.left_column.clone()), Expr::Column(e.right_column.clone()));
                        if taken.contains(&e.left) && e.right == i {
                            Some((l, r))
                        } else if taken.contains(&e.right) && e.left == i {
                            Some((r, l))
                        } else {
                            None
                        }
                    })
                    .collect();
                (!on.is_empty()).then_some((i, on))
            });
            let Some((i, on)) = next else { return Ok(None) };
            plan = Arc::new(inner_join(plan, Arc::clone(&self.leaves[i]), on)?);
            taken.push(i);
        }
        Ok(Some(Arc::unwrap_or_clone(plan)))
    }
}

fn inner_join(left: Arc<LogicalPlan>, right: Arc<LogicalPlan>, on: Vec<(Expr, Expr)>) -> Result<LogicalPlan> {
    Ok(LogicalPlan::Join(Join::try_new(left, right, on, None, JoinType::Inner, JoinConstraint::On, NullEquality::NullEqualsNothing, false)?))
}

fn aggregate_before_join(aggregate: &Aggregate) -> Result<Option<LogicalPlan>> {
    if aggregate.group_expr.iter().any(|g| matches!(g, Expr::GroupingSet(_))) {
        return Ok(None);
    }
    let Some(tree) = JoinTree::of(&aggregate.input) else { return Ok(None) };

    // The leaves the grouping reads, and those the aggregates read.
    let mut grouped = HashSet::new();
    for group in &aggregate.group_expr {
        let Some(leaves) = tree.leaves_of(group) else { return Ok(None) };
        grouped.extend(leaves);
    }
    let mut splits = Vec::with_capacity(aggregate.aggr_expr.len());
    let mut aggregated = HashSet::new();
    for expr in &aggregate.aggr_expr {
        let Some((split, arg)) = Split::of(expr) else { return Ok(None) };
        if arg.column_refs().iter().any(|c| c.name.starts_with(PRE_AGGREGATE_PREFIX) || c.name.starts_with(PRE_COUNT_PREFIX)) {
            return Ok(None);
        }
        let Some(leaves) = tree.leaves_of(arg) else { return Ok(None) };
        aggregated.extend(leaves);
        splits.push((split, arg.clone()));
    }
    if aggregated.is_empty() || !aggregated.is_disjoint(&grouped) {
        return Ok(None);
    }

    // A: the leaves reached from the aggregated ones without passing a
    // grouped leaf; G: the others.
    let first = *aggregated.iter().min().expect("not empty");
    let mut in_a = vec![false; tree.leaves.len()];
    in_a[first] = true;
    let mut changed = true;
    while changed {
        changed = false;
        for edge in &tree.edges {
            for (from, to) in [(edge.left, edge.right), (edge.right, edge.left)] {
                if in_a[from] && !in_a[to] && !grouped.contains(&to) {
                    in_a[to] = true;
                    changed = true;
                }
            }
        }
    }
    if aggregated.iter().any(|i| !in_a[*i]) {
        return Ok(None);
    }
    let a_leaves: Vec<usize> = (0..tree.leaves.len()).filter(|i| in_a[*i]).collect();
    let g_leaves: Vec<usize> = (0..tree.leaves.len()).filter(|i| !in_a[*i]).collect();
    if g_leaves.is_empty() || g_leaves.iter().any(|i| !unfiltered_table(&tree.leaves[*i])) {
        return Ok(None);
    }

    // The conditions between the two sides, as (G column, A column).
    let mut crossing: Vec<(Column, Column)> = Vec::new();
    for edge in &tree.edges {
        match (in_a[edge.left], in_a[edge.right]) {
            (false, true) => crossing.push((edge.left_column.clone(), edge.right_column.clone())),
            (true, false) => crossing.push((edge.right_column.clone(), edge.left_column.clone())),
            _ => {}
        }
    }
    if crossing.is_empty() {
        return Ok(None);
    }
    let (Some(a_tree), Some(g_tree)) = (tree.join_of(&a_leaves)?, tree.join_of(&g_leaves)?) else { return Ok(None) };

    let mut a_keys: Vec<Expr> = Vec::new();
    for (_, column) in &crossing {
        let key = Expr::Column(column.clone());
        if !a_keys.contains(&key) {
            a_keys.push(key);
        }
    }
    let partials: Vec<Expr> = splits
        .iter()
        .enumerate()
        .map(|(i, (split, arg))| split.partial(arg.clone()).alias(pre_name(i)))
        .collect();
    let pre = LogicalPlanBuilder::from(a_tree).aggregate(a_keys, partials)?.build()?;
    let on = crossing.iter().map(|(g, a)| (Expr::Column(g.clone()), Expr::Column(a.clone()))).collect();
    let joined = inner_join(Arc::new(g_tree), Arc::new(pre), on)?;
    let merges: Vec<Expr> =
        splits.iter().enumerate().map(|(i, (split, _))| split.merge(Expr::Column(Column::new_unqualified(pre_name(i)))).alias(pre_name(i))).collect();
    let merged = LogicalPlanBuilder::from(joined).aggregate(aggregate.group_expr.clone(), merges)?.build()?;

    // The original output: the group columns as they were, each aggregate
    // under its own name and type. (Every group met at least one
    // pre-aggregated row, so a sum of counts is never NULL; and an aggregate
    // without GROUP BY is never rewritten, as every leaf is then in `A`.)
    let groups = aggregate.group_expr.len();
    let mut output = Vec::with_capacity(aggregate.schema.fields().len());
    for (i, (qualifier, field)) in aggregate.schema.iter().enumerate() {
        let expr = if i < groups {
            Expr::Column(merged.schema().columns()[i].clone())
        } else {
            let column = Expr::Column(Column::new_unqualified(pre_name(i - groups)));
            let merged_type = column.get_type(merged.schema())?;
            match (&merged_type, field.data_type()) {
                (a, b) if a == b => column,
                (DataType::Decimal128(..), DataType::Decimal128(..)) => cast(column, field.data_type().clone()),
                _ => return Ok(None),
            }
        };
        output.push(expr.alias_qualified(qualifier.cloned(), field.name()));
    }
    Ok(Some(LogicalPlanBuilder::from(merged).project(output)?.build()?))
}

fn pre_name(i: usize) -> String {
    format!("{PRE_AGGREGATE_PREFIX}{i}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};
    use datafusion::datasource::MemTable;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionContext;

    fn table(columns: &[(&str, DataType)]) -> Arc<MemTable> {
        let schema = Arc::new(Schema::new(columns.iter().map(|(n, t)| Field::new(*n, t.clone(), true)).collect::<Vec<_>>()));
        Arc::new(MemTable::try_new(schema, vec![vec![]]).expect("table"))
    }

    #[tokio::test]
    async fn q10_sums_orders_and_lineitem_per_customer_before_joining_customers() {
        let text = DataType::Utf8;
        let money = DataType::Decimal128(15, 2);
        let tables = [
            ("customer", vec![("c_custkey", DataType::Int64), ("c_name", text.clone()), ("c_address", text.clone()), ("c_nationkey", DataType::Int32), ("c_phone", text.clone()), ("c_acctbal", money.clone()), ("c_comment", text.clone())]),
            ("orders", vec![("o_orderkey", DataType::Int64), ("o_custkey", DataType::Int64), ("o_orderdate", DataType::Date32)]),
            ("lineitem", vec![("l_orderkey", DataType::Int64), ("l_extendedprice", money.clone()), ("l_discount", money.clone()), ("l_returnflag", text.clone())]),
            ("nation", vec![("n_nationkey", DataType::Int32), ("n_name", text.clone())]),
        ];
        let sql = include_str!("../../../../foam-tpch/queries/q10.sql");
        let mut plans = Vec::new();
        for with_rule in [false, true] {
            let mut builder = SessionStateBuilder::new().with_default_features();
            if with_rule {
                builder = builder.with_optimizer_rule(Arc::new(EagerAggregate));
            }
            let ctx = SessionContext::new_with_state(builder.build());
            for (name, columns) in &tables {
                ctx.register_table(*name, table(columns)).expect("register");
            }
            plans.push(ctx.sql(sql).await.expect("plan").into_optimized_plan().expect("optimize"));
        }
        let shown = plans[1].display_indent().to_string();
        println!("{shown}");
        assert!(shown.contains("Aggregate: groupBy=[[orders.o_custkey]]"), "orders and lineitem are summed per customer first:\n{shown}");
        // The customer columns are grouped once, above the join with the pre-aggregated sums.
        assert_eq!(shown.matches("Aggregate:").count(), 2, "{shown}");
        assert_eq!(plans[0].display_indent().to_string().matches("Aggregate:").count(), 1);
        // Same names and types as without the rule.
        let fields = |plan: &LogicalPlan| plan.schema().fields().iter().map(|f| (f.name().clone(), f.data_type().clone())).collect::<Vec<_>>();
        assert_eq!(fields(&plans[1]), fields(&plans[0]));
    }
}
