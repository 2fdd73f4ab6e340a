//! Format 3 -> 4: allocation rows may be binary.
//!
//! Format 4 writes allocation rows in a compact binary encoding (the
//! core's `state::alloc_row`: a tag byte, then the fields in a fixed order)
//! instead of JSON, a quarter of the size. Readers of format 4 tell the two
//! apart by the first byte (`{` is JSON), so format-3 rows need no rewrite:
//! each moves to the binary encoding the next time it changes. This step
//! only moves the version, so that a format-3 build, which would take a
//! binary row for corruption, refuses the data dir instead.

use crate::format::{meta_with_version, read_meta, MigrationError, META_KEY};

pub(crate) fn run(db: &sled::Db) -> Result<(), MigrationError> {
    db.insert(META_KEY, meta_with_version(read_meta(db)?, 4)?)?;
    db.flush()?;
    Ok(())
}
