//! Deployments end to end, with real `raw_exec` tasks on a dev agent: each
//! task runs a tiny HTTP server (python3's) and the group's service has an
//! `http` check against it, so an allocation is healthy only once the
//! server answers, as in a real rollout.
//!
//! - version 2 of a 5-allocation service rolls two at a time, each batch
//!   waiting for the previous one's health, and ends `successful` with the
//!   version marked stable;
//! - a canary of version 3 is placed beside the old allocations, waits for
//!   promotion, then the rest rolls;
//! - a version whose task exits at once fails its deployment at its
//!   progress deadline and the job goes back to the stable version, while the old allocations keep
//!   serving (never all down at once).

use herder_tests::{dev_config, get, send_json, wait_for, TestAgent};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Generous: the machine is small and shared, and each batch waits for a
/// check to pass for `min_healthy_time`.
const WAIT: Duration = Duration::from_secs(180);
const SECOND: u64 = 1_000_000_000;

/// The job: `count` allocations of a python3 HTTP server on a dynamic
/// port with an http check; `version` goes into the task's env, so
/// changing it is a destructive update; `script` replaces the server.
fn web_job(version: &str, canary: u32, script: Option<&str>) -> Value {
    let default_script =
        "exec python3 -m http.server \"$NOMAD_PORT_http\" --bind 127.0.0.1".to_string();
    let script = script.map_or(default_script, str::to_string);
    json!({
        "ID": "web", "Name": "web", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "web", "Count": 5,
            "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
            "Services": [{
                "Name": "web", "PortLabel": "http", "Provider": "nomad",
                "Checks": [{
                    "Name": "alive", "Type": "http", "Path": "/",
                    "Interval": SECOND, "Timeout": SECOND
                }]
            }],
            "Update": {
                "MaxParallel": 2, "HealthCheck": "checks",
                "MinHealthyTime": SECOND, "HealthyDeadline": 30 * SECOND,
                "ProgressDeadline": 45 * SECOND, "AutoRevert": true,
                "Canary": canary
            },
            "RestartPolicy": {"Attempts": 0, "Mode": "fail", "Interval": 60 * SECOND, "Delay": SECOND},
            "ReschedulePolicy": {"Unlimited": true, "Delay": 5 * SECOND, "DelayFunction": "constant"},
            "Tasks": [{
                "Name": "server", "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", script]},
                "Env": {"WEB_VERSION": version},
                "Resources": {"CPU": 20, "MemoryMB": 32}
            }]
        }]
    })
}

fn get_json(url: &str) -> Value {
    let (code, body) = get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

fn register(agent: &TestAgent, job: &Value) -> Value {
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &json!({ "Job": job }));
    assert_eq!(code, 200, "register: {body}");
    serde_json::from_str(&body).expect("register answer")
}

fn job_version(agent: &TestAgent) -> u64 {
    get_json(&agent.url("/v1/job/web"))["Version"]
        .as_u64()
        .expect("job version")
}

/// The job's latest deployment, once it is for `version`.
fn deployment_for(agent: &TestAgent, version: u64) -> Value {
    wait_for(WAIT, || {
        let d = get_json(&agent.url("/v1/job/web/deployment"));
        (d["JobVersion"].as_u64() == Some(version)).then_some(d)
    })
    .unwrap_or_else(|| panic!("no deployment for version {version}"))
}

/// Waits until the deployment `id` has `status`; answers it.
fn wait_status(agent: &TestAgent, id: &str, status: &str) -> Value {
    let mut last = Value::Null;
    wait_for(WAIT, || {
        last = get_json(&agent.url(&format!("/v1/deployment/{id}")));
        (last["Status"] == status).then(|| last.clone())
    })
    .unwrap_or_else(|| {
        panic!(
            "deployment {id} never {status}: {last:#}\nallocations:\n{}",
            explain(agent)
        )
    })
}

/// One line per allocation of the job, for a failure's message.
fn explain(agent: &TestAgent) -> String {
    let allocs = get_json(&agent.url("/v1/job/web/allocations"));
    let mut lines: Vec<String> = allocs
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            format!(
                "{} v{} {}/{} health={} created={} modified={} {}",
                a["Name"].as_str().unwrap_or(""),
                a["JobVersion"],
                a["DesiredStatus"].as_str().unwrap_or(""),
                a["ClientStatus"].as_str().unwrap_or(""),
                a["DeploymentStatus"]["Healthy"],
                a["CreateTime"],
                a["ModifyTime"],
                a["DesiredDescription"].as_str().unwrap_or(""),
            )
        })
        .collect();
    lines.sort();
    let evals = get_json(&agent.url("/v1/job/web/evaluations"));
    for e in evals.as_array().into_iter().flatten() {
        lines.push(format!(
            "eval {} {} {} wait_until={} create_index={} modify={}",
            e["TriggeredBy"].as_str().unwrap_or(""),
            e["Status"].as_str().unwrap_or(""),
            e["DeploymentID"].as_str().unwrap_or(""),
            e["WaitUntil"],
            e["CreateIndex"],
            e["ModifyTime"],
        ));
    }
    let deployments = get_json(&agent.url("/v1/job/web/deployments"));
    for d in deployments.as_array().into_iter().flatten() {
        let g = &d["TaskGroups"]["web"];
        lines.push(format!(
            "deployment {} v{} {} desired={} placed={} healthy={} unhealthy={} modify={}",
            d["ID"].as_str().unwrap_or(""),
            d["JobVersion"],
            d["Status"].as_str().unwrap_or(""),
            g["DesiredTotal"],
            g["PlacedAllocs"],
            g["HealthyAllocs"],
            g["UnhealthyAllocs"],
            d["ModifyIndex"],
        ));
    }
    lines.join("\n")
}

/// What a watcher saw of the job's allocations over time.
#[derive(Default)]
struct Observed {
    /// Per sample: running allocations of each job version.
    samples: Vec<BTreeMap<u64, usize>>,
    /// The most allocations of a version seen placed but not yet healthy
    /// at once, per version.
    most_unhealthy_in_flight: BTreeMap<u64, usize>,
}

/// Samples the job's allocations every 100 ms until stopped.
struct Watcher {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Observed>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn start(agent: &TestAgent) -> Watcher {
        let url = agent.url("/v1/job/web/allocations");
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Observed::default()));
        let (s, o) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let (200, body) = get(&url) {
                    if let Ok(Value::Array(allocs)) = serde_json::from_str(&body) {
                        record(&mut o.lock().unwrap(), &allocs);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Watcher {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Observed {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

fn record(o: &mut Observed, allocs: &[Value]) {
    let live = |a: &&Value| a["DesiredStatus"] == "run" && a["ClientStatus"] != "failed";
    let mut running = BTreeMap::new();
    let mut in_flight: BTreeMap<u64, usize> = BTreeMap::new();
    for a in allocs.iter().filter(live) {
        let version = a["JobVersion"].as_u64().unwrap_or(0);
        if a["ClientStatus"] == "running" {
            *running.entry(version).or_insert(0) += 1;
        }
        // A list entry names no deployment (Nomad's stub); an allocation of
        // the version being rolled without a health verdict is in flight.
        if a["DeploymentStatus"]["Healthy"].as_bool().is_none() {
            *in_flight.entry(version).or_insert(0) += 1;
        }
    }
    for (v, n) in in_flight {
        let most = o.most_unhealthy_in_flight.entry(v).or_insert(0);
        *most = (*most).max(n);
    }
    o.samples.push(running);
}

/// Every allocation of the job that should run: all of `version`, healthy.
fn wait_all_healthy(agent: &TestAgent, version: u64) {
    let url = agent.url("/v1/job/web/allocations");
    let mut last = Value::Null;
    wait_for(WAIT, || {
        last = get_json(&url);
        let live: Vec<&Value> = last
            .as_array()?
            .iter()
            .filter(|a| a["DesiredStatus"] == "run")
            // A failed allocation that was replaced stays "run" (Nomad).
            .filter(|a| {
                !["failed", "complete", "lost"].contains(&a["ClientStatus"].as_str().unwrap_or(""))
            })
            .collect();
        let done = live.len() == 5
            && live.iter().all(|a| {
                a["JobVersion"].as_u64() == Some(version)
                    && a["ClientStatus"] == "running"
                    && a["DeploymentStatus"]["Healthy"] == true
            });
        done.then_some(())
    })
    .unwrap_or_else(|| panic!("version {version} never all healthy: {last:#}"));
}

fn dev_agent() -> TestAgent {
    TestAgent::start(dev_config(), true)
}

#[test]
fn a_new_version_rolls_two_at_a_time_on_health_and_becomes_stable() {
    let agent = dev_agent();
    register(&agent, &web_job("1", 0, None));
    let first = deployment_for(&agent, 0);
    wait_status(&agent, first["ID"].as_str().unwrap(), "successful");
    wait_all_healthy(&agent, 0);

    let watcher = Watcher::start(&agent);
    register(&agent, &web_job("2", 0, None));
    let d = deployment_for(&agent, 1);
    let id = d["ID"].as_str().unwrap().to_string();
    let done = wait_status(&agent, &id, "successful");
    wait_all_healthy(&agent, 1);
    let seen = watcher.finish();

    let g = &done["TaskGroups"]["web"];
    assert_eq!(g["DesiredTotal"], 5);
    assert_eq!(g["HealthyAllocs"], 5);
    assert_eq!(
        done["StatusDescription"],
        "Deployment completed successfully"
    );
    let most = seen.most_unhealthy_in_flight.get(&1).copied().unwrap_or(0);
    assert!(
        (1..=2).contains(&most),
        "at most max_parallel (2) new allocations await health at once; saw {most}"
    );
    for sample in &seen.samples {
        let serving: usize = sample.values().sum();
        assert!(
            serving >= 3,
            "count 5 - max_parallel 2 keep serving: {sample:?}"
        );
    }
    let versions = get_json(&agent.url("/v1/job/web/versions"));
    let v1 = versions["Versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["Version"] == 1)
        .expect("version 1 listed");
    assert_eq!(
        v1["Stable"], true,
        "a successful deployment marks its version stable"
    );
    agent.stop();
}

#[test]
fn a_canary_waits_beside_the_old_version_for_promotion_then_the_rest_rolls() {
    let agent = dev_agent();
    register(&agent, &web_job("1", 1, None));
    wait_status(
        &agent,
        deployment_for(&agent, 0)["ID"].as_str().unwrap(),
        "successful",
    );
    wait_all_healthy(&agent, 0);

    register(&agent, &web_job("2", 1, None));
    let d = deployment_for(&agent, 1);
    let id = d["ID"].as_str().unwrap().to_string();
    // The canary becomes healthy; the deployment then waits for a human.
    let waiting = wait_for(WAIT, || {
        let d = get_json(&agent.url(&format!("/v1/deployment/{id}")));
        let g = &d["TaskGroups"]["web"];
        (g["HealthyAllocs"] == 1).then_some(d)
    })
    .expect("the canary becomes healthy");
    assert_eq!(waiting["Status"], "running");
    assert_eq!(
        waiting["StatusDescription"],
        "Deployment is running but requires manual promotion"
    );
    assert_eq!(
        waiting["TaskGroups"]["web"]["PlacedCanaries"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    std::thread::sleep(Duration::from_secs(2));
    let allocs = get_json(&agent.url("/v1/job/web/allocations"));
    let live: Vec<&Value> = allocs
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["DesiredStatus"] == "run")
        .collect();
    let old = live.iter().filter(|a| a["JobVersion"] == 0).count();
    let new = live.iter().filter(|a| a["JobVersion"] == 1).count();
    assert_eq!(
        (old, new),
        (5, 1),
        "the canary runs beside all the old allocations"
    );

    let (code, body) = send_json(
        "PUT",
        &agent.url(&format!("/v1/deployment/promote/{id}")),
        None,
        &json!({"DeploymentID": id, "All": true}),
    );
    assert_eq!(code, 200, "promote: {body}");
    wait_status(&agent, &id, "successful");
    wait_all_healthy(&agent, 1);
    agent.stop();
}

#[test]
fn a_version_that_cannot_start_fails_and_reverts_to_the_stable_one() {
    let agent = dev_agent();
    register(&agent, &web_job("1", 0, None));
    wait_status(
        &agent,
        deployment_for(&agent, 0)["ID"].as_str().unwrap(),
        "successful",
    );
    wait_all_healthy(&agent, 0);

    let watcher = Watcher::start(&agent);
    register(&agent, &web_job("2", 0, Some("exit 1")));
    let d = deployment_for(&agent, 1);
    let failed = wait_status(&agent, d["ID"].as_str().unwrap(), "failed");
    // With a progress deadline, an unhealthy allocation is replaced and the
    // deployment fails when the deadline passes without progress (Nomad).
    assert_eq!(
        failed["StatusDescription"],
        "Failed due to progress deadline - rolling back to job version 0"
    );
    // The revert is a new version with version 0's spec, deployed in turn.
    wait_for(WAIT, || (job_version(&agent) == 2).then_some(()))
        .expect("the job is reverted as version 2");
    let reverted = get_json(&agent.url("/v1/job/web"));
    assert_eq!(
        reverted["TaskGroups"][0]["Tasks"][0]["Env"]["WEB_VERSION"],
        "1"
    );
    // Every allocation runs the reverted version, is healthy again, and the
    // revert's own deployment succeeds: the allocations updated in place
    // into it start its progress deadline when they join it, not when they
    // were first placed (which once failed it at once).
    wait_all_healthy(&agent, 2);
    let revert = deployment_for(&agent, 2);
    wait_status(&agent, revert["ID"].as_str().unwrap(), "successful");
    let seen = watcher.finish();
    for sample in &seen.samples {
        let serving: usize = sample.values().sum();
        assert!(serving >= 3, "the old allocations keep serving: {sample:?}");
    }
    agent.stop();
}
