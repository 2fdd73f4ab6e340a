//! Native service discovery end to end, with a real HTTP server: a
//! raw_exec task runs `python3 -m http.server` on its allocated port, its
//! group's service has an http check; the service appears in the catalog
//! at the allocated port, its check passes, the allocation is reported
//! healthy, and stopping the job takes the service out of the catalog.
//!
//! And the catalog's node protocol against a server alone: registrations
//! are signed with the node's secret and limited to the node's own
//! allocations, a user may delete one, and an allocation that ends loses
//! its services.

use herder_tests::{
    dev_config, get, register_ready_node, send_json, server_config, temp_dir, wait_for, TestAgent,
};
use serde_json::{json, Value};
use std::time::Duration;

/// Generous: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(60);

fn get_json(url: &str) -> Value {
    let (code, body) = get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

fn web_job() -> Value {
    json!({
        "ID": "web", "Name": "web", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "frontend", "Count": 1,
            "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
            "Migrate": {"HealthCheck": "checks", "MinHealthyTime": 1_000_000_000u64,
                        "HealthyDeadline": 60_000_000_000u64, "MaxParallel": 1},
            "Services": [{
                "Name": "web", "PortLabel": "http", "Tags": ["v1", "python"], "Provider": "nomad",
                "Checks": [{"Name": "index", "Type": "http", "Path": "/",
                            "Interval": 1_000_000_000u64, "Timeout": 1_000_000_000u64}]
            }],
            "Tasks": [{
                "Name": "server", "Driver": "raw_exec",
                "Config": {"command": "/usr/bin/python3",
                           "args": ["-m", "http.server", "${NOMAD_PORT_http}"]},
                "Resources": {"CPU": 50, "MemoryMB": 64}
            }]
        }]
    })
}

/// The port the allocation holds under `label`.
fn allocated_port(alloc: &Value, label: &str) -> i64 {
    let shared = &alloc["AllocatedResources"]["Shared"];
    let from_networks = shared["Networks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|n| n["DynamicPorts"].as_array().cloned().unwrap_or_default());
    let from_ports = shared["Ports"].as_array().cloned().unwrap_or_default();
    from_networks
        .chain(from_ports)
        .find(|p| p["Label"] == label)
        .and_then(|p| p["Value"].as_i64())
        .unwrap_or_else(|| panic!("no port {label:?} in {shared}"))
}

#[test]
fn a_service_is_registered_checked_and_removed_with_its_job() {
    let agent = TestAgent::start(dev_config(), true);
    let base = format!("http://{}", agent.addr);
    let (code, body) = send_json(
        "PUT",
        &format!("{base}/v1/jobs"),
        None,
        &json!({"Job": web_job()}),
    );
    assert_eq!(code, 200, "register: {body}");
    let warnings = serde_json::from_str::<Value>(&body).unwrap()["Warnings"].clone();
    assert!(
        !warnings.as_str().unwrap_or_default().contains("service"),
        "a service is honoured now, not warned about: {warnings}"
    );

    let alloc = wait_for(WAIT, || {
        let allocs = get_json(&format!("{base}/v1/job/web/allocations"));
        allocs
            .as_array()?
            .iter()
            .find(|a| a["ClientStatus"] == "running")
            .cloned()
    })
    .expect("the allocation runs");
    let alloc_id = alloc["ID"].as_str().unwrap().to_string();
    let full = get_json(&format!("{base}/v1/allocation/{alloc_id}"));
    let port = allocated_port(&full, "http");

    // The catalog holds the instance at the allocated port.
    let instances = wait_for(WAIT, || {
        let v = get_json(&format!("{base}/v1/service/web"));
        (v.as_array()?.len() == 1).then_some(v)
    })
    .expect("the service is registered");
    let instance = &instances[0];
    assert_eq!(instance["Port"].as_i64(), Some(port), "{instance}");
    assert_eq!(instance["AllocID"], alloc_id.as_str());
    assert_eq!(instance["JobID"], "web");
    assert_eq!(instance["Tags"], json!(["v1", "python"]));
    let list = get_json(&format!("{base}/v1/services"));
    assert_eq!(
        list,
        json!([{"Namespace": "default", "Services": [{"ServiceName": "web", "Tags": ["python", "v1"]}]}])
    );

    // The check reaches the python server and passes.
    let checks_url = format!("{base}/v1/client/allocation/{alloc_id}/checks");
    let check = wait_for(WAIT, || {
        let v = get_json(&checks_url);
        let (_, check) = v.as_object()?.iter().next()?;
        (check["Status"] == "success").then(|| check.clone())
    })
    .unwrap_or_else(|| panic!("the check never passed: {}", get_json(&checks_url)));
    assert_eq!(check["StatusCode"], 200);
    assert_eq!(check["Check"], "index");
    assert_eq!(check["Service"], "web");
    assert_eq!(check["Mode"], "healthiness");

    // Healthy once the check has passed for min_healthy_time.
    let status = wait_for(WAIT, || {
        let a = get_json(&format!("{base}/v1/allocation/{alloc_id}"));
        let s = a["DeploymentStatus"].clone();
        (!s["Healthy"].is_null()).then_some(s)
    })
    .expect("the allocation's health is reported");
    assert_eq!(status["Healthy"], true, "{status}");

    // Stopping the job takes the service out of the catalog.
    let r = ureq::delete(&format!("{base}/v1/job/web"))
        .timeout(Duration::from_secs(30))
        .call();
    assert!(r.is_ok(), "stopping web: {r:?}");
    wait_for(WAIT, || {
        let v = get_json(&format!("{base}/v1/service/web"));
        v.as_array()?.is_empty().then_some(())
    })
    .expect("the service is gone once the job stopped");
    assert_eq!(get_json(&format!("{base}/v1/services")), json!([]));
    agent.stop();
}

/// A one-allocation job for the `exec` driver the fixture nodes offer.
fn exec_job() -> Value {
    json!({
        "ID": "api", "Name": "api", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1,
            "Tasks": [{"Name": "t", "Driver": "exec", "Resources": {"CPU": 50, "MemoryMB": 32}}]}]
    })
}

fn registration(alloc_id: &str, name: &str) -> Value {
    json!({"ID": format!("_nomad-task-{alloc_id}-g-{name}-"), "ServiceName": name,
           "Namespace": "default", "JobID": "api", "AllocID": alloc_id,
           "Address": "10.0.0.1", "Port": 8080, "Tags": ["a"]})
}

#[test]
fn registrations_are_signed_limited_to_the_node_and_go_with_their_allocation() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let base = format!("http://{}", agent.addr);
    let node = register_ready_node(&agent, "n1");
    let other = register_ready_node(&agent, "n2");
    let (code, body) = send_json(
        "PUT",
        &format!("{base}/v1/jobs"),
        None,
        &json!({"Job": exec_job()}),
    );
    assert_eq!(code, 200, "register: {body}");
    let alloc = wait_for(WAIT, || {
        let allocs = get_json(&format!("{base}/v1/job/api/allocations"));
        allocs.as_array()?.first().cloned()
    })
    .expect("the job is placed");
    let alloc_id = alloc["ID"].as_str().unwrap().to_string();
    let on = alloc["NodeID"].as_str().unwrap();
    let (owner, stranger) = if on == node.id.to_string() {
        (&node, &other)
    } else {
        (&other, &node)
    };
    let put = |n: &herder::structs::Node, secret: &str, path: &str, body: Value| {
        send_json(
            "PUT",
            &format!("{base}/v1/node/{}/{path}", n.id),
            Some(secret),
            &body,
        )
    };
    let services = json!({"Services": [registration(&alloc_id, "api")]});

    let (code, _) = put(owner, "wrong-secret", "services", services.clone());
    assert_eq!(code, 403, "a registration needs the node's secret");
    let (code, body) = put(stranger, &stranger.secret_id, "services", services.clone());
    assert_eq!(code, 400, "another node's allocation: {body}");
    let (code, body) = put(owner, &owner.secret_id, "services", services.clone());
    assert_eq!(code, 200, "{body}");
    let instances = get_json(&format!("{base}/v1/service/api"));
    assert_eq!(instances.as_array().map(Vec::len), Some(1), "{instances}");
    assert_eq!(instances[0]["NodeID"], owner.id.to_string());
    assert_eq!(instances[0]["Port"], 8080);

    // A user deletes one by ID; an unknown ID is a 404.
    let id = instances[0]["ID"].as_str().unwrap().to_string();
    let delete = |id: &str| {
        let url = format!("{base}/v1/service/api/{}", herder_tests::url_encode(id));
        match ureq::delete(&url).call() {
            Ok(r) => r.status(),
            Err(ureq::Error::Status(code, _)) => code,
            Err(e) => panic!("DELETE {url}: {e}"),
        }
    };
    assert_eq!(delete("no-such-id"), 404);
    assert_eq!(delete(&id), 200);
    assert_eq!(get_json(&format!("{base}/v1/service/api")), json!([]));

    // Registered again, then the allocation ends: the servers remove it.
    let (code, body) = put(owner, &owner.secret_id, "services", services);
    assert_eq!(code, 200, "{body}");
    let update = json!({"Allocs": [{"ID": alloc_id, "ClientStatus": "failed"}]});
    let (code, body) = put(owner, &owner.secret_id, "allocations", update);
    assert_eq!(code, 200, "{body}");
    wait_for(WAIT, || {
        let v = get_json(&format!("{base}/v1/service/api"));
        v.as_array()?.is_empty().then_some(())
    })
    .expect("an allocation that failed loses its services");
    agent.stop();
}
