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
//!
//! Commits do not write sled directly: they append to the write-ahead log
//! (`wal`), and sled is the checkpoint the log is folded into
//! (`checkpoint`). Loading reads sled's rows, then replays the log records
//! newer than sled's meta row.
//!
//! # What stops an open, and what is quarantined
//!
//! A supervisor restarts a server that fails to open, and it fails again
//! on the same data: a crash loop, and a cluster without its servers. So
//! a problem confined to one row never stops an open. Such a row is
//! *quarantined* (`quarantine`): left out of the tables, logged once, and
//! moved with its raw bytes into a tree of its own for an operator:
//!
//! - a row whose key is of no table, or not in its table's form;
//! - a value that does not decode (JSON, or a binary allocation row);
//! - a row whose ID (or job, version, create index) is not its key's;
//! - a job or job version that decodes but fails `Job::validate`: the API
//!   refuses such a job because the scheduler cannot handle it (a Count
//!   of two billion, tens of thousands of groups), so loading one would
//!   only move the crash from the open to the first evaluation.
//!
//! This holds for sled's rows and for the rows inside a log record alike.
//! A quarantined row means *no row under its key*, not the older value it
//! replaced: the state then reads the same whether or not its log segment
//! has been folded into sled yet. A checkpoint row is removed from sled's
//! main tree; a log row is folded as a delete (`checkpoint`), so neither
//! comes back and the next open finds nothing new. What the tables lose is
//! what any deleted row leaves, and the rows that refer to it stay: the
//! allocations and evaluations of a quarantined job are kept, and their
//! readers handle a missing job already, as a purged one (the scheduler
//! stops the job's allocations at its next evaluation; the GC, the
//! drainer, the node tracker and the plan applier skip or collect them).
//!
//! Fatal, the data dir refused with `StoreError::Corrupt` (or
//! `FormatTooNew`), left untouched: what describes the whole store, not a
//! row of it.
//!
//! - the meta row (missing while rows exist, not JSON, no format version,
//!   a newer format): without it nothing says which format the rows are
//!   in or which index they stand for; a log record's meta row likewise;
//! - a damaged log record other than a torn tail (a checksum mismatch, a
//!   record cut short or unreadable, in the middle of the log): a record
//!   is one commit, and the log is a sequence. Damage there is not one bad
//!   row but an unknown set of lost rows, and every later record was
//!   applied on top of them; skipping it would open a state that never
//!   existed, so the operator decides. (A torn last record was never
//!   acknowledged and is cut off: `wal`.)
//! - a migration step that cannot rewrite a row (`herder-migrations`),
//!   and sled or file I/O errors.

use super::acl_tables::{self, AclRow};
use super::alloc_row::{self, RowSharing};
use super::alloc_table::AllocTable;
use super::changes::{
    JobKey, JobVersionKey, Row, RowChange, RowKey, ServiceKey, Table, VariableKey,
};
use super::quarantine::{self, QuarantineSource, QuarantinedRecord};
use super::snapshot::StateSnapshot;
use super::tables::Tables;
use super::wal::{self, ClosedSegment, EncodedRows};
use super::StoreError;
use crate::structs::{
    AllocId, Allocation, Deployment, Evaluation, Job, JobScalingEvents, JobSummary, Namespace,
    Node, RootKey, SchedulerConfiguration, ServiceRegistration, VariableEncrypted,
};
use fxhash::FxHashMap;
use herder_migrations::{describe_key, FORMAT_VERSION_FIELD, META_KEY};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
/// Autopilot's settings (one row).
const AUTOPILOT_CONFIG: u8 = b'p';
/// A job's scaling events, keyed as jobs are.
const SCALING_EVENTS: u8 = b'x';
const DEPLOYMENT: u8 = b'd';
/// A service registration: its allocation's ID (16 bytes), then its own.
const SERVICE: u8 = b'r';
/// A namespace: its name.
const NAMESPACE: u8 = b'N';
/// A variable, sealed: its namespace, a 0 byte, its path.
const VARIABLE: u8 = b'V';
/// A root key of the keyring: its ID.
const ROOT_KEY: u8 = b'K';

/// The meta row.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Meta {
    format_version: u32,
    last_index: u64,
    /// Latest change index per table, by table name.
    table_indexes: BTreeMap<String, u64>,
    /// The replicated log's position stored with the state (hex), only
    /// when a log drives the store: older builds ignore the field, and a
    /// single server's records stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_bytes")]
    applied_position: Option<Vec<u8>>,
}

/// Opaque bytes in a JSON row, as a hex string.
mod hex_bytes {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(bytes) => {
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                s.serialize_some(&hex)
            }
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let Some(hex) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        if hex.len() % 2 != 0 {
            return Err(D::Error::custom("odd-length hex"));
        }
        (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                    .ok_or_else(|| D::Error::custom("not hex"))
            })
            .collect::<Result<Vec<u8>, _>>()
            .map(Some)
    }
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
            applied_position: snapshot.applied_position().map(<[u8]>::to_vec),
        }
    }
}

/// Opens (creating if needed) the sled database in `dir`.
pub(crate) fn open_db(dir: &Path, cache_capacity_bytes: u64) -> Result<sled::Db, StoreError> {
    // A store of this process closed a moment ago may not have let go yet.
    super::sled_lock::wait_until_unlocked(dir, super::sled_lock::RELEASE_WAIT);
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

/// What opening a data dir found: the state, and the log segments it was
/// replayed from (now closed, waiting for a checkpoint).
pub(crate) struct Loaded {
    pub tables: Tables,
    pub segments: Vec<ClosedSegment>,
    /// The newest segment's sequence number (0: none).
    pub last_seq: u64,
    /// Every entry of the quarantine tree, this open's findings included.
    pub quarantined: Vec<QuarantinedRecord>,
}

/// Checks the format (migrating an older one), loads every row from sled
/// and replays the log in `wal_dir` over them.
pub(crate) fn load(db: &sled::Db, wal_dir: &Path) -> Result<Loaded, StoreError> {
    let started = std::time::Instant::now();
    let mut findings = Findings::new(QuarantineSource::Checkpoint);
    let mut tables = load_checkpoint(db, &mut findings)?;
    let checkpointed = tables.tables.latest_index;
    let checkpoint_read = started.elapsed();
    let found = wal::segments(wal_dir)?;
    let last_seq = found.last().map_or(0, |(seq, _)| *seq);
    let mut segments = Vec::with_capacity(found.len());
    findings.source = QuarantineSource::Log;
    let paths: Vec<&Path> = found.iter().map(|(_, path)| path.as_path()).collect();
    replay(&mut tables, &mut findings, &paths, checkpointed)?;
    for (_, path) in &found {
        let bytes = std::fs::metadata(path)
            .map_err(|e| wal::log_error(path, e))?
            .len();
        if bytes == 0 {
            // A restart without writes left it; the next one starts anew.
            std::fs::remove_file(path).map_err(|e| wal::log_error(path, e))?;
            continue;
        }
        segments.push(ClosedSegment {
            path: path.clone(),
            bytes,
        });
    }
    // Only once everything was read: a data dir refused for a fatal
    // problem is left exactly as it was.
    quarantine::record(db, findings.rows)?;
    let quarantined = quarantine::list(db)?;
    let log_replayed = started.elapsed();
    let mut tables = tables.finish();
    tables.rebuild_indexes();
    // What a restart spent where: the operator's (and the restart
    // benchmark's) first question when it is slow.
    tracing::info!(
        allocs = tables.allocs.len(),
        checkpoint_ms = checkpoint_read.as_millis() as u64,
        log_ms = (log_replayed - checkpoint_read).as_millis() as u64,
        indexes_ms = (started.elapsed() - log_replayed).as_millis() as u64,
        "state loaded"
    );
    Ok(Loaded {
        tables,
        segments,
        last_seq,
        quarantined,
    })
}

/// Sled's rows: the state as of the last checkpoint (indexes not built).
fn load_checkpoint(db: &sled::Db, findings: &mut Findings) -> Result<LoadingTables, StoreError> {
    let Some(raw_meta) = db.get(META_KEY)? else {
        if let Some(first) = db.iter().next() {
            let (key, _) = first?;
            return Err(StoreError::Corrupt {
                key: describe_key(&key),
                reason: "rows exist but the meta row with the format version is missing".into(),
            });
        }
        // A new data dir: stamp it with the current format.
        write_encoded(
            db,
            [&encode_changes(std::iter::empty(), &StateSnapshot::new())?],
        )?;
        return Ok(LoadingTables::default());
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
    load_rows(db, findings)
}

fn format_version(raw_meta: &[u8]) -> Result<u32, StoreError> {
    let meta: serde_json::Value =
        serde_json::from_slice(raw_meta).map_err(|e| corrupt(META_KEY, &e.to_string()))?;
    meta.get(FORMAT_VERSION_FIELD)
        .and_then(serde_json::Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| StoreError::Corrupt {
            key: describe_key(META_KEY),
            reason: format!("no numeric {FORMAT_VERSION_FIELD}"),
        })
}

/// One row read back and decoded.
///
/// Rows are decoded into the `Arc` the tables keep them in (on a decoder
/// thread, not the one that applies rows in order), which also keeps this
/// small: a batch of rows is moved between threads and out of one by one.
enum LoadedRow {
    Meta(Box<Meta>),
    Job(JobKey, Arc<Job>),
    JobVersion(JobVersionKey, Arc<Job>),
    JobSummary(JobKey, Arc<JobSummary>),
    Alloc(Arc<Allocation>),
    Eval(Arc<Evaluation>),
    Node(Arc<Node>),
    SchedulerConfig(Arc<SchedulerConfiguration>),
    AutopilotConfig(Arc<crate::structs::AutopilotConfiguration>),
    ScalingEvents(JobKey, Arc<JobScalingEvents>),
    Deployment(Arc<Deployment>),
    Service(ServiceKey, Arc<ServiceRegistration>),
    Namespace(Arc<Namespace>),
    Variable(VariableKey, Arc<VariableEncrypted>),
    RootKey(Arc<RootKey>),
    Acl(AclRow),
    /// A row the log records as deleted.
    Deleted(RowKey),
    /// A row that cannot be loaded (boxed: the other variants' size).
    Bad(Box<BadRow>),
}

/// A row that cannot be loaded, as the decoders hand it over.
struct BadRow {
    key: sled::IVec,
    /// `None`: a delete (of a key of no table) in the log.
    value: Option<sled::IVec>,
    /// The row key, when the raw key is one: the state then holds no row
    /// under it (not an older value it replaced).
    row_key: Option<RowKey>,
    reason: String,
}

/// The rows found unloadable while reading, in order, with where and at
/// which index each was found.
struct Findings {
    rows: Vec<quarantine::Finding>,
    source: QuarantineSource,
    /// The first row not yet stamped with its index: a log record's rows
    /// come before its meta row, which gives their index.
    unstamped: usize,
}

impl Findings {
    fn new(source: QuarantineSource) -> Self {
        Findings {
            rows: Vec::new(),
            source,
            unstamped: 0,
        }
    }

    fn add(&mut self, t: &mut LoadingTables, bad: BadRow) {
        if let Some(row_key) = &bad.row_key {
            remove_row(t, row_key);
        }
        let Some(value) = bad.value else {
            // A delete of a key no table has: nothing to load and nothing
            // to keep (folding it into sled removes nothing of ours).
            tracing::warn!(key = %describe_key(&bad.key), reason = %bad.reason,
                "the state log deletes a key of no table; ignored");
            return;
        };
        self.rows.push(quarantine::Finding {
            raw_key: bad.key.to_vec(),
            value: value.to_vec(),
            reason: bad.reason,
            source: self.source,
            found_at_index: 0,
        });
    }

    /// Gives the rows found since the last stamp the index `index`.
    fn stamp(&mut self, index: u64) {
        for row in &mut self.rows[self.unstamped..] {
            row.found_at_index = index;
        }
        self.unstamped = self.rows.len();
    }
}

/// Rows per batch handed between the loading threads.
const LOAD_BATCH: usize = 512;

/// A raw row as stored: key, and value (`None`: the row was deleted).
type RawRow = (RawBytes, Option<RawBytes>);

/// A key or value as its source hands it over: sled's own buffer, or a
/// span of the log segment its batch was read from (not copied again).
enum RawBytes {
    Sled(sled::IVec),
    Static(&'static [u8]),
    InSegment(std::ops::Range<usize>),
}

/// Raw rows on their way from the reader to a decoder.
struct RawBatch {
    /// The log segment the rows' spans lie in (empty for sled's rows).
    segment: Arc<Vec<u8>>,
    rows: Vec<RawRow>,
}

impl RawBatch {
    fn bytes<'a>(&'a self, raw: &'a RawBytes) -> &'a [u8] {
        match raw {
            RawBytes::Sled(bytes) => bytes,
            RawBytes::Static(bytes) => bytes,
            // In bounds: the spans were read out of this very segment
            // (`wal::read_segment_into`).
            RawBytes::InSegment(span) => &self.segment[span.clone()],
        }
    }
}

/// Reads sled's rows into tables.
fn load_rows(db: &sled::Db, findings: &mut Findings) -> Result<LoadingTables, StoreError> {
    let mut t = LoadingTables::default();
    decode_in_order(
        |sink| {
            for entry in db.iter() {
                let (key, value) = entry?;
                if !sink.push((RawBytes::Sled(key), Some(RawBytes::Sled(value)))) {
                    break;
                }
            }
            Ok(())
        },
        &mut t,
        findings,
    )?;
    // Rows after the meta row in key order are of sled's index too.
    findings.stamp(t.tables.latest_index);
    Ok(t)
}

/// Applies log records, oldest first, over the tables.
///
/// The segments are read one ahead, on a thread of their own, while the
/// rows of the one before are handed to the decoders: a segment read
/// between two hand-overs left the decoders idle for a tenth of a second
/// each time. The rows stay where they were read, shared by their batches,
/// and the segments' buffers are reused once the decoders are done with
/// them (a fresh 64 MiB buffer per segment, and a copy of every row, cost
/// the reader most of its time in page faults). Only records newer than
/// the checkpoint (`checkpointed`) are replayed.
fn replay(
    t: &mut LoadingTables,
    findings: &mut Findings,
    segments: &[&Path],
    checkpointed: u64,
) -> Result<(), StoreError> {
    decode_in_order(
        |sink| {
            std::thread::scope(|scope| {
                // Rendezvous: at most one segment waits, read, while the
                // one before is handed over.
                let (read_tx, read_rx) = std::sync::mpsc::sync_channel(0);
                scope.spawn(move || read_segments_ahead(segments, read_tx));
                for read in read_rx {
                    // A damaged record here is fatal (`read_segment_into`),
                    // unlike a bad row inside a sound record: see the
                    // module doc.
                    let (segment, records) = read?;
                    if !sink.start_segment(segment) {
                        return Ok(());
                    }
                    for record in records.into_iter().filter(|r| r.last_index > checkpointed) {
                        let rows = record.rows.into_iter().map(|(key, value)| {
                            (RawBytes::InSegment(key), value.map(RawBytes::InSegment))
                        });
                        let meta = (
                            RawBytes::Static(META_KEY),
                            Some(RawBytes::InSegment(record.meta)),
                        );
                        for row in rows.chain(std::iter::once(meta)) {
                            if !sink.push(row) {
                                return Ok(());
                            }
                        }
                    }
                }
                Ok(())
            })
        },
        t,
        findings,
    )
}

/// A segment read whole, and where its records lie in it.
type SegmentRead = Result<(Arc<Vec<u8>>, Vec<wal::RecordSpans>), StoreError>;

/// How many segment buffers the replay keeps for reuse: the one being read,
/// the one being handed over, and the one the decoders are finishing.
const SEGMENT_BUFFERS: usize = 3;

/// Reads `segments` in order into `read_tx`, until one fails or the
/// receiver is gone.
fn read_segments_ahead(segments: &[&Path], read_tx: std::sync::mpsc::SyncSender<SegmentRead>) {
    let mut buffers: Vec<Arc<Vec<u8>>> = Vec::with_capacity(SEGMENT_BUFFERS);
    for (i, path) in segments.iter().enumerate() {
        if let Some(next) = segments.get(i + 1) {
            // The next segment comes off the disk meanwhile.
            wal::start_reading_ahead(next);
        }
        // A buffer no batch refers to any more, else a new one (kept for
        // reuse while there are fewer than SEGMENT_BUFFERS).
        let free = buffers.iter().position(|b| Arc::strong_count(b) == 1);
        let mut bytes = free
            .and_then(|at| Arc::try_unwrap(buffers.swap_remove(at)).ok())
            .unwrap_or_default();
        let newest = i + 1 == segments.len();
        let read = wal::read_segment_into(path, newest, &mut bytes).map(|records| {
            let segment = Arc::new(bytes);
            if buffers.len() < SEGMENT_BUFFERS {
                buffers.push(Arc::clone(&segment));
            }
            (segment, records)
        });
        let failed = read.is_err();
        if read_tx.send(read).is_err() || failed {
            return;
        }
    }
}

/// Hands raw rows to the decoders in numbered batches.
struct BatchSink {
    tx: std::sync::mpsc::SyncSender<(usize, RawBatch)>,
    batch: RawBatch,
    next_seq: usize,
}

impl BatchSink {
    /// Queues a row; `false` once the decoders have stopped (an error).
    fn push(&mut self, row: RawRow) -> bool {
        self.batch.rows.push(row);
        self.batch.rows.len() < LOAD_BATCH || self.send()
    }

    /// The rows pushed from now on are spans of `segment` (a batch's rows
    /// all lie in one segment).
    fn start_segment(&mut self, segment: Arc<Vec<u8>>) -> bool {
        let sent = self.batch.rows.is_empty() || self.send();
        self.batch.segment = segment;
        sent
    }

    fn send(&mut self) -> bool {
        let batch = RawBatch {
            segment: Arc::clone(&self.batch.segment),
            rows: std::mem::replace(&mut self.batch.rows, Vec::with_capacity(LOAD_BATCH)),
        };
        self.next_seq += 1;
        self.tx.send((self.next_seq - 1, batch)).is_ok()
    }
}

/// Decodes the rows `read` produces and applies them to `t` in the order
/// they were produced (a later row of the same key wins, a delete removes).
/// Decoding is most of a restart's work, so it runs on one thread per CPU:
/// `read` runs on its own thread, decoders take whole batches, and this
/// thread puts batches back in order as they arrive.
fn decode_in_order<R>(
    read: R,
    t: &mut LoadingTables,
    findings: &mut Findings,
) -> Result<(), StoreError>
where
    R: FnOnce(&mut BatchSink) -> Result<(), StoreError> + Send,
{
    let decoders = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    let (raw_tx, raw_rx) = std::sync::mpsc::sync_channel(decoders * 2);
    let raw_rx = std::sync::Mutex::new(raw_rx);
    let (rows_tx, rows_rx) = std::sync::mpsc::sync_channel(decoders * 2);
    let mut failure = None;
    std::thread::scope(|scope| {
        let reader_tx = rows_tx.clone();
        scope.spawn(move || {
            let mut sink = BatchSink {
                tx: raw_tx,
                batch: RawBatch {
                    segment: Arc::default(),
                    rows: Vec::with_capacity(LOAD_BATCH),
                },
                next_seq: 0,
            };
            let read = read(&mut sink);
            match read {
                Ok(()) if !sink.batch.rows.is_empty() => {
                    sink.send();
                }
                Ok(()) => {}
                Err(e) => {
                    let _ = reader_tx.send((usize::MAX, Err(e)));
                }
            }
        });
        for _ in 0..decoders {
            let (raw_rx, rows_tx) = (&raw_rx, rows_tx.clone());
            scope.spawn(move || decode_batches(raw_rx, rows_tx));
        }
        drop(rows_tx);
        // Keep draining after a failure so no thread blocks on a full
        // channel; the first error is the answer.
        let mut waiting = BTreeMap::new();
        let mut next = 0;
        for (seq, batch) in rows_rx {
            match batch {
                Ok(rows) if failure.is_none() => {
                    waiting.insert(seq, rows);
                    while let Some(rows) = waiting.remove(&next) {
                        rows.into_iter().for_each(|r| insert_row(t, findings, r));
                        next += 1;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
    });
    failure.map_or(Ok(()), Err)
}

type DecodedBatch = (usize, Result<Vec<LoadedRow>, StoreError>);

/// Decodes raw batches until the reader is done.
fn decode_batches(
    raw_rx: &std::sync::Mutex<std::sync::mpsc::Receiver<(usize, RawBatch)>>,
    rows_tx: std::sync::mpsc::SyncSender<DecodedBatch>,
) {
    // This decoder's copies of repeated values, kept across its batches.
    let mut sharing = RowSharing::default();
    loop {
        // The lock is held only to take the next batch.
        let next = match raw_rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok((seq, batch)) = next else {
            return;
        };
        let decoded = decode_batch(&batch, &mut sharing);
        if rows_tx.send((seq, decoded)).is_err() {
            return;
        }
    }
}

/// Decodes one batch of raw rows. A row that cannot be loaded becomes a
/// `LoadedRow::Bad` in its place (only then is anything copied or
/// allocated for it); only a fatal problem fails the batch.
fn decode_batch(batch: &RawBatch, sharing: &mut RowSharing) -> Result<Vec<LoadedRow>, StoreError> {
    let mut rows = Vec::with_capacity(batch.rows.len());
    for (key, value) in &batch.rows {
        let key = batch.bytes(key);
        let value = value.as_ref().map(|v| batch.bytes(v));
        let row = match value {
            Some(value) => decode_row_guarded(key, value, sharing),
            None => decode_key(key)
                .map(LoadedRow::Deleted)
                .map_err(RowError::from),
        };
        rows.push(match row {
            Ok(row) => row,
            Err(RowError::Bad(reason)) => LoadedRow::Bad(Box::new(BadRow {
                key: sled::IVec::from(key),
                value: value.map(sled::IVec::from),
                row_key: decode_key(key).ok(),
                reason,
            })),
            Err(RowError::Fatal(e)) => return Err(e),
        });
    }
    Ok(rows)
}

fn remove_row(t: &mut LoadingTables, key: &RowKey) {
    let (staged, t) = (&mut t.allocs, &mut t.tables);
    match key {
        RowKey::Job(k) => {
            t.jobs.remove(k);
        }
        RowKey::JobVersion(k) => {
            t.job_versions.remove(k);
        }
        RowKey::JobSummary(k) => {
            t.job_summaries.remove(k);
        }
        // Only the allocation stored under this very key: a row under
        // another create index with the same ID (a damaged key) must not
        // take the real one with it.
        RowKey::Alloc { id, create_index } => {
            if staged
                .get(id)
                .is_some_and(|a| a.create_index == *create_index)
            {
                staged.remove(id);
            }
        }
        RowKey::Eval(id) => {
            t.evals.remove(id);
        }
        RowKey::Node(id) => {
            t.nodes.remove(id);
        }
        RowKey::SchedulerConfig => t.scheduler_config = None,
        RowKey::AutopilotConfig => t.autopilot_config = None,
        RowKey::ScalingEvents(k) => {
            t.scaling_events.remove(k);
        }
        RowKey::Deployment(id) => {
            t.deployments.remove(id);
        }
        RowKey::Service(k) => {
            t.services.remove(k);
        }
        RowKey::Namespace(name) => {
            t.namespaces.remove(name);
        }
        RowKey::Variable(k) => {
            t.variables.remove(k);
        }
        RowKey::RootKey(id) => {
            t.root_keys.remove(id);
        }
        RowKey::Acl(k) => t.acl.remove(k),
    }
}

/// The row key a raw key stands for (the inverse of `encode_key`), or why
/// it stands for none (a static reason: no allocation on any path).
fn decode_key(key: &[u8]) -> Result<RowKey, &'static str> {
    let Some((&prefix, rest)) = key.split_first() else {
        return Err("empty key");
    };
    let id = |bytes: &[u8]| uuid::Uuid::from_slice(bytes).map_err(|_| "not a 16-byte ID");
    let job = |bytes: &[u8]| {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8")?;
        let (namespace, id) = text.split_once('\0').ok_or("no namespace separator")?;
        Ok::<_, &'static str>(JobKey::new(namespace, id))
    };
    let decoded = match prefix {
        JOB => RowKey::Job(job(rest)?),
        JOB_SUMMARY => RowKey::JobSummary(job(rest)?),
        SCALING_EVENTS => RowKey::ScalingEvents(job(rest)?),
        JOB_VERSION if rest.len() > 9 => {
            let (job_part, version) = rest.split_at(rest.len() - 9);
            let mut be = [0u8; 8];
            be.copy_from_slice(&version[1..]);
            RowKey::JobVersion(JobVersionKey {
                job: job(job_part)?,
                version: u64::from_be_bytes(be),
            })
        }
        ALLOC if rest.len() == 24 => {
            let mut be = [0u8; 8];
            be.copy_from_slice(&rest[..8]);
            RowKey::Alloc {
                create_index: u64::from_be_bytes(be),
                id: id(&rest[8..])?,
            }
        }
        EVAL => RowKey::Eval(id(rest)?),
        NODE => RowKey::Node(id(rest)?),
        DEPLOYMENT => RowKey::Deployment(id(rest)?),
        SCHEDULER_CONFIG if rest.is_empty() => RowKey::SchedulerConfig,
        AUTOPILOT_CONFIG if rest.is_empty() => RowKey::AutopilotConfig,
        acl_tables::ACL_PREFIX => RowKey::Acl(acl_tables::decode_key(rest)?),
        SERVICE if rest.len() > 16 => RowKey::Service(ServiceKey {
            alloc_id: id(&rest[..16])?,
            id: std::str::from_utf8(&rest[16..])
                .map_err(|_| "not UTF-8")?
                .to_string(),
        }),
        NAMESPACE if !rest.is_empty() => RowKey::Namespace(
            std::str::from_utf8(rest)
                .map_err(|_| "not UTF-8")?
                .to_string(),
        ),
        VARIABLE => {
            let key = job(rest)?;
            RowKey::Variable(VariableKey::new(&key.namespace, &key.id))
        }
        ROOT_KEY if !rest.is_empty() => RowKey::RootKey(
            std::str::from_utf8(rest)
                .map_err(|_| "not UTF-8")?
                .to_string(),
        ),
        _ => return Err("not a key of any table"),
    };
    if key != encode_key(&decoded) {
        return Err("not a key in its table's form");
    }
    Ok(decoded)
}

/// Why one row could not be decoded.
#[derive(Debug, thiserror::Error)]
enum RowError {
    /// Only this row is wrong: it is quarantined, and the store opens
    /// without it.
    #[error("{0}")]
    Bad(String),
    /// The row the whole state depends on (the meta row) is unreadable:
    /// the data dir is refused.
    #[error(transparent)]
    Fatal(StoreError),
}

impl From<&'static str> for RowError {
    fn from(reason: &'static str) -> Self {
        RowError::Bad(reason.to_string())
    }
}

fn decode_row(key: &[u8], value: &[u8], sharing: &mut RowSharing) -> Result<LoadedRow, RowError> {
    let Some((&prefix, rest)) = key.split_first() else {
        return Err("empty key".into());
    };
    Ok(match prefix {
        // Only the meta row itself: any other key starting with its byte
        // is a key of no table, quarantined like one.
        _ if key == META_KEY => LoadedRow::Meta(Box::new(
            serde_json::from_slice(value)
                .map_err(|e| RowError::Fatal(corrupt(key, &e.to_string())))?,
        )),
        JOB => {
            let job: Job = parse(value)?;
            let job_key = JobKey::of_job(&job);
            check_key(key, &encode_key(&RowKey::Job(job_key.clone())))?;
            check_job(&job)?;
            LoadedRow::Job(job_key, Arc::new(job))
        }
        JOB_VERSION => {
            let job: Job = parse(value)?;
            let version_key = JobVersionKey {
                job: JobKey::of_job(&job),
                version: job.version,
            };
            check_key(key, &encode_key(&RowKey::JobVersion(version_key.clone())))?;
            check_job(&job)?;
            LoadedRow::JobVersion(version_key, Arc::new(job))
        }
        JOB_SUMMARY => {
            let summary: JobSummary = parse(value)?;
            let job = JobKey::new(&summary.namespace, &summary.job_id);
            check_key(key, &encode_key(&RowKey::JobSummary(job.clone())))?;
            LoadedRow::JobSummary(job, Arc::new(summary))
        }
        ALLOC => {
            let alloc = parse_alloc(value, sharing)?;
            // Read back with `decode_key`, which allocates nothing (encoding
            // the expected key was a `Vec` for each of a million rows).
            let expected = RowKey::Alloc {
                create_index: alloc.create_index,
                id: alloc.id,
            };
            if decode_key(key).ok() != Some(expected) {
                return Err("the row's ID or create index does not match its key".into());
            }
            LoadedRow::Alloc(Arc::new(alloc))
        }
        EVAL => {
            let eval: Evaluation = parse(value)?;
            check_id(rest, eval.id)?;
            LoadedRow::Eval(Arc::new(eval))
        }
        NODE => {
            let node: Node = parse(value)?;
            check_id(rest, node.id)?;
            LoadedRow::Node(Arc::new(node))
        }
        SCHEDULER_CONFIG if rest.is_empty() => LoadedRow::SchedulerConfig(Arc::new(parse(value)?)),
        AUTOPILOT_CONFIG if rest.is_empty() => LoadedRow::AutopilotConfig(Arc::new(parse(value)?)),
        DEPLOYMENT => {
            let deployment: Deployment = parse(value)?;
            check_id(rest, deployment.id)?;
            LoadedRow::Deployment(Arc::new(deployment))
        }
        SCALING_EVENTS => {
            let events: JobScalingEvents = parse(value)?;
            let job = JobKey::new(&events.namespace, &events.job_id);
            check_key(key, &encode_key(&RowKey::ScalingEvents(job.clone())))?;
            LoadedRow::ScalingEvents(job, Arc::new(events))
        }
        SERVICE => {
            let service: ServiceRegistration = parse(value)?;
            let alloc_id = service
                .alloc_id
                .parse()
                .map_err(|_| RowError::Bad("the registration's AllocID is not an ID".into()))?;
            let row_key = ServiceKey {
                alloc_id,
                id: service.id.clone(),
            };
            check_key(key, &encode_key(&RowKey::Service(row_key.clone())))?;
            LoadedRow::Service(row_key, Arc::new(service))
        }
        NAMESPACE => {
            let namespace: Namespace = parse(value)?;
            check_key(key, &encode_key(&RowKey::Namespace(namespace.name.clone())))?;
            LoadedRow::Namespace(Arc::new(namespace))
        }
        VARIABLE => {
            let variable: VariableEncrypted = parse(value)?;
            let row_key = VariableKey::new(&variable.meta.namespace, &variable.meta.path);
            check_key(key, &encode_key(&RowKey::Variable(row_key.clone())))?;
            LoadedRow::Variable(row_key, Arc::new(variable))
        }
        ROOT_KEY => {
            let root_key: RootKey = parse(value)?;
            check_key(
                key,
                &encode_key(&RowKey::RootKey(root_key.meta.key_id.clone())),
            )?;
            LoadedRow::RootKey(Arc::new(root_key))
        }
        acl_tables::ACL_PREFIX => {
            let (_, row) = acl_tables::decode_row(rest, value).map_err(RowError::Bad)?;
            LoadedRow::Acl(row)
        }
        _ => return Err("not a key of any table".into()),
    })
}

/// `decode_row`, with a panic in it (a decoder or validation bug that some
/// stored bytes trigger) turned into a quarantined row: at open it would
/// otherwise take the process down, at every restart. Free when nothing
/// panics (unwinding costs only when it happens).
fn decode_row_guarded(
    key: &[u8],
    value: &[u8],
    sharing: &mut RowSharing,
) -> Result<LoadedRow, RowError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decode_row(key, value, sharing)
    }))
    .unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|m| m.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(RowError::Bad(format!("decoding it panicked: {message}")))
    })
}

/// A job that decodes but is too large for any server to schedule (a
/// Count of two billion, sixty thousand groups) would crash or stall the
/// scheduler at its next evaluation: it is quarantined like a row that
/// does not decode. Only the size ceilings are checked, not the full
/// validation: a rule added since, or configured limits changed since,
/// must never make an accepted job vanish at the next start.
fn check_job(job: &Job) -> Result<(), RowError> {
    job.check_loadable()
        .map_err(|e| RowError::Bad(format!("the job is too large to load: {e}")))
}

/// The tables as rows are read back, allocations apart.
///
/// Allocations are nearly all of the rows and come back in creation order,
/// which is random in their IDs: inserting a million of them one by one into
/// the persistent map, each insert a walk to a random leaf, was the serial
/// part of a restart. Here they go into a hash map (a later row of the same
/// ID wins, a delete removes), and `finish` builds the map once, in key
/// order.
#[derive(Default)]
struct LoadingTables {
    tables: Tables,
    allocs: FxHashMap<AllocId, Arc<Allocation>>,
}

impl LoadingTables {
    /// The tables with every allocation read (secondary indexes not built).
    fn finish(self) -> Tables {
        let LoadingTables { mut tables, allocs } = self;
        tables.allocs = AllocTable::from_unordered(allocs);
        tables
    }
}

fn insert_row(loading: &mut LoadingTables, findings: &mut Findings, row: LoadedRow) {
    let t = &mut loading.tables;
    match row {
        LoadedRow::Meta(meta) => {
            findings.stamp(meta.last_index);
            t.latest_index = meta.last_index;
            for table in Table::ALL {
                let index = meta.table_indexes.get(table.name()).copied();
                t.table_indexes[table.slot()] = index.unwrap_or(0);
            }
            t.applied_position = meta.applied_position.map(Arc::from);
        }
        LoadedRow::Job(key, job) => {
            t.jobs.insert(key, job);
        }
        LoadedRow::JobVersion(key, job) => {
            t.job_versions.insert(key, job);
        }
        LoadedRow::JobSummary(key, summary) => {
            t.job_summaries.insert(key, summary);
        }
        LoadedRow::Alloc(alloc) => {
            loading.allocs.insert(alloc.id, alloc);
        }
        LoadedRow::Eval(eval) => {
            t.evals.insert(eval.id, eval);
        }
        LoadedRow::Node(node) => {
            t.nodes.insert(node.id, node);
        }
        LoadedRow::SchedulerConfig(config) => t.scheduler_config = Some(config),
        LoadedRow::AutopilotConfig(config) => t.autopilot_config = Some(config),
        LoadedRow::ScalingEvents(key, events) => {
            t.scaling_events.insert(key, events);
        }
        LoadedRow::Deployment(d) => {
            t.deployments.insert(d.id, d);
        }
        LoadedRow::Service(key, service) => {
            t.services.insert(key, service);
        }
        LoadedRow::Namespace(ns) => {
            t.namespaces.insert(ns.name.clone(), ns);
        }
        LoadedRow::Variable(key, variable) => {
            t.variables.insert(key, variable);
        }
        LoadedRow::RootKey(key) => {
            t.root_keys.insert(key.meta.key_id.clone(), key);
        }
        LoadedRow::Acl(row) => t.acl.insert(row),
        LoadedRow::Deleted(key) => remove_row(loading, &key),
        LoadedRow::Bad(bad) => findings.add(loading, *bad),
    }
}

/// An allocation row: binary (format 4) or, written by format 3, JSON.
fn parse_alloc(value: &[u8], sharing: &mut RowSharing) -> Result<Allocation, RowError> {
    if value.first() == Some(&b'{') {
        let mut alloc: Allocation = parse(value)?;
        sharing.share(&mut alloc);
        return Ok(alloc);
    }
    alloc_row::decode_sharing(value, sharing).map_err(|e| RowError::Bad(e.to_string()))
}

fn parse<T: for<'de> Deserialize<'de>>(value: &[u8]) -> Result<T, RowError> {
    serde_json::from_slice(value).map_err(|e| RowError::Bad(e.to_string()))
}

fn corrupt(key: &[u8], reason: &str) -> StoreError {
    StoreError::Corrupt {
        key: describe_key(key),
        reason: reason.to_string(),
    }
}

fn check_key(key: &[u8], expected: &[u8]) -> Result<(), RowError> {
    if key == expected {
        Ok(())
    } else {
        Err("the row does not belong under this key".into())
    }
}

fn check_id(rest: &[u8], id: uuid::Uuid) -> Result<(), RowError> {
    if rest == id.as_bytes() {
        Ok(())
    } else {
        Err("the row's ID does not match its key".into())
    }
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
        RowKey::AutopilotConfig => vec![AUTOPILOT_CONFIG],
        RowKey::ScalingEvents(job) => job_key(SCALING_EVENTS, job),
        RowKey::Deployment(id) => id_key(DEPLOYMENT, id),
        RowKey::Service(k) => {
            let mut out = id_key(SERVICE, &k.alloc_id);
            out.extend_from_slice(k.id.as_bytes());
            out
        }
        RowKey::Namespace(name) => {
            let mut out = vec![NAMESPACE];
            out.extend_from_slice(name.as_bytes());
            out
        }
        RowKey::Variable(k) => job_key(VARIABLE, &JobKey::new(&k.namespace, &k.path)),
        RowKey::RootKey(id) => {
            let mut out = vec![ROOT_KEY];
            out.extend_from_slice(id.as_bytes());
            out
        }
        RowKey::Acl(k) => acl_tables::encode_key(k),
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
        Row::AutopilotConfig(config) => serde_json::to_writer(out, &**config),
        Row::ScalingEvents(events) => serde_json::to_writer(out, &**events),
        Row::Deployment(d) => serde_json::to_writer(out, &**d),
        Row::Service(service) => serde_json::to_writer(out, &**service),
        Row::Namespace(ns) => serde_json::to_writer(out, &**ns),
        Row::Variable(variable) => serde_json::to_writer(out, &**variable),
        Row::RootKey(key) => serde_json::to_writer(out, &**key),
        Row::Acl(row) => acl_tables::encode_row(out, row),
    }
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
    Ok(EncodedRows {
        rows,
        meta: encode_meta(state)?,
        last_index: state.latest_index(),
    })
}

/// The meta row of `state` (format version, indexes, log position).
pub(crate) fn encode_meta(state: &StateSnapshot) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(&Meta::of(state)).map_err(|e| StoreError::Corrupt {
        key: describe_key(META_KEY),
        reason: format!("cannot encode the meta row: {e}"),
    })
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

/// Folds closed log segments, oldest first, into sled and deletes them.
/// Each record (one group commit) is one atomic batch with its own meta
/// row, so sled always describes one index exactly; each segment is
/// flushed before its file is deleted, and a crash before that leaves
/// records that loading skips as already in sled.
///
/// A batch per record, not per segment: sled holds a batch's whole tree
/// work in memory, and folding the 1,000,000-allocation data dir's log
/// (461 MB in 64 MiB batches) took the server from 0.9 to 4.9 GB
/// resident, kept after the fold; a batch per record: 1.0 GB, and the
/// fold ran in a third of the time (docs/PERFORMANCE.md, session 19).
///
/// A row under a quarantined key that still cannot be loaded is folded as
/// a delete: it is the row open left out (the state holds nothing under
/// its key), so sled must not get it back, nor the value it replaced.
/// Only such keys are decoded again, so a fold with nothing quarantined
/// (the normal case) costs one look at an empty tree.
pub(crate) fn checkpoint(db: &sled::Db, segments: &[ClosedSegment]) -> Result<(), StoreError> {
    let quarantined = quarantine::keys(db)?;
    for segment in segments {
        for record in wal::read_segment(&segment.path, false)? {
            let mut batch = sled::Batch::default();
            for (key, value) in record.rows {
                match value {
                    Some(value) if !quarantined.is_empty() && quarantined.contains(&key) => {
                        let row = decode_row_guarded(&key, &value, &mut RowSharing::default());
                        if matches!(row, Err(RowError::Bad(_))) {
                            batch.remove(key);
                        } else {
                            batch.insert(key, value);
                        }
                    }
                    Some(value) => batch.insert(key, value),
                    None => batch.remove(key),
                }
            }
            batch.insert(META_KEY, record.meta);
            db.apply_batch(batch)?;
        }
        db.flush()?;
        std::fs::remove_file(&segment.path).map_err(|e| wal::log_error(&segment.path, e))?;
    }
    Ok(())
}

/// What a checkpoint archive starts with: its own format (the rows inside
/// carry the data dir format in their meta row, migrated on import).
const ARCHIVE_MAGIC: &[u8; 16] = b"herder-archive-1";

/// Every row of `state` and its meta row, ready for sled or an archive.
pub(crate) fn encode_state(state: &StateSnapshot) -> Result<EncodedRows, StoreError> {
    let t = &*state.tables;
    let change = |key: RowKey, row: Row| RowChange {
        key,
        row: Some(row),
    };
    let mut all = Vec::with_capacity(t.allocs.len() + t.evals.len() + t.jobs.len());
    all.extend(
        t.jobs
            .iter()
            .map(|(k, j)| change(RowKey::Job(k.clone()), Row::Job(j.clone()))),
    );
    all.extend(
        t.job_versions
            .iter()
            .map(|(k, j)| change(RowKey::JobVersion(k.clone()), Row::JobVersion(j.clone()))),
    );
    all.extend(
        t.job_summaries
            .iter()
            .map(|(k, s)| change(RowKey::JobSummary(k.clone()), Row::JobSummary(s.clone()))),
    );
    all.extend(t.allocs.unordered().map(|a| {
        let key = RowKey::Alloc {
            create_index: a.create_index,
            id: a.id,
        };
        change(key, Row::Alloc(a.clone()))
    }));
    all.extend(
        t.evals
            .iter()
            .map(|(id, e)| change(RowKey::Eval(*id), Row::Eval(e.clone()))),
    );
    all.extend(
        t.nodes
            .iter()
            .map(|(id, n)| change(RowKey::Node(*id), Row::Node(n.clone()))),
    );
    all.extend(
        t.scheduler_config
            .iter()
            .map(|c| change(RowKey::SchedulerConfig, Row::SchedulerConfig(c.clone()))),
    );
    all.extend(
        t.autopilot_config
            .iter()
            .map(|c| change(RowKey::AutopilotConfig, Row::AutopilotConfig(c.clone()))),
    );
    all.extend(t.scaling_events.iter().map(|(k, e)| {
        change(
            RowKey::ScalingEvents(k.clone()),
            Row::ScalingEvents(e.clone()),
        )
    }));
    all.extend(
        t.deployments
            .iter()
            .map(|(id, d)| change(RowKey::Deployment(*id), Row::Deployment(d.clone()))),
    );
    all.extend(
        t.services
            .iter()
            .map(|(k, s)| change(RowKey::Service(k.clone()), Row::Service(s.clone()))),
    );
    all.extend(
        t.namespaces
            .iter()
            .map(|(name, ns)| change(RowKey::Namespace(name.clone()), Row::Namespace(ns.clone()))),
    );
    all.extend(
        t.variables
            .iter()
            .map(|(k, v)| change(RowKey::Variable(k.clone()), Row::Variable(v.clone()))),
    );
    all.extend(
        t.root_keys
            .iter()
            .map(|(k, r)| change(RowKey::RootKey(k.clone()), Row::RootKey(r.clone()))),
    );
    all.extend(
        t.acl
            .rows()
            .map(|(k, row)| change(RowKey::Acl(k), Row::Acl(row))),
    );
    encode_changes(all.iter(), state)
}

/// Writes the archive of `rows` (all of a state's, see [`encode_state`]):
/// the magic, then one log record (`wal`'s checksummed encoding) holding
/// the rows exactly as sled stores them and the meta row.
pub(crate) fn encode_archive(out: &mut Vec<u8>, rows: &EncodedRows) -> Result<(), StoreError> {
    let mut record = Vec::new();
    wal::encode_record(&mut record, &[rows]);
    if record.len() > u32::MAX as usize {
        return Err(StoreError::Checkpoint(format!(
            "the state is {} bytes encoded; an archive holds at most 4 GiB",
            record.len()
        )));
    }
    out.clear();
    out.extend_from_slice(ARCHIVE_MAGIC);
    out.extend_from_slice(&record);
    Ok(())
}

/// Reads an archive back into tables, as `open` reads a data dir: the rows
/// go through a temporary sled database, so an older format is migrated
/// by the same steps, then they are decoded (a row that cannot be loaded
/// is left out and logged, as at open, and counted in the answer) and the
/// indexes rebuilt.
pub(crate) fn decode_archive(bytes: &[u8]) -> Result<(Tables, usize), StoreError> {
    let Some(record) = bytes.strip_prefix(ARCHIVE_MAGIC) else {
        return Err(StoreError::Checkpoint(
            "not a herder state archive (or one of a newer archive format)".into(),
        ));
    };
    let (record, len) = wal::record_at(record).map_err(StoreError::Checkpoint)?;
    if len + ARCHIVE_MAGIC.len() != bytes.len() {
        return Err(StoreError::Checkpoint(
            "trailing bytes after the archive".into(),
        ));
    }
    let scratch = sled::Config::new().temporary(true).open()?;
    let mut batch = sled::Batch::default();
    for (key, value) in record.rows {
        if let Some(value) = value {
            batch.insert(key, value);
        }
    }
    batch.insert(META_KEY, record.meta);
    scratch.apply_batch(batch)?;
    let mut findings = Findings::new(QuarantineSource::Checkpoint);
    let mut tables = load_checkpoint(&scratch, &mut findings)?.finish();
    if !findings.rows.is_empty() {
        tracing::warn!(
            count = findings.rows.len(),
            "rows of an imported state archive could not be loaded and were left out"
        );
    }
    tables.rebuild_indexes();
    Ok((tables, findings.rows.len()))
}

/// Replaces every row of sled's main tree by `rows` and their meta row,
/// in one atomic batch, and waits until it is on disk.
pub(crate) fn replace_all(db: &sled::Db, rows: &EncodedRows) -> Result<(), StoreError> {
    let mut batch = sled::Batch::default();
    for key in db.iter().keys() {
        batch.remove(key?);
    }
    // A later operation on a key in the batch wins over the removal.
    for (key, value) in &rows.rows {
        if let Some(value) = value {
            batch.insert(&key[..], &value[..]);
        }
    }
    batch.insert(META_KEY, &rows.meta[..]);
    db.apply_batch(batch)?;
    db.flush()?;
    Ok(())
}
