//! What the HTTP API reads of the agent it serves: the configuration, the
//! data dir, the server's handle and the local client's, built by the agent
//! (`herder_actors::agent`) and shared with every handler.

use actix::Addr;
use herder_client::server_link::ClientAgent;
use herder_common::config::AgentConfig;
use herder_common::nomad_metrics::Board;
use herder_server::server::ServerHandle;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::SystemTime;

/// What every part of a running agent may read.
#[doc(hidden)]
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
    /// queries, event streams and log follows end at once instead of
    /// holding the HTTP server's graceful stop for their whole wait.
    pub shutting_down: tokio::sync::watch::Sender<bool>,
    /// What the server's and the client's periodic actors publish under
    /// Nomad's metric names (`/v1/metrics`).
    pub nomad_metrics: Board,
    /// Set once the client starts, when this agent runs one.
    pub client: std::sync::OnceLock<ClientHandle>,
    /// This single server as it advertises itself, worked out on first use
    /// and kept: working it out reads the hostname and asks the routing
    /// table, and every client heartbeat's answer lists the servers.
    pub own_server: std::sync::OnceLock<herder_raft::ServerNode>,
}

/// What the HTTP API needs of this agent's client: where to hand a user's
/// restart or signal, which node it is, and the server it talks to (where
/// a request the client cannot answer goes).
#[doc(hidden)]
#[derive(Clone)]
pub struct ClientHandle {
    pub agent: Addr<ClientAgent>,
    pub node_id: herder::structs::NodeId,
    /// The node's `SecretID`: what this agent shows a server to resolve a
    /// user's token under ACLs (`acl_remote`). Never logged.
    pub node_secret: String,
    /// The first of the client's servers, `http://host:port`.
    pub server: String,
}
