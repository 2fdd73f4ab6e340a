//! One server's replica: openraft wired to the sled log, a state machine
//! target and a transport, with herder's default timings.

use crate::entry::{LogEntry, WriteResponse};
use crate::log_store::SledLogStore;
use crate::state_machine::{StateMachineAdapter, StateMachineTarget};
use crate::transport::{Network, Transport};
use crate::version_gate::{can_write, GateError};
use crate::{NodeId, ServerNode, TypeConfig};
use herder::state::Command;
use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::ConfigError;
use openraft::{Config, LogId, Raft, SnapshotPolicy, StorageIOError};
use std::path::Path;
use std::sync::Arc;

/// The name of the log database inside a server's data dir.
pub const LOG_DIR: &str = "raft";

/// Why a replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("raft log in {path}: {source}")]
    Log {
        path: String,
        #[source]
        source: sled::Error,
    },
    #[error("starting raft: {0}")]
    Raft(#[from] Fatal<NodeId>),
}

/// Why openraft did not commit a write.
pub type WriteError = RaftError<NodeId, ClientWriteError<NodeId, ServerNode>>;

/// Why a proposed entry was not committed.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    /// Not every server runs a version that applies the entry's kind:
    /// nothing was proposed.
    #[error(transparent)]
    Gate(#[from] GateError),
    #[error(transparent)]
    Raft(#[from] WriteError),
}

/// Herder's Raft timings. A leader heartbeats every 100 ms. A follower
/// stands for election once it has heard nothing for the old leader's
/// lease (`election_timeout_max`, 600 ms) plus a timeout drawn afresh
/// each time from 300-600 ms, and only after a quorum answered its
/// pre-vote (`cluster::election`, which replaces openraft's own timer in
/// a cluster): a new leader 0.9-1.35 s after a leader's crash, one round.
/// (With openraft's timer and 500-1000 ms, a server that had once lost a
/// vote to a longer log waited 2 x `election_timeout_max` more, and a
/// server still catching up moved the term: failovers of 3-6 s.) Nomad's
/// defaults (1 s heartbeat timeout, 500 ms lease) are of the same order;
/// a busy 2-core machine still has room to miss several heartbeats
/// without an election. The in-process tests (`router`) keep openraft's
/// timer.
/// A snapshot every 8,192 entries; 1,024 entries are kept behind it so a
/// follower that is briefly behind catches up from the log.
pub fn default_config() -> Result<Config, ConfigError> {
    config_with(8192, 1024)
}

/// [`default_config`] with a snapshot every `snapshot_threshold` entries
/// and `trailing_logs` entries kept behind it (`server {
/// raft_snapshot_threshold, raft_trailing_logs }`).
pub fn config_with(snapshot_threshold: u64, trailing_logs: u64) -> Result<Config, ConfigError> {
    Config {
        cluster_name: "herder".to_string(),
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_threshold),
        max_in_snapshot_log_to_keep: trailing_logs,
        // Openraft gives every AppendEntries `heartbeat_interval` to be
        // answered: a follower must write and sync the entries in that
        // time, so they go in small batches (300, openraft's default, with
        // plans of hundreds of allocations each, timed out on a busy
        // machine and were sent again and again).
        max_payload_entries: 32,
        // A snapshot chunk is written to the follower's state store before
        // it answers; openraft's 200 ms made a follower that needed one on
        // a busy machine retry it forever.
        install_snapshot_timeout: 10_000,
        ..Config::default()
    }
    .validate()
}

/// A running replica. Clones are handles on the same replica.
pub struct RaftNode<T: StateMachineTarget> {
    id: NodeId,
    raft: Raft<TypeConfig>,
    target: Arc<T>,
    /// A reader of the log openraft writes (sled clones share the data).
    log: SledLogStore,
}

impl<T: StateMachineTarget> Clone for RaftNode<T> {
    fn clone(&self) -> Self {
        RaftNode {
            id: self.id,
            raft: self.raft.clone(),
            target: self.target.clone(),
            log: self.log.clone(),
        }
    }
}

impl<T: StateMachineTarget> RaftNode<T> {
    /// Starts server `id` with its log in `data_dir/raft` (created when
    /// new; read back when it exists: a restarted server is the same
    /// member with the same log).
    pub async fn start<X: Transport, P: AsRef<Path>>(
        id: NodeId,
        data_dir: P,
        target: Arc<T>,
        transport: X,
        config: Arc<Config>,
    ) -> Result<RaftNode<T>, StartError> {
        let log_dir = data_dir.as_ref().join(LOG_DIR);
        let log = SledLogStore::open(&log_dir).map_err(|source| StartError::Log {
            path: log_dir.display().to_string(),
            source,
        })?;
        let state_machine = StateMachineAdapter::new(target.clone());
        let network = Network::new(id, transport);
        let raft = Raft::new(id, config, network, log.clone(), state_machine).await?;
        Ok(RaftNode {
            id,
            raft,
            target,
            log,
        })
    }

    /// The id of the last entry in this server's log (the purge mark when
    /// the log is empty behind a snapshot), as a vote compares logs.
    pub fn last_log_id(&self) -> Result<Option<LogId<NodeId>>, StorageIOError<NodeId>> {
        self.log.last_log_id()
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Openraft's handle: membership, metrics, the RPC entry points a
    /// transport's server side calls.
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }

    pub fn target(&self) -> &Arc<T> {
        &self.target
    }

    /// Replicates `commands` as one entry of state commands; as
    /// [`propose`](Self::propose).
    pub async fn write(&self, commands: Vec<Command>) -> Result<WriteResponse, ProposeError> {
        self.propose(LogEntry::commands(commands)).await
    }

    /// Replicates `entry` and answers once a quorum has it and this server
    /// applied it. Only the leader accepts writes; any other server
    /// answers `ForwardToLeader` (naming the leader when it knows one) and
    /// the caller forwards.
    ///
    /// The version gate first: the entry is proposed only when every
    /// member of the latest membership (as this leader knows it, joining
    /// learners included) advertises a version that applies its kind.
    pub async fn propose(&self, entry: LogEntry) -> Result<WriteResponse, ProposeError> {
        self.check_versions(&entry)?;
        let response = self.raft.client_write(entry).await?;
        Ok(response.data)
    }

    /// The version gate for `entry` against the membership's servers.
    pub fn check_versions(&self, entry: &LogEntry) -> Result<(), GateError> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let servers = m.membership_config.membership().nodes().map(|(_, n)| n);
        can_write(entry.kind, servers)
    }

    /// Stops the replica (its log stays on disk).
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, id = self.id, "raft did not shut down cleanly");
        }
    }
}
