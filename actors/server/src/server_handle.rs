//! What a started server hands out, [`ServerHandle`], and why starting one
//! fails, [`ServerError`]. Apart from `server.rs`'s start-up sequence so
//! that the parts that sequence starts (the cluster member, the front
//! door's forwarding) can name the handle without importing it back.

use crate::blocked_evals::BlockedEvals;
use crate::broker::EvalBroker;
use crate::gc::GarbageCollector;
use crate::leader_duties::LeaderDuties;
use crate::node_tracker::NodeTracker;
use crate::periodic::PeriodicLauncher;
use crate::plan_applier::PlanApplier;
use crate::worker_supervisor::{WorkerConfigError, WorkerSupervisor};
use actix::Addr;
use herder::state::{StateStore, StoreError};
use herder::structs::validate::JobLimits;
use herder_common::nomad_metrics::Board;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    // The store's message already carries its cause (`StoreError` both
    // prints and chains it), so it is printed here and not chained again:
    // a walked error chain states the cause once.
    #[error("state store at {path}: {error}")]
    Store { path: PathBuf, error: StoreError },
    #[error("state store at {path}: opening was interrupted")]
    OpenInterrupted { path: PathBuf },
    #[error("server.num_schedulers / enabled_schedulers")]
    Workers(#[from] WorkerConfigError),
    #[error("data dir {path}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// This server could not take its place in the cluster.
    #[error("cluster: {0}")]
    Cluster(String),
    #[error("RPC port {addr}")]
    RpcBind {
        addr: String,
        source: std::io::Error,
    },
}

/// What the HTTP API and the agent use to reach the server: its store (for
/// reads), its limits, its published figures and its place in a cluster.
/// Cheap to clone: every field is a handle.
///
/// The server's actors are this crate's own: everything outside it acts on
/// them through `ServerApi` (where forwarding to a leader, ACL checks and
/// auditing plug in), so they are not public fields. Tests that drive one
/// actor directly use the hidden accessors below.
#[derive(Clone)]
pub struct ServerHandle {
    pub store: StateStore,
    pub(crate) broker: Addr<EvalBroker>,
    pub(crate) blocked: Addr<BlockedEvals>,
    pub(crate) plan_applier: Addr<PlanApplier>,
    pub(crate) nodes: Addr<NodeTracker>,
    pub(crate) workers: Addr<WorkerSupervisor>,
    pub(crate) periodic: Addr<PeriodicLauncher>,
    pub(crate) gc: Addr<GarbageCollector>,
    /// Switches the leader's duties on and off as leadership moves.
    pub(crate) duties: LeaderDuties,
    /// How large a job may be (`[limits]`); every write path checks it.
    pub job_limits: JobLimits,
    /// Where the server publishes its Nomad-named figures (job summaries,
    /// job statuses) for `/v1/metrics`.
    pub nomad_metrics: Board,
    /// This server's place in a cluster of servers; `None` for a single
    /// server without Raft.
    pub cluster: Option<herder_raft::Cluster>,
    /// When the server started (a single server's `StableSince` in
    /// autopilot's health: healthy since then).
    pub started_at: std::time::SystemTime,
}

/// The server's actors, for tests that drive one of them directly; not an
/// API (everything else goes through `ServerApi`).
impl ServerHandle {
    #[doc(hidden)]
    pub fn test_broker(&self) -> &Addr<EvalBroker> {
        &self.broker
    }

    #[doc(hidden)]
    pub fn test_node_tracker(&self) -> &Addr<NodeTracker> {
        &self.nodes
    }

    #[doc(hidden)]
    pub fn test_workers(&self) -> &Addr<WorkerSupervisor> {
        &self.workers
    }

    #[doc(hidden)]
    pub fn test_periodic(&self) -> &Addr<PeriodicLauncher> {
        &self.periodic
    }

    #[doc(hidden)]
    pub fn test_gc(&self) -> &Addr<GarbageCollector> {
        &self.gc
    }
}
