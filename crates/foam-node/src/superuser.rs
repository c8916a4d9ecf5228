//! The first superuser. A cluster whose catalog has no role (a new one, or
//! one made before roles existed) gets role `foam` with a generated
//! password from the node that started the cluster (node 1), which keeps the
//! password in its data directory (mode 0600) and prints the connection URL
//! with it once.
//! Every node then checks passwords against the catalog (`foam-pgwire`'s
//! `startup.rs`); the file only tells the operator what the password was
//! when the cluster made it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use foam_catalog::CatalogCommand;
use foam_catalog::roles::{RoleDef, ScramVerifier, generate_password};
use foam_common::{FoamError, FoamResult};
use foam_query::context::CatalogService;

/// The superuser a new cluster gets.
pub const SUPERUSER: &str = "foam";

/// The file in a node's data directory holding the superuser's generated
/// password; `foam local` reads it to print its URL.
pub const PASSWORD_FILE: &str = "password";

/// How long to wait before trying again when the catalog cannot take the
/// command yet (no leader while a whole cluster restarts).
const RETRY_MS: u64 = 500;

/// Creates the superuser if the catalog has no role, retrying until the
/// catalog takes the command or some node's role is there.
pub async fn ensure(catalog: Arc<dyn CatalogService>, data_dir: PathBuf, sql_addr: String) {
    while catalog.current().roles.is_empty() {
        match create(catalog.as_ref(), &data_dir, &sql_addr).await {
            Ok(()) => return,
            Err(error) => {
                tracing::info!(%error, "waiting for the catalog to create the superuser");
                tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
            }
        }
    }
}

async fn create(catalog: &dyn CatalogService, data_dir: &Path, sql_addr: &str) -> FoamResult<()> {
    let file = data_dir.join(PASSWORD_FILE);
    let password = match std::fs::read_to_string(&file) {
        Ok(text) if !text.trim().is_empty() => text.trim().to_string(),
        _ => {
            let password = generate_password()?;
            write_private(&file, &password)?;
            password
        }
    };
    let role = RoleDef { name: SUPERUSER.into(), superuser: true, login: true, password: Some(ScramVerifier::new(&password)?) };
    let (after, _) = catalog.apply(CatalogCommand::CreateRole { role, if_not_exists: true }).await?;
    // Nodes of a cluster restarted from before roles may race: the role
    // holds one node's password, and the others forget theirs.
    let ours = after.roles.get(SUPERUSER).and_then(|r| r.password.as_ref()).is_some_and(|v| ScramVerifier::with_salt(&password, v.salt.clone()) == *v);
    if !ours {
        let _ = std::fs::remove_file(&file);
        return Ok(());
    }
    let host_port = sql_addr.replace("0.0.0.0", "127.0.0.1");
    println!("FoamDB created superuser {SUPERUSER}: postgres://{SUPERUSER}:{password}@{host_port}/foam (the password is in {})", file.display());
    Ok(())
}

/// Writes `text` to a new file only its owner may read.
fn write_private(path: &Path, text: &str) -> FoamResult<()> {
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path).map_err(|e| FoamError::io(path, e))?;
    file.write_all(format!("{text}\n").as_bytes()).and_then(|_| file.sync_all()).map_err(|e| FoamError::io(path, e))?;
    foam_common::fs::sync_parent_dir(path)
}
