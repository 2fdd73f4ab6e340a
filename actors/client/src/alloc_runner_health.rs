//! The allocation runner's services, checks and health: which services
//! it wants registered, when its check watcher runs, and the health
//! tracker it feeds with task and check changes (a part of the runner,
//! kept in its own file).
//!
//! The services are wanted, and the checks run, while every task that
//! must run runs and the allocation is not being stopped; the health is
//! decided once (see [`crate::health_watcher`]) and kept with the
//! allocation's persisted copy, so a restarted client does not decide it
//! again; nor does it when the servers already hold a decision.

use super::{AllocRunner, Phase, TaskSlot};
use crate::alloc_services::{resolve, ServiceInputs};
use crate::check_watcher::{CheckWatcher, ChecksChanged, GetCheckResults, StopChecks};
use crate::checks::{CheckResult, CheckStatus};
use crate::health_watcher::{HealthPolicy, HealthTracker, TaskHealth};
use actix::prelude::*;
use herder::structs::{AllocDeploymentStatus, ServiceRegistration};

/// The allocation's checks' latest results (empty when it has none or
/// they do not run now).
#[derive(Clone, Debug, Message)]
#[rtype(result = "Vec<CheckResult>")]
pub struct GetChecks;

impl AllocRunner {
    /// Resolves the services and starts the health tracker, unless the
    /// health is already decided (here or by the servers) or not wanted.
    pub(super) fn init_health(&mut self) {
        let Some(group) = self.group.as_ref() else {
            return;
        };
        let c = &self.config;
        self.health.services = resolve(&ServiceInputs {
            alloc: &c.alloc,
            job: &c.job,
            group,
            node: &c.node,
            alloc_dir: &self.alloc_dir,
            host_env: &c.host_env,
        });
        self.restart_tracker();
    }

    /// A new tracker from now, for the allocation as it stands.
    fn restart_tracker(&mut self) {
        self.health.tracker = None;
        let decided = self
            .config
            .alloc
            .deployment_status()
            .is_some_and(AllocDeploymentStatus::has_health);
        let Some(group) = self.group.as_ref().filter(|_| !decided) else {
            return;
        };
        let in_deployment = self.config.alloc.deployment_id.is_some();
        if let Some(policy) = HealthPolicy::of(&self.config.job, group, in_deployment) {
            let has_checks = self.health.services.checks.iter().any(counts_for_health);
            let now = crate::now_nanos();
            let mut tracker = HealthTracker::new(policy, has_checks, now);
            // Checks already running (an in-place update into a new
            // deployment) report only on change: start from what they say.
            if !self.health.results.is_empty() {
                tracker.checks_changed(all_passing(&self.health.results), now);
            }
            self.health.tracker = Some(tracker);
        }
    }

    /// Whether every task that must run for the allocation to serve runs:
    /// the main tasks and the sidecars.
    fn serving(&self) -> bool {
        let mut must_run = self.slots.iter().filter(|s| must_run(s)).peekable();
        must_run.peek().is_some() && must_run.all(TaskSlot::running)
    }

    fn task_health(&self) -> TaskHealth {
        let failed = self
            .slots
            .iter()
            .any(|s| s.state.failed && s.phase != Phase::Poststop);
        if failed {
            return TaskHealth::Failed;
        }
        if !self.serving() {
            return TaskHealth::NotRunning;
        }
        let restarts = self
            .slots
            .iter()
            .filter(|s| must_run(s))
            .map(|s| s.state.restarts)
            .sum();
        TaskHealth::Running { restarts }
    }

    /// The registrations wanted in the catalog now.
    pub(super) fn wanted_services(&self) -> Vec<ServiceRegistration> {
        let live = !self.stopping && !self.config.alloc.server_terminal() && self.serving();
        if live {
            self.health.services.registrations.clone()
        } else {
            Vec::new()
        }
    }

    /// Starts the check watcher when the allocation serves, stops it when
    /// it no longer does; then feeds the tracker the tasks' state.
    pub(super) fn follow_tasks(&mut self, ctx: &mut Context<Self>) {
        let serving = self.serving() && !self.stopping;
        match (&self.health.watcher, serving) {
            (None, true) if !self.health.services.checks.is_empty() => {
                let watcher = CheckWatcher::new(
                    self.config.alloc.id.to_string(),
                    self.health.services.checks.clone(),
                    ctx.address().recipient(),
                );
                self.health.watcher = Some(watcher.start());
            }
            (Some(_), false) => self.stop_checks(),
            _ => {}
        }
        let tasks = self.task_health();
        let now = crate::now_nanos();
        if let Some(t) = self.health.tracker.as_mut() {
            t.tasks_changed(tasks, now);
        }
        self.decide_health(ctx);
    }

    pub(super) fn stop_checks(&mut self) {
        if let Some(w) = self.health.watcher.take() {
            w.do_send(StopChecks);
        }
        self.health.results.clear();
    }

    /// Asks the tracker for a decision now; records it, or wakes when
    /// one may be due.
    fn decide_health(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.health.timer.take() {
            ctx.cancel_future(timer);
        }
        if self.stopping {
            return;
        }
        let now = crate::now_nanos();
        let Some(tracker) = self.health.tracker.as_mut() else {
            return;
        };
        if let Some(v) = tracker.decide(now) {
            tracing::info!(alloc = %self.config.alloc.id, healthy = v.healthy, "allocation health decided");
            let canary = self.config.alloc.is_canary();
            self.config
                .alloc
                .set_deployment_status(Some(AllocDeploymentStatus {
                    healthy: Some(v.healthy),
                    timestamp: Some(v.timestamp),
                    canary,
                    modify_index: 0,
                }));
            return;
        }
        if let Some(at) = tracker.next_wake() {
            let wait = std::time::Duration::from_nanos(u64::try_from(at - now).unwrap_or(0));
            self.health.timer = Some(ctx.run_later(wait, |act, ctx| {
                act.health.timer = None;
                act.decide_health(ctx);
                act.publish();
            }));
        }
    }

    /// The decided health to report, if any.
    pub(super) fn reported_health(&self) -> Option<AllocDeploymentStatus> {
        self.config
            .alloc
            .deployment_status()
            .filter(|s| s.has_health())
            .cloned()
    }

    /// The allocation was updated in place to a new job version: its
    /// services and checks are resolved again, and the check watcher
    /// restarted when they changed.
    pub(super) fn job_updated(&mut self, ctx: &mut Context<Self>) {
        let Some(group) = self
            .config
            .job
            .lookup_task_group(&self.config.alloc.task_group)
        else {
            return;
        };
        let c = &self.config;
        let services = resolve(&ServiceInputs {
            alloc: &c.alloc,
            job: &c.job,
            group,
            node: &c.node,
            alloc_dir: &self.alloc_dir,
            host_env: &c.host_env,
        });
        self.group = Some(group.clone());
        if services == self.health.services {
            return;
        }
        self.health.services = services;
        self.stop_checks();
        self.follow_tasks(ctx);
        self.publish();
    }

    /// The servers' copy of the allocation moved to another deployment (an
    /// in-place update): its health is decided again.
    pub(super) fn deployment_changed(&mut self, ctx: &mut Context<Self>) {
        self.restart_tracker();
        self.follow_tasks(ctx);
    }
}

/// Whether every check that counts for health passes.
fn all_passing(results: &[CheckResult]) -> bool {
    results
        .iter()
        .filter(|r| r.counts_for_health())
        .all(|r| r.status == CheckStatus::Success)
}

/// A main task or a sidecar: one the allocation needs running.
fn must_run(slot: &TaskSlot) -> bool {
    slot.phase == Phase::Main || (slot.sidecar && slot.phase != Phase::Poststop)
}

fn counts_for_health(check: &crate::check_watcher::CheckSpec) -> bool {
    check.mode == "healthiness"
}

impl Handler<ChecksChanged> for AllocRunner {
    type Result = ();

    fn handle(&mut self, msg: ChecksChanged, ctx: &mut Context<Self>) {
        if self.health.watcher.is_none() {
            return; // a late report from a watcher already stopped
        }
        let passing = all_passing(&msg.0);
        self.health.results = msg.0;
        if let Some(t) = self.health.tracker.as_mut() {
            t.checks_changed(passing, crate::now_nanos());
        }
        self.decide_health(ctx);
        self.publish();
    }
}

impl Handler<GetChecks> for AllocRunner {
    type Result = ResponseFuture<Vec<CheckResult>>;

    fn handle(&mut self, _: GetChecks, _ctx: &mut Context<Self>) -> Self::Result {
        let watcher = self.health.watcher.clone();
        let known = self.health.results.clone();
        Box::pin(async move {
            match watcher {
                Some(w) => w.send(GetCheckResults).await.unwrap_or(known),
                None => known,
            }
        })
    }
}
