//! Format 4 -> 5: commits go to a write-ahead log beside the rows.
//!
//! From format 5 the newest commits live in `<data dir>/wal/` until a
//! checkpoint folds them into the rows, so the rows alone may be behind.
//! A format-4 dir has no log, so its rows are the whole state as they are;
//! this step only moves the version, so that a format-4 build, which would
//! read the rows and ignore the log (losing acknowledged commits), refuses
//! the data dir instead.

use crate::format::{meta_with_version, read_meta, MigrationError, META_KEY};

pub(crate) fn run(db: &sled::Db) -> Result<(), MigrationError> {
    db.insert(META_KEY, meta_with_version(read_meta(db)?, 5)?)?;
    db.flush()?;
    Ok(())
}
