//! Pure scheduling: given a read-only snapshot and one evaluation, decide a plan.
//!
//! The shape follows Nomad's `scheduler` package: a [`Scheduler`] processes an
//! evaluation against a [`State`] snapshot and talks to the outside world only
//! through a [`Planner`] (submit a plan, update or create evaluations). There
//! are two schedulers: [`generic::GenericScheduler`] for service and batch
//! jobs (with the [`reconcile`] step deciding what each task group needs) and
//! [`system::SystemScheduler`] for system and sysbatch jobs (one allocation
//! per eligible node). Both place through the same [`stack::Stack`]:
//! feasibility ([`feasible`]), ranking ([`rank`]) and preemption
//! ([`preemption`]). Nothing here reads a clock: `now` is handed in.

pub mod catalog;
pub mod context;
pub mod feasible;
pub mod generic;
pub mod harness;
pub mod preemption;
pub mod rank;
pub mod reconcile;
pub mod stack;
pub mod state;
pub mod system;
mod tally;
pub mod usage_column;
pub mod util;

#[cfg(test)]
mod tests;

pub use harness::Harness;
pub use state::{HarnessState, State};

use crate::structs::{Evaluation, JobType, Plan, PlanResult};
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

/// Builds the scheduler for a job type. `now` (Unix nanoseconds) is the
/// scheduler's only notion of time: reschedule delays and follow-up
/// evaluation times are computed from it.
pub fn new_scheduler<'p>(
    job_type: &JobType,
    state: Arc<dyn State>,
    planner: &'p mut dyn Planner,
    now: i64,
) -> Result<Box<dyn Scheduler + 'p>, SchedulerError> {
    Ok(match job_type {
        JobType::Service => Box::new(generic::GenericScheduler::new(state, planner, false, now)),
        JobType::Batch => Box::new(generic::GenericScheduler::new(state, planner, true, now)),
        JobType::System => Box::new(system::SystemScheduler::new(state, planner, false, now)),
        JobType::SysBatch => Box::new(system::SystemScheduler::new(state, planner, true, now)),
        other => return Err(SchedulerError::UnknownType(other.as_str().to_string())),
    })
}
