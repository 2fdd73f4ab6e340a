//! Evaluations: the unit of scheduling work.
//!
//! Anything that may change where work should run (a job registered, a node
//! down, an allocation failed) creates an evaluation; a scheduler processes
//! it and answers with a plan. Empty fields are left out of the JSON, as
//! Nomad's evaluation answers leave them out.

use super::job::JobType;
use super::metrics::AllocMetric;
use super::serde_util::{
    is_false, is_zero_duration, is_zero_i64, is_zero_u64, nanos, opt_id, rfc3339_opt,
};
use super::{EvalId, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvalStatus {
    Blocked,
    #[default]
    Pending,
    Complete,
    Failed,
    Canceled,
}

impl EvalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EvalStatus::Blocked => "blocked",
            EvalStatus::Pending => "pending",
            EvalStatus::Complete => "complete",
            EvalStatus::Failed => "failed",
            EvalStatus::Canceled => "canceled",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            EvalStatus::Complete | EvalStatus::Failed | EvalStatus::Canceled
        )
    }
}

impl fmt::Display for EvalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an evaluation was created, with Nomad's spelling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TriggeredBy {
    #[default]
    #[serde(rename = "job-register")]
    JobRegister,
    #[serde(rename = "job-deregister")]
    JobDeregister,
    #[serde(rename = "periodic-job")]
    PeriodicJob,
    #[serde(rename = "node-update")]
    NodeUpdate,
    #[serde(rename = "node-drain")]
    NodeDrain,
    #[serde(rename = "alloc-stop")]
    AllocStop,
    #[serde(rename = "alloc-failure")]
    AllocFailure,
    #[serde(rename = "rolling-update")]
    RollingUpdate,
    #[serde(rename = "deployment-watcher")]
    DeploymentWatcher,
    #[serde(rename = "failed-follow-up")]
    FailedFollowUp,
    #[serde(rename = "max-plan-attempts")]
    MaxPlanAttempts,
    #[serde(rename = "queued-allocs")]
    QueuedAllocs,
    #[serde(rename = "preemption")]
    Preemption,
    #[serde(rename = "scaling")]
    Scaling,
    #[serde(rename = "job-scaling")]
    JobScaling,
    #[serde(rename = "reconnect")]
    Reconnect,
    /// The garbage collector's own evaluations.
    #[serde(rename = "scheduled")]
    Scheduled,
}

impl TriggeredBy {
    pub fn as_str(self) -> &'static str {
        match self {
            TriggeredBy::JobRegister => "job-register",
            TriggeredBy::JobDeregister => "job-deregister",
            TriggeredBy::PeriodicJob => "periodic-job",
            TriggeredBy::NodeUpdate => "node-update",
            TriggeredBy::NodeDrain => "node-drain",
            TriggeredBy::AllocStop => "alloc-stop",
            TriggeredBy::AllocFailure => "alloc-failure",
            TriggeredBy::RollingUpdate => "rolling-update",
            TriggeredBy::DeploymentWatcher => "deployment-watcher",
            TriggeredBy::FailedFollowUp => "failed-follow-up",
            TriggeredBy::MaxPlanAttempts => "max-plan-attempts",
            TriggeredBy::QueuedAllocs => "queued-allocs",
            TriggeredBy::Preemption => "preemption",
            TriggeredBy::Scaling => "scaling",
            TriggeredBy::JobScaling => "job-scaling",
            TriggeredBy::Reconnect => "reconnect",
            TriggeredBy::Scheduled => "scheduled",
        }
    }
}

impl fmt::Display for TriggeredBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Evaluation {
    #[serde(rename = "ID")]
    pub id: EvalId,
    pub namespace: String,
    pub priority: i32,
    #[serde(rename = "Type")]
    pub eval_type: JobType,
    pub triggered_by: TriggeredBy,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub job_modify_index: u64,
    #[serde(
        rename = "NodeID",
        with = "opt_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub node_id: Option<NodeId>,
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub node_modify_index: u64,
    #[serde(rename = "DeploymentID", skip_serializing_if = "String::is_empty")]
    pub deployment_id: String,
    pub status: EvalStatus,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status_description: String,
    #[serde(with = "nanos", skip_serializing_if = "is_zero_duration")]
    pub wait: Duration,
    /// Unix nanoseconds before which the evaluation must not run.
    #[serde(with = "rfc3339_opt", skip_serializing_if = "Option::is_none")]
    pub wait_until: Option<i64>,
    #[serde(with = "opt_id", skip_serializing_if = "Option::is_none")]
    pub next_eval: Option<EvalId>,
    #[serde(with = "opt_id", skip_serializing_if = "Option::is_none")]
    pub previous_eval: Option<EvalId>,
    #[serde(with = "opt_id", skip_serializing_if = "Option::is_none")]
    pub blocked_eval: Option<EvalId>,
    #[serde(rename = "FailedTGAllocs", skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_tg_allocs: BTreeMap<String, AllocMetric>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub class_eligibility: BTreeMap<String, bool>,
    #[serde(skip_serializing_if = "is_false")]
    pub escaped_computed_class: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub annotate_plan: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub queued_allocations: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub snapshot_index: u64,
    pub create_index: u64,
    pub modify_index: u64,
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub create_time: i64,
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub modify_time: i64,
}

impl Evaluation {
    /// A new pending evaluation for a job, with a fresh ID.
    pub fn for_job(job: &super::Job, triggered_by: TriggeredBy, now_nanos: i64) -> Self {
        Evaluation {
            id: super::new_id(),
            namespace: job.namespace.clone(),
            priority: job.priority,
            eval_type: job.job_type.clone(),
            triggered_by,
            job_id: job.id.clone(),
            job_modify_index: job.job_modify_index,
            status: EvalStatus::Pending,
            create_time: now_nanos,
            modify_time: now_nanos,
            ..Default::default()
        }
    }

    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }

    /// A follow-up of this evaluation (same job, type, priority).
    pub fn follow_up(&self, triggered_by: TriggeredBy, now_nanos: i64) -> Self {
        Evaluation {
            id: super::new_id(),
            namespace: self.namespace.clone(),
            priority: self.priority,
            eval_type: self.eval_type.clone(),
            triggered_by,
            job_id: self.job_id.clone(),
            job_modify_index: self.job_modify_index,
            status: EvalStatus::Pending,
            previous_eval: Some(self.id),
            create_time: now_nanos,
            modify_time: now_nanos,
            ..Default::default()
        }
    }

    /// The (namespace, job) key the broker serialises evaluations on.
    pub fn job_key(&self) -> (String, String) {
        (self.namespace.clone(), self.job_id.clone())
    }
}
