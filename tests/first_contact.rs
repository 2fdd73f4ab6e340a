//! What a new user meets first with the `herder` binary: stray `HERDER_*`
//! variables (`herder version` is in `actors/cli/tests/binary.rs`), the sidecar's honest address and prompt
//! exit on a signal with streams open, and `GET /v1/node/:id` in Nomad's
//! shape (what `nomad node status <id>` reads).

use herder_tests::{get, herder_bin};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// A `herder agent` child whose stderr is kept for inspection.
struct Agent {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Agent {
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Agent {
        let mut child = Command::new(herder_bin())
            .args(args)
            .envs(env.iter().copied())
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn herder");
        let stdout = child.stdout.take().expect("stdout");
        let stderr_pipe = child.stderr.take().expect("stderr");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
                if let Ok(mut s) = sink.lock() {
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(a) = line.trim().strip_prefix("HTTP API: http://") {
                    let _ = tx.send(a.parse::<SocketAddr>());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("herder printed its address")
            .expect("a socket address");
        Agent {
            child,
            addr,
            stderr,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Sends `signal`; answers how long the agent took to exit, and its
    /// exit status.
    fn signal_and_time(&mut self, signal: i32) -> (Duration, std::process::ExitStatus) {
        let started = Instant::now();
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return (started.elapsed(), status);
            }
            assert!(started.elapsed() < Duration::from_secs(30), "no exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn json(url: &str) -> Value {
    let (status, body) = get(url);
    assert_eq!(status, 200, "GET {url}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

#[test]
fn a_stray_herder_variable_is_ignored_with_a_warning_naming_it() {
    let mut agent = Agent::spawn(
        &["agent", "-dev", "-http-port", "0"],
        &[("HERDER_SOMETHING", "x"), ("HERDER_BIN", "/usr/bin/x")],
    );
    let (status, _) = get(&agent.url("/v1/agent/health"));
    assert_eq!(status, 200);
    let stderr = agent.stderr();
    let warning = stderr
        .lines()
        .find(|l| l.contains("WARN") && l.contains("HERDER_SOMETHING"))
        .unwrap_or_else(|| panic!("no warning naming HERDER_SOMETHING in:\n{stderr}"));
    assert!(warning.contains("HERDER_BIN"), "{warning}");
    let (_, exit) = agent.signal_and_time(libc::SIGTERM);
    assert!(exit.success(), "{exit:?}");
}

/// Sends `GET path` and reads the whole answer on a thread of its own.
fn open(addr: SocketAddr, path: &str) -> std::thread::JoinHandle<String> {
    let mut stream = TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    std::thread::spawn(move || {
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    })
}

/// A sidecar reports the loopback address it bound, and exits within a
/// second of SIGTERM or SIGINT with an event stream and a blocking query
/// open.
#[test]
fn a_sidecar_tells_its_real_address_and_exits_promptly_on_a_signal() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut agent = Agent::spawn(
            &[
                "agent",
                "-dev",
                "-sidecar",
                "-bind",
                "0.0.0.0",
                "-http-port",
                "0",
            ],
            &[],
        );
        let me = json(&agent.url("/v1/agent/self"));
        assert_eq!(me["config"]["BindAddr"], "127.0.0.1", "{me}");
        let answers = [
            open(agent.addr, "/v1/event/stream"),
            open(agent.addr, "/v1/jobs?index=1000000&wait=60s"),
        ];
        std::thread::sleep(Duration::from_millis(300));
        let (took, exit) = agent.signal_and_time(signal);
        assert!(exit.success(), "{exit:?}");
        assert!(
            took < Duration::from_secs(1),
            "exit took {took:?} after signal {signal}"
        );
        for answer in answers {
            let text = answer.join().expect("reader");
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        }
    }
}

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}

#[test]
fn a_node_reads_with_the_resource_fields_nomads_cli_needs() {
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/nomad-1.1.2/node.json"
        ))
        .expect("fixture"),
    )
    .expect("fixture JSON");
    let agent = Agent::spawn(&["agent", "-dev", "-http-port", "0"], &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        let nodes = json(&agent.url("/v1/nodes"));
        if let Some(id) = nodes[0]["ID"].as_str() {
            break id.to_string();
        }
        assert!(Instant::now() < deadline, "the dev client registers");
        std::thread::sleep(Duration::from_millis(50));
    };
    let node = json(&agent.url(&format!("/v1/node/{id}")));
    for field in [
        "Resources",
        "Reserved",
        "NodeResources",
        "ReservedResources",
    ] {
        assert!(node[field].is_object(), "{field} missing: {node}");
        let missing: Vec<String> = keys(&fixture[field])
            .into_iter()
            .filter(|k| node[field].get(k).is_none())
            .collect();
        assert!(missing.is_empty(), "{field} lacks {missing:?}: {node}");
    }
    assert!(node["Resources"]["CPU"].as_i64().unwrap_or(0) > 0, "{node}");
    assert!(node["Reserved"]["MemoryMB"].is_i64(), "{node}");
}
