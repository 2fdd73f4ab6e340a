//! The allocation table: every allocation by ID, kept in the order the IDs
//! were made ([`AllocOrderKey`]) rather than in ID order.
//!
//! Why not by ID: IDs are random, so a plan's placements were copied into a
//! thousand leaves of a tree a snapshot still shared (see
//! `structs::alloc_id`). In the order they were made, they fill a few.
//!
//! What that costs: the reads that want ID order (the API's list and its
//! pages, a search by ID prefix) sort what they read. Lookups by ID undo
//! the ID's permutation first, a few nanoseconds.

use crate::structs::alloc_id::AllocOrderKey;
use crate::structs::{AllocId, Allocation};
use imbl::OrdMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct AllocTable {
    rows: OrdMap<AllocOrderKey, Arc<Allocation>>,
}

impl AllocTable {
    /// The table of `allocs` (each with its ID), built in one pass (the
    /// load's). The IDs come beside the rows: reading each from its row
    /// would be a cache miss per allocation.
    pub(crate) fn from_unordered(
        allocs: impl IntoIterator<Item = (AllocId, Arc<Allocation>)>,
    ) -> Self {
        let rows = allocs
            .into_iter()
            .map(|(id, a)| (AllocOrderKey::of(&id), a));
        AllocTable {
            rows: super::tables::in_key_order(rows),
        }
    }

    pub(crate) fn get(&self, id: &AllocId) -> Option<&Arc<Allocation>> {
        self.rows.get(&AllocOrderKey::of(id))
    }

    /// Files `alloc` under its ID; the row it replaces, if any.
    pub(crate) fn insert(&mut self, alloc: Arc<Allocation>) -> Option<Arc<Allocation>> {
        self.rows.insert(AllocOrderKey::of(&alloc.id), alloc)
    }

    pub(crate) fn remove(&mut self, id: &AllocId) -> Option<Arc<Allocation>> {
        self.rows.remove(&AllocOrderKey::of(id))
    }

    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Every allocation, in the table's order (not by ID): for reads that
    /// look at all of them and do not care in which order.
    pub(crate) fn unordered(&self) -> impl Iterator<Item = &Arc<Allocation>> + '_ {
        self.rows.values()
    }

    /// The allocations whose ID is `from` or after, by ID. Gathers them
    /// into a heap and hands them out smallest first: a read of the whole
    /// table, then a few steps per allocation taken, so that a search or a
    /// page reading only the first few does not sort them all.
    pub(crate) fn by_id_from(&self, from: AllocId) -> impl Iterator<Item = &Arc<Allocation>> + '_ {
        // (ID, row) pairs: comparing IDs read from the rows would miss the
        // cache at every comparison.
        let found: Vec<Reverse<ById<'_>>> = self
            .rows
            .values()
            .filter(|a| a.id >= from)
            .map(|a| Reverse(ById(a.id, a)))
            .collect();
        let mut heap = BinaryHeap::from(found);
        std::iter::from_fn(move || heap.pop().map(|Reverse(ById(_, a))| a))
    }
}

/// An allocation ordered by its ID alone.
struct ById<'a>(AllocId, &'a Arc<Allocation>);

impl PartialEq for ById<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for ById<'_> {}

impl PartialOrd for ById<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ById<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs::alloc_id::new_alloc_id;
    use std::collections::BTreeMap;

    fn alloc(id: AllocId, version: u64) -> Arc<Allocation> {
        Arc::new(Allocation {
            id,
            job_version: version,
            ..Default::default()
        })
    }

    fn assert_same(table: &AllocTable, model: &BTreeMap<AllocId, Arc<Allocation>>) {
        assert_eq!(table.len(), model.len());
        for (id, a) in model {
            assert!(table.get(id).is_some_and(|got| Arc::ptr_eq(got, a)));
        }
        let starts = [AllocId::nil(), AllocId::max()].into_iter();
        for from in starts.chain(model.keys().step_by(97).copied()) {
            let read: Vec<AllocId> = table.by_id_from(from).map(|a| a.id).collect();
            let want: Vec<AllocId> = model.range(from..).map(|(id, _)| *id).collect();
            assert_eq!(read, want, "from {from}");
        }
        let mut unordered: Vec<AllocId> = table.unordered().map(|a| a.id).collect();
        unordered.sort();
        assert!(unordered.iter().eq(model.keys()));
    }

    /// Made IDs, random ones and the extremes, written, rewritten and
    /// removed: the table answers as a map by ID would, and a copy taken
    /// before the changes still answers as it did.
    #[test]
    fn answers_as_a_map_by_id_would() {
        let mut table = AllocTable::default();
        let mut model = BTreeMap::new();
        let extremes = [AllocId::nil(), AllocId::max(), AllocId::from_u128(1 << 76)];
        for id in extremes {
            let a = alloc(id, 0);
            assert!(table.insert(a.clone()).is_none());
            model.insert(id, a);
        }
        for i in 0..5_000u64 {
            let id = if i % 3 == 0 {
                AllocId::new_v4()
            } else {
                new_alloc_id()
            };
            let a = alloc(id, 0);
            table.insert(a.clone());
            model.insert(id, a);
        }
        let before = (table.clone(), model.clone());
        let ids: Vec<AllocId> = model.keys().copied().collect();
        for (n, id) in ids.iter().enumerate() {
            if n % 5 == 0 {
                assert!(table.remove(id).is_some());
                model.remove(id);
            } else if n % 5 == 1 {
                let a = alloc(*id, 1);
                let old = table.insert(a.clone());
                assert_eq!(old.map(|o| o.job_version), Some(0));
                model.insert(*id, a);
            }
        }
        assert!(table.remove(&new_alloc_id()).is_none());
        assert_same(&table, &model);
        assert_same(&before.0, &before.1);
        let rebuilt =
            AllocTable::from_unordered(model.iter().rev().map(|(id, a)| (*id, a.clone())));
        assert_eq!(rebuilt, table);
    }
}
