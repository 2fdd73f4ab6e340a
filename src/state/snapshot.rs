//! `StateSnapshot`: the state's tables at one index, cloned in O(1).
//!
//! Every table is an `imbl` persistent map whose values are `Arc`s, and
//! the whole set of tables sits behind one more `Arc`: a snapshot is one
//! reference-count increment, and a writer that changes a copy shares
//! every untouched node with the readers still holding older snapshots.
//! Maps are ordered so that lists come out sorted by ID (as Nomad's do)
//! and two states compare equal table by table.

use super::apply::Txn;
use super::changes::{AppliedChanges, JobKey, JobRef, JobVersionKey, JobVersionRef, Table};
use super::command::{Command, PlanResults};
use super::ApplyError;
use crate::structs::fit::NodeAllocUsage;
use crate::structs::{
    AllocId, AllocStop, Allocation, DesiredStatus, EvalId, Evaluation, Job, JobScalingEvents,
    JobSummary, Node, NodeId, SchedulerConfiguration,
};
use crate::view::catalog::NodeCatalogCache;
use crate::view::usage_column::{UsageColumnCache, UsageMap};
use imbl::{OrdMap, OrdSet};
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
    pub allocs: OrdMap<AllocId, Arc<Allocation>>,
    pub evals: OrdMap<EvalId, Arc<Evaluation>>,
    pub nodes: OrdMap<NodeId, Arc<Node>>,
    pub scheduler_config: Option<Arc<SchedulerConfiguration>>,
    pub scaling_events: OrdMap<JobKey, Arc<JobScalingEvents>>,
    pub table_indexes: [u64; Table::ALL.len()],
    pub latest_index: u64,
    /// Where a replicated log stands when it drives the state (opaque to
    /// the store: the Raft crate's last applied log id and membership),
    /// kept with the tables so that it is persisted in the same record as
    /// the rows it describes. `None` for a state only `apply` wrote.
    pub applied_position: Option<Arc<[u8]>>,
    pub allocs_by_node: OrdMap<NodeId, OrdSet<AllocId>>,
    pub allocs_by_job: OrdMap<JobKey, OrdSet<AllocId>>,
    pub allocs_by_eval: OrdMap<EvalId, OrdSet<AllocId>>,
    pub evals_by_job: OrdMap<JobKey, OrdSet<EvalId>>,
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
            let by_node = in_parallel(s, || group_ids(allocs.values().map(|a| (a.node_id, a.id))));
            let by_eval = in_parallel(s, || group_ids(allocs.values().map(|a| (a.eval_id, a.id))));
            let by_job = in_parallel(s, || {
                group_ids(allocs.values().map(|a| (JobKey::of_alloc(a), a.id)))
            });
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
                by_eval.join(),
                by_job.join(),
                evals_by_job.join(),
                version_refs.join(),
                node_usage.join(),
            )
        });
        (
            self.allocs_by_node,
            self.allocs_by_eval,
            self.allocs_by_job,
            self.evals_by_job,
            self.version_refs,
            self.node_usage,
        ) = built;
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

/// An index from key to the set of IDs filed under it.
fn group_ids<K: Ord + Clone, V: Ord + Clone>(
    pairs: impl Iterator<Item = (K, V)>,
) -> OrdMap<K, OrdSet<V>> {
    let mut grouped: std::collections::BTreeMap<K, Vec<V>> = std::collections::BTreeMap::new();
    for (key, id) in pairs {
        grouped.entry(key).or_default().push(id);
    }
    grouped
        .into_iter()
        .map(|(key, ids)| (key, ids.into_iter().collect::<OrdSet<V>>()))
        .collect()
}

/// How many allocations (live or not) run each job version.
fn count_version_refs(allocs: &OrdMap<AllocId, Arc<Allocation>>) -> OrdMap<JobVersionKey, u64> {
    let mut refs: std::collections::BTreeMap<JobVersionKey, u64> =
        std::collections::BTreeMap::new();
    for a in allocs.values() {
        let key = JobVersionKey {
            job: JobKey::of_alloc(a),
            version: a.job_version,
        };
        *refs.entry(key).or_insert(0) += 1;
    }
    refs.into_iter().collect()
}

/// Each node's usage by its live allocations (nodes with none absent).
fn sum_node_usage(allocs: &OrdMap<AllocId, Arc<Allocation>>) -> NodeUsageMap {
    let mut usage: std::collections::BTreeMap<NodeId, NodeAllocUsage> =
        std::collections::BTreeMap::new();
    for a in allocs.values().filter(|a| !a.is_terminal()) {
        usage.entry(a.node_id).or_default().add(a);
    }
    usage
        .into_iter()
        .filter(|(_, u)| u.live > 0)
        .map(|(node, u)| (node, Arc::new(u)))
        .collect()
}

/// Adds an allocation to the secondary indexes.
pub(crate) fn index_alloc(t: &mut Tables, alloc: &Allocation) {
    set_insert(&mut t.allocs_by_node, alloc.node_id, alloc.id);
    index_alloc_by_job(t, alloc);
}

/// `index_alloc` but for the node index: the job and evaluation indexes
/// and the version reference.
pub(crate) fn index_alloc_by_job(t: &mut Tables, alloc: &Allocation) {
    let job = JobKey::of_alloc(alloc);
    set_insert(&mut t.allocs_by_eval, alloc.eval_id, alloc.id);
    *t.version_refs
        .entry(JobVersionKey {
            job: job.clone(),
            version: alloc.job_version,
        })
        .or_insert(0) += 1;
    set_insert(&mut t.allocs_by_job, job, alloc.id);
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

/// `apply_plan_usage`'s stop: the allocation turns terminal as the store
/// would make it, and its node's usage lets go of it.
fn stop_for_verification(t: &mut Tables, stop: &AllocStop, preemption: bool) {
    let Some(old) = t.allocs.get(&stop.id).cloned() else {
        return;
    };
    let mut alloc = (*old).clone();
    alloc.desired_status = if preemption {
        DesiredStatus::Evict
    } else {
        stop.desired_status
    };
    if let Some(status) = stop.client_status {
        alloc.client_status = status;
    }
    count_usage(t, Some(&old), Some(&alloc));
    t.allocs.insert(alloc.id, Arc::new(alloc));
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

/// The state at one index. Cloning is O(1); every accessor returns shared
/// values (`Arc`s) or iterators, never deep copies.
#[derive(Clone, Debug, Default)]
pub struct StateSnapshot {
    pub(crate) tables: Arc<Tables>,
}

impl StateSnapshot {
    /// An empty state at index 0.
    pub fn new() -> Self {
        StateSnapshot::default()
    }

    pub(crate) fn from_tables(tables: Tables) -> Self {
        StateSnapshot {
            tables: Arc::new(tables),
        }
    }

    /// Applies `cmd` at `index`: all of it, or (on error) nothing.
    ///
    /// The result depends only on the state, the index and the command, so
    /// replaying the same commands always builds the same state.
    pub fn apply(&mut self, index: u64, cmd: &Command) -> Result<AppliedChanges, ApplyError> {
        let latest = self.latest_index();
        if index <= latest {
            return Err(ApplyError::StaleIndex { index, latest });
        }
        self.apply_unchecked(index, cmd)
    }

    /// Applies all of `commands` at one `index` (a replicated log entry's
    /// index: the log numbers entries, not commands), each all or nothing
    /// as [`Self::apply`]; a rejected command leaves the others applied.
    /// The state's index becomes `index` even when every command is
    /// rejected or there is none (a membership or no-op entry), so that a
    /// reader waiting for the entry's index is answered. Indexes may skip.
    ///
    /// Refused with `StaleIndex` at or below the latest index (a replay),
    /// except an empty batch at the latest index: the log's very first
    /// entry sits at index 0, where an empty state already is.
    pub fn apply_batch(
        &mut self,
        index: u64,
        commands: &[Command],
    ) -> Result<Vec<Result<AppliedChanges, ApplyError>>, ApplyError> {
        let latest = self.latest_index();
        if index < latest || (index == latest && !commands.is_empty()) {
            return Err(ApplyError::StaleIndex { index, latest });
        }
        let results = commands
            .iter()
            .map(|cmd| self.apply_unchecked(index, cmd))
            .collect();
        if self.latest_index() != index {
            Arc::make_mut(&mut self.tables).latest_index = index;
        }
        Ok(results)
    }

    /// The replicated log's position stored with this state (see
    /// [`Self::apply_batch`]); `None` when no log ever drove it.
    pub fn applied_position(&self) -> Option<&[u8]> {
        self.tables.applied_position.as_deref()
    }

    pub(crate) fn set_applied_position(&mut self, position: &[u8]) {
        Arc::make_mut(&mut self.tables).applied_position = Some(Arc::from(position));
    }

    fn apply_unchecked(&mut self, index: u64, cmd: &Command) -> Result<AppliedChanges, ApplyError> {
        let mut txn = Txn::new((*self.tables).clone(), index);
        txn.apply(cmd)?;
        let (tables, mut changes) = txn.finish();
        changes.command = cmd.name();
        self.tables = Arc::new(tables);
        Ok(changes)
    }

    /// Moves what plan verification (`plan_eval`) reads, and nothing
    /// else, as if `plan` were applied: the allocations it stops or
    /// updates, and the usage of every node it touches.
    ///
    /// The plan applier checks the next plan against this view while
    /// `plan` is being written. A full `apply` there cost as much as the
    /// store's own apply of the same plan, on the applier's one thread: at
    /// a million allocations it was the pipeline's bottleneck. The view
    /// has no indexes, summaries, evaluations or new allocations (nothing
    /// that has not seen the plan can refer to them), its index does not
    /// move, and it must never be published or used for anything else.
    pub fn apply_plan_usage(&mut self, plan: &PlanResults) {
        let t = Arc::make_mut(&mut self.tables);
        let stops = plan.node_update.values().flatten().map(|s| (s, false));
        let preemptions = plan.node_preemptions.values().flatten().map(|s| (s, true));
        for (stop, preemption) in stops.chain(preemptions) {
            stop_for_verification(t, stop, preemption);
        }
        for (node_id, allocs) in &plan.node_allocation {
            let mut usage = t
                .node_usage
                .get(node_id)
                .map_or_else(NodeAllocUsage::default, |u| (**u).clone());
            for alloc in allocs {
                // New placements (`CreateIndex` 0) replace nothing; see
                // `plan_eval::proposed_usage`.
                let existing = (alloc.create_index != 0)
                    .then(|| t.allocs.get(&alloc.id).cloned())
                    .flatten();
                if let Some(old) = existing {
                    // An update in place: the old version no longer counts.
                    if old.node_id == *node_id {
                        usage.remove(&old);
                    }
                    t.allocs.insert(alloc.id, Arc::new(alloc.clone()));
                }
                usage.add(alloc);
            }
            if usage.live == 0 {
                t.node_usage.remove(node_id);
            } else {
                t.node_usage.insert(*node_id, Arc::new(usage));
            }
        }
    }

    /// The index of the last applied command.
    pub fn latest_index(&self) -> u64 {
        self.tables.latest_index
    }

    /// The index of the last change to `table` (0 when never changed).
    pub fn table_index(&self, table: Table) -> u64 {
        self.tables.table_indexes[table.slot()]
    }

    /// The highest last-change index among `tables`.
    pub fn max_table_index(&self, tables: &[Table]) -> u64 {
        tables
            .iter()
            .map(|t| self.table_index(*t))
            .max()
            .unwrap_or(0)
    }

    pub fn node(&self, id: &NodeId) -> Option<&Arc<Node>> {
        self.tables.nodes.get(id)
    }

    /// Every node, by ID.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<Node>> + '_ {
        self.tables.nodes.values()
    }

    pub fn node_count(&self) -> usize {
        self.tables.nodes.len()
    }

    pub fn alloc(&self, id: &AllocId) -> Option<&Arc<Allocation>> {
        self.tables.allocs.get(id)
    }

    /// Every allocation, by ID.
    pub fn allocs(&self) -> impl Iterator<Item = &Arc<Allocation>> + '_ {
        self.tables.allocs.values()
    }

    pub fn alloc_count(&self) -> usize {
        self.tables.allocs.len()
    }

    pub fn allocs_by_job<'a>(
        &'a self,
        namespace: &str,
        job_id: &str,
    ) -> impl Iterator<Item = &'a Arc<Allocation>> + 'a {
        let ids = self
            .tables
            .allocs_by_job
            .get(&JobRef::new(namespace, job_id));
        self.resolve_allocs(ids)
    }

    /// What the node's live allocations hold (`None`: nothing runs there).
    pub fn node_usage(&self, node_id: &NodeId) -> Option<&Arc<NodeAllocUsage>> {
        self.tables.node_usage.get(node_id)
    }

    pub fn allocs_by_node(&self, node_id: &NodeId) -> impl Iterator<Item = &Arc<Allocation>> + '_ {
        self.resolve_allocs(self.tables.allocs_by_node.get(node_id))
    }

    pub fn allocs_by_eval(&self, eval_id: &EvalId) -> impl Iterator<Item = &Arc<Allocation>> + '_ {
        self.resolve_allocs(self.tables.allocs_by_eval.get(eval_id))
    }

    fn resolve_allocs<'a>(
        &'a self,
        ids: Option<&'a OrdSet<AllocId>>,
    ) -> impl Iterator<Item = &'a Arc<Allocation>> + 'a {
        ids.into_iter()
            .flat_map(|set| set.iter())
            .filter_map(|id| self.tables.allocs.get(id))
    }

    /// The current version of a job.
    pub fn job(&self, namespace: &str, id: &str) -> Option<&Arc<Job>> {
        self.tables.jobs.get(&JobRef::new(namespace, id))
    }

    /// Every current job, ordered by (namespace, ID).
    pub fn jobs(&self) -> impl Iterator<Item = &Arc<Job>> + '_ {
        self.tables.jobs.values()
    }

    /// The jobs of `namespace` whose ID is `from` or after it, by ID: a
    /// prefix search starts at the prefix and stops at the first ID
    /// without it.
    pub fn jobs_from<'a>(
        &'a self,
        namespace: &'a str,
        from: &str,
    ) -> impl Iterator<Item = &'a Arc<Job>> + 'a {
        self.tables
            .jobs
            .range(JobRef::new(namespace, from)..)
            .take_while(move |(key, _)| &*key.namespace == namespace)
            .map(|(_, job)| job)
    }

    /// The namespaces that hold jobs, each once, in order; one lookup per
    /// namespace (it jumps over each namespace's jobs).
    pub fn job_namespaces(&self) -> impl Iterator<Item = Arc<str>> + '_ {
        // The smallest namespace after `ns` is `ns` followed by NUL.
        let mut from = Some(String::new());
        std::iter::from_fn(move || {
            let lower = from.take()?;
            let (key, _) = self.tables.jobs.range(JobRef::new(&lower, "")..).next()?;
            from = Some(format!("{}\0", key.namespace));
            Some(key.namespace.clone())
        })
    }

    /// The allocations of the jobs of `namespace`, job by job (through the
    /// job index: no allocation of another namespace is looked at).
    pub fn allocs_in_namespace<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Allocation>> + 'a {
        self.tables
            .allocs_by_job
            .range(JobRef::new(namespace, "")..)
            .take_while(move |(key, _)| &*key.namespace == namespace)
            .flat_map(|(_, ids)| ids.iter())
            .filter_map(|id| self.tables.allocs.get(id))
    }

    /// Allocations from the ID `from` on, by ID.
    pub fn allocs_from(&self, from: AllocId) -> impl Iterator<Item = &Arc<Allocation>> + '_ {
        self.tables.allocs.range(from..).map(|(_, alloc)| alloc)
    }

    /// Evaluations from the ID `from` on, by ID.
    pub fn evals_from(&self, from: EvalId) -> impl Iterator<Item = &Arc<Evaluation>> + '_ {
        self.tables.evals.range(from..).map(|(_, eval)| eval)
    }

    /// Nodes from the ID `from` on, by ID.
    pub fn nodes_from(&self, from: NodeId) -> impl Iterator<Item = &Arc<Node>> + '_ {
        self.tables.nodes.range(from..).map(|(_, node)| node)
    }

    pub fn job_by_version(&self, namespace: &str, id: &str, version: u64) -> Option<&Arc<Job>> {
        self.tables.job_versions.get(&JobVersionRef {
            job: JobRef::new(namespace, id),
            version,
        })
    }

    /// The stored versions of a job, newest first.
    pub fn job_versions<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Job>> + 'a {
        let job = JobRef::new(namespace, id);
        let from = JobVersionRef { job, version: 0 };
        let to = JobVersionRef {
            job,
            version: u64::MAX,
        };
        self.tables
            .job_versions
            .range(from..=to)
            .rev()
            .map(|(_, job)| job)
    }

    pub fn job_summary(&self, namespace: &str, id: &str) -> Option<&Arc<JobSummary>> {
        self.tables.job_summaries.get(&JobRef::new(namespace, id))
    }

    pub fn job_summaries(&self) -> impl Iterator<Item = &Arc<JobSummary>> + '_ {
        self.tables.job_summaries.values()
    }

    /// The job's scaling events by group, newest first.
    pub fn scaling_events(&self, namespace: &str, id: &str) -> Option<&Arc<JobScalingEvents>> {
        self.tables.scaling_events.get(&JobRef::new(namespace, id))
    }

    /// The current jobs whose ID starts with `prefix`, in ID order.
    pub fn jobs_by_id_prefix<'a>(
        &'a self,
        namespace: &'a str,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Job>> + 'a {
        self.tables
            .jobs
            .range(JobKey::new(namespace, prefix)..)
            .take_while(move |(k, _)| &*k.namespace == namespace && k.id.starts_with(prefix))
            .map(|(_, j)| j)
    }

    pub fn eval(&self, id: &EvalId) -> Option<&Arc<Evaluation>> {
        self.tables.evals.get(id)
    }

    /// Every evaluation, by ID.
    pub fn evals(&self) -> impl Iterator<Item = &Arc<Evaluation>> + '_ {
        self.tables.evals.values()
    }

    pub fn evals_by_job<'a>(
        &'a self,
        namespace: &str,
        job_id: &str,
    ) -> impl Iterator<Item = &'a Arc<Evaluation>> + 'a {
        self.tables
            .evals_by_job
            .get(&JobRef::new(namespace, job_id))
            .into_iter()
            .flat_map(|set| set.iter())
            .filter_map(|id| self.tables.evals.get(id))
    }

    /// The scheduler configuration; Nomad's defaults until an operator
    /// sets one.
    pub fn scheduler_config(&self) -> Arc<SchedulerConfiguration> {
        self.tables.scheduler_config.clone().unwrap_or_default()
    }

    /// The stored configuration, if an operator ever set one.
    pub fn stored_scheduler_config(&self) -> Option<&Arc<SchedulerConfiguration>> {
        self.tables.scheduler_config.as_ref()
    }
}

/// Two states are equal when every primary table and every index is equal
/// (the derived indexes included, so a bad rebuild shows up).
impl PartialEq for StateSnapshot {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&*self.tables, &*other.tables);
        a.jobs == b.jobs
            && a.job_versions == b.job_versions
            && a.job_summaries == b.job_summaries
            && a.allocs == b.allocs
            && a.evals == b.evals
            && a.nodes == b.nodes
            && a.scheduler_config == b.scheduler_config
            && a.scaling_events == b.scaling_events
            && a.table_indexes == b.table_indexes
            && a.latest_index == b.latest_index
            && a.allocs_by_node == b.allocs_by_node
            && a.allocs_by_job == b.allocs_by_job
            && a.allocs_by_eval == b.allocs_by_eval
            && a.evals_by_job == b.evals_by_job
            && a.version_refs == b.version_refs
    }
}
