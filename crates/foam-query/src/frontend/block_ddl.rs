//! CREATE and DROP of tables, views and sequences inside a transaction
//! block, and ALTERs of those it created.
//!
//! FoamDB's catalog changes through Raft, outside any transaction, so a
//! block cannot hide its DDL from other sessions until COMMIT as
//! PostgreSQL does. What it can do is make ROLLBACK mean what it says:
//!
//! ```text
//!   in a block:  CREATE TABLE/VIEW t ─▶ created at once   undo: drop t
//!                CREATE SEQUENCE s ─▶ created at once      undo: drop s
//!                ALTER TABLE/SEQUENCE of one created here   undo: its drop
//!                CREATE OR REPLACE VIEW v ─▶ replaced     undo: v's old query back
//!                DROP TABLE/VIEW t ─▶ renamed aside        undo: named t again
//!                   (t created in this block: dropped at once, its undo gone)
//!   COMMIT (its rows committed) ─▶ what was set aside is dropped
//!   ROLLBACK, a failed COMMIT, the connection closing ─▶ undo, newest first
//!   ROLLBACK TO SAVEPOINT ─▶ undo what came after the savepoint
//! ```
//!
//! Other sessions see a created table (empty, its rows are the block's
//! until COMMIT) and miss a dropped one before the block ends; a node that
//! crashes with the block open leaves its DDL done. docs/LIMITS.md
//! says so.

use std::sync::Arc;

use foam_catalog::CatalogCommand;
use foam_catalog::model::CommandOutcome;

use crate::context::NodeContext;

/// The prefix of the name a table or view dropped inside a block has until
/// the block ends.
pub const SET_ASIDE_PREFIX: &str = "foam_dropped_";

/// How to take back one DDL statement of the open block.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Undo {
    /// It created this table or view.
    Created { name: String },
    /// It replaced the query of this view.
    Replaced { name: String, query_sql: String },
    /// It set this table or view aside under `aside`.
    SetAside { name: String, aside: String },
}

/// The open block's DDL: what ROLLBACK undoes and what COMMIT finishes.
#[derive(Debug, Default)]
pub struct BlockDdl {
    undo: Vec<Undo>,
    /// Each open savepoint's name and how much undo came before it.
    savepoints: Vec<(String, usize)>,
}

impl BlockDdl {
    pub fn is_empty(&self) -> bool {
        self.undo.is_empty()
    }

    pub fn created(&mut self, name: String) {
        self.undo.push(Undo::Created { name });
    }

    /// Whether `name` was created in this block since its last savepoint
    /// and is still there: a change of it is undone by dropping it.
    pub fn created_since_savepoint(&self, name: &str) -> bool {
        let mark = self.savepoints.last().map_or(0, |(_, mark)| *mark);
        self.undo.iter().skip(mark).any(|u| matches!(u, Undo::Created { name: n } if n == name))
    }

    pub fn replaced(&mut self, name: String, query_sql: String) {
        self.undo.push(Undo::Replaced { name, query_sql });
    }

    /// Whether `name` was created in this block since its last savepoint
    /// (and is still there): a DROP of it then drops it at once, and
    /// forgets its undo (and that of replacing it since). One created
    /// before the savepoint is set aside instead, as ROLLBACK TO must
    /// bring it back (and the savepoint's mark must still count it).
    pub fn forget_created(&mut self, name: &str) -> bool {
        let Some(at) = self.undo.iter().rposition(|u| matches!(u, Undo::Created { name: n } if n == name)) else { return false };
        if at < self.savepoints.last().map_or(0, |(_, mark)| *mark) {
            return false;
        }
        let later = self.undo.split_off(at + 1);
        self.undo.pop();
        self.undo.extend(later.into_iter().filter(|u| !matches!(u, Undo::Replaced { name: n, .. } if n == name)));
        true
    }

    pub fn set_aside(&mut self, name: String, aside: String) {
        self.undo.push(Undo::SetAside { name, aside });
    }

    pub fn savepoint(&mut self, name: &str) {
        self.savepoints.push((name.to_string(), self.undo.len()));
    }

    pub fn release(&mut self, name: &str) {
        if let Some(at) = self.savepoints.iter().rposition(|(n, _)| n == name) {
            self.savepoints.truncate(at);
        }
    }

    /// The undo of what came after savepoint `name`, which stays.
    pub fn rollback_to(&mut self, name: &str) -> BlockDdl {
        let Some(at) = self.savepoints.iter().rposition(|(n, _)| n == name) else { return BlockDdl::default() };
        self.savepoints.truncate(at + 1);
        let mark = self.savepoints[at].1.min(self.undo.len());
        BlockDdl { undo: self.undo.split_off(mark), savepoints: Vec::new() }
    }

    /// The block committed: drops what it set aside.
    pub async fn commit(self, node: &Arc<NodeContext>) {
        for undo in self.undo {
            if let Undo::SetAside { aside, .. } = undo {
                drop_relation(node, &aside).await;
            }
        }
    }

    /// The block rolled back: undoes its DDL, newest first; what could not
    /// be dropped then (a sequence a later-made table's default drew from)
    /// is dropped again at the end.
    pub async fn undo(self, node: &Arc<NodeContext>) {
        let mut again = Vec::new();
        for undo in self.undo.into_iter().rev() {
            let command = match &undo {
                Undo::Created { name } => {
                    if !drop_relation(node, name).await {
                        again.push(name.clone());
                    }
                    continue;
                }
                Undo::Replaced { name, query_sql } => {
                    CatalogCommand::CreateView { name: name.clone(), query_sql: query_sql.clone(), or_replace: true, owner: None }
                }
                Undo::SetAside { name, aside } => CatalogCommand::RenameRelation { from: aside.clone(), to: name.clone() },
            };
            if let Err(error) = node.catalog.apply(command).await {
                tracing::warn!(?undo, %error, "a rolled-back block's DDL was not undone");
            }
        }
        for name in again {
            if !drop_relation(node, &name).await {
                tracing::warn!(name, "a table, view or sequence a rolled-back block created stays");
            }
        }
    }
}

/// A name for table or view `name` set aside by transaction `txn` (its
/// low 64 bits: only one open block can hold a name at a time).
pub fn aside_name(name: &str, txn: foam_common::TxnId) -> String {
    let name: String = name.chars().take(30).collect();
    format!("{SET_ASIDE_PREFIX}{:x}_{name}", txn as u64)
}

/// Whether `name` is a relation an open block set aside (dropped, until
/// the block ends).
pub fn is_set_aside(name: &str) -> bool {
    name.starts_with(SET_ASIDE_PREFIX)
}

/// Drops table, view or sequence `name` and, for a table, its data on
/// every node; whether it is gone.
pub async fn drop_relation(node: &Arc<NodeContext>, name: &str) -> bool {
    let catalog = node.catalog.current();
    let command = if catalog.views.contains_key(name) {
        CatalogCommand::DropView { name: name.to_string(), if_exists: true }
    } else if catalog.sequences.contains_key(name) {
        CatalogCommand::DropSequence { name: name.to_string(), if_exists: true }
    } else {
        CatalogCommand::DropTable { name: name.to_string(), if_exists: true }
    };
    match node.catalog.apply(command).await {
        Ok((_, CommandOutcome::TableDropped { table })) => drop_table_data(node, table.id).await,
        Ok(_) => {}
        Err(error) => {
            tracing::debug!(name, %error, "a table, view or sequence a block dropped or created was not dropped");
            return false;
        }
    }
    true
}

/// Deletes a dropped table's partitions on every node (a node that misses
/// it deletes them when it restarts).
pub async fn drop_table_data(node: &Arc<NodeContext>, table_id: foam_common::TableId) {
    let catalog = node.catalog.current();
    for node_id in catalog.nodes.keys() {
        let result = if *node_id == node.node_id {
            node.storage.drop_table(table_id).map_err(foam_common::FoamError::from)
        } else {
            match node.client_for(*node_id) {
                Ok(client) => client.call(&foam_rpc::NodeRequest::DropTableData { table_id }, &[]).await.map(|_| ()),
                Err(error) => Err(error),
            }
        };
        if let Err(error) = result {
            tracing::warn!(node_id, table_id, %error, "dropped table's data stays until the node restarts");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn savepoints_split_the_undo() {
        let mut ddl = BlockDdl::default();
        ddl.created("a".into());
        ddl.savepoint("s");
        ddl.created("b".into());
        ddl.set_aside("c".into(), aside_name("c", 7));
        let after = ddl.rollback_to("s");
        assert_eq!(after.undo, vec![Undo::Created { name: "b".into() }, Undo::SetAside { name: "c".into(), aside: "foam_dropped_7_c".into() }]);
        assert_eq!(ddl.undo, vec![Undo::Created { name: "a".into() }]);
        // "s" stays after ROLLBACK TO: a DROP now sets "a" aside rather than forgetting it.
        assert!(!ddl.forget_created("a"));
        ddl.release("s");
        assert!(ddl.forget_created("a") && !ddl.forget_created("a") && ddl.is_empty());
    }
}
