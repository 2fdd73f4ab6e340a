//! Jobs: Nomad's `Job.Register`, `Job.Deregister`, `Job.Revert`,
//! `Job.Stable`, `Job.Dispatch`, `Job.Scale`, `Job.Evaluate` and
//! `Periodic.Force`, with the checks every transport shares.

use super::{unix_nanos, ServerApi, ServerApiError};
use herder::state::{Command, StateSnapshot};
use herder::structs::job::{MAX_PRIORITY, MIN_PRIORITY};
use herder::structs::validate::JobLimits;
use herder::structs::{Allocation, EvalId, Evaluation, Job, ScalingEvent, TaskGroup, TriggeredBy};
use std::collections::BTreeMap;
use std::sync::Arc;

pub use crate::periodic::Launched as PeriodicLaunch;

/// A job registration with Nomad's options.
#[derive(Debug, Clone)]
pub struct RegisterJob {
    /// A parsed job (`herder::jobspec::parse_any` gives one from HCL or
    /// JSON). It is canonicalized and validated again here.
    pub job: Job,
    /// Check-and-set: register only if the stored job's modify index is
    /// this (0: only if the job does not exist).
    pub enforce_index: Option<u64>,
    /// Keep the stored job's group counts (`PreserveCounts`).
    pub preserve_counts: bool,
    /// Priority of the evaluation instead of the job's (`EvalPriority`).
    pub eval_priority: Option<i32>,
}

impl RegisterJob {
    pub fn new(job: Job) -> RegisterJob {
        RegisterJob {
            job,
            enforce_index: None,
            preserve_counts: false,
            eval_priority: None,
        }
    }
}

/// Nomad's `JobRegisterResponse`.
#[derive(Debug, Clone, PartialEq)]
pub struct JobWriteResult {
    /// The evaluation the write created; `None` for periodic and
    /// parameterized parents, which are not evaluated themselves.
    pub eval_id: Option<EvalId>,
    pub eval_create_index: u64,
    pub job_modify_index: u64,
    /// The state index at which the write is durable.
    pub index: u64,
    /// What the job asks for that herder keeps but does not act on
    /// (`herder::structs::unhonoured`); empty for a deregistration.
    pub warnings: Vec<String>,
}

impl ServerApi {
    /// Registers (or updates) a job and the evaluation it triggers;
    /// returns once both are durable.
    pub async fn register_job(
        &self,
        request: RegisterJob,
    ) -> Result<JobWriteResult, ServerApiError> {
        let RegisterJob {
            mut job,
            enforce_index,
            preserve_counts,
            eval_priority,
        } = request;
        job.canonicalize();
        check_job(&job, &self.job_limits)?;
        if eval_priority.is_some_and(|p| !(MIN_PRIORITY..=MAX_PRIORITY).contains(&p)) {
            return Err(ServerApiError::Invalid(format!(
                "eval priority must be between {MIN_PRIORITY} and {MAX_PRIORITY}"
            )));
        }
        let snap = self.snapshot();
        check_registration_allowed(&snap)?;
        if preserve_counts {
            keep_stored_counts(&snap, &mut job);
        }
        job.assign_scaling_policy_ids(snap.job(&job.namespace, &job.id).map(|j| &**j));
        let now = unix_nanos();
        job.submit_time = now;
        let eval = (!job.is_template()).then(|| {
            let mut eval = Evaluation::for_job(&job, TriggeredBy::JobRegister, now);
            if let Some(p) = eval_priority {
                eval.priority = p;
            }
            eval
        });
        self.write_job(Arc::new(job), eval, enforce_index).await
    }

    /// Registers `job` as given, with an evaluation of the caller's making
    /// (or none): the shared tail of registration and dispatch.
    async fn write_job(
        &self,
        job: Arc<Job>,
        eval: Option<Evaluation>,
        enforce_index: Option<u64>,
    ) -> Result<JobWriteResult, ServerApiError> {
        let (namespace, id) = job.key();
        let eval_id = eval.as_ref().map(|e| e.id);
        let warnings = herder::structs::unhonoured::unhonoured_fields(&job);
        let outcome = self
            .writes
            .submit(Command::JobRegister {
                job,
                eval,
                enforce_index,
            })
            .await?;
        let mut result = self.job_write_result(&namespace, &id, eval_id, outcome.index);
        result.warnings = warnings;
        Ok(result)
    }

    /// Stops a job (`purge`: removes it and its history), with the
    /// evaluation that stops its allocations.
    pub async fn deregister_job(
        &self,
        namespace: &str,
        job_id: &str,
        purge: bool,
    ) -> Result<JobWriteResult, ServerApiError> {
        let snap = self.snapshot();
        let job = snap
            .job(namespace, job_id)
            .ok_or_else(|| ServerApiError::NotFound("job not found".into()))?;
        let eval = (!job.is_template())
            .then(|| Evaluation::for_job(job, TriggeredBy::JobDeregister, unix_nanos()));
        let eval_id = eval.as_ref().map(|e| e.id);
        let outcome = self
            .writes
            .submit(Command::JobDeregister {
                namespace: namespace.to_string(),
                job_id: job_id.to_string(),
                purge,
                eval,
            })
            .await?;
        Ok(self.job_write_result(namespace, job_id, eval_id, outcome.index))
    }

    /// Reverts a job to one of its stored versions (Nomad's `Job.Revert`):
    /// that version is registered again, as a new version, with every
    /// check of a registration. `enforce_prior_version`: only if the
    /// current version is this one.
    pub async fn revert_job(
        &self,
        namespace: &str,
        job_id: &str,
        version: u64,
        enforce_prior_version: Option<u64>,
    ) -> Result<JobWriteResult, ServerApiError> {
        let snap = self.snapshot();
        let current = snap
            .job(namespace, job_id)
            .ok_or_else(|| ServerApiError::NotFound(format!("job {job_id:?} not found")))?;
        if version == current.version {
            return Err(ServerApiError::Invalid(
                "can't revert to current version".into(),
            ));
        }
        let target = snap
            .job_versions(namespace, job_id)
            .find(|j| j.version == version)
            .ok_or_else(|| version_not_found(namespace, job_id, version))?;
        let mut request = RegisterJob::new((**target).clone());
        if let Some(prior) = enforce_prior_version {
            if current.version != prior {
                return Err(ServerApiError::Invalid(format!(
                    "Current job has version {}; enforcing version {prior}",
                    current.version
                )));
            }
            request.enforce_index = Some(current.job_modify_index);
        }
        self.register_job(request).await
    }

    /// Marks a stored version of a job stable or not (Nomad's
    /// `Job.Stable`); returns the index of the write.
    pub async fn set_job_stability(
        &self,
        namespace: &str,
        job_id: &str,
        version: u64,
        stable: bool,
    ) -> Result<u64, ServerApiError> {
        let snap = self.snapshot();
        if !snap
            .job_versions(namespace, job_id)
            .any(|j| j.version == version)
        {
            return Err(version_not_found(namespace, job_id, version));
        }
        let outcome = self
            .writes
            .submit(Command::JobStabilityUpdate {
                namespace: namespace.to_string(),
                job_id: job_id.to_string(),
                version,
                stable,
            })
            .await?;
        Ok(outcome.index)
    }

    /// Dispatches a parameterized job (Nomad's `Job.Dispatch`): a child
    /// `<parent>/dispatch-<unix seconds>-<8 hex>` carrying the payload and
    /// the meta, with its evaluation. A request whose idempotency token a
    /// child of the parent already carries answers that child instead.
    pub async fn dispatch_job(
        &self,
        request: DispatchJob,
    ) -> Result<DispatchResult, ServerApiError> {
        if request.job_id.is_empty() {
            return Err(ServerApiError::Invalid(
                "missing parameterized job ID".into(),
            ));
        }
        let snap = self.snapshot();
        check_registration_allowed(&snap)?;
        let parent = snap
            .job(&request.namespace, &request.job_id)
            .ok_or_else(|| ServerApiError::NotFound("parameterized job not found".into()))?;
        if !parent.is_parameterized() {
            return Err(ServerApiError::Invalid(format!(
                "Specified job {:?} is not a parameterized job",
                request.job_id
            )));
        }
        if parent.stop {
            return Err(ServerApiError::Invalid(format!(
                "Specified job {:?} is stopped",
                request.job_id
            )));
        }
        check_dispatch(&request, parent)?;
        if !request.idempotency_token.is_empty() {
            let prefix = format!("{}/", parent.id);
            let earlier = snap
                .jobs_by_id_prefix(&parent.namespace, &prefix)
                .find(|j| {
                    j.parent_id == parent.id
                        && j.dispatch_idempotency_token == request.idempotency_token
                });
            if let Some(child) = earlier {
                return Ok(DispatchResult::earlier(child));
            }
        }
        let now = unix_nanos();
        let mut child = parent.derive_child(dispatched_id(parent, &request, now), now);
        child.dispatched = true;
        child.dispatch_idempotency_token = request.idempotency_token.clone();
        child.meta.extend(request.meta.clone());
        child.payload = request.payload_base64();
        check_job(&child, &self.job_limits)?;
        let eval = (!child.is_template())
            .then(|| Evaluation::for_job(&child, TriggeredBy::JobRegister, now));
        let eval_id = eval.as_ref().map(|e| e.id);
        let child_id = child.id.clone();
        let submitted = self
            .writes
            .submit(Command::JobDispatch {
                job: Arc::new(child),
                eval,
            })
            .await;
        match submitted {
            Ok(outcome) => Ok(DispatchResult {
                dispatched_job_id: child_id,
                eval_id,
                eval_create_index: if eval_id.is_some() { outcome.index } else { 0 },
                job_create_index: outcome.index,
                index: outcome.index,
            }),
            // A concurrent dispatch with the same token came first.
            Err(ServerApiError::Invalid(_)) if !request.idempotency_token.is_empty() => {
                let snap = self.snapshot();
                let prefix = format!("{}/", request.job_id);
                let earlier = snap
                    .jobs_by_id_prefix(&request.namespace, &prefix)
                    .find(|j| j.dispatch_idempotency_token == request.idempotency_token)
                    .map(|child| DispatchResult::earlier(child));
                earlier.ok_or_else(|| ServerApiError::Internal("dispatch refused".into()))
            }
            Err(e) => Err(e),
        }
    }

    /// Scales a group (Nomad's `Job.Scale`): with a count, a new job
    /// version with that count and its evaluation; with or without one, a
    /// scaling event recorded for the group (`GET /v1/job/:id/scale`).
    pub async fn scale_job(&self, request: ScaleJob) -> Result<JobWriteResult, ServerApiError> {
        let ScaleJob {
            namespace,
            job_id,
            group,
            count,
            message,
            error,
            meta,
        } = request;
        if group.is_empty() {
            return Err(ServerApiError::Invalid(
                "missing task group name for scaling action".into(),
            ));
        }
        let new_count = scaling_count(count, error)?;
        let snap = self.snapshot();
        check_registration_allowed(&snap)?;
        let old = snap
            .job(&namespace, &job_id)
            .ok_or_else(|| ServerApiError::NotFound(format!("job {job_id:?} not found")))?;
        let tg = old.lookup_task_group(&group).ok_or_else(|| {
            ServerApiError::Invalid(format!(
                "task group {group:?} specified for scaling does not exist in job"
            ))
        })?;
        let now = unix_nanos();
        let mut event = ScalingEvent {
            time: now,
            count,
            previous_count: i64::from(tg.count),
            message,
            error,
            meta,
            ..Default::default()
        };
        let (job, eval, enforce_index) = match new_count {
            None => (None, None, None),
            Some(c) => {
                check_scaling_policy(tg, c)?;
                let (job, eval) = self.scaled_version(old, &group, c, now)?;
                event.eval_id = eval.as_ref().map(|e| e.id.to_string());
                (Some(Arc::new(job)), eval, Some(old.job_modify_index))
            }
        };
        let eval_id = eval.as_ref().map(|e| e.id);
        let changes_job = job.is_some();
        let outcome = self
            .writes
            .submit(Command::JobScale {
                namespace: namespace.clone(),
                job_id: job_id.clone(),
                group,
                job,
                eval,
                enforce_index,
                event,
            })
            .await?;
        let mut result = self.job_write_result(&namespace, &job_id, eval_id, outcome.index);
        if !changes_job {
            // Nomad answers the job's ModifyIndex when nothing changed.
            result.job_modify_index = old.modify_index;
        }
        Ok(result)
    }

    /// The job's next version with `group` at `count`, and the evaluation
    /// that places it (none for a parameterized or periodic template).
    fn scaled_version(
        &self,
        old: &Job,
        group: &str,
        count: i32,
        now: i64,
    ) -> Result<(Job, Option<Evaluation>), ServerApiError> {
        let mut job = old.clone();
        if let Some(tg) = job.task_groups.iter_mut().find(|g| g.name == group) {
            tg.count = count;
        }
        check_job(&job, &self.job_limits)?;
        job.submit_time = now;
        let eval =
            (!job.is_template()).then(|| Evaluation::for_job(&job, TriggeredBy::JobScaling, now));
        Ok((job, eval))
    }

    fn job_write_result(
        &self,
        namespace: &str,
        job_id: &str,
        eval_id: Option<EvalId>,
        index: u64,
    ) -> JobWriteResult {
        let job_modify_index = self
            .snapshot()
            .job(namespace, job_id)
            .map_or(index, |j| j.job_modify_index);
        JobWriteResult {
            eval_id,
            eval_create_index: if eval_id.is_some() { index } else { 0 },
            job_modify_index,
            index,
            warnings: Vec::new(),
        }
    }

    pub fn job(&self, namespace: &str, job_id: &str) -> Option<Arc<Job>> {
        self.snapshot().job(namespace, job_id).cloned()
    }

    pub fn jobs(&self) -> Vec<Arc<Job>> {
        self.snapshot().jobs().cloned().collect()
    }

    /// Every allocation of the job, including stopped ones.
    pub fn job_allocations(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        self.snapshot()
            .allocs_by_job(namespace, job_id)
            .cloned()
            .collect()
    }

    /// Creates an evaluation of the job now (Nomad's `Job.Evaluate`), as
    /// its registration would; periodic and parameterized parents are
    /// not evaluated themselves.
    pub async fn evaluate_job(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Result<JobWriteResult, ServerApiError> {
        let snap = self.snapshot();
        let job = snap
            .job(namespace, job_id)
            .ok_or_else(|| ServerApiError::NotFound("job not found".into()))?;
        if job.periodic.as_ref().is_some_and(|p| p.enabled) {
            return Err(ServerApiError::Invalid(
                "can't evaluate periodic job".into(),
            ));
        }
        if job.parameterized_job.is_some() {
            return Err(ServerApiError::Invalid(
                "can't evaluate parameterized job".into(),
            ));
        }
        let eval = Evaluation::for_job(job, TriggeredBy::JobRegister, unix_nanos());
        let eval_id = eval.id;
        let outcome = self
            .writes
            .submit(Command::EvalUpdate { evals: vec![eval] })
            .await?;
        Ok(JobWriteResult {
            eval_id: Some(eval_id),
            eval_create_index: outcome.index,
            job_modify_index: job.job_modify_index,
            index: outcome.index,
            warnings: Vec::new(),
        })
    }

    /// Launches a periodic job's child now, as its schedule would (Nomad's
    /// `Periodic.Force`).
    pub async fn force_periodic_launch(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Result<PeriodicLaunch, ServerApiError> {
        if self.snapshot().job(namespace, job_id).is_none() {
            return Err(ServerApiError::NotFound("job not found".into()));
        }
        self.writes
            .force_periodic(namespace.to_string(), job_id.to_string())
            .await
    }
}

/// A dispatch of a parameterized job (`PUT /v1/job/:id/dispatch`).
#[derive(Debug, Clone, Default)]
pub struct DispatchJob {
    pub namespace: String,
    /// The parameterized job.
    pub job_id: String,
    /// The input, at most [`DISPATCH_PAYLOAD_SIZE_LIMIT`] bytes.
    pub payload: Vec<u8>,
    /// Merged over the job's meta; keys must be in the job's
    /// `MetaRequired` or `MetaOptional`.
    pub meta: BTreeMap<String, String>,
    /// A retry with the same token answers the child made the first time.
    pub idempotency_token: String,
    /// Put into the child's ID after `dispatch-` (Nomad 1.5's
    /// `IdPrefixTemplate`).
    pub id_prefix_template: String,
}

impl DispatchJob {
    fn payload_base64(&self) -> String {
        use base64::Engine;
        if self.payload.is_empty() {
            return String::new();
        }
        base64::engine::general_purpose::STANDARD.encode(&self.payload)
    }
}

/// Nomad's `DispatchPayloadSizeLimit`: 16 KiB.
pub const DISPATCH_PAYLOAD_SIZE_LIMIT: usize = 16 * 1024;

/// Nomad's `JobDispatchResponse`.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchResult {
    pub dispatched_job_id: String,
    /// `None` for a periodic child (it is launched on its schedule) and
    /// for an earlier child answered for its idempotency token.
    pub eval_id: Option<EvalId>,
    pub eval_create_index: u64,
    pub job_create_index: u64,
    pub index: u64,
}

impl DispatchResult {
    /// The answer for a child dispatched earlier with the same token.
    fn earlier(child: &Job) -> DispatchResult {
        DispatchResult {
            dispatched_job_id: child.id.clone(),
            eval_id: None,
            eval_create_index: 0,
            job_create_index: child.create_index,
            index: child.modify_index,
        }
    }
}

/// A scaling request (`POST /v1/job/:id/scale`).
#[derive(Debug, Clone, Default)]
pub struct ScaleJob {
    pub namespace: String,
    pub job_id: String,
    pub group: String,
    /// The new count; `None` records an event without changing the job.
    pub count: Option<i64>,
    pub message: String,
    pub error: bool,
    pub meta: BTreeMap<String, serde_json::Value>,
}

/// The dispatched child's ID: `<parent>/dispatch-[<prefix>-]<unix>-<8 hex>`.
fn dispatched_id(parent: &Job, request: &DispatchJob, now_nanos: i64) -> String {
    let unique = herder::structs::new_id().simple().to_string();
    let secs = now_nanos / 1_000_000_000;
    let prefix = if request.id_prefix_template.is_empty() {
        String::new()
    } else {
        format!("{}-", request.id_prefix_template)
    };
    format!("{}/dispatch-{prefix}{secs}-{}", parent.id, &unique[..8])
}

/// Nomad's `validateDispatchRequest`: the payload and meta the
/// parameterized job allows.
fn check_dispatch(request: &DispatchJob, parent: &Job) -> Result<(), ServerApiError> {
    use herder::structs::job::dispatch_payload::{FORBIDDEN, REQUIRED};
    let Some(config) = &parent.parameterized_job else {
        return Ok(());
    };
    let has_input = !request.payload.is_empty();
    if config.payload == REQUIRED && !has_input {
        return Err(ServerApiError::Invalid(
            "Payload is not provided but required by parameterized job".into(),
        ));
    }
    if config.payload == FORBIDDEN && has_input {
        return Err(ServerApiError::Invalid(
            "Payload provided but forbidden by parameterized job".into(),
        ));
    }
    if request.payload.len() > DISPATCH_PAYLOAD_SIZE_LIMIT {
        return Err(ServerApiError::Invalid(format!(
            "Payload exceeds maximum size; {} > {DISPATCH_PAYLOAD_SIZE_LIMIT}",
            request.payload.len()
        )));
    }
    let unpermitted: Vec<&str> = request
        .meta
        .keys()
        .filter(|k| !config.meta_required.contains(k) && !config.meta_optional.contains(k))
        .map(String::as_str)
        .collect();
    if !unpermitted.is_empty() {
        return Err(ServerApiError::Invalid(format!(
            "Dispatch request included unpermitted metadata keys: [{}]",
            unpermitted.join(" ")
        )));
    }
    let mut missing: Vec<&str> = config
        .meta_required
        .iter()
        .filter(|k| !request.meta.contains_key(*k))
        .map(String::as_str)
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if !missing.is_empty() {
        return Err(ServerApiError::Invalid(format!(
            "Dispatch did not provide required meta keys: [{}]",
            missing.join(" ")
        )));
    }
    Ok(())
}

/// A scaling request's new count, if it sets one: never negative, never
/// with `error` (an error report changes nothing), and within a group
/// count's range.
fn scaling_count(count: Option<i64>, error: bool) -> Result<Option<i32>, ServerApiError> {
    match count {
        Some(c) if c < 0 => Err(ServerApiError::Invalid(
            "scaling action count can't be negative".into(),
        )),
        Some(_) if error => Err(ServerApiError::Invalid(
            "scaling action should not contain count if error is true".into(),
        )),
        Some(c) => i32::try_from(c).map(Some).map_err(|_| {
            ServerApiError::Invalid(format!(
                "new scaling count is too large for TaskGroup.Count (int): {c}"
            ))
        }),
        None => Ok(None),
    }
}

/// A new count must stay within the group's scaling policy, if it has one.
fn check_scaling_policy(tg: &TaskGroup, count: i32) -> Result<(), ServerApiError> {
    let Some(policy) = &tg.scaling else {
        return Ok(());
    };
    let (min, max) = (policy.min.unwrap_or(0), policy.max.unwrap_or(i64::MAX));
    let asked = i64::from(count);
    if asked < min {
        return Err(ServerApiError::Invalid(format!(
            "group count was less than scaling policy minimum: {asked} < {min}"
        )));
    }
    if max < asked {
        return Err(ServerApiError::Invalid(format!(
            "group count was greater than scaling policy maximum: {asked} > {max}"
        )));
    }
    Ok(())
}

fn check_registration_allowed(snap: &StateSnapshot) -> Result<(), ServerApiError> {
    if snap.scheduler_config().reject_job_registration {
        return Err(ServerApiError::Forbidden(
            "job registration, dispatch, and scale are disabled by the scheduler configuration"
                .into(),
        ));
    }
    Ok(())
}

fn version_not_found(namespace: &str, job_id: &str, version: u64) -> ServerApiError {
    ServerApiError::NotFound(format!(
        "job {job_id:?} in namespace {namespace:?} at version {version} not found"
    ))
}

/// The checks every registration passes, whatever the transport.
pub fn check_job(job: &Job, limits: &JobLimits) -> Result<(), ServerApiError> {
    if job.id.is_empty() {
        return Err(ServerApiError::Invalid(
            "Job ID hasn't been provided".into(),
        ));
    }
    job.validate_with(limits)
        .map_err(|e| ServerApiError::Invalid(e.to_string()))
}

fn keep_stored_counts(snap: &StateSnapshot, job: &mut Job) {
    if let Some(old) = snap.job(&job.namespace, &job.id) {
        for tg in &mut job.task_groups {
            if let Some(old_tg) = old.lookup_task_group(&tg.name) {
                tg.count = old_tg.count;
            }
        }
    }
}
