//! Allocations and evaluations: reads, waits, and the operator's
//! allocation stop (Nomad's `Alloc.Stop`).

use super::{unix_nanos, ServerApi, ServerApiError};
use herder::state::{Command, Table, TableSet};
use herder::structs::{
    AllocId, Allocation, DesiredTransition, EvalId, EvalStatus, Evaluation, TriggeredBy,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Nomad's `AllocStopResponse`.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocStopResult {
    /// The `alloc-stop` evaluation of the allocation's job.
    pub eval_id: EvalId,
    /// The state index at which the stop is durable.
    pub index: u64,
}

impl ServerApi {
    pub fn allocation(&self, id: &AllocId) -> Option<Arc<Allocation>> {
        self.snapshot().alloc(id).cloned()
    }

    pub fn evaluation(&self, id: &EvalId) -> Option<Arc<Evaluation>> {
        self.snapshot().eval(id).cloned()
    }

    /// Waits until the evaluation is terminal (complete, failed or
    /// canceled) or blocked.
    pub async fn wait_for_evaluation(
        &self,
        id: &EvalId,
        timeout: Duration,
    ) -> Result<Arc<Evaluation>, ServerApiError> {
        self.wait_until(TableSet::of(&[Table::Evals]), timeout, |snap| {
            match snap.eval(id) {
                None => Some(Err(ServerApiError::NotFound(format!(
                    "evaluation {id} not found"
                )))),
                Some(e) if e.status.is_terminal() || e.status == EvalStatus::Blocked => {
                    Some(Ok(e.clone()))
                }
                Some(_) => None,
            }
        })
        .await?
    }

    /// Stops one allocation by asking for its migration, with an
    /// `alloc-stop` evaluation of its job (the scheduler then replaces it
    /// elsewhere).
    pub async fn stop_allocation(&self, id: AllocId) -> Result<AllocStopResult, ServerApiError> {
        let snap = self.snapshot();
        let alloc = snap
            .alloc(&id)
            .ok_or_else(|| ServerApiError::NotFound("alloc not found".into()))?;
        let job = snap
            .job_by_version(&alloc.namespace, &alloc.job_id, alloc.job_version)
            .or_else(|| snap.job(&alloc.namespace, &alloc.job_id))
            .ok_or_else(|| ServerApiError::NotFound("job not found".into()))?;
        let eval = Evaluation::for_job(job, TriggeredBy::AllocStop, unix_nanos());
        let eval_id = eval.id;
        let transitions = BTreeMap::from([(
            id,
            DesiredTransition {
                migrate: Some(true),
                ..Default::default()
            },
        )]);
        let outcome = self
            .writes
            .submit(Command::AllocDesiredTransition {
                transitions,
                evals: vec![eval],
            })
            .await?;
        Ok(AllocStopResult {
            eval_id,
            index: outcome.index,
        })
    }
}
