//! Format 2 -> 3: allocation rows are keyed by create index, then ID.
//!
//! Format 2 keyed an allocation by its random UUID alone, so the thousand
//! rows one plan writes landed at a thousand random places in the tree and
//! every write pulled cold pages back into sled's cache. Format 3 puts the
//! (big-endian) create index first: rows written together sit together.
//! This step moves every allocation row to its new key; the value is
//! unchanged.

use crate::format::{describe_key, meta_with_version, read_meta, MigrationError, META_KEY};
use serde_json::Value;

/// The allocation prefix and the format-2 key length (prefix + UUID).
const ALLOC_PREFIX: u8 = b'a';
const V2_KEY_LEN: usize = 17;

pub(crate) fn run(db: &sled::Db) -> Result<(), MigrationError> {
    let mut batch = sled::Batch::default();
    for row in db.scan_prefix([ALLOC_PREFIX]) {
        let (key, value) = row?;
        if key.len() != V2_KEY_LEN {
            return Err(MigrationError::BadRow {
                key: describe_key(&key),
                reason: format!("a format-2 allocation key has {V2_KEY_LEN} bytes"),
            });
        }
        let alloc: Value = serde_json::from_slice(&value).map_err(|e| MigrationError::BadRow {
            key: describe_key(&key),
            reason: e.to_string(),
        })?;
        let create_index = alloc
            .get("CreateIndex")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let mut new_key = Vec::with_capacity(V2_KEY_LEN + 8);
        new_key.push(ALLOC_PREFIX);
        new_key.extend_from_slice(&create_index.to_be_bytes());
        new_key.extend_from_slice(&key[1..]);
        batch.remove(key);
        batch.insert(new_key, value);
    }
    batch.insert(META_KEY, meta_with_version(read_meta(db)?, 3)?);
    db.apply_batch(batch)?;
    db.flush()?;
    Ok(())
}
