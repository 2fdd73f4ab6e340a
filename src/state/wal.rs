//! The state's write-ahead log: every commit since the last checkpoint,
//! in order, as appended records.
//!
//! Why a log in front of sled: a plan of a thousand placements changed a
//! thousand rows, and putting each into sled's B-tree cost about 6 us of
//! CPU per row on the commit path, more than placing it. A commit is now
//! one appended record (the changed rows exactly as sled will hold them,
//! plus the meta row) and one `fdatasync`. Sled stays the checkpoint: once
//! closed segments add up to `StoreOptions::checkpoint_bytes`, a background
//! thread folds them into sled and deletes them (`checkpoint`), and opening
//! a data dir replays the records newer than sled's last index over sled's
//! rows. It is the shape Raft needs too: a log in front of a snapshot.
//!
//! Files: `<data dir>/wal/<sequence>.log`, numbered upwards; a new segment
//! starts when the current one passes `StoreOptions::wal_segment_bytes`,
//! and at every open (the old ones are only read again).
//!
//! A record is `u32` payload length, `u32` CRC-32 of the payload (both
//! little-endian), then the payload: the last index the record covers, its
//! meta row, and its rows (key, and the value or nothing for a delete),
//! with varint lengths. A record cut short, or failing its CRC, at the end
//! of the newest segment is a write a crash interrupted: it was never
//! acknowledged (acknowledging waits for the sync), so it is cut off. Any
//! other damaged record is corruption, and the data dir is refused.

use super::StoreError;
use crate::structs::codec::{CodecError, Reader, Writer};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The log's folder inside a data dir.
pub(crate) const WAL_DIR: &str = "wal";

const HEADER: usize = 8;

/// One record read back: everything one commit wrote.
#[derive(Debug, PartialEq)]
pub(crate) struct Record {
    pub last_index: u64,
    pub meta: Vec<u8>,
    /// Raw key and value (`None`: delete), in the order they were applied.
    pub rows: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// A segment no longer appended to, waiting for a checkpoint.
#[derive(Clone, Debug)]
pub(crate) struct ClosedSegment {
    pub path: PathBuf,
    pub bytes: u64,
}

/// Rows ready for sled, as a log record carries them: what the writer
/// thread hands the persister, so that turning rows into bytes (the
/// CPU-heavy part of persisting) runs beside the persister's disk work
/// instead of before it. Here, below `persist`, because the log appends
/// them as they are.
#[derive(Debug, Default)]
pub(crate) struct EncodedRows {
    /// Raw key and value (`None`: delete), later changes of a row last.
    pub rows: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// The meta row of the state after these rows.
    pub meta: Vec<u8>,
    /// The index of that state.
    pub last_index: u64,
}

/// Encodes the record of one commit: the groups' rows in order (a later
/// change of a row after an earlier one) and the last group's meta row.
pub(crate) fn encode_record(out: &mut Vec<u8>, groups: &[&EncodedRows]) {
    out.clear();
    out.extend_from_slice(&[0; HEADER]);
    let mut w = Writer(out);
    let last = groups.last();
    w.0.extend_from_slice(&last.map_or(0, |g| g.last_index).to_le_bytes());
    let meta = last.map_or(&[][..], |g| &g.meta[..]);
    w.varint(meta.len() as u64);
    w.bytes(meta);
    let count: usize = groups.iter().map(|g| g.rows.len()).sum();
    w.varint(count as u64);
    for (key, value) in groups.iter().flat_map(|g| g.rows.iter()) {
        w.varint(key.len() as u64);
        w.bytes(key);
        match value {
            Some(value) => {
                w.u8(1);
                w.varint(value.len() as u64);
                w.bytes(value);
            }
            None => w.u8(0),
        }
    }
    let payload_len = (out.len() - HEADER) as u32;
    let crc = crc32fast::hash(&out[HEADER..]);
    out[..4].copy_from_slice(&payload_len.to_le_bytes());
    out[4..HEADER].copy_from_slice(&crc.to_le_bytes());
}

/// Where one record's parts lie in the segment bytes it was read from:
/// a restart hands rows on as spans of the segment, never copied out.
#[derive(Debug)]
pub(crate) struct RecordSpans {
    pub last_index: u64,
    pub meta: Range<usize>,
    /// Key and value (`None`: delete), in the order they were applied.
    pub rows: Vec<(Range<usize>, Option<Range<usize>>)>,
}

impl RecordSpans {
    /// The record with its bytes copied out of `segment`.
    fn to_record(&self, segment: &[u8]) -> Record {
        Record {
            last_index: self.last_index,
            meta: segment[self.meta.clone()].to_vec(),
            rows: self
                .rows
                .iter()
                .map(|(key, value)| {
                    let value = value.as_ref().map(|v| segment[v.clone()].to_vec());
                    (segment[key.clone()].to_vec(), value)
                })
                .collect(),
        }
    }
}

/// Reads a record's payload, which ends at `end` in its segment, into
/// spans of the segment. The one reading of `encode_record`'s layout.
fn payload_spans(payload: &[u8], end: usize) -> Result<RecordSpans, CodecError> {
    let mut r = Reader { rest: payload };
    let span = |r: &mut Reader, len: usize| -> Result<Range<usize>, CodecError> {
        let start = end - r.rest.len();
        r.take(len)?;
        Ok(start..start + len)
    };
    let mut index = [0u8; 8];
    index.copy_from_slice(r.take(8)?);
    let meta_len = r.len()?;
    let meta = span(&mut r, meta_len)?;
    let count = r.len()?;
    // Bounded by what the payload can hold (a row takes two bytes at
    // least), whatever a damaged count says.
    let mut rows = Vec::with_capacity(count.min(r.rest.len() / 2));
    for _ in 0..count {
        let key_len = r.len()?;
        let key = span(&mut r, key_len)?;
        let value = match r.u8()? {
            0 => None,
            1 => {
                let len = r.len()?;
                Some(span(&mut r, len)?)
            }
            other => {
                return Err(CodecError::BadCode {
                    field: "row presence",
                    value: u64::from(other),
                })
            }
        };
        rows.push((key, value));
    }
    if !r.rest.is_empty() {
        return Err(CodecError::Trailing(r.rest.len()));
    }
    Ok(RecordSpans {
        last_index: u64::from_le_bytes(index),
        meta,
        rows,
    })
}

/// The segment files of `dir`, oldest first, with their sequence numbers.
pub(crate) fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(log_error(dir, e)),
    };
    for entry in entries {
        let path = entry.map_err(|e| log_error(dir, e))?.path();
        let seq = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(seq) = seq {
            found.push((seq, path));
        }
    }
    found.sort();
    Ok(found)
}

/// Asks the kernel to start reading `path` into its cache now, without
/// waiting for it: a restart reads the segments one after another, and
/// with a cold cache each read left the decoders idle while the disk
/// caught up. Only a hint: on failure, or off Linux, nothing happens and
/// the segment's read does the work.
pub(crate) fn start_reading_ahead(path: &Path) {
    #[cfg(target_os = "linux")]
    if let Ok(file) = File::open(path) {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain syscall on a descriptor `file` holds open for
        // the call; offset 0 and length 0 mean the whole file.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = path;
}

/// Reads every record of a segment. In the newest segment (`newest`), a
/// damaged tail is a write cut short by a crash: the file is truncated to
/// its last whole record. Elsewhere damage is an error.
pub(crate) fn read_segment(path: &Path, newest: bool) -> Result<Vec<Record>, StoreError> {
    let mut bytes = Vec::new();
    let records = read_segment_into(path, newest, &mut bytes)?;
    Ok(records.iter().map(|r| r.to_record(&bytes)).collect())
}

/// [`read_segment`] into `bytes` (its earlier content replaced, its
/// capacity reused), answering where each record lies in them.
pub(crate) fn read_segment_into(
    path: &Path,
    newest: bool,
    bytes: &mut Vec<u8>,
) -> Result<Vec<RecordSpans>, StoreError> {
    bytes.clear();
    File::open(path)
        .and_then(|mut f| f.read_to_end(bytes))
        .map_err(|e| log_error(path, e))?;
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match record_spans_at(bytes, at) {
            Ok((record, len)) => {
                records.push(record);
                at += len;
            }
            Err(reason) if newest => {
                tracing::warn!(path = %path.display(), offset = at, %reason,
                    "the state log ends in a write a crash cut short (never acknowledged); cutting it off");
                OpenOptions::new()
                    .write(true)
                    .open(path)
                    .and_then(|f| {
                        f.set_len(at as u64)?;
                        f.sync_all()
                    })
                    .map_err(|e| log_error(path, e))?;
                break;
            }
            // Fatal, not quarantined like a bad row inside a sound record
            // (`persist`'s module doc): a broken record is not one row but
            // a lost commit of unknown rows under every later one.
            Err(reason) => {
                return Err(StoreError::Corrupt {
                    key: format!("{} at byte {at}", path.display()),
                    reason,
                })
            }
        }
    }
    Ok(records)
}

/// The record at the start of `bytes` and its length on disk.
pub(crate) fn record_at(bytes: &[u8]) -> Result<(Record, usize), String> {
    let (record, len) = record_spans_at(bytes, 0)?;
    Ok((record.to_record(bytes), len))
}

/// The record starting at `at` in `bytes`, as spans of `bytes`, and its
/// length on disk.
fn record_spans_at(bytes: &[u8], at: usize) -> Result<(RecordSpans, usize), String> {
    let rest = bytes.get(at..).unwrap_or_default();
    if rest.len() < HEADER {
        return Err("a record header is cut short".into());
    }
    let mut len = [0u8; 4];
    len.copy_from_slice(&rest[..4]);
    let len = u32::from_le_bytes(len) as usize;
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&rest[4..HEADER]);
    let Some(payload) = rest.get(HEADER..HEADER + len).filter(|_| len > 0) else {
        return Err("a record is cut short".into());
    };
    if crc32fast::hash(payload) != u32::from_le_bytes(crc) {
        return Err("a record fails its checksum".into());
    }
    let end = at + HEADER + len;
    let record =
        payload_spans(payload, end).map_err(|e| format!("a record cannot be read: {e}"))?;
    Ok((record, HEADER + len))
}

/// The segment being appended to.
pub(crate) struct WalWriter {
    dir: PathBuf,
    file: File,
    path: PathBuf,
    seq: u64,
    len: u64,
    segment_bytes: u64,
}

impl WalWriter {
    /// Starts a new segment after `last_seq` (the newest existing one).
    pub(crate) fn start(dir: &Path, last_seq: u64, segment_bytes: u64) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| log_error(dir, e))?;
        let seq = last_seq + 1;
        let (file, path) = new_segment(dir, seq)?;
        Ok(WalWriter {
            dir: dir.to_path_buf(),
            file,
            path,
            seq,
            len: 0,
            segment_bytes,
        })
    }

    /// Appends one encoded record and waits until it is on disk. Returns
    /// the segment it closed, if the record filled it.
    pub(crate) fn append(&mut self, record: &[u8]) -> Result<Option<ClosedSegment>, StoreError> {
        self.file
            .write_all(record)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| log_error(&self.path, e))?;
        self.len += record.len() as u64;
        if self.len < self.segment_bytes {
            return Ok(None);
        }
        let closed = ClosedSegment {
            path: self.path.clone(),
            bytes: self.len,
        };
        self.seq += 1;
        let (file, path) = new_segment(&self.dir, self.seq)?;
        self.file = file;
        self.path = path;
        self.len = 0;
        Ok(Some(closed))
    }
}

impl WalWriter {
    /// Deletes every segment of the log (the state they lead to was
    /// replaced and is in sled) and starts a new one, numbered on.
    pub(crate) fn restart_empty(&mut self) -> Result<(), StoreError> {
        let (file, path) = new_segment(&self.dir, self.seq + 1)?;
        for (seq, old) in segments(&self.dir)? {
            if seq <= self.seq {
                std::fs::remove_file(&old).map_err(|e| log_error(&old, e))?;
            }
        }
        sync_dir(&self.dir)?;
        self.seq += 1;
        self.file = file;
        self.path = path;
        self.len = 0;
        Ok(())
    }
}

/// Creates segment `seq` and makes its name durable (a synced directory),
/// so a record synced into it cannot be lost with the file's name.
fn new_segment(dir: &Path, seq: u64) -> Result<(File, PathBuf), StoreError> {
    let path = dir.join(format!("{seq:020}.log"));
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .map_err(|e| log_error(&path, e))?;
    sync_dir(dir)?;
    Ok((file, path))
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| log_error(dir, e))
}

pub(crate) fn log_error(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Log {
        path: path.display().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(last_index: u64, rows: &[(&[u8], Option<&[u8]>)]) -> EncodedRows {
        EncodedRows {
            rows: rows
                .iter()
                .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect(),
            meta: format!("{{\"LastIndex\":{last_index}}}").into_bytes(),
            last_index,
        }
    }

    fn append(w: &mut WalWriter, groups: &[&EncodedRows]) -> Option<ClosedSegment> {
        let mut buf = Vec::new();
        encode_record(&mut buf, groups);
        w.append(&buf).unwrap()
    }

    #[test]
    fn records_read_back_in_order_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = WalWriter::start(dir.path(), 0, 32).unwrap();
        let (a, b) = (
            group(3, &[(b"k1", Some(b"v1")), (b"k2", None)]),
            group(4, &[(b"k1", Some(b"v2"))]),
        );
        let closed = append(&mut w, &[&a, &b]);
        assert!(
            closed.is_some(),
            "a record past 32 bytes closes the segment"
        );
        append(&mut w, &[&group(5, &[(b"k3", Some(b""))])]);
        let segs = segments(dir.path()).unwrap();
        // Each record filled its segment: the third is new and empty.
        assert_eq!(segs.iter().map(|s| s.0).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(read_segment(&segs[2].1, true).unwrap().is_empty());
        let first = read_segment(&segs[0].1, false).unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].last_index, 4);
        assert_eq!(first[0].meta, b"{\"LastIndex\":4}");
        let rows: Vec<_> = first[0]
            .rows
            .iter()
            .map(|(k, v)| (&k[..], v.as_deref()))
            .collect();
        assert_eq!(
            rows,
            [
                (&b"k1"[..], Some(&b"v1"[..])),
                (b"k2", None),
                (b"k1", Some(b"v2"))
            ]
        );
        assert_eq!(read_segment(&segs[1].1, false).unwrap()[0].last_index, 5);
    }

    #[test]
    fn a_torn_tail_is_cut_off_in_the_newest_segment_and_refused_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = WalWriter::start(dir.path(), 0, 1 << 20).unwrap();
        append(&mut w, &[&group(1, &[(b"a", Some(b"1"))])]);
        append(&mut w, &[&group(2, &[(b"b", Some(b"2"))])]);
        let path = segments(dir.path()).unwrap()[0].1.clone();
        let whole = std::fs::read(&path).unwrap();
        let first_len = whole.len() / 2;
        // Every cut inside the second record, and every flipped byte of it.
        for cut in first_len + 1..whole.len() {
            std::fs::write(&path, &whole[..cut]).unwrap();
            assert!(read_segment(&path, false).is_err(), "cut at {cut}");
            let kept = read_segment(&path, true).unwrap();
            assert_eq!(kept.len(), 1, "cut at {cut}");
            assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, first_len);
        }
        for flip in first_len..whole.len() {
            let mut damaged = whole.clone();
            damaged[flip] ^= 0x40;
            std::fs::write(&path, &damaged).unwrap();
            assert!(read_segment(&path, false).is_err(), "flip at {flip}");
            assert_eq!(
                read_segment(&path, true).unwrap().len(),
                1,
                "flip at {flip}"
            );
        }
    }
}
