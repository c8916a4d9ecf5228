//! `x AT TIME ZONE z` written as `foam_at_time_zone(x, z)`, PostgreSQL's
//! meaning of it (`exec/at_time_zone.rs`), before DataFusion plans it as a
//! cast.

use datafusion::sql::sqlparser::ast::{Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident, ObjectName, Statement};

use crate::exec::at_time_zone::AT_TIME_ZONE;

/// Rewrites every `AT TIME ZONE` in `statement`.
pub fn rewrite(statement: &mut Statement) {
    let _ = datafusion::sql::sqlparser::ast::visit_expressions_mut(statement, |expr: &mut Expr| {
        if let Expr::AtTimeZone { timestamp, time_zone } = expr {
            let arg = |e: &Expr| FunctionArg::Unnamed(FunctionArgExpr::Expr(e.clone()));
            *expr = Expr::Function(Function {
                name: ObjectName::from(vec![Ident::new(AT_TIME_ZONE)]),
                uses_odbc_syntax: false,
                parameters: FunctionArguments::None,
                args: FunctionArguments::List(FunctionArgumentList { duplicate_treatment: None, args: vec![arg(timestamp), arg(time_zone)], clauses: vec![] }),
                filter: None,
                null_treatment: None,
                over: None,
                within_group: vec![],
            });
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}
