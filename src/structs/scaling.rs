//! Job scaling as Nomad has it: a group's scaling policy (the `scaling`
//! block: count bounds and an autoscaler's opaque policy) and the scaling
//! events `POST /v1/job/:id/scale` records per job and group.

use super::serde_util::{null_default, nullable};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How many events are kept per group, newest first (Nomad's
/// `JobTrackedScalingEvents`).
pub const JOB_TRACKED_SCALING_EVENTS: usize = 20;

/// A group's scaling policy (Nomad's `ScalingPolicy`): the count bounds
/// `job scale` is checked against, and an opaque `Policy` for an
/// autoscaler. `ID` is given at registration and kept across versions;
/// `Target` names the group; the indexes are the store's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ScalingPolicy {
    #[serde(rename = "ID", deserialize_with = "null_default::deserialize")]
    pub id: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub r#type: String,
    #[serde(with = "nullable")]
    pub target: BTreeMap<String, String>,
    #[serde(with = "nullable")]
    pub policy: BTreeMap<String, serde_json::Value>,
    /// `None` until canonicalized: the group's count.
    pub min: Option<i64>,
    /// Required; `None` fails validation.
    pub max: Option<i64>,
    pub enabled: bool,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub create_index: u64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub modify_index: u64,
}

impl Default for ScalingPolicy {
    fn default() -> Self {
        ScalingPolicy {
            id: String::new(),
            r#type: String::new(),
            target: BTreeMap::new(),
            policy: BTreeMap::new(),
            min: None,
            max: None,
            enabled: true,
            create_index: 0,
            modify_index: 0,
        }
    }
}

pub mod scaling_target {
    pub const NAMESPACE: &str = "Namespace";
    pub const JOB: &str = "Job";
    pub const GROUP: &str = "Group";
    pub const TASK: &str = "Task";
}

impl ScalingPolicy {
    pub const TYPE_HORIZONTAL: &'static str = "horizontal";

    /// Nomad's defaults: type `horizontal`, `Min` the group's count, the
    /// target the group.
    pub(crate) fn canonicalize(&mut self, namespace: &str, job_id: &str, group: &str, count: i32) {
        if self.r#type.is_empty() {
            self.r#type = Self::TYPE_HORIZONTAL.to_string();
        }
        if self.min.is_none() {
            self.min = Some(i64::from(count));
        }
        self.target = BTreeMap::from([
            (scaling_target::NAMESPACE.to_string(), namespace.to_string()),
            (scaling_target::JOB.to_string(), job_id.to_string()),
            (scaling_target::GROUP.to_string(), group.to_string()),
        ]);
    }

    /// The policy apart from what the server maintains (ID, indexes).
    pub fn same_spec(&self, other: &ScalingPolicy) -> bool {
        let mut a = self.clone();
        a.id.clone_from(&other.id);
        a.create_index = other.create_index;
        a.modify_index = other.modify_index;
        a == *other
    }
}

/// One scaling request's record (Nomad's `ScalingEvent`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ScalingEvent {
    /// Unix nanoseconds.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub time: i64,
    /// The count asked for; `None` for an event that changed nothing.
    pub count: Option<i64>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub previous_count: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub message: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub error: bool,
    #[serde(with = "nullable")]
    pub meta: BTreeMap<String, serde_json::Value>,
    /// The evaluation the scaling created, if it changed the count.
    #[serde(rename = "EvalID")]
    pub eval_id: Option<String>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub create_index: u64,
}

/// A job's scaling events by group, newest first, at most
/// [`JOB_TRACKED_SCALING_EVENTS`] per group (Nomad's `JobScalingEvents`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobScalingEvents {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub namespace: String,
    #[serde(rename = "JobID", deserialize_with = "null_default::deserialize")]
    pub job_id: String,
    #[serde(with = "nullable")]
    pub scaling_events: BTreeMap<String, Vec<ScalingEvent>>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub modify_index: u64,
}

impl JobScalingEvents {
    /// Adds `event` as the group's newest, dropping the oldest past the
    /// limit.
    pub fn record(&mut self, group: &str, event: ScalingEvent) {
        let events = self.scaling_events.entry(group.to_string()).or_default();
        events.insert(0, event);
        events.truncate(JOB_TRACKED_SCALING_EVENTS);
    }
}
