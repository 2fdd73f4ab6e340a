//! The allocation runner: one actor per allocation placed on this node.
//!
//! It builds the allocation directory, starts one [`TaskRunner`] per task in
//! lifecycle order (prestart, then main tasks with their sidecars, poststart
//! once the main tasks run, poststop after they end), kills the rest when a
//! task fails or a leader ends, and turns the tasks' states into the
//! allocation's client status, reported as an [`AllocUpdate`] after every
//! change.
//!
//! `Stop` kills every task (the servers want the allocation gone);
//! `Shutdown` detaches from them (the client is going away and running
//! tasks stay up); [`AllocRunner::restore`] re-attaches after a restart.
//! [`ControlTasks`] carries a user's restart or signal to the task runners
//! of the tasks that run.

#[path = "alloc_runner_health.rs"]
pub mod health;

use crate::driver::{DriverSet, ExecRequest, ExecSession, TaskConfig, TaskMount};
use crate::restart::RestartTracker;
use crate::task_dir::{build_task_env, interpolate, interpolate_config, AllocDir, EnvInputs};
use crate::task_files::TaskFiles;
use crate::task_runner::{
    task_state, DetachTask, ExecInTask, KillTask, RestartTask, SignalTask, StartMode, TaskRunner,
    TaskRunnerConfig, TaskStateChanged,
};
use crate::template::funcs::ServiceCatalog;
use crate::template::TemplateSet;
use crate::{AllocControl, AllocUpdate, ControlError};
use actix::prelude::*;
use herder::structs::alloc::task_event;
use herder::structs::{
    Allocation, ClientStatus, Job, Node, RestartPolicy, Task, TaskEvent, TaskGroup, TaskState,
    VecMap,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The servers want the allocation stopped: kill its tasks.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct Stop {
    pub reason: String,
}

/// The client is shutting down: stop watching the tasks, leave them running
/// (their handles are on disk). Resolves once every task runner let go.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// The servers sent a newer version of the allocation (with its job, when
/// they have it); a desired stop or evict kills its tasks. An in-place
/// update to a new job version changes its services and checks; its
/// running tasks stay as they are.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct UpdateAlloc(pub Allocation, pub Option<Arc<Job>>);

/// The allocation is gone from the servers: kill what still runs, then
/// delete its directory and end the runner.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct Destroy;

/// The allocation's current client state.
#[derive(Clone, Debug, Message)]
#[rtype(result = "AllocUpdate")]
pub struct GetAllocState;

/// A user's restart or signal for the task named, or for every task that
/// runs. Resolves once each task runner has answered (a restarted task's
/// old process is gone); with several tasks, the first failure is the
/// answer.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<(), ControlError>")]
pub struct ControlTasks(pub AllocControl);

/// `alloc exec` of a command beside the running task named.
#[derive(Debug, Message)]
#[rtype(result = "Result<ExecSession, ControlError>")]
pub struct ExecTask {
    pub task: String,
    pub request: ExecRequest,
}

/// The `Restart Signaled` reason, as Nomad 1.1 words it.
pub const USER_RESTART_REASON: &str = "User requested restart";

/// Everything an allocation runner needs.
pub struct AllocRunnerConfig {
    /// The allocation as the servers sent it (on restore: as last known,
    /// with its task states).
    pub alloc: Allocation,
    pub job: Arc<Job>,
    pub node: Arc<Node>,
    pub data_dir: PathBuf,
    pub drivers: DriverSet,
    /// The environment tasks inherit (see `task_dir::host_env`).
    pub host_env: Arc<BTreeMap<String, String>>,
    pub updates: Recipient<AllocUpdate>,
    /// For simulated nodes: no directories, nothing persisted. Tasks cannot
    /// be restored after a restart, but a runner costs no disk I/O.
    pub ephemeral: bool,
    /// Where templates read `nomadService` from.
    pub catalog: ServiceCatalog,
}

/// When a task runs relative to the group's main tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Prestart,
    Main,
    Poststart,
    Poststop,
}

struct TaskSlot {
    task: Task,
    phase: Phase,
    sidecar: bool,
    state: TaskState,
    runner: Option<Addr<TaskRunner>>,
    launched: bool,
    lost: bool,
}

impl TaskSlot {
    fn dead(&self) -> bool {
        self.state.state == task_state::DEAD
    }
    fn succeeded(&self) -> bool {
        self.dead() && !self.state.failed
    }
    fn running(&self) -> bool {
        self.state.state == task_state::RUNNING
    }
}

pub struct AllocRunner {
    config: AllocRunnerConfig,
    alloc_dir: AllocDir,
    group: Option<TaskGroup>,
    slots: Vec<TaskSlot>,
    restoring: bool,
    stopping: bool,
    /// A kill of every task waits for the leader's to finish (Nomad kills
    /// the leader first): the reason and the event to give the others.
    kill_rest: Option<(String, Option<TaskEvent>)>,
    node_failure: bool,
    destroy_when_dead: bool,
    last_sent: Option<AllocUpdate>,
    /// What the last persisted copy said, so that only changes of status
    /// (not every new event) are written.
    last_persisted: Option<PersistKey>,
    /// Services, checks and health (`alloc_runner_health.rs`).
    health: HealthState,
}

/// What the runner keeps for its services, checks and health (handled in
/// `alloc_runner_health.rs`).
#[derive(Default)]
struct HealthState {
    services: crate::alloc_services::AllocServices,
    watcher: Option<Addr<crate::check_watcher::CheckWatcher>>,
    results: Vec<crate::checks::CheckResult>,
    tracker: Option<crate::health_watcher::HealthTracker>,
    timer: Option<SpawnHandle>,
}

/// Status, node failure, each task's state and failure, decided health.
type PersistKey = (ClientStatus, bool, Vec<(String, bool)>, Option<bool>);

/// The file an allocation and its job are kept in, so a restarted client
/// can restore it without asking the servers.
pub const ALLOC_STATE_FILE: &str = ".herder-alloc.json";

#[derive(serde::Serialize, serde::Deserialize)]
struct PersistedAlloc {
    alloc: Allocation,
    job: Job,
}

/// The allocations persisted under `data_dir` by earlier runners, with their
/// jobs and last known task states: what `AllocRunner::restore` needs.
pub fn persisted_allocs(data_dir: &std::path::Path) -> Vec<(Allocation, Arc<Job>)> {
    let Ok(entries) = std::fs::read_dir(data_dir.join("alloc")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path().join(ALLOC_STATE_FILE);
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        match serde_json::from_slice::<PersistedAlloc>(&bytes) {
            Ok(p) => out.push((p.alloc, Arc::new(p.job))),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unreadable allocation state")
            }
        }
    }
    out
}

/// One allocation as its runner last persisted it, with its job; `None`
/// when this node keeps no such allocation (never ran here, or its
/// directory was removed). Readers outside the runner (the logs API) use
/// it to learn the allocation's task states without asking the runner.
pub fn persisted_alloc(
    data_dir: &std::path::Path,
    id: &herder::structs::AllocId,
) -> std::io::Result<Option<(Allocation, Job)>> {
    let path = AllocDir::new(data_dir, id).root.join(ALLOC_STATE_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let p: PersistedAlloc = serde_json::from_slice(&bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok(Some((p.alloc, p.job)))
}

impl AllocRunner {
    /// A runner for a newly placed allocation.
    pub fn new(config: AllocRunnerConfig) -> Self {
        Self::build(config, false)
    }

    /// A runner for an allocation this node ran before a client restart:
    /// tasks with a live handle are re-attached, running ones that are gone
    /// are reported lost, finished ones stay finished.
    pub fn restore(config: AllocRunnerConfig) -> Self {
        Self::build(config, true)
    }

    fn build(config: AllocRunnerConfig, restoring: bool) -> Self {
        let alloc_dir = AllocDir::new(&config.data_dir, &config.alloc.id);
        let group = config
            .job
            .lookup_task_group(&config.alloc.task_group)
            .cloned();
        let slots = group
            .iter()
            .flat_map(|g| g.tasks.iter())
            .map(|task| {
                let (phase, sidecar) = phase_of(task);
                let state = config
                    .alloc
                    .task_states
                    .get(&task.name)
                    .filter(|_| restoring)
                    .cloned()
                    .unwrap_or_else(|| TaskState {
                        state: task_state::PENDING.into(),
                        ..Default::default()
                    });
                TaskSlot {
                    task: task.clone(),
                    phase,
                    sidecar,
                    state,
                    runner: None,
                    launched: false,
                    lost: false,
                }
            })
            .collect();
        AllocRunner {
            config,
            alloc_dir,
            group,
            slots,
            restoring,
            stopping: false,
            kill_rest: None,
            node_failure: false,
            destroy_when_dead: false,
            last_sent: None,
            last_persisted: None,
            health: Default::default(),
        }
    }

    pub fn alloc_dir(&self) -> &AllocDir {
        &self.alloc_dir
    }

    fn current(&self) -> AllocUpdate {
        let mut task_states = VecMap::new();
        for s in &self.slots {
            task_states.insert(s.task.name.clone(), s.state.clone());
        }
        let (client_status, client_description) = if self.group.is_none() {
            (
                ClientStatus::Failed,
                format!(
                    "task group {:?} not found in job",
                    self.config.alloc.task_group
                ),
            )
        } else if self.slots.iter().any(|s| s.lost) {
            (
                ClientStatus::Lost,
                "Tasks lost across a client restart".to_string(),
            )
        } else {
            client_status(self.slots.iter().map(|s| &s.state))
        };
        AllocUpdate {
            alloc_id: self.config.alloc.id,
            client_status,
            client_description,
            task_states,
            node_failure: self.node_failure,
            deployment_status: self.reported_health(),
            services: self.wanted_services(),
        }
    }

    /// Sends the current state unless nothing changed since the last one.
    fn publish(&mut self) {
        let update = self.current();
        if self.last_sent.as_ref() != Some(&update) {
            self.persist(&update);
            self.config.updates.do_send(update.clone());
            self.last_sent = Some(update);
        }
    }

    /// Keeps the allocation, its job and its task states on disk (written
    /// aside and renamed, so a crash leaves the old or the new copy).
    fn persist(&mut self, update: &AllocUpdate) {
        if self.config.ephemeral || !self.alloc_dir.root.is_dir() {
            return;
        }
        let key: PersistKey = (
            update.client_status,
            update.node_failure,
            update
                .task_states
                .iter()
                .map(|(_, s)| (s.state.clone(), s.failed))
                .collect(),
            update.deployment_status.as_ref().and_then(|s| s.healthy),
        );
        if self.last_persisted.as_ref() == Some(&key) {
            return;
        }
        self.last_persisted = Some(key);
        let mut alloc = self.config.alloc.clone();
        alloc.client_status = update.client_status;
        alloc.client_description = update.client_description.as_str().into();
        alloc.task_states = update.task_states.clone().into();
        alloc.node_failure = update.node_failure;
        let persisted = PersistedAlloc {
            alloc,
            job: (*self.config.job).clone(),
        };
        let path = self.alloc_dir.root.join(ALLOC_STATE_FILE);
        let tmp = path.with_extension("tmp");
        let written = serde_json::to_vec(&persisted)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            tracing::warn!(alloc = %self.config.alloc.id, error = %e, "cannot persist the allocation state");
        }
    }

    fn all_dead(&self) -> bool {
        self.slots.iter().all(TaskSlot::dead)
    }

    fn destroy_if_done(&mut self, ctx: &mut Context<Self>) {
        if self.destroy_when_dead && self.all_dead() {
            if self.config.ephemeral {
                return ctx.stop();
            }
            if let Err(e) = self.alloc_dir.destroy() {
                tracing::warn!(alloc = %self.config.alloc.id, error = %e, "removing the allocation directory");
            }
            ctx.stop();
        }
    }

    fn launch(&mut self, index: usize, ctx: &mut Context<Self>) {
        let Some(group) = self.group.as_ref() else {
            return;
        };
        let slot = &self.slots[index];
        if slot.launched {
            return;
        }
        let mode = if self.restoring {
            StartMode::Restore {
                previous: slot.state.clone(),
            }
        } else {
            StartMode::Fresh
        };
        let runner_config = self.task_runner_config(group, &slot.task, mode, ctx);
        let slot = &mut self.slots[index];
        slot.launched = true;
        slot.runner = Some(TaskRunner::new(runner_config).start());
    }

    fn task_runner_config(
        &self,
        group: &TaskGroup,
        task: &Task,
        mode: StartMode,
        ctx: &mut Context<Self>,
    ) -> TaskRunnerConfig {
        let c = &self.config;
        let env = build_task_env(&EnvInputs {
            alloc: &c.alloc,
            job: &c.job,
            group,
            task,
            node: &c.node,
            alloc_dir: &self.alloc_dir,
            host_env: &c.host_env,
        });
        let allocated = c.alloc.allocated_resources.tasks.get(&task.name);
        let task_config = TaskConfig {
            alloc_id: c.alloc.id,
            task_name: task.name.clone(),
            config: interpolate_config(&task.config, &env, &c.node),
            task_dir: self.alloc_dir.task_dir(&task.name),
            log_dir: self.alloc_dir.log_dir(),
            log_config: task.log_config.clone().unwrap_or_default(),
            cpu_mhz: allocated.map_or(task.resources.cpu, |r| r.cpu.cpu_shares),
            memory_mb: allocated.map_or(task.resources.memory_mb, |r| r.memory.memory_mb),
            memory_max_mb: allocated
                .map_or(task.resources.memory_max_mb, |r| r.memory.memory_max_mb),
            user: interpolate(&task.user, &env, &c.node),
            shared_dir: self.alloc_dir.shared_dir(),
            volume_mounts: host_volume_mounts(group, task, &c.node),
            env,
        };
        let policy = task
            .restart_policy
            .clone()
            .or_else(|| group.restart_policy.clone())
            .unwrap_or_else(|| RestartPolicy::default_for(&c.job.job_type));
        TaskRunnerConfig {
            task_config,
            driver: c.drivers.get(&task.driver),
            driver_name: task.driver.clone(),
            restart: RestartTracker::new(policy, runs_to_completion(&c.job, task), Instant::now()),
            kill_timeout: if task.kill_timeout.is_zero() {
                Duration::from_secs(5)
            } else {
                task.kill_timeout
            },
            kill_signal: task.kill_signal.clone(),
            mode,
            parent: ctx.address().recipient(),
            ephemeral: c.ephemeral,
            files: self.task_files(task),
        }
    }

    /// A task's artifacts and templates, if it has any and runs on disk.
    fn task_files(&self, task: &Task) -> Option<TaskFiles> {
        let c = &self.config;
        if c.ephemeral || (task.templates.is_empty() && task.artifacts.is_empty()) {
            return None;
        }
        Some(TaskFiles {
            artifacts: task.artifacts.clone(),
            templates: TemplateSet {
                templates: task.templates.clone(),
                task_dir: self.alloc_dir.task_dir(&task.name),
                node: c.node.clone(),
                namespace: c.job.namespace.clone(),
                catalog: c.catalog.clone(),
                limits: Default::default(),
            },
            artifact_limits: Default::default(),
        })
    }

    /// Starts whatever the lifecycle allows now, and ends what must end.
    fn advance(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        if let Some((reason, cause)) = self.failure_or_leader_exit() {
            self.kill_all_with(&reason, false, Some(cause));
            return;
        }
        let of = |phase: Phase| -> Vec<usize> {
            (0..self.slots.len())
                .filter(|i| self.slots[*i].phase == phase)
                .collect()
        };
        let (pre, main, post_start, post_stop) = (
            of(Phase::Prestart),
            of(Phase::Main),
            of(Phase::Poststart),
            of(Phase::Poststop),
        );
        for &i in &pre {
            self.launch(i, ctx);
        }
        let prestart_done = pre.iter().all(|&i| {
            let s = &self.slots[i];
            if s.sidecar {
                s.running() || s.dead()
            } else {
                s.succeeded()
            }
        });
        if !prestart_done {
            return;
        }
        for &i in &main {
            self.launch(i, ctx);
        }
        if main
            .iter()
            .all(|&i| self.slots[i].running() || self.slots[i].dead())
        {
            for &i in &post_start {
                self.launch(i, ctx);
            }
        }
        if main.iter().all(|&i| self.slots[i].dead()) {
            // The main work is over: sidecars go, poststop tasks run.
            for i in pre.iter().chain(&post_start) {
                self.kill_slot(*i, "main tasks finished");
            }
            let others_dead = self
                .slots
                .iter()
                .all(|s| s.phase == Phase::Poststop || s.dead() || !s.launched);
            if others_dead {
                for &i in &post_stop {
                    self.launch(i, ctx);
                }
            }
        }
    }

    /// A failed task or a finished leader ends the whole allocation.
    /// Why the tasks still alive must end, with the event Nomad gives
    /// them: a task failed, or the leader is dead.
    fn failure_or_leader_exit(&self) -> Option<(String, TaskEvent)> {
        let live = self.slots.iter().any(|s| !s.dead());
        if !live {
            return None;
        }
        let event = |event_type: &str, display: String| TaskEvent {
            event_type: event_type.into(),
            time: crate::now_nanos(),
            display_message: display,
            ..Default::default()
        };
        if let Some(s) = self
            .slots
            .iter()
            .find(|s| s.state.failed && s.phase != Phase::Poststop)
        {
            let mut e = event(
                task_event::SIBLING_FAILED,
                format!("Task's sibling {:?} failed", s.task.name),
            );
            e.details
                .insert("failed_sibling".into(), s.task.name.clone());
            return Some((format!("Sibling task {:?} failed", s.task.name), e));
        }
        self.slots
            .iter()
            .find(|s| s.task.leader && s.dead())
            .map(|s| {
                let e = event(task_event::LEADER_DEAD, "Leader Task in Group dead".into());
                (format!("Leader task {:?} is dead", s.task.name), e)
            })
    }

    fn kill_slot(&mut self, index: usize, reason: &str) {
        self.kill_slot_with(index, reason, None);
    }

    fn kill_slot_with(&mut self, index: usize, reason: &str, cause: Option<TaskEvent>) {
        let slot = &mut self.slots[index];
        if slot.dead() {
            return;
        }
        match &slot.runner {
            Some(runner) => runner.do_send(KillTask {
                reason: reason.to_string(),
                cause,
            }),
            None => {
                // Never started: it simply will not run.
                slot.launched = true;
                slot.state.state = task_state::DEAD.into();
                slot.state.events.push(TaskEvent {
                    event_type: task_event::KILLED.into(),
                    time: crate::now_nanos(),
                    display_message: "Task successfully killed".into(),
                    kill_reason: reason.to_string(),
                    ..Default::default()
                });
            }
        }
    }

    /// A stop the servers (or the manager) asked for: the services leave
    /// the catalog at once, then the group's `shutdown_delay` passes, then
    /// each task's own before its kill, as in Nomad, so that traffic
    /// drains away before the tasks go. Without delays, `kill_all`.
    fn stop_gracefully(&mut self, reason: &str, ctx: &mut Context<Self>) {
        let group_delay = self
            .group
            .as_ref()
            .and_then(|g| g.shutdown_delay)
            .unwrap_or_default();
        let task_delays = self.slots.iter().any(|s| !s.task.shutdown_delay.is_zero());
        if self.stopping {
            return; // already killed, or waiting out its delays
        }
        if group_delay.is_zero() && !task_delays {
            self.kill_all(reason, true);
            return;
        }
        self.stopping = true;
        self.stop_checks();
        self.publish();
        let reason = reason.to_string();
        ctx.run_later(group_delay, move |act, ctx| {
            if !task_delays {
                return act.kill_all(&reason, true);
            }
            for i in 0..act.slots.len() {
                let delay = act.slots[i].task.shutdown_delay;
                if delay.is_zero() {
                    act.kill_slot(i, &reason);
                    continue;
                }
                let reason = reason.clone();
                ctx.run_later(delay, move |act, _| {
                    act.kill_slot(i, &reason);
                    act.publish();
                });
            }
            act.publish();
        });
    }

    fn kill_all(&mut self, reason: &str, stopping: bool) {
        self.kill_all_with(reason, stopping, None);
    }

    /// Kills every task, the leader first: the others once it is dead
    /// (`kill_rest`), as Nomad does, so that a leader that ships or
    /// flushes what its followers made still has them while it stops.
    fn kill_all_with(&mut self, reason: &str, stopping: bool, cause: Option<TaskEvent>) {
        self.stopping |= stopping;
        if self.stopping {
            self.stop_checks();
        }
        let live_leader = self
            .slots
            .iter()
            .position(|s| s.task.leader && !s.dead() && s.runner.is_some());
        match live_leader {
            Some(i) => {
                self.kill_slot_with(i, reason, cause.clone());
                self.kill_rest = Some((reason.to_string(), cause));
            }
            None => {
                for i in 0..self.slots.len() {
                    self.kill_slot_with(i, reason, cause.clone());
                }
            }
        }
        self.publish();
    }

    /// The leader's kill is over: the others follow.
    fn kill_the_rest(&mut self) {
        let leader_alive = self.slots.iter().any(|s| s.task.leader && !s.dead());
        if leader_alive {
            return;
        }
        if let Some((reason, cause)) = self.kill_rest.take() {
            for i in 0..self.slots.len() {
                self.kill_slot_with(i, &reason, cause.clone());
            }
        }
    }
}

/// Whether a task is done once it exits successfully: batch work, and a
/// lifecycle task that is not a sidecar (an init step before the main
/// tasks, a hook after them), as in Nomad. Restarting a prestart task
/// that had finished its work kept the main tasks from ever starting.
fn runs_to_completion(job: &herder::structs::Job, task: &Task) -> bool {
    job.job_type.is_batch_like() || task.lifecycle.as_ref().is_some_and(|l| !l.sidecar)
}

/// A task's lifecycle phase and whether it is a sidecar.
fn phase_of(task: &Task) -> (Phase, bool) {
    match &task.lifecycle {
        None => (Phase::Main, false),
        Some(l) => {
            let phase = match l.hook.as_str() {
                "poststart" => Phase::Poststart,
                "poststop" => Phase::Poststop,
                _ => Phase::Prestart,
            };
            (phase, l.sidecar)
        }
    }
}

/// Nomad's allocation status from its task states: any failed task fails
/// it; else any running task makes it running; else any pending task keeps
/// it pending; else it is complete.
pub fn client_status<'a>(
    states: impl IntoIterator<Item = &'a TaskState>,
) -> (ClientStatus, String) {
    let (mut pending, mut running, mut dead, mut failed) = (false, false, false, false);
    for s in states {
        match s.state.as_str() {
            task_state::RUNNING => running = true,
            task_state::DEAD if s.failed => failed = true,
            task_state::DEAD => dead = true,
            _ => pending = true,
        }
    }
    let (status, text) = if failed {
        (ClientStatus::Failed, "Failed tasks")
    } else if running {
        (ClientStatus::Running, "Tasks are running")
    } else if pending {
        (ClientStatus::Pending, "No tasks have started")
    } else if dead {
        (ClientStatus::Complete, "All tasks have completed")
    } else {
        (ClientStatus::Pending, "No tasks have started")
    };
    (status, text.to_string())
}

impl Actor for AllocRunner {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.group.is_none() {
            self.publish();
            return;
        }
        let built = if self.config.ephemeral {
            Ok(())
        } else {
            self.alloc_dir.build(std::iter::empty())
        };
        if let Err(e) = built {
            // Without its directory nothing of the allocation can run: the
            // node is at fault.
            self.node_failure = true;
            let msg = format!("failed to build the allocation directory: {e}");
            for slot in &mut self.slots {
                slot.state.state = task_state::DEAD.into();
                slot.state.failed = true;
                slot.state.events.push(TaskEvent {
                    event_type: task_event::SETUP_FAILURE.into(),
                    time: crate::now_nanos(),
                    display_message: msg.clone(),
                    setup_error: msg.clone(),
                    fails_task: true,
                    ..Default::default()
                });
            }
            self.publish();
            return;
        }
        self.init_health();
        if self.restoring {
            // Tasks that ran (or ended) before the restart are restored
            // first, whatever their phase; the lifecycle then continues.
            for i in 0..self.slots.len() {
                if self.slots[i].state.state != task_state::PENDING {
                    self.launch(i, ctx);
                }
            }
        }
        self.publish();
        self.advance(ctx);
        self.follow_tasks(ctx);
        self.publish();
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.stop_checks();
    }
}

impl Handler<TaskStateChanged> for AllocRunner {
    type Result = ();

    fn handle(&mut self, msg: TaskStateChanged, ctx: &mut Context<Self>) {
        self.node_failure |= msg.node_failure;
        if let Some(slot) = self.slots.iter_mut().find(|s| s.task.name == msg.task) {
            slot.state = msg.state;
            slot.lost |= msg.lost;
            if slot.dead() {
                slot.runner = None;
            }
        }
        self.kill_the_rest();
        self.advance(ctx);
        self.follow_tasks(ctx);
        self.publish();
        self.destroy_if_done(ctx);
    }
}

impl Handler<UpdateAlloc> for AllocRunner {
    type Result = ();

    fn handle(&mut self, msg: UpdateAlloc, ctx: &mut Context<Self>) {
        let alloc = msg.0;
        if alloc.id != self.config.alloc.id {
            return;
        }
        if let Some(job) = msg.1.filter(|j| j.version != self.config.job.version) {
            self.config.alloc.job_version = alloc.job_version;
            self.config.job = job;
            self.job_updated(ctx);
        }
        let moved = alloc.deployment_id != self.config.alloc.deployment_id;
        self.config.alloc.deployment_id = alloc.deployment_id;
        let servers_decided = alloc.deployment_status().is_some_and(|s| s.has_health());
        if servers_decided || moved {
            // The servers' word on health wins.
            self.config
                .alloc
                .set_deployment_status(alloc.deployment_status().cloned());
        } else if let Some(theirs) = alloc.deployment_status() {
            // Only the canary mark is theirs; a decision made here stands.
            let ours = self.config.alloc.deployment_status_or_default();
            ours.canary = theirs.canary;
        }
        if moved {
            self.deployment_changed(ctx);
        }
        let stop = alloc.server_terminal() && !self.stopping;
        let reason = alloc.desired_description.clone();
        self.config.alloc.desired_status = alloc.desired_status;
        self.config.alloc.desired_description = alloc.desired_description;
        self.config.alloc.desired_transition = alloc.desired_transition;
        self.config.alloc.modify_index = alloc.modify_index;
        self.config.alloc.alloc_modify_index = alloc.alloc_modify_index;
        if stop {
            let reason = if reason.is_empty() {
                "alloc is being stopped".into()
            } else {
                reason
            };
            self.stop_gracefully(&reason, ctx);
        }
    }
}

impl Handler<Destroy> for AllocRunner {
    type Result = ();

    fn handle(&mut self, _: Destroy, ctx: &mut Context<Self>) {
        self.destroy_when_dead = true;
        if !self.all_dead() {
            self.kill_all("alloc was garbage collected", true);
        }
        self.destroy_if_done(ctx);
    }
}

impl Handler<Stop> for AllocRunner {
    type Result = ();

    fn handle(&mut self, msg: Stop, ctx: &mut Context<Self>) {
        self.stop_gracefully(&msg.reason, ctx);
    }
}

impl Handler<Shutdown> for AllocRunner {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Shutdown, _ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        self.stop_checks();
        let runners: Vec<Addr<TaskRunner>> = self
            .slots
            .iter_mut()
            .filter_map(|s| s.runner.take())
            .collect();
        let detach = async move {
            for r in runners {
                let _ = r.send(DetachTask).await;
            }
        };
        Box::pin(detach.into_actor(self).map(|_, _act, ctx| ctx.stop()))
    }
}

impl AllocRunner {
    /// Why nothing of this allocation may be restarted or signalled now.
    fn not_controllable(&self) -> Option<ControlError> {
        let why = if self.config.alloc.server_terminal() || self.stopping {
            "being stopped".to_string()
        } else {
            let (status, _) = client_status(self.slots.iter().map(|s| &s.state));
            if !status.is_terminal() {
                return None;
            }
            status.as_str().to_string()
        };
        Some(ControlError::Terminal {
            alloc_id: self.config.alloc.id,
            why,
        })
    }

    /// The task runners a request is for: the one named, or every task
    /// that runs.
    fn control_targets(
        &self,
        task: Option<&str>,
    ) -> Result<Vec<(String, Addr<TaskRunner>)>, ControlError> {
        if let Some(err) = self.not_controllable() {
            return Err(err);
        }
        let running = |s: &TaskSlot| {
            s.running()
                .then(|| s.runner.clone().map(|r| (s.task.name.clone(), r)))
                .flatten()
        };
        match task {
            Some(name) => {
                let slot = self
                    .slots
                    .iter()
                    .find(|s| s.task.name == name)
                    .ok_or_else(|| ControlError::UnknownTask(name.to_string()))?;
                running(slot)
                    .map(|target| vec![target])
                    .ok_or_else(|| ControlError::NotRunning(Some(name.to_string())))
            }
            None => {
                let targets: Vec<_> = self.slots.iter().filter_map(running).collect();
                if targets.is_empty() {
                    return Err(ControlError::NotRunning(None));
                }
                Ok(targets)
            }
        }
    }
}

impl Handler<ControlTasks> for AllocRunner {
    type Result = ResponseFuture<Result<(), ControlError>>;

    fn handle(&mut self, msg: ControlTasks, _ctx: &mut Context<Self>) -> Self::Result {
        let targets = match self.control_targets(msg.0.task()) {
            Ok(t) => t,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let control = msg.0;
        Box::pin(async move {
            let asks = targets.into_iter().map(|(name, runner)| {
                let control = control.clone();
                async move {
                    let answer = match control {
                        AllocControl::Restart { .. } => {
                            runner
                                .send(RestartTask {
                                    reason: USER_RESTART_REASON.into(),
                                })
                                .await
                        }
                        AllocControl::Signal { signal, .. } => {
                            runner.send(SignalTask { signal }).await
                        }
                    };
                    // A runner that went away meanwhile: its task ended.
                    answer.unwrap_or(Err(ControlError::NotRunning(Some(name))))
                }
            });
            futures::future::join_all(asks)
                .await
                .into_iter()
                .collect::<Result<Vec<()>, _>>()
                .map(|_| ())
        })
    }
}

impl Handler<ExecTask> for AllocRunner {
    type Result = ResponseFuture<Result<ExecSession, ControlError>>;

    fn handle(&mut self, msg: ExecTask, _ctx: &mut Context<Self>) -> Self::Result {
        let target = self.control_targets(Some(&msg.task));
        Box::pin(async move {
            let (name, runner) = target?
                .into_iter()
                .next()
                .ok_or(ControlError::NotRunning(None))?;
            runner
                .send(ExecInTask(msg.request))
                .await
                .unwrap_or(Err(ControlError::NotRunning(Some(name))))
        })
    }
}

impl Handler<GetAllocState> for AllocRunner {
    type Result = MessageResult<GetAllocState>;

    fn handle(&mut self, _: GetAllocState, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.current())
    }
}

/// The task's `volume_mount`s of the group's `host` volumes, resolved to
/// this node's paths; read-only when the mount, the group's request or the
/// node's volume says so. A mount of a volume the node lacks is left out
/// (the servers place the allocation only where the volume exists).
fn host_volume_mounts(group: &TaskGroup, task: &Task, node: &Node) -> Vec<TaskMount> {
    task.volume_mounts
        .iter()
        .filter_map(|m| {
            let request = group.volumes.get(&m.volume)?;
            if request.volume_type != herder::structs::job::VolumeRequest::HOST {
                return None;
            }
            let volume = node.host_volumes.get(&request.source)?;
            Some(TaskMount {
                host_path: PathBuf::from(&volume.path),
                destination: m.destination.clone(),
                read_only: m.read_only || request.read_only || volume.read_only,
            })
        })
        .collect()
}
