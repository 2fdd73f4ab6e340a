//! The sled log store and the state machine adapter against openraft's own
//! storage conformance suite, the log store's durability across a
//! reopen, and what the adapter refuses to apply (over the in-memory
//! target: here rather than in `state_machine.rs`, whose own tests would
//! import the target that implements its trait back).

use herder::state::Command;
use herder_raft::{LogEntry, MemoryTarget, SledLogStore, StateMachineAdapter, TypeConfig};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{blank_ent, StoreBuilder, Suite};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, StorageError, StorageIOError,
    Vote,
};
use std::sync::Arc;
use tempfile::TempDir;

struct Builder;

impl StoreBuilder<TypeConfig, SledLogStore, StateMachineAdapter<MemoryTarget>, TempDir>
    for Builder
{
    async fn build(
        &self,
    ) -> Result<(TempDir, SledLogStore, StateMachineAdapter<MemoryTarget>), StorageError<u64>> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(&e))?;
        let log = SledLogStore::open(dir.path()).map_err(|e| StorageIOError::write(&e))?;
        let state_machine = StateMachineAdapter::new(Arc::new(MemoryTarget::new()));
        Ok((dir, log, state_machine))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(Builder).unwrap();
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

#[tokio::test]
async fn a_reopened_log_store_has_its_entries_vote_and_positions() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = SledLogStore::open(dir.path()).unwrap();
        let entries: Vec<_> = (1..=8).map(|i| blank_ent::<TypeConfig>(2, 1, i)).collect();
        store.blocking_append(entries).await.unwrap();
        store.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        store.save_committed(Some(log_id(2, 6))).await.unwrap();
        store.purge(log_id(2, 3)).await.unwrap();
        store.truncate(log_id(2, 8)).await.unwrap();
    }
    let mut store = SledLogStore::open(dir.path()).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(2, 3)));
    assert_eq!(state.last_log_id, Some(log_id(2, 7)));
    assert_eq!(
        store.read_vote().await.unwrap(),
        Some(Vote::new_committed(2, 1))
    );
    assert_eq!(store.read_committed().await.unwrap(), Some(log_id(2, 6)));
    let indexes: Vec<u64> = store
        .try_get_log_entries(0..100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect();
    assert_eq!(indexes, vec![4, 5, 6, 7]);
}

/// A committed position is written without a flush of its own, so a crash
/// can keep it and lose the entries it names; it then reads as none (the
/// leader tells the position again) instead of sending openraft after
/// entries that are not there.
#[tokio::test]
async fn a_committed_position_without_its_entries_reads_as_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = SledLogStore::open(dir.path()).unwrap();
    let entries: Vec<_> = (1..=4).map(|i| blank_ent::<TypeConfig>(2, 1, i)).collect();
    store.blocking_append(entries).await.unwrap();
    store.save_committed(Some(log_id(2, 9))).await.unwrap();
    assert_eq!(store.read_committed().await.unwrap(), None, "past the log");
    store.save_committed(Some(log_id(3, 4))).await.unwrap();
    assert_eq!(store.read_committed().await.unwrap(), None, "another term");
    store.save_committed(Some(log_id(2, 4))).await.unwrap();
    assert_eq!(store.read_committed().await.unwrap(), Some(log_id(2, 4)));
    store.purge(log_id(2, 4)).await.unwrap();
    assert_eq!(
        store.read_committed().await.unwrap(),
        Some(log_id(2, 4)),
        "behind the purge mark"
    );
}

fn normal(index: u64, entry: LogEntry) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(entry),
    }
}

fn stability(job_id: &str) -> Command {
    Command::JobStabilityUpdate {
        namespace: "default".into(),
        job_id: job_id.into(),
        version: 0,
        stable: true,
    }
}

#[tokio::test]
async fn an_entry_this_build_cannot_decode_stops_the_apply_and_changes_nothing() {
    let target = Arc::new(MemoryTarget::new());
    let mut adapter = StateMachineAdapter::new(target.clone());
    let applied = adapter
        .apply([normal(1, LogEntry::commands(vec![stability("a")]))])
        .await
        .unwrap();
    assert_eq!(applied[0].index, 1);

    let mut newer = LogEntry::commands(vec![stability("b")]);
    newer.version = herder::state::COMMAND_VERSION + 1;
    let refused = adapter.apply([normal(2, newer)]).await;
    assert!(refused.is_err());
    assert_eq!(target.commands(), vec![stability("a")]);
    assert_eq!(target.applied_index(), Some(1));
}

#[tokio::test]
async fn entries_at_or_below_the_stored_position_are_not_applied_again() {
    let target = Arc::new(MemoryTarget::new());
    let mut adapter = StateMachineAdapter::new(target.clone());
    let first = normal(1, LogEntry::commands(vec![stability("a")]));
    adapter.apply([first.clone()]).await.unwrap();
    adapter
        .apply([first, normal(2, LogEntry::commands(vec![stability("b")]))])
        .await
        .unwrap();
    assert_eq!(target.commands(), vec![stability("a"), stability("b")]);
}
