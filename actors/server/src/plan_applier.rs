//! The PlanApplier actor: the plan queue and the only path by which a
//! scheduler's decisions reach the state.
//!
//! Plans wait in a queue ordered by priority, first come first served
//! within a priority. Each is checked against the newest state
//! (`herder::plan_eval`) and what fits is committed. Writes overlap: the
//! store tells the applier the state a write makes as soon as it has
//! applied it in memory (`StateStore::submit_staged_as_leader`), before
//! encoding and flushing it; the next plan is checked against that state,
//! and its write started, while the store encodes and flushes the one
//! before. So the store applies plan N+1 while it flushes plan N, and the
//! applier checks N+1 while the store encodes N. At most one write is
//! waiting to be applied; workers schedule against the newest applied
//! state plus that write's effect, taken from its own check
//! ([`InFlightView`]). A write that fails to flush fails every write after
//! it (the store refuses writes from then on), so nothing checked against
//! an unflushed state lands without it. A replica has no early state:
//! there each write is awaited until committed, one at a time, as Nomad's
//! plan applier does.
//!
//! A plan committed whole is answered when its write starts, not when it
//! ends (see [`PlanAnswer`]): its submitter learns nothing more from the
//! write's end but the index, and waited a third of its time for it.

use crate::broker::Outstanding;
use actix::prelude::*;
use futures::channel::oneshot;
use herder::plan_eval::judge_plan;
use herder::state::{Command, PlanResults, StagedWrite, StateSnapshot, StateStore, StoreError};
use herder::structs::fit::NodeAllocUsage;
use herder::structs::{Evaluation, NodeId, Plan, PlanResult, TriggeredBy};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The state as it will be once the plans being written are durable, for
/// workers to schedule against (see [`PlanApplier::in_flight_view`]).
///
/// With two workers scheduling at once under binpack, both were drawn to
/// the same part-filled nodes: the second plan found them full of the
/// first's placements and was partly refused (30-40% of plans at cluster
/// scale), each refusal costing a refresh, a re-plan and another write.
/// A worker that starts while a plan is in flight sees its placements in
/// the nodes' usage and goes elsewhere. Nothing trusts this view: the
/// applier still checks every plan against the state, so a plan built on
/// it is at worst partly refused, as before. A std `Mutex`: it guards one
/// `Arc` swap or clone, never held across an await.
#[derive(Clone, Default)]
pub struct InFlightView(Arc<Mutex<Option<StateSnapshot>>>);

impl InFlightView {
    /// The view, when a plan is in flight.
    pub fn get(&self) -> Option<StateSnapshot> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, view: Option<StateSnapshot>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = view;
    }
}

/// Submit a plan; answered once it is decided and, unless it was
/// committed whole, durable (see [`PlanAnswer`]).
#[derive(Message)]
#[rtype(result = "Result<PlanAnswer, PlanApplyError>")]
pub struct SubmitPlan(pub Arc<Plan>);

/// The outcome of a plan's write: the index it was committed at, or why
/// it failed.
pub type PlanWrite = oneshot::Receiver<Result<u64, String>>;

/// The answer to a submitted plan.
///
/// Nomad answers a worker once the plan is applied. Here a plan that fits
/// whole is answered as soon as it is checked and its write has started:
/// the worker needs no state that shows it (its next evaluation is another
/// job's, scheduled against the in-flight view, which does), only the
/// assurance that the write will land, which `write` gives later. The
/// worker acknowledges the evaluation only once that write and the
/// evaluation's own are durable, so nothing is acknowledged sooner than
/// before. A partial plan is answered after its write, with `write`
/// `None`: its submitter must refresh to a state that holds it.
///
/// `result` is the verdict without the committed entries (which nodes
/// were rejected, the refresh index): only the store's write carries a
/// copy of those, and the submitter, which holds the plan, fills them in
/// with `PlanResult::take_committed`.
#[derive(Debug)]
pub struct PlanAnswer {
    /// `alloc_index` is 0 while the write is in flight (`write` has it).
    pub result: PlanResult,
    pub write: Option<PlanWrite>,
}

/// Leadership: a disabled queue refuses plans ("plan queue is disabled"),
/// which workers treat as transient and retry.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetEnabled(pub bool);

/// Counters for metrics and the agent's status.
#[derive(Message)]
#[rtype(result = "PlanQueueStats")]
pub struct GetStats;

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PlanQueueStats {
    pub depth: usize,
    pub applied: u64,
    pub partial: u64,
    pub rejected_nodes: u64,
    /// Placements refused with their nodes: scheduling work done again.
    pub refused_placements: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanApplyError {
    #[error("plan queue is disabled")]
    Disabled,
    #[error("plan for evaluation {0} carries a token that is no longer outstanding")]
    StaleToken(herder::structs::EvalId),
    #[error("state store: {0}")]
    Store(#[from] StoreError),
    #[error("plan applier stopped")]
    Stopped,
    /// The leader's plan queue refused a follower's plan (its message).
    #[error("the leader's plan queue: {0}")]
    Remote(String),
}

impl PlanApplyError {
    /// Errors a worker should retry after a backoff rather than nack on.
    pub fn is_transient(&self) -> bool {
        matches!(self, PlanApplyError::Disabled)
    }
}

type Reply = oneshot::Sender<Result<PlanAnswer, PlanApplyError>>;

struct Queued {
    /// Shared with the submitter, which keeps it to send again if the
    /// queue refuses it for now: a plan of a thousand placements is not
    /// copied to be submitted.
    plan: Arc<Plan>,
    seq: u64,
    /// Taken when the plan is answered ahead of its write.
    reply: Option<Reply>,
    enqueued: Instant,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    /// Higher priority first; within a priority, the older plan first.
    fn cmp(&self, other: &Self) -> Ordering {
        self.plan
            .priority
            .cmp(&other.plan.priority)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// A plan that has been checked, on its way to its write.
struct Verified {
    command: Command,
    answer: Answer,
    /// The state it was checked against, and what the check found each
    /// node it places on would hold there: the workers' view is that state
    /// with these put in, not worked out a second time.
    judged_on: StateSnapshot,
    usage: Vec<(NodeId, Arc<NodeAllocUsage>)>,
}

/// What the submitter of a verified plan is answered with once its write
/// is over. Apart from the command, which the write consumes: it holds
/// every placement, and copying it cost as much as the check.
struct Answer {
    queued: Queued,
    /// The verdict without the committed entries: the store's command has
    /// the one copy of those, and the submitter fills its answer in from
    /// its own plan (`PlanResult::take_committed`).
    result: PlanResult,
    /// Whether nothing of the plan is committed (no write is needed).
    no_op: bool,
    partial: bool,
    /// How many placements were refused with their nodes.
    refused: usize,
    /// Whether the store is sure to accept the write (see
    /// [`well_formed`]); only then may the plan be answered ahead of it.
    well_formed: bool,
    /// Where the write's outcome goes once the plan has been answered.
    outcome_to: Option<oneshot::Sender<Result<u64, String>>>,
}

impl Answer {
    /// Answers a plan committed whole now, its write's outcome to follow.
    fn answer_ahead_of_write(&mut self) {
        if self.partial || !self.well_formed {
            return;
        }
        let Some(reply) = self.queued.reply.take() else {
            return;
        };
        let (tx, rx) = oneshot::channel();
        let answer = PlanAnswer {
            result: std::mem::take(&mut self.result),
            write: Some(rx),
        };
        if reply.send(Ok(answer)).is_ok() {
            self.outcome_to = Some(tx);
        }
    }
}

pub struct PlanApplier {
    store: StateStore,
    /// The broker, asked whether a plan's evaluation is still outstanding
    /// under the plan's token; a plan from a worker whose delivery timed out
    /// (and was handed to another worker) must not be applied.
    broker: Option<Recipient<Outstanding>>,
    enabled: bool,
    queue: BinaryHeap<Queued>,
    seq: u64,
    /// While writes are in flight, the newest state the store has applied
    /// for this applier (ahead of its flush): plans are checked against
    /// it. `None`: against the store's published state, which then holds
    /// every write.
    newest_applied: Option<StateSnapshot>,
    /// That state plus the write not yet applied, shared with the workers.
    view: InFlightView,
    /// The write submitted but not yet applied in memory (its number):
    /// the next starts only once it is.
    unapplied: Option<u64>,
    /// Writes submitted and not yet durable (or failed).
    in_flight: usize,
    /// Numbers the writes, to tell which one is unapplied.
    writes: u64,
    /// Plans that committed nothing, each with the last write submitted
    /// before it was checked: answered once that write is durable.
    no_ops: Vec<(u64, Answer)>,
    stats: PlanQueueStats,
}

impl PlanApplier {
    pub fn new(store: StateStore, broker: Option<Recipient<Outstanding>>) -> Self {
        PlanApplier {
            store,
            broker,
            enabled: true,
            queue: BinaryHeap::new(),
            seq: 0,
            newest_applied: None,
            view: InFlightView::default(),
            unapplied: None,
            in_flight: 0,
            writes: 0,
            no_ops: Vec::new(),
            stats: PlanQueueStats::default(),
        }
    }

    /// What workers may schedule against while plans are being written:
    /// the newest state the store applied, plus the placements and stops
    /// of the write it has not applied yet.
    pub fn in_flight_view(&self) -> InFlightView {
        self.view.clone()
    }

    /// Moves work forward: while no write is waiting to be applied, check
    /// the next plan against the newest applied state and start its write.
    ///
    /// A plan is checked only once the write before it is applied, not
    /// while it is: checking ahead against a guess of that state (the
    /// state before it plus its usage) worked each plan's usage out twice
    /// more, for the guess and for the workers' view of the plan waiting,
    /// and cost more than the waiting it saved. The store applying a plan
    /// takes a few milliseconds, and it encodes and flushes that plan
    /// while the next is checked.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        while self.unapplied.is_none() {
            let Some(queued) = self.queue.pop() else {
                break;
            };
            let verified = self.verify(queued);
            self.start_write(verified, ctx);
        }
        self.stats.depth = self.queue.len();
        metrics::gauge!("herder.plan.queue_depth").set(self.stats.depth as f64);
    }

    fn verify(&self, queued: Queued) -> Verified {
        let snap = self
            .newest_applied
            .clone()
            .unwrap_or_else(|| self.store.snapshot());
        let verdict = judge_plan(&snap, &queued.plan);
        for (node, why) in &verdict.rejected {
            tracing::debug!(eval_id = %queued.plan.eval_id, node_id = %node, reason = %why, "plan node rejected");
        }
        let partial = !verdict.rejected.is_empty();
        let refused: usize = verdict
            .rejected
            .iter()
            .filter_map(|(node, _)| queued.plan.node_allocation.get(node))
            .map(Vec::len)
            .sum();
        // The one copy of what is committed, for the store's command.
        let mut committed = verdict.result.clone();
        committed.copy_committed(&queued.plan);
        let well_formed = well_formed(&committed);
        let no_op = committed.is_no_op();
        let evals = preemption_evals(&snap, &committed);
        // Nothing committed of an all-at-once plan: nor its deployment.
        let whole = !queued.plan.all_at_once || committed.full_commit(&queued.plan).0;
        let command = Command::ApplyPlanResults(PlanResults {
            eval_id: queued.plan.eval_id,
            job: queued.plan.job.clone(),
            node_update: committed.node_update,
            node_allocation: committed.node_allocation,
            node_preemptions: committed.node_preemptions,
            evals,
            updated_at: now_nanos(),
            deployment: whole.then(|| queued.plan.deployment.clone()).flatten(),
            deployment_updates: queued.plan.deployment_updates.clone(),
        });
        Verified {
            command,
            judged_on: snap,
            usage: verdict.usage,
            answer: Answer {
                queued,
                result: verdict.result,
                no_op,
                partial,
                refused,
                well_formed,
                outcome_to: None,
            },
        }
    }

    fn start_write(&mut self, v: Verified, ctx: &mut Context<Self>) {
        let Verified {
            command,
            mut answer,
            judged_on,
            usage,
        } = v;
        // Once its write starts, a plan is not checked again: our share of
        // it goes, so that the submitter's is the only one left and fills its
        // answer by moving the entries, not copying them.
        answer.queued.plan = Arc::default();
        if answer.no_op {
            // Nothing fit (or nothing was asked): no write. Its submitter
            // refreshes to the index it is answered with, which must show
            // what it lost to: the writes in flight, once durable.
            if self.in_flight == 0 {
                self.finish(answer, Ok(self.store.latest_index()));
            } else {
                self.no_ops.push((self.writes, answer));
            }
            return;
        }
        // Workers schedule against the state this plan was checked against
        // plus this plan, from the check's own numbers: a worker answered
        // ahead of the write goes on to its next evaluation, and without
        // this plan in view would be drawn to the same nodes.
        let mut view = judged_on;
        if let Command::ApplyPlanResults(plan) = &command {
            view.apply_judged_usage(plan, &usage);
        }
        self.view.set(Some(view));
        self.writes += 1;
        let write = self.writes;
        self.unapplied = Some(write);
        self.in_flight += 1;
        let StagedWrite { applied, durable } = self.store.submit_staged_as_leader(command);
        // Submitted first: whatever the worker writes next is ordered
        // after this plan.
        answer.answer_ahead_of_write();
        let started = Instant::now();
        applied
            .into_actor(self)
            .then(move |state, act, ctx| {
                // No early state (a refused command, a failed store, a
                // replica): the durable outcome stands in for it.
                if let Ok(state) = state {
                    act.applied(write, state);
                    act.pump(ctx);
                }
                durable.into_actor(act)
            })
            .map(move |res, act, ctx| {
                metrics::histogram!("herder.plan.apply_seconds")
                    .record(started.elapsed().as_secs_f64());
                let outcome = match res {
                    Ok(Ok(o)) => Ok(o.index),
                    Ok(Err(e)) => Err(PlanApplyError::Store(e)),
                    Err(_) => Err(PlanApplyError::Stopped),
                };
                act.durable(write, outcome.is_ok());
                act.finish(answer, outcome);
                act.release_no_ops(write);
                act.pump(ctx);
            })
            .spawn(ctx);
    }

    /// The store applied write `write` in memory: `state` holds it and
    /// everything queued before it, and becomes the base plans are
    /// checked against (no write after it has been submitted yet).
    fn applied(&mut self, write: u64, state: StateSnapshot) {
        if self.unapplied != Some(write) {
            return;
        }
        self.unapplied = None;
        self.view.set(Some(state.clone()));
        self.newest_applied = Some(state);
    }

    /// Write `write` is durable (`ok`) or failed. A failed write fails
    /// every write after it too, each answered as its outcome arrives; no
    /// plan has been checked against its effect but those.
    fn durable(&mut self, write: u64, ok: bool) {
        self.in_flight -= 1;
        if self.unapplied == Some(write) {
            self.unapplied = None;
        }
        if ok && (self.in_flight > 0 || self.unapplied.is_some()) {
            // The newest applied state is still ahead of the durable one.
            return;
        }
        // Nothing in flight, or a write failed: the published state holds
        // every write before it and whatever else landed since (nodes,
        // client updates); the next plan is checked against it, and
        // workers schedule against it.
        self.newest_applied = None;
        self.view.set(None);
    }

    /// Answers the plans that committed nothing while write `write` (or
    /// one before it) was the last in flight, and all of them once nothing
    /// is in flight: the durable state now holds everything they were
    /// checked against. (The second rule keeps a plan from waiting for
    /// good should two writes' outcomes be handled out of order.)
    fn release_no_ops(&mut self, write: u64) {
        let due = if self.in_flight == 0 {
            self.no_ops.len()
        } else {
            self.no_ops.iter().take_while(|(w, _)| *w <= write).count()
        };
        let index = self.store.latest_index();
        for (_, answer) in self.no_ops.drain(..due).collect::<Vec<_>>() {
            self.finish(answer, Ok(index));
        }
    }

    fn finish(&mut self, v: Answer, outcome: Result<u64, PlanApplyError>) {
        metrics::histogram!("herder.plan.wait_seconds")
            .record(v.queued.enqueued.elapsed().as_secs_f64());
        if outcome.is_ok() {
            self.count_applied(v.partial, v.result.rejected_nodes.len(), v.refused);
        }
        if let Some(to) = v.outcome_to {
            let _ = to.send(outcome.map_err(|e| e.to_string()));
            return;
        }
        let reply = outcome.map(|index| {
            let mut result = v.result;
            result.alloc_index = index;
            if v.partial {
                result.refresh_index = result.refresh_index.max(index);
            }
            PlanAnswer {
                result,
                write: None,
            }
        });
        if let Some(to) = v.queued.reply {
            let _ = to.send(reply);
        }
    }

    fn count_applied(&mut self, partial: bool, rejected_nodes: usize, refused: usize) {
        if partial {
            self.stats.partial += 1;
            self.stats.rejected_nodes += rejected_nodes as u64;
            self.stats.refused_placements += refused as u64;
        }
        self.stats.applied += 1;
        // Set here, not only by the once-a-second ServerMetrics, so a
        // reader never sees counts up to a second old.
        metrics::gauge!("herder.plan.applied").set(self.stats.applied as f64);
        metrics::gauge!("herder.plan.partial").set(self.stats.partial as f64);
        metrics::gauge!("herder.plan.rejected_nodes").set(self.stats.rejected_nodes as f64);
        metrics::gauge!("herder.plan.refused_placements").set(self.stats.refused_placements as f64);
    }
}

/// Whether the store will accept the plan's write whatever else it holds:
/// the only checks it makes of a plan are that each allocation is filed
/// under its own node and has an ID (the preemption evaluations the
/// applier adds always have one). A plan failing them is answered after
/// its write, which then fails.
fn well_formed(result: &PlanResult) -> bool {
    result
        .node_allocation
        .iter()
        .all(|(node, allocs)| allocs.iter().all(|a| a.node_id == *node && !a.id.is_nil()))
}

/// One evaluation per job whose allocations this plan preempts, so the
/// preempted work is placed again elsewhere.
fn preemption_evals(snap: &StateSnapshot, result: &PlanResult) -> Vec<Evaluation> {
    let mut by_job: HashMap<(String, String), Evaluation> = HashMap::new();
    let now = now_nanos();
    for stop in result.node_preemptions.values().flatten() {
        let Some(alloc) = snap.alloc(&stop.id) else {
            continue;
        };
        let Some(job) = snap.job(&alloc.namespace, &alloc.job_id) else {
            continue;
        };
        by_job
            .entry((job.namespace.clone(), job.id.clone()))
            .or_insert_with(|| Evaluation::for_job(job, TriggeredBy::Preemption, now));
    }
    by_job.into_values().collect()
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl Actor for PlanApplier {
    type Context = Context<Self>;
}

impl Handler<SubmitPlan> for PlanApplier {
    type Result = ResponseActFuture<Self, Result<PlanAnswer, PlanApplyError>>;

    fn handle(&mut self, msg: SubmitPlan, _ctx: &mut Context<Self>) -> Self::Result {
        if !self.enabled {
            return Box::pin(fut::ready(Err(PlanApplyError::Disabled)));
        }
        let plan = msg.0;
        let check = self.broker.clone().map(|b| {
            b.send(Outstanding {
                eval_id: plan.eval_id,
            })
        });
        let token = plan.eval_token.clone();
        Box::pin(
            async move {
                match check {
                    None => true,
                    Some(asked) => matches!(asked.await, Ok(Some(t)) if t.to_string() == token),
                }
            }
            .into_actor(self)
            .then(move |outstanding, act, ctx| {
                let eval_id = plan.eval_id;
                let rx = if !outstanding {
                    None
                } else if !act.enabled {
                    // Leadership was lost while the token was checked.
                    None
                } else {
                    Some(act.enqueue(plan, ctx))
                };
                let enabled = act.enabled;
                fut::wrap_future(async move {
                    match rx {
                        Some(rx) => rx.await.unwrap_or(Err(PlanApplyError::Stopped)),
                        None if !enabled => Err(PlanApplyError::Disabled),
                        None => Err(PlanApplyError::StaleToken(eval_id)),
                    }
                })
            }),
        )
    }
}

impl PlanApplier {
    fn enqueue(
        &mut self,
        plan: Arc<Plan>,
        ctx: &mut Context<Self>,
    ) -> oneshot::Receiver<Result<PlanAnswer, PlanApplyError>> {
        let (tx, rx) = oneshot::channel();
        self.seq += 1;
        self.queue.push(Queued {
            plan,
            seq: self.seq,
            reply: Some(tx),
            enqueued: Instant::now(),
        });
        self.pump(ctx);
        rx
    }
}

impl Handler<SetEnabled> for PlanApplier {
    type Result = ();

    fn handle(&mut self, msg: SetEnabled, _ctx: &mut Context<Self>) {
        self.enabled = msg.0;
        if !msg.0 {
            for reply in self.queue.drain().filter_map(|q| q.reply) {
                let _ = reply.send(Err(PlanApplyError::Disabled));
            }
        }
    }
}

impl Handler<GetStats> for PlanApplier {
    type Result = MessageResult<GetStats>;

    fn handle(&mut self, _msg: GetStats, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.stats.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(priority: i32, seq: u64) -> Queued {
        let (reply, _rx) = oneshot::channel();
        Queued {
            plan: Arc::new(Plan {
                priority,
                ..Default::default()
            }),
            seq,
            reply: Some(reply),
            enqueued: Instant::now(),
        }
    }

    #[test]
    fn queue_serves_higher_priority_first_then_oldest_first() {
        let mut q = BinaryHeap::new();
        for (p, s) in [(50, 1), (70, 2), (50, 3), (70, 4), (10, 5)] {
            q.push(queued(p, s));
        }
        let order: Vec<(i32, u64)> = std::iter::from_fn(|| q.pop())
            .map(|x| (x.plan.priority, x.seq))
            .collect();
        assert_eq!(order, vec![(70, 2), (70, 4), (50, 1), (50, 3), (10, 5)]);
    }
}
