//! The two faces of the catalog service: the authority (on the bootstrap node,
//! applying DDL one command at a time and persisting each version, and running
//! the failure detector, see `membership.rs`) and the cache (on every other
//! node, refreshed from the authority before each statement).

use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use foam_catalog::model::CommandOutcome;
use foam_catalog::{Catalog, CatalogCommand, CatalogStore};
use foam_common::{FoamError, FoamResult};
use foam_query::CatalogService;
use foam_rpc::{NodeClient, NodeRequest, NodeResponse};
use tokio::sync::Mutex;

pub struct CatalogAuthority {
    store: CatalogStore,
    current: RwLock<Arc<Catalog>>,
    /// Serializes DDL so each command applies to the newest version.
    apply_lock: Mutex<()>,
    /// What the failure detector knows; set once the node has its clients.
    pub(crate) membership: std::sync::OnceLock<crate::membership::Membership>,
}

impl CatalogAuthority {
    pub fn new(store: CatalogStore, catalog: Catalog) -> Self {
        CatalogAuthority {
            store,
            current: RwLock::new(Arc::new(catalog)),
            apply_lock: Mutex::new(()),
            membership: std::sync::OnceLock::new(),
        }
    }
}

#[async_trait]
impl CatalogService for CatalogAuthority {
    fn current(&self) -> Arc<Catalog> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    async fn refresh(&self) -> FoamResult<Arc<Catalog>> {
        Ok(self.current())
    }

    async fn apply(&self, command: CatalogCommand) -> FoamResult<(Arc<Catalog>, CommandOutcome)> {
        let _guard = self.apply_lock.lock().await;
        let (next, outcome) = self.current().apply(&command)?;
        if outcome != CommandOutcome::Skipped && next != *self.current() {
            self.store.save(&next)?;
        }
        let next = Arc::new(next);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = next.clone();
        Ok((next, outcome))
    }

    async fn check_nodes(&self) -> FoamResult<Arc<Catalog>> {
        if let Some(membership) = self.membership.get() {
            membership.check_now(self).await;
        }
        Ok(self.current())
    }
}

pub struct CatalogCache {
    authority: NodeClient,
    current: RwLock<Arc<Catalog>>,
}

impl CatalogCache {
    pub fn new(authority: NodeClient, catalog: Catalog) -> Self {
        CatalogCache { authority, current: RwLock::new(Arc::new(catalog)) }
    }

    fn store(&self, catalog: Catalog) -> Arc<Catalog> {
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        if catalog.version >= current.version {
            *current = Arc::new(catalog);
        }
        current.clone()
    }
}

#[async_trait]
impl CatalogService for CatalogCache {
    fn current(&self) -> Arc<Catalog> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    async fn refresh(&self) -> FoamResult<Arc<Catalog>> {
        let known_version = Some(self.current().version);
        match self.authority.call(&NodeRequest::CatalogGet { known_version }, &[]).await {
            Ok((NodeResponse::Catalog { catalog: Some(catalog) }, _)) => Ok(self.store(catalog)),
            Ok((NodeResponse::Catalog { catalog: None }, _)) => Ok(self.current()),
            Ok((other, _)) => Err(FoamError::internal(format!("unexpected catalog reply {other:?}"))),
            Err(error) => {
                // Reads may go on with the catalog this node has; DDL will fail clearly.
                tracing::warn!(%error, "catalog authority unreachable; using the cached catalog");
                Ok(self.current())
            }
        }
    }

    async fn apply(&self, command: CatalogCommand) -> FoamResult<(Arc<Catalog>, CommandOutcome)> {
        let reply = self.authority.call(&NodeRequest::CatalogApply { command }, &[]).await.map_err(|error| match error {
            FoamError::NodeUnavailable { addr, message, .. } => FoamError::CatalogUnavailable {
                message: format!("the catalog node at {addr} is unreachable ({message}); DDL needs it"),
            },
            other => other,
        })?;
        match reply {
            (NodeResponse::Applied { catalog, outcome }, _) => Ok((self.store(catalog), outcome)),
            (other, _) => Err(FoamError::internal(format!("unexpected catalog reply {other:?}"))),
        }
    }

    async fn check_nodes(&self) -> FoamResult<Arc<Catalog>> {
        match self.authority.call(&NodeRequest::CheckNodes, &[]).await? {
            (NodeResponse::Catalog { catalog: Some(catalog) }, _) => Ok(self.store(catalog)),
            (NodeResponse::Catalog { catalog: None }, _) => Ok(self.current()),
            (other, _) => Err(FoamError::internal(format!("unexpected catalog reply {other:?}"))),
        }
    }
}
