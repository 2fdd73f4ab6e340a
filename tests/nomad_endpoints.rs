//! Endpoints Nomad's own clients call, answered in Nomad 1.1.2's shapes:
//! `/v1/regions`, `/v1/search` and `/v1/search/fuzzy`,
//! `/v1/system/reconcile/summaries`, `/v1/agent/self` (whose `stats` the
//! Go API decodes as maps of strings), `/v1/agent/servers|join|force-leave`,
//! `/v1/operator/raft/configuration` and `/v1/status/peers`; with the
//! error answers.
//!
//! The expected shapes are Nomad's documented examples (Nomad v1.1.2,
//! `website/content/api-docs/*.mdx`), corrected where the page disagrees
//! with the Go structs Nomad encodes (`nomad/structs/search.go`,
//! `api/operator.go`): those structs are what its clients decode.

use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{AllocClientUpdate, Command, PlanResults};
use herder::structs::{Allocation, ClientStatus, Node};
use herder_tests::{dev_config, server_config, temp_dir, wait_for, TestAgent};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Nomad's `/v1/search` example for `"Context": "all"` (its Truncations
/// are written as strings on the page; `SearchResponse.Truncations` is a
/// `map[Context]bool`), with the `Index`, `KnownLeader` and `LastContact`
/// of the `QueryMeta` Nomad's answer embeds.
const PREFIX_SEARCH_EXAMPLE: &str = r#"{
  "Matches": {
    "allocs": null, "deployment": null,
    "evals": ["abc2fdc0-e1fd-2536-67d8-43af8ca798ac"],
    "jobs": ["abcde"], "nodes": null, "plugins": null, "volumes": null
  },
  "Truncations": {
    "allocs": false, "deployment": false, "evals": false, "jobs": false,
    "nodes": false, "plugins": false, "volumes": false
  },
  "Index": 90, "KnownLeader": true, "LastContact": 0
}"#;

/// Nomad's `/v1/search/fuzzy` example for `"Text": "py", "Context": "jobs"`
/// (verbatim but for the job match's scope, which Nomad's code fills with
/// the namespace and the job ID: `score(j.Name, ns, idx, job)`).
const FUZZY_JOBS_EXAMPLE: &str = r#"{
  "Index": 90, "KnownLeader": true, "LastContact": 0,
  "Matches": {
    "services": [
      {"ID": "python-logger", "Scope": ["default", "example-python", "my-spy-app", "my-python-task"]},
      {"ID": "super-spy-service", "Scope": ["default", "example-python", "my-spy-app"]}
    ],
    "tasks": [{"ID": "my-python-task", "Scope": ["default", "example-python", "my-spy-app"]}],
    "images": [{"ID": "python:3", "Scope": ["default", "example-python", "my-spy-app", "my-python-task"]}],
    "jobs": [{"ID": "example-python", "Scope": ["default", "example-python"]}],
    "groups": [{"ID": "my-spy-app", "Scope": ["default", "example-python"]}]
  },
  "Truncations": {"jobs": false}
}"#;

/// Nomad's fuzzy examples for nodes and allocations, and the "all"
/// answer's UUID contexts (always present, possibly empty).
const FUZZY_NODES_EXAMPLE: &str = r#"{
  "Index": 9, "KnownLeader": true, "LastContact": 0,
  "Matches": {"nodes": [{"ID": "nomad-lab1", "Scope": ["c48cd39f-dfe1-9cc0-9c62-617d199854be"]}]},
  "Truncations": {"nodes": false}
}"#;
const FUZZY_ALLOCS_EXAMPLE: &str = r#"{
  "Index": 136, "KnownLeader": true, "LastContact": 0,
  "Matches": {"allocs": [{"ID": "example-python.my-spy-app[0]",
                          "Scope": ["default", "0fb703d1-ba4d-116f-13aa-27f31f046858"]}]},
  "Truncations": {"allocs": false}
}"#;

/// Nomad's `/v1/operator/raft/configuration` example (its `RaftProtocol`
/// is a number on the page; `api.RaftServer.RaftProtocol` is a string).
const RAFT_CONFIGURATION_EXAMPLE: &str = r#"{
  "Index": 1,
  "Servers": [{
    "Address": "127.0.0.1:4647", "ID": "127.0.0.1:4647", "Leader": true,
    "Node": "bacon-mac.global", "RaftProtocol": "2", "Voter": true
  }]
}"#;

/// Nomad's `/v1/agent/self` example: its `member` and the `stats`
/// sections herder answers (`api.AgentSelf`: `Stats
/// map[string]map[string]string`, `Member AgentMember`).
const AGENT_SELF_EXAMPLE: &str = r#"{
  "member": {
    "Addr": "127.0.0.1", "DelegateCur": 4, "DelegateMax": 5, "DelegateMin": 2,
    "Name": "bacon-mac.global", "Port": 4648, "ProtocolCur": 2, "ProtocolMax": 5,
    "ProtocolMin": 1, "Status": "alive",
    "Tags": {"bootstrap": "1", "build": "0.5.0rc1", "dc": "dc1", "port": "4647",
             "region": "global", "role": "nomad", "vsn": "1", "vsn_max": "1", "vsn_min": "1"}
  },
  "stats": {
    "runtime": {"cpu_count": "8", "kernel.name": "darwin", "arch": "amd64",
                "version": "go1.8", "max_procs": "7", "goroutines": "79"},
    "nomad": {"server": "true", "leader": "true", "leader_addr": "127.0.0.1:4647",
              "bootstrap": "false", "known_regions": "1"},
    "raft": {"num_peers": "0", "commit_index": "144", "last_log_index": "144",
             "latest_configuration": "[{Suffrage:Voter ID:127.0.0.1:4647 Address:127.0.0.1:4647}]",
             "applied_index": "144", "protocol_version": "1", "state": "Leader"},
    "client": {"heartbeat_ttl": "17.79568937s", "node_id": "fb2170a8-257d-3c64-b14d-bc06cc94e34c",
               "known_servers": "127.0.0.1:4647", "num_allocations": "0",
               "last_heartbeat": "10.107423052s"}
  }
}"#;

fn example(text: &str) -> Value {
    serde_json::from_str(text).expect("example JSON")
}

/// Asserts `ours` has the kind of `nomad` at every level: every object
/// member herder answers is in Nomad's answer (`extra` lists the ones
/// Nomad's example lacks on purpose) with a value of the same kind.
fn assert_shape(ours: &Value, nomad: &Value, path: &str, extra: &[&str]) {
    match (ours, nomad) {
        (Value::Object(o), Value::Object(n)) => {
            for (k, v) in o {
                match n.get(k) {
                    Some(nv) => assert_shape(v, nv, &format!("{path}.{k}"), extra),
                    None => assert!(
                        extra.contains(&k.as_str()),
                        "{path}.{k} is answered by herder but not by Nomad (value {v})"
                    ),
                }
            }
        }
        (Value::Array(o), Value::Array(n)) => {
            if let (Some(a), Some(b)) = (o.first(), n.first()) {
                assert_shape(a, b, &format!("{path}[0]"), extra);
            }
        }
        (_, Value::Null) | (Value::Null, Value::Array(_)) => {}
        (Value::Number(_), Value::Number(_))
        | (Value::String(_), Value::String(_))
        | (Value::Bool(_), Value::Bool(_)) => {}
        (a, b) => panic!("{path}: herder answers {a}, Nomad {b}"),
    }
}

/// An answer: status, `X-Nomad-Index`, body.
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
    Answer {
        status: response.status(),
        index: response
            .header("X-Nomad-Index")
            .and_then(|v| v.parse().ok()),
        body: response.into_string().unwrap_or_default(),
    }
}

/// A server without scheduling workers: tests see exactly what they wrote.
fn start(dir: &std::path::Path) -> TestAgent {
    let mut config = server_config(dir);
    config.server.num_schedulers = Some(0);
    TestAgent::start(config, false)
}

fn store(agent: &TestAgent) -> &herder::state::StateStore {
    &agent.server.as_ref().expect("server").store
}

/// Registers a job over HTTP: one group, one task of `driver` with
/// `config`.
fn register(agent: &TestAgent, id: &str, group: &str, task: &str, driver: &str, config: Value) {
    let body = json!({"Job": {
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": group, "Count": 1, "Tasks": [{
            "Name": task, "Driver": driver, "Config": config,
            "Resources": {"CPU": 100, "MemoryMB": 64}
        }]}]
    }});
    let a = call("PUT", &agent.url("/v1/jobs"), Some(&body.to_string()));
    assert_eq!(a.status, 200, "{}", a.body);
}

fn add_node(agent: &TestAgent, name: &str) -> Node {
    let node = fixtures::node(name);
    store(agent)
        .apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        })
        .expect("node registered");
    node
}

/// Writes `count` allocations of job `id`'s first group on `node`, as a
/// committed plan would.
fn place(agent: &TestAgent, id: &str, node: &Node, count: u32) -> Vec<Allocation> {
    let snap = store(agent).snapshot();
    let job = snap.job("default", id).expect("job stored").clone();
    let eval = snap.evals_by_job("default", id).next().expect("eval").id;
    let builder = AllocBuilder::new(&job, &job.task_groups[0].name);
    let allocs: Vec<Allocation> = (0..count)
        .map(|i| builder.build(i, node.id, eval, 1))
        .collect();
    store(agent)
        .apply(Command::ApplyPlanResults(PlanResults {
            eval_id: eval,
            job: Some(job),
            node_allocation: HashMap::from([(node.id, allocs.clone())]),
            updated_at: 1,
            ..Default::default()
        }))
        .expect("plan applied");
    allocs
}

#[test]
fn regions_list_the_agents_region() {
    let dir = temp_dir();
    let mut config = server_config(dir.path());
    config.server.num_schedulers = Some(0);
    config.region = "eu-west".into();
    let agent = TestAgent::start(config, false);
    let a = call("GET", &agent.url("/v1/regions"), None);
    assert_eq!(a.status, 200);
    // Nomad's example: ["region1", "region2"].
    assert_shape(&a.json(), &json!(["region1", "region2"]), "", &[]);
    assert_eq!(a.json(), json!(["eu-west"]));
    assert_eq!(
        call("PUT", &agent.url("/v1/regions"), Some("{}")).status,
        405
    );
}

#[test]
fn prefix_search_answers_nomads_shape_and_truncates_at_twenty() {
    let dir = temp_dir();
    let agent = start(dir.path());
    for i in 0..25 {
        register(
            &agent,
            &format!("example-{i:02}"),
            "cache",
            "redis",
            "docker",
            json!({"image": "redis:7"}),
        );
    }
    let url = agent.url("/v1/search");

    let a = call(
        "POST",
        &url,
        Some(r#"{"Prefix": "example-1", "Context": "jobs"}"#),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let answer = a.json();
    assert_shape(&answer, &example(PREFIX_SEARCH_EXAMPLE), "", &[]);
    let jobs: Vec<&str> = answer["Matches"]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(jobs.len(), 10);
    assert_eq!(jobs[0], "example-10");
    assert_eq!(answer["Truncations"], json!({"jobs": false}));
    assert_eq!(Some(answer["Index"].as_u64().unwrap()), a.index);

    let a = call(
        "PUT",
        &url,
        Some(r#"{"Prefix": "example", "Context": "jobs"}"#),
    );
    assert_eq!(a.json()["Matches"]["jobs"].as_array().unwrap().len(), 20);
    assert_eq!(a.json()["Truncations"]["jobs"], true);

    // Every context: a name is not a UUID, so the UUID contexts are left
    // out, as Nomad's index refuses such a prefix.
    let a = call(
        "PUT",
        &url,
        Some(r#"{"Prefix": "example-0", "Context": "all"}"#),
    );
    let answer = a.json();
    let contexts: Vec<&String> = answer["Matches"].as_object().unwrap().keys().collect();
    assert_eq!(
        contexts,
        ["jobs", "namespaces", "plugins", "scaling_policy", "volumes"]
    );
    assert_eq!(answer["Matches"]["namespaces"], Value::Null);
    assert_eq!(answer["Matches"]["jobs"].as_array().unwrap().len(), 10);

    // An evaluation by the first characters of its ID, in "all" as well.
    let eval = store(&agent)
        .snapshot()
        .evals()
        .next()
        .unwrap()
        .id
        .to_string();
    let body = json!({"Prefix": &eval[..5], "Context": "all"}).to_string();
    let answer = call("PUT", &url, Some(&body)).json();
    assert_shape(
        &answer,
        &example(PREFIX_SEARCH_EXAMPLE),
        "",
        &["namespaces", "scaling_policy"],
    );
    assert_eq!(answer["Matches"]["evals"], json!([eval]));
    assert_eq!(answer["Matches"]["allocs"], Value::Null);
    assert_eq!(answer["Truncations"].as_object().unwrap().len(), 9);

    // The namespace: `?namespace=` over the body's, `default` otherwise.
    let other = r#"{"Prefix": "example", "Context": "jobs", "Namespace": "other"}"#;
    assert_eq!(
        call("PUT", &url, Some(other)).json()["Matches"]["jobs"],
        Value::Null
    );
    let a = call(
        "PUT",
        &agent.url("/v1/search?namespace=default"),
        Some(other),
    );
    assert_eq!(a.json()["Matches"]["jobs"].as_array().unwrap().len(), 20);
    let all = r#"{"Prefix": "example-24", "Context": "jobs", "Namespace": "*"}"#;
    assert_eq!(
        call("PUT", &url, Some(all)).json()["Matches"]["jobs"],
        json!(["example-24"])
    );

    // Errors: Nomad's messages, as 400s.
    let a = call(
        "PUT",
        &url,
        Some(r#"{"Prefix": "example", "Context": "job"}"#),
    );
    assert_eq!(a.status, 400);
    assert_eq!(
        a.body,
        "context must be one of [allocs jobs nodes evals deployment plugins volumes \
         scaling_policy namespaces] or 'all' for all contexts; got \"job\""
    );
    assert_eq!(
        call("PUT", &url, Some(r#"{"Prefix": "example"}"#)).status,
        400
    );
    assert_eq!(
        call("PUT", &url, Some(r#"{"Prefix": 5, "Context": "jobs"}"#)).status,
        400
    );
    assert_eq!(call("PUT", &url, Some("{nope")).status, 400);
    assert_eq!(call("PUT", &url, Some("")).status, 400);
    assert_eq!(call("GET", &url, None).status, 405);
    // A null member is left out, as everywhere in Nomad's API.
    let a = call(
        "PUT",
        &url,
        Some(r#"{"Prefix": null, "Context": "jobs", "Namespace": null}"#),
    );
    assert_eq!(a.json()["Matches"]["jobs"].as_array().unwrap().len(), 20);
}

#[test]
fn fuzzy_search_answers_jobs_groups_tasks_allocations_and_nodes_with_scopes() {
    let dir = temp_dir();
    let agent = start(dir.path());
    register(
        &agent,
        "example-python",
        "my-spy-app",
        "my-python-task",
        "docker",
        json!({"image": "python:3"}),
    );
    register(
        &agent,
        "example",
        "cache",
        "redis",
        "raw_exec",
        json!({"command": "/bin/sleep"}),
    );
    let node = add_node(&agent, "nomad-lab1");
    let allocs = place(&agent, "example-python", &node, 1);
    let url = agent.url("/v1/search/fuzzy");

    let a = call("POST", &url, Some(r#"{"Text": "py", "Context": "jobs"}"#));
    assert_eq!(a.status, 200, "{}", a.body);
    let answer = a.json();
    assert_shape(&answer, &example(FUZZY_JOBS_EXAMPLE), "", &[]);
    assert_eq!(
        answer["Matches"],
        json!({
            "jobs": [{"ID": "example-python", "Scope": ["default", "example-python"]}],
            "groups": [{"ID": "my-spy-app", "Scope": ["default", "example-python"]}],
            "tasks": [{"ID": "my-python-task", "Scope": ["default", "example-python", "my-spy-app"]}],
            "images": [{"ID": "python:3",
                        "Scope": ["default", "example-python", "my-spy-app", "my-python-task"]}],
        })
    );
    assert_eq!(answer["Truncations"], json!({"jobs": false}));
    assert_eq!(Some(answer["Index"].as_u64().unwrap()), a.index);

    // What python-nomad's test looks for; the exact name comes first.
    let answer = call(
        "PUT",
        &url,
        Some(r#"{"Text": "EXAMPLE", "Context": "jobs"}"#),
    )
    .json();
    let ids: Vec<&str> = answer["Matches"]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["ID"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["example", "example-python"]);
    let commands = call("PUT", &url, Some(r#"{"Text": "sleep", "Context": "jobs"}"#)).json();
    assert_eq!(
        commands["Matches"]["commands"],
        json!([{"ID": "/bin/sleep", "Scope": ["default", "example", "cache", "redis"]}])
    );

    let answer = call("PUT", &url, Some(r#"{"Text": "lab", "Context": "nodes"}"#)).json();
    assert_shape(&answer, &example(FUZZY_NODES_EXAMPLE), "", &[]);
    assert_eq!(
        answer["Matches"]["nodes"],
        json!([{"ID": "nomad-lab1", "Scope": [node.id.to_string()]}])
    );
    let answer = call("PUT", &url, Some(r#"{"Text": "spy", "Context": "allocs"}"#)).json();
    assert_shape(&answer, &example(FUZZY_ALLOCS_EXAMPLE), "", &[]);
    assert_eq!(
        answer["Matches"]["allocs"],
        json!([{"ID": "example-python.my-spy-app[0]",
                "Scope": ["default", allocs[0].id.to_string()]}])
    );

    // Every context: the UUID ones are prefix-matched and always present.
    let answer = call("PUT", &url, Some(r#"{"Text": "spy", "Context": "all"}"#)).json();
    for ctx in ["evals", "deployment", "volumes", "scaling_policy"] {
        assert_eq!(answer["Matches"][ctx], json!([]), "{ctx}");
    }
    assert!(answer["Matches"].get("nodes").is_none(), "no node matched");
    assert_eq!(answer["Matches"]["allocs"].as_array().unwrap().len(), 1);
    assert_eq!(answer["Truncations"].as_object().unwrap().len(), 9);

    // Errors.
    let a = call("PUT", &url, Some(r#"{"Text": "e", "Context": "jobs"}"#));
    assert_eq!(a.status, 400);
    assert_eq!(
        a.body,
        "fuzzy search query must be at least 2 characters, got 1"
    );
    assert_eq!(
        call("PUT", &url, Some(r#"{"Context": "jobs"}"#)).status,
        400
    );
    let a = call(
        "PUT",
        &url,
        Some(r#"{"Text": "example", "Context": "job"}"#),
    );
    assert_eq!(a.status, 400);
    assert!(a.body.starts_with("context must be one of"), "{}", a.body);
    assert_eq!(
        call("PUT", &url, Some(r#"{"Text": ["x"], "Context": "jobs"}"#)).status,
        400
    );
    assert_eq!(call("GET", &url, None).status, 405);
}

#[test]
fn reconciling_summaries_repairs_them_durably() {
    let dir = temp_dir();
    let agent = start(dir.path());
    register(
        &agent,
        "web",
        "g",
        "t",
        "raw_exec",
        json!({"command": "/bin/sleep"}),
    );
    let node = add_node(&agent, "n1");
    let old = place(&agent, "web", &node, 2);
    // Purged and registered again: the first job's allocations still
    // report, and count in the new job's summary (hashicorp/nomad#2304).
    assert_eq!(
        call("DELETE", &agent.url("/v1/job/web?purge=true"), None).status,
        200
    );
    register(
        &agent,
        "web",
        "g",
        "t",
        "raw_exec",
        json!({"command": "/bin/sleep"}),
    );
    place(&agent, "web", &node, 1);
    store(&agent)
        .apply(Command::AllocClientUpdate {
            updates: vec![AllocClientUpdate {
                id: old[0].id,
                client_status: ClientStatus::Running,
                modify_time: 5,
                ..Default::default()
            }],
            evals: vec![],
        })
        .expect("client update");
    let summary = |agent: &TestAgent| {
        let s = call("GET", &agent.url("/v1/job/web/summary"), None).json();
        (
            s["Summary"]["g"]["Starting"].clone(),
            s["Summary"]["g"]["Running"].clone(),
        )
    };
    assert_eq!(summary(&agent), (json!(0), json!(1)), "drifted");

    let url = agent.url("/v1/system/reconcile/summaries");
    let a = call("PUT", &url, None);
    assert_eq!((a.status, a.body.as_str()), (200, ""));
    assert_eq!(summary(&agent), (json!(1), json!(0)), "recounted");
    assert_eq!(
        call("POST", &url, None).status,
        200,
        "unchanged: nothing to write"
    );
    assert_eq!(call("GET", &url, None).status, 405);

    agent.stop();
    let agent = start(dir.path());
    assert_eq!(summary(&agent), (json!(1), json!(0)), "after a restart");
}

#[test]
fn agent_self_stats_are_maps_of_strings_and_the_agent_endpoints_answer() {
    let agent = TestAgent::start(dev_config(), true);
    let node_id = wait_for(Duration::from_secs(30), || {
        let nodes = call("GET", &agent.url("/v1/nodes"), None).json();
        nodes[0]["ID"].as_str().map(str::to_string)
    })
    .expect("the dev client registered its node");

    let a = call("GET", &agent.url("/v1/agent/self"), None);
    assert_eq!(a.status, 200);
    let me = a.json();
    // What the Go API decodes: every stats value a string.
    for (section, values) in me["stats"].as_object().expect("stats") {
        for (key, value) in values.as_object().expect("a section is a map") {
            assert!(value.is_string(), "stats.{section}.{key} = {value}");
        }
    }
    assert_shape(
        &me["stats"],
        &example(AGENT_SELF_EXAMPLE)["stats"],
        "stats",
        &["agent"],
    );
    // Nomad 1.1's servers tag their member with these as well
    // (nomad/server.go, setupSerf); the example predates them.
    let tags = ["expect", "raft_vsn"];
    assert_shape(
        &me["member"],
        &example(AGENT_SELF_EXAMPLE)["member"],
        "member",
        &tags,
    );
    assert_eq!(me["stats"]["client"]["node_id"], node_id.as_str());
    assert_eq!(me["stats"]["nomad"]["leader"], "true");
    let address = agent.addr.to_string();
    assert_eq!(me["stats"]["nomad"]["leader_addr"], address.as_str());
    assert_eq!(me["member"]["Addr"], agent.addr.ip().to_string());
    assert_eq!(me["member"]["Port"], agent.addr.port());
    assert_eq!(me["config"]["Region"], "global");

    let servers = call("GET", &agent.url("/v1/agent/servers"), None);
    assert_eq!(servers.json(), json!([address]));
    let join = call("PUT", &agent.url("/v1/agent/join?address=nope"), None);
    assert_eq!(join.status, 200);
    assert_eq!(join.json()["num_joined"], 0);
    assert!(join.json()["error"].as_str().unwrap().contains("nope"));
    assert_eq!(call("PUT", &agent.url("/v1/agent/join"), None).status, 400);
    let leave = call("POST", &agent.url("/v1/agent/force-leave?node=nope"), None);
    assert_eq!((leave.status, leave.body.as_str()), (200, ""));
    assert_eq!(
        call("POST", &agent.url("/v1/agent/force-leave"), None).status,
        400
    );
    assert_eq!(
        call("GET", &agent.url("/v1/agent/join?address=x"), None).status,
        405
    );
}

#[test]
fn raft_configuration_and_peers_name_this_server_as_the_only_voter() {
    let dir = temp_dir();
    let agent = start(dir.path());
    let a = call("GET", &agent.url("/v1/operator/raft/configuration"), None);
    assert_eq!(a.status, 200, "{}", a.body);
    let config = a.json();
    assert_shape(&config, &example(RAFT_CONFIGURATION_EXAMPLE), "", &[]);
    let servers = config["Servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1);
    let me = &servers[0];
    // Servers are named by their RPC address (`ports.rpc`, 4647), as in
    // Nomad, whatever the HTTP port.
    let address = me["Address"].as_str().unwrap_or_default().to_string();
    assert!(address.ends_with(":4647"), "{address}");
    assert_eq!(me["Address"], address.as_str());
    assert_eq!(me["ID"], address.as_str());
    assert_eq!(
        (me["Leader"].clone(), me["Voter"].clone()),
        (json!(true), json!(true))
    );
    let members = call("GET", &agent.url("/v1/agent/members"), None).json();
    assert_eq!(me["Node"], members["Members"][0]["Name"]);

    let peers = call("GET", &agent.url("/v1/status/peers"), None).json();
    assert_eq!(peers, json!([address]));
    let leader = call("GET", &agent.url("/v1/status/leader"), None).json();
    assert_eq!(leader, json!(address));
    // The server answers the other agent endpoints a client-less agent
    // cannot: 501, as Nomad.
    assert_eq!(
        call("GET", &agent.url("/v1/agent/servers"), None).status,
        501
    );
    assert_eq!(
        call(
            "PUT",
            &agent.url("/v1/operator/raft/configuration"),
            Some("{}")
        )
        .status,
        405
    );
    assert_eq!(
        call("GET", &agent.url("/v1/operator/raft/nope"), None).status,
        404
    );
}
