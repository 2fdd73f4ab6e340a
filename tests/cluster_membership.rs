//! Cluster membership as an operator drives it, with three real agent
//! processes on loopback: `server members` shows every server and which
//! one stopped answering, `server force-leave` takes a dead server out of
//! the Raft configuration, a server restarted with a wiped data dir comes
//! back with `server join`, and the leader's dead server cleanup removes a
//! dead server on its own, never below a quorum of `bootstrap_expect`.

use herder_tests::{get, herder_bin, send_raw, wait_for, HerderProcess};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// How long the cluster may take to settle after a change.
const SETTLE: Duration = Duration::from_secs(15);

/// Free loopback ports for the servers' RPC ports (known before start:
/// each server's retry_join names the others).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("bound address").port())
        .collect()
}

/// A test cluster's shared settings.
struct Cluster {
    rpc_ports: Vec<u16>,
    key: String,
    root: tempfile::TempDir,
    /// An extra config file (e.g. the cleanup time), if any.
    config: Option<std::path::PathBuf>,
}

impl Cluster {
    fn new(extra_config: Option<&str>) -> Cluster {
        let root = tempfile::tempdir().expect("temp dir");
        let config = extra_config.map(|text| {
            let path = root.path().join("extra.toml");
            std::fs::write(&path, text).expect("write the config file");
            path
        });
        Cluster {
            rpc_ports: free_ports(3),
            key: "cg8StVXbQJ0gPvMd9o7yrg==".into(),
            root,
            config,
        }
    }

    fn data_dir(&self, i: usize) -> std::path::PathBuf {
        self.root.path().join(format!("d{i}"))
    }

    /// Starts server `i` (0-based) as `s{i+1}`: with retry_join to every
    /// server, or with none when it is to come back through `server join`.
    fn start(&self, i: usize, retry_join: bool) -> HerderProcess {
        let data_dir = self.data_dir(i);
        let mut args: Vec<String> = [
            "agent",
            "-server",
            "-bootstrap-expect",
            "3",
            "-bind",
            "127.0.0.1",
            "-http-port",
            "0",
            "-encrypt",
            &self.key,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(["-rpc-port".into(), self.rpc_ports[i].to_string()]);
        args.extend(["-data-dir".into(), data_dir.display().to_string()]);
        args.extend(["-node".into(), format!("s{}", i + 1)]);
        if retry_join {
            for port in &self.rpc_ports {
                args.extend(["-retry-join".into(), format!("127.0.0.1:{port}")]);
            }
        }
        if let Some(config) = &self.config {
            args.extend(["-config".into(), config.display().to_string()]);
        }
        let words: Vec<&str> = args.iter().map(String::as_str).collect();
        HerderProcess::spawn(&words)
    }
}

fn api(server: &HerderProcess, path: &str) -> String {
    format!("http://{}{path}", server.addr)
}

fn get_json(server: &HerderProcess, path: &str) -> Value {
    let (code, body) = get(&api(server, path));
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// `(name, status)` of every member `/v1/agent/members` lists.
fn member_statuses(server: &HerderProcess) -> Vec<(String, String)> {
    let members = get_json(server, "/v1/agent/members");
    members["Members"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|m| {
                    let field = |k: &str| m[k].as_str().unwrap_or_default().to_string();
                    (field("Name"), field("Status"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn peers(server: &HerderProcess) -> Vec<String> {
    serde_json::from_value(get_json(server, "/v1/status/peers")).unwrap_or_default()
}

/// Waits until `server` sees exactly `expected` members with those
/// statuses; panics with what it saw last.
fn wait_for_members(server: &HerderProcess, expected: &[(&str, &str)]) {
    let want: Vec<(String, String)> = expected
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
    let mut last = Vec::new();
    let seen = wait_for(SETTLE, || {
        last = member_statuses(server);
        (last == want).then_some(())
    });
    assert!(seen.is_some(), "members: want {want:?}, saw {last:?}");
}

fn wait_for_peer_count(server: &HerderProcess, n: usize) -> Vec<String> {
    let mut last = Vec::new();
    let seen = wait_for(SETTLE, || {
        last = peers(server);
        (last.len() == n).then(|| last.clone())
    });
    seen.unwrap_or_else(|| panic!("peers: want {n}, saw {last:?}"))
}

/// Runs a `herder` client verb against `server`; (exit ok, stdout+stderr).
fn cli(server: &HerderProcess, args: &[&str]) -> (bool, String) {
    let output = Command::new(herder_bin())
        .args(args)
        .args(["-address", &format!("http://{}", server.addr)])
        .output()
        .expect("run herder");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn kill_9(server: HerderProcess) {
    server.signal_and_wait(libc::SIGKILL);
}

fn wipe(dir: &Path) {
    std::fs::remove_dir_all(dir).expect("wipe the data dir");
}

#[test]
fn members_show_a_dead_server_which_force_leave_removes_and_join_brings_back() {
    let cluster = Cluster::new(None);
    let mut servers: Vec<Option<HerderProcess>> =
        (0..3).map(|i| Some(cluster.start(i, true))).collect();
    let first = servers[0].take().expect("s1 runs");
    wait_for_members(
        &first,
        &[
            ("s1.global", "alive"),
            ("s2.global", "alive"),
            ("s3.global", "alive"),
        ],
    );
    let (ok, table) = cli(&first, &["server", "members"]);
    assert!(ok, "{table}");
    assert!(table.starts_with("Name "), "{table}");
    assert_eq!(
        table.lines().filter(|l| l.contains(" true ")).count(),
        1,
        "one leader in {table}"
    );

    let (ok, text) = cli(&first, &["server", "force-leave", "s2"]);
    assert!(!ok && text.contains("is alive"), "{text}");
    assert_eq!(peers(&first).len(), 3);

    kill_9(servers[2].take().expect("s3 runs"));
    wait_for_members(
        &first,
        &[
            ("s1.global", "alive"),
            ("s2.global", "alive"),
            ("s3.global", "failed"),
        ],
    );
    let (ok, text) = cli(&first, &["server", "force-leave", "s3"]);
    assert!(ok, "{text}");
    let remaining = wait_for_peer_count(&first, 2);
    let s3_addr = format!("127.0.0.1:{}", cluster.rpc_ports[2]);
    assert!(!remaining.contains(&s3_addr), "{remaining:?}");

    wipe(&cluster.data_dir(2));
    let third = cluster.start(2, false);
    let (ok, text) = cli(
        &third,
        &[
            "server",
            "join",
            &format!("127.0.0.1:{}", cluster.rpc_ports[0]),
        ],
    );
    assert_eq!(
        (ok, text.as_str()),
        (true, "Joined 1 servers successfully\n")
    );
    let back = wait_for_peer_count(&first, 3);
    assert!(back.contains(&s3_addr), "{back:?}");
    wait_for_members(
        &first,
        &[
            ("s1.global", "alive"),
            ("s2.global", "alive"),
            ("s3.global", "alive"),
        ],
    );
    let (ok, peers_table) = cli(&third, &["operator", "raft", "list-peers"]);
    assert!(ok, "{peers_table}");
    assert_eq!(peers_table.lines().count(), 4, "{peers_table}");
    for name in ["s1.global", "s2.global"] {
        assert!(peers_table.contains(name), "{peers_table}");
    }
    let stats = get_json(&third, "/v1/agent/self")["stats"]["raft"].clone();
    assert_eq!(stats["num_peers"], "2", "{stats}");
    assert!(
        ["Leader", "Follower"].contains(&stats["state"].as_str().unwrap_or_default()),
        "{stats}"
    );
}

#[test]
fn the_leader_removes_a_dead_server_but_keeps_a_quorum_of_bootstrap_expect() {
    let cluster = Cluster::new(Some("[server]\ndead_server_cleanup = \"2s\"\n"));
    let mut servers: Vec<Option<HerderProcess>> =
        (0..3).map(|i| Some(cluster.start(i, true))).collect();
    let any = servers[0].as_ref().expect("s1 runs");
    wait_for_peer_count(any, 3);
    let leader = wait_for(SETTLE, || {
        let addr: String = serde_json::from_value(get_json(any, "/v1/status/leader")).ok()?;
        (0..3).find(|i| addr == format!("127.0.0.1:{}", cluster.rpc_ports[*i]))
    })
    .expect("a leader");
    let leader_server = servers[leader].take().expect("the leader runs");
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();

    kill_9(servers[followers[0]].take().expect("a follower runs"));
    let remaining = wait_for_peer_count(&leader_server, 2);
    let dead_addr = format!("127.0.0.1:{}", cluster.rpc_ports[followers[0]]);
    assert!(!remaining.contains(&dead_addr), "{remaining:?}");

    // Two voters left, a quorum of 3: the leader keeps the other one even
    // once it is dead too (it stays leader of its own term meanwhile).
    kill_9(
        servers[followers[1]]
            .take()
            .expect("the other follower runs"),
    );
    std::thread::sleep(Duration::from_secs(5));
    let (code, body) = send_raw("GET", &api(&leader_server, "/v1/status/peers?stale"), "");
    assert_eq!(code, 200, "{body}");
    let left: Vec<String> = serde_json::from_str(&body).expect("peers");
    assert_eq!(left.len(), 2, "{left:?}");
    let stats = get_json(&leader_server, "/v1/agent/self")["stats"]["raft"].clone();
    assert_eq!(
        stats["state"], "Leader",
        "the cleanup ran on a leader: {stats}"
    );
}
