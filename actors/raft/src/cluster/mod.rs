//! One server's place in a cluster of servers: its replica of the state
//! ([`RaftNode`] over the real `StateStore`), the HTTP transport signed
//! with the cluster key, how it forms or joins the cluster
//! ([`bootstrap`]), how every write reaches the leader ([`replicator`]),
//! and the cluster's own calls on the RPC port ([`rpc`]).
//!
//! What it answers is what the rest of herder needs to know about the
//! cluster: who leads ([`Cluster::leader`]), who the members are, whether
//! this server leads (the server crate starts and stops the leader's
//! duties on it), and a read barrier for consistent reads on a follower.
//!
//! The imports go one way: this module starts the replica and spawns the
//! background tasks ([`Cluster::start`]); the task modules (election,
//! leadership, bootstrap, liveness, autopilot, replicator, rpc) hold the
//! handle; the handle (`handle.rs`) and the plain types it keeps
//! (`settings.rs`, `status.rs`, `health.rs`) name none of the tasks;
//! `autopilot_health` reads the handle to answer autopilot's health.

pub mod autopilot;
pub mod autopilot_health;
pub mod bootstrap;
pub mod election;
mod handle;
mod health;
pub mod leadership;
pub mod liveness;
mod read_barrier;
pub mod replicator;
pub mod rpc;
mod settings;
mod status;

// The handle, the settings and the plain types are defined below the task
// modules (which all hold a `Cluster`) and passed through here, where
// callers find them; this module, which spawns the tasks, sits above.
pub use handle::Cluster;
pub use settings::ClusterSettings;
pub use status::Member;

use crate::http::HttpTransport;
use crate::node::{RaftNode, StartError};
use crate::{NodeId, ServerNode};
use herder::state::StateStore;
use openraft::RaftMetrics;
use settings::RPC_TIMEOUT;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file in the data dir that keeps this server's ID in the Raft group:
/// a restarted server is the same member.
pub const ID_FILE: &str = "raft-id";

/// Why a server could not take its place.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("raft ID file {path}: {source}")]
    IdFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("raft ID file {path} holds {text:?}, not a server ID; refusing to guess")]
    BadId { path: PathBuf, text: String },
    #[error(
        "the state in this data dir was written by a single server without Raft (index {index}); \
         a cluster member cannot take it over: start the cluster with empty data dirs"
    )]
    StandaloneState { index: u64 },
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("starting the replica's threads: {0}")]
    Runtime(std::io::Error),
}

/// Threads of the replica's runtime. Applying entries and syncing the log
/// each hold a thread while the disk works (openraft's storage calls are
/// blocking here); with two, a server catching up after a restart answered
/// votes late and a failover could take a second election round (the kill
/// loop: p90 6.1 s with 2 threads, 4.6 s with 4). Idle threads cost nothing.
const RAFT_THREADS: usize = 4;

impl Cluster {
    /// Starts this server's replica over `store` with its log in
    /// `data_dir/raft`, makes `store.submit` go through the log, and
    /// starts forming or joining the cluster in the background.
    ///
    /// The replica runs on a runtime of its own (`herder-raft` threads):
    /// appending to the log and applying entries to the store wait for the
    /// disk, and on the caller's runtime (the agent's single-threaded actix
    /// system) every such wait would stop every actor and request with it.
    pub async fn start(
        settings: ClusterSettings,
        data_dir: &Path,
        store: StateStore,
    ) -> Result<Cluster, ClusterError> {
        if store.applied_position().is_none() && store.latest_index() > 0 {
            return Err(ClusterError::StandaloneState {
                index: store.latest_index(),
            });
        }
        let id = load_or_create_id(data_dir)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RAFT_THREADS)
            .thread_name("herder-raft")
            .enable_all()
            .build()
            .map_err(ClusterError::Runtime)?;
        let transport = HttpTransport::over(settings.client(RPC_TIMEOUT));
        let starting = runtime.spawn(RaftNode::start(
            id,
            data_dir.to_path_buf(),
            Arc::new(store.clone()),
            transport,
            settings.raft.clone(),
        ));
        let node = match starting.await {
            Ok(node) => node?,
            Err(e) => {
                runtime.shutdown_background();
                return Err(ClusterError::Runtime(std::io::Error::other(e)));
            }
        };
        let cluster = Cluster::assemble(runtime, node, store.clone(), settings);
        store.set_replicator(Arc::new(replicator::LogReplicator::new(cluster.clone())));
        // The pre-vote campaign stands in for openraft's election timer.
        cluster.node().raft().runtime_config().elect(false);
        cluster.spawn(election::campaign(cluster.clone()));
        cluster.spawn(leadership::follow(cluster.clone()));
        cluster.spawn(bootstrap::form_or_join(cluster.clone()));
        cluster.spawn(liveness::watch(cluster.clone()));
        tracing::info!(id, server = %cluster.settings().node, "raft replica started");
        Ok(cluster)
    }
}

/// The Raft types, re-exported for the server crate's leadership follower.
pub type Metrics = RaftMetrics<NodeId, ServerNode>;
pub use openraft::ServerState as RaftState;

/// This server's ID: read back from `data_dir/raft-id`, or a new random
/// one written there (atomically) on a server's first start.
fn load_or_create_id(data_dir: &Path) -> Result<NodeId, ClusterError> {
    let path = data_dir.join(ID_FILE);
    let io = |source| ClusterError::IdFile {
        path: path.clone(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|_| ClusterError::BadId {
            path: path.clone(),
            text,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if data_dir.join(crate::node::LOG_DIR).exists() {
                return Err(io(std::io::Error::other(
                    "the Raft log exists but its server ID is gone; refusing to rejoin as a stranger",
                )));
            }
            // Zero is never used: a zero ID is easy to mistake for unset.
            let id = rand::random::<u64>().max(1);
            let temp = data_dir.join(format!("{ID_FILE}.tmp"));
            std::fs::write(&temp, format!("{id}\n")).map_err(io)?;
            std::fs::rename(&temp, &path).map_err(io)?;
            Ok(id)
        }
        Err(e) => Err(io(e)),
    }
}
