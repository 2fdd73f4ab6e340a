//! Allocation restart, signal and stop end to end, as `nomad alloc
//! restart|signal|stop` use them: real `raw_exec` processes under agents
//! driven over HTTP, checked through the API and the files the tasks write.
//!
//! - on a `-dev` agent (server and client in one): a restart runs a new
//!   process without counting against the restart policy, a signal reaches
//!   the task's trap, and bad requests get Nomad's answers;
//! - with a server-only agent and a separate client agent: a restart or
//!   signal sent to the server is carried out by the client that runs the
//!   allocation, a request already forwarded is never forwarded again, and
//!   a stop sent to the client-only agent reaches the server.

use herder_actors::config::{AgentConfig, ConfigSources, FlagOverrides};
use herder_tests::{dev_config, get, send_json, server_config, temp_dir, wait_for, TestAgent};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// Generous: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(45);

/// A service whose one task (`t`) appends its pid to `<marks>/<alloc>.pids`,
/// and on SIGUSR1 appends to `<marks>/<alloc>.usr1`. No restarts allowed:
/// only a user's restart can start it again.
fn trap_job(id: &str, marks: &Path) -> Value {
    let m = marks.display();
    let script = format!(
        "trap 'echo usr1 >> {m}/$NOMAD_ALLOC_ID.usr1' USR1; \
         echo $$ >> {m}/$NOMAD_ALLOC_ID.pids; \
         while :; do sleep 0.1; done"
    );
    json!({
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "RestartPolicy": {"Attempts": 0, "Interval": 60_000_000_000u64,
                              "Delay": 1_000_000_000u64, "Mode": "fail"},
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", script]},
                "KillTimeout": 2_000_000_000u64,
                "Resources": {"CPU": 50, "MemoryMB": 32}
            }]
        }]
    })
}

fn base(agent: &TestAgent) -> String {
    format!("http://{}", agent.addr)
}

fn get_json(url: &str) -> Value {
    let (code, body) = get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

/// Registers `job` and waits for its allocation to run; its ID.
fn run_job(base: &str, job: &Value) -> String {
    let (code, body) = send_json(
        "PUT",
        &format!("{base}/v1/jobs"),
        None,
        &json!({ "Job": job }),
    );
    assert_eq!(code, 200, "register: {body}");
    let id = job["ID"].as_str().unwrap_or_default();
    wait_for(WAIT, || {
        get_json(&format!("{base}/v1/job/{id}/allocations"))
            .as_array()?
            .iter()
            .find(|a| a["ClientStatus"] == "running")
            .and_then(|a| a["ID"].as_str().map(str::to_string))
    })
    .unwrap_or_else(|| panic!("{id}: no allocation running"))
}

/// The pids the task wrote, once there are `count`.
fn pids(marks: &Path, alloc: &str, count: usize) -> Vec<i32> {
    let file = marks.join(format!("{alloc}.pids"));
    wait_for(WAIT, || {
        let text = std::fs::read_to_string(&file).ok()?;
        let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        (pids.len() >= count).then_some(pids)
    })
    .unwrap_or_else(|| panic!("the task never wrote {count} pids to {}", file.display()))
}

fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
}

/// Kills the task processes a test started, whatever happened to it.
struct Reaper<'a>(&'a Path);

impl Drop for Reaper<'_> {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.0) else {
            return;
        };
        for entry in entries.flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                if pid > 1 && alive(pid) {
                    // SAFETY: kill(2) on a process group this test started.
                    unsafe {
                        libc::kill(-pid, libc::SIGKILL);
                    }
                }
            }
        }
    }
}

/// The task `t`'s state as the servers know it.
fn task_state(base: &str, alloc: &str) -> Value {
    get_json(&format!("{base}/v1/allocation/{alloc}"))["TaskStates"]["t"].clone()
}

fn event_types(state: &Value) -> Vec<String> {
    state["Events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["Type"].as_str().map(str::to_string))
        .collect()
}

/// Sends a PUT or POST with an optional JSON body and extra headers; any
/// status comes back.
fn call(method: &str, url: &str, body: Option<&Value>, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = ureq::request(method, url).timeout(Duration::from_secs(120));
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let result = match body {
        Some(b) => req.send_json(b.clone()),
        None => req.call(),
    };
    match result {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("{method} {url}: {e}"),
    }
}

/// Restarts through `agent_base` and checks a new process runs, the old
/// one is gone and the task counts `round` restarts, none a failure.
fn restart_and_check(agent_base: &str, server_base: &str, marks: &Path, alloc: &str, round: usize) {
    let url = format!("{agent_base}/v1/client/allocation/{alloc}/restart");
    let (code, body) = call("POST", &url, Some(&json!({"TaskName": "t"})), &[]);
    assert_eq!(code, 200, "restart {round}: {body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).ok(),
        Some(json!({"Index": 0}))
    );
    let pids = pids(marks, alloc, round + 1);
    assert!(
        wait_for(WAIT, || (!alive(pids[round - 1])).then_some(())).is_some(),
        "restart {round}: the old process is gone"
    );
    assert!(alive(pids[round]), "restart {round}: a new process runs");
    let state = wait_for(WAIT, || {
        let s = task_state(server_base, alloc);
        (s["State"] == "running" && s["Restarts"] == json!(round)).then_some(s)
    })
    .unwrap_or_else(|| {
        panic!(
            "restart {round}: the servers never saw it running again: {}",
            task_state(server_base, alloc)
        )
    });
    assert_eq!(state["Failed"], json!(false));
    let types = event_types(&state);
    assert!(
        types.ends_with(&[
            "Restart Signaled".into(),
            "Terminated".into(),
            "Restarting".into(),
            "Started".into()
        ]),
        "{types:?}"
    );
}

/// Signals SIGUSR1 through `agent_base` and waits for the trap's mark.
fn signal_and_check(agent_base: &str, marks: &Path, alloc: &str, task: Option<&str>) {
    let url = format!("{agent_base}/v1/client/allocation/{alloc}/signal");
    let mark = marks.join(format!("{alloc}.usr1"));
    let before = std::fs::read_to_string(&mark)
        .unwrap_or_default()
        .lines()
        .count();
    let (code, body) = call(
        "PUT",
        &url,
        Some(&json!({"Signal": "SIGUSR1", "Task": task})),
        &[],
    );
    assert_eq!(code, 200, "signal: {body}");
    let reached = wait_for(WAIT, || {
        let n = std::fs::read_to_string(&mark).ok()?.lines().count();
        (n > before).then_some(())
    });
    assert!(reached.is_some(), "the trap never ran");
}

#[test]
fn a_dev_agent_restarts_and_signals_its_allocation() {
    let agent = TestAgent::start(dev_config(), true);
    let base = base(&agent);
    let marks = temp_dir();
    let _reaper = Reaper(marks.path());
    let alloc = run_job(&base, &trap_job("trapper", marks.path()));
    pids(marks.path(), &alloc, 1);

    restart_and_check(&base, &base, marks.path(), &alloc, 1);
    // No body at all, as python-nomad sends it: every running task.
    let url = format!("{base}/v1/client/allocation/{alloc}/restart");
    let (code, body) = call("POST", &url, None, &[]);
    assert_eq!(code, 200, "{body}");
    pids(marks.path(), &alloc, 3);
    wait_for(WAIT, || {
        let s = task_state(&base, &alloc);
        (s["State"] == "running" && s["Restarts"] == json!(2)).then_some(())
    })
    .expect("running again after the second restart");

    signal_and_check(&base, marks.path(), &alloc, Some("t"));
    signal_and_check(&base, marks.path(), &alloc, None);
    let state = wait_for(WAIT, || {
        let s = task_state(&base, &alloc);
        event_types(&s)
            .iter()
            .any(|t| t == "Signaling")
            .then_some(s)
    })
    .expect("a Signaling event");
    let signaling = state["Events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["Type"] == "Signaling"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(signaling["Details"]["signal"], "SIGUSR1");
    assert_eq!(state["State"], "running", "a trapped signal ends nothing");

    // Nomad's answers to what cannot be done.
    let signal_url = format!("{base}/v1/client/allocation/{alloc}/signal");
    let (code, body) = call(
        "PUT",
        &signal_url,
        Some(&json!({"Signal": "INVALID-SIGNAL"})),
        &[],
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("invalid signal"), "{body}");
    let (code, body) = call(
        "PUT",
        &signal_url,
        Some(&json!({"Signal": "SIGUSR1", "Task": "nope"})),
        &[],
    );
    assert_eq!(code, 404, "{body}");
    let (code, body) = call("PUT", &signal_url, Some(&json!({"Signal": 5})), &[]);
    assert_eq!(code, 400, "a signal that is not a string: {body}");
    let (code, body) = call(
        "PUT",
        &url,
        Some(&json!({"TaskName": "t", "AllTasks": true})),
        &[],
    );
    assert_eq!(code, 400, "{body}");
    let stranger = uuid::Uuid::new_v4();
    let (code, body) = call(
        "POST",
        &format!("{base}/v1/client/allocation/{stranger}/restart"),
        None,
        &[],
    );
    assert_eq!(code, 404, "{body}");
    assert_eq!(body, format!("Unknown allocation \"{stranger}\""));
    let (code, body) = call(
        "POST",
        &format!("{base}/v1/client/allocation/not-an-id/signal"),
        Some(&json!({"Signal": "SIGHUP"})),
        &[],
    );
    assert_eq!(code, 404, "{body}");
    let (code, _) = get(&url);
    assert_eq!(code, 405);

    // Stopped, the allocation can be neither restarted nor signalled.
    let (code, body) = call(
        "PUT",
        &format!("{base}/v1/allocation/{alloc}/stop"),
        None,
        &[],
    );
    assert_eq!(code, 200, "stop: {body}");
    let stop: Value = serde_json::from_str(&body).expect("stop answer");
    assert!(
        stop["EvalID"].as_str().is_some_and(|e| !e.is_empty()),
        "{stop}"
    );
    wait_for(WAIT, || {
        let a = get_json(&format!("{base}/v1/allocation/{alloc}"));
        (a["ClientStatus"] == "complete").then_some(())
    })
    .expect("the stopped allocation completes");
    let (code, body) = call("POST", &url, None, &[]);
    assert_eq!(code, 400, "{body}");
    let (code, body) = call("PUT", &signal_url, Some(&json!({"Signal": "SIGUSR1"})), &[]);
    assert_eq!(code, 400, "{body}");
    let all = pids(marks.path(), &alloc, 3);
    assert!(
        wait_for(WAIT, || all.iter().all(|p| !alive(*p)).then_some(())).is_some(),
        "no process of the stopped allocation is left"
    );
}

/// A client-only agent on loopback joining `server`, in this process.
fn client_agent(server: &TestAgent, data_dir: &Path) -> TestAgent {
    let mut flags = FlagOverrides::default();
    flags.ports.insert("http".into(), 0);
    flags.log_level = Some("warn".into());
    flags.data_dir = Some(data_dir.to_path_buf());
    flags.bind_addr = Some("127.0.0.1".into());
    flags.name = Some("worker".into());
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
    TestAgent::start(config, false)
}

#[test]
fn a_request_sent_to_the_server_reaches_the_client_that_runs_the_allocation() {
    let server_dir = temp_dir();
    let server = TestAgent::start(server_config(server_dir.path()), false);
    let client_dir = temp_dir();
    let client = client_agent(&server, client_dir.path());
    let (server_base, client_base) = (base(&server), base(&client));
    wait_for(WAIT, || {
        get_json(&format!("{server_base}/v1/nodes"))
            .as_array()?
            .iter()
            .any(|n| n["Status"] == "ready")
            .then_some(())
    })
    .expect("the client's node is ready");
    let marks = temp_dir();
    let _reaper = Reaper(marks.path());
    let alloc = run_job(&server_base, &trap_job("remote", marks.path()));
    pids(marks.path(), &alloc, 1);

    // The server runs no client: it forwards to the node's agent.
    restart_and_check(&server_base, &server_base, marks.path(), &alloc, 1);
    signal_and_check(&server_base, marks.path(), &alloc, Some("t"));
    // The node's agent answers for itself too.
    signal_and_check(&client_base, marks.path(), &alloc, None);
    // Its refusals come back as it gave them.
    let (code, body) = call(
        "PUT",
        &format!("{server_base}/v1/client/allocation/{alloc}/signal"),
        Some(&json!({"Signal": "SIGUSR1", "Task": "nope"})),
        &[],
    );
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("nope"), "{body}");

    // A request a server already forwarded is not forwarded again.
    let (code, body) = call(
        "POST",
        &format!("{server_base}/v1/client/allocation/{alloc}/restart"),
        None,
        &[("X-Herder-Forwarded", "node")],
    );
    assert_eq!(code, 404, "{body}");
    assert!(body.starts_with("Unknown allocation"), "{body}");
    // An allocation the client does not run: it asks the server, which
    // knows none either.
    let stranger = uuid::Uuid::new_v4();
    let (code, body) = call(
        "POST",
        &format!("{client_base}/v1/client/allocation/{stranger}/restart"),
        None,
        &[],
    );
    assert_eq!(code, 404, "{body}");
    assert_eq!(body, format!("Unknown allocation \"{stranger}\""));

    // A stop sent to the client-only agent is the server's to do.
    let (code, body) = call(
        "POST",
        &format!("{client_base}/v1/allocation/{alloc}/stop"),
        None,
        &[],
    );
    assert_eq!(code, 200, "stop through the client agent: {body}");
    let stop: Value = serde_json::from_str(&body).expect("stop answer");
    assert!(
        stop["EvalID"].as_str().is_some_and(|e| !e.is_empty()),
        "{stop}"
    );
    let stopped = wait_for(WAIT, || {
        let a = get_json(&format!("{server_base}/v1/allocation/{alloc}"));
        (a["DesiredStatus"] == "stop" && a["ClientStatus"] == "complete").then_some(a)
    });
    assert!(stopped.is_some(), "the allocation was stopped");
    let all = pids(marks.path(), &alloc, 2);
    assert!(
        wait_for(WAIT, || all.iter().all(|p| !alive(*p)).then_some(())).is_some(),
        "no process of the stopped allocation is left"
    );
    let (code, body) = call(
        "POST",
        &format!("{server_base}/v1/client/allocation/{alloc}/restart"),
        None,
        &[],
    );
    assert_eq!(code, 400, "a stopped allocation is not restarted: {body}");
    // A client that is not `-dev` leaves its tasks running when it stops:
    // stop the job (and the replacement the stop placed) first.
    let (code, body) = call("DELETE", &format!("{server_base}/v1/job/remote"), None, &[]);
    assert_eq!(code, 200, "{body}");
    let over = wait_for(WAIT, || {
        get_json(&format!("{server_base}/v1/job/remote/allocations"))
            .as_array()?
            .iter()
            .all(|a| a["ClientStatus"] != "running" && a["ClientStatus"] != "pending")
            .then_some(())
    });
    assert!(over.is_some(), "every allocation of the job ended");
    // The server first: its shutdown answers the client's parked blocking
    // query, which would otherwise hold the client's stop for its minute.
    server.stop();
    client.stop();
}
