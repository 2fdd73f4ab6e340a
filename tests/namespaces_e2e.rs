//! Namespaces end to end against a server over HTTP: created, listed
//! (a blocking query), read, refused for jobs when missing, holding jobs
//! that `namespace=*` lists beside `default`'s, not deletable while those
//! jobs live, and still there after the agent restarts on its data dir.

use herder_tests::{get, send_json, send_raw, server_config, temp_dir, TestAgent};
use serde_json::{json, Value};
use std::time::Duration;

fn get_json(url: &str) -> Value {
    let (code, body) = get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

fn job(namespace: &str, id: &str) -> Value {
    let job = herder::state::fixtures::job(namespace, id, &[("g", 1)]);
    json!({ "Job": job })
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|ns| ns["Name"].as_str().expect("a name").to_string())
        .collect()
}

/// The namespaces a list's items are in, each once.
fn namespaces_of(list: &Value) -> Vec<String> {
    let mut found: Vec<String> = list
        .as_array()
        .expect("a list")
        .iter()
        .map(|item| item["Namespace"].as_str().expect("a namespace").to_string())
        .collect();
    found.sort();
    found.dedup();
    found
}

/// `GET /v1/namespaces?index=N` waits for the next namespace write.
fn blocking_list_wakes_on_a_write(agent: &TestAgent) {
    let first = ureq::get(&agent.url("/v1/namespaces"))
        .call()
        .expect("namespace list");
    let index: u64 = first
        .header("X-Nomad-Index")
        .and_then(|v| v.parse().ok())
        .expect("an index header");
    let url = agent.url(&format!("/v1/namespaces?index={index}&wait=30s"));
    let waiter = std::thread::spawn(move || {
        let answer = ureq::get(&url).call().expect("blocking list");
        let index: u64 = answer
            .header("X-Nomad-Index")
            .and_then(|v| v.parse().ok())
            .expect("an index header");
        (index, answer.into_json::<Value>().expect("JSON"))
    });
    std::thread::sleep(Duration::from_millis(300));
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/namespace/batch"),
        None,
        &json!({"Name": "batch", "Description": "nightly work"}),
    );
    assert_eq!(code, 200, "{body}");
    let (woke_at, list) = waiter.join().expect("the waiter");
    assert!(woke_at > index, "woke at {woke_at}, asked past {index}");
    assert!(names(&list).contains(&"batch".to_string()), "{list}");
}

#[test]
fn namespaces_hold_jobs_and_survive_a_restart() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);

    // Only `default` at first, then the one created.
    assert_eq!(names(&get_json(&agent.url("/v1/namespaces"))), ["default"]);
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/namespace"),
        None,
        &json!({"Name": "api-prod", "Description": "Production API Servers", "Meta": {"team": "api"}}),
    );
    assert_eq!(code, 200, "{body}");
    let ns = get_json(&agent.url("/v1/namespace/api-prod"));
    assert_eq!(ns["Description"], "Production API Servers");
    assert_eq!(ns["Meta"]["team"], "api");
    assert!(ns["CreateIndex"].as_u64().unwrap() >= 1, "{ns}");
    assert_eq!(ns["CreateIndex"], ns["ModifyIndex"], "{ns}");
    assert_eq!(
        names(&get_json(&agent.url("/v1/namespaces?prefix=api"))),
        ["api-prod"]
    );
    assert_eq!(
        get(&agent.url("/v1/namespace/nope")),
        (404, "Namespace not found".into())
    );
    blocking_list_wakes_on_a_write(&agent);

    // A job into a namespace that does not exist is refused.
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &job("nope", "web"));
    assert_eq!(code, 400, "{body}");
    assert_eq!(body, r#"job "web" is in nonexistent namespace "nope""#);

    // Jobs in two namespaces: each list keeps to its own; `*` has both.
    for (ns, id) in [("api-prod", "api"), ("default", "web")] {
        let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &job(ns, id));
        assert_eq!(code, 200, "{body}");
    }
    for list in ["jobs", "evaluations"] {
        let own = get_json(&agent.url(&format!("/v1/{list}?namespace=api-prod")));
        assert_eq!(namespaces_of(&own), ["api-prod"], "{list}");
        let plain = get_json(&agent.url(&format!("/v1/{list}")));
        assert_eq!(namespaces_of(&plain), ["default"], "{list}");
        let every = get_json(&agent.url(&format!("/v1/{list}?namespace=*")));
        assert_eq!(namespaces_of(&every), ["api-prod", "default"], "{list}");
    }

    // Not deletable while its job lives; `default` never.
    let (code, body) = send_raw("DELETE", &agent.url("/v1/namespace/api-prod"), "");
    assert_eq!(code, 400);
    assert_eq!(
        body,
        r#"namespace "api-prod" has non-terminal jobs in regions: [global]"#
    );
    let (code, body) = send_raw("DELETE", &agent.url("/v1/namespace/default"), "");
    assert_eq!(
        (code, body.as_str()),
        (400, "can not delete default namespace")
    );

    // Deleting the empty one works.
    let (code, body) = send_raw("DELETE", &agent.url("/v1/namespace/batch"), "");
    assert_eq!(code, 200, "{body}");

    agent.stop();
    let agent = TestAgent::start(server_config(dir.path()), false);
    assert_eq!(
        names(&get_json(&agent.url("/v1/namespaces"))),
        ["api-prod", "default"],
        "after a restart"
    );
    let ns = get_json(&agent.url("/v1/namespace/api-prod"));
    assert_eq!(ns["Description"], "Production API Servers");
    let jobs = get_json(&agent.url("/v1/jobs?namespace=api-prod"));
    assert_eq!(namespaces_of(&jobs), ["api-prod"]);

    // Once its job is purged, the namespace can go.
    let (code, body) = send_raw(
        "DELETE",
        &agent.url("/v1/job/api?namespace=api-prod&purge=true"),
        "",
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = send_raw("DELETE", &agent.url("/v1/namespace/api-prod"), "");
    assert_eq!(code, 200, "{body}");
    assert_eq!(names(&get_json(&agent.url("/v1/namespaces"))), ["default"]);
}
