//! Format 5 -> 6: a metric's score equal to its node's normalized score is
//! stored as a flag instead of its value.
//!
//! Format 6 sets a bit (0x80) in the name byte of such a score inside an
//! allocation row's packed metrics. Format-5 rows never set it, and a
//! format-6 build reads them as they are (shortening them in memory), so
//! nothing is rewritten; this step only moves the version, so that a
//! format-5 build, which would refuse every row holding the flag (and
//! quarantine the allocations), refuses the data dir instead.

use crate::format::{meta_with_version, read_meta, MigrationError, META_KEY};

pub(crate) fn run(db: &sled::Db) -> Result<(), MigrationError> {
    db.insert(META_KEY, meta_with_version(read_meta(db)?, 6)?)?;
    db.flush()?;
    Ok(())
}
