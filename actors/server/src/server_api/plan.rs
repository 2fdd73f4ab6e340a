//! Planning a job (Nomad's `Job.Plan`): what registering it would do,
//! without doing it.
//!
//! The job is applied to a copy of the current snapshot (an O(1) clone;
//! the store is never touched, so this is not a write and does not cross
//! the write path) and the job type's scheduler runs over that copy with a
//! planner that records the plan and commits nothing.

use super::{check_job, unix_nanos, ServerApi, ServerApiError};
use herder::scheduler::{new_scheduler, Planner, PlannerError, State};
use herder::state::Command;
use herder::structs::{
    AllocMetric, Evaluation, Job, Plan, PlanAnnotations, PlanResult, TriggeredBy,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What registering the job would do (Nomad's `JobPlanResponse`, less the
/// diff, which a caller computes from `previous` and its job).
#[derive(Debug, Clone, Default)]
pub struct JobPlan {
    /// The stored job the plan would replace, if any.
    pub previous: Option<Arc<Job>>,
    /// The stored job's modify index (0 for a new job): pass it as
    /// `RegisterJob::enforce_index` to register only if nothing changed.
    pub job_modify_index: u64,
    /// Evaluations the scheduler would create (e.g. a blocked one).
    pub created_evals: Vec<Evaluation>,
    /// The scheduler's per-group counts (`DesiredTGUpdates`).
    pub annotations: PlanAnnotations,
    /// Groups whose placements would fail, with why.
    pub failed_tg_allocs: BTreeMap<String, AllocMetric>,
    /// What the job asks for that herder keeps but does not act on.
    pub warnings: Vec<String>,
    /// The state index the plan was made at.
    pub index: u64,
}

/// Records what a scheduler would do; commits nothing.
#[derive(Default)]
struct DryRunPlanner {
    annotations: Option<PlanAnnotations>,
    final_eval: Option<Evaluation>,
    created: Vec<Evaluation>,
    index: u64,
}

impl Planner for DryRunPlanner {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Arc<dyn State>>), PlannerError> {
        if let Some(a) = &plan.annotations {
            self.annotations = Some(a.clone());
        }
        // Granted in full, as Nomad's plan endpoint does: the answer is
        // what the scheduler wants, not what a plan applier would verify.
        let result = PlanResult {
            node_update: plan.node_update,
            node_allocation: plan.node_allocation,
            node_preemptions: plan.node_preemptions,
            alloc_index: self.index,
            ..Default::default()
        };
        Ok((result, None))
    }
    fn update_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError> {
        self.final_eval = Some(eval);
        Ok(())
    }
    fn create_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError> {
        self.created.push(eval);
        Ok(())
    }
    fn reblock_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError> {
        self.created.push(eval);
        Ok(())
    }
}

impl ServerApi {
    /// Plans `job` against the state at this moment. CPU-bound (a whole
    /// scheduler pass): an async caller runs it off its executor's
    /// threads (`tokio::task::spawn_blocking`), as the HTTP API does.
    pub fn plan_job(&self, mut job: Job) -> Result<JobPlan, ServerApiError> {
        job.canonicalize();
        check_job(&job, &self.job_limits)?;
        let snap = self.snapshot();
        let warnings = herder::structs::unhonoured::unhonoured_fields(&job);
        let previous = snap.job(&job.namespace, &job.id).cloned();
        let now = unix_nanos();
        let mut eval = Evaluation::for_job(&job, TriggeredBy::JobRegister, now);
        eval.annotate_plan = true;
        let mut copy = snap.clone();
        let index = copy.latest_index() + 1;
        let register = Command::JobRegister {
            job: Arc::new(job.clone()),
            eval: Some(eval.clone()),
            enforce_index: None,
        };
        copy.apply(index, &register)
            .map_err(|e| ServerApiError::Invalid(e.to_string()))?;
        let eval = copy.eval(&eval.id).map(|e| (**e).clone()).unwrap_or(eval);
        let mut planner = DryRunPlanner {
            index: index + 1,
            ..Default::default()
        };
        // Periodic and parameterized jobs are templates: registering one
        // places nothing, so there is nothing to schedule.
        if !job.is_template() {
            let state: Arc<dyn State> = Arc::new(copy);
            new_scheduler(&job.job_type, state, &mut planner, now)
                .map_err(|e| ServerApiError::Invalid(e.to_string()))?
                .process(&eval)
                .map_err(|e| {
                    ServerApiError::Internal(format!("scheduling the dry run failed: {e}"))
                })?;
        }
        Ok(JobPlan {
            job_modify_index: previous.as_ref().map_or(0, |j| j.job_modify_index),
            previous,
            created_evals: planner.created,
            annotations: planner.annotations.unwrap_or_default(),
            failed_tg_allocs: planner
                .final_eval
                .map(|e| e.failed_tg_allocs)
                .unwrap_or_default(),
            warnings,
            index: snap.latest_index().max(1),
        })
    }
}
