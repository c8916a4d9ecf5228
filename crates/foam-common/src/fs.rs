//! Durable file primitives shared by the catalog store, the storage engine
//! and the node's secrets (passwords, the cluster secret, TLS keys).
//! A file replaced with [`write_atomic`] is either entirely old or entirely new
//! after a crash, never torn.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::error::FoamError;

/// A file operation that failed, and the path it failed on. Each tier turns
/// it into its own error type (`From`), an I/O error there.
#[derive(Debug, thiserror::Error)]
#[error("I/O error on {path}: {source}")]
pub struct FileError {
    pub path: String,
    #[source]
    pub source: std::io::Error,
}

impl FileError {
    pub fn new(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        FileError { path: path.as_ref().display().to_string(), source }
    }
}

impl From<FileError> for FoamError {
    fn from(error: FileError) -> FoamError {
        FoamError::Io { path: error.path, source: error.source }
    }
}

pub type FileResult<T> = Result<T, FileError>;

/// Writes `bytes` to `path` via a temporary file, fsync and rename, then fsyncs
/// the directory so the rename itself survives a power loss.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> FileResult<()> {
    let temporary = path.with_extension("tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temporary)
        .map_err(|e| FileError::new(&temporary, e))?;
    file.write_all(bytes).map_err(|e| FileError::new(&temporary, e))?;
    file.sync_all().map_err(|e| FileError::new(&temporary, e))?;
    std::fs::rename(&temporary, path).map_err(|e| FileError::new(path, e))?;
    sync_parent_dir(path)
}

/// Writes `bytes` to `path`, created (or truncated) with permissions `mode`
/// (0o600 for a secret only its owner may read), and makes it durable. The
/// mode applies when the file is created.
pub fn write_with_mode(path: &Path, bytes: &[u8], mode: u32) -> FileResult<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(path).map_err(|e| FileError::new(path, e))?;
    file.write_all(bytes).and_then(|_| file.sync_all()).map_err(|e| FileError::new(path, e))?;
    sync_parent_dir(path)
}

/// Fsyncs the directory holding `path`, making a create, rename or delete in it durable.
pub fn sync_parent_dir(path: &Path) -> FileResult<()> {
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

pub fn sync_dir(dir: &Path) -> FileResult<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| FileError::new(dir, e))
}

pub fn create_dir_all(dir: &Path) -> FileResult<()> {
    std::fs::create_dir_all(dir).map_err(|e| FileError::new(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_file() {
        let dir = std::env::temp_dir().join(format!("foam-fs-test-{}", std::process::id()));
        create_dir_all(&dir).unwrap();
        let path = dir.join("x.json");
        write_atomic(&path, b"first version").unwrap();
        write_atomic(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        assert!(!path.with_extension("tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
