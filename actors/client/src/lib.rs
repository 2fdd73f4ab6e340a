//! The node-local half of the client agent: what a herder node does on its
//! own machine, whatever way it talks to the servers.
//!
//! - [`fingerprint`] describes the machine as a [`herder::structs::Node`];
//! - [`driver`] runs tasks (`raw_exec` real processes, `mock_driver` timers);
//! - [`task_dir`] builds an allocation's directories and task environment;
//! - [`logs`] writes rotated task logs and reads (or follows) them back;
//! - [`readiness`] decides whether the node may be given work;
//! - [`alloc_runner`] / [`task_runner`] run one allocation's tasks with their
//!   restart policy and report every change as an [`AllocUpdate`];
//! - [`alloc_manager`] keeps one runner per allocation assigned to the node;
//! - [`alloc_services`] resolves an allocation's services to catalog
//!   registrations and runnable checks; [`checks`] runs one check,
//!   [`check_watcher`] runs an allocation's checks on their intervals;
//! - [`health_watcher`] decides an allocation's health once (task states
//!   or checks, `min_healthy_time`, `healthy_deadline`);
//! - [`metrics`] keeps the node's figures under Nomad's names.
//!
//! The server-facing part only feeds allocations in (`SyncAllocs` with what
//! the servers assign, `RestoreAll` at start, `ShutdownAll` at exit) and
//! ships the `AllocUpdate`s it receives out. A user's [`AllocControl`]
//! (`nomad alloc restart|signal`) travels the same chain down, manager to
//! allocation runner to task runner to driver, and its answer (or
//! [`ControlError`]) back up to the HTTP API.

pub mod alloc_fs;
pub mod alloc_manager;
pub mod alloc_runner;
pub mod alloc_services;
pub mod artifact;
pub mod check_watcher;
pub mod checks;
mod clock;
pub mod driver;
pub mod fingerprint;
pub mod health_watcher;
pub mod logs;
pub mod metrics;
pub mod node_protocol;
pub mod readiness;
pub mod restart;
pub mod server_link;
pub mod service_sync;
pub mod stats;
pub mod task_dir;
pub mod task_files;
pub mod task_runner;
pub mod template;

pub use clock::now_nanos;
use herder::structs::{
    AllocDeploymentStatus, AllocId, ClientStatus, ServiceRegistration, TaskState, VecMap,
};

/// What an allocation runner reports after every change: the allocation's
/// client-side state, whole, so the shipper can keep only the newest one per
/// allocation when it batches.
#[derive(Clone, Debug, PartialEq, actix::Message)]
#[rtype(result = "()")]
pub struct AllocUpdate {
    pub alloc_id: AllocId,
    pub client_status: ClientStatus,
    pub client_description: String,
    pub task_states: VecMap<String, TaskState>,
    /// The node (not the task) made the allocation fail: driver missing or
    /// unhealthy, binary missing, I/O error. Feeds the node's flaky state.
    pub node_failure: bool,
    /// The allocation's health once decided (see [`health_watcher`]),
    /// carried by every update after that so that batching never drops it;
    /// the servers count it once.
    pub deployment_status: Option<AllocDeploymentStatus>,
    /// The registrations the allocation wants in the service catalog now:
    /// its services while its tasks run, none once it stops.
    pub services: Vec<ServiceRegistration>,
}

/// What a user asks of a running allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocControl {
    /// Restart `task`, or every running task of the allocation: each is
    /// killed as for a stop and started again at once, without counting
    /// against its restart policy.
    Restart { task: Option<String> },
    /// Send `signal` to `task`, or to every running task.
    Signal {
        task: Option<String>,
        signal: String,
    },
}

impl AllocControl {
    /// The one task asked for, if any.
    pub fn task(&self) -> Option<&str> {
        match self {
            AllocControl::Restart { task } | AllocControl::Signal { task, .. } => task.as_deref(),
        }
    }
}

/// Why an [`AllocControl`] was not carried out. The texts start as Nomad's
/// do; the HTTP API picks the status by variant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// No runner for this allocation on this node.
    #[error("Unknown allocation \"{0}\"")]
    UnknownAlloc(AllocId),
    /// The allocation is over (or being stopped): nothing of it runs.
    #[error("Task not running: allocation \"{alloc_id}\" is {why}")]
    Terminal { alloc_id: AllocId, why: String },
    /// The allocation has no task of this name.
    #[error("Task not found: the allocation has no task {0:?}")]
    UnknownTask(String),
    /// The task (or, with no task named, every task) is not running now.
    #[error("Task not running{}", .0.as_ref().map(|t| format!(": {t:?}")).unwrap_or_default())]
    NotRunning(Option<String>),
    /// The signal has no name or number a driver knows.
    #[error("{0}")]
    InvalidSignal(String),
    /// The driver failed to deliver it.
    #[error("{0}")]
    Driver(driver::DriverError),
}

#[cfg(test)]
mod tests;
