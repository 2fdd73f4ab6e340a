//! The task runner's prestart step for artifacts and templates, and the
//! watcher that re-renders the templates while the task runs and applies
//! their `change_mode`, with Nomad's task events.

use super::{task_state, RestartTask, TaskRunner};
use crate::driver::DriverError;
use crate::task_files::{PrestartError, TaskFiles};
use crate::template::RERENDER_PERIOD;
use actix::prelude::*;
use herder::structs::alloc::task_event;
use rand::Rng as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `Restart Signaled` reason of a template re-render, as Nomad's.
pub const TEMPLATE_RESTART_REASON: &str = "Template with change_mode restart re-rendered";

impl TaskRunner {
    /// Runs the prestart step once per task (not again on restarts, as
    /// Nomad's hooks are done once they succeed). Answers whether it took
    /// over: the start goes on when it completes.
    pub(super) fn prestart_files(&mut self, ctx: &mut Context<Self>) -> bool {
        if self.files_done {
            return false;
        }
        let Some(files) = self.files.clone() else {
            self.files_done = true;
            return false;
        };
        if !files.artifacts.is_empty() {
            self.event(
                task_event::DOWNLOADING_ARTIFACTS,
                "Client is downloading artifacts".into(),
                |_| {},
            );
            self.report();
        }
        let env = self.config.env.clone();
        self.starting = true;
        let work = async move {
            tokio::task::spawn_blocking(move || files.prestart(&env))
                .await
                .unwrap_or_else(|e| Err(PrestartError::Artifact(format!("prestart failed: {e}"))))
        };
        ctx.spawn(work.into_actor(self).map(|result, act, ctx| {
            act.starting = false;
            act.prestart_done(result, ctx)
        }));
        true
    }

    fn prestart_done(
        &mut self,
        result: Result<std::collections::BTreeMap<String, String>, PrestartError>,
        ctx: &mut Context<Self>,
    ) {
        if self.killing {
            // `begin_start` ends a task killed while it was preparing.
            return self.begin_start(ctx);
        }
        if self.detach_after_start {
            // The client is going away and nothing runs yet: a restored
            // runner prepares the task afresh.
            return ctx.stop();
        }
        match result {
            Ok(env) => {
                self.files_done = true;
                self.base_env = Some(self.config.env.clone());
                self.config.env.extend(env);
                self.begin_start(ctx)
            }
            Err(PrestartError::Artifact(msg)) => {
                self.event(task_event::ARTIFACT_DOWNLOAD_FAILED, msg.clone(), |e| {
                    e.message = msg.clone();
                    e.details.insert("download_error".into(), msg.clone());
                });
                let err = DriverError::Task {
                    message: msg,
                    recoverable: true,
                };
                let decision = self.restart.on_start_error(&err, Instant::now());
                self.apply_decision(decision, ctx);
            }
            Err(PrestartError::Template(msg)) => {
                let display = format!("Template failed: {msg}");
                self.event(task_event::KILLING, display.clone(), |e| {
                    e.message = display.clone();
                    e.fails_task = true;
                });
                self.set_dead(true, ctx);
            }
        }
    }

    /// After a client restart the files are in place; the env templates'
    /// variables are read back from them.
    pub(super) fn restore_files(&mut self) {
        if self.state.started_at.is_none() {
            // Never started: the prestart step runs as for a new task.
            return;
        }
        self.files_done = true;
        if let Some(files) = &self.files {
            self.base_env = Some(self.config.env.clone());
            let env = files.templates.env_on_disk();
            self.config.env.extend(env);
        }
    }

    /// Starts re-rendering the templates of the running task (once).
    pub(super) fn watch_templates(&mut self, ctx: &mut Context<Self>) {
        let has_templates = self
            .files
            .as_ref()
            .is_some_and(|f| !f.templates.templates.is_empty());
        if self.template_watch.is_some() || !has_templates {
            return;
        }
        let handle = ctx.run_interval(RERENDER_PERIOD, |act, ctx| act.rerender(ctx));
        self.template_watch = Some(handle);
    }

    fn rerender(&mut self, ctx: &mut Context<Self>) {
        let Some(files) = self.files.clone() else {
            return;
        };
        if self.rendering || self.killing || self.state.state != task_state::RUNNING {
            return;
        }
        self.rendering = true;
        let env = self
            .base_env
            .clone()
            .unwrap_or_else(|| self.config.env.clone());
        let work = rerender_blocking(files, env);
        ctx.spawn(work.into_actor(self).map(|result, act, ctx| {
            act.rendering = false;
            match result {
                Ok(rendered) => act.on_rerendered(rendered, ctx),
                Err(e) => {
                    tracing::warn!(task = %act.config.task_name, error = %e, "re-rendering the templates failed; the last files stay")
                }
            }
        }));
    }

    fn on_rerendered(&mut self, r: crate::template::Rendered, ctx: &mut Context<Self>) {
        if let Some(base) = &self.base_env {
            let mut env = base.clone();
            env.extend(r.env.clone());
            self.config.env = env;
        }
        if !r.restart && r.signals.is_empty() {
            return;
        }
        // Nomad waits a random part of the splay so that tasks sharing a
        // template do not all act at once.
        let splay = splay_delay(r.splay);
        ctx.run_later(splay, move |act, ctx| act.apply_change_mode(r, ctx));
    }

    fn apply_change_mode(&mut self, r: crate::template::Rendered, ctx: &mut Context<Self>) {
        if self.killing || self.state.state != task_state::RUNNING {
            return;
        }
        if r.restart {
            ctx.address().do_send(RestartTask {
                reason: TEMPLATE_RESTART_REASON.into(),
            });
            return;
        }
        let Ok((driver, handle)) = self.running_handle() else {
            return;
        };
        for signal in r.signals {
            self.event(task_event::SIGNALING, "Template re-rendered".into(), |e| {
                e.details.insert("signal".into(), signal.clone());
            });
            self.report();
            let (driver, handle) = (driver.clone(), handle.clone());
            let send = async move {
                driver
                    .signal(handle, signal.clone())
                    .await
                    .map_err(|e| (signal, e))
            };
            ctx.spawn(send.into_actor(self).map(|result, act, ctx| {
                if let Err((signal, e)) = result {
                    let msg = format!("Template failed to send signals [{signal}]: {e}");
                    act.event(task_event::KILLING, msg.clone(), |ev| {
                        ev.message = msg.clone();
                        ev.fails_task = true;
                    });
                    ctx.address().do_send(super::KillTask {
                        reason: msg,
                        cause: None,
                    });
                }
            }));
        }
    }
}

async fn rerender_blocking(
    files: Arc<TaskFiles>,
    env: std::collections::BTreeMap<String, String>,
) -> Result<crate::template::Rendered, String> {
    tokio::task::spawn_blocking(move || files.templates.render(&env).map_err(|e| e.to_string()))
        .await
        .map_err(|e| e.to_string())?
}

fn splay_delay(splay: Duration) -> Duration {
    if splay.is_zero() {
        return Duration::ZERO;
    }
    let nanos = u64::try_from(splay.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::thread_rng().gen_range(0..nanos))
}
