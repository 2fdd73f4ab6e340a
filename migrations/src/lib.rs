//! Upgrade steps of herder's on-disk format.
//!
//! The data dir is one sled tree of rows (key = table prefix byte + key
//! bytes, value = the row as JSON; from format 4, allocation rows in a
//! binary encoding) plus a meta row holding the format
//! version; from format 5, the newest commits are in a log beside it
//! (`wal/`), which a format change would have to read as well; from format
//! 6, packed metrics may mark a score as equal to its normalized score. Each step `vN_to_vN1` rewrites raw JSON rows from format N to
//! N+1 in one atomic batch that also moves the meta row's version, so an
//! interrupted upgrade leaves either the old or the new format, never a
//! mix. Steps work on raw JSON on purpose: they must keep working after the
//! Rust structs have moved on.

mod format;
mod v1_to_v2;
mod v2_to_v3;
mod v3_to_v4;
mod v4_to_v5;
mod v5_to_v6;

pub use format::{describe_key, MigrationError, FORMAT_VERSION_FIELD, META_KEY};

/// The format version this build writes.
pub const CURRENT: u32 = 6;

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
            5 => v5_to_v6::run(db)?,
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

#[cfg(test)]
mod tests {
    use super::format::read_meta;
    use super::*;
    use serde_json::Value;

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
