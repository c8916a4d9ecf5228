//! Sorts on every column an operator needs ordered, constants included, so
//! the order still holds once the plan is cut into stages.
//!
//! DataFusion's sorting rule leaves out of a sort the columns it knows are
//! constant: a window `PARTITION BY k ORDER BY v` over rows where `k` is a
//! literal NULL (a projection of an empty outer join side) gets a sort on
//! `v` alone. That knowledge comes from the operators below, and a stage
//! boundary hides them: the worker running the window's stage sees only the
//! exchange it reads from, rebuilds the window over a sort on `v`, finds
//! `k` unordered and fails (`Expects PARTITION BY expression to be
//! ordered`). This rule, run last before the plan is distributed, puts
//! such columns back into the sort right below an operator that requires
//! them ordered:
//!
//! ```text
//!   Window PARTITION BY k ORDER BY v          Window PARTITION BY k ORDER BY v
//!     Sort v          (k constant below)  ─▶    Sort k, v
//! ```
//! Where the whole requirement is met by constants there is no sort at all
//! (a window `PARTITION BY k` over a join with `k = DATE '2024-01-01'`);
//! then a sort on the required columns is put in, cheap over constants:
//!
//! ```text
//!   Window PARTITION BY k                     Window PARTITION BY k
//!     Repartition (k constant below)      ─▶    Sort k (each partition)
//!                                                 Repartition
//! ```
//! The new sort orders rows exactly as the old one did wherever the
//! constants are known, and it states the order where they are not.
//!
//! A hash repartition of one input partition keeps its input's order, and
//! DataFusion relies on that; but datafusion-distributed turns the
//! repartition into a network shuffle, which states no order, and the
//! worker's window then fails ("All partition by columns should have an
//! ordering", fuzz seed 37001 q30). Above such a repartition the required
//! order is sorted again, on the receiving side of the shuffle:
//!
//! ```text
//!   Window PARTITION BY k                     Window PARTITION BY k
//!     Repartition Hash(k) (keeps order)   ─▶    Sort k (each partition)
//!                                                 Repartition Hash(k)
//! ```
//!
//! A longer sort can cost an operator further up its order: DataFusion 55
//! keeps the sort's ordering as written, `k, v`, and a projection above that
//! drops `k` drops the whole ordering, where `v` alone would have survived.
//! If the extended plan fails DataFusion's plan check and the plan as it was
//! passes, the sorts are extended one operator at a time instead, each kept
//! only if the plan still passes: one extension that breaks an order above
//! it no longer costs the others (fuzz seed 37040 q88, where the window
//! left unextended then failed on its worker).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, ReplaceChildrenOptions};

use crate::optimizer::physical::checked_rules::plan_check;

/// The physical optimizer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct ExplicitSorts;

impl PhysicalOptimizerRule for ExplicitSorts {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let (spelled, candidates) = spell_out_some(&plan, &|_| true)?;
        if spelled.transformed && plan_check(&spelled.data, config).is_err() && plan_check(&plan, config).is_ok() {
            // One at a time: the n-th operator that would change, with
            // those kept so far.
            let mut kept: Vec<usize> = Vec::new();
            let mut best = plan.clone();
            for candidate in 0..candidates.min(EXTENSIONS_TRIED_MAX) {
                let (trial, _) = spell_out_some(&plan, &|n| n == candidate || kept.contains(&n))?;
                if trial.transformed && plan_check(&trial.data, config).is_ok() {
                    kept.push(candidate);
                    best = trial.data;
                }
            }
            tracing::debug!(kept = kept.len(), "explicit sorts: some would break an order above them; kept those that do not");
            return Ok(best);
        }
        Ok(spelled.data)
    }

    fn name(&self) -> &str {
        "foam_explicit_sorts"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// How many operators the one-at-a-time fallback tries to extend sorts under.
const EXTENSIONS_TRIED_MAX: usize = 32;

/// `plan` with the sorts extended below the operators `wanted` picks, by
/// their number among those that would change (bottom-up, from 0).
/// Also returns how many operators would have changed.
fn spell_out_some(plan: &Arc<dyn ExecutionPlan>, wanted: &dyn Fn(usize) -> bool) -> Result<(Transformed<Arc<dyn ExecutionPlan>>, usize)> {
    let mut seen = 0;
    let spelled = plan.clone().transform_up(|node| {
        let spelled = spell_out(node.clone())?;
        if !spelled.transformed {
            return Ok(spelled);
        }
        seen += 1;
        Ok(if wanted(seen - 1) { spelled } else { Transformed::no(node) })
    })?;
    Ok((spelled, seen))
}

/// `node` with each sort right below it extended to the whole ordering
/// `node` requires of that input, where the sort leaves some of it out.
fn spell_out(node: Arc<dyn ExecutionPlan>) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let orderings = node.required_input_ordering();
    let children: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
    let mut changed = false;
    let mut new_children = Vec::with_capacity(children.len());
    for (child, required) in children.into_iter().zip(orderings) {
        let hard = required.and_then(|r| {
            let (alternatives, soft) = r.into_alternatives();
            alternatives.into_iter().next().filter(|_| !soft)
        });
        let extended = match (child.downcast_ref::<SortExec>(), hard) {
            (Some(sort), Some(required)) => extend(sort, &required),
            (None, Some(required)) => match sort_constants(&child, &required)? {
                Some(sort) => Some(sort),
                None => sort_above_shuffle(&child, &required),
            },
            _ => None,
        };
        match extended {
            Some(sort) => {
                changed = true;
                new_children.push(sort);
            }
            None => new_children.push(child),
        }
    }
    if !changed {
        return Ok(Transformed::no(node));
    }
    Ok(Transformed::yes(node.replace_children(new_children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?))
}

/// Whether `ordering` begins with `required`, column by column.
fn begins_with(ordering: &LexOrdering, required: &datafusion::physical_expr::LexRequirement) -> bool {
    required.len() <= ordering.len() && required.iter().zip(ordering.iter()).all(|(r, s)| r.expr.eq(&s.expr) && r.options.is_none_or(|o| o == s.options))
}

/// A sort on `required` over `child` when some required column is a
/// constant of `child` (so DataFusion placed no sort for it) and `child`
/// does not state the order itself; `None` otherwise.
fn sort_constants(child: &Arc<dyn ExecutionPlan>, required: &datafusion::physical_expr::LexRequirement) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let properties = child.equivalence_properties();
    if !required.iter().any(|r| properties.is_expr_constant(&r.expr).is_some()) {
        return Ok(None);
    }
    if child.output_ordering().is_some_and(|own| begins_with(own, required)) {
        return Ok(None);
    }
    Ok(sort_on(child, required))
}

/// A sort on `required` over `child`, each partition on its own when it has several.
fn sort_on(child: &Arc<dyn ExecutionPlan>, required: &datafusion::physical_expr::LexRequirement) -> Option<Arc<dyn ExecutionPlan>> {
    let mut ordering: Vec<PhysicalSortExpr> = Vec::with_capacity(required.len());
    for r in required.iter() {
        if !ordering.iter().any(|o| o.expr.eq(&r.expr)) {
            ordering.push(PhysicalSortExpr::new(r.expr.clone(), r.options.unwrap_or_default()));
        }
    }
    let ordering = LexOrdering::new(ordering)?;
    let sort = SortExec::new(ordering, child.clone()).with_preserve_partitioning(child.output_partitioning().partition_count() > 1);
    Some(Arc::new(sort))
}

/// A sort on `required` above a hash repartition that states an order (it
/// keeps its input's, having one input partition), which the network
/// shuffle it becomes would not state; `None` for any other child.
fn sort_above_shuffle(child: &Arc<dyn ExecutionPlan>, required: &datafusion::physical_expr::LexRequirement) -> Option<Arc<dyn ExecutionPlan>> {
    let repartition = child.downcast_ref::<datafusion::physical_plan::repartition::RepartitionExec>()?;
    let hashed = matches!(repartition.partitioning(), datafusion::physical_expr::Partitioning::Hash(..));
    (hashed && child.output_ordering().is_some()).then(|| sort_on(child, required)).flatten()
}

/// `sort` ordering by all of `required` first, then by its own columns
/// not in it; `None` when it already begins with `required`.
fn extend(sort: &SortExec, required: &datafusion::physical_expr::LexRequirement) -> Option<Arc<dyn ExecutionPlan>> {
    if begins_with(sort.expr(), required) {
        return None;
    }
    let own: Vec<PhysicalSortExpr> = sort.expr().iter().cloned().collect();
    let mut ordering: Vec<PhysicalSortExpr> = Vec::with_capacity(required.len() + own.len());
    for r in required.iter() {
        // An unspecified direction takes the sort's own for that column.
        let options = r.options.or_else(|| own.iter().find(|s| s.expr.eq(&r.expr)).map(|s| s.options)).unwrap_or_default();
        ordering.push(PhysicalSortExpr::new(r.expr.clone(), options));
    }
    for s in own {
        if !ordering.iter().any(|o| o.expr.eq(&s.expr)) {
            ordering.push(s);
        }
    }
    let ordering = LexOrdering::new(ordering)?;
    let extended = SortExec::new(ordering, sort.input().clone())
        .with_preserve_partitioning(sort.preserve_partitioning())
        .with_fetch(sort.fetch());
    Some(Arc::new(extended))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;

    #[test]
    fn a_sort_missing_a_required_column_gets_it_first() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true), Field::new("v", DataType::Int64, true)]));
        let input: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema.clone()));
        let by = |names: &[&str]| LexOrdering::new(names.iter().map(|n| PhysicalSortExpr::new_default(col(n, &schema).unwrap()))).unwrap();
        // A merge requiring (k, v) over a sort on v alone, as if k were
        // known constant below.
        let sort: Arc<dyn ExecutionPlan> = Arc::new(SortExec::new(by(&["v"]), input.clone()));
        let merge: Arc<dyn ExecutionPlan> = Arc::new(SortPreservingMergeExec::new(by(&["k", "v"]), sort));
        let fixed = ExplicitSorts.optimize(merge, &ConfigOptions::default()).unwrap();
        let sort = fixed.children()[0].downcast_ref::<SortExec>().expect("a sort").expr().clone();
        assert_eq!(sort, by(&["k", "v"]));
        // A sort that spells the requirement out already stays.
        let again = ExplicitSorts.optimize(fixed.clone(), &ConfigOptions::default()).unwrap();
        assert!(Arc::ptr_eq(&again.children()[0], &fixed.children()[0]));
    }

    #[test]
    fn an_order_met_only_by_a_constant_gets_a_sort() {
        use datafusion::physical_expr::expressions::lit;
        use datafusion::physical_plan::projection::ProjectionExec;
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let input: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema.clone()));
        // k is the literal 1: DataFusion needs no sort to have it ordered.
        let constant: Arc<dyn ExecutionPlan> = Arc::new(
            ProjectionExec::try_new(vec![(lit(1i64), "k".to_string()), (col("v", &schema).unwrap(), "v".to_string())], input).unwrap(),
        );
        let projected = constant.schema();
        let by_k = LexOrdering::new(vec![PhysicalSortExpr::new_default(col("k", &projected).unwrap())]).unwrap();
        let merge: Arc<dyn ExecutionPlan> = Arc::new(SortPreservingMergeExec::new(by_k.clone(), constant.clone()));
        let fixed = ExplicitSorts.optimize(merge, &ConfigOptions::default()).unwrap();
        let sort = fixed.children()[0].downcast_ref::<SortExec>().expect("a sort on the constant");
        assert_eq!(sort.expr(), &by_k);
        // A requirement on a column that is not constant is DataFusion's.
        let by_v = LexOrdering::new(vec![PhysicalSortExpr::new_default(col("v", &projected).unwrap())]).unwrap();
        let merge: Arc<dyn ExecutionPlan> = Arc::new(SortPreservingMergeExec::new(by_v, constant));
        let fixed = ExplicitSorts.optimize(merge, &ConfigOptions::default()).unwrap();
        assert!(fixed.children()[0].downcast_ref::<SortExec>().is_none());
    }
}
