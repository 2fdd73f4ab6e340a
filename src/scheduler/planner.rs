//! The scheduler's contract with whoever runs it: a [`Scheduler`] processes
//! an evaluation and talks to the outside world only through a [`Planner`]
//! (submit a plan, write evaluations, read a clock), and the errors of
//! both. Below everything else in the scheduler, which only reads it.

use crate::structs::{Evaluation, Plan, PlanResult};
use crate::view::State;
use std::sync::Arc;

/// Why a scheduler could not finish processing an evaluation. The worker
/// nacks the evaluation on any of these (the broker redelivers it).
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("planner failed: {0}")]
    Planner(#[from] PlannerError),
    #[error("no scheduler for job type {0:?}")]
    UnknownType(String),
}

/// A failure of the planner (the worker or the harness) to do what the
/// scheduler asked.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PlannerError(pub String);

/// Processes one evaluation to completion: computes and submits plans
/// (retrying on conflicts) and sets the evaluation's final status.
pub trait Scheduler {
    fn process(&mut self, eval: &Evaluation) -> Result<(), SchedulerError>;
}

/// What a scheduler needs from whoever runs it (Nomad's `Planner`).
pub trait Planner {
    /// Submits a plan. The result says what was committed; when the plan was
    /// only partly committed the planner may hand back a fresher state the
    /// scheduler must retry against (the snapshot at `refresh_index`).
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Arc<dyn State>>), PlannerError>;
    /// Records the evaluation's new status (complete, failed, ...).
    fn update_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError>;
    /// Creates a follow-up evaluation (rolling update, delayed reschedule,
    /// blocked evaluation).
    fn create_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError>;
    /// Puts a blocked evaluation that still cannot place everything back in
    /// the blocked set, with its refreshed class eligibility.
    fn reblock_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError>;
    /// A monotonic clock (nanoseconds) for measuring how long each placement
    /// took (`AllocMetric.AllocationTime`). The scheduler reads no clock of
    /// its own; planners that hand none in (tests) get 0, which keeps their
    /// results exactly reproducible.
    fn monotonic_clock(&self) -> Option<MonotonicClock> {
        None
    }
}

/// A monotonic clock in nanoseconds, handed to the scheduler by its planner.
pub type MonotonicClock = Arc<dyn Fn() -> u64 + Send + Sync>;
