//! An integer literal in arithmetic with an INT or SMALLINT is an INT, as
//! PostgreSQL types it: `int_column * 2` is an INT there (and fails with
//! 22003 past its range), where DataFusion types every integer literal as
//! a BIGINT and widens the column to it.
//!
//! The SQL planner consults [`IntegerLiteralPlanner`] for each binary
//! operator it plans, so the type is the statement's from the start: a
//! prepared statement's Describe reports the type its rows then carry
//! (an analyzer rule, run after Describe, reported `$1::int + 0` as a
//! BIGINT and sent INTs, which pgx and asyncpg refused).
//!
//! ```text
//!   int_column + 2          ─▶  int_column + Int32(2)       INT, as in PostgreSQL
//!   2 * smallint_column     ─▶  Int32(2) * smallint_column  INT (the SMALLINT widens)
//!   int_column + 3000000000 ─▶  unchanged                   BIGINT (the literal does not fit)
//!   1 + 2, bigint_col + 2   ─▶  unchanged                   BIGINT
//! ```
//! A literal on its own or beside another literal stays a BIGINT
//! (PostgreSQL's would be an INT).

use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable};
use datafusion::sql::sqlparser::ast::BinaryOperator;
use datafusion::arrow::datatypes::DataType;

/// Types integer literals beside INTs and SMALLINTs as INTs (see the module
/// documentation).
#[derive(Debug, Default)]
pub struct IntegerLiteralPlanner;

impl ExprPlanner for IntegerLiteralPlanner {
    fn plan_binary_op(&self, expr: RawBinaryExpr, schema: &DFSchema) -> Result<PlannerResult<RawBinaryExpr>> {
        let arithmetic = matches!(
            expr.op,
            BinaryOperator::Plus | BinaryOperator::Minus | BinaryOperator::Multiply | BinaryOperator::Divide | BinaryOperator::Modulo
        );
        if !arithmetic {
            return Ok(PlannerResult::Original(expr));
        }
        let RawBinaryExpr { op, left, right } = expr;
        let (left, right) = match (int_literal(&left), int_literal(&right)) {
            (None, Some(value)) if is_narrow(&left, schema) => (left, Expr::Literal(ScalarValue::Int32(Some(value)), None)),
            (Some(value), None) if is_narrow(&right, schema) => (Expr::Literal(ScalarValue::Int32(Some(value)), None), right),
            _ => (left, right),
        };
        Ok(PlannerResult::Original(RawBinaryExpr { op, left, right }))
    }
}

/// The value of a BIGINT literal that an INT holds.
fn int_literal(expr: &Expr) -> Option<i32> {
    match expr {
        Expr::Literal(ScalarValue::Int64(Some(value)), _) => i32::try_from(*value).ok(),
        _ => None,
    }
}

/// Whether `expr` is an INT or a SMALLINT. A chain of arithmetic on
/// literals alone (`1 + 1 + ...`) is a BIGINT, found without asking the
/// type of each level, which costs the depth of the chain each time.
fn is_narrow(expr: &Expr, schema: &DFSchema) -> bool {
    let mut leftmost = expr;
    while let Expr::BinaryExpr(BinaryExpr { left, op, right }) = leftmost {
        if !op.is_numerical_operators() || !matches!(right.as_ref(), Expr::Literal(ScalarValue::Int64(_), _)) {
            break;
        }
        leftmost = left;
    }
    if matches!(leftmost, Expr::Literal(ScalarValue::Int64(_), _)) {
        return false;
    }
    expr.get_type(schema).is_ok_and(|t| matches!(t, DataType::Int16 | DataType::Int32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::logical_expr::{col, lit};

    fn planned(left: Expr, op: BinaryOperator, right: Expr) -> (Expr, Expr) {
        let schema = DFSchema::try_from(Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("s", DataType::Int16, true),
            Field::new("b", DataType::Int64, true),
        ]))
        .unwrap();
        match IntegerLiteralPlanner.plan_binary_op(RawBinaryExpr { op, left, right }, &schema).unwrap() {
            PlannerResult::Original(RawBinaryExpr { left, right, .. }) => (left, right),
            PlannerResult::Planned(expr) => panic!("planned {expr}"),
        }
    }

    #[test]
    fn a_literal_beside_an_int_or_smallint_is_an_int() {
        let int = |v: i32| Expr::Literal(ScalarValue::Int32(Some(v)), None);
        assert_eq!(planned(col("i"), BinaryOperator::Multiply, lit(2i64)), (col("i"), int(2)));
        assert_eq!(planned(lit(-7i64), BinaryOperator::Minus, col("s")), (int(-7), col("s")));
        assert_eq!(planned(col("i") + int(1), BinaryOperator::Divide, lit(2i64)).1, int(2), "an INT expression");
        // Left as they were: a BIGINT beside, a literal an INT cannot hold,
        // two literals, a comparison.
        assert_eq!(planned(col("b"), BinaryOperator::Plus, lit(2i64)).1, lit(2i64));
        assert_eq!(planned(col("i"), BinaryOperator::Plus, lit(3_000_000_000i64)).1, lit(3_000_000_000i64));
        assert_eq!(planned(lit(1i64) + lit(1i64), BinaryOperator::Plus, lit(1i64)).1, lit(1i64));
        assert_eq!(planned(col("i"), BinaryOperator::Gt, lit(2i64)).1, lit(2i64));
    }
}
