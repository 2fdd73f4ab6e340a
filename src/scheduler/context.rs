//! The per-evaluation working set: snapshot, plan under construction,
//! placement metrics, class eligibility, and a cache of what each touched
//! node would hold if the plan were applied.
//!
//! Every change to the plan goes through [`EvalContext`] so the per-node
//! cache stays true (the node's entry is marked stale and recomputed on
//! next use)
//! and so trackers that count allocations per attribute value (spread,
//! distinct_property) can replay the plan's changes incrementally from
//! [`EvalContext::plan_log`] instead of rescanning the plan per placement.

use super::planner::MonotonicClock;
use crate::structs::{
    AllocId, AllocMetric, AllocStop, Allocation, ClientStatus, ComparableResources, DesiredStatus,
    EvalId, Job, Node, NodeId, Plan, SharedStr,
};
use crate::view::fast_map::FastMap;
use crate::view::usage_column::UsageColumn;
use crate::view::State;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// What a node would hold if the plan were applied.
#[derive(Debug, Default)]
pub struct NodeUsage {
    /// Resources of every live allocation, planned ones included.
    pub used: ComparableResources,
    /// Host ports in use, and the node's reserved host ports.
    pub ports: HashSet<u16>,
    /// Live allocations of the evaluation's job on the node, per group.
    pub job_groups: Vec<(SharedStr, u32)>,
}

impl NodeUsage {
    /// Allocations of the evaluation's job on this node (one group, or all).
    pub fn job_count(&self, group: Option<&str>) -> u32 {
        self.job_groups
            .iter()
            .filter(|(g, _)| group.is_none_or(|want| &**g == want))
            .map(|(_, n)| *n)
            .sum()
    }
}

/// A node's cached usage; `fresh` is cleared when the plan changes the
/// node in a way that is cheaper to recompute than to patch.
#[derive(Debug)]
struct UsageSlot {
    id: NodeId,
    fresh: bool,
    /// Whether the plan has (or had) entries for the node. Most nodes an
    /// evaluation looks at have none, and computing their usage then
    /// skips looking the node up in the plan's maps.
    in_plan: bool,
    /// The node's catalog position, when the caller knows it: its usage
    /// is then read from the state's usage column.
    position: Option<u32>,
    usage: NodeUsage,
}

/// A candidate's remembered position in the usage cache (see
/// [`EvalContext::usage_hinted`]); start with [`UsageHint::default`].
#[derive(Clone, Copy, Debug)]
pub struct UsageHint(u32);

impl Default for UsageHint {
    fn default() -> Self {
        UsageHint(u32::MAX)
    }
}

/// One change the plan made to the evaluation job's live allocations:
/// `delta` +1 for a placement, -1 for a stop, on `node` in `group`.
#[derive(Clone, Debug)]
pub struct PlanChange {
    pub node: NodeId,
    pub group: SharedStr,
    pub delta: i32,
}

/// Which node classes the evaluation found eligible, for blocked evals.
#[derive(Debug, Default, Clone)]
pub struct Eligibility {
    classes: FastMap<String, bool>,
    escaped: bool,
}

impl Eligibility {
    /// Records a class as seen; eligible if any group could use it.
    pub fn record(&mut self, class: &str, eligible: bool) {
        if let Some(e) = self.classes.get_mut(class) {
            *e |= eligible;
        } else {
            self.classes.insert(class.to_string(), eligible);
        }
    }

    /// Marks that a constraint targeted node-unique values, so classes say
    /// nothing reliable about feasibility.
    pub fn set_escaped(&mut self) {
        self.escaped = true;
    }

    pub fn has_escaped(&self) -> bool {
        self.escaped
    }

    pub fn classes(&self) -> BTreeMap<String, bool> {
        self.classes.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

/// A catalog node with no usage slot, that neither the plan nor the
/// evaluation's job has touched: its usage is the column's.
const UNTOUCHED: u32 = u32::MAX;
/// A catalog node without a slot yet that holds allocations of the
/// evaluation's job (its usage counts them per group).
const JOB_ON_NODE: u32 = u32::MAX - 1;

pub struct EvalContext {
    pub state: Arc<dyn State>,
    /// The plan under construction. Its stops, placements and evictions
    /// are changed only through the methods below, which keep the usage
    /// cache in step.
    pub plan: Plan,
    /// Metrics of the placement being computed.
    pub metrics: AllocMetric,
    pub eligibility: Eligibility,
    /// Every change the plan made to the job's live allocations, in order.
    pub plan_log: Vec<PlanChange>,
    pub now: i64,
    /// Measures placements when the planner handed one in.
    pub clock: Option<MonotonicClock>,
    job_key: Option<(String, String)>,
    /// Where each touched node's usage sits in `usage_slots`. A node keeps
    /// its slot for the whole evaluation, so the stack can remember it per
    /// candidate and skip hashing the node ID (see [`Self::usage_hinted`]).
    usage_index: FastMap<NodeId, u32>,
    usage_slots: Vec<UsageSlot>,
    /// The job's live allocations in the snapshot, by node; read once, on
    /// the first usage computed.
    job_allocs: Option<JobAllocsByNode>,
    /// Every allocation of the job in the snapshot, read on first use.
    job_alloc_list: std::sync::OnceLock<Arc<Vec<Arc<Allocation>>>>,
    /// The state's usage column, fetched on first use (`None` inside when
    /// the state keeps none).
    column: Option<Option<Arc<UsageColumn>>>,
    /// By the column's catalog positions (empty until the column is
    /// fetched, and without one): the node's slot in `usage_slots`, or
    /// [`UNTOUCHED`] or [`JOB_ON_NODE`].
    by_position: Vec<u32>,
    /// Every position marked touched in `by_position`, in order: the
    /// stack's spread lane drains it to forget what it remembered about
    /// those nodes (see `spread_lane`).
    touched_log: Vec<u32>,
    priorities: FastMap<(SharedStr, SharedStr), i32>,
    /// The empty `nodes_available` of blank metrics (see
    /// [`Self::blank_metric`]).
    no_nodes_available: Arc<BTreeMap<String, u64>>,
}

impl EvalContext {
    pub fn new(state: Arc<dyn State>, plan: Plan, job: Option<&Job>, now: i64) -> Self {
        EvalContext {
            state,
            plan,
            metrics: AllocMetric::default(),
            eligibility: Eligibility::default(),
            plan_log: Vec::new(),
            now,
            clock: None,
            job_key: job.map(|j| (j.namespace.clone(), j.id.clone())),
            usage_index: FastMap::default(),
            usage_slots: Vec::new(),
            job_allocs: None,
            job_alloc_list: std::sync::OnceLock::new(),
            column: None,
            by_position: Vec::new(),
            touched_log: Vec::new(),
            priorities: FastMap::default(),
            no_nodes_available: Arc::default(),
        }
    }

    /// Every allocation of the evaluation's job in the snapshot (terminal
    /// ones included; none without a job), read once: reconciling, the
    /// usage cache and the spread counters all start from it, and each
    /// reading looked up every allocation in the state's largest table.
    pub fn job_allocs_in_state(&self) -> Arc<Vec<Arc<Allocation>>> {
        self.job_alloc_list
            .get_or_init(|| {
                Arc::new(match &self.job_key {
                    Some((namespace, id)) => self.state.allocs_by_job(namespace, id),
                    None => Vec::new(),
                })
            })
            .clone()
    }

    /// Whether the evaluation's job is `namespace`/`id`.
    pub fn is_job(&self, namespace: &str, id: &str) -> bool {
        self.job_key
            .as_ref()
            .is_some_and(|(n, i)| n == namespace && i == id)
    }

    /// Starts the metrics of a new placement: blank, as
    /// `AllocMetric::default()`, keeping the score list's room.
    pub fn reset_metrics(&mut self) {
        let m = &mut self.metrics;
        m.nodes_evaluated = 0;
        m.nodes_filtered = 0;
        m.nodes_exhausted = 0;
        m.allocation_time = 0;
        m.coalesced_failures = 0;
        if !Arc::ptr_eq(&m.nodes_available, &self.no_nodes_available) {
            m.nodes_available = self.no_nodes_available.clone();
        }
        m.class_filtered = Default::default();
        m.constraint_filtered = Default::default();
        m.class_exhausted = Default::default();
        m.dimension_exhausted = Default::default();
        m.quota_exhausted.clear();
        m.resources_exhausted.clear();
        m.score_meta_data.clear();
    }

    /// The placement's metrics, leaving blank ones behind (as
    /// `mem::take`, without allocating).
    pub fn take_metrics(&mut self) -> AllocMetric {
        let blank = self.blank_metric();
        std::mem::replace(&mut self.metrics, blank)
    }

    /// `AllocMetric::default()` but for `nodes_available`, which is the
    /// context's one empty map rather than a new one: a default metric
    /// allocates it, and a system evaluation makes two metrics per node.
    fn blank_metric(&self) -> AllocMetric {
        AllocMetric {
            nodes_evaluated: 0,
            nodes_filtered: 0,
            nodes_available: self.no_nodes_available.clone(),
            class_filtered: Default::default(),
            constraint_filtered: Default::default(),
            nodes_exhausted: 0,
            class_exhausted: Default::default(),
            dimension_exhausted: Default::default(),
            quota_exhausted: Vec::new(),
            resources_exhausted: BTreeMap::new(),
            score_meta_data: Vec::new(),
            allocation_time: 0,
            coalesced_failures: 0,
        }
    }

    fn is_job_alloc(&self, alloc: &Allocation) -> bool {
        is_job_alloc(self.job_key.as_ref(), alloc)
    }

    /// What the node would hold with the plan applied (computed on first use).
    pub fn usage(&mut self, node: &Node) -> &NodeUsage {
        self.usage_of(node.id, node)
    }

    /// As [`usage`](Self::usage) with the ID at hand, so that a cache hit
    /// does not have to touch the node itself.
    pub fn usage_of(&mut self, id: NodeId, node: &Node) -> &NodeUsage {
        let slot = self.usage_slot(id);
        self.fresh_usage(slot, node)
    }

    /// As [`usage_of`](Self::usage_of) for a caller that asks about the
    /// same node again and again (the stack, per candidate): `hint`
    /// remembers where the node's usage is kept, so later calls find it
    /// without hashing the ID.
    /// `position` is the node's place in the state's catalog: most nodes'
    /// usage is then computed without touching the node at all (see
    /// [`UsageColumn`]); the node is only asked for when it must be.
    #[inline]
    pub fn usage_hinted<'n>(
        &mut self,
        hint: &mut UsageHint,
        id: NodeId,
        position: Option<u32>,
        node: impl FnOnce() -> &'n Node,
    ) -> &NodeUsage {
        let slot = match self.usage_slots.get(hint.0 as usize) {
            Some(s) if s.id == id => hint.0,
            _ => {
                let slot = self.usage_slot(id);
                self.usage_slots[slot as usize].position = position;
                *hint = UsageHint(slot);
                slot
            }
        };
        if !self.usage_slots[slot as usize].fresh && !self.recompute_from_column(slot) {
            self.recompute_usage(slot, node());
        }
        &self.usage_slots[slot as usize].usage
    }

    /// What the stack scores a candidate on: the resources the node would
    /// hold with the plan applied, and how many allocations of the job's
    /// `group` it would hold. A node that neither the plan nor the job has
    /// touched (most of them) is read straight from the state's usage
    /// column, without a slot of its own; the others as
    /// [`usage_hinted`](Self::usage_hinted).
    #[inline]
    pub fn used_and_collisions<'n>(
        &mut self,
        hint: &mut UsageHint,
        id: NodeId,
        position: Option<u32>,
        group: &str,
        node: impl FnOnce() -> &'n Node,
    ) -> (ComparableResources, u32) {
        if let Some(used) = position.and_then(|p| self.untouched_usage(p, &id)) {
            return (used, 0);
        }
        let usage = self.usage_hinted(hint, id, position, node);
        (usage.used, usage.job_count(Some(group)))
    }

    /// Whether nothing in this evaluation has touched the catalog node at
    /// `position`: neither the plan nor the job's allocations are on it,
    /// so its usage is the state's usage column's for the whole
    /// evaluation (and what follows from it can be remembered). `false`
    /// when the state keeps no column.
    #[inline]
    pub fn is_untouched(&mut self, position: u32) -> bool {
        if self.column.is_none() {
            self.fetch_column();
        }
        self.by_position.get(position as usize) == Some(&UNTOUCHED)
    }

    /// The catalog positions of the nodes marked touched so far, in order
    /// (see [`Self::is_untouched`]): a node is never untouched again within
    /// the evaluation, so the log only grows.
    #[inline(always)]
    pub fn touched_log(&self) -> &[u32] {
        &self.touched_log
    }

    /// The column's usage of the node at `position`, if nothing in this
    /// evaluation has touched it.
    #[inline]
    pub fn untouched_usage(&mut self, position: u32, id: &NodeId) -> Option<ComparableResources> {
        if self.column.is_none() {
            self.fetch_column();
        }
        if self.by_position.get(position as usize) != Some(&UNTOUCHED) {
            return None;
        }
        let column = self.column.as_ref()?.as_ref()?;
        column.get(position, id).map(|b| b.used)
    }

    /// Fetches the state's usage column and marks the positions of the
    /// nodes already in slots or holding the job's allocations.
    #[cold]
    #[inline(never)]
    fn fetch_column(&mut self) {
        let column = self.state.node_usage_column();
        if let Some(column) = &column {
            let mut by_position = vec![UNTOUCHED; column.len()];
            let list = &self.job_alloc_list;
            let (state, key) = (&self.state, self.job_key.as_ref());
            let job_allocs = self
                .job_allocs
                .get_or_insert_with(|| live_job_allocs_by_node(list, &**state, key));
            for node in job_allocs.keys() {
                if let Some(p) = column.position(node) {
                    by_position[p as usize] = JOB_ON_NODE;
                    self.touched_log.push(p);
                }
            }
            for (slot, entry) in self.usage_slots.iter().enumerate() {
                if let Some(p) = column.position(&entry.id) {
                    by_position[p as usize] = slot as u32;
                    self.touched_log.push(p);
                }
            }
            self.by_position = by_position;
        }
        self.column = Some(column);
    }

    /// The node's slot in the usage cache, created (stale) on first use.
    fn usage_slot(&mut self, id: NodeId) -> u32 {
        let next = self.usage_slots.len() as u32;
        let slot = *self.usage_index.entry(id).or_insert(next);
        if slot == next {
            self.usage_slots.push(UsageSlot {
                id,
                fresh: false,
                in_plan: false,
                position: None,
                usage: NodeUsage::default(),
            });
            self.note_slot_position(id, slot);
        }
        slot
    }

    /// Records a new slot's node as touched in `by_position`.
    fn note_slot_position(&mut self, id: NodeId, slot: u32) {
        if self.by_position.is_empty() {
            return;
        }
        let column = self.column.as_ref().and_then(Option::as_ref);
        if let Some(p) = column.and_then(|c| c.position(&id)) {
            let mark = &mut self.by_position[p as usize];
            if *mark == UNTOUCHED {
                self.touched_log.push(p);
            }
            *mark = slot;
        }
    }

    #[inline]
    fn fresh_usage(&mut self, slot: u32, node: &Node) -> &NodeUsage {
        if !self.usage_slots[slot as usize].fresh {
            self.recompute_usage(slot, node);
        }
        &self.usage_slots[slot as usize].usage
    }

    #[cold]
    #[inline(never)]
    fn recompute_usage(&mut self, slot: u32, node: &Node) {
        debug_assert!(
            self.usage_slots[slot as usize].in_plan || !plan_touches(&self.plan, &node.id),
            "the plan changed node {} behind the usage cache's back",
            node.id
        );
        let base = base_usage(&*self.state, node);
        self.set_slot_usage(slot, node.id, base);
    }

    /// A slot's usage from the store's `base` usage of its node, with the
    /// plan and the job's allocations there counted in.
    fn set_slot_usage(&mut self, slot: u32, id: NodeId, base: NodeUsage) {
        let list = &self.job_alloc_list;
        let (state, key) = (&self.state, self.job_key.as_ref());
        let job_allocs = self
            .job_allocs
            .get_or_insert_with(|| live_job_allocs_by_node(list, &**state, key));
        let entry = &mut self.usage_slots[slot as usize];
        let plan = entry.in_plan.then_some(&self.plan);
        entry.usage = compute_usage(&**state, plan, job_allocs, key, id, base);
        entry.fresh = true;
    }

    /// Recomputes a slot's usage from the state's usage column, if it has
    /// the node's position and the node holds and reserves no ports (whose
    /// lists only the map and the node have); `false` if it could not.
    fn recompute_from_column(&mut self, slot: u32) -> bool {
        let Some(position) = self.usage_slots[slot as usize].position else {
            return false;
        };
        if self.column.is_none() {
            self.fetch_column();
        }
        let column = self.column.as_ref().and_then(Option::as_ref);
        let id = self.usage_slots[slot as usize].id;
        let base = match column.and_then(|c| c.get(position, &id)) {
            Some(b) if !b.has_ports && !b.reserves_ports => NodeUsage {
                used: b.used,
                ..Default::default()
            },
            _ => return false,
        };
        self.set_slot_usage(slot, id, base);
        true
    }

    /// Adds a planned allocation to its node's cached usage when that is
    /// up to date (a stale one will be recomputed with it anyway).
    fn add_to_cached_usage(&mut self, alloc: &Allocation) {
        let slot = self.usage_slot(alloc.node_id);
        let entry = &mut self.usage_slots[slot as usize];
        entry.in_plan = true;
        if entry.fresh {
            add_to_usage(self.job_key.as_ref(), &mut entry.usage, alloc);
        }
    }

    /// Marks the node's cached usage for recomputation on next use, from
    /// the plan's entries for it.
    fn invalidate_usage(&mut self, id: &NodeId) {
        let slot = self.usage_slot(*id);
        let entry = &mut self.usage_slots[slot as usize];
        entry.in_plan = true;
        entry.fresh = false;
    }

    /// The whole cores held on `node` with the plan applied, sorted. Read
    /// from the store's per-node usage, never from the usage column (which
    /// keeps only totals): only jobs that reserve cores ask, so this path
    /// costs the others nothing.
    pub fn cores_in_use(&self, node: &Node) -> Vec<u32> {
        let mut cores: Vec<u32> = self
            .state
            .node_usage(&node.id)
            .map(|u| u.cores.clone())
            .unwrap_or_default();
        let planned = planned_on(&self.plan, node.id);
        for id in leaving_ids(&self.plan, node.id, planned) {
            let Some(alloc) = self.state.alloc_by_id(&id) else {
                continue;
            };
            if alloc.node_id == node.id && !alloc.is_terminal() {
                for core in alloc.allocated_resources.reserved_cores() {
                    if let Some(at) = cores.iter().position(|c| c == core) {
                        cores.remove(at);
                    }
                }
            }
        }
        for alloc in planned.iter().filter(|a| !a.is_terminal()) {
            cores.extend(alloc.allocated_resources.reserved_cores());
        }
        cores.sort_unstable();
        cores
    }

    /// Live allocations of other jobs that the plan leaves on the node:
    /// what preemption may evict. Scans the node's allocations, which only
    /// the preemption path needs.
    pub fn preemption_candidates(&self, node: &Node) -> Vec<Arc<Allocation>> {
        let leaving = leaving_ids(&self.plan, node.id, planned_on(&self.plan, node.id));
        self.state
            .allocs_by_node(&node.id)
            .into_iter()
            .filter(|a| {
                !a.is_terminal() && leaving.binary_search(&a.id).is_err() && !self.is_job_alloc(a)
            })
            .collect()
    }

    /// Makes room in the usage cache for `n` nodes up front.
    pub fn reserve_usage(&mut self, n: usize) {
        self.usage_index.reserve(n);
        self.usage_slots.reserve(n);
        self.plan_log.reserve(n);
    }

    fn log(&mut self, alloc: &Allocation, delta: i32) {
        if self.is_job_alloc(alloc) {
            self.plan_log.push(PlanChange {
                node: alloc.node_id,
                group: alloc.task_group.clone(),
                delta,
            });
        }
    }

    /// Whether the snapshot holds this allocation live (not terminal).
    fn live_in_state(&self, id: &AllocId) -> bool {
        self.state.alloc_by_id(id).is_some_and(|a| !a.is_terminal())
    }

    /// Plans a stop of an existing allocation.
    pub fn stop_alloc(
        &mut self,
        alloc: &Allocation,
        description: &str,
        client_status: Option<ClientStatus>,
        followup: Option<EvalId>,
    ) {
        self.plan.push_stop(
            alloc.node_id,
            AllocStop {
                id: alloc.id,
                desired_status: DesiredStatus::Stop,
                desired_description: description.to_string(),
                client_status,
                followup_eval_id: followup,
                preempted_by: None,
            },
        );
        self.invalidate_usage(&alloc.node_id);
        if !alloc.is_terminal() {
            self.log(alloc, -1);
        }
    }

    /// Takes back the most recent planned stop of an allocation.
    pub fn pop_stop(&mut self, alloc: &Allocation) {
        if let Some(list) = self.plan.node_update.get_mut(&alloc.node_id) {
            if let Some(pos) = list.iter().rposition(|s| s.id == alloc.id) {
                list.remove(pos);
                if list.is_empty() {
                    self.plan.node_update.remove(&alloc.node_id);
                }
                self.invalidate_usage(&alloc.node_id);
                if !alloc.is_terminal() {
                    self.log(alloc, 1);
                }
            }
        }
    }

    /// Plans a new allocation or an in-place change of an existing one.
    pub fn place_alloc(&mut self, alloc: Allocation) {
        if !alloc.is_terminal() {
            if self.live_in_state(&alloc.id) {
                // An in-place update replaces a live allocation: recompute.
                self.invalidate_usage(&alloc.node_id);
            } else {
                self.add_to_cached_usage(&alloc);
                self.log(&alloc, 1);
            }
        }
        self.plan.push_alloc(alloc);
    }

    /// Plans a brand-new allocation (a fresh ID, so it cannot be an
    /// in-place update and the snapshot need not be asked).
    pub fn place_new_alloc(&mut self, alloc: Allocation) {
        self.add_to_cached_usage(&alloc);
        self.log(&alloc, 1);
        self.plan.push_alloc(alloc);
    }

    /// As [`place_new_alloc`](Self::place_new_alloc) for a node the
    /// evaluation is unlikely to look at again (a system placement: one
    /// per node and group): its cached usage is marked stale, to be
    /// recomputed with the plan if it is read again (another group of the
    /// job on the same node), instead of being patched now.
    pub fn place_new_alloc_on_visited(&mut self, alloc: Allocation) {
        self.invalidate_usage(&alloc.node_id);
        self.log(&alloc, 1);
        // As `Plan::push_alloc`, but a node's new list holds just this one
        // (a growing vector would make room for four).
        self.plan
            .node_allocation
            .entry(alloc.node_id)
            .or_insert_with(|| Vec::with_capacity(1))
            .push(alloc);
    }

    /// Plans the eviction of a lower-priority allocation for `by`.
    pub fn preempt_alloc(&mut self, alloc: &Allocation, by: AllocId) {
        self.plan
            .node_preemptions
            .entry(alloc.node_id)
            .or_default()
            .push(AllocStop {
                id: alloc.id,
                desired_status: DesiredStatus::Evict,
                desired_description: format!("Preempted by alloc ID {by}"),
                client_status: None,
                followup_eval_id: None,
                preempted_by: Some(by),
            });
        self.invalidate_usage(&alloc.node_id);
    }

    /// The priority of the job an allocation belongs to (0 if unknown).
    pub fn job_priority(&mut self, alloc: &Allocation) -> i32 {
        let key = (alloc.namespace.clone(), alloc.job_id.clone());
        if let Some(p) = self.priorities.get(&key) {
            return *p;
        }
        let p = self
            .state
            .job_by_version(&alloc.namespace, &alloc.job_id, alloc.job_version)
            .or_else(|| self.state.job_by_id(&alloc.namespace, &alloc.job_id))
            .map_or(0, |j| j.priority);
        self.priorities.insert(key, p);
        p
    }
}

fn is_job_alloc(job_key: Option<&(String, String)>, alloc: &Allocation) -> bool {
    job_key.is_some_and(|(ns, id)| *alloc.namespace == **ns && *alloc.job_id == **id)
}

fn add_to_usage(job_key: Option<&(String, String)>, usage: &mut NodeUsage, alloc: &Allocation) {
    usage.used.add(&alloc.allocated_resources.comparable());
    usage.ports.extend(alloc.allocated_resources.ports());
    if is_job_alloc(job_key, alloc) {
        count_group(usage, &alloc.task_group);
    }
}

fn count_group(usage: &mut NodeUsage, group: &SharedStr) {
    match usage.job_groups.iter_mut().find(|(g, _)| g == group) {
        Some((_, n)) => *n += 1,
        None => usage.job_groups.push((group.clone(), 1)),
    }
}

/// The evaluation job's live allocations on each node, with their groups.
type JobAllocsByNode = FastMap<NodeId, Vec<(AllocId, SharedStr)>>;

/// The job's live allocations by node, with their groups.
fn live_job_allocs_by_node(
    list: &std::sync::OnceLock<Arc<Vec<Arc<Allocation>>>>,
    state: &dyn State,
    job_key: Option<&(String, String)>,
) -> JobAllocsByNode {
    let mut by_node = JobAllocsByNode::default();
    if let Some((namespace, id)) = job_key {
        let allocs = list.get_or_init(|| Arc::new(state.allocs_by_job(namespace, id)));
        for alloc in allocs.iter() {
            if !alloc.is_terminal() {
                by_node
                    .entry(alloc.node_id)
                    .or_default()
                    .push((alloc.id, alloc.task_group.clone()));
            }
        }
    }
    by_node
}

/// Whether the plan has any entry for the node.
fn plan_touches(plan: &Plan, node: &NodeId) -> bool {
    plan.node_update.contains_key(node)
        || plan.node_allocation.contains_key(node)
        || plan.node_preemptions.contains_key(node)
}

/// The plan's allocations on the node (new ones and in-place updates).
fn planned_on(plan: &Plan, node: NodeId) -> &[Allocation] {
    plan.node_allocation.get(&node).map_or(&[], Vec::as_slice)
}

/// Allocations the plan takes off the node: stopped, preempted, or
/// replaced by an in-place update; sorted, each once (look up with
/// `binary_search`). Usually empty or short (the plan's entries for one
/// node), so sorting beats hashing, which computing the usage of
/// thousands of untouched nodes would pay for every time.
/// `planned` is the plan's allocations on the node (looked up once by the
/// caller, who needs them too).
///
/// A placement the scheduler made new (`CreateIndex` 0) replaces nothing
/// and is left out: every listed ID is looked up in the allocation table,
/// and a new ID's lookup is a miss through a million rows. As in
/// `plan_eval::proposed_usage`, an ID that existed after all would be
/// counted twice, which can only refuse a node, never over-commit it.
fn leaving_ids(plan: &Plan, node: NodeId, planned: &[Allocation]) -> Vec<AllocId> {
    let stopped = plan
        .node_update
        .get(&node)
        .into_iter()
        .chain(plan.node_preemptions.get(&node))
        .flatten()
        .map(|s| s.id);
    let replaced = planned.iter().filter(|a| a.create_index != 0).map(|a| a.id);
    let mut leaving: Vec<AllocId> = stopped.chain(replaced).collect();
    leaving.sort_unstable();
    leaving.dedup();
    leaving
}

/// What the store says a node holds: its allocations' resources and
/// ports, and the host ports the node reserves.
fn base_usage(state: &dyn State, node: &Node) -> NodeUsage {
    let mut usage = match state.node_usage(&node.id) {
        Some(base) => NodeUsage {
            used: base.used,
            ports: base.ports.iter().copied().collect(),
            job_groups: Vec::new(),
        },
        None => NodeUsage::default(),
    };
    // Most nodes reserve no ports: skip parsing an empty list.
    if !node
        .reserved_resources
        .networks
        .reserved_host_ports
        .is_empty()
    {
        if let Ok(ports) = node.reserved_resources.networks.parse_ports() {
            usage.ports.extend(ports);
        }
    }
    usage
}

/// What node `id` holds with the plan applied: its `usage` in the store
/// (see [`base_usage`]), less what the plan takes off it, plus what it
/// places. O(the plan's entries for the node), whatever already runs
/// there. `plan` is `None` when it has no entries for the node.
fn compute_usage(
    state: &dyn State,
    plan: Option<&Plan>,
    job_allocs: &JobAllocsByNode,
    job_key: Option<&(String, String)>,
    id: NodeId,
    mut usage: NodeUsage,
) -> NodeUsage {
    let (planned, leaving) = match plan {
        Some(plan) => {
            let planned = planned_on(plan, id);
            (planned, leaving_ids(plan, id, planned))
        }
        None => (&[][..], Vec::new()),
    };
    for leaving_id in &leaving {
        let Some(alloc) = state.alloc_by_id(leaving_id) else {
            continue;
        };
        if alloc.node_id == id && !alloc.is_terminal() {
            usage.used.sub(&alloc.allocated_resources.comparable());
            for port in alloc.allocated_resources.ports() {
                usage.ports.remove(&port);
            }
        }
    }
    for (alloc_id, group) in job_allocs.get(&id).into_iter().flatten() {
        if leaving.binary_search(alloc_id).is_err() {
            count_group(&mut usage, group);
        }
    }
    for alloc in planned {
        if !alloc.is_terminal() {
            add_to_usage(job_key, &mut usage, alloc);
        }
    }
    usage
}
