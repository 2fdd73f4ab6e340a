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
//! - [`operator`]: the scheduler configuration (with check-and-set),
//!   forced garbage collection, job summary reconciliation;
//! - [`workers`]: this server's pool of scheduling workers (size and
//!   scheduler types), as `/v1/agent/schedulers` shows and sets it.
//!
//! Every write leaves through one private seam, `write_path::WritePath`:
//! the place where forwarding to a Raft leader, ACL checks and the audit
//! log plug in (a remote leader is a second variant of it). Reads come
//! from the local store's snapshot and never cross it. The worker pool is
//! this process's own and does not cross it either.

pub mod allocs_evals;
pub mod forward;
pub mod jobs;
pub mod nodes;
pub mod operator;
pub mod plan;
pub mod workers;
mod write_path;

pub use allocs_evals::AllocStopResult;
pub use jobs::{
    check_job, DispatchJob, DispatchResult, JobWriteResult, PeriodicLaunch, RegisterJob, ScaleJob,
    DISPATCH_PAYLOAD_SIZE_LIMIT,
};
pub use nodes::{DrainNode, DrainSpec, NodeReply, NodeWriteResult};
pub use operator::{GcReport, SchedulerConfigRead, SchedulerConfigWrite, SetSchedulerConfig};
pub use plan::JobPlan;
pub use workers::{SetWorkerConfig, WorkerConfigInfo, WorkerInfo, WorkerStatus, WorkersInfo};

use crate::server::ServerHandle;
use crate::worker_supervisor::WorkerSupervisor;
use herder::state::{ApplyError, StateSnapshot, StateStore, StoreError, TableSet};
use herder::structs::validate::JobLimits;
use std::time::{Duration, Instant};
use write_path::WritePath;

/// Why a call was refused. The class decides the HTTP status when the
/// call came over HTTP: `Invalid` 400, `NotFound` 404, `Forbidden` 403,
/// `Unavailable` 503, `Internal` 500.
#[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ServerApiError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

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

/// A write's outcome from the store: rejections are the caller's fault,
/// a closed or failed store is the server's.
pub fn store_error(e: StoreError) -> ServerApiError {
    match e {
        StoreError::Rejected(ApplyError::JobNotFound { .. }) => {
            ServerApiError::NotFound("job not found".into())
        }
        StoreError::Rejected(ApplyError::NodeNotFound(_)) => {
            ServerApiError::NotFound("node not found".into())
        }
        StoreError::Rejected(r) => {
            let message = r.to_string();
            // Nomad's check-and-set refusal reads "Enforcing job modify
            // index ..."; the store's sentences are lower-case.
            if message.starts_with("enforcing") {
                ServerApiError::Invalid(capitalize(&message))
            } else {
                ServerApiError::Invalid(message)
            }
        }
        StoreError::Closed => shutting_down(),
        other => ServerApiError::Internal(other.to_string()),
    }
}

fn shutting_down() -> ServerApiError {
    ServerApiError::Unavailable("the server is shutting down".into())
}

/// Nomad's messages start with a capital ("Enforcing job modify index
/// ..."); the store's errors are lower-case sentences.
fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn unix_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
