//! A node's identity on disk: the id the cluster gave it and how it joined, so a
//! restarted node comes back as itself.

use std::path::Path;

use foam_common::{FoamError, FoamResult, NodeId};
use serde::{Deserialize, Serialize};

const IDENTITY_FILE_NAME: &str = "node.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Identity {
    pub node_id: NodeId,
    /// The address this node joined through; `None` for the bootstrap node.
    pub join_addr: Option<String>,
}

pub fn load(data_dir: &Path) -> FoamResult<Option<Identity>> {
    let path = data_dir.join(IDENTITY_FILE_NAME);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| FoamError::Corrupted { path: path.display().to_string(), message: e.to_string() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FoamError::io(&path, e)),
    }
}

pub fn save(data_dir: &Path, identity: &Identity) -> FoamResult<()> {
    let bytes = serde_json::to_vec_pretty(identity).map_err(|e| FoamError::internal(e.to_string()))?;
    Ok(foam_common::fs::write_atomic(&data_dir.join(IDENTITY_FILE_NAME), &bytes)?)
}
