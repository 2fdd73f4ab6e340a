//! The sled layout of the state, loading it, and writing changes.
//!
//! One sled tree holds every row: key = table prefix byte + key bytes,
//! value = the row as JSON (JSON because our structs skip empty fields and
//! default missing ones, which non-self-describing encodings cannot
//! follow), except allocations, nearly all of the data, which have their
//! own compact binary encoding (`alloc_row`). A meta row holds the format version, the last applied index
//! and the per-table indexes; it is written in the same atomic batch as
//! the rows, so the data dir always describes one applied index exactly.
//! Only primary rows are stored; secondary indexes are rebuilt at load.

use super::alloc_row;
use super::changes::{JobKey, JobVersionKey, Row, RowChange, RowKey, Table};
use super::snapshot::{StateSnapshot, Tables};
use super::StoreError;
use crate::structs::{
    AllocatedResources, Allocation, Evaluation, Job, JobSummary, Node, SchedulerConfiguration,
};
use herder_migrations::{describe_key, FORMAT_VERSION_FIELD, META_KEY};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// The format version this build reads and writes.
pub const FORMAT_VERSION: u32 = herder_migrations::CURRENT;

const JOB: u8 = b'j';
const JOB_VERSION: u8 = b'v';
const JOB_SUMMARY: u8 = b's';
const ALLOC: u8 = b'a';
const EVAL: u8 = b'e';
const NODE: u8 = b'n';
const SCHEDULER_CONFIG: u8 = b'c';

/// The meta row.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Meta {
    format_version: u32,
    last_index: u64,
    /// Latest change index per table, by table name.
    table_indexes: BTreeMap<String, u64>,
}

impl Meta {
    fn of(snapshot: &StateSnapshot) -> Self {
        Meta {
            format_version: FORMAT_VERSION,
            last_index: snapshot.latest_index(),
            table_indexes: Table::ALL
                .iter()
                .map(|t| (t.name().to_string(), snapshot.table_index(*t)))
                .collect(),
        }
    }
}

/// Opens (creating if needed) the sled database in `dir`.
pub(crate) fn open_db(dir: &Path, cache_capacity_bytes: u64) -> Result<sled::Db, StoreError> {
    sled::Config::new()
        .path(dir)
        .cache_capacity(cache_capacity_bytes)
        // Every write is flushed explicitly by the group commit.
        .flush_every_ms(None)
        .open()
        .map_err(|source| StoreError::Open {
            path: dir.display().to_string(),
            source,
        })
}

/// Checks the format (migrating an older one) and loads every row.
pub(crate) fn load(db: &sled::Db) -> Result<Tables, StoreError> {
    let Some(raw_meta) = db.get(META_KEY)? else {
        if let Some(first) = db.iter().next() {
            let (key, _) = first?;
            return Err(StoreError::Corrupt {
                key: describe_key(&key),
                reason: "rows exist but the meta row with the format version is missing".into(),
            });
        }
        // A new data dir: stamp it with the current format.
        write_changes(db, std::iter::empty(), &StateSnapshot::new())?;
        return Ok(Tables::default());
    };
    let found = format_version(&raw_meta)?;
    if found > FORMAT_VERSION {
        return Err(StoreError::FormatTooNew {
            found,
            known: FORMAT_VERSION,
        });
    }
    if found < FORMAT_VERSION {
        tracing::info!(from = found, to = FORMAT_VERSION, "migrating the data dir");
        herder_migrations::migrate(db, found)?;
    }
    load_rows(db)
}

fn format_version(raw_meta: &[u8]) -> Result<u32, StoreError> {
    let meta: serde_json::Value = parse(META_KEY, raw_meta)?;
    meta.get(FORMAT_VERSION_FIELD)
        .and_then(serde_json::Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| StoreError::Corrupt {
            key: describe_key(META_KEY),
            reason: format!("no numeric {FORMAT_VERSION_FIELD}"),
        })
}

/// One row read back and decoded.
enum LoadedRow {
    Meta(Meta),
    Job(JobKey, Job),
    JobVersion(JobVersionKey, Job),
    JobSummary(JobKey, JobSummary),
    Alloc(Allocation),
    Eval(Evaluation),
    Node(Node),
    SchedulerConfig(SchedulerConfiguration),
}

/// Rows per batch handed between the loading threads.
const LOAD_BATCH: usize = 512;

/// Reads every row back into tables. Decoding JSON is most of a restart's
/// work, so it runs on one thread per CPU: one thread walks the tree in
/// batches, decoders turn batches into rows, and this thread inserts them
/// (the tables are maps, so arrival order does not matter).
fn load_rows(db: &sled::Db) -> Result<Tables, StoreError> {
    let decoders = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    let (raw_tx, raw_rx) =
        std::sync::mpsc::sync_channel::<Vec<(sled::IVec, sled::IVec)>>(decoders * 2);
    let raw_rx = std::sync::Mutex::new(raw_rx);
    let (rows_tx, rows_rx) =
        std::sync::mpsc::sync_channel::<Result<Vec<LoadedRow>, StoreError>>(decoders * 2);
    let mut t = Tables::default();
    let mut shared = SharedValues::default();
    let mut failure = None;
    std::thread::scope(|scope| {
        let reader_tx = rows_tx.clone();
        scope.spawn(move || read_batches(db, raw_tx, reader_tx));
        for _ in 0..decoders {
            let (raw_rx, rows_tx) = (&raw_rx, rows_tx.clone());
            scope.spawn(move || decode_batches(raw_rx, rows_tx));
        }
        drop(rows_tx);
        // Keep draining after a failure so no thread blocks on a full
        // channel; the first error is the answer.
        for batch in rows_rx {
            match batch {
                Ok(rows) if failure.is_none() => rows
                    .into_iter()
                    .for_each(|r| insert_row(&mut t, &mut shared, r)),
                Ok(_) => {}
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    t.rebuild_indexes();
    Ok(t)
}

/// Walks the tree and hands out raw rows in batches.
fn read_batches(
    db: &sled::Db,
    raw_tx: std::sync::mpsc::SyncSender<Vec<(sled::IVec, sled::IVec)>>,
    errors: std::sync::mpsc::SyncSender<Result<Vec<LoadedRow>, StoreError>>,
) {
    let mut batch = Vec::with_capacity(LOAD_BATCH);
    for entry in db.iter() {
        match entry {
            Ok(row) => batch.push(row),
            Err(e) => {
                let _ = errors.send(Err(e.into()));
                return;
            }
        }
        if batch.len() == LOAD_BATCH {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(LOAD_BATCH));
            if raw_tx.send(full).is_err() {
                return;
            }
        }
    }
    if !batch.is_empty() {
        let _ = raw_tx.send(batch);
    }
}

/// Decodes raw batches until the reader is done.
fn decode_batches(
    raw_rx: &std::sync::Mutex<std::sync::mpsc::Receiver<Vec<(sled::IVec, sled::IVec)>>>,
    rows_tx: std::sync::mpsc::SyncSender<Result<Vec<LoadedRow>, StoreError>>,
) {
    loop {
        // The lock is held only to take the next batch.
        let next = match raw_rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(batch) = next else {
            return;
        };
        let decoded = batch
            .iter()
            .map(|(key, value)| decode_row(key, value))
            .collect::<Result<Vec<_>, _>>();
        if rows_tx.send(decoded).is_err() {
            return;
        }
    }
}

fn decode_row(key: &[u8], value: &[u8]) -> Result<LoadedRow, StoreError> {
    let Some((&prefix, rest)) = key.split_first() else {
        return Err(corrupt(key, "empty key"));
    };
    Ok(match prefix {
        b'm' => LoadedRow::Meta(parse(key, value)?),
        JOB => {
            let job: Job = parse(key, value)?;
            let job_key = JobKey::of_job(&job);
            check_key(key, &encode_key(&RowKey::Job(job_key.clone())))?;
            LoadedRow::Job(job_key, job)
        }
        JOB_VERSION => {
            let job: Job = parse(key, value)?;
            let version_key = JobVersionKey {
                job: JobKey::of_job(&job),
                version: job.version,
            };
            check_key(key, &encode_key(&RowKey::JobVersion(version_key.clone())))?;
            LoadedRow::JobVersion(version_key, job)
        }
        JOB_SUMMARY => {
            let summary: JobSummary = parse(key, value)?;
            let job = JobKey::new(&summary.namespace, &summary.job_id);
            check_key(key, &encode_key(&RowKey::JobSummary(job.clone())))?;
            LoadedRow::JobSummary(job, summary)
        }
        ALLOC => {
            let alloc = parse_alloc(key, value)?;
            let expected = RowKey::Alloc {
                create_index: alloc.create_index,
                id: alloc.id,
            };
            check_key(key, &encode_key(&expected))
                .map_err(|_| corrupt(key, "the row's ID does not match its key"))?;
            LoadedRow::Alloc(alloc)
        }
        EVAL => {
            let eval: Evaluation = parse(key, value)?;
            check_id(key, rest, eval.id)?;
            LoadedRow::Eval(eval)
        }
        NODE => {
            let node: Node = parse(key, value)?;
            check_id(key, rest, node.id)?;
            LoadedRow::Node(node)
        }
        SCHEDULER_CONFIG => LoadedRow::SchedulerConfig(parse(key, value)?),
        _ => return Err(corrupt(key, "unknown table prefix")),
    })
}

/// One copy of each value many allocations repeat. The scheduler shares
/// them between the allocations it makes; rows read back from disk would
/// each get their own copy, so a restarted server would hold more memory
/// than the one that wrote them.
#[derive(Default)]
struct SharedValues {
    strings: HashSet<Arc<str>>,
    /// Rows come back in creation order, so the allocations of one plan,
    /// which share their grant in memory, arrive one after another.
    last_resources: Option<Arc<AllocatedResources>>,
}

impl SharedValues {
    fn string(&mut self, value: &Arc<str>) -> Arc<str> {
        if let Some(shared) = self.strings.get(&**value) {
            return shared.clone();
        }
        self.strings.insert(value.clone());
        value.clone()
    }

    fn share(&mut self, alloc: &mut Allocation) {
        alloc.namespace = self.string(&alloc.namespace);
        alloc.job_id = self.string(&alloc.job_id);
        alloc.task_group = self.string(&alloc.task_group);
        alloc.node_name = self.string(&alloc.node_name);
        match &self.last_resources {
            Some(last) if **last == *alloc.allocated_resources => {
                alloc.allocated_resources = last.clone();
            }
            _ => self.last_resources = Some(alloc.allocated_resources.clone()),
        }
    }
}

fn insert_row(t: &mut Tables, shared: &mut SharedValues, row: LoadedRow) {
    match row {
        LoadedRow::Meta(meta) => {
            t.latest_index = meta.last_index;
            for table in Table::ALL {
                let index = meta.table_indexes.get(table.name()).copied();
                t.table_indexes[table.slot()] = index.unwrap_or(0);
            }
        }
        LoadedRow::Job(key, job) => {
            t.jobs.insert(key, Arc::new(job));
        }
        LoadedRow::JobVersion(key, job) => {
            t.job_versions.insert(key, Arc::new(job));
        }
        LoadedRow::JobSummary(key, summary) => {
            t.job_summaries.insert(key, Arc::new(summary));
        }
        LoadedRow::Alloc(mut alloc) => {
            shared.share(&mut alloc);
            t.allocs.insert(alloc.id, Arc::new(alloc));
        }
        LoadedRow::Eval(eval) => {
            t.evals.insert(eval.id, Arc::new(eval));
        }
        LoadedRow::Node(node) => {
            t.nodes.insert(node.id, Arc::new(node));
        }
        LoadedRow::SchedulerConfig(config) => t.scheduler_config = Some(Arc::new(config)),
    }
}

/// An allocation row: binary (format 4) or, written by format 3, JSON.
fn parse_alloc(key: &[u8], value: &[u8]) -> Result<Allocation, StoreError> {
    if value.first() == Some(&b'{') {
        return parse(key, value);
    }
    alloc_row::decode(value).map_err(|e| corrupt(key, &e.to_string()))
}

fn parse<T: for<'de> Deserialize<'de>>(key: &[u8], value: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|e| corrupt(key, &e.to_string()))
}

fn corrupt(key: &[u8], reason: &str) -> StoreError {
    StoreError::Corrupt {
        key: describe_key(key),
        reason: reason.to_string(),
    }
}

fn check_key(key: &[u8], expected: &[u8]) -> Result<(), StoreError> {
    if key == expected {
        Ok(())
    } else {
        Err(corrupt(key, "the row does not belong under this key"))
    }
}

fn check_id(key: &[u8], rest: &[u8], id: uuid::Uuid) -> Result<(), StoreError> {
    check_key(rest, id.as_bytes()).map_err(|_| corrupt(key, "the row's ID does not match its key"))
}

/// The sled key of a row.
pub(crate) fn encode_key(key: &RowKey) -> Vec<u8> {
    fn job_key(prefix: u8, job: &JobKey) -> Vec<u8> {
        let mut out = Vec::with_capacity(2 + job.namespace.len() + job.id.len() + 8);
        out.push(prefix);
        out.extend_from_slice(job.namespace.as_bytes());
        out.push(0);
        out.extend_from_slice(job.id.as_bytes());
        out
    }
    fn id_key(prefix: u8, id: &uuid::Uuid) -> Vec<u8> {
        let mut out = Vec::with_capacity(17);
        out.push(prefix);
        out.extend_from_slice(id.as_bytes());
        out
    }
    match key {
        RowKey::Job(job) => job_key(JOB, job),
        RowKey::JobVersion(v) => {
            let mut out = job_key(JOB_VERSION, &v.job);
            out.push(0);
            out.extend_from_slice(&v.version.to_be_bytes());
            out
        }
        RowKey::JobSummary(job) => job_key(JOB_SUMMARY, job),
        RowKey::Alloc { create_index, id } => {
            let mut out = Vec::with_capacity(25);
            out.push(ALLOC);
            out.extend_from_slice(&create_index.to_be_bytes());
            out.extend_from_slice(id.as_bytes());
            out
        }
        RowKey::Eval(id) => id_key(EVAL, id),
        RowKey::Node(id) => id_key(NODE, id),
        RowKey::SchedulerConfig => vec![SCHEDULER_CONFIG],
    }
}

fn encode_row(out: &mut Vec<u8>, row: &Row) -> Result<(), serde_json::Error> {
    match row {
        Row::Job(job) | Row::JobVersion(job) => serde_json::to_writer(out, &**job),
        Row::JobSummary(summary) => serde_json::to_writer(out, &**summary),
        Row::Alloc(alloc) => alloc_row::encode(out, alloc),
        Row::Eval(eval) => serde_json::to_writer(out, &**eval),
        Row::Node(node) => serde_json::to_writer(out, &**node),
        Row::SchedulerConfig(config) => serde_json::to_writer(out, &**config),
    }
}

/// Rows ready for sled: what the writer thread hands the persister, so
/// that turning rows into bytes (the CPU-heavy part of persisting) runs
/// beside the persister's disk work instead of before it.
#[derive(Debug, Default)]
pub(crate) struct EncodedRows {
    /// Raw key and value (`None`: delete), later changes of a row last.
    rows: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// The meta row of the state after these rows.
    meta: Vec<u8>,
}

/// Encodes the rows of `changes` (a row changed twice keeps its last
/// value) and the meta row of `state`.
pub(crate) fn encode_changes<'a>(
    changes: impl Iterator<Item = &'a RowChange>,
    state: &StateSnapshot,
) -> Result<EncodedRows, StoreError> {
    let mut last: BTreeMap<&RowKey, Option<&Row>> = BTreeMap::new();
    for change in changes {
        last.insert(&change.key, change.row.as_ref());
    }
    let mut rows = Vec::with_capacity(last.len());
    // One buffer grows to the largest row once instead of every row's
    // buffer doubling its way up from empty.
    let mut scratch = Vec::with_capacity(4096);
    for (key, row) in last {
        let raw_key = encode_key(key);
        let value = match row {
            Some(row) => {
                scratch.clear();
                encode_row(&mut scratch, row).map_err(|e| StoreError::Corrupt {
                    key: describe_key(&raw_key),
                    reason: format!("cannot encode the row: {e}"),
                })?;
                Some(scratch.clone())
            }
            None => None,
        };
        rows.push((raw_key, value));
    }
    let meta = serde_json::to_vec(&Meta::of(state)).map_err(|e| StoreError::Corrupt {
        key: describe_key(META_KEY),
        reason: format!("cannot encode the meta row: {e}"),
    })?;
    Ok(EncodedRows { rows, meta })
}

/// Writes encoded groups (in order: a later group's row wins) and the last
/// group's meta row in one atomic batch, then waits until it is on disk.
pub(crate) fn write_encoded<'a>(
    db: &sled::Db,
    groups: impl IntoIterator<Item = &'a EncodedRows>,
) -> Result<(), StoreError> {
    let mut batch = sled::Batch::default();
    let mut meta = None;
    for group in groups {
        for (key, value) in &group.rows {
            match value {
                Some(value) => batch.insert(&key[..], &value[..]),
                None => batch.remove(&key[..]),
            }
        }
        meta = Some(&group.meta);
    }
    if let Some(meta) = meta {
        batch.insert(META_KEY, &meta[..]);
    }
    db.apply_batch(batch)?;
    db.flush()?;
    Ok(())
}

/// Writes the rows of `changes` and the meta row of `state` at once.
pub(crate) fn write_changes<'a>(
    db: &sled::Db,
    changes: impl Iterator<Item = &'a RowChange>,
    state: &StateSnapshot,
) -> Result<(), StoreError> {
    write_encoded(db, [&encode_changes(changes, state)?])
}
