//! A node's saved copy of the newest catalog it was sent, to restart from (the
//! authoritative catalog is the meta nodes' Raft state, `foam-node`'s
//! `consensus.rs`): one JSON file replaced atomically on every change, so a
//! crash leaves either the old or the new copy, never a mix.

use std::path::{Path, PathBuf};

use foam_common::{FoamError, FoamResult};

use crate::model::Catalog;

const CATALOG_FILE_NAME: &str = "catalog.json";

pub struct CatalogStore {
    path: PathBuf,
}

impl CatalogStore {
    pub fn new(data_dir: &Path) -> Self {
        CatalogStore { path: data_dir.join(CATALOG_FILE_NAME) }
    }

    /// Loads the stored catalog, or `None` when this node never held one.
    pub fn load(&self) -> FoamResult<Option<Catalog>> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| FoamError::Corrupted {
                path: self.path.display().to_string(),
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(FoamError::io(&self.path, e)),
        }
    }

    pub fn save(&self, catalog: &Catalog) -> FoamResult<()> {
        let bytes = serde_json::to_vec_pretty(catalog).map_err(|e| FoamError::internal(e.to_string()))?;
        Ok(foam_common::fs::write_atomic(&self.path, &bytes)?)
    }
}
