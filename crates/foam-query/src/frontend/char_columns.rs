//! `CHAR(n)` results as PostgreSQL returns them: blank-padded to n
//! characters and described as `bpchar`.
//!
//! ```text
//!   plan ─▶ widths: each output column that is a CHAR(n) column read as it is ─▶ schema marked
//!   rows ─▶ pad: those columns' values to n characters ─▶ client (bpchar, typmod n + 4)
//! ```
//!
//! FoamDB keeps a CHAR(n) value without trailing blanks (the write path
//! trims them: PostgreSQL ignores them in comparisons and drops them when
//! a CHAR(n) becomes text, so every expression over the column sees what
//! PostgreSQL's does). PostgreSQL prints the value padded when the result
//! column is of type `bpchar`: a table's column read as it is, through
//! projections, filters, joins, GROUP BY keys, `min`/`max`, sorting and set
//! operations of CHAR columns of one length. [`widths`] follows an output
//! column down the plan to such a column; anything computed (`c || ''`,
//! `upper(c)`, a CASE) is text there and here, and is not padded.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, LargeStringArray, RecordBatch, StringArray, StringViewArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::datasource::{ViewTable, source_as_provider};
use datafusion::logical_expr::{Distinct, Expr, JoinType, LogicalPlan};
use foam_catalog::Catalog;
use foam_catalog::types::SqlType;

/// The field metadata key that marks a result column as `CHAR(n)`, with
/// `n` as its value (read by the PostgreSQL protocol layer).
pub const BPCHAR_METADATA: &str = "foam.bpchar";

/// For each output column of `plan`, the length of the CHAR column it is.
pub fn widths(plan: &LogicalPlan, catalog: &Catalog) -> Vec<Option<u32>> {
    (0..plan.schema().fields().len())
        .map(|i| match declared(plan, i, catalog) {
            Some(SqlType::Char { length }) => Some(length),
            _ => None,
        })
        .collect()
}

/// The declared type of the table column that output column `index` of
/// `plan` is, read as it is (through views, `min`, `max` and `nullif`
/// too); `None` for anything computed.
pub fn declared(plan: &LogicalPlan, index: usize, catalog: &Catalog) -> Option<SqlType> {
    match plan {
        LogicalPlan::Projection(projection) => expr_declared(projection.expr.get(index)?, &projection.input, catalog),
        LogicalPlan::Filter(f) => declared(&f.input, index, catalog),
        LogicalPlan::Sort(s) => declared(&s.input, index, catalog),
        LogicalPlan::Limit(l) => declared(&l.input, index, catalog),
        LogicalPlan::SubqueryAlias(s) => declared(&s.input, index, catalog),
        LogicalPlan::Repartition(r) => declared(&r.input, index, catalog),
        LogicalPlan::Distinct(Distinct::All(input)) => declared(input, index, catalog),
        LogicalPlan::Window(w) if index < w.input.schema().fields().len() => declared(&w.input, index, catalog),
        LogicalPlan::TableScan(scan) => {
            if !matches!(scan.table_name.schema(), None | Some("public")) {
                return None;
            }
            let column = match &scan.projection {
                Some(projection) => *projection.get(index)?,
                None => index,
            };
            let name = scan.table_name.table();
            if let Some(table) = catalog.tables.get(name) {
                return Some(table.columns.get(column)?.sql_type.clone());
            }
            // A view's column is what its query's column is.
            catalog.views.get(name)?;
            let provider = source_as_provider(&scan.source).ok()?;
            let view = provider.downcast_ref::<ViewTable>()?;
            declared(view.logical_plan(), column, catalog)
        }
        LogicalPlan::Join(join) => {
            let left = join.left.schema().fields().len();
            match join.join_type {
                JoinType::LeftSemi | JoinType::LeftAnti => declared(&join.left, index, catalog),
                JoinType::RightSemi | JoinType::RightAnti => declared(&join.right, index, catalog),
                _ if index < left => declared(&join.left, index, catalog),
                JoinType::LeftMark | JoinType::RightMark => None,
                _ => declared(&join.right, index - left, catalog),
            }
        }
        LogicalPlan::Aggregate(aggregate) => {
            let groups = aggregate.group_expr.len();
            if index < groups {
                return expr_declared(&aggregate.group_expr[index], &aggregate.input, catalog);
            }
            let mut aggregated = aggregate.aggr_expr.get(index - groups)?;
            while let Expr::Alias(alias) = aggregated {
                aggregated = &alias.expr;
            }
            match aggregated {
                // PostgreSQL's min and max of a CHAR are one; of a VARCHAR, text.
                Expr::AggregateFunction(f) if matches!(f.func.name(), "min" | "max") && f.params.args.len() == 1 => {
                    expr_declared(&f.params.args[0], &aggregate.input, catalog).filter(|t| matches!(t, SqlType::Char { .. }))
                }
                _ => None,
            }
        }
        LogicalPlan::Union(union) => {
            let mut inputs = union.inputs.iter().map(|input| declared(input, index, catalog));
            let first = inputs.next()??;
            inputs.all(|t| t.as_ref() == Some(&first)).then_some(first)
        }
        _ => None,
    }
}

fn expr_declared(expr: &Expr, input: &LogicalPlan, catalog: &Catalog) -> Option<SqlType> {
    match expr {
        Expr::Column(column) => declared(input, input.schema().index_of_column(column).ok()?, catalog),
        Expr::Alias(alias) => expr_declared(&alias.expr, input, catalog),
        // A cast to CHAR(n) or VARCHAR(n) (`char_casts.rs`).
        // `bpchar` (no length) of a CHAR(n) is that CHAR(n).
        Expr::ScalarFunction(f) if f.func.name() == crate::frontend::char_casts::CHAR_CAST => match crate::frontend::char_casts::cast_length(&f.args) {
            Some(length) => Some(SqlType::Char { length }),
            None => match f.args.first()? {
                Expr::Cast(cast) => expr_declared(&cast.expr, input, catalog).filter(|t| matches!(t, SqlType::Char { .. })),
                _ => None,
            },
        },
        Expr::ScalarFunction(f) if f.func.name() == crate::frontend::char_casts::VARCHAR_CAST => {
            Some(SqlType::Varchar { length_max: crate::frontend::char_casts::cast_length(&f.args) })
        }
        // `nullif` of a CHAR is one (of a VARCHAR, text).
        Expr::ScalarFunction(f) if f.func.name() == "nullif" && f.args.len() == 2 => {
            expr_declared(&f.args[0], input, catalog).filter(|t| matches!(t, SqlType::Char { .. }))
        }
        _ => None,
    }
}

/// `schema` with each column of a known CHAR width marked; `None` when
/// no column is one.
pub fn mark(schema: &SchemaRef, widths: &[Option<u32>]) -> Option<SchemaRef> {
    if widths.iter().all(Option::is_none) || widths.len() != schema.fields().len() {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(widths)
        .map(|(field, width)| match (width, field.data_type()) {
            (Some(n), DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8) => {
                let mut metadata = field.metadata().clone();
                metadata.insert(BPCHAR_METADATA.to_string(), n.to_string());
                field.as_ref().clone().with_metadata(metadata)
            }
            _ => field.as_ref().clone(),
        })
        .collect();
    Some(Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())))
}

/// The CHAR width a result field is marked with.
pub fn marked_width(field: &Field) -> Option<u32> {
    field.metadata().get(BPCHAR_METADATA)?.parse().ok()
}

/// `batch` in `schema` (from [`mark`]), its CHAR columns padded with blanks.
pub fn pad(schema: &SchemaRef, batch: RecordBatch) -> datafusion::arrow::error::Result<RecordBatch> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| match marked_width(field) {
            Some(n) => pad_column(column, n as usize),
            None => column.clone(),
        })
        .collect();
    RecordBatch::try_new(schema.clone(), columns)
}

fn pad_column(column: &ArrayRef, n: usize) -> ArrayRef {
    let padded = |value: &str| -> String {
        let length = value.chars().count();
        let mut out = String::with_capacity(value.len() + n.saturating_sub(length));
        out.push_str(value);
        out.extend(std::iter::repeat_n(' ', n.saturating_sub(length)));
        out
    };
    match column.data_type() {
        DataType::Utf8 => Arc::new(column.as_string::<i32>().iter().map(|v| v.map(padded)).collect::<StringArray>()),
        DataType::LargeUtf8 => Arc::new(column.as_string::<i64>().iter().map(|v| v.map(padded)).collect::<LargeStringArray>()),
        DataType::Utf8View => Arc::new(column.as_string_view().iter().map(|v| v.map(padded)).collect::<StringViewArray>()),
        _ => column.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_to_characters() {
        let column: ArrayRef = Arc::new(StringViewArray::from(vec![Some("ab"), None, Some("é"), Some("abc")]));
        let padded = pad_column(&column, 3);
        let values: Vec<Option<&str>> = padded.as_string_view().iter().collect();
        assert_eq!(values, vec![Some("ab "), None, Some("é  "), Some("abc")]);
    }
}
