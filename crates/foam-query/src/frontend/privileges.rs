//! What a statement needs of the role running it, and the check against the
//! catalog's owners and grants (`foam_catalog::privileges`), made each time
//! the statement runs (a prepared statement is checked again on every
//! Execute, as grants may have changed since).
//!
//! ```text
//!   prepared statement ─▶ needs: SELECT on every table or view it names
//!                                 INSERT/UPDATE/DELETE/TRUNCATE on what it writes
//!                                 ownership (DROP, ALTER, GRANT), CREATE, superuser
//!   run ─▶ check(needs, catalog, acting role) ─▶ 42501 naming the first missing one
//! ```
//! A view reads with its owner's privileges: selecting from it needs SELECT
//! on the view, and its owner needs SELECT on what the view reads (checked
//! whoever selects, a superuser too, as in PostgreSQL). UPDATE and DELETE
//! need SELECT on their table only when they read its columns (a WHERE
//! clause, or a SET value that is not a constant).

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::{LogicalPlan, WriteOp};
use datafusion::common::TableReference;
use datafusion::sql::sqlparser::ast::{
    Action, CopySource, CopyTarget, Expr, GrantObjects, Grantee, GranteeName, GranteesType, ObjectName, Privileges, Statement, UpdateTableFromKind, Visit, visit_expressions,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use foam_catalog::privileges::{GrantObject, PUBLIC, Privilege};
use foam_catalog::{Catalog, CatalogCommand, ViewDef};
use foam_common::{FoamError, FoamResult, SqlState};

use crate::frontend::ddl;
use crate::frontend::setting_functions::{DATABASE_NAME, SCHEMA_NAME};

/// System tables only a superuser reads: their digests read every row of
/// every copy of every partition.
pub(crate) const SUPERUSER_SYSTEM_TABLES: &[&str] = &["foam_partition_digests"];

/// One thing a statement needs of its role.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// Only a superuser may do it (what it is, for the message).
    Superuser(&'static str),
    /// A privilege on a table or view.
    Privilege { relation: String, privilege: Privilege },
    /// Owning the table or view (DROP, ALTER TABLE, GRANT on it, replacing a view).
    Owner(String),
    /// CREATE on the database: creating tables and views.
    Create,
    /// Changing this role's own password: the role itself or a superuser.
    OwnRole(String),
    /// Acting as the role, as giving it a relation does (PostgreSQL's
    /// membership; FoamDB has none, so the role itself or a superuser).
    MemberOf(String),
    /// One of these privileges on a sequence (`nextval` takes USAGE or
    /// UPDATE, `currval` SELECT or USAGE, `setval` UPDATE).
    Sequence { name: String, any_of: &'static [Privilege] },
}

/// Who a statement runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acting {
    Superuser,
    Role(String),
}

impl Acting {
    /// The role `name` as the catalog has it. A name no role has is a
    /// superuser only on a node that lets anyone connect as anyone
    /// (`--insecure`, where privileges cannot keep anyone out anyway);
    /// otherwise it holds what PUBLIC was granted.
    pub fn of(catalog: &Catalog, name: &str, insecure: bool) -> Acting {
        match catalog.roles.get(name) {
            Some(role) if role.superuser => Acting::Superuser,
            None if insecure => Acting::Superuser,
            _ => Acting::Role(name.to_string()),
        }
    }
}

/// What a statement DataFusion plans reads: SELECT on each table and view
/// it names, subqueries included, but not an INSERT's target. Read from the
/// statement, not its plan: DataFusion's planner puts a view's query in
/// place of the view, and that query reads with the view owner's
/// privileges. A CTE named like a table counts as that table (stricter than
/// PostgreSQL, never looser).
pub fn read_needs(statement: &Statement, catalog: &Catalog) -> Vec<Need> {
    let relations = match statement {
        Statement::Insert(insert) => insert.source.as_ref().map(relations_of).unwrap_or_default(),
        other => relations_of(other),
    };
    let mut needs = names_read(relations, catalog);
    needs.extend(sequence_needs(statement, catalog));
    if calls_function(statement, crate::catalog::system_tables::ClusterStatsReset::NAME) {
        needs.insert(Need::Superuser("reset the cluster's statistics"));
    }
    needs.into_iter().collect()
}

/// What the sequence functions a statement calls on a named sequence need
/// (`nextval('s')`: USAGE or UPDATE; `currval`: SELECT or USAGE; `setval`:
/// UPDATE), as the role running it. An INSERT's identity columns draw
/// from their sequences without it, as in PostgreSQL. A name computed per
/// row is checked when `setval` runs; `nextval` and `currval` of one are
/// not checked.
pub fn sequence_needs(statement: &Statement, catalog: &Catalog) -> Vec<Need> {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments, Value};
    let target = match statement {
        Statement::Explain { statement, .. } => statement.as_ref(),
        other => other,
    };
    let target_table = match target {
        Statement::Insert(insert) => match &insert.table {
            datafusion::sql::sqlparser::ast::TableObject::TableName(name) => ddl::table_name(name).ok(),
            _ => None,
        },
        _ => None,
    };
    let identity_of_target = |name: &str| {
        catalog.sequences.get(name).is_some_and(|s| {
            crate::exec::sequences::is_identity_sequence(catalog, s) && s.owned_by.as_ref().map(|(table, _)| table) == target_table.as_ref()
        })
    };
    let mut needs = Vec::new();
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(statement, |expr| {
        if let Expr::Function(function) = expr
            && let FunctionArguments::List(list) = &function.args
            && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(value)))) = list.args.first()
            && let Value::SingleQuotedString(literal) = &value.value
        {
            let name = crate::exec::sequences::sequence_name(literal);
            let called = function.name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_lowercase()).unwrap_or_default();
            let Some(any_of) = crate::exec::sequences::privileges_needed(&called) else { return ControlFlow::<()>::Continue(()) };
            if called == "nextval" && identity_of_target(&name) {
                return ControlFlow::<()>::Continue(());
            }
            // One not there yet may be by EXECUTE; holding on nothing is free.
            needs.push(Need::Sequence { name, any_of });
        }
        ControlFlow::<()>::Continue(())
    });
    needs
}

/// SELECT on each of `relations` the catalog has (sequences too); superuser for the
/// system tables that read every row of every table.
fn names_read(relations: Vec<String>, catalog: &Catalog) -> BTreeSet<Need> {
    let mut needs = BTreeSet::new();
    for relation in relations {
        if SUPERUSER_SYSTEM_TABLES.contains(&relation.as_str()) && catalog.acl(&relation).is_none() {
            needs.insert(Need::Superuser("read the digests of every partition (foam_partition_digests)"));
        } else if catalog.acl(&relation).is_some() || catalog.sequences.contains_key(&relation) {
            needs.insert(Need::Privilege { relation, privilege: Privilege::Select });
        }
    }
    needs
}

/// What an UPDATE, DELETE or TRUNCATE reads, from the statement as the
/// client wrote it: SELECT on what its WHERE clause and SET values name
/// (subqueries included, its own table too), and SELECT on its table when
/// it reads its columns.
pub fn modify_read_needs(statement: &Statement, table: &str, catalog: &Catalog) -> Vec<Need> {
    let mut relations = Vec::new();
    match statement {
        Statement::Update(update) => {
            relations.extend(update.selection.as_ref().map(relations_of).unwrap_or_default());
            for assignment in &update.assignments {
                relations.extend(relations_of(&assignment.value));
            }
            if let Some(UpdateTableFromKind::AfterSet(from) | UpdateTableFromKind::BeforeSet(from)) = &update.from {
                relations.extend(relations_of(from));
            }
        }
        Statement::Delete(delete) => {
            relations.extend(delete.selection.as_ref().map(relations_of).unwrap_or_default());
            relations.extend(delete.using.as_ref().map(relations_of).unwrap_or_default());
        }
        Statement::Insert(insert) => {
            relations.extend(insert.source.as_ref().map(relations_of).unwrap_or_default());
            if let Some(update) = do_update(insert) {
                relations.extend(update.selection.as_ref().map(relations_of).unwrap_or_default());
                for assignment in &update.assignments {
                    relations.extend(relations_of(&assignment.value));
                }
            }
        }
        _ => {}
    }
    if modify_reads_table(statement) {
        relations.push(table.to_string());
    }
    let mut needs = names_read(relations, catalog);
    needs.extend(sequence_needs(statement, catalog));
    needs.into_iter().collect()
}

/// Whether `statement` calls the function `name` anywhere.
fn calls_function(statement: &Statement, name: &str) -> bool {
    visit_expressions(statement, |expr| match expr {
        Expr::Function(function) if function.name.0.last().and_then(|p| p.as_ident()).is_some_and(|i| i.value.eq_ignore_ascii_case(name)) => {
            ControlFlow::Break(())
        }
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

/// What the writes `plan` ends in need: the privilege of each.
pub fn write_needs(plan: &LogicalPlan) -> Vec<Need> {
    let mut needs = BTreeSet::new();
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Dml(dml) = node {
            let privileges: &[Privilege] = match dml.op {
                WriteOp::Insert(_) => &[Privilege::Insert],
                WriteOp::Update => &[Privilege::Update],
                WriteOp::Delete => &[Privilege::Delete],
                WriteOp::Truncate => &[Privilege::Truncate],
                WriteOp::Ctas => {
                    needs.insert(Need::Create);
                    &[]
                }
                // MERGE, and what later DataFusions add: every write.
                _ => &[Privilege::Insert, Privilege::Update, Privilege::Delete],
            };
            if let Some(relation) = relation_name(&dml.table_name) {
                needs.extend(privileges.iter().map(|privilege| Need::Privilege { relation: relation.clone(), privilege: *privilege }));
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    needs.into_iter().collect()
}

/// Whether an UPDATE or DELETE reads its table's columns: it has a WHERE
/// clause, or sets a column to a value that names a column.
fn modify_reads_table(statement: &Statement) -> bool {
    match statement {
        Statement::Delete(delete) => delete.selection.is_some(),
        Statement::Update(update) => {
            update.selection.is_some()
                || update.assignments.iter().any(|assignment| {
                    visit_expressions(&assignment.value, |expr| match expr {
                        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => ControlFlow::Break(()),
                        _ => ControlFlow::Continue(()),
                    })
                    .is_break()
                })
        }
        // An upsert's DO UPDATE reads the existing row where it names one
        // of its columns (`EXCLUDED.c` is the proposed row's).
        Statement::Insert(insert) => do_update(insert).is_some_and(|update| {
            let reads_existing = |expr: &Expr| {
                visit_expressions(expr, |expr| match expr {
                    Expr::Identifier(_) => ControlFlow::Break(()),
                    Expr::CompoundIdentifier(parts) if !parts[0].value.eq_ignore_ascii_case("excluded") => ControlFlow::Break(()),
                    _ => ControlFlow::Continue(()),
                })
                .is_break()
            };
            update.selection.as_ref().is_some_and(reads_existing) || update.assignments.iter().any(|assignment| reads_existing(&assignment.value))
        }),
        _ => false,
    }
}

/// An INSERT's `ON CONFLICT ... DO UPDATE`, if it has one.
fn do_update(insert: &datafusion::sql::sqlparser::ast::Insert) -> Option<&datafusion::sql::sqlparser::ast::DoUpdate> {
    use datafusion::sql::sqlparser::ast::{OnConflict, OnConflictAction, OnInsert};
    match &insert.on {
        Some(OnInsert::OnConflict(OnConflict { action: OnConflictAction::DoUpdate(update), .. })) => Some(update),
        _ => None,
    }
}

/// What one of FoamDB's own statements needs (EXPLAIN's statement is
/// checked when it is planned).
pub fn own_needs(statement: &Statement) -> Vec<Need> {
    let names = |names: &[ObjectName]| names.iter().filter_map(|n| ddl::table_name(n).ok()).collect::<Vec<_>>();
    match statement {
        Statement::CreateTable(_) | Statement::CreateSequence { .. } => vec![Need::Create],
        Statement::CreateView(view) => {
            let mut needs = vec![Need::Create];
            if view.or_replace {
                needs.extend(names(std::slice::from_ref(&view.name)).into_iter().map(Need::Owner));
            }
            needs
        }
        Statement::Drop { names: dropped, .. } => names(dropped).into_iter().map(Need::Owner).collect(),
        Statement::Copy { source: CopySource::Table { table_name, .. }, to: false, target, .. } => {
            let mut needs: Vec<Need> =
                names(std::slice::from_ref(table_name)).into_iter().map(|relation| Need::Privilege { relation, privilege: Privilege::Insert }).collect();
            if matches!(target, CopyTarget::File { .. }) {
                needs.push(Need::Superuser("COPY from a file (use COPY FROM STDIN, psql's \\copy)"));
            }
            needs
        }
        // ACCESS SHARE, the one mode FoamDB takes, needs SELECT (lock_table.rs).
        Statement::Lock(lock) => lock
            .tables
            .iter()
            .filter_map(|target| ddl::table_name(&target.name).ok())
            .map(|relation| Need::Privilege { relation, privilege: Privilege::Select })
            .collect(),
        Statement::Truncate(truncate) => truncate
            .table_names
            .iter()
            .filter_map(|target| ddl::table_name(&target.name).ok())
            .map(|relation| Need::Privilege { relation, privilege: Privilege::Truncate })
            .collect(),
        _ => Vec::new(),
    }
}

/// What running a catalog command FoamDB parsed itself needs.
pub fn command_needs(command: &CatalogCommand) -> Vec<Need> {
    match command {
        CatalogCommand::Grant { object: GrantObject::Relations { names, .. } | GrantObject::Sequences { names, .. }, .. } => {
            names.iter().cloned().map(Need::Owner).collect()
        }
        CatalogCommand::Grant { object: GrantObject::Create, .. } => vec![Need::Superuser("grant CREATE on the database")],
        CatalogCommand::AlterOwner { relation, owner } => vec![Need::Owner(relation.clone()), Need::MemberOf(owner.clone())],
        CatalogCommand::SetSequenceOwnedBy { name, owned_by } => {
            std::iter::once(name).chain(owned_by.as_ref().map(|(table, _)| table)).cloned().map(Need::Owner).collect()
        }
        CatalogCommand::AlterSequence { name, .. } => vec![Need::Owner(name.clone())],
        CatalogCommand::SetColumnDefault { table, .. }
        | CatalogCommand::AddIdentity { table, .. }
        | CatalogCommand::DropConstraint { table, .. }
        | CatalogCommand::AddCheck { table, .. }
        | CatalogCommand::FinishCheck { table, .. } => vec![Need::Owner(table.clone())],
        CatalogCommand::AlterRole { name, password: Some(_), login: None, superuser: None } => vec![Need::OwnRole(name.clone())],
        CatalogCommand::CreateRole { .. } | CatalogCommand::AlterRole { .. } | CatalogCommand::DropRole { .. } => {
            vec![Need::Superuser("create, alter or drop roles")]
        }
        _ => vec![Need::Superuser("change the cluster")],
    }
}

/// The table or view of the cluster's one schema that `reference` names
/// (`None` for the catalog tables of `pg_catalog` and `information_schema`).
pub(crate) fn relation_name(reference: &TableReference) -> Option<String> {
    let schema_ok = reference.schema().is_none_or(|s| s == SCHEMA_NAME);
    let catalog_ok = reference.catalog().is_none_or(|c| c == DATABASE_NAME);
    (schema_ok && catalog_ok).then(|| reference.table().to_string())
}

/// Table and view names a statement or query reads (last name part, as
/// FoamDB names them).
pub fn relations_of<V: Visit>(node: &V) -> Vec<String> {
    let mut names = Vec::new();
    let _ = datafusion::sql::sqlparser::ast::visit_relations(node, |name| {
        if let Ok(name) = ddl::table_name(name) {
            names.push(name);
        }
        ControlFlow::<()>::Continue(())
    });
    names
}

/// The tables and views a view's stored query names: every name in a
/// FROM clause but a reference to a `WITH` query in scope there, as
/// DataFusion resolves it. A `WITH` query's name is in scope in its
/// query's body and in the `WITH` queries after it, and only unqualified:
/// `WITH secret AS (SELECT * FROM secret)` and `FROM public.secret` read
/// the table, for its owner's privileges and for what the view depends on.
pub fn view_relations(view: &ViewDef) -> FoamResult<Vec<String>> {
    use datafusion::sql::sqlparser::ast::{ObjectName, Query};
    use std::collections::HashMap;
    /// The names in scope of each query being read, innermost last, and
    /// those set aside for the `WITH` queries not yet reached.
    #[derive(Default)]
    struct Scopes {
        stack: Vec<Vec<String>>,
        for_ctes: HashMap<*const Query, Vec<String>>,
        relations: Vec<String>,
    }
    impl datafusion::sql::sqlparser::ast::Visitor for Scopes {
        type Break = ();
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            let outer = self.for_ctes.remove(&(query as *const Query)).or_else(|| self.stack.last().cloned()).unwrap_or_default();
            let mut scope = outer;
            // A WITH query's own name is not in scope in its own body, even
            // under RECURSIVE: DataFusion plans a body that is no UNION,
            // and a UNION's first term, before the name exists, so there it
            // reads the table; a recursive term's self-reference is then
            // taken for a table too, which costs at most a false dependency.
            for cte in query.with.iter().flat_map(|with| &with.cte_tables) {
                self.for_ctes.insert(&*cte.query as *const Query, scope.clone());
                scope.push(ddl::normalize_ident(&cte.alias.name.value, cte.alias.name.quote_style));
            }
            self.stack.push(scope);
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
            self.stack.pop();
            ControlFlow::Continue(())
        }
        fn pre_visit_relation(&mut self, name: &ObjectName) -> ControlFlow<()> {
            let Ok(relation) = ddl::table_name(name) else { return ControlFlow::Continue(()) };
            let a_with_query = name.0.len() == 1 && self.stack.last().is_some_and(|scope| scope.contains(&relation));
            if !a_with_query {
                self.relations.push(relation);
            }
            ControlFlow::Continue(())
        }
    }
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, &view.query_sql).map_err(|e| FoamError::Syntax { message: e.to_string() })?;
    let mut scopes = Scopes::default();
    let _ = statements.visit(&mut scopes);
    Ok(scopes.relations)
}

/// Refuses the statement with 42501 unless `acting` holds every need.
pub fn check(needs: &[Need], catalog: &Catalog, acting: &Acting) -> FoamResult<()> {
    let mut views_checked = BTreeSet::new();
    for need in needs {
        // Whoever selects from a view, its owner must be able to read what
        // the view reads.
        if let Need::Privilege { relation, privilege: Privilege::Select } = need
            && catalog.views.contains_key(relation)
        {
            check_view_reads(catalog, relation, &mut views_checked)?;
        }
        let Acting::Role(role) = acting else { continue };
        let holds = match need {
            Need::Superuser(_) => false,
            // A relation that does not exist is the statement's own error.
            Need::Privilege { relation, privilege } => holds(catalog, role, relation, *privilege),
            Need::Owner(relation) => match (catalog.acl(relation), catalog.sequences.get(relation)) {
                (None, Some(sequence)) => sequence.acl.is_owner(role),
                (acl, _) => acl.is_none_or(|acl| acl.is_owner(role)),
            },
            Need::Sequence { name, any_of } => any_of.iter().any(|privilege| holds(catalog, role, name, *privilege)),
            Need::Create => catalog.creators.contains(role) || catalog.creators.contains(PUBLIC),
            Need::OwnRole(name) | Need::MemberOf(name) => name == role,
        };
        if !holds {
            return Err(denied(need, catalog));
        }
    }
    Ok(())
}

/// Whether `role` (not a superuser) holds `privilege` on `relation` (a
/// table, view or sequence); a relation that does not exist is the
/// statement's own error.
fn holds(catalog: &Catalog, role: &str, relation: &str, privilege: Privilege) -> bool {
    match (catalog.acl(relation), catalog.sequences.get(relation)) {
        (None, Some(sequence)) => sequence.acl.allows(role, privilege),
        (acl, _) => acl.is_none_or(|acl| acl.allows(role, privilege)),
    }
}

/// The view's owner can read what the view reads, and so on for each view
/// it reads (each checked once: its owner's access does not depend on who
/// reaches it).
fn check_view_reads(catalog: &Catalog, view: &str, checked: &mut BTreeSet<String>) -> FoamResult<()> {
    let mut pending = vec![view.to_string()];
    while let Some(view) = pending.pop() {
        let Some(def) = catalog.views.get(&view) else { continue };
        if !checked.insert(view.clone()) {
            continue;
        }
        let owner = def.acl.owner.as_deref().map(|owner| Acting::of(catalog, owner, false));
        for relation in view_relations(def)? {
            if let Some(Acting::Role(owner)) = &owner
                && !holds(catalog, owner, &relation, Privilege::Select)
            {
                return Err(denied(&Need::Privilege { relation, privilege: Privilege::Select }, catalog));
            }
            pending.push(relation);
        }
    }
    Ok(())
}

fn denied(need: &Need, catalog: &Catalog) -> FoamError {
    let kind = |relation: &str| match (catalog.views.contains_key(relation), catalog.sequences.contains_key(relation)) {
        (true, _) => "view",
        (false, true) => "sequence",
        (false, false) => "table",
    };
    let message = match need {
        Need::Superuser(what) => format!("must be superuser to {what}"),
        Need::Privilege { relation, privilege } => {
            format!("permission denied for {} {relation} (needs {} privilege)", kind(relation), privilege.name())
        }
        Need::Owner(relation) => format!("must be owner of {} {relation}", kind(relation)),
        Need::Create => format!("permission denied for schema {SCHEMA_NAME} (GRANT CREATE ON DATABASE {DATABASE_NAME} to create tables and views)"),
        Need::OwnRole(name) => format!("permission denied to alter role \"{name}\": only a superuser or the role itself may change its password"),
        Need::MemberOf(name) => format!("must be member of role \"{name}\""),
        Need::Sequence { name, any_of } => {
            let names: Vec<&str> = any_of.iter().map(|p| p.name()).collect();
            format!("permission denied for sequence {name} (needs {} privilege)", names.join(" or "))
        }
    };
    FoamError::Query { message, sqlstate: SqlState::InsufficientPrivilege }
}

/// The catalog command of `GRANT` or `REVOKE`, and its command tag; `None`
/// for any other statement. Relations named by `ALL TABLES IN SCHEMA public`
/// are those that exist now.
pub fn grant_command(statement: &Statement, catalog: &Catalog) -> FoamResult<Option<(CatalogCommand, &'static str)>> {
    let (privileges, objects, grantees, revoke, tag) = match statement {
        Statement::Grant(grant) => {
            if grant.with_grant_option {
                return Err(unsupported("WITH GRANT OPTION"));
            }
            if grant.granted_by.is_some() || grant.as_grantor.is_some() || grant.current_grants.is_some() {
                return Err(unsupported("GRANTED BY"));
            }
            (&grant.privileges, &grant.objects, &grant.grantees, false, "GRANT")
        }
        Statement::Revoke(revoke) => {
            if revoke.granted_by.is_some() {
                return Err(unsupported("GRANTED BY"));
            }
            (&revoke.privileges, &revoke.objects, &revoke.grantees, true, "REVOKE")
        }
        _ => return Ok(None),
    };
    let grantees = grantees.iter().map(grantee_name).collect::<FoamResult<Vec<_>>>()?;
    let Some(objects) = objects else {
        return Err(unsupported("GRANT or REVOKE of role membership (grant privileges on tables instead)"));
    };
    let actions: Option<&[Action]> = match privileges {
        Privileges::All { .. } => None,
        Privileges::Actions(actions) => Some(actions),
    };
    let object = match objects {
        GrantObjects::Tables(names) | GrantObjects::Views(names) => {
            let names = names.iter().map(ddl::table_name).collect::<FoamResult<Vec<_>>>()?;
            GrantObject::Relations { names, privileges: relation_privileges(actions)? }
        }
        GrantObjects::AllTablesInSchema { schemas } | GrantObjects::AllViewsInSchema { schemas } => {
            for schema in schemas {
                check_schema(schema)?;
            }
            // As in PostgreSQL, ALL TABLES takes views too.
            let names = match objects {
                GrantObjects::AllTablesInSchema { .. } => catalog.tables.keys().chain(catalog.views.keys()).cloned().collect(),
                _ => catalog.views.keys().cloned().collect(),
            };
            GrantObject::Relations { names, privileges: relation_privileges(actions)? }
        }
        GrantObjects::Sequences(names) => {
            let names = names.iter().map(ddl::table_name).collect::<FoamResult<Vec<_>>>()?;
            GrantObject::Sequences { names, privileges: sequence_privileges(actions)? }
        }
        GrantObjects::AllSequencesInSchema { schemas } => {
            for schema in schemas {
                check_schema(schema)?;
            }
            GrantObject::Sequences { names: catalog.sequences.keys().cloned().collect(), privileges: sequence_privileges(actions)? }
        }
        GrantObjects::Databases(names) | GrantObjects::Schemas(names) => {
            let on_database = matches!(objects, GrantObjects::Databases(_));
            for name in names {
                if on_database {
                    check_database(name)?;
                } else {
                    check_schema(name)?;
                }
            }
            match database_privilege(actions, on_database, &grantees, revoke)? {
                Some(object) => object,
                // CONNECT and USAGE, which every role holds: nothing to change.
                None => GrantObject::Relations { names: Vec::new(), privileges: Vec::new() },
            }
        }
        other => return Err(unsupported(&format!("GRANT on {other}"))),
    };
    Ok(Some((CatalogCommand::Grant { object, grantees, revoke }, tag)))
}

/// The privileges of a grant on tables or views (`None`: ALL).
fn relation_privileges(actions: Option<&[Action]>) -> FoamResult<Vec<Privilege>> {
    let Some(actions) = actions else { return Ok(Privilege::ALL.to_vec()) };
    actions
        .iter()
        .map(|action| match action {
            Action::Select { columns: None } => Ok(Privilege::Select),
            Action::Insert { columns: None } => Ok(Privilege::Insert),
            Action::Update { columns: None } => Ok(Privilege::Update),
            Action::Delete => Ok(Privilege::Delete),
            Action::Truncate => Ok(Privilege::Truncate),
            Action::Select { .. } | Action::Insert { .. } | Action::Update { .. } => Err(unsupported("column privileges")),
            other => Err(unsupported(&format!("the {other} privilege on tables"))),
        })
        .collect()
}

/// USAGE, SELECT and UPDATE, what a sequence takes (ALL: the three);
/// another privilege is 0LP01, as in PostgreSQL.
fn sequence_privileges(actions: Option<&[Action]>) -> FoamResult<Vec<Privilege>> {
    let Some(actions) = actions else { return Ok(Privilege::SEQUENCE.to_vec()) };
    actions
        .iter()
        .map(|action| match action {
            Action::Usage => Ok(Privilege::Usage),
            Action::Select { columns: None } => Ok(Privilege::Select),
            Action::Update { columns: None } => Ok(Privilege::Update),
            other => Err(FoamError::Query { message: format!("invalid privilege type {other} for sequence"), sqlstate: SqlState::InvalidGrantOperation }),
        })
        .collect()
}

/// A grant on the database or schema `public`: CREATE is creating tables
/// and views; CONNECT (database) and USAGE (schema) every role holds through
/// PUBLIC, so granting them changes nothing, and revoking them from PUBLIC
/// is refused (FoamDB cannot keep a role from connecting or from the schema).
fn database_privilege(actions: Option<&[Action]>, on_database: bool, grantees: &[String], revoke: bool) -> FoamResult<Option<GrantObject>> {
    let everyone_holds = |action: &Action| match action {
        Action::Connect => on_database,
        Action::Usage => !on_database,
        _ => false,
    };
    let is_create = |action: &Action| matches!(action, Action::Create { obj_type: None });
    let actions = actions.unwrap_or_default();
    let place = if on_database { "database" } else { "schema" };
    if let Some(other) = actions.iter().find(|a| !is_create(a) && !everyone_holds(a)) {
        return Err(unsupported(&format!("the {other} privilege on the {place}")));
    }
    if revoke && grantees.iter().any(|g| g == PUBLIC) && (actions.is_empty() || actions.iter().any(everyone_holds)) {
        return Err(unsupported(&format!("REVOKE of {} FROM PUBLIC (every role may connect and use schema public)", if on_database { "CONNECT" } else { "USAGE" })));
    }
    let create = actions.is_empty() || actions.iter().any(is_create);
    Ok(create.then_some(GrantObject::Create))
}

fn check_database(name: &ObjectName) -> FoamResult<()> {
    let name = object_name(name)?;
    if name != DATABASE_NAME {
        return Err(FoamError::Query { message: format!("database \"{name}\" does not exist"), sqlstate: SqlState::InvalidCatalogName });
    }
    Ok(())
}

fn check_schema(name: &ObjectName) -> FoamResult<()> {
    let name = object_name(name)?;
    if name != SCHEMA_NAME {
        return Err(FoamError::Query { message: format!("schema \"{name}\" does not exist"), sqlstate: SqlState::InvalidSchemaName });
    }
    Ok(())
}

fn object_name(name: &ObjectName) -> FoamResult<String> {
    match name.0.as_slice() {
        [part] => part.as_ident().map(|i| ddl::normalize_ident(&i.value, i.quote_style)).ok_or_else(|| unsupported(&format!("the name {name}"))),
        _ => Err(unsupported(&format!("the qualified name {name}"))),
    }
}

fn grantee_name(grantee: &Grantee) -> FoamResult<String> {
    match (&grantee.grantee_type, &grantee.name) {
        (GranteesType::Public, _) => Ok(PUBLIC.to_string()),
        (GranteesType::Role | GranteesType::User | GranteesType::Group | GranteesType::None, Some(GranteeName::ObjectName(name))) => {
            object_name(name)
        }
        _ => Err(unsupported(&format!("the grantee {grantee}"))),
    }
}

fn unsupported(feature: &str) -> FoamError {
    FoamError::FeatureNotSupported { feature: feature.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foam_catalog::model::{ColumnDef, DistributionSpec};
    use foam_catalog::roles::RoleDef;
    use foam_catalog::types::SqlType;

    fn apply(catalog: Catalog, command: CatalogCommand) -> Catalog {
        catalog.apply(&command).unwrap().0
    }

    /// alice owns table t and view v (over t and u); admin owns table u;
    /// bob owns nothing.
    fn catalog() -> Catalog {
        let mut catalog = apply(Catalog::default(), CatalogCommand::RegisterNode { id: None, node_addr: "127.0.0.1:1".into(), sql_addr: "127.0.0.1:2".into() });
        for (name, superuser) in [("admin", true), ("alice", false), ("bob", false)] {
            let role = RoleDef { name: name.into(), superuser, login: true, password: None };
            catalog = apply(catalog, CatalogCommand::CreateRole { role, if_not_exists: false });
        }
        for (table, owner) in [("t", "alice"), ("u", "admin")] {
            catalog = apply(
                catalog,
                CatalogCommand::CreateTable {
                    name: table.into(),
                    columns: vec![ColumnDef { name: "a".into(), sql_type: SqlType::Int, nullable: true, default: None, identity: None }],
                    distribution: DistributionSpec::Replicated,
                    if_not_exists: false,
                    unique_keys: Vec::new(),
                    owner: Some(owner.into()),
                    sequences: Vec::new(),
                    checks: Vec::new(),
                },
            );
        }
        let view = CatalogCommand::CreateView { name: "v".into(), query_sql: "SELECT a FROM t UNION SELECT a FROM u".into(), or_replace: false, owner: Some("alice".into()) };
        apply(catalog, view)
    }

    fn parse(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap().remove(0)
    }

    fn select(relation: &str) -> Need {
        Need::Privilege { relation: relation.into(), privilege: Privilege::Select }
    }

    fn grant(catalog: Catalog, sql: &str) -> Catalog {
        let (command, _) = grant_command(&parse(sql), &catalog).unwrap().unwrap();
        apply(catalog, command)
    }

    fn code(result: FoamResult<()>) -> String {
        result.map_or_else(|e| e.sqlstate().to_string(), |_| "ok".into())
    }

    #[test]
    fn roles_hold_what_they_own_and_were_granted_and_views_read_as_their_owner() {
        let catalog = catalog();
        let alice = Acting::of(&catalog, "alice", false);
        let bob = Acting::of(&catalog, "bob", false);
        assert_eq!(Acting::of(&catalog, "admin", false), Acting::Superuser);
        assert_eq!(Acting::of(&catalog, "nobody", true), Acting::Superuser, "--insecure: anyone is anyone");
        assert_eq!(Acting::of(&catalog, "nobody", false), Acting::Role("nobody".into()));
        assert_eq!(code(check(&[select("t"), Need::Owner("t".into())], &catalog, &alice)), "ok");
        assert_eq!(code(check(&[select("t")], &catalog, &bob)), "42501");
        assert_eq!(code(check(&[select("missing")], &catalog, &bob)), "ok", "the statement reports what does not exist");
        for need in [Need::Create, Need::Superuser("x"), Need::Owner("u".into()), Need::OwnRole("bob".into())] {
            assert_eq!(code(check(std::slice::from_ref(&need), &catalog, &alice)), "42501", "{need:?}");
        }
        assert_eq!(code(check(&[Need::OwnRole("alice".into())], &catalog, &alice)), "ok");
        // v reads u, which alice (its owner) may not: nobody can read v, a
        // superuser included, until alice may.
        assert_eq!(code(check(&[select("v")], &catalog, &alice)), "42501");
        assert_eq!(code(check(&[select("v")], &catalog, &Acting::Superuser)), "42501");
        let catalog = grant(catalog, "GRANT SELECT ON u TO alice");
        assert_eq!(code(check(&[select("v")], &catalog, &Acting::Superuser)), "ok");
        assert_eq!(code(check(&[select("v")], &catalog, &bob)), "42501", "bob needs SELECT on v");
        let catalog = grant(catalog, "GRANT SELECT ON v TO PUBLIC");
        assert_eq!(code(check(&[select("v")], &catalog, &bob)), "ok", "and nothing on t or u");
        assert_eq!(code(check(&[select("t")], &catalog, &bob)), "42501");
        let catalog = grant(catalog, "GRANT CREATE ON SCHEMA public TO bob");
        assert_eq!(code(check(&[Need::Create], &catalog, &bob)), "ok");
        let catalog = grant(catalog, "REVOKE ALL ON DATABASE foam FROM bob");
        assert_eq!(code(check(&[Need::Create], &catalog, &bob)), "42501");
    }

    #[tokio::test]
    async fn writes_come_from_the_plan() {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.sql("CREATE TABLE t (a INT)").await.unwrap();
        let needs = async |sql: &str| write_needs(&ctx.state().create_logical_plan(sql).await.unwrap());
        let write = |privilege| Need::Privilege { relation: "t".into(), privilege };
        assert_eq!(needs("INSERT INTO t SELECT a FROM t").await, vec![write(Privilege::Insert)]);
        assert_eq!(needs("DELETE FROM t WHERE a = 1").await, vec![write(Privilege::Delete)]);
        assert_eq!(needs("UPDATE t SET a = 2").await, vec![write(Privilege::Update)]);
        assert_eq!(needs("SELECT * FROM t").await, vec![]);
    }

    #[test]
    fn a_views_with_names_are_its_own_unless_a_body_reads_the_table() {
        let reads = |sql: &str| {
            let view = ViewDef { name: "v".into(), query_sql: sql.into(), acl: Default::default() };
            view_relations(&view).unwrap()
        };
        let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(reads("WITH d AS (SELECT 1 AS a) SELECT a FROM d JOIN t ON true"), names(&["t"]));
        assert_eq!(reads("WITH secret AS (SELECT * FROM secret) SELECT * FROM secret"), names(&["secret"]));
        assert_eq!(reads("SELECT * FROM (WITH n AS (SELECT * FROM u) SELECT * FROM n) s"), names(&["u"]));
        // Qualified, a name is the table's; a WITH inside a subquery is
        // not in scope outside it.
        assert_eq!(reads("WITH secret AS (SELECT 1) SELECT * FROM public.secret"), names(&["secret"]));
        assert_eq!(reads("SELECT * FROM secret WHERE EXISTS (WITH secret AS (SELECT 1) SELECT 1 FROM secret)"), names(&["secret"]));
        // A later WITH query reads an earlier one; a recursive one itself.
        assert_eq!(reads("WITH base AS (SELECT 1 AS a), agg AS (SELECT count(*) FROM base) SELECT * FROM agg"), names(&[]));
        // Under RECURSIVE a body may read the table of its own name (a body
        // that is no UNION, a UNION's first term); a self-reference counts.
        assert_eq!(reads("WITH RECURSIVE secret AS (SELECT * FROM secret) SELECT * FROM secret"), names(&["secret"]));
        assert_eq!(reads("WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r"), names(&["r"]));
    }

    #[test]
    fn reads_come_from_the_statement_but_not_an_inserts_target() {
        let catalog = catalog();
        let needs = |sql: &str| read_needs(&parse(sql), &catalog);
        assert_eq!(needs("SELECT * FROM v JOIN t ON true WHERE EXISTS (SELECT 1 FROM u)"), vec![select("t"), select("u"), select("v")]);
        assert_eq!(needs("INSERT INTO t SELECT a FROM u"), vec![select("u")]);
        assert_eq!(needs("INSERT INTO t VALUES (1)"), vec![]);
        assert_eq!(needs("SELECT * FROM pg_catalog.pg_class, information_schema.tables"), vec![]);
        // UPDATE and DELETE read their table only when they read its columns.
        assert!(!modify_reads_table(&parse("UPDATE t SET a = 1")));
        assert!(!modify_reads_table(&parse("DELETE FROM t")));
        assert!(modify_reads_table(&parse("UPDATE t SET a = a + 1")));
        assert!(modify_reads_table(&parse("DELETE FROM t WHERE a = 1")));
        // What they read is found in the statement: a subquery reading the
        // table needs SELECT on it even where no column of it is set from.
        let reads = |sql: &str| modify_read_needs(&parse(sql), "t", &catalog);
        assert_eq!(reads("UPDATE t SET a = 1"), vec![]);
        assert_eq!(reads("UPDATE t SET a = (SELECT count(*) FROM t)"), vec![select("t")]);
        assert_eq!(reads("UPDATE t SET a = (SELECT 1 FROM u LIMIT 1)"), vec![select("u")]);
        assert_eq!(reads("DELETE FROM t WHERE a IN (SELECT a FROM u)"), vec![select("t"), select("u")]);
        assert_eq!(reads("SELECT * FROM foam_partition_digests"), vec![]);
        assert_eq!(needs("SELECT * FROM foam_partition_digests"), vec![Need::Superuser("read the digests of every partition (foam_partition_digests)")]);
        assert_eq!(needs("SELECT foam_cluster_stats_reset()"), vec![Need::Superuser("reset the cluster's statistics")]);
    }

    #[test]
    fn grant_statements_become_catalog_commands() {
        let catalog = catalog();
        let command = |sql: &str| grant_command(&parse(sql), &catalog).map(|c| c.map(|(command, tag)| (command, tag)));
        let Ok(Some((CatalogCommand::Grant { object: GrantObject::Relations { names, privileges }, grantees, revoke: false }, "GRANT"))) =
            command("GRANT SELECT, INSERT ON TABLE t, \"u\" TO bob, PUBLIC")
        else {
            panic!()
        };
        assert_eq!((names, privileges, grantees), (vec!["t".into(), "u".into()], vec![Privilege::Select, Privilege::Insert], vec!["bob".into(), "public".into()]));
        let Ok(Some((CatalogCommand::Grant { object: GrantObject::Relations { names, privileges }, revoke: true, .. }, "REVOKE"))) =
            command("REVOKE ALL PRIVILEGES ON ALL TABLES IN SCHEMA public FROM bob")
        else {
            panic!()
        };
        assert_eq!((names.len(), privileges.len()), (3, 5), "tables t and u and view v");
        assert!(matches!(command("GRANT CREATE ON DATABASE foam TO bob"), Ok(Some((CatalogCommand::Grant { object: GrantObject::Create, .. }, _)))));
        assert!(matches!(
            command("GRANT USAGE ON SCHEMA public TO bob"),
            Ok(Some((CatalogCommand::Grant { object: GrantObject::Relations { names, .. }, .. }, _))) if names.is_empty()
        ));
        assert!(command("SELECT 1").unwrap().is_none());
        let Ok(Some((CatalogCommand::Grant { object: GrantObject::Sequences { names, privileges }, .. }, "GRANT"))) =
            command("GRANT USAGE, UPDATE ON SEQUENCE s TO bob")
        else {
            panic!()
        };
        assert_eq!((names, privileges), (vec!["s".to_string()], vec![Privilege::Usage, Privilege::Update]));
        for (sql, state) in [
            ("GRANT SELECT ON t TO bob WITH GRANT OPTION", "0A000"),
            ("GRANT SELECT (a) ON t TO bob", "0A000"),
            ("GRANT REFERENCES ON t TO bob", "0A000"),
            ("GRANT CREATE ON DATABASE other TO bob", "3D000"),
            ("GRANT CREATE ON SCHEMA other TO bob", "3F000"),
            ("REVOKE USAGE ON SCHEMA public FROM PUBLIC", "0A000"),
            ("GRANT INSERT ON SEQUENCE s TO bob", "0LP01"),
        ] {
            assert_eq!(command(sql).err().map(|e| e.sqlstate().to_string()).as_deref(), Some(state), "{sql}");
        }
        assert_eq!(command_needs(&command("GRANT SELECT ON t, u TO bob").unwrap().unwrap().0), vec![Need::Owner("t".into()), Need::Owner("u".into())]);
    }
}
