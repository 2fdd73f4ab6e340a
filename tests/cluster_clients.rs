//! Clients learn the cluster's servers (issue 18, item 6), end to end:
//! three real server processes form a cluster, a real client agent is
//! given only the leader's HTTP address, and learns the other two from
//! its register and heartbeat answers (`Servers`). The leader is killed:
//! the client fails over to the survivors and its node stays `ready` there
//! through the election, past many heartbeat TTLs.

use herder_tests::{get, send_json, temp_dir, HerderProcess};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Generous: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(60);
const KEY: &str = "cg8StVXbQJ0gPvMd9o7yrg==";
/// Short heartbeats, so that a node whose heartbeats stop is down within
/// seconds: TTL 2 s + 3 s grace. After a leader change every node gets
/// 10-20 s (the failover window): room for the election and for a client
/// whose heartbeats failed during it to come back from its backoff (it
/// doubles up to 10 s; a 5 s window, with 1 s TTLs, failed on busy
/// machines).
const CONFIG: &str = r#"
[server]
min_heartbeat_ttl = "2s"
heartbeat_grace = "3s"
failover_heartbeat_ttl = "10s"
"#;
/// Longer than the failover window (10 s) plus a TTL and the grace:
/// a node that stopped heartbeating at the kill is down before this has
/// passed.
const WATCH_AFTER_KILL: Duration = Duration::from_secs(30);

/// A loopback port nothing listens on (bound, then released).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

fn get_json(url: &str) -> Option<Value> {
    let (code, body) = get(url);
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

/// A server process with its RPC address.
struct ServerProcess {
    process: HerderProcess,
    rpc_addr: String,
}

impl ServerProcess {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.process.addr)
    }
}

fn start_servers(dir: &std::path::Path) -> Vec<ServerProcess> {
    let config = dir.join("server.toml");
    std::fs::write(&config, CONFIG).expect("write the server config");
    let rpc_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let joins: Vec<String> = rpc_ports
        .iter()
        .flat_map(|p| ["-retry-join".to_string(), format!("127.0.0.1:{p}")])
        .collect();
    rpc_ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let data_dir = dir.join(format!("s{i}"));
            let (port, data_dir, node) = (
                port.to_string(),
                data_dir.to_string_lossy().into_owned(),
                format!("s{i}"),
            );
            let mut args = vec![
                "agent",
                "-server",
                "-config",
                config.to_str().expect("a UTF-8 temporary path"),
                "-bootstrap-expect",
                "3",
                "-rpc-port",
                &port,
                "-http-port",
                "0",
                "-bind",
                "127.0.0.1",
                "-data-dir",
                &data_dir,
                "-encrypt",
                KEY,
                "-node",
                &node,
            ];
            args.extend(joins.iter().map(String::as_str));
            ServerProcess {
                process: HerderProcess::spawn(&args),
                rpc_addr: format!("127.0.0.1:{port}"),
            }
        })
        .collect()
}

/// The index of the leader, once every server names the same one.
fn wait_for_leader(servers: &[ServerProcess]) -> usize {
    let deadline = Instant::now() + WAIT;
    loop {
        let named: Vec<Option<String>> = servers
            .iter()
            .map(|s| {
                get_json(&s.url("/v1/status/leader"))?
                    .as_str()
                    .map(String::from)
            })
            .collect();
        if let Some(Some(leader)) = named.first() {
            if named.iter().all(|n| n.as_deref() == Some(leader.as_str())) {
                if let Some(i) = servers.iter().position(|s| &s.rpc_addr == leader) {
                    return i;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader agreed on: {named:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The client node's status as `server` reports it (`?stale`: any server
/// answers from its replica).
fn node_status(server: &ServerProcess) -> Option<String> {
    let nodes = get_json(&server.url("/v1/nodes?stale"))?;
    let node = nodes
        .as_array()?
        .iter()
        .find(|n| n["Name"] == "cluster-client")?;
    node["Status"].as_str().map(String::from)
}

#[test]
fn a_client_given_only_the_leader_keeps_its_node_ready_after_the_leader_dies() {
    let dir = temp_dir();
    let mut servers = start_servers(dir.path());
    let leader = wait_for_leader(&servers);

    // A follower tells a registering node of all three servers, by their
    // HTTP addresses.
    let follower = &servers[(leader + 1) % 3];
    let mut probe = herder::state::fixtures::node("probe");
    probe.status = herder::structs::NodeStatus::Ready;
    // (The leader takes node registrations once its duties are on, a
    // moment after its election.)
    let register = || {
        let (code, body) = send_json(
            "PUT",
            &follower.url("/v1/node/register"),
            None,
            &json!({ "Node": probe }),
        );
        (code == 200).then_some(body)
    };
    let body = herder_tests::wait_for(WAIT, register).expect("register through a follower");
    let answer: Value = serde_json::from_str(&body).expect("a JSON answer");
    let mut told: Vec<&str> = answer["Servers"]
        .as_array()
        .expect("Servers in the answer")
        .iter()
        .filter_map(|s| s["HTTPAddr"].as_str())
        .collect();
    told.sort_unstable();
    let mut all: Vec<String> = servers.iter().map(|s| s.process.addr.to_string()).collect();
    all.sort_unstable();
    assert_eq!(told, all, "{body}");

    let client_dir = temp_dir();
    let only_leader = servers[leader].process.addr.to_string();
    let _client = HerderProcess::spawn(&[
        "agent",
        "-client",
        "-servers",
        &only_leader,
        "-data-dir",
        client_dir.path().to_str().expect("a UTF-8 temporary path"),
        "-bind",
        "127.0.0.1",
        "-http-port",
        "0",
        "-node",
        "cluster-client",
    ]);
    let ready_everywhere = || {
        servers
            .iter()
            .all(|s| node_status(s).as_deref() == Some("ready"))
            .then_some(())
    };
    herder_tests::wait_for(WAIT, ready_everywhere).expect("the client's node is ready");

    // The leader dies; the survivors elect another and the node, which was
    // never told of them but by the servers, keeps heartbeating to them.
    let killed = servers.remove(leader);
    let status = killed.process.signal_and_wait(9);
    assert!(!status.success());
    wait_for_leader(&servers);
    // Long past the failover window and many TTLs, it never went down on
    // any survivor.
    let until = Instant::now() + WATCH_AFTER_KILL;
    while Instant::now() < until {
        for server in &servers {
            let status = node_status(server);
            assert!(
                status.as_deref() == Some("ready"),
                "the node is {status:?} on {} after its only configured server died",
                server.rpc_addr
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
