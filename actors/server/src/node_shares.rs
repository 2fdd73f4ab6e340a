//! How a server's scheduling workers divide the nodes among themselves:
//! each running worker holds a seat, and the seats, in the order they were
//! taken, number the shares ([`NodeShare`]) the workers' placements walk
//! first. Workers that plan at the same time then mostly pick different
//! nodes, and the plan applier refuses fewer of their placements.
//!
//! Only a preference (the scheduler walks every node when its share has no
//! room), so nothing here needs to be exact: a worker that joins or leaves
//! renumbers the others from their next evaluation on.

use herder::scheduler::NodeShare;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The seats of one server's workers. Cheap to clone (a handle).
#[derive(Clone, Default)]
pub struct NodeShares {
    inner: Arc<Seats>,
}

#[derive(Default)]
struct Seats {
    /// Seat IDs in the order they were taken.
    taken: Mutex<Vec<u64>>,
    next_id: AtomicU64,
}

impl Seats {
    /// The list, whatever a panicking holder left (it only ever holds IDs).
    fn taken(&self) -> MutexGuard<'_, Vec<u64>> {
        self.taken
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl NodeShares {
    /// Takes a seat for a worker; it is given back when dropped.
    pub fn join(&self) -> ShareSeat {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.inner.taken().push(id);
        ShareSeat {
            seats: self.inner.clone(),
            id,
        }
    }

    /// How many seats are taken.
    pub fn len(&self) -> usize {
        self.inner.taken().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One worker's seat.
pub struct ShareSeat {
    seats: Arc<Seats>,
    id: u64,
}

impl ShareSeat {
    /// This seat's share of the nodes now: `None` when it is the only one
    /// (a lone worker walks every node).
    pub fn share(&self) -> Option<NodeShare> {
        let taken = self.seats.taken();
        let index = taken.iter().position(|id| *id == self.id)?;
        let count = u32::try_from(taken.len()).ok().filter(|n| *n > 1)?;
        Some(NodeShare {
            index: u32::try_from(index).ok()?,
            count,
        })
    }
}

impl Drop for ShareSeat {
    fn drop(&mut self) {
        self.seats.taken().retain(|id| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seats_number_disjoint_shares_and_renumber_when_one_leaves() {
        let shares = NodeShares::default();
        let a = shares.join();
        assert_eq!(a.share(), None, "a lone worker walks every node");
        let b = shares.join();
        let c = shares.join();
        let held = |seat: &ShareSeat| seat.share().map(|s| (s.index, s.count));
        assert_eq!(
            [held(&a), held(&b), held(&c)],
            [Some((0, 3)), Some((1, 3)), Some((2, 3))]
        );
        // Every position is in exactly one share.
        for position in 0..30u32 {
            let holders = [&a, &b, &c]
                .iter()
                .filter(|seat| seat.share().is_some_and(|s| s.holds(position)))
                .count();
            assert_eq!(holders, 1, "position {position}");
        }
        drop(b);
        assert_eq!(shares.len(), 2);
        assert_eq!([held(&a), held(&c)], [Some((0, 2)), Some((1, 2))]);
    }
}
