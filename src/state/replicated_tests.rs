//! Tests of the store driven by a replicated log: batches at indexes the
//! log chose, the log position stored with the state, and checkpoints
//! exported from one store and imported into another.

use super::fixtures;
use super::{Command, PlanResults, StateSnapshot, StateStore, StoreError, StoreOptions, TableSet};
use crate::structs::{NodeId, SchedulerConfiguration, TriggeredBy};
use futures::StreamExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn register(name: &str) -> Command {
    let job = fixtures::job("default", name, &[("g", 2)]);
    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
    Command::JobRegister {
        job: Arc::new(job),
        eval: Some(eval),
        enforce_index: None,
    }
}

fn node(name: &str) -> (NodeId, Command) {
    let node = fixtures::node(name);
    (
        node.id,
        Command::NodeRegister {
            node: Arc::new(node),
        },
    )
}

/// A plan placing two allocations of job `name` on `node`.
fn place(name: &str, node: NodeId) -> Command {
    let job = fixtures::job("default", name, &[("g", 2)]);
    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
    let builder = fixtures::AllocBuilder::new(&job, "g");
    let allocs = (0..2).map(|i| builder.build(i, node, eval.id, 1)).collect();
    Command::ApplyPlanResults(PlanResults {
        eval_id: eval.id,
        node_allocation: [(node, allocs)].into_iter().collect(),
        updated_at: 1,
        ..Default::default()
    })
}

/// A command the state refuses (a check-and-set on a stale index).
fn bad_cas() -> Command {
    Command::SchedulerConfigUpdate {
        config: SchedulerConfiguration::default(),
        cas_index: Some(12345),
    }
}

fn position(n: u64) -> Vec<u8> {
    format!("{{\"LastApplied\":{n}}}").into_bytes()
}

/// Fills `store` through batches at indexes 3, 7 (two commands each) and
/// 12: nodes, jobs and their summaries and evals, allocations, the
/// scheduler configuration. Returns the node IDs.
fn fill(store: &StateStore) -> (NodeId, NodeId) {
    let (n1, register_n1) = node("n1");
    let (n2, register_n2) = node("n2");
    store
        .apply_batch_at(3, vec![register_n1, register_n2], position(3))
        .unwrap();
    store
        .apply_batch_at(7, vec![register("web"), register("api")], position(7))
        .unwrap();
    let config = Command::SchedulerConfigUpdate {
        config: SchedulerConfiguration::default(),
        cas_index: None,
    };
    store
        .apply_batch_at(
            12,
            vec![place("web", n1), place("api", n2), config],
            position(12),
        )
        .unwrap();
    (n1, n2)
}

/// What a user reads off two states: every table, summary and index.
fn assert_same_state(a: &StateSnapshot, b: &StateSnapshot) {
    assert_eq!(a.latest_index(), b.latest_index());
    let ids = |s: &StateSnapshot| {
        (
            s.jobs().map(|j| j.id.clone()).collect::<Vec<_>>(),
            s.allocs().map(|a| a.id).collect::<Vec<_>>(),
            s.evals().map(|e| e.id).collect::<Vec<_>>(),
            s.nodes().map(|n| n.id).collect::<Vec<_>>(),
            s.job_summaries().cloned().collect::<Vec<_>>(),
        )
    };
    assert_eq!(ids(a), ids(b));
    assert!(a == b, "tables or derived indexes differ");
}

/// Copies a data dir as it is while its store runs: what a kill leaves.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn a_batch_is_applied_at_its_index_with_gaps_and_replays_change_nothing() {
    let store = StateStore::in_memory();
    let (n1, _) = fill(&store);
    let state = store.snapshot();
    assert_eq!(state.latest_index(), 12);
    // Two commands share index 7; the plan and config share 12.
    assert_eq!(state.job("default", "web").unwrap().create_index, 7);
    assert_eq!(state.job("default", "api").unwrap().create_index, 7);
    assert_eq!(state.allocs_by_node(&n1).count(), 2);
    assert_eq!(state.stored_scheduler_config().unwrap().modify_index, 12);

    // An empty entry (membership, leader no-op) moves only the index and
    // the position.
    let outcome = store.apply_batch_at(20, vec![], position(20)).unwrap();
    assert!(outcome.is_empty());
    assert_eq!(store.latest_index(), 20);
    assert_eq!(store.applied_position(), Some(position(20)));
    assert!(store.snapshot() != state || store.snapshot().latest_index() == 20);

    // A replay at or below the index is answered without change.
    let replay = store
        .apply_batch_at(12, vec![register("late")], position(12))
        .unwrap();
    assert!(replay.is_empty());
    assert!(store.snapshot().job("default", "late").is_none());
    assert_eq!(store.applied_position(), Some(position(20)));
}

#[test]
fn a_rejected_command_of_a_batch_leaves_the_others_applied() {
    let store = StateStore::in_memory();
    let outcome = store
        .apply_batch_at(
            5,
            vec![register("a"), bad_cas(), register("b")],
            position(5),
        )
        .unwrap();
    assert_eq!(outcome.len(), 3);
    assert_eq!(outcome[0].as_ref().unwrap().index, 5);
    assert!(outcome[1].is_err());
    assert_eq!(outcome[2].as_ref().unwrap().index, 5);
    let state = store.snapshot();
    assert!(state.job("default", "a").is_some() && state.job("default", "b").is_some());
    // A batch whose every command is rejected still moves the index, so
    // a reader waiting for the entry's index is answered.
    store
        .apply_batch_at(6, vec![bad_cas()], position(6))
        .unwrap();
    assert_eq!(store.latest_index(), 6);
    assert!(store.snapshot_min_index(6, Duration::from_secs(1)).is_ok());
}

#[test]
fn the_position_is_read_back_after_a_restart_and_after_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path().join("a"), StoreOptions::default()).unwrap();
    assert_eq!(store.applied_position(), None);
    fill(&store);
    store.apply_batch_at(13, vec![], position(13)).unwrap();
    let before = store.snapshot();

    // Killed: the data dir as the running store leaves it.
    copy_dir(&dir.path().join("a"), &dir.path().join("killed"));
    store.close();
    drop(store);

    for copy in ["a", "killed"] {
        let reopened = StateStore::open(dir.path().join(copy), StoreOptions::default()).unwrap();
        assert_eq!(reopened.applied_position(), Some(position(13)), "{copy}");
        assert_same_state(&reopened.snapshot(), &before);
        // It goes on from there: replays change nothing, new batches apply.
        assert!(reopened
            .apply_batch_at(12, vec![register("again")], position(12))
            .unwrap()
            .is_empty());
        reopened
            .apply_batch_at(14, vec![register("next")], position(14))
            .unwrap();
        assert_eq!(reopened.latest_index(), 14);
        reopened.close();
    }
}

#[test]
fn a_checkpoint_imported_into_a_fresh_store_gives_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let source = StateStore::open(dir.path().join("source"), StoreOptions::default()).unwrap();
    fill(&source);
    let mut archive = Vec::new();
    let exported_position = source.export_checkpoint(&mut archive).unwrap();
    assert_eq!(exported_position, Some(position(12)));
    let exported = source.snapshot();
    // Writes after the export are not in it.
    let after = register("after");
    source
        .apply_batch_at(15, vec![after.clone()], position(15))
        .unwrap();

    let target = StateStore::open(dir.path().join("target"), StoreOptions::default()).unwrap();
    target
        .import_checkpoint(&mut &archive[..], position(12))
        .unwrap();
    let imported = target.snapshot();
    assert!(imported.job("default", "after").is_none());
    assert_eq!(target.applied_position(), Some(position(12)));

    assert_same_state(&imported, &exported);

    // Durable: a restart reads the imported state back, and the log
    // continues on it.
    target
        .apply_batch_at(15, vec![after], position(15))
        .unwrap();
    let continued = target.snapshot();
    target.close();
    drop(target);
    let reopened = StateStore::open(dir.path().join("target"), StoreOptions::default()).unwrap();
    assert_same_state(&reopened.snapshot(), &continued);
    assert_eq!(reopened.applied_position(), Some(position(15)));
    assert_same_state(&reopened.snapshot(), &source.snapshot());
}

#[test]
fn an_import_replaces_an_older_state_whole_and_refuses_an_older_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let source = StateStore::in_memory();
    fill(&source);
    let mut archive = Vec::new();
    source.export_checkpoint(&mut archive).unwrap();

    let behind = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    behind
        .apply_batch_at(2, vec![register("only-here")], position(2))
        .unwrap();
    behind
        .import_checkpoint(&mut &archive[..], position(12))
        .unwrap();
    assert!(behind.snapshot().job("default", "only-here").is_none());
    assert_same_state(&behind.snapshot(), &source.snapshot());

    behind
        .apply_batch_at(30, vec![register("newer")], position(30))
        .unwrap();
    let refused = behind.import_checkpoint(&mut &archive[..], position(12));
    assert!(matches!(
        refused,
        Err(StoreError::ImportBehind {
            index: 12,
            latest: 30
        })
    ));
    assert!(behind.snapshot().job("default", "newer").is_some());
    behind.close();
    drop(behind);
    let reopened = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    assert!(reopened.snapshot().job("default", "only-here").is_none());
    assert!(reopened.snapshot().job("default", "newer").is_some());
}

#[test]
fn a_damaged_checkpoint_is_refused_and_changes_nothing() {
    let source = StateStore::in_memory();
    fill(&source);
    let mut archive = Vec::new();
    source.export_checkpoint(&mut archive).unwrap();
    let target = StateStore::in_memory();
    let mut damaged = archive.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x10;
    assert!(target
        .import_checkpoint(&mut &damaged[..], position(12))
        .is_err());
    assert!(target
        .import_checkpoint(&mut &archive[..archive.len() - 1], position(12))
        .is_err());
    assert_eq!(target.latest_index(), 0);
    assert_eq!(target.applied_position(), None);
}

#[test]
fn an_import_wakes_watchers_and_makes_subscribers_resync() {
    let source = StateStore::in_memory();
    let (n1, _) = fill(&source);
    let mut archive = Vec::new();
    source.export_checkpoint(&mut archive).unwrap();

    let target = StateStore::in_memory();
    target
        .apply_batch_at(1, vec![register("before")], position(1))
        .unwrap();
    let jobs = target.watch(TableSet::of(&[super::Table::Jobs]), 1);
    let allocs_of_n1 = target.watch_node_allocs(n1, 1);
    let mut subscription = target.subscribe(2);
    assert!(!subscription.missed);
    let blocked = {
        let target = target.clone();
        std::thread::spawn(move || target.snapshot_min_index(12, Duration::from_secs(10)))
    };

    target
        .import_checkpoint(&mut &archive[..], position(12))
        .unwrap();
    // The plan at 12 moved the jobs table (their status) too.
    assert_eq!(futures::executor::block_on(jobs), Ok(12));
    assert_eq!(futures::executor::block_on(allocs_of_n1), Ok(12));
    assert_eq!(blocked.join().unwrap().unwrap().latest_index(), 12);
    // The stream ends; subscribing again from where it was says the
    // changes in between are gone, so the follower rebuilds.
    assert!(futures::executor::block_on(subscription.receiver.next()).is_none());
    let again = target.subscribe(2);
    assert!(again.missed);
    assert!(again.backlog.is_empty());
}

#[test]
fn namespaces_travel_in_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let source = StateStore::open(dir.path().join("source"), StoreOptions::default()).unwrap();
    let upsert = Command::NamespaceUpsert {
        namespaces: vec![crate::structs::Namespace {
            name: "team-a".into(),
            description: "replicated".into(),
            ..Default::default()
        }],
    };
    source.apply_batch_at(1, vec![upsert], position(1)).unwrap();
    let mut archive = Vec::new();
    source.export_checkpoint(&mut archive).unwrap();

    let target = StateStore::open(dir.path().join("target"), StoreOptions::default()).unwrap();
    target
        .import_checkpoint(&mut &archive[..], position(1))
        .unwrap();
    let imported = target.snapshot();
    assert_eq!(
        imported
            .namespace("team-a")
            .map(|ns| ns.description.clone()),
        Some("replicated".to_string())
    );
    assert_eq!(
        imported.namespace("team-a"),
        source.snapshot().namespace("team-a")
    );
}

#[test]
fn a_restored_backup_moves_past_both_indexes_keeps_every_row_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let source = StateStore::in_memory();
    fill(&source);
    let mut archive = Vec::new();
    source.export_checkpoint(&mut archive).unwrap();
    let saved = StateStore::decode_checkpoint(&archive).unwrap();
    assert_eq!(saved.latest_index(), 12);

    // A single server further along than the backup: 20 writes of its own.
    let target = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    for n in 0..20 {
        target.apply(register(&format!("only-here-{n}"))).unwrap();
    }
    let watch_jobs = target.watch(TableSet::of(&[super::Table::Jobs]), 20);
    let at = target.restore_checkpoint(saved.clone()).unwrap();
    assert_eq!(at, 21);
    let restored = target.snapshot();
    assert_eq!(restored.latest_index(), 21);
    assert_eq!(restored.table_index(super::Table::Allocs), 21);
    assert!(restored.job("default", "only-here-0").is_none());
    let rows = |s: &StateSnapshot| {
        (
            s.jobs().cloned().collect::<Vec<_>>(),
            s.evals().cloned().collect::<Vec<_>>(),
            s.nodes().cloned().collect::<Vec<_>>(),
            s.job_summaries().cloned().collect::<Vec<_>>(),
            s.scheduler_config(),
        )
    };
    assert_eq!(rows(&restored), rows(&source.snapshot()));
    assert!(futures::executor::block_on(watch_jobs).is_ok());

    // The next write numbers on, and a reopen reads the restore back.
    target.apply(register("after")).unwrap();
    assert_eq!(target.latest_index(), 22);
    let continued = target.snapshot();
    target.close();
    drop(target);
    let reopened = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    assert_same_state(&reopened.snapshot(), &continued);

    // Into a store behind the backup: the backup's index plus one.
    let fresh = StateStore::in_memory();
    assert_eq!(fresh.restore_checkpoint(saved).unwrap(), 13);
}

#[test]
fn a_checkpoint_with_a_flipped_bit_does_not_decode() {
    let source = StateStore::in_memory();
    fill(&source);
    let mut archive = Vec::new();
    source.export_checkpoint(&mut archive).unwrap();
    let middle = archive.len() / 2;
    archive[middle] ^= 0x10;
    assert!(StateStore::decode_checkpoint(&archive).is_err());
    archive.truncate(middle);
    assert!(StateStore::decode_checkpoint(&archive).is_err());
}
