//! The node protocol's server failover, end to end: a client agent (the
//! real binary, `-servers DEAD,LIVE`) and simulated nodes whose first
//! server is a closed port register, heartbeat and report their
//! allocations through the live one.

use herder::structs::{ClientStatus, NodeStatus};
use herder_actors::sim::{SimConfig, SimNodes};
use herder_tests::{
    get, send_json, server_config, temp_dir, wait_for, HerderProcess, TestAgent, RAW_EXEC_ENABLED,
};
use serde_json::{json, Value};
use std::time::Duration;

/// Generous: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(45);

/// A loopback address nothing listens on (bound, then released).
fn dead_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    addr.to_string()
}

/// A server whose nodes heartbeat every second or so.
fn server() -> (tempfile::TempDir, TestAgent) {
    let dir = temp_dir();
    let mut config = server_config(dir.path());
    config.server.min_heartbeat_ttl = Duration::from_secs(1);
    config.server.heartbeat_grace = Duration::from_secs(1);
    let agent = TestAgent::start(config, false);
    (dir, agent)
}

fn get_json(url: &str) -> Value {
    let (code, body) = get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

fn register_job(agent: &TestAgent, job: Value) {
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &json!({ "Job": job }));
    assert_eq!(code, 200, "register: {body}");
}

#[test]
fn a_client_whose_first_server_is_dead_registers_and_reports_through_the_second() {
    let (_dir, server) = server();
    let servers = format!("{},127.0.0.1:{}", dead_address(), server.addr.port());
    let client_dir = temp_dir();
    let _client = HerderProcess::spawn_with_env(
        &[
            "agent",
            "-client",
            "-servers",
            &servers,
            "-data-dir",
            client_dir.path().to_str().expect("a UTF-8 temporary path"),
            "-bind",
            "127.0.0.1",
            "-http-port",
            "0",
            "-node",
            "failover-client",
        ],
        &[RAW_EXEC_ENABLED],
    );
    let ready = || {
        let nodes = get_json(&server.url("/v1/nodes"));
        nodes
            .as_array()?
            .iter()
            .find(|n| n["Status"] == "ready")
            .cloned()
    };
    let node = wait_for(WAIT, ready).expect("the client registered through the second server");
    assert_eq!(node["Name"], "failover-client");

    // Heartbeats keep it ready past several TTLs (1 s + 1 s grace).
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        ready().is_some(),
        "the node went down: heartbeats were lost"
    );

    // A task's end is reported through the live server too.
    register_job(
        &server,
        json!({
            "ID": "once", "Name": "once", "Type": "batch", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", "exit 0"]},
                "Resources": {"CPU": 50, "MemoryMB": 32}
            }]}]
        }),
    );
    wait_for(WAIT, || {
        let allocs = get_json(&server.url("/v1/job/once/allocations"));
        let statuses: Vec<Value> = allocs
            .as_array()?
            .iter()
            .map(|a| a["ClientStatus"].clone())
            .collect();
        (statuses == [json!("complete")]).then_some(())
    })
    .expect("the allocation's completion reached the server");
}

#[test]
fn simulated_nodes_fail_over_past_a_dead_server_and_run_their_allocations() {
    const NODES: usize = 20;
    let (_dir, server) = server();
    let store = server.server.as_ref().expect("a server").store.clone();
    // Half the nodes start on the dead server (nodes are spread over the
    // list), the other half on the live one.
    let sim = SimNodes::start(SimConfig {
        count: NODES,
        servers: vec![dead_address(), server.url("")],
        ..SimConfig::default()
    })
    .expect("simulation starts");
    let ready = || {
        let snap = store.snapshot();
        snap.nodes()
            .filter(|n| n.status == NodeStatus::Ready)
            .count()
    };
    wait_for(WAIT, || (ready() == NODES).then_some(()))
        .unwrap_or_else(|| panic!("{} of {NODES} nodes ready; {}", ready(), sim.stats()));
    assert!(
        sim.stats().errors > 0,
        "some nodes tried the dead server first"
    );

    register_job(
        &server,
        json!({
            "ID": "crunch", "Name": "crunch", "Type": "batch", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": NODES, "Tasks": [{
                "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "50ms"},
                "Resources": {"CPU": 100, "MemoryMB": 64}
            }]}]
        }),
    );
    let complete = || {
        let snap = store.snapshot();
        let done = snap
            .allocs_by_job("default", "crunch")
            .filter(|a| a.client_status == ClientStatus::Complete)
            .count();
        (done == NODES).then_some(())
    };
    wait_for(WAIT, complete)
        .unwrap_or_else(|| panic!("not every allocation completed; {}", sim.stats()));
    sim.stop();
}
