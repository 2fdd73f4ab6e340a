//! The state store: indexed tables changed only by `Command`s applied at
//! strictly growing indexes, O(1) snapshots, blocking waits for changes,
//! and durable persistence in sled with group commit.
//!
//! - [`snapshot`]: `StateSnapshot`, the tables at one index, and `apply`.
//! - [`command`]: the commands, serde-versioned.
//! - [`changes`]: table names, row keys, what a command changed.
//! - [`store`]: `StateStore`, the single writer, waits and subscriptions.
//! - [`persist`]: the sled layout, loading and format checks.
//! - [`quarantine`]: rows that could not be loaded at open, kept aside.
//! - [`sled_lock`]: waiting out sled's lock on a data dir just closed.

pub mod acl_tables;
mod alloc_row;
mod alloc_table;
mod apply;
pub mod changes;
pub mod command;
pub mod fixtures;
pub mod persist;
pub mod quarantine;
mod scheduler_view;
pub mod sled_lock;
pub mod snapshot;
pub mod store;
mod tables;
mod wal;

#[cfg(test)]
mod acl_store_tests;
#[cfg(test)]
mod apply_deployment_tests;
#[cfg(test)]
mod apply_tests;
#[cfg(test)]
mod replicated_tests;
#[cfg(test)]
mod store_tests;

pub use apply::JOB_TRACKED_VERSIONS;
pub use changes::{AppliedChanges, JobKey, Row, RowChange, RowKey, Table, TableSet, VariableKey};
pub use command::{
    AllocClientUpdate, Command, CommandEnvelope, PlanResults, VariableLockOp, COMMAND_VERSION,
};
pub use persist::FORMAT_VERSION;
pub use quarantine::{QuarantineSource, QuarantinedRecord};
pub use snapshot::StateSnapshot;
pub use store::{
    node_allocs_index, ApplyOutcome, BatchOutcome, Replicator, StagedWrite, StateStore,
    StoreOptions, Subscription,
};

use crate::structs::NodeId;

/// Why a command was rejected. A rejected command changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ApplyError {
    #[error("index {index} is not after the latest applied index {latest}")]
    StaleIndex { index: u64, latest: u64 },
    #[error("job {job_id:?} in namespace {namespace:?} does not exist")]
    JobNotFound { namespace: String, job_id: String },
    #[error(
        "enforcing job modify index {expected}: job exists with conflicting job modify index {actual}"
    )]
    JobModifyIndexConflict { expected: u64, actual: u64 },
    #[error("node {0} does not exist")]
    NodeNotFound(NodeId),
    #[error("node {0} is draining: its scheduling eligibility cannot be set to eligible")]
    NodeDraining(NodeId),
    #[error("scheduler configuration check-and-set failed: expected modify index {expected}, found {actual}")]
    CasMismatch { expected: u64, actual: u64 },
    #[error("invalid command: {0}")]
    Invalid(String),
    /// Nomad's words: the operator needs the reset index to bootstrap again.
    #[error("ACL bootstrap already done (reset index: {reset_index})")]
    AclBootstrapDone { reset_index: u64 },
    #[error("idempotency token already used by dispatched job {job_id:?}")]
    DispatchTokenUsed { job_id: String },
    #[error("deployment {0:?} not found")]
    DeploymentNotFound(String),
    /// A deployment change refused, in Nomad's words (e.g. "can't promote
    /// terminal deployment").
    #[error("{0}")]
    DeploymentRefused(String),
    /// A namespace write refused, or a write into a namespace that does
    /// not exist, in Nomad's words.
    #[error("{0}")]
    NamespaceRefused(String),
    /// A variable's check-and-set failed: its `ModifyIndex` (0: it does
    /// not exist) is not the one the writer expected.
    #[error("variable check-and-set failed: expected modify index {expected}, found {actual}")]
    VariableConflict { expected: u64, actual: u64 },
    /// A variable's lock is held by someone else (or not held at all, for
    /// a renew or release).
    #[error("{0}")]
    VariableLocked(String),
    /// A variable or root key that is not there.
    #[error("{0}")]
    KeyringNotFound(String),
    /// A keyring change refused (e.g. removing a key still in use).
    #[error("{0}")]
    KeyringRefused(String),
}

/// Why the store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Rejected(#[from] ApplyError),
    #[error("data dir {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: sled::Error,
    },
    #[error("state store I/O: {0}")]
    Io(#[from] sled::Error),
    #[error("state log {path}: {source}")]
    Log {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("data dir format version {found} is newer than this build understands ({known}); refusing to open it")]
    FormatTooNew { found: u32, known: u32 },
    #[error("data dir is corrupt at key {key}: {reason}; refusing to open it")]
    Corrupt { key: String, reason: String },
    #[error("migrating the data dir: {0}")]
    Migration(#[from] herder_migrations::MigrationError),
    #[error("timed out waiting for index {index} (latest applied: {latest})")]
    Timeout { index: u64, latest: u64 },
    #[error("the state store is closed")]
    Closed,
    #[error("the state store failed earlier and accepts no more writes: {0}")]
    Failed(String),
    #[error("state checkpoint archive: {0}")]
    Checkpoint(String),
    /// A replica's write that the replicated log did not commit (no
    /// leader, the leader unreachable, this server shutting down); it may
    /// be retried.
    #[error("the write was not committed: {0}")]
    NotCommitted(String),
    #[error("a checkpoint at index {index} cannot replace the state at index {latest}: only a newer one can")]
    ImportBehind { index: u64, latest: u64 },
}
