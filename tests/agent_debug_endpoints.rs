//! The endpoints an operator debugs a live agent with: `/v1/agent/pprof/*`
//! (a CPU profile taken under load is pprof's format and names herder's
//! own functions; refused unless the agent serves debugging) and
//! `/v1/agent/host` (the machine, its environment's values withheld).

use herder_tests::{get, HerderProcess};
use pprof::protos::Message;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Keeps the agent busy (job registrations and lists) until `stop`.
fn load(addr: std::net::SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let job = serde_json::json!({"Job": {
                "ID": format!("load-{}", n % 50), "Type": "batch", "Datacenters": ["dc1"],
                "Meta": {"n": n.to_string()},
                "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
                    "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1s"},
                    "Resources": {"CPU": 1, "MemoryMB": 1}}]}]}});
            herder_tests::send_json("PUT", &format!("http://{addr}/v1/jobs"), None, &job);
            get(&format!("http://{addr}/v1/jobs"));
        }
    })
}

#[test]
fn a_cpu_profile_under_load_is_pprof_and_names_herder_functions() {
    let agent = HerderProcess::spawn(&["agent", "-dev", "-http-port", "0"]);
    let stop = Arc::new(AtomicBool::new(false));
    let loaders: Vec<_> = (0..2).map(|_| load(agent.addr, stop.clone())).collect();
    let url = format!("http://{}/v1/agent/pprof/profile?seconds=3", agent.addr);
    let answer = ureq::get(&url)
        .timeout(Duration::from_secs(60))
        .call()
        .expect("the profile");
    stop.store(true, Ordering::Relaxed);
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut answer.into_reader(), &mut bytes).expect("read");
    for l in loaders {
        let _ = l.join();
    }
    let profile = pprof::protos::Profile::parse_from_bytes(&bytes).expect("a pprof profile");
    assert!(!profile.sample.is_empty(), "no samples under load");
    assert!(
        profile.string_table.iter().any(|s| s.contains("herder")),
        "no herder function among the profile's names"
    );

    // Heap figures and the thread dump answer too.
    let (code, heap) = get(&format!("http://{}/v1/agent/pprof/heap", agent.addr));
    assert_eq!(code, 200);
    let heap: serde_json::Value = serde_json::from_str(&heap).expect("JSON");
    assert!(heap["ResidentBytes"].as_u64().unwrap_or(0) > 0, "{heap}");
    let (code, dump) = get(&format!("http://{}/v1/agent/pprof/goroutine", agent.addr));
    assert_eq!(code, 200);
    assert!(dump.contains("herder-state"), "the store's threads: {dump}");
    assert!(
        dump.contains("herder_plan_queue_depth"),
        "the plan queue: {dump}"
    );
}

#[test]
fn profiles_are_refused_without_enable_debug() {
    let agent = HerderProcess::spawn_with_env(
        &["agent", "-dev", "-http-port", "0"],
        &[("HERDER_ENABLE_DEBUG", "false")],
    );
    for path in ["profile?seconds=1", "heap", "goroutine"] {
        let (code, body) = get(&format!("http://{}/v1/agent/pprof/{path}", agent.addr));
        assert_eq!((code, body.as_str()), (403, "Permission denied"), "{path}");
    }
}

#[test]
fn host_data_describes_the_machine_and_withholds_the_environment() {
    let marker = "herder-host-test-value-7f3a";
    let agent = HerderProcess::spawn_with_env(
        &["agent", "-dev", "-http-port", "0"],
        &[("HERDER_TEST_DB_URL", marker)],
    );
    let (code, body) = get(&format!("http://{}/v1/agent/host", agent.addr));
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains(marker), "an environment value was answered");
    let host: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let data = &host["HostData"];
    assert_eq!(data["Environment"]["HERDER_TEST_DB_URL"], "<redacted>");
    assert!(
        data["OS"].as_str().unwrap_or("").starts_with("linux"),
        "{}",
        data["OS"]
    );
    assert!(data["CPU"]["Cores"].as_u64().unwrap_or(0) >= 1);
    assert!(data["Memory"]["TotalBytes"].as_u64().unwrap_or(0) > 0);
    let disks = data["Disk"].as_object().expect("disks");
    let data_dir = agent.data_dir.display().to_string();
    let disk = disks.get(&data_dir).expect("the data dir's filesystem");
    assert!(disk["DiskMB"].as_u64().unwrap_or(0) > 0, "{disk}");
    let addresses = data["Network"].as_array().expect("interfaces");
    assert!(
        addresses.iter().any(|a| a["address"] == "127.0.0.1"),
        "{addresses:?}"
    );
}
