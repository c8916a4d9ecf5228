//! Who owns what, as PostgreSQL's catalog tells it, and FoamDB's views in
//! `pg_views`.
//!
//! datafusion-pg-catalog gives every role OID 0 in `pg_roles`, every
//! relation owner 0 in `pg_class`, `postgres` as every `pg_tables` owner,
//! and its own schemas and types to OID 10 (PostgreSQL's bootstrap
//! superuser); pg_dump looks each owner OID up among the roles and stopped
//! at "role with OID 10 does not exist". Here each role gets an OID
//! ([`role_oid`]): 10 for the first superuser by name (on a cluster `foam
//! local` started, its `foam`), which so owns the system's schemas and
//! types as in PostgreSQL; another role a number made from its name,
//! stable as long as the role exists. A relation's owner is its catalog
//! owner (`Acl::owner`; one made before owners existed belongs to that
//! first superuser). `pg_views` lists FoamDB's views with their
//! definitions, which `pg_get_viewdef` reads (`pg_missing.rs`). FoamDB's
//! system tables (`foam_nodes`, ...) show in schema `pg_catalog`, as
//! PostgreSQL's system views do: `\dt` and pg_dump leave them out.
//! `information_schema` has PostgreSQL 15's OID in `pg_namespace` and
//! `pg_class`, the one datafusion-pg-catalog's fixed `pg_type` and `pg_proc`
//! rows name (pg_dump stopped at "schema with OID 13283 does not exist").
//! `public` keeps PostgreSQL's comment in `pg_description` under the OID
//! FoamDB's `pg_namespace` gives it: pg_dump takes a `public` without it as
//! one whose comment was removed, and wrote `COMMENT ON SCHEMA public`.
//! `public` belongs to the bootstrap role ([`schema_owner`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, Int32Array, RecordBatch, StringArray};
use async_trait::async_trait;
use datafusion::catalog::{MemTable, SchemaProvider, Session, TableProvider};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableType;
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use foam_catalog::Catalog;

use crate::catalog::pg_columns::{PG_CATALOG_NAMESPACE_OID, namespace_oid, oid_column, relations, replaced, rows};
use crate::catalog::system_tables;
use crate::context::NodeContext;
use crate::frontend::setting_functions::SCHEMA_NAME;

/// `information_schema`'s OID in PostgreSQL 15, which datafusion-pg-catalog's
/// fixed rows of `pg_type` and `pg_proc` give as their namespace.
const INFORMATION_SCHEMA_NAMESPACE_OID: i32 = 13283;

/// PostgreSQL's bootstrap superuser's OID, which owns the system's objects.
const BOOTSTRAP_ROLE_OID: i32 = 10;
/// Other roles' OIDs are this plus a number made from the name.
const ROLE_OID_BASE: i32 = 1 << 29;

/// The role that gets [`BOOTSTRAP_ROLE_OID`]: the first superuser by name.
fn bootstrap_role(catalog: &Catalog) -> Option<&str> {
    catalog.roles.values().find(|role| role.superuser).map(|role| role.name.as_str())
}

/// The role that owns schema `public`: the bootstrap role.
pub fn schema_owner(catalog: &Catalog) -> Option<&str> {
    bootstrap_role(catalog)
}

/// PostgreSQL's comment on schema `public`.
const PUBLIC_SCHEMA_COMMENT: &str = "standard public schema";
/// `pg_namespace`'s OID in `pg_class`, the `classoid` of a schema's comment.
const PG_NAMESPACE_CLASS_OID: i32 = 2615;

/// The OID `name` has in `pg_roles`.
pub fn role_oid(catalog: &Catalog, name: &str) -> i32 {
    if bootstrap_role(catalog) == Some(name) {
        return BOOTSTRAP_ROLE_OID;
    }
    ROLE_OID_BASE + (stable_hash(name) % (1 << 29)) as i32
}

/// FNV-1a of `name`: the same on every node and after restarts, for OIDs
/// made from names.
pub(crate) fn stable_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

/// The owner's name of relation `name` (its catalog owner, or the
/// bootstrap role for one only superusers own).
pub(crate) fn owner_name<'a>(catalog: &'a Catalog, name: &str) -> Option<&'a str> {
    let sequence_owner = || catalog.sequences.get(name).and_then(|s| s.acl.owner.as_deref());
    catalog.acl(name).and_then(|acl| acl.owner.as_deref()).or_else(sequence_owner).or_else(|| bootstrap_role(catalog))
}

/// The `pg_catalog` tables this module changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owned {
    Roles,
    Class,
    Tables,
    Views,
    Namespaces,
    Descriptions,
}

/// `table` with owners and views (see the module documentation) for the
/// tables this changes; any other table as it is.
pub fn with_owners(name: &str, table: Arc<dyn TableProvider>, pg_catalog: Arc<dyn SchemaProvider>, node: Arc<NodeContext>) -> Arc<dyn TableProvider> {
    let owned = match name.to_lowercase().as_str() {
        "pg_roles" => Owned::Roles,
        "pg_class" => Owned::Class,
        "pg_tables" => Owned::Tables,
        "pg_views" => Owned::Views,
        "pg_namespace" => Owned::Namespaces,
        "pg_description" => Owned::Descriptions,
        _ => return table,
    };
    Arc::new(WithOwners { inner: table, owned, pg_catalog, node })
}

#[derive(Debug)]
struct WithOwners {
    inner: Arc<dyn TableProvider>,
    owned: Owned,
    pg_catalog: Arc<dyn SchemaProvider>,
    node: Arc<NodeContext>,
}

#[async_trait]
impl TableProvider for WithOwners {
    fn schema(&self) -> arrow::datatypes::SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(&self, state: &dyn Session, projection: Option<&Vec<usize>>, filters: &[Expr], limit: Option<usize>) -> Result<Arc<dyn ExecutionPlan>> {
        let catalog = self.node.catalog.current();
        let relations = match self.owned {
            Owned::Class => Some(relations(&self.pg_catalog).await?),
            _ => None,
        };
        let no_relations = HashMap::new();
        let foam = relations.as_ref().map_or(&no_relations, |r| &r.foam);
        let information_schema = match self.owned {
            Owned::Class => namespace_oid(&self.pg_catalog, "information_schema").await?,
            _ => None,
        };
        let mut batches = Vec::new();
        for batch in rows(&self.inner).await? {
            batches.push(match self.owned {
                Owned::Roles => {
                    let names = batch.column_by_name("rolname").map(|c| c.as_string::<i32>().clone());
                    let oids: Int32Array = names.iter().flat_map(|n| n.iter()).map(|name| name.map(|name| role_oid(&catalog, name))).collect();
                    replaced(&batch, "oid", Arc::new(oids))?
                }
                Owned::Class => {
                    let oids = oid_column(&batch, "oid")?;
                    let owners = batch.column_by_name("relowner").map(|c| c.as_primitive::<arrow::datatypes::Int32Type>().clone());
                    let owners: Int32Array = (0..batch.num_rows())
                        .map(|i| match oids[i].and_then(|oid| foam.get(&oid)).and_then(|name| owner_name(&catalog, name)) {
                            Some(owner) => Some(role_oid(&catalog, owner)),
                            // The system's catalogs (owner 0) are the bootstrap role's.
                            None => owners.as_ref().and_then(|o| o.is_valid(i).then(|| o.value(i))).map(|o| if o == 0 { BOOTSTRAP_ROLE_OID } else { o }),
                        })
                        .collect();
                    let batch = replaced(&batch, "relowner", Arc::new(owners))?;
                    // FoamDB's system tables are the system's, as PostgreSQL's
                    // system views are: in pg_catalog (pg_dump skips them).
                    let namespaces = oid_column(&batch, "relnamespace")?;
                    let namespaces: Int32Array = (0..batch.num_rows())
                        .map(|i| match oids[i].and_then(|oid| foam.get(&oid)) {
                            Some(name) if system_tables::NAMES.contains(&name.as_str()) => Some(PG_CATALOG_NAMESPACE_OID),
                            _ if namespaces[i].is_some() && namespaces[i] == information_schema => Some(INFORMATION_SCHEMA_NAMESPACE_OID),
                            _ => namespaces[i].and_then(|n| i32::try_from(n).ok()),
                        })
                        .collect();
                    let batch = replaced(&batch, "relnamespace", Arc::new(namespaces))?;
                    match &relations {
                        Some(relations) => relations.with_fixed_oids(&batch, "oid")?,
                        None => batch,
                    }
                }
                Owned::Tables => {
                    let names = batch.column_by_name("tablename").map(|c| c.as_string::<i32>().clone());
                    let owners = batch.column_by_name("tableowner").map(|c| c.as_string::<i32>().clone());
                    let owners: StringArray = (0..batch.num_rows())
                        .map(|i| {
                            let name = names.as_ref().filter(|n| n.is_valid(i)).map(|n| n.value(i));
                            match name.filter(|n| catalog.acl(n).is_some()).and_then(|n| owner_name(&catalog, n)) {
                                Some(owner) => Some(owner.to_string()),
                                None => owners.as_ref().filter(|o| o.is_valid(i)).map(|o| o.value(i).to_string()),
                            }
                        })
                        .collect();
                    let batch = replaced(&batch, "tableowner", Arc::new(owners))?;
                    let schemas: StringArray = (0..batch.num_rows())
                        .map(|i| {
                            let name = names.as_ref().filter(|n| n.is_valid(i)).map(|n| n.value(i));
                            let schema = batch.column_by_name("schemaname").map(|c| c.as_string::<i32>().clone());
                            let schema = schema.as_ref().filter(|s| s.is_valid(i)).map(|s| s.value(i).to_string());
                            if name.is_some_and(|n| system_tables::NAMES.contains(&n)) && schema.as_deref() == Some(SCHEMA_NAME) { Some("pg_catalog".to_string()) } else { schema }
                        })
                        .collect();
                    replaced(&batch, "schemaname", Arc::new(schemas))?
                }
                Owned::Namespaces => {
                    let names = batch.column_by_name("nspname").map(|c| c.as_string::<i32>().clone());
                    let oids = oid_column(&batch, "oid")?;
                    let oids: Int32Array = (0..batch.num_rows())
                        .map(|i| match names.as_ref().filter(|n| n.is_valid(i)).map(|n| n.value(i)) {
                            Some("information_schema") => Some(INFORMATION_SCHEMA_NAMESPACE_OID),
                            _ => oids[i].and_then(|n| i32::try_from(n).ok()),
                        })
                        .collect();
                    replaced(&batch, "oid", Arc::new(oids))?
                }
                Owned::Views | Owned::Descriptions => batch,
            });
        }
        let schema = self.inner.schema();
        if self.owned == Owned::Namespaces && !batches.iter().any(|batch| named(batch, "nspname", "information_schema")) {
            let values = [
                ("oid", ScalarValue::Int32(Some(INFORMATION_SCHEMA_NAMESPACE_OID))),
                ("nspname", ScalarValue::Utf8(Some("information_schema".into()))),
                ("nspowner", ScalarValue::Int32(Some(BOOTSTRAP_ROLE_OID))),
            ];
            batches.push(one_row(&schema, &values)?);
        }
        if self.owned == Owned::Descriptions
            && let Some(public) = namespace_oid(&self.pg_catalog, SCHEMA_NAME).await?
        {
            let values = [
                ("objoid", ScalarValue::Int64(Some(public))),
                ("classoid", ScalarValue::Int32(Some(PG_NAMESPACE_CLASS_OID))),
                ("objsubid", ScalarValue::Int32(Some(0))),
                ("description", ScalarValue::Utf8(Some(PUBLIC_SCHEMA_COMMENT.into()))),
            ];
            batches.push(one_row(&schema, &values)?);
        }
        if self.owned == Owned::Views {
            for view in catalog.views.values().filter(|v| !v.name.starts_with("foam_dropped_")) {
                let values = [
                    ("schemaname", SCHEMA_NAME.to_string()),
                    ("viewname", view.name.clone()),
                    ("viewowner", owner_name(&catalog, &view.name).unwrap_or_default().to_string()),
                    ("definition", format!(" {};", view.query_sql.trim().trim_end_matches(';'))),
                ];
                batches.push(one_row(&schema, &values.map(|(name, value)| (name, ScalarValue::Utf8(Some(value)))))?);
            }
        }
        MemTable::try_new(schema, vec![batches])?.scan(state, projection, filters, limit).await
    }
}

/// One row of `schema`: `values` in the columns they name (cast to the
/// column's type), NULL in the others.
fn one_row(schema: &arrow::datatypes::SchemaRef, values: &[(&str, ScalarValue)]) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|field| match values.iter().find(|(name, _)| name == field.name()) {
            Some((_, value)) => value.cast_to(field.data_type())?.to_array_of_size(1),
            None => ScalarValue::try_from(field.data_type())?.to_array_of_size(1),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// Whether some row of `batch` has `value` in text column `column`.
fn named(batch: &RecordBatch, column: &str, value: &str) -> bool {
    batch.column_by_name(column).and_then(|c| c.as_string_opt::<i32>()).is_some_and(|names| names.iter().any(|name| name == Some(value)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use foam_catalog::roles::RoleDef;

    #[test]
    fn the_first_superuser_is_the_bootstrap_role_and_others_keep_their_oids() {
        let mut catalog = Catalog::default();
        for (name, superuser) in [("foam", true), ("alice", false), ("zed", true)] {
            catalog.roles.insert(name.into(), RoleDef { name: name.into(), superuser, login: true, password: None });
        }
        assert_eq!(role_oid(&catalog, "foam"), BOOTSTRAP_ROLE_OID);
        let alice = role_oid(&catalog, "alice");
        assert!(alice >= ROLE_OID_BASE && alice != role_oid(&catalog, "zed"));
        catalog.roles.remove("zed");
        assert_eq!(role_oid(&catalog, "alice"), alice);
        assert_eq!(owner_name(&catalog, "no_such_relation"), Some("foam"));
    }
}
