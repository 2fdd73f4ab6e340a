//! What failing a deployment writes: its status and, when a failing group
//! has `auto_revert`, the rollback to the job's latest stable version.
//!
//! One rule for every way a deployment fails (the watcher's verdict on an
//! unhealthy allocation or a missed progress deadline, a user's `deployment
//! fail`), as Nomad's deployment watcher applies it: the newest stable
//! version is registered again as a new version, unless its spec is the
//! current job's (then there is nothing to go back to, and the description
//! says so), or there is none.

use crate::state::{Command, StateSnapshot};
use crate::structs::deployment::{deployment_eval, description};
use crate::structs::{Deployment, DeploymentStatus, DeploymentStatusUpdate, Job};
use std::sync::Arc;

/// The failure of a deployment, ready to be written as one command.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub update: DeploymentStatusUpdate,
    /// The stable version registered again, when rolling back.
    pub revert_to: Option<Arc<Job>>,
    /// The evaluation that follows (for the reverted job, or the current).
    pub eval: Option<crate::structs::Evaluation>,
}

impl Failure {
    /// The version the job goes back to, if any.
    pub fn reverted_version(&self) -> Option<u64> {
        self.revert_to.as_ref().map(|j| j.version)
    }

    pub fn into_command(self) -> Command {
        Command::DeploymentStatusUpdate {
            update: self.update,
            job: self.revert_to,
            eval: self.eval,
        }
    }
}

/// Fails `d` with `base` as the reason (one of `description`'s), at `now`
/// (Unix nanoseconds).
pub fn fail(snap: &StateSnapshot, d: &Deployment, base: &str, now: i64) -> Failure {
    let current = snap.job(&d.namespace, &d.job_id).cloned();
    let wants_revert = d.task_groups.values().any(|g| g.auto_revert);
    let mut revert_to = None;
    let status_description = match (&current, wants_revert) {
        (Some(current), true) => match latest_stable(snap, d, current) {
            None => description::no_rollback_target(base),
            Some(stable) if !stable.spec_changed(current) => {
                description::rollback_noop(base, stable.version)
            }
            Some(stable) => {
                let text = description::rollback(base, stable.version);
                revert_to = Some(stable);
                text
            }
        },
        _ => base.to_string(),
    };
    let eval = current.as_ref().map(|job| {
        let basis: &Job = revert_to.as_deref().unwrap_or(job);
        deployment_eval(basis, d.id, now)
    });
    Failure {
        update: DeploymentStatusUpdate {
            deployment_id: d.id,
            status: DeploymentStatus::Failed,
            status_description,
        },
        revert_to,
        eval,
    }
}

/// The newest version marked stable, older than the deployment's.
fn latest_stable(snap: &StateSnapshot, d: &Deployment, current: &Job) -> Option<Arc<Job>> {
    snap.job_versions(&current.namespace, &current.id)
        .filter(|j| j.stable && j.version < d.job_version)
        .max_by_key(|j| j.version)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures;
    use crate::structs::{DeploymentState, TriggeredBy};

    fn register(snap: &mut StateSnapshot, job: &Job) {
        let index = snap.latest_index() + 1;
        snap.apply(
            index,
            &Command::JobRegister {
                job: Arc::new(job.clone()),
                eval: None,
                enforce_index: None,
            },
        )
        .unwrap();
    }

    fn mark_stable(snap: &mut StateSnapshot, version: u64) {
        let index = snap.latest_index() + 1;
        snap.apply(
            index,
            &Command::JobStabilityUpdate {
                namespace: "default".into(),
                job_id: "web".into(),
                version,
                stable: true,
            },
        )
        .unwrap();
    }

    /// Versions 0 (stable) and 1 (being deployed) of `web`, with a
    /// deployment of version 1 whose group auto-reverts as asked.
    fn world(auto_revert: bool, v1_same_spec: bool) -> (StateSnapshot, Deployment) {
        let mut snap = StateSnapshot::new();
        let mut job = fixtures::job("default", "web", &[("frontend", 3)]);
        register(&mut snap, &job);
        mark_stable(&mut snap, 0);
        job.meta
            .insert("v".into(), if v1_same_spec { "0" } else { "1" }.into());
        register(&mut snap, &job);
        if v1_same_spec {
            // A third version equal to the first, being deployed.
            job.meta.remove("v");
            register(&mut snap, &job);
        }
        let current = snap.job("default", "web").unwrap().clone();
        let mut d = Deployment::new(&current, 50);
        d.task_groups.insert(
            "frontend".into(),
            DeploymentState {
                auto_revert,
                ..Default::default()
            },
        );
        let index = snap.latest_index() + 1;
        snap.apply(
            index,
            &Command::ApplyPlanResults(crate::state::command::PlanResults {
                deployment: Some(Arc::new(d.clone())),
                ..Default::default()
            }),
        )
        .unwrap();
        (snap, d)
    }

    #[test]
    fn an_auto_reverting_failure_registers_the_stable_version_again() {
        let (snap, d) = world(true, false);
        let f = fail(&snap, &d, description::FAILED_ALLOCATIONS, 7);
        assert_eq!(f.reverted_version(), Some(0));
        assert_eq!(
            f.update.status_description,
            "Failed due to unhealthy allocations - rolling back to job version 0"
        );
        let eval = f.eval.as_ref().unwrap();
        assert_eq!(eval.triggered_by, TriggeredBy::DeploymentWatcher);
        assert_eq!(eval.deployment_id, d.id.to_string());
        let mut after = snap.clone();
        after
            .apply(snap.latest_index() + 1, &f.into_command())
            .unwrap();
        let job = after.job("default", "web").unwrap();
        assert_eq!(job.version, 2, "the revert is a new version");
        assert!(!job.meta.contains_key("v"));
        assert_eq!(
            after.deployment(&d.id).map(|d| d.status),
            Some(DeploymentStatus::Failed)
        );
    }

    #[test]
    fn without_auto_revert_only_the_status_changes() {
        let (snap, d) = world(false, false);
        let f = fail(&snap, &d, description::FAILED_BY_USER, 7);
        assert_eq!(f.reverted_version(), None);
        assert_eq!(f.update.status_description, description::FAILED_BY_USER);
    }

    #[test]
    fn the_same_spec_is_not_rolled_back_to() {
        let (snap, d) = world(true, true);
        let f = fail(&snap, &d, description::PROGRESS_DEADLINE, 7);
        assert_eq!(f.reverted_version(), None);
        assert_eq!(
            f.update.status_description,
            "Failed due to progress deadline - not rolling back to stable job version 0 as current job has same specification"
        );
    }
}
