//! The client side of the HTTP API, as a client agent uses it: register,
//! heartbeat with the node's secret, report allocation status.

use herder::state::fixtures;
use herder::structs::NodeStatus;
use herder_tests::{send_json, server_config, temp_dir, TestAgent};
use serde_json::{json, Value};

#[test]
fn a_node_registers_heartbeats_and_is_refused_without_its_secret() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let mut node = fixtures::node("worker-1");
    node.status = NodeStatus::Ready;
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/node/register"),
        None,
        &json!({"Node": node}),
    );
    assert_eq!(code, 200, "{body}");
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert!(
        reply["HeartbeatTTL"].as_u64().unwrap() >= 10_000_000_000,
        "{reply}"
    );
    assert!(reply["Index"].as_u64().unwrap() > 0);
    // A single server lists itself as the node's only server, at its
    // HTTP port (bound to every interface, it advertises the address
    // this machine routes from).
    let listed = reply["Servers"][0]["HTTPAddr"].as_str().unwrap_or_default();
    let port = format!(":{}", agent.addr.port());
    assert!(listed.ends_with(&port), "{reply}");
    assert_eq!(reply["Servers"].as_array().map(Vec::len), Some(1));
    let store = &agent.server.as_ref().unwrap().store;
    assert_eq!(
        store.snapshot().node(&node.id).unwrap().status,
        NodeStatus::Ready
    );

    let hb = agent.url(&format!("/v1/node/{}/heartbeat", node.id));
    let (code, body) = send_json(
        "PUT",
        &hb,
        Some(&node.secret_id),
        &json!({"Status": "ready"}),
    );
    assert_eq!(code, 200, "{body}");
    let beat: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(beat["Servers"], reply["Servers"], "{beat}");
    let (code, body) = send_json("PUT", &hb, Some("wrong"), &json!({"Status": "ready"}));
    assert_eq!(code, 403, "{body}");
    let other = agent.url(&format!("/v1/node/{}/heartbeat", herder::structs::new_id()));
    let (code, body) = send_json("PUT", &other, Some("x"), &json!({"Status": "ready"}));
    assert_eq!((code, body.as_str()), (404, "node not found"));
    let (code, _) = send_json(
        "PUT",
        &agent.url("/v1/node/not-a-uuid/heartbeat"),
        Some("x"),
        &json!({}),
    );
    assert_eq!(code, 400);
}

#[test]
fn bad_registrations_and_alloc_reports_are_4xx_and_change_nothing() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let store = &agent.server.as_ref().unwrap().store;
    let before = store.latest_index();
    let (code, body) = send_json("PUT", &agent.url("/v1/node/register"), None, &json!({}));
    assert_eq!(code, 400, "{body}");
    let mut node = fixtures::node("n");
    node.secret_id.clear();
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/node/register"),
        None,
        &json!({"Node": node}),
    );
    assert_eq!(code, 400);
    assert!(body.contains("secret ID"), "{body}");
    assert_eq!(store.latest_index(), before, "nothing written");

    let mut node = fixtures::node("n");
    node.status = NodeStatus::Ready;
    send_json(
        "PUT",
        &agent.url("/v1/node/register"),
        None,
        &json!({"Node": node}),
    );
    let url = agent.url(&format!("/v1/node/{}/allocations", node.id));
    let unknown = json!({"Allocs": [{"ID": herder::structs::new_id(), "ClientStatus": "running"}]});
    let (code, body) = send_json("PUT", &url, Some(&node.secret_id), &unknown);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("not found"), "{body}");
}
