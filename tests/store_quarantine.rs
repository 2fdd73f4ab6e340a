//! A stored row that cannot be loaded never stops the store from opening:
//! it is quarantined (left out of the state, kept in the data dir's
//! `quarantine` tree, listed by `StateStore::quarantined`), whether it sits
//! in sled's checkpoint or inside a sound record of the write-ahead log,
//! and whether it does not decode or decodes into a job that fails
//! validation. Quarantining is idempotent across restarts and survives a
//! checkpoint. A damaged log record stays fatal.
//!
//! Rows are written the way an older or buggy build would have left them:
//! straight into sled (as `tests/store_migrate.rs` does), or as a log
//! record appended to the newest segment in the documented record format
//! (`src/state/wal.rs`) with a valid checksum, so that the problem is the
//! row, not the log.

use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{
    sled_lock, Command, PlanResults, QuarantineSource, StateSnapshot, StateStore, StoreError,
    StoreOptions, Table, FORMAT_VERSION,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Every commit closes its log segment and is folded into sled at once.
fn checkpoint_each_commit() -> StoreOptions {
    StoreOptions {
        wal_segment_bytes: 1,
        checkpoint_bytes: 0,
        ..StoreOptions::default()
    }
}

fn job_key(prefix: u8, namespace: &str, id: &str) -> Vec<u8> {
    let mut key = vec![prefix];
    key.extend_from_slice(namespace.as_bytes());
    key.push(0);
    key.extend_from_slice(id.as_bytes());
    key
}

fn version_key(namespace: &str, id: &str, version: u64) -> Vec<u8> {
    let mut key = job_key(b'v', namespace, id);
    key.push(0);
    key.extend_from_slice(&version.to_be_bytes());
    key
}

fn id_key(prefix: u8, id: uuid::Uuid) -> Vec<u8> {
    let mut key = vec![prefix];
    key.extend_from_slice(id.as_bytes());
    key
}

fn alloc_key(create_index: u64, id: uuid::Uuid) -> Vec<u8> {
    let mut key = vec![b'a'];
    key.extend_from_slice(&create_index.to_be_bytes());
    key.extend_from_slice(id.as_bytes());
    key
}

/// A store with jobs `web` and `api`, a node, and two allocations of
/// `api` on it; returns the node's ID.
fn populate(store: &StateStore) -> uuid::Uuid {
    let node = fixtures::node("node-1");
    store
        .apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        })
        .unwrap();
    fixtures::register_job(store, fixtures::job("default", "web", &[("frontend", 2)]));
    let api = fixtures::job("default", "api", &[("g", 2)]);
    fixtures::register_job(store, api.clone());
    let eval = store
        .snapshot()
        .evals_by_job("default", "api")
        .next()
        .unwrap()
        .id;
    let builder = AllocBuilder::new(&api, "g");
    let allocs = (0..2).map(|n| builder.build(n, node.id, eval, 1)).collect();
    store
        .apply(Command::ApplyPlanResults(PlanResults {
            eval_id: eval,
            job: Some(Arc::new(api)),
            node_allocation: HashMap::from([(node.id, allocs)]),
            updated_at: 1,
            ..Default::default()
        }))
        .unwrap();
    node.id
}

/// Opens, populates and closes a store in a new dir.
fn populated_dir(options: StoreOptions) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let store = StateStore::open(tmp.path(), options).unwrap();
    populate(&store);
    store.close();
    tmp
}

fn open(dir: &Path) -> StateStore {
    StateStore::open(dir, StoreOptions::default())
        .unwrap_or_else(|e| panic!("the store must open despite a bad row: {e}"))
}

/// The data dir's sled database opened directly. sled lets go of its lock
/// from its IO threads a moment after the last handle is dropped, so an
/// open right after another one (this test's previous raw write) waits
/// that out first, as the store's own open does (`state::sled_lock`).
fn raw_db(dir: &Path) -> sled::Db {
    sled_lock::wait_until_unlocked(dir, sled_lock::RELEASE_WAIT);
    sled::open(dir).unwrap()
}

fn write_raw(dir: &Path, key: &[u8], value: &[u8]) {
    let db = raw_db(dir);
    db.insert(key, value).unwrap();
    db.flush().unwrap();
}

/// Raw rows: key to value.
type RawTree = HashMap<Vec<u8>, Vec<u8>>;

/// The raw main tree and quarantine tree of a closed store.
fn raw_trees(dir: &Path) -> (RawTree, RawTree) {
    let db = raw_db(dir);
    let read = |tree: &sled::Tree| {
        tree.iter()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.to_vec(), v.to_vec())
            })
            .collect()
    };
    let quarantine = db.open_tree("quarantine").unwrap();
    (read(&db), read(&quarantine))
}

/// What a state holds, in a comparable form.
fn contents(state: &StateSnapshot) -> (Vec<String>, usize, usize, usize, usize) {
    let mut jobs: Vec<String> = state.jobs().map(|j| j.id.clone()).collect();
    jobs.sort();
    (
        jobs,
        state.alloc_count(),
        state.evals().count(),
        state.node_count(),
        state.job_summaries().count(),
    )
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir.join("wal"))
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    found.retain(|p| p.extension().is_some_and(|e| e == "log"));
    found.sort();
    found
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The meta row of a state at `index`, every table changed at most then.
fn meta_at(state: &StateSnapshot, index: u64) -> Vec<u8> {
    let tables: serde_json::Map<String, serde_json::Value> = Table::ALL
        .iter()
        .map(|t| {
            (
                t.name().to_string(),
                state.table_index(*t).min(index).into(),
            )
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "FormatVersion": FORMAT_VERSION,
        "LastIndex": index,
        "TableIndexes": tables,
    }))
    .unwrap()
}

/// Appends one log record (one commit at `index` writing `rows`) to the
/// newest segment, in the format of `src/state/wal.rs`: length and CRC-32
/// of the payload, then the index, the meta row and the rows.
fn append_record(dir: &Path, index: u64, meta: &[u8], rows: &[(&[u8], Option<&[u8]>)]) {
    let mut payload = index.to_le_bytes().to_vec();
    varint(&mut payload, meta.len() as u64);
    payload.extend_from_slice(meta);
    varint(&mut payload, rows.len() as u64);
    for (key, value) in rows {
        varint(&mut payload, key.len() as u64);
        payload.extend_from_slice(key);
        match value {
            Some(value) => {
                payload.push(1);
                varint(&mut payload, value.len() as u64);
                payload.extend_from_slice(value);
            }
            None => payload.push(0),
        }
    }
    let mut record = (payload.len() as u32).to_le_bytes().to_vec();
    record.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    record.extend_from_slice(&payload);
    let newest = segments(dir).pop().expect("the store left a log segment");
    let mut bytes = std::fs::read(&newest).unwrap();
    bytes.extend_from_slice(&record);
    std::fs::write(&newest, bytes).unwrap();
}

#[test]
fn a_garbage_job_row_in_sled_is_quarantined_and_the_store_opens() {
    // Checkpointed, so the good rows sit in sled beside the bad one.
    let tmp = populated_dir(checkpoint_each_commit());
    let before = open(tmp.path());
    let expected = contents(&before.snapshot());
    let index = before.latest_index();
    assert!(before.quarantined().is_empty());
    before.close();
    drop(before);
    let broken = job_key(b'j', "default", "broken");
    write_raw(tmp.path(), &broken, br#"{"ID": "broken", "Type": "#);

    let store = open(tmp.path());
    let state = store.snapshot();
    assert_eq!(contents(&state), expected, "every other row is intact");
    assert_eq!(state.latest_index(), index);
    assert!(state.job("default", "broken").is_none());
    let quarantined = store.quarantined();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert_eq!(quarantined[0].key, "j:default/broken");
    assert_eq!(quarantined[0].raw_key, broken);
    assert_eq!(quarantined[0].source, QuarantineSource::Checkpoint);
    assert_eq!(quarantined[0].found_at_index, index);
    assert!(quarantined[0].reason.contains("EOF"), "{quarantined:?}");
    store.close();
    drop(store);

    // Moved out of the main tree, its bytes kept in the quarantine tree.
    let (main, quarantine) = raw_trees(tmp.path());
    assert!(!main.contains_key(&broken));
    let entry: serde_json::Value = serde_json::from_slice(&quarantine[&broken]).unwrap();
    let hex: String = br#"{"ID": "broken", "Type": "#.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(entry["Value"], hex.as_str());

    // Idempotent: the next open finds nothing new and lists one entry.
    let again = open(tmp.path());
    assert_eq!(again.quarantined(), quarantined);
    assert_eq!(contents(&again.snapshot()), expected);
    assert!(again.snapshot().job("default", "broken").is_none());
}

#[test]
fn every_kind_of_bad_row_in_sled_is_quarantined() {
    let tmp = tempfile::tempdir().unwrap();
    let store = StateStore::open(tmp.path(), checkpoint_each_commit()).unwrap();
    let node_id = populate(&store);
    let expected = contents(&store.snapshot());
    let alloc = store.snapshot().allocs().next().unwrap().clone();
    store.close();
    drop(store);

    let other_node = uuid::Uuid::new_v4();
    let (node_json, alloc_row) = {
        let db = raw_db(tmp.path());
        let node = db.get(id_key(b'n', node_id)).unwrap().unwrap().to_vec();
        let key = alloc_key(alloc.create_index, alloc.id);
        (node, db.get(key).unwrap().unwrap().to_vec())
    };
    let bad: Vec<(Vec<u8>, Vec<u8>)> = vec![
        // A binary allocation row that is not one.
        (
            alloc_key(alloc.create_index + 100, uuid::Uuid::new_v4()),
            vec![0xff; 7],
        ),
        // A sound allocation row under another allocation's ID, and under
        // another create index.
        (
            alloc_key(alloc.create_index, uuid::Uuid::new_v4()),
            alloc_row.clone(),
        ),
        (alloc_key(alloc.create_index + 7, alloc.id), alloc_row),
        // A key of no table.
        (b"xsomething".to_vec(), b"{}".to_vec()),
        // An allocation key of the wrong length.
        (b"ashort".to_vec(), b"{}".to_vec()),
        // A node row stored under another node's ID.
        (id_key(b'n', other_node), node_json),
        // An evaluation that is not JSON.
        (id_key(b'e', uuid::Uuid::new_v4()), b"\x00\x01".to_vec()),
        // A job version whose key is not UTF-8.
        (
            vec![b'v', 0xc3, 0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            b"{}".to_vec(),
        ),
    ];
    for (key, value) in &bad {
        write_raw(tmp.path(), key, value);
    }

    let store = open(tmp.path());
    assert_eq!(contents(&store.snapshot()), expected);
    assert!(store.snapshot().node(&other_node).is_none());
    let mut listed: Vec<Vec<u8>> = store.quarantined().into_iter().map(|q| q.raw_key).collect();
    let mut wanted: Vec<Vec<u8>> = bad.iter().map(|(k, _)| k.clone()).collect();
    listed.sort();
    wanted.sort();
    assert_eq!(listed, wanted);
    store.close();
    drop(store);
    let (main, _) = raw_trees(tmp.path());
    assert!(wanted.iter().all(|k| !main.contains_key(k)));
    assert_eq!(open(tmp.path()).quarantined().len(), bad.len());
}

#[test]
fn a_garbage_row_inside_a_sound_log_record_is_quarantined() {
    // Not checkpointed: every row is in the log.
    let tmp = populated_dir(StoreOptions::default());
    let store = open(tmp.path());
    let state = store.snapshot();
    let index = state.latest_index() + 1;
    store.close();
    drop(store);
    // One commit that replaced `web` with garbage and registered `new`.
    let mut new = fixtures::job("default", "new", &[("g", 1)]);
    new.create_index = index;
    new.modify_index = index;
    let new_json = serde_json::to_vec(&new).unwrap();
    let web = job_key(b'j', "default", "web");
    append_record(
        tmp.path(),
        index,
        &meta_at(&state, index),
        &[
            (&web, Some(&b"{\"ID\":\"web\",\"Name\":"[..])),
            (&job_key(b'j', "default", "new"), Some(&new_json)),
        ],
    );

    let store = open(tmp.path());
    let after = store.snapshot();
    assert_eq!(after.latest_index(), index, "the record was replayed");
    assert!(after.job("default", "new").is_some(), "its sound rows load");
    assert!(
        after.job("default", "web").is_none(),
        "no row under the quarantined key, not the value it replaced"
    );
    assert!(after.job("default", "api").is_some());
    assert_eq!(after.alloc_count(), 2);
    let quarantined = store.quarantined();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert_eq!(quarantined[0].key, "j:default/web");
    assert_eq!(quarantined[0].source, QuarantineSource::Log);
    assert_eq!(quarantined[0].found_at_index, index);
    store.close();
    drop(store);

    // The segment is replayed again (not checkpointed yet): same entry.
    let again = open(tmp.path());
    assert_eq!(again.quarantined(), quarantined);
    assert!(again.snapshot().job("default", "web").is_none());
    assert!(again.snapshot().job("default", "new").is_some());
}

#[test]
fn quarantined_log_rows_are_not_folded_back_into_sled() {
    // `web` checkpointed into sled, then a log record writes garbage over it.
    let tmp = populated_dir(checkpoint_each_commit());
    let store = open(tmp.path());
    let state = store.snapshot();
    let index = state.latest_index() + 1;
    store.close();
    drop(store);
    let web = job_key(b'j', "default", "web");
    assert!(raw_trees(tmp.path()).0.contains_key(&web));
    append_record(
        tmp.path(),
        index,
        &meta_at(&state, index),
        &[(&web, Some(&b"\xffnot json"[..]))],
    );
    let with_record = segments(tmp.path());

    let store = StateStore::open(tmp.path(), checkpoint_each_commit()).unwrap();
    assert!(store.snapshot().job("default", "web").is_none());
    assert_eq!(store.quarantined().len(), 1);
    // The next commit closes its segment and folds every closed one,
    // the record with the garbage row among them.
    fixtures::register_job(&store, fixtures::job("default", "db", &[("g", 1)]));
    store.close();
    drop(store);

    let remaining = segments(tmp.path());
    assert!(
        with_record.iter().all(|s| !remaining.contains(s)),
        "the segment was checkpointed: {remaining:?}"
    );
    let (main, quarantine) = raw_trees(tmp.path());
    assert!(
        !main.contains_key(&web),
        "neither the garbage nor the value it replaced is back in sled"
    );
    assert!(main.contains_key(&job_key(b'j', "default", "db")));
    assert_eq!(quarantine.len(), 1);

    let store = open(tmp.path());
    let state = store.snapshot();
    assert!(state.job("default", "web").is_none());
    assert!(state.job("default", "db").is_some());
    assert!(state.job("default", "api").is_some());
    let quarantined = store.quarantined();
    assert_eq!(quarantined.len(), 1);
    assert_eq!(quarantined[0].key, "j:default/web");
    assert_eq!(quarantined[0].found_at_index, index);

    // A job registered again under the quarantined key is folded as usual.
    let store2 = {
        store.close();
        drop(store);
        StateStore::open(tmp.path(), checkpoint_each_commit()).unwrap()
    };
    fixtures::register_job(&store2, fixtures::job("default", "web", &[("frontend", 1)]));
    fixtures::register_job(&store2, fixtures::job("default", "db2", &[("g", 1)]));
    store2.close();
    drop(store2);
    assert!(raw_trees(tmp.path()).0.contains_key(&web));
    let reopened = open(tmp.path());
    assert!(reopened.snapshot().job("default", "web").is_some());
    assert_eq!(
        reopened.quarantined().len(),
        1,
        "the entry stays for the operator"
    );
}

#[test]
fn a_stored_job_that_fails_validation_is_quarantined_with_its_versions() {
    let tmp = populated_dir(checkpoint_each_commit());
    let store = open(tmp.path());
    let state = store.snapshot();
    let api = state.job("default", "api").unwrap().as_ref().clone();
    let allocs = state.alloc_count();
    let evals = state.evals_by_job("default", "api").count();
    store.close();
    drop(store);
    // The stored job and its version as they are, but with a Count no
    // server could place (issue 15: it was persisted, then every start
    // crashed).
    let mut invalid = api.clone();
    invalid.task_groups[0].count = i32::MAX;
    assert!(invalid.check_loadable().is_err());
    let raw = serde_json::to_vec(&invalid).unwrap();
    write_raw(tmp.path(), &job_key(b'j', "default", "api"), &raw);
    write_raw(
        tmp.path(),
        &version_key("default", "api", api.version),
        &raw,
    );

    let store = open(tmp.path());
    let state = store.snapshot();
    assert!(state.job("default", "api").is_none());
    assert!(state
        .job_by_version("default", "api", api.version)
        .is_none());
    // Its allocations and evaluations are left alone: every reader of
    // them handles a missing job (as a purged one).
    assert_eq!(state.alloc_count(), allocs);
    assert_eq!(state.allocs_by_job("default", "api").count(), 2);
    assert_eq!(state.evals_by_job("default", "api").count(), evals);
    assert!(state.job("default", "web").is_some());
    let quarantined = store.quarantined();
    let keys: Vec<&str> = quarantined.iter().map(|q| q.key.as_str()).collect();
    assert_eq!(keys.len(), 2, "{quarantined:?}");
    assert!(quarantined
        .iter()
        .all(|q| q.reason.contains("Count 2147483647 is more than the limit")));
    store.close();
    drop(store);
    assert_eq!(open(tmp.path()).quarantined(), quarantined);
}

#[test]
fn an_invalid_job_the_store_once_accepted_into_its_log_is_quarantined() {
    // The store applies what it is given; validation is the API's. A job
    // that slipped past it (an older build, a rule added since) is in the
    // log exactly as this build writes rows.
    let tmp = tempfile::tempdir().unwrap();
    let store = StateStore::open(tmp.path(), StoreOptions::default()).unwrap();
    populate(&store);
    let mut nameless = fixtures::job("default", "nameless", &[("g", 1)]);
    nameless.task_groups[0].count = i32::MAX;
    assert!(nameless.check_loadable().is_err());
    fixtures::register_job(&store, nameless);
    assert!(store.snapshot().job("default", "nameless").is_some());
    store.close();
    drop(store);

    let store = open(tmp.path());
    let state = store.snapshot();
    assert!(state.job("default", "nameless").is_none());
    assert!(state.job("default", "web").is_some());
    assert_eq!(
        state.evals_by_job("default", "nameless").count(),
        1,
        "its evaluation stays: the scheduler treats a missing job as purged"
    );
    let quarantined = store.quarantined();
    assert_eq!(quarantined.len(), 2, "job and version: {quarantined:?}");
    assert!(quarantined
        .iter()
        .all(|q| q.source == QuarantineSource::Log && q.reason.contains("too large to load")));
}

#[test]
fn a_stored_job_a_newer_rule_would_refuse_still_loads() {
    // Validation rules and configured limits change; a job accepted
    // earlier must not vanish at the next start because of it.
    let tmp = tempfile::tempdir().unwrap();
    let store = StateStore::open(tmp.path(), StoreOptions::default()).unwrap();
    populate(&store);
    let mut old = fixtures::job("default", "old", &[("g", 150_000)]);
    old.task_groups[0].tasks[0].name = "alloc".into();
    assert!(old.validate().is_err(), "refused by today's defaults");
    fixtures::register_job(&store, old);
    store.close();
    drop(store);
    let store = open(tmp.path());
    assert!(store.snapshot().job("default", "old").is_some());
    assert!(store.quarantined().is_empty());
}

#[test]
fn a_damaged_record_inside_the_log_is_still_fatal() {
    // Small segments, never checkpointed: several closed segments.
    let options = StoreOptions {
        wal_segment_bytes: 1,
        checkpoint_bytes: u64::MAX,
        ..StoreOptions::default()
    };
    let tmp = populated_dir(options);
    let first = segments(tmp.path()).into_iter().next().unwrap();
    let mut bytes = std::fs::read(&first).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&first, bytes).unwrap();
    match StateStore::open(tmp.path(), StoreOptions::default()) {
        Err(StoreError::Corrupt { reason, .. }) => {
            assert!(reason.contains("checksum"), "{reason}")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a damaged log record in the middle of the log must be refused"),
    }
    let (_, quarantine) = raw_trees(tmp.path());
    assert!(
        quarantine.is_empty(),
        "a refused data dir is left as it was"
    );
}

#[test]
fn a_meta_row_that_is_not_json_is_still_fatal() {
    let tmp = populated_dir(checkpoint_each_commit());
    write_raw(tmp.path(), b"m", b"{not json");
    assert!(matches!(
        StateStore::open(tmp.path(), StoreOptions::default()),
        Err(StoreError::Corrupt { .. })
    ));
}
