//! How commands change deployments (Nomad's deployment state-store
//! semantics).
//!
//! The store keeps each deployment's counts true as allocations are
//! written: a placement in a deployment counts as placed (and as a canary
//! when it is one), the first health a client or user reports counts as
//! healthy or unhealthy, and a healthy allocation pushes the group's
//! progress deadline forward. The deployment watcher then decides from the
//! counts alone. A child of `apply` so that it shares the `Txn`.

use super::super::changes::{JobKey, RowKey};
use super::super::command::PlanResults;
use super::super::tables::set_insert;
use super::super::ApplyError;
use super::Txn;
use crate::structs::{
    AllocId, Allocation, Deployment, DeploymentId, DeploymentStatusUpdate, Evaluation, Job,
};
use std::sync::Arc;

impl Txn {
    /// The plan's deployment goes in before its placements (which are
    /// counted into it); the status changes of others after.
    pub(super) fn plan_deployment(&mut self, plan: &PlanResults) {
        if let Some(d) = &plan.deployment {
            let mut d = (**d).clone();
            if let Some(stored) = self.t.deployments.get(&d.id) {
                d.keep_store_values(stored);
            }
            self.upsert_deployment(d);
        }
    }

    pub(super) fn plan_deployment_updates(&mut self, plan: &PlanResults) {
        for update in &plan.deployment_updates {
            // A deployment that finished meanwhile keeps its verdict.
            let _ = self.set_deployment_status(update);
        }
    }

    /// Stores a deployment: its create index is kept, its modify index moves.
    pub(super) fn upsert_deployment(&mut self, mut d: Deployment) {
        d.create_index = match self.t.deployments.get(&d.id) {
            Some(old) => old.create_index,
            None => self.index,
        };
        d.modify_index = self.index;
        let key = JobKey::new(&d.namespace, &d.job_id);
        set_insert(&mut self.t.deployments_by_job, key, d.id);
        self.touched.insert(RowKey::Deployment(d.id));
        self.t.deployments.insert(d.id, Arc::new(d));
    }

    fn active_deployment(&self, id: &DeploymentId, verb: &str) -> Result<Deployment, ApplyError> {
        let d = self
            .t
            .deployments
            .get(id)
            .ok_or_else(|| ApplyError::DeploymentNotFound(id.to_string()))?;
        if !d.active() {
            return Err(ApplyError::DeploymentRefused(format!(
                "can't {verb} terminal deployment"
            )));
        }
        Ok((**d).clone())
    }

    fn set_deployment_status(&mut self, update: &DeploymentStatusUpdate) -> Result<(), ApplyError> {
        let verb = match update.status {
            crate::structs::DeploymentStatus::Paused => "pause",
            crate::structs::DeploymentStatus::Running => "resume",
            crate::structs::DeploymentStatus::Failed => "fail",
            _ => "update",
        };
        let mut d = self.active_deployment(&update.deployment_id, verb)?;
        d.status = update.status;
        d.status_description = update.status_description.clone();
        // A version that deployed successfully is the one to go back to.
        if d.status == crate::structs::DeploymentStatus::Successful {
            let key = JobKey::new(&d.namespace, &d.job_id);
            self.job_stability(&key, d.job_version, true);
        }
        self.upsert_deployment(d);
        Ok(())
    }

    /// `Command::DeploymentStatusUpdate`.
    pub(super) fn deployment_status_update(
        &mut self,
        update: &DeploymentStatusUpdate,
        job: Option<&Arc<Job>>,
        eval: Option<&Evaluation>,
    ) -> Result<(), ApplyError> {
        self.set_deployment_status(update)?;
        self.deployment_followups(job, eval)
    }

    /// An auto-revert's job and the evaluation that follows a change.
    fn deployment_followups(
        &mut self,
        job: Option<&Arc<Job>>,
        eval: Option<&Evaluation>,
    ) -> Result<(), ApplyError> {
        match job {
            Some(job) => self.job_register(job, eval, None),
            None => match eval {
                Some(eval) => self.upsert_eval(eval.clone()),
                None => Ok(()),
            },
        }
    }

    /// `Command::DeploymentPromotion`.
    pub(super) fn deployment_promotion(
        &mut self,
        id: &DeploymentId,
        groups: &[String],
        eval: Option<&Evaluation>,
    ) -> Result<(), ApplyError> {
        let mut d = self.active_deployment(id, "promote")?;
        let chosen: Vec<String> = d
            .task_groups
            .iter()
            .filter(|(name, s)| {
                s.desired_canaries > 0 && (groups.is_empty() || groups.contains(name))
            })
            .map(|(name, _)| name.clone())
            .collect();
        if let Some(missing) = groups.iter().find(|g| !d.task_groups.contains_key(*g)) {
            return Err(ApplyError::DeploymentRefused(format!(
                "deployment has no task group {missing:?}"
            )));
        }
        if chosen.is_empty() {
            return Err(ApplyError::DeploymentRefused(
                "no canaries to promote".to_string(),
            ));
        }
        let mut promoted_allocs = Vec::new();
        for name in &chosen {
            let state = &d.task_groups[name];
            let canaries: Vec<Arc<Allocation>> = state
                .placed_canaries
                .iter()
                .filter_map(|a| self.t.allocs.get(a).cloned())
                .collect();
            let healthy = canaries
                .iter()
                .filter(|a| a.deployment_status().is_some_and(|s| s.is_healthy()))
                .count();
            if (healthy as u32) < state.desired_canaries {
                return Err(ApplyError::DeploymentRefused(format!(
                    "Task group {name:?} has {healthy}/{} healthy allocations",
                    state.desired_canaries
                )));
            }
            promoted_allocs.extend(canaries);
        }
        for name in &chosen {
            if let Some(state) = d.task_groups.get_mut(name) {
                state.promoted = true;
            }
        }
        d.status_description = d.running_description().to_string();
        self.upsert_deployment(d);
        // A promoted canary is an ordinary allocation of the version now.
        for old in promoted_allocs {
            let mut alloc = (*old).clone();
            if let Some(status) = alloc.deployment_status_mut() {
                status.canary = false;
                status.modify_index = self.index;
            }
            alloc.modify_index = self.index;
            self.put_alloc(alloc, Some(&old));
        }
        self.deployment_followups(None, eval)
    }

    /// `Command::DeploymentAllocHealth`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deployment_alloc_health(
        &mut self,
        id: &DeploymentId,
        healthy: &[AllocId],
        unhealthy: &[AllocId],
        timestamp: i64,
        update: Option<&DeploymentStatusUpdate>,
        job: Option<&Arc<Job>>,
        eval: Option<&Evaluation>,
    ) -> Result<(), ApplyError> {
        let d = self
            .t
            .deployments
            .get(id)
            .cloned()
            .ok_or_else(|| ApplyError::DeploymentNotFound(id.to_string()))?;
        if !d.active() {
            return Err(ApplyError::DeploymentRefused(
                "can't set health of allocations for a terminal deployment".to_string(),
            ));
        }
        let marks = healthy.iter().map(|a| (a, true));
        for (alloc_id, is_healthy) in marks.chain(unhealthy.iter().map(|a| (a, false))) {
            let old = match self.t.allocs.get(alloc_id) {
                Some(a) if a.deployment_id == Some(*id) => a.clone(),
                _ => {
                    return Err(ApplyError::DeploymentRefused(format!(
                        "Deployment {id:?} does not contain allocation {alloc_id:?}"
                    )))
                }
            };
            let mut alloc = (*old).clone();
            let status = alloc.deployment_status_or_default();
            status.healthy = Some(is_healthy);
            status.timestamp = Some(timestamp);
            status.modify_index = self.index;
            alloc.modify_index = self.index;
            self.put_alloc(alloc, Some(&old));
        }
        if let Some(update) = update {
            self.set_deployment_status(update)?;
        }
        self.deployment_followups(job, eval)
    }

    /// `Command::DeploymentDelete`.
    pub(super) fn deployment_delete(&mut self, ids: &[DeploymentId]) {
        for id in ids {
            self.remove_deployment(id);
        }
    }

    fn remove_deployment(&mut self, id: &DeploymentId) {
        let Some(d) = self.t.deployments.remove(id) else {
            return;
        };
        let key = JobKey::new(&d.namespace, &d.job_id);
        super::super::tables::set_remove(&mut self.t.deployments_by_job, &key, id);
        self.touched.insert(RowKey::Deployment(*id));
    }

    /// A purged job takes its deployments with it.
    pub(super) fn purge_deployments(&mut self, key: &JobKey) {
        let ids: Vec<DeploymentId> = self
            .t
            .deployments_by_job
            .get(key)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        for id in ids {
            self.remove_deployment(&id);
        }
    }

    /// Counts an allocation write into its deployment (the rules are
    /// `Deployment::count_alloc`, shared with the scheduler's harness).
    pub(super) fn count_in_deployment(&mut self, alloc: &Allocation, old: Option<&Allocation>) {
        if let Some(id) = alloc.deployment_id {
            self.count_into_deployment(id, [(alloc, old)]);
        }
    }

    /// `count_in_deployment` of new allocations (no old versions), the
    /// deployment copied and written once per run of allocations in the
    /// same one rather than once per allocation.
    pub(super) fn count_placed_in_deployments(&mut self, allocs: &[&Arc<Allocation>]) {
        for same in allocs.chunk_by(|a, b| a.deployment_id == b.deployment_id) {
            if let Some(id) = same.first().and_then(|a| a.deployment_id) {
                self.count_into_deployment(id, same.iter().map(|a| (&***a, None)));
            }
        }
    }

    /// Counts writes (each with its old version, if any) into deployment
    /// `id`, if it exists, and writes it once if any of them counted.
    fn count_into_deployment<'a>(
        &mut self,
        id: DeploymentId,
        writes: impl IntoIterator<Item = (&'a Allocation, Option<&'a Allocation>)>,
    ) {
        let Some(current) = self.t.deployments.get(&id) else {
            return;
        };
        let mut d = (**current).clone();
        let mut counted = false;
        for (alloc, old) in writes {
            counted |= d.count_alloc(alloc, old);
        }
        if counted {
            self.upsert_deployment(d);
        }
    }
}
