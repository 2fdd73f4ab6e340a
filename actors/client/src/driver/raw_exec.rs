//! `raw_exec`: runs the task as a plain process of the client's machine.
//!
//! Each task leads its own session and process group, so stopping it (or
//! cleaning up after it exits) signals every process it started. Output goes
//! through named pipes into rotated log files (see `logs`). The handle keeps
//! the pid and the process's start time (from `/proc/<pid>/stat`): a
//! restarted client re-attaches only when both match, so a recycled pid is
//! never mistaken for the task.

use super::exec_session::run_session;
use super::{
    BoxFuture, Driver, DriverError, ExecRequest, ExecSession, ExitResult, HandleState, TaskConfig,
    TaskHandle,
};
use crate::logs::{make_fifo, open_fifo_reader, pump_fifo, LogKind, RotatingLog};
use herder::structs::node::labels;
use herder::structs::{DriverInfo, LogConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::unix::pipe::Receiver;
use tokio::sync::watch;

pub const NAME: &str = "raw_exec";

/// How often a re-attached process (not our child) is checked for exit.
const REATTACHED_POLL: Duration = Duration::from_millis(200);
/// How long a process may take to die after SIGKILL before stop gives up.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// `raw_exec`; `enabled` is the client's `raw_exec_enabled`: off, the
/// driver is not detected (so no job is placed here for it) and refuses
/// to start tasks.
#[derive(Default)]
pub struct RawExecDriver {
    enabled: bool,
}

impl RawExecDriver {
    pub fn new(enabled: bool) -> Self {
        RawExecDriver { enabled }
    }
}

/// What is persisted for `recover` (shared with `exec`, whose process is
/// handled the same way once started).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct PidState {
    pub(super) pid: i32,
    pub(super) start_time: u64,
    pub(super) log_dir: PathBuf,
    pub(super) log_max_files: i32,
    pub(super) log_max_file_size_mb: i32,
    /// What `alloc exec` runs beside the task with (absent in handles of
    /// older clients: exec then runs with an empty environment).
    #[serde(default)]
    pub(super) task_dir: PathBuf,
    #[serde(default)]
    pub(super) user: String,
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
}

/// The live part of a handle: the process and its exit, once known.
pub(super) struct Live {
    pub(super) pid: i32,
    /// The process's start time (`/proc/<pid>/stat`), 0 when unknown: a
    /// signal goes to the pid only while it still names this process.
    pub(super) start_time: u64,
    pub(super) exit: watch::Receiver<Option<ExitResult>>,
    pub(super) state: PidState,
}

impl Driver for RawExecDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn fingerprint(&self) -> DriverInfo {
        if !self.enabled {
            return DriverInfo {
                detected: false,
                healthy: false,
                health_description: "disabled (client.raw_exec_enabled is false)".into(),
                update_time: Some(crate::clock::now_nanos()),
                ..Default::default()
            };
        }
        let sh_present = Path::new("/bin/sh").exists();
        DriverInfo {
            attributes: labels([(format!("driver.{NAME}"), "1")]),
            detected: true,
            healthy: sh_present,
            health_description: if sh_present {
                "Healthy".into()
            } else {
                "no /bin/sh on this machine".into()
            },
            update_time: Some(crate::clock::now_nanos()),
        }
    }

    fn start_task(&self, config: TaskConfig) -> BoxFuture<'_, Result<TaskHandle, DriverError>> {
        Box::pin(async move {
            if !self.enabled {
                return Err(DriverError::Node(
                    "raw_exec is disabled on this client (client.raw_exec_enabled)".into(),
                ));
            }
            start(config)
        })
    }

    fn wait(&self, handle: TaskHandle) -> BoxFuture<'_, ExitResult> {
        Box::pin(wait_handle(handle))
    }

    fn stop(
        &self,
        handle: TaskHandle,
        kill_timeout: Duration,
        signal: String,
    ) -> BoxFuture<'_, Result<(), DriverError>> {
        Box::pin(async move { stop(&*live_of(&handle)?, kill_timeout, &signal).await })
    }

    fn recover(&self, state: HandleState) -> BoxFuture<'_, Result<TaskHandle, DriverError>> {
        Box::pin(async move { recover(state) })
    }

    fn signal(&self, handle: TaskHandle, signal: String) -> BoxFuture<'_, Result<(), DriverError>> {
        Box::pin(async move { send_signal(&*live_of(&handle)?, &signal) })
    }

    fn exec_streaming(
        &self,
        handle: TaskHandle,
        request: ExecRequest,
    ) -> BoxFuture<'_, Result<ExecSession, DriverError>> {
        Box::pin(async move {
            let live = live_of(&handle)?;
            if exited(&live) {
                return Err(DriverError::task("Task not running"));
            }
            let state = &live.state;
            let (program, args) = request
                .command
                .split_first()
                .ok_or_else(|| DriverError::task("command is empty"))?;
            let mut cmd = std::process::Command::new(program);
            cmd.args(args).env_clear().envs(&state.env);
            if state.task_dir.is_dir() {
                cmd.current_dir(&state.task_dir);
            }
            if !state.user.is_empty() {
                let (uid, gid) = lookup_user(&state.user)?;
                cmd.uid(uid).gid(gid);
            }
            run_session(cmd, request.tty)
        })
    }
}

/// The live part of a handle this module's processes have (`raw_exec`'s
/// and `exec`'s).
pub(super) fn live_of(handle: &TaskHandle) -> Result<Arc<Live>, DriverError> {
    handle
        .live::<Live>()
        .ok_or_else(|| DriverError::task(format!("not a {} handle", handle.state.driver)))
}

pub(super) async fn wait_handle(handle: TaskHandle) -> ExitResult {
    match handle.live::<Live>() {
        Some(live) => wait_exit(live.exit.clone()).await,
        None => ExitResult {
            err: Some(format!("not a {} handle", handle.state.driver)),
            ..Default::default()
        },
    }
}

fn start(config: TaskConfig) -> Result<TaskHandle, DriverError> {
    let (command, args) = command_and_args(&config.config)?;
    let program = resolve_command(&command, &config.task_dir, config.env.get("PATH"))?;
    start_process(&config, NAME, &program.display().to_string(), |out, err| {
        build_command(&program, &args, &config, out, err)
    })
}

/// Starts the process `build` makes (given the task's stdout and stderr)
/// with its logs pumped and its exit watched: the part `raw_exec` and
/// `exec` share.
pub(super) fn start_process(
    config: &TaskConfig,
    driver: &'static str,
    program: &str,
    build: impl FnOnce(std::fs::File, std::fs::File) -> Result<tokio::process::Command, DriverError>,
) -> Result<TaskHandle, DriverError> {
    let node_err = |what: &str, e: std::io::Error| DriverError::Node(format!("{what}: {e}"));
    std::fs::create_dir_all(&config.log_dir).map_err(|e| node_err("creating the log dir", e))?;
    let (stdout_fifo, stdout_pump) = open_log(config, LogKind::Stdout)?;
    let (stderr_fifo, stderr_pump) = open_log(config, LogKind::Stderr)?;
    // The task's end is opened read-write too: a pipe with a reader never
    // raises SIGPIPE, even while no client drains it.
    let rw = |p: &Path| std::fs::OpenOptions::new().read(true).write(true).open(p);
    let out = rw(&stdout_fifo).map_err(|e| node_err("opening the stdout pipe", e))?;
    let err = rw(&stderr_fifo).map_err(|e| node_err("opening the stderr pipe", e))?;

    let mut cmd = build(out, err)?;
    let child = cmd.spawn().map_err(|e| {
        let message = format!("failed to start {program}: {e}");
        // A program that is missing, not executable or not a program is
        // the job's to fix; anything else (no memory, no processes) is
        // the node's.
        match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                DriverError::task(message)
            }
            _ if e.raw_os_error() == Some(libc::ENOEXEC) => DriverError::task(message),
            _ => DriverError::Node(message),
        }
    })?;
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| DriverError::Node("started process has no pid".into()))?;
    let start_time = process_start_time(pid).unwrap_or(0);

    let rx = spawn_reaper(child, pid);
    spawn_pumps(&rx, vec![stdout_pump, stderr_pump]);

    let state = PidState {
        pid,
        start_time,
        log_dir: config.log_dir.clone(),
        log_max_files: config.log_config.max_files,
        log_max_file_size_mb: config.log_config.max_file_size_mb,
        task_dir: config.task_dir.clone(),
        user: config.user.clone(),
        env: config.env.clone(),
    };
    Ok(TaskHandle::new(
        HandleState {
            driver: driver.into(),
            task_name: config.task_name.clone(),
            data: serde_json::to_value(&state).unwrap_or_default(),
        },
        Arc::new(Live {
            pid,
            start_time,
            exit: rx,
            state,
        }),
    ))
}

/// The task's command: its environment only, the task dir as working dir,
/// output into the pipes, and a session (and process group) of its own.
fn build_command(
    program: &Path,
    args: &[String],
    config: &TaskConfig,
    stdout: std::fs::File,
    stderr: std::fs::File,
) -> Result<tokio::process::Command, DriverError> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(&config.env)
        .current_dir(&config.task_dir)
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(false);
    if !config.user.is_empty() {
        let (uid, gid) = lookup_user(&config.user)?;
        cmd.uid(uid).gid(gid);
    }
    // SAFETY: setsid and signal are async-signal-safe; the closure touches
    // nothing else.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            super::reset_ignored_signals();
            Ok(())
        });
    }
    Ok(cmd)
}

/// Waits for the child in the background and publishes its exit; then
/// kills whatever the leader left behind in its group.
fn spawn_reaper(mut child: tokio::process::Child, pid: i32) -> watch::Receiver<Option<ExitResult>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let result = match child.wait().await {
            Ok(status) => ExitResult {
                exit_code: status.code().unwrap_or(0),
                signal: status.signal().unwrap_or(0),
                err: None,
            },
            Err(e) => ExitResult {
                err: Some(format!("waiting for the process: {e}")),
                ..Default::default()
            },
        };
        kill_group(pid, libc::SIGKILL);
        let _ = tx.send(Some(result));
    });
    rx
}

pub(super) fn command_and_args(
    config: &BTreeMap<String, serde_json::Value>,
) -> Result<(String, Vec<String>), DriverError> {
    let command = match config.get("command") {
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => return Err(DriverError::task("config.command is required")),
    };
    let args = match config.get("args") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        Some(_) => return Err(DriverError::task("config.args must be a list")),
    };
    Ok((command, args))
}

/// Finds the program as Nomad does: a path is taken relative to the task
/// dir; a bare name is looked up in the task dir, then in the task's PATH.
fn resolve_command(
    command: &str,
    task_dir: &Path,
    path: Option<&String>,
) -> Result<PathBuf, DriverError> {
    let candidate = Path::new(command);
    if command.contains('/') {
        let full = if candidate.is_absolute() {
            candidate.to_path_buf()
        } else {
            task_dir.join(candidate)
        };
        if full.is_file() {
            return Ok(full);
        }
        return Err(DriverError::task(format!("binary {command:?} not found")));
    }
    let default_path = "/usr/local/bin:/usr/bin:/bin".to_string();
    let search = std::iter::once(task_dir.to_path_buf())
        .chain(std::iter::once(task_dir.join("local")))
        .chain(std::env::split_paths(path.unwrap_or(&default_path)));
    for dir in search {
        let full = dir.join(command);
        if full.is_file() {
            return Ok(full);
        }
    }
    Err(DriverError::task(format!(
        "binary {command:?} not found in the task dir or PATH"
    )))
}

fn fifo_path(log_dir: &Path, task: &str, kind: LogKind) -> PathBuf {
    log_dir.join(format!(".{task}.{}.fifo", kind.as_str()))
}

/// Creates the task's named pipe for `kind` and opens the client's end of
/// it and the log file it is copied to.
fn open_log(config: &TaskConfig, kind: LogKind) -> Result<(PathBuf, Pump), DriverError> {
    let fifo = fifo_path(&config.log_dir, &config.task_name, kind);
    let node_err = |e: std::io::Error| DriverError::Node(format!("{}: {e}", fifo.display()));
    make_fifo(&fifo).map_err(node_err)?;
    let reader = open_fifo_reader(&fifo).map_err(node_err)?;
    let log = RotatingLog::open(&config.log_dir, &config.task_name, kind, &config.log_config)
        .map_err(|e| DriverError::Node(format!("opening the {} log: {e}", kind.as_str())))?;
    Ok((fifo, (reader, log)))
}

/// A pipe's reading end and the log it goes to.
type Pump = (Receiver, RotatingLog);

fn spawn_pumps(exit: &watch::Receiver<Option<ExitResult>>, pumps: Vec<Pump>) {
    for (reader, log) in pumps {
        let exit = exit.clone();
        tokio::spawn(async move {
            let exited = async move {
                wait_exit(exit).await;
            };
            if let Err(e) = pump_fifo(reader, log, exited).await {
                tracing::warn!(error = %e, "task log pump failed");
            }
        });
    }
}

pub(super) async fn wait_exit(mut exit: watch::Receiver<Option<ExitResult>>) -> ExitResult {
    match exit.wait_for(|v| v.is_some()).await {
        Ok(v) => v.clone().unwrap_or_default(),
        Err(_) => ExitResult {
            err: Some("the process watcher went away".into()),
            ..Default::default()
        },
    }
}

pub(super) fn exited(live: &Live) -> bool {
    live.exit.borrow().is_some()
}

pub(super) async fn stop(
    live: &Live,
    kill_timeout: Duration,
    signal: &str,
) -> Result<(), DriverError> {
    if exited(live) {
        kill_group(live.pid, libc::SIGKILL);
        return Ok(());
    }
    let sig = super::parse_signal(signal).unwrap_or(libc::SIGTERM);
    kill_group(live.pid, sig);
    if tokio::time::timeout(kill_timeout, wait_exit(live.exit.clone()))
        .await
        .is_err()
    {
        kill_group(live.pid, libc::SIGKILL);
        if tokio::time::timeout(KILL_GRACE, wait_exit(live.exit.clone()))
            .await
            .is_err()
        {
            return Err(DriverError::Node(format!(
                "process {} survived SIGKILL for {KILL_GRACE:?}",
                live.pid
            )));
        }
    }
    kill_group(live.pid, libc::SIGKILL);
    Ok(())
}

/// Sends a user's signal to the task's main process, as Nomad's executor
/// does (not to its group: a `SIGHUP` meant for a supervisor must not
/// reach, and perhaps end, the workers it manages).
pub(super) fn send_signal(live: &Live, signal: &str) -> Result<(), DriverError> {
    let sig = super::parse_user_signal(signal).map_err(DriverError::task)?;
    let same = live.start_time == 0 || same_process_alive(live.pid, live.start_time);
    if exited(live) || !same || live.pid <= 1 {
        return Err(DriverError::task("Task not running"));
    }
    // SAFETY: kill has no memory effects; the pid is the task's own.
    if unsafe { libc::kill(live.pid, sig) } < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ESRCH) => DriverError::task("Task not running"),
            _ => DriverError::Node(format!("signalling process {}: {e}", live.pid)),
        });
    }
    Ok(())
}

/// Signals the task's whole process group.
pub(super) fn kill_group(pgid: i32, signal: i32) {
    if pgid > 1 {
        // SAFETY: kill has no memory effects; a gone group yields ESRCH.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

pub(super) fn recover(state: HandleState) -> Result<TaskHandle, DriverError> {
    let saved: PidState = serde_json::from_value(state.data.clone())
        .map_err(|e| DriverError::task(format!("unreadable {} handle: {e}", state.driver)))?;
    if !same_process_alive(saved.pid, saved.start_time) {
        return Err(DriverError::task(format!(
            "process {} is no longer running",
            saved.pid
        )));
    }
    let (tx, rx) = watch::channel(None);
    let (pid, start_time) = (saved.pid, saved.start_time);
    tokio::spawn(async move {
        // Not our child: its exit status is for its new parent. Poll /proc.
        while same_process_alive(pid, start_time) {
            tokio::time::sleep(REATTACHED_POLL).await;
        }
        kill_group(pid, libc::SIGKILL);
        let _ = tx.send(Some(ExitResult {
            err: Some("re-attached process exited; its exit status is unknown".into()),
            ..Default::default()
        }));
    });
    let log_config = LogConfig {
        max_files: saved.log_max_files,
        max_file_size_mb: saved.log_max_file_size_mb,
    };
    let mut pumps = Vec::new();
    for kind in [LogKind::Stdout, LogKind::Stderr] {
        let fifo = fifo_path(&saved.log_dir, &state.task_name, kind);
        let opened = open_fifo_reader(&fifo).and_then(|reader| {
            RotatingLog::open(&saved.log_dir, &state.task_name, kind, &log_config)
                .map(|log| (reader, log))
        });
        match opened {
            Ok(pump) => pumps.push(pump),
            Err(e) => {
                tracing::warn!(fifo = %fifo.display(), error = %e, "re-opening a task log; its output is lost")
            }
        }
    }
    spawn_pumps(&rx, pumps);
    Ok(TaskHandle::new(
        state,
        Arc::new(Live {
            pid,
            start_time,
            exit: rx,
            state: saved,
        }),
    ))
}

/// The process's start time in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`), or `None` when it is gone or a zombie.
pub fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields are
    // counted from after its closing parenthesis (field 3 is the state).
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

pub(super) fn same_process_alive(pid: i32, start_time: u64) -> bool {
    process_start_time(pid).is_some_and(|t| t == start_time)
}

/// A user's uid and gid, for `user = "..."`.
pub(super) fn lookup_user(name: &str) -> Result<(u32, u32), DriverError> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| DriverError::task(format!("invalid user name {name:?}")))?;
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to live, correctly sized buffers owned here.
    let rc = unsafe {
        libc::getpwnam_r(
            c.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return Err(DriverError::task(format!("user {name:?} not found")));
    }
    Ok((pwd.pw_uid, pwd.pw_gid))
}
