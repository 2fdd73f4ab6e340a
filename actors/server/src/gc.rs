//! The GarbageCollector actor: removes what the cluster no longer needs,
//! as Nomad's core scheduler does on the leader (simplified).
//!
//! Every `gc_interval`, and on demand, it looks at one snapshot and removes:
//! - terminal evaluations whose last change is older than
//!   `eval_gc_threshold`, with their allocations, but only when every
//!   allocation of the evaluation is finished on both sides (the servers
//!   stopped it and the client reports it done) — an allocation the
//!   servers still want is needed for rescheduling decisions. Evaluations
//!   of a batch job that is still live are kept whole: losing its finished
//!   allocations would make the scheduler run them again.
//! - dead jobs (stopped, or batch work that finished) untouched for longer
//!   than `job_gc_threshold` whose evaluations and allocations are all
//!   terminal: those are deleted, then the job is purged.
//! - nodes `down` for longer than `node_gc_threshold` with no allocation
//!   still live on them.
//! - terminal deployments last changed more than `deployment_gc_threshold`
//!   ago that no live allocation refers to (Nomad's `deploymentGC`). A
//!   deployment carries no time, only its modify index; as Nomad's time
//!   table, the collector notes the store's index at each pass and
//!   takes the newest index noted before the cutoff as "old" (so a new
//!   leader collects deployments only a threshold after it took over).
//! - ACL tokens that expired more than `acl_token_gc_threshold` ago
//!   (Nomad's `expiredACLTokenGC`): they are refused from the moment they
//!   expire, and collected once the threshold has passed, so that for a
//!   while `acl token list` still shows why a token stopped working.
//!
//! Deletes go in batches of at most `batch_size` IDs per command, so one GC
//! pass never holds the single state writer for long. The scan runs off the
//! actor's thread; the time comes from the injected clock.
//!
//! Collecting is a leader duty ([`SetLeader`]): a follower runs no timer
//! and refuses passes, and a pass under way when the lead is lost writes
//! no further batch.

use crate::periodic::Clock;
use actix::prelude::*;
use chrono::{DateTime, Utc};
use herder::state::{Command, StateSnapshot, StateStore, StoreError};
use herder::structs::job::job_status;
use herder::structs::{
    AllocId, Allocation, ClientStatus, DeploymentId, EvalId, Evaluation, Job, JobType, NodeId,
    NodeStatus,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Thresholds and pacing, from the `server` configuration.
#[derive(Clone, Debug)]
pub struct GcConfig {
    pub eval_gc_threshold: Duration,
    pub job_gc_threshold: Duration,
    pub node_gc_threshold: Duration,
    pub deployment_gc_threshold: Duration,
    /// How long an expired ACL token stays listed before it goes.
    pub acl_token_gc_threshold: Duration,
    pub gc_interval: Duration,
    /// The most IDs one delete command carries.
    pub batch_size: usize,
}

impl Default for GcConfig {
    /// Nomad's defaults.
    fn default() -> Self {
        GcConfig {
            eval_gc_threshold: Duration::from_secs(3600),
            job_gc_threshold: Duration::from_secs(4 * 3600),
            node_gc_threshold: Duration::from_secs(24 * 3600),
            deployment_gc_threshold: Duration::from_secs(3600),
            acl_token_gc_threshold: Duration::from_secs(3600),
            gc_interval: Duration::from_secs(300),
            batch_size: 1000,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("state store: {0}")]
    Store(#[from] StoreError),
    #[error("a garbage collection is already running")]
    Busy,
    #[error("the garbage collection scan was interrupted")]
    Interrupted,
    #[error("this server is not the leader: garbage is collected by the leader")]
    NotLeader,
}

/// What one pass removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GcReport {
    pub evals: usize,
    pub allocs: usize,
    pub jobs: usize,
    pub nodes: usize,
    /// Absent from an older server's report.
    #[serde(default)]
    pub deployments: usize,
    /// Expired ACL tokens removed (absent from an older server's report).
    #[serde(default)]
    pub acl_tokens: usize,
}

/// A pass with the configured thresholds now (what the timer runs).
#[derive(Message)]
#[rtype(result = "Result<GcReport, GcError>")]
pub struct RunGc;

/// `/v1/system/gc`: as Nomad's forced GC, every threshold is ignored and
/// everything eligible goes, however recent.
#[derive(Message)]
#[rtype(result = "Result<GcReport, GcError>")]
pub struct ForceGc;

/// Stop collecting (server shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopGc;

/// Leadership gained (`true`: the periodic pass runs again) or lost
/// (`false`: no pass starts, and one under way stops writing).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetLeader(pub bool);

pub struct GarbageCollector {
    store: StateStore,
    clock: Clock,
    config: GcConfig,
    running: bool,
    /// Shared with the pass under way, which checks it before each write.
    leader: Arc<AtomicBool>,
    /// The periodic pass's timer, running while this server leads.
    ticker: Option<SpawnHandle>,
    /// When each pass saw which index: how old a deployment is.
    index_times: IndexTimes,
}

/// The store's index as seen at the start of each pass, oldest first
/// (Unix nanoseconds, index): a rough map from a time to the indexes
/// written before it, as Nomad's FSM time table.
#[derive(Debug, Default)]
struct IndexTimes(std::collections::VecDeque<(i64, u64)>);

impl IndexTimes {
    /// The most entries kept (a pass every 5 minutes: over a month).
    const MAX: usize = 10_000;

    fn note(&mut self, at: i64, index: u64) {
        if self.0.len() >= Self::MAX {
            self.0.pop_front();
        }
        self.0.push_back((at, index));
    }

    /// The newest index noted at or before `cutoff` (0: none), dropping
    /// the entries older than it, which no later cutoff needs.
    fn before(&mut self, cutoff: i64) -> u64 {
        while self.0.get(1).is_some_and(|(at, _)| *at <= cutoff) {
            self.0.pop_front();
        }
        match self.0.front() {
            Some((at, index)) if *at <= cutoff => *index,
            _ => 0,
        }
    }
}

impl GarbageCollector {
    pub fn new(store: StateStore, clock: Clock, config: GcConfig) -> Self {
        GarbageCollector {
            store,
            clock,
            config,
            running: false,
            leader: Arc::new(AtomicBool::new(true)),
            ticker: None,
            index_times: IndexTimes::default(),
        }
    }

    /// Whether the collector starts as the leader's (the default) or a
    /// follower's, which collects nothing until [`SetLeader`]`(true)`.
    pub fn with_leadership(self, leader: bool) -> Self {
        self.leader.store(leader, Ordering::SeqCst);
        self
    }

    fn start_ticker(&mut self, ctx: &mut Context<Self>) {
        if let Some(old) = self.ticker.take() {
            ctx.cancel_future(old);
        }
        let ticker = ctx.run_interval(self.config.gc_interval, |act, ctx| {
            if act.running {
                return;
            }
            ctx.spawn(act.run_and_reply(false).map(|result, _, _| match result {
                Ok(_) | Err(GcError::NotLeader) => {}
                Err(e) => tracing::error!(error = %e, "garbage collection failed"),
            }));
        });
        self.ticker = Some(ticker);
    }

    fn set_leader(&mut self, leader: bool, ctx: &mut Context<Self>) {
        if self.leader.swap(leader, Ordering::SeqCst) == leader {
            return;
        }
        if leader {
            self.start_ticker(ctx);
            tracing::info!(interval = ?self.config.gc_interval, "garbage collection resumed");
        } else {
            if let Some(ticker) = self.ticker.take() {
                ctx.cancel_future(ticker);
            }
            // The next term notes its own times.
            self.index_times = IndexTimes::default();
            tracing::info!("garbage collection stopped: not the leader");
        }
    }

    /// One pass: scan a snapshot off the actor thread, then write the
    /// deletes in order (evaluations and allocations before the jobs that
    /// owned them).
    fn run(&mut self, force: bool) -> impl std::future::Future<Output = Result<GcReport, GcError>> {
        let busy = std::mem::replace(&mut self.running, true);
        let store = self.store.clone();
        let now = (self.clock)();
        let mut cutoffs = Cutoffs::new(now, &self.config, force);
        if !force && !busy {
            let at = now.timestamp_nanos_opt().unwrap_or(i64::MAX);
            self.index_times.note(at, self.store.latest_index());
            cutoffs.deployment_index = self.index_times.before(cutoffs.deployment);
        }
        let batch_size = self.config.batch_size.max(1);
        let leader = self.leader.clone();
        async move {
            if busy {
                return Err(GcError::Busy);
            }
            if !leader.load(Ordering::SeqCst) {
                return Err(GcError::NotLeader);
            }
            let snap = store.snapshot();
            let plan = tokio::task::spawn_blocking(move || plan_gc(&snap, &cutoffs))
                .await
                .map_err(|_| GcError::Interrupted)?;
            let report = plan.report();
            for command in plan.into_commands(batch_size) {
                if !leader.load(Ordering::SeqCst) {
                    tracing::info!("garbage collection pass stopped: leadership lost");
                    return Err(GcError::NotLeader);
                }
                match store.submit_as_leader(command).await {
                    Ok(Ok(_)) => {}
                    // A job purged or node removed meanwhile: nothing left
                    // to collect there.
                    Ok(Err(StoreError::Rejected(e))) => {
                        tracing::debug!(error = %e, "gc delete skipped")
                    }
                    Ok(Err(e)) => return Err(GcError::Store(e)),
                    Err(_) => return Err(GcError::Store(StoreError::Closed)),
                }
            }
            Ok(report)
        }
    }

    fn run_and_reply(&mut self, force: bool) -> ResponseActFuture<Self, Result<GcReport, GcError>> {
        let was_running = self.running;
        let done = self.run(force);
        Box::pin(
            fut::wrap_future(done).map(move |result, act: &mut Self, _| {
                if !was_running {
                    act.running = false;
                }
                if let Ok(r) = &result {
                    tracing::info!(
                        evals = r.evals,
                        allocs = r.allocs,
                        jobs = r.jobs,
                        nodes = r.nodes,
                        deployments = r.deployments,
                        acl_tokens = r.acl_tokens,
                        force,
                        "garbage collected"
                    );
                }
                result
            }),
        )
    }
}

/// The newest last-change time (Unix nanos) each kind may have to be
/// collected.
#[derive(Clone, Copy, Debug)]
struct Cutoffs {
    eval: i64,
    job: i64,
    /// Unix seconds, as `StatusUpdatedAt`.
    node_seconds: i64,
    /// Unix nanos: the time a deployment's last change must predate.
    deployment: i64,
    /// The newest modify index a deployment may have to be collected
    /// (from the index times; everything when forced).
    deployment_index: u64,
    /// An ACL token that expired at or before this goes (now when forced:
    /// every expired token).
    token_expired: DateTime<Utc>,
}

impl Cutoffs {
    fn new(now: DateTime<Utc>, config: &GcConfig, force: bool) -> Self {
        if force {
            return Cutoffs {
                eval: i64::MAX,
                job: i64::MAX,
                node_seconds: i64::MAX,
                deployment: i64::MAX,
                deployment_index: u64::MAX,
                token_expired: now,
            };
        }
        let before = |d: Duration| {
            let d = chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
            now.checked_sub_signed(d)
                .map_or(i64::MIN, |t| t.timestamp_nanos_opt().unwrap_or(i64::MIN))
        };
        Cutoffs {
            eval: before(config.eval_gc_threshold),
            job: before(config.job_gc_threshold),
            node_seconds: before(config.node_gc_threshold).div_euclid(1_000_000_000),
            deployment: before(config.deployment_gc_threshold),
            deployment_index: 0,
            token_expired: chrono::Duration::from_std(config.acl_token_gc_threshold)
                .ok()
                .and_then(|d| now.checked_sub_signed(d))
                .unwrap_or(DateTime::<Utc>::MIN_UTC),
        }
    }
}

/// What one pass deletes.
#[derive(Debug, Default)]
struct GcPlan {
    /// Evaluations with the allocations that go with them.
    evals: EvalsWithAllocs,
    /// Allocations of collected jobs whose evaluation is already gone.
    orphan_allocs: Vec<AllocId>,
    jobs: Vec<(String, String)>,
    nodes: Vec<NodeId>,
    deployments: Vec<DeploymentId>,
    /// Accessor IDs of expired ACL tokens.
    acl_tokens: Vec<String>,
}

impl GcPlan {
    fn report(&self) -> GcReport {
        GcReport {
            evals: self.evals.len(),
            allocs: self.evals.iter().map(|(_, a)| a.len()).sum::<usize>()
                + self.orphan_allocs.len(),
            jobs: self.jobs.len(),
            nodes: self.nodes.len(),
            deployments: self.deployments.len(),
            acl_tokens: self.acl_tokens.len(),
        }
    }

    fn into_commands(self, batch_size: usize) -> Vec<Command> {
        let mut commands = Vec::new();
        let mut eval_ids = Vec::new();
        let mut alloc_ids = Vec::new();
        for ids in self.orphan_allocs.chunks(batch_size) {
            commands.push(Command::EvalDelete {
                eval_ids: Vec::new(),
                alloc_ids: ids.to_vec(),
            });
        }
        for (eval, allocs) in self.evals {
            if !eval_ids.is_empty()
                && eval_ids.len() + alloc_ids.len() + 1 + allocs.len() > batch_size
            {
                commands.push(Command::EvalDelete {
                    eval_ids: std::mem::take(&mut eval_ids),
                    alloc_ids: std::mem::take(&mut alloc_ids),
                });
            }
            eval_ids.push(eval);
            alloc_ids.extend(allocs);
        }
        if !eval_ids.is_empty() {
            commands.push(Command::EvalDelete {
                eval_ids,
                alloc_ids,
            });
        }
        commands.extend(
            self.deployments
                .chunks(batch_size)
                .map(|ids| Command::DeploymentDelete {
                    deployment_ids: ids.to_vec(),
                }),
        );
        commands.extend(
            self.jobs
                .into_iter()
                .map(|(namespace, job_id)| Command::JobDeregister {
                    namespace,
                    job_id,
                    purge: true,
                    eval: None,
                }),
        );
        commands.extend(
            self.nodes
                .chunks(batch_size)
                .map(|ids| Command::NodeDeregister {
                    node_ids: ids.to_vec(),
                }),
        );
        commands.extend(
            self.acl_tokens
                .chunks(batch_size)
                .map(|ids| Command::AclTokenDelete {
                    accessor_ids: ids.to_vec(),
                }),
        );
        commands
    }
}

/// An allocation may go once its client is done with it and nothing needs
/// it any more: its job is gone, stopped or dead, the servers stopped it,
/// or it did not fail (a failed allocation the servers still want is what
/// rescheduling decisions are made from).
fn alloc_collectable(alloc: &Allocation, job: Option<&Job>) -> bool {
    if !alloc.client_status.is_terminal() {
        return false;
    }
    if job.is_none_or(|j| j.stop || job_is_dead(j)) {
        return true;
    }
    alloc.server_terminal() || alloc.client_status != ClientStatus::Failed
}

fn job_is_dead(job: &Job) -> bool {
    job.status == job_status::DEAD
}

fn plan_gc(snap: &StateSnapshot, cutoffs: &Cutoffs) -> GcPlan {
    let mut plan = GcPlan::default();
    let mut planned: HashSet<EvalId> = HashSet::new();
    for job in snap.jobs().filter(|j| job_is_dead(j)) {
        if let Some((evals, orphans)) = collectable_job(snap, job, cutoffs.job) {
            planned.extend(evals.iter().map(|(id, _)| *id));
            plan.evals.extend(evals);
            plan.orphan_allocs.extend(orphans);
            plan.jobs.push((job.namespace.clone(), job.id.clone()));
        }
    }
    // By job, in order (the plan's order is the evaluations' within a job).
    let mut candidates: BTreeMap<(&str, &str), Vec<&Evaluation>> = BTreeMap::new();
    for eval in snap.evals() {
        if planned.contains(&eval.id) || !eval.is_terminal() || eval.modify_time > cutoffs.eval {
            continue;
        }
        // A dead job's evaluations go with the job, after the job
        // threshold: their times are what dates the job's end.
        if snap
            .job(&eval.namespace, &eval.job_id)
            .is_some_and(|j| job_is_dead(j))
        {
            continue;
        }
        candidates
            .entry((&eval.namespace, &eval.job_id))
            .or_default()
            .push(eval);
    }
    for ((namespace, job_id), evals) in candidates {
        plan.evals.extend(collectable_evals(
            snap,
            namespace,
            job_id,
            &evals,
            cutoffs.eval,
        ));
    }
    for node in snap.nodes() {
        let old_and_down =
            node.status == NodeStatus::Down && node.status_updated_at <= cutoffs.node_seconds;
        if old_and_down && snap.allocs_by_node(&node.id).all(|a| a.is_terminal()) {
            plan.nodes.push(node.id);
        }
    }
    plan.deployments = collectable_deployments(snap, cutoffs.deployment_index);
    plan.acl_tokens = snap
        .acl_tokens()
        .filter(|t| t.is_expired(cutoffs.token_expired))
        .map(|t| t.accessor_id.clone())
        .collect();
    plan
}

/// Terminal deployments last changed at or before `cutoff` (an index) that
/// no live allocation refers to. A dead job's deployments go with the job.
fn collectable_deployments(snap: &StateSnapshot, cutoff: u64) -> Vec<DeploymentId> {
    snap.deployments()
        .filter(|d| !d.active() && d.modify_index <= cutoff)
        .filter(|d| {
            snap.allocs_by_deployment(&d.id)
                .iter()
                .all(|a| a.is_terminal())
        })
        .map(|d| d.id)
        .collect()
}

/// Of one job's terminal evaluations, those that may go, each with its
/// allocations (all of which may go with it). The job's allocations are
/// read once for all of its evaluations (there is no index by evaluation).
fn collectable_evals(
    snap: &StateSnapshot,
    namespace: &str,
    job_id: &str,
    evals: &[&Evaluation],
    cutoff: i64,
) -> EvalsWithAllocs {
    let job = snap.job(namespace, job_id);
    let batch_kept = job.is_some_and(|j| !j.stop && !job_is_dead(j));
    // `None`: an allocation of the evaluation must stay, and so must it.
    let mut by_eval: HashMap<EvalId, Option<Vec<AllocId>>> = evals
        .iter()
        .filter(|e| !(e.eval_type == JobType::Batch && batch_kept))
        .map(|e| (e.id, Some(Vec::new())))
        .collect();
    for alloc in snap.allocs_by_job(namespace, job_id) {
        let Some(entry) = by_eval.get_mut(&alloc.eval_id) else {
            continue;
        };
        let collectable =
            alloc_collectable(alloc, job.map(|j| &**j)) && alloc.modify_time <= cutoff;
        match entry {
            Some(ids) if collectable => ids.push(alloc.id),
            _ => *entry = None,
        }
    }
    let mut collectable: EvalsWithAllocs = by_eval
        .into_iter()
        .filter_map(|(id, allocs)| Some((id, allocs?)))
        .collect();
    collectable.sort_unstable_by_key(|(id, _)| *id);
    collectable
}

type EvalsWithAllocs = Vec<(EvalId, Vec<AllocId>)>;

/// A dead job's evaluations with their allocations (and allocations whose
/// evaluation is already gone), when the job has been quiet since `cutoff`
/// and nothing of it is live.
fn collectable_job(
    snap: &StateSnapshot,
    job: &Job,
    cutoff: i64,
) -> Option<(EvalsWithAllocs, Vec<AllocId>)> {
    if job.submit_time > cutoff {
        return None;
    }
    let mut by_eval: HashMap<EvalId, Vec<AllocId>> = HashMap::new();
    for eval in snap.evals_by_job(&job.namespace, &job.id) {
        if !eval.is_terminal() || eval.modify_time > cutoff {
            return None;
        }
        by_eval.insert(eval.id, Vec::new());
    }
    let mut orphans = Vec::new();
    for alloc in snap.allocs_by_job(&job.namespace, &job.id) {
        if !alloc_collectable(alloc, Some(job)) || alloc.modify_time > cutoff {
            return None;
        }
        match by_eval.get_mut(&alloc.eval_id) {
            Some(allocs) => allocs.push(alloc.id),
            None => orphans.push(alloc.id),
        }
    }
    Some((by_eval.into_iter().collect(), orphans))
}

impl Actor for GarbageCollector {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.leader.load(Ordering::SeqCst) {
            self.start_ticker(ctx);
        }
    }
}

impl Handler<RunGc> for GarbageCollector {
    type Result = ResponseActFuture<Self, Result<GcReport, GcError>>;

    fn handle(&mut self, _msg: RunGc, _ctx: &mut Context<Self>) -> Self::Result {
        self.run_and_reply(false)
    }
}

impl Handler<ForceGc> for GarbageCollector {
    type Result = ResponseActFuture<Self, Result<GcReport, GcError>>;

    fn handle(&mut self, _msg: ForceGc, _ctx: &mut Context<Self>) -> Self::Result {
        self.run_and_reply(true)
    }
}

impl Handler<SetLeader> for GarbageCollector {
    type Result = ();

    fn handle(&mut self, msg: SetLeader, ctx: &mut Context<Self>) {
        self.set_leader(msg.0, ctx);
    }
}

impl Handler<StopGc> for GarbageCollector {
    type Result = ();

    fn handle(&mut self, _msg: StopGc, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
