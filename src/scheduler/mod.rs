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
//!
//! The files import downward only (`tools/import-graph.py --under
//! scheduler --levels` prints the graph and these layers; it has no
//! cycle). Below them all is [`crate::view`], which the state store
//! imports too: the [`State`] trait, the node catalog, usage and attribute
//! columns. From the bottom:
//!
//! 0. [`planner`] (the `Planner` and `Scheduler` traits, their errors),
//!    [`feasible`], [`rank`], `tally`, `spread_lane`: plain functions of a node and a job;
//!    and, on `view` alone, [`harness_state`] (an in-memory `State`).
//! 1. [`context`]: the evaluation's working set (plan, usage per node).
//! 2. [`preemption`]: what to evict, from the context's usage.
//! 3. [`stack`]: one placement, from feasibility, ranking and preemption.
//! 4. [`util`]: what both schedulers share (node sets, in-place updates,
//!    allocations, reschedule timing, evaluation bookkeeping).
//! 5. [`reconcile`] (what the generic scheduler must place, stop, update;
//!    its deployment rules, `reconcile/deployment.rs`, sit on `structs`
//!    alone)
//!    and [`system`]; [`downgrade`] (the old version placed while canaries
//!    are on trial, with a stack of its own); 6. [`generic`].
//! 7. This file ([`new_scheduler`]); 8. the test [`harness`].

pub mod context;
pub mod downgrade;
pub mod feasible;
pub mod generic;
pub mod harness;
pub mod harness_state;
pub mod planner;
pub mod preemption;
pub mod rank;
pub mod reconcile;
mod spread_lane;
pub mod stack;
pub mod system;
mod tally;
pub mod util;

#[cfg(test)]
mod tests;

pub use crate::view::State;
pub use harness::Harness;
pub use harness_state::HarnessState;
pub use planner::{MonotonicClock, NodeShare, Planner, PlannerError, Scheduler, SchedulerError};

use crate::structs::JobType;
use std::sync::Arc;

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
