//! An operator's snapshot restored into a cluster of three servers (issue
//! 25): the restore, sent to a follower's HTTP API, goes through the Raft
//! log, and every server then answers exactly the jobs, allocations and
//! evaluations that were saved, although jobs were added and removed in
//! between; a server killed (-9) and started again after the restore
//! answers the same.

use herder_tests::cluster::{http_get, http_send, Cluster, ClusterOptions};
use herder_tests::wait_for;
use serde_json::{json, Value};
use std::time::Duration;

const ASK: Duration = Duration::from_secs(30);

fn get_json(url: &str) -> Value {
    let answer = http_get(url, ASK).unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert_eq!(answer.status, 200, "GET {url}: {}", answer.body);
    answer.json()
}

fn send(method: &str, url: &str, body: Option<&Value>) -> Value {
    let answer =
        http_send(method, url, body, ASK).unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    assert_eq!(answer.status, 200, "{method} {url}: {}", answer.body);
    answer.json()
}

fn job(id: &str, count: u32) -> Value {
    json!({"Job": {
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [{
            "Name": "t", "Driver": "exec", "Config": {"command": "/bin/true"},
            "Resources": {"CPU": 100, "MemoryMB": 64}
        }]}]
    }})
}

fn node(name: &str) -> Value {
    let mut node = herder::state::fixtures::node(name);
    node.status = herder::structs::NodeStatus::Ready;
    json!({ "Node": node })
}

/// The lists a restore must bring back, as server `i` answers them.
fn lists(cluster: &Cluster, i: usize) -> Value {
    json!({
        "jobs": get_json(&cluster.url(i, "/v1/jobs")),
        "allocations": get_json(&cluster.url(i, "/v1/allocations")),
        "evaluations": get_json(&cluster.url(i, "/v1/evaluations")),
    })
}

fn count(list: &Value) -> usize {
    list.as_array().map_or(0, Vec::len)
}

/// Waits until every evaluation is complete and at least `allocs`
/// allocations exist, as server `i` answers.
fn settle(cluster: &Cluster, i: usize, allocs: usize) {
    let settled = wait_for(Duration::from_secs(60), || {
        let now = lists(cluster, i);
        let evals_done = now["evaluations"]
            .as_array()?
            .iter()
            .all(|e| e["Status"] == "complete");
        (evals_done && count(&now["allocations"]) >= allocs).then_some(())
    });
    assert!(settled.is_some(), "did not settle: {}", lists(cluster, i));
}

fn save(cluster: &Cluster, i: usize) -> Vec<u8> {
    let answer = ureq::get(&cluster.url(i, "/v1/operator/snapshot"))
        .timeout(Duration::from_secs(60))
        .call()
        .expect("GET /v1/operator/snapshot");
    let mut file = Vec::new();
    std::io::Read::read_to_end(&mut answer.into_reader(), &mut file).expect("the file");
    file
}

fn restore(cluster: &Cluster, i: usize, file: &[u8]) -> (u16, String) {
    let request =
        ureq::put(&cluster.url(i, "/v1/operator/snapshot")).timeout(Duration::from_secs(60));
    match request.send_bytes(file) {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("PUT /v1/operator/snapshot: {e}"),
    }
}

#[test]
fn a_restore_through_a_follower_leaves_every_server_with_the_saved_state() {
    // Nodes registered over HTTP never heartbeat: a long TTL keeps them
    // (and their allocations) as they are for the whole test.
    let mut cluster = Cluster::start(ClusterOptions {
        server_toml: "[server]\nmin_heartbeat_ttl = \"10m\"\n".into(),
        ..Default::default()
    });
    cluster.wait_until_answering(Duration::from_secs(60));
    let leader = cluster.wait_for_leader(Duration::from_secs(60));
    let follower = (leader + 1) % 3;
    for name in ["node-a", "node-b"] {
        // Refused (503) until the new leader's duties run.
        let url = cluster.url(follower, "/v1/node/register");
        let registered = wait_for(Duration::from_secs(30), || {
            let answer = http_send("PUT", &url, Some(&node(name)), ASK).ok()?;
            (answer.status == 200).then_some(())
        });
        assert!(registered.is_some(), "registering {name}");
    }
    for (id, n) in [("web", 3), ("api", 2), ("cache", 1)] {
        send("PUT", &cluster.url(follower, "/v1/jobs"), Some(&job(id, n)));
    }
    settle(&cluster, leader, 6);
    let file = save(&cluster, leader);
    let saved = lists(&cluster, leader);

    // The state moves on: a job more, one purged.
    send(
        "PUT",
        &cluster.url(leader, "/v1/jobs"),
        Some(&job("extra", 2)),
    );
    send(
        "DELETE",
        &cluster.url(follower, "/v1/job/api?purge=true"),
        None,
    );
    settle(&cluster, leader, 6);
    assert_ne!(lists(&cluster, leader), saved, "the state did not change");

    let (code, body) = restore(&cluster, follower, &file);
    assert_eq!(code, 200, "restore through a follower: {body}");
    for i in 0..3 {
        assert_eq!(lists(&cluster, i), saved, "server {i} after the restore");
    }

    // A server killed and started again after the restore (its log and
    // store replayed) answers the same.
    let victim = (leader + 2) % 3;
    cluster.kill(victim);
    cluster.restart(victim);
    cluster.wait_until_answering(Duration::from_secs(60));
    cluster.wait_for_leader(Duration::from_secs(60));
    let replayed = wait_for(Duration::from_secs(30), || {
        let stale = json!({
            "jobs": get_json(&cluster.url(victim, "/v1/jobs?stale")),
            "allocations": get_json(&cluster.url(victim, "/v1/allocations?stale")),
            "evaluations": get_json(&cluster.url(victim, "/v1/evaluations?stale")),
        });
        (stale == saved).then_some(())
    });
    assert!(
        replayed.is_some(),
        "the restarted server's own replica: {}",
        lists(&cluster, victim)
    );
    for i in 0..3 {
        assert_eq!(lists(&cluster, i), saved, "server {i} after the restart");
    }
}
