//! The reconciler's deployment rules, as Nomad's `reconcile.go` has them.
//!
//! A service group with an update strategy (`max_parallel > 0`) rolls a
//! new job version out under a deployment: the first evaluation of the
//! version that has something to place creates it; destructive updates are
//! limited to `max_parallel` minus the deployment's allocations not yet
//! healthy (so the next batch is placed by whichever evaluation runs after
//! the previous batch turned healthy, normally the deployment watcher's);
//! canaries are placed first and hold the rest of the group until the
//! group is promoted. A deployment of an older version (or of a stopped
//! job) is cancelled, and the reconciler marks its deployment successful
//! once every group is placed, healthy and promoted.

use crate::structs::deployment::description;
use crate::structs::{
    AllocId, Allocation, Deployment, DeploymentId, DeploymentState, DeploymentStatus,
    DeploymentStatusUpdate, Job, TaskGroup,
};
use std::collections::HashSet;
use std::sync::Arc;

/// The deployment one reconciliation works under.
#[derive(Default)]
pub(super) struct Rollout {
    /// The job version's deployment (running, paused or failed), or the one
    /// this reconciliation creates.
    current: Option<Deployment>,
    /// `current` is created by this reconciliation (it goes in the plan).
    created: bool,
    /// The deployment before the current one: an older version's, or this
    /// version's once it succeeded. Its unpromoted canaries are stopped.
    old: Option<Arc<Deployment>>,
    /// Status changes to submit with the plan.
    pub updates: Vec<DeploymentStatusUpdate>,
}

/// The deployment changes a reconciliation asks for.
#[derive(Debug, Default)]
pub struct DeploymentChanges {
    /// A deployment to create (the plan's `deployment`).
    pub created: Option<Deployment>,
    /// Status changes of existing deployments (cancel, success).
    pub updates: Vec<DeploymentStatusUpdate>,
    /// The active deployment new placements belong to.
    pub active_id: Option<DeploymentId>,
    /// The deployment in-place updated allocations belong to.
    pub current_id: Option<DeploymentId>,
}

impl Rollout {
    /// Nomad's `cancelDeployments`: the job's latest deployment is current
    /// only while it is for this job version and not yet successful; an
    /// active one for an older version, or of a stopped job, is cancelled.
    pub fn new(latest: Option<Arc<Deployment>>, job: Option<&Job>) -> Self {
        let mut rollout = Rollout::default();
        let Some(latest) = latest else {
            return rollout;
        };
        let live_job = job.filter(|j| !j.stop);
        let cancel = match live_job {
            None => Some(description::STOPPED_JOB),
            Some(job) if !latest.is_for(job) => Some(description::NEWER_JOB),
            Some(_) => None,
        };
        if let Some(description) = cancel {
            if latest.active() {
                rollout.updates.push(DeploymentStatusUpdate {
                    deployment_id: latest.id,
                    status: DeploymentStatus::Cancelled,
                    status_description: description.to_string(),
                });
            }
            rollout.old = Some(latest);
        } else if latest.status == DeploymentStatus::Successful {
            rollout.old = Some(latest);
        } else {
            rollout.current = Some((*latest).clone());
        }
        rollout
    }

    /// Nomad's `deploymentPaused`: nothing new of the version is placed.
    pub fn paused(&self) -> bool {
        self.current.as_ref().is_some_and(|d| {
            matches!(
                d.status,
                DeploymentStatus::Paused | DeploymentStatus::Pending
            )
        })
    }

    /// Nomad's `deploymentFailed`: nothing new of the version is placed.
    pub fn failed(&self) -> bool {
        self.current
            .as_ref()
            .is_some_and(|d| d.status == DeploymentStatus::Failed)
    }

    /// Placements and destructive updates wait (lost allocations are still
    /// replaced, failed ones still rescheduled).
    pub fn halted(&self) -> bool {
        self.paused() || self.failed()
    }

    pub fn current_id(&self) -> Option<DeploymentId> {
        self.current.as_ref().map(|d| d.id)
    }

    /// The current deployment, while it is active (a failed allocation of
    /// it is left to the watcher, not rescheduled).
    pub fn active_id(&self) -> Option<DeploymentId> {
        self.current.as_ref().filter(|d| d.active()).map(|d| d.id)
    }

    /// The group's state in the current deployment and `true`; or a fresh
    /// state from the group's update strategy and `false`.
    pub fn group_state(&self, tg: &TaskGroup) -> (DeploymentState, bool) {
        if let Some(state) = self
            .current
            .as_ref()
            .and_then(|d| d.task_groups.get(&tg.name))
        {
            return (state.clone(), true);
        }
        let mut state = DeploymentState::default();
        if let Some(update) = tg.update.as_ref().filter(|u| u.max_parallel > 0) {
            state.auto_revert = update.auto_revert;
            state.auto_promote = update.auto_promote;
            state.progress_deadline = update.progress_deadline;
        }
        (state, false)
    }

    /// Canaries to stop: the unpromoted ones of the previous deployment and
    /// of a failed current one.
    pub fn canaries_to_stop(&self) -> HashSet<AllocId> {
        let failed = self
            .current
            .as_ref()
            .filter(|d| d.status == DeploymentStatus::Failed);
        self.old
            .as_deref()
            .into_iter()
            .chain(failed)
            .flat_map(|d| d.task_groups.values())
            .filter(|s| !s.promoted)
            .flat_map(|s| s.placed_canaries.iter().copied())
            .collect()
    }

    /// The canaries placed in the current deployment (every group).
    pub fn canaries(&self) -> HashSet<AllocId> {
        self.current
            .iter()
            .flat_map(|d| d.task_groups.values())
            .flat_map(|s| s.placed_canaries.iter().copied())
            .collect()
    }

    /// Nomad's `computeLimit`: how many destructive updates (and other
    /// placements) the group may have in flight.
    pub fn limit(
        &self,
        tg: &TaskGroup,
        untainted: &[Arc<Allocation>],
        changing: usize,
        canary_state: bool,
    ) -> usize {
        let count = tg.count.max(0) as usize;
        let Some(max_parallel) = tg.max_parallel() else {
            return count;
        };
        if changing == 0 {
            return count;
        }
        if self.halted() || canary_state {
            return 0;
        }
        let mut limit = max_parallel as i64;
        if let Some(id) = self.current_id() {
            for a in untainted.iter().filter(|a| a.deployment_id == Some(id)) {
                let status = a.deployment_status();
                // An unhealthy allocation fails the deployment: place nothing.
                if status.is_some_and(|s| s.is_unhealthy()) {
                    return 0;
                }
                if !status.is_some_and(|s| s.is_healthy()) {
                    limit -= 1;
                }
            }
        }
        limit.max(0) as usize
    }

    /// Adds a group that has something to place for its first allocations
    /// of the version or a spec change to the current deployment, creating
    /// the deployment (for this job version) if there is none; a group
    /// without an update strategy rolls out without one.
    pub fn attach(&mut self, job: &Job, tg: &TaskGroup, state: DeploymentState, priority: i32) {
        if tg.max_parallel().is_none() || state.desired_total == 0 {
            return;
        }
        let d = self.current.get_or_insert_with(|| {
            self.created = true;
            Deployment::new(job, priority)
        });
        d.task_groups.insert(tg.name.clone(), state);
    }

    /// Nomad's final check of a group: nothing left to place, and the
    /// current deployment's group has enough healthy allocations and is
    /// promoted if it has canaries.
    pub fn group_complete(&self, group: &str, nothing_to_do: bool) -> bool {
        if !nothing_to_do {
            return false;
        }
        let Some(state) = self.current.as_ref().and_then(|d| d.task_groups.get(group)) else {
            return true;
        };
        state.healthy_allocs >= state.desired_total.max(state.desired_canaries)
            && !state.awaiting_promotion()
    }

    /// The changes to submit: the created deployment (its description by
    /// its promotion needs), cancels, and the success of a running
    /// deployment whose every group is complete.
    pub fn finish(mut self, complete: bool) -> DeploymentChanges {
        let active_id = self.active_id();
        let current_id = self.current_id();
        let mut created = None;
        if self.created {
            created = self.current.take().map(|mut d| {
                d.status_description = d.running_description().to_string();
                d
            });
        } else if let Some(d) = self.current.as_ref().filter(|d| d.active() && complete) {
            self.updates.push(DeploymentStatusUpdate {
                deployment_id: d.id,
                status: DeploymentStatus::Successful,
                status_description: description::SUCCESSFUL.to_string(),
            });
        }
        DeploymentChanges {
            created,
            updates: self.updates,
            active_id,
            current_id,
        }
    }
}
