//! Deployments: how a new version of a service job rolls out, as Nomad
//! models it.
//!
//! A deployment is created by the scheduler when a job version with an
//! `update` block changes a group's allocations; it tracks, per group, how
//! many allocations the version wants, how many are placed, healthy and
//! unhealthy, its canaries and the time by which it must make progress.
//! The deployment watcher (a leader duty) moves it through its statuses;
//! the state store counts the health clients report into it
//! (`AllocDeploymentStatus`), so the watcher reads a count, never a scan.

use super::serde_util::{nanos, null_default, nullable, rfc3339_opt};
use super::{AllocId, Job};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Deployment IDs are UUIDs.
pub type DeploymentId = uuid::Uuid;

/// Nomad's deployment statuses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeploymentStatus {
    #[default]
    Running,
    Paused,
    Failed,
    Successful,
    Cancelled,
    /// Multi-region states: herder has one region, so a deployment never
    /// enters them; they are read so a foreign row decodes.
    Pending,
    Blocked,
    Unblocking,
}

impl DeploymentStatus {
    /// A deployment that can still change: running, paused (or waiting on
    /// other regions, which herder never does).
    pub fn is_active(self) -> bool {
        matches!(
            self,
            DeploymentStatus::Running
                | DeploymentStatus::Paused
                | DeploymentStatus::Pending
                | DeploymentStatus::Blocked
                | DeploymentStatus::Unblocking
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentStatus::Running => "running",
            DeploymentStatus::Paused => "paused",
            DeploymentStatus::Failed => "failed",
            DeploymentStatus::Successful => "successful",
            DeploymentStatus::Cancelled => "cancelled",
            DeploymentStatus::Pending => "pending",
            DeploymentStatus::Blocked => "blocked",
            DeploymentStatus::Unblocking => "unblocking",
        }
    }
}

/// Nomad's status descriptions, word for word (clients and runbooks match
/// on them).
pub mod description {
    pub const RUNNING: &str = "Deployment is running";
    pub const RUNNING_NEEDS_PROMOTION: &str = "Deployment is running but requires manual promotion";
    pub const RUNNING_AUTO_PROMOTION: &str = "Deployment is running pending automatic promotion";
    pub const PAUSED: &str = "Deployment is paused";
    pub const SUCCESSFUL: &str = "Deployment completed successfully";
    pub const STOPPED_JOB: &str = "Cancelled because job is stopped";
    pub const NEWER_JOB: &str = "Cancelled due to newer version of job";
    pub const FAILED_ALLOCATIONS: &str = "Failed due to unhealthy allocations";
    pub const PROGRESS_DEADLINE: &str = "Failed due to progress deadline";
    pub const FAILED_BY_USER: &str = "Deployment marked as failed";

    /// A failure that rolls the job back to `version`.
    pub fn rollback(base: &str, version: u64) -> String {
        format!("{base} - rolling back to job version {version}")
    }

    /// A failure whose stable version has the job's current spec: nothing
    /// to roll back to.
    pub fn rollback_noop(base: &str, version: u64) -> String {
        format!(
            "{base} - not rolling back to stable job version {version} as current job has same specification"
        )
    }

    /// A failure with no stable version to roll back to.
    pub fn no_rollback_target(base: &str) -> String {
        format!("{base} - no stable job version to auto revert to")
    }
}

/// One group's progress in a deployment (Nomad's `DeploymentState`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DeploymentState {
    pub auto_revert: bool,
    pub auto_promote: bool,
    #[serde(with = "nanos")]
    pub progress_deadline: Duration,
    /// Unix nanoseconds; `None` before the first allocation is placed.
    #[serde(with = "rfc3339_opt")]
    pub require_progress_by: Option<i64>,
    pub promoted: bool,
    #[serde(with = "nullable")]
    pub placed_canaries: Vec<AllocId>,
    pub desired_canaries: u32,
    pub desired_total: u32,
    pub placed_allocs: u32,
    pub healthy_allocs: u32,
    pub unhealthy_allocs: u32,
}

impl DeploymentState {
    /// Canaries are wanted and not yet promoted: the rest of the group
    /// waits.
    pub fn awaiting_promotion(&self) -> bool {
        self.desired_canaries > 0 && !self.promoted
    }
}

/// A deployment of one job version.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Deployment {
    #[serde(rename = "ID")]
    pub id: DeploymentId,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub namespace: String,
    #[serde(rename = "JobID", deserialize_with = "null_default::deserialize")]
    pub job_id: String,
    pub job_version: u64,
    pub job_modify_index: u64,
    pub job_spec_modify_index: u64,
    pub job_create_index: u64,
    pub is_multiregion: bool,
    #[serde(with = "nullable")]
    pub task_groups: BTreeMap<String, DeploymentState>,
    pub status: DeploymentStatus,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub status_description: String,
    pub eval_priority: i32,
    pub create_index: u64,
    pub modify_index: u64,
}

impl Deployment {
    /// A running deployment of `job`'s current version (groups are added
    /// by the scheduler as it plans them).
    pub fn new(job: &Job, eval_priority: i32) -> Self {
        Deployment {
            id: super::new_id(),
            namespace: job.namespace.to_string(),
            job_id: job.id.to_string(),
            job_version: job.version,
            job_modify_index: job.modify_index,
            job_spec_modify_index: job.job_modify_index,
            job_create_index: job.create_index,
            is_multiregion: false,
            task_groups: BTreeMap::new(),
            status: DeploymentStatus::Running,
            status_description: description::RUNNING.to_string(),
            eval_priority,
            create_index: 0,
            modify_index: 0,
        }
    }

    pub fn active(&self) -> bool {
        self.status.is_active()
    }

    /// Some group waits for its canaries to be promoted.
    pub fn requires_promotion(&self) -> bool {
        self.task_groups
            .values()
            .any(DeploymentState::awaiting_promotion)
    }

    /// Every group that needs promotion will be promoted automatically.
    pub fn has_auto_promote(&self) -> bool {
        let mut waiting = self
            .task_groups
            .values()
            .filter(|s| s.desired_canaries > 0)
            .peekable();
        waiting.peek().is_some() && waiting.all(|s| s.auto_promote)
    }

    /// The description of a running deployment, by its promotion needs.
    pub fn running_description(&self) -> &'static str {
        if !self.requires_promotion() {
            description::RUNNING
        } else if self.has_auto_promote() {
            description::RUNNING_AUTO_PROMOTION
        } else {
            description::RUNNING_NEEDS_PROMOTION
        }
    }

    /// A scheduler's copy of a stored deployment takes what the store
    /// counted since the scheduler's snapshot (placements, health, canaries,
    /// the progress deadline, promotion) and the stored status: the
    /// scheduler decides what each group wants, never what happened
    /// (Nomad's `MergeClientValues`). Without this a plan written from an
    /// older snapshot would undo health reported meanwhile.
    pub fn keep_store_values(&mut self, stored: &Deployment) {
        self.status = stored.status;
        self.status_description = stored.status_description.clone();
        for (name, group) in &mut self.task_groups {
            let Some(s) = stored.task_groups.get(name) else {
                continue;
            };
            group.placed_allocs = s.placed_allocs;
            group.healthy_allocs = s.healthy_allocs;
            group.unhealthy_allocs = s.unhealthy_allocs;
            group.placed_canaries = s.placed_canaries.clone();
            group.require_progress_by = s.require_progress_by;
            group.promoted = s.promoted;
        }
    }

    /// The deployment was made for this version of the job (same spec).
    pub fn is_for(&self, job: &Job) -> bool {
        self.namespace == *job.namespace
            && self.job_id == *job.id
            && self.job_version == job.version
            && self.job_create_index == job.create_index
    }
}

impl Deployment {
    /// Counts an allocation write into this deployment (Nomad's
    /// `updateDeploymentWithAlloc`): placed once per deployment, a canary
    /// recorded, health counted the first time it is decided, progress
    /// deadline pushed by a healthy allocation. `old` is the allocation
    /// as stored before the write. Returns whether anything changed.
    pub fn count_alloc(
        &mut self,
        alloc: &super::Allocation,
        old: Option<&super::Allocation>,
    ) -> bool {
        if alloc.deployment_id != Some(self.id) {
            return false;
        }
        let same = old.filter(|o| o.deployment_id == Some(self.id));
        let placed = same.is_none();
        let had_health = same
            .and_then(|o| o.deployment_status())
            .is_some_and(|s| s.has_health());
        let health = alloc
            .deployment_status()
            .filter(|s| s.has_health() && !had_health);
        let canary = placed && alloc.is_canary();
        if !placed && health.is_none() {
            return false;
        }
        let Some(state) = self.task_groups.get_mut(&*alloc.task_group) else {
            return false;
        };
        if placed {
            state.placed_allocs = state.placed_allocs.saturating_add(1);
            if canary && !state.placed_canaries.contains(&alloc.id) {
                state.placed_canaries.push(alloc.id);
            }
            if state.require_progress_by.is_none() && !state.progress_deadline.is_zero() {
                // The time of the write that brought it into this
                // deployment, not its creation: an allocation updated in
                // place (a revert to a version whose allocations still
                // run) was created long ago, and its creation time would
                // put the deadline in the past (Nomad uses ModifyTime for
                // the same reason).
                let from = if alloc.modify_time > 0 {
                    alloc.modify_time
                } else {
                    alloc.create_time
                };
                state.require_progress_by = Some(deadline_after(from, state.progress_deadline));
            }
        }
        if let Some(status) = health {
            if status.is_healthy() {
                state.healthy_allocs = state.healthy_allocs.saturating_add(1);
                if !state.progress_deadline.is_zero() {
                    let at = status.timestamp.unwrap_or(alloc.modify_time);
                    let by = deadline_after(at, state.progress_deadline);
                    if state.require_progress_by.is_none_or(|cur| cur < by) {
                        state.require_progress_by = Some(by);
                    }
                }
            } else {
                state.unhealthy_allocs = state.unhealthy_allocs.saturating_add(1);
            }
        }
        true
    }
}

fn deadline_after(from_nanos: i64, deadline: Duration) -> i64 {
    let add = i64::try_from(deadline.as_nanos()).unwrap_or(i64::MAX);
    from_nanos.saturating_add(add)
}

/// A change of a deployment's status (the watcher's, a user's, or the
/// scheduler's cancel of an older deployment).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DeploymentStatusUpdate {
    #[serde(rename = "DeploymentID")]
    pub deployment_id: DeploymentId,
    pub status: DeploymentStatus,
    pub status_description: String,
}

/// What a client (or a user, for manual health) says about an allocation
/// in a deployment (Nomad's `AllocDeploymentStatus`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocDeploymentStatus {
    /// `None` until the health is decided.
    pub healthy: Option<bool>,
    /// Unix nanoseconds of the decision.
    #[serde(with = "rfc3339_opt")]
    pub timestamp: Option<i64>,
    pub canary: bool,
    pub modify_index: u64,
}

impl AllocDeploymentStatus {
    pub fn is_healthy(&self) -> bool {
        self.healthy == Some(true)
    }
    pub fn is_unhealthy(&self) -> bool {
        self.healthy == Some(false)
    }
    pub fn has_health(&self) -> bool {
        self.healthy.is_some()
    }
}

/// The evaluation a deployment change asks for, with the job it concerns.
pub fn deployment_eval(job: &Job, deployment: DeploymentId, now: i64) -> super::Evaluation {
    let mut eval = super::Evaluation::for_job(job, super::TriggeredBy::DeploymentWatcher, now);
    eval.deployment_id = deployment.to_string();
    eval
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_nomads_names_and_time_format() {
        let mut d = Deployment::new(
            &Job {
                id: "web".into(),
                namespace: "default".into(),
                version: 3,
                ..Default::default()
            },
            50,
        );
        d.task_groups.insert(
            "web".into(),
            DeploymentState {
                desired_total: 5,
                require_progress_by: Some(1_600_000_000_000_000_000),
                progress_deadline: Duration::from_secs(600),
                ..Default::default()
            },
        );
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["Status"], "running");
        assert_eq!(v["StatusDescription"], "Deployment is running");
        assert_eq!(v["JobID"], "web");
        assert_eq!(v["JobVersion"], 3);
        let g = &v["TaskGroups"]["web"];
        assert_eq!(g["DesiredTotal"], 5);
        assert_eq!(g["ProgressDeadline"], 600_000_000_000u64);
        assert_eq!(g["RequireProgressBy"], "2020-09-13T12:26:40Z");
        assert_eq!(g["PlacedCanaries"], serde_json::Value::Null);
        let back: Deployment = serde_json::from_value(v).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn descriptions_follow_promotion_needs() {
        let mut d = Deployment::default();
        d.task_groups.insert("a".into(), DeploymentState::default());
        assert_eq!(d.running_description(), description::RUNNING);
        d.task_groups.insert(
            "b".into(),
            DeploymentState {
                desired_canaries: 1,
                ..Default::default()
            },
        );
        assert_eq!(
            d.running_description(),
            description::RUNNING_NEEDS_PROMOTION
        );
        d.task_groups.get_mut("b").unwrap().auto_promote = true;
        assert_eq!(d.running_description(), description::RUNNING_AUTO_PROMOTION);
        d.task_groups.get_mut("b").unwrap().promoted = true;
        assert_eq!(d.running_description(), description::RUNNING);
    }
}
