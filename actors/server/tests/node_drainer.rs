//! The node drainer inside a whole server (store, router, broker, workers,
//! plan applier): what an operator sees when draining a node. A fake
//! client thread plays the nodes' clients: it starts what is placed (on
//! the nodes it is allowed to) and confirms what is stopped.

use futures::StreamExt;
use herder::state::{fixtures, AllocClientUpdate, Command, Row, StateStore};
use herder::structs::{
    AllocDeploymentStatus, AllocId, Allocation, ClientStatus, DrainStrategy, Job, JobType,
    MigrateStrategy, Node, NodeEvent, NodeId, SchedulingEligibility, TriggeredBy,
};
use herder_common::config::{AgentConfig, ConfigSources, FlagOverrides};
use herder_server::node_drainer::{DEADLINE_REACHED, NODE_DRAIN_COMPLETE};
use herder_server::server::Server;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn config(dir: &Path) -> AgentConfig {
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
    config.server.num_schedulers = Some(2);
    config
}

async fn start(dir: &Path) -> Server {
    Server::start(&config(dir), dir)
        .await
        .expect("server starts")
}

fn now_nanos() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap()
}

/// Plays every node's client. Starts pending allocations on the nodes in
/// `runs_on` (all nodes when `None`), reports them healthy on the nodes in
/// `healthy_on` (all when `None`), as a client does by the group's
/// `migrate` block, and confirms every stop.
struct FakeClient {
    runs_on: Arc<Mutex<Option<HashSet<NodeId>>>>,
    healthy_on: Arc<Mutex<Option<HashSet<NodeId>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn client_update(alloc: &Allocation, status: ClientStatus) -> AllocClientUpdate {
    AllocClientUpdate {
        id: alloc.id,
        client_status: status,
        modify_time: now_nanos(),
        ..Default::default()
    }
}

fn healthy_update(alloc: &Allocation) -> AllocClientUpdate {
    AllocClientUpdate {
        deployment_status: Some(AllocDeploymentStatus {
            healthy: Some(true),
            timestamp: Some(now_nanos()),
            ..Default::default()
        }),
        ..client_update(alloc, ClientStatus::Running)
    }
}

type NodeSet = Arc<Mutex<Option<HashSet<NodeId>>>>;

fn allowed(set: &NodeSet, node: &NodeId) -> bool {
    set.lock()
        .unwrap()
        .as_ref()
        .is_none_or(|n| n.contains(node))
}

/// What a client reports about `a` now, if anything.
fn client_report(
    a: &Allocation,
    runs_on: &NodeSet,
    healthy_on: &NodeSet,
) -> Option<AllocClientUpdate> {
    if a.server_terminal() {
        return (!a.client_status.is_terminal()).then(|| client_update(a, ClientStatus::Complete));
    }
    let running = a.client_status == ClientStatus::Running;
    let starts = a.client_status == ClientStatus::Pending && allowed(runs_on, &a.node_id);
    let has_health = a.deployment_status().is_some_and(|s| s.has_health());
    if (starts || running) && !has_health && allowed(healthy_on, &a.node_id) {
        Some(healthy_update(a))
    } else if starts {
        Some(client_update(a, ClientStatus::Running))
    } else {
        None
    }
}

impl FakeClient {
    fn start(store: StateStore, runs_on: Option<HashSet<NodeId>>) -> FakeClient {
        FakeClient::start_with_health(store, runs_on, None)
    }

    fn start_with_health(
        store: StateStore,
        runs_on: Option<HashSet<NodeId>>,
        healthy_on: Option<HashSet<NodeId>>,
    ) -> FakeClient {
        let runs_on = Arc::new(Mutex::new(runs_on));
        let healthy_on = Arc::new(Mutex::new(healthy_on));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, h, s) = (runs_on.clone(), healthy_on.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) && !store.is_closed() {
                let snap = store.snapshot();
                let updates: Vec<_> = snap
                    .allocs()
                    .filter_map(|a| client_report(a, &r, &h))
                    .collect();
                if !updates.is_empty() {
                    // A closed store at shutdown is not the client's concern.
                    let _ = store.apply(Command::AllocClientUpdate {
                        updates,
                        evals: vec![],
                    });
                }
                std::thread::sleep(Duration::from_millis(30));
            }
        });
        FakeClient {
            runs_on,
            healthy_on,
            stop,
            thread: Some(thread),
        }
    }

    fn run_everywhere(&self) {
        *self.runs_on.lock().unwrap() = None;
    }

    fn healthy_everywhere(&self) {
        *self.healthy_on.lock().unwrap() = None;
    }
}

impl Drop for FakeClient {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
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

async fn register_node(store: &StateStore, name: &str) -> Node {
    let node = fixtures::node(name);
    let node_row = Arc::new(node.clone());
    store
        .submit(Command::NodeRegister { node: node_row })
        .await
        .unwrap()
        .unwrap();
    node
}

fn service_job(id: &str, count: i32, max_parallel: i32) -> Job {
    let mut job = fixtures::job("default", id, &[("g", count)]);
    job.task_groups[0].migrate = Some(MigrateStrategy {
        max_parallel,
        ..Default::default()
    });
    job
}

fn typed_job(id: &str, job_type: JobType) -> Job {
    let mut job = fixtures::job("default", id, &[("g", 1)]);
    job.job_type = job_type;
    job.task_groups[0].migrate = None;
    job.canonicalize();
    job
}

async fn register_job(store: &StateStore, job: Job) {
    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, now_nanos());
    store
        .submit(Command::JobRegister {
            job: Arc::new(job),
            eval: Some(eval),
            enforce_index: None,
        })
        .await
        .unwrap()
        .unwrap();
}

/// Sets (or with `None` cancels) a drain, as `PUT /v1/node/:id/drain`.
async fn set_drain(
    store: &StateStore,
    node: &Node,
    deadline: Option<Duration>,
    ignore_system_jobs: bool,
) {
    let now = now_nanos();
    let deadline = deadline.map_or(0, |d| d.as_nanos() as i64);
    let drain = DrainStrategy {
        deadline,
        ignore_system_jobs,
        force_deadline: (deadline != 0).then_some(now + deadline),
        started_at: Some(now),
    };
    store
        .submit(Command::NodeUpdateDrain {
            node_id: node.id,
            drain: Some(drain),
            mark_eligible: false,
            event: None,
            evals: vec![],
        })
        .await
        .unwrap()
        .unwrap();
}

async fn cancel_drain(store: &StateStore, node: &Node, mark_eligible: bool) {
    store
        .submit(Command::NodeUpdateDrain {
            node_id: node.id,
            drain: None,
            mark_eligible,
            event: None,
            evals: vec![],
        })
        .await
        .unwrap()
        .unwrap();
}

/// The job's live (not terminal) allocations.
fn live_allocs(store: &StateStore, job_id: &str) -> Vec<Arc<Allocation>> {
    store
        .snapshot()
        .allocs_by_job("default", job_id)
        .filter(|a| !a.is_terminal())
        .cloned()
        .collect()
}

fn running_on(store: &StateStore, job_id: &str, node: &Node) -> usize {
    live_allocs(store, job_id)
        .iter()
        .filter(|a| a.node_id == node.id && a.client_status == ClientStatus::Running)
        .count()
}

fn marked_on(store: &StateStore, node: &Node) -> Vec<Arc<Allocation>> {
    store
        .snapshot()
        .allocs_by_node(&node.id)
        .filter(|a| a.desired_transition.should_migrate())
        .cloned()
        .collect()
}

fn stored_node(store: &StateStore, node: &Node) -> Arc<Node> {
    store
        .snapshot()
        .node(&node.id)
        .cloned()
        .expect("node stored")
}

fn drain_complete_event(node: &Node) -> Option<&NodeEvent> {
    node.events
        .iter()
        .rev()
        .find(|e| e.message == NODE_DRAIN_COMPLETE)
}

fn drain_done(store: &StateStore, node: &Node) -> bool {
    let n = stored_node(store, node);
    n.drain_strategy.is_none() && drain_complete_event(&n).is_some()
}

/// Follows the feed and records the most allocations of `job_id` that were
/// ever away at once: `count` minus those healthy and not marked to move.
fn watch_away(store: &StateStore, job_id: &str, count: usize) -> Arc<Mutex<usize>> {
    let snap = store.snapshot();
    let mut allocs: HashMap<AllocId, Arc<Allocation>> = snap
        .allocs_by_job("default", job_id)
        .map(|a| (a.id, a.clone()))
        .collect();
    let sub = store.subscribe(snap.latest_index() + 1);
    let max_away = Arc::new(Mutex::new(0usize));
    let (out, job_id) = (max_away.clone(), job_id.to_string());
    std::thread::spawn(move || {
        let mut receiver = sub.receiver;
        let mut backlog = sub.backlog.into_iter();
        loop {
            let changes = match backlog.next() {
                Some(c) => c,
                None => match futures::executor::block_on(receiver.next()) {
                    Some(c) => c,
                    None => return,
                },
            };
            for change in &changes.changes {
                if let Some(Row::Alloc(a)) = &change.row {
                    if *a.job_id == *job_id {
                        allocs.insert(a.id, a.clone());
                    }
                }
            }
            let healthy = allocs
                .values()
                .filter(|a| {
                    !a.is_terminal()
                        && a.deployment_status().is_some_and(|s| s.is_healthy())
                        && !a.desired_transition.should_migrate()
                })
                .count();
            let mut max = out.lock().unwrap();
            *max = (*max).max(count.saturating_sub(healthy));
        }
    });
    max_away
}

/// A server with node `a` running `job` (all its allocations started),
/// then nodes `b` and `c` registered empty.
struct Cluster {
    server: Server,
    store: StateStore,
    a: Node,
    b: Node,
    c: Node,
}

async fn cluster_with(dir: &Path, jobs: Vec<Job>, expected_on_a: usize) -> Cluster {
    let server = start(dir).await;
    let store = server.handle().store.clone();
    let a = register_node(&store, "a").await;
    let ids: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
    for job in jobs {
        register_job(&store, job).await;
    }
    let started = {
        let client = FakeClient::start(store.clone(), None);
        let ok = wait_until(Duration::from_secs(20), || {
            ids.iter()
                .map(|id| running_on(&store, id, &a))
                .sum::<usize>()
                == expected_on_a
        })
        .await;
        drop(client);
        ok
    };
    assert!(started, "all allocations placed and running on node a");
    let b = register_node(&store, "b").await;
    let c = register_node(&store, "c").await;
    Cluster {
        server,
        store,
        a,
        b,
        c,
    }
}

#[actix::test]
async fn drain_migrates_at_most_max_parallel_at_once_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster_with(dir.path(), vec![service_job("web", 6, 2)], 6).await;
    let _client = FakeClient::start(cl.store.clone(), None);
    let max_away = watch_away(&cl.store, "web", 6);

    set_drain(&cl.store, &cl.a, None, false).await;
    let done = wait_until(Duration::from_secs(60), || drain_done(&cl.store, &cl.a)).await;
    assert!(done, "the drain completes");

    let live = live_allocs(&cl.store, "web");
    assert_eq!(live.len(), 6, "six allocations still run");
    assert!(
        live.iter()
            .all(|a| a.node_id == cl.b.id || a.node_id == cl.c.id),
        "all of them on the other nodes"
    );
    let node = stored_node(&cl.store, &cl.a);
    assert_eq!(
        node.scheduling_eligibility,
        SchedulingEligibility::Ineligible
    );
    assert!(!node.drain);
    let event = drain_complete_event(&node).unwrap();
    assert_eq!(event.subsystem, "Drain");
    assert!(!event.details.contains_key(DEADLINE_REACHED));
    let max = *max_away.lock().unwrap();
    assert_eq!(max, 2, "two at a time, never more (saw {max})");
    cl.server.stop().await;
}

#[actix::test]
async fn drain_waits_for_replacements_to_be_healthy_not_just_running() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster_with(dir.path(), vec![service_job("web", 4, 1)], 4).await;
    // Replacements start on b and c, but no health is reported there yet.
    let client =
        FakeClient::start_with_health(cl.store.clone(), None, Some(HashSet::from([cl.a.id])));
    let max_away = watch_away(&cl.store, "web", 4);
    set_drain(&cl.store, &cl.a, None, false).await;

    let replaced = wait_until(Duration::from_secs(20), || {
        live_allocs(&cl.store, "web")
            .iter()
            .any(|a| a.node_id != cl.a.id && a.client_status == ClientStatus::Running)
    })
    .await;
    assert!(replaced, "the first replacement runs elsewhere");
    actix_rt::time::sleep(Duration::from_secs(2)).await;
    let moved: usize = live_allocs(&cl.store, "web")
        .iter()
        .filter(|a| a.node_id != cl.a.id)
        .count();
    assert_eq!(
        moved, 1,
        "a running replacement that is not healthy holds the drain"
    );
    assert!(stored_node(&cl.store, &cl.a).drain_strategy.is_some());

    client.healthy_everywhere();
    let done = wait_until(Duration::from_secs(60), || drain_done(&cl.store, &cl.a)).await;
    assert!(done, "healthy replacements let the drain go on to the end");
    let max = *max_away.lock().unwrap();
    assert_eq!(max, 1, "one at a time (saw {max})");
    cl.server.stop().await;
}

#[actix::test]
async fn the_deadline_forces_every_remaining_allocation_off_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster_with(dir.path(), vec![service_job("web", 4, 1)], 4).await;
    // Replacements never start, so the drain cannot go on by itself.
    let _client = FakeClient::start(cl.store.clone(), Some(HashSet::from([cl.a.id])));
    set_drain(&cl.store, &cl.a, Some(Duration::from_secs(4)), false).await;

    let first = wait_until(Duration::from_secs(3), || {
        !marked_on(&cl.store, &cl.a).is_empty()
    })
    .await;
    assert!(first, "one allocation is marked at once");
    assert_eq!(
        marked_on(&cl.store, &cl.a).len(),
        1,
        "only max_parallel of them"
    );
    assert!(stored_node(&cl.store, &cl.a).drain_strategy.is_some());

    let forced = wait_until(Duration::from_secs(20), || drain_done(&cl.store, &cl.a)).await;
    assert!(forced, "the deadline ends the drain");
    assert_eq!(
        marked_on(&cl.store, &cl.a).len(),
        4,
        "every allocation marked"
    );
    let node = stored_node(&cl.store, &cl.a);
    let event = drain_complete_event(&node).unwrap();
    assert_eq!(
        event.details.get(DEADLINE_REACHED).map(String::as_str),
        Some("true")
    );
    let off = wait_until(Duration::from_secs(20), || {
        running_on(&cl.store, "web", &cl.a) == 0
    })
    .await;
    assert!(off, "nothing of the job is left running on the node");
    cl.server.stop().await;
}

#[actix::test]
async fn a_negative_deadline_forces_the_drain_now() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster_with(dir.path(), vec![service_job("web", 3, 1)], 3).await;
    let _client = FakeClient::start(cl.store.clone(), Some(HashSet::from([cl.a.id])));
    let now = now_nanos();
    cl.store
        .submit(Command::NodeUpdateDrain {
            node_id: cl.a.id,
            drain: Some(DrainStrategy {
                deadline: -1,
                force_deadline: Some(now),
                started_at: Some(now),
                ..Default::default()
            }),
            mark_eligible: false,
            event: None,
            evals: vec![],
        })
        .await
        .unwrap()
        .unwrap();
    let forced = wait_until(Duration::from_secs(10), || drain_done(&cl.store, &cl.a)).await;
    assert!(forced);
    assert_eq!(marked_on(&cl.store, &cl.a).len(), 3);
    cl.server.stop().await;
}

/// Node `a` with a service, a batch and a system allocation.
async fn mixed_cluster(dir: &Path) -> Cluster {
    let jobs = vec![
        service_job("web", 1, 1),
        typed_job("report", JobType::Batch),
    ];
    let cl = cluster_with(dir, jobs, 2).await;
    register_job(&cl.store, typed_job("agent", JobType::System)).await;
    let client = FakeClient::start(cl.store.clone(), None);
    let placed = wait_until(Duration::from_secs(20), || {
        running_on(&cl.store, "agent", &cl.a) == 1 && live_allocs(&cl.store, "agent").len() == 3
    })
    .await;
    drop(client);
    assert!(placed, "the system job runs on every node");
    cl
}

fn alloc_of(store: &StateStore, job_id: &str, node: &Node) -> Arc<Allocation> {
    store
        .snapshot()
        .allocs_by_job("default", job_id)
        .find(|a| a.node_id == node.id)
        .cloned()
        .expect("allocation on the node")
}

async fn finish(store: &StateStore, alloc: &Allocation) {
    store
        .submit(Command::AllocClientUpdate {
            updates: vec![client_update(alloc, ClientStatus::Complete)],
            evals: vec![],
        })
        .await
        .unwrap()
        .unwrap();
}

#[actix::test]
async fn batch_work_is_left_to_finish_and_system_work_leaves_last() {
    let dir = tempfile::tempdir().unwrap();
    let cl = mixed_cluster(dir.path()).await;
    let _client = FakeClient::start(cl.store.clone(), None);
    set_drain(&cl.store, &cl.a, None, false).await;

    let moved = wait_until(Duration::from_secs(20), || {
        running_on(&cl.store, "web", &cl.a) == 0
            && live_allocs(&cl.store, "web")
                .iter()
                .any(|a| a.client_status == ClientStatus::Running)
    })
    .await;
    assert!(moved, "the service allocation moved");
    // Give the drainer a moment to (wrongly) act on the rest.
    actix_rt::time::sleep(Duration::from_millis(500)).await;
    let batch = alloc_of(&cl.store, "report", &cl.a);
    let system = alloc_of(&cl.store, "agent", &cl.a);
    assert!(
        !batch.desired_transition.should_migrate(),
        "batch left to finish"
    );
    assert!(!batch.is_terminal());
    assert!(
        !system.desired_transition.should_migrate(),
        "system stays while others run"
    );
    assert!(stored_node(&cl.store, &cl.a).drain_strategy.is_some());

    finish(&cl.store, &batch).await;
    let done = wait_until(Duration::from_secs(20), || drain_done(&cl.store, &cl.a)).await;
    assert!(done, "the drain completes once the batch work finished");
    let system = alloc_of(&cl.store, "agent", &cl.a);
    assert!(
        system.desired_transition.should_migrate(),
        "system work marked last"
    );
    let stopped = wait_until(Duration::from_secs(20), || {
        alloc_of(&cl.store, "agent", &cl.a).server_terminal()
    })
    .await;
    assert!(stopped, "and stopped");
    cl.server.stop().await;
}

#[actix::test]
async fn ignore_system_jobs_leaves_system_work_running() {
    let dir = tempfile::tempdir().unwrap();
    let cl = mixed_cluster(dir.path()).await;
    let _client = FakeClient::start(cl.store.clone(), None);
    set_drain(&cl.store, &cl.a, None, true).await;
    let batch = alloc_of(&cl.store, "report", &cl.a);
    finish(&cl.store, &batch).await;
    let done = wait_until(Duration::from_secs(30), || drain_done(&cl.store, &cl.a)).await;
    assert!(done);
    actix_rt::time::sleep(Duration::from_millis(500)).await;
    let system = alloc_of(&cl.store, "agent", &cl.a);
    assert!(!system.desired_transition.should_migrate());
    assert!(!system.is_terminal(), "system work still runs on the node");
    cl.server.stop().await;
}

#[actix::test]
async fn cancelling_stops_further_migrations_and_mark_eligible_reopens_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster_with(dir.path(), vec![service_job("web", 5, 1)], 5).await;
    let client = FakeClient::start(cl.store.clone(), Some(HashSet::from([cl.a.id])));
    set_drain(&cl.store, &cl.a, None, false).await;
    let first = wait_until(Duration::from_secs(10), || {
        marked_on(&cl.store, &cl.a).len() == 1
    })
    .await;
    assert!(first);

    cancel_drain(&cl.store, &cl.a, true).await;
    // Replacements may start now: a live drain would mark the next one.
    client.run_everywhere();
    let replaced = wait_until(Duration::from_secs(20), || {
        live_allocs(&cl.store, "web")
            .iter()
            .filter(|a| a.client_status == ClientStatus::Running)
            .count()
            == 5
    })
    .await;
    assert!(replaced);
    actix_rt::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(marked_on(&cl.store, &cl.a).len(), 1, "no further migration");
    assert_eq!(running_on(&cl.store, "web", &cl.a), 4);
    let node = stored_node(&cl.store, &cl.a);
    assert_eq!(node.scheduling_eligibility, SchedulingEligibility::Eligible);
    assert!(
        drain_complete_event(&node).is_none(),
        "a cancel is no completion"
    );
    cl.server.stop().await;
}

#[actix::test]
async fn a_restarted_server_continues_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster_with(dir.path(), vec![service_job("web", 4, 1)], 4).await;
    {
        let _client = FakeClient::start(cl.store.clone(), Some(HashSet::from([cl.a.id])));
        set_drain(&cl.store, &cl.a, None, false).await;
        let first = wait_until(Duration::from_secs(10), || {
            marked_on(&cl.store, &cl.a).len() == 1
        })
        .await;
        assert!(first);
    }
    let (a, b, c) = (cl.a.clone(), cl.b.clone(), cl.c.clone());
    cl.server.stop().await;

    let server = start(dir.path()).await;
    let store = server.handle().store.clone();
    let _client = FakeClient::start(store.clone(), None);
    let done = wait_until(Duration::from_secs(60), || drain_done(&store, &a)).await;
    assert!(done, "the drain goes on after the restart and completes");
    let live = live_allocs(&store, "web");
    assert_eq!(live.len(), 4);
    assert!(live.iter().all(|x| x.node_id == b.id || x.node_id == c.id));
    server.stop().await;
}

#[actix::test]
async fn a_deadline_that_passed_while_the_server_was_down_is_enforced_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let cl = cluster_with(dir.path(), vec![service_job("web", 3, 1)], 3).await;
    set_drain(&cl.store, &cl.a, Some(Duration::from_secs(2)), false).await;
    let a = cl.a.clone();
    cl.server.stop().await;
    // The stored ForceDeadline is in the past by the time the server is up.
    actix_rt::time::sleep(Duration::from_millis(2500)).await;

    let server = start(dir.path()).await;
    let store = server.handle().store.clone();
    let done = wait_until(Duration::from_secs(10), || drain_done(&store, &a)).await;
    assert!(done);
    let node = stored_node(&store, &a);
    let event = drain_complete_event(&node).unwrap();
    assert_eq!(
        event.details.get(DEADLINE_REACHED).map(String::as_str),
        Some("true")
    );
    assert_eq!(marked_on(&store, &a).len(), 3);
    server.stop().await;
}

#[actix::test]
async fn draining_an_empty_node_completes_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let store = server.handle().store.clone();
    let empty = register_node(&store, "empty").await;
    set_drain(&store, &empty, Some(Duration::from_secs(3600)), false).await;
    let done = wait_until(Duration::from_secs(5), || drain_done(&store, &empty)).await;
    assert!(done, "nothing to move: the drain ends without waiting");
    let node = stored_node(&store, &empty);
    assert_eq!(
        node.scheduling_eligibility,
        SchedulingEligibility::Ineligible
    );
    let event = drain_complete_event(&node).unwrap();
    assert!(!event.details.contains_key(DEADLINE_REACHED));
    server.stop().await;
}
