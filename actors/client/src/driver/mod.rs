//! Task drivers: the part of the client that actually runs a task.
//!
//! A driver is object-safe (methods return boxed futures) so the client can
//! hold any set of them as `Arc<dyn Driver>` and new ones (`exec`, docker)
//! can be added without touching the runners. A started task is a
//! [`TaskHandle`]: a serializable [`HandleState`] that is persisted in the
//! task directory so a restarted client can `recover` it, plus the driver's
//! live, in-memory part.

pub mod exec;
mod exec_session;
pub mod mock;
pub mod raw_exec;
mod set;

pub use exec_session::{ExecInput, ExecOutput, ExecRequest, ExecSession};
pub use set::{DriverOptions, DriverSet};

use herder::structs::{DriverInfo, LogConfig};
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A boxed, sendable future: what driver methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a driver could not do what it was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// The node is at fault (driver unavailable, an I/O error of its disk,
    /// no process could be forked): the servers should count it against the
    /// node, not the job. A binary the job names and the node lacks is the
    /// job's fault (`Task`): counting it against the node suspended healthy
    /// nodes for 15 minutes and left the job with "no nodes eligible".
    #[error("{0}")]
    Node(String),
    /// The task is at fault (bad configuration, a start error of its own).
    /// `recoverable` errors go through the restart policy; others fail the
    /// task at once, as Nomad does.
    #[error("{message}")]
    Task { message: String, recoverable: bool },
}

impl DriverError {
    pub fn task(message: impl Into<String>) -> Self {
        DriverError::Task {
            message: message.into(),
            recoverable: false,
        }
    }

    pub fn is_node_failure(&self) -> bool {
        matches!(self, DriverError::Node(_))
    }

    /// Whether the restart policy may retry after this error.
    pub fn is_recoverable(&self) -> bool {
        match self {
            DriverError::Node(_) => true,
            DriverError::Task { recoverable, .. } => *recoverable,
        }
    }
}

/// Everything a driver needs to start one task.
#[derive(Clone, Debug, Default)]
pub struct TaskConfig {
    pub alloc_id: herder::structs::AllocId,
    pub task_name: String,
    /// The task's `config` block, already interpolated.
    pub config: BTreeMap<String, serde_json::Value>,
    /// The complete environment of the task.
    pub env: BTreeMap<String, String>,
    /// The working directory (`<alloc_dir>/<task>`).
    pub task_dir: PathBuf,
    /// Where the task's logs go (`<alloc_dir>/alloc/logs`).
    pub log_dir: PathBuf,
    pub log_config: LogConfig,
    pub cpu_mhz: i64,
    pub memory_mb: i64,
    /// The hard memory limit (`memory_max`); 0 means `memory_mb`.
    pub memory_max_mb: i64,
    /// Run as this user; empty means the driver's default (the client's
    /// own user for `raw_exec`, `nobody` for `exec`).
    pub user: String,
    /// The directory the group's tasks share (`<alloc_dir>/alloc`).
    pub shared_dir: PathBuf,
    /// The task's host volumes, resolved to host paths.
    pub volume_mounts: Vec<TaskMount>,
}

/// A host volume a task mounts (`volume_mount` of a `host` volume).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskMount {
    /// The volume's path on the host.
    pub host_path: PathBuf,
    /// Where it appears to the task (inside its chroot).
    pub destination: String,
    pub read_only: bool,
}

/// How a task ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitResult {
    pub exit_code: i32,
    pub signal: i32,
    /// Set when the exit status could not be observed (a re-attached process
    /// has no parent to report it) or the driver failed while waiting.
    pub err: Option<String>,
}

impl ExitResult {
    pub fn successful(&self) -> bool {
        self.exit_code == 0 && self.signal == 0 && self.err.is_none()
    }
}

/// The persisted part of a handle: enough for `recover` after a restart.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandleState {
    pub driver: String,
    pub task_name: String,
    /// Driver-specific data (a pid and its start time, a deadline, ...).
    pub data: serde_json::Value,
}

/// A started task.
#[derive(Clone)]
pub struct TaskHandle {
    pub state: HandleState,
    /// The driver's live part; each driver downcasts its own type.
    live: Arc<dyn Any + Send + Sync>,
}

impl TaskHandle {
    pub fn new(state: HandleState, live: Arc<dyn Any + Send + Sync>) -> Self {
        TaskHandle { state, live }
    }

    /// The driver's live part, if this handle is of type `T`.
    pub fn live<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.live.clone().downcast::<T>().ok()
    }
}

impl std::fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// A task driver.
pub trait Driver: Send + Sync + 'static {
    /// The name jobs use in `driver = "..."`.
    fn name(&self) -> &'static str;

    /// Whether the driver can run tasks here, with its node attributes.
    fn fingerprint(&self) -> DriverInfo;

    /// Starts the task; returns once it runs (or failed to start).
    fn start_task(&self, config: TaskConfig) -> BoxFuture<'_, Result<TaskHandle, DriverError>>;

    /// Resolves when the task has exited. May be called more than once.
    fn wait(&self, handle: TaskHandle) -> BoxFuture<'_, ExitResult>;

    /// Sends `signal` (empty: SIGTERM), then kills the task after
    /// `kill_timeout`; resolves once it is gone.
    fn stop(
        &self,
        handle: TaskHandle,
        kill_timeout: Duration,
        signal: String,
    ) -> BoxFuture<'_, Result<(), DriverError>>;

    /// Re-attaches to a task a previous client started, or fails if the task
    /// is gone.
    fn recover(&self, state: HandleState) -> BoxFuture<'_, Result<TaskHandle, DriverError>>;

    /// Delivers `signal` (a name [`parse_signal`] reads) to the running
    /// task, as `nomad alloc signal` asks; nothing waits for the task to
    /// react. A signal no table knows, or a task that already exited, is
    /// an error of the task (`DriverError::Task`).
    fn signal(&self, handle: TaskHandle, signal: String) -> BoxFuture<'_, Result<(), DriverError>>;

    /// Runs `request.command` beside the running task, as `nomad alloc
    /// exec` asks: in the task's isolation (its namespaces and chroot for
    /// `exec`, its directory for `raw_exec`), as the task's user. The
    /// session's input and output go through the returned channels; the
    /// command is killed when the session is dropped.
    fn exec_streaming(
        &self,
        handle: TaskHandle,
        request: ExecRequest,
    ) -> BoxFuture<'_, Result<ExecSession, DriverError>>;
}

/// The signals a task may be sent by name, as Nomad's signal table names
/// them (Linux numbering).
pub const SIGNALS: &[(&str, i32)] = &[
    ("SIGABRT", libc::SIGABRT),
    ("SIGALRM", libc::SIGALRM),
    ("SIGBUS", libc::SIGBUS),
    ("SIGCHLD", libc::SIGCHLD),
    ("SIGCONT", libc::SIGCONT),
    ("SIGFPE", libc::SIGFPE),
    ("SIGHUP", libc::SIGHUP),
    ("SIGILL", libc::SIGILL),
    ("SIGINT", libc::SIGINT),
    ("SIGIO", libc::SIGIO),
    ("SIGIOT", libc::SIGIOT),
    ("SIGKILL", libc::SIGKILL),
    ("SIGPIPE", libc::SIGPIPE),
    ("SIGPROF", libc::SIGPROF),
    ("SIGPWR", libc::SIGPWR),
    ("SIGQUIT", libc::SIGQUIT),
    ("SIGSEGV", libc::SIGSEGV),
    ("SIGSTKFLT", libc::SIGSTKFLT),
    ("SIGSTOP", libc::SIGSTOP),
    ("SIGSYS", libc::SIGSYS),
    ("SIGTERM", libc::SIGTERM),
    ("SIGTRAP", libc::SIGTRAP),
    ("SIGTSTP", libc::SIGTSTP),
    ("SIGTTIN", libc::SIGTTIN),
    ("SIGTTOU", libc::SIGTTOU),
    ("SIGURG", libc::SIGURG),
    ("SIGUSR1", libc::SIGUSR1),
    ("SIGUSR2", libc::SIGUSR2),
    ("SIGVTALRM", libc::SIGVTALRM),
    ("SIGWINCH", libc::SIGWINCH),
    ("SIGXCPU", libc::SIGXCPU),
    ("SIGXFSZ", libc::SIGXFSZ),
];

/// In a task's child just before exec: every signal back to its default
/// action. A signal the agent ignores (`nohup herder agent` ignores
/// SIGHUP; a shell's background job ignores SIGINT) would otherwise stay
/// ignored in every task, and a task's `trap` on it silently does nothing
/// (a non-interactive shell may not trap a signal ignored on entry).
/// Handlers are reset by exec itself; only "ignore" survives it.
///
/// # Safety
/// Only async-signal-safe calls: for a `pre_exec` hook.
pub unsafe fn reset_ignored_signals() {
    // The standard signals, 1 to 31 (the real-time ones are left alone).
    for sig in 1..32 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

/// Parses a signal name as Nomad's `kill_signal` (`SIGINT`, `INT`, `2`);
/// empty is SIGTERM, the default kill signal.
pub fn parse_signal(name: &str) -> Option<i32> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Ok(n) = bare.parse::<i32>() {
        return (n > 0 && n < 65).then_some(n);
    }
    if bare.is_empty() {
        return Some(libc::SIGTERM);
    }
    SIGNALS
        .iter()
        .find(|(known, _)| known[3..] == *bare)
        .map(|(_, n)| *n)
}

/// Reads the signal a user asked to send (`nomad alloc signal -s`): a name
/// or number [`parse_signal`] knows, never empty (there is no default to
/// fall back on). The error text is the answer to a bad request.
pub fn parse_user_signal(name: &str) -> Result<i32, String> {
    match parse_signal(name) {
        Some(n) if !name.trim().is_empty() => Ok(n),
        _ => Err(format!(
            "invalid signal {name:?} - valid signals are {}",
            SIGNALS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Reads a Go duration (`"10s"`, `"1m30s"`, `"250ms"`) or a plain number of
/// nanoseconds, as job files carry both.
pub fn parse_go_duration(value: &serde_json::Value) -> Option<Duration> {
    match value {
        serde_json::Value::Number(n) => n.as_u64().map(Duration::from_nanos),
        serde_json::Value::String(s) => {
            let s = s.trim();
            if s.is_empty() || s == "0" {
                return Some(Duration::ZERO);
            }
            humantime::parse_duration(s).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_and_durations_parse_as_nomad_writes_them() {
        assert_eq!(parse_signal("SIGINT"), Some(libc::SIGINT));
        assert_eq!(parse_signal(""), Some(libc::SIGTERM));
        assert_eq!(parse_signal("kill"), Some(libc::SIGKILL));
        assert_eq!(parse_signal("9"), Some(9));
        assert_eq!(parse_signal("SIGNOPE"), None);
        assert_eq!(parse_signal("usr1"), Some(libc::SIGUSR1));
        assert_eq!(parse_user_signal("SIGUSR2"), Ok(libc::SIGUSR2));
        assert_eq!(parse_user_signal("15"), Ok(libc::SIGTERM));
        // python-nomad's conformance test looks for "invalid signal".
        assert!(parse_user_signal("INVALID-SIGNAL")
            .unwrap_err()
            .starts_with("invalid signal \"INVALID-SIGNAL\""));
        assert!(parse_user_signal("").is_err());
        let d = |s: &str| parse_go_duration(&serde_json::json!(s));
        assert_eq!(d("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(d("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(d("0"), Some(Duration::ZERO));
        assert_eq!(
            parse_go_duration(&serde_json::json!(1_000_000_000u64)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(d("soon"), None);
    }
}
