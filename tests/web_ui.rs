//! The web UI in a real browser (headless Chromium through WebDriver,
//! `support::browser`) against a real agent: a job run from the UI comes
//! alive on the page without a reload and its task's log line shows; a
//! node drained from the UI sees its allocations move; the scheduling
//! workers pause and resume from the servers page. Each test saves its
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
