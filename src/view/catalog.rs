//! The schedulable nodes, numbered and described once per node table and
//! shared by every evaluation that reads that table.
//!
//! Every placement evaluation starts from the same list: the ready,
//! eligible, non-draining nodes in ID order, with each node's computed
//! class and node class numbered and its capacity (less reservations)
//! worked out. With 10,000 nodes, listing, filtering and describing them
//! again in each evaluation cost more than a no-spread job's placements.
//! The node table only changes when nodes register or change status,
//! eligibility or drain (heartbeats do not write it), so a [`NodeCatalog`]
//! is built from the table once and kept by a [`NodeCatalogCache`], which
//! hands it out only to states whose node table is the very one it was
//! built from: a catalog can never be stale, whatever wrote the table.
//! An evaluation then filters the catalog by its job's datacenters and
//! node pool (per group of nodes, not per node) and shuffles positions.

use super::fast_map::FastMap;
use super::node_target::{datacenter_matches, resolve_target};
use crate::structs::job::DEFAULT_NODE_POOL;
use crate::structs::{ComparableResources, Job, Node, NodeId};
use imbl::OrdMap;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// What the placement stack's hot loop needs of a candidate, kept densely
/// so that scoring a node already seen does not have to touch the node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CandidateMeta {
    pub id: NodeId,
    /// Numbered computed class (`None` when the node has none).
    pub class: Option<u32>,
    /// Numbered node class, for metrics.
    pub node_class: u32,
    pub capacity: ComparableResources,
}

/// Numbers strings (node classes) in the order they are first seen.
/// Clusters have few classes, so while there are few the list is scanned
/// (a handful of short comparisons) instead of hashing the name.
#[derive(Clone, Debug, Default)]
pub(crate) struct Interner {
    names: Vec<String>,
    /// Every name, for when there are too many to scan.
    index: FastMap<String, u32>,
}

impl Interner {
    const SCAN_UP_TO: usize = 16;

    /// The number of `name`, if it has one.
    pub fn get(&self, name: &str) -> Option<u32> {
        if self.names.len() <= Self::SCAN_UP_TO {
            self.names.iter().position(|n| n == name).map(|i| i as u32)
        } else {
            self.index.get(name).copied()
        }
    }

    /// The number of `name`, numbering it if it is new.
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(id) = self.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), id);
        id
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }
}

/// Schedulable nodes of one datacenter and node pool.
#[derive(Debug)]
struct NodeGroup {
    datacenter: String,
    pool: String,
    count: u64,
}

impl NodeGroup {
    fn is(&self, (datacenter, pool): (&str, &str)) -> bool {
        self.datacenter == datacenter && self.pool == pool
    }
}

/// The schedulable nodes of one node table, by ID, each with its
/// [`CandidateMeta`]. Positions (`u32`) index the catalog's lists.
#[derive(Debug, Default)]
pub struct NodeCatalog {
    /// The node table this was built from, when it came from one: the
    /// cache compares tables by identity, and holding this one keeps its
    /// identity from being reused.
    source: Option<OrdMap<NodeId, Arc<Node>>>,
    nodes: Vec<Arc<Node>>,
    meta: Vec<CandidateMeta>,
    /// Each node's datacenter and node pool, as an index into `groups`.
    group_of: Vec<u32>,
    groups: Vec<NodeGroup>,
    classes: Interner,
    node_classes: Interner,
    /// Attribute values by position, made on first use (spread and
    /// distinct_property targets; a cluster uses few).
    attributes: Mutex<Vec<(String, Arc<AttributeColumn>)>>,
}

/// A node attribute (a constraint target such as `${meta.rack}`) resolved
/// on every catalog node once: a spread placement reads the value of up to
/// a thousand candidates, and resolving it on the node itself (a map
/// lookup in memory no other part of the placement touches) was a tenth
/// of a spread evaluation.
#[derive(Debug)]
pub struct AttributeColumn {
    /// The distinct values, numbered in order of first position.
    values: Vec<String>,
    /// Each position's value number, or [`AttributeColumn::MISSING`].
    by_position: Vec<u32>,
}

impl AttributeColumn {
    /// The number of a node without the attribute.
    pub const MISSING: u32 = u32::MAX;

    fn build(catalog: &NodeCatalog, attribute: &str) -> Self {
        let mut numbers = Interner::default();
        let by_position = catalog
            .nodes
            .iter()
            .map(|node| match resolve_target(attribute, node) {
                Some(value) => numbers.intern(&value),
                None => Self::MISSING,
            })
            .collect();
        AttributeColumn {
            values: numbers.names,
            by_position,
        }
    }

    /// The distinct values; a value's number is its index.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// The number of the value at `position`, or `MISSING`.
    #[inline]
    pub fn at(&self, position: u32) -> u32 {
        self.by_position[position as usize]
    }
}

/// The nodes a job may be placed on: catalog positions in ID order, and
/// how many there are per datacenter (the metrics' `NodesAvailable`).
pub struct ReadyNodes {
    pub positions: Vec<u32>,
    pub by_dc: BTreeMap<String, u64>,
}

impl NodeCatalog {
    /// The catalog of a node table (any status; only schedulable nodes
    /// are kept).
    pub fn from_table(table: &OrdMap<NodeId, Arc<Node>>) -> Self {
        let mut catalog = Self::build(table.values());
        catalog.source = Some(table.clone());
        catalog
    }

    /// The catalog of `nodes` (any status), which must come in ID order.
    pub fn build<'a>(nodes: impl IntoIterator<Item = &'a Arc<Node>>) -> Self {
        let mut catalog = NodeCatalog::default();
        // Few groups, as few classes: scanned while there are few.
        let mut group_index: FastMap<(&str, &str), u32> = FastMap::default();
        for node in nodes.into_iter().filter(|n| n.is_schedulable()) {
            let key = (node.datacenter.as_str(), node_pool_of(node));
            let scanned = (catalog.groups.len() <= Interner::SCAN_UP_TO).then(|| {
                let found = catalog.groups.iter().position(|g| g.is(key));
                found.map(|i| i as u32)
            });
            let group = match scanned.unwrap_or_else(|| group_index.get(&key).copied()) {
                Some(group) => group,
                None => {
                    catalog.groups.push(NodeGroup {
                        datacenter: key.0.to_string(),
                        pool: key.1.to_string(),
                        count: 0,
                    });
                    let group = catalog.groups.len() as u32 - 1;
                    group_index.insert(key, group);
                    group
                }
            };
            catalog.groups[group as usize].count += 1;
            catalog.group_of.push(group);
            let class = (!node.computed_class.is_empty())
                .then(|| catalog.classes.intern(&node.computed_class));
            catalog.meta.push(CandidateMeta {
                id: node.id,
                class,
                node_class: catalog.node_classes.intern(&node.node_class),
                capacity: node.available(),
            });
            catalog.nodes.push(node.clone());
        }
        catalog
    }

    /// Whether this catalog was built from exactly `table` (the same
    /// tree, not merely equal contents).
    fn built_from(&self, table: &OrdMap<NodeId, Arc<Node>>) -> bool {
        self.source.as_ref().is_some_and(|s| s.ptr_eq(table))
    }

    /// `attribute` resolved on every node (see [`AttributeColumn`]).
    pub fn attribute_column(&self, attribute: &str) -> Arc<AttributeColumn> {
        let lock = || {
            self.attributes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        if let Some((_, column)) = lock().iter().find(|(a, _)| a == attribute) {
            return column.clone();
        }
        // Made outside the lock; two evaluations may both make it once.
        let column = Arc::new(AttributeColumn::build(self, attribute));
        lock().push((attribute.to_string(), column.clone()));
        column
    }

    /// How many schedulable nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn node(&self, position: u32) -> &Arc<Node> {
        &self.nodes[position as usize]
    }

    /// The position of node `id`, if it is in the catalog (positions are
    /// in ID order).
    pub fn position(&self, id: &NodeId) -> Option<u32> {
        self.meta
            .binary_search_by(|m| m.id.cmp(id))
            .ok()
            .map(|p| p as u32)
    }

    pub(crate) fn meta(&self, position: u32) -> &CandidateMeta {
        &self.meta[position as usize]
    }

    /// Computed classes, numbered as in [`CandidateMeta::class`].
    pub(crate) fn classes(&self) -> &Interner {
        &self.classes
    }

    /// Node classes, numbered as in [`CandidateMeta::node_class`].
    pub(crate) fn node_classes(&self) -> &Interner {
        &self.node_classes
    }

    /// The nodes new work of `job` may go to: in one of its datacenters
    /// and its node pool. Decided per datacenter and pool, so only the
    /// list of positions is per node.
    pub fn ready_for(&self, job: &Job) -> ReadyNodes {
        let pool = job.node_pool.as_str();
        let any_pool = pool.is_empty() || pool == "all";
        let wanted: Vec<bool> = self
            .groups
            .iter()
            .map(|g| {
                datacenter_matches(&job.datacenters, &g.datacenter) && (any_pool || g.pool == pool)
            })
            .collect();
        let mut by_dc = BTreeMap::new();
        for (g, _) in self.groups.iter().zip(&wanted).filter(|(_, w)| **w) {
            *by_dc.entry(g.datacenter.clone()).or_insert(0) += g.count;
        }
        let positions = if wanted.iter().all(|w| *w) {
            (0..self.nodes.len() as u32).collect()
        } else {
            (0..self.nodes.len() as u32)
                .filter(|p| wanted[self.group_of[*p as usize] as usize])
                .collect()
        };
        ReadyNodes { positions, by_dc }
    }
}

/// The node pool a node is in (the default pool when it names none).
pub fn node_pool_of(node: &Node) -> &str {
    if node.node_pool.is_empty() {
        DEFAULT_NODE_POOL
    } else {
        &node.node_pool
    }
}

/// Keeps the catalog of the latest node table it was asked about. Clones
/// share it, so a state and the states derived from it (which share their
/// node table until a node changes) build the catalog once between them.
#[derive(Clone, Default)]
pub struct NodeCatalogCache(Arc<Mutex<Option<Arc<NodeCatalog>>>>);

impl NodeCatalogCache {
    /// The catalog of `table`: the kept one if it was built from this very
    /// table, else a new one (which is kept instead).
    pub fn get(&self, table: &OrdMap<NodeId, Arc<Node>>) -> Arc<NodeCatalog> {
        let kept = self.lock().clone();
        if let Some(catalog) = kept.filter(|c| c.built_from(table)) {
            return catalog;
        }
        // Built outside the lock: a worker on another state need not wait.
        let catalog = Arc::new(NodeCatalog::from_table(table));
        *self.lock() = Some(catalog.clone());
        catalog
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<NodeCatalog>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Debug for NodeCatalogCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeCatalogCache")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs::{NodeStatus, SchedulingEligibility};

    /// A node table with its catalog cache, as a state keeps them; clones
    /// share the cache (and the table until one of them changes it).
    #[derive(Clone, Default)]
    struct Nodes {
        table: OrdMap<NodeId, Arc<Node>>,
        cache: NodeCatalogCache,
    }

    impl Nodes {
        fn upsert(&mut self, mut node: Node) -> Arc<Node> {
            node.compute_class();
            let node = Arc::new(node);
            self.table.insert(node.id, node.clone());
            node
        }

        fn update(&mut self, id: &NodeId, change: impl FnOnce(&mut Node)) {
            let mut node = (*self.table[id]).clone();
            change(&mut node);
            self.upsert(node);
        }

        fn catalog(&self) -> Arc<NodeCatalog> {
            self.cache.get(&self.table)
        }
    }

    fn node(dc: &str, pool: &str, class: &str) -> Node {
        let mut n = Node {
            id: crate::structs::new_id(),
            datacenter: dc.into(),
            node_pool: pool.into(),
            node_class: class.into(),
            status: NodeStatus::Ready,
            ..Default::default()
        };
        n.node_resources.cpu.cpu_shares = 1000;
        n.reserved_resources.cpu.cpu_shares = 100;
        n
    }

    fn job(datacenters: &[&str], pool: &str) -> Job {
        Job {
            datacenters: datacenters.iter().map(|d| d.to_string()).collect(),
            node_pool: pool.into(),
            ..Default::default()
        }
    }

    fn ready_ids(state: &Nodes, job: &Job) -> Vec<NodeId> {
        let catalog = state.catalog();
        let ready = catalog.ready_for(job);
        ready
            .positions
            .iter()
            .map(|p| catalog.node(*p).id)
            .collect()
    }

    /// The nodes the scheduler used to list for a job, by scanning them.
    fn scanned_ids(state: &Nodes, job: &Job) -> Vec<NodeId> {
        let mut ids: Vec<NodeId> = state
            .table
            .values()
            .filter(|n| {
                n.is_schedulable()
                    && datacenter_matches(&job.datacenters, &n.datacenter)
                    && (job.node_pool.is_empty()
                        || job.node_pool == "all"
                        || node_pool_of(n) == job.node_pool)
            })
            .map(|n| n.id)
            .collect();
        ids.sort();
        ids
    }

    fn mixed_cluster() -> Nodes {
        let mut state = Nodes::default();
        for (dc, pool, class) in [
            ("dc1", "", "small"),
            ("dc1", "default", "large"),
            ("dc2", "gpu", "gpu"),
            ("dc2", "", "small"),
            ("east-1", "gpu", ""),
        ] {
            state.upsert(node(dc, pool, class));
        }
        let mut down = node("dc1", "", "small");
        down.status = NodeStatus::Down;
        state.upsert(down);
        let mut ineligible = node("dc2", "", "small");
        ineligible.scheduling_eligibility = SchedulingEligibility::Ineligible;
        state.upsert(ineligible);
        state
    }

    #[test]
    fn ready_nodes_are_the_schedulable_ones_in_the_jobs_datacenters_and_pool_by_id() {
        let state = mixed_cluster();
        for job in [
            job(&["dc1", "dc2"], ""),
            job(&["*"], "all"),
            job(&["dc*"], "default"),
            job(&["dc2", "east-*"], "gpu"),
            job(&["nowhere"], ""),
        ] {
            assert_eq!(
                ready_ids(&state, &job),
                scanned_ids(&state, &job),
                "{job:?}"
            );
        }
        let ready = state.catalog().ready_for(&job(&["dc*"], "default"));
        let by_dc: Vec<_> = ready.by_dc.into_iter().collect();
        assert_eq!(by_dc, [("dc1".to_string(), 2), ("dc2".to_string(), 1)]);
    }

    #[test]
    fn many_datacenters_and_pools_are_grouped_alike() {
        let mut state = Nodes::default();
        for i in 0..60 {
            let pool = if i % 4 == 0 { "gpu" } else { "" };
            state.upsert(node(&format!("dc{}", i % 20), pool, "c"));
        }
        for job in [
            job(&["dc1*"], ""),
            job(&["*"], "gpu"),
            job(&["dc7", "dc19"], "all"),
        ] {
            assert_eq!(
                ready_ids(&state, &job),
                scanned_ids(&state, &job),
                "{job:?}"
            );
        }
        let by_dc = state.catalog().ready_for(&job(&["*"], "all")).by_dc;
        assert_eq!(by_dc.len(), 20);
        assert!(by_dc.values().all(|count| *count == 3));
    }

    #[test]
    fn candidates_carry_capacity_and_consistent_class_numbers() {
        let state = mixed_cluster();
        let catalog = state.catalog();
        assert_eq!(catalog.len(), 5, "down and ineligible nodes are left out");
        for p in 0..catalog.len() as u32 {
            let (node, meta) = (catalog.node(p), catalog.meta(p));
            assert_eq!(meta.id, node.id);
            assert_eq!(meta.capacity, node.available());
            let name = &catalog.node_classes().names()[meta.node_class as usize];
            assert_eq!(name, &node.node_class);
        }
    }

    #[test]
    fn the_catalog_is_shared_until_the_node_table_changes() {
        let mut state = mixed_cluster();
        let first = state.catalog();
        let snapshot = state.clone();
        assert!(Arc::ptr_eq(&first, &snapshot.catalog()));

        let id = first.node(0).id;
        state.update(&id, |n| n.drain_strategy = Some(Default::default()));
        let drained = state.catalog();
        assert!(!Arc::ptr_eq(&first, &drained));
        assert_eq!(drained.len(), first.len() - 1);
        assert!(ready_ids(&state, &job(&["*"], "all"))
            .iter()
            .all(|n| *n != id));
        // The older snapshot still sees its own node table.
        assert!(ready_ids(&snapshot, &job(&["*"], "all")).contains(&id));

        let added = state.upsert(node("dc1", "", "small"));
        assert!(ready_ids(&state, &job(&["*"], "all")).contains(&added.id));
    }

    #[test]
    fn interner_numbers_stay_put_past_the_scanned_few() {
        let mut interner = Interner::default();
        let names: Vec<String> = (0..40).map(|i| format!("class-{i}")).collect();
        let numbers: Vec<u32> = names.iter().map(|n| interner.intern(n)).collect();
        assert_eq!(numbers, (0..40).collect::<Vec<u32>>());
        for (name, number) in names.iter().zip(&numbers) {
            assert_eq!(interner.get(name), Some(*number));
            assert_eq!(interner.intern(name), *number);
        }
        assert_eq!(interner.get("class-40"), None);
    }
}
