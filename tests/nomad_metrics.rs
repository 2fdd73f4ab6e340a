//! Nomad's metric names end to end: a dev agent (server and client) runs a
//! job, and `/v1/metrics` answers, in Prometheus' text and in Nomad's JSON,
//! the names, labels and types a dashboard built for Nomad queries, with
//! the values the cluster has (docs/METRICS.md is the table):
//!
//! - the leader's figures: job summaries per task group, jobs by status,
//!   broker, blocked evaluations, plan queue, heartbeat timers, the state
//!   index; timers as summaries in milliseconds;
//! - the client's: allocations by status, allocated and free resources,
//!   task transitions;
//! - a stopped job's figures drop to zero, a purged job's disappear;
//! - herder's own names are still there.

use herder_tests::{dev_config, get, send_json, wait_for, TestAgent};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Generous: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(45);

/// One sample of the Prometheus text.
#[derive(Debug)]
struct Series {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The scrape: every sample, and every family's declared type.
struct Scrape {
    text: String,
    series: Vec<Series>,
    types: HashMap<String, String>,
}

impl Scrape {
    fn read(agent: &TestAgent) -> Scrape {
        let (code, text) = get(&agent.url("/v1/metrics?format=prometheus"));
        assert_eq!(code, 200, "{text}");
        let mut types = HashMap::new();
        let mut series = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
                let before = types.insert(name.to_string(), kind.to_string());
                assert!(before.is_none(), "{name} declared twice:\n{text}");
                continue;
            }
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            series.push(parse(line).unwrap_or_else(|| panic!("bad sample line {line:?}")));
        }
        Scrape {
            text,
            series,
            types,
        }
    }

    /// The samples of `name` whose labels include every one of `labels`.
    fn find<'a>(&'a self, name: &'a str, labels: &'a [(&str, &str)]) -> Vec<&'a Series> {
        self.series
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The one value of `name` with `labels`, if exactly one series matches.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        match self.find(name, labels).as_slice() {
            [one] => Some(one.value),
            _ => None,
        }
    }

    fn kind(&self, name: &str) -> Option<&str> {
        self.types.get(name).map(String::as_str)
    }
}

/// `name{k="v",...} value`.
fn parse(line: &str) -> Option<Series> {
    let (series, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, mut rest) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (series, ""),
    };
    let mut labels = BTreeMap::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut v = String::new();
        let mut end = None;
        let mut chars = after.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => v.push(chars.next()?.1),
                '"' => {
                    end = Some(i);
                    break;
                }
                c => v.push(c),
            }
        }
        labels.insert(key.to_string(), v);
        rest = after[end? + 1..].trim_start_matches(',');
    }
    Some(Series {
        name: name.to_string(),
        labels,
        value,
    })
}

fn get_json(agent: &TestAgent, path: &str) -> Value {
    let (code, body) = get(&agent.url(path));
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// A service job of `count` mock tasks that run for an hour.
fn register(agent: &TestAgent, id: &str, count: u32) {
    let job = json!({"Job": {
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1h"},
            "Resources": {"CPU": 100, "MemoryMB": 64}
        }]}]
    }});
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &job);
    assert_eq!(code, 200, "register {id}: {body}");
}

/// Scrapes until `check` holds (the figures are published once a second).
fn scrape_until(agent: &TestAgent, what: &str, check: impl Fn(&Scrape) -> bool) -> Scrape {
    let mut last = None;
    let found = wait_for(WAIT, || {
        let scrape = Scrape::read(agent);
        if check(&scrape) {
            return Some(scrape);
        }
        last = Some(scrape.text);
        std::thread::sleep(Duration::from_millis(200));
        None
    });
    found.unwrap_or_else(|| panic!("{what}; last scrape:\n{}", last.unwrap_or_default()))
}

#[test]
fn a_nomad_dashboards_queries_find_their_figures() {
    let agent = TestAgent::start(dev_config(), true);
    register(&agent, "web", 2);
    let web = [
        ("job", "web"),
        ("task_group", "g"),
        ("namespace", "default"),
    ];

    // Leader: the job's summary and status, once both allocations run.
    let scrape = scrape_until(&agent, "web's two allocations never ran", |s| {
        s.value("nomad_nomad_job_summary_running", &web) == Some(2.0)
            && s.value("nomad_client_allocations_running", &[]) == Some(2.0)
            && s.find("nomad_client_allocs_running", &[("job", "web")])
                .len()
                == 2
    });
    for (figure, want) in [
        ("queued", 0.0),
        ("starting", 0.0),
        ("complete", 0.0),
        ("failed", 0.0),
        ("lost", 0.0),
    ] {
        let name = format!("nomad_nomad_job_summary_{figure}");
        assert_eq!(scrape.value(&name, &web), Some(want), "{name}");
        assert_eq!(scrape.kind(&name), Some("gauge"));
    }
    assert_eq!(
        scrape.value("nomad_nomad_job_status_running", &[]),
        Some(1.0)
    );
    assert_eq!(
        scrape.value("nomad_nomad_job_status_pending", &[]),
        Some(0.0)
    );
    assert_eq!(scrape.value("nomad_nomad_job_status_dead", &[]), Some(0.0));

    // Leader: queues (settled: nothing waits), heartbeats, the state index.
    for name in [
        "nomad_nomad_broker_total_ready",
        "nomad_nomad_broker_total_unacked",
        "nomad_nomad_broker_total_blocked",
        "nomad_nomad_broker_total_waiting",
        "nomad_nomad_blocked_evals_total_blocked",
        "nomad_nomad_blocked_evals_total_escaped",
        "nomad_nomad_plan_queue_depth",
    ] {
        let v = scrape.value(name, &[]);
        assert!(v.is_some_and(|v| v >= 0.0), "{name}: {v:?}");
        assert_eq!(scrape.kind(name), Some("gauge"), "{name}");
    }
    assert_eq!(
        scrape.value("nomad_nomad_broker_service_ready", &[]),
        Some(0.0),
        "a scheduler's queue once used, now empty, reads 0"
    );
    assert_eq!(scrape.value("nomad_nomad_heartbeat_active", &[]), Some(1.0));
    assert!(scrape
        .value("nomad_state_snapshotIndex", &[])
        .is_some_and(|i| i > 0.0));

    // Timers: summaries in milliseconds, with the quantiles Nomad's
    // Prometheus sink has and their sum and count.
    for name in [
        "nomad_nomad_plan_apply",
        "nomad_nomad_plan_submit",
        "nomad_nomad_worker_dequeue_eval",
        "nomad_nomad_worker_invoke_scheduler_service",
        "nomad_nomad_worker_submit_plan",
        "nomad_nomad_worker_send_ack",
    ] {
        assert_eq!(scrape.kind(name), Some("summary"), "{name}");
        let count = scrape.value(&format!("{name}_count"), &[]);
        assert!(count.is_some_and(|c| c >= 1.0), "{name}_count: {count:?}");
        let sum = scrape.value(&format!("{name}_sum"), &[]);
        assert!(sum.is_some_and(|s| s >= 0.0), "{name}_sum: {sum:?}");
        for q in ["0.5", "0.9", "0.99"] {
            assert!(
                scrape.value(name, &[("quantile", q)]).is_some(),
                "{name} quantile {q}"
            );
        }
    }
    let herder_sum = scrape.value("herder_plan_apply_seconds_sum", &[]);
    let nomad_sum = scrape.value("nomad_nomad_plan_apply_sum", &[]);
    assert!(
        matches!((herder_sum, nomad_sum), (Some(s), Some(ms)) if (s * 1000.0 - ms).abs() < 1e-6),
        "plan.apply in ms: herder {herder_sum:?} s, nomad {nomad_sum:?} ms"
    );
    assert_eq!(scrape.kind("nomad_nomad_rpc_request"), Some("counter"));
    assert!(scrape
        .value("nomad_nomad_rpc_request", &[])
        .is_some_and(|n| n >= 1.0));
    assert!(scrape
        .value("nomad_runtime_alloc_bytes", &[])
        .is_some_and(|b| b > 1e6));

    // Client: its node's labels, allocations, resources.
    let nodes = get_json(&agent, "/v1/nodes");
    let node_id = nodes[0]["ID"].as_str().expect("node ID").to_string();
    let node = get_json(&agent, &format!("/v1/node/{node_id}"));
    let node_labels = [
        ("node_id", node_id.as_str()),
        ("datacenter", "dc1"),
        ("node_status", "ready"),
        ("node_scheduling_eligibility", "eligible"),
    ];
    assert_eq!(
        scrape.value("nomad_client_allocations_running", &node_labels),
        Some(2.0)
    );
    assert_eq!(
        scrape.value("nomad_client_allocations_pending", &node_labels),
        Some(0.0)
    );
    assert_eq!(
        scrape.value("nomad_client_allocations_terminal", &node_labels),
        Some(0.0)
    );
    assert_eq!(
        scrape.value("nomad_client_allocated_cpu", &node_labels),
        Some(200.0)
    );
    assert_eq!(
        scrape.value("nomad_client_allocated_memory", &node_labels),
        Some(128.0)
    );
    let cpu = node["NodeResources"]["Cpu"]["CpuShares"]
        .as_f64()
        .unwrap_or(0.0)
        - node["ReservedResources"]["Cpu"]["CpuShares"]
            .as_f64()
            .unwrap_or(0.0);
    assert_eq!(
        scrape.value("nomad_client_unallocated_cpu", &node_labels),
        Some(cpu - 200.0)
    );
    let allocs = get_json(&agent, "/v1/job/web/allocations");
    for a in allocs.as_array().into_iter().flatten() {
        let id = a["ID"].as_str().unwrap_or_default();
        let started = scrape.value(
            "nomad_client_allocs_running",
            &[("alloc_id", id), ("task", "t"), ("task_group", "g")],
        );
        assert!(started.is_some_and(|n| n >= 1.0), "{id}: {started:?}");
    }
    assert_eq!(scrape.kind("nomad_client_allocs_running"), Some("counter"));

    // Every Nomad-named series carries Nomad's host label; herder's own
    // names are still there.
    for s in scrape
        .series
        .iter()
        .filter(|s| s.name.starts_with("nomad_"))
    {
        assert!(s.labels.contains_key("host"), "{s:?}");
    }
    assert!(scrape.value("herder_broker_total_ready", &[]).is_some());

    // The JSON answer: Nomad's dotted names and its shapes.
    let metrics = get_json(&agent, "/v1/metrics");
    let running = metrics["Gauges"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["Name"] == "nomad.nomad.job_summary.running" && g["Labels"]["job"] == "web")
        .cloned()
        .unwrap_or_default();
    assert_eq!(running["Value"], 2.0, "{metrics}");
    assert_eq!(running["Labels"]["task_group"], "g");
    let apply = metrics["Samples"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["Name"] == "nomad.nomad.plan.apply")
        .cloned()
        .unwrap_or_default();
    assert!(
        apply["Count"].as_f64().is_some_and(|c| c >= 1.0),
        "{metrics}"
    );
    assert!(metrics["Gauges"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|g| g["Name"] == "nomad.client.allocations.running"));

    // Stopped: the job's allocations end, its figures follow.
    let r = ureq::delete(&agent.url("/v1/job/web"))
        .timeout(Duration::from_secs(30))
        .call();
    assert!(r.is_ok(), "stopping web: {r:?}");
    let scrape = scrape_until(&agent, "web's figures never followed its stop", |s| {
        s.value("nomad_nomad_job_summary_running", &web) == Some(0.0)
            && s.value("nomad_client_allocations_running", &[]) == Some(0.0)
            && s.value("nomad_client_allocated_cpu", &[]) == Some(0.0)
    });
    assert_eq!(scrape.value("nomad_nomad_job_status_dead", &[]), Some(1.0));
    assert_eq!(
        scrape.value("nomad_nomad_job_status_running", &[]),
        Some(0.0)
    );

    // Purged: no series of it is left behind.
    let r = ureq::delete(&agent.url("/v1/job/web?purge=true"))
        .timeout(Duration::from_secs(30))
        .call();
    assert!(r.is_ok(), "purging web: {r:?}");
    scrape_until(&agent, "a purged job's summary stayed", |s| {
        s.find("nomad_nomad_job_summary_running", &[("job", "web")])
            .is_empty()
            && s.value("nomad_nomad_job_status_dead", &[]) == Some(0.0)
    });
    agent.stop();
}
