//! FoamDB's plan-reshaping physical rules as one step whose result must pass
//! DataFusion's plan check, or is dropped for the plan DataFusion made.
//!
//! The locality rules (co-partitioning, scan regrouping, count without an
//! array of ones) rewrite a plan DataFusion has already checked. Each keeps
//! every operator's input requirements, and the differential fuzzer checks
//! that they do; where one misses a shape, the rewritten plan states a
//! distribution or an order an operator does not get. A wrong plan must not
//! run: a partitioned join over inputs not partitioned alike answers wrong,
//! a window over rows not in order fails on a worker. So the step checks
//! its result with DataFusion's sanity check and, if it fails, returns the
//! plan it was given (correct, only without FoamDB's locality) and logs
//! the plan check's message. `SET foam.plan_check_fallback = false` fails
//! the statement with that message instead (the differential fuzzer's
//! setting, so that such plans are found and fixed).
//!
//! ```text
//!   DataFusion's rules ─▶ plan P (checked) ─▶ locality rules ─▶ P' ─┬─ P' passes the check ─▶ P'
//!                                                                 └─ it does not ────────▶ P (warn)
//! ```

use std::sync::Arc;

use datafusion::config::ConfigOptions;
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::sanity_checker::SanityCheckPlan;
use datafusion::physical_plan::ExecutionPlan;

/// Rules run in order, their result kept only if it passes the plan check.
#[derive(Debug)]
pub struct CheckedRules {
    pub rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
}

/// DataFusion's plan check (its closing `SanityCheckPlan` rule) on `plan`.
pub(crate) fn plan_check(plan: &Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<()> {
    SanityCheckPlan::new().optimize(plan.clone(), config).map(|_| ())
}

impl PhysicalOptimizerRule for CheckedRules {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let mut rewritten = plan.clone();
        for rule in &self.rules {
            rewritten = rule.optimize(rewritten, config)?;
        }
        let fallback = config.extensions.get::<crate::options::FoamOptions>().is_none_or(|o| o.plan_check_fallback);
        match plan_check(&rewritten, config) {
            Ok(()) => Ok(rewritten),
            Err(error) if !fallback => Err(error),
            Err(error) => {
                tracing::warn!("FoamDB's locality rules made a plan that fails DataFusion's plan check; running DataFusion's plan: {error}");
                Ok(plan)
            }
        }
    }

    fn name(&self) -> &str {
        "foam_checked_rules"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::sorts::sort::SortExec;
    use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;

    /// A rule that drops the sort below a merge: a plan the check refuses.
    #[derive(Debug)]
    struct DropSort;

    impl PhysicalOptimizerRule for DropSort {
        fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
            let sort = plan.children()[0].clone();
            datafusion::physical_plan::execution_plan::replace_children_if_necessary(plan, vec![sort.children()[0].clone()])
        }
        fn name(&self) -> &str {
            "drop_sort"
        }
        fn schema_check(&self) -> bool {
            true
        }
    }

    /// A rule that changes nothing.
    #[derive(Debug)]
    struct Keep;

    impl PhysicalOptimizerRule for Keep {
        fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
            Ok(plan)
        }
        fn name(&self) -> &str {
            "keep"
        }
        fn schema_check(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_plan_failing_the_check_gives_way_to_the_one_given() {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let by_v = LexOrdering::new(vec![PhysicalSortExpr::new_default(col("v", &schema).unwrap())]).unwrap();
        let scan: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(schema));
        let sort: Arc<dyn ExecutionPlan> = Arc::new(SortExec::new(by_v.clone(), scan));
        let merge: Arc<dyn ExecutionPlan> = Arc::new(SortPreservingMergeExec::new(by_v, sort));
        let config = ConfigOptions::default();

        let broken = CheckedRules { rules: vec![Arc::new(DropSort)] }.optimize(merge.clone(), &config).unwrap();
        assert!(Arc::ptr_eq(&broken, &merge), "the unchecked rewrite must not be kept");
        assert!(DropSort.optimize(merge.clone(), &config).map(|p| plan_check(&p, &config).is_err()).unwrap());

        let kept = CheckedRules { rules: vec![Arc::new(Keep)] }.optimize(merge.clone(), &config).unwrap();
        assert!(Arc::ptr_eq(&kept, &merge));
    }
}
