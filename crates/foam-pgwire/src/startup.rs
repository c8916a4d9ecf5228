//! A connection's startup: the database it names, its password, and its
//! entry in the cancel registry.
//!
//! A node checks passwords with SCRAM-SHA-256 (pgwire's SASL exchange)
//! against the roles in the catalog, so every node accepts the same
//! credentials. A user that does not exist, cannot log in or has no
//! password goes through the same exchange against a random verifier and
//! fails as a wrong password does (28P01), so names cannot be probed. A node
//! started with `--insecure` skips the password and says so when it starts.
//! TLS is offered to every client; with `--require-tls` a client on another
//! machine that does not ask for it is refused (28000).

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use foam_catalog::roles::SCRAM_ITERATIONS;
use foam_common::SqlState;
use foam_query::NodeContext;
use futures::Sink;
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::ScramAuth;
use pgwire::api::auth::{AuthSource, DefaultServerParameterProvider, LoginInfo, Password, ServerParameterProvider, StartupHandler};
use pgwire::api::{ClientInfo, ConnectionGuard, ConnectionHandle, ConnectionManager, METADATA_USER, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

/// The one database a FoamDB cluster serves.
pub const DATABASE: &str = "foam";

/// How clients prove who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// SCRAM-SHA-256 against the catalog's roles.
    Password,
    /// Anyone connects as anyone (`--insecure`).
    Insecure,
}

/// TLS on the SQL port: what a connection asking for it gets, and whether
/// clients on other machines must ask.
pub struct Tls {
    pub acceptor: pgwire::tokio::TlsAcceptor,
    pub required_off_host: bool,
}

/// A connection's entry in the cancel registry, dropped with the connection.
///
/// Kept under a type of our own rather than the one pgwire looks for: pgwire
/// would then race every statement against the cancel signal itself and drop
/// it midway, a write included. FoamDB stops only reads, rows being sent
/// included (`foam_query::frontend::interrupt`).
pub(crate) struct CancelKey {
    pub(crate) handle: Arc<ConnectionHandle>,
    _registered: ConnectionGuard,
}

/// Registers the connection under the cancel key it was sent.
fn register_cancel_key<C: ClientInfo>(client: &mut C, connections: &Arc<ConnectionManager>) {
    let (pid, secret) = client.pid_and_secret_key();
    let (handle, registered) = connections.register(pid, secret);
    client.session_extensions().insert(CancelKey { handle, _registered: registered });
}

/// The startup of one connection (pgwire asks for one per connection).
pub(crate) struct FoamStartup {
    connections: Arc<ConnectionManager>,
    tls_required_off_host: bool,
    /// The node's `max_connections`, when this connection is past it.
    over_limit: Option<usize>,
    /// `None` with `--insecure`.
    password: Option<SASLAuthStartupHandler<RoleParameters>>,
}

impl FoamStartup {
    pub(crate) fn new(
        auth: ClientAuth,
        tls_required_off_host: bool,
        over_limit: Option<usize>,
        node: &Arc<NodeContext>,
        connections: Arc<ConnectionManager>,
    ) -> FoamStartup {
        let password = (auth == ClientAuth::Password).then(|| {
            let mut scram = ScramAuth::new(Arc::new(CatalogPasswords { node: node.clone() }));
            scram.set_iterations(SCRAM_ITERATIONS as usize);
            SASLAuthStartupHandler::new(Arc::new(RoleParameters { node: node.clone() })).with_scram(scram)
        });
        FoamStartup { connections, tls_required_off_host, over_limit, password }
    }
}

#[async_trait]
impl StartupHandler for FoamStartup {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let PgWireFrontendMessage::Startup(startup) = &message {
            if let Some(max_connections) = self.over_limit {
                return Err(fatal(SqlState::TooManyConnections, format!("sorry, too many clients already (this node serves {max_connections}; --max-connections)")));
            }
            if self.tls_required_off_host && !client.is_secure() && !client.socket_addr().ip().is_loopback() {
                return Err(fatal(SqlState::InvalidAuthorization, "this node requires TLS of clients on other machines (sslmode=require)".into()));
            }
            // As libpq does, a client that names no database asks for its user's.
            let database = startup.parameters.get("database").or_else(|| startup.parameters.get("user"));
            if let Some(database) = database.filter(|d| d.as_str() != DATABASE) {
                return Err(fatal(SqlState::InvalidCatalogName, format!("database \"{database}\" does not exist (this cluster serves \"{DATABASE}\")")));
            }
        }
        let Some(password) = &self.password else {
            return AcceptAll { connections: self.connections.clone() }.on_startup(client, message).await;
        };
        if let Err(error) = password.on_startup(client, message).await {
            return Err(match error {
                // pgwire names the user the SCRAM message did, which libpq leaves empty.
                PgWireError::InvalidPassword(_) => {
                    let user = client.metadata().get(METADATA_USER).cloned().unwrap_or_default();
                    fatal(SqlState::InvalidPassword, format!("password authentication failed for user \"{user}\""))
                }
                other => other,
            });
        }
        if matches!(client.state(), PgWireConnectionState::ReadyForQuery) && client.session_extensions().get::<CancelKey>().is_none() {
            register_cancel_key(client, &self.connections);
        }
        Ok(())
    }
}

/// An error that ends the connection.
fn fatal(code: SqlState, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new("FATAL".into(), code.code().into(), message)))
}

/// `--insecure`: any user connects without a password.
struct AcceptAll {
    connections: Arc<ConnectionManager>,
}

#[async_trait]
impl NoopStartupHandler for AcceptAll {
    async fn post_startup<C>(&self, client: &mut C, _message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        register_cancel_key(client, &self.connections);
        Ok(())
    }
}

/// The parameters a client is told after it logged in: pgwire's, with
/// `is_superuser` saying what the role is (psql's prompt shows it).
struct RoleParameters {
    node: Arc<NodeContext>,
}

impl ServerParameterProvider for RoleParameters {
    fn server_parameters<C: ClientInfo>(&self, client: &C) -> Option<std::collections::HashMap<String, String>> {
        let mut parameters = DefaultServerParameterProvider::default().server_parameters(client)?;
        let user = client.metadata().get(METADATA_USER);
        let superuser = user.and_then(|user| self.node.catalog.current().roles.get(user).map(|role| role.superuser)).unwrap_or(false);
        parameters.insert("is_superuser".into(), if superuser { "on" } else { "off" }.into());
        // What SHOW server_version says (pgwire's own is "16.6-pgwire-..."),
        // which clients compare with their own version: pg_dump refuses a
        // server newer than itself.
        parameters.insert("server_version".into(), format!("{} (FoamDB)", foam_query::catalog::functions::POSTGRES_VERSION));
        // The zone the client asked for, if FoamDB knows it (the session
        // starts in it), as PostgreSQL reports it.
        if let Some(zone) = startup_time_zone(client).and_then(|zone| foam_query::frontend::time_zone::parse(&zone).ok()) {
            parameters.insert(foam_query::frontend::time_zone::TIME_ZONE_SHOWN.into(), zone.shown);
        }
        Some(parameters)
    }
}

/// The TimeZone a client asked for in its startup message (the session
/// starts in it, and the startup reply names it).
pub(crate) fn startup_time_zone<C: ClientInfo>(client: &C) -> Option<String> {
    client.metadata().iter().find(|(name, _)| name.eq_ignore_ascii_case(foam_query::frontend::time_zone::TIME_ZONE)).map(|(_, value)| value.clone())
}

/// The catalog's roles, as the SCRAM exchange asks for them.
#[derive(Debug)]
struct CatalogPasswords {
    node: Arc<NodeContext>,
}

#[async_trait]
impl AuthSource for CatalogPasswords {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        // The newest roles, as every statement reads the newest catalog: a
        // password changed on another node counts here at once. A node cut
        // off from the leader checks against the catalog it has.
        let catalog = self.node.catalog.refresh().await.unwrap_or_else(|_| self.node.catalog.current());
        let verifier = login
            .user()
            .and_then(|user| catalog.roles.get(user))
            .filter(|role| role.login)
            .and_then(|role| role.password.clone())
            .filter(|verifier| verifier.iterations == SCRAM_ITERATIONS);
        Ok(match verifier {
            Some(verifier) => Password::new(Some(verifier.salt), verifier.salted_password),
            None => {
                // No client can answer for a verifier nobody knows the password of.
                let decoy = foam_catalog::roles::ScramVerifier::new(&uuid::Uuid::new_v4().to_string())
                    .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
                Password::new(Some(decoy.salt), decoy.salted_password)
            }
        })
    }
}
