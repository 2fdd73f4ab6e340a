//! The server's operations as typed async Rust calls: what the HTTP API
//! offers, for programs that embed herder (`Agent::api()`), and the one
//! implementation of the writes the HTTP handlers share.
//!
//! Nomad splits its server into RPC endpoints (`Job.Register`, ...) that
//! the HTTP agent calls; this module is that layer. An HTTP handler decodes
//! the request, calls a method here and renders the answer, so a job
//! registered through `ServerApi::register_job` goes through exactly the
//! checks of `PUT /v1/jobs` (validation, `RejectJobRegistration`,
//! `EnforceIndex`, `PreserveCounts`) and is durable when the call returns.
//!
//! Reads return owned values or `Arc`s from one snapshot; for anything not
//! covered, `snapshot()` gives the whole read-only state.

use crate::node_tracker::{Heartbeat, NodeError, NodeReply, RegisterNode, UpdateAllocs};
use crate::server::ServerHandle;
use herder::state::{
    AllocClientUpdate, ApplyError, ApplyOutcome, Command, StateSnapshot, StoreError, Table,
    TableSet,
};
use herder::structs::job::{MAX_PRIORITY, MIN_PRIORITY};
use herder::structs::validate::JobLimits;
use herder::structs::{
    AllocId, Allocation, EvalId, EvalStatus, Evaluation, Job, Node, NodeId, TriggeredBy,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a call was refused. The class decides the HTTP status when the
/// call came over HTTP: `Invalid` 400, `NotFound` 404, `Forbidden` 403,
/// `Unavailable` 503, `Internal` 500.
#[derive(Debug, thiserror::Error)]
pub enum ServerApiError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

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

/// A cheap, clonable handle to a running server's operations.
#[derive(Clone)]
pub struct ServerApi {
    server: ServerHandle,
}

impl ServerApi {
    pub fn new(server: ServerHandle) -> ServerApi {
        ServerApi { server }
    }

    /// The whole read-only state at this moment.
    pub fn snapshot(&self) -> StateSnapshot {
        self.server.store.snapshot()
    }

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
        check_job(&job, &self.server.job_limits)?;
        if eval_priority.is_some_and(|p| !(MIN_PRIORITY..=MAX_PRIORITY).contains(&p)) {
            return Err(ServerApiError::Invalid(format!(
                "eval priority must be between {MIN_PRIORITY} and {MAX_PRIORITY}"
            )));
        }
        let snap = self.snapshot();
        if snap.scheduler_config().reject_job_registration {
            return Err(ServerApiError::Forbidden(
                "job registration, dispatch, and scale are disabled by the scheduler configuration"
                    .into(),
            ));
        }
        if preserve_counts {
            keep_stored_counts(&snap, &mut job);
        }
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
    /// (or none): the shared tail of registration, scaling and reverting.
    pub async fn write_job(
        &self,
        job: Arc<Job>,
        eval: Option<Evaluation>,
        enforce_index: Option<u64>,
    ) -> Result<JobWriteResult, ServerApiError> {
        let (namespace, id) = job.key();
        let eval_id = eval.as_ref().map(|e| e.id);
        let warnings = herder::structs::unhonoured::unhonoured_fields(&job);
        let outcome = self
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
            .submit(Command::JobDeregister {
                namespace: namespace.to_string(),
                job_id: job_id.to_string(),
                purge,
                eval,
            })
            .await?;
        Ok(self.job_write_result(namespace, job_id, eval_id, outcome.index))
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

    /// Waits until `check` answers `Some` for the state, re-checking each
    /// time one of `tables` changes (woken by the store, never polling).
    pub async fn wait_until<T>(
        &self,
        tables: TableSet,
        timeout: Duration,
        mut check: impl FnMut(&StateSnapshot) -> Option<T>,
    ) -> Result<T, ServerApiError> {
        let deadline = Instant::now() + timeout;
        loop {
            let snap = self.snapshot();
            if let Some(answer) = check(&snap) {
                return Ok(answer);
            }
            let seen = tables
                .iter()
                .map(|t| snap.table_index(t))
                .max()
                .unwrap_or(0);
            let changed = self.server.store.watch(tables, seen);
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, changed).await {
                Err(_) => return Err(ServerApiError::Timeout(timeout)),
                // The store dropped the watch: it is closing.
                Ok(Err(_)) => return Err(shutting_down()),
                Ok(Ok(_)) => {}
            }
        }
    }

    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.snapshot().nodes().cloned().collect()
    }

    pub fn node_allocations(&self, node_id: &NodeId) -> Vec<Arc<Allocation>> {
        self.snapshot().allocs_by_node(node_id).cloned().collect()
    }

    /// Registers a node (as a client agent does); the node keeps its
    /// `SecretID` for the calls below.
    pub async fn register_node(&self, node: Node) -> Result<NodeReply, ServerApiError> {
        self.server
            .nodes
            .send(RegisterNode(node))
            .await
            .map_err(mailbox)?
            .map_err(node_error)
    }

    /// A node's heartbeat; `ready: false` reports it initializing.
    pub async fn heartbeat(
        &self,
        node_id: NodeId,
        secret_id: &str,
        ready: bool,
    ) -> Result<NodeReply, ServerApiError> {
        self.server
            .nodes
            .send(Heartbeat {
                node_id,
                secret_id: secret_id.to_string(),
                ready,
            })
            .await
            .map_err(mailbox)?
            .map_err(node_error)
    }

    /// A node's report of its allocations' client status; returns the
    /// index at which it is durable.
    pub async fn update_allocations(
        &self,
        node_id: NodeId,
        secret_id: &str,
        updates: Vec<AllocClientUpdate>,
    ) -> Result<u64, ServerApiError> {
        if updates.is_empty() {
            return Err(ServerApiError::Invalid("no allocations to update".into()));
        }
        self.server
            .nodes
            .send(UpdateAllocs {
                node_id,
                secret_id: secret_id.to_string(),
                updates,
            })
            .await
            .map_err(mailbox)?
            .map_err(node_error)
    }

    /// Submits a command and waits until it is durable.
    pub async fn submit(&self, command: Command) -> Result<ApplyOutcome, ServerApiError> {
        self.server
            .store
            .submit(command)
            .await
            .map_err(|_| shutting_down())?
            .map_err(store_error)
    }
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

/// A write's outcome from the store: rejections are the caller's fault,
/// a closed or failed store is the server's.
pub fn store_error(e: StoreError) -> ServerApiError {
    match e {
        StoreError::Rejected(ApplyError::JobNotFound { .. }) => {
            ServerApiError::NotFound("job not found".into())
        }
        StoreError::Rejected(ApplyError::NodeNotFound(_)) => {
            ServerApiError::NotFound("node not found".into())
        }
        StoreError::Rejected(r) => {
            let message = r.to_string();
            // Nomad's check-and-set refusal reads "Enforcing job modify
            // index ..."; the store's sentences are lower-case.
            if message.starts_with("enforcing") {
                ServerApiError::Invalid(capitalize(&message))
            } else {
                ServerApiError::Invalid(message)
            }
        }
        StoreError::Closed => shutting_down(),
        other => ServerApiError::Internal(other.to_string()),
    }
}

fn node_error(e: NodeError) -> ServerApiError {
    match e {
        NodeError::Invalid(m) => ServerApiError::Invalid(m),
        NodeError::NotFound => ServerApiError::NotFound("node not found".into()),
        NodeError::SecretMismatch => {
            ServerApiError::Forbidden("Permission denied: node secret ID does not match".into())
        }
        NodeError::Store(s) => ServerApiError::Internal(s.to_string()),
    }
}

fn mailbox(e: actix::MailboxError) -> ServerApiError {
    ServerApiError::Unavailable(format!("the server is shutting down ({e})"))
}

fn shutting_down() -> ServerApiError {
    ServerApiError::Unavailable("the server is shutting down".into())
}

/// Nomad's messages start with a capital ("Enforcing job modify index
/// ..."); the store's errors are lower-case sentences.
fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn unix_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
