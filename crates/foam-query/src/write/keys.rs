//! `ALTER TABLE t ADD [CONSTRAINT name] PRIMARY KEY | UNIQUE (columns)` on a
//! table that holds rows, while other clients keep writing to it:
//!
//! ```text
//!   1. catalog: AddUniqueKey (key marked validating) ── from the moment a node's
//!      catalog holds it, every prepare there checks it (a prepare reads its
//!      keys under the WAL lock)
//!   2. every live copy of every partition ── ValidateUniqueKey: wait for the
//!      transactions prepared there before that moment, then check the stored
//!      rows for a repeated key (StorageEngine::validate_unique_key)
//!   3. catalog: FinishUniqueKey ── valid, or dropped again when a copy found a
//!      repeated key or could not check (the statement then fails)
//! ```
//!
//! Rows committed before step 1 are found by step 2's read; rows prepared
//! before it are waited for and then read; rows prepared after it were
//! checked against the key, the committed rows and every other undecided
//! transaction. So when the key ends valid, no copy holds a key twice.

use std::sync::Arc;
use std::time::Duration;

use foam_catalog::model::UniqueKeyDef;
use foam_catalog::{Catalog, CatalogCommand};
use foam_common::limits::KEY_VALIDATION_WAIT_MS;
use foam_common::{FoamError, FoamResult, NodeId, PartitionId, SqlState, TableId};
use foam_rpc::NodeRequest;
use tokio::task::JoinSet;

use crate::context::NodeContext;

/// Adds `key` to `table` and checks the rows already stored; on any failure
/// the key is dropped again and the error returned.
pub async fn add_unique_key(node: &Arc<NodeContext>, table: String, key: UniqueKeyDef) -> FoamResult<()> {
    let name = key.name.clone();
    let (catalog, _) = node.catalog.apply(CatalogCommand::AddUniqueKey { table: table.clone(), key }).await?;
    let checked = check_every_copy(node, &catalog, &table, &name).await;
    let finish = CatalogCommand::FinishUniqueKey { table, name, keep: checked.is_ok() };
    let finished = node.catalog.apply(finish).await;
    checked?;
    finished.map(|_| ())
}

async fn check_every_copy(node: &Arc<NodeContext>, catalog: &Catalog, table: &str, key_name: &str) -> FoamResult<()> {
    let key = key_name.to_string();
    let request = |table_id, partition, catalog_version| NodeRequest::ValidateUniqueKey { table_id, partition, key_name: key.clone(), catalog_version };
    let local = |node: Arc<NodeContext>, request: NodeRequest| async move {
        let NodeRequest::ValidateUniqueKey { table_id, partition, key_name, catalog_version } = request else { unreachable!("a key's request") };
        validate_unique_key(&node, table_id, partition, key_name, catalog_version).await
    };
    let errors = on_every_copy(node, catalog, table, "check the key on", request, local).await?;
    // A repeated key says more than a copy that could not check.
    let repeated = |e: &FoamError| e.sqlstate() == SqlState::UniqueViolation;
    let mut failure: Option<FoamError> = None;
    for error in errors {
        if failure.as_ref().is_none_or(|f| !repeated(f) && repeated(&error)) {
            failure = Some(error);
        }
    }
    failure.map_or(Ok(()), Err)
}

/// Sends `request(table, partition, catalog version)` to every live copy
/// of every partition of `table` (as `catalog` places them) at once, this
/// node's own copies handled by `local` without a call; the errors they
/// answered. A partition without a live copy fails at once (`purpose`
/// says what the copy was wanted for).
pub(crate) async fn on_every_copy<F>(
    node: &Arc<NodeContext>,
    catalog: &Catalog,
    table: &str,
    purpose: &str,
    request: impl Fn(TableId, PartitionId, u64) -> NodeRequest,
    local: impl Fn(Arc<NodeContext>, NodeRequest) -> F,
) -> FoamResult<Vec<FoamError>>
where
    F: std::future::Future<Output = FoamResult<()>> + Send + 'static,
{
    let def = catalog.table(table)?;
    let mut calls = JoinSet::new();
    for (partition, placement) in def.placement.iter().enumerate() {
        let copies: Vec<NodeId> = placement.live_nodes(&catalog.nodes).collect();
        if copies.is_empty() {
            return Err(FoamError::PartitionUnavailable {
                message: format!("partition {partition} of \"{table}\" has no live copy on a running node to {purpose}"),
            });
        }
        for copy in copies {
            let call = request(def.id, partition as PartitionId, catalog.version);
            if copy == node.node_id {
                calls.spawn(local(node.clone(), call));
                continue;
            }
            let node = node.clone();
            calls.spawn(async move { node.client_for(copy)?.call(&call, &[]).await.map(|_| ()) });
        }
    }
    let mut errors = Vec::new();
    while let Some(joined) = calls.join_next().await {
        if let Err(error) = joined.map_err(|e| FoamError::internal(e.to_string())).and_then(|r| r) {
            errors.push(error);
        }
    }
    Ok(errors)
}

/// This node's catalog at `catalog_version` or later (refreshed from the
/// meta nodes if need be); 40001 if they do not have it yet.
pub(crate) async fn catalog_at(node: &Arc<NodeContext>, catalog_version: u64) -> FoamResult<Arc<Catalog>> {
    let mut catalog = node.catalog.current();
    if catalog.version < catalog_version {
        catalog = node.catalog.refresh().await?;
    }
    if catalog.version < catalog_version {
        return Err(FoamError::PlacementChanged {
            message: format!("node {} has catalog version {}, not yet {catalog_version}", node.node_id, catalog.version),
        });
    }
    Ok(catalog)
}

/// On a node holding a copy: brings its catalog to `catalog_version` (so
/// its prepares check the key from now on), then checks the copy.
pub async fn validate_unique_key(
    node: &Arc<NodeContext>,
    table_id: TableId,
    partition: PartitionId,
    key_name: String,
    catalog_version: u64,
) -> FoamResult<()> {
    let catalog = catalog_at(node, catalog_version).await?;
    let key = super::unique_keys(&catalog, table_id)
        .into_iter()
        .find(|k| k.name == key_name)
        .ok_or_else(|| FoamError::internal(format!("table {table_id} has no key \"{key_name}\" to check")))?;
    let storage = node.storage.clone();
    let wait = Duration::from_millis(KEY_VALIDATION_WAIT_MS);
    Ok(tokio::task::spawn_blocking(move || storage.validate_unique_key(table_id, partition, &key, wait))
        .await
        .map_err(|e| FoamError::internal(e.to_string()))??)
}
