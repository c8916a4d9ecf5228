//! What pg_catalog tells clients about roles and privileges: the roles
//! `pg_roles` lists (from the catalog, [`CatalogRoles`]), and the privilege
//! inquiry functions clients and admin tools call, `has_table_privilege`,
//! `has_any_column_privilege`, `has_schema_privilege` and
//! `has_database_privilege`, answered from the catalog's owners and grants
//! (`privileges.rs` decides what statements need by the same rules).
//! datafusion-pg-catalog lists no roles and registers functions that answer
//! true for anything; these replace them in every session. The
//! two-argument forms ask about the current role, which they read from the
//! session's own `SET ROLE` state as they run.
//!
//! As in PostgreSQL: a superuser holds everything; a list of privileges
//! (`'SELECT, INSERT'`) asks whether any is held; `WITH GRANT OPTION` holds
//! only for owners and superusers (FoamDB grants carry no grant option);
//! the role `public` asks what PUBLIC was granted. FoamDB has no temporary
//! tables, so `TEMPORARY` on the database is held by no one. Unknown roles,
//! relations, schemas, databases and privilege names are errors with
//! PostgreSQL's codes. Objects are named by text; a relation's OID is not
//! accepted.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, AsArray, BooleanBuilder};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, TableReference};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility};
use datafusion_pg_catalog::pg_catalog::context::{PgCatalogContextProvider, Role};
use foam_catalog::privileges::{PUBLIC, Privilege};
use foam_catalog::Catalog;
use foam_common::{FoamError, FoamResult, SqlState};

use crate::catalog::system_tables;
use crate::context::NodeContext;
use crate::frontend::privileges::{Acting, SUPERUSER_SYSTEM_TABLES, relation_name};
use crate::frontend::setting_functions::{DATABASE_NAME, SCHEMA_NAME};

/// The schemas of catalog tables every role may read.
const CATALOG_SCHEMAS: &[&str] = &["pg_catalog", "information_schema"];

/// The catalog's roles, for datafusion-pg-catalog's `pg_roles`.
#[derive(Clone)]
pub struct CatalogRoles(pub Arc<NodeContext>);

impl std::fmt::Debug for CatalogRoles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CatalogRoles")
    }
}

#[async_trait::async_trait]
impl PgCatalogContextProvider for CatalogRoles {
    async fn roles(&self) -> Vec<String> {
        self.0.catalog.current().roles.keys().cloned().collect()
    }

    async fn role(&self, name: &str) -> Option<Role> {
        let catalog = self.0.catalog.current();
        let role = catalog.roles.get(name)?;
        Some(Role {
            name: role.name.clone(),
            is_superuser: role.superuser,
            can_login: role.login,
            // What a superuser has anyway; refused for other roles.
            can_create_db: role.superuser,
            can_create_role: role.superuser,
            can_create_user: role.superuser,
            can_replication: role.superuser,
            grants: Vec::new(),
            inherited_roles: Vec::new(),
        })
    }
}

/// What a function asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Object {
    Table,
    /// Any column of a table: FoamDB grants whole tables only, so the
    /// table's privilege.
    AnyColumn,
    Schema,
    Database,
}

impl Object {
    const ALL: [Object; 4] = [Object::Table, Object::AnyColumn, Object::Schema, Object::Database];

    fn function(self) -> &'static str {
        match self {
            Object::Table => "has_table_privilege",
            Object::AnyColumn => "has_any_column_privilege",
            Object::Schema => "has_schema_privilege",
            Object::Database => "has_database_privilege",
        }
    }

    /// The privilege names PostgreSQL 15 accepts for the object.
    fn privileges(self) -> &'static [&'static str] {
        match self {
            Object::Table => &["SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"],
            Object::AnyColumn => &["SELECT", "INSERT", "UPDATE", "REFERENCES"],
            Object::Schema => &["CREATE", "USAGE"],
            Object::Database => &["CREATE", "CONNECT", "TEMPORARY", "TEMP"],
        }
    }
}

/// Whose privileges a call asks about.
enum Who {
    Acting(Acting),
    /// `public`: what was granted to every role.
    Public,
}

/// The four functions of a session that connected as `session_user` and
/// whose `SET ROLE` is `role`, asking about the role it acts as when no
/// role is given.
pub fn udfs(node: &Arc<NodeContext>, session_user: &str, role: &Arc<Mutex<Option<String>>>, insecure: bool) -> Vec<ScalarUDF> {
    Object::ALL
        .into_iter()
        .map(|object| {
            ScalarUDF::new_from_impl(HasPrivilege {
                object,
                node: node.clone(),
                session_user: session_user.to_string(),
                role: role.clone(),
                insecure,
                signature: Signature::one_of(
                    vec![TypeSignature::Exact(vec![DataType::Utf8; 3]), TypeSignature::Exact(vec![DataType::Utf8; 2])],
                    Volatility::Stable,
                ),
            })
        })
        .collect()
}

struct HasPrivilege {
    object: Object,
    node: Arc<NodeContext>,
    /// The role the session connected as, and its `SET ROLE` (shared with
    /// the session).
    session_user: String,
    role: Arc<Mutex<Option<String>>>,
    insecure: bool,
    signature: Signature,
}

impl HasPrivilege {
    /// The role the session acts as now.
    fn current(&self) -> String {
        self.role.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_else(|| self.session_user.clone())
    }
}

impl std::fmt::Debug for HasPrivilege {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HasPrivilege").field("object", &self.object).field("session_user", &self.session_user).finish()
    }
}

/// One session's functions are equal: they share its role.
impl PartialEq for HasPrivilege {
    fn eq(&self, other: &Self) -> bool {
        self.object == other.object && Arc::ptr_eq(&self.role, &other.role) && self.insecure == other.insecure
    }
}

impl Eq for HasPrivilege {}

impl Hash for HasPrivilege {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.object, Arc::as_ptr(&self.role) as usize, self.insecure).hash(state);
    }
}

impl ScalarUDFImpl for HasPrivilege {
    fn name(&self) -> &str {
        self.object.function()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let texts: Vec<_> = arrays.iter().map(|a| a.as_string::<i32>()).collect();
        let catalog = self.node.catalog.current();
        let mut answers = BooleanBuilder::with_capacity(args.number_rows);
        for row in 0..args.number_rows {
            if texts.iter().any(|t| t.is_null(row)) {
                answers.append_null();
                continue;
            }
            let (role, object, privileges) = match texts.as_slice() {
                [role, object, privileges] => (Some(role.value(row)), object.value(row), privileges.value(row)),
                [object, privileges] => (None, object.value(row), privileges.value(row)),
                _ => unreachable!("the signature takes two or three arguments"),
            };
            answers.append_value(self.answer(&catalog, role, object, privileges)?);
        }
        Ok(ColumnarValue::Array(Arc::new(answers.finish())))
    }
}

impl HasPrivilege {
    fn answer(&self, catalog: &Catalog, role: Option<&str>, object: &str, privileges: &str) -> FoamResult<bool> {
        let who = match role {
            None => Who::Acting(Acting::of(catalog, &self.current(), self.insecure)),
            Some(name) if name.eq_ignore_ascii_case(PUBLIC) => Who::Public,
            Some(name) if !catalog.roles.contains_key(name) && !self.insecure => {
                return Err(FoamError::Query { message: format!("role \"{name}\" does not exist"), sqlstate: SqlState::UndefinedObject });
            }
            Some(name) => Who::Acting(Acting::of(catalog, name, self.insecure)),
        };
        let wanted = self.parse_privileges(privileges)?;
        let holds: Box<dyn Fn(&str, bool) -> bool> = match self.object {
            Object::Table | Object::AnyColumn => table_holds(catalog, who, object)?,
            Object::Schema => schema_holds(catalog, who, object)?,
            Object::Database => database_holds(catalog, who, object)?,
        };
        Ok(wanted.iter().any(|(privilege, grant_option)| holds(privilege, *grant_option)))
    }

    /// The privileges a text lists (`'SELECT, UPDATE WITH GRANT OPTION'`),
    /// each with whether it asks for the grant option.
    fn parse_privileges(&self, text: &str) -> FoamResult<Vec<(&'static str, bool)>> {
        text.split(',')
            .map(|item| {
                let words: Vec<String> = item.split_whitespace().map(|w| w.to_ascii_uppercase()).collect();
                let (name, grant_option) = match words.as_slice() {
                    [name] => (name.as_str(), false),
                    [name, with, grant, option] if with == "WITH" && grant == "GRANT" && option == "OPTION" => (name.as_str(), true),
                    _ => ("", false),
                };
                match self.object.privileges().iter().find(|p| **p == name) {
                    Some(privilege) => Ok((*privilege, grant_option)),
                    None => Err(FoamError::Query {
                        message: format!("unrecognized privilege type: \"{}\"", item.trim()),
                        sqlstate: SqlState::InvalidParameterValue,
                    }),
                }
            })
            .collect()
    }
}

/// Whether `who` holds a privilege on the table or view `name`.
fn table_holds<'a>(catalog: &'a Catalog, who: Who, name: &str) -> FoamResult<Box<dyn Fn(&str, bool) -> bool + 'a>> {
    let reference = TableReference::parse_str(name);
    let missing = || FoamError::Query { message: format!("relation \"{name}\" does not exist"), sqlstate: SqlState::UndefinedTable };
    let Some(relation) = relation_name(&reference) else {
        // pg_catalog and information_schema tables: every role reads them.
        return match reference.schema() {
            Some(schema) if CATALOG_SCHEMAS.contains(&schema) => Ok(Box::new(move |p, grant| superuser(&who) || (p == "SELECT" && !grant))),
            _ => Err(missing()),
        };
    };
    if let Some(acl) = catalog.acl(&relation) {
        return Ok(Box::new(move |p, grant| match &who {
            Who::Acting(Acting::Superuser) => true,
            Who::Acting(Acting::Role(role)) => {
                acl.is_owner(role) || (!grant && privilege(p).is_some_and(|p| acl.allows(role, p)))
            }
            Who::Public => !grant && privilege(p).is_some_and(|p| acl.grants.get(PUBLIC).is_some_and(|held| held.contains(&p))),
        }));
    }
    if system_tables::NAMES.contains(&relation.as_str()) {
        let superuser_only = SUPERUSER_SYSTEM_TABLES.contains(&relation.as_str());
        return Ok(Box::new(move |p, grant| superuser(&who) || (p == "SELECT" && !grant && !superuser_only)));
    }
    Err(missing())
}

/// Whether `who` holds a privilege on the schema `name`.
fn schema_holds<'a>(catalog: &'a Catalog, who: Who, name: &str) -> FoamResult<Box<dyn Fn(&str, bool) -> bool + 'a>> {
    if name == SCHEMA_NAME {
        return Ok(Box::new(move |p, grant| superuser(&who) || (p == "USAGE" && !grant) || (p == "CREATE" && !grant && creates(catalog, &who))));
    }
    if CATALOG_SCHEMAS.contains(&name) {
        return Ok(Box::new(move |p, grant| superuser(&who) || (p == "USAGE" && !grant)));
    }
    Err(FoamError::Query { message: format!("schema \"{name}\" does not exist"), sqlstate: SqlState::InvalidSchemaName })
}

/// Whether `who` holds a privilege on the database `name`.
fn database_holds<'a>(catalog: &'a Catalog, who: Who, name: &str) -> FoamResult<Box<dyn Fn(&str, bool) -> bool + 'a>> {
    if name != DATABASE_NAME {
        return Err(FoamError::Query { message: format!("database \"{name}\" does not exist"), sqlstate: SqlState::InvalidCatalogName });
    }
    Ok(Box::new(move |p, grant| match p {
        // No one can create temporary tables in FoamDB.
        "TEMPORARY" | "TEMP" => false,
        _ if superuser(&who) => true,
        "CONNECT" => !grant,
        _ => !grant && creates(catalog, &who),
    }))
}

fn superuser(who: &Who) -> bool {
    matches!(who, Who::Acting(Acting::Superuser))
}

/// Whether `who` may create tables and views (`GRANT CREATE ON DATABASE`).
fn creates(catalog: &Catalog, who: &Who) -> bool {
    catalog.creators.contains(PUBLIC)
        || match who {
            Who::Acting(Acting::Superuser) => true,
            Who::Acting(Acting::Role(role)) => catalog.creators.contains(role),
            Who::Public => false,
        }
}

/// FoamDB's privilege of that name; `None` for REFERENCES and TRIGGER,
/// which only owners and superusers hold.
fn privilege(name: &str) -> Option<Privilege> {
    Privilege::ALL.into_iter().find(|p| p.name() == name)
}
