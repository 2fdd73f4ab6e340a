//! Upgrade steps of herder's on-disk format.
//!
//! The data dir is one sled tree of rows (key = table prefix byte + key
//! bytes, value = the row as JSON; from format 4, allocation rows in a
//! binary encoding) plus a meta row holding the format
//! version; from format 5, the newest commits are in a log beside it
//! (`wal/`), which a format change would have to read as well. Each step `vN_to_vN1` rewrites raw JSON rows from format N to
//! N+1 in one atomic batch that also moves the meta row's version, so an
//! interrupted upgrade leaves either the old or the new format, never a
//! mix. Steps work on raw JSON on purpose: they must keep working after the
//! Rust structs have moved on.

mod v1_to_v2;
mod v2_to_v3;
mod v3_to_v4;
mod v4_to_v5;

use serde_json::Value;

/// The format version this build writes.
pub const CURRENT: u32 = 5;

/// The key of the meta row (the same in every format).
pub const META_KEY: &[u8] = b"m";

/// The meta row's field holding the format version.
pub const FORMAT_VERSION_FIELD: &str = "FormatVersion";

#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("row {key} cannot be migrated: {reason}")]
    BadRow { key: String, reason: String },
    #[error("no upgrade path from format version {from} to {to}")]
    NoPath { from: u32, to: u32 },
}

/// Upgrades the data dir from format `from` to [`CURRENT`], one numbered
/// step at a time; each step is durable before the next starts.
pub fn migrate(db: &sled::Db, from: u32) -> Result<(), MigrationError> {
    let mut version = from;
    while version < CURRENT {
        match version {
            1 => v1_to_v2::run(db)?,
            2 => v2_to_v3::run(db)?,
            3 => v3_to_v4::run(db)?,
            4 => v4_to_v5::run(db)?,
            _ => {
                return Err(MigrationError::NoPath {
                    from: version,
                    to: CURRENT,
                })
            }
        }
        version += 1;
    }
    Ok(())
}

/// A printable form of a raw key: the table prefix and the rest, as text
/// where it is text and hex where it is not.
pub fn describe_key(key: &[u8]) -> String {
    let Some((prefix, rest)) = key.split_first() else {
        return "<empty key>".to_string();
    };
    if matches!(prefix, b'a' | b'e' | b'n') && rest.len() == 16 {
        return format!("{}:{}", *prefix as char, uuid_text(rest));
    }
    if *prefix == b'a' && rest.len() == 24 {
        let (index, id) = rest.split_at(8);
        let mut be = [0u8; 8];
        be.copy_from_slice(index);
        return format!("a:{}/{}", u64::from_be_bytes(be), uuid_text(id));
    }
    let rest_text = match std::str::from_utf8(rest) {
        Ok(s) if !s.chars().any(|c| c.is_control() && c != '\0') => s.replace('\0', "/"),
        _ => rest.iter().map(|b| format!("{b:02x}")).collect(),
    };
    format!("{}:{}", *prefix as char, rest_text)
}

/// The 8-4-4-4-12 hex form of 16 UUID bytes.
fn uuid_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Reads the meta row as JSON.
pub(crate) fn read_meta(db: &sled::Db) -> Result<Value, MigrationError> {
    let raw = db.get(META_KEY)?.ok_or_else(|| MigrationError::BadRow {
        key: describe_key(META_KEY),
        reason: "the meta row is missing".into(),
    })?;
    serde_json::from_slice(&raw).map_err(|e| MigrationError::BadRow {
        key: describe_key(META_KEY),
        reason: e.to_string(),
    })
}

/// The meta row with its format version set to `version`.
pub(crate) fn meta_with_version(mut meta: Value, version: u32) -> Result<Vec<u8>, MigrationError> {
    let bad = |reason: &str| MigrationError::BadRow {
        key: describe_key(META_KEY),
        reason: reason.to_string(),
    };
    let object = meta
        .as_object_mut()
        .ok_or_else(|| bad("the meta row is not a JSON object"))?;
    object.insert(FORMAT_VERSION_FIELD.to_string(), Value::from(version));
    serde_json::to_vec(&meta).map_err(|e| bad(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temporary_db() -> sled::Db {
        sled::Config::new().temporary(true).open().unwrap()
    }

    #[test]
    fn v1_allocations_lose_their_embedded_job_and_gain_its_version() {
        let db = temporary_db();
        db.insert(META_KEY, br#"{"FormatVersion":1,"LastIndex":3}"#.to_vec())
            .unwrap();
        let alloc = serde_json::json!({
            "ID": "a1", "Namespace": "default", "JobID": "web",
            "Job": {"ID": "web", "Namespace": "default", "Version": 4}
        });
        db.insert(b"aX", serde_json::to_vec(&alloc).unwrap())
            .unwrap();
        v1_to_v2::run(&db).unwrap();

        let row: Value = serde_json::from_slice(&db.get(b"aX").unwrap().unwrap()).unwrap();
        assert!(row.get("Job").is_none());
        assert_eq!(row["JobVersion"], 4);
        let mut version_key = b"vdefault\0web\0".to_vec();
        version_key.extend_from_slice(&4u64.to_be_bytes());
        let job: Value = serde_json::from_slice(&db.get(version_key).unwrap().unwrap()).unwrap();
        assert_eq!(job["Version"], 4);
        let meta = read_meta(&db).unwrap();
        assert_eq!(meta[FORMAT_VERSION_FIELD], 2);
        assert_eq!(meta["LastIndex"], 3, "other meta fields are kept");
    }

    #[test]
    fn v2_allocations_move_under_their_create_index_and_keep_their_row() {
        let db = temporary_db();
        db.insert(META_KEY, br#"{"FormatVersion":2,"LastIndex":9}"#.to_vec())
            .unwrap();
        let id = [0x5a; 16];
        let mut old_key = vec![b'a'];
        old_key.extend_from_slice(&id);
        let row = br#"{"ID":"5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a","CreateIndex":7}"#;
        db.insert(&old_key, row.to_vec()).unwrap();
        db.insert(b"ndummy-node-row", b"{}".to_vec()).unwrap();
        migrate(&db, 2).unwrap();

        assert_eq!(db.get(&old_key).unwrap(), None);
        let mut new_key = vec![b'a'];
        new_key.extend_from_slice(&7u64.to_be_bytes());
        new_key.extend_from_slice(&id);
        assert_eq!(db.get(&new_key).unwrap().unwrap().as_ref(), &row[..]);
        assert!(
            db.get(b"ndummy-node-row").unwrap().is_some(),
            "other tables are left alone"
        );
        let meta = read_meta(&db).unwrap();
        assert_eq!(meta[FORMAT_VERSION_FIELD], CURRENT);
        assert_eq!(
            describe_key(&new_key),
            "a:7/5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a"
        );
    }

    #[test]
    fn a_v2_allocation_key_of_the_wrong_length_stops_the_upgrade_unchanged() {
        let db = temporary_db();
        db.insert(META_KEY, br#"{"FormatVersion":2}"#.to_vec())
            .unwrap();
        db.insert(b"ashort", b"{}".to_vec()).unwrap();
        assert!(matches!(
            migrate(&db, 2),
            Err(MigrationError::BadRow { .. })
        ));
        assert_eq!(read_meta(&db).unwrap()[FORMAT_VERSION_FIELD], 2);
        assert!(db.get(b"ashort").unwrap().is_some());
    }

    #[test]
    fn an_unknown_old_format_has_no_path() {
        let db = temporary_db();
        assert!(matches!(
            migrate(&db, 0),
            Err(MigrationError::NoPath { from: 0, .. })
        ));
    }

    #[test]
    fn keys_are_described_readably() {
        assert_eq!(describe_key(b"jdefault\0web"), "j:default/web");
        assert_eq!(describe_key(&[b'c', 0xff, 0x01]), "c:ff01");
        let mut alloc = vec![b'a'];
        alloc.extend_from_slice(&[0xab; 16]);
        assert_eq!(
            describe_key(&alloc),
            "a:abababab-abab-abab-abab-abababababab"
        );
    }
}
