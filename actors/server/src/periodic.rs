//! The PeriodicLauncher actor: launches the children of `periodic` jobs on
//! their cron schedules, as Nomad's leader does.
//!
//! A periodic job is a template: it is never scheduled itself. The launcher
//! tracks every stored job whose periodic config is enabled (restored from
//! a snapshot at start, then kept current from the store's change feed),
//! computes each one's next launch in the job's time zone, and sleeps until
//! the earliest. At a launch it registers a child, an ordinary batch (or
//! sysbatch) job with ID `<parent>/periodic-<unix seconds>`, together with
//! its `periodic-job` evaluation, in one command.
//!
//! The child's ID is derived from the launch instant and registered only if
//! absent, so a launch is never made twice for the same instant, whatever
//! restarts or forced launches happen around it. Time comes from an
//! injected clock so tests can drive it.
//!
//! Launching is a leader duty ([`SetLeader`]): a follower tracks no job,
//! runs no timer and refuses launches; on gaining the lead the launcher
//! rebuilds its schedule from the state and catches up as at start.

use crate::feed::FeedFollower;
use actix::prelude::*;
use chrono::{DateTime, Utc};
use herder::state::{Command, JobKey, Row, RowKey, StateSnapshot, StateStore, StoreError};
use herder::structs::job::job_status;
use herder::structs::{EvalId, Evaluation, Job, TriggeredBy};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Where the leader's duties read the time.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The wall clock.
pub fn system_clock() -> Clock {
    Arc::new(Utc::now)
}

/// The longest the launcher sleeps before looking at the clock again, so a
/// wall-clock jump (NTP step, suspended VM) delays a launch by at most this.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Why a periodic request failed.
#[derive(Debug, thiserror::Error)]
pub enum PeriodicError {
    #[error("job {0:?} not found")]
    NotFound(String),
    #[error("job {0:?} is not an active periodic job")]
    NotPeriodic(String),
    #[error("job {0:?} was already launched at this instant")]
    AlreadyLaunched(String),
    #[error("periodic spec of job {job:?}: {reason}")]
    Spec { job: String, reason: String },
    #[error("this server is not the leader: periodic jobs are launched by the leader")]
    NotLeader,
    #[error("state store: {0}")]
    Store(#[from] StoreError),
}

/// Launches every job whose next launch is due by the clock, then sleeps
/// until the next one. Answers the IDs of the children registered, once
/// they are durable. The actor sends itself this on its timer.
#[derive(Message)]
#[rtype(result = "Result<Vec<String>, PeriodicError>")]
pub struct Tick;

/// `/v1/job/:id/periodic/force`: launch a child now, whatever the schedule
/// and `prohibit_overlap` say.
#[derive(Message)]
#[rtype(result = "Result<Launched, PeriodicError>")]
pub struct ForceLaunch {
    pub namespace: String,
    pub job_id: String,
}

/// A registered child.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Launched {
    pub job_id: String,
    pub eval_id: EvalId,
    /// The index the child and its evaluation were written at.
    pub index: u64,
}

/// The tracked jobs and their next launch (`None`: the spec has no further
/// instant), keyed by (namespace, job ID).
#[derive(Message)]
#[rtype(result = "BTreeMap<(String, String), Option<DateTime<Utc>>>")]
pub struct NextLaunches;

/// Stop launching (server shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopLauncher;

/// Leadership gained (`true`: track the periodic jobs of the current state,
/// launch what was missed, arm the timer) or lost (`false`: forget them and
/// stop the timer).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetLeader(pub bool);

struct Tracked {
    job: Arc<Job>,
    next: Option<DateTime<Utc>>,
}

pub struct PeriodicLauncher {
    store: StateStore,
    clock: Clock,
    tracked: HashMap<JobKey, Tracked>,
    /// The last index of the change feed taken into account.
    last_index: u64,
    timer: Option<SpawnHandle>,
    stopping: bool,
    leader: bool,
}

/// A job the launcher must follow: periodic, enabled, not stopped, and not
/// parameterized (a parameterized periodic job is dispatched, not launched).
fn is_active_periodic(job: &Job) -> bool {
    job.periodic.as_ref().is_some_and(|p| p.enabled) && !job.stop && !job.is_parameterized()
}

/// The ID of the child launched at `at`.
pub fn child_id(parent_id: &str, at: DateTime<Utc>) -> String {
    format!("{parent_id}/periodic-{}", at.timestamp())
}

fn unix_nanos(t: DateTime<Utc>) -> i64 {
    t.timestamp_nanos_opt().unwrap_or(i64::MAX)
}

impl PeriodicLauncher {
    pub fn new(store: StateStore, clock: Clock) -> Self {
        PeriodicLauncher {
            store,
            clock,
            tracked: HashMap::new(),
            last_index: 0,
            timer: None,
            stopping: false,
            leader: true,
        }
    }

    /// Whether the launcher starts as the leader's (the default) or a
    /// follower's, which launches nothing until [`SetLeader`]`(true)`.
    pub fn with_leadership(mut self, leader: bool) -> Self {
        self.leader = leader;
        self
    }

    /// What the leader does at start and on gaining the lead.
    fn take_lead(&mut self, ctx: &mut Context<Self>) {
        self.resync(&self.store.snapshot());
        self.catch_up(ctx);
        self.arm(ctx);
    }

    fn set_leader(&mut self, leader: bool, ctx: &mut Context<Self>) {
        if leader == self.leader {
            return;
        }
        self.leader = leader;
        if leader {
            self.take_lead(ctx);
        } else {
            if let Some(handle) = self.timer.take() {
                ctx.cancel_future(handle);
            }
            self.tracked.clear();
            tracing::info!("periodic launches stopped: not the leader");
        }
    }

    /// Starts (or updates) tracking of `job`, or stops it when the job is
    /// no longer an active periodic job.
    fn track(&mut self, job: &Arc<Job>, now: DateTime<Utc>) {
        let key = JobKey::of_job(job);
        if !is_active_periodic(job) {
            self.tracked.remove(&key);
            return;
        }
        // A status or index change keeps the computed launch: recomputing
        // from `now` would skip a launch that is due but not yet made.
        if let Some(t) = self.tracked.get_mut(&key) {
            if t.job.periodic == job.periodic {
                t.job = job.clone();
                return;
            }
        }
        let next = next_launch(job, now);
        self.tracked.insert(
            key,
            Tracked {
                job: job.clone(),
                next,
            },
        );
    }

    /// Rebuilds the tracked set from a full snapshot (start, or after
    /// falling behind the change feed).
    fn resync(&mut self, snap: &StateSnapshot) {
        self.last_index = snap.latest_index();
        if !self.leader {
            return;
        }
        let now = (self.clock)();
        let active: Vec<Arc<Job>> = snap
            .jobs()
            .filter(|j| is_active_periodic(j))
            .cloned()
            .collect();
        self.tracked.retain(|k, _| {
            snap.job(&k.namespace, &k.id)
                .is_some_and(|j| is_active_periodic(j))
        });
        for job in &active {
            self.track(job, now);
        }
        tracing::info!(jobs = self.tracked.len(), "periodic jobs tracked");
    }

    /// After a restart: a job whose schedule came due since its last
    /// child while no launcher ran is launched once now, as Nomad's leader
    /// does on restore; older missed instants are not replayed.
    fn catch_up(&mut self, ctx: &mut Context<Self>) {
        let snap = self.store.snapshot();
        let now = (self.clock)();
        let last = last_launches(&snap);
        let mut pending = Vec::new();
        for (key, tracked) in &self.tracked {
            let Some(last) = last.get(key) else { continue };
            let missed = next_launch(&tracked.job, *last).is_some_and(|t| t < now);
            if missed {
                tracing::info!(job_id = %key.id, last_launch = %last, "periodic launch missed while no leader ran; launching now");
                pending.extend(self.launch(&snap, &tracked.job, now, now, true));
            }
        }
        ctx.spawn(fut::wrap_future(async move {
            for (child, _, done) in pending {
                if let Ok(Err(e)) = done.await {
                    tracing::error!(job_id = %child, error = %e, "periodic catch-up launch failed");
                }
            }
        }));
    }

    fn apply_changes(&mut self, changes: &herder::state::AppliedChanges) -> bool {
        if changes.index <= self.last_index {
            return false;
        }
        self.last_index = changes.index;
        if !self.leader {
            return false;
        }
        let now = (self.clock)();
        let mut changed = false;
        for change in &changes.changes {
            let RowKey::Job(key) = &change.key else {
                continue;
            };
            changed = true;
            match &change.row {
                Some(Row::Job(job)) => self.track(job, now),
                _ => {
                    self.tracked.remove(key);
                }
            }
        }
        changed
    }

    /// Sleeps until the earliest next launch (at most `MAX_SLEEP`).
    fn arm(&mut self, ctx: &mut Context<Self>) {
        if let Some(handle) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        if self.stopping || !self.leader {
            return;
        }
        let Some(earliest) = self.tracked.values().filter_map(|t| t.next).min() else {
            return;
        };
        let delay = (earliest - (self.clock)())
            .to_std()
            .unwrap_or(Duration::ZERO)
            .min(MAX_SLEEP);
        self.timer = Some(ctx.run_later(delay, |act, ctx| {
            act.timer = None;
            let done = act.tick(ctx);
            ctx.spawn(fut::wrap_future(async move {
                if let Err(e) = done.await {
                    tracing::error!(error = %e, "periodic launch failed");
                }
            }));
        }));
    }

    /// Launches what is due and re-arms; the future resolves with the
    /// children registered.
    fn tick(
        &mut self,
        ctx: &mut Context<Self>,
    ) -> impl std::future::Future<Output = Result<Vec<String>, PeriodicError>> {
        let now = (self.clock)();
        let snap = self.store.snapshot();
        let mut pending = Vec::new();
        let mut due: Vec<JobKey> = self
            .tracked
            .iter()
            .filter(|(_, t)| t.next.is_some_and(|n| n <= now))
            .map(|(k, _)| k.clone())
            .collect();
        due.sort();
        for key in due {
            let Some(tracked) = self.tracked.get_mut(&key) else {
                continue;
            };
            let Some(at) = tracked.next else { continue };
            // Missed instants (the clock jumped) collapse into this one
            // launch; the next is the first instant after now.
            tracked.next = next_launch(&tracked.job, at.max(now));
            let job = tracked.job.clone();
            if let Some(launch) = self.launch(&snap, &job, at, now, true) {
                pending.push(launch);
            }
        }
        self.arm(ctx);
        async move {
            let mut launched = Vec::new();
            for (child, _, done) in pending {
                match done.await {
                    Ok(Ok(_)) => launched.push(child),
                    Ok(Err(StoreError::Rejected(e))) => {
                        // Registered by a concurrent launch for the same
                        // instant: nothing to do.
                        tracing::debug!(job_id = %child, error = %e, "periodic child not registered");
                    }
                    Ok(Err(e)) => return Err(PeriodicError::Store(e)),
                    Err(_) => return Err(PeriodicError::Store(StoreError::Closed)),
                }
            }
            Ok(launched)
        }
    }

    /// Submits the child of `parent` for the instant `at`, unless it exists
    /// or (when `check_overlap`) a previous child still runs.
    fn launch(
        &self,
        snap: &StateSnapshot,
        parent: &Job,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
        check_overlap: bool,
    ) -> Option<PendingLaunch> {
        let id = child_id(&parent.id, at);
        if snap.job(&parent.namespace, &id).is_some() {
            tracing::debug!(job_id = %id, "periodic child already launched");
            return None;
        }
        let prohibit = parent.periodic.as_ref().is_some_and(|p| p.prohibit_overlap);
        if check_overlap && prohibit && has_running_child(snap, parent) {
            tracing::info!(job_id = %parent.id, launch = %at, "previous child still running; skipping launch (prohibit_overlap)");
            return None;
        }
        let child = derive_child(parent, id.clone(), now);
        let eval = Evaluation::for_job(&child, TriggeredBy::PeriodicJob, unix_nanos(now));
        let eval_id = eval.id;
        tracing::info!(job_id = %id, eval_id = %eval_id, "launching periodic job");
        metrics::counter!("herder.periodic.launches").increment(1);
        let done = self.store.submit_as_leader(Command::JobRegister {
            job: Arc::new(child),
            eval: Some(eval),
            enforce_index: Some(0),
        });
        Some((id, eval_id, done))
    }

    fn force(&self, msg: &ForceLaunch) -> Result<PendingLaunch, PeriodicError> {
        if !self.leader {
            return Err(PeriodicError::NotLeader);
        }
        let snap = self.store.snapshot();
        let parent = snap
            .job(&msg.namespace, &msg.job_id)
            .ok_or_else(|| PeriodicError::NotFound(msg.job_id.clone()))?;
        if !is_active_periodic(parent) {
            return Err(PeriodicError::NotPeriodic(msg.job_id.clone()));
        }
        let now = (self.clock)();
        self.launch(&snap, parent, now, now, false)
            .ok_or_else(|| PeriodicError::AlreadyLaunched(child_id(&parent.id, now)))
    }
}

type PendingLaunch = (
    String,
    EvalId,
    futures::channel::oneshot::Receiver<Result<herder::state::ApplyOutcome, StoreError>>,
);

fn next_launch(job: &Job, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let periodic = job.periodic.as_ref()?;
    match periodic.next_launch(after) {
        Ok(next) => next,
        Err(reason) => {
            // Validation rejects bad specs at registration; a stored one
            // that no longer parses is logged and never launched.
            tracing::error!(job_id = %job.id, %reason, "periodic spec unusable");
            None
        }
    }
}

/// The latest launch instant of every parent that has children, read
/// back from the children's IDs.
fn last_launches(snap: &StateSnapshot) -> HashMap<JobKey, DateTime<Utc>> {
    let mut last: HashMap<JobKey, DateTime<Utc>> = HashMap::new();
    for job in snap.jobs().filter(|j| !j.parent_id.is_empty()) {
        let Some(at) = launch_time(&job.id, &job.parent_id) else {
            continue;
        };
        let slot = last
            .entry(JobKey::new(&job.namespace, &job.parent_id))
            .or_insert(at);
        *slot = (*slot).max(at);
    }
    last
}

/// The launch instant encoded in a periodic child's ID.
fn launch_time(child_id: &str, parent_id: &str) -> Option<DateTime<Utc>> {
    let secs = child_id
        .strip_prefix(parent_id)?
        .strip_prefix("/periodic-")?
        .parse::<i64>()
        .ok()?;
    DateTime::from_timestamp(secs, 0)
}

/// A child still running: launched from `parent` and not dead yet.
fn has_running_child(snap: &StateSnapshot, parent: &Job) -> bool {
    snap.jobs().any(|j| {
        j.parent_id == parent.id && j.namespace == parent.namespace && j.status != job_status::DEAD
    })
}

/// The child: the parent's spec under its own ID, no longer periodic
/// (`Job::derive_child`, shared with dispatch).
fn derive_child(parent: &Job, id: String, now: DateTime<Utc>) -> Job {
    let mut child = parent.derive_child(id, unix_nanos(now));
    child.periodic = None;
    child
}

impl Actor for PeriodicLauncher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // A follower only takes the state's index, to follow from there.
        self.resync(&self.store.snapshot());
        if self.leader {
            self.catch_up(ctx);
        }
        self.follow(ctx);
        self.arm(ctx);
    }
}

impl FeedFollower for PeriodicLauncher {
    const NAME: &'static str = "the periodic launcher";

    fn store(&self) -> &StateStore {
        &self.store
    }

    fn last_index(&self) -> u64 {
        self.last_index
    }

    fn stop_requested(&self) -> bool {
        self.stopping
    }

    fn resync(&mut self, _ctx: &mut Context<Self>, snap: &StateSnapshot) {
        PeriodicLauncher::resync(self, snap);
    }

    fn on_changes(&mut self, _ctx: &mut Context<Self>, changes: &herder::state::AppliedChanges) {
        self.apply_changes(changes);
    }
}

impl StreamHandler<Arc<herder::state::AppliedChanges>> for PeriodicLauncher {
    fn handle(&mut self, changes: Arc<herder::state::AppliedChanges>, ctx: &mut Context<Self>) {
        if self.apply_changes(&changes) {
            self.arm(ctx);
        }
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        if self.feed_ended(ctx) {
            self.arm(ctx);
        }
    }
}

impl Handler<Tick> for PeriodicLauncher {
    type Result = ResponseFuture<Result<Vec<String>, PeriodicError>>;

    fn handle(&mut self, _msg: Tick, ctx: &mut Context<Self>) -> Self::Result {
        if !self.leader {
            return Box::pin(async { Err(PeriodicError::NotLeader) });
        }
        Box::pin(self.tick(ctx))
    }
}

impl Handler<ForceLaunch> for PeriodicLauncher {
    type Result = ResponseFuture<Result<Launched, PeriodicError>>;

    fn handle(&mut self, msg: ForceLaunch, _ctx: &mut Context<Self>) -> Self::Result {
        let forced = self.force(&msg);
        Box::pin(async move {
            let (job_id, eval_id, done) = forced?;
            match done.await {
                Ok(Ok(outcome)) => Ok(Launched {
                    job_id,
                    eval_id,
                    index: outcome.index,
                }),
                Ok(Err(StoreError::Rejected(_))) => Err(PeriodicError::AlreadyLaunched(job_id)),
                Ok(Err(e)) => Err(PeriodicError::Store(e)),
                Err(_) => Err(PeriodicError::Store(StoreError::Closed)),
            }
        })
    }
}

impl Handler<NextLaunches> for PeriodicLauncher {
    type Result = MessageResult<NextLaunches>;

    fn handle(&mut self, _msg: NextLaunches, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(
            self.tracked
                .iter()
                .map(|(k, t)| ((k.namespace.to_string(), k.id.to_string()), t.next))
                .collect(),
        )
    }
}

impl Handler<StopLauncher> for PeriodicLauncher {
    type Result = ();

    fn handle(&mut self, _msg: StopLauncher, ctx: &mut Context<Self>) {
        self.stopping = true;
        ctx.stop();
    }
}

impl Handler<SetLeader> for PeriodicLauncher {
    type Result = ();

    fn handle(&mut self, msg: SetLeader, ctx: &mut Context<Self>) {
        self.set_leader(msg.0, ctx);
    }
}
