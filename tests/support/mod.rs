//! Shared helpers for herder's end-to-end tests: temporary data dirs, free
//! ports, starting an agent and talking to it.

/// A fresh temporary directory that is removed when dropped.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("herder-test-")
        .tempdir()
        .expect("create a temporary directory")
}
