//! Waiting out sled's lock on a data dir that was just closed.
//!
//! sled 0.34 holds an exclusive advisory lock on `<dir>/db` while a
//! database is open and lets go of it only when the last thread holding
//! that file does. Its IO thread pool can still be finishing a write a
//! moment after the last `sled::Db` handle is dropped (spacejam/sled#1234),
//! so a store closed and at once reopened in the same process (an
//! embedder restarting its agent, a test) could find its own lock still
//! held and refuse to open. So a store's close waits here until the lock
//! is free: "stopped" means the data dir can be opened again. Opening
//! waits here too, through the tail of a holder that did not. A lock that
//! another live process holds outlasts the wait, and the open then fails
//! as sled reports it.

use std::{
    fs::File,
    io::ErrorKind,
    path::Path,
    time::{Duration, Instant},
};

use fs2::FileExt;

/// How long a close or an open waits for the lock to be released. sled's
/// tail takes milliseconds; seconds leave room for a loaded machine.
pub const RELEASE_WAIT: Duration = Duration::from_secs(3);

/// How often the lock is tried while it is held.
const RETRY_EVERY: Duration = Duration::from_millis(5);

/// Waits (at most `wait`) until nothing holds sled's lock in `dir`. True
/// when it is free, or when `dir` holds no database to lock; false when it
/// was still held at the end, or the lock could not be tried at all.
pub fn wait_until_unlocked(dir: &Path, wait: Duration) -> bool {
    let file = match File::open(dir.join("db")) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return true,
        Err(_) => return false,
    };
    let started = Instant::now();
    loop {
        // flock: a lock taken through another open of the file conflicts
        // even within one process, which is what makes this a probe. The
        // lock taken here ends when `file` is dropped.
        match file.try_lock_exclusive() {
            Ok(()) => return true,
            Err(e) if is_held(&e) && started.elapsed() < wait => std::thread::sleep(RETRY_EVERY),
            Err(_) => return false,
        }
    }
}

fn is_held(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::WouldBlock
        || e.raw_os_error() == fs2::lock_contended_error().raw_os_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked_by_another_open(dir: &Path) -> File {
        let file = File::create(dir.join("db")).unwrap();
        file.try_lock_exclusive().unwrap();
        file
    }

    #[test]
    fn a_dir_without_a_database_is_free() {
        let dir = tempfile::tempdir().unwrap();
        assert!(wait_until_unlocked(dir.path(), Duration::ZERO));
    }

    #[test]
    fn a_lock_held_past_the_wait_is_reported_held() {
        let dir = tempfile::tempdir().unwrap();
        let _held = locked_by_another_open(dir.path());
        let started = Instant::now();
        assert!(!wait_until_unlocked(dir.path(), Duration::from_millis(50)));
        assert!(started.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn a_lock_released_during_the_wait_is_waited_out() {
        let dir = tempfile::tempdir().unwrap();
        let held = locked_by_another_open(dir.path());
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        assert!(wait_until_unlocked(dir.path(), Duration::from_secs(30)));
        releaser.join().unwrap();
        // Free now: a second probe does not wait.
        assert!(wait_until_unlocked(dir.path(), Duration::ZERO));
    }
}
