//! Presents the cluster catalog to DataFusion as catalog `foam`, schema `public`:
//! tables become `FoamTable`s, views are planned from their stored SQL on every
//! use, and the system tables are built on demand.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, MemoryCatalogProviderList, SchemaProvider, TableProvider};
use datafusion::catalog::CatalogProviderList;
use datafusion::datasource::ViewTable;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::prelude::SessionContext;

use crate::context::NodeContext;
use crate::catalog::system_tables;
use crate::catalog::table::FoamTable;

pub const CATALOG_NAME: &str = "foam";
pub const SCHEMA_NAME: &str = "public";

/// A catalog list holding FoamDB's catalog, for one session.
pub fn catalog_list(node: Arc<NodeContext>, runtime: Arc<RuntimeEnv>) -> Arc<dyn CatalogProviderList> {
    let list = MemoryCatalogProviderList::new();
    let catalog = FoamCatalogProvider { node, runtime, extra_schemas: RwLock::default() };
    list.register_catalog(CATALOG_NAME.into(), Arc::new(catalog));
    Arc::new(list)
}

#[derive(Debug)]
struct FoamCatalogProvider {
    node: Arc<NodeContext>,
    runtime: Arc<RuntimeEnv>,
    /// Read-only schemas a session adds, such as the `pg_catalog` emulation
    /// that psql's `\d` commands query.
    extra_schemas: RwLock<HashMap<String, Arc<dyn SchemaProvider>>>,
}

impl CatalogProvider for FoamCatalogProvider {
    fn schema_names(&self) -> Vec<String> {
        let mut names = vec![SCHEMA_NAME.to_string()];
        names.extend(self.extra_schemas.read().unwrap_or_else(|p| p.into_inner()).keys().cloned());
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if name == SCHEMA_NAME {
            return Some(Arc::new(FoamSchemaProvider { node: self.node.clone(), runtime: self.runtime.clone() }));
        }
        self.extra_schemas.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    fn register_schema(&self, name: &str, schema: Arc<dyn SchemaProvider>) -> Result<Option<Arc<dyn SchemaProvider>>> {
        if name == SCHEMA_NAME {
            return Err(DataFusionError::Plan(format!("schema \"{name}\" already exists")));
        }
        Ok(self.extra_schemas.write().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), schema))
    }
}

#[derive(Debug)]
struct FoamSchemaProvider {
    node: Arc<NodeContext>,
    runtime: Arc<RuntimeEnv>,
}

#[async_trait]
impl SchemaProvider for FoamSchemaProvider {
    fn table_names(&self) -> Vec<String> {
        let catalog = self.node.catalog.current();
        // What an open block set aside (dropped, until it ends) is not listed:
        // a set-aside view reads a name that is gone, and would fail every
        // listing of the catalog's columns.
        let mut names: Vec<String> = catalog
            .tables
            .keys()
            .chain(catalog.views.keys())
            .filter(|name| !crate::frontend::block_ddl::is_set_aside(name))
            .cloned()
            .collect();
        names.extend(system_tables::NAMES.iter().map(|n| n.to_string()));
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let catalog = self.node.catalog.current();
        if let Some(table) = catalog.tables.get(name) {
            return Ok(Some(Arc::new(FoamTable::new(table.clone(), self.node.clone()))));
        }
        if let Some(view) = catalog.views.get(name) {
            let ctx = SessionContext::new_with_state(
                crate::distributed::coordinator_state_builder(self.node.clone(), self.runtime.clone())
                    .with_catalog_list(catalog_list(self.node.clone(), self.runtime.clone()))
                    .build(),
            );
            // The stored query is the statement as the session rewrote it,
            // which calls FoamDB's functions by name (`foam_at_time_zone`,
            // `foam_char`, `age`).
            crate::optimizer::register_statement_functions(&ctx);
            let plan = ctx.state().create_logical_plan(&view.query_sql).await?;
            let plan = crate::frontend::bpchar_operands::rewrite(plan, &catalog)?;
            return Ok(Some(Arc::new(ViewTable::new(plan, Some(view.query_sql.clone())))));
        }
        if let Some(sequence) = catalog.sequences.get(name) {
            return crate::catalog::pg_sequences::relation(sequence).map(Some);
        }
        system_tables::build(name, &self.node).await.map_err(DataFusionError::from)
    }

    fn table_exist(&self, name: &str) -> bool {
        let catalog = self.node.catalog.current();
        catalog.relation_exists(name) || system_tables::NAMES.contains(&name)
    }
}
