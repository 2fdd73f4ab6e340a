//! herder embedded as an application would embed it: through the crate's
//! top-level items only (`herder_actors::{Agent, AgentConfig, ...}`), from
//! the async runtimes applications use, with a lifecycle that cannot leak.
//!
//! Each test here asserts what the application would notice: a panic at
//! start, a placement it never hears of, a port or data dir still held
//! after the handle is gone, a shutdown that hangs on an open stream.

use futures::StreamExt;
use herder_actors::herder::jobspec;
use herder_actors::herder::state::{Table, TableSet};
use herder_actors::herder::structs::{ClientStatus, Job};
use herder_actors::{
    Agent, AgentConfig, AgentError, EventFilter, EventPayload, RegisterJob, ServerApi,
    SetWorkerConfig, Topic, WorkerStatus,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

/// Server and client in one process, state kept in `data_dir`, API on a
/// free loopback port.
fn app_config(data_dir: &Path) -> AgentConfig {
    let mut config = AgentConfig::dev().expect("dev config");
    config.sidecar = true;
    config.data_dir = data_dir.to_path_buf();
    config
}

fn server_only(data_dir: &Path) -> AgentConfig {
    let mut config = app_config(data_dir);
    config.client.enabled = false;
    config
}

fn job(hcl: &str) -> Job {
    jobspec::parse_hcl(hcl, "app.hcl").expect("job parses")
}

/// A service job of the mock driver (runs an hour, does nothing).
fn mock_service(id: &str, count: i32) -> Job {
    job(&format!(
        r#"job "{id}" {{
             group "g" {{
               count = {count}
               task "t" {{
                 driver = "mock_driver"
                 config {{ run_for = "1h" }}
                 resources {{
                   cpu    = 100
                   memory = 32
                 }}
               }}
             }}
           }}"#
    ))
}

async fn wait_for_client_node(api: &ServerApi) {
    api.wait_until(TableSet::of(&[Table::Nodes]), WAIT, |snap| {
        snap.nodes().any(|n| n.is_schedulable()).then_some(())
    })
    .await
    .expect("the embedded client registers its node");
}

/// Resizes the server's worker pool through the Rust API.
async fn set_num_schedulers(agent: &Agent, num_schedulers: i64) {
    let api = agent.api().expect("a server");
    let config = api
        .set_worker_config(SetWorkerConfig {
            num_schedulers: Some(num_schedulers),
            enabled_schedulers: None,
        })
        .await
        .expect("a valid pool size");
    assert_eq!(config.num_schedulers as i64, num_schedulers);
}

/// Waits until every worker of the pool reports `Paused`.
async fn wait_all_paused(api: &ServerApi) {
    let deadline = Instant::now() + WAIT;
    loop {
        let workers = api.workers().await.expect("workers");
        if workers
            .schedulers
            .iter()
            .all(|w| w.status == WorkerStatus::Paused)
        {
            return;
        }
        assert!(Instant::now() < deadline, "workers not paused: {workers:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn assert_send_sync_clone<T: Send + Sync + Clone>() {}
fn assert_send<T: Send>(_: &T) {}

#[test]
fn handles_and_their_futures_cross_threads() {
    assert_send_sync_clone::<Agent>();
    assert_send_sync_clone::<ServerApi>();
    fn api_future_is_send(api: &ServerApi, job: Job) {
        assert_send(&api.register_job(RegisterJob::new(job)));
        assert_send(&api.wait_for_evaluation(&uuid::Uuid::nil(), WAIT));
    }
    let _ = api_future_is_send;
    fn stream_is_send(s: herder_actors::EventStream) -> impl Send {
        s
    }
    let _ = stream_is_send;
}

/// The application of issue 27's must-show list: a multi-threaded tokio
/// program embeds a server and a client, registers a job, hears it placed
/// on the Rust event stream, pauses and resizes the worker pool, drops the
/// agent without shutting it down, and starts again on the same data dir
/// at once with the job still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_places_work_pauses_workers_and_restarts_after_a_drop() {
    let dir = tempfile::tempdir().expect("temp dir");
    let agent = Agent::start(app_config(dir.path()), false)
        .await
        .expect("starts inside a multi-threaded tokio runtime");
    let api = agent.api().expect("a server runs");
    wait_for_client_node(&api).await;
    let mut placed = agent
        .events(EventFilter::new().topic(Topic::Allocation, "app"))
        .expect("a server has events");

    // The pool paused: the job is accepted but nothing is placed, and a
    // resize does not undo the pause. (A worker notices its pause within
    // its 500 ms dequeue timeout.)
    api.pause_workers().await.expect("pauses");
    wait_all_paused(&api).await;
    let written = api
        .register_job(RegisterJob::new(mock_service("app", 2)))
        .await
        .expect("job registers");
    assert!(written.eval_id.is_some());
    let early = tokio::time::timeout(Duration::from_millis(500), placed.next()).await;
    assert!(early.is_err(), "placed with the pool paused: {early:?}");
    set_num_schedulers(&agent, 0).await;
    set_num_schedulers(&agent, 1).await;
    wait_all_paused(&api).await;
    let early = tokio::time::timeout(Duration::from_millis(300), placed.next()).await;
    assert!(
        early.is_err(),
        "placed after a resize of a paused pool: {early:?}"
    );

    api.resume_workers().await.expect("resumes");
    let frame = tokio::time::timeout(WAIT, placed.next())
        .await
        .expect("placed once a worker runs")
        .expect("the stream is open");
    let event = &frame.events[0];
    assert_eq!(event.event_type, "AllocationCreated");
    match &event.payload {
        EventPayload::Allocation(alloc) => assert_eq!(&*alloc.job_id, "app"),
        other => panic!("an allocation event carries the allocation: {other:?}"),
    }
    let old_addr = agent.http_addr();

    // The error path of an application: every handle dropped, no shutdown.
    let dropped = Instant::now();
    drop(placed);
    drop(api);
    drop(agent);
    let again = Agent::start(app_config(dir.path()), false)
        .await
        .expect("the data dir is free again");
    let restarted_in = dropped.elapsed();
    assert!(
        restarted_in < Duration::from_secs(1),
        "drop and restart took {restarted_in:?}"
    );
    assert!(
        TcpStream::connect_timeout(&old_addr, Duration::from_millis(200)).is_err(),
        "the dropped agent's port {old_addr} still answers"
    );
    let api = again.api().expect("a server runs");
    let stored = api
        .job("default", "app")
        .expect("the job survived the drop");
    assert_eq!(stored.task_groups[0].count, 2);
    again.shutdown().await;
}

#[test]
fn starts_from_a_current_thread_runtime_and_from_a_plain_executor() {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let agent = Agent::start(server_only(dir.path()), false)
            .await
            .expect("starts in a current-thread runtime");
        let api = agent.api().expect("a server runs");
        api.register_job(RegisterJob::new(mock_service("ct", 1)))
            .await
            .expect("typed calls work on this runtime");
        agent.shutdown().await;
    });
    // No runtime at all: the futures executor of the `futures` crate.
    let agent = futures::executor::block_on(Agent::start(server_only(dir.path()), false))
        .expect("starts without a tokio runtime");
    assert!(agent.api().expect("server").job("default", "ct").is_some());
    futures::executor::block_on(agent.shutdown());
}

#[test]
fn a_start_failure_is_an_error_that_states_its_cause_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = futures::executor::block_on(Agent::start(server_only(dir.path()), false))
        .expect("first agent starts");
    let second = futures::executor::block_on(Agent::start(server_only(dir.path()), false));
    let err = second.expect_err("the data dir is in use");
    assert!(matches!(err, AgentError::Server(_)), "{err:?}");
    // As an application reports it: the message and every cause below it.
    let mut chain = vec![err.to_string()];
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        chain.push(s.to_string());
        source = s.source();
    }
    let report = chain.join(": ");
    assert!(report.contains("state store at"), "{report}");
    let cause = "could not acquire lock";
    assert_eq!(report.matches(cause).count(), 1, "cause repeated: {report}");
    drop(first);
}

/// Sends `GET path` and reads the answer on a thread of its own, which
/// answers when the answer ended, with the answer's text.
fn open_stream(addr: SocketAddr, path: &str) -> std::thread::JoinHandle<(Instant, String)> {
    let mut stream = TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    std::thread::spawn(move || {
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        (
            Instant::now(),
            String::from_utf8_lossy(&answer).into_owned(),
        )
    })
}

/// What an application's shutdown must not wait for: HTTP and Rust event
/// streams, a parked blocking query and a log follow, all open at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_streams_queries_and_log_follows_open_takes_under_a_second() {
    let agent = Agent::start(AgentConfig::dev().expect("dev config"), true)
        .await
        .expect("dev agent starts");
    let api = agent.api().expect("a server runs");
    wait_for_client_node(&api).await;
    let logged = job(r#"job "talk" {
             group "g" {
               task "t" {
                 driver = "raw_exec"
                 config {
                   command = "/bin/sh"
                   args    = ["-c", "echo started; exec sleep 30"]
                 }
                 resources {
                   cpu    = 50
                   memory = 16
                 }
               }
             }
           }"#);
    api.register_job(RegisterJob::new(logged))
        .await
        .expect("job registers");
    let alloc = api
        .wait_until(TableSet::of(&[Table::Allocs]), WAIT, |snap| {
            snap.allocs_by_job("default", "talk")
                .find(|a| a.client_status == ClientStatus::Running)
                .cloned()
        })
        .await
        .expect("the task runs");

    let addr = agent.http_addr();
    let far = api.snapshot().latest_index() + 1_000_000;
    let http_streams = [
        open_stream(addr, "/v1/event/stream"),
        open_stream(addr, &format!("/v1/jobs?index={far}&wait=60s")),
        open_stream(
            addr,
            &format!(
                "/v1/client/fs/logs/{}?task=t&type=stdout&follow=true",
                alloc.id
            ),
        ),
    ];
    let mut rust_stream = agent.events(EventFilter::new()).expect("events");
    let rust_reader = tokio::spawn(async move {
        while rust_stream.next().await.is_some() {}
        Instant::now()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = Instant::now();
    agent.shutdown().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "shutdown took {took:?}");
    let rust_ended = tokio::time::timeout(Duration::from_secs(5), rust_reader)
        .await
        .expect("the Rust event stream ended")
        .expect("reader task");
    assert!(rust_ended.duration_since(started) < Duration::from_secs(1));
    for reader in http_streams {
        let (ended, answer) = reader.join().expect("reader thread");
        let status = answer.lines().next().unwrap_or_default();
        assert!(status.contains(" 200 "), "{answer}");
        assert!(
            ended.duration_since(started) < Duration::from_secs(1),
            "an HTTP answer outlived the shutdown: {answer}"
        );
    }
}
