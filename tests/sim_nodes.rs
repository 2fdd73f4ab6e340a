//! Simulated nodes against a real server: 200 nodes register and stay
//! ready, mock allocations of a batch job complete, a service job's run
//! until `job stop`, and nodes whose simulation ends go down after their
//! heartbeat TTL.

use herder::structs::{ClientStatus, NodeStatus};
use herder_actors::sim::{SimConfig, SimNodes};
use herder_tests::{send_json, server_config, temp_dir, wait_for, TestAgent};
use serde_json::json;
use std::time::Duration;

const NODES: usize = 200;

fn mock_job(id: &str, job_type: &str, count: u32, config: serde_json::Value) -> serde_json::Value {
    json!({"Job": {
        "ID": id, "Name": id, "Type": job_type, "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": config,
            "Resources": {"CPU": 100, "MemoryMB": 64}
        }]}]
    }})
}

fn statuses(agent: &TestAgent, job: &str) -> Vec<ClientStatus> {
    let store = &agent.server.as_ref().unwrap().store;
    let snap = store.snapshot();
    snap.allocs_by_job("default", job)
        .map(|a| a.client_status)
        .collect()
}

#[test]
fn two_hundred_simulated_nodes_run_jobs_and_go_down_when_stopped() {
    let dir = temp_dir();
    let mut config = server_config(dir.path());
    config.server.min_heartbeat_ttl = Duration::from_secs(2);
    config.server.heartbeat_grace = Duration::from_secs(1);
    config.server.max_heartbeats_per_second = 1000.0;
    let agent = TestAgent::start(config, false);
    let store = agent.server.as_ref().unwrap().store.clone();

    let sim = SimNodes::start(SimConfig {
        count: NODES,
        servers: vec![agent.url("")],
        racks: 4,
        ..SimConfig::default()
    })
    .expect("simulation starts");
    let ready = || {
        let snap = store.snapshot();
        snap.nodes()
            .filter(|n| n.status == NodeStatus::Ready)
            .count()
    };
    wait_for(Duration::from_secs(60), || (ready() == NODES).then_some(()))
        .unwrap_or_else(|| panic!("{} of {NODES} nodes ready; {}", ready(), sim.stats()));
    let snap = store.snapshot();
    let node = snap.node(&sim.node_ids()[7]).expect("registered");
    assert_eq!(node.meta.get("rack").map(|s| s.as_str()), Some("r3"));
    assert!(node.drivers["mock_driver"].healthy);

    // A batch job: every allocation runs 100 ms, then completes.
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/jobs"),
        None,
        &mock_job("crunch", "batch", 400, json!({"run_for": "100ms"})),
    );
    assert_eq!(code, 200, "{body}");
    let all_complete = |job: &str, n: usize| {
        let s = statuses(&agent, job);
        (s.len() == n && s.iter().all(|c| *c == ClientStatus::Complete)).then_some(())
    };
    wait_for(Duration::from_secs(60), || all_complete("crunch", 400)).unwrap_or_else(|| {
        panic!(
            "batch allocations: {:?}; {}",
            statuses(&agent, "crunch"),
            sim.stats()
        )
    });
    assert!(sim.stats().allocs_complete >= 400, "{}", sim.stats());

    // A service job runs until stopped; stopping completes its allocations.
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/jobs"),
        None,
        &mock_job("web", "service", 50, json!({})),
    );
    assert_eq!(code, 200, "{body}");
    wait_for(Duration::from_secs(60), || {
        let s = statuses(&agent, "web");
        (s.len() == 50 && s.iter().all(|c| *c == ClientStatus::Running)).then_some(())
    })
    .unwrap_or_else(|| panic!("service allocations: {:?}", statuses(&agent, "web")));
    let stop = ureq::delete(&agent.url("/v1/job/web"))
        .call()
        .expect("job stop");
    assert_eq!(stop.status(), 200);
    wait_for(Duration::from_secs(60), || all_complete("web", 50))
        .unwrap_or_else(|| panic!("stopped service: {:?}", statuses(&agent, "web")));

    // One parked watch per node at most: finished or abandoned blocking
    // queries do not pile up in the server.
    assert!(
        store.node_watcher_count() <= NODES,
        "{} node watchers for {NODES} nodes",
        store.node_watcher_count()
    );

    // The simulation ends: its nodes stop heartbeating and go down.
    sim.stop();
    let down = || {
        let snap = store.snapshot();
        snap.nodes()
            .filter(|n| n.status == NodeStatus::Down)
            .count()
    };
    wait_for(Duration::from_secs(30), || (down() == NODES).then_some(()))
        .unwrap_or_else(|| panic!("{} of {NODES} nodes down", down()));
}

#[test]
fn simulated_nodes_register_again_with_a_server_that_lost_them() {
    let short_heartbeats = |dir: &std::path::Path, port: u16| {
        let mut config = server_config(dir);
        config.ports.http = port;
        config.server.min_heartbeat_ttl = Duration::from_secs(1);
        config.server.heartbeat_grace = Duration::from_secs(1);
        config.server.max_heartbeats_per_second = 1000.0;
        config
    };
    let first_dir = temp_dir();
    let first = TestAgent::start(short_heartbeats(first_dir.path(), 0), false);
    let port = first.addr.port();
    let sim = SimNodes::start(SimConfig {
        count: 20,
        servers: vec![first.url("")],
        ..SimConfig::default()
    })
    .expect("simulation starts");
    wait_for(Duration::from_secs(30), || {
        (sim.stats().registered == 20).then_some(())
    })
    .unwrap_or_else(|| panic!("{}", sim.stats()));
    first.stop();

    // A new server on the same address with fresh state: heartbeats get
    // 404 and every node registers again.
    let second_dir = temp_dir();
    let second = TestAgent::start(short_heartbeats(second_dir.path(), port), false);
    let store = second.server.as_ref().unwrap().store.clone();
    wait_for(Duration::from_secs(60), || {
        let snap = store.snapshot();
        let ready = snap
            .nodes()
            .filter(|n| n.status == NodeStatus::Ready)
            .count();
        (ready == 20).then_some(())
    })
    .unwrap_or_else(|| panic!("nodes at the new server: {}", store.snapshot().node_count()));
    assert!(sim.stats().reregistrations >= 20, "{}", sim.stats());
    sim.stop();
}
