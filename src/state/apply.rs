//! How each command changes the tables (Nomad's state store semantics).
//!
//! A `Txn` works on its own copy of the tables (cheap: persistent maps),
//! records every row it touches, and is either finished (the copy becomes
//! the new state) or dropped on the first error, so a rejected command
//! changes nothing. Index bookkeeping follows Nomad: `CreateIndex` is kept
//! across updates, `ModifyIndex` moves on every write, `JobModifyIndex` and
//! `Version` only when a job's spec changes, `AllocModifyIndex` only on
//! server-side allocation changes.

use super::changes::{
    AppliedChanges, JobKey, JobVersionKey, Row, RowChange, RowKey, TableSet, VariableKey,
};
use super::command::{AllocClientUpdate, Command, PlanResults};
use super::tables::{
    count_usage, count_usage_in, index_alloc, index_allocs_of_job, set_insert, set_remove, Tables,
};
use super::ApplyError;
use crate::structs::job::job_status;
use crate::structs::{
    AllocId, AllocStop, Allocation, ClientStatus, DesiredStatus, DesiredTransition, DrainStrategy,
    EvalId, EvalStatus, Evaluation, Job, JobChildrenSummary, JobScalingEvents, JobSummary, JobType,
    Node, NodeEvent, NodeId, NodeStatus, ScalingEvent, SchedulerConfiguration,
    SchedulingEligibility, SharedStr, TaskGroupSummary,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// How many versions of a job are kept (Nomad's `JobTrackedVersions`),
/// besides the newest stable one and versions allocations still run.
pub const JOB_TRACKED_VERSIONS: usize = 6;

/// From this many new placements on, a plan's apply runs in two stages
/// (`Txn::place_new_allocs`); below it a second thread costs more than it
/// saves.
const PARALLEL_PLACEMENTS: usize = 64;

#[cfg(test)]
thread_local! {
    /// Tests move the threshold to compare both ways of applying.
    pub(crate) static PARALLEL_PLACEMENTS_IN_TESTS: std::cell::Cell<usize> =
        const { std::cell::Cell::new(PARALLEL_PLACEMENTS) };
}

/// Counts `alloc` (replacing `old`, if any) in its group's line of a job
/// summary: a new pending allocation leaves the queue.
fn count_in_summary_row(summary: &mut JobSummary, alloc: &Allocation, old: Option<&Allocation>) {
    if !summary.summary.contains_key(&*alloc.task_group) {
        summary
            .summary
            .insert(alloc.task_group.to_string(), TaskGroupSummary::default());
    }
    let Some(tg) = summary.summary.get_mut(&*alloc.task_group) else {
        return;
    };
    match old {
        None => {
            if alloc.client_status == ClientStatus::Pending {
                tg.queued = tg.queued.saturating_sub(1);
            }
        }
        Some(old) => {
            let slot = tg.slot(old.client_status);
            *slot = slot.saturating_sub(1);
        }
    }
    *tg.slot(alloc.client_status) += 1;
}

fn parallel_placements() -> usize {
    #[cfg(test)]
    return PARALLEL_PLACEMENTS_IN_TESTS.with(std::cell::Cell::get);
    #[cfg(not(test))]
    PARALLEL_PLACEMENTS
}

#[path = "apply_acl.rs"]
mod acl;
#[path = "apply_deployment.rs"]
mod deployment;
#[path = "apply_services.rs"]
mod services;

#[path = "apply_namespaces.rs"]
mod namespaces;
#[path = "apply_variables.rs"]
mod variables;

pub(crate) struct Txn {
    t: Tables,
    index: u64,
    touched: BTreeSet<RowKey>,
    /// Jobs whose status must be recomputed at the end; `true` when
    /// evaluations were deleted (a job left with nothing is then dead,
    /// not pending, as in Nomad).
    status_refresh: BTreeMap<JobKey, bool>,
    /// The last version of each allocation this command wrote, so that
    /// listing its changes does not walk the allocation table again.
    written_allocs: HashMap<AllocId, Arc<Allocation>>,
    /// The last reason written on a stopped allocation: one plan stops
    /// many allocations for the same reason, and they share the string.
    last_stop_reason: SharedStr,
}

impl Txn {
    pub(crate) fn new(tables: Tables, index: u64) -> Self {
        Txn {
            t: tables,
            index,
            touched: BTreeSet::new(),
            status_refresh: BTreeMap::new(),
            written_allocs: HashMap::new(),
            last_stop_reason: SharedStr::default(),
        }
    }

    /// Applies `cmd`, taking it: a plan's placements move into the state
    /// instead of being copied from it (a thousand allocations a plan, and
    /// the copy and the command's drop were 2% of a loaded server's CPU).
    pub(crate) fn apply(&mut self, cmd: Command) -> Result<(), ApplyError> {
        match cmd {
            Command::ApplyPlanResults(plan) => self.apply_plan_results(plan),
            other => self.apply_borrowed(&other),
        }
    }

    fn apply_borrowed(&mut self, cmd: &Command) -> Result<(), ApplyError> {
        match cmd {
            Command::JobRegister {
                job,
                eval,
                enforce_index,
            } => self.job_register(job, eval.as_ref(), *enforce_index),
            Command::JobDispatch { job, eval } => self.job_dispatch(job, eval.as_ref()),
            Command::JobScale {
                namespace,
                job_id,
                group,
                job,
                eval,
                enforce_index,
                event,
            } => self.job_scale(
                (namespace, job_id),
                group,
                job.as_deref(),
                eval,
                *enforce_index,
                event,
            ),
            Command::JobDeregister {
                namespace,
                job_id,
                purge,
                eval,
            } => self.job_deregister(&JobKey::new(namespace, job_id), *purge, eval.as_ref()),
            Command::JobStabilityUpdate {
                namespace,
                job_id,
                version,
                stable,
            } => {
                self.job_stability(&JobKey::new(namespace, job_id), *version, *stable);
                Ok(())
            }
            Command::NodeRegister { node } => self.node_register(node),
            Command::NodeDeregister { node_ids } => self.node_deregister(node_ids),
            Command::NodeUpdateStatus {
                node_id,
                status,
                event,
                evals,
                updated_at,
            } => self.node_status(node_id, *status, *updated_at, event.as_ref(), evals),
            Command::NodeUpdateEligibility {
                node_id,
                eligibility,
                event,
                evals,
            } => self.node_eligibility(node_id, *eligibility, event.as_ref(), evals),
            Command::NodeUpdateDrain {
                node_id,
                drain,
                mark_eligible,
                event,
                evals,
            } => self.node_drain(
                node_id,
                drain.as_ref(),
                *mark_eligible,
                event.as_ref(),
                evals,
            ),
            Command::EvalUpdate { evals } => self.upsert_evals(evals),
            Command::EvalDelete {
                eval_ids,
                alloc_ids,
            } => {
                self.delete_evals_and_allocs(eval_ids, alloc_ids);
                Ok(())
            }
            // Taken by `apply`; a copy if ever reached from here.
            Command::ApplyPlanResults(results) => self.apply_plan_results(results.clone()),
            Command::AllocClientUpdate { updates, evals } => {
                self.alloc_client_updates(updates);
                self.upsert_evals(evals)
            }
            Command::AllocDesiredTransition { transitions, evals } => {
                self.alloc_desired_transitions(transitions);
                self.upsert_evals(evals)
            }
            Command::SchedulerConfigUpdate { config, cas_index } => {
                self.scheduler_config(config, *cas_index)
            }
            Command::AutopilotConfigUpdate { config, cas_index } => {
                self.autopilot_config(config, *cas_index)
            }
            Command::DeploymentStatusUpdate { update, job, eval } => {
                self.deployment_status_update(update, job.as_ref(), eval.as_ref())
            }
            Command::DeploymentPromotion {
                deployment_id,
                groups,
                eval,
            } => self.deployment_promotion(deployment_id, groups, eval.as_ref()),
            Command::DeploymentAllocHealth {
                deployment_id,
                healthy,
                unhealthy,
                timestamp,
                update,
                job,
                eval,
            } => self.deployment_alloc_health(
                deployment_id,
                healthy,
                unhealthy,
                *timestamp,
                update.as_ref(),
                job.as_ref(),
                eval.as_ref(),
            ),
            Command::DeploymentDelete { deployment_ids } => {
                self.deployment_delete(deployment_ids);
                Ok(())
            }
            Command::ReconcileJobSummaries => {
                self.reconcile_job_summaries();
                Ok(())
            }
            Command::ServiceRegistrationUpsert { services } => {
                self.upsert_services(services);
                Ok(())
            }
            Command::ServiceRegistrationDelete { namespace, ids } => {
                self.delete_services(namespace, ids)
            }
            Command::ServiceRegistrationDeleteByAlloc { alloc_ids } => {
                for id in alloc_ids {
                    self.delete_alloc_services(id);
                }
                Ok(())
            }
            Command::AclPolicyUpsert { .. }
            | Command::AclPolicyDelete { .. }
            | Command::AclTokenUpsert { .. }
            | Command::AclTokenDelete { .. }
            | Command::AclBootstrap { .. }
            | Command::AclRoleUpsert { .. }
            | Command::AclRoleDelete { .. } => self.apply_acl(cmd),
            Command::NamespaceUpsert { namespaces } => self.upsert_namespaces(namespaces),
            Command::NamespaceDelete { names } => self.delete_namespaces(names),
            keyring @ (Command::VariableUpsert { .. }
            | Command::VariableDelete { .. }
            | Command::VariableLock { .. }
            | Command::VariableRekey { .. }
            | Command::RootKeyInit { .. }
            | Command::RootKeyRotate { .. }
            | Command::RootKeySetState { .. }
            | Command::RootKeyDelete { .. }) => self.apply_keyring(keyring),
        }
    }

    /// The keyring's commands (variables and root keys).
    fn apply_keyring(&mut self, command: &Command) -> Result<(), ApplyError> {
        match command {
            Command::VariableUpsert {
                variable,
                cas,
                lock_id,
                now,
            } => self.variable_upsert(variable, *cas, lock_id.as_deref(), *now),
            Command::VariableDelete {
                namespace,
                path,
                cas,
                lock_id,
                now,
            } => self.variable_delete(
                VariableKey::new(namespace, path),
                *cas,
                lock_id.as_deref(),
                *now,
            ),
            Command::VariableLock { op, now } => self.variable_lock(op, *now),
            Command::VariableRekey { variables } => self.variable_rekey(variables),
            Command::RootKeyInit { key } => {
                self.root_key_init(key);
                Ok(())
            }
            Command::RootKeyRotate { key } => self.root_key_rotate(key),
            Command::RootKeySetState { key_id, state } => self.root_key_set_state(key_id, *state),
            Command::RootKeyDelete { key_id } => self.root_key_delete(key_id),
            other => Err(ApplyError::Invalid(format!(
                "{} is not a keyring command",
                other.name()
            ))),
        }
    }

    /// Recomputes job statuses, stamps the changed tables with the index
    /// and lists every changed row with its final value.
    pub(crate) fn finish(mut self) -> (Tables, AppliedChanges) {
        let refresh = std::mem::take(&mut self.status_refresh);
        for (key, evals_deleted) in refresh {
            self.refresh_job_status(&key, evals_deleted);
        }
        let mut tables = TableSet::default();
        let mut changes = Vec::with_capacity(self.touched.len());
        for key in std::mem::take(&mut self.touched) {
            tables.insert(key.table());
            let row = self.row(&key);
            changes.push(RowChange { key, row });
        }
        for table in tables.iter() {
            self.t.table_indexes[table.slot()] = self.index;
        }
        self.t.latest_index = self.index;
        let applied = AppliedChanges {
            index: self.index,
            command: "",
            tables,
            changes,
        };
        (self.t, applied)
    }

    fn row(&self, key: &RowKey) -> Option<Row> {
        let t = &self.t;
        match key {
            RowKey::Job(k) => t.jobs.get(k).cloned().map(Row::Job),
            RowKey::JobVersion(k) => t.job_versions.get(k).cloned().map(Row::JobVersion),
            RowKey::JobSummary(k) => t.job_summaries.get(k).cloned().map(Row::JobSummary),
            // Rows written by this command are at hand; only a deleted row
            // is missing there (and then from the table too).
            RowKey::Alloc { id, .. } => self
                .written_allocs
                .get(id)
                .or_else(|| t.allocs.get(id))
                .cloned()
                .map(Row::Alloc),
            RowKey::Eval(id) => t.evals.get(id).cloned().map(Row::Eval),
            RowKey::Node(id) => t.nodes.get(id).cloned().map(Row::Node),
            RowKey::SchedulerConfig => t.scheduler_config.clone().map(Row::SchedulerConfig),
            RowKey::AutopilotConfig => t.autopilot_config.clone().map(Row::AutopilotConfig),
            RowKey::ScalingEvents(k) => t.scaling_events.get(k).cloned().map(Row::ScalingEvents),
            RowKey::Deployment(id) => t.deployments.get(id).cloned().map(Row::Deployment),
            RowKey::Service(k) => t.services.get(k).cloned().map(Row::Service),
            RowKey::Namespace(name) => t.namespaces.get(name).cloned().map(Row::Namespace),
            RowKey::Variable(k) => t.variables.get(k).cloned().map(Row::Variable),
            RowKey::RootKey(id) => t.root_keys.get(id).cloned().map(Row::RootKey),
            RowKey::Acl(k) => t.acl.row(k).map(Row::Acl),
        }
    }

    // ---- jobs -----------------------------------------------------------

    fn job_register(
        &mut self,
        job: &Job,
        eval: Option<&Evaluation>,
        enforce_index: Option<u64>,
    ) -> Result<(), ApplyError> {
        if job.id.is_empty() || job.namespace.is_empty() {
            return Err(ApplyError::Invalid(
                "job register: the job needs an ID and a namespace".into(),
            ));
        }
        self.check_job_namespace(job)?;
        let key = JobKey::of_job(job);
        let existing = self.t.jobs.get(&key).cloned();
        if let Some(expected) = enforce_index {
            let actual = existing.as_ref().map_or(0, |j| j.job_modify_index);
            if expected != actual {
                return Err(ApplyError::JobModifyIndexConflict { expected, actual });
            }
        }
        let job_modify_index = self.upsert_job(&key, job.clone(), existing.as_deref());
        if let Some(eval) = eval {
            let mut eval = eval.clone();
            eval.job_modify_index = job_modify_index;
            self.upsert_eval(eval)?;
        }
        Ok(())
    }

    /// A dispatched child: new, and the only child of its parent with its
    /// idempotency token.
    fn job_dispatch(&mut self, job: &Job, eval: Option<&Evaluation>) -> Result<(), ApplyError> {
        let token = &job.dispatch_idempotency_token;
        if !token.is_empty() {
            let prefix = format!("{}/", job.parent_id);
            let used = self
                .t
                .jobs
                .range(JobKey::new(&job.namespace, &prefix)..)
                .take_while(|(k, _)| *k.namespace == *job.namespace && k.id.starts_with(&prefix))
                .find(|(_, j)| {
                    j.parent_id == job.parent_id && j.dispatch_idempotency_token == *token
                });
            if let Some((_, existing)) = used {
                return Err(ApplyError::DispatchTokenUsed {
                    job_id: existing.id.clone(),
                });
            }
        }
        self.job_register(job, eval, Some(0))
    }

    /// A group's count changed: the job's new version when the count
    /// moved (or only the evaluation when it did not), and the scaling
    /// event either way.
    fn job_scale(
        &mut self,
        (namespace, job_id): (&str, &str),
        group: &str,
        job: Option<&Job>,
        eval: &Option<Evaluation>,
        enforce_index: Option<u64>,
        event: &ScalingEvent,
    ) -> Result<(), ApplyError> {
        let key = JobKey::new(namespace, job_id);
        match job {
            Some(job) => self.job_register(job, eval.as_ref(), enforce_index)?,
            None if !self.t.jobs.contains_key(&key) => {
                return Err(ApplyError::JobNotFound {
                    namespace: namespace.to_string(),
                    job_id: job_id.to_string(),
                })
            }
            None => self.upsert_evals(eval.as_slice())?,
        }
        self.record_scaling_event(&key, group, event.clone());
        Ok(())
    }

    /// Adds a scaling event as the group's newest (Nomad keeps 20).
    fn record_scaling_event(&mut self, key: &JobKey, group: &str, mut event: ScalingEvent) {
        event.create_index = self.index;
        let mut events = match self.t.scaling_events.get(key) {
            Some(e) => (**e).clone(),
            None => JobScalingEvents {
                namespace: key.namespace.to_string(),
                job_id: key.id.to_string(),
                ..Default::default()
            },
        };
        events.record(group, event);
        events.modify_index = self.index;
        self.t.scaling_events.insert(key.clone(), Arc::new(events));
        self.touched.insert(RowKey::ScalingEvents(key.clone()));
    }

    /// Stores `job` as the job's current version and returns its
    /// `JobModifyIndex`. An unchanged spec leaves the stored job as it is
    /// (Nomad: same spec, same version).
    fn upsert_job(&mut self, key: &JobKey, mut job: Job, existing: Option<&Job>) -> u64 {
        let index = self.index;
        stamp_scaling_policies(&mut job, existing, index);
        match existing {
            Some(old) if !old.spec_changed(&job) => return old.job_modify_index,
            Some(old) => {
                job.create_index = old.create_index;
                job.version = old.version + 1;
                job.status = old.status.clone();
                job.status_description = old.status_description.clone();
            }
            None => {
                job.create_index = index;
                job.version = self.next_free_version(key);
                job.status.clear();
            }
        }
        job.modify_index = index;
        job.job_modify_index = index;
        job.stable = false;
        let job = Arc::new(job);
        self.ensure_summary(key, &job);
        self.put_job(key, job.clone());
        let version_key = JobVersionKey {
            job: key.clone(),
            version: job.version,
        };
        self.t.job_versions.insert(version_key.clone(), job.clone());
        self.touched.insert(RowKey::JobVersion(version_key));
        self.prune_versions(key);
        self.status_refresh.entry(key.clone()).or_insert(false);
        index
    }

    fn put_job(&mut self, key: &JobKey, job: Arc<Job>) {
        self.t.jobs.insert(key.clone(), job);
        self.touched.insert(RowKey::Job(key.clone()));
    }

    /// A purged job may leave versions behind that allocations still run;
    /// a new job with the same ID continues after them so a version number
    /// never means two different jobs.
    fn next_free_version(&self, key: &JobKey) -> u64 {
        self.version_keys(key)
            .last()
            .map_or(0, |v| v.version.saturating_add(1))
    }

    fn version_keys(&self, key: &JobKey) -> Vec<JobVersionKey> {
        let from = JobVersionKey {
            job: key.clone(),
            version: 0,
        };
        let to = JobVersionKey {
            job: key.clone(),
            version: u64::MAX,
        };
        self.t
            .job_versions
            .range(from..=to)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Drops versions outside the newest `JOB_TRACKED_VERSIONS` unless they
    /// are the newest stable version or allocations still run them. A
    /// purged job (no current version) keeps only referenced versions.
    fn prune_versions(&mut self, key: &JobKey) {
        let mut versions = self.version_keys(key);
        versions.reverse();
        let job_exists = self.t.jobs.contains_key(key);
        let keep_newest = if job_exists { JOB_TRACKED_VERSIONS } else { 0 };
        let newest_stable = versions
            .iter()
            .find(|v| self.t.job_versions.get(*v).is_some_and(|j| j.stable))
            .cloned();
        for version in versions.into_iter().skip(keep_newest) {
            let referenced = self.t.version_refs.get(&version).is_some_and(|n| *n > 0);
            let is_stable = job_exists && newest_stable.as_ref() == Some(&version);
            if !referenced && !is_stable {
                self.t.job_versions.remove(&version);
                self.touched.insert(RowKey::JobVersion(version));
            }
        }
    }

    /// Creates the job's summary, or adds groups the job gained.
    fn ensure_summary(&mut self, key: &JobKey, job: &Job) {
        let mut summary = match self.t.job_summaries.get(key) {
            Some(s) => (**s).clone(),
            None => JobSummary {
                job_id: job.id.clone(),
                namespace: job.namespace.clone(),
                create_index: self.index,
                children: is_parent(job).then(JobChildrenSummary::default),
                ..Default::default()
            },
        };
        let mut changed = !self.t.job_summaries.contains_key(key);
        for tg in &job.task_groups {
            if !summary.summary.contains_key(&tg.name) {
                summary
                    .summary
                    .insert(tg.name.clone(), TaskGroupSummary::default());
                changed = true;
            }
        }
        if is_parent(job) && summary.children.is_none() {
            summary.children = Some(JobChildrenSummary::default());
            changed = true;
        }
        if changed {
            self.put_summary(key, summary);
        }
    }

    fn put_summary(&mut self, key: &JobKey, mut summary: JobSummary) {
        summary.modify_index = self.index;
        self.t.job_summaries.insert(key.clone(), Arc::new(summary));
        self.touched.insert(RowKey::JobSummary(key.clone()));
    }

    fn job_deregister(
        &mut self,
        key: &JobKey,
        purge: bool,
        eval: Option<&Evaluation>,
    ) -> Result<(), ApplyError> {
        let Some(existing) = self.t.jobs.get(key).cloned() else {
            return Err(ApplyError::JobNotFound {
                namespace: key.namespace.to_string(),
                job_id: key.id.to_string(),
            });
        };
        let job_modify_index = if purge {
            self.purge_job(key, &existing);
            self.index
        } else {
            let mut stopped = (*existing).clone();
            stopped.stop = true;
            self.upsert_job(key, stopped, Some(&existing))
        };
        if let Some(eval) = eval {
            let mut eval = eval.clone();
            eval.job_modify_index = job_modify_index;
            self.upsert_eval(eval)?;
        }
        Ok(())
    }

    fn purge_job(&mut self, key: &JobKey, job: &Job) {
        self.t.jobs.remove(key);
        self.touched.insert(RowKey::Job(key.clone()));
        if self.t.scaling_events.remove(key).is_some() {
            self.touched.insert(RowKey::ScalingEvents(key.clone()));
        }
        if self.t.job_summaries.remove(key).is_some() {
            self.touched.insert(RowKey::JobSummary(key.clone()));
        }
        self.prune_versions(key);
        self.purge_deployments(key);
        self.update_parent_children(job, &job.status, "");
        self.status_refresh.remove(key);
    }

    fn job_stability(&mut self, key: &JobKey, version: u64, stable: bool) {
        let version_key = JobVersionKey {
            job: key.clone(),
            version,
        };
        let Some(stored) = self.t.job_versions.get(&version_key).cloned() else {
            return; // already pruned: nothing left to mark
        };
        if stored.stable == stable {
            return;
        }
        let mut marked = (*stored).clone();
        marked.stable = stable;
        self.t
            .job_versions
            .insert(version_key.clone(), Arc::new(marked));
        self.touched.insert(RowKey::JobVersion(version_key));
        if let Some(current) = self.t.jobs.get(key).cloned() {
            if current.version == version {
                let mut current = (*current).clone();
                current.stable = stable;
                current.modify_index = self.index;
                self.put_job(key, Arc::new(current));
            }
        }
        self.prune_versions(key);
    }

    /// Nomad's job status: system, periodic and parameterized jobs run
    /// until stopped; others run while an allocation is not terminal, are
    /// pending while an evaluation is not terminal, and are dead once
    /// everything they had finished.
    fn compute_job_status(&self, key: &JobKey, job: &Job, evals_deleted: bool) -> &'static str {
        if job.job_type == JobType::System || job.periodic.is_some() || job.is_parameterized() {
            return if job.stop {
                job_status::DEAD
            } else {
                job_status::RUNNING
            };
        }
        let allocs = self.t.allocs_by_job.get(key);
        let mut has_alloc = false;
        for id in allocs.into_iter().flat_map(|s| s.iter()) {
            has_alloc = true;
            if self.t.allocs.get(id).is_some_and(|a| !a.is_terminal()) {
                return job_status::RUNNING;
            }
        }
        let evals = self.t.evals_by_job.get(key);
        let mut has_eval = false;
        for id in evals.into_iter().flat_map(|s| s.iter()) {
            has_eval = true;
            if self.t.evals.get(id).is_some_and(|e| !e.is_terminal()) {
                return job_status::PENDING;
            }
        }
        if evals_deleted || has_eval || has_alloc {
            job_status::DEAD
        } else {
            job_status::PENDING
        }
    }

    fn refresh_job_status(&mut self, key: &JobKey, evals_deleted: bool) {
        let Some(job) = self.t.jobs.get(key).cloned() else {
            return;
        };
        let status = self.compute_job_status(key, &job, evals_deleted);
        if job.status == status {
            return;
        }
        let mut updated = (*job).clone();
        updated.status = status.to_string();
        updated.modify_index = self.index;
        self.put_job(key, Arc::new(updated));
        self.update_parent_children(&job, &job.status, status);
    }

    /// Keeps a periodic or parameterized parent's children counts current.
    fn update_parent_children(&mut self, child: &Job, old: &str, new: &str) {
        if child.parent_id.is_empty() || old == new {
            return;
        }
        let parent = JobKey::new(&child.namespace, &child.parent_id);
        let Some(summary) = self.t.job_summaries.get(&parent) else {
            return;
        };
        let mut summary = (**summary).clone();
        let Some(children) = summary.children.as_mut() else {
            return;
        };
        if let Some(slot) = children_slot(children, old) {
            *slot = slot.saturating_sub(1);
        }
        if let Some(slot) = children_slot(children, new) {
            *slot += 1;
        }
        self.put_summary(&parent, summary);
    }

    /// Nomad's summary reconciliation: every job's summary counted again
    /// from the allocations of this incarnation of the job (created after
    /// it; a purged job's allocations under the same ID do not count), and
    /// a parent's children from its child jobs' statuses. `Queued` is kept:
    /// it is what the job's last evaluation could not place, which no
    /// allocation records. Only summaries that differ are written.
    fn reconcile_job_summaries(&mut self) {
        let mut children: HashMap<JobKey, JobChildrenSummary> = HashMap::new();
        for child in self.t.jobs.values().filter(|j| !j.parent_id.is_empty()) {
            let parent = JobKey::new(&child.namespace, &child.parent_id);
            if let Some(slot) = children_slot(children.entry(parent).or_default(), &child.status) {
                *slot += 1;
            }
        }
        let jobs: Vec<(JobKey, Arc<Job>)> = self
            .t
            .jobs
            .iter()
            .map(|(key, job)| (key.clone(), job.clone()))
            .collect();
        for (key, job) in jobs {
            let stored = self.t.job_summaries.get(&key).cloned();
            let mut summary = JobSummary {
                job_id: job.id.clone(),
                namespace: job.namespace.clone(),
                create_index: stored.as_ref().map_or(job.create_index, |s| s.create_index),
                modify_index: stored.as_ref().map_or(0, |s| s.modify_index),
                ..Default::default()
            };
            for group in &job.task_groups {
                let queued = stored
                    .as_ref()
                    .and_then(|s| s.summary.get(&group.name))
                    .map_or(0, |tg| tg.queued);
                summary.summary.insert(
                    group.name.clone(),
                    TaskGroupSummary {
                        queued,
                        ..Default::default()
                    },
                );
            }
            if is_parent(&job) {
                summary.children = Some(children.remove(&key).unwrap_or_default());
            }
            let ids = self.t.allocs_by_job.get(&key).cloned().unwrap_or_default();
            for alloc in ids.iter().filter_map(|id| self.t.allocs.get(id)) {
                if alloc.create_index < job.create_index {
                    continue;
                }
                let tg = summary
                    .summary
                    .entry(alloc.task_group.to_string())
                    .or_default();
                *tg.slot(alloc.client_status) += 1;
            }
            if stored.as_deref() != Some(&summary) {
                self.put_summary(&key, summary);
            }
        }
    }

    // ---- nodes ----------------------------------------------------------

    fn node_register(&mut self, node: &Node) -> Result<(), ApplyError> {
        if node.id.is_nil() {
            return Err(ApplyError::Invalid(
                "node register: the node needs an ID".into(),
            ));
        }
        let mut node = node.clone();
        match self.t.nodes.get(&node.id) {
            Some(old) => {
                // The client does not know the servers' view of its node.
                node.create_index = old.create_index;
                node.drain = old.drain;
                node.drain_strategy = old.drain_strategy.clone();
                node.scheduling_eligibility = old.scheduling_eligibility;
                node.events = old.events.clone();
            }
            None => {
                node.create_index = self.index;
                for event in &mut node.events {
                    event.create_index = self.index;
                }
            }
        }
        node.modify_index = self.index;
        node.compute_class();
        self.put_node(Arc::new(node));
        Ok(())
    }

    fn put_node(&mut self, node: Arc<Node>) {
        self.touched.insert(RowKey::Node(node.id));
        self.t.nodes.insert(node.id, node);
    }

    fn node_deregister(&mut self, ids: &[NodeId]) -> Result<(), ApplyError> {
        if let Some(missing) = ids.iter().find(|id| !self.t.nodes.contains_key(*id)) {
            return Err(ApplyError::NodeNotFound(*missing));
        }
        for id in ids {
            self.t.nodes.remove(id);
            self.touched.insert(RowKey::Node(*id));
            self.delete_node_services(id);
        }
        Ok(())
    }

    fn node_status(
        &mut self,
        node_id: &NodeId,
        status: NodeStatus,
        updated_at: i64,
        event: Option<&NodeEvent>,
        evals: &[Evaluation],
    ) -> Result<(), ApplyError> {
        self.update_node(node_id, event, |node| {
            node.status = status;
            node.status_updated_at = updated_at;
            Ok(())
        })?;
        if status == NodeStatus::Down {
            self.delete_node_services(node_id);
        }
        self.upsert_evals(evals)
    }

    /// A draining node stays ineligible until its drain ends.
    fn node_eligibility(
        &mut self,
        node_id: &NodeId,
        eligibility: SchedulingEligibility,
        event: Option<&NodeEvent>,
        evals: &[Evaluation],
    ) -> Result<(), ApplyError> {
        self.update_node(node_id, event, |node| {
            if node.drain_strategy.is_some() && eligibility == SchedulingEligibility::Eligible {
                return Err(ApplyError::NodeDraining(node.id));
            }
            node.scheduling_eligibility = eligibility;
            Ok(())
        })?;
        self.upsert_evals(evals)
    }

    /// Starting a drain makes the node ineligible; ending one leaves it
    /// ineligible unless `mark_eligible` asks otherwise.
    fn node_drain(
        &mut self,
        node_id: &NodeId,
        drain: Option<&DrainStrategy>,
        mark_eligible: bool,
        event: Option<&NodeEvent>,
        evals: &[Evaluation],
    ) -> Result<(), ApplyError> {
        self.update_node(node_id, event, |node| {
            node.drain_strategy = drain.cloned();
            node.drain = drain.is_some();
            if drain.is_some() {
                node.scheduling_eligibility = SchedulingEligibility::Ineligible;
            } else if mark_eligible {
                node.scheduling_eligibility = SchedulingEligibility::Eligible;
            }
            Ok(())
        })?;
        self.upsert_evals(evals)
    }

    fn update_node(
        &mut self,
        id: &NodeId,
        event: Option<&NodeEvent>,
        change: impl FnOnce(&mut Node) -> Result<(), ApplyError>,
    ) -> Result<(), ApplyError> {
        let Some(node) = self.t.nodes.get(id) else {
            return Err(ApplyError::NodeNotFound(*id));
        };
        let mut node = (**node).clone();
        change(&mut node)?;
        if let Some(event) = event {
            let mut event = event.clone();
            event.create_index = self.index;
            node.push_event(event);
        }
        node.modify_index = self.index;
        self.put_node(Arc::new(node));
        Ok(())
    }

    // ---- evaluations ----------------------------------------------------

    fn upsert_evals(&mut self, evals: &[Evaluation]) -> Result<(), ApplyError> {
        for eval in evals {
            self.upsert_eval(eval.clone())?;
        }
        Ok(())
    }

    fn upsert_eval(&mut self, mut eval: Evaluation) -> Result<(), ApplyError> {
        if eval.id.is_nil() {
            return Err(ApplyError::Invalid("evaluation without an ID".into()));
        }
        let key = JobKey::new(&eval.namespace, &eval.job_id);
        match self.t.evals.get(&eval.id) {
            Some(old) => {
                eval.create_index = old.create_index;
                let old_key = JobKey::new(&old.namespace, &old.job_id);
                if old_key != key {
                    set_remove(&mut self.t.evals_by_job, &old_key, &eval.id);
                    self.status_refresh.entry(old_key).or_insert(false);
                }
            }
            None => eval.create_index = self.index,
        }
        eval.modify_index = self.index;
        self.set_queued_from_eval(&key, &eval);
        if eval.status == EvalStatus::Complete && eval.failed_tg_allocs.is_empty() {
            self.cancel_blocked_evals(&key, eval.id);
        }
        set_insert(&mut self.t.evals_by_job, key.clone(), eval.id);
        self.touched.insert(RowKey::Eval(eval.id));
        self.t.evals.insert(eval.id, Arc::new(eval));
        self.status_refresh.entry(key).or_insert(false);
        Ok(())
    }

    /// The scheduler reports what it could not place yet as the
    /// evaluation's `QueuedAllocations`: that is the summary's `Queued`.
    fn set_queued_from_eval(&mut self, key: &JobKey, eval: &Evaluation) {
        if eval.queued_allocations.is_empty() {
            return;
        }
        let Some(summary) = self.t.job_summaries.get(key) else {
            return;
        };
        let mut summary = (**summary).clone();
        let mut changed = false;
        for (group, queued) in &eval.queued_allocations {
            if let Some(tg) = summary.summary.get_mut(group) {
                if tg.queued != *queued {
                    tg.queued = *queued;
                    changed = true;
                }
            }
        }
        if changed {
            self.put_summary(key, summary);
        }
    }

    /// A successful evaluation of a job makes its blocked ones pointless.
    fn cancel_blocked_evals(&mut self, key: &JobKey, successful: EvalId) {
        let Some(ids) = self.t.evals_by_job.get(key).cloned() else {
            return;
        };
        for id in ids.iter().filter(|id| **id != successful) {
            let Some(blocked) = self.t.evals.get(id) else {
                continue;
            };
            if blocked.status != EvalStatus::Blocked {
                continue;
            }
            let mut canceled = (**blocked).clone();
            canceled.status = EvalStatus::Canceled;
            canceled.status_description = format!("evaluation {successful:?} successful");
            canceled.modify_index = self.index;
            self.t.evals.insert(*id, Arc::new(canceled));
            self.touched.insert(RowKey::Eval(*id));
        }
    }

    fn delete_evals_and_allocs(&mut self, eval_ids: &[EvalId], alloc_ids: &[AllocId]) {
        for id in eval_ids {
            if let Some(eval) = self.t.evals.remove(id) {
                let key = JobKey::new(&eval.namespace, &eval.job_id);
                set_remove(&mut self.t.evals_by_job, &key, id);
                self.touched.insert(RowKey::Eval(*id));
                self.status_refresh.insert(key, true);
            }
        }
        for id in alloc_ids {
            if let Some(alloc) = self.t.allocs.remove(id) {
                self.delete_alloc_services(id);
                self.written_allocs.remove(id);
                self.touched.insert(RowKey::Alloc {
                    create_index: alloc.create_index,
                    id: *id,
                });
                count_usage(&mut self.t, Some(&alloc), None);
                let key = self.unindex_alloc(&alloc);
                self.status_refresh.insert(key, true);
            }
        }
    }

    // ---- allocations ----------------------------------------------------

    fn apply_plan_results(&mut self, mut plan: PlanResults) -> Result<(), ApplyError> {
        if let Some(job) = &plan.job {
            self.ensure_job_version(job);
        }
        self.plan_deployment(&plan);
        for stop in plan.node_update.values().flatten() {
            self.stop_alloc(stop, plan.updated_at, false);
        }
        for stop in plan.node_preemptions.values().flatten() {
            self.stop_alloc(stop, plan.updated_at, true);
        }
        // Updates in place first, then new placements: a replacement
        // marks the allocation it replaces (`link_previous`) after any
        // update of that allocation in the same plan, not before it.
        let mut new = Vec::new();
        for (node_id, allocs) in std::mem::take(&mut plan.node_allocation) {
            for alloc in allocs {
                if alloc.node_id != node_id || alloc.id.is_nil() {
                    return Err(ApplyError::Invalid(format!(
                        "plan places allocation {} (node {}) under node {node_id}",
                        alloc.id, alloc.node_id
                    )));
                }
                if alloc.create_index == 0 {
                    new.push(alloc);
                } else {
                    // An update in place is stamped with the plan's time
                    // (Nomad's plan apply does the same): a deployment it
                    // joins starts its progress deadline from it.
                    let stamp = (plan.updated_at > 0).then_some(plan.updated_at);
                    self.place_alloc_at(&alloc, stamp);
                }
            }
        }
        self.place_new_allocs(new);
        self.plan_deployment_updates(&plan);
        self.upsert_evals(&plan.evals)?;
        // The planning evaluation's ModifyIndex tells a retrying worker
        // which state it must wait for.
        if let Some(eval) = self.t.evals.get(&plan.eval_id) {
            let mut eval = (**eval).clone();
            eval.modify_index = self.index;
            self.touched.insert(RowKey::Eval(eval.id));
            self.t.evals.insert(eval.id, Arc::new(eval));
        }
        Ok(())
    }

    /// Allocations reference their job version: make sure it is stored.
    fn ensure_job_version(&mut self, job: &Arc<Job>) {
        let key = JobVersionKey {
            job: JobKey::of_job(job),
            version: job.version,
        };
        if !self.t.job_versions.contains_key(&key) {
            self.t.job_versions.insert(key.clone(), job.clone());
            self.touched.insert(RowKey::JobVersion(key));
        }
    }

    fn stop_alloc(&mut self, stop: &AllocStop, now: i64, preemption: bool) {
        let Some(old) = self.t.allocs.get(&stop.id).cloned() else {
            return; // garbage collected meanwhile: nothing to stop
        };
        let mut alloc = (*old).clone();
        alloc.desired_status = if preemption {
            DesiredStatus::Evict
        } else {
            stop.desired_status
        };
        if self.last_stop_reason != *stop.desired_description {
            self.last_stop_reason = SharedStr::from(stop.desired_description.as_str());
        }
        alloc.desired_description = self.last_stop_reason.clone();
        if let Some(status) = stop.client_status {
            alloc.client_status = status;
        }
        if let Some(followup) = stop.followup_eval_id {
            alloc.links_mut().followup_eval_id = Some(followup);
        }
        if let Some(by) = stop.preempted_by {
            alloc.links_mut().preempted_by_allocation = Some(by);
        }
        alloc.modify_index = self.index;
        alloc.alloc_modify_index = self.index;
        alloc.modify_time = now;
        self.put_alloc(alloc, Some(&old));
    }

    /// A placement of an existing ID is a server-side update: the client's
    /// fields stay as the client reported them.
    fn place_alloc(&mut self, alloc: &Allocation) {
        self.place_alloc_at(alloc, None);
    }

    /// `place_alloc`, with the modify time set to `stamp` when given.
    fn place_alloc_at(&mut self, alloc: &Allocation, stamp: Option<i64>) {
        if alloc.create_index == 0 && self.place_new_alloc(alloc) {
            return;
        }
        let mut alloc = alloc.clone();
        if let Some(at) = stamp {
            alloc.modify_time = at;
        }
        let old = self.t.allocs.get(&alloc.id).cloned();
        match &old {
            Some(old) => {
                alloc.create_index = old.create_index;
                alloc.create_time = old.create_time;
                alloc.client_status = old.client_status;
                alloc.client_description = old.client_description.clone();
                alloc.task_states = old.task_states.clone();
                alloc.node_failure = old.node_failure;
            }
            None => {
                alloc.create_index = self.index;
                self.link_previous(&alloc);
            }
        }
        alloc.modify_index = self.index;
        alloc.alloc_modify_index = self.index;
        self.put_alloc(alloc, old.as_deref());
    }

    /// New placements of one plan. A large plan (a thousand placements)
    /// is the store's longest write and every worker waits on it, so its
    /// node-keyed bookkeeping (the node index and node usage, about half
    /// the work) runs on a second thread while this one inserts the rows;
    /// the job-keyed rest follows. The result is the same as placing one
    /// by one (`place_alloc`), which `a_large_plan_applies_as_its_placements_one_by_one`
    /// checks, including a placement whose ID exists after all: it takes
    /// the update path.
    fn place_new_allocs(&mut self, allocs: Vec<Allocation>) {
        if allocs.len() < parallel_placements() {
            allocs.iter().for_each(|a| self.place_alloc(a));
            return;
        }
        let index = self.index;
        let new: Vec<Arc<Allocation>> = allocs
            .into_iter()
            .map(|mut new| {
                new.create_index = index;
                new.modify_index = index;
                new.alloc_modify_index = index;
                Arc::new(new)
            })
            .collect();
        let t = &mut self.t;
        let (rows, by_node, node_usage) = (&mut t.allocs, &mut t.allocs_by_node, &mut t.node_usage);
        let existed = std::thread::scope(|scope| {
            let nodes = scope.spawn(|| {
                for a in &new {
                    count_usage_in(node_usage, None, Some(a));
                    by_node.entry(a.node_id).or_default().insert(a.id);
                }
            });
            let mut existed = Vec::new();
            for (i, a) in new.iter().enumerate() {
                if let Some(old) = rows.insert(a.clone()) {
                    rows.insert(old);
                    existed.push(i);
                }
            }
            if let Err(panic) = nodes.join() {
                std::panic::resume_unwind(panic);
            }
            existed
        });
        // An ID that existed: its usage is taken back (the update path
        // counts it again); its node index entry may stay, since the
        // update files it under this same node.
        for &i in &existed {
            count_usage(&mut self.t, Some(&new[i]), None);
        }
        let placed: Vec<&Arc<Allocation>> = (new.iter().enumerate())
            .filter(|(i, _)| existed.binary_search(i).is_err())
            .map(|(_, a)| a)
            .collect();
        self.track_placed_allocs(&placed);
        // As placed one by one: its ID was found taken, so it goes down
        // the update path, which sets the indexes again from the old row.
        for &i in &existed {
            self.place_alloc(&new[i]);
        }
    }

    /// A placement the scheduler made new (`CreateIndex` 0) is inserted
    /// without looking it up first: at a million allocations each walk of
    /// the allocation table is the larger part of applying a placement.
    /// The insert still tells whether the ID existed; if it did (the plan
    /// was wrong about it), the old row is put back and `false` sends the
    /// placement down the update path.
    fn place_new_alloc(&mut self, alloc: &Allocation) -> bool {
        let mut new = alloc.clone();
        new.create_index = self.index;
        new.modify_index = self.index;
        new.alloc_modify_index = self.index;
        let new = Arc::new(new);
        if let Some(old) = self.t.allocs.insert(new.clone()) {
            self.t.allocs.insert(old);
            return false;
        }
        self.link_previous(&new);
        self.track_alloc(&new, None);
        true
    }

    /// A replacement marks the allocation it replaces with its ID (Nomad's
    /// `NextAllocation`): the schedulers skip a finished allocation that has
    /// a successor, so it is rescheduled once, not on every evaluation.
    fn link_previous(&mut self, alloc: &Allocation) {
        let Some(prev_id) = alloc.links().previous_allocation else {
            return;
        };
        let Some(old) = self.t.allocs.get(&prev_id).cloned() else {
            return; // collected meanwhile
        };
        if old.links().next_allocation == Some(alloc.id) {
            return;
        }
        let mut prev = (*old).clone();
        prev.links_mut().next_allocation = Some(alloc.id);
        prev.modify_index = self.index;
        self.put_alloc(prev, Some(&old));
    }

    fn alloc_client_updates(&mut self, updates: &[AllocClientUpdate]) {
        for update in updates {
            let Some(old) = self.t.allocs.get(&update.id).cloned() else {
                continue; // a report on a collected allocation
            };
            let mut alloc = (*old).clone();
            alloc.client_status = update.client_status;
            // Clients say a few things ("Tasks are running"): one copy each.
            alloc.client_description = SharedStr::interned(&update.client_description);
            alloc.task_states = update.task_states.clone().into();
            alloc.node_failure = update.node_failure;
            alloc.modify_index = self.index;
            alloc.modify_time = update.modify_time;
            if let Some(status) = &update.deployment_status {
                let mut status = status.clone();
                // The canary mark is the server's, not the client's.
                status.canary = alloc.is_canary();
                status.modify_index = self.index;
                alloc.set_deployment_status(Some(status));
            }
            self.put_alloc(alloc, Some(&old));
        }
    }

    fn alloc_desired_transitions(&mut self, transitions: &BTreeMap<AllocId, DesiredTransition>) {
        for (id, transition) in transitions {
            let Some(old) = self.t.allocs.get(id).cloned() else {
                continue;
            };
            let mut alloc = (*old).clone();
            merge_transition(&mut alloc.desired_transition, transition);
            alloc.modify_index = self.index;
            alloc.alloc_modify_index = self.index;
            self.put_alloc(alloc, Some(&old));
        }
    }

    /// Stores an allocation and keeps indexes, version references and the
    /// job summary in step with it.
    fn put_alloc(&mut self, alloc: Allocation, old: Option<&Allocation>) {
        let alloc = Arc::new(alloc);
        self.track_alloc(&alloc, old);
        self.t.allocs.insert(alloc);
    }

    /// Everything that follows an allocation row but the row itself: the
    /// job summary, node usage, indexes, and the row's change record.
    fn track_alloc(&mut self, alloc: &Arc<Allocation>, old: Option<&Allocation>) {
        if alloc.client_status.is_terminal() {
            self.delete_alloc_services(&alloc.id);
        }
        match old {
            Some(old) => {
                count_usage(&mut self.t, Some(old), Some(alloc));
                self.reindex_alloc(old, alloc);
                self.track_job_part(alloc, Some(old));
            }
            None => {
                count_usage(&mut self.t, None, Some(alloc));
                set_insert(&mut self.t.allocs_by_node, alloc.node_id, alloc.id);
                self.track_placed_alloc(alloc);
            }
        }
    }

    /// `track_alloc` of a new allocation whose node index and usage are
    /// already done.
    fn track_placed_alloc(&mut self, alloc: &Arc<Allocation>) {
        self.record_alloc_write(alloc);
        self.track_placed_of_job(&[alloc]);
    }

    /// Links and tracks new allocations (in plan order) whose rows, node
    /// index and usage are already done: `link_previous` then
    /// `track_placed_alloc` for each, one by one, but with what is kept
    /// per job (its index entry, version references, summary and
    /// deployment) found once per run of allocations of one job. At a
    /// thousand placements a plan, those lookups (keys compared as
    /// strings) and a copy of the deployment per allocation were most of
    /// the store writer's time. Linking and the change records stay per
    /// allocation and in order: a placement may replace another of the
    /// same plan, whose record the link then rewrites. Linking changes
    /// none of the per-job counts (same node, version and status), so
    /// counting after the run's links gives what counting between them
    /// did.
    fn track_placed_allocs(&mut self, placed: &[&Arc<Allocation>]) {
        for alloc in placed {
            self.link_previous(alloc);
            self.record_alloc_write(alloc);
        }
        let same_job = |a: &&Arc<Allocation>, b: &&Arc<Allocation>| {
            a.namespace == b.namespace && a.job_id == b.job_id
        };
        for of_job in placed.chunk_by(same_job) {
            self.track_placed_of_job(of_job);
        }
    }

    /// The per-job side of tracking new allocations, all of one job.
    fn track_placed_of_job(&mut self, allocs: &[&Arc<Allocation>]) {
        let Some(first) = allocs.first() else {
            return;
        };
        let key = JobKey::of_alloc(first);
        let rows: Vec<&Allocation> = allocs.iter().map(|a| &***a).collect();
        index_allocs_of_job(&mut self.t, &rows);
        if let Some(summary) = self.t.job_summaries.get_mut(&key) {
            // Copied once per command, then changed in place.
            let summary = Arc::make_mut(summary);
            for alloc in allocs {
                count_in_summary_row(summary, alloc, None);
            }
            summary.modify_index = self.index;
            self.touched.insert(RowKey::JobSummary(key.clone()));
        }
        self.count_placed_in_deployments(allocs);
        self.status_refresh.entry(key).or_insert(false);
    }

    /// The row's change record: what this command wrote for `alloc`.
    fn record_alloc_write(&mut self, alloc: &Arc<Allocation>) {
        self.touched.insert(RowKey::Alloc {
            create_index: alloc.create_index,
            id: alloc.id,
        });
        self.written_allocs.insert(alloc.id, alloc.clone());
    }

    /// The job summary and the row's change record of an updated
    /// allocation (`old` its previous version).
    fn track_job_part(&mut self, alloc: &Arc<Allocation>, old: Option<&Allocation>) {
        let key = JobKey::of_alloc(alloc);
        self.count_in_summary(&key, alloc, old);
        self.count_in_deployment(alloc, old);
        self.record_alloc_write(alloc);
        self.status_refresh.entry(key).or_insert(false);
    }

    /// Moves an updated allocation's index entries where they changed. The
    /// new version reference is counted before the old one is released so
    /// a version both run is never pruned in between.
    fn reindex_alloc(&mut self, old: &Allocation, new: &Allocation) {
        let same_job = old.namespace == new.namespace && old.job_id == new.job_id;
        let same_version = same_job && old.job_version == new.job_version;
        if old.node_id == new.node_id && same_version {
            return;
        }
        index_alloc(&mut self.t, new);
        self.unindex_alloc(old);
        // Unindexing removed the ID from sets the new row shares with it.
        if old.node_id == new.node_id {
            set_insert(&mut self.t.allocs_by_node, new.node_id, new.id);
        }
        if same_job {
            set_insert(&mut self.t.allocs_by_job, JobKey::of_alloc(new), new.id);
        }
    }

    /// Removes an allocation from the secondary indexes; drops the job
    /// version it ran when nothing else needs it. Returns its job key.
    fn unindex_alloc(&mut self, alloc: &Allocation) -> JobKey {
        let key = JobKey::of_alloc(alloc);
        set_remove(&mut self.t.allocs_by_node, &alloc.node_id, &alloc.id);
        set_remove(&mut self.t.allocs_by_job, &key, &alloc.id);
        let version = JobVersionKey {
            job: key.clone(),
            version: alloc.job_version,
        };
        let remaining = match self.t.version_refs.get_mut(&version) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n
            }
            None => 0,
        };
        if remaining == 0 {
            self.t.version_refs.remove(&version);
            self.prune_versions(&key);
        }
        key
    }

    /// Nomad's summary bookkeeping: a new allocation leaves the queue and
    /// counts in its client status; a status change moves it between
    /// counters.
    fn count_in_summary(&mut self, key: &JobKey, alloc: &Allocation, old: Option<&Allocation>) {
        if old.is_some_and(|o| o.client_status == alloc.client_status) {
            return;
        }
        let index = self.index;
        let Some(summary) = self.t.job_summaries.get_mut(key) else {
            return; // deregistered job: nothing to count in
        };
        // Copied once per command, then changed in place: a plan placing a
        // thousand allocations of one job does not copy its summary 1000x.
        let summary = Arc::make_mut(summary);
        count_in_summary_row(summary, alloc, old);
        summary.modify_index = index;
        self.touched.insert(RowKey::JobSummary(key.clone()));
    }

    // ---- operator -------------------------------------------------------

    fn scheduler_config(
        &mut self,
        config: &SchedulerConfiguration,
        cas_index: Option<u64>,
    ) -> Result<(), ApplyError> {
        let current = self.t.scheduler_config.as_deref();
        let actual = current.map_or(0, |c| c.modify_index);
        if let Some(expected) = cas_index {
            if expected != actual {
                return Err(ApplyError::CasMismatch { expected, actual });
            }
        }
        let mut config = config.clone();
        config.create_index = current.map_or(self.index, |c| c.create_index);
        config.modify_index = self.index;
        self.t.scheduler_config = Some(Arc::new(config));
        self.touched.insert(RowKey::SchedulerConfig);
        Ok(())
    }

    fn autopilot_config(
        &mut self,
        config: &crate::structs::AutopilotConfiguration,
        cas_index: Option<u64>,
    ) -> Result<(), ApplyError> {
        let current = self.t.autopilot_config.as_deref();
        let actual = current.map_or(0, |c| c.modify_index);
        if let Some(expected) = cas_index {
            if expected != actual {
                return Err(ApplyError::CasMismatch { expected, actual });
            }
        }
        let mut config = config.clone();
        config.create_index = current.map_or(self.index, |c| c.create_index);
        config.modify_index = self.index;
        self.t.autopilot_config = Some(Arc::new(config));
        self.touched.insert(RowKey::AutopilotConfig);
        Ok(())
    }
}

/// Periodic and parameterized jobs launch children and count them.
fn is_parent(job: &Job) -> bool {
    job.periodic.is_some() || job.is_parameterized()
}

/// A scaling policy keeps its create index while it is the same policy
/// (same ID), and its modify index while its spec is unchanged, as in
/// Nomad's `scaling_policy` table.
fn stamp_scaling_policies(job: &mut Job, existing: Option<&Job>, index: u64) {
    for tg in &mut job.task_groups {
        let Some(policy) = tg.scaling.as_mut() else {
            continue;
        };
        let old = existing
            .and_then(|j| j.lookup_task_group(&tg.name))
            .and_then(|g| g.scaling.as_ref())
            .filter(|p| p.id == policy.id);
        match old {
            Some(old) if old.same_spec(policy) => {
                policy.create_index = old.create_index;
                policy.modify_index = old.modify_index;
            }
            Some(old) => {
                policy.create_index = old.create_index;
                policy.modify_index = index;
            }
            None => {
                policy.create_index = index;
                policy.modify_index = index;
            }
        }
    }
}

fn children_slot<'a>(children: &'a mut JobChildrenSummary, status: &str) -> Option<&'a mut u64> {
    match status {
        job_status::PENDING => Some(&mut children.pending),
        job_status::RUNNING => Some(&mut children.running),
        job_status::DEAD => Some(&mut children.dead),
        _ => None,
    }
}

/// Sets the transition's requested fields, keeping the others.
fn merge_transition(into: &mut DesiredTransition, from: &DesiredTransition) {
    if from.migrate.is_some() {
        into.migrate = from.migrate;
    }
    if from.reschedule.is_some() {
        into.reschedule = from.reschedule;
    }
    if from.force_reschedule.is_some() {
        into.force_reschedule = from.force_reschedule;
    }
}
