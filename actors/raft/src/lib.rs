//! herder's replicated state log: the state store's commands replicated
//! between servers with openraft (0.9, storage-v2), the foundation of
//! issue 18 (several servers, high availability).
//!
//! # What is here
//!
//! - [`entry`]: the log entry, a versioned batch of `herder::state::Command`s
//!   ([`LogEntry`]) and the answer to a write ([`WriteResponse`]);
//!   membership and the leader's no-op are openraft's own entries.
//! - [`server_node`]: what the membership records about each server
//!   ([`ServerNode`]: RPC and HTTP addresses, name, version).
//! - [`version_gate`]: an entry kind is written only when every server's
//!   version applies it ([`can_write`]); [`RaftNode::propose`] checks it
//!   against the membership before every write.
//! - [`log_store`]: the Raft log, vote and committed position in a sled
//!   database of its own, `<data dir>/raft`, flushed before any write is
//!   reported done.
//! - [`state_machine`]: openraft's state machine over a
//!   [`StateMachineTarget`] (apply a batch at an index, export and import a
//!   snapshot, keep the log position atomically with the state).
//! - [`store_target`]: herder's `StateStore` as the target (the real one);
//!   [`memory_target`]: an in-memory target for the tests of this crate.
//! - [`transport`]: the [`Transport`] seam under openraft's network traits;
//!   [`router`]: the in-process transport of the tests with fault injection
//!   (drop, delay, partition one server, heal); [`http`]: the Raft RPCs on
//!   the RPC port, signed both ways with the cluster key; [`faults`]: the
//!   same faults injected into the HTTP path of a real cluster, for tests.
//! - [`node`]: one server's replica ([`RaftNode`]) and herder's timings
//!   ([`default_config`]).
//!
//! # The state store as the state machine
//!
//! `StateStore` (in `src/state`) is driven by the log through four calls,
//! and [`store_target`] maps the trait onto them:
//!
//! ```text
//! StateSnapshot::apply_batch(&mut self, index, Vec<Command>)
//!     -> Result<Vec<Result<AppliedChanges, ApplyError>>, ApplyError /* replay */>;
//! StateStore::submit_batch_at(&self, index, Vec<Command>, position: Vec<u8>)
//!     -> oneshot::Receiver<Result<BatchOutcome, StoreError>>;   // + apply_batch_at, apply_batches_at
//! StateStore::applied_position(&self) -> Option<Vec<u8>>;
//! StateStore::export_checkpoint(&self, &mut dyn Write) -> Result<Option<Vec<u8>> /* position */, StoreError>;
//! StateStore::import_checkpoint(&self, &mut dyn Read, position: Vec<u8>) -> Result<(), StoreError>;
//! ```
//!
//! - A batch is applied at the entry's log index (gaps allowed; all its
//!   commands share the index; a rejected command leaves the others
//!   applied); the state's index becomes the entry's even for an empty
//!   or all-rejected batch, so `snapshot_min_index(WriteResponse::index)`
//!   is always answered. A batch at or below the state's index is a
//!   replay and changes nothing.
//! - The position is a field of the store's meta row, so it is written in
//!   the same WAL record (and, folded, the same sled batch) as the rows it
//!   describes, and read back at open: a restarted server resumes exactly
//!   after what its store holds (`tests/store_cluster.rs` checks nothing
//!   is applied twice).
//! - An operator's restore is one entry ([`entry::RestoreEntry`]): the
//!   adapter applies the batches before it, then the target replaces its
//!   state at the entry's state index or one past the saved index,
//!   whichever is further. From then on every state index runs that much
//!   ahead of its log index (`Position::index_offset`, kept in the
//!   position and in Raft snapshots), identically on every replica.
//! - The adapter hands every entry openraft applies at once to
//!   `apply_batches`; the store queues them together, so its group commit
//!   makes them durable with one sync.
//! - A checkpoint is the published state (an O(1) snapshot, taken while
//!   writes go on) as a versioned archive: a magic, then one checksummed
//!   WAL-format record holding every row exactly as sled stores it and the
//!   meta row with the data format version. Import goes through a
//!   temporary sled database and the same loader as `open` (older formats
//!   migrated, bad rows left out and logged, indexes rebuilt), replaces
//!   sled's rows in one batch and empties the WAL, then publishes: waiters
//!   are answered, the change buffer is emptied and subscribers' streams
//!   end, so a follower that resubscribes is told it `missed` changes and
//!   resyncs from a snapshot.
//!
//! # What remains
//!
//! - **Two logs.** In a cluster each write is made durable twice on every
//!   server: the Raft log (`log_store`: a JSON entry in sled, one flush per
//!   append) and the store's WAL record (the changed rows, the meta row and
//!   the position, one `fdatasync` per group). The plan: a store driven by
//!   the log stops appending to its WAL and keeps only sled as its
//!   checkpoint; the Raft log is the WAL. `build_snapshot` then first folds
//!   the state into sled (with the position), and only what sled holds is
//!   purged from the log; at open the store loads sled and openraft replays
//!   the entries after the stored position (it does so today). Cost: a
//!   restart re-applies commands instead of decoding rows (more CPU per
//!   entry replayed, bounded by the snapshot policy), and a fold writes the
//!   whole changed state instead of appending records. Gain: one sync per
//!   commit instead of two, and no row encoding on the commit path.
//! - **Throughput.** `tests/throughput.rs` and the 3-server bench
//!   (docs/PERFORMANCE.md, "issue 18"): through Raft a write is an order
//!   of magnitude slower than `StateStore::submit` alone, so a single
//!   server and `-dev` keep the `submit` path (no Raft) until the log
//!   store batches its flushes and the store stops writing its own WAL.
//! - **Several commands at one index** reach subscribers as several
//!   `AppliedChanges` with the same index; the feed followers in
//!   `actors/` (`EvalRouter`, `PeriodicLauncher`, `NodeDrainer`) skip a
//!   change at or below their last index, so they would miss the second
//!   command of a batch. They must compare by (index, place in the batch)
//!   before writes carry several commands per entry (today's writers send
//!   one).
//! - **Snapshot size.** An archive is built and installed in memory (one
//!   `Vec`, at most 4 GiB: the record length is a `u32`); import holds the
//!   archive, a temporary sled copy and the decoded tables at once.
//!   Streaming it in chunks needs openraft's chunked snapshot data type
//!   instead of `Cursor<Vec<u8>>`.
//! - **Import order.** Only a checkpoint newer than the state is accepted
//!   (`StoreError::ImportBehind`; openraft never installs one at or below
//!   what was committed): an older one could be overtaken at the next open
//!   by WAL records it replaced. Rows an imported archive cannot load are
//!   logged, not kept in the quarantine tree.
//! - A store is driven by `submit` or by the log, never both (they number
//!   commands differently); nothing enforces it yet.

//! # How herder wires it
//!
//! - [`cluster::Cluster`] is one server's place in a cluster: the replica
//!   on a runtime of its own, the store's [`cluster::replicator`] (every
//!   `StateStore::submit` becomes a log entry, forwarded to the leader from
//!   a follower), forming and joining ([`cluster::bootstrap`]), the
//!   cluster's signed calls on the RPC port ([`cluster::rpc`]), member
//!   liveness and the dead server cleanup. `herder-server`'s
//!   `cluster_member` starts it before any actor can write, serves the RPC
//!   port, and switches the leader's duties as leadership moves;
//!   `leader_link` carries the workers' and the duties' calls to the
//!   leader; `herder-http`'s `cluster_reads` puts a read barrier before a
//!   follower's reads.
//! - Writers send one command per entry today, so the feed followers'
//!   "one change per index" holds; an entry of several commands needs them
//!   to compare by (index, place in the batch) first (above).
//! - The version gate runs in [`RaftNode::propose`] against every member's
//!   recorded [`ServerNode::version`].

// Openraft's traits fix the error types (`StorageError`, `ConfigError`,
// `RPCError`: 128-224 bytes); helpers return them as they are rather than
// boxing them only to unbox at the trait boundary.
#![allow(clippy::result_large_err)]

pub mod cluster;
pub mod entry;
pub mod faults;
pub mod http;
mod http_error;
pub mod log_store;
pub mod memory_target;
pub mod node;
pub mod router;
pub mod server_node;
pub mod state_machine;
pub mod store_target;
pub mod transport;
pub mod version_gate;

pub use cluster::{Cluster, ClusterError, ClusterSettings, Member};
pub use entry::{CommandResult, EntryKind, LogEntry, WriteResponse};
pub use faults::{FaultCounts, Faults};
pub use http::{ClusterKey, HttpError, HttpTransport, KeyError, SignedClient};
pub use log_store::SledLogStore;
pub use memory_target::{AppliedBatch, MemoryTarget};
pub use node::{
    config_with, default_config, ProposeError, RaftNode, StartError, WriteError, LOG_DIR,
};
pub use router::{Router, RouterError};
pub use server_node::ServerNode;
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
        Node = ServerNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);
