//! A [`Planner`] over an in-memory [`HarnessState`], for tests and benches.
//!
//! Like Nomad's `scheduler/testing.go`: it applies every submitted plan to
//! its state without verification (unless told to reject plans, to exercise
//! the retry paths) and records plans and evaluations so tests can assert on
//! what a scheduler asked for.

use super::harness_state::HarnessState;
use super::new_scheduler;
use super::planner::{MonotonicClock, NodeShare, Planner, PlannerError, SchedulerError};
use crate::structs::{AllocStop, Evaluation, Plan, PlanResult};
use crate::view::State;
use std::sync::Arc;

pub struct Harness {
    pub state: HarnessState,
    /// Every plan submitted, in order.
    pub plans: Vec<Plan>,
    /// Every evaluation status update, in order.
    pub evals: Vec<Evaluation>,
    /// Every evaluation the scheduler created.
    pub create_evals: Vec<Evaluation>,
    /// Every evaluation the scheduler re-blocked.
    pub reblock_evals: Vec<Evaluation>,
    /// When set, every plan is rejected (nothing committed) and a fresh
    /// state is handed back, as the plan applier does on conflicts.
    pub reject_plans: bool,
    /// The time given to schedulers (Unix nanoseconds).
    pub now: i64,
    /// The monotonic clock handed to schedulers; `None` (the default)
    /// leaves `AllocationTime` at 0 so results are reproducible.
    pub clock: Option<MonotonicClock>,
    /// Keep a copy of every submitted plan in `plans` (on by default; the
    /// benches turn it off so only the state write is measured).
    pub record_plans: bool,
    /// The share of the nodes handed to schedulers (`None`: every node).
    pub node_share: Option<NodeShare>,
}

impl Default for Harness {
    fn default() -> Self {
        Harness {
            state: HarnessState::default(),
            plans: Vec::new(),
            evals: Vec::new(),
            create_evals: Vec::new(),
            reblock_evals: Vec::new(),
            reject_plans: false,
            now: 0,
            clock: None,
            record_plans: true,
            node_share: None,
        }
    }
}

impl Harness {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_state(state: HarnessState) -> Self {
        Harness {
            state,
            ..Default::default()
        }
    }

    /// A snapshot of the current state.
    pub fn snapshot(&self) -> Arc<dyn State> {
        Arc::new(self.state.clone())
    }

    /// Runs the scheduler for the evaluation's type over a snapshot.
    pub fn process(&mut self, eval: &Evaluation) -> Result<(), SchedulerError> {
        let snapshot = self.snapshot();
        let now = self.now;
        let mut scheduler = new_scheduler(&eval.eval_type, snapshot, self, now)?;
        scheduler.process(eval)
    }

    /// The last status update the scheduler made.
    pub fn last_eval(&self) -> Option<&Evaluation> {
        self.evals.last()
    }

    /// Applies a plan to the state as the plan applier would after
    /// verification, returning what was committed.
    pub fn apply_plan(&mut self, plan: Plan) -> PlanResult {
        // The plan's deployment goes in before its placements, which are
        // counted into it; other deployments' status changes with it. All
        // at the index the allocations are written at, as the store does.
        let index = self.state.latest_index() + 1;
        if let Some(d) = &plan.deployment {
            self.state.put_deployment((**d).clone(), index);
        }
        for update in &plan.deployment_updates {
            self.state.update_deployment_status(update, index);
        }
        let mut changed = Vec::new();
        for stop in plan
            .node_update
            .values()
            .chain(plan.node_preemptions.values())
            .flatten()
        {
            if let Some(existing) = self.state.alloc_by_id(&stop.id) {
                let mut alloc = (*existing).clone();
                apply_stop(&mut alloc, stop, self.now);
                changed.push(alloc);
            }
        }
        for alloc in plan.node_allocation.values().flatten() {
            let mut alloc = alloc.clone();
            if alloc.create_time == 0 {
                alloc.create_time = self.now;
            }
            alloc.modify_time = self.now;
            changed.push(alloc);
        }
        self.state.upsert_allocs(changed);
        PlanResult {
            node_update: plan.node_update,
            node_allocation: plan.node_allocation,
            node_preemptions: plan.node_preemptions,
            refresh_index: 0,
            alloc_index: index,
            rejected_nodes: Vec::new(),
        }
    }
}

fn apply_stop(alloc: &mut crate::structs::Allocation, stop: &AllocStop, now: i64) {
    alloc.desired_status = stop.desired_status;
    alloc.desired_description = stop.desired_description.as_str().into();
    if let Some(status) = stop.client_status {
        alloc.client_status = status;
    }
    if stop.followup_eval_id.is_some() {
        alloc.links_mut().followup_eval_id = stop.followup_eval_id;
    }
    if stop.preempted_by.is_some() {
        alloc.links_mut().preempted_by_allocation = stop.preempted_by;
    }
    alloc.modify_time = now;
}

impl Planner for Harness {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Arc<dyn State>>), PlannerError> {
        if self.reject_plans {
            let result = PlanResult {
                refresh_index: self.state.latest_index(),
                rejected_nodes: plan.nodes().collect(),
                ..Default::default()
            };
            if self.record_plans {
                self.plans.push(plan);
            }
            return Ok((result, Some(self.snapshot())));
        }
        if self.record_plans {
            self.plans.push(plan.clone());
        }
        let result = self.apply_plan(plan);
        Ok((result, None))
    }

    fn update_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError> {
        self.evals.push(eval);
        Ok(())
    }

    fn create_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError> {
        self.create_evals.push(eval);
        Ok(())
    }

    fn reblock_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError> {
        self.reblock_evals.push(eval);
        Ok(())
    }

    fn monotonic_clock(&self) -> Option<MonotonicClock> {
        self.clock.clone()
    }

    fn node_share(&self) -> Option<NodeShare> {
        self.node_share
    }
}
