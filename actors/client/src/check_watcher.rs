//! The check watcher: one actor per running allocation that has checks.
//! It runs each check at once and then every `interval` (one run of a
//! check at a time, each bounded by its `timeout`), keeps each check's
//! latest result, and tells its allocation runner whenever a check's
//! status changes. The runner starts it when the allocation's main tasks
//! run and stops it ([`StopChecks`]) when the allocation stops.

use crate::checks::{run_probe, CheckResult, CheckStatus, Outcome, Probe};
use actix::prelude::*;
use std::time::Duration;

/// One check of the allocation, resolved (see `alloc_services`).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckSpec {
    pub id: String,
    pub name: String,
    pub group: String,
    pub task: String,
    pub service: String,
    /// `healthiness` or `readiness`.
    pub mode: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub probe: Probe,
    /// Consul's `success_before_passing` and `failures_before_critical`:
    /// how many results in a row move the status (0 and 1 both mean one).
    pub successes_to_pass: u32,
    pub failures_to_fail: u32,
}

/// A check's results in a row, for the thresholds above: the status moves
/// only once as many passes (or failures) in a row as the check asks for
/// have been seen, so one flap does not turn an allocation unhealthy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Streak {
    passes: u32,
    failures: u32,
}

impl Streak {
    /// Counts `outcome` and says the status the check shows now.
    fn next(&mut self, current: CheckStatus, passed: bool, spec: &CheckSpec) -> CheckStatus {
        if passed {
            self.passes = self.passes.saturating_add(1);
            self.failures = 0;
            if self.passes >= spec.successes_to_pass.max(1) {
                return CheckStatus::Success;
            }
        } else {
            self.failures = self.failures.saturating_add(1);
            self.passes = 0;
            if self.failures >= spec.failures_to_fail.max(1) {
                return CheckStatus::Failure;
            }
        }
        current
    }
}

/// Every check's latest result, sent to the runner after a status change.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct ChecksChanged(pub Vec<CheckResult>);

/// Every check's latest result, now.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Vec<CheckResult>")]
pub struct GetCheckResults;

/// Ends the watcher (the allocation stops).
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct StopChecks;

pub struct CheckWatcher {
    specs: Vec<CheckSpec>,
    results: Vec<CheckResult>,
    streaks: Vec<Streak>,
    parent: Recipient<ChecksChanged>,
}

/// A floor under the interval, so that a zero interval cannot spin.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

impl CheckWatcher {
    pub fn new(alloc_id: String, specs: Vec<CheckSpec>, parent: Recipient<ChecksChanged>) -> Self {
        let results = specs
            .iter()
            .map(|s| CheckResult {
                id: s.id.clone(),
                check: s.name.clone(),
                group: s.group.clone(),
                task: s.task.clone(),
                service: s.service.clone(),
                status: CheckStatus::Pending,
                status_code: 0,
                output: "nomad: waiting to run".into(),
                mode: s.mode.clone(),
                timestamp: crate::now_nanos() / 1_000_000_000,
                alloc_id: alloc_id.clone(),
            })
            .collect();
        CheckWatcher {
            streaks: vec![Streak::default(); specs.len()],
            specs,
            results,
            parent,
        }
    }

    fn run(&mut self, index: usize, ctx: &mut Context<Self>) {
        let Some(spec) = self.specs.get(index) else {
            return;
        };
        let (probe, timeout) = (spec.probe.clone(), spec.timeout);
        let interval = spec.interval.max(MIN_INTERVAL);
        let fut = async move { run_probe(&probe, timeout).await };
        ctx.spawn(fut.into_actor(self).map(move |result, act, ctx| {
            let passed = result.outcome == Outcome::Passing;
            if let (Some(r), Some(streak), Some(spec)) = (
                act.results.get_mut(index),
                act.streaks.get_mut(index),
                act.specs.get(index),
            ) {
                let status = streak.next(r.status, passed, spec);
                let changed = r.status != status;
                r.status = status;
                r.status_code = result.status_code;
                r.output = result.output;
                r.timestamp = crate::now_nanos() / 1_000_000_000;
                if changed {
                    act.parent.do_send(ChecksChanged(act.results.clone()));
                }
            }
            ctx.run_later(interval, move |act, ctx| act.run(index, ctx));
        }));
    }
}

impl Actor for CheckWatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        for i in 0..self.specs.len() {
            self.run(i, ctx);
        }
    }
}

impl Handler<GetCheckResults> for CheckWatcher {
    type Result = MessageResult<GetCheckResults>;

    fn handle(&mut self, _: GetCheckResults, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.results.clone())
    }
}

impl Handler<StopChecks> for CheckWatcher {
    type Result = ();

    fn handle(&mut self, _: StopChecks, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    struct Collector(Vec<Vec<CheckResult>>);
    impl Actor for Collector {
        type Context = Context<Self>;
    }
    impl Handler<ChecksChanged> for Collector {
        type Result = ();
        fn handle(&mut self, msg: ChecksChanged, _: &mut Context<Self>) {
            self.0.push(msg.0);
        }
    }
    #[derive(Message)]
    #[rtype(result = "Vec<Vec<CheckResult>>")]
    struct Seen;
    impl Handler<Seen> for Collector {
        type Result = MessageResult<Seen>;
        fn handle(&mut self, _: Seen, _: &mut Context<Self>) -> Self::Result {
            MessageResult(self.0.clone())
        }
    }

    fn tcp_spec(address: String) -> CheckSpec {
        CheckSpec {
            id: "c1".into(),
            name: "alive".into(),
            group: "g".into(),
            task: String::new(),
            service: "web".into(),
            mode: "healthiness".into(),
            interval: Duration::from_millis(100),
            timeout: Duration::from_secs(1),
            probe: Probe::Tcp { address },
            successes_to_pass: 0,
            failures_to_fail: 0,
        }
    }

    #[test]
    fn the_status_moves_only_after_as_many_results_in_a_row_as_asked() {
        let mut spec = tcp_spec(String::new());
        spec.successes_to_pass = 2;
        spec.failures_to_fail = 3;
        let mut streak = Streak::default();
        let mut status = CheckStatus::Pending;
        let mut seen = Vec::new();
        for passed in [true, true, false, false, true, false, false, false, true] {
            status = streak.next(status, passed, &spec);
            seen.push(status);
        }
        use CheckStatus::{Failure as F, Pending as P, Success as S};
        // One pass is not enough, two are; a failure breaks the run of
        // passes, and three failures in a row are needed to fail.
        assert_eq!(seen, vec![P, S, S, S, S, S, S, F, F]);
    }

    #[test]
    fn without_thresholds_each_result_moves_the_status() {
        let spec = tcp_spec(String::new());
        let mut streak = Streak::default();
        assert_eq!(
            streak.next(CheckStatus::Pending, true, &spec),
            CheckStatus::Success
        );
        assert_eq!(
            streak.next(CheckStatus::Success, false, &spec),
            CheckStatus::Failure
        );
    }

    #[actix_rt::test]
    async fn a_check_goes_from_pending_to_success_and_back_to_failure() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let collector = Collector(Vec::new()).start();
        let watcher = CheckWatcher::new(
            "a1".into(),
            vec![tcp_spec(address)],
            collector.clone().recipient(),
        )
        .start();
        let first = watcher.send(GetCheckResults).await.unwrap();
        assert_eq!(first[0].status, CheckStatus::Pending);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = watcher.send(GetCheckResults).await.unwrap();
        assert_eq!(now[0].status, CheckStatus::Success, "{}", now[0].output);
        drop(listener);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let seen = collector.send(Seen).await.unwrap();
        let statuses: Vec<CheckStatus> = seen.iter().map(|r| r[0].status).collect();
        assert_eq!(statuses, vec![CheckStatus::Success, CheckStatus::Failure]);
        watcher.send(StopChecks).await.unwrap();
    }
}
