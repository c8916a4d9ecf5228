//! FoamDB's query tier: DataFusion and datafusion-distributed, taught where data lives.
//!
//! ```text
//!  SQL ─▶ session (statement dispatch) ─▶ DDL ─▶ catalog leader (Raft)
//!                 │                     ─▶ COPY / INSERT ─▶ write (2PC coordinator) ─▶ owner nodes
//!                 ▼
//!        DataFusion plan over FoamTable ─▶ FoamScanExec leaves
//!                 │ datafusion-distributed cuts stages; our handlers give one task per
//!                 ▼ owner node and route it there
//!        worker on each owner: scan local partitions, filter, project, partial aggregate
//!                 │ Arrow Flight
//!                 ▼
//!        coordinator: final stage, rows to the client
//! ```

pub mod catalog;
pub mod connections;
pub mod context;
pub mod distributed;
pub mod exec;
pub mod frontend;
pub mod optimizer;
pub mod options;
pub mod write;

pub use context::{CatalogService, NodeContext};
pub use frontend::session::{FoamSession, StatementOutput};

#[cfg(test)]
mod tests {
    /// Each folder's README.md has a line for every file in it
    /// (CONTRIBUTING.md), so the map a newcomer reads stays whole.
    #[test]
    fn every_file_has_a_line_in_its_folders_readme() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut missing = Vec::new();
        for folder in ["frontend", "catalog", "exec", "write", "optimizer"] {
            let dir = src.join(folder);
            let readme = std::fs::read_to_string(dir.join("README.md")).expect("a folder README.md");
            let mut files = vec![dir.clone()];
            while let Some(path) = files.pop() {
                if path.is_dir() {
                    files.extend(std::fs::read_dir(&path).expect("a folder").map(|entry| entry.expect("an entry").path()));
                    continue;
                }
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
                // `name.rs` or, in a subfolder, `sub/name.rs`.
                if name.ends_with(".rs") && name != "mod.rs" && !readme.contains(&format!("{name}`")) {
                    missing.push(format!("{folder}: {name}"));
                }
            }
        }
        assert!(missing.is_empty(), "files without a line in their folder's README.md: {missing:?}");
    }
}
