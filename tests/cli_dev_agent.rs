//! A newcomer's first session, automated: `herder agent -dev`, then
//! `herder job run` of the example job files. The service runs a real
//! process, the batch job completes, the sysbatch job completes on the node,
//! and stopping the service ends its process.

use herder_tests::{get, herder_bin, wait_for, HerderProcess};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../config/examples")
        .join(name)
}

fn herder(addr: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(herder_bin())
        .args(args)
        .env("HERDER_ADDR", format!("http://{addr}"))
        .output()
        .expect("run herder");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn job_allocs(addr: &str, job: &str) -> Vec<Value> {
    let (code, body) = get(&format!("http://{addr}/v1/job/{job}/allocations"));
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn wait_status(addr: &str, job: &str, status: &str) -> Vec<Value> {
    wait_for(Duration::from_secs(60), || {
        let allocs = job_allocs(addr, job);
        (!allocs.is_empty() && allocs.iter().all(|a| a["ClientStatus"] == status)).then_some(allocs)
    })
    .unwrap_or_else(|| {
        panic!(
            "{job}: allocations never all {status}: {:?}",
            job_allocs(addr, job)
        )
    })
}

#[test]
fn job_files_run_end_to_end_against_a_dev_agent() {
    let agent = HerderProcess::spawn(&["agent", "-dev", "-http-port", "0"]);
    let addr = agent.addr.to_string();

    let (code, out) = herder(
        &addr,
        &["job", "run", example("web.nomad.hcl").to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("finished with status \"complete\""), "{out}");
    let running = wait_status(&addr, "web", "running");
    let alloc_id = running[0]["ID"].as_str().unwrap().to_string();
    // The task is a real process: the allocation's port answers HTTP.
    let (_, body) = get(&format!("http://{addr}/v1/allocation/{alloc_id}"));
    let alloc: Value = serde_json::from_str(&body).unwrap();
    let port = alloc["AllocatedResources"]["Shared"]["Ports"][0]["Value"]
        .as_u64()
        .expect("a dynamic port was assigned");
    let served = wait_for(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port as u16)).ok()
    });
    assert!(served.is_some(), "the service listens on its port {port}");

    let (code, out) = herder(
        &addr,
        &["job", "run", example("report.nomad.hcl").to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    wait_status(&addr, "report", "complete");
    let (code, out) = herder(
        &addr,
        &["job", "run", example("cleanup.nomad.hcl").to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    let done = wait_status(&addr, "cleanup", "complete");
    assert_eq!(done.len(), 1, "once on the one node");

    let (code, out) = herder(&addr, &["job", "status"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("report") && out.contains("dead"), "{out}");

    let (code, out) = herder(&addr, &["job", "stop", "web"]);
    assert_eq!(code, 0, "{out}");
    let gone = wait_for(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port as u16)).err()
    });
    assert!(gone.is_some(), "the stopped service's process is gone");
    assert!(agent.signal_and_wait(libc::SIGTERM).success());
}
