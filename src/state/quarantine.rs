//! Rows the store could not load, kept aside instead of refusing to start.
//!
//! When opening a data dir meets a row that cannot be loaded (it does not
//! decode, its key belongs to no table or does not match the row, or it is
//! a job that fails `Job::validate`), the row is left out of the tables and
//! its raw key and bytes are moved into a sled tree of their own,
//! [`TREE`], so that an operator can inspect it, repair it and put it back.
//! `persist` decides what is quarantined and what stays fatal (see its
//! module doc); this module is the tree's format and what the store shows of
//! it ([`QuarantinedRecord`]).
//!
//! One entry per key: the entry's key is the row's original sled key, its
//! value a small JSON envelope ([`Envelope`]) with the reason, where and at
//! which index the row was found, and the raw value in hex. Finding the same
//! bytes under the same key again (a log segment replayed at every open
//! until it is checkpointed) leaves the entry as it is.

use super::StoreError;
use herder_migrations::describe_key;
use serde::{Deserialize, Serialize};

/// The sled tree quarantined rows are kept in.
pub(crate) const TREE: &[u8] = b"quarantine";

/// Where a quarantined row was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuarantineSource {
    /// Sled's checkpoint; the row was removed from the main tree.
    Checkpoint,
    /// A record of the write-ahead log; the checkpoint folds it into sled
    /// as a delete.
    Log,
    /// The entry itself could not be read (an envelope this build does
    /// not understand); nothing is known but its key.
    Unknown,
}

/// A stored row that could not be loaded and was set aside at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuarantinedRecord {
    /// The row's key as printed in logs and errors (`describe_key`), e.g.
    /// `j:default/web`.
    pub key: String,
    /// The raw sled key: the entry's key in the quarantine tree, and where
    /// the row goes back once repaired.
    pub raw_key: Vec<u8>,
    /// Why the row could not be loaded.
    pub reason: String,
    pub source: QuarantineSource,
    /// When, as a state index: sled's checkpoint index for a checkpoint
    /// row, the log record's index for a log row. The core reads no clock
    /// (ARCHITECTURE.md), and the index orders the finding against every
    /// change the store made; the time is in the error logged at open.
    pub found_at_index: u64,
    /// Size of the raw value kept, in bytes.
    pub value_bytes: usize,
}

/// An entry's value in the quarantine tree.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Envelope {
    /// `describe_key` of the raw key, for a reader of the raw tree.
    key: String,
    reason: String,
    source: QuarantineSource,
    found_at_index: u64,
    /// The raw value in lowercase hex (no base64 dependency for a path
    /// that runs once in a blue moon).
    value: String,
}

/// A row found unloadable at open, before it is written to the tree.
#[derive(Debug)]
pub(crate) struct Finding {
    pub raw_key: Vec<u8>,
    pub value: Vec<u8>,
    pub reason: String,
    pub source: QuarantineSource,
    pub found_at_index: u64,
}

pub(crate) fn open_tree(db: &sled::Db) -> Result<sled::Tree, StoreError> {
    Ok(db.open_tree(TREE)?)
}

/// Writes the findings into the quarantine tree (a later finding of a key
/// replaces an earlier one: it is the value the state would have had),
/// logging each new one once, then removes the checkpoint rows among them
/// from the main tree so no later checkpoint or open meets them again.
/// The tree is flushed before the removal, so a crash in between leaves
/// the row in both places (found again, same entry), never in neither.
pub(crate) fn record(db: &sled::Db, findings: Vec<Finding>) -> Result<(), StoreError> {
    if findings.is_empty() {
        return Ok(());
    }
    let tree = open_tree(db)?;
    let mut entries = sled::Batch::default();
    let mut removals = sled::Batch::default();
    let mut last_of_key = std::collections::BTreeMap::new();
    for finding in findings {
        // Before keeping only the last finding of a key: a bad sled row
        // leaves the main tree even when the log had a newer bad value.
        if finding.source == QuarantineSource::Checkpoint {
            removals.remove(&finding.raw_key[..]);
        }
        last_of_key.insert(finding.raw_key.clone(), finding);
    }
    for (raw_key, finding) in last_of_key {
        let key = describe_key(&raw_key);
        let value = hex(&finding.value);
        let known = tree
            .get(&raw_key)?
            .and_then(|old| serde_json::from_slice::<Envelope>(&old).ok())
            .is_some_and(|old| old.value == value);
        if known {
            // Found again before its log segment was checkpointed: the
            // entry (and the error logged when it was made) stands.
            tracing::debug!(%key, "a quarantined row is still in the state log");
            continue;
        }
        tracing::error!(
            %key,
            reason = %finding.reason,
            source = ?finding.source,
            index = finding.found_at_index,
            "a stored row cannot be loaded; the store opens without it and keeps it in the \
             quarantine tree for an operator"
        );
        let envelope = Envelope {
            key: key.clone(),
            reason: finding.reason,
            source: finding.source,
            found_at_index: finding.found_at_index,
            value,
        };
        let encoded = serde_json::to_vec(&envelope).map_err(|e| StoreError::Corrupt {
            key,
            reason: format!("cannot encode its quarantine entry: {e}"),
        })?;
        entries.insert(raw_key, encoded);
    }
    tree.apply_batch(entries)?;
    db.flush()?;
    db.apply_batch(removals)?;
    db.flush()?;
    Ok(())
}

/// Every entry of the quarantine tree, in key order. An entry that cannot
/// be read is still listed (with what is known: its key), never an error.
pub(crate) fn list(db: &sled::Db) -> Result<Vec<QuarantinedRecord>, StoreError> {
    let tree = open_tree(db)?;
    let mut out = Vec::new();
    for entry in tree.iter() {
        let (raw_key, raw) = entry?;
        let key = describe_key(&raw_key);
        let record = match serde_json::from_slice::<Envelope>(&raw) {
            Ok(envelope) => QuarantinedRecord {
                key,
                raw_key: raw_key.to_vec(),
                reason: envelope.reason,
                source: envelope.source,
                found_at_index: envelope.found_at_index,
                value_bytes: envelope.value.len() / 2,
            },
            Err(e) => QuarantinedRecord {
                key,
                raw_key: raw_key.to_vec(),
                reason: format!("the quarantine entry cannot be read: {e}"),
                source: QuarantineSource::Unknown,
                found_at_index: 0,
                value_bytes: raw.len(),
            },
        };
        out.push(record);
    }
    Ok(out)
}

/// The keys of the quarantine tree: the checkpoint checks rows under these
/// keys before folding them (see `persist::checkpoint`).
pub(crate) fn keys(db: &sled::Db) -> Result<std::collections::HashSet<Vec<u8>>, StoreError> {
    open_tree(db)?
        .iter()
        .keys()
        .map(|k| Ok(k?.to_vec()))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(key: &[u8], value: &[u8], source: QuarantineSource, index: u64) -> Finding {
        Finding {
            raw_key: key.to_vec(),
            value: value.to_vec(),
            reason: "bad".into(),
            source,
            found_at_index: index,
        }
    }

    #[test]
    fn the_same_key_twice_keeps_one_entry_and_a_checkpoint_row_leaves_the_main_tree() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        db.insert(b"jdefault\0web", &b"{oops"[..]).unwrap();
        record(
            &db,
            vec![finding(
                b"jdefault\0web",
                b"{oops",
                QuarantineSource::Checkpoint,
                7,
            )],
        )
        .unwrap();
        assert_eq!(db.get(b"jdefault\0web").unwrap(), None);
        // Found again (say, replayed from the log): the entry stands.
        record(
            &db,
            vec![finding(
                b"jdefault\0web",
                b"{oops",
                QuarantineSource::Log,
                9,
            )],
        )
        .unwrap();
        let listed = list(&db).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].key, "j:default/web");
        assert_eq!(listed[0].found_at_index, 7);
        assert_eq!(listed[0].source, QuarantineSource::Checkpoint);
        assert_eq!(listed[0].value_bytes, 5);
        let raw = open_tree(&db)
            .unwrap()
            .get(b"jdefault\0web")
            .unwrap()
            .unwrap();
        let envelope: Envelope = serde_json::from_slice(&raw).unwrap();
        assert_eq!(envelope.value, "7b6f6f7073");
    }

    #[test]
    fn a_bad_sled_row_leaves_the_main_tree_even_when_the_log_has_a_newer_bad_value() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        db.insert(b"eX", &b"old"[..]).unwrap();
        record(
            &db,
            vec![
                finding(b"eX", b"old", QuarantineSource::Checkpoint, 3),
                finding(b"eX", b"new", QuarantineSource::Log, 4),
            ],
        )
        .unwrap();
        assert_eq!(db.get(b"eX").unwrap(), None);
        let listed = list(&db).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (listed[0].source, listed[0].found_at_index),
            (QuarantineSource::Log, 4)
        );
    }

    #[test]
    fn an_unreadable_entry_is_still_listed() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        open_tree(&db)
            .unwrap()
            .insert(b"x1", &b"garbage"[..])
            .unwrap();
        let listed = list(&db).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].source, QuarantineSource::Unknown);
        assert_eq!(listed[0].raw_key, b"x1");
    }
}
