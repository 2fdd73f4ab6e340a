//! The agent as a newcomer meets it: `herder agent -dev` starts, answers,
//! refuses bad configuration with a clear message, and stops cleanly.

use herder_tests::{dev_config, get, herder_bin, HerderProcess, TestAgent};
use std::process::Command;

#[test]
fn embedded_dev_agent_serves_health_and_nomads_404() {
    let agent = TestAgent::start(dev_config(), true);
    let (code, body) = get(&agent.url("/v1/agent/health"));
    assert_eq!(code, 200);
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["server"]["ok"], true);
    assert_eq!(health["client"]["ok"], true);
    let (code, body) = get(&agent.url("/v1/no/such/thing"));
    assert_eq!(code, 404);
    assert!(body.contains("Invalid URL path"), "{body}");
    let data_dir = agent.data_dir.clone();
    assert!(data_dir.is_dir());
    agent.stop();
    assert!(!data_dir.exists(), "-dev data dir is removed on shutdown");
}

#[test]
fn binary_dev_agent_stops_gracefully_on_sigterm() {
    let p = HerderProcess::spawn(&["agent", "-dev", "-http-port", "0"]);
    let (code, body) = get(&format!("http://{}/v1/status/leader", p.addr));
    assert_eq!(code, 200);
    // The leader is named by its RPC address, as Nomad's dev agent
    // answers (`-dev` binds loopback; the RPC port is Nomad's 4647).
    assert_eq!(body.trim(), "\"127.0.0.1:4647\"");
    let status = p.signal_and_wait(libc::SIGTERM);
    assert!(status.success(), "exit status {status:?}");
}

/// An agent whose stdout reader went away (a supervisor's pipe closed)
/// still stops gracefully: the line it prints on the signal cannot fail,
/// so the shutdown runs and the `-dev` data dir is removed.
#[test]
fn binary_dev_agent_stops_gracefully_after_its_stdout_closed() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut child = Command::new(herder_bin())
        .args(["agent", "-dev", "-http-port", "0"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn herder");
    let stdout = child.stdout.take().expect("stdout");
    let mut data_dir = None;
    // The agent prints its four lines at once, or exits (end of file).
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if let Some(d) = line.trim().strip_prefix("data dir: ") {
            data_dir = Some(std::path::PathBuf::from(d));
        }
        if line.trim().starts_with("roles:") {
            break;
        }
    }
    // The reader is gone: the pipe's read end is closed here.
    let data_dir = data_dir.expect("herder printed its data dir");
    assert!(data_dir.is_dir());
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("herder did not exit within 30 s of SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status:?}");
    assert!(!data_dir.exists(), "-dev data dir is removed on shutdown");
}

/// Issue 16: with an event stream and a blocking query open, SIGINT took
/// the HTTP server's whole 10 s grace period (the stream did not watch
/// the shutdown); it must be quick and never need SIGKILL.
#[test]
fn binary_dev_agent_stops_quickly_on_sigint_with_streams_open() {
    use std::io::Read;
    let p = HerderProcess::spawn(&["agent", "-dev", "-http-port", "0"]);
    let open = |path: &str| {
        let mut conn = std::net::TcpStream::connect(p.addr).expect("connect");
        let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        std::io::Write::write_all(&mut conn, head.as_bytes()).expect("request");
        let mut first = [0u8; 64];
        conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let _ = conn.read(&mut first);
        conn
    };
    let _stream = open("/v1/event/stream");
    let mut blocking = std::net::TcpStream::connect(p.addr).expect("connect");
    std::io::Write::write_all(
        &mut blocking,
        b"GET /v1/jobs?index=100000&wait=300s HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .expect("request");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    let status = p.signal_and_wait(libc::SIGINT);
    let took = started.elapsed();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        took < std::time::Duration::from_secs(5),
        "SIGINT took {took:?}"
    );
}

#[test]
fn binary_refuses_unknown_config_key_naming_it() {
    let dir = herder_tests::temp_dir();
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, "[server]\nenabled = true\nnum_schedulrs = 4\n").unwrap();
    let out = Command::new(herder_bin())
        .args(["agent", "-config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("num_schedulrs"), "{err}");
    assert!(err.contains("agent.toml"), "{err}");
}

#[test]
fn binary_requires_a_role() {
    let out = Command::new(herder_bin()).arg("agent").output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-server, -client or -dev"), "{err}");
}

/// Issue 25: SIGHUP reloads the configuration's log level without a
/// restart (the agent goes on serving), and a second SIGINT during a slow
/// shutdown (a `-dev` agent waits for its tasks' `kill_timeout`) exits at
/// once instead of waiting it out.
#[test]
fn sighup_reloads_the_log_level_and_a_second_sigint_exits_at_once() {
    use std::time::{Duration, Instant};
    let dir = herder_tests::temp_dir();
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, "log_level = \"error\"\n").unwrap();
    let log = dir.path().join("stderr.log");
    let stderr = std::fs::File::create(&log).unwrap();
    let cfg = config.display().to_string();
    let p = HerderProcess::spawn_with(
        &["agent", "-dev", "-http-port", "0", "-config", &cfg],
        |c| {
            c.env_remove("RUST_LOG").stderr(stderr);
        },
    );
    std::fs::write(&config, "log_level = \"warn\"\n").unwrap();
    let pid = p.child.id() as i32;
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(pid, libc::SIGHUP) };
    let reloaded = herder_tests::wait_for(Duration::from_secs(20), || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.contains("reloaded the configuration").then_some(())
    });
    assert!(reloaded.is_some(), "no reload logged");
    let (code, _) = get(&format!("http://{}/v1/agent/self", p.addr));
    assert_eq!(code, 200, "still serving after SIGHUP");

    // A task that ignores SIGTERM with a long kill_timeout holds the
    // first shutdown back. The hard exit leaves it behind (as Nomad's
    // does): it carries a marker so that the test can end it.
    let marker = format!("herder-test-stubborn-{}", std::process::id());
    let script = format!("trap '' TERM; while :; do sleep 0.2; done # {marker}");
    let job = serde_json::json!({"Job": {
        "ID": "stubborn", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec", "KillTimeout": 60_000_000_000u64,
            "Config": {"command": "/bin/sh",
                       "args": ["-c", script]},
            "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}});
    let (code, body) =
        herder_tests::send_json("PUT", &format!("http://{}/v1/jobs", p.addr), None, &job);
    assert_eq!(code, 200, "{body}");
    herder_tests::wait_for(Duration::from_secs(60), || {
        let (_, body) = get(&format!("http://{}/v1/job/stubborn/allocations", p.addr));
        body.contains("\"ClientStatus\":\"running\"").then_some(())
    })
    .expect("the task runs");
    unsafe { libc::kill(pid, libc::SIGINT) };
    std::thread::sleep(Duration::from_secs(1));
    let second = Instant::now();
    let status = p.signal_and_wait(libc::SIGINT);
    assert!(
        second.elapsed() < Duration::from_secs(5),
        "the second SIGINT took {:?}",
        second.elapsed()
    );
    assert!(
        !status.success(),
        "an interrupted shutdown is not a clean exit"
    );
    let _ = Command::new("pkill")
        .args(["-KILL", "-f", &marker])
        .status();
}
