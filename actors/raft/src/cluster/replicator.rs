//! Where `StateStore::submit` goes on a cluster member: every command
//! becomes a log entry committed by the leader. On the leader it is
//! proposed to Raft; on a follower it is forwarded to the leader over the
//! RPC port, and answered only once this server's own replica has applied
//! it, so that a read sent to the same server right after sees the write.
//!
//! A write is retried elsewhere only when it provably never reached a
//! leader (no connection, or the server said it does not lead). When the
//! leader changes while an entry is being committed, the entry may still
//! be committed by the next leader, so the write is answered as not
//! committed with that warning and never re-sent: re-sending could apply
//! it twice.

use super::rpc::{self, Refusal};
use super::Cluster;
use crate::entry::{CommandResult, LogEntry, WriteResponse};
use crate::http::HttpError;
use futures::channel::oneshot;
use herder::state::{ApplyOutcome, Command, Replicator, StoreError};
use std::time::{Duration, Instant};

/// How long a write looks for a leader before giving up (an election
/// takes 1-3 s).
const FIND_LEADER_FOR: Duration = Duration::from_secs(10);
/// Pause between attempts while there is no leader to ask.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long a forwarded write waits for this replica to apply it.
const LOCAL_APPLY_WAIT: Duration = Duration::from_secs(10);

/// The store's [`Replicator`] on a cluster member.
pub struct LogReplicator {
    cluster: Cluster,
    runtime: tokio::runtime::Handle,
}

impl LogReplicator {
    /// Writes submitted from any thread are driven on the replica's
    /// runtime.
    pub fn new(cluster: Cluster) -> LogReplicator {
        LogReplicator {
            runtime: cluster.runtime().clone(),
            cluster,
        }
    }
}

impl LogReplicator {
    /// Runs `write` for `command` on the replica's runtime and answers with
    /// the command's outcome.
    fn spawn_write<W, F>(
        &self,
        command: Command,
        write: W,
    ) -> oneshot::Receiver<Result<ApplyOutcome, StoreError>>
    where
        W: FnOnce(Cluster, LogEntry) -> F + Send + 'static,
        F: std::future::Future<Output = Result<WriteResponse, StoreError>> + Send,
    {
        let (reply, receiver) = oneshot::channel();
        let cluster = self.cluster.clone();
        let name = command.name();
        self.runtime.spawn(async move {
            let outcome = write(cluster, LogEntry::commands(vec![command]))
                .await
                .and_then(|response| single_outcome(response, name));
            let _ = reply.send(outcome);
        });
        receiver
    }
}

impl Replicator for LogReplicator {
    fn propose(&self, command: Command) -> oneshot::Receiver<Result<ApplyOutcome, StoreError>> {
        self.spawn_write(command, |cluster, entry| async move {
            write(&cluster, entry).await
        })
    }

    fn propose_as_leader(
        &self,
        command: Command,
    ) -> oneshot::Receiver<Result<ApplyOutcome, StoreError>> {
        self.spawn_write(command, |cluster, entry| async move {
            write_as_this_leader(&cluster, entry).await
        })
    }
}

/// Commits `entry` here while this server leads; never forwarded. A
/// leader's decision (a plan its applier checked against its state) that
/// another leader committed would skip that leader's own check: a stale
/// leader woken from a pause placed a plan its successor had already
/// placed differently, through such a forward.
async fn write_as_this_leader(
    cluster: &Cluster,
    entry: LogEntry,
) -> Result<WriteResponse, StoreError> {
    match rpc::write_as_leader(cluster, entry).await {
        Ok(response) => Ok(response),
        Err(Refusal::NotLeader { .. }) => Err(StoreError::NotCommitted(
            "this server no longer leads; the write was not made".into(),
        )),
        Err(refusal) => Err(StoreError::NotCommitted(refusal.to_string())),
    }
}

/// The one command's outcome of a committed entry.
fn single_outcome(response: WriteResponse, name: &'static str) -> Result<ApplyOutcome, StoreError> {
    match response.results.into_iter().next() {
        Some(CommandResult::Applied) => Ok(ApplyOutcome::committed(response.index, name)),
        Some(CommandResult::Rejected(e)) => Err(StoreError::Rejected(e)),
        // An entry at or below what the replica had applied is a replay
        // and has no outcomes; a fresh write is never one.
        None => Err(StoreError::NotCommitted(format!(
            "the entry at {} was applied as a replay",
            response.index
        ))),
    }
}

/// Commits `entry` through the leader, wherever it is.
pub async fn write(cluster: &Cluster, entry: LogEntry) -> Result<WriteResponse, StoreError> {
    let deadline = Instant::now() + FIND_LEADER_FOR;
    loop {
        let attempt = if cluster.is_leader() {
            rpc::write_as_leader(cluster, entry.clone())
                .await
                .map_err(Attempt::Refused)
        } else {
            forward(cluster, &entry).await
        };
        match attempt {
            Ok(response) => return Ok(response),
            Err(Attempt::Refused(Refusal::NotLeader { .. })) | Err(Attempt::NotDelivered(_))
                if Instant::now() < deadline =>
            {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(Attempt::Refused(Refusal::NotLeader { .. })) => {
                return Err(StoreError::NotCommitted("No cluster leader".into()))
            }
            Err(Attempt::NotDelivered(reason)) => {
                return Err(StoreError::NotCommitted(format!(
                    "No cluster leader ({reason})"
                )))
            }
            Err(Attempt::Refused(refusal)) => {
                return Err(StoreError::NotCommitted(refusal.to_string()))
            }
            Err(Attempt::Lost(e)) => {
                return Err(StoreError::NotCommitted(format!(
                    "{e}; the write may or may not have been applied"
                )))
            }
        }
    }
}

/// How one attempt failed.
enum Attempt {
    Refused(Refusal),
    /// Never reached a leader: safe to retry.
    NotDelivered(String),
    /// May have reached it.
    Lost(HttpError),
}

/// Sends `entry` to the leader this server knows of, then waits for the
/// local replica to apply it.
async fn forward(cluster: &Cluster, entry: &LogEntry) -> Result<WriteResponse, Attempt> {
    let Some(leader) = cluster.leader() else {
        return Err(Attempt::NotDelivered("no leader known".into()));
    };
    let answer: Result<WriteResponse, Refusal> = match cluster
        .client()
        .call(&leader.addr, rpc::WRITE_PATH, entry)
        .await
    {
        Ok(answer) => answer,
        Err(e @ HttpError::Unreachable { .. }) => return Err(Attempt::NotDelivered(e.to_string())),
        Err(e) => return Err(Attempt::Lost(e)),
    };
    let response = answer.map_err(Attempt::Refused)?;
    let store = cluster.store().clone();
    let index = response.index;
    let applied =
        tokio::task::spawn_blocking(move || store.snapshot_min_index(index, LOCAL_APPLY_WAIT))
            .await;
    if !matches!(applied, Ok(Ok(_))) {
        // Committed on the leader: the answer stands, this replica is just
        // behind (a read here may not show it yet).
        tracing::warn!(
            index,
            "a forwarded write is committed but not yet applied here"
        );
    }
    Ok(response)
}
