//! Allocations: one placement of a task group on a node.
//!
//! An allocation references its job by (namespace, ID, version) instead of
//! embedding a copy, as Nomad does: with a million allocations in memory the
//! copies would cost gigabytes. The HTTP layer attaches the job when it
//! answers with Nomad's shape. Strings shared by many allocations (job ID,
//! group name, namespace) are `Arc<str>`, so a clone is a pointer copy.

use super::resources::{AllocatedResources, Resources};
use super::serde_util::{id_or_nil, is_false, null_default, nullable, opt_id, rfc3339_opt};
use super::{AllocId, EvalId, NodeId, VecMap};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
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
    pub const DRIVER_FAILURE: &str = "Driver Failure";
    pub const SETUP_FAILURE: &str = "Setup Failure";
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

/// How a placement was scored on one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeScoreMeta {
    #[serde(rename = "NodeID")]
    pub node_id: NodeId,
    #[serde(with = "nullable")]
    pub scores: ScoreMap,
    pub norm_score: f64,
}

/// A node's score components by name (Nomad's `Scores` map, same JSON).
///
/// Every allocation keeps the scores of its top five candidate nodes; as
/// a `BTreeMap<String, f64>` each set costs a tree node and a string per
/// name, more than the rest of the allocation. The names come from a
/// small fixed set, so they are kept as static strings (any other name
/// read back from JSON is owned) in one boxed slice sorted by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScoreMap(Box<[(Cow<'static, str>, f64)]>);

/// The score names herder's ranker writes.
const SCORE_NAMES: [&str; 7] = [
    "allocation-spread",
    "binpack",
    "job-anti-affinity",
    "node-affinity",
    "node-reschedule-penalty",
    "normalized-score",
    "preemption",
];

impl ScoreMap {
    /// A map of `entries` (a name given twice keeps its last value).
    pub fn from_entries<N: AsRef<str>>(entries: impl IntoIterator<Item = (N, f64)>) -> ScoreMap {
        let mut list: Vec<(Cow<'static, str>, f64)> = Vec::new();
        for (name, value) in entries {
            let name = name.as_ref();
            match list.binary_search_by(|(n, _)| (**n).cmp(name)) {
                Ok(at) => list[at].1 = value,
                Err(at) => list.insert(at, (intern(name), value)),
            }
        }
        ScoreMap(list.into_boxed_slice())
    }

    pub fn get(&self, name: &str) -> Option<f64> {
        self.0
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .ok()
            .map(|at| self.0[at].1)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.0.iter().map(|(n, v)| (&**n, *v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn intern(name: &str) -> Cow<'static, str> {
    match SCORE_NAMES.iter().find(|n| **n == name) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(name.to_string()),
    }
}

impl super::serde_util::nullable::IsEmpty for ScoreMap {
    fn is_empty_collection(&self) -> bool {
        self.is_empty()
    }
}

impl Serialize for ScoreMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0.iter() {
            map.serialize_entry(&**name, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ScoreMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ScoreMap, D::Error> {
        let map = BTreeMap::<String, f64>::deserialize(d)?;
        Ok(ScoreMap::from_entries(map))
    }
}

/// What the scheduler saw while placing (or failing to place) an allocation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocMetric {
    pub nodes_evaluated: u64,
    pub nodes_filtered: u64,
    /// Shared by every placement of one evaluation (the same counts).
    #[serde(with = "nullable")]
    pub nodes_available: Arc<BTreeMap<String, u64>>,
    #[serde(with = "nullable")]
    pub class_filtered: BTreeMap<String, u64>,
    #[serde(with = "nullable")]
    pub constraint_filtered: BTreeMap<String, u64>,
    pub nodes_exhausted: u64,
    #[serde(with = "nullable")]
    pub class_exhausted: BTreeMap<String, u64>,
    #[serde(with = "nullable")]
    pub dimension_exhausted: BTreeMap<String, u64>,
    #[serde(with = "nullable")]
    pub quota_exhausted: Vec<String>,
    #[serde(with = "nullable")]
    pub resources_exhausted: BTreeMap<String, Resources>,
    #[serde(with = "nullable")]
    pub score_meta_data: Vec<NodeScoreMeta>,
    /// Nanoseconds spent placing.
    pub allocation_time: i64,
    pub coalesced_failures: u64,
}

impl AllocMetric {
    pub fn evaluate_node(&mut self) {
        self.nodes_evaluated += 1;
    }

    pub fn filter_node(&mut self, class: &str, constraint: &str) {
        self.nodes_filtered += 1;
        if !class.is_empty() {
            *self.class_filtered.entry(class.to_string()).or_default() += 1;
        }
        if !constraint.is_empty() {
            *self
                .constraint_filtered
                .entry(constraint.to_string())
                .or_default() += 1;
        }
    }

    pub fn exhausted_node(&mut self, class: &str, dimension: &str) {
        self.nodes_exhausted += 1;
        if !class.is_empty() {
            *self.class_exhausted.entry(class.to_string()).or_default() += 1;
        }
        if !dimension.is_empty() {
            *self
                .dimension_exhausted
                .entry(dimension.to_string())
                .or_default() += 1;
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Allocation {
    #[serde(rename = "ID")]
    pub id: AllocId,
    pub namespace: Arc<str>,
    #[serde(rename = "EvalID")]
    pub eval_id: EvalId,
    /// `<job>.<group>[<index>]`.
    pub name: String,
    #[serde(rename = "NodeID", deserialize_with = "id_or_nil::deserialize")]
    pub node_id: NodeId,
    pub node_name: Arc<str>,
    #[serde(rename = "JobID")]
    pub job_id: Arc<str>,
    /// The version of the job this allocation runs (herder keeps a
    /// reference, not a copy; the API attaches the job as `Job`).
    pub job_version: u64,
    pub task_group: Arc<str>,
    pub allocated_resources: AllocatedResources,
    /// Shared between allocations placed by the same decision when equal.
    pub metrics: Option<Arc<AllocMetric>>,
    pub desired_status: DesiredStatus,
    #[serde(
        deserialize_with = "null_default::deserialize",
        skip_serializing_if = "String::is_empty"
    )]
    pub desired_description: String,
    #[serde(
        deserialize_with = "null_default::deserialize",
        skip_serializing_if = "DesiredTransition::is_empty"
    )]
    pub desired_transition: DesiredTransition,
    pub client_status: ClientStatus,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub client_description: String,
    #[serde(with = "nullable")]
    pub task_states: VecMap<String, TaskState>,
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
    /// Set by a client that could not run the allocation because of the
    /// node itself (driver or I/O failure): feeds the node's flaky state.
    #[serde(skip_serializing_if = "is_false")]
    pub node_failure: bool,
    pub create_index: u64,
    pub modify_index: u64,
    pub alloc_modify_index: u64,
    pub create_time: i64,
    pub modify_time: i64,
}

impl Allocation {
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
mod score_map_tests {
    use super::*;

    #[test]
    fn scores_read_and_write_as_nomads_sorted_map_keeping_unknown_names() {
        let json = r#"{"NodeID":"00000000-0000-0000-0000-000000000001","Scores":{"normalized-score":0.5,"binpack":0.25,"custom-score":1.0},"NormScore":0.5}"#;
        let meta: NodeScoreMeta = serde_json::from_str(json).expect("reads");
        assert_eq!(meta.scores.get("binpack"), Some(0.25));
        assert_eq!(meta.scores.get("custom-score"), Some(1.0));
        assert!(!meta.scores.contains_key("preemption"));
        let written = serde_json::to_string(&meta).expect("writes");
        assert!(
            written
                .contains(r#""Scores":{"binpack":0.25,"custom-score":1.0,"normalized-score":0.5}"#),
            "{written}"
        );
        let empty: NodeScoreMeta = serde_json::from_str(
            r#"{"NodeID":"00000000-0000-0000-0000-000000000001","Scores":null}"#,
        )
        .expect("null scores read as empty");
        assert!(empty.scores.is_empty());
        assert!(serde_json::to_string(&empty)
            .unwrap()
            .contains(r#""Scores":null"#));
    }
}
