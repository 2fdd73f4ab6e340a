//! The restart policy of one task: after each exit or failed start, whether
//! to start it again and after how long, as Nomad's restart tracker decides.
//!
//! `attempts` restarts are allowed per `interval`, counted from the first
//! start; each restart waits `delay` plus up to 25% jitter. Past the limit,
//! mode `fail` gives up (the task fails) and mode `delay` waits until the
//! interval ends and starts counting again. Service tasks are restarted even
//! after a successful exit; batch tasks that succeed are done.

use crate::driver::{DriverError, ExitResult};
use herder::structs::RestartPolicy;
use std::time::{Duration, Instant};

pub const REASON_WITHIN_POLICY: &str = "Restart within policy";
pub const REASON_NO_RESTARTS: &str = "Policy allows no restarts";
pub const REASON_UNRECOVERABLE: &str = "Error was unrecoverable";
pub const REASON_DELAY: &str = "Exceeded allowed attempts, applying a delay";
pub const REASON_SUCCESS: &str = "Restart unnecessary as task terminated successfully";

/// What to do after an exit or a failed start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestartDecision {
    /// Start again after `delay`.
    Restart { delay: Duration, reason: String },
    /// Give up: the task has failed.
    NotRestarting { reason: String },
    /// Done: the task completed and needs no restart.
    Terminated { reason: String },
}

#[derive(Clone, Debug)]
pub struct RestartTracker {
    policy: RestartPolicy,
    restart_on_success: bool,
    count: i32,
    interval_start: Instant,
}

impl RestartTracker {
    /// `batch` work is not restarted after it succeeds.
    pub fn new(policy: RestartPolicy, batch: bool, now: Instant) -> Self {
        RestartTracker {
            policy,
            restart_on_success: !batch,
            count: 0,
            interval_start: now,
        }
    }

    pub fn on_exit(&mut self, exit: &ExitResult, now: Instant) -> RestartDecision {
        if exit.successful() && !self.restart_on_success {
            return RestartDecision::Terminated {
                reason: REASON_SUCCESS.into(),
            };
        }
        self.count_failure(now)
    }

    pub fn on_start_error(&mut self, err: &DriverError, now: Instant) -> RestartDecision {
        if !err.is_recoverable() {
            return RestartDecision::NotRestarting {
                reason: REASON_UNRECOVERABLE.into(),
            };
        }
        self.count_failure(now)
    }

    fn count_failure(&mut self, now: Instant) -> RestartDecision {
        if self.policy.attempts <= 0 {
            return RestartDecision::NotRestarting {
                reason: REASON_NO_RESTARTS.into(),
            };
        }
        let interval_end = self.interval_start + self.policy.interval;
        if now > interval_end {
            self.count = 0;
            self.interval_start = now;
        }
        self.count += 1;
        if self.count <= self.policy.attempts {
            return RestartDecision::Restart {
                delay: jitter(self.policy.delay),
                reason: REASON_WITHIN_POLICY.into(),
            };
        }
        if self.policy.mode == herder::structs::job::restart_mode::DELAY {
            // Wait out the interval; the next failure starts a new one.
            let wait = (self.interval_start + self.policy.interval).saturating_duration_since(now);
            return RestartDecision::Restart {
                delay: wait.max(self.policy.delay),
                reason: REASON_DELAY.into(),
            };
        }
        RestartDecision::NotRestarting {
            reason: format!(
                "Exceeded allowed attempts {} in interval {} and mode is \"fail\"",
                self.policy.attempts,
                go_duration(self.policy.interval)
            ),
        }
    }
}

/// `delay` plus up to a quarter more, so restarts of many tasks spread out.
fn jitter(delay: Duration) -> Duration {
    use rand::Rng;
    if delay.is_zero() {
        return delay;
    }
    let extra = rand::thread_rng().gen_range(0.0..0.25);
    delay + delay.mul_f64(extra)
}

/// Formats a duration as Go prints one (`30m0s`, `24h0m0s`, `1.5s`, `250ms`).
pub fn go_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    let total = d.as_secs();
    let (h, m) = (total / 3600, (total % 3600) / 60);
    let secs = (total % 60) as f64 + f64::from(d.subsec_nanos()) / 1e9;
    let s = format!("{secs}s");
    match (h, m) {
        (0, 0) => s,
        (0, m) => format!("{m}m{s}"),
        (h, m) => format!("{h}h{m}m{s}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(attempts: i32, mode: &str) -> RestartPolicy {
        RestartPolicy {
            attempts,
            interval: Duration::from_secs(60),
            delay: Duration::from_secs(2),
            mode: mode.into(),
        }
    }

    fn failed() -> ExitResult {
        ExitResult {
            exit_code: 1,
            ..Default::default()
        }
    }

    #[test]
    fn fail_mode_gives_up_after_attempts_within_interval() {
        let t0 = Instant::now();
        let mut r = RestartTracker::new(policy(2, "fail"), false, t0);
        for _ in 0..2 {
            match r.on_exit(&failed(), t0) {
                RestartDecision::Restart { delay, reason } => {
                    assert!(
                        delay >= Duration::from_secs(2) && delay <= Duration::from_millis(2500)
                    );
                    assert_eq!(reason, REASON_WITHIN_POLICY);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            r.on_exit(&failed(), t0),
            RestartDecision::NotRestarting {
                reason: "Exceeded allowed attempts 2 in interval 1m0s and mode is \"fail\"".into()
            }
        );
    }

    #[test]
    fn a_new_interval_resets_the_count_and_delay_mode_waits_it_out() {
        let t0 = Instant::now();
        let mut r = RestartTracker::new(policy(1, "fail"), false, t0);
        assert!(matches!(
            r.on_exit(&failed(), t0),
            RestartDecision::Restart { .. }
        ));
        let later = t0 + Duration::from_secs(61);
        assert!(matches!(
            r.on_exit(&failed(), later),
            RestartDecision::Restart { .. }
        ));
        let mut d = RestartTracker::new(policy(1, "delay"), false, t0);
        d.on_exit(&failed(), t0);
        match d.on_exit(&failed(), t0 + Duration::from_secs(10)) {
            RestartDecision::Restart { delay, reason } => {
                assert_eq!(reason, REASON_DELAY);
                assert_eq!(delay, Duration::from_secs(50));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn success_ends_batch_but_restarts_service_and_unrecoverable_errors_stop() {
        let t0 = Instant::now();
        let ok = ExitResult::default();
        let mut batch = RestartTracker::new(policy(2, "fail"), true, t0);
        assert!(matches!(
            batch.on_exit(&ok, t0),
            RestartDecision::Terminated { .. }
        ));
        let mut service = RestartTracker::new(policy(2, "fail"), false, t0);
        assert!(matches!(
            service.on_exit(&ok, t0),
            RestartDecision::Restart { .. }
        ));
        let fatal = DriverError::task("bad config");
        assert_eq!(
            service.on_start_error(&fatal, t0),
            RestartDecision::NotRestarting {
                reason: REASON_UNRECOVERABLE.into()
            }
        );
        let mut none = RestartTracker::new(policy(0, "fail"), false, t0);
        assert_eq!(
            none.on_exit(&failed(), t0),
            RestartDecision::NotRestarting {
                reason: REASON_NO_RESTARTS.into()
            }
        );
        assert_eq!(go_duration(Duration::from_secs(24 * 3600)), "24h0m0s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
    }
}
