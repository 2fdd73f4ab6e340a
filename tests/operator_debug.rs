//! `herder operator debug`: one archive with the cluster's state, logs and
//! profiles, and no secret in it.

use herder_tests::{herder_bin, send_json, HerderProcess};
use std::io::Read;
use std::process::Command;

/// Every file of the gzip'ed tar at `path`: (name, bytes).
fn unpack(path: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let file = std::fs::File::open(path).expect("the archive");
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut files = Vec::new();
    for entry in tar.entries().expect("a tar") {
        let mut entry = entry.expect("an entry");
        let name = entry.path().expect("a path").display().to_string();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).expect("its bytes");
        files.push((name, bytes));
    }
    files
}

#[test]
fn the_bundle_holds_the_listed_files_and_no_secret() {
    let agent = HerderProcess::spawn(&["agent", "-dev", "-http-port", "0"]);
    // A node whose secret the bundle's node lists must not carry.
    let mut node = herder::state::fixtures::node("debugged");
    node.status = herder::structs::NodeStatus::Ready;
    let secret = node.secret_id.to_string();
    let url = format!("http://{}/v1/node/register", agent.addr);
    let (code, body) = send_json("PUT", &url, None, &serde_json::json!({"Node": node}));
    assert_eq!(code, 200, "{body}");

    let out = herder_tests::temp_dir();
    let address = format!("http://{}", agent.addr);
    let output = out.path().display().to_string();
    let run = Command::new(herder_bin())
        .args(["operator", "debug", "-address", &address, "-duration", "3s"])
        .args(["-interval", "1s", "-output", &output])
        .output()
        .expect("run operator debug");
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let archive = std::fs::read_dir(out.path())
        .expect("the output dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .expect("a .tar.gz in -output");
    assert!(said.contains(&archive.display().to_string()), "{said}");

    let files = unpack(&archive);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for wanted in [
        "cluster/agent-self.json",
        "cluster/members.json",
        "server/agent/monitor.log",
        "server/agent/profile.prof",
        "server/agent/goroutine.txt",
        "interval/0000/metrics.json",
        "interval/0000/nodes.json",
        "interval/0000/allocations.json",
        "interval/0000/evaluations.json",
        "interval/0002/jobs.json",
    ] {
        assert!(
            names.iter().any(|n| n.ends_with(wanted)),
            "{wanted} missing from {names:?}"
        );
    }
    let nodes = files
        .iter()
        .find(|(n, _)| n.ends_with("interval/0000/nodes.json"));
    let nodes = String::from_utf8_lossy(&nodes.expect("nodes").1).to_string();
    assert!(nodes.contains("debugged"), "the node is listed: {nodes}");
    for (name, bytes) in &files {
        let text = String::from_utf8_lossy(bytes);
        assert!(!text.contains(&secret), "the node's secret is in {name}");
    }
    let log = files
        .iter()
        .find(|(n, _)| n.ends_with("server/agent/monitor.log"));
    assert!(
        !log.expect("a log").1.is_empty(),
        "the agent's log was gathered"
    );
}
