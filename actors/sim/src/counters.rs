//! The simulation's live counters, which every node of every shard bumps,
//! and [`SimStats`], a moment's reading of them. Apart from the crate root
//! so that the nodes, which the root starts, need nothing of it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live counters, shared by every shard.
#[derive(Debug, Default)]
pub struct Counters {
    pub registered: AtomicU64,
    pub live: AtomicU64,
    pub heartbeats: AtomicU64,
    pub reregistrations: AtomicU64,
    pub allocs_running: AtomicU64,
    pub allocs_complete: AtomicU64,
    pub allocs_failed: AtomicU64,
    pub updates_sent: AtomicU64,
    pub errors: AtomicU64,
}

/// A moment's view of the simulation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Nodes registered at least once.
    pub registered: u64,
    /// Nodes whose last registration or heartbeat the server accepted.
    pub live: u64,
    pub heartbeats: u64,
    /// Registrations again after a server forgot the node.
    pub reregistrations: u64,
    pub allocs_running: u64,
    pub allocs_complete: u64,
    pub allocs_failed: u64,
    /// Batched status reports sent.
    pub updates_sent: u64,
    /// Failed requests (retried).
    pub errors: u64,
}

impl std::fmt::Display for SimStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "registered {} live {} heartbeats {} | allocs running {} complete {} failed {} | reports {} errors {}",
            self.registered,
            self.live,
            self.heartbeats,
            self.allocs_running,
            self.allocs_complete,
            self.allocs_failed,
            self.updates_sent,
            self.errors
        )
    }
}

impl Counters {
    /// The counters' values now.
    pub(crate) fn snapshot(&self) -> SimStats {
        SimStats {
            registered: self.registered.load(Relaxed),
            live: self.live.load(Relaxed),
            heartbeats: self.heartbeats.load(Relaxed),
            reregistrations: self.reregistrations.load(Relaxed),
            allocs_running: self.allocs_running.load(Relaxed),
            allocs_complete: self.allocs_complete.load(Relaxed),
            allocs_failed: self.allocs_failed.load(Relaxed),
            updates_sent: self.updates_sent.load(Relaxed),
            errors: self.errors.load(Relaxed),
        }
    }
}
