//! An allocation's health, decided once on the client as Nomad's health
//! hook does, for service jobs whose group has an `update` block: with a
//! deployment that block says how, otherwise (a migration, a plain
//! placement) the group's `migrate` block.
//!
//! - `task_states`: healthy once every task that must run (main tasks and
//!   sidecars; a lifecycle task that is not a sidecar only may not fail)
//!   has run for `min_healthy_time` without a restart in that window;
//! - `checks`: the same, and every check that counts for health
//!   (`on_update` other than `ignore`) passing for `min_healthy_time`;
//! - `manual`: the client reports nothing.
//!
//! Unhealthy as soon as a task fails, or when `healthy_deadline` passes
//! first. [`HealthTracker`] is a pure state machine fed with the time
//! (Unix nanoseconds), so its tests need no clock; the allocation runner
//! feeds it task and check changes and wakes it at [`HealthTracker::next_wake`].

use herder::structs::{Job, JobType, TaskGroup};
use std::time::Duration;

/// How an allocation's health is decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthMode {
    TaskStates,
    Checks,
}

/// The group's health settings in effect for one allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthPolicy {
    pub mode: HealthMode,
    pub min_healthy_time: Duration,
    pub healthy_deadline: Duration,
}

impl HealthPolicy {
    /// The policy for an allocation of `group`: from the `update` block
    /// when it belongs to a deployment, else from `migrate`; `None` for
    /// anything but a service job, or a group without an `update` block or
    /// with `manual` health (as Nomad's health hook decides whether to run).
    pub fn of(job: &Job, group: &TaskGroup, in_deployment: bool) -> Option<HealthPolicy> {
        let update = group.update.as_ref()?;
        if job.job_type != JobType::Service || update.health_check == "manual" {
            return None;
        }
        let (check, min, deadline) = if in_deployment {
            let u = update;
            (&u.health_check, u.min_healthy_time, u.healthy_deadline)
        } else {
            let m = group.migrate.as_ref()?;
            (&m.health_check, m.min_healthy_time, m.healthy_deadline)
        };
        let mode = match check.as_str() {
            "task_states" => HealthMode::TaskStates,
            // Nomad's default.
            "checks" | "" => HealthMode::Checks,
            _ => return None,
        };
        Some(HealthPolicy {
            mode,
            min_healthy_time: min,
            healthy_deadline: deadline,
        })
    }
}

/// What the tasks that count say now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskHealth {
    /// Every task that must run runs; `restarts` is their restart count
    /// so far (a restart restarts the window).
    Running { restarts: u64 },
    /// Some are not running (yet, or any more).
    NotRunning,
    /// A task failed.
    Failed,
}

/// The decision, once made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthVerdict {
    pub healthy: bool,
    /// Unix nanoseconds of the decision.
    pub timestamp: i64,
}

/// One allocation's health decision in the making.
#[derive(Clone, Debug)]
pub struct HealthTracker {
    policy: HealthPolicy,
    deadline: i64,
    tasks_ok_since: Option<i64>,
    restarts: u64,
    tasks_failed: bool,
    /// `None` until checks are reported; with no checks, passing.
    checks_ok_since: Option<i64>,
    verdict: Option<HealthVerdict>,
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl HealthTracker {
    /// Starts tracking at `now`; `has_checks` says whether the checks
    /// mode waits for checks at all.
    pub fn new(policy: HealthPolicy, has_checks: bool, now: i64) -> Self {
        HealthTracker {
            policy,
            deadline: now.saturating_add(nanos(policy.healthy_deadline)),
            tasks_ok_since: None,
            restarts: 0,
            tasks_failed: false,
            checks_ok_since: (!has_checks || policy.mode == HealthMode::TaskStates).then_some(now),
            verdict: None,
        }
    }

    /// The decision, once made.
    pub fn verdict(&self) -> Option<HealthVerdict> {
        self.verdict
    }

    /// The tasks changed.
    pub fn tasks_changed(&mut self, tasks: TaskHealth, now: i64) {
        match tasks {
            TaskHealth::Failed => self.tasks_failed = true,
            TaskHealth::NotRunning => self.tasks_ok_since = None,
            TaskHealth::Running { restarts } => {
                if self.tasks_ok_since.is_none() || restarts != self.restarts {
                    self.tasks_ok_since = Some(now);
                }
                self.restarts = restarts;
            }
        }
    }

    /// The checks changed: whether every one that counts passes now.
    pub fn checks_changed(&mut self, all_passing: bool, now: i64) {
        if self.policy.mode == HealthMode::TaskStates {
            return;
        }
        self.checks_ok_since = match (all_passing, self.checks_ok_since) {
            (true, Some(since)) => Some(since),
            (true, None) => Some(now),
            (false, _) => None,
        };
    }

    /// Since when everything the mode asks for has held, if it holds.
    fn healthy_since(&self) -> Option<i64> {
        Some(self.tasks_ok_since?.max(self.checks_ok_since?))
    }

    /// Decides if it is time; answers the decision the first time only.
    pub fn decide(&mut self, now: i64) -> Option<HealthVerdict> {
        if self.verdict.is_some() {
            return None;
        }
        let min = nanos(self.policy.min_healthy_time);
        let healthy = if self.tasks_failed {
            Some(false)
        } else if self
            .healthy_since()
            .is_some_and(|since| now >= since.saturating_add(min))
        {
            Some(true)
        } else if now >= self.deadline {
            Some(false)
        } else {
            None
        };
        self.verdict = healthy.map(|healthy| HealthVerdict {
            healthy,
            timestamp: now,
        });
        self.verdict
    }

    /// When [`decide`](Self::decide) may next change its mind: the end of
    /// the healthy window under way, or the deadline.
    pub fn next_wake(&self) -> Option<i64> {
        if self.verdict.is_some() {
            return None;
        }
        let window_end = self
            .healthy_since()
            .map(|since| since.saturating_add(nanos(self.policy.min_healthy_time)));
        Some(window_end.map_or(self.deadline, |end| end.min(self.deadline)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn policy(mode: HealthMode) -> HealthPolicy {
        HealthPolicy {
            mode,
            min_healthy_time: Duration::from_secs(10),
            healthy_deadline: Duration::from_secs(60),
        }
    }

    #[test]
    fn task_states_healthy_after_min_healthy_time_running() {
        let mut t = HealthTracker::new(policy(HealthMode::TaskStates), true, 0);
        t.tasks_changed(TaskHealth::NotRunning, 0);
        assert_eq!(t.decide(S), None);
        t.tasks_changed(TaskHealth::Running { restarts: 0 }, 2 * S);
        assert_eq!(t.next_wake(), Some(12 * S));
        assert_eq!(t.decide(11 * S), None);
        let v = t.decide(12 * S).unwrap();
        assert_eq!((v.healthy, v.timestamp), (true, 12 * S));
        // Decided once.
        assert_eq!(t.decide(13 * S), None);
        assert_eq!(t.verdict(), Some(v));
        assert_eq!(t.next_wake(), None);
    }

    #[test]
    fn a_restart_inside_the_window_starts_it_again() {
        let mut t = HealthTracker::new(policy(HealthMode::TaskStates), false, 0);
        t.tasks_changed(TaskHealth::Running { restarts: 0 }, 0);
        t.tasks_changed(TaskHealth::Running { restarts: 1 }, 8 * S);
        assert_eq!(t.decide(10 * S), None);
        assert_eq!(t.next_wake(), Some(18 * S));
        assert!(t.decide(18 * S).unwrap().healthy);
    }

    #[test]
    fn a_failed_task_is_unhealthy_at_once() {
        let mut t = HealthTracker::new(policy(HealthMode::TaskStates), false, 0);
        t.tasks_changed(TaskHealth::Running { restarts: 0 }, 0);
        t.tasks_changed(TaskHealth::Failed, 3 * S);
        let v = t.decide(3 * S).unwrap();
        assert_eq!((v.healthy, v.timestamp), (false, 3 * S));
    }

    #[test]
    fn the_deadline_makes_it_unhealthy() {
        let mut t = HealthTracker::new(policy(HealthMode::TaskStates), false, 0);
        t.tasks_changed(TaskHealth::Running { restarts: 0 }, 55 * S);
        assert_eq!(t.next_wake(), Some(60 * S));
        assert_eq!(t.decide(59 * S), None);
        assert!(!t.decide(60 * S).unwrap().healthy);
    }

    #[test]
    fn checks_must_pass_for_min_healthy_time_too() {
        let mut t = HealthTracker::new(policy(HealthMode::Checks), true, 0);
        t.tasks_changed(TaskHealth::Running { restarts: 0 }, 0);
        assert_eq!(t.decide(20 * S), None, "no check passed yet");
        t.checks_changed(true, 21 * S);
        t.checks_changed(false, 25 * S);
        assert_eq!(t.decide(31 * S), None, "the checks failed in the window");
        t.checks_changed(true, 32 * S);
        t.checks_changed(true, 35 * S);
        assert_eq!(t.next_wake(), Some(42 * S));
        assert!(t.decide(42 * S).unwrap().healthy);
    }

    #[test]
    fn checks_mode_without_checks_is_task_states() {
        let mut t = HealthTracker::new(policy(HealthMode::Checks), false, 0);
        t.tasks_changed(TaskHealth::Running { restarts: 0 }, 0);
        assert!(t.decide(10 * S).unwrap().healthy);
    }

    #[test]
    fn the_policy_comes_from_update_in_a_deployment_else_migrate() {
        use herder::structs::{MigrateStrategy, UpdateStrategy};
        let job = Job::default();
        let group = TaskGroup {
            update: Some(UpdateStrategy {
                health_check: "task_states".into(),
                min_healthy_time: Duration::from_secs(1),
                healthy_deadline: Duration::from_secs(2),
                ..Default::default()
            }),
            migrate: Some(MigrateStrategy::default()),
            ..Default::default()
        };
        let p = HealthPolicy::of(&job, &group, true).unwrap();
        assert_eq!(
            (p.mode, p.min_healthy_time),
            (HealthMode::TaskStates, Duration::from_secs(1))
        );
        let p = HealthPolicy::of(&job, &group, false).unwrap();
        assert_eq!(
            (p.mode, p.min_healthy_time),
            (HealthMode::Checks, Duration::from_secs(10))
        );
        let mut manual = group.clone();
        if let Some(u) = manual.update.as_mut() {
            u.health_check = "manual".into();
        }
        assert!(HealthPolicy::of(&job, &manual, true).is_none());
        assert!(HealthPolicy::of(&job, &manual, false).is_none());
        let no_update = TaskGroup {
            update: None,
            ..group.clone()
        };
        assert!(HealthPolicy::of(&job, &no_update, false).is_none());
        let batch = Job {
            job_type: JobType::Batch,
            ..Default::default()
        };
        assert!(HealthPolicy::of(&batch, &group, true).is_none());
    }
}
