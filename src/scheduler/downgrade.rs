//! Nomad's `downgradeNonCanary`: while a group's canaries are on trial, an
//! allocation that replaces one of the old version's (failed, lost,
//! migrating) or adds to them (a scale-up) runs the old version. Placing
//! the new version there instead would put the untried version in service
//! beside the canaries, beyond the number the operator agreed to try.
//!
//! The old version is the one the job's newest deployment of that group
//! rolled out for good (without canaries, or promoted); failing that, the
//! replaced allocation's own version when it had no `update` block (and so
//! no deployment). When neither is found the current version is placed, as
//! Nomad does.

use super::context::EvalContext;
use super::stack::{Stack, StackKind};
use crate::structs::{DeploymentId, Job};
use crate::view::State;
use std::sync::Arc;

/// The version a downgraded placement runs, with a stack of its own (that
/// version's constraints and groups decide where it may go).
pub struct Downgrade {
    pub job: Arc<Job>,
    /// The deployment that rolled that version out: the placement joins it.
    pub deployment_id: Option<DeploymentId>,
    pub stack: Stack,
}

/// The downgrades of one evaluation, each resolved and built once.
pub struct Downgrades {
    kind: StackKind,
    seed: u64,
    /// (group, lowest acceptable version) → index in `targets`, or none.
    resolved: Vec<((String, u64), Option<usize>)>,
    targets: Vec<Downgrade>,
}

impl Downgrades {
    pub fn new(kind: StackKind, seed: u64) -> Self {
        Downgrades {
            kind,
            seed,
            resolved: Vec::new(),
            targets: Vec::new(),
        }
    }

    /// Where a placement of `group` replacing version `min` or newer goes
    /// instead of the current version; `None`: the current version.
    pub fn target(
        &mut self,
        ctx: &EvalContext,
        job: &Job,
        group: &str,
        min: u64,
    ) -> Option<&mut Downgrade> {
        let key = (group.to_string(), min);
        let found = match self.resolved.iter().find(|(k, _)| *k == key) {
            Some((_, slot)) => *slot,
            None => {
                let slot = self.resolve(ctx, job, group, min);
                self.resolved.push((key, slot));
                slot
            }
        };
        found.and_then(|i| self.targets.get_mut(i))
    }

    fn resolve(&mut self, ctx: &EvalContext, job: &Job, group: &str, min: u64) -> Option<usize> {
        let (deployment_id, old) = downgraded_job(&*ctx.state, job, group, min)?;
        if old.version == job.version {
            return None;
        }
        if let Some(i) = self
            .targets
            .iter()
            .position(|t| t.job.version == old.version)
        {
            return Some(i);
        }
        let mut stack = Stack::new(self.kind, old.clone(), ctx, self.seed ^ old.version);
        let ready = stack.catalog().ready_for(&old);
        stack.set_candidates(ready.positions);
        self.targets.push(Downgrade {
            job: old,
            deployment_id,
            stack,
        });
        Some(self.targets.len() - 1)
    }
}

/// Nomad's choice of the version to downgrade to (see the module comment),
/// with the deployment that rolled it out.
pub fn downgraded_job(
    state: &dyn State,
    job: &Job,
    group: &str,
    min: u64,
) -> Option<(Option<DeploymentId>, Arc<Job>)> {
    let mut deployments = state.deployments_of_job(&job.namespace, &job.id);
    deployments.sort_by_key(|d| std::cmp::Reverse(d.job_version));
    let rolled_out = deployments.iter().find(|d| {
        d.task_groups
            .get(group)
            .is_some_and(|g| g.promoted || g.desired_canaries == 0)
    });
    if let Some(d) = rolled_out {
        let old = state.job_by_version(&job.namespace, &job.id, d.job_version)?;
        let usable = old.version >= min && old.lookup_task_group(group).is_some();
        return usable.then_some((Some(d.id), old));
    }
    let old = state.job_by_version(&job.namespace, &job.id, min)?;
    let no_update = old
        .lookup_task_group(group)
        .is_some_and(|tg| tg.update.as_ref().is_none_or(|u| u.max_parallel == 0));
    no_update.then_some((None, old))
}
