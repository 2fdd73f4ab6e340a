//! Autopilot's configuration and health (issue 25), as Nomad's API has
//! them: on a single server a configuration round trip with check-and-set
//! and the health of one server; on three servers a configuration set on
//! one is what every server answers, the health lists three healthy
//! servers, a killed follower shows as unhealthy with the failure
//! tolerance down to zero, and with `CleanupDeadServers` off it is not
//! removed although the agents' `dead_server_cleanup` would have.

use herder_tests::cluster::{http_get, http_send, Cluster, ClusterOptions};
use herder_tests::{server_config, wait_for, TestAgent};
use serde_json::{json, Value};
use std::time::Duration;

const CONFIG: &str = "/v1/operator/autopilot/configuration";
const HEALTH: &str = "/v1/operator/autopilot/health";
const ASK: Duration = Duration::from_secs(20);

fn get(url: &str) -> (u16, Value) {
    let answer = http_get(url, ASK).unwrap_or_else(|e| panic!("GET {url}: {e}"));
    (answer.status, answer.json())
}

fn put(url: &str, body: &Value) -> (u16, Value) {
    let answer =
        http_send("PUT", url, Some(body), ASK).unwrap_or_else(|e| panic!("PUT {url}: {e}"));
    (answer.status, answer.json())
}

fn herder(addr: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(herder_tests::herder_bin())
        .args(args)
        .env("HERDER_ADDR", addr)
        .output()
        .expect("run herder");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_single_server_keeps_autopilots_configuration_with_check_and_set() {
    let dir = herder_tests::temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let url = agent.url(CONFIG);
    let (code, config) = get(&url);
    assert_eq!(code, 200, "{config}");
    assert_eq!(config["CleanupDeadServers"], true, "{config}");
    assert_eq!(config["LastContactThreshold"], "200ms", "{config}");
    assert_eq!(config["MaxTrailingLogs"], 250, "{config}");
    assert_eq!(config["ServerStabilizationTime"], "10s", "{config}");
    assert_eq!(config["ModifyIndex"], 0, "{config}");

    let mut changed = config.clone();
    changed["CleanupDeadServers"] = json!(false);
    changed["LastContactThreshold"] = json!("1s");
    changed["MinQuorum"] = json!(3);
    assert_eq!(put(&format!("{url}?cas=0"), &changed), (200, json!(true)));
    // The same check again finds the index moved: refused, not an error.
    assert_eq!(put(&format!("{url}?cas=0"), &config), (200, json!(false)));
    let (_, stored) = get(&url);
    assert_eq!(stored["CleanupDeadServers"], false, "{stored}");
    assert_eq!(stored["LastContactThreshold"], "1s", "{stored}");
    assert_eq!(stored["MinQuorum"], 3, "{stored}");
    let modify = stored["ModifyIndex"].as_u64().expect("ModifyIndex");
    assert!(modify > 0, "{stored}");
    assert_eq!(stored["CreateIndex"], stored["ModifyIndex"], "{stored}");
    // Without ?cas= Nomad answers true.
    assert_eq!(put(&url, &stored), (200, json!(true)));
    let (code, bad) = put(&format!("{url}?cas=x"), &stored);
    assert_eq!(code, 400, "{bad}");

    // Nomad's verbs: get-config's lines; set-config changes what its flags
    // name and warns about a setting herder keeps but does not act on.
    let addr = format!("http://{}", agent.addr);
    let (code, out, err) = herder(&addr, &["operator", "autopilot", "get-config"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("CleanupDeadServers = false\nLastContactThreshold = 1s\n"),
        "{out}"
    );
    let (code, out, err) = herder(
        &addr,
        &[
            "operator",
            "autopilot",
            "set-config",
            "-cleanup-dead-servers=true",
            "-server-stabilization-time=30s",
            "-enable-redundancy-zones=true",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, "Configuration updated!\n");
    assert!(err.contains("EnableRedundancyZones"), "{err}");
    let (_, stored) = get(&url);
    assert_eq!(stored["CleanupDeadServers"], true, "{stored}");
    assert_eq!(stored["ServerStabilizationTime"], "30s", "{stored}");
    assert_eq!(stored["LastContactThreshold"], "1s", "kept: {stored}");
    assert_eq!(
        stored["EnableRedundancyZones"], true,
        "kept as written: {stored}"
    );

    // One server: healthy, the leader and only voter, no failure tolerance.
    let (code, health) = get(&agent.url(HEALTH));
    assert_eq!(code, 200, "{health}");
    assert_eq!(health["Healthy"], true, "{health}");
    assert_eq!(health["FailureTolerance"], 0, "{health}");
    let servers = health["Servers"].as_array().expect("Servers");
    assert_eq!(servers.len(), 1, "{health}");
    assert_eq!(servers[0]["Leader"], true, "{health}");
    assert_eq!(servers[0]["Voter"], true, "{health}");
    assert_eq!(servers[0]["SerfStatus"], "alive", "{health}");
    assert_eq!(health["Leader"], servers[0]["ID"], "{health}");
}

/// The servers as server `i`'s health lists them: (address, healthy).
fn health_seen_by(cluster: &Cluster, i: usize) -> Option<(u16, Value)> {
    let answer = http_get(&cluster.url(i, HEALTH), Duration::from_secs(5)).ok()?;
    Some((answer.status, answer.json()))
}

fn healthy_count(health: &Value) -> usize {
    health["Servers"]
        .as_array()
        .map_or(0, |s| s.iter().filter(|s| s["Healthy"] == true).count())
}

#[test]
fn three_servers_share_the_configuration_and_see_a_dead_follower_kept() {
    let mut cluster = Cluster::start(ClusterOptions {
        server_toml: "[server]\ndead_server_cleanup = \"2s\"\n".into(),
        ..Default::default()
    });
    cluster.wait_until_answering(Duration::from_secs(60));
    let leader = cluster.wait_for_leader(Duration::from_secs(60));
    let follower = (0..3).find(|i| *i != leader).expect("a follower");

    // Set on a follower, with check-and-set (nothing stored yet: 0).
    let (_, current) = get(&cluster.url(follower, CONFIG));
    assert_eq!(
        current["CleanupDeadServers"], true,
        "the agents' cleanup: {current}"
    );
    let mut off = current.clone();
    off["CleanupDeadServers"] = json!(false);
    off["LastContactThreshold"] = json!("1s");
    assert_eq!(
        put(&format!("{}?cas=0", cluster.url(follower, CONFIG)), &off),
        (200, json!(true))
    );
    assert_eq!(
        put(&format!("{}?cas=0", cluster.url(leader, CONFIG)), &off),
        (200, json!(false))
    );
    let answers: Vec<Value> = (0..3).map(|i| get(&cluster.url(i, CONFIG)).1).collect();
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(answer["CleanupDeadServers"], false, "server {i}: {answer}");
        assert_eq!(answer["LastContactThreshold"], "1s", "server {i}: {answer}");
        assert_eq!(
            answer, &answers[0],
            "server {i} answers another configuration"
        );
    }

    // Every server sees three healthy servers.
    for i in 0..3 {
        let seen = wait_for(Duration::from_secs(30), || {
            let (code, health) = health_seen_by(&cluster, i)?;
            (code == 200 && healthy_count(&health) == 3).then_some(health)
        })
        .unwrap_or_else(|| panic!("server {i}: {:?}", health_seen_by(&cluster, i)));
        assert_eq!(seen["Healthy"], true, "{seen}");
        assert_eq!(seen["FailureTolerance"], 1, "{seen}");
        assert_eq!(seen["Voters"].as_array().map(Vec::len), Some(3), "{seen}");
        assert_eq!(seen["Leader"], cluster.servers[leader].rpc_addr(), "{seen}");
    }

    // kill -9 a follower: unhealthy, no failure tolerance left, 429.
    let dead = (0..3)
        .find(|i| *i != leader && *i != follower)
        .expect("another follower");
    let dead_addr = cluster.servers[dead].rpc_addr();
    cluster.kill(dead);
    let seen = wait_for(Duration::from_secs(30), || {
        let (code, health) = health_seen_by(&cluster, leader)?;
        (code == 429 && healthy_count(&health) == 2).then_some(health)
    })
    .unwrap_or_else(|| panic!("after the kill: {:?}", health_seen_by(&cluster, leader)));
    assert_eq!(seen["Healthy"], false, "{seen}");
    assert_eq!(seen["FailureTolerance"], 0, "{seen}");
    let dead_entry = seen["Servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["Address"] == dead_addr.as_str()))
        .unwrap_or_else(|| panic!("the dead server is listed: {seen}"))
        .clone();
    assert_eq!(dead_entry["Healthy"], false, "{dead_entry}");
    assert_eq!(dead_entry["SerfStatus"], "failed", "{dead_entry}");

    // The agents would remove it after 2 s; the replicated setting says no.
    std::thread::sleep(Duration::from_secs(8));
    let (code, peers) = get(&cluster.url(leader, "/v1/status/peers"));
    assert_eq!(code, 200, "{peers}");
    let peers: Vec<String> = serde_json::from_value(peers).expect("peers");
    assert!(
        peers.contains(&dead_addr),
        "removed although CleanupDeadServers is off: {peers:?}"
    );
    assert_eq!(peers.len(), 3, "{peers:?}");
}
