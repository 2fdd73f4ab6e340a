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

use crate::entry::{CommandResult, LogEntry, WriteResponse};
use crate::{NodeId, ServerNode, TypeConfig};
use herder::state::Command;
use openraft::storage::RaftStateMachine;
use openraft::{
    Entry, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
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
}

/// Where the log stands, as the target keeps it (JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Position {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, ServerNode>,
}

impl Position {
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

/// Applies `entries` in order, moving `position` along, as one call to
/// the target; runs on a blocking thread.
fn apply_entries<T: StateMachineTarget>(
    target: &T,
    mut position: Position,
    entries: Vec<Entry<TypeConfig>>,
) -> StoreResult<Vec<WriteResponse>> {
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
                &data.commands
            }
        };
        let bytes = position
            .encode()
            .map_err(|e| StorageIOError::apply(log_id, &e))?;
        batches.push(BatchToApply {
            index: log_id.index,
            commands,
            position: bytes,
        });
    }
    let applied_indexes: Vec<u64> = batches.iter().map(|b| b.index).collect();
    let mut results = if batches.is_empty() {
        Vec::new()
    } else {
        let last = position.last_applied.unwrap_or_default();
        target
            .apply_batches(batches)
            .map_err(|e| StorageIOError::apply(last, &e))?
    }
    .into_iter();
    let mut applied = applied_indexes.into_iter().peekable();
    let responses = entries
        .iter()
        .map(|entry| {
            let index = entry.log_id.index;
            let results = if applied.next_if_eq(&index).is_some() {
                results.next().unwrap_or_default()
            } else {
                Vec::new()
            };
            WriteResponse { index, results }
        })
        .collect();
    Ok(responses)
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
        let meta = SnapshotMeta {
            last_log_id: position.last_applied,
            last_membership: position.membership,
            snapshot_id,
        };
        let snapshot = Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(exported.data)),
        };
        *lock(&self.current) = Some(copy_snapshot(&snapshot));
        Ok(snapshot)
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
        let position = Position {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        };
        let signature = Some(meta.signature());
        let position = position
            .encode()
            .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
        let data = snapshot.into_inner();
        let imported = TargetSnapshot { position, data };
        let target = self.target.clone();
        let kept = imported.clone();
        tokio::task::spawn_blocking(move || target.import_snapshot(&imported))
            .await
            .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?
            .map_err(|e| StorageIOError::write_snapshot(signature, &e))?;
        *lock(&self.current) = Some(Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(kept.data)),
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
