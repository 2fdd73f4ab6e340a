//! `mock_driver`: tasks that are only timers, with Nomad's mock driver
//! configuration, for tests and for simulating thousands of nodes.
//!
//! A mock task costs a handle and a deadline: nothing runs until someone
//! waits on it, and waiting is one timer. Config keys: `run_for` (Go
//! duration; how long the task runs), `exit_code`, `exit_signal`,
//! `exit_err_msg`, `start_error` (+ `start_error_recoverable`),
//! `start_block_for`, `kill_after` (how long it ignores a stop),
//! `signal_error` (what a signal sent to the task fails with), and
//! `stdout_string` written `stdout_repeat` times every
//! `stdout_repeat_duration`.

use super::{
    parse_go_duration, BoxFuture, Driver, DriverError, ExitResult, HandleState, TaskConfig,
    TaskHandle,
};
use crate::logs::{LogKind, RotatingLog};
use herder::structs::node::labels;
use herder::structs::DriverInfo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tokio::time::Instant;

pub const NAME: &str = "mock_driver";

#[derive(Default)]
pub struct MockDriver;

impl MockDriver {
    pub fn new() -> Self {
        MockDriver
    }
}

/// The mock task's settings, parsed from the task config.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MockConfig {
    pub run_for: Duration,
    pub exit_code: i32,
    pub exit_signal: i32,
    pub exit_err_msg: String,
    pub start_error: String,
    pub start_error_recoverable: bool,
    pub start_block_for: Duration,
    pub kill_after: Duration,
    pub signal_error: String,
    pub stdout_string: String,
    pub stdout_repeat: u32,
    pub stdout_repeat_duration: Duration,
}

impl MockConfig {
    pub fn parse(config: &BTreeMap<String, serde_json::Value>) -> Result<MockConfig, DriverError> {
        let duration = |key: &str| -> Result<Duration, DriverError> {
            match config.get(key) {
                None | Some(serde_json::Value::Null) => Ok(Duration::ZERO),
                Some(v) => parse_go_duration(v).ok_or_else(|| {
                    DriverError::task(format!("mock_driver: {key}: invalid duration {v}"))
                }),
            }
        };
        let int = |key: &str| -> Result<i64, DriverError> {
            match config.get(key) {
                None | Some(serde_json::Value::Null) => Ok(0),
                Some(serde_json::Value::Number(n)) => n.as_i64().ok_or_else(|| {
                    DriverError::task(format!("mock_driver: {key}: not an integer"))
                }),
                Some(serde_json::Value::String(s)) => s
                    .parse()
                    .map_err(|_| DriverError::task(format!("mock_driver: {key}: not an integer"))),
                Some(v) => Err(DriverError::task(format!(
                    "mock_driver: {key}: not an integer: {v}"
                ))),
            }
        };
        let string = |key: &str| match config.get(key) {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => String::new(),
        };
        let boolean = |key: &str| match config.get(key) {
            Some(serde_json::Value::Bool(b)) => *b,
            Some(serde_json::Value::String(s)) => s == "true" || s == "1",
            _ => false,
        };
        Ok(MockConfig {
            run_for: duration("run_for")?,
            exit_code: i32::try_from(int("exit_code")?).unwrap_or(1),
            exit_signal: i32::try_from(int("exit_signal")?).unwrap_or(0),
            exit_err_msg: string("exit_err_msg"),
            start_error: string("start_error"),
            start_error_recoverable: boolean("start_error_recoverable"),
            start_block_for: duration("start_block_for")?,
            kill_after: duration("kill_after")?,
            signal_error: string("signal_error"),
            stdout_string: string("stdout_string"),
            stdout_repeat: u32::try_from(int("stdout_repeat")?).unwrap_or(0),
            stdout_repeat_duration: duration("stdout_repeat_duration")?,
        })
    }

    fn natural_exit(&self) -> ExitResult {
        ExitResult {
            exit_code: self.exit_code,
            signal: self.exit_signal,
            err: (!self.exit_err_msg.is_empty()).then(|| self.exit_err_msg.clone()),
        }
    }
}

/// Persisted so a restarted client finds the task where its timer left it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct MockState {
    /// Unix milliseconds at which the task exits on its own.
    deadline_unix_ms: u64,
    exit_code: i32,
    exit_signal: i32,
    exit_err_msg: String,
    kill_after_ms: u64,
    #[serde(default)]
    signal_error: String,
}

struct Live {
    deadline: Instant,
    natural: ExitResult,
    kill_after: Duration,
    signal_error: String,
    /// Set when the task was stopped: the exit it reports instead.
    stopped: watch::Sender<Option<ExitResult>>,
}

impl Driver for MockDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn fingerprint(&self) -> DriverInfo {
        DriverInfo {
            attributes: labels([(format!("driver.{NAME}"), "1")]),
            detected: true,
            healthy: true,
            health_description: "Healthy".into(),
            update_time: Some(crate::clock::now_nanos()),
        }
    }

    fn start_task(&self, config: TaskConfig) -> BoxFuture<'_, Result<TaskHandle, DriverError>> {
        Box::pin(async move { start(config).await })
    }

    fn wait(&self, handle: TaskHandle) -> BoxFuture<'_, ExitResult> {
        Box::pin(async move {
            let Some(live) = handle.live::<Live>() else {
                return ExitResult {
                    err: Some("not a mock_driver handle".into()),
                    ..Default::default()
                };
            };
            let mut stopped = live.stopped.subscribe();
            tokio::select! {
                _ = tokio::time::sleep_until(live.deadline) => live.natural.clone(),
                r = stopped.wait_for(|v| v.is_some()) => match r {
                    Ok(v) => v.clone().unwrap_or_default(),
                    Err(_) => live.natural.clone(),
                },
            }
        })
    }

    fn stop(
        &self,
        handle: TaskHandle,
        kill_timeout: Duration,
        signal: String,
    ) -> BoxFuture<'_, Result<(), DriverError>> {
        Box::pin(async move {
            let live = handle
                .live::<Live>()
                .ok_or_else(|| DriverError::task("not a mock_driver handle"))?;
            if Instant::now() >= live.deadline || live.stopped.borrow().is_some() {
                return Ok(());
            }
            // The task ignores the stop for `kill_after`; the forced kill at
            // `kill_timeout` wins if it comes first.
            let (wait, sig) = if live.kill_after < kill_timeout {
                (
                    live.kill_after,
                    super::parse_signal(&signal).unwrap_or(libc::SIGTERM),
                )
            } else {
                (kill_timeout, libc::SIGKILL)
            };
            tokio::time::sleep_until(live.deadline.min(Instant::now() + wait)).await;
            live.stopped.send_replace(Some(ExitResult {
                exit_code: 0,
                signal: sig,
                err: None,
            }));
            Ok(())
        })
    }

    fn recover(&self, state: HandleState) -> BoxFuture<'_, Result<TaskHandle, DriverError>> {
        Box::pin(async move {
            let saved: MockState = serde_json::from_value(state.data.clone())
                .map_err(|e| DriverError::task(format!("unreadable mock handle: {e}")))?;
            let remaining = Duration::from_millis(saved.deadline_unix_ms.saturating_sub(unix_ms()));
            let live = Live {
                deadline: Instant::now() + remaining,
                natural: ExitResult {
                    exit_code: saved.exit_code,
                    signal: saved.exit_signal,
                    err: (!saved.exit_err_msg.is_empty()).then_some(saved.exit_err_msg),
                },
                kill_after: Duration::from_millis(saved.kill_after_ms),
                signal_error: saved.signal_error,
                stopped: watch::channel(None).0,
            };
            Ok(TaskHandle::new(state, Arc::new(live)))
        })
    }

    fn signal(&self, handle: TaskHandle, signal: String) -> BoxFuture<'_, Result<(), DriverError>> {
        Box::pin(async move {
            let live = handle
                .live::<Live>()
                .ok_or_else(|| DriverError::task("not a mock_driver handle"))?;
            super::parse_user_signal(&signal).map_err(DriverError::task)?;
            if Instant::now() >= live.deadline || live.stopped.borrow().is_some() {
                return Err(DriverError::task("Task not running"));
            }
            if !live.signal_error.is_empty() {
                return Err(DriverError::task(live.signal_error.clone()));
            }
            // A timer has nothing to react with: the signal is taken.
            Ok(())
        })
    }

    /// A timer has no process to run a command beside: refused, so a
    /// user learns the driver cannot do it rather than seeing nothing.
    fn exec_streaming(
        &self,
        _handle: TaskHandle,
        _request: super::ExecRequest,
    ) -> BoxFuture<'_, Result<super::ExecSession, DriverError>> {
        Box::pin(async {
            Err(DriverError::task(
                "mock_driver tasks run no process: alloc exec is not supported by this driver",
            ))
        })
    }
}

async fn start(config: TaskConfig) -> Result<TaskHandle, DriverError> {
    let mock = MockConfig::parse(&config.config)?;
    if !mock.start_block_for.is_zero() {
        tokio::time::sleep(mock.start_block_for).await;
    }
    if !mock.start_error.is_empty() {
        return Err(DriverError::Task {
            message: mock.start_error.clone(),
            recoverable: mock.start_error_recoverable,
        });
    }
    if !mock.stdout_string.is_empty() {
        write_stdout(&config, &mock)?;
    }
    let state = MockState {
        deadline_unix_ms: unix_ms()
            + u64::try_from(mock.run_for.as_millis()).unwrap_or(u64::MAX / 2),
        exit_code: mock.exit_code,
        exit_signal: mock.exit_signal,
        exit_err_msg: mock.exit_err_msg.clone(),
        kill_after_ms: u64::try_from(mock.kill_after.as_millis()).unwrap_or(u64::MAX),
        signal_error: mock.signal_error.clone(),
    };
    let live = Live {
        deadline: Instant::now() + mock.run_for,
        natural: mock.natural_exit(),
        kill_after: mock.kill_after,
        signal_error: mock.signal_error.clone(),
        stopped: watch::channel(None).0,
    };
    Ok(TaskHandle::new(
        HandleState {
            driver: NAME.into(),
            task_name: config.task_name,
            data: serde_json::to_value(&state).unwrap_or_default(),
        },
        Arc::new(live),
    ))
}

/// Writes `stdout_string` once now and then on a timer, `stdout_repeat`
/// times more, into the task's stdout log.
fn write_stdout(config: &TaskConfig, mock: &MockConfig) -> Result<(), DriverError> {
    let mut log = RotatingLog::open(
        &config.log_dir,
        &config.task_name,
        LogKind::Stdout,
        &config.log_config,
    )
    .map_err(|e| DriverError::Node(format!("opening the stdout log: {e}")))?;
    log.write_all(mock.stdout_string.as_bytes())
        .map_err(|e| DriverError::Node(format!("writing the stdout log: {e}")))?;
    if mock.stdout_repeat > 0 && !mock.stdout_repeat_duration.is_zero() {
        let (text, every, times) = (
            mock.stdout_string.clone(),
            mock.stdout_repeat_duration,
            mock.stdout_repeat,
        );
        let run_for = mock.run_for;
        tokio::spawn(async move {
            let end = Instant::now() + run_for;
            for _ in 0..times {
                tokio::time::sleep(every).await;
                if Instant::now() > end || log.write_all(text.as_bytes()).is_err() {
                    break;
                }
            }
        });
    }
    Ok(())
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
