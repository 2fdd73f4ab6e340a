//! Blocked evaluations: evaluations that could not place everything for
//! lack of capacity, parked until capacity appears where they could use it.
//!
//! The tracker keeps at most one blocked evaluation per (namespace, job):
//! the newer one wins and the older is written `canceled`. Each evaluation
//! remembers the computed node classes the scheduler found eligible or
//! ineligible (`ClassEligibility`), or that it could not reason by class at
//! all (`EscapedComputedClass`). [`Unblock`] (a node registered or became
//! eligible, or capacity was freed, on one class) sends back to the broker
//! every evaluation that could use that class: escaped ones, ones that found
//! it eligible, and ones that never saw it; never the ones that found it
//! ineligible. System evaluations block per node (`NodeID` set) and are
//! released by [`UnblockNode`] for that node. Evaluations that ran out of
//! plan attempts are retried by a periodic [`UnblockFailed`].
//!
//! The tracker also reaps **cancelable** evaluations: when an evaluation of
//! a job is acked, the job's older pending evaluations (handed over by the
//! broker) and its older blocked evaluation are superseded. They are
//! written `canceled` in bounded batches, one batch per ack and one per
//! periodic sweep, so cancelation pace follows scheduling progress and a
//! quiet cluster still drains the backlog.

use crate::broker::{
    BrokerConfig, Enqueue, EvalBroker, EvalWrites, JobEvalAcked, JobKey, SetEnabled, Token,
};
use crate::ready_queue::EvalCost;
use actix::prelude::*;
use herder::structs::{EvalId, EvalStatus, Evaluation, NodeId, TriggeredBy};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Status description of an evaluation replaced by a newer blocked one.
fn duplicate_description(job_id: &str) -> String {
    format!("existing blocked evaluation exists for job {job_id:?}")
}

/// Status description of an evaluation superseded by an acked newer one.
pub const CANCELED_AFTER_NEWER_EVAL: &str = "canceled after more recent eval was processed";

/// Intervals and batch sizes of the tracker. The defaults are Nomad's.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockedEvalsConfig {
    /// How often evaluations that ran out of plan attempts are retried.
    pub unblock_failed_interval: Duration,
    /// How often the cancelable backlog is swept when no ack drives it.
    pub cancel_sweep_interval: Duration,
    /// Evaluations canceled per write.
    pub cancel_batch_size: usize,
}

impl Default for BlockedEvalsConfig {
    fn default() -> Self {
        BlockedEvalsConfig {
            unblock_failed_interval: Duration::from_secs(60),
            cancel_sweep_interval: Duration::from_secs(5),
            cancel_batch_size: 728,
        }
    }
}

/// Track a blocked evaluation (the scheduler wrote it with status `blocked`).
#[derive(Debug)]
pub struct Block {
    pub eval: Evaluation,
}

impl Message for Block {
    type Result = ();
}

/// A worker re-blocked the evaluation it is processing (it was unblocked,
/// dequeued, and still cannot place): track it again under its delivery
/// `token`, so an unblock before the worker acks reaches the broker once
/// that delivery is acked.
#[derive(Debug)]
pub struct Reblock {
    pub eval: Evaluation,
    pub token: Token,
}

impl Message for Reblock {
    type Result = ();
}

/// Capacity appeared on nodes of `computed_class` at state `index`.
#[derive(Debug)]
pub struct Unblock {
    pub computed_class: String,
    pub index: u64,
}

impl Message for Unblock {
    type Result = ();
}

/// Capacity changed on one node (allocations stopped or finished, the node
/// registered or became eligible): release the system evaluations blocked
/// on that node.
#[derive(Debug)]
pub struct UnblockNode {
    pub node_id: NodeId,
}

impl Message for UnblockNode {
    type Result = ();
}

/// Retry the evaluations that ran out of plan attempts (also run
/// periodically by the tracker itself).
#[derive(Debug)]
pub struct UnblockFailed;

impl Message for UnblockFailed {
    type Result = ();
}

/// Stop tracking a job's blocked evaluation (the job was stopped, or an
/// evaluation placed everything); nothing is written.
#[derive(Debug)]
pub struct Untrack {
    pub namespace: String,
    pub job_id: String,
}

impl Message for Untrack {
    type Result = ();
}

/// Ask for the tracker's counters.
#[derive(Debug)]
pub struct GetBlockedStats;

impl Message for GetBlockedStats {
    type Result = BlockedStats;
}

/// Counters for metrics and the operator API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockedStats {
    pub total_blocked: usize,
    /// Of the blocked, those that escaped class tracking.
    pub total_escaped: usize,
    /// Superseded evaluations waiting to be written `canceled`.
    pub total_cancelable: usize,
}

/// A tracked blocked evaluation and, when a worker re-blocked the
/// evaluation it is still processing, that delivery's token.
struct Tracked {
    eval: Evaluation,
    token: Option<Token>,
}

/// The blocked-evaluation tracker actor. Like the broker it runs on the
/// leader only: send [`SetEnabled`] on leadership changes.
pub struct BlockedEvals {
    config: BlockedEvalsConfig,
    broker: Recipient<Enqueue>,
    sink: Recipient<EvalWrites>,
    enabled: bool,
    /// Bumped by every flush so write failures from before it are dropped.
    epoch: u64,
    evals: HashMap<EvalId, Tracked>,
    /// The blocked evaluation of each job: one per job, except system jobs,
    /// which block per node (keyed by the eval's `NodeID`).
    by_job: HashMap<JobKey, HashMap<Option<NodeId>, EvalId>>,
    /// The last unblock index per computed class: an evaluation blocked on
    /// a snapshot older than that missed the unblock and runs at once.
    unblock_indexes: HashMap<String, u64>,
    cancelable: VecDeque<Evaluation>,
}

impl Actor for BlockedEvals {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // A zero period would make the interval timer panic.
        let floor = Duration::from_millis(1);
        ctx.run_interval(
            self.config.unblock_failed_interval.max(floor),
            |tracker, _| {
                tracker.unblock_failed();
            },
        );
        ctx.run_interval(
            self.config.cancel_sweep_interval.max(floor),
            |tracker, ctx| {
                tracker.reap_cancelable_batch(ctx);
            },
        );
    }
}

impl BlockedEvals {
    /// A disabled tracker that re-enqueues into `broker` and persists
    /// cancelations through `sink`.
    pub fn new(
        config: BlockedEvalsConfig,
        broker: Recipient<Enqueue>,
        sink: Recipient<EvalWrites>,
    ) -> Self {
        BlockedEvals {
            config,
            broker,
            sink,
            enabled: false,
            epoch: 0,
            evals: HashMap::new(),
            by_job: HashMap::new(),
            unblock_indexes: HashMap::new(),
            cancelable: VecDeque::new(),
        }
    }

    fn block(&mut self, eval: Evaluation, token: Option<Token>, ctx: &mut Context<Self>) {
        if !self.enabled || self.evals.contains_key(&eval.id) {
            return;
        }
        let _span =
            tracing::debug_span!("eval", eval_id = %eval.id, job_id = %eval.job_id).entered();
        let existing = self
            .by_job
            .get(&eval.job_key())
            .and_then(|slots| slots.get(&eval.node_id))
            .copied();
        if let Some(existing_id) = existing {
            let existing_index = self
                .evals
                .get(&existing_id)
                .map_or(0, |tracked| tracked.eval.modify_index);
            if existing_index > eval.modify_index {
                tracing::debug!("a newer blocked evaluation exists; canceling this one");
                self.write_duplicate(eval, ctx);
                return;
            }
            if let Some(replaced) = self.untrack_eval(existing_id) {
                tracing::debug!(replaced = %replaced.eval.id, "canceling the older blocked evaluation");
                self.write_duplicate(replaced.eval, ctx);
            }
        }
        if self.missed_unblock(&eval) {
            tracing::debug!("capacity appeared since the evaluation's snapshot; enqueueing");
            self.broker.do_send(Enqueue { eval, token });
            return;
        }
        self.by_job
            .entry(eval.job_key())
            .or_default()
            .insert(eval.node_id, eval.id);
        self.evals.insert(eval.id, Tracked { eval, token });
    }

    /// Remove one evaluation from every index.
    fn untrack_eval(&mut self, id: EvalId) -> Option<Tracked> {
        let tracked = self.evals.remove(&id)?;
        let key = tracked.eval.job_key();
        if let Some(slots) = self.by_job.get_mut(&key) {
            slots.remove(&tracked.eval.node_id);
            if slots.is_empty() {
                self.by_job.remove(&key);
            }
        }
        Some(tracked)
    }

    /// Whether a class this evaluation could use was unblocked after the
    /// snapshot the scheduler blocked it on. Evaluations blocked on one node
    /// wait for that node instead.
    fn missed_unblock(&self, eval: &Evaluation) -> bool {
        eval.node_id.is_none()
            && self
                .unblock_indexes
                .iter()
                .any(|(class, &index)| index > eval.snapshot_index && could_use(eval, class))
    }

    fn unblock(&mut self, computed_class: String, index: u64) {
        if !self.enabled {
            return;
        }
        let last = self
            .unblock_indexes
            .entry(computed_class.clone())
            .or_insert(0);
        *last = (*last).max(index);
        let ids = self.select(|eval| eval.node_id.is_none() && could_use(eval, &computed_class));
        tracing::debug!(computed_class, index, unblocked = ids.len(), "unblock");
        self.release(ids);
    }

    fn unblock_node(&mut self, node_id: NodeId) {
        if !self.enabled {
            return;
        }
        let ids = self.select(|eval| eval.node_id == Some(node_id));
        tracing::debug!(%node_id, unblocked = ids.len(), "unblock node");
        self.release(ids);
    }

    fn unblock_failed(&mut self) {
        if !self.enabled {
            return;
        }
        let ids = self.select(|eval| eval.triggered_by == TriggeredBy::MaxPlanAttempts);
        self.release(ids);
    }

    fn select(&self, wanted: impl Fn(&Evaluation) -> bool) -> Vec<EvalId> {
        self.evals
            .values()
            .filter(|tracked| wanted(&tracked.eval))
            .map(|tracked| tracked.eval.id)
            .collect()
    }

    /// Stop tracking `ids` and hand them back to the broker.
    fn release(&mut self, ids: Vec<EvalId>) {
        for id in ids {
            if let Some(Tracked { eval, token }) = self.untrack_eval(id) {
                self.broker.do_send(Enqueue { eval, token });
            }
        }
    }

    fn job_eval_acked(&mut self, msg: JobEvalAcked, ctx: &mut Context<Self>) {
        if !self.enabled {
            return;
        }
        self.cancelable
            .extend(msg.cancelable.into_iter().map(Arc::unwrap_or_clone));
        let key = (msg.namespace, msg.job_id);
        let superseded: Vec<EvalId> = self
            .by_job
            .get(&key)
            .into_iter()
            .flat_map(|slots| slots.values())
            .filter(|id| {
                self.evals
                    .get(id)
                    .is_some_and(|tracked| tracked.eval.modify_index < msg.acked_modify_index)
            })
            .copied()
            .collect();
        for id in superseded {
            if let Some(tracked) = self.untrack_eval(id) {
                self.cancelable.push_back(tracked.eval);
            }
        }
        self.reap_cancelable_batch(ctx);
    }

    /// Write one batch of cancelable evaluations as `canceled`; on failure
    /// they go back to the front of the backlog for the next attempt.
    fn reap_cancelable_batch(&mut self, ctx: &mut Context<Self>) {
        if !self.enabled || self.cancelable.is_empty() {
            return;
        }
        let take = self
            .config
            .cancel_batch_size
            .max(1)
            .min(self.cancelable.len());
        let batch: Vec<Evaluation> = self.cancelable.drain(..take).collect();
        let writes = batch
            .iter()
            .map(|eval| canceled(eval, CANCELED_AFTER_NEWER_EVAL.to_string()))
            .collect();
        let epoch = self.epoch;
        ctx.spawn(
            self.sink
                .send(EvalWrites { evals: writes })
                .into_actor(self)
                .map(move |result, tracker, _| {
                    let error = match result {
                        Ok(Ok(_)) => return,
                        Ok(Err(err)) => err.to_string(),
                        Err(err) => err.to_string(),
                    };
                    tracing::error!(error, count = batch.len(), "failed to cancel evaluations");
                    if tracker.epoch == epoch {
                        for eval in batch.into_iter().rev() {
                            tracker.cancelable.push_front(eval);
                        }
                    }
                }),
        );
    }

    fn write_duplicate(&mut self, eval: Evaluation, ctx: &mut Context<Self>) {
        let description = duplicate_description(&eval.job_id);
        let writes = EvalWrites {
            evals: vec![canceled(&eval, description)],
        };
        ctx.spawn(
            self.sink
                .send(writes)
                .into_actor(self)
                .map(move |result, _, _| {
                    let error = match result {
                        Ok(Ok(_)) => return,
                        Ok(Err(err)) => err.to_string(),
                        Err(err) => err.to_string(),
                    };
                    tracing::error!(eval_id = %eval.id, error, "failed to cancel a duplicate blocked evaluation");
                }),
        );
    }

    fn flush(&mut self) {
        self.epoch += 1;
        self.evals.clear();
        self.by_job.clear();
        self.unblock_indexes.clear();
        self.cancelable.clear();
    }

    fn stats(&self) -> BlockedStats {
        BlockedStats {
            total_blocked: self.evals.len(),
            total_escaped: self
                .evals
                .values()
                .filter(|tracked| tracked.eval.escaped_computed_class)
                .count(),
            total_cancelable: self.cancelable.len(),
        }
    }
}

/// Whether capacity on `class` could help `eval`: it escaped class
/// tracking, found the class eligible, or never saw the class.
fn could_use(eval: &Evaluation, class: &str) -> bool {
    eval.escaped_computed_class || eval.class_eligibility.get(class) != Some(&false)
}

fn canceled(eval: &Evaluation, description: String) -> Evaluation {
    let mut canceled = eval.clone();
    canceled.status = EvalStatus::Canceled;
    canceled.status_description = description;
    canceled.modify_time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| i64::try_from(since.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    canceled
}

impl Handler<Block> for BlockedEvals {
    type Result = ();

    fn handle(&mut self, msg: Block, ctx: &mut Context<Self>) {
        self.block(msg.eval, None, ctx);
    }
}

impl Handler<Reblock> for BlockedEvals {
    type Result = ();

    fn handle(&mut self, msg: Reblock, ctx: &mut Context<Self>) {
        self.block(msg.eval, Some(msg.token), ctx);
    }
}

impl Handler<UnblockNode> for BlockedEvals {
    type Result = ();

    fn handle(&mut self, msg: UnblockNode, _ctx: &mut Context<Self>) {
        self.unblock_node(msg.node_id);
    }
}

impl Handler<Unblock> for BlockedEvals {
    type Result = ();

    fn handle(&mut self, msg: Unblock, _ctx: &mut Context<Self>) {
        self.unblock(msg.computed_class, msg.index);
    }
}

impl Handler<UnblockFailed> for BlockedEvals {
    type Result = ();

    fn handle(&mut self, _msg: UnblockFailed, _ctx: &mut Context<Self>) {
        self.unblock_failed();
    }
}

impl Handler<Untrack> for BlockedEvals {
    type Result = ();

    fn handle(&mut self, msg: Untrack, _ctx: &mut Context<Self>) {
        let key = (msg.namespace, msg.job_id);
        for id in self
            .by_job
            .remove(&key)
            .into_iter()
            .flat_map(|slots| slots.into_values())
        {
            self.evals.remove(&id);
        }
    }
}

impl Handler<JobEvalAcked> for BlockedEvals {
    type Result = ();

    fn handle(&mut self, msg: JobEvalAcked, ctx: &mut Context<Self>) {
        self.job_eval_acked(msg, ctx);
    }
}

impl Handler<SetEnabled> for BlockedEvals {
    type Result = ();

    fn handle(&mut self, msg: SetEnabled, _ctx: &mut Context<Self>) {
        if !msg.0 {
            self.flush();
        }
        self.enabled = msg.0;
    }
}

impl Handler<GetBlockedStats> for BlockedEvals {
    type Result = MessageResult<GetBlockedStats>;

    fn handle(&mut self, _msg: GetBlockedStats, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.stats())
    }
}

/// Start a broker and a `BlockedEvals` tracker wired to each other (acks
/// flow to the tracker, unblocked evaluations back to the broker), both
/// persisting through `sink`. Both start disabled: send `SetEnabled(true)`
/// to each on gaining leadership.
pub fn start_with_blocked_evals(
    config: BrokerConfig,
    blocked_config: BlockedEvalsConfig,
    sink: Recipient<EvalWrites>,
    cost: EvalCost,
) -> (Addr<EvalBroker>, Addr<BlockedEvals>) {
    // The broker's mailbox exists before the broker, so the tracker can
    // hold its address and the broker the tracker's.
    let broker_ctx = Context::<EvalBroker>::new();
    let tracker = BlockedEvals::new(
        blocked_config,
        broker_ctx.address().recipient(),
        sink.clone(),
    )
    .start();
    let broker = broker_ctx
        .run(EvalBroker::new(config, sink, Some(tracker.clone().recipient())).with_cost(cost));
    (broker, tracker)
}
