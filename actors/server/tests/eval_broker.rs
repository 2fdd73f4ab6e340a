//! Behaviour of the EvalBroker and BlockedEvals actors, wired together with
//! a recording sink in place of the state store. Durations are configured
//! in milliseconds so the whole file runs in a few seconds.

use actix::prelude::*;
use herder::structs::{new_id, EvalStatus, Evaluation, JobType, TriggeredBy};
use herder_server::blocked_evals::{
    start_with_blocked_evals, Block, BlockedEvals, BlockedEvalsConfig, GetBlockedStats, Reblock,
    Unblock, UnblockNode, CANCELED_AFTER_NEWER_EVAL,
};
use herder_server::broker::{
    Ack, BrokerConfig, BrokerError, Delivery, Dequeue, Enqueue, EvalBroker, EvalWriteError,
    EvalWrites, Nack, Outstanding, OutstandingReset, PauseNackTimeout, ResumeNackTimeout,
    SchedulerStats, SetEnabled, SetPaused, Stats,
};
use herder_server::ready_queue::EvalCost;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Stands in for the state store: records every write, answers with a
/// growing index, and can be told to fail the next writes.
struct Recorder {
    writes: Arc<Mutex<Vec<Vec<Evaluation>>>>,
    index: u64,
    failures_left: Arc<Mutex<usize>>,
}

impl Actor for Recorder {
    type Context = Context<Self>;
}

impl Handler<EvalWrites> for Recorder {
    type Result = Result<u64, EvalWriteError>;

    fn handle(&mut self, msg: EvalWrites, _ctx: &mut Context<Self>) -> Self::Result {
        let mut failures = self.failures_left.lock().unwrap();
        if *failures > 0 {
            *failures -= 1;
            return Err(EvalWriteError("disk full".into()));
        }
        self.index += 1;
        self.writes.lock().unwrap().push(msg.evals);
        Ok(self.index)
    }
}

#[derive(Clone)]
struct Sink {
    writes: Arc<Mutex<Vec<Vec<Evaluation>>>>,
    failures_left: Arc<Mutex<usize>>,
    addr: Addr<Recorder>,
}

impl Sink {
    fn start() -> Sink {
        let writes = Arc::new(Mutex::new(Vec::new()));
        let failures_left = Arc::new(Mutex::new(0));
        let addr = Recorder {
            writes: writes.clone(),
            index: 1000,
            failures_left: failures_left.clone(),
        }
        .start();
        Sink {
            writes,
            failures_left,
            addr,
        }
    }

    fn batches(&self) -> Vec<Vec<Evaluation>> {
        self.writes.lock().unwrap().clone()
    }

    /// Wait (bounded) until at least `count` writes arrived.
    async fn wait_for_writes(&self, count: usize) -> Vec<Vec<Evaluation>> {
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.writes.lock().unwrap().len() < count && Instant::now() < deadline {
            actix_rt::time::sleep(Duration::from_millis(5)).await;
        }
        self.batches()
    }
}

fn test_config() -> BrokerConfig {
    BrokerConfig {
        nack_timeout: Duration::from_secs(60),
        delivery_limit: 3,
        initial_nack_delay: Duration::ZERO,
        subsequent_nack_delay: Duration::ZERO,
        failed_follow_up_base_delay: Duration::from_millis(30),
        failed_follow_up_delay_range: Duration::from_millis(20),
        sink_retry_interval: Duration::from_millis(10),
    }
}

fn blocked_config() -> BlockedEvalsConfig {
    BlockedEvalsConfig {
        unblock_failed_interval: Duration::from_secs(60),
        cancel_sweep_interval: Duration::from_secs(60),
        cancel_batch_size: 728,
    }
}

async fn start_broker(config: BrokerConfig) -> (Addr<EvalBroker>, Sink) {
    let sink = Sink::start();
    let broker = EvalBroker::new(config, sink.addr.clone().recipient(), None).start();
    broker.send(SetEnabled(true)).await.unwrap();
    (broker, sink)
}

/// A broker and a blocked-eval tracker wired to each other, as the server
/// wires them, both enabled.
async fn start_pair(
    config: BrokerConfig,
    blocked: BlockedEvalsConfig,
) -> (Addr<EvalBroker>, Addr<BlockedEvals>, Sink) {
    let sink = Sink::start();
    let (broker, tracker) = start_with_blocked_evals(
        config,
        blocked,
        sink.addr.clone().recipient(),
        EvalCost::uniform(),
    );
    broker.send(SetEnabled(true)).await.unwrap();
    tracker.send(SetEnabled(true)).await.unwrap();
    (broker, tracker, sink)
}

fn eval(job: &str, priority: i32, index: u64) -> Evaluation {
    Evaluation {
        id: new_id(),
        namespace: "default".into(),
        priority,
        eval_type: JobType::Service,
        job_id: job.into(),
        status: EvalStatus::Pending,
        create_index: index,
        modify_index: index,
        ..Default::default()
    }
}

fn typed(mut eval: Evaluation, eval_type: JobType) -> Evaluation {
    eval.eval_type = eval_type;
    eval
}

async fn enqueue(broker: &Addr<EvalBroker>, eval: &Evaluation) {
    broker
        .send(Enqueue::new(eval.clone()))
        .await
        .unwrap()
        .unwrap();
}

async fn dequeue_from(
    broker: &Addr<EvalBroker>,
    schedulers: Vec<JobType>,
    timeout_ms: u64,
) -> Option<Delivery> {
    broker
        .send(Dequeue {
            schedulers,
            timeout: Duration::from_millis(timeout_ms),
        })
        .await
        .unwrap()
        .unwrap()
}

async fn dequeue(broker: &Addr<EvalBroker>, timeout_ms: u64) -> Option<Delivery> {
    dequeue_from(broker, vec![JobType::Service], timeout_ms).await
}

async fn ack(broker: &Addr<EvalBroker>, delivery: &Delivery) {
    broker
        .send(Ack {
            eval_id: delivery.eval.id,
            token: delivery.token,
        })
        .await
        .unwrap()
        .unwrap();
}

async fn nack(broker: &Addr<EvalBroker>, delivery: &Delivery) {
    broker
        .send(Nack {
            eval_id: delivery.eval.id,
            token: delivery.token,
        })
        .await
        .unwrap()
        .unwrap();
}

#[actix::test]
async fn ready_evals_come_out_by_priority() {
    let (broker, _) = start_broker(test_config()).await;
    let low = eval("a", 20, 1);
    let high = eval("b", 80, 2);
    let mid = eval("c", 50, 3);
    for e in [&low, &high, &mid] {
        enqueue(&broker, e).await;
    }
    let mut order = Vec::new();
    while let Some(d) = dequeue(&broker, 10).await {
        order.push(d.eval.id);
    }
    assert_eq!(order, vec![high.id, mid.id, low.id]);
}

#[actix::test]
async fn equal_priorities_come_out_in_index_order() {
    let (broker, _) = start_broker(test_config()).await;
    let third = eval("c", 50, 30);
    let first = eval("a", 50, 10);
    let second = eval("b", 50, 20);
    for e in [&third, &first, &second] {
        enqueue(&broker, e).await;
    }
    let mut order = Vec::new();
    while let Some(d) = dequeue(&broker, 10).await {
        order.push(d.eval.id);
    }
    assert_eq!(order, vec![first.id, second.id, third.id]);
}

/// The server weighs an evaluation by its job's allocation count: a job of
/// one allocation submitted behind a backlog of large jobs is next, not
/// last, while large jobs of equal size keep their order.
#[actix::test]
async fn a_small_job_is_not_queued_behind_a_backlog_of_large_ones() {
    let sink = Sink::start();
    let cost = EvalCost::new(|e| {
        if e.job_id.starts_with("large") {
            1000
        } else {
            1
        }
    });
    let broker = EvalBroker::new(test_config(), sink.addr.clone().recipient(), None)
        .with_cost(cost)
        .start();
    broker.send(SetEnabled(true)).await.unwrap();
    let large: Vec<Evaluation> = (0..200)
        .map(|i| eval(&format!("large-{i:03}"), 50, i + 1))
        .collect();
    for e in &large {
        enqueue(&broker, e).await;
    }
    let first = dequeue(&broker, 10).await.expect("a large job");
    let second = dequeue(&broker, 10).await.expect("a large job");
    assert_eq!((first.eval.id, second.eval.id), (large[0].id, large[1].id));
    let small = eval("small", 50, 1000);
    enqueue(&broker, &small).await;
    let next = dequeue(&broker, 10).await.expect("the small job");
    assert_eq!(
        next.eval.job_id, "small",
        "the small job waits behind the backlog"
    );
    let after = dequeue(&broker, 10).await.expect("the backlog resumes");
    assert_eq!(after.eval.id, large[2].id);
}

#[actix::test]
async fn dequeue_picks_the_highest_priority_across_schedulers() {
    let (broker, _) = start_broker(test_config()).await;
    let service = eval("svc", 50, 1);
    let batch = typed(eval("batch", 70, 2), JobType::Batch);
    let system = typed(eval("sys", 60, 3), JobType::System);
    for e in [&service, &batch, &system] {
        enqueue(&broker, e).await;
    }
    let all = vec![JobType::Service, JobType::Batch, JobType::System];
    let mut order = Vec::new();
    while let Some(d) = dequeue_from(&broker, all.clone(), 10).await {
        order.push(d.eval.id);
    }
    assert_eq!(order, vec![batch.id, system.id, service.id]);
    // A worker only sees the schedulers it asked for.
    enqueue(&broker, &typed(eval("b2", 90, 4), JobType::Batch)).await;
    assert!(dequeue(&broker, 10).await.is_none());
}

#[actix::test]
async fn one_eval_per_job_in_flight_and_the_next_released_on_ack() {
    let (broker, _) = start_broker(test_config()).await;
    let first = eval("web", 50, 1);
    let second = eval("web", 50, 2);
    let other = eval("db", 50, 3);
    for e in [&first, &second, &other] {
        enqueue(&broker, e).await;
    }
    let d1 = dequeue(&broker, 10).await.unwrap();
    assert_eq!(d1.eval.id, first.id);
    let d2 = dequeue(&broker, 10).await.unwrap();
    assert_eq!(d2.eval.id, other.id, "the job's second eval must wait");
    assert!(dequeue(&broker, 10).await.is_none());
    let stats = broker.send(Stats).await.unwrap();
    assert_eq!((stats.total_unacked, stats.total_blocked), (2, 1));

    ack(&broker, &d1).await;
    let d3 = dequeue(&broker, 10).await.unwrap();
    assert_eq!(d3.eval.id, second.id);
}

#[actix::test]
async fn parked_dequeue_is_answered_by_enqueue_and_times_out_empty() {
    let (broker, _) = start_broker(test_config()).await;
    let started = Instant::now();
    assert!(dequeue(&broker, 50).await.is_none());
    assert!(started.elapsed() >= Duration::from_millis(45));

    let waiting = broker.send(Dequeue {
        schedulers: vec![JobType::Batch, JobType::Service],
        timeout: Duration::from_secs(10),
    });
    let arriving = eval("web", 50, 1);
    let sender = broker.clone();
    let sent = arriving.clone();
    actix_rt::spawn(async move {
        actix_rt::time::sleep(Duration::from_millis(20)).await;
        sender.send(Enqueue::new(sent)).await.unwrap().unwrap();
    });
    let started = Instant::now();
    let delivery = waiting.await.unwrap().unwrap().unwrap();
    assert_eq!(delivery.eval.id, arriving.id);
    // Answered by the enqueue, not by the 10 s timeout.
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[actix::test]
async fn ack_and_nack_need_the_delivery_token() {
    let (broker, _) = start_broker(test_config()).await;
    let e = eval("web", 50, 1);
    enqueue(&broker, &e).await;
    let d = dequeue(&broker, 10).await.unwrap();
    let wrong = new_id();
    let ack_wrong = broker
        .send(Ack {
            eval_id: e.id,
            token: wrong,
        })
        .await
        .unwrap();
    assert_eq!(ack_wrong, Err(BrokerError::TokenMismatch));
    let nack_wrong = broker
        .send(Nack {
            eval_id: e.id,
            token: wrong,
        })
        .await
        .unwrap();
    assert_eq!(nack_wrong, Err(BrokerError::TokenMismatch));
    let reset_wrong = broker
        .send(OutstandingReset {
            eval_id: e.id,
            token: wrong,
        })
        .await
        .unwrap();
    assert_eq!(reset_wrong, Err(BrokerError::TokenMismatch));
    assert_eq!(
        broker.send(Outstanding { eval_id: e.id }).await.unwrap(),
        Some(d.token)
    );
    ack(&broker, &d).await;
    let again = broker
        .send(Ack {
            eval_id: e.id,
            token: d.token,
        })
        .await
        .unwrap();
    assert_eq!(again, Err(BrokerError::NotOutstanding(e.id)));
}

#[actix::test]
async fn nack_timeout_redelivers_with_a_new_token() {
    let config = BrokerConfig {
        nack_timeout: Duration::from_millis(600),
        ..test_config()
    };
    let (broker, _) = start_broker(config).await;
    let e = eval("web", 50, 1);
    enqueue(&broker, &e).await;
    let first = dequeue(&broker, 10).await.unwrap();
    // Resetting keeps it outstanding past the original deadline.
    actix_rt::time::sleep(Duration::from_millis(400)).await;
    broker
        .send(OutstandingReset {
            eval_id: e.id,
            token: first.token,
        })
        .await
        .unwrap()
        .unwrap();
    actix_rt::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        broker.send(Outstanding { eval_id: e.id }).await.unwrap(),
        Some(first.token)
    );

    let second = dequeue(&broker, 2000)
        .await
        .expect("redelivered after the nack timeout");
    assert_eq!(second.eval.id, e.id);
    assert_ne!(second.token, first.token);
    let late = broker
        .send(Ack {
            eval_id: e.id,
            token: first.token,
        })
        .await
        .unwrap();
    assert_eq!(late, Err(BrokerError::TokenMismatch));
    ack(&broker, &second).await;
}

#[actix::test]
async fn nacked_eval_waits_the_nack_delay() {
    let config = BrokerConfig {
        initial_nack_delay: Duration::from_millis(300),
        subsequent_nack_delay: Duration::from_millis(150),
        ..test_config()
    };
    let (broker, _) = start_broker(config).await;
    let e = eval("web", 50, 1);
    enqueue(&broker, &e).await;
    let first = dequeue(&broker, 10).await.unwrap();
    nack(&broker, &first).await;
    assert_eq!(broker.send(Stats).await.unwrap().total_delayed, 1);
    assert!(dequeue(&broker, 30).await.is_none(), "1st nack delays");
    let second = dequeue(&broker, 2000).await.unwrap();
    assert_eq!(second.eval.id, e.id);

    nack(&broker, &second).await;
    let started = Instant::now();
    let third = dequeue(&broker, 2000).await.unwrap();
    assert_eq!(third.eval.id, e.id);
    assert!(
        started.elapsed() >= Duration::from_millis(140),
        "2nd nack waits (2-1) x 150 ms"
    );
}

#[actix::test]
async fn delivery_limit_fails_the_eval_and_creates_a_follow_up() {
    let (broker, sink) = start_broker(test_config()).await;
    let e = eval("web", 50, 1);
    let behind = eval("web", 50, 2);
    enqueue(&broker, &e).await;
    enqueue(&broker, &behind).await;
    *sink.failures_left.lock().unwrap() = 1; // the first write fails, the retry lands
    for _ in 0..3 {
        let d = dequeue(&broker, 100).await.unwrap();
        assert_eq!(d.eval.id, e.id);
        nack(&broker, &d).await;
    }
    let writes = sink.wait_for_writes(1).await;
    assert_eq!(writes.len(), 1);
    let (failed, follow_up) = (&writes[0][0], &writes[0][1]);
    assert_eq!(failed.id, e.id);
    assert_eq!(failed.status, EvalStatus::Failed);
    assert_eq!(
        failed.status_description,
        "evaluation reached delivery limit (3)"
    );
    assert_eq!(failed.next_eval, Some(follow_up.id));
    assert_eq!(follow_up.triggered_by, TriggeredBy::FailedFollowUp);
    assert_eq!(follow_up.status, EvalStatus::Pending);
    assert_eq!(follow_up.previous_eval, Some(e.id));
    assert!(
        follow_up.wait >= Duration::from_millis(30) && follow_up.wait < Duration::from_millis(50)
    );

    // Once its failure is durable the failed eval frees its job: the pending
    // eval runs, then the follow-up after its wait.
    let next = dequeue(&broker, 1000).await.unwrap();
    assert_eq!(next.eval.id, behind.id);
    ack(&broker, &next).await;
    let later = dequeue(&broker, 2000).await.unwrap();
    assert_eq!(later.eval.id, follow_up.id);
    assert_eq!(later.eval.create_index, 1001, "indexed at its write");
    let stats = broker.send(Stats).await.unwrap();
    assert_eq!((stats.total_failed, stats.total_ready), (0, 0));
}

#[actix::test]
async fn delayed_eval_is_released_at_its_time() {
    let (broker, _) = start_broker(test_config()).await;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let mut later = eval("web", 50, 1);
    later.wait_until = Some(now + 400_000_000);
    let started = Instant::now();
    enqueue(&broker, &later).await;
    assert_eq!(broker.send(Stats).await.unwrap().total_delayed, 1);
    assert!(dequeue(&broker, 30).await.is_none());
    let d = dequeue(&broker, 2000).await.unwrap();
    assert_eq!(d.eval.id, later.id);
    assert!(started.elapsed() >= Duration::from_millis(390));
    assert_eq!(broker.send(Stats).await.unwrap().total_delayed, 0);
}

#[actix::test]
async fn pause_holds_evals_and_resume_drains_them() {
    let (broker, _) = start_broker(test_config()).await;
    broker.send(SetPaused(true)).await.unwrap();
    let a = eval("a", 50, 1);
    let b = eval("b", 50, 2);
    enqueue(&broker, &a).await;
    enqueue(&broker, &b).await;
    assert!(dequeue(&broker, 30).await.is_none());
    assert_eq!(broker.send(Stats).await.unwrap().total_ready, 2);

    let parked = broker.send(Dequeue {
        schedulers: vec![JobType::Service],
        timeout: Duration::from_secs(10),
    });
    let resumer = broker.clone();
    actix_rt::spawn(async move {
        actix_rt::time::sleep(Duration::from_millis(20)).await;
        resumer.send(SetPaused(false)).await.unwrap();
    });
    let first = parked.await.unwrap().unwrap().unwrap();
    assert_eq!(first.eval.id, a.id);
    assert_eq!(dequeue(&broker, 10).await.unwrap().eval.id, b.id);
}

#[actix::test]
async fn disable_flushes_everything_and_fails_parked_dequeues() {
    let (broker, _) = start_broker(test_config()).await;
    enqueue(&broker, &eval("a", 50, 1)).await;
    enqueue(&broker, &eval("a", 50, 2)).await;
    enqueue(&broker, &typed(eval("b", 50, 3), JobType::Batch)).await;
    let held = dequeue(&broker, 10).await.unwrap();
    let parked = broker.send(Dequeue {
        schedulers: vec![JobType::System],
        timeout: Duration::from_secs(10),
    });
    let disabler = broker.clone();
    actix_rt::spawn(async move {
        actix_rt::time::sleep(Duration::from_millis(20)).await;
        disabler.send(SetEnabled(false)).await.unwrap();
    });
    assert!(matches!(parked.await.unwrap(), Err(BrokerError::Disabled)));
    assert_eq!(broker.send(Stats).await.unwrap(), Default::default());
    let late_ack = broker
        .send(Ack {
            eval_id: held.eval.id,
            token: held.token,
        })
        .await
        .unwrap();
    assert_eq!(late_ack, Err(BrokerError::NotOutstanding(held.eval.id)));
    let refused = broker.send(Enqueue::new(eval("c", 50, 4))).await.unwrap();
    assert_eq!(refused, Err(BrokerError::Disabled));

    broker.send(SetEnabled(true)).await.unwrap();
    let all = vec![JobType::Service, JobType::Batch];
    assert!(
        dequeue_from(&broker, all, 10).await.is_none(),
        "nothing survives a flush"
    );
}

fn blocked(job: &str, index: u64, eligibility: &[(&str, bool)], escaped: bool) -> Evaluation {
    let mut e = eval(job, 50, index);
    e.status = EvalStatus::Blocked;
    e.snapshot_index = index;
    e.escaped_computed_class = escaped;
    e.class_eligibility = eligibility
        .iter()
        .map(|(class, ok)| (class.to_string(), *ok))
        .collect();
    e
}

async fn dequeue_all(broker: &Addr<EvalBroker>) -> Vec<uuid::Uuid> {
    let mut ids = Vec::new();
    while let Some(d) = dequeue(broker, 30).await {
        ids.push(d.eval.id);
        ack(broker, &d).await;
    }
    ids
}

#[actix::test]
async fn unblock_by_class_releases_only_evals_that_could_use_it() {
    let (broker, tracker, _) = start_pair(test_config(), blocked_config()).await;
    let wants_gpu = blocked("a", 10, &[("gpu", true), ("arm", false)], false);
    let no_arm = blocked("b", 11, &[("arm", false)], false);
    for e in [&wants_gpu, &no_arm] {
        tracker.send(Block { eval: e.clone() }).await.unwrap();
    }
    tracker
        .send(Unblock {
            computed_class: "arm".into(),
            index: 20,
        })
        .await
        .unwrap();
    assert!(
        dequeue_all(&broker).await.is_empty(),
        "arm is ineligible for both"
    );
    assert_eq!(
        tracker.send(GetBlockedStats).await.unwrap().total_blocked,
        2
    );

    tracker
        .send(Unblock {
            computed_class: "gpu".into(),
            index: 21,
        })
        .await
        .unwrap();
    // `a` marked gpu eligible, `b` never saw gpu: both could use it.
    let mut released = dequeue_all(&broker).await;
    released.sort();
    let mut expected = vec![wants_gpu.id, no_arm.id];
    expected.sort();
    assert_eq!(released, expected);
    assert_eq!(
        tracker.send(GetBlockedStats).await.unwrap().total_blocked,
        0
    );
}

#[actix::test]
async fn escaped_evals_unblock_on_any_class() {
    let (broker, tracker, _) = start_pair(test_config(), blocked_config()).await;
    let escaped = blocked("a", 10, &[("arm", false)], true);
    let tracked = blocked("b", 11, &[("arm", false)], false);
    tracker
        .send(Block {
            eval: escaped.clone(),
        })
        .await
        .unwrap();
    tracker
        .send(Block {
            eval: tracked.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        tracker.send(GetBlockedStats).await.unwrap().total_escaped,
        1
    );
    tracker
        .send(Unblock {
            computed_class: "arm".into(),
            index: 20,
        })
        .await
        .unwrap();
    assert_eq!(dequeue_all(&broker).await, vec![escaped.id]);
}

#[actix::test]
async fn eval_blocked_on_a_snapshot_before_an_unblock_runs_at_once() {
    let (broker, tracker, _) = start_pair(test_config(), blocked_config()).await;
    tracker
        .send(Unblock {
            computed_class: "gpu".into(),
            index: 50,
        })
        .await
        .unwrap();
    let stale = blocked("a", 40, &[("gpu", true)], false);
    let fresh = blocked("b", 60, &[("gpu", true)], false);
    tracker
        .send(Block {
            eval: stale.clone(),
        })
        .await
        .unwrap();
    tracker
        .send(Block {
            eval: fresh.clone(),
        })
        .await
        .unwrap();
    assert_eq!(dequeue_all(&broker).await, vec![stale.id]);
    assert_eq!(
        tracker.send(GetBlockedStats).await.unwrap().total_blocked,
        1
    );
}

#[actix::test]
async fn newer_blocked_eval_cancels_the_older() {
    let (_broker, tracker, sink) = start_pair(test_config(), blocked_config()).await;
    let older = blocked("web", 10, &[], false);
    let newer = blocked("web", 20, &[], false);
    let stale = blocked("web", 5, &[], false);
    tracker
        .send(Block {
            eval: older.clone(),
        })
        .await
        .unwrap();
    tracker
        .send(Block {
            eval: newer.clone(),
        })
        .await
        .unwrap();
    tracker
        .send(Block {
            eval: stale.clone(),
        })
        .await
        .unwrap();
    let writes = sink.wait_for_writes(2).await;
    let canceled: Vec<_> = writes.iter().flatten().collect();
    assert_eq!(canceled.len(), 2);
    assert_eq!(canceled[0].id, older.id);
    assert_eq!(
        canceled[1].id, stale.id,
        "an older arrival loses to the tracked one"
    );
    for e in canceled {
        assert_eq!(e.status, EvalStatus::Canceled);
        assert_eq!(
            e.status_description,
            "existing blocked evaluation exists for job \"web\""
        );
    }
    assert_eq!(
        tracker.send(GetBlockedStats).await.unwrap().total_blocked,
        1
    );
}

#[actix::test]
async fn failed_plan_evals_are_retried_periodically() {
    let config = BlockedEvalsConfig {
        unblock_failed_interval: Duration::from_millis(50),
        ..blocked_config()
    };
    let (broker, tracker, _) = start_pair(test_config(), config).await;
    let mut out_of_attempts = blocked("a", 10, &[("gpu", false)], false);
    out_of_attempts.triggered_by = TriggeredBy::MaxPlanAttempts;
    let capacity = blocked("b", 11, &[("gpu", false)], false);
    tracker
        .send(Block {
            eval: out_of_attempts.clone(),
        })
        .await
        .unwrap();
    tracker
        .send(Block {
            eval: capacity.clone(),
        })
        .await
        .unwrap();
    let d = dequeue(&broker, 2000).await.unwrap();
    assert_eq!(d.eval.id, out_of_attempts.id);
    assert_eq!(
        tracker.send(GetBlockedStats).await.unwrap().total_blocked,
        1
    );
}

#[actix::test]
async fn ack_reaps_older_pending_evals_in_batches_of_728() {
    let config = BlockedEvalsConfig {
        cancel_sweep_interval: Duration::from_millis(100),
        ..blocked_config()
    };
    let (broker, tracker, sink) = start_pair(test_config(), config).await;
    let evals: Vec<Evaluation> = (1..=1001).map(|i| eval("web", 50, i)).collect();
    broker
        .send(herder_server::broker::EnqueueAll {
            evals: evals.clone(),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(broker.send(Stats).await.unwrap().total_blocked, 1000);
    let first = dequeue(&broker, 10).await.unwrap();
    assert_eq!(first.eval.id, evals[0].id);
    ack(&broker, &first).await;

    // The newest pending eval runs next; the 999 between were superseded.
    let newest = dequeue(&broker, 10).await.unwrap();
    assert_eq!(newest.eval.id, evals[1000].id);
    let writes = sink.wait_for_writes(1).await;
    assert_eq!(writes[0].len(), 728, "one batch per ack");
    let writes = sink.wait_for_writes(2).await;
    assert_eq!(writes[1].len(), 271, "the sweep writes the rest");
    let mut canceled: Vec<_> = writes.iter().flatten().map(|e| e.id).collect();
    for e in writes.iter().flatten() {
        assert_eq!(e.status, EvalStatus::Canceled);
        assert_eq!(e.status_description, CANCELED_AFTER_NEWER_EVAL);
    }
    canceled.sort();
    let mut expected: Vec<_> = evals[1..1000].iter().map(|e| e.id).collect();
    expected.sort();
    assert_eq!(canceled, expected);
    assert_eq!(
        tracker
            .send(GetBlockedStats)
            .await
            .unwrap()
            .total_cancelable,
        0
    );
    assert!(
        dequeue(&broker, 10).await.is_none(),
        "canceled evals never run"
    );
}

#[actix::test]
async fn ack_cancels_the_jobs_older_blocked_eval() {
    let (broker, tracker, sink) = start_pair(test_config(), blocked_config()).await;
    let old_blocked = blocked("web", 5, &[], false);
    let other_job = blocked("db", 6, &[], false);
    tracker
        .send(Block {
            eval: old_blocked.clone(),
        })
        .await
        .unwrap();
    tracker
        .send(Block {
            eval: other_job.clone(),
        })
        .await
        .unwrap();
    enqueue(&broker, &eval("web", 50, 10)).await;
    let d = dequeue(&broker, 10).await.unwrap();
    ack(&broker, &d).await;
    let writes = sink.wait_for_writes(1).await;
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].len(), 1);
    assert_eq!(writes[0][0].id, old_blocked.id);
    assert_eq!(writes[0][0].status_description, CANCELED_AFTER_NEWER_EVAL);
    assert_eq!(
        tracker.send(GetBlockedStats).await.unwrap().total_blocked,
        1
    );
}

#[actix::test]
async fn reblocked_eval_unblocked_while_held_runs_again_after_the_ack() {
    let (broker, tracker, _) = start_pair(test_config(), blocked_config()).await;
    let e = blocked("web", 10, &[("gpu", true)], false);
    enqueue(&broker, &e).await;
    let held = dequeue(&broker, 10).await.unwrap();
    tracker
        .send(Reblock {
            eval: e.clone(),
            token: held.token,
        })
        .await
        .unwrap();
    tracker
        .send(Unblock {
            computed_class: "gpu".into(),
            index: 20,
        })
        .await
        .unwrap();
    assert_eq!(
        tracker.send(GetBlockedStats).await.unwrap().total_blocked,
        0
    );
    assert!(
        dequeue(&broker, 30).await.is_none(),
        "held until its delivery is acked"
    );
    ack(&broker, &held).await;
    let again = dequeue(&broker, 1000)
        .await
        .expect("the unblock was not lost");
    assert_eq!(again.eval.id, e.id);
    assert_ne!(again.token, held.token);
}

#[actix::test]
async fn system_evals_block_per_node_and_unblock_with_their_node() {
    let (broker, tracker, sink) = start_pair(test_config(), blocked_config()).await;
    let (n1, n2) = (new_id(), new_id());
    let mut on_n1 = typed(blocked("sys", 10, &[], false), JobType::System);
    on_n1.node_id = Some(n1);
    let mut on_n2 = typed(blocked("sys", 11, &[], false), JobType::System);
    on_n2.node_id = Some(n2);
    tracker
        .send(Block {
            eval: on_n1.clone(),
        })
        .await
        .unwrap();
    tracker
        .send(Block {
            eval: on_n2.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        tracker.send(GetBlockedStats).await.unwrap().total_blocked,
        2
    );
    assert!(
        sink.batches().is_empty(),
        "one blocked eval per node, not per job"
    );

    tracker
        .send(Unblock {
            computed_class: "any".into(),
            index: 20,
        })
        .await
        .unwrap();
    let system = vec![JobType::System];
    assert!(dequeue_from(&broker, system.clone(), 30).await.is_none());
    tracker.send(UnblockNode { node_id: n1 }).await.unwrap();
    let d = dequeue_from(&broker, system.clone(), 1000).await.unwrap();
    assert_eq!(d.eval.id, on_n1.id);
    assert_eq!(
        tracker.send(GetBlockedStats).await.unwrap().total_blocked,
        1
    );
}

#[actix::test]
async fn stats_count_per_scheduler() {
    let (broker, _) = start_broker(test_config()).await;
    enqueue(&broker, &eval("a", 50, 1)).await;
    enqueue(&broker, &eval("a", 50, 2)).await;
    enqueue(&broker, &eval("b", 50, 3)).await;
    enqueue(&broker, &typed(eval("c", 50, 4), JobType::Batch)).await;
    dequeue(&broker, 10).await.unwrap();
    let stats = broker.send(Stats).await.unwrap();
    assert_eq!(
        (stats.total_ready, stats.total_unacked, stats.total_blocked),
        (2, 1, 1)
    );
    let service = SchedulerStats {
        ready: 1,
        unacked: 1,
    };
    let batch = SchedulerStats {
        ready: 1,
        unacked: 0,
    };
    assert_eq!(stats.by_scheduler.get(&JobType::Service), Some(&service));
    assert_eq!(stats.by_scheduler.get(&JobType::Batch), Some(&batch));
}

#[actix::test]
async fn disabled_tracker_forgets_and_ignores_blocked_evals() {
    let (broker, tracker, _) = start_pair(test_config(), blocked_config()).await;
    tracker
        .send(Block {
            eval: blocked("a", 10, &[], false),
        })
        .await
        .unwrap();
    tracker.send(SetEnabled(false)).await.unwrap();
    assert_eq!(
        tracker.send(GetBlockedStats).await.unwrap(),
        Default::default()
    );
    tracker
        .send(Block {
            eval: blocked("b", 11, &[], false),
        })
        .await
        .unwrap();
    tracker.send(SetEnabled(true)).await.unwrap();
    tracker
        .send(Unblock {
            computed_class: "any".into(),
            index: 20,
        })
        .await
        .unwrap();
    assert!(dequeue_all(&broker).await.is_empty());
}

#[actix::test]
async fn paused_nack_timer_keeps_the_eval_outstanding_until_resumed() {
    let config = BrokerConfig {
        nack_timeout: Duration::from_millis(100),
        ..test_config()
    };
    let (broker, _) = start_broker(config).await;
    let e = eval("web", 50, 1);
    enqueue(&broker, &e).await;
    let d = dequeue(&broker, 10).await.unwrap();
    let (eval_id, token) = (e.id, d.token);
    broker
        .send(PauseNackTimeout { eval_id, token })
        .await
        .unwrap()
        .unwrap();
    assert!(
        dequeue(&broker, 300).await.is_none(),
        "no redelivery while paused"
    );
    assert_eq!(
        broker.send(Outstanding { eval_id }).await.unwrap(),
        Some(token)
    );
    broker
        .send(ResumeNackTimeout { eval_id, token })
        .await
        .unwrap()
        .unwrap();
    let again = dequeue(&broker, 2000)
        .await
        .expect("the resumed timer expires");
    assert_eq!(again.eval.id, e.id);
}

#[actix::test]
async fn late_copy_of_a_finished_eval_is_ignored_but_a_rewritten_one_runs() {
    let (broker, _sink) = start_broker(test_config()).await;
    let e = eval("web", 50, 10);
    enqueue(&broker, &e).await;
    let d = dequeue(&broker, 1000).await.expect("delivered");
    ack(&broker, &d).await;
    // The same evaluation arrives again from another path, at the index it
    // was already processed at: it must not run twice.
    enqueue(&broker, &e).await;
    assert!(dequeue(&broker, 100).await.is_none(), "late copy ignored");
    // Re-written at a newer index (e.g. reblocked, then unblocked): it runs.
    let mut rewritten = e.clone();
    rewritten.modify_index = 12;
    enqueue(&broker, &rewritten).await;
    let again = dequeue(&broker, 1000)
        .await
        .expect("rewritten eval delivered");
    assert_eq!(again.eval.id, e.id);
}
