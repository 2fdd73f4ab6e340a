//! The wall clock in the unit task events, task states and driver handles
//! use: Unix nanoseconds. Its own module so that the drivers, which sit
//! below everything else in the crate, need nothing of the crate root.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix nanoseconds now, the unit task events and states use.
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
