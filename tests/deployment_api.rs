//! The deployment API over HTTP, as Nomad 1.1's clients call it:
//! `/v1/deployments`, `/v1/deployment/:id`, its allocations, promote,
//! fail, pause/resume and allocation health, a job's deployments, the
//! `Deployment` events and the `deployment` search context.
//!
//! The server runs without scheduling workers and the deployment rows are
//! written through store commands (as a committed plan writes them), so
//! each test sees exactly the deployment it set up.

use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{Command, PlanResults, StateStore};
use herder::structs::deployment::description;
use herder::structs::{
    AllocDeploymentStatus, Allocation, Deployment, DeploymentState, Job, TriggeredBy,
};
use herder_tests::{server_config, temp_dir, TestAgent};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    let req = ureq::request(method, url).timeout(Duration::from_secs(30));
    let result = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    Answer {
        status: response.status(),
        index: response
            .header("X-Nomad-Index")
            .and_then(|v| v.parse().ok()),
        body: response.into_string().unwrap_or_default(),
    }
}

/// A server without scheduling workers.
fn start(dir: &std::path::Path) -> TestAgent {
    let mut config = server_config(dir);
    config.server.num_schedulers = Some(0);
    TestAgent::start(config, false)
}

fn store(agent: &TestAgent) -> &StateStore {
    &agent.server.as_ref().expect("server").store
}

fn register(agent: &TestAgent, job: &Job) {
    let eval = fixtures::eval(job, TriggeredBy::JobRegister, 1);
    store(agent)
        .apply(Command::JobRegister {
            job: Arc::new(job.clone()),
            eval: Some(eval),
            enforce_index: None,
        })
        .expect("job registered");
}

/// Job `web` at version 0 (stable) and version 1, and a running deployment
/// of version 1 whose group `web` wants one canary (placed, health
/// undecided) out of 3, auto-reverting as asked.
fn deployed(agent: &TestAgent, auto_revert: bool) -> (Deployment, Allocation) {
    let mut job = fixtures::job("default", "web", &[("web", 3)]);
    register(agent, &job);
    store(agent)
        .apply(Command::JobStabilityUpdate {
            namespace: "default".into(),
            job_id: "web".into(),
            version: 0,
            stable: true,
        })
        .expect("version 0 stable");
    job.meta.insert("v".into(), "1".into());
    register(agent, &job);
    let snap = store(agent).snapshot();
    let job = snap.job("default", "web").expect("job").clone();
    let mut d = Deployment::new(&job, 50);
    d.task_groups.insert(
        "web".into(),
        DeploymentState {
            auto_revert,
            desired_canaries: 1,
            desired_total: 3,
            progress_deadline: Duration::from_secs(600),
            ..Default::default()
        },
    );
    let node = fixtures::node("n1");
    store(agent)
        .apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        })
        .expect("node registered");
    let eval = snap.evals_by_job("default", "web").next().expect("eval").id;
    // Created now: the deployment watcher counts the progress deadline
    // from here.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let mut canary = AllocBuilder::new(&job, "web").build(0, node.id, eval, now);
    canary.deployment_id = Some(d.id);
    canary.set_deployment_status(Some(AllocDeploymentStatus {
        canary: true,
        ..Default::default()
    }));
    store(agent)
        .apply(Command::ApplyPlanResults(PlanResults {
            eval_id: eval,
            job: Some(job),
            node_allocation: HashMap::from([(node.id, vec![canary.clone()])]),
            deployment: Some(Arc::new(d.clone())),
            updated_at: now,
            ..Default::default()
        }))
        .expect("plan applied");
    (d, canary)
}

fn deployment(agent: &TestAgent, id: impl std::fmt::Display) -> Value {
    let a = call("GET", &agent.url(&format!("/v1/deployment/{id}")), None);
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()
}

fn put(agent: &TestAgent, path: &str, body: Value) -> Answer {
    call("PUT", &agent.url(path), Some(body))
}

#[test]
fn deployments_read_in_nomads_shapes() {
    let dir = temp_dir();
    let agent = start(dir.path());
    let none = call("GET", &agent.url("/v1/job/web/deployment"), None);
    assert_eq!((none.status, none.body.as_str()), (200, "null"));
    let (d, canary) = deployed(&agent, false);

    let list = call("GET", &agent.url("/v1/deployments"), None);
    assert_eq!(list.status, 200);
    assert!(list.index.is_some_and(|i| i > 1), "X-Nomad-Index");
    let list = list.json();
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    let first = &list[0];
    assert_eq!(first["ID"], d.id.to_string());
    assert_eq!(first["JobID"], "web");
    assert_eq!(first["JobVersion"], 1);
    assert_eq!(first["Status"], "running");
    let group = &first["TaskGroups"]["web"];
    assert_eq!(group["DesiredCanaries"], 1);
    assert_eq!(group["PlacedAllocs"], 1);
    assert_eq!(group["PlacedCanaries"], json!([canary.id.to_string()]));

    let prefix = &d.id.to_string()[..4];
    let hit = call(
        "GET",
        &agent.url(&format!("/v1/deployments?prefix={prefix}")),
        None,
    );
    assert_eq!(hit.json().as_array().map(Vec::len), Some(1));
    let other = if prefix.starts_with('0') {
        "ffff"
    } else {
        "0000"
    };
    let miss = call(
        "GET",
        &agent.url(&format!("/v1/deployments?prefix={other}")),
        None,
    );
    assert_eq!(miss.json(), json!([]));
    let filtered = call(
        "GET",
        &agent.url("/v1/deployments?filter=Status%20%3D%3D%20%22paused%22"),
        None,
    );
    assert_eq!(filtered.json(), json!([]));

    assert_eq!(deployment(&agent, d.id)["ID"], d.id.to_string());
    // The list holds whole deployments, as reading one alone answers
    // (compared between two equal lists: nothing changed in between).
    let list_again = |agent: &TestAgent| call("GET", &agent.url("/v1/deployments"), None).json();
    let stood_still = (0..20).any(|_| {
        let before = list_again(&agent);
        let alone = deployment(&agent, d.id);
        let still = list_again(&agent) == before;
        if still {
            assert_eq!(before[0], alone);
        }
        still
    });
    assert!(stood_still, "the deployment never stood still");
    let allocs = call(
        "GET",
        &agent.url(&format!("/v1/deployment/allocations/{}", d.id)),
        None,
    )
    .json();
    assert_eq!(allocs[0]["ID"], canary.id.to_string());
    assert_eq!(allocs[0]["JobID"], "web");
    assert_eq!(allocs[0]["DeploymentStatus"]["Canary"], true);
    assert_eq!(allocs[0]["DeploymentStatus"]["Healthy"], Value::Null);

    let of_job = call("GET", &agent.url("/v1/job/web/deployments"), None).json();
    assert_eq!(of_job[0]["ID"], d.id.to_string());
    let latest = call("GET", &agent.url("/v1/job/web/deployment"), None).json();
    assert_eq!(latest["ID"], d.id.to_string());

    let search = call(
        "PUT",
        &agent.url("/v1/search"),
        Some(json!({"Prefix": prefix, "Context": "deployment"})),
    )
    .json();
    assert_eq!(search["Matches"]["deployment"], json!([d.id.to_string()]));

    let unknown = uuid::Uuid::new_v4();
    for path in [
        format!("/v1/deployment/{unknown}"),
        format!("/v1/deployment/allocations/{unknown}"),
    ] {
        let a = call("GET", &agent.url(&path), None);
        assert_eq!((a.status, a.body.as_str()), (404, "deployment not found"));
    }
    let a = put(&agent, &format!("/v1/deployment/fail/{unknown}"), json!({}));
    assert_eq!((a.status, a.body.as_str()), (404, "deployment not found"));
}

#[test]
fn a_blocking_list_wakes_on_a_deployment_change() {
    let dir = temp_dir();
    let agent = start(dir.path());
    let (d, _) = deployed(&agent, false);
    let first = call("GET", &agent.url("/v1/deployments"), None);
    let index = first.index.expect("index");
    let url = agent.url(&format!("/v1/deployments?index={index}&wait=20s"));
    let started = Instant::now();
    let waiter = std::thread::spawn(move || call("GET", &url, None));
    std::thread::sleep(Duration::from_millis(300));
    let paused = put(
        &agent,
        &format!("/v1/deployment/pause/{}", d.id),
        json!({"DeploymentID": d.id, "Pause": true}),
    );
    assert_eq!(paused.status, 200, "{}", paused.body);
    let woke = waiter.join().expect("waiter");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "woken by the change"
    );
    assert!(woke.index.expect("index") > index);
    assert_eq!(woke.json()[0]["Status"], "paused");
}

#[test]
fn promotion_waits_for_healthy_canaries() {
    let dir = temp_dir();
    let agent = start(dir.path());
    let (d, canary) = deployed(&agent, false);
    let promote = format!("/v1/deployment/promote/{}", d.id);
    let refused = put(&agent, &promote, json!({"DeploymentID": d.id, "All": true}));
    assert_eq!(refused.status, 500);
    assert_eq!(
        refused.body,
        "Task group \"web\" has 0/1 healthy allocations"
    );

    let healthy = put(
        &agent,
        &format!("/v1/deployment/allocation-health/{}", d.id),
        json!({"DeploymentID": d.id, "HealthyAllocationIDs": [canary.id]}),
    );
    assert_eq!(healthy.status, 200, "{}", healthy.body);
    assert_eq!(
        deployment(&agent, d.id)["TaskGroups"]["web"]["HealthyAllocs"],
        1
    );

    let named = put(
        &agent,
        &promote,
        json!({"DeploymentID": d.id, "Groups": ["nope"]}),
    );
    assert_eq!(named.status, 500);
    assert_eq!(named.body, "deployment has no task group \"nope\"");

    let promoted = put(
        &agent,
        &promote,
        json!({"DeploymentID": d.id, "Groups": ["web"]}),
    );
    assert_eq!(promoted.status, 200, "{}", promoted.body);
    let answer = promoted.json();
    let index = answer["Index"].as_u64().expect("Index");
    assert_eq!(answer["DeploymentModifyIndex"], index);
    assert_eq!(answer["EvalCreateIndex"], index);
    assert_eq!(answer["RevertedJobVersion"], Value::Null);
    let eval_id = answer["EvalID"].as_str().expect("EvalID").to_string();
    let eval = call(
        "GET",
        &agent.url(&format!("/v1/evaluation/{eval_id}")),
        None,
    )
    .json();
    assert_eq!(eval["TriggeredBy"], "deployment-watcher");
    assert_eq!(eval["DeploymentID"], d.id.to_string());
    let after = deployment(&agent, d.id);
    assert_eq!(after["TaskGroups"]["web"]["Promoted"], true);
    assert_eq!(after["StatusDescription"], description::RUNNING);

    let mismatch = put(
        &agent,
        &promote,
        json!({"DeploymentID": "other", "All": true}),
    );
    assert_eq!(
        (mismatch.status, mismatch.body.as_str()),
        (400, "Deployment ID does not match")
    );
}

#[test]
fn pause_and_resume_change_the_status() {
    let dir = temp_dir();
    let agent = start(dir.path());
    let (d, _) = deployed(&agent, false);
    let path = format!("/v1/deployment/pause/{}", d.id);
    let paused = put(&agent, &path, json!({"DeploymentID": d.id, "Pause": true}));
    assert_eq!(paused.status, 200, "{}", paused.body);
    assert_eq!(paused.json()["EvalID"], "", "a pause evaluates nothing");
    let now = deployment(&agent, d.id);
    assert_eq!(now["Status"], "paused");
    assert_eq!(now["StatusDescription"], "Deployment is paused");

    let resumed = put(&agent, &path, json!({"DeploymentID": d.id, "Pause": false}));
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    assert_ne!(resumed.json()["EvalID"], "", "a resume evaluates the job");
    let now = deployment(&agent, d.id);
    assert_eq!(now["Status"], "running");
    assert_eq!(
        now["StatusDescription"],
        "Deployment is running but requires manual promotion"
    );
}

#[test]
fn failing_rolls_back_and_a_terminal_deployment_refuses_changes() {
    let dir = temp_dir();
    let agent = start(dir.path());
    let (d, canary) = deployed(&agent, true);
    let failed = put(&agent, &format!("/v1/deployment/fail/{}", d.id), json!({}));
    assert_eq!(failed.status, 200, "{}", failed.body);
    assert_eq!(failed.json()["RevertedJobVersion"], 0);
    let now = deployment(&agent, d.id);
    assert_eq!(now["Status"], "failed");
    assert_eq!(
        now["StatusDescription"],
        "Deployment marked as failed - rolling back to job version 0"
    );
    let job = call("GET", &agent.url("/v1/job/web"), None).json();
    assert_eq!(job["Version"], 2, "the rollback is a new version");
    assert_eq!(job["Meta"], Value::Null, "with version 0's spec");

    let id = d.id;
    let refusals = [
        ("fail", json!({}), "can't fail terminal deployment"),
        (
            "pause",
            json!({"DeploymentID": id, "Pause": true}),
            "can't pause terminal deployment",
        ),
        (
            "pause",
            json!({"DeploymentID": id, "Pause": false}),
            "can't resume terminal deployment",
        ),
        (
            "promote",
            json!({"DeploymentID": id, "All": true}),
            "can't promote terminal deployment",
        ),
        (
            "promote",
            json!({"DeploymentID": id}),
            "can't promote terminal deployment",
        ),
        (
            "allocation-health",
            json!({"DeploymentID": id, "UnhealthyAllocationIDs": [canary.id]}),
            "can't set health of allocations for a terminal deployment",
        ),
        (
            // As python-nomad spells it.
            "allocation-health",
            json!({"DeploymentID": id, "UnHealthyAllocationIDs": [canary.id]}),
            "can't set health of allocations for a terminal deployment",
        ),
    ];
    for (verb, body, text) in refusals {
        let a = put(&agent, &format!("/v1/deployment/{verb}/{id}"), body);
        assert_eq!((a.status, a.body.as_str()), (500, text), "{verb}");
    }
}

#[test]
fn an_unhealthy_mark_fails_the_deployment() {
    let dir = temp_dir();
    let agent = start(dir.path());
    let (d, canary) = deployed(&agent, true);
    let a = put(
        &agent,
        &format!("/v1/deployment/allocation-health/{}", d.id),
        json!({"DeploymentID": d.id, "UnhealthyAllocationIDs": [canary.id]}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["RevertedJobVersion"], 0);
    let now = deployment(&agent, d.id);
    assert_eq!(now["Status"], "failed");
    assert_eq!(
        now["StatusDescription"],
        "Failed due to unhealthy allocations - rolling back to job version 0"
    );
    assert_eq!(now["TaskGroups"]["web"]["UnhealthyAllocs"], 1);
    let alloc = call(
        "GET",
        &agent.url(&format!("/v1/allocation/{}", canary.id)),
        None,
    )
    .json();
    assert_eq!(alloc["DeploymentStatus"]["Healthy"], false);
}

#[test]
fn deployment_changes_are_streamed_as_events() {
    let dir = temp_dir();
    let agent = start(dir.path());
    let (d, _) = deployed(&agent, false);
    let paused = put(
        &agent,
        &format!("/v1/deployment/pause/{}", d.id),
        json!({"DeploymentID": d.id, "Pause": true}),
    );
    assert_eq!(paused.status, 200);
    let response = ureq::get(&agent.url("/v1/event/stream?index=1&topic=Deployment:web"))
        .timeout(Duration::from_secs(20))
        .call()
        .expect("stream opens");
    let mut events = Vec::new();
    for line in BufReader::new(response.into_reader())
        .lines()
        .map_while(Result::ok)
    {
        let frame: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        events.extend(frame["Events"].as_array().cloned().unwrap_or_default());
        if events.iter().any(|e| e["Type"] == "DeploymentStatusUpdate") {
            break;
        }
    }
    assert_eq!(events[0]["Topic"], "Deployment");
    assert_eq!(events[0]["Type"], "PlanResult");
    assert_eq!(events[0]["Key"], d.id.to_string());
    let update = events
        .iter()
        .find(|e| e["Type"] == "DeploymentStatusUpdate")
        .expect("the pause's event");
    assert_eq!(update["Payload"]["Deployment"]["Status"], "paused");
}
