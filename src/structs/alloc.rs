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
use super::serde_util::{id_or_nil, is_false, labels, null_default, nullable, opt_id, rfc3339_opt};
use super::shared_str::SharedStr;
use super::thin::ThinStr;
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

/// What few allocations carry, behind one pointer and none at all for
/// most: the [`AllocLinks`] of replacements and preemptions, and the
/// health a deployment's allocation reports. Inline the links were 116 of
/// an allocation's 456 bytes; the deployment status had a pointer of its
/// own until sharing this one brought the allocation, with its `Arc`,
/// into the allocator's 224-byte class (see the size test below). The
/// links have a box of their own inside, so an allocation with a health
/// and no links (every one of a deployment's) holds 40 bytes here, not
/// the links' 120. Compares, prints and serializes as the fields it
/// holds (absent ones as empty), at the allocation's top level.
#[derive(Clone, Default)]
pub struct Seldom(Option<Box<SeldomFields>>);

#[derive(Clone, Default)]
struct SeldomFields {
    links: Option<Box<AllocLinks>>,
    deployment_status: Option<AllocDeploymentStatus>,
}

static NO_LINKS: AllocLinks = AllocLinks::NONE;

impl Seldom {
    /// The fields, boxed only when something is set.
    pub fn new(links: AllocLinks, deployment_status: Option<AllocDeploymentStatus>) -> Seldom {
        let links = (!links.is_none()).then(|| Box::new(links));
        if links.is_none() && deployment_status.is_none() {
            return Seldom(None);
        }
        Seldom(Some(Box::new(SeldomFields {
            links,
            deployment_status,
        })))
    }

    pub fn links(&self) -> &AllocLinks {
        self.0
            .as_ref()
            .and_then(|f| f.links.as_deref())
            .unwrap_or(&NO_LINKS)
    }

    /// The links to change (boxed from now on).
    pub fn links_mut(&mut self) -> &mut AllocLinks {
        self.fields_mut().links.get_or_insert_with(Box::default)
    }

    pub fn deployment_status(&self) -> Option<&AllocDeploymentStatus> {
        self.0.as_ref()?.deployment_status.as_ref()
    }

    /// The status to change, if there is one (nothing is boxed).
    pub fn deployment_status_mut(&mut self) -> Option<&mut AllocDeploymentStatus> {
        self.0.as_mut()?.deployment_status.as_mut()
    }

    /// The status, a default one first if there was none.
    pub fn deployment_status_or_default(&mut self) -> &mut AllocDeploymentStatus {
        self.fields_mut()
            .deployment_status
            .get_or_insert_with(Default::default)
    }

    /// Sets or clears the status (clearing boxes nothing).
    pub fn set_deployment_status(&mut self, status: Option<AllocDeploymentStatus>) {
        match (self.0.as_mut(), status) {
            (Some(fields), status) => fields.deployment_status = status,
            (None, None) => {}
            (None, Some(status)) => self.fields_mut().deployment_status = Some(status),
        }
    }

    fn fields_mut(&mut self) -> &mut SeldomFields {
        self.0.get_or_insert_with(Box::default)
    }

    /// Whether anything is boxed (for the tests of what stays small).
    #[cfg(test)]
    fn is_boxed(&self) -> bool {
        self.0.is_some()
    }
}

impl PartialEq for Seldom {
    fn eq(&self, other: &Seldom) -> bool {
        self.links() == other.links() && self.deployment_status() == other.deployment_status()
    }
}

impl std::fmt::Debug for Seldom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seldom")
            .field("links", self.links())
            .field("deployment_status", &self.deployment_status())
            .finish()
    }
}

/// [`Seldom`] as JSON: the links' fields and `DeploymentStatus`, flattened
/// into the allocation.
#[derive(Serialize)]
struct SeldomOut<'a> {
    #[serde(flatten)]
    links: &'a AllocLinks,
    #[serde(rename = "DeploymentStatus", skip_serializing_if = "Option::is_none")]
    deployment_status: Option<&'a AllocDeploymentStatus>,
}

#[derive(Deserialize)]
struct SeldomIn {
    #[serde(flatten)]
    links: AllocLinks,
    #[serde(
        rename = "DeploymentStatus",
        default,
        deserialize_with = "null_default::deserialize"
    )]
    deployment_status: Option<AllocDeploymentStatus>,
}

impl Serialize for Seldom {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        SeldomOut {
            links: self.links(),
            deployment_status: self.deployment_status(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Seldom {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Seldom, D::Error> {
        let read = SeldomIn::deserialize(d)?;
        Ok(Seldom::new(read.links, read.deployment_status))
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
    /// `<job>.<group>[<index>]` (a [`ThinStr`]: set once, never grown,
    /// one word).
    pub name: ThinStr,
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
    /// The servers' few reasons and the clients' few descriptions,
    /// shared like the names (the clients' interned as they are read).
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
    #[serde(deserialize_with = "labels::deserialize_one")]
    pub client_description: SharedStr,
    #[serde(with = "nullable")]
    pub task_states: TaskStates,
    /// Replacement, reschedule and preemption links, and the health the
    /// allocation reported in its deployment (and whether it is a
    /// canary): rare, see [`Seldom`].
    #[serde(flatten)]
    pub seldom: Seldom,
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
    pub create_index: u64,
    pub modify_index: u64,
    pub alloc_modify_index: u64,
    pub create_time: i64,
    pub modify_time: i64,
}

impl Allocation {
    /// Its replacement, reschedule and preemption links.
    pub fn links(&self) -> &AllocLinks {
        self.seldom.links()
    }

    /// Its links, to change.
    pub fn links_mut(&mut self) -> &mut AllocLinks {
        self.seldom.links_mut()
    }

    /// Its health in its deployment, once its client reported one (or
    /// the servers marked it a canary).
    pub fn deployment_status(&self) -> Option<&AllocDeploymentStatus> {
        self.seldom.deployment_status()
    }

    /// Its deployment status, to change, if it has one.
    pub fn deployment_status_mut(&mut self) -> Option<&mut AllocDeploymentStatus> {
        self.seldom.deployment_status_mut()
    }

    /// Its deployment status, a default one first if it had none.
    pub fn deployment_status_or_default(&mut self) -> &mut AllocDeploymentStatus {
        self.seldom.deployment_status_or_default()
    }

    pub fn set_deployment_status(&mut self, status: Option<AllocDeploymentStatus>) {
        self.seldom.set_deployment_status(status)
    }

    /// Whether it is a canary of its deployment.
    pub fn is_canary(&self) -> bool {
        self.deployment_status().is_some_and(|s| s.canary)
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
    ///
    /// Written by hand, not with `format!`: a placement names each new
    /// allocation, and the formatting machinery cost about 1,200
    /// instructions a name, a tenth of a small placement's whole cost.
    pub fn name_for(job_id: &str, group: &str, index: u32) -> String {
        let mut digits = [0u8; 10];
        let mut start = digits.len();
        let mut rest = index;
        loop {
            start -= 1;
            digits[start] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let digits = &digits[start..];
        let mut name = String::with_capacity(job_id.len() + group.len() + digits.len() + 3);
        name.push_str(job_id);
        name.push('.');
        name.push_str(group);
        name.push('[');
        name.extend(digits.iter().map(|&d| char::from(d)));
        name.push(']');
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The links are Nomad's top-level fields in JSON, both ways, and an
    /// allocation without any holds no box (what keeps allocations small).
    #[test]
    fn names_are_nomads_and_give_their_index_back() {
        for (index, want) in [
            (0, "web.cache[0]"),
            (7, "web.cache[7]"),
            (10, "web.cache[10]"),
            (4_294_967_295, "web.cache[4294967295]"),
        ] {
            let name = Allocation::name_for("web", "cache", index);
            assert_eq!(name, want);
            assert_eq!(name, format!("web.cache[{index}]"));
            let alloc = Allocation {
                name: name.as_str().into(),
                ..Default::default()
            };
            assert_eq!(alloc.index(), Some(index));
        }
    }

    #[test]
    fn links_are_top_level_fields_and_boxed_only_when_set() {
        let plain: Allocation = serde_json::from_value(json!({
            "ID": "00000000-0000-0000-0000-000000000001",
            "PreviousAllocation": "",
            "PreemptedAllocations": null,
            "RescheduleTracker": null,
        }))
        .unwrap();
        assert!(!plain.seldom.is_boxed(), "{:?}", plain.seldom);
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
        assert!(linked.seldom.is_boxed());
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
        assert!(emptied.seldom.is_boxed());
        assert_eq!(emptied, plain);
    }

    /// The deployment status shares the links' pointer and is still
    /// Nomad's top-level `DeploymentStatus`: `null` or absent is none, and
    /// a status without links boxes no links.
    #[test]
    fn deployment_status_is_a_top_level_field_beside_the_links() {
        let id = "00000000-0000-0000-0000-000000000001";
        let none: Allocation =
            serde_json::from_value(json!({"ID": id, "DeploymentStatus": null})).unwrap();
        assert!(!none.seldom.is_boxed());
        assert!(serde_json::to_value(&none)
            .unwrap()
            .get("DeploymentStatus")
            .is_none());

        let healthy: Allocation = serde_json::from_value(json!({
            "ID": id,
            "DeploymentStatus": {"Healthy": true, "Canary": true, "ModifyIndex": 7},
        }))
        .unwrap();
        let status = healthy.deployment_status().expect("read");
        assert_eq!(
            (status.healthy, status.canary, status.modify_index),
            (Some(true), true, 7)
        );
        assert!(healthy.is_canary());
        let fields = healthy.seldom.0.as_ref().expect("boxed");
        assert!(fields.links.is_none(), "no links boxed for a status");
        let json = serde_json::to_value(&healthy).unwrap();
        assert_eq!(json["DeploymentStatus"]["Healthy"], true);
        assert!(json.get("PreviousAllocation").is_none());
        assert_eq!(serde_json::from_value::<Allocation>(json).unwrap(), healthy);

        // Clearing an absent status boxes nothing; links and status live
        // side by side.
        let mut plain = none.clone();
        plain.set_deployment_status(None);
        assert!(!plain.seldom.is_boxed());
        let mut both = healthy.clone();
        both.links_mut().next_allocation = Some(AllocId::from_u128(2));
        both.deployment_status_or_default().canary = false;
        assert!(!both.is_canary());
        assert_eq!(both.links().next_allocation, Some(AllocId::from_u128(2)));
        let json = serde_json::to_value(&both).unwrap();
        assert_eq!(
            json["NextAllocation"],
            "00000000-0000-0000-0000-000000000002"
        );
        assert_eq!(json["DeploymentStatus"]["Canary"], false);
        assert_eq!(serde_json::from_value::<Allocation>(json).unwrap(), both);
        both.set_deployment_status(None);
        assert_ne!(both, healthy);
        assert_eq!(both.deployment_status(), None);
    }

    /// A million allocations stay in memory: the struct's size is a
    /// server's memory per allocation (456 bytes before the links moved
    /// behind a pointer, 344 before the deployment status was boxed and
    /// the descriptions became `Box<str>`). With its `Arc`'s two counts an
    /// allocation had to fit mimalloc's 256-byte class: 240 bytes at most
    /// (it took the 320-byte class until session 20), and 224 since its
    /// name, metric and client description are one word each and the
    /// deployment status shares the links' pointer: 208 bytes at most.
    #[test]
    fn an_allocation_stays_small() {
        assert!(
            std::mem::size_of::<Allocation>() + 2 * std::mem::size_of::<usize>() <= 224,
            "{}",
            std::mem::size_of::<Allocation>()
        );
    }
}
