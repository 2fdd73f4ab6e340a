//! The parts of the API's answers the CLI shows, as lenient view types.
//!
//! These are deliberately not the core's `structs`: a view accepts any
//! server that answers Nomad's shapes (missing fields default, unknown
//! fields and enum values pass through as text), so the CLI keeps working
//! against a Nomad server or a newer herder. Decode them with
//! [`decode_lenient`](herder_api_client::decode_lenient), which also turns
//! Nomad's explicit `null`s into defaults.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// An element of `GET /v1/jobs`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct JobStub {
    #[serde(rename = "ID")]
    pub id: String,
    pub name: String,
    #[serde(rename = "Type")]
    pub job_type: String,
    pub priority: i64,
    pub status: String,
    pub submit_time: i64,
    pub namespace: String,
}

/// The fields of `GET /v1/job/:id` that `job status` shows.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct JobView {
    #[serde(rename = "ID")]
    pub id: String,
    pub name: String,
    #[serde(rename = "Type")]
    pub job_type: String,
    pub priority: i64,
    pub status: String,
    pub datacenters: Vec<String>,
    pub namespace: String,
    pub submit_time: i64,
    pub version: u64,
    pub stop: bool,
    /// An object when the job is periodic (herder and Nomad both answer
    /// `null` otherwise).
    pub periodic: Option<Value>,
    pub parameterized_job: Option<Value>,
    /// A dispatched child keeps its parent's `ParameterizedJob` block.
    pub dispatched: bool,
}

/// `GET /v1/job/:id/summary`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct JobSummaryView {
    #[serde(rename = "JobID")]
    pub job_id: String,
    pub summary: BTreeMap<String, GroupSummary>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct GroupSummary {
    pub queued: u64,
    pub starting: u64,
    pub running: u64,
    pub failed: u64,
    pub complete: u64,
    pub lost: u64,
}

/// An allocation as lists and `GET /v1/allocation/:id` answer it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct AllocView {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    pub name: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    pub node_name: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    pub job_version: u64,
    pub task_group: String,
    pub desired_status: String,
    pub desired_description: String,
    pub client_status: String,
    pub client_description: String,
    pub create_index: u64,
    pub create_time: i64,
    pub modify_time: i64,
    pub task_states: BTreeMap<String, TaskStateView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct TaskStateView {
    pub state: String,
    pub failed: bool,
    pub restarts: u64,
    pub events: Vec<TaskEventView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct TaskEventView {
    #[serde(rename = "Type")]
    pub event_type: String,
    /// Unix nanoseconds.
    pub time: i64,
    pub display_message: String,
    pub message: String,
}

/// An evaluation (`GET /v1/evaluation/:id` and list elements).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct EvalView {
    #[serde(rename = "ID")]
    pub id: String,
    pub priority: i64,
    #[serde(rename = "Type")]
    pub eval_type: String,
    pub triggered_by: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "DeploymentID")]
    pub deployment_id: String,
    pub status: String,
    pub status_description: String,
    pub next_eval: String,
    pub blocked_eval: String,
    #[serde(rename = "FailedTGAllocs")]
    pub failed_tg_allocs: BTreeMap<String, AllocMetricView>,
    pub create_index: u64,
    pub create_time: i64,
    pub modify_time: i64,
}

impl EvalView {
    /// Whether the evaluation will not change any more.
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "complete" | "failed" | "canceled")
    }
}

/// Why a task group could not be placed (Nomad's AllocMetric).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct AllocMetricView {
    pub nodes_evaluated: u64,
    pub nodes_filtered: u64,
    pub nodes_available: BTreeMap<String, u64>,
    pub class_filtered: BTreeMap<String, u64>,
    pub constraint_filtered: BTreeMap<String, u64>,
    pub nodes_exhausted: u64,
    pub class_exhausted: BTreeMap<String, u64>,
    pub dimension_exhausted: BTreeMap<String, u64>,
    pub quota_exhausted: Vec<String>,
    pub coalesced_failures: u64,
}

/// A node, as `GET /v1/nodes` and `GET /v1/node/:id` answer it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct NodeView {
    #[serde(rename = "ID")]
    pub id: String,
    pub name: String,
    pub datacenter: String,
    pub node_class: String,
    pub drain: bool,
    pub scheduling_eligibility: String,
    pub status: String,
    pub address: String,
    #[serde(rename = "HTTPAddr")]
    pub http_addr: String,
    pub version: String,
    pub drivers: BTreeMap<String, DriverView>,
    pub attributes: BTreeMap<String, String>,
    pub drain_strategy: Option<DrainStrategyView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct DriverView {
    pub detected: bool,
    pub healthy: bool,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct DrainStrategyView {
    /// Nanoseconds; -1 forces, 0 means no deadline.
    pub deadline: i64,
    pub ignore_system_jobs: bool,
}

/// `PUT /v1/jobs` and `DELETE /v1/job/:id` answers.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct WriteResponse {
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    pub job_modify_index: u64,
    pub warnings: String,
}

/// `POST /v1/job/:id/plan`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct PlanResponse {
    pub annotations: PlanAnnotations,
    pub diff: Option<JobDiff>,
    #[serde(rename = "FailedTGAllocs")]
    pub failed_tg_allocs: BTreeMap<String, AllocMetricView>,
    pub job_modify_index: u64,
    pub warnings: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct PlanAnnotations {
    #[serde(rename = "DesiredTGUpdates")]
    pub desired_tg_updates: BTreeMap<String, DesiredUpdates>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct DesiredUpdates {
    pub ignore: u64,
    pub place: u64,
    pub migrate: u64,
    pub stop: u64,
    pub in_place_update: u64,
    pub destructive_update: u64,
    pub canary: u64,
    pub preemptions: u64,
}

/// Nomad's job diff: a tree of objects with typed field changes.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct JobDiff {
    #[serde(rename = "Type")]
    pub diff_type: String,
    #[serde(rename = "ID")]
    pub id: String,
    pub fields: Vec<FieldDiff>,
    pub objects: Vec<ObjectDiff>,
    pub task_groups: Vec<GroupDiff>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct GroupDiff {
    #[serde(rename = "Type")]
    pub diff_type: String,
    pub name: String,
    pub fields: Vec<FieldDiff>,
    pub objects: Vec<ObjectDiff>,
    pub tasks: Vec<ObjectDiff>,
    /// Counts by kind of change ("create", "in-place update", ...).
    pub updates: BTreeMap<String, u64>,
}

/// An object or task diff: named, with fields and nested objects.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct ObjectDiff {
    #[serde(rename = "Type")]
    pub diff_type: String,
    pub name: String,
    pub fields: Vec<FieldDiff>,
    pub objects: Vec<ObjectDiff>,
    pub annotations: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct FieldDiff {
    #[serde(rename = "Type")]
    pub diff_type: String,
    pub name: String,
    pub old: String,
    pub new: String,
    pub annotations: Vec<String>,
}

/// `GET /v1/operator/scheduler/configuration`'s `SchedulerConfig`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct SchedulerConfigView {
    pub scheduler_algorithm: String,
    pub preemption_config: PreemptionView,
    pub memory_oversubscription_enabled: bool,
    pub reject_job_registration: bool,
    pub pause_eval_broker: bool,
    pub create_index: u64,
    pub modify_index: u64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct PreemptionView {
    pub system_scheduler_enabled: bool,
    pub sys_batch_scheduler_enabled: bool,
    pub batch_scheduler_enabled: bool,
    pub service_scheduler_enabled: bool,
}

/// `GET /v1/agent/schedulers` (snake_case, as Nomad).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct WorkersView {
    pub server_id: String,
    pub schedulers: Vec<WorkerView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct WorkerView {
    pub id: String,
    pub enabled_schedulers: Vec<String>,
    pub started: String,
    pub status: String,
    pub workload_status: String,
}

/// `GET|PUT /v1/agent/schedulers/config` (snake_case).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct WorkerConfigView {
    pub server_id: String,
    pub num_schedulers: u64,
    pub enabled_schedulers: Vec<String>,
}

/// A deployment as `GET /v1/deployment/:id` and the lists answer it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct DeploymentView {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "JobID")]
    pub job_id: String,
    pub job_version: u64,
    pub job_spec_modify_index: u64,
    pub status: String,
    pub status_description: String,
    pub task_groups: BTreeMap<String, DeploymentStateView>,
    pub create_index: u64,
}

impl DeploymentView {
    /// Whether the deployment will not change any more.
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "successful" | "failed" | "cancelled")
    }

    /// Some group's canaries are healthy and wait for a user to promote
    /// them: the deployment makes no progress until then.
    pub fn awaits_manual_promotion(&self) -> bool {
        self.task_groups.values().any(|g| {
            g.desired_canaries > 0
                && !g.promoted
                && !g.auto_promote
                && g.healthy_allocs >= g.desired_canaries
        })
    }
}

/// One group's progress in a deployment.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct DeploymentStateView {
    pub auto_revert: bool,
    pub auto_promote: bool,
    pub promoted: bool,
    pub desired_canaries: u64,
    pub desired_total: u64,
    pub placed_allocs: u64,
    pub healthy_allocs: u64,
    pub unhealthy_allocs: u64,
    /// Nanoseconds; 0 when the group has no progress deadline.
    pub progress_deadline: u64,
    /// RFC 3339; Nomad writes its zero time, herder `null`, before the
    /// first placement.
    pub require_progress_by: String,
}

/// Nomad's `DeploymentUpdateResponse`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct DeploymentUpdateView {
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    pub reverted_job_version: Option<u64>,
}
