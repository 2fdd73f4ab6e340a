//! Leadership moving the leader's duties, in a whole server (store,
//! router, broker, workers, plan applier, node tracker, periodic launcher):
//! what an operator sees when a server follows, takes the lead, loses it
//! and takes it again.

use herder::state::{fixtures, Command, StateStore};
use herder::structs::{
    DrainStrategy, Evaluation, Job, JobType, Node, NodeStatus, PeriodicConfig, TriggeredBy,
};
use herder_common::config::{AgentConfig, ConfigSources, FlagOverrides};
use herder_server::gc::{ForceGc, GcError, StopGc};
use herder_server::node_tracker::{Heartbeat, NodeError, RegisterNode};
use herder_server::periodic::{ForceLaunch, PeriodicError};
use herder_server::server::Server;
use herder_server::worker_supervisor;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The failover window of these tests: short, so a silent node is marked
/// down within seconds of a leadership change.
const FAILOVER_TTL: Duration = Duration::from_secs(2);
/// Long enough that a node stays up for the whole of a test.
const LONG_FAILOVER_TTL: Duration = Duration::from_secs(300);

/// A server configuration with short heartbeat timings; nodes that never
/// heartbeat are marked down `failover_ttl` after a leader takes over, so
/// tests that place on such nodes give a long one.
fn config(dir: &Path, failover_ttl: Duration) -> AgentConfig {
    let mut flags = FlagOverrides::default();
    flags.ports.insert("http".into(), 0);
    flags.log_level = Some("warn".into());
    flags.data_dir = Some(dir.to_path_buf());
    flags.server.insert("enabled".into(), true.into());
    let mut config = AgentConfig::load(&ConfigSources {
        env: Some(Vec::new()),
        flags,
        ..Default::default()
    })
    .expect("server configuration");
    config.server.num_schedulers = Some(1);
    config.server.min_heartbeat_ttl = Duration::from_millis(100);
    config.server.heartbeat_grace = Duration::from_millis(100);
    config.server.failover_heartbeat_ttl = failover_ttl;
    config
}

fn now_nanos() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0)
}

fn store_node(store: &StateStore) -> Node {
    let node = fixtures::node("n1");
    store
        .apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        })
        .expect("node stored");
    node
}

/// Registers a service job with its evaluation, as `job run` does.
fn register_job(store: &StateStore, id: &str) {
    register_job_of(store, id, 1);
}

/// Registers a service job of `count` allocations with its evaluation.
fn register_job_of(store: &StateStore, id: &str, count: i32) {
    let job = fixtures::job("default", id, &[("web", count)]);
    let eval = Evaluation::for_job(&job, TriggeredBy::JobRegister, now_nanos());
    store
        .apply(Command::JobRegister {
            job: Arc::new(job),
            eval: Some(eval),
            enforce_index: None,
        })
        .expect("job stored");
}

fn periodic_job(id: &str) -> Job {
    let mut job = fixtures::job("default", id, &[("g", 1)]);
    job.job_type = JobType::Batch;
    job.periodic = Some(PeriodicConfig {
        enabled: true,
        // Every second (the seconds field first).
        spec: "* * * * * *".to_string(),
        spec_type: "cron".to_string(),
        prohibit_overlap: false,
        time_zone: String::new(),
    });
    job.canonicalize();
    job
}

/// `job` launched once a year (New Year's midnight): a forced launch
/// never meets a scheduled one in the same second (a child's ID is the
/// launch time in seconds, so the two would collide).
fn yearly(mut job: Job) -> Job {
    if let Some(periodic) = job.periodic.as_mut() {
        periodic.spec = "0 0 0 1 1 *".to_string();
    }
    job
}

fn placed(store: &StateStore, job_id: &str) -> usize {
    store
        .snapshot()
        .allocs_by_job("default", job_id)
        .filter(|a| !a.is_terminal())
        .count()
}

fn children(store: &StateStore, parent: &str) -> usize {
    store
        .snapshot()
        .jobs()
        .filter(|j| j.parent_id == parent)
        .count()
}

fn node_status(store: &StateStore, node: &Node) -> Option<NodeStatus> {
    store.snapshot().node(&node.id).map(|n| n.status)
}

async fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        actix_rt::time::sleep(Duration::from_millis(25)).await;
    }
    check()
}

/// Whether `check` holds at every look for all of `period`.
async fn holds_for(period: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + period;
    while Instant::now() < deadline {
        if !check() {
            return false;
        }
        actix_rt::time::sleep(Duration::from_millis(25)).await;
    }
    check()
}

#[actix::test]
async fn a_follower_places_nothing_until_it_gains_the_lead() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_as(&config(dir.path(), LONG_FAILOVER_TTL), dir.path(), false)
        .await
        .expect("server starts");
    let store = server.handle().store.clone();
    store_node(&store);
    register_job(&store, "web");
    assert!(
        holds_for(Duration::from_secs(1), || placed(&store, "web") == 0).await,
        "a follower placed the job"
    );
    server.duties().gain().await;
    assert_eq!(server.duties().leading().await, Some(true));
    assert!(
        wait_until(Duration::from_secs(10), || placed(&store, "web") == 1).await,
        "the new leader did not place the job registered before it led"
    );
    // Gaining again changes nothing: the job is not placed twice.
    server.duties().gain().await;
    assert!(
        holds_for(Duration::from_millis(500), || placed(&store, "web") == 1).await,
        "a second gain placed the job again"
    );
    server.stop().await;
}

fn draining(store: &StateStore, node: &Node) -> bool {
    store
        .snapshot()
        .node(&node.id)
        .is_some_and(|n| n.drain_strategy.is_some())
}

#[actix::test]
async fn drains_collections_and_launches_wait_for_the_lead() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_as(&config(dir.path(), LONG_FAILOVER_TTL), dir.path(), false)
        .await
        .expect("server starts");
    let handle = server.handle().clone();
    let store = handle.store.clone();
    // A node with nothing on it: its drain ends as soon as a leader looks.
    let node = store_node(&store);
    store
        .apply(Command::NodeUpdateDrain {
            node_id: node.id,
            drain: Some(DrainStrategy {
                started_at: Some(now_nanos()),
                ..Default::default()
            }),
            mark_eligible: false,
            event: None,
            evals: vec![],
        })
        .expect("drain stored");
    // A down node: a forced collection removes it.
    let mut gone = fixtures::node("gone");
    gone.status = NodeStatus::Down;
    store
        .apply(Command::NodeRegister {
            node: Arc::new(gone.clone()),
        })
        .expect("down node stored");
    store
        .apply(Command::JobRegister {
            job: Arc::new(yearly(periodic_job("cron"))),
            eval: None,
            enforce_index: None,
        })
        .expect("periodic job stored");

    let refused = handle.test_gc().send(ForceGc).await.expect("gc answers");
    assert!(matches!(refused, Err(GcError::NotLeader)), "{refused:?}");
    let force = || ForceLaunch {
        namespace: "default".into(),
        job_id: "cron".into(),
    };
    let refused = handle
        .test_periodic()
        .send(force())
        .await
        .expect("launcher answers");
    assert!(
        matches!(refused, Err(PeriodicError::NotLeader)),
        "{refused:?}"
    );
    assert!(
        holds_for(Duration::from_secs(1), || draining(&store, &node)).await,
        "a follower ended a drain"
    );

    server.duties().gain().await;
    assert!(
        wait_until(Duration::from_secs(5), || !draining(&store, &node)).await,
        "the new leader did not resume the drain"
    );
    let report = handle.test_gc().send(ForceGc).await.expect("gc answers");
    assert!(matches!(report, Ok(ref r) if r.nodes == 1), "{report:?}");
    assert!(store.snapshot().node(&gone.id).is_none());
    let launched = handle
        .test_periodic()
        .send(force())
        .await
        .expect("launcher answers");
    assert!(launched.is_ok(), "{launched:?}");
    server.stop().await;
}

#[actix::test]
async fn a_duty_that_cannot_switch_does_not_hold_back_the_others() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_as(&config(dir.path(), LONG_FAILOVER_TTL), dir.path(), false)
        .await
        .expect("server starts");
    let store = server.handle().store.clone();
    // The garbage collector is gone: its step fails.
    server
        .handle()
        .test_gc()
        .send(StopGc)
        .await
        .expect("gc stops");
    store_node(&store);
    register_job(&store, "web");
    server.duties().gain().await;
    assert_eq!(
        server.duties().leading().await,
        None,
        "a failed step was not reported"
    );
    assert!(
        wait_until(Duration::from_secs(10), || placed(&store, "web") == 1).await,
        "the other duties did not start"
    );
    server.stop().await;
}

#[actix::test]
async fn work_flushed_by_a_lost_lead_is_placed_when_the_lead_is_regained() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(&config(dir.path(), LONG_FAILOVER_TTL), dir.path())
        .await
        .expect("server starts");
    let handle = server.handle().clone();
    let store = handle.store.clone();
    store_node(&store);
    // The evaluation reaches the broker but no worker takes it: it is in
    // the leader's queue when the lead is lost.
    handle
        .test_workers()
        .send(worker_supervisor::SetPaused(true))
        .await
        .expect("workers paused");
    register_job(&store, "web");
    actix_rt::time::sleep(Duration::from_millis(200)).await;
    server.duties().lose().await;
    // Losing twice changes nothing.
    server.duties().lose().await;
    assert_eq!(server.duties().leading().await, Some(false));
    handle
        .test_workers()
        .send(worker_supervisor::SetPaused(false))
        .await
        .expect("workers resumed");
    assert!(
        holds_for(Duration::from_secs(1), || placed(&store, "web") == 0).await,
        "a server that lost the lead placed the job"
    );
    server.duties().gain().await;
    assert!(
        wait_until(Duration::from_secs(10), || placed(&store, "web") == 1).await,
        "the evaluation flushed on losing the lead was not enqueued again"
    );
    server.stop().await;
}

#[actix::test]
async fn timers_stop_with_the_lead_and_restart_with_fresh_ttls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(&config(dir.path(), FAILOVER_TTL), dir.path())
        .await
        .expect("server starts");
    let handle = server.handle().clone();
    let store = handle.store.clone();
    // As leader, this node's TTL is a few hundred milliseconds.
    let node = fixtures::node("n1");
    handle
        .test_node_tracker()
        .send(RegisterNode(node.clone()))
        .await
        .expect("tracker answers")
        .expect("node registered");
    assert_eq!(node_status(&store, &node), Some(NodeStatus::Ready));
    server.duties().lose().await;

    // Not the leader: the silent node stays up, heartbeats are refused,
    // and a periodic job due every second is not launched.
    let parent = periodic_job("cron");
    store
        .apply(Command::JobRegister {
            job: Arc::new(parent),
            eval: None,
            enforce_index: None,
        })
        .expect("periodic job stored");
    assert!(
        holds_for(Duration::from_millis(2500), || {
            node_status(&store, &node) == Some(NodeStatus::Ready) && children(&store, "cron") == 0
        })
        .await,
        "a server that is not the leader marked the node down or launched a periodic job"
    );
    let refused = handle
        .test_node_tracker()
        .send(Heartbeat {
            node_id: node.id,
            secret_id: node.secret_id.clone(),
            ready: true,
        })
        .await
        .expect("tracker answers");
    assert!(matches!(refused, Err(NodeError::NotLeader)), "{refused:?}");

    // Leading again: the node's last heartbeat is seconds old, yet it has
    // the failover window before it is marked down; silent, it is then.
    let gained = Instant::now();
    server.duties().gain().await;
    let window_left = FAILOVER_TTL.saturating_sub(gained.elapsed() + Duration::from_millis(200));
    assert!(
        holds_for(window_left, || node_status(&store, &node)
            == Some(NodeStatus::Ready))
        .await,
        "the node was marked down within the failover window"
    );
    // Once the window is over (plus the tracker's tick).
    assert!(
        wait_until(FAILOVER_TTL + Duration::from_secs(2), || {
            node_status(&store, &node) == Some(NodeStatus::Down)
        })
        .await,
        "the silent node was never marked down after the lead was regained"
    );
    assert!(
        children(&store, "cron") > 0,
        "the periodic job was not launched once the lead was regained"
    );
    server.stop().await;
}

/// A fleet that never heartbeats to a new leader (the servers cut off from
/// every client) goes down together once the failover window is over, with
/// one evaluation per job: its allocations are marked lost and, with no
/// node left, wait in blocked evaluations. None is replaced onto a node of the same silent fleet only
/// to be lost again a moment later (as when each node had its own deadline
/// within the window, and every expiry rescheduled onto the rest).
#[actix::test]
async fn a_silent_fleet_goes_down_together_and_its_work_is_not_replaced_onto_it() {
    const WINDOW: Duration = Duration::from_secs(3);
    const NODES: usize = 12;
    const JOBS: usize = 6;
    const PER_JOB: i32 = 4;
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_as(&config(dir.path(), WINDOW), dir.path(), false)
        .await
        .expect("server starts");
    let store = server.handle().store.clone();
    let fleet: Vec<Node> = (0..NODES)
        .map(|i| {
            let node = fixtures::node(&format!("n{i}"));
            store
                .apply(Command::NodeRegister {
                    node: Arc::new(node.clone()),
                })
                .expect("node stored");
            node
        })
        .collect();
    for j in 0..JOBS {
        register_job_of(&store, &format!("job-{j}"), PER_JOB);
    }
    server.duties().gain().await;
    let expected = JOBS * PER_JOB as usize;
    let all_allocs = || store.snapshot().allocs().count();
    let live = || {
        store
            .snapshot()
            .allocs()
            .filter(|a| !a.is_terminal())
            .count()
    };
    assert!(
        wait_until(WINDOW, || live() == expected).await,
        "the jobs were not placed within the window ({} of {expected})",
        live()
    );
    assert!(
        wait_until(WINDOW + Duration::from_secs(3), || fleet
            .iter()
            .all(|n| node_status(&store, n) == Some(NodeStatus::Down)))
        .await,
        "the silent fleet was not marked down after the window"
    );
    assert!(
        wait_until(Duration::from_secs(10), || live() == 0).await,
        "the work of the down fleet was not marked lost ({} live)",
        live()
    );
    assert!(
        holds_for(Duration::from_secs(1), || all_allocs() == expected).await,
        "allocations were placed on the silent fleet after it began going down: {} in all, {expected} placed at first",
        all_allocs()
    );
    // One node-update evaluation per job for the whole fleet, not one per
    // job per node (Nomad's count, a million for a fleet of 10,000).
    let node_updates = store
        .snapshot()
        .evals()
        .filter(|e| e.triggered_by == TriggeredBy::NodeUpdate)
        .count();
    assert_eq!(node_updates, JOBS, "node-update evaluations");
    server.stop().await;
}
