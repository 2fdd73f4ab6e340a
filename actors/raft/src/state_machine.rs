//! The state machine adapter: openraft's `RaftStateMachine` over a
//! [`StateMachineTarget`], the thing that actually holds the state.
//!
//! The adapter turns committed entries into batches of commands at log
//! indexes, and openraft's snapshots into the target's export and import.
//! Where the log stands (the last applied log id and the membership) is
//! handed to the target with every batch as an opaque [`Position`]: the
//! target stores it atomically with the state it describes, so after a
//! crash the two never disagree and openraft replays exactly the entries
//! the state lacks.

use crate::entry::{CommandResult, LogEntry, RestoreEntry, WriteResponse};
use crate::{NodeId, ServerNode, TypeConfig};
use herder::state::Command;
use openraft::storage::RaftStateMachine;
use openraft::{
    Entry, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Why a target could not do what was asked. Openraft stops the node on
/// it: a replica that failed to apply a committed entry must not go on.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TargetError(pub String);

/// A snapshot of a target's state: its bytes and the position (as handed
/// to `apply_batch`; empty when nothing was applied) they stand for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetSnapshot {
    pub position: Vec<u8>,
    pub data: Vec<u8>,
}

/// One entry's batch for [`StateMachineTarget::apply_batches`].
pub struct BatchToApply<'a> {
    pub index: u64,
    pub commands: &'a [Command],
    /// Where the log stands once this entry is applied.
    pub position: Vec<u8>,
}

/// What the replicated log drives: the state store, or a test double.
///
/// Calls come one at a time, in log order, from openraft's state machine
/// task (on a blocking thread: they may wait for a disk).
pub trait StateMachineTarget: Send + Sync + 'static {
    /// Applies `commands` at state index `index` (the entry's log index)
    /// and stores `position` with the result, atomically. `commands` is
    /// empty for membership and leader no-op entries (the very first entry,
    /// at index 0, is one): then only `position` moves. The adapter never
    /// hands over an entry at or below the stored position. A command the
    /// state refuses is a [`CommandResult::Rejected`], not an error: every
    /// replica refuses it alike.
    fn apply_batch(
        &self,
        index: u64,
        commands: &[Command],
        position: &[u8],
    ) -> Result<Vec<CommandResult>, TargetError>;

    /// Applies several entries' batches in order, each as `apply_batch`
    /// would. A target that can make them durable together (one sync for
    /// all, as the state store's group commit does) overrides this: the
    /// adapter hands over every entry openraft applies at once.
    fn apply_batches(
        &self,
        batches: Vec<BatchToApply<'_>>,
    ) -> Result<Vec<Vec<CommandResult>>, TargetError> {
        batches
            .into_iter()
            .map(|b| self.apply_batch(b.index, b.commands, &b.position))
            .collect()
    }

    /// The position stored with the last applied batch or imported
    /// snapshot; `None` for a target that has applied nothing.
    fn applied_position(&self) -> Result<Option<Vec<u8>>, TargetError>;

    /// The whole state as bytes, with the position it stands for.
    fn export_snapshot(&self) -> Result<TargetSnapshot, TargetError>;

    /// Replaces the whole state by an exported one (from another server).
    fn import_snapshot(&self, snapshot: &TargetSnapshot) -> Result<(), TargetError>;

    /// Replaces the whole state by an operator's checkpoint (a restore
    /// entry's, checked by the server that took it), at state index
    /// `index` with `position`, atomically.
    fn restore(&self, index: u64, checkpoint: &[u8], position: &[u8]) -> Result<(), TargetError>;
}

/// Where the log stands, as the target keeps it (JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Position {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, ServerNode>,
    /// How far the state's index runs ahead of the log's: zero until an
    /// operator's restore lands past its entry's log index (the restored
    /// rows were written at indexes up to the saved one, and the state's
    /// index must stay past them). Left out while zero, so positions read
    /// as before.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub index_offset: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Position {
    /// The state index an entry at `log_index` is applied at.
    pub fn state_index(&self, log_index: u64) -> u64 {
        log_index + self.index_offset
    }

    fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    fn decode(bytes: &[u8]) -> Result<Position, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

type StoreResult<T> = Result<T, StorageError<NodeId>>;

/// Openraft's state machine over a target.
pub struct StateMachineAdapter<T: StateMachineTarget> {
    target: Arc<T>,
    /// The last snapshot built or installed, served to followers that are
    /// too far behind for the log.
    current: Arc<Mutex<Option<Snapshot<TypeConfig>>>>,
    /// Tells snapshots of the same log id apart.
    snapshots_built: Arc<AtomicU64>,
}

impl<T: StateMachineTarget> StateMachineAdapter<T> {
    pub fn new(target: Arc<T>) -> Self {
        StateMachineAdapter {
            target,
            current: Arc::new(Mutex::new(None)),
            snapshots_built: Arc::new(AtomicU64::new(0)),
        }
    }

    fn position(&self) -> StoreResult<Position> {
        read_position(&*self.target)
    }
}

fn read_position<T: StateMachineTarget + ?Sized>(target: &T) -> StoreResult<Position> {
    let bytes = target
        .applied_position()
        .map_err(|e| StorageIOError::read_state_machine(&e))?;
    match bytes {
        Some(bytes) => {
            Position::decode(&bytes).map_err(|e| StorageIOError::read_state_machine(&e).into())
        }
        None => Ok(Position::default()),
    }
}

/// Applies `entries` in order, moving `position` along: the batches as one
/// call to the target, cut where an operator's restore replaces the
/// whole state; runs on a blocking thread.
fn apply_entries<T: StateMachineTarget>(
    target: &T,
    mut position: Position,
    entries: Vec<Entry<TypeConfig>>,
) -> StoreResult<Vec<WriteResponse>> {
    let mut answered: BTreeMap<u64, WriteResponse> = BTreeMap::new();
    let mut batches = Vec::with_capacity(entries.len());
    for entry in &entries {
        let log_id = entry.log_id;
        if position
            .last_applied
            .is_some_and(|applied| applied.index >= log_id.index)
        {
            // Already in the target's state (openraft replays from what it
            // last saw applied; the target may have stored more).
            continue;
        }
        position.last_applied = Some(log_id);
        let commands: &[Command] = match &entry.payload {
            EntryPayload::Blank => &[],
            EntryPayload::Membership(membership) => {
                position.membership = StoredMembership::new(Some(log_id), membership.clone());
                &[]
            }
            EntryPayload::Normal(data) => {
                check_understood(log_id, data)?;
                if let Some(restore) = &data.restore {
                    let before = std::mem::take(&mut batches);
                    apply_batches(target, before, &position, &mut answered)?;
                    let response = apply_restore(target, &mut position, log_id, restore)?;
                    answered.insert(log_id.index, response);
                    continue;
                }
                &data.commands
            }
        };
        let bytes = position
            .encode()
            .map_err(|e| StorageIOError::apply(log_id, &e))?;
        batches.push(BatchToApply {
            index: position.state_index(log_id.index),
            commands,
            position: bytes,
        });
    }
    apply_batches(target, batches, &position, &mut answered)?;
    // Entries skipped as already applied are answered with their state
    // index as it would have been, and no outcomes.
    let offset = position.index_offset;
    Ok(entries
        .iter()
        .map(|entry| {
            let index = entry.log_id.index;
            answered.remove(&index).unwrap_or(WriteResponse {
                index: index + offset,
                results: Vec::new(),
            })
        })
        .collect())
}

/// Applies `batches` (made under `position`'s index offset) as one call
/// to the target and files each entry's answer under its log index.
fn apply_batches<T: StateMachineTarget>(
    target: &T,
    batches: Vec<BatchToApply<'_>>,
    position: &Position,
    answered: &mut BTreeMap<u64, WriteResponse>,
) -> StoreResult<()> {
    if batches.is_empty() {
        return Ok(());
    }
    let indexes: Vec<u64> = batches.iter().map(|b| b.index).collect();
    let last = position.last_applied.unwrap_or_default();
    let results = target
        .apply_batches(batches)
        .map_err(|e| StorageIOError::apply(last, &e))?;
    for (index, results) in indexes.into_iter().zip(results) {
        let log_index = index - position.index_offset;
        answered.insert(log_index, WriteResponse { index, results });
    }
    Ok(())
}

/// Applies an operator's restore at log id `log_id`: the state lands at
/// the entry's state index, or past the saved one when that is further
/// (a backup of a longer history than this cluster's log), and from then
/// on every state index is that much past its log index
/// ([`Position::index_offset`]). Every replica computes the same: the
/// offset before the entry is part of the replicated position.
fn apply_restore<T: StateMachineTarget>(
    target: &T,
    position: &mut Position,
    log_id: LogId<NodeId>,
    restore: &RestoreEntry,
) -> StoreResult<WriteResponse> {
    let at = position
        .state_index(log_id.index)
        .max(restore.saved_index + 1);
    position.index_offset = at - log_id.index;
    let bytes = position
        .encode()
        .map_err(|e| StorageIOError::apply(log_id, &e))?;
    target
        .restore(at, &restore.checkpoint, &bytes)
        .map_err(|e| StorageIOError::apply(log_id, &e))?;
    tracing::warn!(
        log_index = log_id.index,
        state_index = at,
        saved_index = restore.saved_index,
        "an operator's snapshot restore replaced the whole state"
    );
    Ok(WriteResponse {
        index: at,
        results: Vec::new(),
    })
}

fn check_understood(log_id: LogId<NodeId>, entry: &LogEntry) -> StoreResult<()> {
    if entry.is_understood() {
        return Ok(());
    }
    let error = TargetError(format!(
        "entry encoded with command version {} is newer than this build understands ({})",
        entry.version,
        herder::state::COMMAND_VERSION
    ));
    Err(StorageIOError::apply(log_id, &error).into())
}

/// Builds snapshots from the target for openraft.
pub struct SnapshotBuilder<T: StateMachineTarget> {
    target: Arc<T>,
    current: Arc<Mutex<Option<Snapshot<TypeConfig>>>>,
    snapshots_built: Arc<AtomicU64>,
}

impl<T: StateMachineTarget> RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder<T> {
    async fn build_snapshot(&mut self) -> StoreResult<Snapshot<TypeConfig>> {
        let target = self.target.clone();
        let exported = tokio::task::spawn_blocking(move || target.export_snapshot())
            .await
            .map_err(|e| StorageIOError::read_state_machine(&e))?
            .map_err(|e| StorageIOError::read_state_machine(&e))?;
        let position = if exported.position.is_empty() {
            Position::default()
        } else {
            Position::decode(&exported.position)
                .map_err(|e| StorageIOError::read_state_machine(&e))?
        };
        let number = self.snapshots_built.fetch_add(1, Ordering::Relaxed) + 1;
        let snapshot_id = match position.last_applied {
            Some(log_id) => format!("{}-{}-{number}", log_id.leader_id, log_id.index),
            None => format!("empty-{number}"),
        };
        let data = with_offset(position.index_offset, exported.data);
        let meta = SnapshotMeta {
            last_log_id: position.last_applied,
            last_membership: position.membership,
            snapshot_id,
        };
        let snapshot = Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        };
        *lock(&self.current) = Some(copy_snapshot(&snapshot));
        Ok(snapshot)
    }
}

/// What marks a snapshot whose state index runs ahead of its log index
/// (after an operator's restore): the prefix, then the offset (8 bytes,
/// big-endian), then the target's data. Openraft's snapshot meta has no
/// room for it, and a follower that installs the snapshot must apply the
/// entries after it at the same state indexes as the others. Without an
/// offset the data is the target's alone, as before 0.3.0 (only a restore
/// entry, gated on 0.3.0, makes one).
const OFFSET_PREFIX: &[u8] = b"herder-index-offset\0";

fn with_offset(offset: u64, data: Vec<u8>) -> Vec<u8> {
    if offset == 0 {
        return data;
    }
    let mut out = Vec::with_capacity(OFFSET_PREFIX.len() + 8 + data.len());
    out.extend_from_slice(OFFSET_PREFIX);
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&data);
    out
}

/// The offset and the target's data of a snapshot's bytes.
fn split_offset(data: &[u8]) -> (u64, &[u8]) {
    let Some(rest) = data.strip_prefix(OFFSET_PREFIX) else {
        return (0, data);
    };
    match rest.split_first_chunk::<8>() {
        Some((offset, data)) => (u64::from_be_bytes(*offset), data),
        None => (0, data),
    }
}

fn lock<V>(mutex: &Mutex<V>) -> std::sync::MutexGuard<'_, V> {
    // Only whole values are stored under this lock, so a panic elsewhere
    // cannot leave it half-written.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn copy_snapshot(snapshot: &Snapshot<TypeConfig>) -> Snapshot<TypeConfig> {
    Snapshot {
        meta: snapshot.meta.clone(),
        snapshot: Box::new(Cursor::new(snapshot.snapshot.get_ref().clone())),
    }
}

impl<T: StateMachineTarget> RaftStateMachine<TypeConfig> for StateMachineAdapter<T> {
    type SnapshotBuilder = SnapshotBuilder<T>;

    async fn applied_state(
        &mut self,
    ) -> StoreResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, ServerNode>)> {
        let position = self.position()?;
        Ok((position.last_applied, position.membership))
    }

    async fn apply<I>(&mut self, entries: I) -> StoreResult<Vec<WriteResponse>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let position = self.position()?;
        let target = self.target.clone();
        tokio::task::spawn_blocking(move || apply_entries(&*target, position, entries))
            .await
            .map_err(|e| StorageIOError::write_state_machine(&e))?
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            target: self.target.clone(),
            current: self.current.clone(),
            snapshots_built: self.snapshots_built.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StoreResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, ServerNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StoreResult<()> {
        let kept = snapshot.into_inner();
        let (index_offset, data) = split_offset(&kept);
        let position = Position {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
            index_offset,
        };
        let signature = Some(meta.signature());
        let position = position
            .encode()
            .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
        let imported = TargetSnapshot {
            position,
            data: data.to_vec(),
        };
        let target = self.target.clone();
        tokio::task::spawn_blocking(move || target.import_snapshot(&imported))
            .await
            .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?
            .map_err(|e| StorageIOError::write_snapshot(signature, &e))?;
        *lock(&self.current) = Some(Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(kept)),
        });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StoreResult<Option<Snapshot<TypeConfig>>> {
        if let Some(snapshot) = lock(&self.current).as_ref() {
            return Ok(Some(copy_snapshot(snapshot)));
        }
        // None kept (a restart): the state as it stands is a snapshot of
        // everything applied, if anything was.
        if self.position()?.last_applied.is_none() {
            return Ok(None);
        }
        let mut builder = self.get_snapshot_builder().await;
        builder.build_snapshot().await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::RestoreEntry;
    use crate::memory_target::{AppliedBatch, MemoryTarget};
    use openraft::CommittedLeaderId;

    fn entry(index: u64, data: LogEntry) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(data),
        }
    }

    fn reconcile() -> LogEntry {
        LogEntry::commands(vec![Command::ReconcileJobSummaries])
    }

    fn checkpoint(batches: &[AppliedBatch]) -> Vec<u8> {
        serde_json::to_vec(&(None::<u64>, batches)).unwrap()
    }

    #[test]
    fn a_restore_past_the_log_moves_every_later_state_index_by_as_much() {
        let target = MemoryTarget::new();
        let saved = [AppliedBatch {
            index: 100,
            commands: vec![Command::ReconcileJobSummaries],
        }];
        let restore = LogEntry::restore(RestoreEntry {
            saved_index: 100,
            checkpoint: checkpoint(&saved),
        });
        let entries = vec![
            entry(5, reconcile()),
            entry(6, restore),
            entry(7, reconcile()),
        ];
        let answers = apply_entries(&target, Position::default(), entries).unwrap();
        let indexes: Vec<u64> = answers.iter().map(|a| a.index).collect();
        assert_eq!(indexes, vec![5, 101, 102]);
        let batches: Vec<u64> = target.batches().iter().map(|b| b.index).collect();
        assert_eq!(
            batches,
            vec![100, 102],
            "the restored batch, then the one after"
        );
        let position = read_position(&target).unwrap();
        assert_eq!(position.index_offset, 95);
        assert_eq!(position.last_applied.map(|l| l.index), Some(7));
        // Replayed after a restart: nothing is applied twice.
        let again = vec![entry(7, reconcile())];
        let answers = apply_entries(&target, position, again).unwrap();
        assert_eq!(answers[0].index, 102);
        assert_eq!(target.batches().len(), 2);
    }

    #[test]
    fn a_snapshot_carries_the_offset_only_when_there_is_one() {
        assert_eq!(
            split_offset(&with_offset(0, b"data".to_vec())),
            (0, &b"data"[..])
        );
        assert_eq!(with_offset(0, b"data".to_vec()), b"data");
        let marked = with_offset(95, b"data".to_vec());
        assert_eq!(split_offset(&marked), (95, &b"data"[..]));
    }

    #[test]
    fn a_restore_of_an_older_state_lands_at_its_entry() {
        let target = MemoryTarget::new();
        let restore = LogEntry::restore(RestoreEntry {
            saved_index: 3,
            checkpoint: checkpoint(&[]),
        });
        let answers =
            apply_entries(&target, Position::default(), vec![entry(40, restore)]).unwrap();
        assert_eq!(answers[0].index, 40);
        assert_eq!(read_position(&target).unwrap().index_offset, 0);
    }
}
