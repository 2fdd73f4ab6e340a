//! End-to-end tests of the node-local client: real processes under
//! `/bin/sh`, the mock driver, and allocation runners reporting updates.
//! Every wait is for a condition with a generous deadline, never a fixed
//! sleep, so a loaded machine only makes them slower.

use super::alloc_runner::{AllocRunner, AllocRunnerConfig, GetAllocState, Shutdown, Stop};
use super::driver::raw_exec::{process_start_time, RawExecDriver};
use super::driver::{Driver, DriverOptions, DriverSet, TaskConfig};
use super::logs::{read_logs, LogKind, Origin};
use super::AllocUpdate;
use actix::prelude::*;
use herder::structs::alloc::task_event;
use herder::structs::{
    Allocation, ClientStatus, Job, JobType, LogConfig, Node, Port, RestartPolicy, Task, TaskGroup,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const PATIENCE: Duration = Duration::from_secs(60);

/// Forwards allocation updates into a channel the test reads.
struct UpdateSink(mpsc::UnboundedSender<AllocUpdate>);

impl Actor for UpdateSink {
    type Context = Context<Self>;
}

impl Handler<AllocUpdate> for UpdateSink {
    type Result = ();
    fn handle(&mut self, msg: AllocUpdate, _: &mut Context<Self>) {
        let _ = self.0.send(msg);
    }
}

struct Harness {
    data_dir: tempfile::TempDir,
    rx: mpsc::UnboundedReceiver<AllocUpdate>,
    sink: Recipient<AllocUpdate>,
    seen: Vec<AllocUpdate>,
}

impl Harness {
    fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Harness {
            data_dir: tempfile::tempdir().unwrap(),
            rx,
            sink: UpdateSink(tx).start().recipient(),
            seen: Vec::new(),
        }
    }

    fn config(&self, alloc: &Allocation, job: &Arc<Job>) -> AllocRunnerConfig {
        let (drivers, _) = DriverSet::from_names(
            &["raw_exec".into(), "mock_driver".into()],
            &DriverOptions {
                raw_exec_enabled: true,
                ..Default::default()
            },
        );
        let mut node = Node {
            datacenter: "dc1".into(),
            name: "test-node".into(),
            ..Default::default()
        };
        node.attributes
            .insert("unique.network.ip-address".into(), "127.0.0.1".into());
        node.attributes.insert("kernel.name".into(), "linux".into());
        AllocRunnerConfig {
            alloc: alloc.clone(),
            job: job.clone(),
            node: Arc::new(node),
            data_dir: self.data_dir.path().to_path_buf(),
            drivers,
            host_env: Arc::new(BTreeMap::from([(
                "PATH".to_string(),
                "/usr/bin:/bin".to_string(),
            )])),
            updates: self.sink.clone(),
            ephemeral: false,
            catalog: Default::default(),
        }
    }

    /// Waits for an update matching `pred`, remembering every one seen.
    async fn until(&mut self, what: &str, pred: impl Fn(&AllocUpdate) -> bool) -> AllocUpdate {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.rx.recv()).await {
                Ok(Some(u)) => {
                    self.seen.push(u.clone());
                    if pred(&u) {
                        return u;
                    }
                }
                _ => panic!(
                    "timed out waiting for {what}; last update: {:#?}",
                    self.seen.last()
                ),
            }
        }
    }

    /// Every event type a task went through, in order, across all updates.
    fn event_types(&self, task: &str) -> Vec<String> {
        let mut out: Vec<(i64, String)> = Vec::new();
        for u in &self.seen {
            if let Some(s) = u.task_states.get(task) {
                for e in &s.events {
                    if !out
                        .iter()
                        .any(|(t, ty)| *t == e.time && *ty == e.event_type)
                    {
                        out.push((e.time, e.event_type.clone()));
                    }
                }
            }
        }
        out.into_iter().map(|(_, t)| t).collect()
    }
}

fn sh_task(name: &str, script: &str) -> Task {
    let mut t = Task {
        name: name.into(),
        driver: "raw_exec".into(),
        ..Default::default()
    };
    t.config
        .insert("command".into(), serde_json::json!("/bin/sh"));
    t.config
        .insert("args".into(), serde_json::json!(["-c", script]));
    t
}

fn mock_task(name: &str, config: serde_json::Value) -> Task {
    let mut t = Task {
        name: name.into(),
        driver: "mock_driver".into(),
        ..Default::default()
    };
    t.config = serde_json::from_value(config).unwrap();
    t
}

fn job_with(job_type: JobType, tasks: Vec<Task>, restart: RestartPolicy) -> Arc<Job> {
    let mut job = Job {
        id: "example".into(),
        job_type,
        ..Default::default()
    };
    job.task_groups.push(TaskGroup {
        name: "group".into(),
        count: 1,
        tasks,
        restart_policy: Some(restart),
        ..Default::default()
    });
    job.canonicalize();
    Arc::new(job)
}

fn no_restarts() -> RestartPolicy {
    RestartPolicy {
        attempts: 0,
        interval: Duration::from_secs(60),
        delay: Duration::from_millis(10),
        mode: "fail".into(),
    }
}

fn alloc_for(job: &Job) -> Allocation {
    let mut alloc = Allocation {
        id: herder::structs::new_id(),
        name: Allocation::name_for(&job.id, "group", 0).into(),
        job_id: job.id.as_str().into(),
        task_group: "group".into(),
        namespace: "default".into(),
        ..Default::default()
    };
    Arc::make_mut(&mut alloc.allocated_resources)
        .shared
        .ports
        .push(Port {
            label: "http".into(),
            value: 23456,
            ..Default::default()
        });
    alloc
}

fn stdout_of(h: &Harness, alloc: &Allocation, task: &str) -> String {
    let dir = h.data_dir.path().join("alloc").join(alloc.id.to_string());
    let chunk = read_logs(&dir, task, LogKind::Stdout, 0, Origin::Start, 1 << 20).unwrap();
    String::from_utf8_lossy(&chunk.data).into_owned()
}

/// Polls `cond` until it holds or the deadline passes.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn alive(pid: i32) -> bool {
    process_start_time(pid).is_some()
}

async fn read_pids(path: &Path, count: usize) -> Vec<i32> {
    let mut pids = Vec::new();
    eventually("the task to write its pids", || {
        std::fs::read_to_string(path)
            .map(|s| s.lines().count() >= count)
            .unwrap_or(false)
    })
    .await;
    for line in std::fs::read_to_string(path).unwrap().lines() {
        pids.push(line.trim().parse().unwrap());
    }
    pids
}

#[tokio::test]
async fn raw_exec_reports_exit_code_and_captures_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let task_dir = tmp.path().join("t");
    std::fs::create_dir_all(&task_dir).unwrap();
    let log_dir = tmp.path().join("alloc/logs");
    let mut config = BTreeMap::new();
    config.insert("command".to_string(), serde_json::json!("sh"));
    config.insert(
        "args".to_string(),
        serde_json::json!(["-c", "echo hi; echo oops >&2; exit 3"]),
    );
    let driver = RawExecDriver::new(true);
    let handle = driver
        .start_task(TaskConfig {
            task_name: "t".into(),
            config,
            env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
            task_dir,
            log_dir,
            log_config: LogConfig::default(),
            ..Default::default()
        })
        .await
        .unwrap();
    let exit = tokio::time::timeout(PATIENCE, driver.wait(handle))
        .await
        .unwrap();
    assert_eq!(exit.exit_code, 3);
    assert!(!exit.successful());
    eventually("stdout and stderr to be written", || {
        let out = read_logs(tmp.path(), "t", LogKind::Stdout, 0, Origin::Start, 100).unwrap();
        let err = read_logs(tmp.path(), "t", LogKind::Stderr, 0, Origin::Start, 100).unwrap();
        out.data == b"hi\n" && err.data == b"oops\n"
    })
    .await;
}

#[tokio::test]
async fn raw_exec_missing_binary_is_the_jobs_fault() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = BTreeMap::new();
    config.insert(
        "command".to_string(),
        serde_json::json!("/nonexistent/bin/tool"),
    );
    let err = RawExecDriver::new(true)
        .start_task(TaskConfig {
            task_name: "t".into(),
            config,
            task_dir: tmp.path().to_path_buf(),
            log_dir: tmp.path().join("logs"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    // Issue 16: a command the node lacks suspended the node for 15 min.
    assert!(
        !err.is_node_failure(),
        "a missing binary is the job's fault: {err}"
    );
    let err = RawExecDriver::new(true)
        .start_task(TaskConfig {
            task_name: "t".into(),
            task_dir: tmp.path().to_path_buf(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        !err.is_node_failure(),
        "a missing command is the job's fault: {err}"
    );
}

#[actix_rt::test]
async fn task_env_has_nomad_and_herder_variables() {
    let mut h = Harness::new();
    let mut task = sh_task("web", "env");
    task.env.insert(
        "FROM_JOB".into(),
        "${NOMAD_JOB_ID}-${attr.kernel.name}".into(),
    );
    let job = job_with(JobType::Batch, vec![task], no_restarts());
    let alloc = alloc_for(&job);
    let _runner = AllocRunner::new(h.config(&alloc, &job)).start();
    h.until("completion", |u| u.client_status == ClientStatus::Complete)
        .await;
    let out = stdout_of(&h, &alloc, "web");
    let id = alloc.id.to_string();
    for want in [
        format!("NOMAD_ALLOC_ID={id}"),
        format!("HERDER_ALLOC_ID={id}"),
        "NOMAD_TASK_NAME=web".into(),
        "NOMAD_ALLOC_INDEX=0".into(),
        "NOMAD_JOB_NAME=example".into(),
        "NOMAD_PORT_http=23456".into(),
        "HERDER_PORT_http=23456".into(),
        "NOMAD_ADDR_http=127.0.0.1:23456".into(),
        "FROM_JOB=example-linux".into(),
    ] {
        assert!(out.lines().any(|l| l == want), "missing {want} in:\n{out}");
    }
    let types = h.event_types("web");
    assert_eq!(
        types,
        ["Received", "Task Setup", "Started", "Terminated"],
        "{types:?}"
    );
}

#[actix_rt::test]
async fn restart_policy_restarts_then_fails_the_allocation() {
    let mut h = Harness::new();
    let policy = RestartPolicy {
        attempts: 2,
        interval: Duration::from_secs(600),
        delay: Duration::from_millis(50),
        mode: "fail".into(),
    };
    let job = job_with(
        JobType::Service,
        vec![sh_task("crash", "echo start; exit 7")],
        policy,
    );
    let alloc = alloc_for(&job);
    let _runner = AllocRunner::new(h.config(&alloc, &job)).start();
    let last = h
        .until("failure", |u| u.client_status == ClientStatus::Failed)
        .await;
    assert_eq!(last.client_description, "Failed tasks");
    assert!(
        !last.node_failure,
        "a crashing task is not the node's fault"
    );
    let state = last.task_states.get("crash").unwrap();
    assert_eq!(state.state, "dead");
    assert!(state.failed);
    assert_eq!(state.restarts, 2);
    let types = h.event_types("crash");
    let expected = [
        "Received",
        "Task Setup",
        "Started",
        "Terminated",
        "Restarting",
        "Started",
        "Terminated",
        "Restarting",
        "Started",
        "Terminated",
        "Not Restarting",
    ];
    assert_eq!(types, expected);
    let not_restarting = state.events.last().unwrap();
    assert!(not_restarting.fails_task);
    assert!(
        not_restarting
            .restart_reason
            .contains("Exceeded allowed attempts 2"),
        "{not_restarting:?}"
    );
    let terminated = state
        .events
        .iter()
        .rev()
        .find(|e| e.event_type == task_event::TERMINATED)
        .unwrap();
    assert_eq!(terminated.exit_code, 7);
    assert_eq!(stdout_of(&h, &alloc, "crash"), "start\nstart\nstart\n");
}

#[actix_rt::test]
async fn kill_timeout_is_honoured() {
    let mut h = Harness::new();
    // Ignores SIGTERM (inherited by its sleeps): only SIGKILL ends it.
    let mut stubborn = sh_task(
        "stubborn",
        "trap '' TERM; echo ready; while :; do sleep 0.1; done",
    );
    stubborn.kill_timeout = Duration::from_secs(2);
    let mut polite = sh_task("polite", "echo ready; exec sleep 300");
    polite.kill_timeout = Duration::from_secs(45);
    let job = job_with(JobType::Service, vec![stubborn, polite], no_restarts());
    let alloc = alloc_for(&job);
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    h.until("running", |u| {
        u.client_status == ClientStatus::Running
            && u.task_states.values().all(|s| s.state == "running")
    })
    .await;
    eventually("both tasks to print", || {
        stdout_of(&h, &alloc, "stubborn") == "ready\n"
            && stdout_of(&h, &alloc, "polite") == "ready\n"
    })
    .await;
    let began = Instant::now();
    runner.do_send(Stop {
        reason: "test".into(),
    });
    let polite_done = h
        .until("polite dead", |u| {
            u.task_states
                .get("polite")
                .is_some_and(|s| s.state == "dead")
        })
        .await;
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "a process that exits on SIGTERM stops early"
    );
    let stubborn_state = polite_done.task_states.get("stubborn").unwrap();
    let done = if stubborn_state.state == "dead" {
        polite_done
    } else {
        h.until("complete", |u| u.client_status == ClientStatus::Complete)
            .await
    };
    assert!(
        began.elapsed() >= Duration::from_secs(2),
        "SIGKILL came only after kill_timeout"
    );
    assert_eq!(done.client_status, ClientStatus::Complete);
    let stubborn = done.task_states.get("stubborn").unwrap();
    let kinds: Vec<&str> = stubborn
        .events
        .iter()
        .map(|e| e.event_type.as_str())
        .collect();
    assert!(
        kinds.ends_with(&["Killing", "Terminated", "Killed"]),
        "{kinds:?}"
    );
    let terminated = &stubborn.events[stubborn.events.len() - 2];
    assert_eq!(terminated.signal, i64::from(libc::SIGKILL));
    assert!(!stubborn.failed);
}

#[actix_rt::test]
async fn stop_kills_the_whole_process_group() {
    let mut h = Harness::new();
    let script = "sleep 300 & echo $! >> pids; sleep 300 & echo $! >> pids; echo $$ >> pids; wait";
    let job = job_with(
        JobType::Service,
        vec![sh_task("tree", script)],
        no_restarts(),
    );
    let alloc = alloc_for(&job);
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    h.until("running", |u| u.client_status == ClientStatus::Running)
        .await;
    let pids_file = h
        .data_dir
        .path()
        .join("alloc")
        .join(alloc.id.to_string())
        .join("tree/pids");
    let pids = read_pids(&pids_file, 3).await;
    assert!(pids.iter().all(|p| alive(*p)));
    runner.do_send(Stop {
        reason: "job stopped".into(),
    });
    h.until("complete", |u| u.client_status == ClientStatus::Complete)
        .await;
    eventually("every process of the task to be gone", || {
        pids.iter().all(|p| !alive(*p))
    })
    .await;
}

#[actix_rt::test]
async fn mock_driver_runs_for_exits_and_fails_to_start() {
    let mut h = Harness::new();
    let job = job_with(
        JobType::Batch,
        vec![mock_task(
            "quick",
            serde_json::json!({"run_for": "100ms", "stdout_string": "mocked\n"}),
        )],
        no_restarts(),
    );
    let alloc = alloc_for(&job);
    let began = Instant::now();
    let _a = AllocRunner::new(h.config(&alloc, &job)).start();
    let done = h
        .until("complete", |u| u.client_status == ClientStatus::Complete)
        .await;
    assert!(began.elapsed() >= Duration::from_millis(100));
    assert_eq!(done.client_description, "All tasks have completed");
    assert_eq!(stdout_of(&h, &alloc, "quick"), "mocked\n");

    let job = job_with(
        JobType::Batch,
        vec![mock_task(
            "bad",
            serde_json::json!({"run_for": "10ms", "exit_code": 2}),
        )],
        no_restarts(),
    );
    let alloc = alloc_for(&job);
    let _b = AllocRunner::new(h.config(&alloc, &job)).start();
    let failed = h
        .until("exit 2 fails", |u| {
            u.alloc_id == alloc.id && u.client_status == ClientStatus::Failed
        })
        .await;
    let events = &failed.task_states.get("bad").unwrap().events;
    assert!(events
        .iter()
        .any(|e| e.event_type == "Terminated" && e.exit_code == 2));

    let job = job_with(
        JobType::Service,
        vec![mock_task(
            "broken",
            serde_json::json!({"start_error": "no luck"}),
        )],
        no_restarts(),
    );
    let alloc = alloc_for(&job);
    let _c = AllocRunner::new(h.config(&alloc, &job)).start();
    let failed = h
        .until("start error fails", |u| {
            u.alloc_id == alloc.id && u.client_status == ClientStatus::Failed
        })
        .await;
    let state = failed.task_states.get("broken").unwrap();
    let failure = state
        .events
        .iter()
        .find(|e| e.event_type == task_event::DRIVER_FAILURE)
        .unwrap();
    assert_eq!(failure.driver_error, "no luck");
    assert!(!failed.node_failure);
}

#[actix_rt::test]
async fn a_task_name_that_leads_outside_the_allocation_creates_nothing_and_is_the_jobs_fault() {
    // Issue 15: `../../tmp/x` created directories outside the data dir.
    let mut h = Harness::new();
    let marker = format!("escaped-{}", herder::structs::new_id());
    let name = format!("../../../{marker}");
    let job = job_with(JobType::Batch, vec![sh_task(&name, "true")], no_restarts());
    let alloc = alloc_for(&job);
    let _a = AllocRunner::new(h.config(&alloc, &job)).start();
    let failed = h
        .until("failure", |u| u.client_status == ClientStatus::Failed)
        .await;
    assert!(!failed.node_failure, "a bad name is the job's fault");
    let outside = h.data_dir.path().parent().unwrap();
    for dir in [outside, h.data_dir.path()] {
        let leaked: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(&marker))
            .collect();
        assert!(leaked.is_empty(), "created {leaked:?}");
    }
}

#[actix_rt::test]
async fn missing_driver_is_reported_as_a_node_failure() {
    let mut h = Harness::new();
    let mut task = sh_task("t", "true");
    task.driver = "docker".into();
    let job = job_with(JobType::Batch, vec![task], no_restarts());
    let alloc = alloc_for(&job);
    let _a = AllocRunner::new(h.config(&alloc, &job)).start();
    let failed = h
        .until("failure", |u| u.client_status == ClientStatus::Failed)
        .await;
    assert!(failed.node_failure);
}

#[actix_rt::test]
async fn prestart_task_runs_before_the_main_task() {
    let mut h = Harness::new();
    let mut init = sh_task("init", "echo init > ../alloc/data/order");
    init.lifecycle = Some(herder::structs::job::TaskLifecycle {
        hook: "prestart".into(),
        sidecar: false,
    });
    let main = sh_task("main", "cat ../alloc/data/order; echo main");
    let job = job_with(JobType::Batch, vec![main, init], no_restarts());
    let alloc = alloc_for(&job);
    let _a = AllocRunner::new(h.config(&alloc, &job)).start();
    h.until("complete", |u| u.client_status == ClientStatus::Complete)
        .await;
    assert_eq!(stdout_of(&h, &alloc, "main"), "init\nmain\n");
}

#[actix_rt::test]
async fn a_services_prestart_task_runs_once_and_the_main_task_then_runs() {
    // Issue 16: a non-sidecar prestart task that exited 0 was restarted
    // by the service restart policy, so the main task never started.
    let mut h = Harness::new();
    let mut init = sh_task("init", "echo init >> ../alloc/data/order");
    init.lifecycle = Some(herder::structs::job::TaskLifecycle {
        hook: "prestart".into(),
        sidecar: false,
    });
    let main = sh_task("main", "cat ../alloc/data/order; exec sleep 300");
    let policy = RestartPolicy {
        attempts: 3,
        interval: Duration::from_secs(600),
        delay: Duration::from_millis(20),
        mode: "fail".into(),
    };
    let job = job_with(JobType::Service, vec![main, init], policy);
    let alloc = alloc_for(&job);
    let a = AllocRunner::new(h.config(&alloc, &job)).start();
    let running = h
        .until("main running", |u| {
            u.task_states
                .get("main")
                .is_some_and(|s| s.state == "running")
        })
        .await;
    let init = running.task_states.get("init").unwrap();
    assert_eq!(
        (init.state.as_str(), init.failed, init.restarts),
        ("dead", false, 0)
    );
    assert_eq!(running.client_status, ClientStatus::Running);
    eventually("main's output", || {
        stdout_of(&h, &alloc, "main") == "init\n"
    })
    .await;
    a.do_send(Stop {
        reason: "test over".into(),
    });
}

#[actix_rt::test]
async fn client_restart_reattaches_live_tasks_and_reports_dead_ones_lost() {
    let mut h = Harness::new();
    let job = job_with(
        JobType::Service,
        vec![sh_task("srv", "echo $$ > pids; exec sleep 300")],
        no_restarts(),
    );
    let alloc = alloc_for(&job);
    let first = AllocRunner::new(h.config(&alloc, &job)).start();
    let running = h
        .until("running", |u| u.client_status == ClientStatus::Running)
        .await;
    let pid_file = h
        .data_dir
        .path()
        .join("alloc")
        .join(alloc.id.to_string())
        .join("srv/pids");
    let pid = read_pids(&pid_file, 1).await[0];
    first.send(Shutdown).await.unwrap();
    assert!(alive(pid), "shutdown leaves the task running");

    let mut known = alloc.clone();
    known.task_states = running.task_states.clone().into();
    let second = AllocRunner::restore(h.config(&known, &job)).start();
    let state = second.send(GetAllocState).await.unwrap();
    assert_ne!(state.client_status, ClientStatus::Lost);
    // Re-attached: stopping it through the new runner ends the same process.
    second.do_send(Stop {
        reason: "job stopped".into(),
    });
    h.until("complete", |u| {
        u.alloc_id == alloc.id && u.client_status == ClientStatus::Complete
    })
    .await;
    eventually("the task process to be gone", || !alive(pid)).await;

    // A task that died while no client watched is reported lost.
    let alloc2 = alloc_for(&job);
    let third = AllocRunner::new(h.config(&alloc2, &job)).start();
    let running = h
        .until("running", |u| {
            u.alloc_id == alloc2.id && u.client_status == ClientStatus::Running
        })
        .await;
    let pid_file = h
        .data_dir
        .path()
        .join("alloc")
        .join(alloc2.id.to_string())
        .join("srv/pids");
    let pid = read_pids(&pid_file, 1).await[0];
    third.send(Shutdown).await.unwrap();
    // SAFETY: signalling a process this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    eventually("the killed task to be gone", || !alive(pid)).await;
    let mut known = alloc2.clone();
    known.task_states = running.task_states.clone().into();
    let _fourth = AllocRunner::restore(h.config(&known, &job)).start();
    let lost = h
        .until("lost", |u| {
            u.alloc_id == alloc2.id && u.client_status == ClientStatus::Lost
        })
        .await;
    let srv = lost.task_states.get("srv").unwrap();
    assert_eq!(srv.state, "dead");
    assert!(
        srv.events.last().unwrap().message.contains("lost"),
        "{:?}",
        srv.events.last()
    );
}

#[actix_rt::test]
async fn manager_follows_the_servers_and_survives_a_client_restart() {
    use super::alloc_manager::{
        AllocManager, AllocManagerConfig, RestoreAll, ShutdownAll, SyncAllocs,
    };
    let mut h = Harness::new();
    let manager_config = |h: &Harness| {
        let c = h.config(&Allocation::default(), &Arc::new(Job::default()));
        AllocManagerConfig {
            node: c.node,
            data_dir: c.data_dir,
            drivers: c.drivers,
            host_env: c.host_env,
            updates: c.updates,
            ephemeral: false,
            catalog: Default::default(),
        }
    };
    let job = job_with(
        JobType::Service,
        vec![mock_task("svc", serde_json::json!({"run_for": "1h"}))],
        no_restarts(),
    );
    let mut alloc = alloc_for(&job);
    alloc.modify_index = 1;
    let first = AllocManager::new(manager_config(&h)).start();
    first
        .send(SyncAllocs {
            allocs: vec![(alloc.clone(), Some(job.clone()))],
        })
        .await
        .unwrap();
    h.until("running", |u| u.client_status == ClientStatus::Running)
        .await;
    first.send(ShutdownAll).await.unwrap();

    let second = AllocManager::new(manager_config(&h)).start();
    let restored = second.send(RestoreAll).await.unwrap();
    assert_eq!(restored, vec![alloc.id]);
    // Syncing the same allocation again does not start a second copy.
    second
        .send(SyncAllocs {
            allocs: vec![(alloc.clone(), Some(job.clone()))],
        })
        .await
        .unwrap();
    let mut stopped = alloc.clone();
    stopped.desired_status = herder::structs::DesiredStatus::Stop;
    stopped.modify_index = 2;
    second
        .send(SyncAllocs {
            // Without its job (a quarantined version): the stop still arrives.
            allocs: vec![(stopped, None)],
        })
        .await
        .unwrap();
    let done = h
        .until("complete", |u| u.client_status == ClientStatus::Complete)
        .await;
    let kinds: Vec<&str> = done
        .task_states
        .get("svc")
        .unwrap()
        .events
        .iter()
        .map(|e| e.event_type.as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "Received",
            "Task Setup",
            "Started",
            "Killing",
            "Terminated",
            "Killed"
        ]
    );
    let dir = h.data_dir.path().join("alloc").join(alloc.id.to_string());
    assert!(dir.is_dir());
    second.send(SyncAllocs { allocs: vec![] }).await.unwrap();
    eventually("the garbage collected alloc dir to be removed", || {
        !dir.exists()
    })
    .await;
}

#[actix_rt::test]
async fn raw_exec_logs_rotate_and_keep_max_files() {
    let mut h = Harness::new();
    // 2.5 MiB through 1 MiB files: indices 0..=2, of which 2 are kept.
    let mut task = sh_task("noisy", "head -c 2621440 /dev/zero");
    task.log_config = Some(LogConfig {
        max_files: 2,
        max_file_size_mb: 1,
    });
    let job = job_with(JobType::Batch, vec![task], no_restarts());
    let alloc = alloc_for(&job);
    let _a = AllocRunner::new(h.config(&alloc, &job)).start();
    h.until("complete", |u| u.client_status == ClientStatus::Complete)
        .await;
    let log_dir = h
        .data_dir
        .path()
        .join("alloc")
        .join(alloc.id.to_string())
        .join("alloc/logs");
    eventually("rotation to settle on two files", || {
        super::logs::log_indices(&log_dir, "noisy", LogKind::Stdout).unwrap() == [1, 2]
    })
    .await;
    let newest = std::fs::metadata(log_dir.join("noisy.stdout.2"))
        .unwrap()
        .len();
    assert_eq!(newest, 512 * 1024);
    assert_eq!(
        std::fs::metadata(log_dir.join("noisy.stdout.1"))
            .unwrap()
            .len(),
        1024 * 1024
    );
}

#[actix_rt::test]
async fn mock_kill_after_delays_the_stop_and_sidecars_end_with_the_main_task() {
    let mut h = Harness::new();
    let mut slow = mock_task(
        "slow",
        serde_json::json!({"run_for": "1h", "kill_after": "300ms"}),
    );
    slow.kill_timeout = Duration::from_secs(30);
    let job = job_with(JobType::Service, vec![slow], no_restarts());
    let alloc = alloc_for(&job);
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    h.until("running", |u| u.client_status == ClientStatus::Running)
        .await;
    let began = Instant::now();
    runner.do_send(Stop {
        reason: "test".into(),
    });
    h.until("complete", |u| u.client_status == ClientStatus::Complete)
        .await;
    let took = began.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(25),
        "{took:?}"
    );

    let mut sidecar = mock_task("proxy", serde_json::json!({"run_for": "1h"}));
    sidecar.lifecycle = Some(herder::structs::job::TaskLifecycle {
        hook: "prestart".into(),
        sidecar: true,
    });
    let main = mock_task("work", serde_json::json!({"run_for": "200ms"}));
    let job = job_with(JobType::Batch, vec![sidecar, main], no_restarts());
    let alloc = alloc_for(&job);
    let _b = AllocRunner::new(h.config(&alloc, &job)).start();
    let done = h
        .until("batch with sidecar completes", |u| {
            u.alloc_id == alloc.id && u.client_status == ClientStatus::Complete
        })
        .await;
    let proxy = done.task_states.get("proxy").unwrap();
    assert_eq!(proxy.state, "dead");
    assert!(!proxy.failed);
    assert!(proxy
        .events
        .iter()
        .any(|e| e.event_type == task_event::KILLED));
}

#[actix_rt::test]
async fn ephemeral_runners_touch_no_disk() {
    let mut h = Harness::new();
    let job = job_with(
        JobType::Batch,
        vec![mock_task("sim", serde_json::json!({"run_for": "20ms"}))],
        no_restarts(),
    );
    let alloc = alloc_for(&job);
    let mut config = h.config(&alloc, &job);
    config.ephemeral = true;
    let _a = AllocRunner::new(config).start();
    let done = h
        .until("complete", |u| u.client_status == ClientStatus::Complete)
        .await;
    let kinds: Vec<&str> = done
        .task_states
        .get("sim")
        .unwrap()
        .events
        .iter()
        .map(|e| e.event_type.as_str())
        .collect();
    assert_eq!(kinds, ["Received", "Task Setup", "Started", "Terminated"]);
    assert!(!h.data_dir.path().join("alloc").exists());
}

/// Sends a user's restart or signal to an allocation runner, as the API
/// does through the manager, and waits (bounded) for its answer.
async fn control(
    runner: &Addr<AllocRunner>,
    control: super::AllocControl,
) -> Result<(), super::ControlError> {
    use super::alloc_runner::ControlTasks;
    tokio::time::timeout(PATIENCE, runner.send(ControlTasks(control)))
        .await
        .expect("the runner answers in time")
        .expect("the runner is alive")
}

#[actix_rt::test]
async fn a_user_restart_starts_a_new_process_and_is_not_a_failure() {
    use super::{AllocControl, ControlError};
    let mut h = Harness::new();
    // No restarts allowed: an exit of its own would fail the task, so only
    // a restart that bypasses the policy keeps it running.
    let job = job_with(
        JobType::Service,
        vec![sh_task(
            "web",
            "echo $$ >> pids; while :; do sleep 0.1; done",
        )],
        no_restarts(),
    );
    let alloc = alloc_for(&job);
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    h.until("running", |u| u.client_status == ClientStatus::Running)
        .await;
    let pids_file = h
        .data_dir
        .path()
        .join("alloc")
        .join(alloc.id.to_string())
        .join("web/pids");
    let first = read_pids(&pids_file, 1).await[0];

    for round in 1..=2usize {
        control(&runner, AllocControl::Restart { task: None })
            .await
            .unwrap_or_else(|e| panic!("restart {round}: {e}"));
        // The answer comes once the old process is gone.
        let pids = read_pids(&pids_file, round + 1).await;
        assert!(
            !alive(pids[round - 1]),
            "round {round}: the old process is gone"
        );
        assert!(alive(pids[round]), "round {round}: a new process runs");
        assert_ne!(pids[round], first);
        let state = h
            .until("running again", |u| {
                u.task_states
                    .get("web")
                    .is_some_and(|s| s.state == "running" && s.restarts == round as u64)
            })
            .await;
        let web = state.task_states.get("web").unwrap();
        assert!(!web.failed);
        assert_eq!(state.client_status, ClientStatus::Running);
    }
    let types = h.event_types("web");
    assert_eq!(
        &types[2..],
        [
            "Started",
            "Restart Signaled",
            "Terminated",
            "Restarting",
            "Started",
            "Restart Signaled",
            "Terminated",
            "Restarting",
            "Started",
        ],
        "{types:?}"
    );
    let last = h.seen.last().unwrap().task_states.get("web").unwrap();
    let signaled = last
        .events
        .iter()
        .find(|e| e.event_type == task_event::RESTART_SIGNALED)
        .unwrap();
    assert_eq!(signaled.restart_reason, "User requested restart");
    assert_eq!(signaled.display_message, "User requested restart");
    let restarting = last
        .events
        .iter()
        .find(|e| e.event_type == task_event::RESTARTING)
        .unwrap();
    assert_eq!(restarting.display_message, "Task restarting in 0s");

    // A task it does not have, and one that is over.
    assert_eq!(
        control(
            &runner,
            AllocControl::Restart {
                task: Some("nope".into())
            }
        )
        .await,
        Err(ControlError::UnknownTask("nope".into()))
    );
    runner.do_send(Stop {
        reason: "test over".into(),
    });
    h.until("complete", |u| u.client_status == ClientStatus::Complete)
        .await;
    assert!(matches!(
        control(&runner, AllocControl::Restart { task: None }).await,
        Err(ControlError::Terminal { .. })
    ));
    let pids = read_pids(&pids_file, 3).await;
    eventually("every process gone", || pids.iter().all(|p| !alive(*p))).await;
}

#[actix_rt::test]
async fn a_signal_the_agent_ignores_is_not_ignored_by_its_tasks() {
    // `nohup herder agent` ignores SIGHUP; its tasks must not inherit it
    // (a shell cannot even trap a signal ignored on entry).
    // SAFETY: sets this test process's SIGHUP disposition; nothing in the
    // test binary relies on SIGHUP.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    use super::AllocControl;
    let h = Harness::new();
    let trapper = sh_task(
        "trapper",
        "trap 'echo got >> hup' HUP; echo ready; while :; do sleep 0.1; done",
    );
    let job = job_with(JobType::Service, vec![trapper], no_restarts());
    let alloc = alloc_for(&job);
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    eventually("the trap to be set", || {
        stdout_of(&h, &alloc, "trapper") == "ready\n"
    })
    .await;
    let hup = AllocControl::Signal {
        task: Some("trapper".into()),
        signal: "SIGHUP".into(),
    };
    control(&runner, hup).await.unwrap();
    let mark = h
        .data_dir
        .path()
        .join("alloc")
        .join(alloc.id.to_string())
        .join("trapper/hup");
    eventually("the trap to run", || mark.is_file()).await;
}

#[actix_rt::test]
async fn a_signal_reaches_the_tasks_process() {
    use super::{AllocControl, ControlError};
    let mut h = Harness::new();
    let trapper = sh_task(
        "trapper",
        "trap 'echo got >> usr1' USR1; echo ready; while :; do sleep 0.1; done",
    );
    let idle = sh_task("idle", "exec sleep 300");
    let job = job_with(JobType::Service, vec![trapper, idle], no_restarts());
    let alloc = alloc_for(&job);
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    h.until("running", |u| {
        u.client_status == ClientStatus::Running
            && u.task_states.values().all(|s| s.state == "running")
    })
    .await;
    eventually("the trap to be set", || {
        stdout_of(&h, &alloc, "trapper") == "ready\n"
    })
    .await;
    let signal = |task: Option<&str>, signal: &str| AllocControl::Signal {
        task: task.map(str::to_string),
        signal: signal.into(),
    };
    assert!(matches!(
        control(&runner, signal(Some("trapper"), "SIGBOGUS")).await,
        Err(ControlError::InvalidSignal(m)) if m.starts_with("invalid signal")
    ));
    assert_eq!(
        control(&runner, signal(Some("nope"), "SIGUSR1")).await,
        Err(ControlError::UnknownTask("nope".into()))
    );
    control(&runner, signal(Some("trapper"), "SIGUSR1"))
        .await
        .unwrap();
    let mark = h
        .data_dir
        .path()
        .join("alloc")
        .join(alloc.id.to_string())
        .join("trapper/usr1");
    eventually("the trap to run", || mark.is_file()).await;
    let signaled = h
        .until("the Signaling event", |u| {
            u.task_states.get("trapper").is_some_and(|s| {
                s.events
                    .iter()
                    .any(|e| e.event_type == task_event::SIGNALING)
            })
        })
        .await;
    let trapper = signaled.task_states.get("trapper").unwrap();
    let event = trapper
        .events
        .iter()
        .find(|e| e.event_type == task_event::SIGNALING)
        .unwrap();
    assert_eq!(
        event.details.get("signal").map(String::as_str),
        Some("SIGUSR1")
    );
    assert_eq!(event.display_message, "Task being sent a signal");
    assert_eq!(trapper.state, "running");
    // The other task was not signalled.
    assert!(!signaled
        .task_states
        .get("idle")
        .unwrap()
        .events
        .iter()
        .any(|e| e.event_type == task_event::SIGNALING));

    // No task named: every running task. SIGTERM ends `idle` (and, with no
    // restarts allowed, fails the allocation).
    control(&runner, signal(None, "SIGTERM")).await.unwrap();
    let failed = h
        .until("failed", |u| u.client_status == ClientStatus::Failed)
        .await;
    let idle = failed.task_states.get("idle").unwrap();
    assert!(idle
        .events
        .iter()
        .any(|e| e.event_type == task_event::SIGNALING));
    h.until("all dead", |u| {
        u.task_states.values().all(|s| s.state == "dead")
    })
    .await;
    assert!(matches!(
        control(&runner, signal(None, "SIGUSR1")).await,
        Err(ControlError::Terminal { .. })
    ));
}

#[actix_rt::test]
async fn the_manager_routes_controls_and_knows_its_allocations() {
    use super::alloc_manager::{AllocManager, AllocManagerConfig, ControlAlloc, SyncAllocs};
    use super::{AllocControl, ControlError};
    let mut h = Harness::new();
    let c = h.config(&Allocation::default(), &Arc::new(Job::default()));
    let manager = AllocManager::new(AllocManagerConfig {
        node: c.node,
        data_dir: c.data_dir,
        drivers: c.drivers,
        host_env: c.host_env,
        updates: c.updates,
        ephemeral: false,
        catalog: Default::default(),
    })
    .start();
    let job = job_with(
        JobType::Service,
        vec![mock_task(
            "svc",
            serde_json::json!({"run_for": "1h", "signal_error": "mock refuses"}),
        )],
        no_restarts(),
    );
    let alloc = alloc_for(&job);
    manager
        .send(SyncAllocs {
            allocs: vec![(alloc.clone(), Some(job.clone()))],
        })
        .await
        .unwrap();
    h.until("running", |u| u.client_status == ClientStatus::Running)
        .await;
    let ask = |alloc_id, control| ControlAlloc { alloc_id, control };
    let other = herder::structs::new_id();
    assert_eq!(
        manager
            .send(ask(other, AllocControl::Restart { task: None }))
            .await
            .unwrap(),
        Err(ControlError::UnknownAlloc(other))
    );
    let refused = manager
        .send(ask(
            alloc.id,
            AllocControl::Signal {
                task: None,
                signal: "SIGHUP".into(),
            },
        ))
        .await
        .unwrap();
    assert!(
        matches!(&refused, Err(ControlError::Driver(e)) if e.to_string() == "mock refuses"),
        "{refused:?}"
    );
    manager
        .send(ask(
            alloc.id,
            AllocControl::Restart {
                task: Some("svc".into()),
            },
        ))
        .await
        .unwrap()
        .unwrap();
    let restarted = h
        .until("restarted", |u| {
            u.task_states
                .get("svc")
                .is_some_and(|s| s.state == "running" && s.restarts == 1)
        })
        .await;
    assert!(!restarted.task_states.get("svc").unwrap().failed);
}

/// A service job whose group has `update` health settings and services.
fn health_job(
    health_check: &str,
    deadline: Duration,
    services: Vec<herder::structs::Service>,
) -> Arc<Job> {
    let mut job = Job {
        id: "example".into(),
        job_type: JobType::Service,
        ..Default::default()
    };
    job.task_groups.push(TaskGroup {
        name: "group".into(),
        count: 1,
        tasks: vec![mock_task("svc", serde_json::json!({"run_for": "1h"}))],
        restart_policy: Some(no_restarts()),
        update: Some(herder::structs::UpdateStrategy {
            health_check: health_check.into(),
            min_healthy_time: Duration::from_millis(300),
            healthy_deadline: deadline,
            ..Default::default()
        }),
        services,
        ..Default::default()
    });
    job.canonicalize();
    Arc::new(job)
}

#[actix_rt::test]
async fn a_deployment_allocation_reports_its_health_and_its_services() {
    let mut h = Harness::new();
    let service = herder::structs::Service {
        name: "web".into(),
        port_label: "http".into(),
        ..Default::default()
    };
    let job = health_job("task_states", Duration::from_secs(60), vec![service]);
    let mut alloc = alloc_for(&job);
    alloc.deployment_id = Some(herder::structs::new_id());
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    let running = h
        .until("the service registered", |u| !u.services.is_empty())
        .await;
    assert_eq!(running.services[0].port, 23456);
    assert_eq!(running.services[0].address, "127.0.0.1");
    assert!(
        running.deployment_status.is_none(),
        "decided before min_healthy_time"
    );
    let healthy = h
        .until("the health decision", |u| u.deployment_status.is_some())
        .await;
    let status = healthy.deployment_status.unwrap();
    assert_eq!(status.healthy, Some(true));
    assert!(status.timestamp.is_some());
    runner.do_send(Stop {
        reason: "test".into(),
    });
    let stopping = h
        .until("the services withdrawn", |u| u.services.is_empty())
        .await;
    assert_eq!(
        stopping.deployment_status.and_then(|s| s.healthy),
        Some(true)
    );
}

#[actix_rt::test]
async fn a_failing_check_makes_the_allocation_unhealthy_at_the_deadline() {
    let mut h = Harness::new();
    // Nothing listens on a port taken and released here.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let service = herder::structs::Service {
        name: "web".into(),
        port_label: port.to_string(),
        checks: vec![herder::structs::ServiceCheck {
            name: "alive".into(),
            r#type: "tcp".into(),
            interval: Duration::from_millis(100),
            timeout: Duration::from_millis(500),
            ..Default::default()
        }],
        ..Default::default()
    };
    let job = health_job("checks", Duration::from_secs(1), vec![service]);
    let mut alloc = alloc_for(&job);
    alloc.deployment_id = Some(herder::structs::new_id());
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    let decided = h
        .until("the health decision", |u| u.deployment_status.is_some())
        .await;
    assert_eq!(decided.deployment_status.unwrap().healthy, Some(false));
    let checks = runner
        .send(super::alloc_runner::health::GetChecks)
        .await
        .unwrap();
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].status, super::checks::CheckStatus::Failure);
    assert_eq!(checks[0].check, "alive");
}

#[actix_rt::test]
async fn a_restored_allocation_keeps_the_health_it_decided() {
    let mut h = Harness::new();
    let mut job = (*health_job("task_states", Duration::from_secs(60), vec![])).clone();
    job.task_groups[0].tasks = vec![sh_task("svc", "exec sleep 300")];
    let job = Arc::new(job);
    let mut alloc = alloc_for(&job);
    alloc.deployment_id = Some(herder::structs::new_id());
    let first = AllocRunner::new(h.config(&alloc, &job)).start();
    let decided = h
        .until("the health decision", |u| u.deployment_status.is_some())
        .await
        .deployment_status
        .unwrap();
    first.send(Shutdown).await.unwrap();

    let (known, _) = super::alloc_runner::persisted_alloc(h.data_dir.path(), &alloc.id)
        .unwrap()
        .expect("the allocation is persisted");
    assert_eq!(known.deployment_status(), Some(&decided));
    let second = AllocRunner::restore(h.config(&known, &job)).start();
    // Past min_healthy_time again: no second decision, the first stands.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let state = second.send(GetAllocState).await.unwrap();
    assert_eq!(state.deployment_status, Some(decided));
    second.do_send(Stop {
        reason: "done".into(),
    });
    h.until("complete", |u| u.client_status == ClientStatus::Complete)
        .await;
}

#[actix_rt::test]
async fn an_in_place_update_changes_the_registered_services() {
    let mut h = Harness::new();
    let service = |tag: &str| herder::structs::Service {
        name: "web".into(),
        port_label: "http".into(),
        tags: vec![tag.into()],
        ..Default::default()
    };
    let job = health_job("task_states", Duration::from_secs(60), vec![service("v1")]);
    let alloc = alloc_for(&job);
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    h.until("registered with v1", |u| {
        u.services.first().is_some_and(|s| s.tags == ["v1"])
    })
    .await;
    let mut next =
        (*health_job("task_states", Duration::from_secs(60), vec![service("v2")])).clone();
    next.version = 1;
    let mut updated = alloc.clone();
    updated.job_version = 1;
    updated.modify_index = 9;
    runner.do_send(super::alloc_runner::UpdateAlloc(
        updated,
        Some(Arc::new(next)),
    ));
    let after = h
        .until("registered with v2", |u| {
            u.services.first().is_some_and(|s| s.tags == ["v2"])
        })
        .await;
    assert_eq!(
        after.client_status,
        ClientStatus::Running,
        "the task kept running"
    );
}

#[actix_rt::test]
async fn shutdown_delay_withdraws_the_services_then_waits_before_the_kill() {
    let mut h = Harness::new();
    let service = herder::structs::Service {
        name: "web".into(),
        port_label: "http".into(),
        ..Default::default()
    };
    let job = health_job("task_states", Duration::from_secs(60), vec![service]);
    let mut job = (*job).clone();
    job.task_groups[0].shutdown_delay = Some(Duration::from_millis(1500));
    let job = Arc::new(job);
    let alloc = alloc_for(&job);
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    h.until("the service registered", |u| !u.services.is_empty())
        .await;
    let began = Instant::now();
    runner.do_send(Stop {
        reason: "test".into(),
    });
    let withdrawn = h
        .until("the services withdrawn", |u| u.services.is_empty())
        .await;
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "the services leave at once"
    );
    assert!(
        withdrawn.task_states.values().all(|s| s.state == "running"),
        "the tasks still run while the delay passes"
    );
    h.until("every task dead", |u| {
        u.task_states.values().all(|s| s.state == "dead")
    })
    .await;
    assert!(
        began.elapsed() >= Duration::from_millis(1500),
        "killed only after the group's shutdown_delay"
    );
}

#[actix_rt::test]
async fn a_tasks_own_shutdown_delay_holds_back_only_its_kill() {
    let mut h = Harness::new();
    let mut slow = sh_task("slow", "echo ready; exec sleep 300");
    slow.shutdown_delay = Duration::from_millis(1200);
    let quick = sh_task("quick", "echo ready; exec sleep 300");
    let job = job_with(JobType::Service, vec![slow, quick], no_restarts());
    let alloc = alloc_for(&job);
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    h.until("running", |u| {
        u.task_states.len() == 2 && u.task_states.values().all(|s| s.state == "running")
    })
    .await;
    let began = Instant::now();
    runner.do_send(Stop {
        reason: "test".into(),
    });
    let quick_dead = h
        .until("quick dead", |u| {
            u.task_states
                .get("quick")
                .is_some_and(|s| s.state == "dead")
        })
        .await;
    assert_eq!(quick_dead.task_states.get("slow").unwrap().state, "running");
    h.until("slow dead", |u| {
        u.task_states.get("slow").is_some_and(|s| s.state == "dead")
    })
    .await;
    assert!(began.elapsed() >= Duration::from_millis(1200));
}

fn with_hook(mut task: Task, hook: &str, sidecar: bool) -> Task {
    task.lifecycle = Some(herder::structs::job::TaskLifecycle {
        hook: hook.into(),
        sidecar,
    });
    task
}

#[actix_rt::test]
async fn poststart_runs_once_the_main_task_runs_and_poststop_after_it_ends() {
    // The shared alloc/data file records the order the hooks saw.
    let mut h = Harness::new();
    let main = sh_task(
        "main",
        "echo main-start >> ../alloc/data/order; sleep 1; echo main-end >> ../alloc/data/order",
    );
    let after_start = with_hook(
        sh_task("announce", "echo poststart >> ../alloc/data/order"),
        "poststart",
        false,
    );
    let cleanup = with_hook(
        sh_task(
            "cleanup",
            "echo poststop >> ../alloc/data/order; cat ../alloc/data/order",
        ),
        "poststop",
        false,
    );
    let job = job_with(
        JobType::Batch,
        vec![cleanup, after_start, main],
        no_restarts(),
    );
    let alloc = alloc_for(&job);
    let _a = AllocRunner::new(h.config(&alloc, &job)).start();
    let done = h
        .until("complete", |u| u.client_status == ClientStatus::Complete)
        .await;
    // "Runs once the main task runs" means once main's process has started,
    // not once main has written anything: the two first lines race.
    let order = stdout_of(&h, &alloc, "cleanup");
    let lines: Vec<&str> = order.lines().collect();
    assert_eq!(lines.len(), 4, "{order}");
    assert_eq!(&lines[2..], ["main-end", "poststop"], "{order}");
    assert!(lines[..2].contains(&"poststart"), "{order}");
    let started = |task: &str| {
        let state = done.task_states.get(task).expect("task state");
        state.started_at.expect("started")
    };
    assert!(started("announce") >= started("main"));
    assert!(done
        .task_states
        .values()
        .all(|s| s.state == "dead" && !s.failed));
}

#[actix_rt::test]
async fn a_dead_leader_ends_the_other_tasks() {
    let mut h = Harness::new();
    let mut leader = sh_task("leader", "sleep 0.5; exit 0");
    leader.leader = true;
    let follower = sh_task("follower", "echo ready; exec sleep 300");
    // Batch: the leader's exit 0 is a success (a service task that exits
    // has failed, and a failure is told as a sibling's).
    let job = job_with(JobType::Batch, vec![leader, follower], no_restarts());
    let alloc = alloc_for(&job);
    let _a = AllocRunner::new(h.config(&alloc, &job)).start();
    let done = h
        .until("every task dead", |u| {
            u.task_states.len() == 2 && u.task_states.values().all(|s| s.state == "dead")
        })
        .await;
    let follower = done.task_states.get("follower").unwrap();
    let kinds: Vec<&str> = follower
        .events
        .iter()
        .map(|e| e.event_type.as_str())
        .collect();
    assert!(
        kinds.ends_with(&["Leader Task Dead", "Killing", "Terminated", "Killed"]),
        "{kinds:?}"
    );
    let cause = &follower.events[follower.events.len() - 4];
    assert_eq!(cause.display_message, "Leader Task in Group dead");
    assert_eq!(done.client_status, ClientStatus::Complete);
}

#[actix_rt::test]
async fn kill_signal_is_what_the_task_receives_on_stop() {
    let mut h = Harness::new();
    let mut task = sh_task(
        "t",
        "trap 'echo got-int; exit 0' INT; echo ready; while :; do sleep 0.1; done",
    );
    task.kill_signal = "SIGINT".into();
    // Room for a starved machine: past kill_timeout SIGKILL would cut the
    // trap short, and the test would blame the signal.
    task.kill_timeout = Duration::from_secs(30);
    let job = job_with(JobType::Service, vec![task], no_restarts());
    let alloc = alloc_for(&job);
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    eventually("the task to print", || {
        stdout_of(&h, &alloc, "t") == "ready\n"
    })
    .await;
    runner.do_send(Stop {
        reason: "test".into(),
    });
    h.until("dead", |u| {
        u.task_states.get("t").is_some_and(|s| s.state == "dead")
    })
    .await;
    eventually("the trap's output", || {
        stdout_of(&h, &alloc, "t") == "ready\ngot-int\n"
    })
    .await;
}

#[actix_rt::test]
async fn on_stop_the_leader_is_killed_before_the_others() {
    // The follower notes when it is signalled; the leader takes a second
    // to stop: the follower must not hear of the stop before the leader
    // is gone.
    let mut h = Harness::new();
    let mut leader = sh_task(
        "leader",
        "trap 'sleep 1; echo leader-gone >> ../alloc/data/order; exit 0' TERM; echo ready; while :; do sleep 0.1; done",
    );
    leader.leader = true;
    let follower = sh_task(
        "follower",
        "trap 'echo follower-signalled >> ../alloc/data/order; exit 0' TERM; echo ready; while :; do sleep 0.1; done",
    );
    let job = job_with(JobType::Service, vec![follower, leader], no_restarts());
    let alloc = alloc_for(&job);
    let runner = AllocRunner::new(h.config(&alloc, &job)).start();
    eventually("both tasks to print", || {
        stdout_of(&h, &alloc, "leader") == "ready\n"
            && stdout_of(&h, &alloc, "follower") == "ready\n"
    })
    .await;
    runner.do_send(Stop {
        reason: "test".into(),
    });
    h.until("every task dead", |u| {
        u.task_states.len() == 2 && u.task_states.values().all(|s| s.state == "dead")
    })
    .await;
    let data = h.data_dir.path().join("alloc").join(alloc.id.to_string());
    let order = std::fs::read_to_string(data.join("alloc/data/order")).unwrap_or_default();
    assert_eq!(order, "leader-gone\nfollower-signalled\n");
}

#[actix_rt::test]
async fn a_failed_task_ends_its_siblings_with_nomads_event() {
    let mut h = Harness::new();
    let broken = sh_task("broken", "sleep 0.3; exit 3");
    let sibling = sh_task("sibling", "echo ready; exec sleep 300");
    let job = job_with(JobType::Service, vec![broken, sibling], no_restarts());
    let alloc = alloc_for(&job);
    let _a = AllocRunner::new(h.config(&alloc, &job)).start();
    let done = h
        .until("every task dead", |u| {
            u.task_states.len() == 2 && u.task_states.values().all(|s| s.state == "dead")
        })
        .await;
    assert_eq!(done.client_status, ClientStatus::Failed);
    let sibling = done.task_states.get("sibling").unwrap();
    let cause = sibling
        .events
        .iter()
        .find(|e| e.event_type == "Sibling Task Failed")
        .expect("the sibling hears why");
    assert_eq!(cause.display_message, "Task's sibling \"broken\" failed");
    assert_eq!(
        cause.details.get("failed_sibling").map(String::as_str),
        Some("broken")
    );
}
