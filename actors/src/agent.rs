//! The agent: one process running a server, a client, or both.
//!
//! `Agent::start` brings the parts up in dependency order (data dir, state
//! store, HTTP API) and `Agent::shutdown` takes them down in reverse, so
//! nothing acknowledged is lost: the HTTP server stops accepting and drains
//! its requests before the store flushes and closes. The same type is the
//! embedding API: another Rust program can start herder inside itself.

use crate::client::driver::DriverSet;
use crate::client::server_link::{ClientAgent, ClientAgentConfig, StopClient};
use crate::config::AgentConfig;
use crate::http::{self, HttpServer};
use crate::node_protocol::normalize_server;
use crate::nomad_metrics::Board;
use crate::server::{Server, ServerError, ServerHandle};
use crate::server_api::ServerApi;
use actix::{Actor, Addr};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("data dir {path}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("client: {0}")]
    Client(String),
    #[error("HTTP API on {addr}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

/// What every part of a running agent may read.
pub struct AgentInfo {
    pub config: AgentConfig,
    /// The data dir in use (for `-dev`, a temporary one).
    pub data_dir: PathBuf,
    pub started_at: SystemTime,
    /// Set once the HTTP listener is bound.
    pub http_addr: std::sync::OnceLock<SocketAddr>,
    /// The server's parts, when this agent runs a server.
    pub server: Option<ServerHandle>,
    /// The ID of this agent's client node, once the client has started.
    pub client_node_id: std::sync::OnceLock<herder::structs::NodeId>,
    /// Turns true when the agent starts shutting down: parked blocking
    /// queries answer at once instead of holding the HTTP server's
    /// graceful stop for their whole wait.
    pub shutting_down: tokio::sync::watch::Sender<bool>,
    /// What the server's and the client's periodic actors publish under
    /// Nomad's metric names (`/v1/metrics`).
    pub nomad_metrics: Board,
    /// Set once the client starts, when this agent runs one.
    pub client: std::sync::OnceLock<ClientHandle>,
}

/// What the HTTP API needs of this agent's client: where to hand a user's
/// restart or signal, which node it is, and the server it talks to (where
/// a request the client cannot answer goes).
#[derive(Clone)]
pub struct ClientHandle {
    pub agent: Addr<ClientAgent>,
    pub node_id: herder::structs::NodeId,
    /// The first of the client's servers, `http://host:port`.
    pub server: String,
}

/// A running agent.
pub struct Agent {
    info: Arc<AgentInfo>,
    http: HttpServer,
    server: Option<Server>,
    client: Option<Addr<ClientAgent>>,
    /// `-dev`: the client stops its tasks on shutdown instead of leaving
    /// them for a restarted client to re-attach to.
    throwaway: bool,
    /// Removed on shutdown: `-dev` state is throwaway, as in Nomad.
    _temp_dir: Option<tempfile::TempDir>,
}

impl Agent {
    /// Starts the agent described by `config`. With `dev_temp_dir`, state
    /// lives in a new temporary directory instead of `config.data_dir`.
    pub async fn start(config: AgentConfig, dev_temp_dir: bool) -> Result<Agent, AgentError> {
        let (data_dir, temp) = prepare_data_dir(&config.data_dir, dev_temp_dir)?;
        let server = if config.server.enabled {
            Some(Server::start(&config, &data_dir).await?)
        } else {
            None
        };
        let nomad_metrics = server
            .as_ref()
            .map_or_else(Board::new, |s| s.handle().nomad_metrics.clone());
        let info = Arc::new(AgentInfo {
            config,
            data_dir,
            started_at: SystemTime::now(),
            http_addr: std::sync::OnceLock::new(),
            server: server.as_ref().map(|s| s.handle().clone()),
            client_node_id: std::sync::OnceLock::new(),
            shutting_down: tokio::sync::watch::Sender::new(false),
            nomad_metrics,
            client: std::sync::OnceLock::new(),
        });
        let http = match http::start(info.clone()).await {
            Ok(http) => http,
            Err(e) => {
                if let Some(server) = server {
                    server.stop().await;
                }
                return Err(e);
            }
        };
        let _ = info.http_addr.set(http.addr());
        let client = match start_client(&info, http.addr()) {
            Ok(c) => {
                if let Some(handle) = &c {
                    let _ = info.client.set(handle.clone());
                }
                c.map(|handle| handle.agent)
            }
            Err(e) => {
                http.stop().await;
                if let Some(server) = server {
                    server.stop().await;
                }
                return Err(e);
            }
        };
        Ok(Agent {
            info,
            http,
            server,
            client,
            throwaway: temp.is_some(),
            _temp_dir: temp,
        })
    }

    /// The address the HTTP API listens on (useful with port 0).
    pub fn http_addr(&self) -> SocketAddr {
        self.http.addr()
    }

    pub fn data_dir(&self) -> &Path {
        &self.info.data_dir
    }

    pub fn config(&self) -> &AgentConfig {
        &self.info.config
    }

    /// The server's parts, when this agent runs a server (embedding).
    pub fn server(&self) -> Option<&ServerHandle> {
        self.info.server.as_ref()
    }

    /// Typed calls into the server (register jobs and nodes, read
    /// allocations, ...), the embedding equivalent of the HTTP API; `None`
    /// on a client-only agent.
    pub fn api(&self) -> Option<ServerApi> {
        self.info.server.clone().map(ServerApi::new)
    }

    /// Stops accepting requests, lets the ones in flight finish, then
    /// closes the parts below the API.
    pub async fn shutdown(self) {
        if let Some(client) = &self.client {
            let _ = client
                .send(StopClient {
                    stop_tasks: self.throwaway,
                })
                .await;
        }
        self.info.shutting_down.send_replace(true);
        self.http.stop().await;
        if let Some(server) = self.server {
            server.stop().await;
        }
        tracing::info!("agent stopped");
    }
}

/// Fingerprints this machine and starts the client's link to the servers:
/// the configured ones, or this agent's own API.
fn start_client(info: &AgentInfo, local: SocketAddr) -> Result<Option<ClientHandle>, AgentError> {
    let c = &info.config.client;
    if !c.enabled {
        return Ok(None);
    }
    let (drivers, unknown) = DriverSet::from_names(&c.drivers);
    if !unknown.is_empty() {
        return Err(AgentError::Client(format!(
            "unknown drivers in client.drivers: {}",
            unknown.join(", ")
        )));
    }
    let mut config = info.config.clone();
    config.data_dir = info.data_dir.clone();
    // The node advertises the port actually bound (with `-http-port 0` the
    // configured one is 0), so `alloc logs` can reach this agent.
    config.ports.http = local.port();
    let node = crate::client::fingerprint::fingerprint(&config, &drivers)
        .map_err(|e| AgentError::Client(format!("fingerprinting this machine: {e}")))?;
    // The configured servers in failover order, or this agent's own API.
    let own = normalize_server(&local.to_string());
    let servers: Vec<String> = if c.servers.is_empty() {
        vec![own.clone()]
    } else {
        c.servers.iter().map(|s| normalize_server(s)).collect()
    };
    let server = servers.first().cloned().unwrap_or(own);
    tracing::info!(node_id = %node.id, servers = ?servers, "client starting");
    let _ = info.client_node_id.set(node.id);
    let node_id = node.id;
    let agent = ClientAgent::new(ClientAgentConfig {
        servers,
        node,
        data_dir: info.data_dir.clone(),
        drivers,
        readiness_check: c.readiness_check.clone(),
        metrics: info.nomad_metrics.clone(),
    })
    .start();
    Ok(Some(ClientHandle {
        agent,
        node_id,
        server,
    }))
}

fn prepare_data_dir(
    configured: &Path,
    temporary: bool,
) -> Result<(PathBuf, Option<tempfile::TempDir>), AgentError> {
    if temporary {
        let dir = tempfile::Builder::new()
            .prefix("herder-dev-")
            .tempdir()
            .map_err(|source| AgentError::DataDir {
                path: std::env::temp_dir(),
                source,
            })?;
        return Ok((dir.path().to_path_buf(), Some(dir)));
    }
    std::fs::create_dir_all(configured).map_err(|source| AgentError::DataDir {
        path: configured.to_path_buf(),
        source,
    })?;
    Ok((configured.to_path_buf(), None))
}
