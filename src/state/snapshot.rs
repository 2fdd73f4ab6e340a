//! `StateSnapshot`: the state's tables at one index, cloned in O(1).
//!
//! Every table is an `imbl` persistent map whose values are `Arc`s, and
//! the whole set of tables sits behind one more `Arc`: a snapshot is one
//! reference-count increment, and a writer that changes a copy shares
//! every untouched node with the readers still holding older snapshots.
//! Maps are ordered so that lists come out sorted by ID (as Nomad's do)
//! and two states compare equal table by table. The tables and their
//! secondary indexes are `tables.rs`'s; this is the read API over them.

use super::apply::Txn;
use super::changes::{
    AppliedChanges, JobKey, JobRef, JobVersionRef, ServiceKey, Table, VariableKey,
};
use super::command::{Command, PlanResults};
use super::tables::{count_usage, Tables};
use super::ApplyError;
use crate::structs::fit::NodeAllocUsage;
use crate::structs::job::DEFAULT_NAMESPACE;
use crate::structs::{
    AllocId, AllocStop, Allocation, Deployment, DeploymentId, DesiredStatus, EvalId, Evaluation,
    Job, JobScalingEvents, JobSummary, Namespace, Node, NodeId, RootKey, RootKeyState,
    SchedulerConfiguration, ServiceRegistration, SharedStr, VariableEncrypted,
};
use imbl::OrdSet;
use std::sync::Arc;

/// `apply_judged_usage`'s stop: the allocation turns terminal as the store
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
    t.allocs.insert(Arc::new(alloc));
}

/// Applies one node's placements for plan verification: an update in
/// place replaces its allocation's row (and, unless `known`, its usage);
/// the node's usage after them is returned, `known` when given.
fn place_for_verification(
    t: &mut Tables,
    node_id: NodeId,
    allocs: &[Allocation],
    known: Option<&Arc<NodeAllocUsage>>,
) -> Arc<NodeAllocUsage> {
    // Worked out only when not known.
    let mut usage = known.is_none().then(|| {
        t.node_usage
            .get(&node_id)
            .map_or_else(NodeAllocUsage::default, |u| (**u).clone())
    });
    for alloc in allocs {
        // New placements (`CreateIndex` 0) replace nothing; see
        // `plan_eval::proposed_usage`.
        let existing = (alloc.create_index != 0)
            .then(|| t.allocs.get(&alloc.id).cloned())
            .flatten();
        if let Some(old) = existing {
            // An update in place: the old version no longer counts.
            if let Some(usage) = usage.as_mut().filter(|_| old.node_id == node_id) {
                usage.remove(&old);
            }
            t.allocs.insert(Arc::new(alloc.clone()));
        }
        if let Some(usage) = usage.as_mut() {
            usage.add(alloc);
        }
    }
    match usage {
        Some(usage) => Arc::new(usage),
        None => known.cloned().unwrap_or_default(),
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
        self.apply_owned(index, cmd.clone())
    }

    /// [`Self::apply`], taking the command: what it adds to the state
    /// moves there instead of being copied (the store's writer owns every
    /// command it applies).
    pub fn apply_owned(&mut self, index: u64, cmd: Command) -> Result<AppliedChanges, ApplyError> {
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
        commands: Vec<Command>,
    ) -> Result<Vec<Result<AppliedChanges, ApplyError>>, ApplyError> {
        let latest = self.latest_index();
        if index < latest || (index == latest && !commands.is_empty()) {
            return Err(ApplyError::StaleIndex { index, latest });
        }
        let results = commands
            .into_iter()
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

    /// Moves the whole state to `index` (every table changed there) with
    /// `position` as its log position: a restored backup replacing the
    /// state at a write of its own, so that every waiter wakes.
    pub(crate) fn restamp(&mut self, index: u64, position: Option<&[u8]>) {
        let t = Arc::make_mut(&mut self.tables);
        t.latest_index = index;
        t.table_indexes = [index; Table::ALL.len()];
        t.applied_position = position.map(Arc::from);
    }

    fn apply_unchecked(&mut self, index: u64, cmd: Command) -> Result<AppliedChanges, ApplyError> {
        let name = cmd.name();
        let mut txn = Txn::new((*self.tables).clone(), index);
        txn.apply(cmd)?;
        let (tables, mut changes) = txn.finish();
        changes.command = name;
        self.tables = Arc::new(tables);
        Ok(changes)
    }

    /// Moves what plan verification (`plan_eval`) reads, and nothing
    /// else, as if `plan` were applied: the allocations it stops or
    /// updates, and the usage of every node it touches.
    ///
    /// The plan applier shows workers this view of the plan being written
    /// (the state it was checked against, plus the plan), so that they
    /// schedule around its placements. A full `apply` there cost as much
    /// as the store's own apply of the same plan, on the applier's one
    /// thread. The view has no indexes, summaries, evaluations or new
    /// allocations (nothing that has not seen the plan can refer to them),
    /// its index does not move, and it must never be published or used
    /// for anything else.
    ///
    /// The usage of the nodes in `judged` is taken from there instead of
    /// worked out again: what the check of the plan against this very state
    /// found each node would hold (`plan_eval::PlanVerdict::usage`, sorted
    /// by node). Against any other state it would be wrong: the plan
    /// applier builds the view on the state the plan was judged against.
    /// Nodes not in `judged` (all, when it is empty) are worked out.
    pub fn apply_judged_usage(
        &mut self,
        plan: &PlanResults,
        judged: &[(NodeId, Arc<NodeAllocUsage>)],
    ) {
        let t = Arc::make_mut(&mut self.tables);
        let stops = plan.node_update.values().flatten().map(|s| (s, false));
        let preemptions = plan.node_preemptions.values().flatten().map(|s| (s, true));
        for (stop, preemption) in stops.chain(preemptions) {
            stop_for_verification(t, stop, preemption);
        }
        for (node_id, allocs) in &plan.node_allocation {
            let known = judged
                .binary_search_by_key(node_id, |(n, _)| *n)
                .ok()
                .map(|at| &judged[at].1);
            let usage = place_for_verification(t, *node_id, allocs, known);
            if usage.live == 0 {
                t.node_usage.remove(node_id);
            } else {
                t.node_usage.insert(*node_id, usage);
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

    /// Every allocation, by ID. Sorts them as they are read (see
    /// `alloc_table`).
    pub fn allocs(&self) -> impl Iterator<Item = &Arc<Allocation>> + '_ {
        self.tables.allocs.by_id_from(AllocId::nil())
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

    /// The allocations an evaluation placed (or last updated): found among
    /// its job's (none once the evaluation is gone).
    pub fn allocs_by_eval<'a>(
        &'a self,
        eval_id: &'a EvalId,
    ) -> impl Iterator<Item = &'a Arc<Allocation>> + 'a {
        self.eval(eval_id)
            .into_iter()
            .flat_map(|eval| self.allocs_by_job(&eval.namespace, &eval.job_id))
            .filter(move |a| a.eval_id == *eval_id)
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
    pub fn job_namespaces(&self) -> impl Iterator<Item = SharedStr> + '_ {
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

    /// Allocations from the ID `from` on, by ID (sorted as they are
    /// read: see `alloc_table`).
    pub fn allocs_from(&self, from: AllocId) -> impl Iterator<Item = &Arc<Allocation>> + '_ {
        self.tables.allocs.by_id_from(from)
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

    pub fn deployment(&self, id: &DeploymentId) -> Option<&Arc<Deployment>> {
        self.tables.deployments.get(id)
    }

    /// Every deployment, in ID order.
    pub fn deployments(&self) -> impl Iterator<Item = &Arc<Deployment>> + '_ {
        self.tables.deployments.values()
    }

    /// A job's deployments, newest (highest create index) first.
    pub fn deployments_of_job(&self, namespace: &str, id: &str) -> Vec<&Arc<Deployment>> {
        let mut found: Vec<&Arc<Deployment>> = self
            .tables
            .deployments_by_job
            .get(&JobRef::new(namespace, id))
            .into_iter()
            .flatten()
            .filter_map(|d| self.tables.deployments.get(d))
            .collect();
        found.sort_by_key(|d| std::cmp::Reverse(d.create_index));
        found
    }

    /// The job's most recent deployment (Nomad's `LatestDeploymentByJobID`).
    pub fn latest_deployment(&self, namespace: &str, id: &str) -> Option<&Arc<Deployment>> {
        self.deployments_of_job(namespace, id).into_iter().next()
    }

    /// The deployments whose ID starts with `prefix`, in ID order.
    pub fn deployments_by_id_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Deployment>> + 'a {
        self.tables
            .deployments
            .values()
            .filter(move |d| d.id.to_string().starts_with(prefix))
    }

    /// Deployments from the ID `from` on, by ID.
    pub fn deployments_from(
        &self,
        from: DeploymentId,
    ) -> impl Iterator<Item = &Arc<Deployment>> + '_ {
        self.tables.deployments.range(from..).map(|(_, d)| d)
    }

    /// The allocations a deployment placed.
    pub fn allocs_by_deployment(&self, id: &DeploymentId) -> Vec<Arc<Allocation>> {
        let Some(d) = self.deployment(id) else {
            return Vec::new();
        };
        self.allocs_by_job(&d.namespace, &d.job_id)
            .filter(|a| a.deployment_id == Some(*id))
            .cloned()
            .collect()
    }

    /// A namespace by name; `default` is there even when never written.
    pub fn namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        match self.tables.namespaces.get(name) {
            Some(ns) => Some(ns.clone()),
            None if name == DEFAULT_NAMESPACE => Some(Arc::new(Namespace::default_namespace())),
            None => None,
        }
    }

    /// Whether a namespace exists (`default` always does).
    pub fn namespace_exists(&self, name: &str) -> bool {
        name == DEFAULT_NAMESPACE || self.tables.namespaces.contains_key(name)
    }

    /// Every namespace whose name starts with `prefix`, by name (with
    /// `default`, written or not).
    pub fn namespaces_by_prefix(&self, prefix: &str) -> Vec<Arc<Namespace>> {
        let mut found: Vec<Arc<Namespace>> = self
            .tables
            .namespaces
            .range(prefix.to_string()..)
            .take_while(|(name, _)| name.starts_with(prefix))
            .map(|(_, ns)| ns.clone())
            .collect();
        if DEFAULT_NAMESPACE.starts_with(prefix)
            && !self.tables.namespaces.contains_key(DEFAULT_NAMESPACE)
        {
            found.push(Arc::new(Namespace::default_namespace()));
            found.sort_by(|a, b| a.name.cmp(&b.name));
        }
        found
    }

    /// Every service registration, by allocation.
    pub fn services(&self) -> impl Iterator<Item = &Arc<ServiceRegistration>> + '_ {
        self.tables.services.values()
    }

    /// The registrations of one service in a namespace (`"*"`: every
    /// namespace), in allocation order.
    pub fn services_named<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Arc<ServiceRegistration>> + 'a {
        self.services().filter(move |s| {
            s.service_name == name && (namespace == "*" || s.namespace == namespace)
        })
    }

    /// The registrations of one allocation.
    pub fn alloc_services<'a>(
        &'a self,
        alloc_id: &AllocId,
    ) -> impl Iterator<Item = &'a Arc<ServiceRegistration>> + 'a {
        let alloc_id = *alloc_id;
        let start = ServiceKey {
            alloc_id,
            id: String::new(),
        };
        self.tables
            .services
            .range(start..)
            .take_while(move |(k, _)| k.alloc_id == alloc_id)
            .map(|(_, s)| s)
    }

    /// One variable, sealed.
    pub fn variable(&self, namespace: &str, path: &str) -> Option<&Arc<VariableEncrypted>> {
        self.tables
            .variables
            .get(&VariableKey::new(namespace, path))
    }

    /// The variables whose path starts with `prefix` in a namespace
    /// (`"*"`: every namespace), by namespace then path. In one namespace
    /// this is one range of the table.
    pub fn variables_by_prefix<'a>(
        &'a self,
        namespace: &'a str,
        prefix: &'a str,
    ) -> Box<dyn Iterator<Item = &'a Arc<VariableEncrypted>> + 'a> {
        if namespace == "*" {
            return Box::new(
                self.tables
                    .variables
                    .values()
                    .filter(move |v| v.meta.path.starts_with(prefix)),
            );
        }
        let start = VariableKey::new(namespace, prefix);
        Box::new(
            self.tables
                .variables
                .range(start..)
                .take_while(move |(k, _)| k.namespace == namespace && k.path.starts_with(prefix))
                .map(|(_, v)| v),
        )
    }

    /// Every root key of the keyring, by ID.
    pub fn root_keys(&self) -> impl Iterator<Item = &Arc<RootKey>> + '_ {
        self.tables.root_keys.values()
    }

    /// One root key.
    pub fn root_key(&self, key_id: &str) -> Option<&Arc<RootKey>> {
        self.tables.root_keys.get(key_id)
    }

    /// The key new variables are sealed with.
    pub fn active_root_key(&self) -> Option<&Arc<RootKey>> {
        self.root_keys()
            .find(|k| k.meta.state == RootKeyState::Active)
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

    /// Autopilot's settings as an operator last set them (`None`: never;
    /// the servers then follow their own agent configuration).
    pub fn stored_autopilot_config(&self) -> Option<&Arc<crate::structs::AutopilotConfiguration>> {
        self.tables.autopilot_config.as_ref()
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
            && a.autopilot_config == b.autopilot_config
            && a.scaling_events == b.scaling_events
            && a.deployments == b.deployments
            && a.deployments_by_job == b.deployments_by_job
            && a.services == b.services
            && a.namespaces == b.namespaces
            && a.variables == b.variables
            && a.root_keys == b.root_keys
            && a.acl == b.acl
            && a.table_indexes == b.table_indexes
            && a.latest_index == b.latest_index
            && a.allocs_by_node == b.allocs_by_node
            && a.allocs_by_job == b.allocs_by_job
            && a.evals_by_job == b.evals_by_job
            && a.version_refs == b.version_refs
    }
}
