//! A scheduling worker: one actor per worker, each running the loop that
//! turns a ready evaluation into a durable plan.
//!
//! The loop (Nomad's `worker.go`): dequeue from the broker for the enabled
//! scheduler types with a short timeout (so pause and stop are noticed);
//! wait until the state store has applied the evaluation's index, so the
//! scheduler never plans against a state older than the evaluation; take a
//! snapshot; run the scheduler on a blocking thread with [`PlannerBridge`]
//! as its `Planner`; ack the evaluation, or nack it on any error so the
//! broker delivers it again.
//!
//! A store that is far behind (a timeout waiting for the index) makes the
//! worker nack and then back off for a growing time, waking early once the
//! store catches up, instead of nacking every evaluation it sees.
//!
//! Lifecycle: [`Start`], [`Stop`], [`Pause`], [`Resume`]. Pause and stop take
//! effect between evaluations: the evaluation in hand is always finished
//! (acked or nacked), never dropped. The worker's [`WorkerInfo`] (status and
//! what the loop is doing now) is shared behind a mutex so the agent API
//! reads it without waiting for the loop.

use crate::broker::{BrokerError, Delivery, Dequeue, Token};
use crate::leader_link::LeaderLink;
use crate::node_shares::{NodeShares, ShareSeat};
use crate::plan_applier::{InFlightView, PlanAnswer, PlanWrite};
use actix::prelude::*;
use futures::executor::block_on;
use herder::scheduler::{
    new_scheduler, NodeShare, Planner, PlannerError, Scheduler, SchedulerError, State,
};
use herder::state::{ApplyOutcome, Command, StateSnapshot, StateStore, StoreError};
use herder::structs::{new_id, EvalId, Evaluation, JobType, Plan, PlanResult};
use serde::Serialize;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::Instrument;

/// Timings of the worker loop. The defaults are Nomad's.
///
/// Nomad also has a fast backoff limited to 1 s for polling the state's
/// index; here the store wakes index waiters itself, so nothing polls.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerTiming {
    /// How long one dequeue request may wait for work.
    pub dequeue_timeout: Duration,
    /// How long to wait for the store to reach an evaluation's index (or a
    /// plan's refresh index) before giving the evaluation back.
    pub raft_sync_limit: Duration,
    /// Base of the backoff after dequeue errors.
    pub backoff_baseline_fast: Duration,
    /// Base of the backoff while the store is far behind and between
    /// retries of transient plan and evaluation write errors.
    pub backoff_baseline_slow: Duration,
    /// Longest single backoff.
    pub backoff_limit_slow: Duration,
    /// Dequeue errors are not logged this soon after the worker starts (a
    /// server that just started has no leader for a moment).
    pub dequeue_err_grace: Duration,
}

impl Default for WorkerTiming {
    fn default() -> Self {
        WorkerTiming {
            dequeue_timeout: Duration::from_millis(500),
            raft_sync_limit: Duration::from_secs(5),
            backoff_baseline_fast: Duration::from_millis(20),
            backoff_baseline_slow: Duration::from_millis(500),
            backoff_limit_slow: Duration::from_secs(10),
            dequeue_err_grace: Duration::from_secs(10),
        }
    }
}

/// Builds the scheduler for an evaluation. The server uses
/// [`CoreSchedulers`]; the garbage collector's `_core` scheduler plugs in
/// here (until it does, `_core` evaluations fail to build and are nacked),
/// and tests can wrap the real schedulers.
pub trait SchedulerFactory: Send + Sync {
    fn build<'p>(
        &self,
        eval: &Evaluation,
        state: Arc<dyn State>,
        planner: &'p mut dyn Planner,
        now: i64,
    ) -> Result<Box<dyn Scheduler + 'p>, SchedulerError>;
}

/// The schedulers of the `herder` core: service, batch, system, sysbatch.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoreSchedulers;

impl SchedulerFactory for CoreSchedulers {
    fn build<'p>(
        &self,
        eval: &Evaluation,
        state: Arc<dyn State>,
        planner: &'p mut dyn Planner,
        now: i64,
    ) -> Result<Box<dyn Scheduler + 'p>, SchedulerError> {
        new_scheduler(&eval.eval_type, state, planner, now)
    }
}

/// Everything a worker talks to. Cheap to clone (handles only).
#[derive(Clone)]
pub struct WorkerDeps {
    pub store: StateStore,
    /// The leader's broker, blocked evals and plan queue: local actors on
    /// the leader, calls to it on a follower.
    pub link: LeaderLink,
    /// The state with the plan being written (`InFlightView`).
    pub in_flight_view: InFlightView,
    pub schedulers: Arc<dyn SchedulerFactory>,
    pub timing: WorkerTiming,
    /// The server's workers' shares of the nodes (`node_shares`).
    pub node_shares: NodeShares,
}

/// The worker's lifecycle, as Nomad prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum WorkerStatus {
    Starting,
    Started,
    Pausing,
    Paused,
    Resuming,
    Stopping,
    Stopped,
}

/// What the worker's loop is doing right now, as Nomad prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum WorkloadStatus {
    Running,
    WaitingToDequeue,
    WaitingForRaft,
    Scheduling,
    Submitting,
    Backoff,
    Stopped,
    Paused,
}

impl WorkloadStatus {
    fn as_str(self) -> &'static str {
        match self {
            WorkloadStatus::Running => "Running",
            WorkloadStatus::WaitingToDequeue => "WaitingToDequeue",
            WorkloadStatus::WaitingForRaft => "WaitingForRaft",
            WorkloadStatus::Scheduling => "Scheduling",
            WorkloadStatus::Submitting => "Submitting",
            WorkloadStatus::Backoff => "Backoff",
            WorkloadStatus::Stopped => "Stopped",
            WorkloadStatus::Paused => "Paused",
        }
    }
}

/// One worker as the agent's `/v1/agent/schedulers` reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkerInfo {
    pub id: uuid::Uuid,
    #[serde(serialize_with = "scheduler_names")]
    pub enabled_schedulers: Vec<JobType>,
    #[serde(serialize_with = "rfc3339")]
    pub started: SystemTime,
    pub status: WorkerStatus,
    pub workload_status: WorkloadStatus,
}

fn scheduler_names<S: serde::Serializer>(types: &[JobType], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(types.iter().map(JobType::as_str))
}

fn rfc3339<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_rfc3339_nanos(*t))
}

/// The worker's info, shared by the actor, its loop, the loop's blocking
/// scheduler thread and the supervisor.
///
/// A std mutex rather than an async one: every access is a short copy in
/// or out, it is touched from the blocking scheduler thread (where there is
/// no executor to await on), and no guard is ever held across an `.await`,
/// so it can neither block the executor for long nor deadlock the loop.
#[derive(Clone, Debug)]
pub struct SharedInfo(Arc<InfoCell>);

#[derive(Debug)]
struct InfoCell(Mutex<WorkerInfo>);

impl Drop for InfoCell {
    /// A worker that is gone no longer counts in the per-state gauges.
    fn drop(&mut self) {
        let info = self.0.get_mut().unwrap_or_else(|e| e.into_inner());
        metrics::gauge!("herder.worker.workload", "status" => info.workload_status.as_str())
            .decrement(1.0);
    }
}

impl SharedInfo {
    fn new(enabled_schedulers: Vec<JobType>) -> Self {
        let info = WorkerInfo {
            id: new_id(),
            enabled_schedulers,
            started: SystemTime::now(),
            status: WorkerStatus::Starting,
            workload_status: WorkloadStatus::Running,
        };
        metrics::gauge!("herder.worker.workload", "status" => info.workload_status.as_str())
            .increment(1.0);
        SharedInfo(Arc::new(InfoCell(Mutex::new(info))))
    }

    fn lock(&self) -> MutexGuard<'_, WorkerInfo> {
        // The info is plain data replaced field by field: a panic elsewhere
        // cannot leave it half-written, so a poisoned lock is still usable.
        self.0 .0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of the worker's current info.
    pub fn get(&self) -> WorkerInfo {
        self.lock().clone()
    }

    pub fn status(&self) -> WorkerStatus {
        self.lock().status
    }

    pub fn workload_status(&self) -> WorkloadStatus {
        self.lock().workload_status
    }

    fn set_status(&self, status: WorkerStatus) {
        self.lock().status = status;
    }

    /// Records a workload change, keeping the per-state worker gauges
    /// (how many workers are dequeuing, scheduling, ...) in step.
    fn set_workload(&self, workload: WorkloadStatus) {
        let old = std::mem::replace(&mut self.lock().workload_status, workload);
        if old != workload {
            metrics::gauge!("herder.worker.workload", "status" => old.as_str()).decrement(1.0);
            metrics::gauge!("herder.worker.workload", "status" => workload.as_str()).increment(1.0);
        }
    }
}

/// What the worker has been told to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Desired {
    Run,
    Pause,
    Stop,
}

/// The worker's orders, readable from the async loop (which awaits
/// changes) and from the blocking scheduler thread (which waits on the
/// condition variable while backing off).
struct Control {
    desired: Mutex<Desired>,
    changed: Condvar,
    notify: tokio::sync::Notify,
}

impl Control {
    fn new() -> Arc<Control> {
        Arc::new(Control {
            desired: Mutex::new(Desired::Run),
            changed: Condvar::new(),
            notify: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Desired> {
        self.desired.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self) -> Desired {
        *self.lock()
    }

    fn set(&self, desired: Desired) {
        *self.lock() = desired;
        self.changed.notify_all();
        self.notify.notify_waiters();
    }

    /// Resolves with the order once `accept` accepts it.
    async fn until(&self, accept: impl Fn(Desired) -> bool) -> Desired {
        loop {
            // Register for the wake-up before looking, so a change between
            // the look and the wait is not missed.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let desired = self.get();
            if accept(desired) {
                return desired;
            }
            notified.await;
        }
    }

    /// Sleeps for `wait`, cut short by an order to pause or stop (the loop
    /// then obeys it instead of finishing a backoff that may last seconds).
    async fn sleep_while_running(&self, wait: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = self.until(|d| d != Desired::Run) => {}
        }
    }

    /// Sleeps for `wait` on a blocking thread unless told to stop first;
    /// true when stopped. (A pause waits: the evaluation in hand finishes.)
    fn sleep_unless_stopped_blocking(&self, wait: Duration) -> bool {
        let guard = self.lock();
        let (guard, _) = self
            .changed
            .wait_timeout_while(guard, wait, |d| *d != Desired::Stop)
            .unwrap_or_else(|e| e.into_inner());
        *guard == Desired::Stop
    }
}

/// How often a worker looks again at a disabled broker (a follower's).
const BROKER_DISABLED_POLL: Duration = Duration::from_millis(200);

/// Exponential backoff, `min(limit, 4^failures x base)`, shared by every
/// retry of one worker and reset by any success.
#[derive(Clone, Copy, Debug, Default)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    fn next(&mut self, base: Duration, limit: Duration) -> Duration {
        let factor = 1u32.checked_shl(2 * self.failures).unwrap_or(u32::MAX);
        let wait = base.saturating_mul(factor);
        if wait > limit {
            limit
        } else {
            self.failures += 1;
            wait
        }
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Wall-clock time as Unix nanoseconds, the schedulers' notion of now.
fn unix_nanos_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------
// The actor and its messages
// ---------------------------------------------------------------------------

/// Start the loop of a stopped worker, or cancel a stop still in progress.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Start;

/// Finish the evaluation in hand, then stop. Answered once stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;

/// Finish the evaluation in hand, then dequeue no more until [`Resume`].
#[derive(Message)]
#[rtype(result = "()")]
pub struct Pause;

/// Dequeue again after a [`Pause`].
#[derive(Message)]
#[rtype(result = "()")]
pub struct Resume;

/// A copy of the worker's info.
#[derive(Message)]
#[rtype(result = "WorkerInfo")]
pub struct GetInfo;

/// The running loop: its orders and its completion signal.
struct Running {
    control: Arc<Control>,
    done: tokio::sync::watch::Receiver<bool>,
}

impl Running {
    fn finished(&self) -> bool {
        *self.done.borrow()
    }
}

/// A scheduling worker. The loop starts with the actor.
pub struct Worker {
    deps: WorkerDeps,
    info: SharedInfo,
    running: Option<Running>,
}

impl Worker {
    /// A worker for `enabled_schedulers`; start it as an actor.
    pub fn new(deps: WorkerDeps, enabled_schedulers: Vec<JobType>) -> Worker {
        Worker {
            deps,
            info: SharedInfo::new(enabled_schedulers),
            running: None,
        }
    }

    /// The worker's shared info (status readable at any time).
    pub fn info(&self) -> SharedInfo {
        self.info.clone()
    }

    fn spawn_loop(&mut self) {
        let control = Control::new();
        let (done_tx, done) = tokio::sync::watch::channel(false);
        self.info.set_status(WorkerStatus::Starting);
        let worker_loop = WorkerLoop {
            deps: self.deps.clone(),
            schedulers: self.info.get().enabled_schedulers,
            info: self.info.clone(),
            control: control.clone(),
            backoff: Backoff::default(),
            started: Instant::now(),
            finishing: Vec::new(),
            seat: self.deps.node_shares.join(),
        };
        let id = self.info.get().id;
        // A detached task rather than an actor future: the loop must finish
        // the evaluation in hand even if the actor itself is stopped.
        actix::spawn(
            async move {
                worker_loop.run().await;
                let _ = done_tx.send(true);
            }
            .instrument(tracing::debug_span!("worker", worker_id = %id)),
        );
        self.running = Some(Running { control, done });
    }

    fn order(&self, desired: Desired) {
        if let Some(running) = &self.running {
            running.control.set(desired);
        }
    }
}

impl Actor for Worker {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Context<Self>) {
        self.spawn_loop();
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        // Nobody can address the worker any more: let the loop finish its
        // evaluation and end.
        self.order(Desired::Stop);
    }
}

impl Handler<Start> for Worker {
    type Result = ();

    fn handle(&mut self, _msg: Start, _ctx: &mut Context<Self>) {
        match &self.running {
            Some(running) if !running.finished() => {
                // The loop runs on this thread too, so it cannot finish
                // between the check above and this order.
                running.control.set(Desired::Run);
                self.info.set_status(WorkerStatus::Started);
            }
            _ => self.spawn_loop(),
        }
    }
}

impl Handler<Stop> for Worker {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _msg: Stop, _ctx: &mut Context<Self>) -> Self::Result {
        let Some(running) = &self.running else {
            return Box::pin(async {});
        };
        if !running.finished() {
            self.info.set_status(WorkerStatus::Stopping);
            running.control.set(Desired::Stop);
        }
        let mut done = running.done.clone();
        Box::pin(async move {
            // An error means the loop's task is gone, which is stopped too.
            let _ = done.wait_for(|finished| *finished).await;
        })
    }
}

impl Handler<Pause> for Worker {
    type Result = ();

    fn handle(&mut self, _msg: Pause, _ctx: &mut Context<Self>) {
        let Some(running) = &self.running else { return };
        if running.finished() || running.control.get() != Desired::Run {
            return;
        }
        self.info.set_status(WorkerStatus::Pausing);
        running.control.set(Desired::Pause);
    }
}

impl Handler<Resume> for Worker {
    type Result = ();

    fn handle(&mut self, _msg: Resume, _ctx: &mut Context<Self>) {
        let Some(running) = &self.running else { return };
        if running.finished() || running.control.get() != Desired::Pause {
            return;
        }
        self.info.set_status(WorkerStatus::Resuming);
        running.control.set(Desired::Run);
    }
}

impl Handler<GetInfo> for Worker {
    type Result = MessageResult<GetInfo>;

    fn handle(&mut self, _msg: GetInfo, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.info.get())
    }
}

// ---------------------------------------------------------------------------
// The loop
// ---------------------------------------------------------------------------

/// Why an evaluation could not be processed.
#[derive(Debug, thiserror::Error)]
enum EvalError {
    #[error("waiting for the state to reach index {index}: {source}")]
    Sync { index: u64, source: StoreError },
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    #[error("the scheduler panicked: {0}")]
    Panicked(String),
}

struct WorkerLoop {
    deps: WorkerDeps,
    /// The scheduler types this worker dequeues for.
    schedulers: Vec<JobType>,
    info: SharedInfo,
    control: Arc<Control>,
    backoff: Backoff,
    started: Instant,
    /// Evaluations scheduled whose final write is still being made
    /// durable: each is acked (or nacked) by its own task when it is.
    finishing: Vec<tokio::task::JoinHandle<()>>,
    /// This worker's seat among the server's: its share of the nodes.
    seat: ShareSeat,
}

/// The store's answer to an evaluation's final write, not yet awaited.
type PendingWrite = futures::channel::oneshot::Receiver<Result<ApplyOutcome, StoreError>>;

/// The writes an evaluation's acknowledgement waits for: plans answered
/// ahead of their write (see [`crate::plan_applier::PlanAnswer`]) and the
/// evaluation's final status.
#[derive(Default)]
struct PendingWrites {
    plans: Vec<PlanWrite>,
    eval: Option<PendingWrite>,
}

impl PendingWrites {
    fn is_empty(&self) -> bool {
        self.plans.is_empty() && self.eval.is_none()
    }

    /// `Ok` once every write is durable, else why one is not.
    async fn durable(self) -> Result<(), String> {
        for plan in self.plans {
            match plan.await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(format!("a plan's write failed: {e}")),
                Err(_) => return Err("the plan applier stopped".to_string()),
            }
        }
        match self.eval {
            None => Ok(()),
            Some(write) => match write.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("the store stopped".to_string()),
            },
        }
    }
}

impl WorkerLoop {
    async fn run(mut self) {
        self.info.set_status(WorkerStatus::Started);
        self.info.set_workload(WorkloadStatus::Running);
        while self.ready_to_dequeue().await {
            if let Some(delivery) = self.dequeue().await {
                // Even when a stop or pause arrived meanwhile: the broker
                // handed this evaluation over, so finish it.
                self.process(delivery).await;
            }
        }
        // "Stopped" means every evaluation this worker took is settled.
        for finishing in self.finishing.drain(..) {
            let _ = finishing.await;
        }
        self.info.set_status(WorkerStatus::Stopped);
        self.info.set_workload(WorkloadStatus::Stopped);
    }

    /// Parks while paused; false once told to stop.
    async fn ready_to_dequeue(&mut self) -> bool {
        match self.control.get() {
            Desired::Run => {
                // Resumed (or a stop was called off) before the loop parked.
                if self.info.status() != WorkerStatus::Started {
                    self.info.set_status(WorkerStatus::Started);
                }
                true
            }
            Desired::Stop => false,
            Desired::Pause => {
                self.info.set_status(WorkerStatus::Paused);
                self.info.set_workload(WorkloadStatus::Paused);
                let desired = self.control.until(|d| d != Desired::Pause).await;
                if desired == Desired::Run {
                    self.info.set_status(WorkerStatus::Started);
                    self.info.set_workload(WorkloadStatus::Running);
                }
                desired == Desired::Run
            }
        }
    }

    /// One dequeue request; `None` when it timed out or failed (after the
    /// error backoff).
    async fn dequeue(&mut self) -> Option<Delivery> {
        self.info.set_workload(WorkloadStatus::WaitingToDequeue);
        let request = Dequeue {
            schedulers: self.schedulers.clone(),
            timeout: self.deps.timing.dequeue_timeout,
        };
        let start = Instant::now();
        // Always awaited to the end: a dropped request could be answered
        // with an evaluation nobody receives until its nack timeout.
        let answer = self.deps.link.dequeue(request).await;
        metrics::histogram!("herder.worker.dequeue_eval_seconds")
            .record(start.elapsed().as_secs_f64());
        let error = match answer {
            Ok(Ok(delivery)) => {
                self.backoff.reset();
                return delivery;
            }
            Ok(Err(BrokerError::Disabled)) => {
                // This server follows: not an error, and no growing
                // backoff either, so that the workers start within a
                // moment of this server being elected.
                self.info.set_workload(WorkloadStatus::Backoff);
                self.control.sleep_while_running(BROKER_DISABLED_POLL).await;
                return None;
            }
            Ok(Err(e)) => e.to_string(),
            Err(e) => format!("eval broker unreachable: {e}"),
        };
        if self.started.elapsed() > self.deps.timing.dequeue_err_grace {
            tracing::error!(error, "failed to dequeue evaluation");
        }
        let timing = &self.deps.timing;
        let wait = self
            .backoff
            .next(timing.backoff_baseline_fast, timing.backoff_limit_slow);
        self.info.set_workload(WorkloadStatus::Backoff);
        self.control.sleep_while_running(wait).await;
        None
    }

    async fn process(&mut self, delivery: Delivery) {
        let eval = delivery.eval.clone();
        let span = tracing::info_span!(
            "eval",
            eval_id = %eval.id,
            job_id = %eval.job_id,
            scheduler = eval.eval_type.as_str()
        );
        self.process_in_span(delivery).instrument(span).await;
    }

    async fn process_in_span(&mut self, delivery: Delivery) {
        let Delivery {
            eval,
            token,
            wait_index,
        } = delivery;
        tracing::debug!("dequeued evaluation");
        let outcome = match self.snapshot_for(&eval, wait_index).await {
            Ok(snapshot) => {
                self.backoff.reset();
                self.invoke_scheduler(eval.clone(), token, snapshot).await
            }
            Err(e) => {
                tracing::warn!(error = %e, "state is behind the evaluation; giving it back");
                nack(&self.deps.link, eval.id, token).await;
                self.back_off_until_index(eval.modify_index.max(wait_index))
                    .await;
                return;
            }
        };
        match outcome {
            Ok(writes) if writes.is_empty() => ack(&self.deps.link, eval.id, token).await,
            Ok(writes) => self.finish_when_durable(eval.id, token, writes),
            Err(e) => {
                tracing::error!(error = %e, "failed to process evaluation");
                nack(&self.deps.link, eval.id, token).await;
            }
        }
    }

    /// Acks the evaluation once its writes are durable (nacks it if one
    /// fails), while this worker goes on to the next one: the
    /// write waits its turn behind plans in the store's group commit, and
    /// waiting for it here kept the worker idle a quarter of its time.
    /// Nothing is acked before it is durable, and the broker hands out no
    /// other evaluation of the job until the ack, so the order of
    /// decisions per job is Nomad's.
    fn finish_when_durable(&mut self, eval_id: EvalId, token: Token, writes: PendingWrites) {
        self.finishing.retain(|f| !f.is_finished());
        let link = self.deps.link.clone();
        let limit = self.deps.timing.raft_sync_limit;
        let start = Instant::now();
        let finish = async move {
            let durable = tokio::time::timeout(limit, writes.durable()).await;
            metrics::histogram!("herder.worker.update_eval_seconds")
                .record(start.elapsed().as_secs_f64());
            match durable {
                Ok(Ok(())) => ack(&link, eval_id, token).await,
                failed => {
                    let error = match failed {
                        Ok(Err(e)) => e,
                        _ => format!("not durable within {limit:?}"),
                    };
                    tracing::error!(%eval_id, error, "writing the evaluation's outcome failed");
                    nack(&link, eval_id, token).await;
                }
            }
        };
        self.finishing.push(actix::spawn(finish.in_current_span()));
    }

    /// A snapshot at or after the evaluation's index, waiting (off the
    /// executor) up to the sync limit for the store to get there.
    async fn snapshot_for(
        &mut self,
        eval: &Evaluation,
        wait_index: u64,
    ) -> Result<StateSnapshot, EvalError> {
        let index = eval.modify_index.max(wait_index);
        self.info.set_workload(WorkloadStatus::WaitingForRaft);
        let store = &self.deps.store;
        // The usual case needs no wait and no thread hop. While a plan is
        // being written, schedule against the state it will make, so as
        // not to race it for the same nodes; its base must already hold
        // the evaluation (and so the job version it was made for).
        if store.latest_index() >= index {
            let view = self.deps.in_flight_view.get();
            return Ok(view
                .filter(|v| v.latest_index() >= index)
                .unwrap_or_else(|| store.snapshot()));
        }
        let start = Instant::now();
        let limit = self.deps.timing.raft_sync_limit;
        let result = wait_for_index(store.clone(), index, limit).await;
        metrics::histogram!("herder.worker.wait_for_index_seconds")
            .record(start.elapsed().as_secs_f64());
        result.map_err(|source| EvalError::Sync { index, source })
    }

    /// After giving back an evaluation the store was too far behind for,
    /// wait (with the slow, growing backoff) before dequeuing again, unless
    /// the store catches up or the worker is paused or stopped first.
    async fn back_off_until_index(&mut self, index: u64) {
        let timing = &self.deps.timing;
        let wait = self
            .backoff
            .next(timing.backoff_baseline_slow, timing.backoff_limit_slow);
        self.info.set_workload(WorkloadStatus::Backoff);
        let caught_up = wait_for_index(self.deps.store.clone(), index, wait);
        tokio::select! {
            _ = caught_up => {}
            _ = self.control.until(|d| d != Desired::Run) => {}
        }
    }

    /// Runs the scheduler on a blocking thread: it is CPU work and must not
    /// hold up the actors sharing this executor.
    async fn invoke_scheduler(
        &mut self,
        eval: Arc<Evaluation>,
        token: Token,
        snapshot: StateSnapshot,
    ) -> Result<PendingWrites, EvalError> {
        self.info.set_workload(WorkloadStatus::Scheduling);
        let mut bridge = PlannerBridge {
            deps: self.deps.clone(),
            info: self.info.clone(),
            control: self.control.clone(),
            backoff: self.backoff,
            eval_id: eval.id,
            token,
            snapshot_index: snapshot.latest_index(),
            final_write: None,
            plan_writes: Vec::new(),
            share: self.seat.share(),
        };
        let factory = self.deps.schedulers.clone();
        let scheduler_type = eval.eval_type.as_str().to_string();
        let span = tracing::Span::current();
        let start = Instant::now();
        let joined = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let cpu_before = thread_cpu_time();
            let state: Arc<dyn State> = Arc::new(snapshot);
            let result = factory
                .build(&eval, state, &mut bridge, unix_nanos_now())
                .and_then(|mut scheduler| scheduler.process(&eval));
            // On-CPU time of this thread: the scheduling itself, without
            // the waits for plans and evaluation writes to be durable.
            metrics::histogram!("herder.worker.scheduler_cpu_seconds")
                .record(thread_cpu_time().saturating_sub(cpu_before).as_secs_f64());
            let writes = PendingWrites {
                plans: bridge.plan_writes,
                eval: bridge.final_write,
            };
            (result, bridge.backoff, writes)
        })
        .await;
        metrics::histogram!("herder.worker.invoke_scheduler_seconds", "scheduler" => scheduler_type)
            .record(start.elapsed().as_secs_f64());
        let (result, backoff, writes) = joined.map_err(|e| EvalError::Panicked(e.to_string()))?;
        self.backoff = backoff;
        result?;
        Ok(writes)
    }
}

async fn ack(link: &LeaderLink, eval_id: EvalId, token: Token) {
    let start = Instant::now();
    match link.ack(eval_id, token).await {
        Ok(Ok(())) => tracing::debug!("evaluation acked"),
        Ok(Err(e)) => tracing::error!(error = %e, "failed to ack evaluation"),
        Err(e) => tracing::error!(error = %e, "failed to ack evaluation"),
    }
    metrics::histogram!("herder.worker.send_ack_seconds").record(start.elapsed().as_secs_f64());
}

async fn nack(link: &LeaderLink, eval_id: EvalId, token: Token) {
    match link.nack(eval_id, token).await {
        Ok(Ok(())) => tracing::debug!("evaluation nacked"),
        Ok(Err(e)) => tracing::error!(error = %e, "failed to nack evaluation"),
        Err(e) => tracing::error!(error = %e, "failed to nack evaluation"),
    }
}

/// CPU time the calling thread has used so far.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Waits on a blocking thread for the store to apply `index`.
async fn wait_for_index(
    store: StateStore,
    index: u64,
    limit: Duration,
) -> Result<StateSnapshot, StoreError> {
    tokio::task::spawn_blocking(move || store.snapshot_min_index(index, limit))
        .await
        .unwrap_or(Err(StoreError::Closed))
}

// ---------------------------------------------------------------------------
// The Planner bridge
// ---------------------------------------------------------------------------

/// The worker as the scheduler's `Planner`. It runs on the scheduler's
/// blocking thread, so it may block on the actors' answers.
struct PlannerBridge {
    deps: WorkerDeps,
    info: SharedInfo,
    control: Arc<Control>,
    backoff: Backoff,
    eval_id: EvalId,
    token: Token,
    /// The index of the snapshot the scheduler started from: recorded on
    /// every evaluation it writes.
    snapshot_index: u64,
    /// The evaluation's last status write, submitted but not awaited: the
    /// worker loop acks once it is durable (`finish_when_durable`).
    final_write: Option<PendingWrite>,
    /// Writes of plans answered before they were durable: the evaluation
    /// is acked only once they are.
    plan_writes: Vec<PlanWrite>,
    /// The nodes this worker's placements walk first.
    share: Option<NodeShare>,
}

impl PlannerBridge {
    /// Waits for an earlier status write of this evaluation (a scheduler
    /// that writes its status twice keeps the order and sees failures).
    fn await_final_write(&mut self) -> Result<(), PlannerError> {
        let Some(write) = self.final_write.take() else {
            return Ok(());
        };
        match block_on(write) {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(PlannerError(format!("writing the evaluation: {e}"))),
            Err(_) => Err(PlannerError(
                "writing the evaluation: the store stopped".into(),
            )),
        }
    }

    /// Refuses writes for an evaluation whose delivery is no longer this
    /// worker's (its nack timer fired and another worker may hold it).
    fn check_outstanding(&self) -> Result<(), PlannerError> {
        let held = block_on(self.deps.link.outstanding(self.eval_id))
            .map_err(|e| PlannerError(format!("eval broker unreachable: {e}")))?;
        if held == Some(self.token) {
            Ok(())
        } else {
            Err(PlannerError(format!(
                "evaluation {} is no longer outstanding under this worker's token",
                self.eval_id
            )))
        }
    }

    /// Sleeps for the slow backoff before a retry; an error when the worker
    /// is stopped meanwhile (the evaluation is then nacked).
    fn back_off(&mut self, what: &str) -> Result<(), PlannerError> {
        let timing = &self.deps.timing;
        let wait = self
            .backoff
            .next(timing.backoff_baseline_slow, timing.backoff_limit_slow);
        let before = self.info.workload_status();
        self.info.set_workload(WorkloadStatus::Backoff);
        let stopped = self.control.sleep_unless_stopped_blocking(wait);
        self.info.set_workload(before);
        if stopped {
            return Err(PlannerError(format!(
                "worker stopped while retrying {what}"
            )));
        }
        Ok(())
    }

    /// Sends the plan to the plan applier, retrying transient refusals.
    fn send_plan(&mut self, plan: Plan) -> Result<PlanResult, PlannerError> {
        // Shared, not copied, with the queue: a refused plan does not come
        // back, so each try sends the same one again.
        let plan = Arc::new(plan);
        loop {
            let answer = block_on(self.deps.link.submit_plan(plan.clone()));
            match answer {
                Ok(Ok(PlanAnswer { mut result, write })) => {
                    self.backoff.reset();
                    self.plan_writes.extend(write);
                    // Answered without the committed entries: they are
                    // this plan's own on the nodes not rejected, moved out
                    // of it (the queue has let go of its share by now; a
                    // share still held is copied instead).
                    let plan = Arc::try_unwrap(plan).unwrap_or_else(|shared| (*shared).clone());
                    result.take_committed(plan);
                    return Ok(result);
                }
                Ok(Err(e)) if e.is_transient() => {
                    tracing::warn!(error = %e, "plan refused for now; retrying");
                    self.back_off("plan submission")?;
                }
                Ok(Err(e)) => return Err(PlannerError(format!("plan submission failed: {e}"))),
                Err(e) => return Err(PlannerError(format!("plan applier unreachable: {e}"))),
            }
        }
    }

    /// Makes the evaluation durable; the server routes pending and blocked
    /// evaluations from the store's change feed, so nothing is enqueued here.
    fn write_eval(&mut self, mut eval: Evaluation) -> Result<Evaluation, PlannerError> {
        self.check_outstanding()?;
        eval.snapshot_index = self.snapshot_index;
        let id = eval.id;
        let outcome = self
            .deps
            .store
            .apply(Command::EvalUpdate { evals: vec![eval] })
            .map_err(|e| PlannerError(format!("writing evaluation {id}: {e}")))?;
        self.backoff.reset();
        // The stored row carries the indexes the write assigned (the store
        // publishes a write before answering it, so the snapshot has it).
        let snapshot = self.deps.store.snapshot();
        match snapshot.eval(&id) {
            Some(stored) if stored.modify_index >= outcome.index => Ok((**stored).clone()),
            _ => Err(PlannerError(format!(
                "evaluation {id} missing after its write"
            ))),
        }
    }
}

/// The process's monotonic clock, as nanoseconds since first use: what the
/// scheduler measures each placement's `AllocationTime` with.
fn monotonic_clock() -> herder::scheduler::MonotonicClock {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    Arc::new(move || u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

impl Planner for PlannerBridge {
    fn monotonic_clock(&self) -> Option<herder::scheduler::MonotonicClock> {
        Some(monotonic_clock())
    }

    fn node_share(&self) -> Option<NodeShare> {
        self.share
    }

    fn submit_plan(
        &mut self,
        mut plan: Plan,
    ) -> Result<(PlanResult, Option<Arc<dyn State>>), PlannerError> {
        plan.eval_token = self.token.to_string();
        self.info.set_workload(WorkloadStatus::Submitting);
        let start = Instant::now();
        let (eval_id, token) = (self.eval_id, self.token);
        // The plan may wait in the plan queue behind others for longer than
        // the nack timeout; that wait is not the worker's slowness.
        if let Ok(Err(e)) = block_on(self.deps.link.pause_nack(eval_id, token)) {
            tracing::warn!(error = %e, "could not pause the nack timer");
        }
        let result = self.send_plan(plan);
        if let Ok(Err(e)) = block_on(self.deps.link.resume_nack(eval_id, token)) {
            tracing::warn!(error = %e, "could not resume the nack timer");
        }
        metrics::histogram!("herder.worker.submit_plan_seconds")
            .record(start.elapsed().as_secs_f64());
        let result = result?;
        if result.refresh_index == 0 {
            self.info.set_workload(WorkloadStatus::Scheduling);
            return Ok((result, None));
        }
        // Only part of the plan fit: the scheduler retries against a state
        // that shows why.
        tracing::debug!(refresh_index = result.refresh_index, "refreshing state");
        self.info.set_workload(WorkloadStatus::WaitingForRaft);
        let fresh = self
            .deps
            .store
            .snapshot_min_index(result.refresh_index, self.deps.timing.raft_sync_limit)
            .map_err(|e| PlannerError(format!("refreshing state after a partial plan: {e}")))?;
        self.info.set_workload(WorkloadStatus::Scheduling);
        Ok((result, Some(Arc::new(fresh))))
    }

    /// The evaluation's status, the scheduler's last word on it: submitted
    /// here and awaited by the worker loop before the ack, so the worker
    /// is free to start on the next evaluation meanwhile.
    fn update_eval(&mut self, mut eval: Evaluation) -> Result<(), PlannerError> {
        self.check_outstanding()?;
        self.await_final_write()?;
        eval.snapshot_index = self.snapshot_index;
        // The status changes now (Nomad's worker stamps it the same way).
        eval.modify_time = unix_nanos_now();
        let write = self
            .deps
            .store
            .submit(Command::EvalUpdate { evals: vec![eval] });
        self.final_write = Some(write);
        Ok(())
    }

    fn create_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError> {
        let start = Instant::now();
        self.write_eval(eval)?;
        metrics::histogram!("herder.worker.create_eval_seconds")
            .record(start.elapsed().as_secs_f64());
        Ok(())
    }

    fn reblock_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError> {
        let start = Instant::now();
        let stored = self.write_eval(eval)?;
        // Tracked under this delivery's token: an unblock that arrives
        // before the ack re-runs the evaluation once it is acked.
        block_on(self.deps.link.reblock(stored, self.token))
            .map_err(|e| PlannerError(format!("blocked evals unreachable: {e}")))?;
        metrics::histogram!("herder.worker.reblock_eval_seconds")
            .record(start.elapsed().as_secs_f64());
        Ok(())
    }
}
