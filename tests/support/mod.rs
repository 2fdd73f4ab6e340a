//! Shared helpers for herder's end-to-end tests: start an agent (in this
//! process or as the real binary), talk to it over HTTP, stop it.

pub mod browser;
pub mod cluster;
pub mod cluster_load;

use futures::channel::oneshot;
use herder_actors::agent::Agent;
use herder_actors::config::{AgentConfig, ConfigSources, FlagOverrides};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A fresh temporary directory that is removed when dropped.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("herder-test-")
        .tempdir()
        .expect("create a temporary directory")
}

/// A server-only configuration on a free loopback port, keeping its state
/// in `data_dir` (so a test can restart it there).
pub fn server_config(data_dir: &std::path::Path) -> AgentConfig {
    let mut flags = FlagOverrides::default();
    flags.ports.insert("http".into(), 0);
    flags.log_level = Some("warn".into());
    flags.data_dir = Some(data_dir.to_path_buf());
    flags.server.insert("enabled".into(), true.into());
    AgentConfig::load(&ConfigSources {
        env: Some(Vec::new()),
        flags,
        ..Default::default()
    })
    .expect("server configuration")
}

/// Polls `check` until it returns `Some`, for at most `timeout`.
pub fn wait_for<T>(timeout: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A dev-mode configuration on a free loopback port.
pub fn dev_config() -> AgentConfig {
    let mut flags = FlagOverrides::default();
    flags.ports.insert("http".into(), 0);
    flags.log_level = Some("warn".into());
    AgentConfig::load(&ConfigSources {
        dev: true,
        env: Some(Vec::new()),
        flags,
        ..Default::default()
    })
    .expect("dev configuration")
}

/// An agent running in its own thread with its own actix system, as a
/// separate process would; stopped (gracefully) on drop.
pub struct TestAgent {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    /// The server's parts (store, broker, ...) when the agent runs one.
    pub server: Option<herder_actors::server::ServerHandle>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TestAgent {
    /// Starts an agent with `config`; `temp_data_dir` as `-dev` does.
    pub fn start(config: AgentConfig, temp_data_dir: bool) -> TestAgent {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let system = actix_rt::System::new();
            system.block_on(async move {
                let agent = Agent::start(config, temp_data_dir)
                    .await
                    .expect("agent starts");
                ready_tx
                    .send((
                        agent.http_addr(),
                        agent.data_dir().to_path_buf(),
                        agent.server().cloned(),
                    ))
                    .expect("report address");
                // A dropped sender means the test ended: stop as well.
                let _ = stop_rx.await;
                agent.shutdown().await;
            });
        });
        let (addr, data_dir, server) = ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("agent started within 30 s");
        TestAgent {
            addr,
            data_dir,
            server,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Stops the agent and waits until it is down.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// GET, returning (status, body) for any status.
pub fn get(url: &str) -> (u16, String) {
    match ureq::get(url).timeout(Duration::from_secs(30)).call() {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("GET {url}: {e}"),
    }
}

/// The `herder` binary built next to this test binary.
pub fn herder_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("herder");
    assert!(
        bin.is_file(),
        "{} not built: run the tests with `cargo test --workspace`",
        bin.display()
    );
    bin
}

/// The variable that enables `raw_exec` on a client agent (off unless
/// enabled, as in Nomad; `-dev` enables it).
pub const RAW_EXEC_ENABLED: (&str, &str) = ("HERDER_CLIENT__RAW_EXEC_ENABLED", "true");

/// A running `herder` process whose stdout is read for its address.
pub struct HerderProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
}

impl HerderProcess {
    /// Runs `herder <args>` and waits for its "HTTP API:" line (http or
    /// https).
    pub fn spawn(args: &[&str]) -> HerderProcess {
        HerderProcess::spawn_with(args, |c| {
            c.env("RUST_LOG", "warn").stderr(Stdio::inherit());
        })
    }

    /// [`HerderProcess::spawn`] with extra environment variables (such as
    /// [`RAW_EXEC_ENABLED`]).
    pub fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> HerderProcess {
        HerderProcess::spawn_with(args, |c| {
            c.envs(env.iter().copied())
                .env("RUST_LOG", "warn")
                .stderr(Stdio::inherit());
        })
    }

    /// `spawn`, with the command's environment and stderr set by `setup`.
    pub fn spawn_with(args: &[&str], setup: impl FnOnce(&mut Command)) -> HerderProcess {
        use std::io::{BufRead, BufReader};
        let mut command = Command::new(herder_bin());
        command.args(args).stdout(Stdio::piped());
        setup(&mut command);
        let mut child = command.spawn().expect("spawn herder");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut addr = None;
            let mut dir = None;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let url = line.trim().strip_prefix("HTTP API: ");
                let host_port = url.and_then(|u| {
                    u.strip_prefix("http://")
                        .or_else(|| u.strip_prefix("https://"))
                });
                if let Some(a) = host_port {
                    addr = a.parse::<SocketAddr>().ok();
                }
                if let Some(d) = line.trim().strip_prefix("data dir: ") {
                    dir = Some(PathBuf::from(d));
                }
                if let (Some(a), Some(d)) = (addr, dir.clone()) {
                    let _ = tx.send((a, d));
                    addr = None;
                }
            }
        });
        let (addr, data_dir) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("herder printed its address");
        HerderProcess {
            child,
            addr,
            data_dir,
        }
    }

    /// Sends `signal` and waits (bounded) for the exit status.
    pub fn signal_and_wait(mut self, signal: i32) -> std::process::ExitStatus {
        let pid = self.child.id() as i32;
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, signal);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "herder did not exit within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for HerderProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `body` as JSON with `method`, optionally with `X-Nomad-Token`;
/// returns (status, body) for any status.
pub fn send_json(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: &serde_json::Value,
) -> (u16, String) {
    let mut req = ureq::request(method, url).timeout(Duration::from_secs(30));
    if let Some(t) = token {
        req = req.set("X-Nomad-Token", t);
    }
    match req.send_json(body.clone()) {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("{method} {url}: {e}"),
    }
}

/// Registers a ready node named `name` over the HTTP API, as a client
/// agent does; the node, with its secret.
pub fn register_ready_node(agent: &TestAgent, name: &str) -> herder::structs::Node {
    let mut node = herder::state::fixtures::node(name);
    node.status = herder::structs::NodeStatus::Ready;
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/node/register"),
        None,
        &serde_json::json!({"Node": node}),
    );
    assert_eq!(code, 200, "registering node {name}: {body}");
    node
}

/// Sends `body` as it is (it may not even be JSON); (status, body) for any
/// status, and (0, the error) when there was no answer.
pub fn send_raw(method: &str, url: &str, body: &str) -> (u16, String) {
    let req = ureq::request(method, url).timeout(Duration::from_secs(60));
    match req.send_string(body) {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

/// `s` percent-encoded for a query string.
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Peak resident memory of this process, in MiB (an in-process agent
/// counts in it).
pub fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// What an `alloc exec` session answered: its output (stdout and stderr
/// as they came) and the exit code of its `exited` frame.
#[derive(Debug)]
pub struct ExecOutcome {
    pub output: String,
    pub exit_code: i64,
}

/// Runs `command` in `task` of allocation `alloc` over the agent's exec
/// websocket (Nomad's framing), sending `stdin` then closing it; panics if
/// the session does not end within 60 s.
pub fn alloc_exec(
    addr: SocketAddr,
    alloc: &str,
    task: &str,
    command: &[&str],
    tty: bool,
    stdin: &[u8],
) -> ExecOutcome {
    alloc_exec_as(addr, alloc, task, command, tty, stdin, None)
}

/// [`alloc_exec`] with an ACL token in `X-Nomad-Token`.
pub fn alloc_exec_as(
    addr: SocketAddr,
    alloc: &str,
    task: &str,
    command: &[&str],
    tty: bool,
    stdin: &[u8],
    token: Option<&str>,
) -> ExecOutcome {
    use base64::Engine;
    use tungstenite::client::IntoClientRequest;
    use tungstenite::Message;
    let b64 = base64::engine::general_purpose::STANDARD;
    let command = serde_json::to_string(command).expect("command as JSON");
    let url = format!(
        "ws://{addr}/v1/client/allocation/{alloc}/exec?task={task}&tty={tty}&command={}",
        url_encode(&command)
    );
    let mut request = url.into_client_request().expect("a websocket request");
    if let Some(token) = token {
        let value = token.parse().expect("a token header value");
        request.headers_mut().insert("X-Nomad-Token", value);
    }
    let (mut socket, _) = tungstenite::connect(request).expect("exec websocket opens");
    let send = |socket: &mut tungstenite::WebSocket<_>, frame: serde_json::Value| {
        socket
            .send(Message::Text(frame.to_string()))
            .expect("send an exec frame");
    };
    if tty {
        send(
            &mut socket,
            serde_json::json!({"tty_size": {"height": 24, "width": 80}}),
        );
    }
    if !stdin.is_empty() {
        send(
            &mut socket,
            serde_json::json!({"stdin": {"data": b64.encode(stdin)}}),
        );
    }
    if !tty {
        send(&mut socket, serde_json::json!({"stdin": {"close": true}}));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut output = Vec::new();
    while Instant::now() < deadline {
        let text = match socket.read().expect("read an exec frame") {
            Message::Text(t) => t,
            Message::Close(_) => {
                panic!("closed before exited: {}", String::from_utf8_lossy(&output))
            }
            _ => continue,
        };
        let frame: serde_json::Value = serde_json::from_str(&text).expect("a JSON frame");
        if frame["exited"] == true {
            return ExecOutcome {
                output: String::from_utf8_lossy(&output).into_owned(),
                exit_code: frame["result"]["exit_code"].as_i64().expect("exit_code"),
            };
        }
        for key in ["stdout", "stderr"] {
            if let Some(data) = frame[key]["data"].as_str() {
                output.extend(b64.decode(data).expect("base64 data"));
            }
        }
    }
    panic!(
        "the exec session did not end: {}",
        String::from_utf8_lossy(&output)
    );
}

/// A client-only agent's configuration on a free loopback port, joining
/// the server whose HTTP port is `server_port`, keeping its state in
/// `data_dir`.
pub fn client_config(server_port: u16, data_dir: &std::path::Path, name: &str) -> AgentConfig {
    let mut flags = FlagOverrides::default();
    flags.ports.insert("http".into(), 0);
    flags.log_level = Some("warn".into());
    flags.data_dir = Some(data_dir.to_path_buf());
    flags.bind_addr = Some("127.0.0.1".into());
    flags.name = Some(name.to_string());
    flags.client.insert("enabled".into(), true.into());
    // The tests' jobs run raw_exec, which a client offers only when enabled.
    flags.client.insert("raw_exec_enabled".into(), true.into());
    flags.client.insert(
        "servers".into(),
        vec![format!("127.0.0.1:{server_port}")].into(),
    );
    AgentConfig::load(&ConfigSources {
        env: Some(Vec::new()),
        flags,
        ..Default::default()
    })
    .expect("client configuration")
}
