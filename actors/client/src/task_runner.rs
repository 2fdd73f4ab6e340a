//! The task runner: one actor per task of an allocation.
//!
//! It starts the task with its driver, waits for it, applies the restart
//! policy, kills it on request (signal, `kill_timeout`, then SIGKILL) and
//! records every step as Nomad's task events. Each change of the task's
//! state goes to its allocation runner as a [`TaskStateChanged`].
//!
//! A user may restart the running task ([`RestartTask`]: killed as for a
//! stop, started again at once, not counted against the restart policy) or
//! send it a signal ([`SignalTask`]).
//!
//! Before the first start, the task's artifacts are fetched and its
//! templates rendered (`task_runner_files.rs`); while it runs, its
//! templates are re-rendered and their `change_mode` applied.
//!
//! The driver handle is written to `<task_dir>/.herder-handle.json` as soon
//! as the task runs and removed when it exits, so after a client restart a
//! runner in restore mode finds exactly the tasks that may still be alive.

use crate::driver::{
    Driver, DriverError, ExecRequest, ExecSession, ExitResult, HandleState, TaskConfig, TaskHandle,
};
use crate::restart::{go_duration, RestartDecision, RestartTracker};
use crate::task_dir::{build_task_dir, check_task_name};
use crate::task_files::TaskFiles;
use crate::{now_nanos, ControlError};
use actix::prelude::*;
use herder::structs::alloc::task_event;
use herder::structs::{TaskEvent, TaskState};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Task events kept per task, as Nomad keeps.
pub const MAX_TASK_EVENTS: usize = 10;
/// The file a running task's driver handle is kept in.
pub const HANDLE_FILE: &str = ".herder-handle.json";

/// Task states as Nomad names them.
pub mod task_state {
    pub const PENDING: &str = "pending";
    pub const RUNNING: &str = "running";
    pub const DEAD: &str = "dead";
}

/// A task's state changed (sent to the allocation runner).
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct TaskStateChanged {
    pub task: String,
    pub state: TaskState,
    /// The node caused a failure of this task.
    pub node_failure: bool,
    /// The task was running before a client restart and is gone now.
    pub lost: bool,
}

/// Kill the task (desired stop, a sibling failed, ...).
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct KillTask {
    pub reason: String,
    /// Why, as the event Nomad records on the task before its kill
    /// (`Sibling Task Failed`, `Leader Task Dead`).
    pub cause: Option<TaskEvent>,
}

/// A user asked for the running task to be restarted: it is killed with its
/// `kill_signal` and `kill_timeout`, then started again at once. Resolves
/// once the old process is gone (as Nomad's restart returns).
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<(), ControlError>")]
pub struct RestartTask {
    /// The `Restart Signaled` event's reason.
    pub reason: String,
}

/// A user's signal for the running task.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<(), ControlError>")]
pub struct SignalTask {
    pub signal: String,
}

/// Runs a command beside the task (`alloc exec`) through its driver.
#[derive(Debug, Message)]
#[rtype(result = "Result<ExecSession, ControlError>")]
pub struct ExecInTask(pub ExecRequest);

/// Stop watching the task but leave it running: the client is shutting down
/// and a restarted client will re-attach.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct DetachTask;

/// How a runner begins.
#[derive(Clone, Debug)]
pub enum StartMode {
    /// A new task: emit Received and start it.
    Fresh,
    /// After a client restart: re-attach to the persisted handle if there is
    /// one, else continue from the previous state.
    Restore { previous: TaskState },
}

/// Everything a task runner is built from.
pub struct TaskRunnerConfig {
    pub task_config: TaskConfig,
    /// `None` when the node does not offer the task's driver.
    pub driver: Option<Arc<dyn Driver>>,
    pub driver_name: String,
    pub restart: RestartTracker,
    pub kill_timeout: Duration,
    pub kill_signal: String,
    pub mode: StartMode,
    pub parent: Recipient<TaskStateChanged>,
    /// No task directory and no persisted handle (simulated nodes).
    pub ephemeral: bool,
    /// Artifacts and templates to put in the task directory first.
    pub files: Option<TaskFiles>,
}

#[path = "task_runner_files.rs"]
mod files;
pub use files::TEMPLATE_RESTART_REASON;

pub struct TaskRunner {
    config: TaskConfig,
    driver: Option<Arc<dyn Driver>>,
    driver_name: String,
    restart: RestartTracker,
    kill_timeout: Duration,
    kill_signal: String,
    mode: Option<StartMode>,
    parent: Recipient<TaskStateChanged>,
    ephemeral: bool,
    state: TaskState,
    handle: Option<TaskHandle>,
    setup_done: bool,
    starting: bool,
    killing: bool,
    /// A user's restart killed the running task: its exit starts it again
    /// rather than going to the restart policy.
    restart_requested: bool,
    /// Detach was asked while a start was in flight: detach once it ends,
    /// so a started process never goes without its persisted handle.
    detach_after_start: bool,
    node_failure: bool,
    lost: bool,
    /// The pending restart timer, cancelled by a kill.
    restart_timer: Option<SpawnHandle>,
    wait_future: Option<SpawnHandle>,
    files: Option<Arc<TaskFiles>>,
    /// The artifacts are fetched and the templates rendered.
    files_done: bool,
    /// The environment without the env templates' variables, which each
    /// re-render replaces.
    base_env: Option<BTreeMap<String, String>>,
    /// A re-render is in flight.
    rendering: bool,
    template_watch: Option<SpawnHandle>,
}

impl TaskRunner {
    pub fn new(c: TaskRunnerConfig) -> Self {
        TaskRunner {
            config: c.task_config,
            driver: c.driver,
            driver_name: c.driver_name,
            restart: c.restart,
            kill_timeout: c.kill_timeout,
            kill_signal: c.kill_signal,
            mode: Some(c.mode),
            parent: c.parent,
            ephemeral: c.ephemeral,
            state: TaskState {
                state: task_state::PENDING.into(),
                ..Default::default()
            },
            handle: None,
            setup_done: false,
            starting: false,
            killing: false,
            restart_requested: false,
            detach_after_start: false,
            node_failure: false,
            lost: false,
            restart_timer: None,
            wait_future: None,
            files: c.files.map(Arc::new),
            files_done: false,
            base_env: None,
            rendering: false,
            template_watch: None,
        }
    }

    fn handle_path(&self) -> PathBuf {
        self.config.task_dir.join(HANDLE_FILE)
    }

    fn event(&mut self, event_type: &str, display: String, fill: impl FnOnce(&mut TaskEvent)) {
        let mut e = TaskEvent {
            event_type: event_type.to_string(),
            time: now_nanos(),
            display_message: display,
            ..Default::default()
        };
        fill(&mut e);
        self.push_event(e);
    }

    fn push_event(&mut self, e: TaskEvent) {
        self.state.events.push(e);
        if self.state.events.len() > MAX_TASK_EVENTS {
            let extra = self.state.events.len() - MAX_TASK_EVENTS;
            self.state.events.drain(..extra);
        }
    }

    fn report(&self) {
        self.parent.do_send(TaskStateChanged {
            task: self.config.task_name.clone(),
            state: self.state.clone(),
            node_failure: self.node_failure,
            lost: self.lost,
        });
    }

    fn set_dead(&mut self, failed: bool, ctx: &mut Context<Self>) {
        self.state.state = task_state::DEAD.into();
        self.state.failed = failed;
        self.state.finished_at = Some(now_nanos());
        self.report();
        ctx.stop();
    }

    fn begin_start(&mut self, ctx: &mut Context<Self>) {
        self.restart_timer = None;
        if self.killing {
            self.event(
                task_event::KILLED,
                "Task successfully killed".into(),
                |_| {},
            );
            return self.set_dead(false, ctx);
        }
        if !self.setup_done {
            self.event(task_event::SETUP, "Building Task Directory".into(), |e| {
                e.message = "Building Task Directory".into();
            });
            let built = check_task_name(&self.config.task_name).and_then(|()| {
                if self.ephemeral {
                    Ok(())
                } else {
                    build_task_dir(&self.config.task_dir)
                }
            });
            if let Err(e) = built {
                let msg = format!("failed to build task directory: {e}");
                // A name no directory can have is the job's fault; only a
                // disk that refuses is the node's.
                self.node_failure = e.kind() != std::io::ErrorKind::InvalidInput;
                self.event(task_event::SETUP_FAILURE, msg.clone(), |ev| {
                    ev.setup_error = msg.clone();
                    ev.fails_task = true;
                });
                return self.set_dead(true, ctx);
            }
            self.setup_done = true;
            self.report();
        }
        if self.prestart_files(ctx) {
            return;
        }
        let Some(driver) = self.driver.clone() else {
            let err = DriverError::Node(format!(
                "driver {:?} is not available on this node",
                self.driver_name
            ));
            return self.on_start_error(err, ctx);
        };
        self.starting = true;
        let config = self.config.clone();
        let fut = async move { driver.start_task(config).await };
        ctx.spawn(fut.into_actor(self).map(|result, act, ctx| {
            act.starting = false;
            match result {
                Ok(handle) => act.on_started(handle, ctx),
                Err(e) => act.on_start_error(e, ctx),
            }
        }));
    }

    fn on_started(&mut self, handle: TaskHandle, ctx: &mut Context<Self>) {
        let persisted = if self.ephemeral {
            Ok(())
        } else {
            persist_handle(&self.handle_path(), &handle.state)
        };
        if let Err(e) = persisted {
            tracing::warn!(task = %self.config.task_name, error = %e, "cannot persist the task handle; a client restart will not re-attach");
        }
        self.state.state = task_state::RUNNING.into();
        self.state.started_at = Some(now_nanos());
        self.event(task_event::STARTED, "Task started by client".into(), |_| {});
        self.report();
        if self.detach_after_start {
            return ctx.stop();
        }
        self.watch(handle, ctx);
        self.watch_templates(ctx);
        if self.killing {
            self.kill(ctx);
        }
    }

    fn watch(&mut self, handle: TaskHandle, ctx: &mut Context<Self>) {
        let Some(driver) = self.driver.clone() else {
            return;
        };
        self.handle = Some(handle.clone());
        let fut = async move { driver.wait(handle).await };
        let spawned = ctx.spawn(
            fut.into_actor(self)
                .map(|exit, act, ctx| act.on_exit(exit, ctx)),
        );
        self.wait_future = Some(spawned);
    }

    fn on_start_error(&mut self, err: DriverError, ctx: &mut Context<Self>) {
        let message = err.to_string();
        self.node_failure |= err.is_node_failure();
        self.event(
            task_event::DRIVER_FAILURE,
            format!("Failed to start task: {message}"),
            |e| {
                e.driver_error = message.clone();
                e.message = message.clone();
            },
        );
        if self.killing {
            self.event(
                task_event::KILLED,
                "Task successfully killed".into(),
                |_| {},
            );
            return self.set_dead(false, ctx);
        }
        let decision = self.restart.on_start_error(&err, Instant::now());
        self.apply_decision(decision, ctx);
        if self.detach_after_start {
            // Nothing runs; the restored runner will decide afresh.
            if let Some(t) = self.restart_timer.take() {
                ctx.cancel_future(t);
            }
            ctx.stop();
        }
    }

    fn on_exit(&mut self, exit: ExitResult, ctx: &mut Context<Self>) {
        self.handle = None;
        self.wait_future = None;
        if !self.ephemeral {
            let _ = std::fs::remove_file(self.handle_path());
        }
        self.event(task_event::TERMINATED, describe_exit(&exit), |e| {
            e.exit_code = i64::from(exit.exit_code);
            e.signal = i64::from(exit.signal);
            e.message = exit.err.clone().unwrap_or_default();
            e.details
                .insert("exit_code".into(), exit.exit_code.to_string());
            e.details.insert("signal".into(), exit.signal.to_string());
        });
        if self.killing {
            self.event(
                task_event::KILLED,
                "Task successfully killed".into(),
                |_| {},
            );
            return self.set_dead(false, ctx);
        }
        if std::mem::take(&mut self.restart_requested) {
            // Nomad's restart tracker: a restart the user triggered starts
            // the task again at once and is not a failure of the policy.
            let decision = RestartDecision::Restart {
                delay: Duration::ZERO,
                reason: String::new(),
            };
            return self.apply_decision(decision, ctx);
        }
        let decision = self.restart.on_exit(&exit, Instant::now());
        self.apply_decision(decision, ctx);
    }

    fn apply_decision(&mut self, decision: RestartDecision, ctx: &mut Context<Self>) {
        match decision {
            RestartDecision::Restart { delay, reason } => {
                let delay_ns = i64::try_from(delay.as_nanos()).unwrap_or(i64::MAX);
                self.event(
                    task_event::RESTARTING,
                    format!("Task restarting in {}", go_duration(delay)),
                    |e| {
                        e.restart_reason = reason.clone();
                        e.start_delay = delay_ns;
                        e.message = reason.clone();
                    },
                );
                self.state.state = task_state::PENDING.into();
                self.state.restarts += 1;
                self.state.last_restart = Some(now_nanos());
                self.report();
                self.restart_timer = Some(ctx.run_later(delay, |act, ctx| act.begin_start(ctx)));
            }
            RestartDecision::NotRestarting { reason } => {
                self.event(task_event::NOT_RESTARTING, reason.clone(), |e| {
                    e.restart_reason = reason.clone();
                    e.fails_task = true;
                });
                self.set_dead(true, ctx);
            }
            RestartDecision::Terminated { .. } => self.set_dead(false, ctx),
        }
    }

    fn kill(&mut self, ctx: &mut Context<Self>) {
        let (Some(driver), Some(handle)) = (self.driver.clone(), self.handle.clone()) else {
            return;
        };
        let timeout = self.kill_timeout;
        self.event(
            task_event::KILLING,
            format!(
                "Sent interrupt. Waiting {} before force killing",
                go_duration(timeout)
            ),
            |e| {
                e.details
                    .insert("kill_timeout".into(), go_duration(timeout));
            },
        );
        self.report();
        let signal = self.kill_signal.clone();
        let task = self.config.task_name.clone();
        let fut = async move { driver.stop(handle, timeout, signal).await };
        ctx.spawn(fut.into_actor(self).map(move |result, act, _ctx| {
            if let Err(e) = result {
                tracing::error!(task = %task, error = %e, "killing the task failed");
                act.node_failure |= e.is_node_failure();
            }
        }));
    }

    fn restore(&mut self, previous: TaskState, ctx: &mut Context<Self>) {
        self.state = previous;
        self.setup_done = true;
        self.restore_files();
        if self.state.state == task_state::DEAD {
            // Finished before the restart; a handle left behind is stale
            // (the client stopped between the exit and its cleanup).
            let _ = std::fs::remove_file(self.handle_path());
            self.report();
            return ctx.stop();
        }
        let saved = std::fs::read(self.handle_path())
            .ok()
            .and_then(|bytes| serde_json::from_slice::<HandleState>(&bytes).ok());
        match (saved, self.driver.clone()) {
            (Some(saved), Some(driver)) => {
                let fut = async move { driver.recover(saved).await };
                ctx.spawn(fut.into_actor(self).map(|result, act, ctx| match result {
                    Ok(handle) => {
                        act.state.state = task_state::RUNNING.into();
                        act.report();
                        act.watch(handle, ctx);
                        act.watch_templates(ctx);
                        if act.killing {
                            act.kill(ctx);
                        }
                    }
                    Err(e) => act.report_lost(&e.to_string(), ctx),
                }));
            }
            (Some(_), None) => self.report_lost("its driver is no longer available", ctx),
            (None, _) if self.state.state == task_state::RUNNING => {
                self.report_lost("no handle was kept for it", ctx)
            }
            (None, _) => self.begin_start(ctx),
        }
    }

    /// The running task's driver and handle, or why a user's request
    /// cannot reach it.
    fn running_handle(&self) -> Result<(Arc<dyn Driver>, TaskHandle), ControlError> {
        let not_running = || ControlError::NotRunning(Some(self.config.task_name.clone()));
        if self.killing || self.state.state != task_state::RUNNING {
            return Err(not_running());
        }
        match (self.driver.clone(), self.handle.clone()) {
            (Some(driver), Some(handle)) => Ok((driver, handle)),
            _ => Err(not_running()),
        }
    }

    /// A task that ran before the client restarted and cannot be found.
    fn report_lost(&mut self, why: &str, ctx: &mut Context<Self>) {
        let _ = std::fs::remove_file(self.handle_path());
        self.lost = true;
        let msg = format!("task lost across a client restart: {why}");
        self.event(task_event::TERMINATED, msg.clone(), |e| {
            e.message = msg.clone();
            e.fails_task = true;
        });
        self.set_dead(true, ctx);
    }
}

impl Actor for TaskRunner {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        match self.mode.take() {
            Some(StartMode::Restore { previous }) => self.restore(previous, ctx),
            _ => {
                self.event(
                    task_event::RECEIVED,
                    "Task received by client".into(),
                    |_| {},
                );
                self.report();
                self.begin_start(ctx);
            }
        }
    }
}

impl Handler<KillTask> for TaskRunner {
    type Result = ();

    fn handle(&mut self, msg: KillTask, ctx: &mut Context<Self>) {
        if self.killing || self.state.state == task_state::DEAD {
            return;
        }
        self.killing = true;
        tracing::debug!(task = %self.config.task_name, reason = %msg.reason, "killing task");
        if let Some(cause) = msg.cause {
            self.push_event(cause);
        }
        if let Some(timer) = self.restart_timer.take() {
            // Waiting to restart: nothing runs, so it is killed at once.
            ctx.cancel_future(timer);
            self.event(task_event::KILLED, "Task successfully killed".into(), |e| {
                e.kill_reason = msg.reason.clone();
            });
            return self.set_dead(false, ctx);
        }
        if self.handle.is_some() {
            self.kill(ctx);
        }
        // Otherwise the start in flight sees `killing` when it completes.
    }
}

impl Handler<RestartTask> for TaskRunner {
    type Result = ResponseActFuture<Self, Result<(), ControlError>>;

    fn handle(&mut self, msg: RestartTask, _ctx: &mut Context<Self>) -> Self::Result {
        let (driver, handle) = match self.running_handle() {
            Ok(running) => running,
            Err(e) => return Box::pin(actix::fut::ready(Err(e))),
        };
        if self.restart_requested {
            // A restart is already under way: answer when it has killed
            // the same process.
            let gone = async move {
                driver.wait(handle).await;
                Ok(())
            };
            return Box::pin(gone.into_actor(self));
        }
        self.restart_requested = true;
        self.event(task_event::RESTART_SIGNALED, msg.reason.clone(), |e| {
            e.restart_reason = msg.reason.clone();
            e.details
                .insert("restart_reason".into(), msg.reason.clone());
        });
        self.report();
        let (timeout, signal) = (self.kill_timeout, self.kill_signal.clone());
        let stop = async move { driver.stop(handle, timeout, signal).await };
        Box::pin(stop.into_actor(self).map(|result, act, _ctx| {
            result.map_err(|e| {
                tracing::error!(task = %act.config.task_name, error = %e, "killing the task to restart it failed");
                act.restart_requested = false;
                act.node_failure |= e.is_node_failure();
                ControlError::Driver(e)
            })
        }))
    }
}

impl Handler<ExecInTask> for TaskRunner {
    type Result = ResponseFuture<Result<ExecSession, ControlError>>;

    fn handle(&mut self, msg: ExecInTask, _ctx: &mut Context<Self>) -> Self::Result {
        let running = self.running_handle();
        Box::pin(async move {
            let (driver, handle) = running?;
            driver
                .exec_streaming(handle, msg.0)
                .await
                .map_err(ControlError::Driver)
        })
    }
}

impl Handler<SignalTask> for TaskRunner {
    type Result = ResponseFuture<Result<(), ControlError>>;

    fn handle(&mut self, msg: SignalTask, _ctx: &mut Context<Self>) -> Self::Result {
        let checked = crate::driver::parse_user_signal(&msg.signal)
            .map_err(ControlError::InvalidSignal)
            .and_then(|_| self.running_handle());
        let (driver, handle) = match checked {
            Ok(running) => running,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        // Nomad's event: the signal is in the details, the display text
        // generic.
        self.event(
            task_event::SIGNALING,
            "Task being sent a signal".into(),
            |e| {
                e.details.insert("signal".into(), msg.signal.clone());
            },
        );
        self.report();
        Box::pin(async move {
            driver
                .signal(handle, msg.signal)
                .await
                .map_err(ControlError::Driver)
        })
    }
}

impl Handler<DetachTask> for TaskRunner {
    type Result = ();

    fn handle(&mut self, _: DetachTask, ctx: &mut Context<Self>) {
        if self.starting {
            self.detach_after_start = true;
            return;
        }
        if let Some(f) = self.wait_future.take() {
            ctx.cancel_future(f);
        }
        if let Some(t) = self.restart_timer.take() {
            ctx.cancel_future(t);
        }
        ctx.stop();
    }
}

fn describe_exit(exit: &ExitResult) -> String {
    let mut s = format!("Exit Code: {}", exit.exit_code);
    if exit.signal != 0 {
        s.push_str(&format!(", Signal: {}", exit.signal));
    }
    if let Some(err) = &exit.err {
        s.push_str(&format!(", Exit Message: {err:?}"));
    }
    s
}

fn persist_handle(path: &Path, state: &HandleState) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(state).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(tmp, path)
}
