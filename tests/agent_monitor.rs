//! `herder monitor` / `GET /v1/agent/monitor`: an agent's log, live, at a
//! level of the watcher's own that leaves the agent's output unchanged.

use herder_tests::{get, herder_bin, send_json, wait_for, HerderProcess};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A `herder monitor` child and the lines it printed so far.
struct Monitor {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Monitor {
    fn start(agent: &HerderProcess, extra: &[&str]) -> Monitor {
        let address = format!("http://{}", agent.addr);
        let mut child = Command::new(herder_bin())
            .args(["monitor", "-address", &address])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn herder monitor");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Monitor { child, lines }
    }

    /// The first line containing `needle` within `within`.
    fn line_with(&self, needle: &str, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return Some(line),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
        None
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Registers a batch job named `id`; its evaluation's ID.
fn register(agent: &HerderProcess, id: &str) -> String {
    let job = serde_json::json!({"Job": {
        "ID": id, "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/true"},
            "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}});
    let (code, body) = send_json("PUT", &format!("http://{}/v1/jobs", agent.addr), None, &job);
    assert_eq!(code, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON answer");
    answer["EvalID"].as_str().expect("EvalID").to_string()
}

/// Registers jobs until the monitor shows a line naming one's evaluation
/// (the first may be sent before the monitor is connected); that line.
fn line_caused_by_a_request(agent: &HerderProcess, monitor: &Monitor, prefix: &str) -> String {
    let seen = wait_for(Duration::from_secs(60), || {
        let eval = register(agent, &format!("{prefix}-{}", rand_suffix()));
        monitor.line_with(&eval, Duration::from_secs(3))
    });
    seen.expect("the monitor showed a line about a job registered after it started")
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

#[test]
fn monitor_shows_debug_lines_while_the_agent_logs_at_info() {
    let dir = herder_tests::temp_dir();
    let log = dir.path().join("stderr.log");
    let stderr = std::fs::File::create(&log).unwrap();
    let agent = HerderProcess::spawn_with(&["agent", "-dev", "-http-port", "0"], |c| {
        c.env_remove("RUST_LOG").stderr(stderr);
    });
    let monitor = Monitor::start(&agent, &["-log-level", "debug"]);
    let line = line_caused_by_a_request(&agent, &monitor, "text");
    assert!(line.contains("DEBUG"), "a debug line: {line}");

    // The watcher's level is its own: the agent still logs at info.
    let own = std::fs::read_to_string(&log).unwrap();
    assert!(own.contains(" INFO "), "the agent logs at info: {own}");
    assert!(
        !own.contains("DEBUG"),
        "the agent's own log gained debug lines"
    );

    // One JSON object per line with -json.
    let json = Monitor::start(&agent, &["-json", "-log-level", "debug"]);
    let line = line_caused_by_a_request(&agent, &json, "json");
    let object: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(object["level"], "DEBUG", "{line}");
}

#[test]
fn an_unknown_level_is_refused() {
    let agent = HerderProcess::spawn(&["agent", "-dev", "-http-port", "0"]);
    let (code, body) = get(&format!(
        "http://{}/v1/agent/monitor?log_level=loud",
        agent.addr
    ));
    assert_eq!(code, 400);
    assert_eq!(body, "Unknown log level: loud");
}
