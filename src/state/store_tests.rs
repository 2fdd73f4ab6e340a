//! Tests of the store's concurrency surface: group commit with rejected
//! commands, waits for an index or a table change, async watches,
//! subscriptions with replay, and closing.

use super::fixtures;
use super::{Command, StateStore, StoreError, StoreOptions, Table, TableSet};
use crate::structs::{SchedulerConfiguration, TriggeredBy};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn register(name: &str) -> Command {
    let job = fixtures::job("default", name, &[("g", 1)]);
    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
    Command::JobRegister {
        job: Arc::new(job),
        eval: Some(eval),
        enforce_index: None,
    }
}

fn bad_cas() -> Command {
    Command::SchedulerConfigUpdate {
        config: SchedulerConfiguration::default(),
        cas_index: Some(12345),
    }
}

#[test]
fn a_rejected_command_in_a_group_leaves_the_others_applied() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let receivers = vec![
        store.submit(register("a")),
        store.submit(bad_cas()),
        store.submit(register("b")),
    ];
    let results: Vec<_> = receivers
        .into_iter()
        .map(|r| futures::executor::block_on(r).unwrap())
        .collect();
    assert_eq!(results[0].as_ref().unwrap().index, 1);
    assert!(matches!(results[1], Err(StoreError::Rejected(_))));
    assert_eq!(
        results[2].as_ref().unwrap().index,
        2,
        "rejections use no index"
    );
    let state = store.snapshot();
    assert!(state.job("default", "a").is_some() && state.job("default", "b").is_some());
    assert_eq!(state.table_index(Table::SchedulerConfig), 0);
}

#[test]
fn a_staged_write_shows_its_state_once_applied_and_a_refused_one_shows_none() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let staged = store.submit_staged_as_leader(register("a"));
    let applied = futures::executor::block_on(staged.applied).expect("an early state");
    assert!(applied.job("default", "a").is_some(), "it holds the write");
    let outcome = futures::executor::block_on(staged.durable)
        .unwrap()
        .unwrap();
    assert_eq!(applied.latest_index(), outcome.index);
    assert!(store.snapshot().job("default", "a").is_some());

    let refused = store.submit_staged_as_leader(bad_cas());
    assert!(
        futures::executor::block_on(refused.applied).is_err(),
        "nothing applied, nothing to show"
    );
    let outcome = futures::executor::block_on(refused.durable).unwrap();
    assert!(matches!(outcome, Err(StoreError::Rejected(_))));
    assert_eq!(store.snapshot().latest_index(), 1);
}

#[test]
fn snapshot_min_index_waits_for_the_writer_and_times_out() {
    let store = StateStore::in_memory();
    let err = store
        .snapshot_min_index(1, Duration::from_millis(20))
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::Timeout {
            index: 1,
            latest: 0
        }
    ));

    let writer = store.clone();
    let handle = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        writer.apply(register("a")).unwrap();
    });
    let snap = store
        .snapshot_min_index(1, Duration::from_secs(10))
        .unwrap();
    assert!(snap.job("default", "a").is_some());
    handle.join().unwrap();
}

#[test]
fn wait_for_change_wakes_only_for_the_watched_tables() {
    let store = StateStore::in_memory();
    let index = store.apply(register("a")).unwrap().index;

    // A change to nodes does not end a wait on allocations.
    let writer = store.clone();
    let handle = std::thread::spawn(move || {
        writer
            .apply(Command::NodeRegister {
                node: Arc::new(fixtures::node("n1")),
            })
            .unwrap();
    });
    let started = Instant::now();
    let snap = store.wait_for_change(
        TableSet::of(&[Table::Allocs]),
        index,
        Duration::from_millis(100),
    );
    handle.join().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(snap.table_index(Table::Allocs), 0);

    let writer = store.clone();
    let handle = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        writer.apply(register("b")).unwrap().index
    });
    let snap = store.wait_for_change(
        TableSet::of(&[Table::Jobs]),
        store.latest_index(),
        Duration::from_secs(10),
    );
    let changed_at = handle.join().unwrap();
    assert_eq!(snap.table_index(Table::Jobs), changed_at);
}

#[test]
fn watch_resolves_when_a_table_moves_past_the_index() {
    let store = StateStore::in_memory();
    let first = store.apply(register("a")).unwrap().index;
    let already = store.watch(TableSet::of(&[Table::Jobs]), 0);
    assert_eq!(futures::executor::block_on(already).unwrap(), first);

    let pending = store.watch(TableSet::of(&[Table::Jobs]), first);
    let unrelated = store.watch(TableSet::of(&[Table::Nodes]), 0);
    let second = store.apply(register("b")).unwrap().index;
    assert_eq!(futures::executor::block_on(pending).unwrap(), second);
    drop(store);
    // Never woken: the store closed, so the watch ends unresolved.
    assert!(futures::executor::block_on(unrelated).is_err());
}

#[test]
fn subscribers_replay_the_buffer_then_follow() {
    use futures::StreamExt;
    let store = StateStore::in_memory();
    store.apply(register("a")).unwrap();
    let second = store.apply(register("b")).unwrap().index;
    let mut sub = store.subscribe(second);
    assert!(!sub.missed);
    assert_eq!(
        sub.backlog.iter().map(|c| c.index).collect::<Vec<_>>(),
        vec![second]
    );
    assert!(sub.backlog[0].jobs().any(|j| j.id == "b"));
    let third = store.apply(register("c")).unwrap().index;
    let next = futures::executor::block_on(sub.receiver.next()).unwrap();
    assert_eq!(next.index, third);

    let small = StateStore::in_memory_with(StoreOptions {
        event_buffer: 1,
        ..StoreOptions::default()
    });
    small.apply(register("a")).unwrap();
    small.apply(register("b")).unwrap();
    assert!(
        small.subscribe(1).missed,
        "index 1 fell out of a 1-entry buffer"
    );
}

#[test]
fn the_buffer_keeps_only_as_many_rows_as_allowed_but_always_the_newest_command() {
    // A registration changes its job and its evaluation (and the summary):
    // at least two rows, so a budget of one row holds only the newest.
    let store = StateStore::in_memory_with(StoreOptions {
        event_buffer_rows: 1,
        ..StoreOptions::default()
    });
    let first = store.apply(register("a")).unwrap();
    assert!(first.changes.changes.len() > 1);
    let first = first.index;
    let second = store.apply(register("b")).unwrap().index;
    assert!(
        store.subscribe(first).missed,
        "a's rows were over the budget"
    );
    let sub = store.subscribe(second);
    assert!(!sub.missed, "the newest command stays, over budget or not");
    assert_eq!(sub.backlog.len(), 1);
    assert!(sub.backlog[0].jobs().any(|j| j.id == "b"));
}

#[test]
fn close_applies_what_was_queued_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let queued = store.submit(register("a"));
    store.close();
    assert!(futures::executor::block_on(queued).unwrap().is_ok());
    assert!(matches!(
        store.apply(register("b")),
        Err(StoreError::Closed)
    ));
    drop(store);
    let reopened = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    assert!(reopened.snapshot().job("default", "a").is_some());
}

/// "Closed" means the data dir can be opened again at once: sled's own
/// threads may hold its lock a moment after its last handle is gone (the
/// checkpoints here keep them busy), and close waits that out.
#[test]
fn a_closed_store_has_let_go_of_its_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        wal_segment_bytes: 4 << 10,
        checkpoint_bytes: 8 << 10,
        ..StoreOptions::default()
    };
    for round in 0..20 {
        let store = StateStore::open(dir.path(), options.clone()).unwrap();
        for i in 0..20 {
            store.apply(register(&format!("job-{round}-{i}"))).unwrap();
        }
        let other_clone = store.clone();
        store.close();
        assert!(
            super::sled_lock::wait_until_unlocked(dir.path(), Duration::ZERO),
            "round {round}: sled's lock still held after close"
        );
        drop(other_clone);
    }
}

/// Places one allocation of job "web" on `node` (registering the job the
/// first time) and returns its ID and the plan's index.
fn place_on(store: &StateStore, node: crate::structs::NodeId) -> (crate::structs::AllocId, u64) {
    use crate::state::PlanResults;
    let job = fixtures::job("default", "web", &[("g", 1)]);
    if store.snapshot().job("default", "web").is_none() {
        store.apply(register("web")).unwrap();
    }
    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
    let alloc = fixtures::AllocBuilder::new(&job, "g").build(0, node, eval.id, 1);
    let id = alloc.id;
    let index = store
        .apply(Command::ApplyPlanResults(PlanResults {
            eval_id: eval.id,
            node_allocation: [(node, vec![alloc])].into_iter().collect(),
            updated_at: 1,
            ..Default::default()
        }))
        .unwrap()
        .index;
    (id, index)
}

#[test]
fn a_node_watch_wakes_only_for_that_nodes_allocations() {
    let store = StateStore::in_memory();
    let (a, b) = (crate::structs::new_id(), crate::structs::new_id());
    let (_, first) = place_on(&store, a);
    let watch_a = store.watch_node_allocs(a, first);
    let mut watch_b = store.watch_node_allocs(b, store.latest_index());
    let (_, second) = place_on(&store, a);
    assert_eq!(
        futures::executor::block_on(watch_a).unwrap(),
        second,
        "woken with the node's newest allocation index"
    );
    assert_eq!(
        watch_b.try_recv().unwrap(),
        None,
        "a change on another node does not wake this one"
    );
    let (_, third) = place_on(&store, b);
    assert_eq!(futures::executor::block_on(watch_b).unwrap(), third);
}

#[test]
fn a_node_watch_answers_at_once_with_the_node_index_or_the_table_index() {
    let store = StateStore::in_memory();
    let (a, empty) = (crate::structs::new_id(), crate::structs::new_id());
    let (_, placed) = place_on(&store, a);
    store.apply(register("other")).unwrap();
    // Later commands that touch no allocation of `a` leave its index.
    assert_eq!(super::node_allocs_index(&store.snapshot(), &a), placed);
    let already = store.watch_node_allocs(a, placed - 1);
    assert_eq!(futures::executor::block_on(already).unwrap(), placed);
    // A node without allocations is at the allocations table's index.
    let table = store.snapshot().table_index(Table::Allocs);
    assert_eq!(super::node_allocs_index(&store.snapshot(), &empty), table);
    let none_yet = store.watch_node_allocs(empty, 0);
    assert_eq!(futures::executor::block_on(none_yet).unwrap(), table);
}

#[test]
fn dropped_node_watchers_are_cleaned_up() {
    let store = StateStore::in_memory();
    let a = crate::structs::new_id();
    let (_, placed) = place_on(&store, a);
    for _ in 0..5 {
        drop(store.watch_node_allocs(a, placed));
    }
    // Re-polling after timeouts prunes the node's closed watchers.
    let live = store.watch_node_allocs(a, placed);
    assert_eq!(store.node_watcher_count(), 1);
    // Nodes that stopped polling are swept once the map grows.
    for _ in 0..3000 {
        drop(store.watch_node_allocs(crate::structs::new_id(), u64::MAX));
    }
    assert!(
        store.node_watcher_count() < 2100,
        "closed watchers of other nodes were swept: {} left",
        store.node_watcher_count()
    );
    let (_, again) = place_on(&store, a);
    assert_eq!(futures::executor::block_on(live).unwrap(), again);
}

#[test]
fn deleting_a_nodes_last_allocation_wakes_its_watcher() {
    let store = StateStore::in_memory();
    let (a, b) = (crate::structs::new_id(), crate::structs::new_id());
    let (gone, placed) = place_on(&store, a);
    let watch = store.watch_node_allocs(a, placed);
    let mut other = store.watch_node_allocs(b, store.latest_index());
    let deleted = store
        .apply(Command::EvalDelete {
            eval_ids: vec![],
            alloc_ids: vec![gone],
        })
        .unwrap()
        .index;
    // With no allocation left, the node is at the table's index.
    assert_eq!(futures::executor::block_on(watch).unwrap(), deleted);
    assert_eq!(other.try_recv().unwrap(), None);
}

/// Commits go to the log; closed segments are folded into sled once they
/// add up to the checkpoint size. A restart reads sled's rows and replays
/// the newer log records over them, deletes included.
#[test]
fn a_restart_reads_the_checkpoint_and_replays_the_log_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        wal_segment_bytes: 4 << 10,
        checkpoint_bytes: 16 << 10,
        ..StoreOptions::default()
    };
    let store = StateStore::open(dir.path(), options).unwrap();
    let node = fixtures::node("n1");
    store
        .apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        })
        .unwrap();
    for i in 0..60 {
        store.apply(register(&format!("job-{i}"))).unwrap();
    }
    let (placed, _) = place_on(&store, node.id);
    // Deletes late in the log: rows sled holds, removed by replay.
    let early_evals: Vec<_> = store
        .snapshot()
        .evals_by_job("default", "job-0")
        .map(|e| e.id)
        .collect();
    store
        .apply(Command::EvalDelete {
            eval_ids: early_evals,
            alloc_ids: vec![placed],
        })
        .unwrap();
    let before = store.snapshot();
    store.close();
    drop(store);

    let db = sled::open(dir.path()).unwrap();
    let meta: serde_json::Value = serde_json::from_slice(&db.get(b"m").unwrap().unwrap()).unwrap();
    let checkpointed = meta["LastIndex"].as_u64().unwrap();
    assert!(
        checkpointed > 0 && checkpointed < before.latest_index(),
        "sled holds an earlier index ({checkpointed}), the log the rest ({})",
        before.latest_index()
    );
    drop(db);

    let reopened = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let after = reopened.snapshot();
    assert!(after == before, "the reopened state differs");
    assert!(after.alloc(&placed).is_none());
    assert_eq!(after.evals_by_job("default", "job-0").count(), 0);
    assert_eq!(after.jobs().count(), 61);
    reopened.close();
    drop(reopened);

    // Restarts without writes do not pile up empty segments.
    let segments = || std::fs::read_dir(dir.path().join("wal")).unwrap().count();
    let before_restarts = segments();
    for _ in 0..3 {
        StateStore::open(dir.path(), StoreOptions::default())
            .unwrap()
            .close();
    }
    assert_eq!(segments(), before_restarts);
}

#[test]
fn service_registrations_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let node = fixtures::node("n1");
    store
        .apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        })
        .unwrap();
    let (alloc_id, _) = place_on(&store, node.id);
    let service = crate::structs::ServiceRegistration {
        id: format!("_nomad-task-{alloc_id}-g-web-8080"),
        service_name: "web".into(),
        namespace: "default".into(),
        alloc_id: alloc_id.to_string(),
        port: 8080,
        ..Default::default()
    };
    store
        .apply(Command::ServiceRegistrationUpsert {
            services: vec![service],
        })
        .unwrap();
    let before = store.snapshot();
    store.close();
    drop(store);
    let reopened = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let after = reopened.snapshot();
    let found: Vec<_> = after.services_named("default", "web").collect();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].port, 8080);
    assert_eq!(
        after.table_index(Table::Services),
        before.table_index(Table::Services)
    );
}

#[test]
fn namespaces_and_their_deletion_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let ns = |name: &str| crate::structs::Namespace {
        name: name.into(),
        description: format!("{name} team"),
        ..Default::default()
    };
    store
        .apply(Command::NamespaceUpsert {
            namespaces: vec![ns("kept"), ns("gone")],
        })
        .unwrap();
    store
        .apply(Command::NamespaceDelete {
            names: vec!["gone".into()],
        })
        .unwrap();
    let before = store.snapshot();
    store.close();
    drop(store);
    let reopened = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let after = reopened.snapshot();
    assert_eq!(after.namespace("kept"), before.namespace("kept"));
    assert_eq!(after.namespace("kept").unwrap().description, "kept team");
    assert!(after.namespace("gone").is_none());
    assert_eq!(
        after.table_index(Table::Namespaces),
        before.table_index(Table::Namespaces)
    );
}

#[test]
fn variables_and_root_keys_survive_a_restart() {
    use crate::structs::{EncryptedData, KeyMaterial, RootKey, RootKeyMeta, VariableEncrypted};
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let key = RootKey {
        meta: RootKeyMeta {
            key_id: "k1".into(),
            ..Default::default()
        },
        key: KeyMaterial(vec![9; 32]),
    };
    store.apply(Command::RootKeyInit { key }).unwrap();
    let mut variable = VariableEncrypted::default();
    variable.meta.namespace = "default".into();
    variable.meta.path = "app/db".into();
    variable.data = EncryptedData {
        key_id: "k1".into(),
        nonce: vec![1; 12],
        ciphertext: vec![3; 40],
    };
    store
        .apply(Command::VariableUpsert {
            variable,
            cas: Some(0),
            lock_id: None,
            now: 5,
        })
        .unwrap();
    let before = store.snapshot();
    store.close();
    drop(store);
    let reopened = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let after = reopened.snapshot();
    assert_eq!(
        after.variable("default", "app/db"),
        before.variable("default", "app/db")
    );
    assert_eq!(after.root_key("k1").unwrap().key.0, vec![9; 32]);
    assert_eq!(
        after.table_index(Table::Variables),
        before.table_index(Table::Variables)
    );
}

/// A data dir of format 5, whose allocation rows spell out every score of
/// their metrics, opens as format 6: the allocation's metric reads back
/// the same, kept in the shorter form, and the meta row says 6.
#[test]
fn a_format_5_allocation_row_reads_back_with_its_metric_shortened() {
    use crate::structs::{AllocMetric, NodeScoreMeta, PackedMetric, ScoreMap};
    let dir = tempfile::tempdir().unwrap();
    // Every commit checkpointed: the row is in sled, where it is rewritten.
    let checkpoint_each_commit = StoreOptions {
        wal_segment_bytes: 1,
        checkpoint_bytes: 0,
        ..StoreOptions::default()
    };
    let store = StateStore::open(dir.path(), checkpoint_each_commit).unwrap();
    let node = fixtures::node("n1");
    store
        .apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        })
        .unwrap();
    store.apply(register("web")).unwrap();
    let job = fixtures::job("default", "web", &[("g", 1)]);
    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
    let mut alloc = fixtures::AllocBuilder::new(&job, "g").build(0, node.id, eval.id, 1);
    let metric = AllocMetric {
        nodes_evaluated: 2,
        score_meta_data: (1..=2u128)
            .map(|i| NodeScoreMeta {
                node_id: uuid::Uuid::from_u128(i),
                scores: ScoreMap::from_entries([("binpack", 0.25), ("normalized-score", 0.25)]),
                norm_score: 0.25,
            })
            .collect(),
        ..Default::default()
    };
    let packed = PackedMetric::pack(&metric);
    alloc.metrics = Some(packed.clone());
    let id = alloc.id;
    store
        .apply(Command::ApplyPlanResults(crate::state::PlanResults {
            eval_id: eval.id,
            node_allocation: [(node.id, vec![alloc])].into_iter().collect(),
            updated_at: 1,
            ..Default::default()
        }))
        .unwrap();
    store.close();
    drop(store);

    // Back to format 5: the row as that format wrote it, the meta's version.
    let db = sled::open(dir.path()).unwrap();
    let (key, row) = db.scan_prefix(b"a").next().unwrap().unwrap();
    let stored = packed.to_stored();
    assert!(row.ends_with(&stored), "the metric ends the row");
    let mut old_row = row[..row.len() - stored.len()].to_vec();
    old_row.extend_from_slice(&packed.spelled_out());
    db.insert(key, old_row).unwrap();
    let mut meta: serde_json::Value =
        serde_json::from_slice(&db.get(b"m").unwrap().unwrap()).unwrap();
    meta["FormatVersion"] = 5.into();
    db.insert(b"m", serde_json::to_vec(&meta).unwrap()).unwrap();
    db.flush().unwrap();
    drop(db);

    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let state = store.snapshot();
    let read = state
        .alloc(&id)
        .expect("the allocation is loaded, not quarantined");
    let read_metric = read.metrics.as_ref().expect("with its metric");
    assert_eq!(read_metric, &packed, "kept shortened");
    assert_eq!(read_metric.unpack(), metric);
    store.close();
    drop(store);
    let db = sled::open(dir.path()).unwrap();
    let meta: serde_json::Value = serde_json::from_slice(&db.get(b"m").unwrap().unwrap()).unwrap();
    assert_eq!(meta["FormatVersion"], 6);
}
