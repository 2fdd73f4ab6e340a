//! The state's tables: the primary rows by ID and the secondary indexes
//! derived from them (allocations by node and job; evaluations
//! by job; the job versions allocations still run; each node's usage), and
//! the helpers that keep those indexes in step with a row's change.
//!
//! Apart from `snapshot.rs`'s read API so that `apply.rs`, which changes
//! the tables and is driven by the snapshot, does not import it back.

use super::acl_tables::AclTables;
use super::alloc_table::AllocTable;
use super::changes::{JobKey, JobVersionKey, ServiceKey, Table, VariableKey};
use crate::structs::fit::NodeAllocUsage;
use crate::structs::{
    AllocId, Allocation, Deployment, DeploymentId, EvalId, Evaluation, Job, JobScalingEvents,
    JobSummary, Namespace, Node, NodeId, RootKey, SchedulerConfiguration, ServiceRegistration,
    VariableEncrypted,
};
use crate::view::catalog::NodeCatalogCache;
use crate::view::usage_column::{UsageColumnCache, UsageMap};
use fxhash::FxHashMap;
use imbl::{OrdMap, OrdSet};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

/// What each node's live allocations hold, by node. Ordered, so that the
/// scheduler's per-node usage column moves from one state to the next by
/// the maps' difference (see [`crate::view::usage_column`]) instead
/// of a lookup per node per evaluation.
pub(crate) type NodeUsageMap = UsageMap;

/// The tables. Secondary indexes (`allocs_by_*`, `evals_by_job`,
/// `version_refs`) are derived from the primary tables and rebuilt at load.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tables {
    pub jobs: OrdMap<JobKey, Arc<Job>>,
    pub job_versions: OrdMap<JobVersionKey, Arc<Job>>,
    pub job_summaries: OrdMap<JobKey, Arc<JobSummary>>,
    pub allocs: AllocTable,
    pub evals: OrdMap<EvalId, Arc<Evaluation>>,
    pub nodes: OrdMap<NodeId, Arc<Node>>,
    pub scheduler_config: Option<Arc<SchedulerConfiguration>>,
    /// Autopilot's settings, once an operator set them.
    pub autopilot_config: Option<Arc<crate::structs::AutopilotConfiguration>>,
    pub scaling_events: OrdMap<JobKey, Arc<JobScalingEvents>>,
    pub deployments: OrdMap<DeploymentId, Arc<Deployment>>,
    /// The native service catalog, by allocation then registration ID.
    pub services: OrdMap<ServiceKey, Arc<ServiceRegistration>>,
    /// Namespaces by name (`default` only once someone wrote it).
    pub namespaces: OrdMap<String, Arc<Namespace>>,
    /// Variables, sealed, by namespace then path.
    pub variables: OrdMap<VariableKey, Arc<VariableEncrypted>>,
    /// The keyring's root keys (with their material), by ID.
    pub root_keys: OrdMap<String, Arc<RootKey>>,
    /// ACL policies, tokens (with their secret index) and roles.
    pub acl: AclTables,
    pub table_indexes: [u64; Table::ALL.len()],
    pub latest_index: u64,
    /// Where a replicated log stands when it drives the state (opaque to
    /// the store: the Raft crate's last applied log id and membership),
    /// kept with the tables so that it is persisted in the same record as
    /// the rows it describes. `None` for a state only `apply` wrote.
    pub applied_position: Option<Arc<[u8]>>,
    pub allocs_by_node: OrdMap<NodeId, OrdSet<AllocId>>,
    /// (No index by evaluation: an evaluation's allocations are among its
    /// job's, and a million-entry index for the rare reads, the GC and one
    /// API route, cost 20 MB and a write per placement.)
    pub allocs_by_job: OrdMap<JobKey, OrdSet<AllocId>>,
    pub evals_by_job: OrdMap<JobKey, OrdSet<EvalId>>,
    /// Each job's deployments (few per job: a cheap index, rebuilt at load).
    pub deployments_by_job: OrdMap<JobKey, OrdSet<DeploymentId>>,
    /// How many allocations run each job version: referenced versions are
    /// kept even when they fall out of the newest-versions window.
    pub version_refs: OrdMap<JobVersionKey, u64>,
    /// What each node's live allocations hold (nodes with none are absent):
    /// fitting a plan reads this instead of every allocation on the node.
    pub node_usage: NodeUsageMap,
    /// The scheduler's catalog of the `nodes` table, built on first use
    /// and shared with the tables derived from these (it is only handed
    /// out for the node table it was built from).
    pub node_catalog: NodeCatalogCache,
    /// The scheduler's usage columns of recent `node_usage` maps, shared
    /// likewise.
    pub usage_columns: UsageColumnCache,
}

impl Tables {
    /// Rebuilds every secondary index from the primary tables.
    ///
    /// At open this is the serial part of a restart (a million
    /// allocations), so each index is built on its own thread, in plain
    /// maps, and turned into a persistent map once: the same contents as
    /// writing allocation by allocation (`index_alloc`, `count_usage`),
    /// which `tests/store_props.rs` checks (a reopened store equals, index
    /// for index, the state the same commands built in memory).
    pub(crate) fn rebuild_indexes(&mut self) {
        let (allocs, evals) = (&self.allocs, &self.evals);
        let built = std::thread::scope(|s| {
            let by_node = in_parallel(s, || {
                group_ids(allocs.unordered().map(|a| (a.node_id, a.id)))
            });
            let by_job = in_parallel(s, || group_allocs_by_job(allocs));
            let evals_by_job = in_parallel(s, || {
                group_ids(
                    evals
                        .values()
                        .map(|e| (JobKey::new(&e.namespace, &e.job_id), e.id)),
                )
            });
            let version_refs = in_parallel(s, || count_version_refs(allocs));
            let node_usage = in_parallel(s, || sum_node_usage(allocs));
            (
                by_node.join(),
                by_job.join(),
                evals_by_job.join(),
                version_refs.join(),
                node_usage.join(),
            )
        });
        (
            self.allocs_by_node,
            self.allocs_by_job,
            self.evals_by_job,
            self.version_refs,
            self.node_usage,
        ) = built;
        self.deployments_by_job = group_ids(
            self.deployments
                .values()
                .map(|d| (JobKey::new(&d.namespace, &d.job_id), d.id)),
        );
    }
}

/// Runs `work` on a thread of the scope (like the loader's decoders, a
/// thread the system cannot start is a panic at open, not an error).
fn in_parallel<'s, T: Send + 's>(
    scope: &'s std::thread::Scope<'s, '_>,
    work: impl FnOnce() -> T + Send + 's,
) -> Joining<'s, T> {
    Joining(scope.spawn(work))
}

struct Joining<'s, T>(std::thread::ScopedJoinHandle<'s, T>);

impl<T> Joining<'_, T> {
    /// The result; a panic on the thread goes on here.
    fn join(self) -> T {
        self.0
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// An index from key to the set of IDs filed under it. Grouped in a hash
/// map, then sorted once: for a million allocations, one hash per key is
/// cheaper than a sorted map's dozen comparisons per insert.
///
/// Hashed with the standard keyed hash: the keys (node IDs, job IDs) are
/// a client's choice, and no one can make them collide on purpose.
fn group_ids<K: Ord + Hash + Clone, V: Ord + Clone>(
    pairs: impl Iterator<Item = (K, V)>,
) -> OrdMap<K, OrdSet<V>> {
    let mut grouped: HashMap<K, Vec<V>> = HashMap::new();
    for (key, id) in pairs {
        grouped.entry(key).or_default().push(id);
    }
    sorted_sets(grouped)
}

fn sorted_sets<K: Ord + Clone, V: Ord + Clone>(
    grouped: impl IntoIterator<Item = (K, Vec<V>)>,
) -> OrdMap<K, OrdSet<V>> {
    in_key_order(grouped.into_iter().map(|(key, mut ids)| {
        ids.sort_unstable();
        let mut set = OrdSet::new();
        fill_in_order(ids, |id| {
            set.insert(id);
        });
        (key, set)
    }))
}

/// A persistent map of entries grouped in a hash map: sorted once, then
/// inserted in the order [`fill_in_order`] gives.
pub(crate) fn in_key_order<K: Ord + Clone, V: Clone>(
    entries: impl IntoIterator<Item = (K, V)>,
) -> OrdMap<K, V> {
    let mut entries: Vec<(K, V)> = entries.into_iter().collect();
    entries.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
    let mut map = OrdMap::new();
    fill_in_order(entries, |(k, v)| {
        map.insert(k, v);
    });
    map
}

/// Hands `sorted` to `insert` in an order that leaves a B-tree's leaves
/// full: every other entry first, then the ones between.
///
/// `imbl` splits a full leaf in half, so entries inserted in order leave
/// every leaf half empty (a leaf's room is allocated whole): the indexes
/// a restart builds took twice the memory of their entries. The first
/// pass leaves half-full leaves over twice the key range; in the second,
/// each leaf's gaps are exactly the entries that fill it.
fn fill_in_order<T>(sorted: Vec<T>, mut insert: impl FnMut(T)) {
    let mut between = Vec::with_capacity(sorted.len() / 2);
    for (i, entry) in sorted.into_iter().enumerate() {
        if i % 2 == 0 {
            insert(entry);
        } else {
            between.push(entry);
        }
    }
    between.into_iter().for_each(insert);
}

/// Who an allocation's job strings are: the addresses of its namespace and
/// job ID. The allocations of one job share those strings (the scheduler
/// makes them so, and the loader's `alloc_row::RowSharing`), so grouping
/// by address hashes two words instead of two strings per allocation. Two
/// live strings never share an address, so one address is one string; a
/// job whose allocations hold separate copies (each loader thread keeps
/// its own) gets one group per copy, merged by value afterwards.
fn job_strings(a: &Allocation) -> (*const u8, *const u8) {
    (a.namespace.as_ptr(), a.job_id.as_ptr())
}

/// The allocations of each job (`allocs_by_job`).
fn group_allocs_by_job(allocs: &AllocTable) -> OrdMap<JobKey, OrdSet<AllocId>> {
    let mut by_strings: FxHashMap<_, (JobKey, Vec<AllocId>)> = FxHashMap::default();
    for a in allocs.unordered() {
        by_strings
            .entry(job_strings(a))
            .or_insert_with(|| (JobKey::of_alloc(a), Vec::new()))
            .1
            .push(a.id);
    }
    let mut by_job: HashMap<JobKey, Vec<AllocId>> = HashMap::new();
    for (job, ids) in by_strings.into_values() {
        by_job.entry(job).or_default().extend(ids);
    }
    sorted_sets(by_job)
}

/// How many allocations (live or not) run each job version.
fn count_version_refs(allocs: &AllocTable) -> OrdMap<JobVersionKey, u64> {
    let mut by_strings: FxHashMap<_, (JobVersionKey, u64)> = FxHashMap::default();
    for a in allocs.unordered() {
        let (namespace, job) = job_strings(a);
        by_strings
            .entry((namespace, job, a.job_version))
            .or_insert_with(|| {
                let job = JobKey::of_alloc(a);
                (
                    JobVersionKey {
                        job,
                        version: a.job_version,
                    },
                    0,
                )
            })
            .1 += 1;
    }
    let mut refs: HashMap<JobVersionKey, u64> = HashMap::new();
    for (key, n) in by_strings.into_values() {
        *refs.entry(key).or_insert(0) += n;
    }
    in_key_order(refs)
}

/// Each node's usage by its live allocations (nodes with none absent).
fn sum_node_usage(allocs: &AllocTable) -> NodeUsageMap {
    let mut usage: HashMap<NodeId, NodeAllocUsage> = HashMap::new();
    for a in allocs.unordered().filter(|a| !a.is_terminal()) {
        usage.entry(a.node_id).or_default().add(a);
    }
    in_key_order(
        usage
            .into_iter()
            .filter(|(_, u)| u.live > 0)
            .map(|(node, u)| (node, Arc::new(u))),
    )
}

/// Adds an allocation to the secondary indexes.
pub(crate) fn index_alloc(t: &mut Tables, alloc: &Allocation) {
    set_insert(&mut t.allocs_by_node, alloc.node_id, alloc.id);
    index_alloc_by_job(t, alloc);
}

/// `index_alloc` but for the node index: the job index and the version
/// reference.
pub(crate) fn index_alloc_by_job(t: &mut Tables, alloc: &Allocation) {
    index_allocs_of_job(t, &[alloc]);
}

/// `index_alloc_by_job` for allocations of one job (as in one plan): the
/// job's index entry and each version's reference count are found once,
/// not once per allocation (their keys compare as strings).
pub(crate) fn index_allocs_of_job(t: &mut Tables, allocs: &[&Allocation]) {
    let Some(first) = allocs.first() else {
        return;
    };
    let job = JobKey::of_alloc(first);
    debug_assert!(allocs.iter().all(|a| JobKey::of_alloc(a) == job));
    for same_version in allocs.chunk_by(|a, b| a.job_version == b.job_version) {
        let count = same_version.len() as u64;
        *t.version_refs
            .entry(JobVersionKey {
                job: job.clone(),
                version: same_version[0].job_version,
            })
            .or_insert(0) += count;
    }
    let ids = t.allocs_by_job.entry(job).or_default();
    for alloc in allocs {
        ids.insert(alloc.id);
    }
}

/// Moves a node's usage from `old` to `new` (either may be absent, e.g.
/// for an insert or a delete). Terminal allocations count for nothing, so
/// a stop releases its resources here.
pub(crate) fn count_usage(t: &mut Tables, old: Option<&Allocation>, new: Option<&Allocation>) {
    count_usage_in(&mut t.node_usage, old, new);
}

/// `count_usage` on the usage map alone.
pub(crate) fn count_usage_in(
    node_usage: &mut NodeUsageMap,
    old: Option<&Allocation>,
    new: Option<&Allocation>,
) {
    let old = old.filter(|a| !a.is_terminal());
    let new = new.filter(|a| !a.is_terminal());
    if old.is_none() && new.is_none() {
        return;
    }
    let mut nodes: Vec<NodeId> = old.iter().chain(new.iter()).map(|a| a.node_id).collect();
    nodes.dedup();
    for node in nodes {
        let mut usage = node_usage
            .get(&node)
            .map_or_else(NodeAllocUsage::default, |u| (**u).clone());
        if let Some(a) = old.filter(|a| a.node_id == node) {
            usage.remove(a);
        }
        if let Some(a) = new.filter(|a| a.node_id == node) {
            usage.add(a);
        }
        if usage.live == 0 {
            node_usage.remove(&node);
        } else {
            node_usage.insert(node, Arc::new(usage));
        }
    }
}

pub(crate) fn set_insert<K: Ord + Clone, V: Ord + Clone>(
    index: &mut OrdMap<K, OrdSet<V>>,
    key: K,
    value: V,
) {
    index.entry(key).or_default().insert(value);
}

pub(crate) fn set_remove<K: Ord + Clone, V: Ord + Clone>(
    index: &mut OrdMap<K, OrdSet<V>>,
    key: &K,
    value: &V,
) {
    if let Some(set) = index.get_mut(key) {
        set.remove(value);
        if set.is_empty() {
            index.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filling_in_order_inserts_every_entry_once() {
        for n in [0usize, 1, 2, 15, 16, 17, 1000, 4097] {
            let mut order = Vec::new();
            fill_in_order((0..n).collect(), |i| order.push(i));
            let evens = order.iter().take(n.div_ceil(2)).all(|i| i % 2 == 0);
            order.sort_unstable();
            assert_eq!(order, (0..n).collect::<Vec<_>>(), "n = {n}");
            assert!(evens, "every other entry first (n = {n})");
            let map = in_key_order((0..n as u64).rev().map(|i| (i, i * 2)));
            assert!(map
                .iter()
                .map(|(k, v)| (*k, *v))
                .eq((0..n as u64).map(|i| (i, i * 2))));
        }
    }

    /// Rows read from the checkpoint and from the log carry separate copies
    /// of a job's strings; the rebuilt indexes still file them as one job.
    #[test]
    fn a_job_whose_allocations_hold_separate_copies_of_its_strings_is_one_job() {
        let mut t = Tables::default();
        for n in 1..=2u128 {
            let alloc = Allocation {
                id: AllocId::from_u128(n),
                namespace: crate::structs::SharedStr::from("default"),
                job_id: crate::structs::SharedStr::from("web"),
                job_version: 3,
                ..Default::default()
            };
            t.allocs.insert(Arc::new(alloc));
        }
        t.rebuild_indexes();
        let job = JobKey::new("default", "web");
        assert_eq!(t.allocs_by_job.len(), 1);
        assert_eq!(t.allocs_by_job.get(&job).map(OrdSet::len), Some(2));
        let version = JobVersionKey { job, version: 3 };
        assert_eq!(t.version_refs.get(&version), Some(&2));
    }

    /// A rebuild's index walks build what writing the same allocations one by one
    /// builds: every job, node and version, terminal allocations filed
    /// but not counted in a node's usage, a node with only terminal ones
    /// absent from the usage.
    #[test]
    fn rebuilt_indexes_equal_the_ones_kept_write_by_write() {
        use crate::structs::{AllocatedResources, ClientStatus, DesiredStatus, SharedStr};
        let grant = Arc::new(AllocatedResources::default());
        let mut written = Tables::default();
        for n in 0..200u128 {
            let job = ["web", "db", "cache"][(n % 3) as usize];
            let alloc = Arc::new(Allocation {
                id: AllocId::from_u128(n * 7919 % 1000 + 1),
                namespace: SharedStr::from(if n % 5 == 0 { "ops" } else { "default" }),
                job_id: SharedStr::from(job),
                job_version: (n % 4) as u64,
                node_id: NodeId::from_u128(n % 13 + 1),
                client_status: if n % 13 == 12 || n % 7 == 0 {
                    ClientStatus::Complete
                } else {
                    ClientStatus::Running
                },
                desired_status: DesiredStatus::Run,
                allocated_resources: grant.clone(),
                ..Default::default()
            });
            index_alloc(&mut written, &alloc);
            count_usage(&mut written, None, Some(&alloc));
            written.allocs.insert(alloc);
        }
        let mut rebuilt = Tables {
            allocs: written.allocs.clone(),
            ..Default::default()
        };
        rebuilt.rebuild_indexes();
        assert_eq!(rebuilt.allocs_by_node, written.allocs_by_node);
        assert_eq!(rebuilt.allocs_by_job, written.allocs_by_job);
        assert_eq!(rebuilt.version_refs, written.version_refs);
        assert_eq!(rebuilt.node_usage, written.node_usage);
        assert_eq!(rebuilt.allocs_by_node.len(), 13);
        assert_eq!(
            rebuilt.node_usage.len(),
            12,
            "node 13 holds only complete ones"
        );
        assert_eq!(rebuilt.version_refs.len(), 3 * 2 * 4);
    }
}
