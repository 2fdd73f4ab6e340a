//! The job endpoints Nomad's clients call beyond register and read:
//! dispatch of parameterized jobs, versions with diffs, revert, stable,
//! `?purge=` validation, scaling (events, policies), each checked against
//! the shape of a real Nomad 1.1.2 answer (the fixtures, or the example
//! in Nomad's API documentation where no fixture exists) and its errors.
//!
//! No scheduling workers run: these tests look at what the writes store.

use herder_tests::{server_config, temp_dir, TestAgent};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

struct Answer {
    status: u16,
    index: Option<u64>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn call(method: &str, url: &str, body: Option<Value>) -> Answer {
    let req = ureq::request(method, url).timeout(Duration::from_secs(60));
    let result = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = response.status();
    let index = response
        .header("X-Nomad-Index")
        .and_then(|v| v.parse().ok());
    Answer {
        status,
        index,
        body: response.into_string().unwrap_or_default(),
    }
}

/// Asserts an error answer: its status and Nomad's words.
fn assert_error(a: &Answer, status: u16, text: &str) {
    assert_eq!(a.status, status, "{}", a.body);
    assert!(a.body.contains(text), "{:?} does not say {text:?}", a.body);
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/fixtures/nomad-1.1.2/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("fixture JSON")
}

fn start_in(dir: &std::path::Path) -> TestAgent {
    let mut config = server_config(dir);
    config.server.num_schedulers = Some(0);
    TestAgent::start(config, false)
}

fn task() -> Value {
    json!({"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1s"},
           "Resources": {"CPU": 100, "MemoryMB": 64}})
}

fn register(agent: &TestAgent, job: Value) -> Value {
    let a = call("PUT", &agent.url("/v1/jobs"), Some(json!({ "Job": job })));
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()
}

fn parameterized(id: &str, payload: &str) -> Value {
    json!({
        "ID": id, "Type": "batch",
        "Meta": {"owner": "ops"},
        "ParameterizedJob": {"Payload": payload, "MetaRequired": ["time"], "MetaOptional": ["extra"]},
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [task()]}],
    })
}

fn service(id: &str, count: i64, scaling: Option<Value>) -> Value {
    let mut group = json!({"Name": "g", "Count": count, "Tasks": [task()]});
    if let Some(s) = scaling {
        group["Scaling"] = s;
    }
    json!({"ID": id, "Type": "service", "TaskGroups": [group]})
}

/// Nomad's documented `POST /v1/job/:job_id/dispatch` answer.
fn documented_dispatch_answer() -> Value {
    json!({
        "Index": 13, "JobCreateIndex": 12, "EvalCreateIndex": 13,
        "EvalID": "e5f55fac-bc69-119d-528a-1fc7ade5e02c",
        "DispatchedJobID": "example/dispatch-1485408778-81644024"
    })
}

#[test]
fn dispatch_derives_a_child_with_payload_and_meta_and_honours_the_token() {
    let dir = temp_dir();
    let agent = start_in(dir.path());
    register(&agent, parameterized("batch", "optional"));
    let url = agent.url("/v1/job/batch/dispatch");

    let a = call(
        "PUT",
        &url,
        Some(json!({"Payload": "aGVsbG8=", "Meta": {"time": "5"}, "IdempotencyToken": null})),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let answer = a.json();
    assert_eq!(keys(&answer), keys(&documented_dispatch_answer()));
    assert_eq!(a.index, answer["Index"].as_u64());
    let child_id = answer["DispatchedJobID"].as_str().unwrap().to_string();
    let suffix = child_id.strip_prefix("batch/dispatch-").expect(&child_id);
    let (secs, unique) = suffix.split_once('-').expect(&child_id);
    assert!(
        secs.parse::<i64>().is_ok() && unique.len() == 8,
        "{child_id}"
    );
    assert!(unique.chars().all(|c| c.is_ascii_hexdigit()), "{child_id}");
    assert_eq!(answer["JobCreateIndex"], answer["EvalCreateIndex"]);

    let child = call(
        "GET",
        &agent.url(&format!("/v1/job/{}", child_id.replace('/', "%2F"))),
        None,
    )
    .json();
    assert_eq!(child["ParentID"], "batch");
    assert_eq!(child["Dispatched"], true);
    assert_eq!(child["Payload"], "aGVsbG8=");
    assert_eq!(child["Meta"], json!({"owner": "ops", "time": "5"}));
    assert_eq!(
        child["Status"], "pending",
        "a dispatched child is scheduled"
    );
    let eval = call(
        "GET",
        &agent.url(&format!(
            "/v1/evaluation/{}",
            answer["EvalID"].as_str().unwrap()
        )),
        None,
    )
    .json();
    assert_eq!(
        (eval["JobID"].as_str(), eval["TriggeredBy"].as_str()),
        (Some(&*child_id), Some("job-register"))
    );
    // The parent counts its children; its stub says it is parameterized,
    // the child's does not.
    let summary = call("GET", &agent.url("/v1/job/batch/summary"), None).json();
    assert_eq!(summary["Children"]["Pending"], 1, "{summary}");
    let list = call("GET", &agent.url("/v1/jobs?prefix=batch"), None).json();
    let stub = |id: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|j| j["ID"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(stub("batch")["ParameterizedJob"], true);
    assert_eq!(stub(&child_id)["ParameterizedJob"], false);

    // A token: the first dispatch makes the child, a retry (in the body or
    // in the query, as Nomad's write options send it) answers it again.
    let first = call(
        "PUT",
        &url,
        Some(json!({"Meta": {"time": "1"}, "IdempotencyToken": "tok"})),
    )
    .json();
    assert!(!first["EvalID"].as_str().unwrap().is_empty());
    for retry in [
        call(
            "PUT",
            &url,
            Some(json!({"Meta": {"time": "1"}, "IdempotencyToken": "tok"})),
        ),
        call(
            "PUT",
            &format!("{url}?idempotency_token=tok"),
            Some(json!({"Meta": {"time": "1"}})),
        ),
    ] {
        let retry = retry.json();
        assert_eq!(retry["DispatchedJobID"], first["DispatchedJobID"]);
        assert_eq!(retry["JobCreateIndex"], first["JobCreateIndex"]);
        assert_eq!(
            (retry["EvalID"].as_str(), retry["EvalCreateIndex"].as_u64()),
            (Some(""), Some(0))
        );
    }
    let summary = call("GET", &agent.url("/v1/job/batch/summary"), None).json();
    assert_eq!(summary["Children"]["Pending"], 2, "{summary}");
    // An ID prefix template (newer Nomad) goes after `dispatch-`.
    let named = call(
        "PUT",
        &url,
        Some(json!({"Meta": {"time": "1"}, "IdPrefixTemplate": "run1"})),
    )
    .json();
    assert!(
        named["DispatchedJobID"]
            .as_str()
            .unwrap()
            .starts_with("batch/dispatch-run1-"),
        "{named}"
    );
}

#[test]
fn dispatch_refusals_use_nomads_words_and_change_nothing() {
    let dir = temp_dir();
    let agent = start_in(dir.path());
    register(&agent, parameterized("needs", "required"));
    register(&agent, parameterized("never", "forbidden"));
    register(&agent, service("web", 1, None));
    let dispatch = |id: &str, body: Value| {
        call(
            "PUT",
            &agent.url(&format!("/v1/job/{id}/dispatch")),
            Some(body),
        )
    };
    let before = call("GET", &agent.url("/v1/jobs"), None).json();

    assert_error(
        &dispatch("web", json!({})),
        400,
        "Specified job \"web\" is not a parameterized job",
    );
    assert_error(
        &dispatch("nope", json!({})),
        404,
        "parameterized job not found",
    );
    assert_error(
        &dispatch("needs", json!({"Meta": {"time": "1"}})),
        400,
        "Payload is not provided but required by parameterized job",
    );
    assert_error(
        &dispatch("never", json!({"Meta": {"time": "1"}, "Payload": "aGk="})),
        400,
        "Payload provided but forbidden by parameterized job",
    );
    assert_error(
        &dispatch("needs", json!({"Payload": "aGk="})),
        400,
        "Dispatch did not provide required meta keys: [time]",
    );
    assert_error(
        &dispatch(
            "needs",
            json!({"Payload": "aGk=", "Meta": {"time": "1", "zz": "2"}}),
        ),
        400,
        "Dispatch request included unpermitted metadata keys: [zz]",
    );
    let big = base64_of(&vec![b'x'; 16 * 1024 + 1]);
    assert_error(
        &dispatch("needs", json!({"Payload": big, "Meta": {"time": "1"}})),
        400,
        "Payload exceeds maximum size; 16385 > 16384",
    );
    assert_error(
        &dispatch(
            "needs",
            json!({"Payload": "not base64!", "Meta": {"time": "1"}}),
        ),
        400,
        "base64",
    );
    assert_error(
        &dispatch(
            "needs",
            json!({"JobID": "other", "Payload": "aGk=", "Meta": {"time": "1"}}),
        ),
        400,
        "Job ID does not match",
    );
    let at_limit = base64_of(&vec![b'x'; 16 * 1024]);
    assert_eq!(
        dispatch("needs", json!({"Payload": at_limit, "Meta": {"time": "1"}})).status,
        200
    );
    let after_ok = call("GET", &agent.url("/v1/jobs"), None).json();
    assert_eq!(
        after_ok.as_array().unwrap().len(),
        before.as_array().unwrap().len() + 1,
        "only the valid dispatch made a job"
    );

    // A stopped parent dispatches nothing.
    assert_eq!(
        call("DELETE", &agent.url("/v1/job/needs"), None).status,
        200
    );
    assert_error(
        &dispatch("needs", json!({"Payload": "aGk=", "Meta": {"time": "1"}})),
        400,
        "Specified job \"needs\" is stopped",
    );
    // Nomad checks the parameterized block when the job is registered.
    let mut bad = parameterized("bad", "sometimes");
    bad["ParameterizedJob"]["MetaOptional"] = json!(["time"]);
    let a = call("PUT", &agent.url("/v1/jobs"), Some(json!({ "Job": bad })));
    assert_error(&a, 400, "Unknown payload requirement: \"sometimes\"");
    assert!(
        a.body
            .contains("Required and optional meta keys should be disjoint"),
        "{}",
        a.body
    );
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn versions_revert_and_stable_answer_as_nomad_does() {
    let dir = temp_dir();
    let agent = start_in(dir.path());
    register(&agent, service("web", 1, None));
    register(&agent, service("web", 3, None));

    let a = call("GET", &agent.url("/v1/job/web/versions?diffs=true"), None);
    assert_eq!(a.status, 200, "{}", a.body);
    let versions = a.json();
    assert_eq!(keys(&versions), keys(&fixture("job-versions.json")));
    assert_eq!(versions["Versions"].as_array().unwrap().len(), 2);
    let diffs = versions["Diffs"].as_array().expect("Diffs with diffs=true");
    assert_eq!(diffs.len(), 1);
    let diff = &diffs[0];
    assert_eq!(
        keys(diff),
        ["Fields", "ID", "Objects", "TaskGroups", "Type"]
            .map(String::from)
            .into()
    );
    assert_eq!(diff["Type"], "Edited");
    let group = &diff["TaskGroups"][0];
    assert_eq!(
        group["Fields"][0],
        json!({"Type": "Edited", "Name": "Count", "Old": "1", "New": "3", "Annotations": null})
    );
    // Contextual, as Nomad's versions diff: the unchanged task is listed.
    assert_eq!(group["Tasks"][0]["Type"], "None");
    let plain = call("GET", &agent.url("/v1/job/web/versions"), None).json();
    assert_eq!(plain["Diffs"], Value::Null);
    assert_error(
        &call("GET", &agent.url("/v1/job/web/versions?diffs=maybe"), None),
        400,
        "Failed to parse value of \"diffs\" (maybe) as a bool",
    );
    assert_error(
        &call("GET", &agent.url("/v1/job/nope/versions"), None),
        404,
        "job versions not found",
    );

    let revert = |body: Value| call("PUT", &agent.url("/v1/job/web/revert"), Some(body));
    assert_error(
        &revert(json!({"JobID": "web", "JobVersion": 1})),
        400,
        "can't revert to current version",
    );
    assert_error(
        &revert(json!({"JobID": "web", "JobVersion": 0, "EnforcePriorVersion": 7})),
        400,
        "Current job has version 1; enforcing version 7",
    );
    assert_error(
        &revert(json!({"JobVersion": 0})),
        400,
        "JobID must be specified",
    );
    assert_error(
        &revert(json!({"JobID": "other", "JobVersion": 0})),
        400,
        "Job ID does not match",
    );
    assert_error(
        &revert(json!({"JobID": "web", "JobVersion": 9})),
        404,
        "job \"web\" in namespace \"default\" at version 9 not found",
    );
    let a = revert(json!({"JobID": "web", "JobVersion": 0, "EnforcePriorVersion": 1}));
    assert_eq!(a.status, 200, "{}", a.body);
    let answer = a.json();
    assert_eq!(keys(&answer), keys(&fixture("register-response.json")));
    assert!(!answer["EvalID"].as_str().unwrap().is_empty());
    let job = call("GET", &agent.url("/v1/job/web"), None).json();
    assert_eq!(
        (
            job["Version"].as_u64(),
            job["TaskGroups"][0]["Count"].as_u64()
        ),
        (Some(2), Some(1))
    );

    // Stable: `{"Index"}` (Nomad's JobStabilityResponse is a WriteMeta).
    let stable = |body: Value| call("PUT", &agent.url("/v1/job/web/stable"), Some(body));
    let a = stable(json!({"JobID": "web", "JobVersion": 1, "Stable": true}));
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(keys(&a.json()), ["Index".to_string()].into());
    assert_eq!(a.index, a.json()["Index"].as_u64());
    let versions = call("GET", &agent.url("/v1/job/web/versions"), None).json();
    let v1 = versions["Versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["Version"] == 1)
        .unwrap();
    assert_eq!(v1["Stable"], true);
    assert_error(
        &stable(json!({"JobID": "web", "JobVersion": 42, "Stable": true})),
        404,
        "at version 42 not found",
    );
    assert_error(
        &stable(json!({"JobVersion": 1, "Stable": true})),
        400,
        "JobID must be specified",
    );
}

#[test]
fn purge_must_be_a_boolean() {
    let dir = temp_dir();
    let agent = start_in(dir.path());
    register(&agent, service("web", 1, None));
    let a = call("DELETE", &agent.url("/v1/job/web?purge=yes"), None);
    assert_error(&a, 400, "Failed to parse value of \"purge\" (yes) as a bool: strconv.ParseBool: parsing \"yes\": invalid syntax");
    assert_error(
        &call("DELETE", &agent.url("/v1/job/web?global=2"), None),
        400,
        "\"global\"",
    );
    let job = call("GET", &agent.url("/v1/job/web"), None).json();
    assert_eq!(job["Stop"], false, "a refused purge changes nothing");
    assert_eq!(
        call("DELETE", &agent.url("/v1/job/web?purge=True"), None).status,
        200
    );
    assert_eq!(call("GET", &agent.url("/v1/job/web"), None).status, 404);
}

/// Nomad's documented `GET /v1/scaling/policy/:id` answer.
fn documented_policy() -> Value {
    json!({
        "CreateIndex": 10, "Enabled": true, "ID": "5e9f9ef2-5223-6d35-bac1-be0f3cb974ad",
        "Type": "horizontal", "Max": 10, "Min": 0, "ModifyIndex": 10,
        "Policy": {"engage": true, "foo": "bar"},
        "Target": {"Group": "cache", "Job": "example", "Namespace": "default"}
    })
}

/// Nomad's documented `GET /v1/scaling/policies` entry.
fn documented_policy_stub() -> Value {
    json!({
        "ID": "31a53813-24df-b2ad-77dc-1b4bad4e7dca", "Enabled": true, "Type": "horizontal",
        "Target": {"Job": "example", "Group": "cache", "Namespace": "default"},
        "CreateIndex": 1358, "ModifyIndex": 1358
    })
}

#[test]
fn scaling_policies_come_from_the_groups_scaling_blocks() {
    let dir = temp_dir();
    let agent = start_in(dir.path());
    assert_eq!(
        call("GET", &agent.url("/v1/scaling/policies"), None).json(),
        json!([])
    );
    let scaling = json!({"Min": 1, "Max": 5, "Policy": {"cooldown": "1m"}});
    let reg = register(&agent, service("web", 2, Some(scaling.clone())));
    register(&agent, service("plain", 1, None));

    let list = call("GET", &agent.url("/v1/scaling/policies"), None);
    assert_eq!(list.status, 200);
    let list = list.json();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let stub = &list[0];
    assert_eq!(keys(stub), keys(&documented_policy_stub()));
    assert_eq!(
        stub["Target"],
        json!({"Namespace": "default", "Job": "web", "Group": "g"})
    );
    assert_eq!(
        (stub["Type"].as_str(), stub["Enabled"].as_bool()),
        (Some("horizontal"), Some(true))
    );
    assert_eq!(stub["CreateIndex"], reg["JobModifyIndex"]);
    let id = stub["ID"].as_str().unwrap().to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");

    let policy = call("GET", &agent.url(&format!("/v1/scaling/policy/{id}")), None).json();
    assert_eq!(keys(&policy), keys(&documented_policy()));
    assert_eq!(
        (policy["Min"].as_i64(), policy["Max"].as_i64()),
        (Some(1), Some(5))
    );
    assert_eq!(policy["Policy"], json!({"cooldown": "1m"}));
    assert_error(
        &call("GET", &agent.url("/v1/scaling/policy/nope"), None),
        404,
        "policy not found",
    );
    for query in [
        "job=plain",
        "type=vertical",
        "prefix=zzz",
        "namespace=other",
    ] {
        let filtered = call(
            "GET",
            &agent.url(&format!("/v1/scaling/policies?{query}")),
            None,
        )
        .json();
        assert_eq!(filtered, json!([]), "{query}");
    }
    assert_eq!(
        call(
            "GET",
            &agent.url("/v1/scaling/policies?job=web&type=hor"),
            None
        )
        .json()
        .as_array()
        .unwrap()
        .len(),
        1
    );

    // The job carries its policy; an update keeps its ID and create index,
    // and a changed policy moves its modify index.
    let job = call("GET", &agent.url("/v1/job/web"), None).json();
    assert_eq!(job["TaskGroups"][0]["Scaling"]["ID"], id.as_str());
    let mut wider = scaling.clone();
    wider["Max"] = json!(8);
    let update = register(&agent, service("web", 2, Some(wider)));
    let policy = call("GET", &agent.url(&format!("/v1/scaling/policy/{id}")), None).json();
    assert_eq!(policy["CreateIndex"], stub["CreateIndex"]);
    assert_eq!(policy["ModifyIndex"], update["JobModifyIndex"]);
    assert_eq!(policy["Max"], 8);

    // Nomad's validation of the block.
    let refused = [
        (
            json!({"Min": 1}),
            "maximum count must be specified and non-negative",
        ),
        (
            json!({"Min": 4, "Max": 3}),
            "maximum count must not be less than minimum count",
        ),
        (
            json!({"Min": 0, "Max": 1}),
            "task group count must not be greater than maximum count",
        ),
        (
            json!({"Min": 3, "Max": 9}),
            "task group count must not be less than minimum count",
        ),
        (
            json!({"Min": 0, "Max": 9, "Type": "vertical"}),
            "scaling policy type \"vertical\" is not valid",
        ),
    ];
    for (block, text) in refused {
        let a = call(
            "PUT",
            &agent.url("/v1/jobs"),
            Some(json!({"Job": service("bad", 2, Some(block))})),
        );
        assert_error(&a, 400, text);
    }
    let mut system = service("sys", 1, Some(json!({"Min": 1, "Max": 1})));
    system["Type"] = json!("system");
    let a = call(
        "PUT",
        &agent.url("/v1/jobs"),
        Some(json!({ "Job": system })),
    );
    assert_error(
        &a,
        400,
        "Task groups with job type system do not support scaling stanzas",
    );

    // Purged with its job.
    assert_eq!(
        call("DELETE", &agent.url("/v1/job/web?purge=true"), None).status,
        200
    );
    assert_eq!(
        call("GET", &agent.url("/v1/scaling/policies"), None).json(),
        json!([])
    );
}

#[test]
fn scaling_records_events_per_group_that_survive_a_restart() {
    let dir = temp_dir();
    let agent = start_in(dir.path());
    register(&agent, service("web", 1, Some(json!({"Min": 1, "Max": 4}))));
    let scale = |body: Value| call("POST", &agent.url("/v1/job/web/scale"), Some(body));

    let up = scale(
        json!({"Count": 3, "Target": {"Group": "g"}, "Message": "more", "Meta": {"by": "test"}}),
    );
    assert_eq!(up.status, 200, "{}", up.body);
    let up = up.json();
    assert_eq!(keys(&up), keys(&fixture("register-response.json")));
    let note = scale(
        json!({"Target": {"Group": "g", "Job": "web"}, "Message": "cannot scale", "Error": true}),
    );
    assert_eq!(note.status, 200, "{}", note.body);
    let note = note.json();
    assert_eq!(
        (note["EvalID"].as_str(), note["EvalCreateIndex"].as_u64()),
        (Some(""), Some(0))
    );

    let check = |agent: &TestAgent| {
        let status = call("GET", &agent.url("/v1/job/web/scale"), None);
        assert_eq!(status.status, 200);
        let status = status.json();
        assert_eq!(
            keys(&status),
            [
                "JobCreateIndex",
                "JobID",
                "JobModifyIndex",
                "JobStopped",
                "Namespace",
                "TaskGroups"
            ]
            .map(String::from)
            .into()
        );
        let group = &status["TaskGroups"]["g"];
        assert_eq!(group["Desired"], 3);
        let events = group["Events"].as_array().expect("events");
        assert_eq!(events.len(), 2, "{events:?}");
        for event in events {
            assert_eq!(
                keys(event),
                [
                    "Count",
                    "CreateIndex",
                    "Error",
                    "EvalID",
                    "Message",
                    "Meta",
                    "PreviousCount",
                    "Time"
                ]
                .map(String::from)
                .into()
            );
        }
        // Newest first.
        assert_eq!(events[0]["Message"], "cannot scale");
        assert_eq!(
            (
                events[0]["Count"].clone(),
                events[0]["Error"].clone(),
                events[0]["EvalID"].clone()
            ),
            (Value::Null, json!(true), Value::Null)
        );
        assert_eq!(events[0]["PreviousCount"], 3);
        assert_eq!(events[1]["Message"], "more");
        assert_eq!(
            (
                events[1]["Count"].as_i64(),
                events[1]["PreviousCount"].as_i64()
            ),
            (Some(3), Some(1))
        );
        assert_eq!(events[1]["EvalID"], up["EvalID"]);
        assert_eq!(events[1]["Meta"], json!({"by": "test"}));
        assert_eq!(events[1]["CreateIndex"], up["Index"]);
        assert!(events[1]["Time"].as_i64().unwrap() > 0);
    };
    check(&agent);

    // Nomad's refusals.
    let refused = [
        (
            json!({"Count": 9, "Target": {"Group": "g"}}),
            400,
            "group count was greater than scaling policy maximum: 9 > 4",
        ),
        (
            json!({"Count": 0, "Target": {"Group": "g"}}),
            400,
            "group count was less than scaling policy minimum: 0 < 1",
        ),
        (
            json!({"Count": -1, "Target": {"Group": "g"}}),
            400,
            "scaling action count can't be negative",
        ),
        (
            json!({"Count": 2, "Error": true, "Target": {"Group": "g"}}),
            400,
            "scaling action should not contain count if error is true",
        ),
        (
            json!({"Count": 2}),
            400,
            "missing task group name for scaling action",
        ),
        (
            json!({"Count": 2, "Target": {"Group": "h"}}),
            400,
            "task group \"h\" specified for scaling does not exist in job",
        ),
        (
            json!({"Count": 2, "Target": {"Group": "g", "Job": "other"}}),
            400,
            "job ID in payload did not match URL",
        ),
        (
            json!({"Count": 2, "Target": {"Group": "g", "Namespace": "other"}}),
            400,
            "namespace in payload did not match header",
        ),
        (
            json!({"Count": 4_294_967_296_i64, "Target": {"Group": "g"}}),
            400,
            "new scaling count is too large",
        ),
    ];
    for (body, status, text) in refused {
        assert_error(&scale(body), status, text);
    }
    assert_error(
        &call(
            "POST",
            &agent.url("/v1/job/nope/scale"),
            Some(json!({"Count": 1, "Target": {"Group": "g"}})),
        ),
        404,
        "job \"nope\" not found",
    );

    // Events and their table survive a restart.
    drop(agent);
    let agent = start_in(dir.path());
    check(&agent);
    // Nomad keeps the newest 20 per group.
    for i in 0..25 {
        let a = call(
            "POST",
            &agent.url("/v1/job/web/scale"),
            Some(json!({"Target": {"Group": "g"}, "Message": format!("n{i}")})),
        );
        assert_eq!(a.status, 200, "{}", a.body);
    }
    let status = call("GET", &agent.url("/v1/job/web/scale"), None).json();
    let events = status["TaskGroups"]["g"]["Events"].as_array().unwrap();
    assert_eq!(events.len(), 20);
    assert_eq!(events[0]["Message"], "n24");
    // Purging the job removes its events.
    assert_eq!(
        call("DELETE", &agent.url("/v1/job/web?purge=true"), None).status,
        200
    );
    register(&agent, service("web", 1, None));
    let status = call("GET", &agent.url("/v1/job/web/scale"), None).json();
    assert_eq!(status["TaskGroups"]["g"]["Events"], Value::Null);
}
