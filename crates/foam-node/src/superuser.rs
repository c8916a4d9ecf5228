//! The first superuser. A cluster whose catalog has no role (a new one, or
//! one made before roles existed) gets role `foam` with a generated
//! password from the node that started the cluster (node 1), which keeps the
//! password in its data directory (mode 0600) and prints the connection URL
//! with it once.
//! Every node then checks passwords against the catalog (`foam-pgwire`'s
//! `startup.rs`); the file only tells the operator what the password was
//! when the cluster made it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use foam_catalog::CatalogCommand;
use foam_catalog::roles::{RoleDef, ScramVerifier, generate_password};
use foam_common::FoamResult;
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

/// The superuser's password as the node that made it keeps it in
/// `data_dir`, if this is that node's data directory.
pub fn read_password(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(data_dir.join(PASSWORD_FILE)).ok()?;
    Some(text.trim().to_string()).filter(|password| !password.is_empty())
}

async fn create(catalog: &dyn CatalogService, data_dir: &Path, sql_addr: &str) -> FoamResult<()> {
    let file = data_dir.join(PASSWORD_FILE);
    let password = match read_password(data_dir) {
        Some(password) => password,
        None => {
            let password = generate_password()?;
            foam_common::fs::write_with_mode(&file, format!("{password}\n").as_bytes(), 0o600)?;
            password
        }
    };
    let role = RoleDef { name: SUPERUSER.into(), superuser: true, login: true, password: Some(ScramVerifier::new(&password)?) };
    let (after, _) = catalog.apply(CatalogCommand::CreateRole { role, if_not_exists: true }).await?;
    // A role `foam` made meanwhile by someone else (a client of a node
    // started --insecure) keeps its password; this file would be wrong.
    let ours = after.roles.get(SUPERUSER).and_then(|r| r.password.as_ref()).is_some_and(|v| ScramVerifier::with_salt(&password, v.salt.clone()) == *v);
    if !ours {
        let _ = std::fs::remove_file(&file);
        return Ok(());
    }
    let host_port = sql_addr.replace("0.0.0.0", "127.0.0.1");
    println!("FoamDB created superuser {SUPERUSER}: postgres://{SUPERUSER}:{password}@{host_port}/foam (the password is in {})", file.display());
    Ok(())
}
