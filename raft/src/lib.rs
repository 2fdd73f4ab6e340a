//! herder's replicated state log: the state store's commands replicated
//! between servers with openraft (0.9, storage-v2), the foundation of
//! issue 18 (several servers, high availability).
//!
//! # What is here
//!
//! - [`entry`]: the log entry, a versioned batch of `herder::state::Command`s
//!   ([`LogEntry`]) and the answer to a write ([`WriteResponse`]);
//!   membership and the leader's no-op are openraft's own entries.
//! - [`version_gate`]: an entry kind is written only when every server's
//!   version applies it ([`can_write`]).
//! - [`log_store`]: the Raft log, vote and committed position in a sled
//!   database of its own, `<data dir>/raft`, flushed before any write is
//!   reported done.
//! - [`state_machine`]: openraft's state machine over a
//!   [`StateMachineTarget`] (apply a batch at an index, export and import a
//!   snapshot, keep the log position atomically with the state).
//! - [`memory_target`]: an in-memory target, until the state store is one.
//! - [`transport`]: the [`Transport`] seam under openraft's network traits;
//!   [`router`]: the in-process transport of the tests with fault injection
//!   (drop, delay, partition one server, heal); [`http`]: the Raft RPCs on
//!   the RPC port, signed both ways with the cluster key.
//! - [`node`]: one server's replica ([`RaftNode`]) and herder's timings
//!   ([`default_config`]).
//!
//! # What the state store must grow to be the target
//!
//! Today `StateStore` numbers commands itself (each submitted command gets
//! the next index, one at a time) and its durable form is its own WAL plus
//! sled checkpoint. To be driven by the log it needs, in `src/state`:
//!
//! ```text
//! impl StateSnapshot {
//!     /// All of `commands` at one `index` (> latest_index), each all or
//!     /// nothing as `apply`; a rejected command leaves the others applied.
//!     pub fn apply_batch(&mut self, index: u64, commands: &[Command])
//!         -> Vec<Result<AppliedChanges, ApplyError>>;
//! }
//! impl StateStore {
//!     /// Queues a batch at `index` (the log index; gaps allowed: membership
//!     /// and no-op entries have none), persisting `position` (opaque bytes)
//!     /// in the same WAL record; an index <= latest_index is a replay and
//!     /// answers Ok(vec![]) without change.
//!     pub fn submit_batch_at(&self, index: u64, commands: Vec<Command>, position: Vec<u8>)
//!         -> oneshot::Receiver<Result<Vec<Result<ApplyOutcome, ApplyError>>, StoreError>>;
//!     /// The position stored with the latest applied batch (None: never set).
//!     pub fn applied_position(&self) -> Option<Vec<u8>>;
//!     /// Folds the WAL into the checkpoint and streams the checkpoint (the
//!     /// sled rows, format version and meta row) with its position.
//!     pub fn export_checkpoint(&self, out: &mut dyn std::io::Write)
//!         -> Result<Vec<u8> /* position */, StoreError>;
//!     /// Replaces the whole state by a checkpoint from another server
//!     /// (migrating an older format as `open` does), atomically with
//!     /// `position`; watchers and subscribers see one jump to its index
//!     /// (subscribers get `missed`).
//!     pub fn import_checkpoint(&self, checkpoint: &mut dyn std::io::Read, position: Vec<u8>)
//!         -> Result<(), StoreError>;
//! }
//! ```
//!
//! With those, `impl StateMachineTarget for StateStore` is a few lines in
//! this crate, and in a cluster the store's own WAL is the second copy of
//! the log: the state store can then run in a mode where the Raft log is
//! the only log and the WAL only carries `position` with the checkpoint
//! (a `-dev` single server keeps today's path and its speed).
//!
//! # How herder will wire it
//!
//! - Every write path that calls `StateStore::submit` today calls
//!   `RaftNode::write` instead on the leader; `ServerApi` on a follower is
//!   implemented by a remote leader (forwarding over the RPC port), so the
//!   HTTP layer, ACLs and audit stay in one place. A write's answer carries
//!   [`WriteResponse::index`], the state index the reads and blocking
//!   queries wait on.
//! - Leader duties: a task watches `raft.metrics()`; when this server
//!   becomes leader (and after its first no-op entry is applied, so its
//!   replica holds every committed write) it starts the broker, blocked
//!   evals, plan queue and applier, heartbeat timers (spread over the
//!   failover window), periodic launcher, drainer, deployment watcher and
//!   GC, restored from the state; on losing leadership it stops them.
//! - Workers on every server dequeue from the leader's broker, then call
//!   `StateStore::snapshot_min_index(eval.wait_index)` on the local replica
//!   with the seed's backoff (nack and back off while far behind), schedule
//!   on it and submit the plan to the leader; the leader's plan re-check
//!   catches a stale replica.
//! - The version gate: servers advertise their version (membership
//!   metadata or the RPC port's status call); the leader calls
//!   [`can_write`] before proposing an entry of a new kind.
//! - The RPC port: the agent's actix-web server for `-rpc-port` mounts
//!   [`http::configure`] (with the `server { encrypt }` key), and each
//!   server's [`RaftNode`] gets an [`HttpTransport`] with the same key;
//!   membership carries each server's RPC address as `BasicNode::addr`.
//!   Bootstrap (`-bootstrap-expect`, `-retry-join`), forwarding, the
//!   workers' broker and plan calls and the leader's duties are the next
//!   steps of issue 18; they need nothing else from this crate.

// Openraft's traits fix the error types (`StorageError`, `ConfigError`,
// `RPCError`: 128-224 bytes); helpers return them as they are rather than
// boxing them only to unbox at the trait boundary.
#![allow(clippy::result_large_err)]

pub mod entry;
pub mod http;
pub mod log_store;
pub mod memory_target;
pub mod node;
pub mod router;
pub mod state_machine;
pub mod store_target;
pub mod transport;
pub mod version_gate;

pub use entry::{CommandResult, EntryKind, LogEntry, WriteResponse};
pub use http::{ClusterKey, HttpTransport, KeyError};
pub use log_store::SledLogStore;
pub use memory_target::{AppliedBatch, MemoryTarget};
pub use node::{default_config, RaftNode, StartError, WriteError, LOG_DIR};
pub use router::{Router, RouterError};
pub use state_machine::{
    BatchToApply, Position, StateMachineAdapter, StateMachineTarget, TargetError, TargetSnapshot,
};
pub use transport::{Network, Transport};
pub use version_gate::{can_write, GateError};

/// A server's ID in the Raft group.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// The Raft types of herder's replicated state log.
    pub TypeConfig:
        D = LogEntry,
        R = WriteResponse,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);
