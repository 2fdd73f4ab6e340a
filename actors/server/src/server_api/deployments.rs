//! Deployments: Nomad's `Deployment.List`, `Deployment.GetDeployment`,
//! `Deployment.Allocations`, `Deployment.Promote`, `Deployment.Fail`,
//! `Deployment.Pause` and `Deployment.SetAllocHealth`, and a job's
//! deployments.
//!
//! The writes are what Nomad's deployment watcher does on a user's
//! behalf: each is one store command carrying the status change and the
//! evaluation that follows it (a promotion, a resume, a failure or a
//! health mark all let the scheduler act on the job again; a pause does
//! not). A failure, and an unhealthy mark, fail the deployment by the one
//! rule of `herder::deployment_failure`, auto-revert included. The store
//! refuses a change to a terminal deployment with Nomad's words.

use super::{unix_nanos, ServerApi, ServerApiError};
use herder::deployment_failure;
use herder::state::{Command, StateSnapshot};
use herder::structs::deployment::{deployment_eval, description};
use herder::structs::{
    AllocId, Allocation, Deployment, DeploymentId, DeploymentStatus, DeploymentStatusUpdate,
    EvalId, Evaluation,
};
use std::sync::Arc;

/// Nomad's `DeploymentUpdateResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentUpdateResult {
    /// The evaluation the change created; `None` for a pause (and when the
    /// job is gone).
    pub eval_id: Option<EvalId>,
    /// The index the evaluation was written at (0 without one).
    pub eval_create_index: u64,
    pub deployment_modify_index: u64,
    /// The job version an auto-revert registered again, if one did.
    pub reverted_job_version: Option<u64>,
    /// The state index at which the change is durable.
    pub index: u64,
}

/// Which canaries to promote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromoteCanaries {
    /// Every group with canaries (`All: true`).
    All,
    /// These groups only (none named: as `All`).
    Groups(Vec<String>),
}

/// The text every call answers for an unknown deployment, as Nomad's.
fn not_found() -> ServerApiError {
    ServerApiError::NotFound("deployment not found".into())
}

impl ServerApi {
    pub fn deployment(&self, id: &DeploymentId) -> Option<Arc<Deployment>> {
        self.snapshot().deployment(id).cloned()
    }

    /// The allocations a deployment placed; `None` for an unknown one.
    pub fn deployment_allocations(&self, id: &DeploymentId) -> Option<Vec<Arc<Allocation>>> {
        let snap = self.snapshot();
        snap.deployment(id)?;
        Some(snap.allocs_by_deployment(id))
    }

    /// A job's deployments, newest first.
    pub fn job_deployments(&self, namespace: &str, job_id: &str) -> Vec<Arc<Deployment>> {
        self.snapshot()
            .deployments_of_job(namespace, job_id)
            .into_iter()
            .cloned()
            .collect()
    }

    /// Promotes a deployment's canaries (refused unless every chosen
    /// group's canaries are healthy), with an evaluation of the job.
    pub async fn promote_deployment(
        &self,
        id: DeploymentId,
        which: PromoteCanaries,
    ) -> Result<DeploymentUpdateResult, ServerApiError> {
        let snap = self.snapshot();
        let d = snap.deployment(&id).ok_or_else(not_found)?;
        // The store promotes every group with canaries for no group named.
        let groups = match which {
            PromoteCanaries::All => Vec::new(),
            PromoteCanaries::Groups(groups) => groups,
        };
        let eval = job_eval(&snap, d);
        let command = Command::DeploymentPromotion {
            deployment_id: id,
            groups,
            eval: eval.clone(),
        };
        self.deployment_write(command, eval.as_ref(), None).await
    }

    /// Fails a deployment as its user asked (`deployment fail`), rolling
    /// the job back when a group has `auto_revert`.
    pub async fn fail_deployment(
        &self,
        id: DeploymentId,
    ) -> Result<DeploymentUpdateResult, ServerApiError> {
        let snap = self.snapshot();
        let d = snap.deployment(&id).ok_or_else(not_found)?;
        let failure = deployment_failure::fail(&snap, d, description::FAILED_BY_USER, unix_nanos());
        let reverted = failure.reverted_version();
        let eval = failure.eval.clone();
        self.deployment_write(failure.into_command(), eval.as_ref(), reverted)
            .await
    }

    /// Pauses (`pause`) or resumes a deployment; a resume evaluates the
    /// job again, a pause does not (as Nomad's watcher).
    pub async fn pause_deployment(
        &self,
        id: DeploymentId,
        pause: bool,
    ) -> Result<DeploymentUpdateResult, ServerApiError> {
        let snap = self.snapshot();
        let d = snap.deployment(&id).ok_or_else(not_found)?;
        let (status, text, eval) = if pause {
            (DeploymentStatus::Paused, description::PAUSED, None)
        } else {
            let text = d.running_description();
            (DeploymentStatus::Running, text, job_eval(&snap, d))
        };
        let command = Command::DeploymentStatusUpdate {
            update: DeploymentStatusUpdate {
                deployment_id: id,
                status,
                status_description: text.to_string(),
            },
            job: None,
            eval: eval.clone(),
        };
        self.deployment_write(command, eval.as_ref(), None).await
    }

    /// Marks allocations of a deployment healthy or unhealthy by hand; an
    /// unhealthy one fails the deployment (auto-revert included).
    pub async fn set_deployment_alloc_health(
        &self,
        id: DeploymentId,
        healthy: Vec<AllocId>,
        unhealthy: Vec<AllocId>,
    ) -> Result<DeploymentUpdateResult, ServerApiError> {
        if healthy.is_empty() && unhealthy.is_empty() {
            return Err(ServerApiError::Invalid(
                "must specify at least one healthy/unhealthy allocation ID".into(),
            ));
        }
        let snap = self.snapshot();
        let d = snap.deployment(&id).ok_or_else(not_found)?;
        let now = unix_nanos();
        let (update, job, eval, reverted) = if unhealthy.is_empty() {
            (None, None, job_eval(&snap, d), None)
        } else {
            let f = deployment_failure::fail(&snap, d, description::FAILED_ALLOCATIONS, now);
            let reverted = f.reverted_version();
            (Some(f.update), f.revert_to, f.eval, reverted)
        };
        let command = Command::DeploymentAllocHealth {
            deployment_id: id,
            healthy,
            unhealthy,
            timestamp: now,
            update,
            job,
            eval: eval.clone(),
        };
        self.deployment_write(command, eval.as_ref(), reverted)
            .await
    }

    /// Submits a deployment change and answers Nomad's response to it.
    async fn deployment_write(
        &self,
        command: Command,
        eval: Option<&Evaluation>,
        reverted_job_version: Option<u64>,
    ) -> Result<DeploymentUpdateResult, ServerApiError> {
        let outcome = self.writes.submit(command).await?;
        Ok(DeploymentUpdateResult {
            eval_id: eval.map(|e| e.id),
            eval_create_index: if eval.is_some() { outcome.index } else { 0 },
            deployment_modify_index: outcome.index,
            reverted_job_version,
            index: outcome.index,
        })
    }
}

/// The evaluation of the deployment's job after a change (none when the
/// job is gone).
fn job_eval(snap: &StateSnapshot, d: &Deployment) -> Option<Evaluation> {
    snap.job(&d.namespace, &d.job_id)
        .map(|job| deployment_eval(job, d.id, unix_nanos()))
}
