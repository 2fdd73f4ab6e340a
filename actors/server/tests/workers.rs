//! Scheduling workers against the real server parts: an on-disk state
//! store, the eval broker with blocked evals, and the plan applier. The
//! state's change feed router is not wired here, so each test enqueues the
//! evaluations it registers itself.

use actix::prelude::*;
use herder::scheduler::{Planner, PlannerError, Scheduler, SchedulerError, State};
use herder::state::{fixtures, Command, StateStore, StoreOptions};
use herder::structs::{EvalId, EvalStatus, Evaluation, JobType, Node, TriggeredBy};
use herder_server::blocked_evals::{start_with_blocked_evals, BlockedEvalsConfig};
use herder_server::broker::{
    BrokerConfig, BrokerStats, Enqueue, EnqueueAll, EvalBroker, EvalWriteError, EvalWrites,
    Outstanding, SetEnabled, Stats,
};
use herder_server::leader_link::{LeaderLink, LeaderQueues};
use herder_server::node_shares::NodeShares;
use herder_server::plan_applier::PlanApplier;
use herder_server::ready_queue::EvalCost;
use herder_server::worker::{
    CoreSchedulers, Pause, Resume, SchedulerFactory, SharedInfo, Stop, Worker, WorkerDeps,
    WorkerStatus, WorkerTiming, WorkloadStatus,
};
use herder_server::worker_supervisor::{
    GetConfig, GetWorkers, SetConfig, SetLeader, StopAll, WorkerConfigError, WorkerPoolConfig,
    WorkerSupervisor,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Persists the broker's and blocked evals' writes in the store.
struct StoreSink(StateStore);

impl Actor for StoreSink {
    type Context = Context<Self>;
}

impl Handler<EvalWrites> for StoreSink {
    type Result = Result<u64, EvalWriteError>;

    fn handle(&mut self, msg: EvalWrites, _ctx: &mut Context<Self>) -> Self::Result {
        self.0
            .apply(Command::EvalUpdate { evals: msg.evals })
            .map(|outcome| outcome.index)
            .map_err(|e| EvalWriteError(e.to_string()))
    }
}

/// Wraps the real schedulers: counts how often each evaluation is
/// scheduled, can fail each evaluation's first attempt, can take a while
/// per evaluation (as a big job would) so a test can act mid-flight, and
/// can hold schedulers until `rendezvous` of them have their snapshots.
#[derive(Default)]
struct Counting {
    calls: Mutex<HashMap<EvalId, usize>>,
    fail_first_attempt: bool,
    work: Duration,
    rendezvous: usize,
    arrived: Mutex<usize>,
    all_arrived: std::sync::Condvar,
}

impl Counting {
    fn calls(&self) -> HashMap<EvalId, usize> {
        self.calls.lock().unwrap().clone()
    }

    /// Waits (bounded, so a bug fails the test instead of hanging it) for
    /// `rendezvous` schedulers to get here.
    fn meet(&self) {
        let mut arrived = self.arrived.lock().unwrap();
        *arrived += 1;
        self.all_arrived.notify_all();
        let (arrived, _) = self
            .all_arrived
            .wait_timeout_while(arrived, Duration::from_secs(20), |n| *n < self.rendezvous)
            .unwrap();
        assert!(*arrived >= self.rendezvous, "schedulers never met");
    }
}

impl SchedulerFactory for Counting {
    fn build<'p>(
        &self,
        eval: &Evaluation,
        state: Arc<dyn State>,
        planner: &'p mut dyn Planner,
        now: i64,
    ) -> Result<Box<dyn Scheduler + 'p>, SchedulerError> {
        let attempt = {
            let mut calls = self.calls.lock().unwrap();
            let count = calls.entry(eval.id).or_default();
            *count += 1;
            *count
        };
        if self.fail_first_attempt && attempt == 1 {
            return Err(SchedulerError::Planner(PlannerError(
                "injected failure".into(),
            )));
        }
        if self.rendezvous > 0 {
            self.meet();
        }
        std::thread::sleep(self.work);
        CoreSchedulers.build(eval, state, planner, now)
    }
}

struct Cluster {
    store: StateStore,
    broker: Addr<EvalBroker>,
    deps: WorkerDeps,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(schedulers: Arc<dyn SchedulerFactory>) -> Cluster {
        let broker_config = BrokerConfig {
            initial_nack_delay: Duration::from_millis(10),
            subsequent_nack_delay: Duration::from_millis(10),
            ..BrokerConfig::default()
        };
        Self::start_with(schedulers, broker_config).await
    }

    async fn start_with(
        schedulers: Arc<dyn SchedulerFactory>,
        broker_config: BrokerConfig,
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
        let sink = StoreSink(store.clone()).start();
        let (broker, blocked_evals) = start_with_blocked_evals(
            broker_config,
            BlockedEvalsConfig::default(),
            sink.recipient(),
            EvalCost::uniform(),
        );
        broker.send(SetEnabled(true)).await.unwrap();
        blocked_evals.send(SetEnabled(true)).await.unwrap();
        let plan_applier = PlanApplier::new(store.clone(), Some(broker.clone().recipient()));
        let in_flight_view = plan_applier.in_flight_view();
        let deps = WorkerDeps {
            store: store.clone(),
            link: LeaderLink::new(
                LeaderQueues {
                    broker: broker.clone(),
                    blocked: blocked_evals,
                    plan_applier: plan_applier.start(),
                },
                None,
            ),
            in_flight_view,
            schedulers,
            timing: WorkerTiming::default(),
            node_shares: NodeShares::default(),
        };
        Cluster {
            store,
            broker,
            deps,
            _dir: dir,
        }
    }

    fn register_nodes(&self, count: usize) -> Vec<Node> {
        (0..count)
            .map(|i| {
                let node = fixtures::node(&format!("node-{i}"));
                self.store
                    .apply(Command::NodeRegister {
                        node: Arc::new(node.clone()),
                    })
                    .unwrap();
                node
            })
            .collect()
    }

    /// Registers a service job with its pending evaluation; returns the
    /// evaluation as stored.
    fn register_job(&self, id: &str, count: i32) -> Evaluation {
        let job = fixtures::job("default", id, &[("web", count)]);
        let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
        self.store
            .apply(Command::JobRegister {
                job: Arc::new(job),
                eval: Some(eval.clone()),
                enforce_index: None,
            })
            .unwrap();
        self.stored_eval(eval.id)
    }

    fn stored_eval(&self, id: EvalId) -> Evaluation {
        (**self.store.snapshot().eval(&id).expect("eval stored")).clone()
    }

    fn status(&self, id: EvalId) -> EvalStatus {
        self.stored_eval(id).status
    }

    fn complete(&self, evals: &[Evaluation]) -> usize {
        let snapshot = self.store.snapshot();
        evals
            .iter()
            .filter(|e| snapshot.eval(&e.id).unwrap().status == EvalStatus::Complete)
            .count()
    }

    fn allocs_of(&self, job_id: &str) -> usize {
        self.store
            .snapshot()
            .allocs_by_job("default", job_id)
            .count()
    }

    async fn enqueue(&self, eval: Evaluation) {
        self.broker.send(Enqueue::new(eval)).await.unwrap().unwrap();
    }

    async fn stats(&self) -> BrokerStats {
        self.broker.send(Stats).await.unwrap()
    }

    fn worker(&self) -> (Addr<Worker>, SharedInfo) {
        let worker = Worker::new(self.deps.clone(), all_schedulers());
        let info = worker.info();
        (worker.start(), info)
    }

    fn supervisor(&self, workers: usize) -> Addr<WorkerSupervisor> {
        let config = WorkerPoolConfig {
            num_schedulers: workers,
            enabled_schedulers: all_schedulers(),
        };
        WorkerSupervisor::new("server-1".into(), 4, self.deps.clone(), config)
            .unwrap()
            .start()
    }
}

fn all_schedulers() -> Vec<JobType> {
    vec![
        JobType::Service,
        JobType::Batch,
        JobType::System,
        JobType::SysBatch,
        JobType::Core,
    ]
}

fn names(types: &[&str]) -> Vec<String> {
    types.iter().map(|s| s.to_string()).collect()
}

/// Polls `condition` until it holds; fails the test after a generous
/// deadline (the machine may be loaded).
async fn wait_until<F: FnMut() -> bool>(what: &str, mut condition: F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_for_broker_idle(cluster: &Cluster) -> BrokerStats {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = cluster.stats().await;
        if stats.total_unacked == 0 && stats.total_ready == 0 && stats.total_delayed == 0 {
            return stats;
        }
        assert!(Instant::now() < deadline, "broker never drained: {stats:?}");
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}

#[actix::test]
async fn a_worker_processes_a_service_job_end_to_end() {
    let cluster = Cluster::start(Arc::new(CoreSchedulers)).await;
    cluster.register_nodes(3);
    let eval = cluster.register_job("web", 3);
    let supervisor = cluster.supervisor(1);
    cluster.enqueue(eval.clone()).await;

    wait_until("the evaluation is complete", || {
        cluster.status(eval.id) == EvalStatus::Complete
    })
    .await;
    assert_eq!(cluster.allocs_of("web"), 3);
    let done = cluster.stored_eval(eval.id);
    assert!(
        done.snapshot_index >= eval.modify_index,
        "the evaluation records the state it was scheduled against"
    );
    wait_for_broker_idle(&cluster).await;
    let held = cluster
        .broker
        .send(Outstanding { eval_id: eval.id })
        .await
        .unwrap();
    assert_eq!(held, None, "the delivery was acked");

    let workers = supervisor.send(GetWorkers).await.unwrap();
    assert_eq!(workers.server_id, "server-1");
    assert_eq!(workers.schedulers.len(), 1);
    let json = serde_json::to_value(&workers).unwrap();
    let worker = &json["schedulers"][0];
    assert_eq!(worker["status"], "Started");
    assert!(worker["id"].as_str().unwrap().len() == 36);
    assert_eq!(
        worker["enabled_schedulers"],
        serde_json::json!(["service", "batch", "system", "sysbatch", "_core"])
    );
    let started = worker["started"].as_str().unwrap();
    humantime::parse_rfc3339(started).expect("started is RFC 3339");
    let workload = worker["workload_status"].as_str().unwrap();
    assert!(
        ["WaitingToDequeue", "Running"].contains(&workload),
        "an idle worker waits for work, got {workload}"
    );
}

#[actix::test]
async fn a_worker_waits_for_the_evaluations_index_and_schedules_on_the_newer_state() {
    let cluster = Cluster::start(Arc::new(CoreSchedulers)).await;
    cluster.register_nodes(1);
    let base = cluster.store.latest_index();
    // The evaluation the next two commands will write: at base + 2.
    let job = fixtures::job("default", "late", &[("web", 2)]);
    let mut eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
    eval.create_index = base + 2;
    eval.modify_index = base + 2;
    let (_worker, info) = cluster.worker();
    cluster.enqueue(eval.clone()).await;
    wait_until("the worker waits for the state", || {
        info.workload_status() == WorkloadStatus::WaitingForRaft
    })
    .await;
    assert_eq!(
        cluster.stats().await.total_unacked,
        1,
        "it holds the delivery"
    );

    // The state catches up: a new node, then the job and its evaluation.
    let new_node = fixtures::node("new");
    cluster
        .store
        .apply(Command::NodeRegister {
            node: Arc::new(new_node.clone()),
        })
        .unwrap();
    cluster
        .store
        .apply(Command::JobRegister {
            job: Arc::new(job),
            eval: Some(eval.clone()),
            enforce_index: None,
        })
        .unwrap();
    assert_eq!(cluster.stored_eval(eval.id).modify_index, base + 2);

    wait_until("the evaluation is complete", || {
        cluster.status(eval.id) == EvalStatus::Complete
    })
    .await;
    assert_eq!(
        cluster.allocs_of("late"),
        2,
        "a stale snapshot has no job and would have placed nothing"
    );
    let done = cluster.stored_eval(eval.id);
    assert!(
        done.snapshot_index >= base + 2,
        "scheduled at {}",
        done.snapshot_index
    );
    wait_for_broker_idle(&cluster).await;
}

#[actix::test]
async fn a_paused_worker_leaves_evaluations_queued_and_resume_drains_them() {
    let cluster = Cluster::start(Arc::new(CoreSchedulers)).await;
    cluster.register_nodes(2);
    let (worker, info) = cluster.worker();
    worker.send(Pause).await.unwrap();
    wait_until("the worker is paused", || {
        info.status() == WorkerStatus::Paused && info.workload_status() == WorkloadStatus::Paused
    })
    .await;

    let evals: Vec<Evaluation> = (0..3)
        .map(|i| cluster.register_job(&format!("job-{i}"), 1))
        .collect();
    cluster
        .broker
        .send(EnqueueAll {
            evals: evals.clone(),
        })
        .await
        .unwrap()
        .unwrap();
    // Long enough for several dequeue rounds had the worker been running.
    actix_rt::time::sleep(Duration::from_millis(1500)).await;
    let stats = cluster.stats().await;
    assert_eq!(
        stats.total_ready, 3,
        "nothing dequeued while paused: {stats:?}"
    );
    assert_eq!(cluster.complete(&evals), 0);
    assert_eq!(info.status(), WorkerStatus::Paused);

    worker.send(Resume).await.unwrap();
    wait_until("every evaluation is complete", || {
        cluster.complete(&evals) == 3
    })
    .await;
    assert_eq!(info.status(), WorkerStatus::Started);
    wait_for_broker_idle(&cluster).await;

    worker.send(Stop).await.unwrap();
    assert_eq!(info.status(), WorkerStatus::Stopped);
    assert_eq!(info.workload_status(), WorkloadStatus::Stopped);
}

#[actix::test]
async fn resizing_from_four_workers_to_one_and_back_loses_no_evaluation() {
    let counting = Arc::new(Counting {
        work: Duration::from_millis(30),
        ..Counting::default()
    });
    let cluster = Cluster::start(counting.clone()).await;
    cluster.register_nodes(10);
    let evals: Vec<Evaluation> = (0..50)
        .map(|i| cluster.register_job(&format!("job-{i}"), 1))
        .collect();
    let supervisor = cluster.supervisor(4);
    cluster
        .broker
        .send(EnqueueAll {
            evals: evals.clone(),
        })
        .await
        .unwrap()
        .unwrap();

    wait_until("a few evaluations are done", || {
        cluster.complete(&evals) >= 5
    })
    .await;
    let shrunk = supervisor
        .send(SetConfig {
            num_schedulers: 1,
            enabled_schedulers: names(&["service", "batch", "system", "sysbatch", "_core"]),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(shrunk.num_schedulers, 1);
    assert_eq!(
        supervisor.send(GetWorkers).await.unwrap().schedulers.len(),
        1
    );

    wait_until("more evaluations are done", || {
        cluster.complete(&evals) >= 20
    })
    .await;
    supervisor
        .send(SetConfig {
            num_schedulers: 4,
            enabled_schedulers: names(&["service", "batch", "system", "sysbatch", "_core"]),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        supervisor.send(GetWorkers).await.unwrap().schedulers.len(),
        4
    );

    wait_until("every evaluation is complete", || {
        cluster.complete(&evals) == 50
    })
    .await;
    wait_for_broker_idle(&cluster).await;
    let calls = counting.calls();
    for eval in &evals {
        assert_eq!(calls.get(&eval.id), Some(&1), "scheduled exactly once");
        assert_eq!(cluster.allocs_of(&eval.job_id), 1);
    }
    assert_eq!(calls.len(), 50);

    supervisor.send(StopAll).await.unwrap();
    let workers = supervisor.send(GetWorkers).await.unwrap();
    assert!(workers.schedulers.is_empty());
}

#[actix::test]
async fn an_invalid_worker_config_is_refused_and_changes_nothing() {
    let cluster = Cluster::start(Arc::new(CoreSchedulers)).await;
    let supervisor = cluster.supervisor(2);
    let ids = |w: herder_server::worker_supervisor::WorkersInfo| {
        w.schedulers.into_iter().map(|s| s.id).collect::<Vec<_>>()
    };
    let before = ids(supervisor.send(GetWorkers).await.unwrap());
    let config_before = supervisor.send(GetConfig).await.unwrap();
    assert_eq!(before.len(), 2);

    let refusals = [
        (
            5,
            names(&["service", "_core"]),
            WorkerConfigError::NumSchedulers {
                requested: 5,
                cpus: 4,
            },
        ),
        (
            -1,
            names(&["service", "_core"]),
            WorkerConfigError::NumSchedulers {
                requested: -1,
                cpus: 4,
            },
        ),
        (
            2,
            names(&["service", "batch"]),
            WorkerConfigError::CoreNotEnabled,
        ),
        (
            2,
            names(&["service", "gpu", "_core"]),
            WorkerConfigError::UnknownScheduler("gpu".into()),
        ),
    ];
    for (num_schedulers, enabled_schedulers, expected) in refusals {
        let answer = supervisor
            .send(SetConfig {
                num_schedulers,
                enabled_schedulers,
            })
            .await
            .unwrap();
        assert_eq!(answer, Err(expected));
    }
    let message = WorkerConfigError::CoreNotEnabled.to_string();
    assert!(message.contains("_core"), "{message}");

    assert_eq!(ids(supervisor.send(GetWorkers).await.unwrap()), before);
    assert_eq!(supervisor.send(GetConfig).await.unwrap(), config_before);

    // Changing the types replaces the workers; changing only the number
    // keeps the ones that run.
    let changed = supervisor
        .send(SetConfig {
            num_schedulers: 3,
            enabled_schedulers: names(&["batch", "_core", "batch"]),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(changed.enabled_schedulers, names(&["batch", "_core"]));
    let replaced = ids(supervisor.send(GetWorkers).await.unwrap());
    assert_eq!(replaced.len(), 3);
    assert!(replaced.iter().all(|id| !before.contains(id)));
    supervisor
        .send(SetConfig {
            num_schedulers: 4,
            enabled_schedulers: names(&["batch", "_core"]),
        })
        .await
        .unwrap()
        .unwrap();
    let grown = ids(supervisor.send(GetWorkers).await.unwrap());
    assert_eq!(&grown[..3], &replaced[..]);
    assert_eq!(grown.len(), 4);
}

#[actix::test]
async fn a_scheduler_error_nacks_the_evaluation_and_it_is_delivered_again() {
    let counting = Arc::new(Counting {
        fail_first_attempt: true,
        ..Counting::default()
    });
    let cluster = Cluster::start(counting.clone()).await;
    cluster.register_nodes(2);
    let eval = cluster.register_job("flaky", 2);
    let (_worker, _info) = cluster.worker();
    cluster.enqueue(eval.clone()).await;

    wait_until("the evaluation is complete", || {
        cluster.status(eval.id) == EvalStatus::Complete
    })
    .await;
    assert_eq!(
        counting.calls().get(&eval.id),
        Some(&2),
        "failed once, then ran"
    );
    assert_eq!(cluster.allocs_of("flaky"), 2);
    wait_for_broker_idle(&cluster).await;
}

#[actix::test]
async fn the_leader_pauses_three_quarters_of_its_workers() {
    let cluster = Cluster::start(Arc::new(CoreSchedulers)).await;
    let supervisor = cluster.supervisor(4);
    let count = |status: WorkerStatus, workers: &[herder_server::worker::WorkerInfo]| {
        workers.iter().filter(|w| w.status == status).count()
    };
    supervisor.send(SetLeader(true)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let workers = supervisor.send(GetWorkers).await.unwrap().schedulers;
        if count(WorkerStatus::Paused, &workers) == 3 && count(WorkerStatus::Started, &workers) == 1
        {
            break;
        }
        assert!(Instant::now() < deadline, "workers: {workers:?}");
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
    supervisor.send(SetLeader(false)).await.unwrap();
    loop {
        let workers = supervisor.send(GetWorkers).await.unwrap().schedulers;
        if count(WorkerStatus::Started, &workers) == 4 {
            break;
        }
        assert!(Instant::now() < deadline, "workers: {workers:?}");
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}

#[actix::test]
async fn a_worker_far_behind_nacks_backs_off_and_wakes_when_the_state_catches_up() {
    let cluster = Cluster::start(Arc::new(CoreSchedulers)).await;
    cluster.register_nodes(1);
    let mut deps = cluster.deps.clone();
    deps.timing.raft_sync_limit = Duration::from_millis(200);
    let worker = Worker::new(deps, all_schedulers());
    let info = worker.info();
    let _worker = worker.start();
    let base = cluster.store.latest_index();
    let job = fixtures::job("default", "behind", &[("web", 1)]);
    let mut eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
    eval.create_index = base + 1;
    eval.modify_index = base + 1;
    cluster.enqueue(eval.clone()).await;

    wait_until("the worker backs off", || {
        info.workload_status() == WorkloadStatus::Backoff
    })
    .await;
    let stats = cluster.stats().await;
    assert_eq!(
        stats.total_unacked, 0,
        "the evaluation was given back: {stats:?}"
    );

    cluster
        .store
        .apply(Command::JobRegister {
            job: Arc::new(job),
            eval: Some(eval.clone()),
            enforce_index: None,
        })
        .unwrap();
    wait_until("the evaluation is complete", || {
        cluster.status(eval.id) == EvalStatus::Complete
    })
    .await;
    assert_eq!(cluster.allocs_of("behind"), 1);
    wait_for_broker_idle(&cluster).await;
}

#[actix::test]
async fn a_plan_refused_while_the_plan_queue_is_disabled_is_retried_not_nacked() {
    let counting = Arc::new(Counting::default());
    let cluster = Cluster::start(counting.clone()).await;
    cluster.register_nodes(2);
    let eval = cluster.register_job("patient", 2);
    let applier = cluster.deps.link.queues().plan_applier.clone();
    applier
        .send(herder_server::plan_applier::SetEnabled(false))
        .await
        .unwrap();
    let (_worker, info) = cluster.worker();
    cluster.enqueue(eval.clone()).await;

    wait_until("the worker backs off from the disabled plan queue", || {
        info.workload_status() == WorkloadStatus::Backoff
    })
    .await;
    assert_eq!(
        cluster.stats().await.total_unacked,
        1,
        "the worker keeps the eval"
    );
    assert_eq!(cluster.status(eval.id), EvalStatus::Pending);

    applier
        .send(herder_server::plan_applier::SetEnabled(true))
        .await
        .unwrap();
    wait_until("the evaluation is complete", || {
        cluster.status(eval.id) == EvalStatus::Complete
    })
    .await;
    assert_eq!(cluster.allocs_of("patient"), 2);
    assert_eq!(counting.calls().get(&eval.id), Some(&1), "never nacked");
    wait_for_broker_idle(&cluster).await;
}

#[actix::test]
async fn a_stopped_worker_finishes_and_acks_the_evaluation_in_hand() {
    let counting = Arc::new(Counting {
        work: Duration::from_millis(300),
        ..Counting::default()
    });
    let cluster = Cluster::start(counting.clone()).await;
    cluster.register_nodes(1);
    let eval = cluster.register_job("in-hand", 1);
    let (worker, info) = cluster.worker();
    cluster.enqueue(eval.clone()).await;
    wait_until("the worker is scheduling", || {
        info.workload_status() == WorkloadStatus::Scheduling
    })
    .await;

    let stop = worker.send(Stop);
    wait_until("the worker is stopping", || {
        info.status() == WorkerStatus::Stopping
    })
    .await;
    stop.await.unwrap();
    assert_eq!(info.status(), WorkerStatus::Stopped);
    assert_eq!(cluster.status(eval.id), EvalStatus::Complete);
    assert_eq!(cluster.allocs_of("in-hand"), 1);
    let stats = wait_for_broker_idle(&cluster).await;
    assert_eq!(stats.total_unacked, 0, "acked before stopping");

    // A stopped worker dequeues nothing more.
    let next = cluster.register_job("after-stop", 1);
    cluster.enqueue(next.clone()).await;
    actix_rt::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(cluster.stats().await.total_ready, 1);
    assert_eq!(cluster.status(next.id), EvalStatus::Pending);
}

#[actix::test]
async fn two_workers_racing_for_one_node_never_over_commit_it_and_the_loser_refreshes() {
    // Both workers snapshot before either plan lands, so both plan onto
    // the node's two slots.
    let counting = Arc::new(Counting {
        rendezvous: 2,
        ..Counting::default()
    });
    let cluster = Cluster::start(counting.clone()).await;
    let mut node = fixtures::node("small");
    node.node_resources.cpu.cpu_shares = 200;
    cluster
        .store
        .apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        })
        .unwrap();
    let first = cluster.register_job("first", 2);
    let second = cluster.register_job("second", 2);
    let supervisor = cluster.supervisor(2);
    cluster
        .broker
        .send(EnqueueAll {
            evals: vec![first.clone(), second.clone()],
        })
        .await
        .unwrap()
        .unwrap();

    wait_until("both evaluations are complete", || {
        cluster.complete(&[first.clone(), second.clone()]) == 2
    })
    .await;
    let snapshot = cluster.store.snapshot();
    assert_eq!(
        snapshot.allocs_by_node(&node.id).count(),
        2,
        "never over-committed"
    );
    let stats = cluster
        .deps
        .link
        .queues()
        .plan_applier
        .send(herder_server::plan_applier::GetStats)
        .await
        .unwrap();
    assert!(stats.partial >= 1, "one plan lost the race: {stats:?}");
    let blocked = snapshot
        .evals()
        .filter(|e| e.status == EvalStatus::Blocked)
        .count();
    assert_eq!(blocked, 1, "the loser, refreshed, blocks for the rest");
    let calls = counting.calls();
    assert_eq!(calls.get(&first.id), Some(&1), "no nack on a lost race");
    assert_eq!(calls.get(&second.id), Some(&1), "no nack on a lost race");
    wait_for_broker_idle(&cluster).await;
    supervisor.send(StopAll).await.unwrap();
}
