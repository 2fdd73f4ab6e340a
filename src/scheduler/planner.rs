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
    /// The share of the cluster's nodes this planner's placements should
    /// look at first (see [`NodeShare`]). Planners that run alone (tests,
    /// dry runs) have none: every node is walked in the shuffled order.
    fn node_share(&self) -> Option<NodeShare> {
        None
    }
}

/// One of `count` disjoint shares of the cluster's nodes: those whose
/// catalog position is `index` modulo `count`.
///
/// Workers that schedule at the same time plan against the same snapshot,
/// so under binpacking they pick the same nearly full nodes and one of the
/// plans is refused in part by the plan applier (a partial commit: the
/// evaluation is scheduled again for what was refused). A server gives each
/// of its workers its own share: a placement walks that share first, so
/// concurrent plans rarely touch the same node. A share is only a
/// preference: a placement that finds no node in it, or a group whose
/// candidate limit is larger than the share, walks every node, as without
/// shares. Nomad has no such thing (its workers rely on the random node
/// order alone); the nodes seen per placement are still a random sample
/// of the cluster of the same size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeShare {
    pub index: u32,
    pub count: u32,
}

impl NodeShare {
    /// Whether the node at catalog `position` is in this share.
    pub fn holds(&self, position: u32) -> bool {
        self.count <= 1 || position % self.count == self.index
    }
}

/// A monotonic clock in nanoseconds, handed to the scheduler by its planner.
pub type MonotonicClock = Arc<dyn Fn() -> u64 + Send + Sync>;
