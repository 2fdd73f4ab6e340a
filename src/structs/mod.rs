//! herder's domain model: jobs, nodes, allocations, evaluations, plans.
//!
//! Every type serializes to the JSON Nomad's HTTP API uses (PascalCase
//! names, durations as nanoseconds, Go's `null` for empty collections), so
//! the same structs serve the API, the state store and the scheduler.

pub mod acl;
pub mod alloc;
pub mod alloc_id;
pub mod codec;
pub mod deployment;
pub mod eval;
pub mod fit;
pub mod job;
pub mod metrics;
pub mod namespace;
pub mod node;
pub mod node_numbers;
pub mod operator;
pub mod plan;
pub mod resources;
pub mod scaling;
pub mod serde_util;
pub mod service;
pub mod shared_str;
pub mod summary;
pub mod task_files;
pub mod thin;
pub mod unhonoured;
pub mod validate;
pub mod variable;
pub mod vecmap;
pub mod version;

pub use acl::{AclPolicy, AclRole, AclToken};
pub use alloc::{
    AllocLinks, Allocation, ClientStatus, DesiredStatus, DesiredTransition, RescheduleEvent,
    RescheduleTracker, Seldom, TaskEvent, TaskState, TaskStates,
};
pub use deployment::{
    AllocDeploymentStatus, Deployment, DeploymentId, DeploymentState, DeploymentStatus,
    DeploymentStatusUpdate,
};
pub use eval::{EvalStatus, Evaluation, TriggeredBy};
pub use job::{
    Affinity, Constraint, EphemeralDisk, Job, JobType, LogConfig, MigrateStrategy,
    ParameterizedJobConfig, PeriodicConfig, ReschedulePolicy, RestartPolicy, Spread, SpreadTarget,
    Task, TaskGroup, UpdateStrategy,
};
pub use metrics::{
    AllocMetric, CountMap, MetricPacker, NodeScoreMeta, OwnScore, PackedMetric, ScoreMap,
};
pub use namespace::Namespace;
pub use node::{
    DrainStrategy, DriverInfo, Labels, Node, NodeEvent, NodeStatus, SchedulingEligibility,
};
pub use operator::{
    AutopilotConfiguration, PreemptionConfig, SchedulerAlgorithm, SchedulerConfiguration,
};
pub use plan::{AllocStop, DesiredUpdates, Plan, PlanAnnotations, PlanResult};
pub use resources::{
    AllocatedCpuResources, AllocatedMemoryResources, AllocatedResources, AllocatedSharedResources,
    AllocatedTaskResources, ComparableResources, NetworkResource, NodeCpuResources,
    NodeDiskResources, NodeMemoryResources, NodeReservedResources, NodeResources, Port, Resources,
};
pub use scaling::{JobScalingEvents, ScalingEvent, ScalingPolicy};
pub use service::{Service, ServiceCheck, ServiceRegistration};
pub use shared_str::SharedStr;
pub use summary::{JobChildrenSummary, JobSummary, TaskGroupSummary};
pub use task_files::{TaskArtifact, Template};
pub use thin::{SharedBytes, ThinStr};
pub use validate::ValidationError;
pub use variable::{
    EncryptedData, KeyMaterial, RootKey, RootKeyMeta, RootKeyState, VariableDecrypted,
    VariableEncrypted, VariableLock, VariableMetadata,
};
pub use vecmap::VecMap;

/// Node IDs are UUIDs, as Nomad's clients generate them.
pub type NodeId = uuid::Uuid;
/// Allocation IDs are UUIDs.
pub type AllocId = uuid::Uuid;
/// Evaluation IDs are UUIDs.
pub type EvalId = uuid::Uuid;

/// A fresh random ID for an allocation, evaluation or node.
pub fn new_id() -> uuid::Uuid {
    uuid::Uuid::new_v4()
}

#[cfg(test)]
pub(crate) mod fixture_tests;
