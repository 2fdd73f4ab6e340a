//! Operator snapshots (Nomad's `Operator.SnapshotSave` /
//! `SnapshotRestore`): the whole state saved as one consistent file, and
//! a saved file put back in place of the state.
//!
//! A save encodes the store's published state (an O(1) snapshot taken
//! between two writes), off the writer thread: writes go on while it is
//! encoded and packed, and the file holds exactly one index. The file is
//! `herder_common::snapshot_archive`'s (Nomad's container around the
//! store's own checkpoint, which covers every table the store has; no
//! table is named here).
//!
//! A restore checks the whole file before touching anything (container,
//! checksums, meta.json, the checkpoint decoded row by row, its index the
//! one meta.json names); then the leader's duties stop, the state is
//! replaced and the duties start again over the restored state, the path
//! a newly elected leader takes: pending and blocked evaluations go back
//! into the broker, node heartbeats get fresh timers, deployments and
//! drains are picked up ([`with_duties_stopped`], both paths).
//!
//! A single server replaces its store's state at a new index past both
//! (`StateStore::restore_checkpoint`). In a cluster the checked
//! checkpoint goes through the log as one restore entry
//! (`herder_raft::entry::RestoreEntry`, gated on every server running
//! 0.3.0), which every replica applies at the same index; the server that
//! took the file hands it to the leader ([`LeaderCall::RestoreSnapshot`])
//! unless it leads, since the leader's duties stop around it, and answers
//! once its own replica holds the restored state. Saves come from any
//! server's replica, with the Raft term.

use super::{ServerApi, ServerApiError};
use crate::leader_duties::LeaderDuties;
use crate::leader_link::{LeaderAnswer, LeaderCall};
use herder::state::{StateSnapshot, StateStore};
use herder_common::snapshot_archive::{self, SnapshotMeta};
use herder_raft::cluster::rpc;
use herder_raft::entry::RestoreEntry;
use herder_raft::{Cluster, LogEntry};
use std::future::Future;
use std::time::Duration;

/// How long a restore taken by a follower waits for its own replica to
/// hold the restored state once the leader committed it.
const LOCAL_APPLY_WAIT: Duration = Duration::from_secs(60);

/// A snapshot file checked whole: what it says of itself, the state it
/// holds, and that state's checkpoint bytes (what a restore entry carries).
struct CheckedSnapshot {
    meta: SnapshotMeta,
    state: StateSnapshot,
    checkpoint: Vec<u8>,
}

/// A saved snapshot file and what it holds.
#[derive(Debug)]
pub struct SavedSnapshot {
    /// The file, in Nomad's layout.
    pub file: Vec<u8>,
    /// The index of the state it holds.
    pub index: u64,
    /// Its `Digest` header (`sha-256=<base64>`).
    pub digest: String,
}

/// What a restore did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoredSnapshot {
    /// The index the snapshot was saved at.
    pub saved_index: u64,
    /// The index the state stands at now, restored.
    pub index: u64,
}

impl ServerApi {
    /// Saves the whole state as it is now (see the module comment).
    pub async fn save_snapshot(&self) -> Result<SavedSnapshot, ServerApiError> {
        let state = self.store.snapshot();
        let term = self.cluster.as_ref().map_or(0, |c| c.status().term);
        blocking(move || {
            let checkpoint = StateStore::encode_checkpoint(&state).map_err(internal)?;
            let meta = SnapshotMeta::new(
                state.latest_index(),
                term,
                checkpoint.len() as u64,
                unix_millis(),
            );
            let file = snapshot_archive::write(&meta, &checkpoint).map_err(internal)?;
            let digest = snapshot_archive::digest_header(&file);
            Ok(SavedSnapshot {
                file,
                index: state.latest_index(),
                digest,
            })
        })
        .await
    }

    /// Replaces the whole state by a saved snapshot `file` (unpacking to
    /// at most `max_unpacked` bytes). Anything wrong with the file is
    /// `Invalid` and changes nothing.
    pub async fn restore_snapshot(
        &self,
        file: Vec<u8>,
        max_unpacked: u64,
    ) -> Result<RestoredSnapshot, ServerApiError> {
        let checked = blocking(move || check(&file, max_unpacked)).await?;
        let saved_index = checked.meta.index;
        tracing::warn!(saved_index, id = %checked.meta.id, "restoring an operator snapshot: the whole state is replaced");
        let index = match &self.cluster {
            None => {
                let store = self.store.clone();
                let state = checked.state;
                let replace =
                    blocking(move || store.restore_checkpoint(state).map_err(super::store_error));
                with_duties_stopped(&self.duties, replace, || true).await?
            }
            Some(cluster) => {
                let entry = RestoreEntry {
                    saved_index,
                    checkpoint: checked.checkpoint,
                };
                self.restore_through_log(cluster, entry).await?
            }
        };
        Ok(RestoredSnapshot { saved_index, index })
    }

    /// A cluster's restore: committed by the leader (this server, or the
    /// one it hands the entry to), answered once this replica holds it.
    async fn restore_through_log(
        &self,
        cluster: &Cluster,
        entry: RestoreEntry,
    ) -> Result<u64, ServerApiError> {
        let index = if cluster.is_leader() {
            restore_as_leader(&self.duties, cluster, entry).await?
        } else {
            let call = LeaderCall::RestoreSnapshot(Box::new(entry));
            match super::write_path::call_duty(cluster, call).await? {
                LeaderAnswer::Index(index) => index,
                other => {
                    return Err(ServerApiError::Internal(format!(
                        "the leader answered a restore with {other:?}"
                    )))
                }
            }
        };
        let store = self.store.clone();
        blocking(move || {
            store
                .snapshot_min_index(index, LOCAL_APPLY_WAIT)
                .map(|_| index)
                .map_err(super::store_error)
        })
        .await
    }
}

/// Checks a snapshot file whole (see the module comment).
fn check(file: &[u8], max_unpacked: u64) -> Result<CheckedSnapshot, ServerApiError> {
    let archive = snapshot_archive::read(file, max_unpacked).map_err(invalid)?;
    let state = StateStore::decode_checkpoint(&archive.state).map_err(|e| {
        ServerApiError::Invalid(format!(
            "the snapshot's {}: {e}",
            snapshot_archive::STATE_FILE
        ))
    })?;
    if state.latest_index() != archive.meta.index {
        return Err(ServerApiError::Invalid(format!(
            "meta.json names index {} but the state in the snapshot is at index {}",
            archive.meta.index,
            state.latest_index()
        )));
    }
    Ok(CheckedSnapshot {
        meta: archive.meta,
        state,
        checkpoint: archive.state,
    })
}

/// A restore on the leader of a cluster (taken here or handed over by a
/// follower): its duties stop, the restore entry commits and applies
/// here, and the duties start again over the restored state if this
/// server still carries them. Answers the state index of the restore.
pub(crate) async fn restore_as_leader(
    duties: &LeaderDuties,
    cluster: &Cluster,
    entry: RestoreEntry,
) -> Result<u64, ServerApiError> {
    let commit = {
        let cluster = cluster.clone();
        async move {
            let writer = cluster.clone();
            let written = cluster
                .spawn(async move { rpc::write_as_leader(&writer, LogEntry::restore(entry)).await })
                .await
                .map_err(|e| ServerApiError::Internal(format!("the restore task failed: {e}")))?;
            written
                .map(|response| response.index)
                .map_err(|e| ServerApiError::Unavailable(format!("restoring through the log: {e}")))
        }
    };
    let leads = cluster.duty_leadership();
    with_duties_stopped(duties, commit, move || *leads.borrow()).await
}

/// Runs `replace` (which swaps the whole state) with the leader's duties
/// stopped, then starts them again over the new state as a newly elected
/// leader does, when `still_leads` says this server should carry them.
async fn with_duties_stopped<T>(
    duties: &LeaderDuties,
    replace: impl Future<Output = Result<T, ServerApiError>>,
    still_leads: impl FnOnce() -> bool,
) -> Result<T, ServerApiError> {
    duties.lose().await;
    let replaced = replace.await;
    if still_leads() {
        duties.gain().await;
    }
    replaced
}

/// Runs CPU-heavy or blocking work off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ServerApiError> + Send + 'static,
) -> Result<T, ServerApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ServerApiError::Internal(format!("the snapshot task failed: {e}")))?
}

fn internal(e: impl std::fmt::Display) -> ServerApiError {
    ServerApiError::Internal(e.to_string())
}

fn invalid(e: snapshot_archive::ArchiveError) -> ServerApiError {
    ServerApiError::Invalid(e.to_string())
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}
