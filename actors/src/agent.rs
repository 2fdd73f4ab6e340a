//! The agent: one process running a server, a client, or both.
//!
//! `Agent::start` brings the parts up in dependency order (data dir, state
//! store, HTTP API) and `Agent::shutdown` takes them down in reverse, so
//! nothing acknowledged is lost: the HTTP server stops accepting and drains
//! its requests before the store flushes and closes. The same type is the
//! embedding API: another Rust program can start herder inside itself.

use crate::config::AgentConfig;
use crate::http::{self, HttpServer};
use crate::server::{Server, ServerError, ServerHandle};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("HTTP API on {addr}: {source}")]
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
}

/// A running agent.
pub struct Agent {
    info: Arc<AgentInfo>,
    http: HttpServer,
    server: Option<Server>,
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
        let info = Arc::new(AgentInfo {
            config,
            data_dir,
            started_at: SystemTime::now(),
            http_addr: std::sync::OnceLock::new(),
            server: server.as_ref().map(|s| s.handle().clone()),
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
        Ok(Agent {
            info,
            http,
            server,
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

    /// Stops accepting requests, lets the ones in flight finish, then
    /// closes the parts below the API.
    pub async fn shutdown(self) {
        self.http.stop().await;
        if let Some(server) = self.server {
            server.stop().await;
        }
        tracing::info!("agent stopped");
    }
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
