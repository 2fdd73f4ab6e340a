//! The client agent end to end: real processes run by `raw_exec` under
//! agents driven over HTTP, checked as a user would check them (the API,
//! `/proc`, files the tasks write).
//!
//! - a crashing task is restarted per its restart policy, then its
//!   allocation fails and the server reschedules it; its logs are served;
//! - `kill_timeout`: SIGTERM first, SIGKILL only once the timeout ran out;
//! - a stopped job leaves no process behind (the task's children included);
//! - a client killed with SIGKILL and started again on its data dir
//!   re-attaches to its running task instead of orphaning or restarting it;
//! - of two clients, the one killed is marked down, its allocation lost,
//!   and the work placed on the survivor.

use herder_tests::{
    dev_config, get, herder_bin, send_json, server_config, temp_dir, wait_for, HerderProcess,
    TestAgent, RAW_EXEC_ENABLED,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Generous: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(45);

/// A raw_exec task running `script` under `/bin/sh -c`, in a one-task
/// group `g` of a service job.
fn shell_job(id: &str, script: &str) -> Value {
    json!({
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", script]},
                "Resources": {"CPU": 50, "MemoryMB": 32}
            }]
        }]
    })
}

fn register(base: &str, job: &Value) {
    let (code, body) = send_json(
        "PUT",
        &format!("{base}/v1/jobs"),
        None,
        &json!({ "Job": job }),
    );
    assert_eq!(code, 200, "register: {body}");
}

fn stop_job(base: &str, job: &str) {
    let r = ureq::delete(&format!("{base}/v1/job/{job}"))
        .timeout(Duration::from_secs(30))
        .call();
    assert!(r.is_ok(), "stopping {job}: {r:?}");
}

fn get_json(url: &str) -> Value {
    let (code, body) = get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

fn job_allocs(base: &str, job: &str) -> Vec<Value> {
    get_json(&format!("{base}/v1/job/{job}/allocations"))
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn alloc(base: &str, id: &str) -> Value {
    get_json(&format!("{base}/v1/allocation/{id}"))
}

/// Waits until some allocation of `job` satisfies `pick`.
fn wait_alloc(base: &str, job: &str, what: &str, pick: impl Fn(&Value) -> bool) -> Value {
    wait_for(WAIT, || job_allocs(base, job).into_iter().find(&pick))
        .unwrap_or_else(|| panic!("{job}: no allocation {what}:\n{}", explain(base, job)))
}

/// What a failing test should show: the job's allocations, evaluations
/// and the nodes, one line each.
fn explain(base: &str, job: &str) -> String {
    let field = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
    let mut lines = Vec::new();
    for a in job_allocs(base, job) {
        lines.push(format!(
            "alloc {} node {} client {} desired {} ({}) prev {} task {}",
            field(&a, "ID"),
            field(&a, "NodeID"),
            field(&a, "ClientStatus"),
            field(&a, "DesiredStatus"),
            field(&a, "DesiredDescription"),
            field(&a, "PreviousAllocation"),
            a["TaskStates"]["t"]
        ));
    }
    for e in get_json(&format!("{base}/v1/job/{job}/evaluations"))
        .as_array()
        .into_iter()
        .flatten()
    {
        lines.push(format!(
            "eval {} {} {} node {} queued {} failed {} ({})",
            field(e, "ID"),
            field(e, "TriggeredBy"),
            field(e, "Status"),
            field(e, "NodeID"),
            e["QueuedAllocations"],
            e["FailedTGAllocs"],
            field(e, "StatusDescription"),
        ));
    }
    for n in get_json(&format!("{base}/v1/nodes"))
        .as_array()
        .into_iter()
        .flatten()
    {
        lines.push(format!(
            "node {} {} {} eligibility {}",
            field(n, "ID"),
            field(n, "Name"),
            field(n, "Status"),
            field(n, "SchedulingEligibility")
        ));
    }
    lines.join("\n")
}

fn status_is(status: &'static str) -> impl Fn(&Value) -> bool {
    move |a| a["ClientStatus"] == status
}

fn id_of(a: &Value) -> String {
    a["ID"].as_str().expect("allocation ID").to_string()
}

/// The pid a task wrote to `file`, once it did.
fn wait_pid(file: &Path) -> i32 {
    wait_for(WAIT, || {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
    })
    .unwrap_or_else(|| panic!("the task never wrote {}", file.display()))
}

/// Alive: present in /proc and neither a zombie nor dead (a zombie has
/// exited; it only waits for a parent to collect its status).
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
}

fn wait_gone(pid: i32) -> bool {
    wait_for(WAIT, || (!alive(pid)).then_some(())).is_some()
}

/// Kills (with their process groups) the processes whose pid files it
/// holds when the test ends, so that a failing test leaves nothing behind.
struct Reaper(Vec<PathBuf>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for file in &self.0 {
            let pid = std::fs::read_to_string(file)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok());
            if let Some(pid) = pid.filter(|p| *p > 1 && alive(*p)) {
                // SAFETY: kill(2) on a process group this test started.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                }
            }
        }
    }
}

fn dev_agent() -> TestAgent {
    TestAgent::start(dev_config(), true)
}

fn base(agent: &TestAgent) -> String {
    format!("http://{}", agent.addr)
}

/// The task's log as the logs API serves it in frames: (decoded bytes, the
/// frames' files).
fn framed_logs(base: &str, alloc_id: &str, query: &str) -> (String, Vec<String>) {
    use base64::Engine;
    let url = format!("{base}/v1/client/fs/logs/{alloc_id}?{query}");
    let (code, body) = get(&url);
    assert_eq!(code, 200, "GET {url}: {body}");
    let mut data = Vec::new();
    let mut files = Vec::new();
    for line in body.lines() {
        let frame: Value = serde_json::from_str(line).expect("one frame per line");
        if let Some(d) = frame["Data"].as_str() {
            data.extend(base64::engine::general_purpose::STANDARD.decode(d).unwrap());
            files.push(frame["File"].as_str().unwrap_or_default().to_string());
        }
    }
    (String::from_utf8(data).unwrap(), files)
}

#[test]
fn a_crashing_task_is_restarted_then_its_allocation_fails_and_is_rescheduled() {
    let agent = dev_agent();
    let base = base(&agent);
    let mut job = shell_job("crash", "echo run; echo oops >&2; exit 3");
    job["TaskGroups"][0]["RestartPolicy"] = json!({
        "Attempts": 2, "Interval": 60_000_000_000u64, "Delay": 200_000_000u64, "Mode": "fail"
    });
    job["TaskGroups"][0]["ReschedulePolicy"] = json!({
        "Attempts": 1, "Interval": 3_600_000_000_000u64, "Delay": 5_000_000_000u64,
        "DelayFunction": "constant", "Unlimited": false
    });
    register(&base, &job);

    let first = wait_alloc(&base, "crash", "failed", status_is("failed"));
    let first_id = id_of(&first);
    let task = &alloc(&base, &first_id)["TaskStates"]["t"];
    assert_eq!(task["State"], "dead");
    assert_eq!(task["Failed"], true);
    assert_eq!(
        task["Restarts"], 2,
        "restarted twice before failing: {task:#}"
    );
    let events: Vec<&str> = task["Events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["Type"].as_str())
        .collect();
    assert_eq!(events.iter().filter(|t| **t == "Restarting").count(), 2);
    assert_eq!(events.last(), Some(&"Not Restarting"), "{events:?}");

    // PreviousAllocation is not in the list's stubs: read each one whole.
    let second = wait_alloc(&base, "crash", "rescheduled", |a| {
        alloc(&base, &id_of(a))["PreviousAllocation"] == first_id.as_str()
    });
    let second_id = id_of(&second);
    assert_ne!(second_id, first_id);
    assert_eq!(
        alloc(&base, &first_id)["NextAllocation"],
        second_id.as_str()
    );
    // The replacement crashes as well; its one reschedule attempt is used
    // up, so once the evaluations are done nothing else is placed.
    let settled = wait_for(WAIT, || {
        let failed = alloc(&base, &second_id)["ClientStatus"] == "failed";
        let evals = get_json(&format!("{base}/v1/job/crash/evaluations"));
        let done = evals
            .as_array()?
            .iter()
            .all(|e| e["Status"] == "complete" || e["Status"] == "blocked");
        (failed && done).then_some(())
    });
    assert!(settled.is_some(), "{}", explain(&base, "crash"));
    assert_eq!(
        job_allocs(&base, "crash").len(),
        2,
        "{}",
        explain(&base, "crash")
    );

    // The three runs' output, from the client that ran them.
    let plain = format!("{base}/v1/client/fs/logs/{first_id}?task=t&type=stdout&plain=true");
    let (code, body) = get(&plain);
    assert_eq!((code, body.as_str()), (200, "run\nrun\nrun\n"));
    // Following a dead task's log returns once it is drained.
    let (stderr, files) = framed_logs(&base, &first_id, "task=t&type=stderr&follow=true");
    assert_eq!(stderr, "oops\noops\noops\n");
    assert!(
        files.iter().all(|f| f == "alloc/logs/t.stderr.0"),
        "{files:?}"
    );
    let (tail, _) = framed_logs(&base, &first_id, "task=t&type=stdout&origin=end&offset=4");
    assert_eq!(tail, "run\n");

    let (code, body) = get(&format!("{base}/v1/client/fs/logs/{first_id}?type=stdout"));
    assert_eq!((code, body.as_str()), (400, "must provide task name"));
    let (code, body) = get(&format!("{base}/v1/client/fs/logs/{first_id}?task=t"));
    assert_eq!(code, 400, "{body}");
    let (code, body) = get(&format!(
        "{base}/v1/client/fs/logs/{first_id}?task=x&type=stdout"
    ));
    assert_eq!(code, 404, "{body}");
    let unknown = uuid::Uuid::new_v4();
    let (code, body) = get(&format!(
        "{base}/v1/client/fs/logs/{unknown}?task=t&type=stdout"
    ));
    assert_eq!(
        (code, body),
        (404, format!("Unknown allocation \"{unknown}\""))
    );
}

#[test]
fn kill_timeout_is_honoured_sigterm_first_sigkill_only_after_it() {
    let agent = dev_agent();
    let base = base(&agent);
    let dir = temp_dir();
    let d = dir.path().display();
    let _reaper = Reaper(vec![dir.path().join("pid1"), dir.path().join("pid2")]);

    // Traps SIGTERM and needs one second to finish: within its 3 s.
    let graceful = format!(
        "trap 'echo term > {d}/term; sleep 1; echo clean > {d}/clean; exit 0' TERM; \
         echo $$ > {d}/pid1; while :; do sleep 0.1; done"
    );
    let mut job = shell_job("graceful", &graceful);
    job["TaskGroups"][0]["Tasks"][0]["KillTimeout"] = json!(3_000_000_000u64);
    register(&base, &job);
    wait_alloc(&base, "graceful", "running", status_is("running"));
    let pid = wait_pid(&dir.path().join("pid1"));
    stop_job(&base, "graceful");
    assert!(wait_gone(pid), "the task exited");
    let done = wait_alloc(&base, "graceful", "complete", status_is("complete"));
    assert!(dir.path().join("term").is_file(), "the task got SIGTERM");
    assert!(
        dir.path().join("clean").is_file(),
        "the task finished its own shutdown: no SIGKILL within kill_timeout"
    );
    let events = &alloc(&base, &id_of(&done))["TaskStates"]["t"]["Events"];
    let killing = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["Type"] == "Killing")
        .expect("a Killing event");
    assert_eq!(killing["Details"]["kill_timeout"], "3s");
    let terminated = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["Type"] == "Terminated")
        .expect("a Terminated event");
    assert_eq!(
        (terminated["ExitCode"].clone(), terminated["Signal"].clone()),
        (json!(0), json!(0))
    );

    // Ignores SIGTERM: killed once its 1 s is over, not before.
    let stubborn = format!("trap '' TERM; echo $$ > {d}/pid2; while :; do sleep 0.1; done");
    let mut job = shell_job("stubborn", &stubborn);
    job["TaskGroups"][0]["Tasks"][0]["KillTimeout"] = json!(1_000_000_000u64);
    register(&base, &job);
    wait_alloc(&base, "stubborn", "running", status_is("running"));
    let pid = wait_pid(&dir.path().join("pid2"));
    let asked = Instant::now();
    stop_job(&base, "stubborn");
    assert!(wait_gone(pid), "SIGKILL ended the task");
    let took = asked.elapsed();
    assert!(
        took >= Duration::from_secs(1),
        "killed after {took:?}, before its kill_timeout"
    );
    let done = wait_alloc(&base, "stubborn", "complete", status_is("complete"));
    let events = &alloc(&base, &id_of(&done))["TaskStates"]["t"]["Events"];
    let terminated = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["Type"] == "Terminated")
        .expect("a Terminated event");
    assert_eq!(terminated["Signal"], 9, "{terminated:#}");
}

#[test]
fn a_stopped_jobs_processes_are_gone_and_its_log_is_followed_until_then() {
    let agent = dev_agent();
    let base = base(&agent);
    let dir = temp_dir();
    let d = dir.path().display();
    let _reaper = Reaper(vec![dir.path().join("pid"), dir.path().join("child")]);
    // The task's shell and a child of its own, both recorded.
    let script = format!(
        "echo $$ > {d}/pid; sleep 300 & echo $! > {d}/child; \
         i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done"
    );
    register(&base, &shell_job("svc", &script));
    let running = wait_alloc(&base, "svc", "running", status_is("running"));
    let alloc_id = id_of(&running);
    let pid = wait_pid(&dir.path().join("pid"));
    let child = wait_pid(&dir.path().join("child"));
    assert!(alive(pid) && alive(child));

    // `herder alloc logs` with a prefix of the ID, as a user runs it.
    let ticks = wait_for(WAIT, || {
        let out = Command::new(herder_bin())
            .args(["alloc", "logs", "-address", &base, &alloc_id[..8]])
            .output()
            .expect("run herder alloc logs");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        (out.status.success() && text.contains("tick 2\n")).then_some(text)
    })
    .expect("herder alloc logs prints the task's output");
    assert!(ticks.starts_with("tick 0\ntick 1\ntick 2\n"), "{ticks}");
    let out = Command::new(herder_bin())
        .args([
            "alloc", "logs", "-address", &base, "-tail", "-n", "1", &alloc_id,
        ])
        .output()
        .unwrap();
    let last = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        last.starts_with("tick ") && last.lines().count() == 1,
        "{last:?}"
    );

    // A follower sees new output as it comes, and its stream ends once the
    // task is dead.
    let follow_url =
        format!("{base}/v1/client/fs/logs/{alloc_id}?task=t&type=stdout&follow=true&plain=true");
    let follower = std::thread::spawn(move || {
        // Longer than `get`'s 30 s: the stream lasts until the task dies.
        let answer = ureq::get(&follow_url)
            .timeout(Duration::from_secs(120))
            .call()
            .expect("the logs stream opens");
        (answer.status(), answer.into_string().unwrap_or_default())
    });
    let seen_before_stop = wait_for(WAIT, || {
        let (code, body) = get(&format!(
            "{base}/v1/client/fs/logs/{alloc_id}?task=t&type=stdout&plain=true"
        ));
        (code == 200 && body.contains("tick 5\n")).then_some(())
    });
    assert!(seen_before_stop.is_some(), "the task keeps writing");
    stop_job(&base, "svc");
    assert!(wait_gone(pid), "the task's shell is gone");
    assert!(wait_gone(child), "the task's child is gone");
    wait_alloc(&base, "svc", "complete", status_is("complete"));
    let (code, body) = follower
        .join()
        .expect("the follower returns once the task is dead");
    assert_eq!(code, 200);
    assert!(
        body.starts_with("tick 0\n") && body.contains("tick 5\n"),
        "{body}"
    );
}

/// A `herder agent -server -client` on `data_dir`, bound to loopback.
fn agent_process(data_dir: &Path) -> HerderProcess {
    let dir = data_dir.to_str().unwrap();
    HerderProcess::spawn_with_env(
        &[
            "agent",
            "-server",
            "-client",
            "-data-dir",
            dir,
            "-bind",
            "127.0.0.1",
            "-http-port",
            "0",
        ],
        &[RAW_EXEC_ENABLED],
    )
}

#[test]
fn a_client_killed_and_restarted_reattaches_to_its_task_and_still_stops_it() {
    let data = temp_dir();
    let marks = temp_dir();
    let m = marks.path().display();
    let _reaper = Reaper(vec![marks.path().join("pid")]);
    let agent = agent_process(data.path());
    let base = format!("http://{}", agent.addr);
    let script = format!("echo $$ > {m}/pid; while :; do sleep 0.2; done");
    register(&base, &shell_job("keep", &script));
    let running = wait_alloc(&base, "keep", "running", status_is("running"));
    let alloc_id = id_of(&running);
    let pid = wait_pid(&marks.path().join("pid"));
    let started_at = alloc(&base, &alloc_id)["TaskStates"]["t"]["StartedAt"].clone();

    // No goodbye: the agent dies at once; its task runs on.
    let status = agent.signal_and_wait(libc::SIGKILL);
    assert!(!status.success());
    assert!(alive(pid), "the task outlives its client");

    let agent = agent_process(data.path());
    let base = format!("http://{}", agent.addr);
    // Re-attached: the same process, never restarted, the allocation
    // still running as far as the servers know.
    let reattached = wait_for(WAIT, || {
        let a = alloc(&base, &alloc_id);
        let task = &a["TaskStates"]["t"];
        (a["ClientStatus"] == "running" && task["State"] == "running").then(|| a.clone())
    })
    .expect("the allocation is running after the restart");
    assert_eq!(reattached["TaskStates"]["t"]["Restarts"], 0);
    assert_eq!(reattached["TaskStates"]["t"]["StartedAt"], started_at);
    assert!(alive(pid), "the same process still runs");
    assert_eq!(job_allocs(&base, "keep").len(), 1, "nothing was replaced");
    // Give the restored client a moment to settle, then check again that
    // it did not start a second copy or lose the first.
    let settled = wait_for(Duration::from_secs(3), || {
        (alloc(&base, &alloc_id)["ClientStatus"] != "running").then_some(())
    });
    assert!(settled.is_none(), "the allocation stays running");
    assert!(alive(pid));

    stop_job(&base, "keep");
    assert!(
        wait_gone(pid),
        "stopping the job kills the re-attached process"
    );
    wait_alloc(&base, "keep", "complete", status_is("complete"));
    assert!(agent.signal_and_wait(libc::SIGTERM).success());
    assert!(!alive(pid), "nothing left behind");
}

#[test]
fn of_two_clients_the_killed_one_goes_down_and_its_work_moves_to_the_other() {
    let server_dir = temp_dir();
    let mut config = server_config(server_dir.path());
    config.server.min_heartbeat_ttl = Duration::from_secs(1);
    config.server.heartbeat_grace = Duration::from_secs(1);
    let server = TestAgent::start(config, false);
    let base = base(&server);
    let servers = format!("127.0.0.1:{}", server.addr.port());
    let marks = temp_dir();
    let m = marks.path().display();

    let client_dirs = [temp_dir(), temp_dir()];
    let mut clients: Vec<HerderProcess> = client_dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            HerderProcess::spawn_with_env(
                &[
                    "agent",
                    "-client",
                    "-servers",
                    &servers,
                    "-data-dir",
                    d.path().to_str().unwrap(),
                    "-bind",
                    "127.0.0.1",
                    "-http-port",
                    "0",
                    "-node",
                    &format!("client-{i}"),
                ],
                &[RAW_EXEC_ENABLED],
            )
        })
        .collect();
    let nodes = wait_for(WAIT, || {
        let nodes = get_json(&format!("{base}/v1/nodes"));
        let ready: Vec<Value> = nodes
            .as_array()?
            .iter()
            .filter(|n| n["Status"] == "ready")
            .cloned()
            .collect();
        (ready.len() == 2).then_some(ready)
    })
    .expect("both clients registered and ready");

    // Two copies, spread over the two nodes. (With distinct_hosts the lost
    // copy could not be replaced on the one node left, in Nomad as here.)
    let script = format!(
        "echo $$ > {m}/$NOMAD_ALLOC_ID.pid; echo serving $NOMAD_ALLOC_ID; \
         while :; do sleep 0.2; done"
    );
    let mut job = shell_job("pair", &script);
    job["TaskGroups"][0]["Count"] = json!(2);
    job["TaskGroups"][0]["Spreads"] = json!([{"Attribute": "${node.unique.id}", "Weight": 100}]);
    register(&base, &job);
    let placed = wait_for(WAIT, || {
        let allocs = job_allocs(&base, "pair");
        (allocs.len() == 2 && allocs.iter().all(status_is("running"))).then_some(allocs)
    })
    .expect("both copies running");
    let _reaper = Reaper(
        placed
            .iter()
            .map(|a| marks.path().join(format!("{}.pid", id_of(a))))
            .collect(),
    );
    assert_ne!(
        placed[0]["NodeID"], placed[1]["NodeID"],
        "one copy per node"
    );

    // Kill the client of node 0 without a word to the servers.
    // (`clients` keeps the survivor's process until the test ends.)
    let victim = clients.remove(0);
    let victim_node = wait_for(WAIT, || {
        nodes
            .iter()
            .find(|n| n["Name"] == "client-0")
            .and_then(|n| n["ID"].as_str().map(str::to_string))
    })
    .expect("client-0's node");
    let survivor_node = nodes
        .iter()
        .find(|n| n["Name"] == "client-1")
        .and_then(|n| n["ID"].as_str())
        .unwrap()
        .to_string();
    let lost_alloc = placed
        .iter()
        .find(|a| a["NodeID"] == victim_node.as_str())
        .map(id_of)
        .expect("a copy on client-0");
    victim.signal_and_wait(libc::SIGKILL);

    let down = wait_for(WAIT, || {
        let n = get_json(&format!("{base}/v1/node/{victim_node}"));
        (n["Status"] == "down").then_some(())
    });
    assert!(down.is_some(), "the silent node is marked down");
    let lost = wait_for(WAIT, || {
        let a = alloc(&base, &lost_alloc);
        (a["ClientStatus"] == "lost").then_some(a)
    });
    assert!(lost.is_some(), "its allocation is marked lost");
    let replacement = wait_alloc(&base, "pair", "replacing the lost one", |a| {
        a["ID"] != lost_alloc.as_str()
            && a["NodeID"] == survivor_node.as_str()
            && a["ClientStatus"] == "running"
            && !placed.iter().any(|p| p["ID"] == a["ID"])
    });
    let pid_file = marks.path().join(format!("{}.pid", id_of(&replacement)));
    let _replacement_reaper = Reaper(vec![pid_file.clone()]);
    let pid = wait_pid(&pid_file);
    assert!(alive(pid), "the replacement is a running process");
    let running = job_allocs(&base, "pair")
        .iter()
        .filter(|a| a["ClientStatus"] == "running" && a["DesiredStatus"] == "run")
        .count();
    assert_eq!(running, 2, "two copies run again, both on the survivor");

    // Its logs come from the survivor's agent, which `herder alloc logs`
    // finds through the node's HTTPAddr; the server runs no client.
    let replacement_id = id_of(&replacement);
    let printed = wait_for(WAIT, || {
        let out = Command::new(herder_bin())
            .args(["alloc", "logs", "-address", &base, &replacement_id])
            .output()
            .expect("run herder alloc logs");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        (text == format!("serving {replacement_id}\n")).then_some(())
    });
    assert!(
        printed.is_some(),
        "herder alloc logs reads from the survivor"
    );
    // The server-only agent routes a logs request to the survivor's agent.
    let (code, body) = get(&format!(
        "{base}/v1/client/fs/logs/{replacement_id}?task=t&type=stdout&plain=true"
    ));
    assert_eq!(
        (code, body),
        (200, format!("serving {replacement_id}\n")),
        "the server forwards the logs request"
    );

    // The survivor still obeys: stopping the job ends its processes.
    stop_job(&base, "pair");
    assert!(wait_gone(pid), "the replacement stops with its job");
}
