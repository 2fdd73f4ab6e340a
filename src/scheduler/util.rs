//! Helpers both schedulers share: node sets, tainted nodes, update
//! classification, reschedule timing, allocation construction and the
//! evaluation bookkeeping (status, blocked and follow-up evaluations).

use super::context::{Eligibility, EvalContext};
use super::planner::{Planner, PlannerError, SchedulerError};
use super::stack::{RankedNode, SelectOptions, Stack};
use crate::structs::alloc_id::new_alloc_id;
use crate::structs::job::delay_function;
use crate::structs::{
    AllocMetric, AllocatedResources, Allocation, ClientStatus, DesiredStatus, EvalStatus,
    Evaluation, Job, MetricPacker, Node, NodeId, NodeStatus, Plan, PlanResult, RescheduleEvent,
    ReschedulePolicy, RescheduleTracker, Seldom, SharedStr, TaskGroup, ThinStr, TriggeredBy,
};
use crate::view::node_target::datacenter_matches;
use crate::view::State;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

// Descriptions written on stopped allocations and evaluations (Nomad's).
pub const ALLOC_NOT_NEEDED: &str = "alloc not needed due to job update";
pub const ALLOC_MIGRATING: &str = "alloc is being migrated";
pub const ALLOC_UPDATING: &str = "alloc is being updated due to job update";
pub const ALLOC_LOST: &str = "alloc is lost since its node is down";
pub const ALLOC_IN_PLACE: &str = "alloc updating in-place";
pub const ALLOC_NODE_TAINTED: &str = "alloc not needed as node is tainted";
pub const BLOCKED_EVAL_MAX_PLAN: &str = "created due to placement conflicts";
pub const BLOCKED_EVAL_FAILED_PLACEMENTS: &str = "created to place remaining allocations";

/// Plan attempts per evaluation before giving up.
pub const MAX_SERVICE_ATTEMPTS: usize = 5;
pub const MAX_BATCH_ATTEMPTS: usize = 2;
pub const MAX_SYSTEM_ATTEMPTS: usize = 5;
pub const MAX_SYSBATCH_ATTEMPTS: usize = 2;

/// Failed allocations due within this window are rescheduled now.
pub const RESCHEDULE_WINDOW: Duration = Duration::from_secs(1);
/// Delayed reschedules within this window share one follow-up evaluation.
pub const FOLLOWUP_BATCH_WINDOW: Duration = Duration::from_secs(5);
/// How many past reschedule events an unlimited policy keeps.
pub const MAX_PAST_RESCHEDULE_EVENTS: usize = 5;

/// The nodes new work may go to for a job: ready, eligible, not draining,
/// in one of its datacenters and its node pool, by ID; with the count per
/// DC. (The service and batch schedulers take positions in the state's
/// [`NodeCatalog`](crate::view::catalog::NodeCatalog) instead of the nodes.)
pub fn ready_nodes(state: &dyn State, job: &Job) -> (Vec<Arc<Node>>, BTreeMap<String, u64>) {
    let catalog = state.node_catalog();
    let ready = catalog.ready_for(job);
    let nodes = ready
        .positions
        .iter()
        .map(|p| catalog.node(*p).clone())
        .collect();
    (nodes, ready.by_dc)
}

/// Nodes holding the allocations that are down, gone or draining; `None`
/// for a node that no longer exists.
pub fn tainted_nodes(
    state: &dyn State,
    allocs: &[Arc<Allocation>],
) -> HashMap<NodeId, Option<Arc<Node>>> {
    let mut out = HashMap::new();
    for alloc in allocs {
        if out.contains_key(&alloc.node_id) {
            continue;
        }
        match state.node_by_id(&alloc.node_id) {
            None => {
                out.insert(alloc.node_id, None);
            }
            Some(node) => {
                if node.status.is_terminal() || node.drain_strategy.is_some() || node.drain {
                    out.insert(alloc.node_id, Some(node));
                }
            }
        }
    }
    out
}

/// Whether a tainted node entry means the node is down or gone.
pub fn node_is_lost(node: &Option<Arc<Node>>) -> bool {
    node.as_ref().is_none_or(|n| n.status.is_terminal())
}

/// Allocations the servers already stopped on a node that went down, while
/// the client still said running: their client status becomes lost.
pub fn mark_stopped_on_down_nodes_lost(
    ctx: &mut EvalContext,
    tainted: &HashMap<NodeId, Option<Arc<Node>>>,
    allocs: &[Arc<Allocation>],
) {
    for alloc in allocs {
        let Some(node) = tainted.get(&alloc.node_id) else {
            continue;
        };
        if !node_is_lost(node) {
            continue;
        }
        if alloc.server_terminal()
            && matches!(
                alloc.client_status,
                ClientStatus::Running | ClientStatus::Pending
            )
        {
            ctx.stop_alloc(alloc, ALLOC_LOST, Some(ClientStatus::Lost), None);
        }
    }
}

/// Whether moving a group from `old` to `new` needs new allocations
/// (destructive) rather than an in-place update: anything about the tasks,
/// the resources, the networks or the soft placement rules changed.
pub fn tasks_updated(old_job: &Job, old: &TaskGroup, new_job: &Job, new: &TaskGroup) -> bool {
    if old.tasks.len() != new.tasks.len()
        || old.ephemeral_disk != new.ephemeral_disk
        || old.networks != new.networks
        || old.affinities != new.affinities
        || old.spreads != new.spreads
        || old_job.affinities != new_job.affinities
        || old_job.spreads != new_job.spreads
    {
        return true;
    }
    for a in &old.tasks {
        let Some(b) = new.lookup_task(&a.name) else {
            return true;
        };
        if a.driver != b.driver
            || a.user != b.user
            || a.config != b.config
            || a.env != b.env
            || a.meta != b.meta
            || a.artifacts != b.artifacts
            || a.templates != b.templates
            || a.resources != b.resources
            || a.affinities != b.affinities
            || a.lifecycle != b.lifecycle
        {
            return true;
        }
    }
    false
}

/// The result of trying to update an allocation to a new job version.
pub enum UpdateKind {
    /// Nothing to do.
    Ignore,
    /// Updated where it stands (the new allocation record).
    InPlace(Box<Allocation>),
    /// Must be replaced.
    Destructive,
}

/// Nomad's in-place check: unchanged tasks, a node still in the job's
/// datacenters, and the new version still feasible and fitting there once
/// the allocation's own resources are discounted.
pub fn try_update(
    ctx: &mut EvalContext,
    stack: &mut Stack,
    eval: &Evaluation,
    job: &Job,
    tg: &TaskGroup,
    alloc: &Arc<Allocation>,
) -> UpdateKind {
    if alloc.job_version == job.version {
        return UpdateKind::Ignore;
    }
    let old_job = ctx
        .state
        .job_by_version(&alloc.namespace, &alloc.job_id, alloc.job_version);
    let Some(old_job) = old_job else {
        return UpdateKind::Destructive;
    };
    let Some(old_tg) = old_job.lookup_task_group(&alloc.task_group) else {
        return UpdateKind::Destructive;
    };
    if tasks_updated(&old_job, old_tg, job, tg) {
        return UpdateKind::Destructive;
    }
    if alloc.is_terminal() {
        return UpdateKind::Ignore;
    }
    let Some(node) = ctx.state.node_by_id(&alloc.node_id) else {
        return UpdateKind::Destructive;
    };
    if !datacenter_matches(&job.datacenters, &node.datacenter) {
        return UpdateKind::Destructive;
    }
    stack.set_single_node(node);
    ctx.stop_alloc(alloc, ALLOC_IN_PLACE, None, None);
    let option = stack.select(ctx, tg, &SelectOptions::default());
    ctx.pop_stop(alloc);
    let Some((_, granted)) = option else {
        return UpdateKind::Destructive;
    };
    let granted = Arc::unwrap_or_clone(granted);
    let mut updated = (**alloc).clone();
    updated.eval_id = eval.id;
    updated.job_version = job.version;
    // Ports are never changed in place (network changes are destructive).
    let mut resources = granted;
    resources.shared.networks = alloc.allocated_resources.shared.networks.clone();
    resources.shared.ports = alloc.allocated_resources.shared.ports.clone();
    for (name, task) in resources.tasks.iter_mut() {
        if let Some(old) = alloc.allocated_resources.tasks.get(name) {
            task.networks = old.networks.clone();
        }
    }
    updated.allocated_resources = Arc::new(resources);
    UpdateKind::InPlace(Box::new(updated))
}

/// Shared values for the allocations of one evaluation, so each new
/// allocation costs pointer copies rather than copies of its strings and
/// resources (at a million allocations, the copies were hundreds of MB).
pub struct AllocTemplate {
    pub namespace: SharedStr,
    pub job_id: SharedStr,
    pub job_version: u64,
    pub eval_id: uuid::Uuid,
    /// Few per job: scanned, not hashed.
    groups: Vec<SharedStr>,
    /// The last grant handed out: consecutive placements of a group
    /// without ports get equal grants.
    last_resources: Option<Arc<AllocatedResources>>,
    packer: MetricPacker,
}

impl AllocTemplate {
    pub fn new(job: &Job, eval: &Evaluation) -> Self {
        AllocTemplate {
            namespace: SharedStr::from(job.namespace.as_str()),
            job_id: SharedStr::from(job.id.as_str()),
            job_version: job.version,
            eval_id: eval.id,
            groups: job
                .task_groups
                .iter()
                .map(|tg| SharedStr::from(tg.name.as_str()))
                .collect(),
            last_resources: None,
            packer: MetricPacker::default(),
        }
    }

    fn share_resources(&mut self, resources: Arc<AllocatedResources>) -> Arc<AllocatedResources> {
        match &self.last_resources {
            Some(last) if Arc::ptr_eq(last, &resources) || **last == *resources => last.clone(),
            _ => {
                self.last_resources = Some(resources.clone());
                resources
            }
        }
    }

    /// A new pending allocation of `group` named `name` on the ranked node.
    pub fn build(
        &mut self,
        group: &str,
        name: String,
        ranked: &RankedNode,
        resources: Arc<AllocatedResources>,
        metrics: &AllocMetric,
        now: i64,
    ) -> Allocation {
        // The node's own name, shared: one string per node however many
        // allocations it holds.
        let node_name = ranked.node.name.clone();
        let allocated_resources = self.share_resources(resources);
        // Every field spelled out: `..Default::default()` built (and
        // dropped) a default grant per placement.
        Allocation {
            id: new_alloc_id(),
            namespace: self.namespace.clone(),
            eval_id: self.eval_id,
            name: ThinStr::from(name),
            node_id: ranked.node.id,
            node_name,
            job_id: self.job_id.clone(),
            job_version: self.job_version,
            task_group: self
                .groups
                .iter()
                .find(|g| ***g == *group)
                .cloned()
                .unwrap_or_else(|| SharedStr::from(group)),
            allocated_resources,
            metrics: Some(self.packer.pack(metrics)),
            desired_status: DesiredStatus::Run,
            desired_description: SharedStr::default(),
            desired_transition: Default::default(),
            client_status: ClientStatus::Pending,
            client_description: SharedStr::default(),
            task_states: Default::default(),
            seldom: Seldom::default(),
            node_failure: false,
            deployment_id: None,
            create_index: 0,
            modify_index: 0,
            alloc_modify_index: 0,
            create_time: now,
            modify_time: now,
        }
    }
}

/// Adds the evictions a placement needs to the plan.
pub fn apply_preemptions(ctx: &mut EvalContext, ranked: &RankedNode, alloc: &mut Allocation) {
    for victim in &ranked.preempted {
        ctx.preempt_alloc(victim, alloc.id);
        alloc.links_mut().preempted_allocations.push(victim.id);
    }
}

/// Fills `ResourcesExhausted` for a failed placement of `tg`.
pub fn exhaust_resources(metric: &mut AllocMetric, tg: &TaskGroup) {
    if metric.dimension_exhausted.is_empty() {
        return;
    }
    let cpu = metric.dimension_exhausted.contains_key("cpu");
    let memory = metric.dimension_exhausted.contains_key("memory");
    for t in &tg.tasks {
        let r = metric
            .resources_exhausted
            .entry(t.name.clone())
            .or_default();
        if cpu {
            r.cpu += t.resources.cpu;
        }
        if memory {
            r.memory_mb += t.resources.memory_mb;
        }
    }
}

/// The reschedule policy an allocation is governed by: its group's in the
/// job version it runs, or the current job's.
pub fn reschedule_policy(
    state: &dyn State,
    current: Option<&Job>,
    alloc: &Allocation,
) -> Option<ReschedulePolicy> {
    let from = |job: &Job| {
        job.lookup_task_group(&alloc.task_group)
            .and_then(|tg| tg.reschedule_policy.clone())
    };
    match state.job_by_version(&alloc.namespace, &alloc.job_id, alloc.job_version) {
        Some(job) => from(&job),
        None => current.and_then(from),
    }
}

/// The delay before the next reschedule of a failed allocation (Nomad's
/// `NextDelay`): constant, doubling, or Fibonacci over past delays, capped
/// at `max_delay` and reset when the allocation ran longer than the cap.
pub fn next_delay(policy: &ReschedulePolicy, alloc: &Allocation) -> Duration {
    let events = alloc
        .links()
        .reschedule_tracker
        .as_ref()
        .map(|t| t.events.as_slice())
        .unwrap_or_default();
    let Some(last) = events.last() else {
        return policy.delay;
    };
    let mut delay = match policy.delay_function.as_str() {
        delay_function::EXPONENTIAL => last.delay * 2,
        delay_function::FIBONACCI if events.len() >= 2 => {
            let n1 = last.delay;
            let n2 = events[events.len() - 2].delay;
            if n2 == policy.max_delay && n1 == policy.delay {
                n1
            } else {
                n1 + n2
            }
        }
        delay_function::FIBONACCI => policy.delay,
        _ => return policy.delay,
    };
    if !policy.max_delay.is_zero() && delay > policy.max_delay {
        delay = policy.max_delay;
        let ran_for = alloc.last_event_time().unwrap_or(0) - last.reschedule_time;
        if ran_for > delay.as_nanos() as i64 {
            delay = policy.delay;
        }
    }
    delay
}

/// When a failed allocation may be rescheduled, and whether it may at all
/// (Nomad's `NextRescheduleTime`).
pub fn next_reschedule_time(policy: Option<&ReschedulePolicy>, alloc: &Allocation) -> (i64, bool) {
    let Some(policy) = policy else {
        return (0, false);
    };
    let fail_time = alloc.last_event_time().unwrap_or(0);
    if alloc.desired_status == DesiredStatus::Stop
        || alloc.client_status != ClientStatus::Failed
        || fail_time == 0
    {
        return (0, false);
    }
    let delay = next_delay(policy, alloc);
    let at = fail_time + delay.as_nanos() as i64;
    let events = alloc
        .links()
        .reschedule_tracker
        .as_ref()
        .map(|t| t.events.as_slice())
        .unwrap_or_default();
    let mut eligible = policy.unlimited || (policy.attempts > 0 && events.is_empty());
    if !policy.unlimited && policy.attempts > 0 && !events.is_empty() {
        let interval = policy.interval.as_nanos() as i64;
        let attempted = events
            .iter()
            .filter(|e| fail_time - e.reschedule_time < interval)
            .count();
        eligible = attempted < policy.attempts as usize && delay < policy.interval;
    }
    (at, eligible)
}

/// The reschedule history a replacement inherits, plus this reschedule.
pub fn next_reschedule_tracker(
    policy: Option<&ReschedulePolicy>,
    prev: &Allocation,
    now: i64,
) -> RescheduleTracker {
    let mut events = Vec::new();
    if let Some(tracker) = &prev.links().reschedule_tracker {
        match policy {
            Some(p) if p.attempts > 0 && !p.unlimited => {
                let interval = p.interval.as_nanos() as i64;
                events.extend(
                    tracker
                        .events
                        .iter()
                        .filter(|e| interval > 0 && now - e.reschedule_time <= interval)
                        .cloned(),
                );
            }
            _ => {
                let start = tracker
                    .events
                    .len()
                    .saturating_sub(MAX_PAST_RESCHEDULE_EVENTS);
                events.extend(tracker.events[start..].iter().cloned());
            }
        }
    }
    let delay = policy.map(|p| next_delay(p, prev)).unwrap_or_default();
    events.push(RescheduleEvent {
        reschedule_time: now,
        prev_alloc_id: prev.id,
        prev_node_id: prev.node_id,
        delay,
    });
    RescheduleTracker { events }
}

/// The nodes a replacement should avoid: where its predecessors ran.
pub fn penalty_nodes(prev: Option<&Allocation>) -> Vec<NodeId> {
    let Some(prev) = prev else {
        return Vec::new();
    };
    // Only a failure is the node's fault; a lost or migrated allocation's
    // node is no worse than any other.
    let mut nodes = Vec::new();
    if prev.client_status == ClientStatus::Failed {
        nodes.push(prev.node_id);
    }
    if let Some(t) = &prev.links().reschedule_tracker {
        for e in &t.events {
            if !nodes.contains(&e.prev_node_id) {
                nodes.push(e.prev_node_id);
            }
        }
    }
    nodes
}

/// A new plan for the evaluation.
pub fn make_plan(eval: &Evaluation, job: Option<&Arc<Job>>, snapshot_index: u64) -> Plan {
    Plan {
        eval_id: eval.id,
        priority: eval.priority,
        all_at_once: job.is_some_and(|j| j.all_at_once),
        job: job.cloned(),
        snapshot_index,
        ..Default::default()
    }
}

/// Whether a plan attempt changed anything (resets the attempt counter).
pub fn progress_made(result: Option<&PlanResult>) -> bool {
    result.is_some_and(|r| !r.node_update.is_empty() || !r.node_allocation.is_empty())
}

/// Counts placements that were committed, per group, off the queue.
pub fn adjust_queued(result: &PlanResult, queued: &mut BTreeMap<String, u64>) {
    for alloc in result.node_allocation.values().flatten() {
        // In-place updates were never queued; only new allocations count.
        if alloc.create_index == 0 || alloc.create_index == result.alloc_index {
            if let Some(q) = queued.get_mut(&*alloc.task_group) {
                *q = q.saturating_sub(1);
            }
        }
    }
}

/// A blocked evaluation to place what could not be placed.
pub fn blocked_eval(
    eval: &Evaluation,
    eligibility: &Eligibility,
    failed: &BTreeMap<String, AllocMetric>,
    plan_failure: bool,
    now: i64,
) -> Evaluation {
    let mut blocked = eval.follow_up(
        if plan_failure {
            TriggeredBy::MaxPlanAttempts
        } else {
            TriggeredBy::QueuedAllocs
        },
        now,
    );
    blocked.status = EvalStatus::Blocked;
    blocked.status_description = if plan_failure {
        BLOCKED_EVAL_MAX_PLAN
    } else {
        BLOCKED_EVAL_FAILED_PLACEMENTS
    }
    .to_string();
    blocked.failed_tg_allocs = failed.clone();
    blocked.escaped_computed_class = eligibility.has_escaped();
    if !blocked.escaped_computed_class {
        blocked.class_eligibility = eligibility.classes();
    }
    blocked
}

/// What the final status update of an evaluation carries.
pub struct EvalOutcome<'a> {
    pub status: EvalStatus,
    pub description: String,
    pub next_eval: Option<uuid::Uuid>,
    pub blocked_eval: Option<uuid::Uuid>,
    pub failed: &'a BTreeMap<String, AllocMetric>,
    pub queued: &'a BTreeMap<String, u64>,
}

/// Writes the evaluation's final status through the planner.
pub fn set_status(
    planner: &mut dyn Planner,
    eval: &Evaluation,
    outcome: EvalOutcome<'_>,
    now: i64,
) -> Result<(), SchedulerError> {
    let mut updated = eval.clone();
    updated.status = outcome.status;
    updated.status_description = outcome.description;
    if outcome.next_eval.is_some() {
        updated.next_eval = outcome.next_eval;
    }
    if outcome.blocked_eval.is_some() {
        updated.blocked_eval = outcome.blocked_eval;
    }
    updated.failed_tg_allocs = outcome.failed.clone();
    updated.queued_allocations = outcome.queued.clone();
    updated.modify_time = now;
    planner.update_eval(updated)?;
    Ok(())
}

/// A node that is not ready or not eligible but not tainted either: the
/// system scheduler leaves its allocations alone rather than stopping them.
pub fn node_not_ready(node: &Node) -> bool {
    node.status != NodeStatus::Ready
        || node.scheduling_eligibility != crate::structs::SchedulingEligibility::Eligible
}

/// The shuffle seed of an evaluation: runs over the same snapshot with the
/// same evaluation place identically.
pub fn eval_seed(eval: &Evaluation, index: u64) -> u64 {
    let (hi, lo) = eval.id.as_u64_pair();
    hi ^ lo.rotate_left(17) ^ index
}

/// What one scheduling attempt ended with.
pub enum Attempt {
    Done,
    Retry,
}

/// What submitting an attempt's plan gave.
pub struct Submitted {
    pub result: PlanResult,
    /// A fresher state the planner handed back, to retry against.
    pub new_state: Option<Arc<dyn State>>,
    pub attempt: Attempt,
}

/// Submits an attempt's plan and judges it: the attempt is done when
/// everything planned was committed; a partial commit, or a fresher state
/// handed back by the planner, calls for another attempt. Keeps the queued
/// counts in step with what was placed.
pub fn submit_plan(
    planner: &mut dyn Planner,
    plan: Plan,
    queued: &mut BTreeMap<String, u64>,
) -> Result<Submitted, PlannerError> {
    let expected: usize = plan.node_allocation.values().map(Vec::len).sum();
    let (result, new_state) = planner.submit_plan(plan)?;
    adjust_queued(&result, queued);
    let committed: usize = result.node_allocation.values().map(Vec::len).sum();
    let attempt = if new_state.is_none() && committed == expected {
        Attempt::Done
    } else {
        Attempt::Retry
    };
    Ok(Submitted {
        result,
        new_state,
        attempt,
    })
}
