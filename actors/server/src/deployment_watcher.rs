//! The DeploymentWatcher actor: moves every active deployment through its
//! statuses, as Nomad's leader deployment watcher does.
//!
//! The store keeps each deployment's counts true as clients report health;
//! this actor acts on them. It follows the store's change feed, and for a
//! deployment whose row, allocations or job's evaluations changed it asks
//! [`decide::assess`] what to do: fail it (unhealthy allocations, a missed
//! progress deadline; with the auto-revert `deployment_failure` decides),
//! hand unhealthy allocations back for replacement, auto-promote healthy
//! canaries, mark a complete deployment successful, or ask for an
//! evaluation so the scheduler places the next batch. Those evaluations
//! are batched: health changes within [`EVAL_BATCH_WINDOW`] become one
//! write, one evaluation per deployment (Nomad waits 250 ms alike).
//!
//! One timer sleeps until the nearest progress deadline of the running
//! deployments (a paused deployment's deadline does not fire). Every
//! write goes through `StateStore::submit_as_leader`: the watcher is a
//! leader duty ([`SetLeader`]); a follower watches nothing, and on gaining
//! the lead the watcher assesses every active deployment of the current
//! state, so a deadline missed during a failover fires at once.
//!
//! The rest of the server sees nothing of the watcher but the state it
//! writes: users' promote, pause and fail go straight to the store.

pub mod decide;

use crate::feed::FeedFollower;
use crate::periodic::Clock;
use actix::prelude::*;
use herder::state::{AppliedChanges, Command, JobKey, Row, RowKey, StateSnapshot, StateStore};
use herder::structs::{Allocation, DeploymentId};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How long health changes are gathered before their evaluations are
/// written (Nomad's `evalBatchDuration`).
pub const EVAL_BATCH_WINDOW: Duration = Duration::from_millis(250);

/// The longest the deadline timer sleeps before looking at the clock
/// again, so a wall-clock jump delays a deadline by at most this.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Deployments assessed per turn when (re)building the watch list, and
/// the pause between turns. A restart with a thousand active deployments
/// over a million allocations took a second to assess them all, and in one
/// go that second held up everything else on the server's thread, the
/// API's first answers included; in turns the rest runs in between. A
/// turn of 64 (~64 ms) still held the API's start back (its first answer
/// came 40 ms later at the median, docs/PERFORMANCE.md "session 27"); a
/// turn of 8 holds anything back by a few milliseconds.
const REBUILD_TURN: usize = 8;
const REBUILD_PAUSE: Duration = Duration::from_millis(1);

/// Stop watching (server shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopWatcher;

/// Leadership gained (`true`: watch the active deployments of the current
/// state) or lost (`false`: forget them and their timers).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetLeader(pub bool);

/// Assesses every watched deployment again by the clock (what the deadline
/// timer does; a test moving its clock may send it).
#[derive(Message)]
#[rtype(result = "()")]
pub struct CheckDeadlines;

/// The active deployments watched, with their next progress deadline
/// (Unix nanoseconds).
#[derive(Message)]
#[rtype(result = "HashMap<DeploymentId, Option<i64>>")]
pub struct Watched;

pub struct DeploymentWatcher {
    store: StateStore,
    clock: Clock,
    /// Active deployments with their next progress deadline.
    watched: HashMap<DeploymentId, Option<i64>>,
    /// The watched deployments of each job: an evaluation of the job
    /// changing may complete one.
    by_job: HashMap<JobKey, BTreeSet<DeploymentId>>,
    /// The healthy count of each deployment when last assessed: a rise is
    /// a health change to evaluate.
    healthy_seen: HashMap<DeploymentId, u64>,
    /// Allocations of each deployment written since it was last assessed.
    news: HashMap<DeploymentId, Vec<Arc<Allocation>>>,
    /// Deployments created by the change set being assessed: their news
    /// are all their allocations (`decide::first_look_at_birth`).
    born: HashSet<DeploymentId>,
    /// Deployments with a verdict submitted and not yet applied: not
    /// decided on again until it lands.
    writing: HashSet<DeploymentId>,
    /// Deployments whose evaluation waits in the batch or is being written.
    evals_coming: HashSet<DeploymentId>,
    batch: BTreeSet<DeploymentId>,
    batch_timer: Option<SpawnHandle>,
    deadline_timer: Option<SpawnHandle>,
    batch_window: Duration,
    last_index: u64,
    /// Counts rebuilds (and forgets): a rebuild's remaining turns stop
    /// when a newer one has started.
    rebuild_generation: u64,
    stopping: bool,
    leader: bool,
}

impl DeploymentWatcher {
    pub fn new(store: StateStore, clock: Clock) -> Self {
        DeploymentWatcher {
            store,
            clock,
            watched: HashMap::new(),
            by_job: HashMap::new(),
            healthy_seen: HashMap::new(),
            news: HashMap::new(),
            born: HashSet::new(),
            writing: HashSet::new(),
            evals_coming: HashSet::new(),
            batch: BTreeSet::new(),
            batch_timer: None,
            deadline_timer: None,
            batch_window: EVAL_BATCH_WINDOW,
            last_index: 0,
            rebuild_generation: 0,
            stopping: false,
            leader: true,
        }
    }

    /// Whether the watcher starts as the leader's (the default) or a
    /// follower's, which watches nothing until [`SetLeader`]`(true)`.
    pub fn with_leadership(mut self, leader: bool) -> Self {
        self.leader = leader;
        self
    }

    fn now_nanos(&self) -> i64 {
        (self.clock)().timestamp_nanos_opt().unwrap_or(i64::MAX)
    }

    fn set_leader(&mut self, ctx: &mut Context<Self>, leader: bool) {
        if leader == self.leader {
            return;
        }
        self.leader = leader;
        if leader {
            let snap = self.store.snapshot();
            let active = self.rebuild(ctx, &snap);
            tracing::info!(deployments = active, "deployment watcher resumed");
        } else {
            // Writes already submitted finish on their own.
            self.forget(ctx);
            tracing::info!("deployment watcher stopped: not the leader");
        }
    }

    fn forget(&mut self, ctx: &mut Context<Self>) {
        self.rebuild_generation += 1;
        self.watched.clear();
        self.by_job.clear();
        self.healthy_seen.clear();
        self.news.clear();
        self.batch.clear();
        self.evals_coming.clear();
        for timer in [self.batch_timer.take(), self.deadline_timer.take()]
            .into_iter()
            .flatten()
        {
            ctx.cancel_future(timer);
        }
        self.publish_gauge();
    }

    fn publish_gauge(&self) {
        metrics::gauge!("herder.deployment_watcher.active").set(self.watched.len() as f64);
    }

    /// Watches every active deployment of `snap` and assesses each (in
    /// turns); returns how many there are.
    fn rebuild(&mut self, ctx: &mut Context<Self>, snap: &StateSnapshot) -> usize {
        self.last_index = snap.latest_index();
        if !self.leader {
            return 0;
        }
        self.watched.clear();
        self.by_job.clear();
        self.healthy_seen.clear();
        self.news.clear();
        let active: Vec<DeploymentId> = snap
            .deployments()
            .filter(|d| d.active())
            .map(|d| d.id)
            .collect();
        let count = active.len();
        self.rebuild_generation += 1;
        self.assess_in_turns(ctx, snap, active, self.rebuild_generation);
        count
    }

    /// Assesses a turn's worth of `ids` and leaves the rest for later
    /// turns, each on the state as it is then (a deployment the feed
    /// brought up meanwhile was assessed on newer state already).
    fn assess_in_turns(
        &mut self,
        ctx: &mut Context<Self>,
        snap: &StateSnapshot,
        mut ids: Vec<DeploymentId>,
        generation: u64,
    ) {
        if generation != self.rebuild_generation || !self.leader || self.stopping {
            return;
        }
        let rest = ids.split_off(ids.len().min(REBUILD_TURN));
        self.assess(ctx, snap, ids);
        if !rest.is_empty() {
            ctx.run_later(REBUILD_PAUSE, move |act, ctx| {
                let snap = act.store.snapshot();
                act.assess_in_turns(ctx, &snap, rest, generation);
            });
        }
    }

    /// Decides on each of `ids` and carries the verdicts out.
    fn assess(&mut self, ctx: &mut Context<Self>, snap: &StateSnapshot, ids: Vec<DeploymentId>) {
        let now = self.now_nanos();
        for id in ids {
            let Some(d) = snap.deployment(&id).filter(|d| d.active()) else {
                self.unwatch(&id);
                continue;
            };
            self.by_job
                .entry(JobKey::new(&d.namespace, &d.job_id))
                .or_default()
                .insert(id);
            if self.writing.contains(&id) {
                continue;
            }
            let total = decide::healthy_count(d);
            let (allocs, health) = match self.healthy_seen.insert(id, total) {
                None if self.born.contains(&id) => {
                    let news = self.news.remove(&id).unwrap_or_default();
                    decide::first_look_at_birth(snap, d, news)
                }
                None => {
                    self.news.remove(&id);
                    decide::first_look(snap, d)
                }
                Some(before) => (self.news.remove(&id).unwrap_or_default(), total > before),
            };
            let news = decide::News {
                allocs: &allocs,
                health,
                eval_coming: self.evals_coming.contains(&id),
            };
            let verdict = decide::assess(snap, d, now, news);
            self.watched.insert(id, verdict.deadline);
            if let Some(action) = verdict.action {
                self.act(ctx, d, action);
            } else if verdict.wants_eval {
                self.queue_eval(ctx, id);
            }
        }
        self.publish_gauge();
        self.arm_deadline(ctx);
    }

    fn unwatch(&mut self, id: &DeploymentId) {
        self.news.remove(id);
        self.healthy_seen.remove(id);
        if self.watched.remove(id).is_none() {
            return;
        }
        self.by_job.retain(|_, ids| {
            ids.remove(id);
            !ids.is_empty()
        });
    }

    /// Submits one verdict; the deployment is decided on again once the
    /// write lands (its row or allocations change) or fails.
    fn act(
        &mut self,
        ctx: &mut Context<Self>,
        d: &herder::structs::Deployment,
        action: decide::Action,
    ) {
        let id = d.id;
        let what = action.name();
        tracing::info!(deployment_id = %id, job_id = %d.job_id, action = what, "deployment verdict");
        metrics::counter!("herder.deployment_watcher.verdicts", "action" => what).increment(1);
        self.writing.insert(id);
        let reply = self.store.submit_as_leader(action.into_command(d));
        ctx.spawn(
            fut::wrap_future(reply).map(move |result, act: &mut Self, _| {
                act.writing.remove(&id);
                match result {
                    Ok(Ok(_)) => {}
                    // A user or the scheduler ended it first.
                    Ok(Err(herder::state::StoreError::Rejected(e))) => {
                        tracing::debug!(deployment_id = %id, error = %e, "deployment verdict refused")
                    }
                    Ok(Err(e)) => {
                        tracing::error!(deployment_id = %id, action = what, error = %e, "writing a deployment verdict failed")
                    }
                    Err(_) => tracing::error!(deployment_id = %id, "deployment verdict: store gone"),
                }
            }),
        );
    }

    fn queue_eval(&mut self, ctx: &mut Context<Self>, id: DeploymentId) {
        self.batch.insert(id);
        self.evals_coming.insert(id);
        if self.batch_timer.is_none() {
            self.batch_timer = Some(ctx.run_later(self.batch_window, |act, ctx| {
                act.batch_timer = None;
                act.flush_evals(ctx);
            }));
        }
    }

    /// Writes the batched evaluations in one command, one per deployment
    /// that still needs it.
    fn flush_evals(&mut self, ctx: &mut Context<Self>) {
        let ids = std::mem::take(&mut self.batch);
        if ids.is_empty() || !self.leader {
            return;
        }
        let snap = self.store.snapshot();
        let now = self.now_nanos();
        let mut evals = Vec::new();
        for id in &ids {
            let eval = snap
                .deployment(id)
                .filter(|d| d.active())
                .and_then(|d| decide::eval_for(&snap, d, now));
            match eval {
                Some(eval) => evals.push(eval),
                None => {
                    self.evals_coming.remove(id);
                }
            }
        }
        if evals.is_empty() {
            return;
        }
        tracing::debug!(evals = evals.len(), "deployment evaluations");
        metrics::counter!("herder.deployment_watcher.evals").increment(evals.len() as u64);
        let reply = self.store.submit_as_leader(Command::EvalUpdate { evals });
        ctx.spawn(
            fut::wrap_future(reply).map(move |result, act: &mut Self, ctx| {
                for id in &ids {
                    act.evals_coming.remove(id);
                }
                match result {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::error!(error = %e, "writing deployment evaluations failed")
                    }
                    Err(_) => tracing::error!("deployment evaluations: store gone"),
                }
                // What waited on the evaluation (success) is decided now.
                let snap = act.store.snapshot();
                act.assess(ctx, &snap, ids.into_iter().collect());
            }),
        );
    }

    /// Sleeps until the nearest deadline of the watched deployments.
    fn arm_deadline(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.deadline_timer.take() {
            ctx.cancel_future(timer);
        }
        let Some(next) = self.watched.values().flatten().min().copied() else {
            return;
        };
        let wait = u64::try_from(next.saturating_sub(self.now_nanos())).unwrap_or(0);
        let delay = Duration::from_nanos(wait).min(MAX_SLEEP);
        self.deadline_timer = Some(ctx.run_later(delay, |act, ctx| {
            act.deadline_timer = None;
            act.check_deadlines(ctx);
        }));
    }

    /// Assesses the deployments whose deadline has passed; re-arms.
    fn check_deadlines(&mut self, ctx: &mut Context<Self>) {
        if !self.leader {
            return;
        }
        let now = self.now_nanos();
        let due: Vec<DeploymentId> = self
            .watched
            .iter()
            .filter(|(_, by)| by.is_some_and(|by| by <= now))
            .map(|(id, _)| *id)
            .collect();
        let snap = self.store.snapshot();
        self.assess(ctx, &snap, due);
    }

    /// The deployments a batch of changes touches; their allocations
    /// written go to the news.
    fn touched(&mut self, changes: &AppliedChanges) -> BTreeSet<DeploymentId> {
        let mut ids = BTreeSet::new();
        for change in &changes.changes {
            match (&change.key, &change.row) {
                (RowKey::Deployment(id), _) => {
                    ids.insert(*id);
                }
                (RowKey::Alloc { .. }, Some(Row::Alloc(alloc))) => {
                    if let Some(id) = alloc.deployment_id {
                        ids.insert(id);
                        self.news.entry(id).or_default().push(alloc.clone());
                    }
                }
                (RowKey::Eval(_), Some(Row::Eval(eval))) => {
                    let key = JobKey::new(&eval.namespace, &eval.job_id);
                    if let Some(watched) = self.by_job.get(&key) {
                        ids.extend(watched.iter().copied());
                    }
                }
                _ => {}
            }
        }
        self.born.extend(decide::born(changes));
        ids
    }
}

impl Actor for DeploymentWatcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let snap = self.store.snapshot();
        self.rebuild(ctx, &snap);
        self.follow(ctx);
    }
}

impl FeedFollower for DeploymentWatcher {
    const NAME: &'static str = "the deployment watcher";

    fn store(&self) -> &StateStore {
        &self.store
    }

    fn last_index(&self) -> u64 {
        self.last_index
    }

    fn stop_requested(&self) -> bool {
        self.stopping
    }

    fn resync(&mut self, ctx: &mut Context<Self>, snap: &StateSnapshot) {
        self.rebuild(ctx, snap);
    }

    fn on_changes(&mut self, ctx: &mut Context<Self>, changes: &AppliedChanges) {
        if changes.index <= self.last_index {
            return;
        }
        self.last_index = changes.index;
        if !self.leader {
            return;
        }
        let ids = self.touched(changes);
        if !ids.is_empty() {
            let snap = self.store.snapshot();
            self.assess(ctx, &snap, ids.into_iter().collect());
        }
        self.born.clear();
    }
}

impl StreamHandler<Arc<AppliedChanges>> for DeploymentWatcher {
    fn handle(&mut self, changes: Arc<AppliedChanges>, ctx: &mut Context<Self>) {
        self.on_changes(ctx, &changes);
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        self.feed_ended(ctx);
    }
}

impl Handler<SetLeader> for DeploymentWatcher {
    type Result = ();

    fn handle(&mut self, msg: SetLeader, ctx: &mut Context<Self>) {
        self.set_leader(ctx, msg.0);
    }
}

impl Handler<CheckDeadlines> for DeploymentWatcher {
    type Result = ();

    fn handle(&mut self, _msg: CheckDeadlines, ctx: &mut Context<Self>) {
        self.check_deadlines(ctx);
    }
}

impl Handler<Watched> for DeploymentWatcher {
    type Result = MessageResult<Watched>;

    fn handle(&mut self, _msg: Watched, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.watched.clone())
    }
}

impl Handler<StopWatcher> for DeploymentWatcher {
    type Result = ();

    fn handle(&mut self, _msg: StopWatcher, ctx: &mut Context<Self>) {
        self.stopping = true;
        self.forget(ctx);
        ctx.stop();
    }
}
