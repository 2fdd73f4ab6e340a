//! The on-disk format: a data dir written in format 1 (allocations
//! embedding their whole job) is upgraded at open, through format 2, to
//! today's format (allocations keyed by create index, rewritten in the
//! binary encoding when they change); newer or unversioned data dirs are
//! refused with an error naming the problem, a corrupt row is quarantined.
//!
//! The fixture `tests/fixtures/datadir-v1` was written once by
//! `write_v1_fixture` below (run it with `--ignored` to regenerate).

use herder::state::fixtures;
use herder::state::{
    sled_lock, AllocClientUpdate, Command, StateStore, StoreError, StoreOptions, FORMAT_VERSION,
};
use herder::structs::{ClientStatus, EvalStatus, Evaluation, TriggeredBy};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const NODE_ID: &str = "5d4e1a4c-6f3e-4b7a-9c1d-2a7f0e3b8c11";
const EVAL_ID: &str = "0b2c3d4e-5f60-4718-8a9b-0c1d2e3f4a5b";
const ALLOC_IDS: [&str; 2] = [
    "a1000000-0000-4000-8000-000000000001",
    "a1000000-0000-4000-8000-000000000002",
];

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/datadir-v1")
}

/// Copies a data dir so the test never modifies the committed fixture.
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

fn job_key(prefix: u8, namespace: &str, id: &str) -> Vec<u8> {
    let mut key = vec![prefix];
    key.extend_from_slice(namespace.as_bytes());
    key.push(0);
    key.extend_from_slice(id.as_bytes());
    key
}

/// An allocation's key in format 3: create index first, then the ID.
fn alloc_key(create_index: u64, id: &str) -> Vec<u8> {
    let mut key = vec![b'a'];
    key.extend_from_slice(&create_index.to_be_bytes());
    key.extend_from_slice(uuid::Uuid::parse_str(id).unwrap().as_bytes());
    key
}

fn id_key(prefix: u8, id: &str) -> Vec<u8> {
    let mut key = vec![prefix];
    key.extend_from_slice(uuid::Uuid::parse_str(id).unwrap().as_bytes());
    key
}

/// Writes a format-1 data dir: job `web` at version 1 (only version 1 in
/// the versions table), and two allocations that embed version 0 of the
/// job as `Job` and have no `JobVersion`.
#[test]
#[ignore = "writes the committed fixture; run by hand to regenerate it"]
fn write_v1_fixture() {
    let dir = fixture_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let db = sled::Config::new()
        .path(&dir)
        .flush_every_ms(None)
        .open()
        .unwrap();
    let mut v0 = fixtures::job("default", "web", &[("frontend", 2)]);
    v0.create_index = 10;
    v0.modify_index = 10;
    v0.job_modify_index = 10;
    let mut v1 = v0.clone();
    v1.task_groups[0].count = 3;
    v1.version = 1;
    v1.modify_index = 14;
    v1.job_modify_index = 14;
    v1.status = "running".into();
    let mut node = fixtures::node("node-1");
    node.id = uuid::Uuid::parse_str(NODE_ID).unwrap();
    node.create_index = 9;
    node.modify_index = 9;
    let mut eval: Evaluation = fixtures::eval(&v0, TriggeredBy::JobRegister, 1);
    eval.id = uuid::Uuid::parse_str(EVAL_ID).unwrap();
    eval.status = EvalStatus::Complete;
    eval.create_index = 10;
    eval.modify_index = 12;

    let rows: Vec<(Vec<u8>, Value)> = vec![
        (
            job_key(b'j', "default", "web"),
            serde_json::to_value(&v1).unwrap(),
        ),
        (
            {
                let mut k = job_key(b'v', "default", "web");
                k.push(0);
                k.extend_from_slice(&1u64.to_be_bytes());
                k
            },
            serde_json::to_value(&v1).unwrap(),
        ),
        (
            job_key(b's', "default", "web"),
            json!({
                "JobID": "web", "Namespace": "default",
                "Summary": {"frontend": {"Queued": 0, "Complete": 0, "Failed": 0,
                    "Running": 2, "Starting": 0, "Lost": 0, "Unknown": 0}},
                "Children": null, "CreateIndex": 10, "ModifyIndex": 13
            }),
        ),
        (id_key(b'n', NODE_ID), serde_json::to_value(&node).unwrap()),
        (id_key(b'e', EVAL_ID), serde_json::to_value(&eval).unwrap()),
    ];
    let mut batch = sled::Batch::default();
    for (key, value) in rows {
        batch.insert(key, serde_json::to_vec(&value).unwrap());
    }
    let builder = fixtures::AllocBuilder::new(&v0, "frontend");
    for (i, id) in ALLOC_IDS.iter().enumerate() {
        let mut alloc = builder.build(i as u32, node.id, eval.id, 1_700_000_000_000_000_000);
        alloc.id = uuid::Uuid::parse_str(id).unwrap();
        alloc.client_status = ClientStatus::Running;
        alloc.create_index = 12;
        alloc.modify_index = 13;
        alloc.alloc_modify_index = 12;
        let mut row = serde_json::to_value(&alloc).unwrap();
        let object = row.as_object_mut().unwrap();
        object.remove("JobVersion");
        object.insert("Job".into(), serde_json::to_value(&v0).unwrap());
        batch.insert(id_key(b'a', id), serde_json::to_vec(&row).unwrap());
    }
    let meta = json!({
        "FormatVersion": 1, "LastIndex": 14,
        "TableIndexes": {"jobs": 14, "job_summary": 13, "allocs": 13, "evals": 12,
            "nodes": 9, "scheduler_config": 0}
    });
    batch.insert(b"m".to_vec(), serde_json::to_vec(&meta).unwrap());
    db.apply_batch(batch).unwrap();
    db.flush().unwrap();
}

#[test]
fn a_format_1_data_dir_is_upgraded_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixture_dir(), tmp.path());
    let store = StateStore::open(tmp.path(), StoreOptions::default()).unwrap();
    let state = store.snapshot();
    assert_eq!(state.latest_index(), 14);
    let job = state.job("default", "web").expect("the job survives");
    assert_eq!(job.version, 1);
    let allocs: Vec<_> = state.allocs_by_job("default", "web").collect();
    assert_eq!(allocs.len(), 2);
    for alloc in &allocs {
        assert_eq!(alloc.job_version, 0, "the embedded job's version is kept");
        let run = state
            .job_by_version("default", "web", alloc.job_version)
            .expect("the version the allocation runs is stored");
        assert_eq!(run.task_groups[0].count, 2);
    }
    let node_id = uuid::Uuid::parse_str(NODE_ID).unwrap();
    assert_eq!(state.allocs_by_node(&node_id).count(), 2);
    assert_eq!(state.evals_by_job("default", "web").count(), 1);
    store.close();
    drop(store);

    // The upgrade was written: the raw rows no longer embed the job and
    // sit under their create index (format 3).
    let db = raw_db(tmp.path());
    assert_eq!(db.get(id_key(b'a', ALLOC_IDS[0])).unwrap(), None);
    let raw_rows: Vec<_> = db.scan_prefix(b"a").map(Result::unwrap).collect();
    assert_eq!(raw_rows.len(), 2);
    for (key, raw) in raw_rows {
        let row: Value = serde_json::from_slice(&raw).unwrap();
        assert!(row.get("Job").is_none());
        assert_eq!(row["JobVersion"], 0);
        let id = row["ID"].as_str().unwrap();
        let create_index = row["CreateIndex"].as_u64().unwrap();
        assert_eq!(key.as_ref(), &alloc_key(create_index, id)[..]);
    }
    let meta: Value = serde_json::from_slice(&db.get(b"m").unwrap().unwrap()).unwrap();
    assert_eq!(meta["FormatVersion"], FORMAT_VERSION);
    drop(db);

    // Format 4 reads those JSON rows as they are and writes an allocation
    // it changes in the binary encoding; both read back after a restart.
    // (Every commit is checkpointed here, so the row is in sled, where this
    // test reads it, rather than only in the log.)
    let checkpoint_each_commit = StoreOptions {
        wal_segment_bytes: 1,
        checkpoint_bytes: 0,
        ..StoreOptions::default()
    };
    let store = StateStore::open(tmp.path(), checkpoint_each_commit).unwrap();
    let changed = uuid::Uuid::parse_str(ALLOC_IDS[0]).unwrap();
    store
        .apply(Command::AllocClientUpdate {
            updates: vec![AllocClientUpdate {
                id: changed,
                client_status: ClientStatus::Running,
                client_description: "Tasks are running".into(),
                task_states: Default::default(),
                node_failure: false,
                modify_time: 5,
                deployment_status: None,
            }],
            evals: vec![],
        })
        .unwrap();
    store.close();
    drop(store);
    let db = raw_db(tmp.path());
    let encodings: Vec<u8> = db.scan_prefix(b"a").map(|row| row.unwrap().1[0]).collect();
    assert_eq!(encodings.iter().filter(|b| **b == b'{').count(), 1);
    assert_eq!(encodings.iter().filter(|b| **b != b'{').count(), 1);
    drop(db);
    let store = StateStore::open(tmp.path(), StoreOptions::default()).unwrap();
    let state = store.snapshot();
    let running = state.alloc(&changed).expect("the rewritten row reads back");
    assert_eq!(running.client_status, ClientStatus::Running);
    assert_eq!(&*running.client_description, "Tasks are running");
    assert_eq!(state.allocs_by_job("default", "web").count(), 2);
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

fn fresh_store_dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let store = StateStore::open(tmp.path(), StoreOptions::default()).unwrap();
    store.close();
    tmp
}

#[test]
fn a_newer_format_is_refused() {
    let tmp = fresh_store_dir();
    write_raw(
        tmp.path(),
        b"m",
        br#"{"FormatVersion":99,"LastIndex":0,"TableIndexes":{}}"#,
    );
    match StateStore::open(tmp.path(), StoreOptions::default()) {
        Err(StoreError::FormatTooNew { found: 99, known }) => assert_eq!(known, FORMAT_VERSION),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a newer format must be refused"),
    }
}

#[test]
fn a_corrupt_row_is_quarantined_naming_its_key() {
    let tmp = fresh_store_dir();
    write_raw(tmp.path(), &alloc_key(5, ALLOC_IDS[0]), b"{not json");
    // One bad row does not stop the store (tests/store_quarantine.rs).
    let store = StateStore::open(tmp.path(), StoreOptions::default())
        .unwrap_or_else(|e| panic!("a single corrupt row must not stop the open: {e}"));
    let quarantined = store.quarantined();
    assert_eq!(quarantined.len(), 1);
    assert_eq!(quarantined[0].key, format!("a:5/{}", ALLOC_IDS[0]));
    store.close();
    drop(store);
    // Nothing is reset: the row is kept for an operator.
    let db = raw_db(tmp.path());
    let kept = db.open_tree("quarantine").unwrap();
    assert!(kept.get(alloc_key(5, ALLOC_IDS[0])).unwrap().is_some());
}

#[test]
fn rows_without_a_format_version_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    write_raw(tmp.path(), &job_key(b'j', "default", "web"), b"{}");
    match StateStore::open(tmp.path(), StoreOptions::default()) {
        Err(StoreError::Corrupt { reason, .. }) => assert!(reason.contains("meta"), "{reason}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("rows without a format version must be refused"),
    }
}
