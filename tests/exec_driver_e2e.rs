//! The `exec` driver end to end, as a user meets it: a job's task runs as
//! its configured user, chrooted (the host's own directories are not
//! there), in its own PID namespace, with its host volume mounted
//! read-only; `alloc exec` over the websocket enters all of that, with and
//! without a terminal, and returns the command's exit code. And `raw_exec`
//! is not offered by a client that did not enable it, so its jobs are not
//! placed there.
//!
//! The isolation needs root and namespaces: where the agent's fingerprint
//! says the exec driver is unavailable, those tests say why and return.

use herder_actors::config::HostVolumeConfig;
use herder_tests::{
    alloc_exec, dev_config, get, send_json, server_config, temp_dir, wait_for, TestAgent,
};
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn get_json(url: &str) -> Value {
    let (code, body) = get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

/// The agent's only node, once it is ready.
fn ready_node(agent: &TestAgent) -> Value {
    let nodes = wait_for(WAIT, || {
        let nodes = get_json(&agent.url("/v1/nodes"));
        let node = nodes.as_array()?.first()?.clone();
        (node["Status"] == "ready").then_some(node)
    })
    .expect("the agent's node gets ready");
    get_json(&agent.url(&format!("/v1/node/{}", nodes["ID"].as_str().unwrap())))
}

/// Why the exec driver cannot run here, if it cannot.
fn exec_unavailable(node: &Value) -> Option<String> {
    let exec = &node["Drivers"]["exec"];
    (exec["Healthy"] != true).then(|| format!("{}", exec["HealthDescription"]))
}

fn register(agent: &TestAgent, job: Value) {
    let (code, body) = send_json("PUT", &agent.url("/v1/jobs"), None, &json!({ "Job": job }));
    assert_eq!(code, 200, "register: {body}");
}

fn isolated_job() -> Value {
    json!({
        "ID": "iso", "Name": "iso", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Volumes": {"shared": {"Name": "shared", "Type": "host", "Source": "shared", "ReadOnly": true}},
            "Tasks": [{
                "Name": "t", "Driver": "exec", "User": "daemon",
                "Config": {"command": "/bin/sh",
                           "args": ["-c", "echo task uid=$(id -u) pid=$$; exec sleep 600"]},
                "VolumeMounts": [{"Volume": "shared", "Destination": "/data", "ReadOnly": true}],
                "Resources": {"CPU": 100, "MemoryMB": 64}
            }]
        }]
    })
}

#[test]
fn an_exec_task_is_isolated_and_alloc_exec_runs_inside_it() {
    let volume = temp_dir();
    std::fs::write(volume.path().join("f"), "from the host volume\n").expect("write");
    // A directory only the host has: the task's /tmp is its own.
    let host_only = tempfile::Builder::new()
        .prefix("herder-host-only-")
        .tempdir_in("/tmp")
        .expect("host-only dir");
    let host_only_name = host_only.path().file_name().unwrap().to_string_lossy();
    let mut config = dev_config();
    config.client.host_volumes.insert(
        "shared".into(),
        HostVolumeConfig {
            path: volume.path().to_path_buf(),
            read_only: true,
        },
    );
    let agent = TestAgent::start(config, true);
    if let Some(why) = exec_unavailable(&ready_node(&agent)) {
        eprintln!("skipped: the exec driver is unavailable on this host: {why}");
        return;
    }
    register(&agent, isolated_job());
    let alloc = wait_for(WAIT, || {
        let allocs = get_json(&agent.url("/v1/job/iso/allocations"));
        let a = allocs.as_array()?.first()?.clone();
        (a["ClientStatus"] == "running").then_some(a)
    })
    .expect("the exec task runs");
    let id = alloc["ID"].as_str().unwrap().to_string();

    // The task itself: the configured user, PID 1 of its namespace.
    let log = agent
        .data_dir
        .join(format!("alloc/{id}/alloc/logs/t.stdout.0"));
    let started = wait_for(WAIT, || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|s| s.contains('\n'))
    })
    .expect("the task wrote its first line");
    assert_eq!(started, "task uid=1 pid=1\n");

    // Without a terminal: output, exit code, the chroot, the namespace,
    // the read-only volume, as the task's user.
    let script = "echo uid=$(id -u) pid=$$; ls /; ls /tmp; cat /data/f; \
                  touch /data/new 2>/dev/null || echo volume-read-only; \
                  echo oops >&2; exit 3";
    let run = alloc_exec(agent.addr, &id, "t", &["/bin/sh", "-c", script], false, b"");
    assert_eq!(run.exit_code, 3, "{}", run.output);
    let lines: Vec<&str> = run.output.lines().collect();
    let pid: i64 = lines[0]
        .strip_prefix("uid=1 pid=")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("first line: {}", run.output));
    assert!(pid < 10, "a pid of the task's namespace: {}", run.output);
    for inside in ["alloc", "local", "secrets", "bin", "usr", "data"] {
        assert!(
            lines.contains(&inside),
            "{inside} missing in /: {}",
            run.output
        );
    }
    for host in ["root", "home", "var"] {
        assert!(
            !lines.contains(&host),
            "the host's /{host} is visible: {}",
            run.output
        );
    }
    assert!(
        !run.output.contains(host_only_name.as_ref()),
        "{}",
        run.output
    );
    assert!(run
        .output
        .contains("from the host volume\nvolume-read-only\n"));
    assert!(
        run.output.contains("oops\n"),
        "stderr comes back: {}",
        run.output
    );
    assert!(!volume.path().join("new").exists());

    // With a terminal: stdin typed in, a terminal on the other end.
    let typed = b"test -t 0 && echo is-a-tty; tty; echo $((6*7)); exit 5\n";
    let run = alloc_exec(agent.addr, &id, "t", &["/bin/sh"], true, typed);
    assert_eq!(run.exit_code, 5, "{}", run.output);
    assert!(
        run.output.contains("is-a-tty\r\n/dev/pts/"),
        "{:?}",
        run.output
    );
    assert!(run.output.contains("\r\n42\r\n"), "{:?}", run.output);

    // A command the chroot lacks fails before any socket opens.
    let command = herder_tests::url_encode("[\"/usr/games/no-such\"]");
    let (code, body) = get(&agent.url(&format!(
        "/v1/client/allocation/{id}/exec?task=t&command={command}"
    )));
    assert_eq!(code, 400, "{body}");
}

#[test]
fn raw_exec_is_not_offered_unless_enabled() {
    let dir = temp_dir();
    let mut config = server_config(dir.path());
    config.client.enabled = true;
    assert!(!config.client.raw_exec_enabled, "off by default");
    let agent = TestAgent::start(config, false);
    let node = ready_node(&agent);
    let raw = &node["Drivers"]["raw_exec"];
    assert_eq!(raw["Detected"], false, "{raw}");
    assert!(
        raw["HealthDescription"]
            .as_str()
            .unwrap_or_default()
            .contains("raw_exec_enabled"),
        "{raw}"
    );
    assert!(node["Attributes"]["driver.raw_exec"].is_null());
    register(
        &agent,
        json!({
            "ID": "raw", "Name": "raw", "Type": "batch", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
                "Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"},
                "Resources": {"CPU": 100, "MemoryMB": 32}
            }]}]
        }),
    );
    let blocked = wait_for(WAIT, || {
        let evals = get_json(&agent.url("/v1/job/raw/evaluations"));
        evals
            .as_array()?
            .iter()
            .find(|e| e["Status"] == "complete" && !e["FailedTGAllocs"].is_null())
            .cloned()
    })
    .expect("the evaluation reports the group it could not place");
    let metrics = &blocked["FailedTGAllocs"]["g"];
    assert!(
        metrics.to_string().contains("missing drivers"),
        "placement failed for the driver: {metrics}"
    );
    let allocs = get_json(&agent.url("/v1/job/raw/allocations"));
    assert_eq!(allocs, json!([]), "nothing placed");
}

#[test]
fn alloc_exec_runs_in_a_raw_exec_tasks_directory_and_a_mock_task_refuses_it() {
    let agent = TestAgent::start(dev_config(), true);
    ready_node(&agent);
    let job = |id: &str, driver: &str, config: Value| {
        json!({
            "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
                "Name": "t", "Driver": driver, "Config": config,
                "Resources": {"CPU": 100, "MemoryMB": 32}
            }]}]
        })
    };
    register(
        &agent,
        job(
            "raw",
            "raw_exec",
            json!({"command": "/bin/sleep", "args": ["600"]}),
        ),
    );
    register(
        &agent,
        job("mock", "mock_driver", json!({"run_for": "10m"})),
    );
    let running = |job: &str| {
        wait_for(WAIT, || {
            let allocs = get_json(&agent.url(&format!("/v1/job/{job}/allocations")));
            let a = allocs.as_array()?.first()?.clone();
            (a["ClientStatus"] == "running").then(|| a["ID"].as_str().unwrap().to_string())
        })
        .unwrap_or_else(|| panic!("{job} runs"))
    };
    let raw = running("raw");
    let run = alloc_exec(
        agent.addr,
        &raw,
        "t",
        &["/bin/sh", "-c", "pwd; exit 9"],
        false,
        b"",
    );
    assert_eq!(run.exit_code, 9, "{}", run.output);
    let task_dir = agent.data_dir.join(format!("alloc/{raw}/t"));
    assert_eq!(run.output.trim(), task_dir.display().to_string());

    let mock = running("mock");
    let command = herder_tests::url_encode("[\"/bin/true\"]");
    let (code, body) = get(&agent.url(&format!(
        "/v1/client/allocation/{mock}/exec?task=t&command={command}"
    )));
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("not supported by this driver"), "{body}");
}

#[test]
fn a_server_relays_alloc_exec_to_the_node_that_runs_it() {
    use herder_actors::config::{AgentConfig, ConfigSources, FlagOverrides};
    let server_dir = temp_dir();
    let server = TestAgent::start(server_config(server_dir.path()), false);
    let client_dir = temp_dir();
    let mut flags = FlagOverrides::default();
    flags.ports.insert("http".into(), 0);
    flags.log_level = Some("warn".into());
    flags.data_dir = Some(client_dir.path().to_path_buf());
    flags.bind_addr = Some("127.0.0.1".into());
    flags.client.insert("enabled".into(), true.into());
    flags.client.insert("raw_exec_enabled".into(), true.into());
    flags.client.insert(
        "servers".into(),
        json!([format!("127.0.0.1:{}", server.addr.port())]),
    );
    let config = AgentConfig::load(&ConfigSources {
        env: Some(Vec::new()),
        flags,
        ..Default::default()
    })
    .expect("client configuration");
    let _client = TestAgent::start(config, false);
    ready_node(&server);
    register(
        &server,
        json!({
            "ID": "far", "Name": "far", "Type": "service", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sleep", "args": ["600"]},
                "Resources": {"CPU": 100, "MemoryMB": 32}
            }]}]
        }),
    );
    let id = wait_for(WAIT, || {
        let allocs = get_json(&server.url("/v1/job/far/allocations"));
        let a = allocs.as_array()?.first()?.clone();
        (a["ClientStatus"] == "running").then(|| a["ID"].as_str().unwrap().to_string())
    })
    .expect("the job runs on the client");
    // Asked of the server, answered by the node's agent.
    let run = alloc_exec(
        server.addr,
        &id,
        "t",
        &["/bin/sh", "-c", "read x; echo got $x; exit 6"],
        false,
        b"relayed\n",
    );
    assert_eq!(run.exit_code, 6, "{}", run.output);
    assert_eq!(run.output, "got relayed\n");
    let run = alloc_exec(
        server.addr,
        &id,
        "t",
        &["/bin/sh"],
        true,
        b"echo tty-$((1+1)); exit 0\n",
    );
    assert_eq!(run.exit_code, 0, "{}", run.output);
    assert!(run.output.contains("tty-2"), "{:?}", run.output);
    // The node's refusal comes back through the server.
    let command = herder_tests::url_encode("[\"/bin/true\"]");
    let (code, body) = get(&server.url(&format!(
        "/v1/client/allocation/{id}/exec?task=nope&command={command}"
    )));
    assert_eq!(code, 404, "{body}");
}
