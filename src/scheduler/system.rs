//! The system scheduler, for system and sysbatch jobs: one allocation of
//! every task group on every eligible node.
//!
//! Each attempt diffs the job's allocations against the eligible nodes
//! (place, update, migrate, stop, ignore, lost), turns updates into in-place
//! changes where the new version allows it and into stop-and-place
//! otherwise (at most `max_parallel` per evaluation, with a follow-up
//! rolling-update evaluation), and checks each placement against its one
//! node. A node the group's constraints exclude is not a failure (it is
//! simply not counted as queued); a node that is full is (FailedTGAllocs
//! and a blocked evaluation for that node), unless preemption of
//! lower-priority work makes room. Sysbatch allocations that ran to
//! completion are not placed again until the job changes.

use super::context::EvalContext;
use super::planner::{Planner, Scheduler, SchedulerError};
use super::stack::{SelectOptions, Stack, StackKind};
use super::util::*;
use crate::structs::{
    AllocMetric, Allocation, ClientStatus, EvalStatus, Evaluation, Job, Node, NodeId,
    PlanAnnotations, PlanResult, SharedStr, TaskGroup, TriggeredBy,
};
use crate::view::fast_map::FastMap;
use crate::view::State;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

pub struct SystemScheduler<'p> {
    state: Arc<dyn State>,
    planner: &'p mut dyn Planner,
    sysbatch: bool,
    now: i64,
    failed: BTreeMap<String, AllocMetric>,
    queued: BTreeMap<String, u64>,
    next_eval: Option<Evaluation>,
    plan_result: Option<PlanResult>,
    limit_reached: bool,
}

/// One required group on one node, with the allocation it concerns.
#[derive(Clone)]
pub struct AllocTuple {
    pub name: Arc<str>,
    pub group: SharedStr,
    pub node: NodeId,
    /// The node itself when it is eligible (where placements may go).
    pub target: Option<Arc<Node>>,
    /// The eligible node's position in the state's node catalog, when
    /// known.
    pub position: Option<u32>,
    pub alloc: Option<Arc<Allocation>>,
}

/// The system diff of the job's allocations against the eligible nodes.
#[derive(Default)]
pub struct SystemDiff {
    pub place: Vec<AllocTuple>,
    pub update: Vec<AllocTuple>,
    pub migrate: Vec<AllocTuple>,
    pub stop: Vec<AllocTuple>,
    pub ignore: Vec<AllocTuple>,
    pub lost: Vec<AllocTuple>,
}

impl<'p> SystemScheduler<'p> {
    pub fn new(
        state: Arc<dyn State>,
        planner: &'p mut dyn Planner,
        sysbatch: bool,
        now: i64,
    ) -> Self {
        SystemScheduler {
            state,
            planner,
            sysbatch,
            now,
            failed: BTreeMap::new(),
            queued: BTreeMap::new(),
            next_eval: None,
            plan_result: None,
            limit_reached: false,
        }
    }

    /// The trigger reasons of the seed: sysbatch also accepts periodic runs.
    fn can_handle(&self, trigger: TriggeredBy) -> bool {
        use TriggeredBy::*;
        match trigger {
            JobRegister | NodeUpdate | FailedFollowUp | JobDeregister | RollingUpdate
            | Preemption | DeploymentWatcher | NodeDrain | AllocStop | QueuedAllocs | Scaling => {
                true
            }
            PeriodicJob => self.sysbatch,
            _ => false,
        }
    }

    fn finish(
        &mut self,
        eval: &Evaluation,
        status: EvalStatus,
        description: String,
    ) -> Result<(), SchedulerError> {
        let outcome = EvalOutcome {
            status,
            description,
            next_eval: self.next_eval.as_ref().map(|e| e.id),
            blocked_eval: None,
            failed: &self.failed,
            queued: &self.queued,
        };
        set_status(&mut *self.planner, eval, outcome, self.now)
    }

    fn attempt(&mut self, eval: &Evaluation) -> Result<Attempt, SchedulerError> {
        let job = self.state.job_by_id(&eval.namespace, &eval.job_id);
        let live_job = job.as_ref().filter(|j| !j.stop).cloned();
        self.queued = BTreeMap::new();
        self.failed = BTreeMap::new();
        self.limit_reached = false;
        let (nodes, positions, by_dc) = match &live_job {
            Some(j) => {
                let catalog = self.state.node_catalog();
                let ready = catalog.ready_for(j);
                let nodes = ready.positions.iter().map(|p| catalog.node(*p).clone());
                (nodes.collect(), ready.positions, ready.by_dc)
            }
            None => (Vec::new(), Vec::new(), BTreeMap::new()),
        };
        // One copy per evaluation, shared by every placement's metrics.
        let by_dc = Arc::new(by_dc);
        let index = self.state.latest_index();
        let plan = make_plan(eval, job.as_ref(), index);
        let mut ctx = EvalContext::new(self.state.clone(), plan, job.as_deref(), self.now);
        ctx.clock = self.planner.monotonic_clock();
        let mut stack = live_job
            .as_ref()
            .map(|j| Stack::new(StackKind::System, j.clone(), &ctx, eval_seed(eval, index)));
        self.compute_job_allocs(
            eval,
            live_job.as_ref(),
            &mut ctx,
            stack.as_mut(),
            (nodes, &positions),
            &by_dc,
        )?;

        if ctx.plan.is_no_op() && !eval.annotate_plan {
            return Ok(Attempt::Done);
        }
        if self.limit_reached && self.next_eval.is_none() {
            let mut next = eval.follow_up(TriggeredBy::RollingUpdate, self.now);
            next.wait = live_job
                .as_ref()
                .and_then(|j| j.update.as_ref())
                .map(|u| u.stagger)
                .unwrap_or_default();
            self.planner.create_eval(next.clone())?;
            self.next_eval = Some(next);
        }
        let submitted = submit_plan(&mut *self.planner, ctx.plan, &mut self.queued)?;
        self.plan_result = Some(submitted.result);
        if let Some(state) = submitted.new_state {
            self.state = state;
        }
        Ok(submitted.attempt)
    }

    fn compute_job_allocs(
        &mut self,
        eval: &Evaluation,
        job: Option<&Arc<Job>>,
        ctx: &mut EvalContext,
        stack: Option<&mut Stack>,
        (nodes, positions): (Vec<Arc<Node>>, &[u32]),
        by_dc: &Arc<BTreeMap<String, u64>>,
    ) -> Result<(), SchedulerError> {
        let state = ctx.state.clone();
        let allocs = state.allocs_by_job(&eval.namespace, &eval.job_id);
        let tainted = tainted_nodes(&*state, &allocs);
        mark_stopped_on_down_nodes_lost(ctx, &tainted, &allocs);
        let eligible = Eligible {
            nodes: &nodes,
            positions,
        };
        let diff = diff_system_allocs(&*state, job, self.sysbatch, eligible, &tainted, &allocs);
        stop_diffed(ctx, &diff);
        let (Some(job), Some(stack)) = (job, stack) else {
            if eval.annotate_plan {
                ctx.plan.annotations = Some(PlanAnnotations {
                    desired_tg_updates: desired_updates(&diff, &[], &[]),
                    preempted_allocs: Vec::new(),
                });
            }
            return Ok(());
        };

        // In-place where possible.
        let mut destructive = Vec::new();
        let mut inplace = Vec::new();
        let mut ignored = Vec::new();
        for t in &diff.update {
            let (Some(tg), Some(alloc)) = (job.lookup_task_group(&t.group), &t.alloc) else {
                continue;
            };
            match try_update(ctx, stack, eval, job, tg, alloc) {
                UpdateKind::Ignore => ignored.push(t.clone()),
                UpdateKind::InPlace(updated) => {
                    ctx.place_alloc(*updated);
                    inplace.push(t.clone());
                }
                UpdateKind::Destructive => destructive.push(t.clone()),
            }
        }
        let mut diff = diff;
        diff.ignore.extend(ignored);
        if eval.annotate_plan {
            ctx.plan.annotations = Some(PlanAnnotations {
                desired_tg_updates: desired_updates(&diff, &inplace, &destructive),
                preempted_allocs: Vec::new(),
            });
        }

        // Destructive updates are stops plus placements, rolling-limited.
        let limit = job
            .update
            .as_ref()
            .filter(|u| u.max_parallel > 0)
            .map_or(destructive.len(), |u| u.max_parallel as usize);
        self.limit_reached = destructive.len() > limit;
        for t in destructive.into_iter().take(limit) {
            if let Some(a) = &t.alloc {
                ctx.stop_alloc(a, ALLOC_UPDATING, None, None);
            }
            diff.place.push(t);
        }

        self.queue(job, &diff.place);
        if diff.place.is_empty() {
            return Ok(());
        }
        ctx.reserve_usage(diff.place.len());
        drop(nodes);
        ctx.plan.node_allocation.reserve(diff.place.len());
        self.compute_placements(eval, job, ctx, stack, &diff.place, by_dc)
    }

    /// Every group of the job starts with nothing queued; each placement
    /// queues one.
    fn queue(&mut self, job: &Job, place: &[AllocTuple]) {
        for tg in &job.task_groups {
            self.queued.insert(tg.name.clone(), 0);
        }
        for t in place {
            match self.queued.get_mut(&*t.group) {
                Some(q) => *q += 1,
                None => {
                    self.queued.insert(t.group.to_string(), 1);
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn compute_placements(
        &mut self,
        eval: &Evaluation,
        job: &Arc<Job>,
        ctx: &mut EvalContext,
        stack: &mut Stack,
        place: &[AllocTuple],
        by_dc: &Arc<BTreeMap<String, u64>>,
    ) -> Result<(), SchedulerError> {
        let mut template = AllocTemplate::new(job, eval);
        let catalog = stack.catalog().clone();
        let opts = SelectOptions {
            penalty_nodes: Vec::new(),
            preempt: stack.preemption_enabled(),
        };
        for missing in place {
            let Some(node) = &missing.target else {
                continue;
            };
            let Some(tg) = job.lookup_task_group(&missing.group) else {
                continue;
            };
            // Eligible nodes are the catalog's own: their entries there
            // (class numbers, capacity) are used as they are.
            match missing
                .position
                .filter(|p| (*p as usize) < catalog.len() && Arc::ptr_eq(catalog.node(*p), node))
            {
                Some(position) => stack.set_single_position(position),
                None => stack.set_single_node(node.clone()),
            }
            let option = stack.select(ctx, tg, &opts);
            let Some((ranked, resources)) = option else {
                self.record_failure(eval, ctx, tg, node, by_dc)?;
                continue;
            };
            ctx.metrics.nodes_available = by_dc.clone();
            // Packed from where it is: the next placement's metrics reuse
            // its room.
            let mut alloc = template.build(
                &missing.group,
                String::from(&*missing.name),
                &ranked,
                resources,
                &ctx.metrics,
                self.now,
            );
            alloc.links_mut().previous_allocation = missing
                .alloc
                .as_ref()
                .filter(|a| a.node_id == node.id)
                .map(|a| a.id);
            apply_preemptions(ctx, &ranked, &mut alloc);
            if let Some(ann) = ctx.plan.annotations.as_mut() {
                ann.preempted_allocs
                    .extend(ranked.preempted.iter().map(|a| a.id));
                if let Some(d) = ann.desired_tg_updates.get_mut(&*missing.group) {
                    d.preemptions += ranked.preempted.len() as u64;
                }
            }
            ctx.place_new_alloc_on_visited(alloc);
        }
        Ok(())
    }

    /// A placement that did not happen: filtered nodes are not failures; a
    /// full node is, reported once per group (later ones coalesced) with a
    /// blocked evaluation for that node.
    fn record_failure(
        &mut self,
        eval: &Evaluation,
        ctx: &mut EvalContext,
        tg: &TaskGroup,
        node: &Node,
        by_dc: &Arc<BTreeMap<String, u64>>,
    ) -> Result<(), SchedulerError> {
        if ctx.metrics.nodes_filtered > 0 {
            if let Some(q) = self.queued.get_mut(&tg.name) {
                *q = q.saturating_sub(1);
            }
            if let Some(d) = ctx
                .plan
                .annotations
                .as_mut()
                .and_then(|a| a.desired_tg_updates.get_mut(&tg.name))
            {
                d.place = d.place.saturating_sub(1);
            }
            return Ok(());
        }
        if let Some(metric) = self.failed.get_mut(&tg.name) {
            metric.coalesced_failures += 1;
            exhaust_resources(metric, tg);
            return Ok(());
        }
        ctx.metrics.nodes_available = by_dc.clone();
        let mut metric = ctx.take_metrics();
        exhaust_resources(&mut metric, tg);
        self.failed.insert(tg.name.clone(), metric);
        let mut blocked = blocked_eval(eval, &ctx.eligibility, &self.failed, false, self.now);
        blocked.node_id = Some(node.id);
        self.planner.create_eval(blocked)?;
        Ok(())
    }
}

impl Scheduler for SystemScheduler<'_> {
    fn process(&mut self, eval: &Evaluation) -> Result<(), SchedulerError> {
        if !self.can_handle(eval.triggered_by) {
            let desc = format!(
                "scheduler cannot handle '{}' evaluation reason",
                eval.triggered_by
            );
            return self.finish(eval, EvalStatus::Failed, desc);
        }
        let limit = if self.sysbatch {
            MAX_SYSBATCH_ATTEMPTS
        } else {
            MAX_SYSTEM_ATTEMPTS
        };
        let mut attempts = 0;
        loop {
            match self.attempt(eval)? {
                Attempt::Done => break,
                Attempt::Retry => {
                    if progress_made(self.plan_result.as_ref()) {
                        attempts = 0;
                    } else {
                        attempts += 1;
                    }
                    if attempts >= limit {
                        let desc = format!("maximum attempts reached ({limit})");
                        return self.finish(eval, EvalStatus::Failed, desc);
                    }
                }
            }
        }
        self.finish(eval, EvalStatus::Complete, String::new())
    }
}

/// The name of a system allocation: every group has one per node, index 0.
fn system_alloc_name(job: &Job, tg: &TaskGroup) -> String {
    Allocation::name_for(&job.id, &tg.name, 0)
}

/// Plans the stops the diff calls for: allocations no longer needed, on
/// tainted (draining) nodes, and on lost nodes.
fn stop_diffed(ctx: &mut EvalContext, diff: &SystemDiff) {
    for t in &diff.stop {
        if let Some(a) = &t.alloc {
            ctx.stop_alloc(a, ALLOC_NOT_NEEDED, None, None);
        }
    }
    for t in &diff.migrate {
        if let Some(a) = &t.alloc {
            ctx.stop_alloc(a, ALLOC_NODE_TAINTED, None, None);
        }
    }
    for t in &diff.lost {
        if let Some(a) = &t.alloc {
            ctx.stop_alloc(a, ALLOC_LOST, Some(ClientStatus::Lost), None);
        }
    }
}

/// The nodes a system job may be placed on, and their positions in the
/// state's node catalog (alongside, or empty when not known).
#[derive(Clone, Copy)]
pub struct Eligible<'a> {
    pub nodes: &'a [Arc<Node>],
    pub positions: &'a [u32],
}

/// Diffs the job's allocations against the eligible nodes (Nomad's
/// `diffSystemAllocs`).
pub fn diff_system_allocs(
    state: &dyn State,
    job: Option<&Arc<Job>>,
    sysbatch: bool,
    eligible: Eligible<'_>,
    tainted: &HashMap<NodeId, Option<Arc<Node>>>,
    allocs: &[Arc<Allocation>],
) -> SystemDiff {
    let required: Vec<(Arc<str>, SharedStr, &TaskGroup)> = job
        .map(|j| {
            j.task_groups
                .iter()
                .map(|tg| {
                    let name = Arc::from(system_alloc_name(j, tg));
                    (name, SharedStr::from(tg.name.as_str()), tg)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut live_by_node: FastMap<NodeId, Vec<&Arc<Allocation>>> = FastMap::default();
    let mut terminal: HashMap<(NodeId, &str), &Arc<Allocation>> = HashMap::new();
    for a in allocs {
        if a.is_terminal() {
            let e = terminal.entry((a.node_id, &*a.name)).or_insert(a);
            if a.create_index > e.create_index {
                *e = a;
            }
        } else {
            live_by_node.entry(a.node_id).or_default().push(a);
        }
    }
    let differ = NodeDiffer {
        state,
        sysbatch,
        job_version: job.map_or(0, |j| j.version),
        required: &required,
        tainted,
        terminal: &terminal,
    };
    let mut diff = SystemDiff::default();
    // Eligible nodes first; then the nodes that still hold live allocations
    // but are not eligible (what is left in `live_by_node` by then).
    for phase in 0..2 {
        let visits: Vec<Visit<'_>> = if phase == 0 {
            let position = |i: usize| eligible.positions.get(i).copied();
            let nodes = eligible.nodes.iter().enumerate();
            nodes.map(|(i, n)| (n.id, Some(n), position(i))).collect()
        } else {
            let mut extra: Vec<NodeId> = live_by_node.keys().copied().collect();
            extra.sort_unstable();
            extra.into_iter().map(|id| (id, None, None)).collect()
        };
        if phase == 0 {
            diff.place.reserve(visits.len() * required.len());
        }
        for (node_id, target, position) in visits {
            // A new job (the common case of a large evaluation) has no
            // allocations at all: no lookups then.
            let live = if live_by_node.is_empty() {
                Vec::new()
            } else {
                live_by_node.remove(&node_id).unwrap_or_default()
            };
            let mut existing: HashSet<&str> = HashSet::new();
            for a in live {
                existing.insert(&*a.name);
                differ.diff_live(&mut diff, node_id, target, a);
            }
            differ.diff_missing(&mut diff, node_id, target, position, &existing);
        }
    }
    diff
}

/// A node the diff visits: its ID, and the node and its catalog position
/// when it is eligible.
type Visit<'a> = (NodeId, Option<&'a Arc<Node>>, Option<u32>);

/// What [`diff_system_allocs`] compares each node's allocations with.
struct NodeDiffer<'a> {
    state: &'a dyn State,
    sysbatch: bool,
    job_version: u64,
    /// Each group's allocation name, group name and group.
    required: &'a [(Arc<str>, SharedStr, &'a TaskGroup)],
    tainted: &'a HashMap<NodeId, Option<Arc<Node>>>,
    /// The newest terminal allocation by node and name.
    terminal: &'a HashMap<(NodeId, &'a str), &'a Arc<Allocation>>,
}

impl NodeDiffer<'_> {
    /// Sorts a live allocation on `node_id` (`target` when the node is
    /// eligible) into the diff.
    fn diff_live(
        &self,
        diff: &mut SystemDiff,
        node_id: NodeId,
        target: Option<&Arc<Node>>,
        a: &Arc<Allocation>,
    ) {
        let tuple = |a: &Arc<Allocation>| AllocTuple {
            name: Arc::from(&*a.name),
            group: a.task_group.clone(),
            node: node_id,
            target: target.cloned(),
            position: None,
            alloc: Some(a.clone()),
        };
        if !self.required.iter().any(|(name, _, _)| **name == *a.name) {
            diff.stop.push(tuple(a));
            return;
        }
        if a.desired_transition.should_migrate() {
            diff.migrate.push(tuple(a));
            return;
        }
        if let Some(node) = self.tainted.get(&node_id) {
            if self.sysbatch && a.ran_successfully() {
                diff.ignore.push(tuple(a));
            } else if node_is_lost(node) {
                diff.lost.push(tuple(a));
            } else {
                diff.ignore.push(tuple(a));
            }
            return;
        }
        if target.is_none() {
            // Kept on nodes that are merely not ready or ineligible;
            // stopped on nodes the job no longer targets.
            let not_ready = self
                .state
                .node_by_id(&node_id)
                .is_some_and(|n| node_not_ready(&n));
            if not_ready {
                diff.ignore.push(tuple(a));
            } else {
                diff.stop.push(tuple(a));
            }
            return;
        }
        if a.job_version != self.job_version {
            diff.update.push(tuple(a));
            return;
        }
        diff.ignore.push(tuple(a));
    }

    /// The groups with no live allocation on the node (`existing` names
    /// those there are): placed on an eligible, untainted node; for a
    /// sysbatch job, a finished allocation there counts instead.
    fn diff_missing(
        &self,
        diff: &mut SystemDiff,
        node_id: NodeId,
        target: Option<&Arc<Node>>,
        position: Option<u32>,
        existing: &HashSet<&str>,
    ) {
        for (name, group, _) in self.required {
            if existing.contains(&**name) {
                continue;
            }
            let previous = if self.terminal.is_empty() {
                None
            } else {
                self.terminal.get(&(node_id, &**name)).copied()
            };
            if self.sysbatch {
                if let Some(prev) = previous {
                    let t = AllocTuple {
                        name: name.clone(),
                        group: group.clone(),
                        node: node_id,
                        target: target.cloned(),
                        position,
                        alloc: Some(prev.clone()),
                    };
                    if prev.job_version != self.job_version {
                        diff.update.push(t);
                    } else {
                        diff.ignore.push(t);
                    }
                    continue;
                }
            }
            if target.is_none() || (!self.tainted.is_empty() && self.tainted.contains_key(&node_id))
            {
                continue;
            }
            diff.place.push(AllocTuple {
                name: name.clone(),
                group: group.clone(),
                node: node_id,
                target: target.cloned(),
                position,
                alloc: previous.cloned(),
            });
        }
    }
}

/// DesiredTGUpdates for a system plan.
fn desired_updates(
    diff: &SystemDiff,
    inplace: &[AllocTuple],
    destructive: &[AllocTuple],
) -> BTreeMap<String, crate::structs::DesiredUpdates> {
    let mut out: BTreeMap<String, crate::structs::DesiredUpdates> = BTreeMap::new();
    let mut count = |t: &AllocTuple, field: fn(&mut crate::structs::DesiredUpdates) -> &mut u64| {
        *field(out.entry(t.group.to_string()).or_default()) += 1;
    };
    for t in &diff.place {
        count(t, |d| &mut d.place);
    }
    for t in diff.stop.iter().chain(&diff.lost) {
        count(t, |d| &mut d.stop);
    }
    for t in &diff.migrate {
        count(t, |d| &mut d.migrate);
    }
    for t in &diff.ignore {
        count(t, |d| &mut d.ignore);
    }
    for t in inplace {
        count(t, |d| &mut d.in_place_update);
    }
    for t in destructive {
        count(t, |d| &mut d.destructive_update);
    }
    out
}
