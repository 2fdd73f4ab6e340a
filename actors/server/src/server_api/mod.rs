//! The server's operations as typed async Rust calls: the one front door
//! of the server, for the HTTP API and for programs that embed herder
//! (`Agent::api()`) alike.
//!
//! Nomad splits its server into RPC endpoints (`Job.Register`,
//! `Node.UpdateDrain`, `Operator.SchedulerSetConfiguration`, ...) that the
//! HTTP agent calls; this module is that layer. An HTTP handler decodes the
//! request, calls a method here and renders the answer, so a job registered
//! through [`ServerApi::register_job`] goes through exactly the checks of
//! `PUT /v1/jobs` (validation, `RejectJobRegistration`, `EnforceIndex`,
//! `PreserveCounts`) and is durable when the call returns. Each operation
//! takes a typed request (a struct where it has options) and answers a
//! typed result or a [`ServerApiError`] whose class decides the HTTP status.
//!
//! The operations, by subject:
//! - [`jobs`]: register, deregister, revert, stability, dispatch, scale,
//!   evaluate, periodic force;
//! - [`nodes`]: the node protocol (register, heartbeat, allocation
//!   updates) and the operator's eligibility, drain, evaluate and purge;
//! - [`plan`]: a job's dry run (what registering it would do);
//! - [`allocs_evals`]: allocation stop, evaluation reads and waits;
//! - [`deployments`]: deployment reads, promotion, failure, pause and
//!   resume, and allocation health set by hand;
//! - [`operator`]: the scheduler configuration (with check-and-set),
//!   forced garbage collection, job summary reconciliation;
//! - [`namespaces`]: namespace create, update and delete;
//! - [`services`]: the native service catalog (a client's registrations,
//!   an operator's delete);
//! - [`snapshot`]: operator snapshots, the whole state saved and restored;
//! - [`workers`]: this server's pool of scheduling workers (size and
//!   scheduler types), as `/v1/agent/schedulers` shows and sets it.
//!
//! Every write leaves through one private seam, `write_path::WritePath`:
//! the place where forwarding to a Raft leader, ACL checks and the audit
//! log plug in (a remote leader is a second variant of it). Reads come
//! from the local store's snapshot and never cross it. The worker pool is
//! this process's own and does not cross it either.

pub mod acl;
pub mod allocs_evals;
pub mod deployments;
mod error;
pub mod forward;
pub mod jobs;
pub mod namespaces;
pub mod nodes;
pub mod operator;
pub mod plan;
pub mod services;
pub mod snapshot;
pub mod variables;
pub mod workers;
mod write_path;

pub use allocs_evals::AllocStopResult;
pub use deployments::{DeploymentUpdateResult, PromoteCanaries};
pub use error::{store_error, ServerApiError};
pub use jobs::{
    check_job, DispatchJob, DispatchResult, JobWriteResult, PeriodicLaunch, RegisterJob, ScaleJob,
    DISPATCH_PAYLOAD_SIZE_LIMIT,
};
pub use nodes::{DrainNode, DrainSpec, NodeReply, NodeWriteResult};
pub use operator::{
    AutopilotConfigWrite, GcReport, SchedulerConfigRead, SchedulerConfigWrite, SetAutopilotConfig,
    SetSchedulerConfig,
};
pub use plan::JobPlan;
pub use snapshot::{RestoredSnapshot, SavedSnapshot};
pub use variables::{LockRequest, PutVariable, VariableWrite};
pub use workers::{SetWorkerConfig, WorkerConfigInfo, WorkerInfo, WorkerStatus, WorkersInfo};

use crate::server_handle::ServerHandle;
use crate::worker_supervisor::WorkerSupervisor;
use error::shutting_down;
use herder::state::{StateSnapshot, StateStore, TableSet};
use herder::structs::validate::JobLimits;
use std::time::{Duration, Instant};
use write_path::WritePath;

/// A cheap, clonable handle to a running server's operations.
#[derive(Clone)]
pub struct ServerApi {
    /// Reads: snapshots and watches of the local state.
    store: StateStore,
    /// How large a job may be (`[limits]`); every job write checks it.
    job_limits: JobLimits,
    /// This server's scheduling workers (agent-local, not replicated state).
    workers: actix::Addr<WorkerSupervisor>,
    /// Where every write goes.
    writes: WritePath,
    /// The leader's duties, restarted over a restored snapshot.
    duties: crate::leader_duties::LeaderDuties,
    /// This server's cluster (`None`: a single server without Raft).
    cluster: Option<herder_raft::Cluster>,
    /// When the server started.
    started_at: std::time::SystemTime,
}

impl std::fmt::Debug for ServerApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerApi")
            .field("index", &self.store.snapshot().latest_index())
            .field("writes", &self.writes)
            .finish_non_exhaustive()
    }
}

impl ServerApi {
    /// The operations of a running server (`Agent::api()` gives one).
    pub fn new(server: ServerHandle) -> ServerApi {
        ServerApi::of(&server)
    }

    /// As [`new`](Self::new), from a borrowed handle (the HTTP API makes
    /// one of these per request).
    pub fn of(server: &ServerHandle) -> ServerApi {
        ServerApi {
            writes: WritePath::of(server),
            store: server.store.clone(),
            job_limits: server.job_limits,
            workers: server.workers.clone(),
            duties: server.duties.clone(),
            cluster: server.cluster.clone(),
            started_at: server.started_at,
        }
    }

    /// The whole read-only state at this moment.
    pub fn snapshot(&self) -> StateSnapshot {
        self.store.snapshot()
    }

    /// Waits until `check` answers `Some` for the state, re-checking each
    /// time one of `tables` changes (woken by the store, never polling).
    pub async fn wait_until<T>(
        &self,
        tables: TableSet,
        timeout: Duration,
        mut check: impl FnMut(&StateSnapshot) -> Option<T>,
    ) -> Result<T, ServerApiError> {
        let deadline = Instant::now() + timeout;
        loop {
            let snap = self.snapshot();
            if let Some(answer) = check(&snap) {
                return Ok(answer);
            }
            let seen = tables
                .iter()
                .map(|t| snap.table_index(t))
                .max()
                .unwrap_or(0);
            let changed = self.store.watch(tables, seen);
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, changed).await {
                Err(_) => return Err(ServerApiError::Timeout(timeout)),
                // The store dropped the watch: it is closing.
                Ok(Err(_)) => return Err(shutting_down()),
                Ok(Ok(_)) => {}
            }
        }
    }
}

fn unix_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
