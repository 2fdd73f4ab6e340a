//! What the deployment watcher decides about one deployment, from a
//! snapshot and the time alone (no actor, no clock): the pure half of
//! [`super::DeploymentWatcher`], tested without actix.
//!
//! Nomad's rules (`nomad/deploymentwatcher`), in the order they win:
//! - an unhealthy allocation fails the deployment at once when its group
//!   has no progress deadline; with a progress deadline it is handed back
//!   to the scheduler for a replacement instead (`DesiredTransition.
//!   Reschedule`), and only the deadline fails the deployment;
//! - a group not done whose `RequireProgressBy` has passed fails it
//!   (never while paused);
//! - canaries all healthy in groups that all `auto_promote` are promoted;
//! - a complete deployment (every group done, nothing awaiting promotion)
//!   that no evaluation is about to visit is marked successful;
//! - otherwise, a health reported after the job's newest evaluation asks
//!   for an evaluation, so the scheduler places the next batch.
//!
//! A group is done when it needs no promotion and as many of its live
//! allocations are healthy as it wants.

use herder::deployment_failure::{self, Failure};
use herder::state::{Command, StateSnapshot};
use herder::structs::deployment::{deployment_eval, description};
use herder::structs::{
    AllocId, Allocation, Deployment, DeploymentState, DeploymentStatus, DeploymentStatusUpdate,
    DesiredTransition, Evaluation,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What the watcher does now about one deployment.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Fail it (with the rollback `deployment_failure` decided).
    Fail(Failure),
    /// Let the scheduler replace these unhealthy allocations (groups with a
    /// progress deadline), with the evaluation that does it.
    AllowReplacements(Vec<AllocId>, Evaluation),
    /// Promote every group's canaries, with the evaluation that rolls on.
    Promote(Evaluation),
    /// Mark it successful (its version becomes stable), with an evaluation
    /// so the scheduler tidies up after it.
    Succeed(Evaluation),
}

impl Action {
    /// The one command that carries the action out.
    pub fn into_command(self, d: &Deployment) -> Command {
        match self {
            Action::Fail(failure) => failure.into_command(),
            Action::AllowReplacements(ids, eval) => Command::AllocDesiredTransition {
                transitions: ids
                    .into_iter()
                    .map(|id| {
                        let reschedule = DesiredTransition {
                            reschedule: Some(true),
                            ..Default::default()
                        };
                        (id, reschedule)
                    })
                    .collect::<BTreeMap<_, _>>(),
                evals: vec![eval],
            },
            Action::Promote(eval) => Command::DeploymentPromotion {
                deployment_id: d.id,
                groups: Vec::new(),
                eval: Some(eval),
            },
            Action::Succeed(eval) => Command::DeploymentStatusUpdate {
                update: DeploymentStatusUpdate {
                    deployment_id: d.id,
                    status: DeploymentStatus::Successful,
                    status_description: description::SUCCESSFUL.to_string(),
                },
                job: None,
                eval: Some(eval),
            },
        }
    }

    /// For logs.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Fail(_) => "fail",
            Action::AllowReplacements(..) => "allow replacements",
            Action::Promote(_) => "promote",
            Action::Succeed(_) => "succeed",
        }
    }
}

/// The watcher's verdict on one deployment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assessment {
    pub action: Option<Action>,
    /// A health change the job's evaluations have not seen yet: an
    /// evaluation is wanted (batched by the actor).
    pub wants_eval: bool,
    /// When to look again for the progress deadline (Unix nanoseconds).
    pub deadline: Option<i64>,
}

/// Assesses `d` at `now` (Unix nanoseconds). `eval_coming`: the watcher
/// has an evaluation of this deployment batched or being written.
pub fn assess(snap: &StateSnapshot, d: &Deployment, now: i64, eval_coming: bool) -> Assessment {
    let mut out = Assessment::default();
    if !d.active() || snap.job(&d.namespace, &d.job_id).is_none() {
        return out;
    }
    let allocs = snap.allocs_by_deployment(&d.id);
    let done = done_groups(d, &allocs);
    let (fail_now, replace) = unhealthy(d, &allocs);
    let running = d.status == DeploymentStatus::Running;
    let deadline = if running {
        progress_cutoff(d, &done)
    } else {
        None
    };
    out.action = if fail_now {
        Some(Action::Fail(deployment_failure::fail(
            snap,
            d,
            description::FAILED_ALLOCATIONS,
            now,
        )))
    } else if deadline.is_some_and(|by| by <= now) {
        Some(Action::Fail(deployment_failure::fail(
            snap,
            d,
            description::PROGRESS_DEADLINE,
            now,
        )))
    } else if !replace.is_empty() {
        eval_for(snap, d, now).map(|e| Action::AllowReplacements(replace, e))
    } else if running && auto_promotable(d, &allocs) {
        eval_for(snap, d, now).map(Action::Promote)
    } else if done.values().all(|g| *g) && !eval_coming && !eval_pending(snap, d) {
        eval_for(snap, d, now).map(Action::Succeed)
    } else {
        None
    };
    if out.action.is_none() {
        out.deadline = deadline;
        out.wants_eval = !eval_coming && health_unseen(snap, d, &allocs);
    }
    out
}

/// The evaluation a deployment change asks for, of the job's current
/// version.
pub fn eval_for(snap: &StateSnapshot, d: &Deployment, now: i64) -> Option<Evaluation> {
    snap.job(&d.namespace, &d.job_id)
        .map(|job| deployment_eval(job, d.id, now))
}

/// Whether a health change of `d` still wants an evaluation (checked
/// again when the batch is written).
pub fn needs_eval(snap: &StateSnapshot, d: &Deployment) -> bool {
    d.active() && health_unseen(snap, d, &snap.allocs_by_deployment(&d.id))
}

/// Each group: done (see the module comment).
fn done_groups(d: &Deployment, allocs: &[Arc<Allocation>]) -> HashMap<String, bool> {
    let mut healthy: HashMap<&str, u32> = HashMap::new();
    for alloc in allocs {
        if !alloc.is_terminal() && is_healthy(alloc) {
            *healthy.entry(&alloc.task_group).or_default() += 1;
        }
    }
    d.task_groups
        .iter()
        .map(|(name, state)| {
            let enough = healthy.get(name.as_str()).copied().unwrap_or(0) >= state.desired_total;
            (name.clone(), !state.awaiting_promotion() && enough)
        })
        .collect()
}

fn is_healthy(alloc: &Allocation) -> bool {
    alloc
        .deployment_status
        .as_ref()
        .is_some_and(|s| s.is_healthy())
}

fn is_unhealthy(alloc: &Allocation) -> bool {
    alloc
        .deployment_status
        .as_ref()
        .is_some_and(|s| s.is_unhealthy())
}

/// Unhealthy allocations: whether one fails the deployment now (its group
/// has no progress deadline), and those of progress-deadline groups not yet
/// handed back for a replacement.
fn unhealthy(d: &Deployment, allocs: &[Arc<Allocation>]) -> (bool, Vec<AllocId>) {
    let mut replace = Vec::new();
    for alloc in allocs.iter().filter(|a| is_unhealthy(a)) {
        let Some(state) = d.task_groups.get(&*alloc.task_group) else {
            continue;
        };
        if state.progress_deadline.is_zero() {
            return (true, Vec::new());
        }
        if alloc.desired_transition.reschedule != Some(true) {
            replace.push(alloc.id);
        }
    }
    (false, replace)
}

/// The nearest `RequireProgressBy` of the groups not done.
fn progress_cutoff(d: &Deployment, done: &HashMap<String, bool>) -> Option<i64> {
    d.task_groups
        .iter()
        .filter(|(name, _)| !done.get(*name).copied().unwrap_or(false))
        .filter(|(_, s)| !s.progress_deadline.is_zero())
        .filter_map(|(_, s)| s.require_progress_by)
        .min()
}

/// Every group awaiting promotion promotes itself and has all its canaries
/// placed and healthy.
fn auto_promotable(d: &Deployment, allocs: &[Arc<Allocation>]) -> bool {
    let waiting: Vec<&DeploymentState> = d
        .task_groups
        .values()
        .filter(|s| s.awaiting_promotion())
        .collect();
    if waiting.is_empty() || !waiting.iter().all(|s| s.auto_promote) {
        return false;
    }
    let healthy: HashMap<AllocId, bool> = allocs
        .iter()
        .map(|a| (a.id, !a.is_terminal() && is_healthy(a)))
        .collect();
    waiting.iter().all(|s| {
        s.placed_canaries.len() >= s.desired_canaries as usize
            && s.placed_canaries
                .iter()
                .all(|id| healthy.get(id).copied().unwrap_or(false))
    })
}

/// An evaluation of the job is pending or blocked: it will visit the
/// deployment.
fn eval_pending(snap: &StateSnapshot, d: &Deployment) -> bool {
    snap.evals_by_job(&d.namespace, &d.job_id)
        .any(|e| !e.is_terminal())
}

/// A healthy allocation's health was recorded after the job's newest
/// evaluation was created (Nomad compares with the latest eval index).
fn health_unseen(snap: &StateSnapshot, d: &Deployment, allocs: &[Arc<Allocation>]) -> bool {
    let newest_health = allocs
        .iter()
        .filter(|a| is_healthy(a))
        .filter_map(|a| a.deployment_status.as_ref().map(|s| s.modify_index))
        .max();
    let Some(newest_health) = newest_health else {
        return false;
    };
    let newest_eval = snap
        .evals_by_job(&d.namespace, &d.job_id)
        .map(|e| e.create_index)
        .max()
        .unwrap_or(0);
    newest_health > newest_eval
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
