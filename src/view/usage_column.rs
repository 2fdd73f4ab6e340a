//! What every schedulable node's live allocations hold, by catalog
//! position, carried from one evaluation's state to the next.
//!
//! An evaluation that places many allocations looks at nearly every node,
//! and each first look used to search the state's usage map: at 10,000
//! nodes that was a fifth of a worker's time, spent on cache misses. Yet
//! between two evaluations only the few nodes the plans in between touched
//! have changed. A [`UsageColumn`] holds each catalog node's usage in one
//! dense vector and remembers the usage map it was made from; the next
//! state's column is the kept one patched with the persistent maps'
//! difference ([`OrdMap::diff`] skips the subtrees both share), so its cost
//! follows what changed, not the cluster's size. A column only ever
//! answers for its own map, so it cannot be stale whatever wrote the state.

use super::catalog::NodeCatalog;
use crate::structs::fit::NodeAllocUsage;
use crate::structs::{ComparableResources, NodeId};
use imbl::ordmap::DiffItem;
use imbl::OrdMap;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// Live usage by node, as the state store keeps it.
pub type UsageMap = OrdMap<NodeId, Arc<NodeAllocUsage>>;

/// How many columns a [`UsageColumnCache`] keeps: workers schedule
/// against the durable state and the plan applier's in-flight view in
/// turn, and each should find its own.
const KEPT: usize = 4;

/// One node's usage as a placement reads it first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BaseUsage {
    pub used: ComparableResources,
    /// Whether allocations hold host ports there (then the map's entry has
    /// the list).
    pub has_ports: bool,
    /// Whether the node reserves host ports (then the node has the list).
    /// Most do not, and their usage is then computed without touching
    /// the node at all.
    pub reserves_ports: bool,
}

impl BaseUsage {
    fn of(usage: Option<&NodeAllocUsage>, reserves_ports: bool) -> Self {
        BaseUsage {
            used: usage.map(|u| u.used).unwrap_or_default(),
            has_ports: usage.is_some_and(|u| !u.ports.is_empty()),
            reserves_ports,
        }
    }
}

/// Each catalog node's [`BaseUsage`] in one usage map.
pub struct UsageColumn {
    catalog: Arc<NodeCatalog>,
    /// The map this column reflects: the next one is derived by difference.
    source: UsageMap,
    /// By catalog position, with the node's ID, so that a reader holding
    /// positions of another catalog is refused rather than misled.
    entries: Vec<(NodeId, BaseUsage)>,
}

impl UsageColumn {
    /// The column of `usage` over `catalog`, looking every node up.
    pub fn build(catalog: Arc<NodeCatalog>, usage: &UsageMap) -> Self {
        let entries = (0..catalog.len() as u32)
            .map(|p| {
                let node = catalog.node(p);
                let reserves = !node
                    .reserved_resources
                    .networks
                    .reserved_host_ports
                    .is_empty();
                (
                    node.id,
                    BaseUsage::of(usage.get(&node.id).map(|u| &**u), reserves),
                )
            })
            .collect();
        UsageColumn {
            catalog,
            source: usage.clone(),
            entries,
        }
    }

    /// This column moved to `usage`: only the nodes whose entries differ
    /// between the two maps are touched.
    fn derive(&self, usage: &UsageMap) -> Self {
        let mut entries = self.entries.clone();
        for item in self.source.diff(usage) {
            let (id, new) = match item {
                DiffItem::Add(id, u) | DiffItem::Update { new: (id, u), .. } => (id, Some(&**u)),
                DiffItem::Remove(id, _) => (id, None),
            };
            // Nodes outside the catalog (down, draining, gone) have no slot.
            if let Some(p) = self.catalog.position(id) {
                let entry = &mut entries[p as usize].1;
                *entry = BaseUsage::of(new, entry.reserves_ports);
            }
        }
        UsageColumn {
            catalog: self.catalog.clone(),
            source: usage.clone(),
            entries,
        }
    }

    /// The usage of the node at catalog `position`, if that is node `id`
    /// in this column's catalog.
    #[inline]
    pub fn get(&self, position: u32, id: &NodeId) -> Option<&BaseUsage> {
        match self.entries.get(position as usize) {
            Some((at, usage)) if at == id => Some(usage),
            _ => None,
        }
    }

    /// How many catalog nodes there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The catalog position of node `id`, if it has one.
    pub fn position(&self, id: &NodeId) -> Option<u32> {
        self.catalog.position(id)
    }

    /// The map this column was made from (for the ports of a node whose
    /// entry has any).
    pub fn source(&self) -> &UsageMap {
        &self.source
    }
}

/// Keeps the latest few columns; clones share them.
#[derive(Clone, Default)]
pub struct UsageColumnCache(Arc<Mutex<VecDeque<Arc<UsageColumn>>>>);

impl UsageColumnCache {
    /// The column of `usage` over `catalog`: a kept one made from this very
    /// map, else one derived from the newest kept column of the catalog
    /// (built from scratch when there is none), which is then kept too.
    pub fn get(&self, catalog: &Arc<NodeCatalog>, usage: &UsageMap) -> Arc<UsageColumn> {
        let base = {
            let kept = self.lock();
            let same_catalog = |c: &&Arc<UsageColumn>| Arc::ptr_eq(&c.catalog, catalog);
            if let Some(c) = kept
                .iter()
                .filter(same_catalog)
                .find(|c| c.source.ptr_eq(usage))
            {
                return c.clone();
            }
            kept.iter().find(same_catalog).cloned()
        };
        // Made outside the lock: another worker need not wait for it.
        let column = Arc::new(match base {
            Some(base) => base.derive(usage),
            None => UsageColumn::build(catalog.clone(), usage),
        });
        let mut kept = self.lock();
        kept.retain(|c| Arc::ptr_eq(&c.catalog, catalog));
        kept.push_front(column.clone());
        kept.truncate(KEPT);
        column
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<UsageColumn>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for UsageColumnCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UsageColumnCache")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs::{new_id, Node, NodeStatus};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn catalog(n: usize) -> Arc<NodeCatalog> {
        let mut nodes: Vec<Arc<Node>> = (0..n)
            .map(|_| {
                Arc::new(Node {
                    id: new_id(),
                    datacenter: "dc1".into(),
                    status: NodeStatus::Ready,
                    ..Default::default()
                })
            })
            .collect();
        nodes.sort_by_key(|n| n.id);
        Arc::new(NodeCatalog::build(&nodes))
    }

    fn usage(cpu: i64, ports: &[u16]) -> Arc<NodeAllocUsage> {
        let mut u = NodeAllocUsage {
            ports: ports.to_vec(),
            live: 1,
            ..Default::default()
        };
        u.used.cpu = cpu;
        Arc::new(u)
    }

    /// The column as every node's lookup would give it.
    fn looked_up(catalog: &NodeCatalog, map: &UsageMap) -> Vec<BaseUsage> {
        (0..catalog.len() as u32)
            .map(|p| BaseUsage::of(map.get(&catalog.meta(p).id).map(|u| &**u), false))
            .collect()
    }

    fn read(column: &UsageColumn, catalog: &NodeCatalog) -> Vec<BaseUsage> {
        (0..catalog.len() as u32)
            .map(|p| *column.get(p, &catalog.meta(p).id).expect("own catalog"))
            .collect()
    }

    #[test]
    fn a_derived_column_equals_looking_every_node_up() {
        let catalog = catalog(300);
        let mut rng = SmallRng::seed_from_u64(7);
        let cache = UsageColumnCache::default();
        let mut map = UsageMap::new();
        // Usage of nodes outside the catalog is ignored, not misplaced.
        map.insert(new_id(), usage(5, &[]));
        for round in 0..200 {
            for _ in 0..rng.gen_range(0..12) {
                let id = catalog.meta(rng.gen_range(0..300)).id;
                match rng.gen_range(0..4) {
                    0 => {
                        map.remove(&id);
                    }
                    1 => {
                        map.insert(id, usage(rng.gen_range(1..5000), &[8080]));
                    }
                    _ => {
                        map.insert(id, usage(rng.gen_range(1..5000), &[]));
                    }
                }
            }
            let column = cache.get(&catalog, &map);
            assert_eq!(
                read(&column, &catalog),
                looked_up(&catalog, &map),
                "round {round}"
            );
        }
    }

    #[test]
    fn the_same_map_gets_the_same_column_and_another_map_its_own() {
        let catalog = catalog(20);
        let cache = UsageColumnCache::default();
        let mut map = UsageMap::new();
        map.insert(catalog.meta(3).id, usage(100, &[]));
        let first = cache.get(&catalog, &map);
        assert!(Arc::ptr_eq(&first, &cache.get(&catalog, &map.clone())));

        let older = map.clone();
        map.insert(catalog.meta(4).id, usage(200, &[]));
        let second = cache.get(&catalog, &map);
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(
            second.get(4, &catalog.meta(4).id).map(|u| u.used.cpu),
            Some(200)
        );
        // An older state still reads its own column.
        let back = cache.get(&catalog, &older);
        assert_eq!(
            back.get(4, &catalog.meta(4).id).map(|u| u.used.cpu),
            Some(0)
        );
        assert_eq!(
            back.get(3, &catalog.meta(3).id).map(|u| u.used.cpu),
            Some(100)
        );
    }

    #[test]
    fn positions_of_another_catalog_are_refused() {
        let (a, b) = (catalog(10), catalog(10));
        let column = UsageColumnCache::default().get(&a, &UsageMap::new());
        assert!(column.get(2, &a.meta(2).id).is_some());
        assert!(column.get(2, &b.meta(2).id).is_none());
        assert!(column.get(10, &a.meta(2).id).is_none());
    }
}
