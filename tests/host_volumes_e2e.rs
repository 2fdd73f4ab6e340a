//! Host volumes as a user meets them: a client offers `certs` (read-only)
//! in its configuration; the node reports it; a job that needs a volume
//! the node does not offer, or wants `certs` writable, is not placed
//! (the evaluation is blocked with the reason in its metrics), and one that
//! asks for `certs` read-only is placed and runs.

use herder_actors::config::HostVolumeConfig;
use herder_tests::{dev_config, get, send_json, temp_dir, wait_for, TestAgent};
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn get_json(url: &str) -> Value {
    let (code, body) = get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

fn job(id: &str, volume: &str, read_only: bool) -> Value {
    json!({"Job": {
        "ID": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Volumes": {"v": {"Type": "host", "Source": volume, "ReadOnly": read_only}},
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sleep", "args": ["300"]},
                "VolumeMounts": [{"Volume": "v", "Destination": "/srv/v", "ReadOnly": read_only}],
                "Resources": {"CPU": 20, "MemoryMB": 16}
            }]
        }]
    }})
}

/// The job's evaluation once it is done, and its allocations.
fn settle(agent: &TestAgent, id: &str) -> (Value, Vec<Value>) {
    let eval = wait_for(WAIT, || {
        let evals = get_json(&agent.url(&format!("/v1/job/{id}/evaluations")));
        evals
            .as_array()?
            .iter()
            .find(|e| e["TriggeredBy"] == "job-register" && e["Status"] == "complete")
            .cloned()
    })
    .expect("the registration is evaluated");
    let allocs = get_json(&agent.url(&format!("/v1/job/{id}/allocations")));
    (eval, allocs.as_array().cloned().unwrap_or_default())
}

#[test]
fn only_a_node_offering_the_volume_as_asked_gets_the_job() {
    let dir = temp_dir();
    let mut config = dev_config();
    config.client.host_volumes.insert(
        "certs".into(),
        HostVolumeConfig {
            path: dir.path().to_path_buf(),
            read_only: true,
        },
    );
    let agent = TestAgent::start(config, true);
    let nodes = wait_for(WAIT, || {
        let nodes = get_json(&agent.url("/v1/nodes"));
        (nodes.as_array()?.len() == 1).then_some(nodes)
    })
    .expect("the client registers");
    let node = get_json(&agent.url(&format!("/v1/node/{}", nodes[0]["ID"].as_str().unwrap())));
    assert_eq!(node["HostVolumes"]["certs"]["ReadOnly"], true, "{node}");

    for (id, volume, read_only) in [("missing", "nope", true), ("writable", "certs", false)] {
        let (code, body) = send_json(
            "PUT",
            &agent.url("/v1/jobs"),
            None,
            &job(id, volume, read_only),
        );
        assert_eq!(code, 200, "{body}");
        let (eval, allocs) = settle(&agent, id);
        assert!(
            allocs.is_empty(),
            "{id}: placed on a node without it: {allocs:?}"
        );
        let failed = &eval["FailedTGAllocs"]["g"];
        assert_eq!(failed["NodesEvaluated"], 1, "{id}: {eval}");
        assert_eq!(failed["NodesFiltered"], 1, "{id}: {eval}");
        assert!(
            eval["BlockedEval"].as_str().is_some_and(|b| !b.is_empty()),
            "{id}: waits in a blocked evaluation: {eval}"
        );
    }

    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/jobs"),
        None,
        &job("fine", "certs", true),
    );
    assert_eq!(code, 200, "{body}");
    let (_, allocs) = settle(&agent, "fine");
    assert_eq!(allocs.len(), 1, "placed where the volume is offered");
    agent.stop();
}
