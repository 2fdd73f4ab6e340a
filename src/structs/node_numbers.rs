//! Small numbers for the node IDs that allocation metrics name, so that a
//! metric kept in memory refers to a node in two bytes instead of sixteen.
//!
//! Every allocation keeps its placement's metric, and a metric names the
//! five best-scored nodes: at a million allocations the node IDs alone were
//! 80 MB, repeating the same ten thousand IDs. Numbers are handed out in
//! the order IDs are first seen and never taken back, so a number written
//! into a metric stays valid for the life of the process. They exist only
//! in memory: anything that leaves the process (a stored row, a log entry,
//! a snapshot, the API) writes IDs in full, so two servers, or one server
//! before and after a restart, never need to agree on them.
//!
//! The table is bounded ([`MAX_NUMBERED`]): node IDs are the clients'
//! choice, and a cluster that replaced its nodes for years must not grow it
//! for ever. Past the bound a metric writes the new IDs in full, which
//! costs memory and nothing else.

use super::NodeId;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{LazyLock, PoisonError, RwLock, RwLockReadGuard};

/// How many node IDs get a number. Far above any real cluster (Nomad's
/// largest are tens of thousands of nodes); at the bound the table holds
/// about 12 MB.
pub const MAX_NUMBERED: usize = 1 << 18;

/// The process's numbers.
static NUMBERS: LazyLock<RwLock<NodeNumbers>> = LazyLock::new(Default::default);

#[derive(Default)]
struct NodeNumbers {
    /// The ID of each number.
    ids: Vec<NodeId>,
    /// The number of each ID. The standard (keyed) hash: node IDs are
    /// chosen by clients.
    numbers: HashMap<NodeId, u32>,
}

/// How many numbers a thread remembers before it starts over: about
/// 1.3 MB at most for each thread that packs or loads metrics (scheduler
/// workers, the loader's decoders), and room for twice the largest
/// clusters herder is measured with.
const THREAD_CACHE: usize = 1 << 15;

/// The hash of a thread's cache. Seeded per process, like the standard
/// one, since node IDs are the clients' choice, but several times quicker:
/// a scheduler numbers the five best-scored nodes of every placement, and
/// SipHash was most of that (7% of a service evaluation's instructions).
type CacheHash = foldhash::quality::RandomState;

thread_local! {
    /// Numbers this thread looked up: a restart's decoders number five
    /// nodes a row, a million rows, and taking the shared lock for each
    /// (its counter bouncing between cores) was most of the cost.
    static KNOWN: RefCell<HashMap<NodeId, u32, CacheHash>> =
        RefCell::new(HashMap::with_hasher(CacheHash::default()));
}

/// `id`'s number, given one on first sight; `None` once the table is full
/// and `id` is not in it.
pub fn number_of(id: NodeId) -> Option<u32> {
    let known = KNOWN.with(|known| known.borrow().get(&id).copied());
    if known.is_some() {
        return known;
    }
    let number = number_in_table(id)?;
    KNOWN.with(|known| {
        let mut known = known.borrow_mut();
        if known.len() >= THREAD_CACHE {
            known.clear();
        }
        known.insert(id, number);
    });
    Some(number)
}

fn number_in_table(id: NodeId) -> Option<u32> {
    if let Some(n) = read().numbers.get(&id) {
        return Some(*n);
    }
    let mut table = NUMBERS.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(n) = table.numbers.get(&id) {
        return Some(*n);
    }
    if table.ids.len() >= MAX_NUMBERED {
        return None;
    }
    // Below MAX_NUMBERED, which fits a u32.
    let n = table.ids.len() as u32;
    table.ids.push(id);
    table.numbers.insert(id, n);
    Some(n)
}

/// A view of the numbers for reading many of them at once (decoding or
/// writing out a metric reads five).
pub struct Numbered(RwLockReadGuard<'static, NodeNumbers>);

impl Numbered {
    /// The node a number stands for, if this process gave it out.
    pub fn id(&self, number: u64) -> Option<NodeId> {
        usize::try_from(number)
            .ok()
            .and_then(|n| self.0.ids.get(n))
            .copied()
    }
}

/// The numbers, to read (writers wait meanwhile: hold it briefly).
pub fn numbered() -> Numbered {
    Numbered(read())
}

fn read() -> RwLockReadGuard<'static, NodeNumbers> {
    // A panic while the lock was held cannot leave the table half
    // written: a number is pushed, then indexed; an ID without an index
    // entry is only a number not handed out again.
    NUMBERS.read().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_keeps_its_number_and_the_number_reads_back_as_the_id() {
        let id = NodeId::new_v4();
        let n = number_of(id).expect("room for one more");
        assert_eq!(number_of(id), Some(n));
        assert_eq!(numbered().id(u64::from(n)), Some(id));
        let other = NodeId::new_v4();
        assert_ne!(number_of(other), Some(n));
        assert_eq!(numbered().id(u64::MAX), None);
    }
}
