//! Commands: every change to the state, as a typed, serializable value.
//!
//! The store applies commands one after another at strictly growing
//! indexes; nothing else changes the state. Keeping each change a plain
//! value (with a versioned envelope) is what will let the same log be
//! replicated between servers later. Commands carry every input their
//! application needs, including the time, so applying one is a pure
//! function of (state, index, command).

use crate::structs::{
    AclPolicy, AclRole, AclToken, AllocDeploymentStatus, AllocId, AllocStop, Allocation,
    ClientStatus, Deployment, DeploymentId, DeploymentStatusUpdate, DesiredTransition,
    DrainStrategy, EvalId, Evaluation, Job, Namespace, Node, NodeEvent, NodeId, NodeStatus,
    RootKey, RootKeyState, ScalingEvent, SchedulerConfiguration, SchedulingEligibility,
    ServiceRegistration, TaskState, VariableEncrypted, VariableLock, VecMap,
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
    /// Replaces autopilot's settings; with `cas_index` only if their
    /// current `ModifyIndex` equals it (0 = never set). Servers before
    /// 0.3.0 cannot decode it (`Command::is_autopilot`).
    AutopilotConfigUpdate {
        config: crate::structs::AutopilotConfiguration,
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
    /// Creates or replaces ACL policies by name (rules already checked).
    AclPolicyUpsert {
        policies: Vec<AclPolicy>,
    },
    /// Removes ACL policies by name; a name not stored is an error.
    AclPolicyDelete {
        names: Vec<String>,
    },
    /// Creates or replaces tokens by accessor ID (secrets and times filled
    /// in by the server).
    AclTokenUpsert {
        tokens: Vec<AclToken>,
    },
    /// Removes tokens by accessor ID; an ID not stored is an error.
    AclTokenDelete {
        accessor_ids: Vec<String>,
    },
    /// The first management token. Refused once done, unless
    /// `reset_index` is the index the cluster was bootstrapped at (the
    /// operator's reset procedure).
    AclBootstrap {
        token: AclToken,
        reset_index: u64,
    },
    /// Creates or replaces roles by ID; names are unique.
    AclRoleUpsert {
        roles: Vec<AclRole>,
    },
    /// Removes roles by ID; an ID not stored is an error.
    AclRoleDelete {
        ids: Vec<String>,
    },
    /// Creates or updates namespaces (`CreateIndex` kept across updates).
    NamespaceUpsert {
        namespaces: Vec<Namespace>,
    },
    /// Deletes namespaces: refused for `default`, a missing one, or one
    /// that still has a job that is not dead.
    NamespaceDelete {
        names: Vec<String>,
    },
    /// Writes a variable, already sealed by the server (Nomad's
    /// `VarApplyStateRequest`). `cas`: its current `ModifyIndex` must
    /// equal it (0 = it must not exist); checked here, at apply, so that
    /// the check and the write are one step of the log. A variable locked
    /// by someone else (an unexpired lock whose ID is not `lock_id`) is
    /// refused. `now` (unix nanoseconds) dates the write and ages locks.
    VariableUpsert {
        variable: VariableEncrypted,
        cas: Option<u64>,
        lock_id: Option<String>,
        now: i64,
    },
    /// Deletes a variable, with the same check-and-set and lock rules.
    VariableDelete {
        namespace: String,
        path: String,
        cas: Option<u64>,
        lock_id: Option<String>,
        now: i64,
    },
    /// Acquires, renews or releases a variable's lock (Nomad 1.7's
    /// `?lock-acquire`, `?lock-renew`, `?lock-release`).
    VariableLock {
        op: VariableLockOp,
        now: i64,
    },
    /// Replaces the sealed data of variables with the same items sealed
    /// under another key (a full key rotation); a variable written since
    /// the server read it (its `ModifyIndex` moved) is left as it is.
    VariableRekey {
        variables: Vec<VariableEncrypted>,
    },
    /// The keyring's first key: stored only when there is no key yet, so
    /// that servers racing to create it end with exactly one.
    RootKeyInit {
        key: RootKey,
    },
    /// A rotation: the new key becomes the active one and every active
    /// key inactive.
    RootKeyRotate {
        key: RootKey,
    },
    /// Sets a key's state (deprecated once a full rotation re-sealed
    /// everything it sealed).
    RootKeySetState {
        key_id: String,
        state: RootKeyState,
    },
    /// Removes a key; refused while it is active or a variable is sealed
    /// with it.
    RootKeyDelete {
        key_id: String,
    },
}

/// One lock operation on a variable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Op", rename_all = "PascalCase")]
pub enum VariableLockOp {
    /// Takes the lock (creating the variable with these items if it does
    /// not exist, as Nomad does); refused while another holds it.
    Acquire {
        variable: Box<VariableEncrypted>,
        lock: VariableLock,
    },
    /// Moves the holder's lock's expiry.
    Renew {
        namespace: String,
        path: String,
        lock_id: String,
        expires_at: i64,
    },
    /// Frees the lock; only its holder may.
    Release {
        namespace: String,
        path: String,
        lock_id: String,
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
            Command::AutopilotConfigUpdate { .. } => "AutopilotConfigUpdate",
            Command::ReconcileJobSummaries => "ReconcileJobSummaries",
            Command::DeploymentStatusUpdate { .. } => "DeploymentStatusUpdate",
            Command::DeploymentPromotion { .. } => "DeploymentPromotion",
            Command::DeploymentAllocHealth { .. } => "DeploymentAllocHealth",
            Command::DeploymentDelete { .. } => "DeploymentDelete",
            Command::ServiceRegistrationUpsert { .. } => "ServiceRegistrationUpsert",
            Command::ServiceRegistrationDelete { .. } => "ServiceRegistrationDelete",
            Command::ServiceRegistrationDeleteByAlloc { .. } => "ServiceRegistrationDeleteByAlloc",
            Command::NamespaceUpsert { .. } => "NamespaceUpsert",
            Command::NamespaceDelete { .. } => "NamespaceDelete",
            Command::VariableUpsert { .. } => "VariableUpsert",
            Command::VariableDelete { .. } => "VariableDelete",
            Command::VariableLock { .. } => "VariableLock",
            Command::VariableRekey { .. } => "VariableRekey",
            Command::RootKeyInit { .. } => "RootKeyInit",
            Command::RootKeyRotate { .. } => "RootKeyRotate",
            Command::RootKeySetState { .. } => "RootKeySetState",
            Command::RootKeyDelete { .. } => "RootKeyDelete",
            Command::AclPolicyUpsert { .. } => "ACLPolicyUpsert",
            Command::AclPolicyDelete { .. } => "ACLPolicyDeleted",
            Command::AclTokenUpsert { .. } => "ACLTokenUpsert",
            Command::AclTokenDelete { .. } => "ACLTokenDeleted",
            Command::AclBootstrap { .. } => "ACLTokenBootstrap",
            Command::AclRoleUpsert { .. } => "ACLRoleUpserted",
            Command::AclRoleDelete { .. } => "ACLRoleDeleted",
        }
    }

    /// Whether the command belongs to the keyring's commands (variables
    /// and root keys), which servers older than the version that brought
    /// them cannot decode: the replicated log writes them only when every
    /// server understands them (`herder-raft`'s version gate).
    pub fn is_keyring(&self) -> bool {
        matches!(
            self,
            Command::VariableUpsert { .. }
                | Command::VariableDelete { .. }
                | Command::VariableLock { .. }
                | Command::VariableRekey { .. }
                | Command::RootKeyInit { .. }
                | Command::RootKeyRotate { .. }
                | Command::RootKeySetState { .. }
                | Command::RootKeyDelete { .. }
        )
    }

    /// Whether the command is autopilot's configuration, which servers
    /// older than 0.3.0 cannot decode (gated as the keyring's commands).
    pub fn is_autopilot(&self) -> bool {
        matches!(self, Command::AutopilotConfigUpdate { .. })
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
