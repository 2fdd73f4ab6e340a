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
    assert_eq!(body.trim(), format!("\"{}\"", p.addr));
    let status = p.signal_and_wait(libc::SIGTERM);
    assert!(status.success(), "exit status {status:?}");
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
