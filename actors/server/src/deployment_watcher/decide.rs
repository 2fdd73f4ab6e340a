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
//! - otherwise, a health counted since the watcher last looked (on a first
//!   look: newer than the job's newest evaluation) asks for an
//!   evaluation, so the scheduler places the next batch.
//!
//! A group is done when it needs no promotion and as many of its
//! allocations were found healthy as it wants. The deployment's counts
//! (kept by the store) answer that and the failures; allocations are read
//! only where a count cannot tell: the canaries to promote, and the
//! allocations the watcher has news of (those written since it last
//! looked; all of them on a first look), so a large deployment costs a
//! look at what changed, not a scan per change.

use herder::deployment_failure::{self, Failure};
use herder::state::{AppliedChanges, Command, Row, StateSnapshot};
use herder::structs::deployment::{deployment_eval, description};
use herder::structs::{
    AllocId, Allocation, Deployment, DeploymentId, DeploymentState, DeploymentStatus,
    DeploymentStatusUpdate, DesiredTransition, Evaluation,
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

/// What the watcher learned of a deployment since it last looked.
#[derive(Clone, Copy, Debug, Default)]
pub struct News<'a> {
    /// Its allocations written since (all of them on a first look).
    pub allocs: &'a [Arc<Allocation>],
    /// A health was counted since that no evaluation has seen.
    pub health: bool,
    /// The watcher has an evaluation of it batched or being written.
    pub eval_coming: bool,
}

/// What a first look at `d` knows: all its allocations, and whether a
/// health is newer than the job's newest evaluation (Nomad compares with
/// the latest evaluation index, so a new leader asks again for what the
/// old one had not).
pub fn first_look(snap: &StateSnapshot, d: &Deployment) -> (Vec<Arc<Allocation>>, bool) {
    let allocs = snap.allocs_by_deployment(&d.id);
    let unseen = health_unseen(snap, d, &allocs);
    (allocs, unseen)
}

/// The deployments `changes` created (written at the change set's own
/// index), for `first_look_at_birth`; a deployment only updated there is
/// not one of them.
pub fn born(changes: &AppliedChanges) -> impl Iterator<Item = DeploymentId> + '_ {
    changes.changes.iter().filter_map(|c| match &c.row {
        Some(Row::Deployment(d)) if d.create_index == changes.index => Some(d.id),
        _ => None,
    })
}

/// `first_look` at a deployment created by the change set being read:
/// every allocation it has was written there too, so the change set's
/// (`news`) are all of them. Reading them back from the state cost a walk
/// of the allocation table each, on the thread that also checks plans.
pub fn first_look_at_birth(
    snap: &StateSnapshot,
    d: &Deployment,
    news: Vec<Arc<Allocation>>,
) -> (Vec<Arc<Allocation>>, bool) {
    let unseen = health_unseen(snap, d, &news);
    (news, unseen)
}

/// The healthy allocations the deployment has counted, over its groups.
pub fn healthy_count(d: &Deployment) -> u64 {
    d.task_groups
        .values()
        .map(|g| u64::from(g.healthy_allocs))
        .sum()
}

/// Assesses `d` at `now` (Unix nanoseconds) with what the watcher learned.
pub fn assess(snap: &StateSnapshot, d: &Deployment, now: i64, news: News<'_>) -> Assessment {
    let mut out = Assessment::default();
    if !d.active() || snap.job(&d.namespace, &d.job_id).is_none() {
        return out;
    }
    let done = done_groups(d);
    let fail_now = d
        .task_groups
        .values()
        .any(|g| g.progress_deadline.is_zero() && g.unhealthy_allocs > 0);
    let replace = to_replace(snap, d, news.allocs);
    let running = d.status == DeploymentStatus::Running;
    let deadline = if running {
        progress_cutoff(d, &done)
    } else {
        None
    };
    let failure = if fail_now {
        Some(description::FAILED_ALLOCATIONS)
    } else if deadline.is_some_and(|by| by <= now) {
        Some(description::PROGRESS_DEADLINE)
    } else {
        None
    };
    out.action = if let Some(base) = failure {
        Some(Action::Fail(deployment_failure::fail(snap, d, base, now)))
    } else if !replace.is_empty() {
        eval_for(snap, d, now).map(|e| Action::AllowReplacements(replace, e))
    } else if running && auto_promotable(snap, d) {
        eval_for(snap, d, now).map(Action::Promote)
    } else if done.values().all(|g| *g) && !news.eval_coming && !eval_pending(snap, d) {
        eval_for(snap, d, now).map(Action::Succeed)
    } else {
        None
    };
    if out.action.is_none() {
        out.deadline = deadline;
        out.wants_eval = news.health && !news.eval_coming;
    }
    out
}

/// The evaluation a deployment change asks for, of the job's current
/// version.
pub fn eval_for(snap: &StateSnapshot, d: &Deployment, now: i64) -> Option<Evaluation> {
    snap.job(&d.namespace, &d.job_id)
        .map(|job| deployment_eval(job, d.id, now))
}

/// Each group: done (see the module comment).
fn done_groups(d: &Deployment) -> HashMap<String, bool> {
    d.task_groups
        .iter()
        .map(|(name, state)| {
            let enough = state.healthy_allocs >= state.desired_total;
            (name.clone(), !state.awaiting_promotion() && enough)
        })
        .collect()
}

fn is_healthy(alloc: &Allocation) -> bool {
    alloc.deployment_status().is_some_and(|s| s.is_healthy())
}

fn is_unhealthy(alloc: &Allocation) -> bool {
    alloc.deployment_status().is_some_and(|s| s.is_unhealthy())
}

/// The unhealthy allocations among `news` of groups with a progress
/// deadline, not yet handed back for a replacement (read as they are now).
fn to_replace(snap: &StateSnapshot, d: &Deployment, news: &[Arc<Allocation>]) -> Vec<AllocId> {
    let mut ids: Vec<AllocId> = news
        .iter()
        .filter_map(|a| snap.alloc(&a.id))
        .filter(|a| a.deployment_id == Some(d.id) && is_unhealthy(a))
        .filter(|a| a.desired_transition.reschedule != Some(true))
        .filter(|a| {
            d.task_groups
                .get(&*a.task_group)
                .is_some_and(|g| !g.progress_deadline.is_zero())
        })
        .map(|a| a.id)
        .collect();
    ids.sort();
    ids.dedup();
    ids
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
/// placed, live and healthy.
fn auto_promotable(snap: &StateSnapshot, d: &Deployment) -> bool {
    let waiting: Vec<&DeploymentState> = d
        .task_groups
        .values()
        .filter(|s| s.awaiting_promotion())
        .collect();
    if waiting.is_empty() || !waiting.iter().all(|s| s.auto_promote) {
        return false;
    }
    waiting.iter().all(|s| {
        s.placed_canaries.len() >= s.desired_canaries as usize
            && s.placed_canaries.iter().all(|id| {
                snap.alloc(id)
                    .is_some_and(|a| !a.is_terminal() && is_healthy(a))
            })
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
        .filter_map(|a| a.deployment_status().map(|s| s.modify_index))
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
