//! The front end: one client session's statements, from the query text to a
//! plan or a FoamDB command, with the settings, EXPLAIN and interruption
//! around them.

pub mod array_subquery;
pub mod at_time_zone;
pub mod block_ddl;
pub mod bpchar_operands;
pub mod char_casts;
pub mod char_columns;
pub mod check_constraints;
pub mod column_defaults;
pub mod copy_statement;
pub mod cursors;
pub mod datetime_literals;
pub mod function_tables;
pub mod ddl;
pub mod explain;
pub mod grouping_sets;
pub mod information_schema;
pub mod lateral_limit;
pub mod interrupt;
pub mod lock_table;
pub mod modify;
pub mod numeric_literals;
pub mod pg_access;
pub mod pg_compatibility;
pub mod privileges;
pub mod returning;
pub mod roles;
pub mod scalar_subquery;
pub mod select_names;
pub mod spellings;
pub mod sequence_ddl;
pub mod setting_functions;
pub mod statement;
pub mod subscripts;
pub mod time_zone;
pub mod session;
pub mod transaction_block;
pub mod upsert;

/// The arguments of a call written without names (`f(a, b)`); a named or
/// wildcard argument is left out, so a caller compares the count with the
/// list's own.
pub(crate) fn plain_arguments(list: &datafusion::sql::sqlparser::ast::FunctionArgumentList) -> Vec<&datafusion::sql::sqlparser::ast::Expr> {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr};
    list.args
        .iter()
        .filter_map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect()
}
