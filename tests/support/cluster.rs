//! Three real `herder agent -server` processes on loopback forming one
//! Raft cluster, for fault tests: who leads (as every live server sees it),
//! kill -9, SIGSTOP/SIGCONT, graceful stop, restart on the same data dir,
//! wipe a data dir and restart, and a `herder sim nodes` process
//! heartbeating to all three.
//!
//! Every process writes its stdout and stderr to a log file in the
//! cluster's temporary directory. When a test panics while a [`Cluster`] is
//! alive, the directory is kept and the tail of every log is printed, so a
//! failure shows what each server said (`HERDER_CLUSTER_KEEP=1` keeps the
//! directory of a passing test too). Every wait has a deadline.

use crate::herder_bin;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How many servers a [`Cluster`] runs.
pub const SERVERS: usize = 3;

/// How long a single status request may take before the server counts as
/// not answering (a stopped process never answers).
const STATUS_TIMEOUT: Duration = Duration::from_millis(1500);

/// Lines of each log printed when a test fails.
const LOG_TAIL_LINES: usize = 60;

/// What a test may change about the servers it starts.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Extra TOML appended to every server's configuration file (for
    /// example a small `raft_snapshot_threshold` under `[server]`).
    pub server_toml: String,
    /// The servers' `-log-level`.
    pub log_level: String,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            server_toml: String::new(),
            log_level: std::env::var("HERDER_CLUSTER_LOG_LEVEL").unwrap_or_else(|_| "info".into()),
        }
    }
}

/// Where one server's process stands, as the harness left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerState {
    Running,
    /// SIGSTOPped: alive, holding its sockets, answering nothing.
    Paused,
    /// Killed or stopped; its data dir is kept for a restart.
    Down,
}

/// One server of the cluster: its fixed addresses and its process.
pub struct ClusterServer {
    pub name: String,
    pub http_port: u16,
    pub rpc_port: u16,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    child: Option<Child>,
    pub state: ServerState,
}

impl ClusterServer {
    /// The base URL of its HTTP API (`http://127.0.0.1:port`).
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Its RPC address as the servers name each other (`127.0.0.1:port`).
    pub fn rpc_addr(&self) -> String {
        format!("127.0.0.1:{}", self.rpc_port)
    }

    fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }
}

/// Three servers and, optionally, a simulated-node process.
pub struct Cluster {
    dir: Option<tempfile::TempDir>,
    pub servers: Vec<ClusterServer>,
    key: String,
    config_path: PathBuf,
    options: ClusterOptions,
    sim: Option<(Child, PathBuf)>,
}

/// `n` distinct free loopback ports (bound, read, released: another
/// process could take one in between, which is unlikely on a test machine).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("bound address").port())
        .collect()
}

/// A fresh cluster key: base64 of 32 random bytes, as `herder operator
/// gossip keygen` prints.
pub fn cluster_key() -> String {
    use base64::Engine;
    let mut bytes = Vec::with_capacity(32);
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

impl Cluster {
    /// Starts three servers that find each other through `-retry-join` and
    /// bootstrap once all three see each other; returns without waiting
    /// for a leader (see [`Cluster::wait_for_leader`]).
    pub fn start(options: ClusterOptions) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("herder-cluster-")
            .tempdir()
            .expect("create the cluster's temporary directory");
        let ports = free_ports(2 * SERVERS);
        let servers = (0..SERVERS)
            .map(|i| ClusterServer {
                name: format!("s{}", i + 1),
                http_port: ports[2 * i],
                rpc_port: ports[2 * i + 1],
                data_dir: dir.path().join(format!("s{}-data", i + 1)),
                log_path: dir.path().join(format!("s{}.log", i + 1)),
                child: None,
                state: ServerState::Down,
            })
            .collect();
        let config_path = dir.path().join("server.toml");
        std::fs::write(&config_path, &options.server_toml).expect("write the server config");
        let mut cluster = Cluster {
            dir: Some(dir),
            servers,
            key: cluster_key(),
            config_path,
            options,
            sim: None,
        };
        for i in 0..SERVERS {
            cluster.spawn(i);
        }
        cluster
    }

    /// The cluster key the servers were started with (`-encrypt`), for a
    /// process the test starts beside them.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The directory holding the data dirs and logs.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new("."), |d| d.path())
    }

    /// The HTTP base URLs of all servers, whatever their state.
    pub fn http_urls(&self) -> Vec<String> {
        self.servers.iter().map(ClusterServer::http_url).collect()
    }

    /// The HTTP base URLs of the servers that are running (not paused,
    /// not down).
    pub fn running_urls(&self) -> Vec<String> {
        self.running().map(|i| self.servers[i].http_url()).collect()
    }

    /// Indexes of the running servers.
    pub fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..SERVERS).filter(|i| self.servers[*i].state == ServerState::Running)
    }

    /// `path` on server `i` (`path` starts with `/`).
    pub fn url(&self, i: usize, path: &str) -> String {
        format!("{}{path}", self.servers[i].http_url())
    }

    fn agent_args(&self, i: usize) -> Vec<String> {
        let s = &self.servers[i];
        let mut args: Vec<String> = vec![
            "agent".into(),
            "-server".into(),
            "-bootstrap-expect".into(),
            SERVERS.to_string(),
        ];
        for (j, other) in self.servers.iter().enumerate() {
            if j != i {
                args.push("-retry-join".into());
                args.push(other.rpc_addr());
            }
        }
        args.extend([
            "-rpc-port".into(),
            s.rpc_port.to_string(),
            "-http-port".into(),
            s.http_port.to_string(),
            "-bind".into(),
            "127.0.0.1".into(),
            "-data-dir".into(),
            s.data_dir.display().to_string(),
            "-encrypt".into(),
            self.key.clone(),
            "-node".into(),
            s.name.clone(),
            "-log-level".into(),
            self.options.log_level.clone(),
            "-config".into(),
            self.config_path.display().to_string(),
        ]);
        args
    }

    /// Starts server `i`'s process on its data dir (kept from an earlier
    /// run, if any); its output is appended to its log.
    fn spawn(&mut self, i: usize) {
        let args = self.agent_args(i);
        let s = &mut self.servers[i];
        assert!(s.child.is_none(), "{} is already running", s.name);
        std::fs::create_dir_all(&s.data_dir).expect("create the data dir");
        let log = open_log(&s.log_path);
        let child = herder_command()
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn herder agent");
        s.child = Some(child);
        s.state = ServerState::Running;
    }

    /// Whether server `i` answers HTTP at all (any status).
    pub fn answers(&self, i: usize) -> bool {
        status_get(&self.url(i, "/v1/status/leader")).is_ok()
    }

    /// Waits until every running server answers HTTP.
    pub fn wait_until_answering(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        for i in self.running().collect::<Vec<_>>() {
            while !self.answers(i) {
                self.assert_alive(i);
                assert!(
                    Instant::now() < deadline,
                    "{} does not answer HTTP after {timeout:?}",
                    self.servers[i].name
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Panics (with its log) if server `i`'s process has exited on its own.
    pub fn assert_alive(&mut self, i: usize) {
        let s = &mut self.servers[i];
        if let Some(child) = &mut s.child {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "{} exited on its own ({status}); its log:\n{}",
                    s.name,
                    log_tail(&s.log_path, LOG_TAIL_LINES)
                );
            }
        }
    }

    /// The leader as server `i` sees it: the index of the server whose RPC
    /// address it names, `None` when it names none, names an unknown
    /// address, or does not answer.
    pub fn leader_seen_by(&self, i: usize) -> Option<usize> {
        let (code, body) = status_get(&self.url(i, "/v1/status/leader")).ok()?;
        if code != 200 {
            return None;
        }
        let addr: String = serde_json::from_str(&body).ok()?;
        self.servers.iter().position(|s| s.rpc_addr() == addr)
    }

    /// The leader every running server names, when they all name the same
    /// running server.
    pub fn agreed_leader(&self) -> Option<usize> {
        let mut seen = self.running().map(|i| self.leader_seen_by(i));
        let first = seen.next()??;
        if seen.all(|l| l == Some(first)) && self.servers[first].state == ServerState::Running {
            Some(first)
        } else {
            None
        }
    }

    /// Waits until all running servers agree on a running leader; answers
    /// it, or panics after `timeout` with what each server said.
    pub fn wait_for_leader(&self, timeout: Duration) -> usize {
        crate::wait_for(timeout, || self.agreed_leader()).unwrap_or_else(|| {
            panic!(
                "no leader agreed by all running servers within {timeout:?}: {}",
                self.describe_leaders()
            )
        })
    }

    /// What each server says about the leader, for failure messages.
    pub fn describe_leaders(&self) -> String {
        (0..SERVERS)
            .map(|i| {
                let s = &self.servers[i];
                let said = match s.state {
                    ServerState::Running => match status_get(&self.url(i, "/v1/status/leader")) {
                        Ok((code, body)) => format!("{code} {}", body.trim()),
                        Err(e) => format!("no answer ({e})"),
                    },
                    other => format!("{other:?}"),
                };
                format!("{} (rpc {}): {said}", s.name, s.rpc_addr())
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn signal(&self, i: usize, signal: i32) {
        let s = &self.servers[i];
        let pid = s
            .pid()
            .unwrap_or_else(|| panic!("{} has no process", s.name));
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "signal {signal} to {}", s.name);
    }

    /// kill -9 server `i` and reap it; its data dir stays.
    pub fn kill(&mut self, i: usize) {
        self.signal(i, libc::SIGKILL);
        self.reap(i, Duration::from_secs(10));
    }

    /// Stops server `i` gracefully (SIGTERM) and waits for it to exit.
    pub fn stop(&mut self, i: usize) {
        self.signal(i, libc::SIGTERM);
        self.reap(i, Duration::from_secs(30));
    }

    /// Stops every running server at once (SIGTERM to all, as an operator
    /// stopping the cluster); answers how long until the last one exited.
    pub fn stop_all(&mut self) -> Duration {
        let started = Instant::now();
        let running: Vec<usize> = self.running().collect();
        for &i in &running {
            self.signal(i, libc::SIGTERM);
        }
        for i in running {
            self.reap(i, Duration::from_secs(30));
        }
        started.elapsed()
    }

    fn reap(&mut self, i: usize, timeout: Duration) {
        let s = &mut self.servers[i];
        let Some(mut child) = s.child.take() else {
            return;
        };
        s.state = ServerState::Down;
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => {}
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{} did not exit within {timeout:?}", s.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGSTOP server `i`: it keeps its sockets but answers nothing.
    pub fn pause(&mut self, i: usize) {
        self.signal(i, libc::SIGSTOP);
        self.servers[i].state = ServerState::Paused;
    }

    /// SIGCONT a paused server `i`.
    pub fn resume(&mut self, i: usize) {
        self.signal(i, libc::SIGCONT);
        self.servers[i].state = ServerState::Running;
    }

    /// Starts server `i` again on the data dir it had.
    pub fn restart(&mut self, i: usize) {
        assert_eq!(
            self.servers[i].state,
            ServerState::Down,
            "restart a server that is down"
        );
        self.spawn(i);
    }

    /// kill -9 server `i`, delete its data dir, and start it again: it
    /// must rejoin through `-retry-join` as a new member.
    pub fn wipe_and_restart(&mut self, i: usize) {
        if self.servers[i].state != ServerState::Down {
            if self.servers[i].state == ServerState::Paused {
                self.resume(i);
            }
            self.kill(i);
        }
        let dir = &self.servers[i].data_dir;
        std::fs::remove_dir_all(dir).unwrap_or_else(|e| panic!("wipe {}: {e}", dir.display()));
        self.spawn(i);
    }

    /// Starts `herder sim nodes -count <count> -servers <all three>` with
    /// `extra` arguments; its output goes to `sim.log`.
    pub fn start_sim(&mut self, count: usize, extra: &[&str]) {
        assert!(self.sim.is_none(), "one simulation per cluster");
        let log_path = self.dir().join("sim.log");
        let log = open_log(&log_path);
        let servers = self
            .servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.http_port))
            .collect::<Vec<_>>()
            .join(",");
        let child = herder_command()
            .args([
                "sim",
                "nodes",
                "-count",
                &count.to_string(),
                "-servers",
                &servers,
            ])
            .args(["-progress-interval", "2"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn herder sim nodes");
        self.sim = Some((child, log_path));
    }

    /// Panics with its log when the simulation process has exited.
    pub fn assert_sim_alive(&mut self) {
        if let Some((child, log)) = &mut self.sim {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "herder sim nodes exited ({status}); its log:\n{}",
                    log_tail(log, LOG_TAIL_LINES)
                );
            }
        }
    }

    /// The tail of every log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let sim_log = self
            .sim
            .as_ref()
            .map(|(_, p)| ("sim".to_string(), p.clone()));
        let server_logs = self
            .servers
            .iter()
            .map(|s| (s.name.clone(), s.log_path.clone()));
        for (name, path) in server_logs.chain(sim_log) {
            out.push_str(&format!(
                "----- {name}: last {LOG_TAIL_LINES} lines of {} -----\n{}\n",
                path.display(),
                log_tail(&path, LOG_TAIL_LINES)
            ));
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some((mut child, _)) = self.sim.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for s in &mut self.servers {
            if let Some(mut child) = s.child.take() {
                // SIGKILL ends a stopped process as well.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let keep = std::env::var("HERDER_CLUSTER_KEEP").is_ok_and(|v| v == "1");
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        if std::thread::panicking() || keep {
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                eprintln!("cluster directory kept for inspection: {}", kept.display());
            }
        }
    }
}

/// The `herder` binary as a command with plain logs and none of this
/// process's `HERDER_*` variables: the agent reads those as its
/// configuration, and the tests' own knobs (`HERDER_CLUSTER_*`) are not.
/// `HERDER_CLUSTER_RUST_LOG` becomes the servers' `RUST_LOG` (e.g.
/// `info,openraft=info` to see every vote in their logs).
fn herder_command() -> Command {
    let mut command = Command::new(herder_bin());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HERDER_") {
            command.env_remove(name);
        }
    }
    command.env_remove("RUST_LOG").env("NO_COLOR", "1");
    if let Ok(filter) = std::env::var("HERDER_CLUSTER_RUST_LOG") {
        command.env("RUST_LOG", filter);
    }
    command
}

fn open_log(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// The last `lines` lines of the file at `path` (reads at most its last
/// 256 KiB).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(256 * 1024)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// GET with the short status timeout: (status, body), or why there was no
/// answer.
fn status_get(url: &str) -> Result<(u16, String), String> {
    http_get(url, STATUS_TIMEOUT).map(|r| (r.status, r.body))
}

/// One HTTP answer: status, `X-Nomad-Index` (0 when absent) and body.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub index: u64,
    pub known_leader: Option<String>,
    /// `X-Nomad-LastContact`, milliseconds.
    pub last_contact: Option<u64>,
    pub body: String,
}

impl Answer {
    fn from(r: ureq::Response) -> Answer {
        let index = r
            .header("X-Nomad-Index")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let known_leader = r.header("X-Nomad-KnownLeader").map(str::to_string);
        let last_contact = r.header("X-Nomad-LastContact").and_then(|v| v.parse().ok());
        Answer {
            status: r.status(),
            index,
            known_leader,
            last_contact,
            body: r.into_string().unwrap_or_default(),
        }
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// GET `url` within `timeout`: the answer for any status, or the transport
/// error.
pub fn http_get(url: &str, timeout: Duration) -> Result<Answer, String> {
    match ureq::get(url).timeout(timeout).call() {
        Ok(r) => Ok(Answer::from(r)),
        Err(ureq::Error::Status(_, r)) => Ok(Answer::from(r)),
        Err(e) => Err(e.to_string()),
    }
}

/// Sends `body` as JSON with `method` within `timeout`: the answer for any
/// status, or the transport error.
pub fn http_send(
    method: &str,
    url: &str,
    body: Option<&serde_json::Value>,
    timeout: Duration,
) -> Result<Answer, String> {
    let req = ureq::request(method, url).timeout(timeout);
    let sent = match body {
        Some(b) => req.send_json(b.clone()),
        None => req.call(),
    };
    match sent {
        Ok(r) => Ok(Answer::from(r)),
        Err(ureq::Error::Status(_, r)) => Ok(Answer::from(r)),
        Err(e) => Err(e.to_string()),
    }
}
