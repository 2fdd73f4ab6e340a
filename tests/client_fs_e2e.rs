//! An operator looking into allocations, end to end, with real `raw_exec`
//! tasks: a server-only agent and a client-only agent in this process,
//! every request sent to both (the server routes it to the client).
//!
//! - `alloc fs`: ls and cat of a file the task wrote, a stream, a `readat`
//!   window, a path that climbs out refused;
//! - stats: a task holding 50 MB shows it in its RSS, the host's figures;
//! - the CLI (`alloc fs`, `alloc status -stats`) through the server;
//! - gc: refused while the allocation runs, its directory gone once it
//!   has stopped.

use herder_tests::{
    client_config, get, herder_bin, send_json, server_config, temp_dir, wait_for, TestAgent,
};
use serde_json::{json, Value};
use std::time::Duration;

/// Generous: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(60);

/// A service whose task writes `local/out.txt`, then holds a 50 MB
/// bytearray and sleeps.
fn hog_job(id: &str) -> Value {
    // The file is written once the memory is touched, so a test that has
    // read the file knows the RSS is there (CI saw 41 MB of 50 otherwise).
    let script = "import os, time\n\
                  hog = bytearray(50 * 1024 * 1024)\n\
                  for i in range(0, len(hog), 4096): hog[i] = 1\n\
                  open(os.path.join(os.environ['NOMAD_TASK_DIR'], 'out.txt'), 'w').write('written by the task\\n')\n\
                  time.sleep(3600)\n";
    json!({
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "RestartPolicy": {"Attempts": 0, "Interval": 60_000_000_000u64,
                              "Delay": 1_000_000_000u64, "Mode": "fail"},
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "python3", "args": ["-c", script]},
                "KillTimeout": 2_000_000_000u64,
                "Resources": {"CPU": 100, "MemoryMB": 128}
            }]
        }]
    })
}

fn base(agent: &TestAgent) -> String {
    format!("http://{}", agent.addr)
}

fn get_json(url: &str) -> Value {
    let (code, body) = get(url);
    assert_eq!(code, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

fn names(listing: &Value) -> Vec<String> {
    listing
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["Name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn an_operator_reads_files_stats_and_collects_through_any_agent() {
    let server_dir = temp_dir();
    let server = TestAgent::start(server_config(server_dir.path()), false);
    let client_dir = temp_dir();
    let client = TestAgent::start(
        client_config(server.addr.port(), client_dir.path(), "worker"),
        false,
    );
    let (server_base, client_base) = (base(&server), base(&client));
    let node_id = wait_for(WAIT, || {
        get_json(&format!("{server_base}/v1/nodes"))
            .as_array()?
            .iter()
            .find(|n| n["Status"] == "ready")
            .and_then(|n| n["ID"].as_str().map(str::to_string))
    })
    .expect("the client's node is ready");
    let (code, body) = send_json(
        "PUT",
        &format!("{server_base}/v1/jobs"),
        None,
        &json!({ "Job": hog_job("hog") }),
    );
    assert_eq!(code, 200, "register: {body}");
    let alloc = wait_for(WAIT, || {
        get_json(&format!("{server_base}/v1/job/hog/allocations"))
            .as_array()?
            .iter()
            .find(|a| a["ClientStatus"] == "running")
            .and_then(|a| a["ID"].as_str().map(str::to_string))
    })
    .expect("the allocation runs");

    for agent in [&client_base, &server_base] {
        let root = get_json(&format!("{agent}/v1/client/fs/ls/{alloc}?path=/"));
        assert_eq!(names(&root), ["alloc", "t"], "{agent}");
        let out = "t/local/out.txt";
        let cat = wait_for(WAIT, || {
            let (code, body) = get(&format!("{agent}/v1/client/fs/cat/{alloc}?path={out}"));
            (code == 200).then_some(body)
        })
        .expect("the task wrote its file");
        assert_eq!(cat, "written by the task\n", "{agent}");
        let local = get_json(&format!("{agent}/v1/client/fs/ls/{alloc}?path=t/local"));
        assert!(names(&local).contains(&"out.txt".to_string()), "{local}");
        let (code, window) = get(&format!(
            "{agent}/v1/client/fs/readat/{alloc}?path={out}&offset=11&limit=3"
        ));
        assert_eq!((code, window.as_str()), (200, "the"), "{agent}");
        let (code, frames) = get(&format!(
            "{agent}/v1/client/fs/stream/{alloc}?path={out}&follow=false"
        ));
        assert_eq!(code, 200);
        let frame: Value = serde_json::from_str(frames.lines().next().unwrap_or("{}")).unwrap();
        assert_eq!(
            (frame["Offset"].as_u64(), frame["File"].as_str()),
            (Some(20), Some(out))
        );
        let (code, body) = get(&format!("{agent}/v1/client/fs/ls/{alloc}?path=../.."));
        assert_eq!(
            (code, body.as_str()),
            (500, "Path escapes the alloc directory")
        );
    }

    // The task holds 50 MB: its RSS says so, through either agent.
    for agent in [&client_base, &server_base] {
        let url = format!("{agent}/v1/client/allocation/{alloc}/stats");
        let rss_of = |stats: &Value| {
            stats["Tasks"]["t"]["ResourceUsage"]["MemoryStats"]["RSS"]
                .as_u64()
                .unwrap_or(0)
        };
        // A sample may predate the last page touched: wait a little for it.
        let stats = wait_for(Duration::from_secs(10), || {
            let stats = get_json(&url);
            (rss_of(&stats) > 45 * 1024 * 1024).then_some(stats)
        })
        .unwrap_or_else(|| get_json(&url));
        let rss = rss_of(&stats);
        assert!(rss > 45 * 1024 * 1024, "RSS {rss} through {agent}: {stats}");
        let task = &stats["Tasks"]["t"]["ResourceUsage"];
        assert_eq!(task["MemoryStats"]["Measured"], json!(["RSS", "Swap"]));
        assert!(stats["Tasks"]["t"]["Pids"]
            .as_object()
            .is_some_and(|p| !p.is_empty()));
        let host = get_json(&format!("{agent}/v1/client/stats?node_id={node_id}"));
        assert!(host["Memory"]["Total"].as_u64().unwrap_or(0) > 0, "{host}");
        assert!(!host["CPU"].as_array().unwrap().is_empty());
    }
    // The CLI, through the server.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(herder_bin())
            .args(args)
            .output()
            .expect("run herder");
        assert!(out.status.success(), "herder {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let printed = cli(&[
        "alloc",
        "fs",
        "-address",
        &server_base,
        &alloc,
        "t/local/out.txt",
    ]);
    assert_eq!(printed, "written by the task\n");
    let listed = cli(&["alloc", "fs", "-address", &server_base, &alloc, "t"]);
    assert!(
        listed.starts_with("Mode") && listed.contains("local/"),
        "{listed}"
    );
    let status = cli(&[
        "alloc",
        "status",
        "-address",
        &server_base,
        "-stats",
        &alloc,
    ]);
    assert!(
        status.contains("Memory Stats\nRSS") && status.contains(" MiB/128 MiB"),
        "{status}"
    );
    let (code, body) = get(&format!("{server_base}/v1/client/stats"));
    assert_eq!(
        (code, body.as_str()),
        (400, "No local Node and node_id not provided")
    );

    // Running: not collected. Stopped: its directory goes.
    let gc = format!("{server_base}/v1/client/allocation/{alloc}/gc");
    let (code, body) = get(&gc);
    assert_eq!(
        (code, body.as_str()),
        (
            500,
            "No such allocation on client, or allocation not eligible for GC"
        )
    );
    let (code, body) = send_json(
        "DELETE",
        &format!("{server_base}/v1/job/hog"),
        None,
        &json!({}),
    );
    assert_eq!(code, 200, "stop: {body}");
    wait_for(WAIT, || {
        let a = get_json(&format!("{server_base}/v1/allocation/{alloc}"));
        (a["ClientStatus"] == "complete").then_some(())
    })
    .expect("the allocation stops");
    let alloc_dir = client_dir.path().join("alloc").join(&alloc);
    assert!(alloc_dir.is_dir());
    let (code, body) = get(&gc);
    assert_eq!(code, 200, "gc: {body}");
    assert!(
        !alloc_dir.exists(),
        "the collected allocation's directory is gone"
    );
    let (code, _) = get(&format!("{client_base}/v1/client/fs/ls/{alloc}"));
    assert_eq!(code, 404);
    client.stop();
    server.stop();
}
