//! Commands: every change to the state, as a typed, serializable value.
//!
//! The store applies commands one after another at strictly growing
//! indexes; nothing else changes the state. Keeping each change a plain
//! value (with a versioned envelope) is what will let the same log be
//! replicated between servers later. Commands carry every input their
//! application needs, including the time, so applying one is a pure
//! function of (state, index, command).

use crate::structs::{
    AllocDeploymentStatus, AllocId, AllocStop, Allocation, ClientStatus, Deployment, DeploymentId,
    DeploymentStatusUpdate, DesiredTransition, DrainStrategy, EvalId, Evaluation, Job, Node,
    NodeEvent, NodeId, NodeStatus, ScalingEvent, SchedulerConfiguration, SchedulingEligibility,
    ServiceRegistration, TaskState, VecMap,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The version of the command encoding written by this build.
pub const COMMAND_VERSION: u32 = 1;

/// A command with the version of its encoding, as it would be logged or
/// sent to another server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CommandEnvelope {
    pub version: u32,
    pub command: Command,
}

impl CommandEnvelope {
    pub fn new(command: Command) -> Self {
        CommandEnvelope {
            version: COMMAND_VERSION,
            command,
        }
    }
}

/// One change to the state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Type", rename_all = "PascalCase")]
pub enum Command {
    /// Registers (or updates) a job, with the evaluation it triggers, at one
    /// index. `enforce_index`: the job's current `JobModifyIndex` must equal
    /// it (0 = the job must not exist).
    JobRegister {
        job: Arc<Job>,
        eval: Option<Evaluation>,
        enforce_index: Option<u64>,
    },
    /// Registers a dispatched child of a parameterized job with its
    /// evaluation. The child's ID must be new; a child with a
    /// `DispatchIdempotencyToken` is refused (`DispatchTokenUsed`, naming
    /// the earlier child) when a child of the same parent carries it.
    JobDispatch {
        job: Arc<Job>,
        eval: Option<Evaluation>,
    },
    /// A scaling request: the job's new version with the group's new
    /// count and its evaluation (when a count was asked for), and the
    /// event recorded for the group, at one index. `enforce_index` as in
    /// `JobRegister`.
    JobScale {
        namespace: String,
        job_id: String,
        group: String,
        job: Option<Arc<Job>>,
        eval: Option<Evaluation>,
        enforce_index: Option<u64>,
        event: ScalingEvent,
    },
    /// Stops a job (a new version with `Stop` set), or removes it with
    /// `purge`, with the evaluation that stops its allocations.
    JobDeregister {
        namespace: String,
        job_id: String,
        purge: bool,
        eval: Option<Evaluation>,
    },
    /// Marks a job version stable (or not), as deployments do.
    JobStabilityUpdate {
        namespace: String,
        job_id: String,
        version: u64,
        stable: bool,
    },
    /// Registers a node or updates its fingerprint. The servers' own view
    /// (drain, eligibility, events) survives a re-registration.
    NodeRegister {
        node: Arc<Node>,
    },
    NodeDeregister {
        node_ids: Vec<NodeId>,
    },
    /// A heartbeat outcome or a client's status report. `updated_at` is Unix
    /// seconds, as `StatusUpdatedAt`.
    NodeUpdateStatus {
        node_id: NodeId,
        status: NodeStatus,
        event: Option<NodeEvent>,
        evals: Vec<Evaluation>,
        updated_at: i64,
    },
    NodeUpdateEligibility {
        node_id: NodeId,
        eligibility: SchedulingEligibility,
        event: Option<NodeEvent>,
        evals: Vec<Evaluation>,
    },
    /// Starts (`Some`) or ends (`None`) a drain.
    NodeUpdateDrain {
        node_id: NodeId,
        drain: Option<DrainStrategy>,
        mark_eligible: bool,
        event: Option<NodeEvent>,
        evals: Vec<Evaluation>,
    },
    /// Inserts or updates evaluations (the broker's and schedulers' writes).
    EvalUpdate {
        evals: Vec<Evaluation>,
    },
    /// Garbage collection: removes evaluations and allocations.
    EvalDelete {
        eval_ids: Vec<EvalId>,
        alloc_ids: Vec<AllocId>,
    },
    /// What the plan applier committed of a plan.
    ApplyPlanResults(PlanResults),
    /// Client-reported allocation status.
    AllocClientUpdate {
        updates: Vec<AllocClientUpdate>,
        evals: Vec<Evaluation>,
    },
    /// Migrate / reschedule requests (drains, `alloc stop`).
    AllocDesiredTransition {
        transitions: BTreeMap<AllocId, DesiredTransition>,
        evals: Vec<Evaluation>,
    },
    /// Replaces the scheduler configuration; with `cas_index` only if its
    /// current `ModifyIndex` equals it (0 = never set).
    SchedulerConfigUpdate {
        config: SchedulerConfiguration,
        cas_index: Option<u64>,
    },
    /// Recounts every job's summary from its allocations, and a periodic
    /// or parameterized parent's children from their jobs' statuses
    /// (Nomad's `ReconcileJobSummariesRequestType`); writes the summaries
    /// that differ.
    ReconcileJobSummaries,
    /// A deployment's new status (the watcher's verdict, a user's pause,
    /// resume or fail), with the job registered by an auto-revert and the
    /// evaluation that follows, at one index. Refused for a deployment
    /// that is missing or already terminal.
    DeploymentStatusUpdate {
        update: DeploymentStatusUpdate,
        job: Option<Arc<Job>>,
        eval: Option<Evaluation>,
    },
    /// Promotes the canaries of `groups` (every group with canaries when
    /// empty): refused unless each such group's canaries are all healthy.
    DeploymentPromotion {
        deployment_id: DeploymentId,
        groups: Vec<String>,
        eval: Option<Evaluation>,
    },
    /// Sets allocations' health in a deployment by hand (`manual` health
    /// checks, `deployment allocation-health`), with an optional status
    /// update, auto-revert job and evaluation as in `DeploymentStatusUpdate`.
    /// `timestamp`: Unix nanoseconds.
    DeploymentAllocHealth {
        deployment_id: DeploymentId,
        healthy: Vec<AllocId>,
        unhealthy: Vec<AllocId>,
        timestamp: i64,
        update: Option<DeploymentStatusUpdate>,
        job: Option<Arc<Job>>,
        eval: Option<Evaluation>,
    },
    /// Garbage collection of terminal deployments.
    DeploymentDelete {
        deployment_ids: Vec<DeploymentId>,
    },
    /// Registers (or updates) services of running allocations in the
    /// native catalog (Nomad's `ServiceRegistrationUpsert`). A
    /// registration whose allocation is gone or has ended is left out, so
    /// that a late registration never outlives its allocation.
    ServiceRegistrationUpsert {
        services: Vec<ServiceRegistration>,
    },
    /// Removes registrations by ID (a user's `DELETE /v1/service/:name/:id`).
    ServiceRegistrationDelete {
        namespace: String,
        ids: Vec<String>,
    },
    /// Removes every registration of these allocations (a client's
    /// allocation stopped).
    ServiceRegistrationDeleteByAlloc {
        alloc_ids: Vec<AllocId>,
    },
}

/// The committed part of a plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PlanResults {
    /// The evaluation that planned (its `ModifyIndex` moves to this index).
    #[serde(rename = "EvalID")]
    pub eval_id: EvalId,
    /// The job version the placements run; stored as a version if missing.
    pub job: Option<Arc<Job>>,
    /// Allocations to stop, by node.
    pub node_update: HashMap<NodeId, Vec<AllocStop>>,
    /// Allocations to create or update, by node.
    pub node_allocation: HashMap<NodeId, Vec<Allocation>>,
    /// Allocations evicted to make room, by node.
    pub node_preemptions: HashMap<NodeId, Vec<AllocStop>>,
    /// Evaluations to upsert with the plan (for preempted jobs).
    pub evals: Vec<Evaluation>,
    /// Unix nanoseconds: `ModifyTime` of stopped and preempted allocations.
    pub updated_at: i64,
    /// A deployment the plan creates or changes (before its placements,
    /// which are counted into it).
    pub deployment: Option<Arc<Deployment>>,
    /// Status changes of other deployments (an older version's, cancelled).
    #[serde(with = "crate::structs::serde_util::nullable")]
    pub deployment_updates: Vec<DeploymentStatusUpdate>,
}

/// A client's report on one allocation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocClientUpdate {
    #[serde(rename = "ID")]
    pub id: AllocId,
    pub client_status: ClientStatus,
    pub client_description: String,
    pub task_states: VecMap<String, TaskState>,
    pub node_failure: bool,
    /// Unix nanoseconds, as the client saw it.
    pub modify_time: i64,
    /// The allocation's health, once the client has decided it (sent once).
    pub deployment_status: Option<AllocDeploymentStatus>,
}

impl Command {
    /// The command's name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Command::JobRegister { .. } => "JobRegister",
            Command::JobDispatch { .. } => "JobDispatch",
            Command::JobScale { .. } => "JobScale",
            Command::JobDeregister { .. } => "JobDeregister",
            Command::JobStabilityUpdate { .. } => "JobStabilityUpdate",
            Command::NodeRegister { .. } => "NodeRegister",
            Command::NodeDeregister { .. } => "NodeDeregister",
            Command::NodeUpdateStatus { .. } => "NodeUpdateStatus",
            Command::NodeUpdateEligibility { .. } => "NodeUpdateEligibility",
            Command::NodeUpdateDrain { .. } => "NodeUpdateDrain",
            Command::EvalUpdate { .. } => "EvalUpdate",
            Command::EvalDelete { .. } => "EvalDelete",
            Command::ApplyPlanResults(_) => "ApplyPlanResults",
            Command::AllocClientUpdate { .. } => "AllocClientUpdate",
            Command::AllocDesiredTransition { .. } => "AllocDesiredTransition",
            Command::SchedulerConfigUpdate { .. } => "SchedulerConfigUpdate",
            Command::ReconcileJobSummaries => "ReconcileJobSummaries",
            Command::DeploymentStatusUpdate { .. } => "DeploymentStatusUpdate",
            Command::DeploymentPromotion { .. } => "DeploymentPromotion",
            Command::DeploymentAllocHealth { .. } => "DeploymentAllocHealth",
            Command::DeploymentDelete { .. } => "DeploymentDelete",
            Command::ServiceRegistrationUpsert { .. } => "ServiceRegistrationUpsert",
            Command::ServiceRegistrationDelete { .. } => "ServiceRegistrationDelete",
            Command::ServiceRegistrationDeleteByAlloc { .. } => "ServiceRegistrationDeleteByAlloc",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs::{new_id, TriggeredBy};

    #[test]
    fn envelope_round_trips_through_json_with_its_type_tag() {
        let job = Job {
            id: "web".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        let eval = Evaluation::for_job(&job, TriggeredBy::JobRegister, 7);
        let env = CommandEnvelope::new(Command::JobRegister {
            job: Arc::new(job),
            eval: Some(eval),
            enforce_index: Some(0),
        });
        let text = serde_json::to_string(&env).unwrap();
        assert!(text.contains(r#""Type":"JobRegister""#), "{text}");
        assert!(text.contains(r#""Version":1"#), "{text}");
        let back: CommandEnvelope = serde_json::from_str(&text).unwrap();
        assert_eq!(back, env);

        let plan = CommandEnvelope::new(Command::ApplyPlanResults(PlanResults {
            eval_id: new_id(),
            updated_at: 5,
            ..Default::default()
        }));
        let text = serde_json::to_string(&plan).unwrap();
        let back: CommandEnvelope = serde_json::from_str(&text).unwrap();
        assert_eq!(back, plan);
    }
}
