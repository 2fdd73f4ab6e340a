//! The evaluation broker: the leader's in-memory queue of evaluations
//! waiting for a scheduling worker.
//!
//! Evaluations arrive with [`Enqueue`] once they are durable. The broker
//! keeps one ready queue per scheduler type, ordered by priority (higher
//! first) and then, where Nomad is first come first served, by a fair share
//! among jobs weighted by each evaluation's cost (`ready_queue`: a small job
//! is not stuck behind a backlog of large ones; equal costs keep Nomad's
//! creation order), and lets at most one evaluation
//! per (namespace, job) be ready or in flight: the others wait in that job's
//! pending set, where the newest of the highest priority wins when the job's
//! slot frees and the rest become cancelable (handed to `BlockedEvals`,
//! which writes them `canceled`).
//!
//! Workers [`Dequeue`] with a timeout; a request that finds nothing is
//! parked and answered by the enqueue that makes work ready, so nobody
//! polls. Every delivery carries a fresh token that [`Ack`] / [`Nack`] /
//! [`OutstandingReset`] must present. An unacknowledged delivery is nacked
//! when its nack timer expires; a nacked evaluation comes back after a
//! growing delay, and after the delivery limit it is written `failed`
//! through the [`EvalWrites`] sink together with a `failed-follow-up`
//! evaluation that the broker then enqueues.
//!
//! Wiring (see `blocked_evals::start_with_blocked_evals`): the state
//! writer sends every applied `pending` evaluation to the broker
//! ([`Enqueue`]) and every `blocked` one to `BlockedEvals`; the broker
//! tells `BlockedEvals` of each ack ([`JobEvalAcked`], a message of the
//! broker's so that the broker needs nothing of the tracker); both persist
//! through a `Recipient<EvalWrites>`.
//!
//! All timers (nack timeouts, delayed evaluations, dequeue timeouts) share
//! one heap and one armed actix timer, so the cost of a timer is a heap push
//! and the actor's context never holds thousands of sleeping futures.

use crate::ready_queue::{EvalCost, ReadyQueue};
use actix::prelude::*;
use herder::structs::{new_id, EvalId, EvalStatus, Evaluation, JobType, TriggeredBy};
use rand::Rng;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// The proof of one delivery; Ack, Nack and OutstandingReset must show it.
pub type Token = uuid::Uuid;

/// (namespace, job ID): the key evaluations are serialised on.
pub type JobKey = (String, String);

/// Timings and limits of the broker. The defaults are Nomad's.
#[derive(Clone, Debug, PartialEq)]
pub struct BrokerConfig {
    /// How long a delivery may stay unacknowledged before it is nacked.
    pub nack_timeout: Duration,
    /// Deliveries after which a still-nacked evaluation is failed.
    pub delivery_limit: u32,
    /// Re-enqueue delay after the first nack.
    pub initial_nack_delay: Duration,
    /// After later nacks the delay is (deliveries - 1) x this.
    pub subsequent_nack_delay: Duration,
    /// The `failed-follow-up` evaluation waits this long...
    pub failed_follow_up_base_delay: Duration,
    /// ...plus a random share of this range, so failures spread out.
    pub failed_follow_up_delay_range: Duration,
    /// How long to wait before retrying a sink write that failed.
    pub sink_retry_interval: Duration,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            nack_timeout: Duration::from_secs(60),
            delivery_limit: 3,
            initial_nack_delay: Duration::from_secs(1),
            subsequent_nack_delay: Duration::from_secs(20),
            failed_follow_up_base_delay: Duration::from_secs(60),
            failed_follow_up_delay_range: Duration::from_secs(5 * 60),
            sink_retry_interval: Duration::from_secs(1),
        }
    }
}

/// How many finished evaluations the broker remembers to recognise late
/// copies (see `EvalBroker::finished`).
const FINISHED_MEMORY: usize = 65_536;

/// Why a broker request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum BrokerError {
    /// The broker only runs on the leader; this server is not (or no longer) it.
    #[error("eval broker disabled")]
    Disabled,
    #[error("evaluation {0} is not outstanding")]
    NotOutstanding(EvalId),
    #[error("evaluation token does not match")]
    TokenMismatch,
}

/// A sink write failed; the writer says why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("evaluation write failed: {0}")]
pub struct EvalWriteError(pub String);

/// Evaluations to persist (upsert) in the state store. Sent by the broker
/// (failed evaluations and their follow-ups) and by `BlockedEvals` (canceled
/// evaluations). New evaluations get their create index from the write.
/// The sender already owns what happens to these evaluations next (the
/// broker enqueues the follow-up itself once the write succeeds); a writer
/// that routes every pending evaluation it applies to the broker does no
/// harm, as enqueueing an evaluation the broker tracks is a no-op.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalWrites {
    pub evals: Vec<Evaluation>,
}

impl Message for EvalWrites {
    /// The state index the writes were committed at.
    type Result = Result<u64, EvalWriteError>;
}

/// One delivered evaluation.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub eval: Arc<Evaluation>,
    pub token: Token,
    /// The state index the worker's replica must reach before scheduling
    /// it, beside the evaluation's own: 0 from this server's broker; from
    /// the leader's (a follower's worker, `leader_link`), the leader's
    /// index at dequeue, which holds every earlier plan of the job.
    pub wait_index: u64,
}

/// Hand a durable evaluation to the broker. Enqueueing an evaluation the
/// broker already tracks is a no-op. Evaluations with `Wait` or a future
/// `WaitUntil` are held until due.
#[derive(Debug)]
pub struct Enqueue {
    pub eval: Evaluation,
    /// Set when the evaluation is one a worker holds (it was re-blocked, then
    /// unblocked, while still being processed): the token of that delivery.
    /// The broker keeps it until the delivery is acked and enqueues it then;
    /// a nack drops it, since the nacked evaluation is delivered again anyway.
    pub token: Option<Token>,
}

impl Enqueue {
    /// Enqueue an evaluation no worker holds.
    pub fn new(eval: Evaluation) -> Self {
        Enqueue { eval, token: None }
    }
}

impl Message for Enqueue {
    type Result = Result<(), BrokerError>;
}

/// Enqueue many evaluations (leader restore).
#[derive(Debug)]
pub struct EnqueueAll {
    pub evals: Vec<Evaluation>,
}

impl Message for EnqueueAll {
    type Result = Result<(), BrokerError>;
}

/// Wait for an evaluation of one of `schedulers`. Answered with `None` when
/// `timeout` passes first; a zero timeout waits until work or disable.
#[derive(Debug)]
pub struct Dequeue {
    pub schedulers: Vec<JobType>,
    pub timeout: Duration,
}

impl Message for Dequeue {
    type Result = Result<Option<Delivery>, BrokerError>;
}

/// The evaluation was processed: release its job's next evaluation.
#[derive(Debug)]
pub struct Ack {
    pub eval_id: EvalId,
    pub token: Token,
}

impl Message for Ack {
    type Result = Result<(), BrokerError>;
}

/// The evaluation could not be processed: deliver it again later.
#[derive(Debug)]
pub struct Nack {
    pub eval_id: EvalId,
    pub token: Token,
}

impl Message for Nack {
    type Result = Result<(), BrokerError>;
}

/// Still working on it: restart the nack timer.
#[derive(Debug)]
pub struct OutstandingReset {
    pub eval_id: EvalId,
    pub token: Token,
}

impl Message for OutstandingReset {
    type Result = Result<(), BrokerError>;
}

/// Stop the nack timer while the evaluation waits in an unbounded queue
/// (the plan queue); [`ResumeNackTimeout`] restarts it.
#[derive(Debug)]
pub struct PauseNackTimeout {
    pub eval_id: EvalId,
    pub token: Token,
}

impl Message for PauseNackTimeout {
    type Result = Result<(), BrokerError>;
}

#[derive(Debug)]
pub struct ResumeNackTimeout {
    pub eval_id: EvalId,
    pub token: Token,
}

impl Message for ResumeNackTimeout {
    type Result = Result<(), BrokerError>;
}

/// The token of an outstanding (delivered, unacked) evaluation, if it is one.
/// The plan applier rejects plans whose evaluation is no longer outstanding.
#[derive(Debug)]
pub struct Outstanding {
    pub eval_id: EvalId,
}

impl Message for Outstanding {
    type Result = Option<Token>;
}

/// Leadership gained (true) or lost (false). Disabling drops every queue and
/// answers parked dequeues with [`BrokerError::Disabled`].
#[derive(Debug)]
pub struct SetEnabled(pub bool);

impl Message for SetEnabled {
    type Result = ();
}

/// The scheduler configuration's `PauseEvalBroker`: while paused, enqueues
/// are accepted and dequeues wait.
#[derive(Debug)]
pub struct SetPaused(pub bool);

impl Message for SetPaused {
    type Result = ();
}

/// Ask for the broker's counters.
#[derive(Debug)]
pub struct Stats;

impl Message for Stats {
    type Result = BrokerStats;
}

/// Counters for metrics and the operator API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrokerStats {
    pub total_ready: usize,
    pub total_unacked: usize,
    /// Evaluations waiting behind their job's in-flight evaluation
    /// (Nomad's `total_blocked`; not the `BlockedEvals` tracker).
    pub total_blocked: usize,
    /// Evaluations held until their `Wait`/`WaitUntil` or nack delay passes.
    pub total_delayed: usize,
    /// Evaluations past the delivery limit whose failure is being written.
    pub total_failed: usize,
    pub by_scheduler: BTreeMap<JobType, SchedulerStats>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    pub ready: usize,
    pub unacked: usize,
}

/// An evaluation waiting for its job's slot, ordered for a max-heap: higher
/// priority first, then the newest (it covers the older ones' changes).
struct PendingEntry {
    seq: u64,
    eval: Arc<Evaluation>,
}

impl PendingEntry {
    fn key(&self) -> (i32, u64, u64) {
        (self.eval.priority, self.eval.modify_index, self.seq)
    }
}

impl PartialEq for PendingEntry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for PendingEntry {}
impl PartialOrd for PendingEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for PendingEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// The evaluation holding a job's slot and the ones queued behind it.
struct JobSlot {
    holder: EvalId,
    pending: BinaryHeap<PendingEntry>,
}

struct Unacked {
    eval: Arc<Evaluation>,
    token: Token,
    /// `None` while the nack timer is paused.
    nack_deadline: Option<Instant>,
}

struct Delayed {
    eval: Arc<Evaluation>,
    due: Instant,
    /// A nacked evaluation keeps its job's slot while it waits; an
    /// evaluation with `Wait`/`WaitUntil` competes for the slot when due.
    holds_job_slot: bool,
}

/// An evaluation past the delivery limit, kept until its failure and its
/// follow-up are durable. The follow-up is built once so retries write the
/// same evaluation.
struct Failed {
    eval: Arc<Evaluation>,
    follow_up: Evaluation,
}

struct Waiter {
    schedulers: Vec<JobType>,
    reply: oneshot::Sender<Result<Option<Delivery>, BrokerError>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TimerEvent {
    NackTimeout { eval_id: EvalId, token: Token },
    Release { eval_id: EvalId },
    DequeueTimeout { waiter: u64 },
}

/// A timer entry, ordered for a min-heap on its deadline. Entries are never
/// removed early: when one fires it is checked against the current state
/// and ignored if stale (the eval was acked, the deadline moved, ...).
struct TimerEntry {
    at: Instant,
    seq: u64,
    event: TimerEvent,
}

impl PartialEq for TimerEntry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for TimerEntry {}
impl PartialOrd for TimerEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TimerEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Sent by the broker on every ack: the job's evaluation at
/// `acked_modify_index` was processed (0 when it failed instead), and
/// `cancelable` are the job's older pending evaluations the broker dropped.
#[derive(Debug)]
pub struct JobEvalAcked {
    pub namespace: String,
    pub job_id: String,
    pub acked_modify_index: u64,
    pub cancelable: Vec<Arc<Evaluation>>,
}

impl Message for JobEvalAcked {
    type Result = ();
}

/// The broker actor. Create it with [`EvalBroker::new`], start it, then
/// send `SetEnabled(true)` when this server leads.
pub struct EvalBroker {
    config: BrokerConfig,
    sink: Recipient<EvalWrites>,
    ack_listener: Option<Recipient<JobEvalAcked>>,
    enabled: bool,
    paused: bool,
    /// Bumped by every flush so replies to writes sent before it are ignored.
    epoch: u64,
    seq: u64,
    /// Every evaluation the broker holds, with its delivery count.
    tracked: HashMap<EvalId, u32>,
    jobs: HashMap<JobKey, JobSlot>,
    ready: HashMap<JobType, ReadyQueue>,
    /// Each evaluation's expected scheduling work, for the ready queues' fair share.
    cost: EvalCost,
    unacked: HashMap<EvalId, Unacked>,
    delayed: HashMap<EvalId, Delayed>,
    failed: HashMap<EvalId, Failed>,
    /// Evaluations to enqueue again once the delivery (token) is acked.
    requeue: HashMap<EvalId, (Token, Evaluation)>,
    /// Recently finished evaluations and the ModifyIndex they finished at.
    /// Evaluations reach the broker from more than one path (the state
    /// change feed, its own follow-ups, a leader restore); an enqueue of a
    /// finished evaluation at the same or an older index is a late copy and
    /// is ignored, while a re-written one (reblocked: newer index) runs.
    finished: HashMap<EvalId, u64>,
    finished_order: VecDeque<EvalId>,
    /// Parked dequeues, oldest first.
    waiters: BTreeMap<u64, Waiter>,
    timers: BinaryHeap<TimerEntry>,
    armed: Option<(Instant, SpawnHandle)>,
}

impl Actor for EvalBroker {
    type Context = Context<Self>;
}

impl EvalBroker {
    /// A disabled broker persisting through `sink`; `ack_listener` (the
    /// `BlockedEvals` actor) hears of every ack and of the evaluations it
    /// made cancelable.
    pub fn new(
        config: BrokerConfig,
        sink: Recipient<EvalWrites>,
        ack_listener: Option<Recipient<JobEvalAcked>>,
    ) -> Self {
        EvalBroker {
            config,
            sink,
            ack_listener,
            enabled: false,
            paused: false,
            epoch: 0,
            seq: 0,
            tracked: HashMap::new(),
            jobs: HashMap::new(),
            ready: HashMap::new(),
            cost: EvalCost::uniform(),
            unacked: HashMap::new(),
            delayed: HashMap::new(),
            failed: HashMap::new(),
            requeue: HashMap::new(),
            finished: HashMap::new(),
            finished_order: VecDeque::new(),
            waiters: BTreeMap::new(),
            timers: BinaryHeap::new(),
            armed: None,
        }
    }

    /// Weigh evaluations by `cost` in the ready queues (see
    /// `ready_queue`); without it every evaluation costs the same.
    pub fn with_cost(mut self, cost: EvalCost) -> Self {
        self.cost = cost;
        self
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn enqueue(
        &mut self,
        eval: Evaluation,
        token: Option<Token>,
        ctx: &mut Context<Self>,
    ) -> Result<(), BrokerError> {
        if !self.enabled {
            return Err(BrokerError::Disabled);
        }
        if self
            .finished
            .get(&eval.id)
            .is_some_and(|at| eval.modify_index <= *at)
        {
            tracing::debug!(eval_id = %eval.id, "late copy of a finished evaluation ignored");
            return Ok(());
        }
        if self.tracked.contains_key(&eval.id) {
            let held = self.unacked.get(&eval.id).map(|unacked| unacked.token);
            if let (Some(token), Some(held)) = (token, held) {
                if token == held {
                    self.requeue.insert(eval.id, (token, eval));
                }
            }
            return Ok(());
        }
        let _span = eval_span(&eval).entered();
        self.tracked.insert(eval.id, 0);
        let eval = Arc::new(eval);
        match release_delay(&eval) {
            Some(delay) => {
                tracing::debug!(?delay, "evaluation delayed");
                self.delay(eval, delay, false, ctx);
            }
            None => self.route(eval, ctx),
        }
        Ok(())
    }

    /// Make `eval` ready if its job's slot is free (or already its own),
    /// otherwise queue it behind the slot's holder.
    fn route(&mut self, eval: Arc<Evaluation>, ctx: &mut Context<Self>) {
        let seq = self.next_seq();
        match self.jobs.get_mut(&eval.job_key()) {
            Some(slot) if slot.holder != eval.id => {
                slot.pending.push(PendingEntry { seq, eval });
            }
            Some(_) => self.push_ready(eval, ctx),
            None => {
                self.jobs.insert(
                    eval.job_key(),
                    JobSlot {
                        holder: eval.id,
                        pending: BinaryHeap::new(),
                    },
                );
                self.push_ready(eval, ctx);
            }
        }
    }

    fn push_ready(&mut self, eval: Arc<Evaluation>, ctx: &mut Context<Self>) {
        let seq = self.next_seq();
        let cost = self.cost.of(&eval);
        self.ready
            .entry(eval.eval_type.clone())
            .or_default()
            .push(eval, cost, seq);
        self.dispatch(ctx);
    }

    fn delay(
        &mut self,
        eval: Arc<Evaluation>,
        delay: Duration,
        holds_job_slot: bool,
        ctx: &mut Context<Self>,
    ) {
        let due = Instant::now() + delay;
        let eval_id = eval.id;
        self.delayed.insert(
            eval_id,
            Delayed {
                eval,
                due,
                holds_job_slot,
            },
        );
        self.add_timer(due, TimerEvent::Release { eval_id }, ctx);
    }

    /// Answer parked dequeues, oldest first, while there is work they take.
    fn dispatch(&mut self, ctx: &mut Context<Self>) {
        if self.paused || !self.enabled || self.waiters.is_empty() {
            return;
        }
        let waiter_ids: Vec<u64> = self.waiters.keys().copied().collect();
        for id in waiter_ids {
            let Some(waiter) = self.waiters.get(&id) else {
                continue;
            };
            if waiter.reply.is_closed() {
                self.waiters.remove(&id);
                continue;
            }
            let Some(scheduler) = self.pick_scheduler(&waiter.schedulers) else {
                continue;
            };
            let Some(waiter) = self.waiters.remove(&id) else {
                continue;
            };
            let Some(delivery) = self.take_ready(&scheduler, ctx) else {
                self.waiters.insert(id, waiter);
                continue;
            };
            if let Err(Ok(Some(delivery))) = waiter.reply.send(Ok(Some(delivery))) {
                // The requester left between the check and the send: undo.
                self.undeliver(delivery, ctx);
            }
        }
    }

    /// Among `schedulers` with ready work, the one whose head has the highest
    /// priority; ties are broken at random so no scheduler type starves.
    fn pick_scheduler(&self, schedulers: &[JobType]) -> Option<JobType> {
        let mut best: Vec<&JobType> = Vec::new();
        let mut best_priority = i32::MIN;
        for scheduler in schedulers {
            let Some(priority) = self
                .ready
                .get(scheduler)
                .and_then(ReadyQueue::head_priority)
            else {
                continue;
            };
            if best.is_empty() || priority > best_priority {
                best.clear();
                best.push(scheduler);
                best_priority = priority;
            } else if priority == best_priority && !best.contains(&scheduler) {
                best.push(scheduler);
            }
        }
        match best.len() {
            0 => None,
            1 => Some(best[0].clone()),
            n => Some(best[rand::thread_rng().gen_range(0..n)].clone()),
        }
    }

    /// Deliver the head of `scheduler`'s ready queue, if it has one.
    fn take_ready(&mut self, scheduler: &JobType, ctx: &mut Context<Self>) -> Option<Delivery> {
        let eval = self.ready.get_mut(scheduler)?.pop()?;
        let token = new_id();
        let deadline = Instant::now() + self.config.nack_timeout;
        *self.tracked.entry(eval.id).or_insert(0) += 1;
        self.unacked.insert(
            eval.id,
            Unacked {
                eval: eval.clone(),
                token,
                nack_deadline: Some(deadline),
            },
        );
        self.add_timer(
            deadline,
            TimerEvent::NackTimeout {
                eval_id: eval.id,
                token,
            },
            ctx,
        );
        tracing::debug!(eval_id = %eval.id, job_id = %eval.job_id, "evaluation delivered");
        Some(Delivery {
            eval,
            token,
            wait_index: 0,
        })
    }

    /// Put back a delivery nobody received, as if it had never been made.
    fn undeliver(&mut self, delivery: Delivery, ctx: &mut Context<Self>) {
        if self.unacked.remove(&delivery.eval.id).is_some() {
            if let Some(count) = self.tracked.get_mut(&delivery.eval.id) {
                *count = count.saturating_sub(1);
            }
            self.push_ready(delivery.eval, ctx);
        }
    }

    fn check_token(&self, eval_id: EvalId, token: Token) -> Result<&Unacked, BrokerError> {
        let unacked = self
            .unacked
            .get(&eval_id)
            .ok_or(BrokerError::NotOutstanding(eval_id))?;
        if unacked.token != token {
            return Err(BrokerError::TokenMismatch);
        }
        Ok(unacked)
    }

    fn ack(
        &mut self,
        eval_id: EvalId,
        token: Token,
        ctx: &mut Context<Self>,
    ) -> Result<(), BrokerError> {
        self.check_token(eval_id, token)?;
        let Some(unacked) = self.unacked.remove(&eval_id) else {
            return Err(BrokerError::NotOutstanding(eval_id));
        };
        let _span = eval_span(&unacked.eval).entered();
        tracing::debug!("evaluation acked");
        self.finish(&unacked.eval, true, ctx);
        if let Some((held, eval)) = self.requeue.remove(&eval_id) {
            if held == token {
                // An explicit re-run requested under this delivery's token,
                // not a late copy: it may run again at the same index.
                self.finished.remove(&eval_id);
                self.enqueue(eval, None, ctx)?;
            }
        }
        Ok(())
    }

    /// `eval` is done with: free its job's slot for the job's best pending
    /// evaluation, make the others cancelable, and tell the listener.
    /// `processed` is false for a failed evaluation: it reconciled nothing,
    /// so it must not supersede the job's blocked evaluation.
    fn finish(&mut self, eval: &Arc<Evaluation>, processed: bool, ctx: &mut Context<Self>) {
        self.tracked.remove(&eval.id);
        self.remember_finished(eval.id, eval.modify_index);
        let key = eval.job_key();
        let mut cancelable = Vec::new();
        let mut next = None;
        if let Some(mut slot) = self.jobs.remove(&key) {
            if slot.holder == eval.id {
                next = slot.pending.pop().map(|entry| entry.eval);
                cancelable = slot
                    .pending
                    .drain()
                    .map(|entry| entry.eval)
                    .collect::<Vec<_>>();
            } else {
                // Not this eval's slot (cannot happen while the invariants
                // hold); leave it as it was.
                self.jobs.insert(key.clone(), slot);
            }
        }
        for canceled in &cancelable {
            self.tracked.remove(&canceled.id);
        }
        if let Some(next) = next {
            self.jobs.insert(
                key.clone(),
                JobSlot {
                    holder: next.id,
                    pending: BinaryHeap::new(),
                },
            );
            self.push_ready(next, ctx);
        }
        if let Some(listener) = &self.ack_listener {
            listener.do_send(JobEvalAcked {
                namespace: key.0,
                job_id: key.1,
                acked_modify_index: if processed { eval.modify_index } else { 0 },
                cancelable,
            });
        }
    }

    fn nack(
        &mut self,
        eval_id: EvalId,
        token: Token,
        ctx: &mut Context<Self>,
    ) -> Result<(), BrokerError> {
        self.check_token(eval_id, token)?;
        let Some(unacked) = self.unacked.remove(&eval_id) else {
            return Err(BrokerError::NotOutstanding(eval_id));
        };
        self.requeue_nacked(unacked.eval, ctx);
        Ok(())
    }

    /// A nacked evaluation keeps its job's slot and comes back after the nack
    /// delay, or fails once it has used up its deliveries.
    fn requeue_nacked(&mut self, eval: Arc<Evaluation>, ctx: &mut Context<Self>) {
        let _span = eval_span(&eval).entered();
        self.requeue.remove(&eval.id);
        let deliveries = self.tracked.get(&eval.id).copied().unwrap_or(0);
        if deliveries >= self.config.delivery_limit {
            tracing::warn!(deliveries, "evaluation reached the delivery limit");
            self.fail(eval, ctx);
            return;
        }
        let delay = self.nack_delay(deliveries);
        tracing::debug!(deliveries, ?delay, "evaluation nacked");
        if delay.is_zero() {
            self.push_ready(eval, ctx);
        } else {
            self.delay(eval, delay, true, ctx);
        }
    }

    fn nack_delay(&self, deliveries: u32) -> Duration {
        match deliveries {
            0 => Duration::ZERO,
            1 => self.config.initial_nack_delay,
            n => self.config.subsequent_nack_delay * (n - 1),
        }
    }

    fn fail(&mut self, eval: Arc<Evaluation>, ctx: &mut Context<Self>) {
        let now = unix_nanos_now();
        let mut follow_up = eval.follow_up(TriggeredBy::FailedFollowUp, now);
        follow_up.wait = self.follow_up_wait();
        let eval_id = eval.id;
        self.failed.insert(eval_id, Failed { eval, follow_up });
        self.write_failed(eval_id, ctx);
    }

    fn follow_up_wait(&self) -> Duration {
        let range = self.config.failed_follow_up_delay_range;
        let jitter = if range.is_zero() {
            Duration::ZERO
        } else {
            range.mul_f64(rand::thread_rng().gen_range(0.0..1.0))
        };
        self.config.failed_follow_up_base_delay + jitter
    }

    /// Persist a failed evaluation and its follow-up; once durable, release
    /// the job's slot and enqueue the follow-up. Retried until it succeeds
    /// or leadership is lost.
    fn write_failed(&mut self, eval_id: EvalId, ctx: &mut Context<Self>) {
        let Some(failed) = self.failed.get(&eval_id) else {
            return;
        };
        let mut failed_eval = (*failed.eval).clone();
        failed_eval.status = EvalStatus::Failed;
        failed_eval.status_description = format!(
            "evaluation reached delivery limit ({})",
            self.config.delivery_limit
        );
        failed_eval.next_eval = Some(failed.follow_up.id);
        failed_eval.modify_time = unix_nanos_now();
        let writes = EvalWrites {
            evals: vec![failed_eval, failed.follow_up.clone()],
        };
        let epoch = self.epoch;
        ctx.spawn(
            self.sink
                .send(writes)
                .into_actor(self)
                .map(move |result, broker, ctx| {
                    if broker.epoch != epoch {
                        return;
                    }
                    match result {
                        Ok(Ok(index)) => broker.failed_written(eval_id, index, ctx),
                        Ok(Err(err)) => broker.retry_failed_write(eval_id, &err.to_string(), ctx),
                        Err(err) => broker.retry_failed_write(eval_id, &err.to_string(), ctx),
                    }
                }),
        );
    }

    fn retry_failed_write(&mut self, eval_id: EvalId, error: &str, ctx: &mut Context<Self>) {
        tracing::error!(%eval_id, error, "failed to write a failed evaluation; retrying");
        let epoch = self.epoch;
        ctx.run_later(self.config.sink_retry_interval, move |broker, ctx| {
            if broker.epoch == epoch {
                broker.write_failed(eval_id, ctx);
            }
        });
    }

    fn failed_written(&mut self, eval_id: EvalId, index: u64, ctx: &mut Context<Self>) {
        let Some(failed) = self.failed.remove(&eval_id) else {
            return;
        };
        let mut follow_up = failed.follow_up;
        if follow_up.create_index == 0 {
            follow_up.create_index = index;
        }
        if follow_up.modify_index == 0 {
            follow_up.modify_index = index;
        }
        self.finish(&failed.eval, false, ctx);
        if let Err(err) = self.enqueue(follow_up, None, ctx) {
            tracing::warn!(%eval_id, %err, "follow-up evaluation not enqueued");
        }
    }

    fn outstanding_reset(
        &mut self,
        eval_id: EvalId,
        token: Token,
        ctx: &mut Context<Self>,
    ) -> Result<(), BrokerError> {
        self.check_token(eval_id, token)?;
        let deadline = Instant::now() + self.config.nack_timeout;
        if let Some(unacked) = self.unacked.get_mut(&eval_id) {
            if unacked.nack_deadline.is_none() {
                return Ok(());
            }
            unacked.nack_deadline = Some(deadline);
        }
        self.add_timer(deadline, TimerEvent::NackTimeout { eval_id, token }, ctx);
        Ok(())
    }

    fn remember_finished(&mut self, id: EvalId, modify_index: u64) {
        if self.finished.insert(id, modify_index).is_none() {
            self.finished_order.push_back(id);
        }
        while self.finished_order.len() > FINISHED_MEMORY {
            if let Some(old) = self.finished_order.pop_front() {
                self.finished.remove(&old);
            }
        }
    }

    fn flush(&mut self) {
        self.epoch += 1;
        self.finished.clear();
        self.finished_order.clear();
        for (_, waiter) in std::mem::take(&mut self.waiters) {
            let _ = waiter.reply.send(Err(BrokerError::Disabled));
        }
        self.tracked.clear();
        self.jobs.clear();
        self.ready.clear();
        self.unacked.clear();
        self.delayed.clear();
        self.failed.clear();
        self.requeue.clear();
        self.timers.clear();
    }

    fn stats(&self) -> BrokerStats {
        let mut stats = BrokerStats::default();
        // Every scheduler that ever had a queue (queues are kept once
        // made), empty ones at 0: as Nomad's per-scheduler stats, which
        // exist from the first evaluation on.
        for (scheduler, queue) in &self.ready {
            stats.total_ready += queue.len();
            stats
                .by_scheduler
                .entry(scheduler.clone())
                .or_default()
                .ready += queue.len();
        }
        for unacked in self.unacked.values() {
            stats.total_unacked += 1;
            stats
                .by_scheduler
                .entry(unacked.eval.eval_type.clone())
                .or_default()
                .unacked += 1;
        }
        stats.total_blocked = self.jobs.values().map(|slot| slot.pending.len()).sum();
        stats.total_delayed = self.delayed.len();
        stats.total_failed = self.failed.len();
        stats
    }

    fn add_timer(&mut self, at: Instant, event: TimerEvent, ctx: &mut Context<Self>) {
        let seq = self.next_seq();
        self.timers.push(TimerEntry { at, seq, event });
        self.arm(ctx);
    }

    /// Keep exactly one actix timer, set for the earliest deadline.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        let Some(next) = self.timers.peek().map(|entry| entry.at) else {
            if let Some((_, handle)) = self.armed.take() {
                ctx.cancel_future(handle);
            }
            return;
        };
        if let Some((armed_at, handle)) = self.armed {
            if armed_at <= next {
                return;
            }
            ctx.cancel_future(handle);
        }
        let wait = next.saturating_duration_since(Instant::now());
        let handle = ctx.run_later(wait, |broker, ctx| {
            broker.armed = None;
            broker.fire_timers(ctx);
        });
        self.armed = Some((next, handle));
    }

    fn fire_timers(&mut self, ctx: &mut Context<Self>) {
        // Timers may wake a hair before the deadline they were set for.
        let now = Instant::now() + Duration::from_millis(1);
        while self.timers.peek().is_some_and(|entry| entry.at <= now) {
            if let Some(entry) = self.timers.pop() {
                self.on_timer(entry, ctx);
            }
        }
        self.arm(ctx);
    }

    fn on_timer(&mut self, entry: TimerEntry, ctx: &mut Context<Self>) {
        match entry.event {
            TimerEvent::NackTimeout { eval_id, token } => {
                let current = self.unacked.get(&eval_id).is_some_and(|unacked| {
                    unacked.token == token && unacked.nack_deadline == Some(entry.at)
                });
                if !current {
                    return;
                }
                if let Some(unacked) = self.unacked.remove(&eval_id) {
                    tracing::warn!(%eval_id, job_id = %unacked.eval.job_id, "nack timeout reached");
                    self.requeue_nacked(unacked.eval, ctx);
                }
            }
            TimerEvent::Release { eval_id } => {
                let due = self
                    .delayed
                    .get(&eval_id)
                    .is_some_and(|d| d.due == entry.at);
                if !due {
                    return;
                }
                if let Some(delayed) = self.delayed.remove(&eval_id) {
                    if delayed.holds_job_slot {
                        self.push_ready(delayed.eval, ctx);
                    } else {
                        self.route(delayed.eval, ctx);
                    }
                }
            }
            TimerEvent::DequeueTimeout { waiter } => {
                if let Some(waiter) = self.waiters.remove(&waiter) {
                    let _ = waiter.reply.send(Ok(None));
                }
            }
        }
    }
}

/// How long an evaluation must wait before it may run, if at all.
fn release_delay(eval: &Evaluation) -> Option<Duration> {
    if !eval.wait.is_zero() {
        return Some(eval.wait);
    }
    let wait_until = eval.wait_until?;
    let remaining = wait_until.saturating_sub(unix_nanos_now());
    (remaining > 0).then(|| Duration::from_nanos(remaining as u64))
}

/// Wall-clock time as Unix nanoseconds (the unit of `WaitUntil`).
fn unix_nanos_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| i64::try_from(since.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn eval_span(eval: &Evaluation) -> tracing::Span {
    tracing::debug_span!(
        "eval",
        eval_id = %eval.id,
        job_id = %eval.job_id,
        scheduler = eval.eval_type.as_str()
    )
}

impl Handler<Enqueue> for EvalBroker {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, msg: Enqueue, ctx: &mut Context<Self>) -> Self::Result {
        self.enqueue(msg.eval, msg.token, ctx)
    }
}

impl Handler<EnqueueAll> for EvalBroker {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, msg: EnqueueAll, ctx: &mut Context<Self>) -> Self::Result {
        msg.evals
            .into_iter()
            .try_for_each(|eval| self.enqueue(eval, None, ctx))
    }
}

impl Handler<Dequeue> for EvalBroker {
    type Result = ResponseFuture<Result<Option<Delivery>, BrokerError>>;

    fn handle(&mut self, msg: Dequeue, ctx: &mut Context<Self>) -> Self::Result {
        if !self.enabled {
            return Box::pin(std::future::ready(Err(BrokerError::Disabled)));
        }
        if !self.paused {
            let scheduler = self.pick_scheduler(&msg.schedulers);
            if let Some(delivery) = scheduler.and_then(|s| self.take_ready(&s, ctx)) {
                return Box::pin(std::future::ready(Ok(Some(delivery))));
            }
        }
        let (reply, answer) = oneshot::channel();
        let waiter = self.next_seq();
        self.waiters.insert(
            waiter,
            Waiter {
                schedulers: msg.schedulers,
                reply,
            },
        );
        if !msg.timeout.is_zero() {
            let at = Instant::now() + msg.timeout;
            self.add_timer(at, TimerEvent::DequeueTimeout { waiter }, ctx);
        }
        Box::pin(async move { answer.await.unwrap_or(Err(BrokerError::Disabled)) })
    }
}

impl Handler<Ack> for EvalBroker {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, msg: Ack, ctx: &mut Context<Self>) -> Self::Result {
        self.ack(msg.eval_id, msg.token, ctx)
    }
}

impl Handler<Nack> for EvalBroker {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, msg: Nack, ctx: &mut Context<Self>) -> Self::Result {
        self.nack(msg.eval_id, msg.token, ctx)
    }
}

impl Handler<OutstandingReset> for EvalBroker {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, msg: OutstandingReset, ctx: &mut Context<Self>) -> Self::Result {
        self.outstanding_reset(msg.eval_id, msg.token, ctx)
    }
}

impl Handler<PauseNackTimeout> for EvalBroker {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, msg: PauseNackTimeout, _ctx: &mut Context<Self>) -> Self::Result {
        self.check_token(msg.eval_id, msg.token)?;
        if let Some(unacked) = self.unacked.get_mut(&msg.eval_id) {
            unacked.nack_deadline = None;
        }
        Ok(())
    }
}

impl Handler<ResumeNackTimeout> for EvalBroker {
    type Result = Result<(), BrokerError>;

    fn handle(&mut self, msg: ResumeNackTimeout, ctx: &mut Context<Self>) -> Self::Result {
        self.check_token(msg.eval_id, msg.token)?;
        let deadline = Instant::now() + self.config.nack_timeout;
        if let Some(unacked) = self.unacked.get_mut(&msg.eval_id) {
            unacked.nack_deadline = Some(deadline);
        }
        let event = TimerEvent::NackTimeout {
            eval_id: msg.eval_id,
            token: msg.token,
        };
        self.add_timer(deadline, event, ctx);
        Ok(())
    }
}

impl Handler<Outstanding> for EvalBroker {
    type Result = Option<Token>;

    fn handle(&mut self, msg: Outstanding, _ctx: &mut Context<Self>) -> Self::Result {
        self.unacked.get(&msg.eval_id).map(|unacked| unacked.token)
    }
}

impl Handler<SetEnabled> for EvalBroker {
    type Result = ();

    fn handle(&mut self, msg: SetEnabled, ctx: &mut Context<Self>) {
        if !msg.0 {
            self.flush();
            self.arm(ctx);
        }
        self.enabled = msg.0;
    }
}

impl Handler<SetPaused> for EvalBroker {
    type Result = ();

    fn handle(&mut self, msg: SetPaused, ctx: &mut Context<Self>) {
        self.paused = msg.0;
        self.dispatch(ctx);
    }
}

impl Handler<Stats> for EvalBroker {
    type Result = MessageResult<Stats>;

    fn handle(&mut self, _msg: Stats, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.stats())
    }
}
