//! The Nomad-compatible HTTP API, driven as a client would: jobs,
//! evaluations, allocations, nodes, the operator's scheduler settings,
//! blocking queries, the event stream, metrics, and the error answers.
//!
//! No scheduling workers run in these tests, so allocations are written
//! straight into the store (as a plan applier would) where a test needs
//! them, and nodes are registered through the store.

use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{Command, PlanResults};
use herder::structs::alloc_id::new_alloc_id;
use herder::structs::{Allocation, Node};
use herder_tests::{get, server_config, temp_dir, TestAgent};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Fields herder answers that Nomad 1.1.2 does not (newer Nomad fields
/// and herder's own).
const HERDER_FIELDS: &[&str] = &[
    "JobVersion",
    "LastSnapshotID",
    "NodePool",
    "MaxClientDisconnect",
    "Lifecycle",
    "Artifacts",
    "MinDynamicPort",
    "MaxDynamicPort",
    "RejectJobRegistration",
    "PauseEvalBroker",
    "SysBatchSchedulerEnabled",
    "ForceDeadline",
    "StartedAt",
    "Unknown",
    "Attributes",
    "NodeFailure",
];

/// Asserts every field of `ours` exists in Nomad's answer with a value of
/// the same kind (Nomad's `null` stands for any empty value).
fn assert_shape(ours: &Value, nomad: &Value, path: &str) {
    match (ours, nomad) {
        (Value::Object(o), Value::Object(n)) => {
            for (k, v) in o {
                match n.get(k) {
                    Some(nv) => assert_shape(v, nv, &format!("{path}.{k}")),
                    // Keys a user chose (task names, config, meta) are
                    // data, not field names.
                    None if !k.starts_with(|c: char| c.is_ascii_uppercase()) => {}
                    None => assert!(
                        HERDER_FIELDS.contains(&k.as_str()),
                        "{path}.{k} is answered by herder but not by Nomad (value {v})"
                    ),
                }
            }
        }
        (Value::Array(o), Value::Array(n)) => {
            if let (Some(a), Some(b)) = (o.first(), n.first()) {
                assert_shape(a, b, &format!("{path}[0]"));
            }
        }
        (_, Value::Null) | (Value::Null, _) => {}
        (Value::Number(_), Value::Number(_))
        | (Value::String(_), Value::String(_))
        | (Value::Bool(_), Value::Bool(_)) => {}
        (a, b) => panic!("{path}: herder answers {a}, Nomad {b}"),
    }
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/fixtures/nomad-1.1.2/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("fixture JSON")
}

fn fixture_text(name: &str) -> String {
    let path = format!("{}/fixtures/nomad-1.1.2/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).expect("fixture")
}

/// An answer: status, headers of interest, body.
struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
    fn index(&self) -> u64 {
        self.headers
            .get("x-nomad-index")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no X-Nomad-Index in {:?}", self.headers))
    }
}

fn call(method: &str, url: &str, body: Option<&str>) -> Answer {
    let req = ureq::request(method, url).timeout(Duration::from_secs(60));
    let result = match body {
        Some(b) => req.set("Content-Type", "application/json").send_string(b),
        None => req.call(),
    };
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = response.status();
    let headers = response
        .headers_names()
        .into_iter()
        .filter_map(|h| {
            response
                .header(&h)
                .map(|v| (h.to_lowercase(), v.to_string()))
        })
        .collect();
    let body = response.into_string().unwrap_or_default();
    Answer {
        status,
        headers,
        body,
    }
}

fn job_body(id: &str, count: i64) -> String {
    json!({"Job": {
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [{
            "Name": "t", "Driver": "exec", "Config": {"command": "/bin/sleep", "args": ["60"]},
            "Resources": {"CPU": 100, "MemoryMB": 64}
        }]}]
    }})
    .to_string()
}

/// A server that stores and answers but runs no scheduling workers, so
/// these tests see exactly the state they wrote (allocations are placed by
/// hand through the store).
fn start() -> (TestAgent, tempfile::TempDir) {
    let dir = temp_dir();
    let mut config = server_config(dir.path());
    config.server.num_schedulers = Some(0);
    let agent = TestAgent::start(config, false);
    (agent, dir)
}

fn register(agent: &TestAgent, id: &str, count: i64) -> Value {
    let a = call("PUT", &agent.url("/v1/jobs"), Some(&job_body(id, count)));
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()
}

fn store(agent: &TestAgent) -> &herder::state::StateStore {
    &agent.server.as_ref().expect("server").store
}

/// Registers `n` ready nodes through the store.
fn add_nodes(agent: &TestAgent, n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let mut node = fixtures::node(&format!("node-{i}"));
            node.http_addr = format!("127.0.0.{}:4646", i + 1);
            store(agent)
                .apply(Command::NodeRegister {
                    node: Arc::new(node.clone()),
                })
                .expect("node registered");
            node
        })
        .collect()
}

/// Writes allocations of job `id` as a committed plan would.
fn place(agent: &TestAgent, id: &str, nodes: &[Node]) -> Vec<Allocation> {
    let snap = store(agent).snapshot();
    let job = snap.job("default", id).expect("job stored").clone();
    let eval = snap
        .evals_by_job("default", id)
        .next()
        .expect("eval stored")
        .id;
    let builder = AllocBuilder::new(&job, "g");
    let allocs: Vec<Allocation> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut alloc = builder.build(i as u32, n.id, eval, 1);
            // Every other ID as the scheduler makes them (the table keeps
            // those in the order they were made), the rest random.
            if i % 2 == 1 {
                alloc.id = new_alloc_id();
            }
            alloc
        })
        .collect();
    let mut by_node = HashMap::new();
    for a in &allocs {
        by_node
            .entry(a.node_id)
            .or_insert_with(Vec::new)
            .push(a.clone());
    }
    store(agent)
        .apply(Command::ApplyPlanResults(PlanResults {
            eval_id: eval,
            job: Some(job),
            node_allocation: by_node,
            updated_at: 1,
            ..Default::default()
        }))
        .expect("plan applied");
    allocs
}

#[test]
fn register_read_list_and_deregister_a_job() {
    let (agent, _dir) = start();
    let answer = register(&agent, "web", 2);
    assert_shape(&answer, &fixture("register-response.json"), "$");
    let eval_id = answer["EvalID"].as_str().expect("eval id").to_string();
    assert!(answer["EvalCreateIndex"].as_u64().unwrap() > 0);
    assert_eq!(answer["KnownLeader"], true);

    let job = call("GET", &agent.url("/v1/job/web"), None);
    assert_eq!(job.status, 200);
    assert!(job.index() > 0);
    assert_eq!(job.headers["x-nomad-knownleader"], "true");
    let job = job.json();
    assert_eq!(job["ID"], "web");
    assert_eq!(job["TaskGroups"][0]["Count"], 2);
    assert_eq!(job["JobModifyIndex"], answer["JobModifyIndex"]);
    assert_shape(&job, &fixture("job.json"), "$");

    let list = call("GET", &agent.url("/v1/jobs"), None).json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_shape(&list, &fixture("jobs-list.json"), "$");
    assert_eq!(list[0]["JobSummary"]["Summary"]["g"]["Queued"], 0);

    let evals = call("GET", &agent.url("/v1/job/web/evaluations"), None).json();
    assert_eq!(evals[0]["ID"], eval_id.as_str());
    assert_eq!(evals[0]["TriggeredBy"], "job-register");
    let eval = call(
        "GET",
        &agent.url(&format!("/v1/evaluation/{eval_id}")),
        None,
    )
    .json();
    assert_shape(&eval, &fixture("evaluation.json"), "$");
    assert_eq!(eval["JobID"], "web");

    let summary = call("GET", &agent.url("/v1/job/web/summary"), None).json();
    assert_shape(&summary, &fixture("job-summary.json"), "$");

    register(&agent, "web", 3);
    let versions = call("GET", &agent.url("/v1/job/web/versions?diffs=true"), None).json();
    assert_shape(&versions, &fixture("job-versions.json"), "$");
    assert_eq!(versions["Versions"].as_array().unwrap().len(), 2);
    assert_eq!(versions["Versions"][0]["Version"], 1);
    assert_eq!(versions["Diffs"][0]["Type"], "Edited");

    // Prefix and filter narrow the list.
    register(&agent, "api", 1);
    let listed = |q: &str| -> Vec<String> {
        call("GET", &agent.url(&format!("/v1/jobs{q}")), None)
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["ID"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(""), ["api", "web"]);
    assert_eq!(listed("?prefix=we"), ["web"]);
    assert_eq!(listed("?filter=ID%20%3D%3D%20%22api%22"), ["api"]);
    let page = call("GET", &agent.url("/v1/jobs?per_page=1"), None);
    assert_eq!(page.json().as_array().unwrap().len(), 1);
    assert_eq!(page.headers["x-nomad-nexttoken"], "web");
    assert_eq!(listed("?per_page=1&next_token=web"), ["web"]);

    let stop = call("DELETE", &agent.url("/v1/job/web"), None);
    assert_eq!(stop.status, 200, "{}", stop.body);
    let stop = stop.json();
    assert_shape(&stop, &fixture("deregister-response.json"), "$");
    let job = call("GET", &agent.url("/v1/job/web"), None).json();
    assert_eq!(job["Stop"], true);
    let evals = call("GET", &agent.url("/v1/job/web/evaluations"), None).json();
    assert!(evals
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["TriggeredBy"] == "job-deregister" && e["ID"] == stop["EvalID"]));

    let purge = call("DELETE", &agent.url("/v1/job/web?purge=true"), None);
    assert_eq!(purge.status, 200);
    let gone = call("GET", &agent.url("/v1/job/web"), None);
    assert_eq!((gone.status, gone.body.as_str()), (404, "job not found"));
}

#[test]
fn job_actions_evaluate_scale_force_parse_and_validate() {
    let (agent, _dir) = start();
    register(&agent, "web", 1);
    let ev = call("POST", &agent.url("/v1/job/web/evaluate"), Some("{}")).json();
    let evals = call("GET", &agent.url("/v1/job/web/evaluations"), None).json();
    assert!(evals
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["ID"] == ev["EvalID"]));

    let scale = json!({"Count": 4, "Target": {"Group": "g"}, "Message": "more"}).to_string();
    let a = call("POST", &agent.url("/v1/job/web/scale"), Some(&scale));
    assert_eq!(a.status, 200, "{}", a.body);
    let job = call("GET", &agent.url("/v1/job/web"), None).json();
    assert_eq!(job["TaskGroups"][0]["Count"], 4);
    let status = call("GET", &agent.url("/v1/job/web/scale"), None).json();
    assert_eq!(status["TaskGroups"]["g"]["Desired"], 4);

    // A periodic job launches a child on demand.
    let periodic = fixture_text("nightly.nomad.hcl");
    let parsed = call(
        "POST",
        &agent.url("/v1/jobs/parse"),
        Some(&json!({"JobHCL": periodic, "Canonicalize": true}).to_string()),
    );
    assert_eq!(parsed.status, 200, "{}", parsed.body);
    let parsed = parsed.json();
    let id = parsed["ID"].as_str().unwrap().to_string();
    let reg = call(
        "PUT",
        &agent.url("/v1/jobs"),
        Some(&json!({ "Job": parsed }).to_string()),
    );
    assert_eq!(reg.status, 200, "{}", reg.body);
    assert_eq!(
        reg.json()["EvalID"],
        "",
        "a periodic template is not evaluated"
    );
    let forced = call(
        "POST",
        &agent.url(&format!("/v1/job/{id}/periodic/force")),
        Some("{}"),
    );
    assert_eq!(forced.status, 200, "{}", forced.body);
    let jobs = call("GET", &agent.url("/v1/jobs"), None).json();
    assert!(jobs
        .as_array()
        .unwrap()
        .iter()
        .any(|j| j["ParentID"] == id.as_str()));
    let child = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["ParentID"] == id.as_str())
        .unwrap()["ID"]
        .as_str()
        .unwrap()
        .replace('/', "%2F");
    let read = call("GET", &agent.url(&format!("/v1/job/{child}")), None);
    assert_eq!(read.status, 200, "a child's ID has a slash: {}", read.body);
    assert_eq!(read.json()["Periodic"], Value::Null);
    let not_periodic = call("POST", &agent.url("/v1/job/web/periodic/force"), Some("{}"));
    assert_eq!(not_periodic.status, 400);

    // HCL parsing answers what Nomad answers for the same file.
    for (file, want) in [
        ("web.nomad.hcl", "parse-web.json"),
        ("node-agent.nomad.hcl", "parse-node-agent.json"),
    ] {
        let body = json!({"JobHCL": fixture_text(file), "Canonicalize": true}).to_string();
        let a = call("POST", &agent.url("/v1/jobs/parse"), Some(&body));
        assert_eq!(a.status, 200, "{file}: {}", a.body);
        assert_shape(&a.json(), &fixture(want), file);
        assert_eq!(a.json()["ID"], fixture(want)["ID"]);
    }
    let bad = call(
        "POST",
        &agent.url("/v1/jobs/parse"),
        Some(&json!({"JobHCL": "job \"x\" {\n  nework {}\n}"}).to_string()),
    );
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains(":2:"), "names the line: {}", bad.body);

    let valid = call(
        "POST",
        &agent.url("/v1/validate/job"),
        Some(&job_body("v", 1)),
    )
    .json();
    assert_eq!(valid["ValidationErrors"], Value::Null);
    let mut invalid: Value = serde_json::from_str(&job_body("v", 1)).unwrap();
    invalid["Job"]["Priority"] = json!(500);
    let answer = call(
        "POST",
        &agent.url("/v1/validate/job"),
        Some(&invalid.to_string()),
    )
    .json();
    assert!(
        answer["Error"].as_str().unwrap().contains("priority"),
        "{answer}"
    );
}

#[test]
fn enforce_index_registers_only_over_the_expected_version() {
    let (agent, _dir) = start();
    let mut body: Value = serde_json::from_str(&job_body("cas", 1)).unwrap();
    body["EnforceIndex"] = json!(true);
    body["JobModifyIndex"] = json!(0);
    let first = call("PUT", &agent.url("/v1/jobs"), Some(&body.to_string()));
    assert_eq!(first.status, 200, "{}", first.body);
    let index = first.json()["JobModifyIndex"].as_u64().unwrap();
    // Again with 0: the job exists now.
    body["Job"]["TaskGroups"][0]["Count"] = json!(2);
    let stale = call("PUT", &agent.url("/v1/jobs"), Some(&body.to_string()));
    assert_eq!(stale.status, 400);
    assert!(
        stale.body.contains("Enforcing job modify index"),
        "{}",
        stale.body
    );
    body["JobModifyIndex"] = json!(index);
    let ok = call("PUT", &agent.url("/v1/job/cas"), Some(&body.to_string()));
    assert_eq!(ok.status, 200, "{}", ok.body);
    let job = call("GET", &agent.url("/v1/job/cas"), None).json();
    assert_eq!(job["TaskGroups"][0]["Count"], 2);
}

#[test]
fn plan_is_a_dry_run_with_diff_and_group_updates() {
    let (agent, _dir) = start();
    add_nodes(&agent, 3);
    register(&agent, "web", 1);
    let before = call("GET", &agent.url("/v1/job/web"), None).json();
    let allocs_before = call("GET", &agent.url("/v1/allocations"), None).body;

    let mut body: Value = serde_json::from_str(&job_body("web", 3)).unwrap();
    body["Diff"] = json!(true);
    let plan = call(
        "POST",
        &agent.url("/v1/job/web/plan"),
        Some(&body.to_string()),
    );
    assert_eq!(plan.status, 200, "{}", plan.body);
    let plan = plan.json();
    assert_shape(&plan, &fixture("plan-response.json"), "$");
    assert_eq!(plan["JobModifyIndex"], before["JobModifyIndex"]);
    assert_eq!(plan["Diff"]["Type"], "Edited");
    let group = &plan["Diff"]["TaskGroups"][0];
    assert_eq!(group["Type"], "Edited");
    let count = group["Fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["Name"] == "Count")
        .expect("Count changed");
    assert_eq!(
        (count["Old"].as_str(), count["New"].as_str()),
        (Some("1"), Some("3"))
    );
    // Nothing is placed yet, so all three are placements.
    assert_eq!(plan["Annotations"]["DesiredTGUpdates"]["g"]["Place"], 3);
    assert_eq!(group["Updates"]["create"], 3);

    // Nothing was written.
    let after = call("GET", &agent.url("/v1/job/web"), None).json();
    assert_eq!(after, before);
    assert_eq!(
        call("GET", &agent.url("/v1/allocations"), None).body,
        allocs_before
    );

    // A job that does not fit reports its failed placements.
    let mut huge: Value = serde_json::from_str(&job_body("huge", 1)).unwrap();
    huge["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"] = json!(1_000_000);
    let plan = call(
        "POST",
        &agent.url("/v1/job/huge/plan"),
        Some(&huge.to_string()),
    )
    .json();
    assert!(plan["FailedTGAllocs"]["g"].is_object(), "{plan}");
    assert_eq!(plan["Diff"], Value::Null, "no diff unless asked");
    assert_eq!(call("GET", &agent.url("/v1/job/huge"), None).status, 404);
}

/// The allocation list is by ID, whether read whole, in pages or by prefix,
/// and a search by prefix finds the same IDs: the table underneath keeps
/// them in another order (`state::alloc_table`).
#[test]
fn allocations_list_by_id_whole_in_pages_and_by_prefix() {
    let (agent, _dir) = start();
    let nodes = add_nodes(&agent, 40);
    register(&agent, "web", 40);
    let mut want: Vec<String> = place(&agent, "web", &nodes)
        .iter()
        .map(|a| a.id.to_string())
        .collect();
    want.sort();
    let ids = |path: &str| -> (Vec<String>, Option<String>) {
        let answer = call("GET", &agent.url(path), None);
        assert_eq!(answer.status, 200, "{}", answer.body);
        let list = answer.json();
        let ids = list.as_array().unwrap().iter();
        let ids = ids.map(|a| a["ID"].as_str().unwrap().to_string()).collect();
        (ids, answer.headers.get("x-nomad-nexttoken").cloned())
    };
    assert_eq!(ids("/v1/allocations").0, want);

    let pages = |query: &str| {
        let (mut read, mut token) = ids(&format!("/v1/allocations?per_page=7{query}"));
        while let Some(t) = token {
            let (page, next) = ids(&format!("/v1/allocations?per_page=7{query}&next_token={t}"));
            assert!(page.len() <= 7);
            read.extend(page);
            token = next;
        }
        read
    };
    assert_eq!(pages(""), want);

    let digit = &want[want.len() / 2][..1];
    let with_digit: Vec<String> = want
        .iter()
        .filter(|id| id.starts_with(digit))
        .cloned()
        .collect();
    assert_eq!(
        ids(&format!("/v1/allocations?prefix={digit}")).0,
        with_digit
    );
    assert_eq!(pages(&format!("&prefix={digit}")), with_digit);
    let exact = &want[3];
    assert_eq!(
        ids(&format!("/v1/allocations?prefix={exact}")).0,
        std::slice::from_ref(exact)
    );
    assert!(ids("/v1/allocations?prefix=zz").0.is_empty());

    let search = json!({"Prefix": digit, "Context": "allocs"}).to_string();
    let found = call("POST", &agent.url("/v1/search"), Some(&search)).json();
    let found: Vec<&str> = found["Matches"]["allocs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    assert_eq!(found, with_digit.iter().take(20).collect::<Vec<_>>());
}

#[test]
fn allocation_and_evaluation_reads() {
    let (agent, _dir) = start();
    let nodes = add_nodes(&agent, 2);
    let reg = register(&agent, "web", 2);
    let allocs = place(&agent, "web", &nodes);

    let list = call("GET", &agent.url("/v1/allocations"), None).json();
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert_shape(&list, &fixture("job-allocations-list.json"), "$");
    assert_eq!(list[0]["JobType"], "service");

    let by_job = call("GET", &agent.url("/v1/job/web/allocations"), None).json();
    assert_eq!(by_job.as_array().unwrap().len(), 2);
    let by_eval = call(
        "GET",
        &agent.url(&format!(
            "/v1/evaluation/{}/allocations",
            reg["EvalID"].as_str().unwrap()
        )),
        None,
    )
    .json();
    assert_eq!(by_eval.as_array().unwrap().len(), 2);
    let by_node = call(
        "GET",
        &agent.url(&format!("/v1/node/{}/allocations", nodes[0].id)),
        None,
    )
    .json();
    assert_eq!(by_node.as_array().unwrap().len(), 1);
    assert_eq!(by_node[0]["Job"]["ID"], "web");

    let one = call(
        "GET",
        &agent.url(&format!("/v1/allocation/{}", allocs[0].id)),
        None,
    )
    .json();
    assert_shape(&one, &fixture("allocation.json"), "$");
    assert_eq!(one["Job"]["ID"], "web", "the job version is attached");
    assert_eq!(one["Job"]["Version"], 0);

    let prefix = &allocs[1].id.to_string()[..8];
    let found = call(
        "GET",
        &agent.url(&format!("/v1/allocations?prefix={prefix}")),
        None,
    )
    .json();
    assert_eq!(found.as_array().unwrap().len(), 1);

    let stop = call(
        "POST",
        &agent.url(&format!("/v1/allocation/{}/stop", allocs[0].id)),
        Some(""),
    );
    assert_eq!(stop.status, 200, "{}", stop.body);
    let eval_id = stop.json()["EvalID"].as_str().unwrap().to_string();
    let eval = call(
        "GET",
        &agent.url(&format!("/v1/evaluation/{eval_id}")),
        None,
    )
    .json();
    assert_eq!(eval["TriggeredBy"], "alloc-stop");
    let one = call(
        "GET",
        &agent.url(&format!("/v1/allocation/{}", allocs[0].id)),
        None,
    )
    .json();
    assert_eq!(one["DesiredTransition"]["Migrate"], true);

    let evals = call("GET", &agent.url("/v1/evaluations"), None).json();
    assert_eq!(evals.as_array().unwrap().len(), 2);
    assert_shape(&evals, &fixture("evaluations-list.json"), "$");
    // As in Nomad, the list holds whole evaluations: each entry is what
    // reading that evaluation alone answers. (Compared between two equal
    // lists, so that nothing changed while it was read alone.)
    let list = || call("GET", &agent.url("/v1/evaluations"), None).json();
    let (mut compared, mut tries) = (0, 0);
    while compared == 0 && tries < 20 {
        tries += 1;
        let before = list();
        let alone: Vec<Value> = before
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let id = e["ID"].as_str().unwrap();
                call("GET", &agent.url(&format!("/v1/evaluation/{id}")), None).json()
            })
            .collect();
        if list() == before {
            assert_eq!(before, Value::Array(alone));
            compared += 1;
        }
    }
    assert_eq!(compared, 1, "the evaluations never stood still");
}

#[test]
fn node_reads_and_operator_actions() {
    let (agent, _dir) = start();
    let nodes = add_nodes(&agent, 2);
    register(&agent, "web", 2);
    place(&agent, "web", &nodes);
    let id = nodes[0].id;

    let list = call("GET", &agent.url("/v1/nodes"), None).json();
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert_shape(&list, &fixture("nodes-list.json"), "$");
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["Address"] == "127.0.0.1"));
    let node = call("GET", &agent.url(&format!("/v1/node/{id}")), None);
    assert!(
        !node.body.contains(&nodes[0].secret_id),
        "the secret is never shown"
    );
    assert_shape(&node.json(), &fixture("node.json"), "$");

    let elig = call(
        "POST",
        &agent.url(&format!("/v1/node/{id}/eligibility")),
        Some(&json!({"NodeID": id, "Eligibility": "ineligible"}).to_string()),
    );
    assert_eq!(elig.status, 200, "{}", elig.body);
    let node = call("GET", &agent.url(&format!("/v1/node/{id}")), None).json();
    assert_eq!(node["SchedulingEligibility"], "ineligible");
    let back = call(
        "POST",
        &agent.url(&format!("/v1/node/{id}/eligibility")),
        Some(&json!({"Eligibility": "eligible"}).to_string()),
    )
    .json();
    assert_eq!(back["EvalIDs"].as_array().map(Vec::len), Some(1), "{back}");

    let drain = call(
        "POST",
        &agent.url(&format!("/v1/node/{id}/drain")),
        Some(&json!({"NodeID": id, "DrainSpec": {"Deadline": 3_600_000_000_000i64, "IgnoreSystemJobs": false}}).to_string()),
    );
    assert_eq!(drain.status, 200, "{}", drain.body);
    let drain = drain.json();
    let eval_id = drain["EvalIDs"][0]
        .as_str()
        .expect("a drain eval")
        .to_string();
    let eval = call(
        "GET",
        &agent.url(&format!("/v1/evaluation/{eval_id}")),
        None,
    )
    .json();
    assert_eq!(eval["TriggeredBy"], "node-drain");
    assert_eq!(eval["NodeID"], id.to_string());
    let node = call("GET", &agent.url(&format!("/v1/node/{id}")), None).json();
    assert_eq!(node["Drain"], true);
    assert_eq!(node["SchedulingEligibility"], "ineligible");
    // Eligible while draining is refused and changes nothing.
    let refused = call(
        "POST",
        &agent.url(&format!("/v1/node/{id}/eligibility")),
        Some(&json!({"Eligibility": "eligible"}).to_string()),
    );
    assert_eq!(refused.status, 400);

    let evaluate = call(
        "POST",
        &agent.url(&format!("/v1/node/{id}/evaluate")),
        Some(""),
    )
    .json();
    assert_eq!(evaluate["EvalIDs"].as_array().map(Vec::len), Some(1));

    let purge = call(
        "POST",
        &agent.url(&format!("/v1/node/{}/purge", nodes[1].id)),
        Some(""),
    );
    assert_eq!(purge.status, 200, "{}", purge.body);
    let gone = call(
        "GET",
        &agent.url(&format!("/v1/node/{}", nodes[1].id)),
        None,
    );
    assert_eq!((gone.status, gone.body.as_str()), (404, "node not found"));
}

#[test]
fn scheduler_configuration_with_check_and_set() {
    let (agent, _dir) = start();
    let url = agent.url("/v1/operator/scheduler/configuration");
    let read = call("GET", &url, None).json();
    assert_shape(
        &read,
        &fixture("operator-scheduler-configuration.json"),
        "$",
    );
    assert_eq!(read["SchedulerConfig"]["SchedulerAlgorithm"], "binpack");
    assert_eq!(
        read["SchedulerConfig"]["PreemptionConfig"]["SystemSchedulerEnabled"],
        true
    );

    let mut config = read["SchedulerConfig"].clone();
    config["SchedulerAlgorithm"] = json!("spread");
    let set = call("PUT", &url, Some(&config.to_string())).json();
    assert_eq!(set["Updated"], true);
    let modify = call("GET", &url, None).json()["SchedulerConfig"]["ModifyIndex"]
        .as_u64()
        .unwrap();
    assert!(modify > 0);

    config["SchedulerAlgorithm"] = json!("binpack");
    let stale = call(
        "PUT",
        &format!("{url}?cas={}", modify - 1),
        Some(&config.to_string()),
    )
    .json();
    assert_eq!(stale["Updated"], false);
    assert_eq!(
        call("GET", &url, None).json()["SchedulerConfig"]["SchedulerAlgorithm"],
        "spread"
    );
    let fresh = call(
        "PUT",
        &format!("{url}?cas={modify}"),
        Some(&config.to_string()),
    )
    .json();
    assert_eq!(fresh["Updated"], true);

    let bad = call("PUT", &url, Some(r#"{"SchedulerAlgorithm": "random"}"#));
    assert_eq!(bad.status, 400, "{}", bad.body);

    // Rejecting registrations is honoured.
    config["RejectJobRegistration"] = json!(true);
    call("PUT", &url, Some(&config.to_string()));
    let refused = call("PUT", &agent.url("/v1/jobs"), Some(&job_body("web", 1)));
    assert_eq!(refused.status, 403);
}

#[test]
fn blocking_queries_wake_on_change_and_time_out_otherwise() {
    let (agent, _dir) = start();
    register(&agent, "first", 1);
    let index = call("GET", &agent.url("/v1/jobs"), None).index();

    // Times out at the wait (plus at most wait/16 jitter) with the same index.
    let started = Instant::now();
    let idle = call(
        "GET",
        &agent.url(&format!("/v1/jobs?index={index}&wait=500ms")),
        None,
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500),
        "returned after {took:?}"
    );
    assert!(took < Duration::from_secs(5), "returned after {took:?}");
    assert_eq!(idle.index(), index);

    // Returns on change with a larger index.
    let url = agent.url(&format!("/v1/jobs?index={index}&wait=30s"));
    let waiter = std::thread::spawn(move || {
        let started = Instant::now();
        let a = call("GET", &url, None);
        (a.index(), a.json(), started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    register(&agent, "second", 1);
    let (new_index, list, took) = waiter.join().unwrap();
    assert!(new_index > index, "{new_index} > {index}");
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert!(
        took < Duration::from_secs(10),
        "woken, not timed out: {took:?}"
    );

    // Reads of one object block too, on their table.
    let url = agent.url(&format!("/v1/job/first?index={new_index}&wait=30s"));
    let waiter = std::thread::spawn(move || call("GET", &url, None));
    std::thread::sleep(Duration::from_millis(200));
    register(&agent, "first", 5);
    let a = waiter.join().unwrap();
    assert!(a.index() > new_index);
    assert_eq!(a.json()["TaskGroups"][0]["Count"], 5);

    let bad = call("GET", &agent.url("/v1/jobs?index=1&wait=soon"), None);
    assert_eq!(bad.status, 400);
}

/// Reads ndjson frames until `want` returns true for one (or 20 s pass).
fn read_until(lines: &mut impl Iterator<Item = String>, want: impl Fn(&Value) -> bool) -> Value {
    for line in lines {
        let frame: Value = serde_json::from_str(&line).expect("ndjson line");
        if want(&frame) {
            return frame;
        }
    }
    panic!("stream ended before the expected frame");
}

fn has_event(frame: &Value, topic: &str, kind: &str) -> bool {
    frame["Events"]
        .as_array()
        .is_some_and(|es| es.iter().any(|e| e["Topic"] == topic && e["Type"] == kind))
}

#[test]
fn event_stream_delivers_job_eval_alloc_and_node_events() {
    let (agent, _dir) = start();
    register(&agent, "before", 1);
    let response = ureq::get(&agent.url("/v1/event/stream"))
        .timeout(Duration::from_secs(20))
        .call()
        .expect("stream opens");
    let mut lines = BufReader::new(response.into_reader())
        .lines()
        .map_while(Result::ok);
    let first: Value = serde_json::from_str(&lines.next().expect("first line")).unwrap();
    assert_eq!(first, json!({}), "a heartbeat opens the stream");
    // Without an index the stream starts now: the earlier registration of
    // "before" is not replayed, so the next frame is about the node.

    let nodes = add_nodes(&agent, 1);
    let frame: Value = serde_json::from_str(&lines.next().expect("a frame")).unwrap();
    assert!(has_event(&frame, "Node", "NodeRegistration"), "{frame}");
    assert_eq!(frame["Events"][0]["Key"], nodes[0].id.to_string());
    assert!(frame["Events"][0]["Payload"]["Node"]["SecretID"].is_null());

    register(&agent, "web", 1);
    let frame = read_until(&mut lines, |f| has_event(f, "Job", "JobRegistered"));
    let job_event = frame["Events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["Topic"] == "Job")
        .unwrap();
    assert_eq!(job_event["Key"], "web");
    assert_eq!(job_event["Payload"]["Job"]["ID"], "web");
    assert!(has_event(&frame, "Evaluation", "JobRegistered"));
    let sample = fixture("event-stream-sample.json");
    let nomad_job_event = sample
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["Events"].as_array().cloned().unwrap_or_default())
        .find(|e| e["Topic"] == "Job")
        .unwrap();
    let mut ours = job_event.clone();
    ours["Payload"] = json!({});
    let mut theirs = nomad_job_event.clone();
    theirs["Payload"] = json!({});
    assert_shape(&ours, &theirs, "$.Events[0]");

    place(&agent, "web", &nodes);
    read_until(&mut lines, |f| {
        has_event(f, "Allocation", "AllocationCreated")
    });
    call("DELETE", &agent.url("/v1/job/web"), None);
    read_until(&mut lines, |f| has_event(f, "Job", "JobDeregistered"));

    // Replay from an index, narrowed to one topic and key.
    let response = ureq::get(&agent.url("/v1/event/stream?index=1&topic=Job:web"))
        .timeout(Duration::from_secs(20))
        .call()
        .expect("stream opens");
    let mut replay = BufReader::new(response.into_reader())
        .lines()
        .map_while(Result::ok);
    let frame = read_until(&mut replay, |f| f.get("Events").is_some());
    assert!(frame["Events"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["Topic"] == "Job" && e["Key"] == "web"));
    assert_eq!(frame["Events"][0]["Type"], "JobRegistered");

    let bad = call("GET", &agent.url("/v1/event/stream?topic=Bogus:x"), None);
    assert_eq!(bad.status, 400);
}

#[test]
fn agent_members_and_metrics() {
    let (agent, _dir) = start();
    let members = call("GET", &agent.url("/v1/agent/members"), None).json();
    assert_eq!(members["Members"][0]["Status"], "alive");
    assert_eq!(members["Members"][0]["Port"], agent.addr.port());
    assert_eq!(members["ServerRegion"], "global");

    register(&agent, "web", 1);
    let metrics = call("GET", &agent.url("/v1/metrics"), None).json();
    let jobs = metrics["Gauges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["Name"] == "herder_state_jobs")
        .expect("jobs gauge");
    assert_eq!(jobs["Value"], 1.0);
    let text = call("GET", &agent.url("/v1/metrics?format=prometheus"), None);
    assert_eq!(text.status, 200);
    assert!(
        text.body.contains("# TYPE herder_state_jobs gauge"),
        "{}",
        text.body
    );
    assert!(text.body.contains("herder_state_jobs 1"), "{}", text.body);
    let requests = metrics["Counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["Name"] == "herder_http_requests"
                && c["Labels"]["route"] == "/v1/jobs"
                && c["Labels"]["method"] == "PUT"
        })
        .expect("requests are counted by route and method");
    assert!(
        requests["Count"].as_f64().unwrap_or(0.0) >= 1.0,
        "{requests}"
    );
}

#[test]
fn bad_requests_are_4xx_and_change_nothing() {
    let (agent, _dir) = start();
    register(&agent, "web", 1);
    let jobs_before = call("GET", &agent.url("/v1/jobs"), None).body;
    let evals_before = call("GET", &agent.url("/v1/evaluations"), None).body;
    let unknown = uuid::Uuid::new_v4();
    let huge = format!(
        "{{\"Job\": {{\"ID\": \"x\", \"Meta\": {{\"pad\": \"{}\"}}}}}}",
        "x".repeat(server_config(temp_dir().path()).limits.http_max_body_bytes + 1)
    );
    let mut invalid: Value = serde_json::from_str(&job_body("web", 1)).unwrap();
    invalid["Job"]["Priority"] = json!(500);
    let mut negative: Value = serde_json::from_str(&job_body("web", 1)).unwrap();
    negative["Job"]["TaskGroups"][0]["Count"] = json!(-1);
    let mut wrong_type: Value = serde_json::from_str(&job_body("web", 1)).unwrap();
    wrong_type["Job"]["Priority"] = json!("high");
    let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
        (
            "PUT",
            "/v1/jobs".into(),
            Some("{not json".into()),
            400,
            "Failed to decode",
        ),
        (
            "PUT",
            "/v1/jobs".into(),
            Some("{}".into()),
            400,
            "Job must be specified",
        ),
        (
            "PUT",
            "/v1/jobs".into(),
            Some(r#"{"Job": {"Name": "x"}}"#.into()),
            400,
            "Job ID hasn't been provided",
        ),
        (
            "PUT",
            "/v1/job/other".into(),
            Some(job_body("web", 1)),
            400,
            "Job ID does not match name",
        ),
        (
            "PUT",
            "/v1/jobs".into(),
            Some(invalid.to_string()),
            400,
            "riority",
        ),
        (
            "PUT",
            "/v1/jobs".into(),
            Some(negative.to_string()),
            400,
            "ount",
        ),
        (
            "PUT",
            "/v1/jobs".into(),
            Some(wrong_type.to_string()),
            400,
            "invalid type",
        ),
        ("PUT", "/v1/jobs".into(), Some(huge), 413, ""),
        (
            "DELETE",
            "/v1/jobs".into(),
            None,
            405,
            "Method DELETE is not allowed on /v1/jobs",
        ),
        ("PATCH", "/v1/job/web".into(), Some("{}".into()), 405, ""),
        ("GET", "/v1/job/nope".into(), None, 404, "job not found"),
        ("DELETE", "/v1/job/nope".into(), None, 404, "job not found"),
        (
            "GET",
            format!("/v1/evaluation/{unknown}"),
            None,
            404,
            "eval not found",
        ),
        (
            "GET",
            format!("/v1/allocation/{unknown}"),
            None,
            404,
            "alloc not found",
        ),
        (
            "POST",
            format!("/v1/allocation/{unknown}/stop"),
            Some("".into()),
            404,
            "alloc not found",
        ),
        (
            "GET",
            format!("/v1/node/{unknown}"),
            None,
            404,
            "node not found",
        ),
        ("GET", "/v1/node/not-a-uuid".into(), None, 400, "not a UUID"),
        (
            "POST",
            format!("/v1/node/{unknown}/eligibility"),
            Some(r#"{"Eligibility": "eligible"}"#.into()),
            404,
            "node not found",
        ),
        (
            "POST",
            format!("/v1/node/{unknown}/eligibility"),
            Some(r#"{"Eligibility": "maybe"}"#.into()),
            400,
            "eligibility",
        ),
        (
            "POST",
            format!("/v1/node/{unknown}/drain"),
            Some(r#"{"DrainSpec": 5}"#.into()),
            400,
            "Failed to decode",
        ),
        (
            "GET",
            "/v1/jobs?filter=ID%20%3D%3D".into(),
            None,
            400,
            "filter",
        ),
        ("GET", "/v1/jobs?index=abc".into(), None, 400, "index"),
        (
            "POST",
            "/v1/jobs/parse".into(),
            Some(r#"{"JobHCL": "job {"}"#.into()),
            400,
            "",
        ),
        (
            "POST",
            "/v1/job/web/plan".into(),
            Some(job_body("other", 1)),
            400,
            "does not match",
        ),
        (
            "POST",
            "/v1/job/web/scale".into(),
            Some(r#"{"Count": 2, "Target": {"Group": "nope"}}"#.into()),
            400,
            "does not exist",
        ),
        (
            "PUT",
            "/v1/operator/scheduler/configuration?cas=x".into(),
            Some("{}".into()),
            400,
            "cas",
        ),
        ("GET", "/v1/metrics?format=xml".into(), None, 400, "format"),
    ];
    let refused = call("DELETE", &agent.url("/v1/jobs"), None);
    assert_eq!(
        refused.headers["allow"], "GET, PUT, POST",
        "405 names what is allowed"
    );
    for (method, path, body, status, text) in cases {
        let a = call(method, &agent.url(&path), body.as_deref());
        assert_eq!(a.status, status, "{method} {path}: {}", a.body);
        assert!(
            a.body.contains(text),
            "{method} {path}: {:?} lacks {text:?}",
            a.body
        );
    }
    assert_eq!(call("GET", &agent.url("/v1/jobs"), None).body, jobs_before);
    assert_eq!(
        call("GET", &agent.url("/v1/evaluations"), None).body,
        evals_before
    );
    let (status, job) = get(&agent.url("/v1/job/web"));
    assert_eq!(status, 200);
    assert!(job.contains("\"Priority\":50"), "{job}");
}

#[test]
fn preserve_counts_eval_priority_and_namespaces() {
    let (agent, _dir) = start();
    register(&agent, "web", 2);
    let mut body: Value = serde_json::from_str(&job_body("web", 9)).unwrap();
    body["PreserveCounts"] = json!(true);
    body["EvalPriority"] = json!(90);
    body["Job"]["Meta"] = json!({"v": "2"});
    let a = call("PUT", &agent.url("/v1/jobs"), Some(&body.to_string())).json();
    let job = call("GET", &agent.url("/v1/job/web"), None).json();
    assert_eq!(
        job["TaskGroups"][0]["Count"], 2,
        "the running count is kept"
    );
    assert_eq!(job["Meta"]["v"], "2");
    let eval = call(
        "GET",
        &agent.url(&format!("/v1/evaluation/{}", a["EvalID"].as_str().unwrap())),
        None,
    )
    .json();
    assert_eq!(eval["Priority"], 90);
    body["EvalPriority"] = json!(101);
    assert_eq!(
        call("PUT", &agent.url("/v1/jobs"), Some(&body.to_string())).status,
        400
    );

    let created = call(
        "PUT",
        &agent.url("/v1/namespace/prod"),
        Some(r#"{"Name":"prod"}"#),
    );
    assert_eq!(created.status, 200, "{}", created.body);
    let mut other: Value = serde_json::from_str(&job_body("web", 1)).unwrap();
    other["Job"]["Namespace"] = json!("prod");
    let reg = call("PUT", &agent.url("/v1/jobs"), Some(&other.to_string()));
    assert_eq!(reg.status, 200, "{}", reg.body);
    let prod = call("GET", &agent.url("/v1/job/web?namespace=prod"), None).json();
    assert_eq!(
        (
            prod["Namespace"].as_str(),
            prod["TaskGroups"][0]["Count"].as_i64()
        ),
        (Some("prod"), Some(1))
    );
    let default_only = call("GET", &agent.url("/v1/jobs"), None).json();
    assert_eq!(default_only.as_array().unwrap().len(), 1);
    let all = call("GET", &agent.url("/v1/jobs?namespace=*"), None).json();
    assert_eq!(all.as_array().unwrap().len(), 2);
    let evals = call(
        "GET",
        &agent.url("/v1/job/web/evaluations?namespace=prod"),
        None,
    )
    .json();
    assert!(evals
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["Namespace"] == "prod"));
    assert_eq!(evals.as_array().unwrap().len(), 1);
}

/// Issue 16: the JSON Nomad's own `job run -output` prints, `null`s
/// included, registers, validates and plans as Nomad takes it; and every
/// other request body takes `null` as "not set" too.
#[test]
fn nomads_job_json_with_nulls_registers_validates_and_plans() {
    let (agent, _dir) = start();
    for name in [
        "job-run-output-example.json",
        "parse-web.json",
        "parse-nightly.json",
        "parse-cleanup.json",
    ] {
        let job = fixture(name);
        let job = job.get("Job").cloned().unwrap_or(job);
        let id = job["ID"].as_str().expect("an ID").to_string();
        let body = json!({"Job": job}).to_string();
        assert!(body.contains("null"), "{name} has no null to test");
        let a = call("PUT", &agent.url("/v1/validate/job"), Some(&body));
        assert_eq!(a.status, 200, "{name}: {}", a.body);
        assert!(
            a.body.contains("\"ValidationErrors\":null"),
            "{name}: {}",
            a.body
        );
        let a = call(
            "PUT",
            &agent.url(&format!("/v1/job/{id}/plan")),
            Some(&body),
        );
        assert_eq!(a.status, 200, "{name}: {}", a.body);
        let a = call("PUT", &agent.url("/v1/jobs"), Some(&body));
        assert_eq!(a.status, 200, "{name}: {}", a.body);
        assert_eq!(get(&agent.url(&format!("/v1/job/{id}"))).0, 200);
    }
    // Not only jobs: a scheduler configuration with nulls keeps defaults.
    let a = call(
        "PUT",
        &agent.url("/v1/operator/scheduler/configuration"),
        Some(
            r#"{"SchedulerAlgorithm": null, "PreemptionConfig": null, "MemoryOversubscriptionEnabled": null}"#,
        ),
    );
    assert_eq!(a.status, 200, "{}", a.body);
}

/// Issue 16: a job field herder keeps but does not act on is named in the
/// register, plan and validate answers' `Warnings`, never silently dropped;
/// and it is kept as written.
#[test]
fn unhonoured_job_fields_are_named_in_warnings_and_kept() {
    let (agent, _dir) = start();
    let mut body: Value = serde_json::from_str(&job_body("tmpl", 1)).unwrap();
    body["Job"]["TaskGroups"][0]["Tasks"][0]["Templates"] =
        json!([{"EmbeddedTmpl": "port={{ key \"cfg/port\" }}", "DestPath": "local/app.conf"}]);
    body["Job"]["TaskGroups"][0]["Tasks"][0]["Vault"] = json!({"Policies": ["read"]});
    let body = body.to_string();
    for path in ["/v1/validate/job", "/v1/job/tmpl/plan", "/v1/jobs"] {
        let a = call("PUT", &agent.url(path), Some(&body));
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        let answer: Value = serde_json::from_str(&a.body).unwrap();
        let warnings = answer["Warnings"].as_str().unwrap_or_default();
        assert!(
            warnings.contains("template 1: function \"key\" needs Consul or Vault"),
            "{path}: {warnings}"
        );
        assert!(
            warnings.contains("vault is not supported"),
            "{path}: {warnings}"
        );
    }
    let (_, stored) = get(&agent.url("/v1/job/tmpl"));
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(
        stored["TaskGroups"][0]["Tasks"][0]["Templates"][0]["DestPath"],
        "local/app.conf"
    );
    // A plain job has no warnings.
    let a = call("PUT", &agent.url("/v1/jobs"), Some(&job_body("plain", 1)));
    let answer: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(answer["Warnings"], "");
}

/// Nomad 1.1.2's own CLI reads these: `nomad node status -self` crashed
/// dereferencing a node's (and its allocations') legacy `Resources`, and
/// `nomad job status ID` failed on the 404 of the latest deployment.
#[test]
fn nodes_and_allocations_carry_legacy_resources_and_jobs_answer_no_deployment() {
    let (agent, _dir) = start();
    let nodes = add_nodes(&agent, 1);
    let a = call("PUT", &agent.url("/v1/jobs"), Some(&job_body("web", 1)));
    assert_eq!(a.status, 200, "{}", a.body);
    let placed = place(&agent, "web", &nodes);

    let (_, body) = get(&agent.url(&format!("/v1/node/{}", nodes[0].id)));
    let node: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(node["Resources"]["CPU"], 4000, "{body}");
    assert_eq!(node["Resources"]["MemoryMB"], 8192);
    assert!(node["Reserved"]["CPU"].is_i64(), "{body}");
    let (_, body) = get(&agent.url(&format!("/v1/allocation/{}", placed[0].id)));
    let alloc: Value = serde_json::from_str(&body).unwrap();
    assert!(alloc["Resources"]["CPU"].as_i64().unwrap() > 0, "{body}");
    let (_, body) = get(&agent.url(&format!("/v1/node/{}/allocations", nodes[0].id)));
    let allocs: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert!(allocs[0]["Resources"]["MemoryMB"].is_i64(), "{body}");

    let (code, body) = get(&agent.url("/v1/job/web/deployment"));
    assert_eq!((code, body.trim()), (200, "null"));
    let (code, body) = get(&agent.url("/v1/job/web/deployments"));
    assert_eq!((code, body.trim()), (200, "[]"));
}

/// A job purged and registered again under the same ID shows only the new
/// job's versions, as Nomad does, even while allocations of the purged one
/// keep its versions stored.
#[test]
fn versions_after_a_purge_are_only_the_new_jobs() {
    let (agent, _dir) = start();
    let nodes = add_nodes(&agent, 1);
    assert_eq!(
        call("PUT", &agent.url("/v1/jobs"), Some(&job_body("web", 1))).status,
        200
    );
    place(&agent, "web", &nodes);
    assert_eq!(
        call("PUT", &agent.url("/v1/jobs"), Some(&job_body("web", 2))).status,
        200
    );
    assert_eq!(
        call("DELETE", &agent.url("/v1/job/web?purge=true"), None).status,
        200
    );
    let (code, _) = get(&agent.url("/v1/job/web/versions"));
    assert_eq!(code, 404, "a purged job has no versions to show");
    assert_eq!(
        call("PUT", &agent.url("/v1/jobs"), Some(&job_body("web", 3))).status,
        200
    );
    let (code, body) = get(&agent.url("/v1/job/web/versions"));
    assert_eq!(code, 200, "{body}");
    let versions: Value = serde_json::from_str(&body).unwrap();
    let counts: Vec<i64> = versions["Versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["TaskGroups"][0]["Count"].as_i64().unwrap())
        .collect();
    assert_eq!(counts, vec![3], "{body}");
}

/// `?region=` (what `-region` / `NOMAD_REGION` send) is honoured: this
/// agent's region is answered, another is refused rather than answered
/// from here as if it were the same.
#[test]
fn a_request_for_another_region_is_refused() {
    let (agent, _dir) = start();
    assert_eq!(get(&agent.url("/v1/jobs?region=global")).0, 200);
    let (code, body) = get(&agent.url("/v1/jobs?region=mars"));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("No path to region"), "{body}");
}
