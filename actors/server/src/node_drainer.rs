//! The NodeDrainer actor: moves the work off nodes an operator drains, as
//! Nomad's leader drainer does.
//!
//! Storing a drain strategy only makes a node ineligible and tainted; this
//! actor does the moving. It follows the state store's change feed and, for
//! every draining node:
//! - marks the node's service allocations for migration
//!   (`DesiredTransition.Migrate`, with an evaluation per job in the same
//!   command), a few at a time per task group so that at most
//!   `migrate.max_parallel` of the group are away at once across the
//!   cluster. An allocation counts as healthy once its client has decided
//!   its health by the group's `migrate` block (`health_check`,
//!   `min_healthy_time`, `healthy_deadline`), as Nomad's drainer counts
//!   it: a marked allocation stops counting at once, its replacement
//!   counts when its health is reported. A replacement found unhealthy at
//!   its `healthy_deadline` counts too (Nomad's `HasHealth`): the drain
//!   goes on rather than wait for a deadline that may never come;
//! - leaves batch and sysbatch allocations to finish;
//! - once nothing but system allocations is left running there, marks the
//!   system allocations (unless the drain ignores system jobs) and ends the
//!   drain: the strategy is cleared, the node stays ineligible, and the
//!   node gets a "Node drain complete" event;
//! - at the drain's `ForceDeadline` marks everything still there at once
//!   and ends the drain the same way (event detail `deadline_reached`).
//!
//! The deadline has a timer per node; everything else is driven by the
//! feed. The tracked nodes are rebuilt from a snapshot at start, so a
//! restarted server resumes the drains in progress with their stored
//! deadlines. Time comes from an injected clock so tests can drive it.
//!
//! Draining is a leader duty ([`SetLeader`]): a follower tracks no node,
//! runs no deadline timer and writes nothing; on gaining the lead the
//! drainer resumes every drain of the current state, as at start.

use crate::feed::FeedFollower;
use crate::periodic::Clock;
use actix::prelude::*;
use herder::state::{AppliedChanges, Command, JobKey, Row, RowKey, StateSnapshot, StateStore};
use herder::structs::{
    AllocId, Allocation, DesiredTransition, DrainStrategy, Evaluation, Job, JobType, NodeEvent,
    NodeId, TaskGroup, TriggeredBy,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// The node event written when a drain ends (Nomad's text).
pub const NODE_DRAIN_COMPLETE: &str = "Node drain complete";
/// The event detail set when the deadline ended the drain.
pub const DEADLINE_REACHED: &str = "deadline_reached";
/// The node event subsystem of drain events.
pub const DRAIN_SUBSYSTEM: &str = "Drain";

/// The longest a deadline timer sleeps before looking at the clock again,
/// so a wall-clock jump delays a forced drain by at most this.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Stop draining (server shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopDrainer;

/// Leadership gained (`true`: resume the drains of the current state) or
/// lost (`false`: forget them and their deadline timers).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetLeader(pub bool);

/// Forces every tracked drain whose deadline has passed by the clock. The
/// deadline timers send this; a test moving its clock may too.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CheckDeadlines;

/// The nodes being drained, with the Unix nanoseconds at which each drain
/// is forced (`None`: no deadline).
#[derive(Message)]
#[rtype(result = "BTreeMap<NodeId, Option<i64>>")]
pub struct DrainingNodes;

struct Tracked {
    strategy: DrainStrategy,
    timer: Option<SpawnHandle>,
}

/// What a batch of changes asks to look at again.
#[derive(Default)]
struct Dirty {
    nodes: BTreeSet<NodeId>,
    jobs: BTreeSet<JobKey>,
}

impl Dirty {
    fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.jobs.is_empty()
    }
}

pub struct NodeDrainer {
    store: StateStore,
    clock: Clock,
    /// The nodes with a drain strategy.
    nodes: HashMap<NodeId, Tracked>,
    /// Jobs with allocations left on a draining node: a change to any of
    /// their allocations (a replacement starting elsewhere) may free room
    /// for the next migrations.
    jobs: HashSet<JobKey>,
    /// Allocations marked by a command not yet applied: counted as marked
    /// so a pass in between does not mark more than the budget.
    in_flight: HashSet<AllocId>,
    /// Nodes whose drain-complete command is not yet applied.
    completing: HashSet<NodeId>,
    last_index: u64,
    stopping: bool,
    leader: bool,
}

/// When the drain is forced (Unix nanoseconds): `None` without deadline, at
/// once (the distant past) for a negative deadline.
pub fn force_deadline(strategy: &DrainStrategy) -> Option<i64> {
    match strategy.deadline {
        0 => None,
        d if d < 0 => Some(strategy.force_deadline.unwrap_or(i64::MIN)),
        d => Some(
            strategy
                .force_deadline
                .unwrap_or_else(|| strategy.started_at.unwrap_or(0).saturating_add(d)),
        ),
    }
}

/// The job version an allocation runs (else the current one).
fn alloc_job<'a>(snap: &'a StateSnapshot, alloc: &Allocation) -> Option<&'a Arc<Job>> {
    snap.job_by_version(&alloc.namespace, &alloc.job_id, alloc.job_version)
        .or_else(|| snap.job(&alloc.namespace, &alloc.job_id))
}

/// System allocations leave last (and never when the drain ignores them).
/// Sysbatch work, like batch, is left to finish until the deadline.
fn is_system(snap: &StateSnapshot, alloc: &Allocation) -> bool {
    alloc_job(snap, alloc).is_some_and(|j| j.job_type == JobType::System)
}

fn on_draining_node(snap: &StateSnapshot, alloc: &Allocation) -> bool {
    snap.node(&alloc.node_id)
        .is_some_and(|n| n.drain_strategy.is_some())
}

/// What one job asks of the drainer now.
#[derive(Default)]
struct JobDrain {
    /// Allocations to mark for migration.
    migrate: Vec<Arc<Allocation>>,
    /// Whether any allocation of the job is still live on a draining node.
    remaining: bool,
}

/// The allocations of `job` to mark now, group by group.
fn job_drain(snap: &StateSnapshot, job: &Job, marked: &dyn Fn(&Allocation) -> bool) -> JobDrain {
    let mut by_group: HashMap<&str, Vec<&Arc<Allocation>>> = HashMap::new();
    for alloc in snap.allocs_by_job(&job.namespace, &job.id) {
        by_group.entry(&alloc.task_group).or_default().push(alloc);
    }
    let mut out = JobDrain::default();
    for tg in &job.task_groups {
        if let Some(allocs) = by_group.get(tg.name.as_str()) {
            group_drain(snap, job, tg, allocs, marked, &mut out);
        }
    }
    out
}

/// Nomad's rule: as many of the group's allocations on draining nodes as
/// keep at least `count - max_parallel` of the group healthy (its health
/// decided, see [`has_migrate_health`]). Batch work is never marked before
/// the deadline; a group without a migrate block neither.
fn group_drain(
    snap: &StateSnapshot,
    job: &Job,
    tg: &TaskGroup,
    allocs: &[&Arc<Allocation>],
    marked: &dyn Fn(&Allocation) -> bool,
    out: &mut JobDrain,
) {
    let batch = job.job_type.is_batch_like();
    let mut healthy = 0i64;
    let mut drainable = Vec::new();
    for alloc in allocs {
        if alloc.is_terminal() {
            continue;
        }
        let is_marked = marked(alloc);
        if !is_marked && has_migrate_health(alloc) {
            healthy += 1;
        }
        if !on_draining_node(snap, alloc) {
            continue;
        }
        out.remaining = true;
        if !is_marked {
            drainable.push(*alloc);
        }
    }
    let Some(migrate) = tg.migrate.as_ref().filter(|_| !batch) else {
        return;
    };
    let floor = i64::from(tg.count) - i64::from(migrate.max_parallel);
    let n = (healthy - floor).clamp(0, drainable.len() as i64) as usize;
    drainable.sort_by_key(|a| (a.create_index, a.id));
    out.migrate
        .extend(drainable.into_iter().take(n).map(Arc::clone));
}

/// The client has decided the allocation's health (healthy, or unhealthy
/// at its deadline), by the deployment's `update` block or, outside a
/// deployment, the group's `migrate` block.
fn has_migrate_health(alloc: &Allocation) -> bool {
    alloc.deployment_status().is_some_and(|s| s.has_health())
}

/// Nothing but system allocations is left running on the node (Nomad
/// waits for the clients to confirm: a stopped allocation still counts
/// until its client says it ended).
fn node_done(snap: &StateSnapshot, node_id: &NodeId) -> bool {
    snap.allocs_by_node(node_id)
        .all(|a| a.client_status.is_terminal() || is_system(snap, a))
}

impl NodeDrainer {
    pub fn new(store: StateStore, clock: Clock) -> Self {
        NodeDrainer {
            store,
            clock,
            nodes: HashMap::new(),
            jobs: HashSet::new(),
            in_flight: HashSet::new(),
            completing: HashSet::new(),
            last_index: 0,
            stopping: false,
            leader: true,
        }
    }

    /// Whether the drainer starts as the leader's (the default) or a
    /// follower's, which drains nothing until [`SetLeader`]`(true)`.
    pub fn with_leadership(mut self, leader: bool) -> Self {
        self.leader = leader;
        self
    }

    fn set_leader(&mut self, ctx: &mut Context<Self>, leader: bool) {
        if leader == self.leader {
            return;
        }
        self.leader = leader;
        if leader {
            let dirty = self.resync(ctx, &self.store.snapshot());
            self.run_pass(ctx, dirty);
        } else {
            // Marks and completions already submitted finish on their
            // own; only the tracking and the timers stop.
            for (_, tracked) in self.nodes.drain() {
                if let Some(timer) = tracked.timer {
                    ctx.cancel_future(timer);
                }
            }
            self.jobs.clear();
            self.publish_gauge();
            tracing::info!("node drains paused: not the leader");
        }
    }

    fn now_nanos(&self) -> i64 {
        (self.clock)().timestamp_nanos_opt().unwrap_or(i64::MAX)
    }

    fn publish_gauge(&self) {
        metrics::gauge!("herder.drainer.draining_nodes").set(self.nodes.len() as f64);
    }

    /// Starts or updates tracking of a node from its stored row.
    fn track(
        &mut self,
        ctx: &mut Context<Self>,
        node_id: NodeId,
        strategy: Option<&DrainStrategy>,
    ) {
        let Some(strategy) = strategy else {
            self.untrack(ctx, node_id);
            return;
        };
        let changed = self
            .nodes
            .get(&node_id)
            .is_none_or(|t| t.strategy != *strategy);
        if !changed {
            return;
        }
        if !self.nodes.contains_key(&node_id) {
            tracing::info!(node_id = %node_id, "node drain started");
        }
        let tracked = self.nodes.entry(node_id).or_insert(Tracked {
            strategy: strategy.clone(),
            timer: None,
        });
        tracked.strategy = strategy.clone();
        self.arm(ctx, node_id);
        self.publish_gauge();
    }

    fn untrack(&mut self, ctx: &mut Context<Self>, node_id: NodeId) {
        if let Some(tracked) = self.nodes.remove(&node_id) {
            if let Some(timer) = tracked.timer {
                ctx.cancel_future(timer);
            }
            tracing::info!(node_id = %node_id, "node no longer draining");
            self.publish_gauge();
        }
        if self.nodes.is_empty() {
            self.jobs.clear();
        }
    }

    /// Sleeps until the node's deadline (at most `MAX_SLEEP`).
    fn arm(&mut self, ctx: &mut Context<Self>, node_id: NodeId) {
        let now = self.now_nanos();
        let Some(tracked) = self.nodes.get_mut(&node_id) else {
            return;
        };
        if let Some(timer) = tracked.timer.take() {
            ctx.cancel_future(timer);
        }
        let Some(deadline) = force_deadline(&tracked.strategy) else {
            return;
        };
        let wait = u64::try_from(deadline.saturating_sub(now)).unwrap_or(0);
        let delay = Duration::from_nanos(wait).min(MAX_SLEEP);
        tracked.timer = Some(ctx.run_later(delay, move |act, ctx| {
            if let Some(t) = act.nodes.get_mut(&node_id) {
                t.timer = None;
            }
            act.check_deadline(ctx, node_id);
        }));
    }

    /// Forces the node's drain if its deadline has passed, else re-arms.
    fn check_deadline(&mut self, ctx: &mut Context<Self>, node_id: NodeId) {
        let Some(deadline) = self
            .nodes
            .get(&node_id)
            .and_then(|t| force_deadline(&t.strategy))
        else {
            return;
        };
        if self.now_nanos() < deadline {
            self.arm(ctx, node_id);
            return;
        }
        let snap = self.store.snapshot();
        if self.may_complete(&snap, &node_id) {
            tracing::info!(node_id = %node_id, "node drain deadline reached; forcing the remaining allocations off");
            self.complete(ctx, &snap, node_id, true);
        }
    }

    fn is_marked(&self, alloc: &Allocation) -> bool {
        alloc.desired_transition.should_migrate() || self.in_flight.contains(&alloc.id)
    }

    /// Marks allocations for migration with an evaluation per job, in one
    /// command.
    fn mark(
        &mut self,
        ctx: &mut Context<Self>,
        snap: &StateSnapshot,
        allocs: Vec<Arc<Allocation>>,
    ) {
        if allocs.is_empty() {
            return;
        }
        let now = self.now_nanos();
        let mut transitions = BTreeMap::new();
        let mut evals = Vec::new();
        let mut jobs = HashSet::new();
        for alloc in &allocs {
            let transition = DesiredTransition {
                migrate: Some(true),
                ..Default::default()
            };
            transitions.insert(alloc.id, transition);
            if jobs.insert(JobKey::of_alloc(alloc)) {
                if let Some(job) = snap.job(&alloc.namespace, &alloc.job_id) {
                    evals.push(Evaluation::for_job(job, TriggeredBy::NodeDrain, now));
                }
            }
        }
        let ids: Vec<AllocId> = transitions.keys().copied().collect();
        self.in_flight.extend(ids.iter().copied());
        metrics::counter!("herder.drainer.allocs_migrated").increment(ids.len() as u64);
        tracing::debug!(
            allocs = ids.len(),
            jobs = evals.len(),
            "marking allocations for migration"
        );
        let reply = self
            .store
            .submit_as_leader(Command::AllocDesiredTransition { transitions, evals });
        ctx.spawn(
            fut::wrap_future(reply).map(move |result, act: &mut Self, _| {
                for id in &ids {
                    act.in_flight.remove(id);
                }
                match result {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::error!(error = %e, "marking allocations for migration failed")
                    }
                    Err(_) => tracing::error!("marking allocations for migration: store gone"),
                }
            }),
        );
    }

    /// Whether the node is draining in `snap` and not already completing.
    fn may_complete(&self, snap: &StateSnapshot, node_id: &NodeId) -> bool {
        self.nodes.contains_key(node_id)
            && !self.completing.contains(node_id)
            && snap
                .node(node_id)
                .is_some_and(|n| n.drain_strategy.is_some())
    }

    /// Marks what is left on the node (system allocations unless ignored)
    /// and ends its drain.
    fn complete(
        &mut self,
        ctx: &mut Context<Self>,
        snap: &StateSnapshot,
        node_id: NodeId,
        deadlined: bool,
    ) {
        let ignore_system = snap
            .node(&node_id)
            .and_then(|n| n.drain_strategy.as_ref())
            .is_some_and(|s| s.ignore_system_jobs);
        let remaining: Vec<_> = snap
            .allocs_by_node(&node_id)
            .filter(|a| !a.is_terminal() && !self.is_marked(a))
            .filter(|a| !(ignore_system && is_system(snap, a)))
            .cloned()
            .collect();
        self.mark(ctx, snap, remaining);
        let mut details = BTreeMap::new();
        if deadlined {
            details.insert(DEADLINE_REACHED.to_string(), "true".to_string());
        }
        let event = NodeEvent {
            message: NODE_DRAIN_COMPLETE.to_string(),
            subsystem: DRAIN_SUBSYSTEM.to_string(),
            details,
            timestamp: Some(self.now_nanos()),
            ..Default::default()
        };
        self.completing.insert(node_id);
        let reply = self.store.submit_as_leader(Command::NodeUpdateDrain {
            node_id,
            drain: None,
            mark_eligible: false,
            event: Some(event),
            evals: Vec::new(),
        });
        ctx.spawn(fut::wrap_future(reply).map(move |result, act: &mut Self, _| {
            act.completing.remove(&node_id);
            match result {
                Ok(Ok(outcome)) => {
                    tracing::info!(node_id = %node_id, index = outcome.index, deadlined, "node drain complete")
                }
                Ok(Err(e)) => tracing::error!(node_id = %node_id, error = %e, "ending the node drain failed"),
                Err(_) => tracing::error!(node_id = %node_id, "ending the node drain: store gone"),
            }
        }));
    }

    /// Looks again at what changed: marks what may move now, ends the
    /// drains that are done.
    fn run_pass(&mut self, ctx: &mut Context<Self>, dirty: Dirty) {
        if self.nodes.is_empty() || dirty.is_empty() {
            return;
        }
        let snap = self.store.snapshot();
        let mut jobs = dirty.jobs;
        for node_id in dirty.nodes.iter().filter(|n| self.nodes.contains_key(n)) {
            for alloc in snap.allocs_by_node(node_id) {
                if !alloc.is_terminal() && !is_system(&snap, alloc) {
                    jobs.insert(JobKey::of_alloc(alloc));
                }
            }
        }
        let mut migrate = Vec::new();
        for key in jobs {
            let job = snap.job(&key.namespace, &key.id);
            let drain = match job {
                Some(job) if job.job_type != JobType::System => {
                    job_drain(&snap, job, &|a| self.is_marked(a))
                }
                _ => JobDrain::default(),
            };
            migrate.extend(drain.migrate);
            if drain.remaining {
                self.jobs.insert(key);
            } else {
                self.jobs.remove(&key);
            }
        }
        self.mark(ctx, &snap, migrate);
        for node_id in dirty.nodes {
            if self.may_complete(&snap, &node_id) && node_done(&snap, &node_id) {
                self.complete(ctx, &snap, node_id, false);
            }
        }
    }

    /// What a batch of changes makes worth looking at again.
    fn note_changes(&mut self, ctx: &mut Context<Self>, changes: &AppliedChanges) -> Dirty {
        let mut dirty = Dirty::default();
        if changes.index <= self.last_index {
            return dirty;
        }
        self.last_index = changes.index;
        if !self.leader {
            return dirty;
        }
        for change in &changes.changes {
            match (&change.key, &change.row) {
                (RowKey::Node(id), Some(Row::Node(node))) => {
                    self.track(ctx, *id, node.drain_strategy.as_ref());
                    if self.nodes.contains_key(id) {
                        dirty.nodes.insert(*id);
                    }
                }
                (RowKey::Node(id), None) => self.untrack(ctx, *id),
                (RowKey::Alloc { .. }, Some(Row::Alloc(alloc))) => {
                    let key = JobKey::of_alloc(alloc);
                    if self.nodes.contains_key(&alloc.node_id) {
                        dirty.nodes.insert(alloc.node_id);
                        dirty.jobs.insert(key);
                    } else if self.jobs.contains(&key) {
                        dirty.jobs.insert(key);
                    }
                }
                (RowKey::Job(key), Some(_)) if self.jobs.contains(key) => {
                    dirty.jobs.insert(key.clone());
                }
                _ => {}
            }
        }
        dirty
    }

    /// Rebuilds the tracked nodes from a full snapshot (start, or after
    /// falling behind the feed); every draining node is looked at again.
    fn resync(&mut self, ctx: &mut Context<Self>, snap: &StateSnapshot) -> Dirty {
        self.last_index = snap.latest_index();
        if !self.leader {
            return Dirty::default();
        }
        let draining: HashMap<NodeId, DrainStrategy> = snap
            .nodes()
            .filter_map(|n| n.drain_strategy.clone().map(|s| (n.id, s)))
            .collect();
        let gone: Vec<NodeId> = self
            .nodes
            .keys()
            .filter(|id| !draining.contains_key(id))
            .copied()
            .collect();
        for id in gone {
            self.untrack(ctx, id);
        }
        let mut dirty = Dirty::default();
        for (id, strategy) in &draining {
            self.track(ctx, *id, Some(strategy));
            dirty.nodes.insert(*id);
        }
        if !draining.is_empty() {
            tracing::info!(nodes = draining.len(), "node drains resumed");
        }
        self.publish_gauge();
        dirty
    }
}

impl Actor for NodeDrainer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let dirty = self.resync(ctx, &self.store.snapshot());
        self.run_pass(ctx, dirty);
        self.follow(ctx);
    }
}

impl FeedFollower for NodeDrainer {
    const NAME: &'static str = "the node drainer";

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
        let dirty = NodeDrainer::resync(self, ctx, snap);
        self.run_pass(ctx, dirty);
    }

    fn on_changes(&mut self, ctx: &mut Context<Self>, changes: &AppliedChanges) {
        let dirty = self.note_changes(ctx, changes);
        self.run_pass(ctx, dirty);
    }
}

impl StreamHandler<Arc<AppliedChanges>> for NodeDrainer {
    fn handle(&mut self, changes: Arc<AppliedChanges>, ctx: &mut Context<Self>) {
        self.on_changes(ctx, &changes);
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        self.feed_ended(ctx);
    }
}

impl Handler<CheckDeadlines> for NodeDrainer {
    type Result = ();

    fn handle(&mut self, _msg: CheckDeadlines, ctx: &mut Context<Self>) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            self.check_deadline(ctx, id);
        }
    }
}

impl Handler<DrainingNodes> for NodeDrainer {
    type Result = MessageResult<DrainingNodes>;

    fn handle(&mut self, _msg: DrainingNodes, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(
            self.nodes
                .iter()
                .map(|(id, t)| (*id, force_deadline(&t.strategy)))
                .collect(),
        )
    }
}

impl Handler<SetLeader> for NodeDrainer {
    type Result = ();

    fn handle(&mut self, msg: SetLeader, ctx: &mut Context<Self>) {
        self.set_leader(ctx, msg.0);
    }
}

impl Handler<StopDrainer> for NodeDrainer {
    type Result = ();

    fn handle(&mut self, _msg: StopDrainer, ctx: &mut Context<Self>) {
        self.stopping = true;
        metrics::gauge!("herder.drainer.draining_nodes").set(0.0);
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_follow_nomads_signs() {
        let none = DrainStrategy::default();
        assert_eq!(force_deadline(&none), None);
        let forced = DrainStrategy {
            deadline: -1,
            ..Default::default()
        };
        assert_eq!(force_deadline(&forced), Some(i64::MIN));
        let stored = DrainStrategy {
            deadline: 10,
            force_deadline: Some(500),
            started_at: Some(1),
            ..Default::default()
        };
        assert_eq!(force_deadline(&stored), Some(500));
        let derived = DrainStrategy {
            deadline: 10,
            started_at: Some(1),
            ..Default::default()
        };
        assert_eq!(force_deadline(&derived), Some(11));
    }
}
