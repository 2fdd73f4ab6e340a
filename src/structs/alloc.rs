//! Allocations: one placement of a task group on a node.
//!
//! An allocation references its job by (namespace, ID, version) instead of
//! embedding a copy, as Nomad does: with a million allocations in memory the
//! copies would cost gigabytes. The HTTP layer attaches the job when it
//! answers with Nomad's shape. Strings shared by many allocations (job ID,
//! group name, namespace) are `Arc<str>`, so a clone is a pointer copy.

use super::deployment::{AllocDeploymentStatus, DeploymentId};
use super::metrics::PackedMetric;
use super::resources::AllocatedResources;
use super::serde_util::{id_or_nil, is_false, null_default, nullable, opt_id, rfc3339_opt};
use super::shared_str::SharedStr;
use super::{AllocId, EvalId, NodeId, VecMap};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What the servers want of an allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DesiredStatus {
    #[default]
    Run,
    Stop,
    Evict,
}

impl DesiredStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DesiredStatus::Run => "run",
            DesiredStatus::Stop => "stop",
            DesiredStatus::Evict => "evict",
        }
    }
}

/// What the client reports of an allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientStatus {
    #[default]
    Pending,
    Running,
    Complete,
    Failed,
    Lost,
    Unknown,
}

impl ClientStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientStatus::Pending => "pending",
            ClientStatus::Running => "running",
            ClientStatus::Complete => "complete",
            ClientStatus::Failed => "failed",
            ClientStatus::Lost => "lost",
            ClientStatus::Unknown => "unknown",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ClientStatus::Complete | ClientStatus::Failed | ClientStatus::Lost
        )
    }
}

/// Requests the servers make of an allocation besides its desired status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DesiredTransition {
    pub migrate: Option<bool>,
    pub reschedule: Option<bool>,
    pub force_reschedule: Option<bool>,
}

impl DesiredTransition {
    pub fn is_empty(&self) -> bool {
        self.migrate.is_none() && self.reschedule.is_none() && self.force_reschedule.is_none()
    }
    pub fn should_migrate(&self) -> bool {
        self.migrate == Some(true)
    }
    pub fn should_force_reschedule(&self) -> bool {
        self.force_reschedule == Some(true)
    }
}

/// One past reschedule of an allocation's lineage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RescheduleEvent {
    /// Unix nanoseconds.
    pub reschedule_time: i64,
    #[serde(rename = "PrevAllocID", deserialize_with = "id_or_nil::deserialize")]
    pub prev_alloc_id: AllocId,
    #[serde(rename = "PrevNodeID", deserialize_with = "id_or_nil::deserialize")]
    pub prev_node_id: NodeId,
    /// The delay that was applied, nanoseconds.
    #[serde(with = "super::serde_util::nanos")]
    pub delay: Duration,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RescheduleTracker {
    #[serde(with = "nullable")]
    pub events: Vec<RescheduleEvent>,
}

/// One event in a task's life, as the client reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskEvent {
    #[serde(rename = "Type", deserialize_with = "null_default::deserialize")]
    pub event_type: String,
    /// Unix nanoseconds.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub time: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub message: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub display_message: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub details: BTreeMap<String, String>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub fails_task: bool,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub exit_code: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub signal: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub driver_error: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub kill_reason: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub restart_reason: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub setup_error: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub start_delay: i64,
}

/// Task event types, as Nomad names them.
pub mod task_event {
    pub const RECEIVED: &str = "Received";
    pub const SETUP: &str = "Task Setup";
    pub const STARTED: &str = "Started";
    pub const TERMINATED: &str = "Terminated";
    pub const RESTARTING: &str = "Restarting";
    pub const NOT_RESTARTING: &str = "Not Restarting";
    pub const KILLING: &str = "Killing";
    pub const KILLED: &str = "Killed";
    /// Another task of the allocation failed: this one is killed.
    pub const SIBLING_FAILED: &str = "Sibling Task Failed";
    /// The group's leader task is dead: this one is killed.
    pub const LEADER_DEAD: &str = "Leader Task Dead";
    pub const DRIVER_FAILURE: &str = "Driver Failure";
    pub const SETUP_FAILURE: &str = "Setup Failure";
    /// A user asked for the task to be restarted (`alloc restart`).
    pub const RESTART_SIGNALED: &str = "Restart Signaled";
    /// A user's signal is being sent to the task (`alloc signal`).
    pub const SIGNALING: &str = "Signaling";
    /// The client fetches the task's artifacts before it starts.
    pub const DOWNLOADING_ARTIFACTS: &str = "Downloading Artifacts";
    pub const ARTIFACT_DOWNLOAD_FAILED: &str = "Failed Artifact Download";
}

/// The state of one task of an allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskState {
    /// "pending", "running" or "dead".
    #[serde(deserialize_with = "null_default::deserialize")]
    pub state: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub failed: bool,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub restarts: u64,
    #[serde(with = "rfc3339_opt")]
    pub last_restart: Option<i64>,
    #[serde(with = "rfc3339_opt")]
    pub started_at: Option<i64>,
    #[serde(with = "rfc3339_opt")]
    pub finished_at: Option<i64>,
    #[serde(with = "nullable")]
    pub events: Vec<TaskEvent>,
}

/// What only some allocations carry: the links of a replacement chain,
/// the reschedule history, the follow-up evaluation of a delayed
/// reschedule, and preemption in either direction. The JSON fields are
/// Nomad's, at the allocation's top level.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocLinks {
    #[serde(
        rename = "PreviousAllocation",
        with = "opt_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub previous_allocation: Option<AllocId>,
    #[serde(
        rename = "NextAllocation",
        with = "opt_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub next_allocation: Option<AllocId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reschedule_tracker: Option<RescheduleTracker>,
    #[serde(
        rename = "FollowupEvalID",
        with = "opt_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub followup_eval_id: Option<EvalId>,
    #[serde(
        deserialize_with = "nullable::deserialize",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub preempted_allocations: Vec<AllocId>,
    #[serde(
        rename = "PreemptedByAllocation",
        with = "opt_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub preempted_by_allocation: Option<AllocId>,
}

impl AllocLinks {
    pub(crate) const NONE: AllocLinks = AllocLinks {
        previous_allocation: None,
        next_allocation: None,
        reschedule_tracker: None,
        followup_eval_id: None,
        preempted_allocations: Vec::new(),
        preempted_by_allocation: None,
    };

    fn is_none(&self) -> bool {
        *self == AllocLinks::NONE
    }
}

/// An allocation's [`AllocLinks`] behind one pointer, none at all for
/// most allocations: inline they were 116 of an allocation's 456 bytes,
/// 110 MB of a server holding a million allocations. Compares, prints
/// and serializes as the links it holds (absent ones as empty).
#[derive(Clone, Default)]
pub struct Links(Option<Box<AllocLinks>>);

impl Links {
    /// `links`, boxed only when there is something in them.
    pub fn new(links: AllocLinks) -> Links {
        Links((!links.is_none()).then(|| Box::new(links)))
    }

    pub fn get(&self) -> &AllocLinks {
        static NONE: AllocLinks = AllocLinks::NONE;
        self.0.as_deref().unwrap_or(&NONE)
    }

    /// The links to change (boxed from now on).
    pub fn get_mut(&mut self) -> &mut AllocLinks {
        self.0.get_or_insert_with(Box::default)
    }
}

impl PartialEq for Links {
    fn eq(&self, other: &Links) -> bool {
        self.get() == other.get()
    }
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl Serialize for Links {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Links {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Links, D::Error> {
        AllocLinks::deserialize(d).map(Links::new)
    }
}

/// An allocation's task states by task: none until its client first
/// reports, so kept behind one pointer (a vector's three words inline were
/// 16 of the allocation's bytes). Reads as the map (empty when none);
/// changing it creates the map.
#[derive(Clone, Debug, Default)]
pub struct TaskStates(Option<Box<VecMap<String, TaskState>>>);

static NO_TASK_STATES: VecMap<String, TaskState> = VecMap::empty();

impl std::ops::Deref for TaskStates {
    type Target = VecMap<String, TaskState>;
    fn deref(&self) -> &Self::Target {
        self.0.as_deref().unwrap_or(&NO_TASK_STATES)
    }
}

impl std::ops::DerefMut for TaskStates {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.get_or_insert_with(Default::default)
    }
}

impl PartialEq for TaskStates {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl From<VecMap<String, TaskState>> for TaskStates {
    fn from(states: VecMap<String, TaskState>) -> Self {
        TaskStates((!states.is_empty()).then(|| Box::new(states)))
    }
}

impl FromIterator<(String, TaskState)> for TaskStates {
    fn from_iter<I: IntoIterator<Item = (String, TaskState)>>(states: I) -> Self {
        TaskStates::from(states.into_iter().collect::<VecMap<_, _>>())
    }
}

impl nullable::IsEmpty for TaskStates {
    fn is_empty_collection(&self) -> bool {
        self.is_empty()
    }
}

impl Serialize for TaskStates {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for TaskStates {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TaskStates, D::Error> {
        VecMap::deserialize(d).map(TaskStates::from)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Allocation {
    #[serde(rename = "ID")]
    pub id: AllocId,
    pub namespace: SharedStr,
    #[serde(rename = "EvalID")]
    pub eval_id: EvalId,
    /// `<job>.<group>[<index>]` (a `Box<str>`: set once, never grown).
    pub name: Box<str>,
    #[serde(rename = "NodeID", deserialize_with = "id_or_nil::deserialize")]
    pub node_id: NodeId,
    pub node_name: SharedStr,
    #[serde(rename = "JobID")]
    pub job_id: SharedStr,
    /// The version of the job this allocation runs (herder keeps a
    /// reference, not a copy; the API attaches the job as `Job`).
    pub job_version: u64,
    pub task_group: SharedStr,
    /// Shared between the allocations of a group placed with the same
    /// grant (no ports of their own): most of a job's allocations.
    pub allocated_resources: Arc<AllocatedResources>,
    /// Packed: kept by every allocation, read by almost nobody.
    pub metrics: Option<PackedMetric>,
    pub desired_status: DesiredStatus,
    /// The servers' few reasons, shared like the names; the client's
    /// description is a `Box<str>`, not a `String` (set once, never grown).
    #[serde(
        deserialize_with = "null_default::deserialize",
        skip_serializing_if = "str::is_empty"
    )]
    pub desired_description: SharedStr,
    #[serde(
        deserialize_with = "null_default::deserialize",
        skip_serializing_if = "DesiredTransition::is_empty"
    )]
    pub desired_transition: DesiredTransition,
    pub client_status: ClientStatus,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub client_description: Box<str>,
    #[serde(with = "nullable")]
    pub task_states: TaskStates,
    /// Replacement, reschedule and preemption links (rare; see [`Links`]).
    #[serde(flatten)]
    pub links: Links,
    /// Set by a client that could not run the allocation because of the
    /// node itself (driver or I/O failure): feeds the node's flaky state.
    #[serde(skip_serializing_if = "is_false")]
    pub node_failure: bool,
    /// The deployment that placed this allocation, if any.
    #[serde(
        rename = "DeploymentID",
        with = "opt_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub deployment_id: Option<DeploymentId>,
    /// Its health in that deployment (and whether it is a canary). Boxed:
    /// inline it was 32 of the struct's bytes, set only once a client
    /// reports health, and without them an allocation with its `Arc`
    /// fits the allocator's 320-byte class instead of the 384-byte one.
    #[serde(
        deserialize_with = "null_default::deserialize",
        skip_serializing_if = "Option::is_none"
    )]
    pub deployment_status: Option<Box<AllocDeploymentStatus>>,
    pub create_index: u64,
    pub modify_index: u64,
    pub alloc_modify_index: u64,
    pub create_time: i64,
    pub modify_time: i64,
}

impl Allocation {
    /// Its replacement, reschedule and preemption links.
    pub fn links(&self) -> &AllocLinks {
        self.links.get()
    }

    /// Its links, to change.
    pub fn links_mut(&mut self) -> &mut AllocLinks {
        self.links.get_mut()
    }

    /// Terminal: the servers want it stopped, or the client says it ended.
    pub fn is_terminal(&self) -> bool {
        self.server_terminal() || self.client_status.is_terminal()
    }

    /// The servers want it gone.
    pub fn server_terminal(&self) -> bool {
        matches!(
            self.desired_status,
            DesiredStatus::Stop | DesiredStatus::Evict
        )
    }

    /// The index in `<job>.<group>[<index>]`.
    pub fn index(&self) -> Option<u32> {
        let open = self.name.rfind('[')?;
        let close = self.name.rfind(']')?;
        self.name.get(open + 1..close)?.parse().ok()
    }

    /// Finished successfully on the client (batch work that is done).
    pub fn ran_successfully(&self) -> bool {
        self.client_status == ClientStatus::Complete
    }

    /// The time of the last time the allocation's tasks finished, if any.
    pub fn last_event_time(&self) -> Option<i64> {
        self.task_states
            .values()
            .filter_map(|s| s.finished_at)
            .max()
            .or((self.modify_time > 0).then_some(self.modify_time))
    }

    /// The name Nomad gives the i-th allocation of a group.
    pub fn name_for(job_id: &str, group: &str, index: u32) -> String {
        format!("{job_id}.{group}[{index}]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The links are Nomad's top-level fields in JSON, both ways, and an
    /// allocation without any holds no box (what keeps allocations small).
    #[test]
    fn links_are_top_level_fields_and_boxed_only_when_set() {
        let plain: Allocation = serde_json::from_value(json!({
            "ID": "00000000-0000-0000-0000-000000000001",
            "PreviousAllocation": "",
            "PreemptedAllocations": null,
            "RescheduleTracker": null,
        }))
        .unwrap();
        assert!(plain.links.0.is_none(), "{:?}", plain.links);
        let json = serde_json::to_value(&plain).unwrap();
        for field in [
            "PreviousAllocation",
            "NextAllocation",
            "RescheduleTracker",
            "FollowupEvalID",
            "PreemptedAllocations",
            "PreemptedByAllocation",
        ] {
            assert!(json.get(field).is_none(), "{field} in {json}");
        }

        let linked: Allocation = serde_json::from_value(json!({
            "ID": "00000000-0000-0000-0000-000000000002",
            "PreviousAllocation": "00000000-0000-0000-0000-000000000001",
            "PreemptedAllocations": ["00000000-0000-0000-0000-000000000003"],
        }))
        .unwrap();
        assert!(linked.links.0.is_some());
        assert_eq!(
            linked.links().previous_allocation,
            Some(AllocId::from_u128(1))
        );
        let json = serde_json::to_value(&linked).unwrap();
        assert_eq!(
            json["PreviousAllocation"],
            "00000000-0000-0000-0000-000000000001"
        );
        assert_eq!(
            json["PreemptedAllocations"],
            json!(["00000000-0000-0000-0000-000000000003"])
        );
        assert_eq!(serde_json::from_value::<Allocation>(json).unwrap(), linked);

        // Empty links compare equal however they are held.
        let mut emptied = plain.clone();
        emptied.links_mut().previous_allocation = None;
        assert!(emptied.links.0.is_some());
        assert_eq!(emptied, plain);
    }

    /// A million allocations stay in memory: the struct's size is a
    /// server's memory per allocation (456 bytes before the links moved
    /// behind a pointer, 344 before the deployment status was boxed and
    /// the descriptions became `Box<str>`). With its `Arc`'s two counts an
    /// allocation must fit mimalloc's 256-byte class: 240 bytes at most
    /// (it took the 320-byte class until session 20).
    #[test]
    fn an_allocation_stays_small() {
        assert!(
            std::mem::size_of::<Allocation>() + 2 * std::mem::size_of::<usize>() <= 256,
            "{}",
            std::mem::size_of::<Allocation>()
        );
    }
}
