//! The web UI in a real browser (headless Chromium through WebDriver,
//! `support::browser`) against a real agent: a job run from the UI comes
//! alive on the page without a reload and its task's log line shows; a
//! node drained from the UI sees its allocations move; the scheduling
//! workers pause and resume from the servers page; a canary deployment is
//! promoted, a group scaled, a version reverted to and a deployment failed
//! from the job's page; a parameterized job is dispatched; the evaluations
//! list and an evaluation's page explain a blocked placement; an
//! allocation's files are browsed and its CPU and memory charted (and the
//! sampling stops when the page is left); the clients list's usage bars
//! and the topology view show what each node holds; a list of 130 clients
//! is drawn 100 rows at a time. Each test saves its
//! pages' screenshots in `docs/ui/`.

use herder_actors::sim::{SimConfig, SimNodes};
use herder_tests::browser::Browser;
use herder_tests::{dev_config, get, send_json, server_config, temp_dir, wait_for, TestAgent};
use serde_json::{json, Value};
use std::time::Duration;

/// Long enough for a loaded 2-core machine; a wait ends as soon as it holds.
const SLOW: Duration = Duration::from_secs(90);
const QUICK: Duration = Duration::from_secs(30);

/// A job that prints a line and keeps running.
const HELLO_HCL: &str = r#"job "ui-hello" {
  datacenters = ["dc1"]
  type = "service"
  group "web" {
    count = 2
    task "say" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args = ["-c", "echo hello from the ui test; exec sleep 600"]
      }
      resources {
        cpu = 20
        memory = 16
      }
    }
  }
}"#;

fn json_of(agent: &TestAgent, path: &str) -> Value {
    let (code, body) = get(&agent.url(path));
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

#[test]
fn a_job_run_from_the_ui_comes_alive_and_shows_its_log() {
    let agent = TestAgent::start(dev_config(), true);
    let browser = Browser::start();

    // `/` leads to the jobs list.
    browser.goto(&agent.url("/"));
    browser.wait_text("#job-list", "No jobs yet", QUICK);
    assert!(
        browser.current_url().ends_with("/ui/"),
        "{}",
        browser.current_url()
    );
    browser.mark_page();

    browser.click_link("Run job");
    browser.fill("#jobspec", HELLO_HCL);
    browser.screenshot("run-job");
    browser.click("#run-form button[type=submit]");

    // The job's page: both allocations become running while we look.
    browser.wait("the job page", QUICK, || {
        browser
            .current_url()
            .ends_with("/ui/jobs/default/ui-hello")
            .then_some(())
    });
    browser.wait("two running allocations", SLOW, || {
        (browser.count("#allocations tr[data-status=running]") == 2).then_some(())
    });
    browser.wait_text("#job-status", "running", SLOW);
    browser.wait_text("#groups", "2 running", SLOW);
    browser.screenshot("job");
    assert!(browser.same_page(), "the page was reloaded");

    // The list shows it with its counts.
    browser.click("nav a[data-nav=jobs]");
    let row = browser.wait_text("#jobs tr[data-job=ui-hello]", "2 running", SLOW);
    assert!(row.contains("service"), "{row}");
    browser.fill("#job-filter", "nomatch");
    browser.wait_text("#job-list", "No job matches the filter.", QUICK);
    browser.fill("#job-filter", "hello");
    browser.wait_text("#jobs", "ui-hello", QUICK);
    browser.screenshot("jobs");

    // An allocation's page follows its task's log.
    browser.click("#jobs tr[data-job=ui-hello] a");
    browser.click("#allocations tr[data-status=running] a");
    browser.wait_text("#log", "hello from the ui test", SLOW);
    browser.wait_text("#alloc-status", "running", QUICK);
    browser.screenshot("allocation");
    assert!(browser.same_page(), "the page was reloaded");
    drop(browser);

    let allocs = json_of(&agent, "/v1/job/ui-hello/allocations");
    assert_eq!(allocs.as_array().map(Vec::len), Some(2), "{allocs}");
}

#[test]
fn stopping_and_starting_a_job_from_its_page() {
    let agent = TestAgent::start(dev_config(), true);
    let job = json!({"Job": {
        "ID": "ui-batchless", "Name": "ui-batchless", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", "exec sleep 600"]},
            "Resources": {"CPU": 20, "MemoryMB": 16}
        }]}]
    }});
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &job);
    assert_eq!(code, 200, "{body}");
    let browser = Browser::start();
    browser.goto(&agent.url("/ui/jobs/default/ui-batchless"));
    browser.wait("a running allocation", SLOW, || {
        (browser.count("#allocations tr[data-status=running]") == 1).then_some(())
    });
    browser.mark_page();

    browser.click_button("Stop job");
    browser.click_button("Yes, stop job");
    browser.wait_text("#job-status", "stopped", SLOW);
    browser.wait("its allocation to stop", SLOW, || {
        (browser.count("#allocations tr[data-status=running]") == 0).then_some(())
    });
    assert_eq!(json_of(&agent, "/v1/job/ui-batchless")["Stop"], json!(true));

    browser.click_button("Start job");
    browser.wait("a running allocation again", SLOW, || {
        (browser.count("#allocations tr[data-status=running]") == 1).then_some(())
    });
    // Each change is a version, listed as the API lists them.
    browser.wait("the job's new versions", QUICK, || {
        let versions = json_of(&agent, "/v1/job/ui-batchless/versions");
        let stored = versions["Versions"].as_array().map_or(0, Vec::len);
        (stored >= 2 && browser.count("#versions tbody tr") == stored).then_some(())
    });
    assert!(browser.same_page(), "the page was reloaded");
    assert_eq!(
        json_of(&agent, "/v1/job/ui-batchless")["Stop"],
        json!(false)
    );
}

/// A server with three simulated nodes running a service job of three.
fn server_with_sim_nodes() -> (tempfile::TempDir, TestAgent, SimNodes) {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let sim = SimNodes::start(SimConfig {
        count: 3,
        servers: vec![agent.url("")],
        ..SimConfig::default()
    })
    .expect("simulated nodes start");
    let ready = wait_for(SLOW, || {
        let nodes = json_of(&agent, "/v1/nodes");
        let ready = nodes
            .as_array()?
            .iter()
            .filter(|n| n["Status"] == "ready")
            .count();
        (ready == 3).then_some(())
    });
    assert!(ready.is_some(), "three nodes ready; {}", sim.stats());
    let job = json!({"Job": {
        "ID": "spread", "Name": "spread", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 3,
            "Migrate": {"MaxParallel": 3, "HealthCheck": "task_states", "MinHealthyTime": 0},
            "Tasks": [{
                "Name": "t", "Driver": "mock_driver", "Config": {},
                "Resources": {"CPU": 100, "MemoryMB": 64}
            }]}]
    }});
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &job);
    assert_eq!(code, 200, "{body}");
    (dir, agent, sim)
}

/// The running allocations of `job`: (allocation ID, node ID).
fn running(agent: &TestAgent, job: &str) -> Vec<(String, String)> {
    json_of(agent, &format!("/v1/job/{job}/allocations"))
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["ClientStatus"] == "running" && a["DesiredStatus"] == "run")
        .map(|a| {
            let field = |k: &str| a[k].as_str().unwrap_or_default().to_string();
            (field("ID"), field("NodeID"))
        })
        .collect()
}

#[test]
fn draining_a_node_from_its_page_moves_its_allocations() {
    let (_dir, agent, _sim) = server_with_sim_nodes();
    let placed = wait_for(SLOW, || {
        let r = running(&agent, "spread");
        (r.len() == 3).then_some(r)
    })
    .expect("three running allocations");
    let drained = placed[0].1.clone();
    let on_drained = placed.iter().filter(|(_, n)| *n == drained).count();

    let browser = Browser::start();
    browser.goto(&agent.url("/ui/nodes"));
    browser.wait("three nodes", SLOW, || {
        (browser.count("#nodes tbody tr[data-node]") == 3).then_some(())
    });
    browser.wait_text("#nodes", "ready", QUICK);
    browser.screenshot("nodes");
    browser.mark_page();

    browser.click(&format!("#nodes tr[data-node='{drained}'] a"));
    let here = format!("#allocations tr[data-status=running][data-node='{drained}']");
    browser.wait("the node's running allocations", SLOW, || {
        (browser.count(&here) == on_drained).then_some(())
    });
    browser.wait_text("#node-eligibility", "eligible", QUICK);
    browser.fill("#drain-deadline", "5m");
    browser.click_button("Drain node");

    // Its allocations stop here and run elsewhere, seen on this page.
    browser.wait("the node's allocations to leave", SLOW, || {
        (browser.count(&here) == 0).then_some(())
    });
    browser.wait_text("#node-eligibility", "ineligible", SLOW);
    browser.screenshot("node");
    let moved = wait_for(SLOW, || {
        let r = running(&agent, "spread");
        (r.len() == 3 && r.iter().all(|(_, n)| *n != drained)).then_some(r)
    });
    assert!(
        moved.is_some(),
        "the job runs three allocations off the drained node"
    );

    // The job's page shows none of its running allocations there.
    browser.click("#allocations a[href^='/ui/jobs/']");
    browser.wait("three running allocations elsewhere", SLOW, || {
        let elsewhere = browser.count(&format!(
            "#allocations tr[data-status=running]:not([data-node='{drained}'])"
        ));
        (elsewhere == 3 && browser.count(&here) == 0).then_some(())
    });
    assert!(browser.same_page(), "the page was reloaded");
}

#[test]
fn the_servers_page_pauses_and_resumes_the_workers() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let statuses = || -> Vec<String> {
        json_of(&agent, "/v1/agent/schedulers")["schedulers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| w["status"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let before = statuses();
    assert!(!before.is_empty(), "the server runs workers");

    let browser = Browser::start();
    browser.goto(&agent.url("/ui/servers"));
    browser.wait("every worker listed", SLOW, || {
        (browser.count("#workers tr[data-worker]") == before.len()).then_some(())
    });
    browser.wait_text("#raft-peers", "leader", QUICK);
    browser.wait_text("#members", "alive", QUICK);

    browser.click_button("Pause workers");
    browser.wait("every worker paused on the page", SLOW, || {
        (browser.count("#workers tr[data-status=Paused]") == before.len()).then_some(())
    });
    assert!(statuses().iter().all(|s| s == "Paused"), "{:?}", statuses());
    browser.screenshot("servers");

    browser.click_button("Resume workers");
    browser.wait("no worker paused on the page", SLOW, || {
        (browser.count("#workers tr[data-status=Paused]") == 0
            && browser.count("#workers tr[data-worker]") == before.len())
        .then_some(())
    });
    let after = wait_for(QUICK, || {
        let now = statuses();
        (now == before).then_some(now)
    });
    assert!(
        after.is_some(),
        "resumed: {:?}, before {before:?}",
        statuses()
    );
}

#[test]
fn with_acls_on_the_ui_asks_for_a_token_and_uses_it() {
    let mut config = dev_config();
    config.acl.enabled = true;
    let agent = TestAgent::start(config, true);
    let (code, body) = send_json("PUT", &agent.url("/v1/acl/bootstrap"), None, &json!({}));
    assert_eq!(code, 200, "bootstrap: {body}");
    let token: Value = serde_json::from_str(&body).expect("token JSON");
    let secret = token["SecretID"].as_str().expect("SecretID");

    let job = json!({"Job": {
        "ID": "secret-job", "Name": "secret-job", "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"},
            "Resources": {"CPU": 20, "MemoryMB": 16}
        }]}]
    }});
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), Some(secret), &job);
    assert_eq!(code, 200, "{body}");

    let browser = Browser::start();
    // The page itself is public; the API refuses the node list without a
    // token, and the page asks for one.
    browser.goto(&agent.url("/ui/nodes"));
    browser.wait_text("#token-reason", "Permission denied", SLOW);
    browser.fill("#token-secret", secret);
    browser.screenshot("acl-token");
    browser.click_button("Save token");
    browser.wait("the node list", SLOW, || {
        (browser.count("#nodes tbody tr[data-node]") == 1).then_some(())
    });
    let panel_hidden = browser.script(
        "return document.getElementById('token-panel').hidden;",
        json!([]),
    );
    assert_eq!(panel_hidden, json!(true));
    // Every view sends it: the job list (empty for anonymous) shows the job.
    browser.click("nav a[data-nav=jobs]");
    browser.wait_text("#jobs tr[data-job=secret-job]", "batch", SLOW);
}

#[test]
fn a_job_that_cannot_be_placed_says_why_on_its_page() {
    let agent = TestAgent::start(dev_config(), true);
    let job = json!({"Job": {
        "ID": "nowhere", "Name": "nowhere", "Type": "service", "Datacenters": ["dc1"],
        "Constraints": [{"LTarget": "${attr.kernel.name}", "RTarget": "plan9", "Operand": "="}],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"},
            "Resources": {"CPU": 20, "MemoryMB": 16}
        }]}]
    }});
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &job);
    assert_eq!(code, 200, "{body}");
    let browser = Browser::start();
    browser.goto(&agent.url("/ui/jobs/default/nowhere"));
    let blocked = browser.wait_text(
        "#evaluations tr[data-status=blocked]",
        "constraint ${attr.kernel.name} = plan9 filtered 1",
        SLOW,
    );
    assert!(blocked.contains("1 nodes evaluated"), "{blocked}");
    browser.wait_text("#groups", "1 queued", QUICK);
    browser.screenshot("job-blocked");
}

/// A service of `count` raw_exec sleepers whose env carries `version`
/// (changing it is a destructive update), with one canary per update and
/// health from task states after 1 s.
fn canary_job(version: &str, count: u32) -> Value {
    json!({"Job": {
        "ID": "ui-canary", "Name": "ui-canary", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "web", "Count": count,
            "Update": {
                "MaxParallel": 1, "Canary": 1, "HealthCheck": "task_states",
                "MinHealthyTime": 1_000_000_000u64, "HealthyDeadline": 60_000_000_000u64,
                "ProgressDeadline": 120_000_000_000u64, "AutoRevert": false, "AutoPromote": false
            },
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec", "Env": {"VERSION": version},
                "Config": {"command": "/bin/sh", "args": ["-c", "exec sleep 600"]},
                "Resources": {"CPU": 20, "MemoryMB": 16}
            }]}]
    }})
}

/// The job's stored version `version`'s group count and VERSION env.
fn count_and_env(agent: &TestAgent, job: &str) -> (u64, String) {
    let job = json_of(agent, &format!("/v1/job/{job}"));
    let group = &job["TaskGroups"][0];
    (
        group["Count"].as_u64().unwrap_or(0),
        group["Tasks"][0]["Env"]["VERSION"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[test]
fn deployments_scale_and_revert_from_the_job_page() {
    let agent = TestAgent::start(dev_config(), true);
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &canary_job("v1", 1));
    assert_eq!(code, 200, "{body}");
    let browser = Browser::start();
    browser.goto(&agent.url("/ui/jobs/default/ui-canary"));
    browser.wait("the first version running", SLOW, || {
        (browser.count("#allocations tr[data-status=running]") == 1).then_some(())
    });
    browser.mark_page();

    // Version 1 places a canary beside the old allocation and waits.
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &canary_job("v2", 1));
    assert_eq!(code, 200, "{body}");
    let running = "#deployments [data-status=running]";
    browser.wait_text(running, "for version 1", SLOW);
    // The canary placed and healthy: the row reads web, 1 desired, 1
    // placed, 1 healthy, 0 unhealthy, 1 of 1 canaries, not promoted.
    let row = browser.wait_text(&format!("{running} tr[data-group=web]"), "1 of 1", SLOW);
    browser.wait("the canary healthy", SLOW, || {
        let row = browser.text(&format!("{running} tr[data-group=web]"))?;
        row.contains("web\t1\t1\t1\t0").then_some(())
    });
    assert!(row.contains("no"), "not promoted yet: {row}");
    browser.screenshot("job-deployment");
    browser.click_button("Promote canaries");
    browser.wait_text(
        "#deployments [data-status=successful]",
        "for version 1",
        SLOW,
    );
    let deployments = json_of(&agent, "/v1/job/ui-canary/deployments");
    let promoted = deployments
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["JobVersion"] == 1)
        .map(|d| d["TaskGroups"]["web"]["Promoted"].clone());
    assert_eq!(promoted, Some(json!(true)), "{deployments}");

    // The promotion stops the old allocation. Until the page shows that,
    // "two running" below could be the old one beside the canary (CI saw
    // that race), so the scale starts from one running allocation.
    browser.wait("the old allocation stopped", SLOW, || {
        (browser.count("#allocations tr[data-status=running]") == 1).then_some(())
    });

    // Scale the group to 2: a new version, two running allocations.
    browser.fill("#scale-count", "2");
    browser.click_button("Scale group");
    browser.wait("the job scaled to 2 through the page", SLOW, || {
        (count_and_env(&agent, "ui-canary") == (2, "v2".to_string())).then_some(())
    });
    browser.wait("two running allocations of the new version", SLOW, || {
        (browser.count("#allocations tr[data-status=running]") == 2).then_some(())
    });
    browser.wait_text("#groups tr[data-group=web]", "2 running", SLOW);

    // Revert to version 0: the job as it was (one allocation, v1) comes
    // back as a new version; its canary waits in a new deployment, which
    // the page fails.
    browser.wait("version 0 listed with a revert button", QUICK, || {
        (browser.count("#versions tr[data-version='0'] button") == 1).then_some(())
    });
    browser.click_button("Revert to 0");
    browser.click_button("Yes, revert to version 0");
    browser.wait("the reverted job", SLOW, || {
        (count_and_env(&agent, "ui-canary") == (1, "v1".to_string())).then_some(())
    });
    let version = json_of(&agent, "/v1/job/ui-canary")["Version"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(version, 3, "scaled to 2, then reverted");
    browser.wait("the new version listed", SLOW, || {
        (browser.count("#versions tr[data-version='3']") == 1).then_some(())
    });
    browser.wait_text(running, "for version 3", SLOW);
    browser.script(
        "document.getElementById('scale-form').scrollIntoView();",
        json!([]),
    );
    browser.screenshot("job-actions");
    browser.click_button("Fail deployment");
    // The deployment changes while the question is open (paused through
    // the API): the section redraws, and the question stays open.
    let deployment = json_of(&agent, "/v1/job/ui-canary/deployment")["ID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (code, body) = send_json(
        "PUT",
        &agent.url(&format!("/v1/deployment/pause/{deployment}")),
        None,
        &json!({"DeploymentID": deployment, "Pause": true}),
    );
    assert_eq!(code, 200, "{body}");
    browser.wait_text("#deployments [data-status=paused]", "for version 3", SLOW);
    assert_eq!(
        browser.count("#deployments [data-status=paused] .confirm button"),
        2,
        "the redrawn deployment still asks (yes / cancel)"
    );
    browser.click_button("Yes, fail deployment");
    let failed = browser.wait_text("#deployments [data-status=failed]", "for version 3", SLOW);
    assert!(failed.contains("failed"), "{failed}");
    let status = json_of(&agent, "/v1/job/ui-canary/deployment")["Status"].clone();
    assert_eq!(status, json!("failed"));
    assert!(browser.same_page(), "the page was reloaded");
}

#[test]
fn dispatch_and_evaluations_explain_a_blocked_placement() {
    let agent = TestAgent::start(dev_config(), true);
    let param = json!({"Job": {
        "ID": "ui-param", "Name": "ui-param", "Type": "batch", "Datacenters": ["dc1"],
        "ParameterizedJob": {"Payload": "optional", "MetaRequired": ["who"]},
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", "echo hi $NOMAD_META_who"]},
            "Resources": {"CPU": 20, "MemoryMB": 16}
        }]}]
    }});
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &param);
    assert_eq!(code, 200, "{body}");
    let nowhere = json!({"Job": {
        "ID": "nowhere", "Name": "nowhere", "Type": "service", "Datacenters": ["dc1"],
        "Constraints": [{"LTarget": "${attr.kernel.name}", "RTarget": "plan9", "Operand": "="}],
        "TaskGroups": [{"Name": "g", "Count": 2, "Tasks": [{
            "Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"},
            "Resources": {"CPU": 20, "MemoryMB": 16}
        }]}]
    }});
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &nowhere);
    assert_eq!(code, 200, "{body}");

    // Dispatch with a payload and meta from the job's page.
    let browser = Browser::start();
    browser.goto(&agent.url("/ui/jobs/default/ui-param"));
    browser.fill("#dispatch-payload", "payload from the ui");
    browser.fill("#dispatch-meta", "who=browser");
    browser.screenshot("job-dispatch");
    browser.click_button("Dispatch job");
    let result = browser.wait_text("#dispatch-result", "ui-param/dispatch-", SLOW);
    let child = result
        .trim_start_matches("Dispatched ")
        .trim_end_matches('.')
        .to_string();
    let dispatched = json_of(&agent, &format!("/v1/job/{}", child.replace('/', "%2F")));
    assert_eq!(dispatched["Meta"]["who"], json!("browser"), "{dispatched}");
    assert_eq!(dispatched["ParentID"], json!("ui-param"));
    browser.mark_page();
    browser.click("#dispatch-result a");
    browser.wait_text("h1", &child, QUICK);

    // The evaluations list, narrowed to blocked ones, shows nowhere's.
    browser.click("nav a[data-nav=evaluations]");
    browser.wait_text("#evaluations", "ui-param", SLOW);
    browser.screenshot("evaluations");
    browser.script(
        "const s = document.getElementById('eval-status'); s.value = 'blocked'; s.dispatchEvent(new Event('change'));",
        json!([]),
    );
    browser.wait("only blocked evaluations", SLOW, || {
        let rows = browser.count("#evaluations tbody tr[data-eval]");
        let blocked = browser.count("#evaluations tbody tr[data-status=blocked]");
        (rows >= 1 && rows == blocked).then_some(())
    });
    assert!(browser
        .current_url()
        .ends_with("/ui/evaluations?status=blocked"));
    browser.wait_text("#evaluations tr[data-status=blocked]", "nowhere", QUICK);

    // Its page explains why: the constraint filtered the one node, and
    // what the blocked evaluation waits for.
    browser.click("#evaluations tr[data-status=blocked] a");
    browser.wait_text("#eval-status-badge", "blocked", SLOW);
    let why = browser.wait_text(
        "#failed-groups [data-group=g]",
        "${attr.kernel.name} = plan9",
        QUICK,
    );
    assert!(
        why.contains("2 allocations of group g could not be placed"),
        "{why}"
    );
    assert!(
        why.contains("constraint\t${attr.kernel.name} = plan9\t1\tfiltered"),
        "{why}"
    );
    assert!(why.contains("1 nodes evaluated"), "{why}");
    browser.wait_text("#blocked-reason", "waits for the cluster to change", QUICK);
    browser.screenshot("evaluation");

    // The job's page links its evaluations to the same pages.
    browser.click("a[href='/ui/jobs/default/nowhere']");
    browser.click("#evaluations tr[data-status=complete] a");
    browser.wait_text(
        "main",
        "The placements that failed wait in the blocked evaluation",
        SLOW,
    );
    assert!(browser.same_page(), "the page was reloaded");
}

#[test]
fn an_allocations_files_and_resource_charts() {
    let agent = TestAgent::start(dev_config(), true);
    let job = json!({"Job": {
        "ID": "ui-files", "Name": "ui-files", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c",
                "echo greetings from a file > \"$NOMAD_TASK_DIR/greeting.txt\"; exec sleep 600"]},
            "Resources": {"CPU": 50, "MemoryMB": 32}
        }]}]
    }});
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &job);
    assert_eq!(code, 200, "{body}");
    let alloc = wait_for(SLOW, || running(&agent, "ui-files").into_iter().next())
        .expect("a running allocation");

    let browser = Browser::start();
    browser.goto(&agent.url(&format!("/ui/allocations/{}", alloc.0)));
    browser.mark_page();
    // Charts: a line once two samples are in, against the 32 MiB given.
    browser.wait("two samples charted", SLOW, || {
        (browser.count("#memory-chart polyline") == 1 && browser.count("#cpu-chart polyline") == 1)
            .then_some(())
    });
    let memory = browser.wait_text("#memory-chart", "of 32 MiB", QUICK);
    assert!(memory.starts_with("Memory: "), "{memory}");
    browser.wait_text("#cpu-chart", "of 50 MHz", QUICK);
    browser.screenshot("allocation-charts");

    // Files: the task's directory, then its local/ and the file.
    browser.wait_text("#files", "t/", SLOW);
    browser.click_button("t/");
    browser.wait_text("#file-path", "t", QUICK);
    browser.click_button("local/");
    browser.click_button("greeting.txt");
    browser.wait_text("#file-text", "greetings from a file", SLOW);
    browser.wait_text("#file-path", "local", QUICK);
    browser.script(
        "document.getElementById('files-title').scrollIntoView();",
        json!([]),
    );
    browser.screenshot("allocation-files");
    browser.click("#file-path button");
    browser.wait_text("#files", "alloc/", QUICK);

    // Leaving the page ends the sampling: no stats request after it.
    let stats_requests = "return performance.getEntriesByType('resource').filter((e) => e.name.includes('/stats')).length;";
    browser.click("nav a[data-nav=jobs]");
    browser.wait_text("#jobs", "ui-files", SLOW);
    let before = browser.script(stats_requests, json!([]));
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(browser.script(stats_requests, json!([])), before);
    assert!(browser.same_page(), "the page was reloaded");
}

#[test]
fn usage_bars_and_the_topology_show_what_each_node_holds() {
    let (_dir, agent, _sim) = server_with_sim_nodes();
    let placed = wait_for(SLOW, || {
        let r = running(&agent, "spread");
        (r.len() == 3).then_some(r)
    })
    .expect("three running allocations");
    // What each node offers, and the percentage its allocations (100 MHz
    // and 64 MiB each) take of it.
    let nodes = json_of(&agent, "/v1/nodes?resources=true");
    let expected: Vec<(String, u64, u64)> = nodes
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            let id = n["ID"].as_str().unwrap_or_default().to_string();
            let here = placed.iter().filter(|(_, node)| *node == id).count() as f64;
            let offered = |key: &str, field: &str| {
                n["NodeResources"][key][field].as_f64().unwrap_or(0.0)
                    - n["ReservedResources"][key][field].as_f64().unwrap_or(0.0)
            };
            let pct = |used: f64, total: f64| (used / total * 100.0).round() as u64;
            (
                id,
                pct(64.0 * here, offered("Memory", "MemoryMB")),
                pct(100.0 * here, offered("Cpu", "CpuShares")),
            )
        })
        .collect();
    assert_eq!(expected.len(), 3);
    // What the views read: herder's `usage=true` on the node list, each
    // node's live allocations' resources from the store's usage index.
    let with_usage = json_of(&agent, "/v1/nodes?resources=true&usage=true");
    for n in with_usage.as_array().into_iter().flatten() {
        let id = n["ID"].as_str().unwrap_or_default();
        let here = placed.iter().filter(|(_, node)| node == id).count() as u64;
        let allocated = &n["Allocated"];
        assert_eq!(
            (
                allocated["MemoryMB"].as_u64(),
                allocated["CpuShares"].as_u64(),
                allocated["Allocations"].as_u64()
            ),
            (Some(64 * here), Some(100 * here), Some(here)),
            "{n}"
        );
    }
    assert_eq!(nodes[0]["Allocated"], Value::Null, "only when asked");
    // Nomad's allocation stub fields: resources in, task states out.
    let allocs = json_of(&agent, "/v1/allocations?resources=true&task_states=false");
    let first = &allocs[0];
    assert_eq!(
        first["AllocatedResources"]["Tasks"]["t"]["Memory"]["MemoryMB"],
        json!(64),
        "{first}"
    );
    assert_eq!(first["TaskStates"], Value::Null, "{first}");
    let plain = json_of(&agent, "/v1/allocations");
    assert_eq!(plain[0]["AllocatedResources"], Value::Null);

    let browser = Browser::start();
    browser.goto(&agent.url("/ui/nodes"));
    browser.wait("every node's bars", SLOW, || {
        (browser.count("#nodes tbody meter") == 6).then_some(())
    });
    for (id, mem, cpu) in &expected {
        let row = browser.wait_text(&format!("#nodes tr[data-node='{id}']"), "%", QUICK);
        let labels = browser.script(
            "return [...document.querySelectorAll(`#nodes tr[data-node='${arguments[0]}'] meter`)].map((m) => m.getAttribute('aria-label'));",
            json!([id]),
        );
        assert_eq!(
            labels,
            json!([
                format!("CPU {cpu}% allocated"),
                format!("Memory {mem}% allocated")
            ]),
            "{row}"
        );
    }
    browser.screenshot("nodes");
    browser.mark_page();

    browser.click("nav a[data-nav=topology]");
    browser.wait("three node boxes", SLOW, || {
        (browser.count("#topology section[data-dc=dc1] a.topo-node") == 3).then_some(())
    });
    browser.wait("three live allocations in the totals", SLOW, || {
        (browser.text("#topo-allocs")?.trim() == "3").then_some(())
    });
    for (id, mem, cpu) in &expected {
        let shown = browser.script(
            "const a = document.querySelector(`a.topo-node[data-node='${arguments[0]}']`); return [a.dataset.memPct, a.dataset.cpuPct];",
            json!([id]),
        );
        assert_eq!(
            shown,
            json!([mem.to_string(), cpu.to_string()]),
            "node {id}"
        );
    }
    browser.screenshot("topology");
    // A box is a link to its node's page, by keyboard too.
    let first = &expected[0].0;
    let focused = browser.script(
        "const a = document.querySelector(`a.topo-node[data-node='${arguments[0]}']`); a.focus(); return document.activeElement === a;",
        json!([first]),
    );
    assert_eq!(focused, json!(true), "a node box takes the keyboard focus");
    browser.script(
        "document.activeElement.dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true, button: 0}));",
        json!([]),
    );
    browser.wait("the node's page", QUICK, || {
        browser
            .current_url()
            .ends_with(&format!("/ui/nodes/{first}"))
            .then_some(())
    });
    assert!(browser.same_page(), "the page was reloaded");
}

#[test]
fn a_large_clients_list_is_drawn_a_page_at_a_time() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let store = &agent.server.as_ref().expect("a server").store;
    herder::state::fixtures::register_nodes(store, 130);
    let browser = Browser::start();
    browser.goto(&agent.url("/ui/nodes"));
    browser.wait("the first page of 100 rows", SLOW, || {
        (browser.count("#nodes tbody tr[data-node]") == 100).then_some(())
    });
    browser.wait_text("#nodes caption", "130 of 130 nodes", QUICK);
    browser.wait_text("nav.pager", "rows 1–100 of 130", QUICK);
    browser.wait_text("#nodes tbody tr:first-child", "node-00000", QUICK);
    browser.click_button("Next page");
    browser.wait("the second page of 30 rows", QUICK, || {
        (browser.count("#nodes tbody tr[data-node]") == 30).then_some(())
    });
    browser.wait_text("#nodes tbody tr:first-child", "node-00100", QUICK);
    browser.click_button("Previous page");
    browser.wait_text("#nodes tbody tr:first-child", "node-00000", QUICK);
}
