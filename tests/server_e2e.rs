//! The whole server in one process, driven as a cluster would drive it:
//! a thousand nodes, a hundred jobs of mixed types registered at once,
//! every evaluation processed by the workers, every placement checked, and
//! the result intact after a restart. Then the worker configuration API
//! pausing and resuming scheduling.

use herder::state::fixtures;
use herder::state::{Command, StateSnapshot};
use herder::structs::fit::allocs_fit;
use herder::structs::{EvalStatus, JobType, NodeStatus};
use herder_tests::{
    get, register_ready_node, send_json, server_config, temp_dir, wait_for, TestAgent,
};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

fn register_nodes(agent: &TestAgent, n: usize) {
    let store = &agent.server.as_ref().unwrap().store;
    let pending: Vec<_> = (0..n)
        .map(|i| {
            let mut node = fixtures::node(&format!("n{i}"));
            node.status = NodeStatus::Ready;
            store.submit(Command::NodeRegister {
                node: Arc::new(node),
            })
        })
        .collect();
    for p in pending {
        futures::executor::block_on(p).unwrap().unwrap();
    }
}

fn job_of(kind: JobType, i: usize, count: i32) -> herder::structs::Job {
    let mut job = fixtures::job("default", &format!("{kind}-{i}"), &[("g", count)]);
    job.job_type = kind;
    job.task_groups[0].reschedule_policy = None;
    job.canonicalize();
    job
}

fn all_evals_done(snap: &StateSnapshot) -> bool {
    snap.evals()
        .all(|e| e.status.is_terminal() || e.status == EvalStatus::Blocked)
}

#[test]
fn a_thousand_nodes_a_hundred_mixed_jobs_all_placed_none_overcommitted_all_durable() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    register_nodes(&agent, 1000);
    let mut jobs = Vec::new();
    for i in 0..70 {
        jobs.push(job_of(JobType::Service, i, 5));
    }
    for i in 0..25 {
        jobs.push(job_of(JobType::Batch, i, 4));
    }
    for i in 0..5 {
        jobs.push(job_of(JobType::System, i, 1));
    }
    // Submitted concurrently, as many API clients would.
    let store = agent.server.as_ref().unwrap().store.clone();
    let threads: Vec<_> = jobs
        .chunks(10)
        .map(|chunk| {
            let (store, chunk) = (store.clone(), chunk.to_vec());
            std::thread::spawn(move || {
                for job in chunk {
                    fixtures::register_job(&store, job);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let done = wait_for(Duration::from_secs(240), || {
        let snap = store.snapshot();
        (snap.evals().count() >= 100 && all_evals_done(&snap)).then_some(snap)
    });
    let snap = done.expect("every evaluation processed within 4 minutes");
    for e in snap.evals() {
        assert_eq!(
            e.status,
            EvalStatus::Complete,
            "eval of {} ended {}: {}",
            e.job_id,
            e.status,
            e.status_description
        );
    }
    assert_eq!(
        snap.alloc_count(),
        70 * 5 + 25 * 4 + 5 * 1000,
        "every allocation placed"
    );
    for node in snap.nodes() {
        let allocs: Vec<_> = snap.allocs_by_node(&node.id).map(|a| a.as_ref()).collect();
        allocs_fit(node, allocs)
            .unwrap_or_else(|e| panic!("node {} over-committed: {e}", node.name));
    }
    let before: BTreeSet<_> = snap.allocs().map(|a| (a.id, a.node_id)).collect();
    agent.stop();

    let agent = TestAgent::start(server_config(dir.path()), false);
    let snap = agent.server.as_ref().unwrap().store.snapshot();
    let after: BTreeSet<_> = snap.allocs().map(|a| (a.id, a.node_id)).collect();
    assert_eq!(after, before, "every allocation durable across a restart");
}

#[test]
fn worker_config_api_pauses_and_resumes_scheduling() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    register_nodes(&agent, 3);
    let (code, body) = get(&agent.url("/v1/agent/schedulers"));
    assert_eq!(code, 200, "{body}");
    let info: Value = serde_json::from_str(&body).unwrap();
    assert!(
        info["server_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{info}"
    );
    let first = &info["schedulers"][0];
    for field in [
        "id",
        "enabled_schedulers",
        "started",
        "status",
        "workload_status",
    ] {
        assert!(!first[field].is_null(), "{field} missing in {first}");
    }

    let url = agent.url("/v1/agent/schedulers/config");
    let (code, body) = send_json("PUT", &url, None, &json!({"num_schedulers": 0}));
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["num_schedulers"],
        0
    );
    // As in Nomad, the list shows only active workers at once; the retired
    // ones still finish the dequeue they have parked in the broker, which
    // lasts at most the 500 ms dequeue timeout. Give them four times that.
    let (_, body) = get(&agent.url("/v1/agent/schedulers"));
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["schedulers"],
        json!([])
    );
    std::thread::sleep(Duration::from_secs(2));

    let store = agent.server.as_ref().unwrap().store.clone();
    let job = job_of(JobType::Service, 0, 2);
    let eval_id = fixtures::register_job(&store, job);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        store.snapshot().eval(&eval_id).unwrap().status,
        EvalStatus::Pending,
        "no workers: the evaluation waits"
    );

    let (code, body) = send_json("PUT", &url, None, &json!({"num_schedulers": 2}));
    assert_eq!(code, 200, "{body}");
    let done = wait_for(Duration::from_secs(30), || {
        let s = store.snapshot().eval(&eval_id).unwrap().status;
        (s == EvalStatus::Complete).then_some(())
    });
    assert!(done.is_some(), "workers back: the evaluation is processed");

    for bad in [
        json!({"num_schedulers": -1}),
        json!({"num_schedulers": 4096}),
        json!({"enabled_schedulers": ["service"]}),
        json!({"enabled_schedulers": ["gpu", "_core"]}),
        json!({"num_schedulers": "two"}),
    ] {
        let (code, body) = send_json("PUT", &url, None, &bad);
        assert_eq!(code, 400, "{bad} -> {body}");
    }
    let (_, body) = get(&url);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["num_schedulers"],
        2,
        "refusals change nothing"
    );
}

/// A client that heartbeats its node from a thread until dropped.
struct Heartbeater {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeater {
    fn start(url: String, secret: String) -> Heartbeater {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::SeqCst) {
                send_json("PUT", &url, Some(&secret), &json!({"Status": "ready"}));
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Heartbeater {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Heartbeater {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn register_over_http(agent: &TestAgent, name: &str) -> (herder::structs::Node, Heartbeater) {
    let mut node = fixtures::node(name);
    node.status = NodeStatus::Ready;
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/node/register"),
        None,
        &json!({"Node": node}),
    );
    assert_eq!(code, 200, "{body}");
    let hb = Heartbeater::start(
        agent.url(&format!("/v1/node/{}/heartbeat", node.id)),
        node.secret_id.clone(),
    );
    (node, hb)
}

#[test]
fn a_node_that_stops_heartbeating_goes_down_and_its_work_is_replaced_elsewhere() {
    let dir = temp_dir();
    let mut config = server_config(dir.path());
    config.server.min_heartbeat_ttl = Duration::from_millis(500);
    config.server.heartbeat_grace = Duration::from_millis(500);
    let agent = TestAgent::start(config, false);
    let store = agent.server.as_ref().unwrap().store.clone();

    let (a, a_heartbeats) = register_over_http(&agent, "a");
    let job = job_of(JobType::Service, 0, 1);
    fixtures::register_job(&store, job.clone());
    let first = wait_for(Duration::from_secs(30), || {
        store
            .snapshot()
            .allocs_by_job("default", &job.id)
            .next()
            .cloned()
    })
    .expect("placed");
    assert_eq!(first.node_id, a.id);

    let (b, _b_heartbeats) = register_over_http(&agent, "b");
    drop(a_heartbeats);
    let down = wait_for(Duration::from_secs(30), || {
        (store.snapshot().node(&a.id)?.status == NodeStatus::Down).then_some(())
    });
    assert!(down.is_some(), "silent node marked down");
    let replaced = wait_for(Duration::from_secs(30), || {
        let snap = store.snapshot();
        let live: Vec<_> = snap
            .allocs_by_job("default", &job.id)
            .filter(|x| !x.is_terminal())
            .cloned()
            .collect();
        (live.len() == 1 && live[0].node_id == b.id).then_some(())
    });
    assert!(replaced.is_some(), "replacement placed on the other node");
    let old = store.snapshot().alloc(&first.id).cloned().unwrap();
    assert_eq!(old.client_status, herder::structs::ClientStatus::Lost);
    assert!(old.server_terminal());
}

/// Issue 16: allocations and evaluations carry Nomad's timestamps. A
/// client report is stamped with the server's time (a report without
/// `ModifyTime`, as a Nomad-shaped client may send, once left it 0, and
/// a failed allocation without task finish times was then never
/// rescheduled), and an evaluation's `ModifyTime` moves when it finishes.
#[test]
fn client_reports_are_stamped_by_the_server_and_failures_are_rescheduled() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let node = register_ready_node(&agent, "n0");
    let job = json!({"Job": {
        "ID": "stamped", "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1,
            "ReschedulePolicy": {"Attempts": 1, "Interval": 3_600_000_000_000u64,
                "Delay": 5_000_000_000u64, "DelayFunction": "constant"},
            "Tasks": [{"Name": "t", "Driver": "exec", "Config": {"command": "/bin/true"},
                "Resources": {"CPU": 100, "MemoryMB": 64}}]}]
    }});
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &job);
    assert_eq!(code, 200, "{body}");
    let store = agent.server.as_ref().unwrap().store.clone();
    let first = wait_for(Duration::from_secs(20), || {
        store
            .snapshot()
            .allocs_by_job("default", "stamped")
            .next()
            .map(|a| (**a).clone())
    })
    .expect("placed");
    assert!(first.create_time > 0 && first.modify_time >= first.create_time);
    let eval = wait_for(Duration::from_secs(20), || {
        let snap = store.snapshot();
        let e = snap.evals_by_job("default", "stamped").next()?.clone();
        e.status.is_terminal().then_some(e)
    })
    .expect("the evaluation finishes");
    assert!(
        eval.modify_time > eval.create_time,
        "ModifyTime {} not after CreateTime {}",
        eval.modify_time,
        eval.create_time
    );

    // Failed, without task states or a ModifyTime.
    let before = herder_now();
    let report = json!({"Allocs": [{"ID": first.id, "ClientStatus": "failed"}]});
    let (code, body) = send_json(
        "PUT",
        &agent.url(&format!("/v1/node/{}/allocations", node.id)),
        Some(&node.secret_id),
        &report,
    );
    assert_eq!(code, 200, "{body}");
    let failed = store.snapshot().alloc(&first.id).unwrap().clone();
    assert!(
        failed.modify_time >= before,
        "ModifyTime {} of a report made after {before}",
        failed.modify_time
    );
    let replacement = wait_for(Duration::from_secs(30), || {
        store
            .snapshot()
            .allocs_by_job("default", "stamped")
            .find(|a| a.links().previous_allocation == Some(first.id))
            .map(|a| a.id)
    });
    assert!(
        replacement.is_some(),
        "the failed allocation was not rescheduled"
    );
}

fn herder_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Issue 16: `PauseEvalBroker` in the scheduler configuration stops
/// scheduling (evaluations wait, none is lost) until it is cleared, and a
/// paused broker stays paused across a restart.
#[test]
fn pause_eval_broker_holds_scheduling_until_cleared_even_across_a_restart() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    register_nodes(&agent, 2);
    let config_url = agent.url("/v1/operator/scheduler/configuration");
    let (code, body) = send_json("PUT", &config_url, None, &json!({"PauseEvalBroker": true}));
    assert_eq!(code, 200, "{body}");
    let job = |id: &str| {
        json!({"Job": {"ID": id, "Type": "service", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t", "Driver": "exec",
                "Resources": {"CPU": 100, "MemoryMB": 64}}]}]}})
    };
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &job("held"));
    assert_eq!(code, 200, "{body}");
    let placed = |agent: &TestAgent, id: &str| {
        let store = &agent.server.as_ref().unwrap().store;
        store.snapshot().allocs_by_job("default", id).count()
    };
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(placed(&agent, "held"), 0, "scheduled while paused");

    agent.stop();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let config_url = agent.url("/v1/operator/scheduler/configuration");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        placed(&agent, "held"),
        0,
        "scheduled while paused after a restart"
    );
    let (code, body) = send_json("PUT", &config_url, None, &json!({"PauseEvalBroker": false}));
    assert_eq!(code, 200, "{body}");
    let done = wait_for(Duration::from_secs(20), || {
        (placed(&agent, "held") == 1).then_some(())
    });
    assert!(done.is_some(), "the held evaluation never ran once resumed");
}
