//! The generic scheduler, for service and batch jobs.
//!
//! Each attempt reads the job and its allocations from the snapshot, lets
//! the [`reconcile`](super::reconcile) step decide what every task group
//! needs, places the new and replacement allocations through the
//! [`Stack`], and submits the plan. A partly committed plan is retried
//! against a fresher state (5 attempts for services, 2 for batch, reset
//! whenever an attempt makes progress). Allocations that cannot be placed
//! are reported in `FailedTGAllocs` and handed to a blocked evaluation, so
//! the evaluation itself completes (as Nomad 1.1 does).

use super::context::{Eligibility, EvalContext};
use super::downgrade::Downgrades;
use super::planner::{Planner, Scheduler, SchedulerError};
use super::reconcile::{DestructiveRequest, PlaceRequest, ReconcileResults, Reconciler};
use super::stack::{RankedNode, SelectOptions, Stack, StackKind};
use super::util::{self, *};
use crate::structs::{
    AllocDeploymentStatus, AllocMetric, AllocatedResources, Allocation, DeploymentId, EvalStatus,
    Evaluation, Job, PlanAnnotations, PlanResult, TaskGroup, TriggeredBy,
};
use crate::view::State;
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct GenericScheduler<'p> {
    state: Arc<dyn State>,
    planner: &'p mut dyn Planner,
    batch: bool,
    now: i64,
    failed: BTreeMap<String, AllocMetric>,
    queued: BTreeMap<String, u64>,
    blocked: Option<Evaluation>,
    next_eval: Option<Evaluation>,
    followups_created: bool,
    plan_result: Option<PlanResult>,
    eligibility: Eligibility,
    /// The deployment this attempt's placements join.
    placing: Placing,
}

impl<'p> GenericScheduler<'p> {
    pub fn new(state: Arc<dyn State>, planner: &'p mut dyn Planner, batch: bool, now: i64) -> Self {
        GenericScheduler {
            state,
            planner,
            batch,
            now,
            failed: BTreeMap::new(),
            queued: BTreeMap::new(),
            blocked: None,
            next_eval: None,
            followups_created: false,
            plan_result: None,
            eligibility: Default::default(),
            placing: Placing::default(),
        }
    }

    fn can_handle(trigger: TriggeredBy) -> bool {
        use TriggeredBy::*;
        matches!(
            trigger,
            JobRegister
                | JobDeregister
                | NodeDrain
                | NodeUpdate
                | AllocStop
                | RollingUpdate
                | QueuedAllocs
                | PeriodicJob
                | MaxPlanAttempts
                | DeploymentWatcher
                | AllocFailure
                | FailedFollowUp
                | Preemption
                | Scaling
                | JobScaling
                | Reconnect
        )
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
            blocked_eval: self.blocked.as_ref().map(|e| e.id),
            failed: &self.failed,
            queued: &self.queued,
        };
        set_status(&mut *self.planner, eval, outcome, self.now)
    }

    fn attempt(&mut self, eval: &Evaluation) -> Result<Attempt, SchedulerError> {
        let job = self.state.job_by_id(&eval.namespace, &eval.job_id);
        self.queued = BTreeMap::new();
        self.failed = BTreeMap::new();
        let index = self.state.latest_index();
        let plan = make_plan(eval, job.as_ref(), index);
        let mut ctx = EvalContext::new(self.state.clone(), plan, job.as_deref(), self.now);
        ctx.clock = self.planner.monotonic_clock();
        let live_job = job.as_ref().filter(|j| !j.stop).cloned();
        let kind = if self.batch {
            StackKind::Batch
        } else {
            StackKind::Service
        };
        let share = self.planner.node_share();
        let mut stack = live_job.as_ref().map(|j| {
            let mut stack = Stack::new(kind, j.clone(), &ctx, eval_seed(eval, index));
            stack.set_share(share);
            stack
        });
        self.compute_job_allocs(eval, job.as_ref(), &mut ctx, stack.as_mut())?;
        self.eligibility = ctx.eligibility.clone();

        if eval.status != EvalStatus::Blocked && !self.failed.is_empty() && self.blocked.is_none() {
            let blocked = blocked_eval(eval, &ctx.eligibility, &self.failed, false, self.now);
            self.planner.create_eval(blocked.clone())?;
            self.blocked = Some(blocked);
        }
        if ctx.plan.is_no_op() && !eval.annotate_plan {
            return Ok(Attempt::Done);
        }
        let submitted = submit_plan(&mut *self.planner, ctx.plan, &mut self.queued)?;
        self.plan_result = Some(submitted.result);
        if let Some(state) = submitted.new_state {
            self.state = state;
        }
        Ok(submitted.attempt)
    }

    /// Reconciles and places. Destructive updates held back by a
    /// deployment's `max_parallel` are placed by a later evaluation of the
    /// job once the deployment's allocations are healthy (the deployment
    /// watcher creates it), so no stagger follow-up is scheduled: as in
    /// Nomad, `stagger` paces only the system scheduler's rolling updates.
    fn compute_job_allocs(
        &mut self,
        eval: &Evaluation,
        job: Option<&Arc<Job>>,
        ctx: &mut EvalContext,
        mut stack: Option<&mut Stack>,
    ) -> Result<(), SchedulerError> {
        let results = self.reconcile(eval, job, ctx, stack.as_deref_mut());
        let ReconcileResults {
            place,
            destructive,
            inplace,
            stop,
            attribute_updates,
            followup_evals,
            desired,
            deployment,
        } = results;
        self.placing = Placing {
            deployment_id: deployment.active_id,
        };
        ctx.plan.deployment = deployment.created.map(Arc::new);
        ctx.plan.deployment_updates = deployment.updates;
        if eval.annotate_plan {
            ctx.plan.annotations = Some(PlanAnnotations {
                desired_tg_updates: desired,
                preempted_allocs: Vec::new(),
            });
        }
        if !self.followups_created {
            self.followups_created = true;
            for e in followup_evals {
                self.planner.create_eval(e)?;
            }
        }
        for s in &stop {
            ctx.stop_alloc(&s.alloc, s.description, s.client_status, None);
        }
        for a in inplace.into_iter().chain(attribute_updates) {
            ctx.place_alloc(a);
        }
        let Some(job) = job.filter(|j| !j.stop) else {
            // A stopped (not purged) job has nothing queued.
            if let Some(job) = job {
                for tg in &job.task_groups {
                    self.queued.insert(tg.name.clone(), 0);
                }
            }
            return Ok(());
        };
        self.queue(job, &place, &destructive);
        if place.is_empty() && destructive.is_empty() {
            return Ok(());
        }
        if let Some(stack) = stack {
            self.compute_placements(eval, job, ctx, stack, destructive, place);
        }
        Ok(())
    }

    /// What the reconciler says the job's groups need, with in-place
    /// updates tried on the stack (when there is a job to place).
    fn reconcile(
        &self,
        eval: &Evaluation,
        job: Option<&Arc<Job>>,
        ctx: &mut EvalContext,
        mut stack: Option<&mut Stack>,
    ) -> ReconcileResults {
        let state = ctx.state.clone();
        let allocs = if ctx.is_job(&eval.namespace, &eval.job_id) {
            ctx.job_allocs_in_state()
        } else {
            Arc::new(state.allocs_by_job(&eval.namespace, &eval.job_id))
        };
        let tainted = tainted_nodes(&*state, &allocs);
        mark_stopped_on_down_nodes_lost(ctx, &tainted, &allocs);
        let reconciler = Reconciler {
            job,
            batch: self.batch,
            eval,
            now: self.now,
            allocs: &allocs,
            tainted: &tainted,
            state: &*state,
            deployment: state.latest_deployment(&eval.namespace, &eval.job_id),
        };
        reconciler.compute(&mut |tg: &TaskGroup, alloc: &Arc<Allocation>| match (
            stack.as_deref_mut(),
            job,
        ) {
            (Some(stack), Some(job)) => try_update(ctx, stack, eval, job, tg, alloc),
            _ => UpdateKind::Ignore,
        })
    }

    /// Every group of the job starts with nothing queued; each placement
    /// and destructive update asked for queues one.
    fn queue(&mut self, job: &Job, place: &[PlaceRequest], destructive: &[DestructiveRequest]) {
        for tg in &job.task_groups {
            self.queued.insert(tg.name.clone(), 0);
        }
        for g in place
            .iter()
            .map(|p| &p.group)
            .chain(destructive.iter().map(|d| &d.group))
        {
            match self.queued.get_mut(g) {
                Some(q) => *q += 1,
                None => {
                    self.queued.insert(g.clone(), 1);
                }
            }
        }
    }

    fn compute_placements(
        &mut self,
        eval: &Evaluation,
        job: &Arc<Job>,
        ctx: &mut EvalContext,
        stack: &mut Stack,
        destructive: Vec<DestructiveRequest>,
        place: Vec<PlaceRequest>,
    ) {
        let ready = stack.catalog().ready_for(job);
        ctx.reserve_usage(
            ready
                .positions
                .len()
                .min(32 * (place.len() + destructive.len())),
        );
        stack.set_candidates(ready.positions);
        let kind = if self.batch {
            StackKind::Batch
        } else {
            StackKind::Service
        };
        let mut each = EachPlacement {
            template: AllocTemplate::new(job, eval),
            // One copy per evaluation, shared by every placement's metrics.
            by_dc: Arc::new(ready.by_dc),
            downgrades: Downgrades::new(kind, eval_seed(eval, ctx.state.latest_index())),
        };
        let requests = destructive
            .into_iter()
            .map(|d| Placement {
                name: d.name,
                group: d.group,
                previous: Some(d.alloc),
                reschedule: false,
                stop_previous: true,
                canary: false,
                downgrade_from: None,
            })
            .chain(place.into_iter().map(|p| Placement {
                name: p.name,
                group: p.group,
                previous: p.previous,
                reschedule: p.reschedule,
                stop_previous: false,
                canary: p.canary,
                downgrade_from: p.downgrade_from,
            }));
        for request in requests {
            self.place_one(job, ctx, stack, &mut each, request);
        }
    }

    /// Places one allocation: of the current version on `stack`, or of the
    /// old version while canaries are on trial (`downgrade`).
    fn place_one(
        &mut self,
        job: &Arc<Job>,
        ctx: &mut EvalContext,
        stack: &mut Stack,
        each: &mut EachPlacement,
        p: Placement,
    ) {
        let down = p
            .downgrade_from
            .and_then(|min| each.downgrades.target(ctx, job, &p.group, min));
        let (job, stack, deployment_id) = match down {
            Some(d) => (&d.job, &mut d.stack, Some(d.deployment_id)),
            None => (job, stack, None),
        };
        let Some(tg) = job.lookup_task_group(&p.group) else {
            return;
        };
        if let Some(metric) = self.failed.get_mut(&p.group) {
            metric.coalesced_failures += 1;
            exhaust_resources(metric, tg);
            return;
        }
        let previous = p.previous;
        if let (true, Some(prev)) = (p.stop_previous, &previous) {
            ctx.stop_alloc(prev, ALLOC_UPDATING, None, None);
        }
        let option = select_or_preempt(ctx, stack, tg, previous.as_deref());
        ctx.metrics.nodes_available = each.by_dc.clone();
        let metrics = ctx.take_metrics();
        let Some((ranked, resources)) = option else {
            let mut metrics = metrics;
            exhaust_resources(&mut metrics, tg);
            self.failed.insert(p.group.clone(), metrics);
            if let (true, Some(prev)) = (p.stop_previous, &previous) {
                ctx.pop_stop(prev);
            }
            return;
        };
        let mut alloc = each
            .template
            .build(&p.group, p.name, &ranked, resources, &metrics, self.now);
        if let Some(prev) = &previous {
            alloc.links_mut().previous_allocation = Some(prev.id);
            if p.reschedule {
                let policy = reschedule_policy(&*ctx.state, Some(job), prev);
                alloc.links_mut().reschedule_tracker = Some(util::next_reschedule_tracker(
                    policy.as_ref(),
                    prev,
                    self.now,
                ));
            }
        }
        match deployment_id {
            // A downgraded placement runs the old version, in the
            // deployment that rolled it out; it is never a canary.
            Some(deployment_id) => {
                alloc.job_version = job.version;
                alloc.deployment_id = deployment_id;
            }
            None => self.placing.join(&mut alloc, p.canary),
        }
        apply_preemptions(ctx, &ranked, &mut alloc);
        annotate_preemptions(ctx, &p.group, &ranked);
        ctx.place_new_alloc(alloc);
    }
}

/// One placement the reconciler asked for (a destructive update is a
/// placement that stops the allocation it replaces).
struct Placement {
    name: String,
    group: String,
    previous: Option<Arc<Allocation>>,
    reschedule: bool,
    stop_previous: bool,
    canary: bool,
    downgrade_from: Option<u64>,
}

/// What the placements of one evaluation share.
struct EachPlacement {
    template: AllocTemplate,
    by_dc: Arc<BTreeMap<String, u64>>,
    downgrades: Downgrades,
}

/// What every placement of an evaluation carries besides its node.
#[derive(Default)]
struct Placing {
    /// The active deployment placements belong to.
    deployment_id: Option<DeploymentId>,
}

impl Placing {
    /// A placement joins the deployment; a canary is marked as one (the
    /// store then records it among the group's placed canaries).
    fn join(&self, alloc: &mut Allocation, canary: bool) {
        alloc.deployment_id = self.deployment_id;
        if canary && self.deployment_id.is_some() {
            alloc.set_deployment_status(Some(AllocDeploymentStatus {
                canary: true,
                ..Default::default()
            }));
        }
    }
}

/// The best node for one allocation of `tg` (a replacement avoids where
/// `previous` ran), evicting lower-priority work when nothing fits
/// otherwise and preemption is on.
fn select_or_preempt(
    ctx: &mut EvalContext,
    stack: &mut Stack,
    tg: &TaskGroup,
    previous: Option<&Allocation>,
) -> Option<(RankedNode, Arc<AllocatedResources>)> {
    let opts = SelectOptions {
        penalty_nodes: penalty_nodes(previous),
        preempt: false,
    };
    let option = stack.select(ctx, tg, &opts);
    if option.is_none() && stack.preemption_enabled() {
        let opts = SelectOptions {
            preempt: true,
            ..opts
        };
        return stack.select(ctx, tg, &opts);
    }
    option
}

/// Counts a placement's evictions in the plan's annotations, when the
/// evaluation asked for them.
fn annotate_preemptions(ctx: &mut EvalContext, group: &str, ranked: &RankedNode) {
    if let Some(ann) = ctx.plan.annotations.as_mut() {
        ann.preempted_allocs
            .extend(ranked.preempted.iter().map(|a| a.id));
        if let Some(d) = ann.desired_tg_updates.get_mut(group) {
            d.preemptions += ranked.preempted.len() as u64;
        }
    }
}

impl Scheduler for GenericScheduler<'_> {
    fn process(&mut self, eval: &Evaluation) -> Result<(), SchedulerError> {
        if !Self::can_handle(eval.triggered_by) {
            let desc = format!(
                "scheduler cannot handle '{}' evaluation reason",
                eval.triggered_by
            );
            return self.finish(eval, EvalStatus::Failed, desc);
        }
        let limit = if self.batch {
            MAX_BATCH_ATTEMPTS
        } else {
            MAX_SERVICE_ATTEMPTS
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
                        if self.blocked.is_none() {
                            let blocked =
                                blocked_eval(eval, &self.eligibility, &self.failed, true, self.now);
                            self.planner.create_eval(blocked.clone())?;
                            self.blocked = Some(blocked);
                        }
                        let desc = format!("maximum attempts reached ({limit})");
                        return self.finish(eval, EvalStatus::Failed, desc);
                    }
                }
            }
        }
        if eval.status == EvalStatus::Blocked && !self.failed.is_empty() {
            let mut reblocked = eval.clone();
            reblocked.escaped_computed_class = self.eligibility.has_escaped();
            reblocked.class_eligibility = self.eligibility.classes();
            reblocked.failed_tg_allocs = self.failed.clone();
            reblocked.queued_allocations = self.queued.clone();
            self.planner.reblock_eval(reblocked)?;
            return Ok(());
        }
        self.finish(eval, EvalStatus::Complete, String::new())
    }
}
