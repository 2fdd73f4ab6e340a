//! ACLs on a client-only agent, end to end: one server and one client
//! agent in this process, both with ACLs on, a `raw_exec` job in its own
//! namespace running on the client.
//!
//! - `alloc logs` and `alloc fs` through the server (which forwards to the
//!   node's agent, which checks the token again by asking the server) and
//!   straight at the client: a token allowed `read-logs`/`read-fs` in the
//!   job's namespace reads, no token or another namespace's is 403;
//! - a deleted token is refused by the server at once and by the client
//!   within `acl.token_ttl`;
//! - with no server reachable, the client refuses a token it has not
//!   resolved yet with 503, saying why.

use herder_tests::{
    alloc_exec_as, client_config, send_json, server_config, temp_dir, url_encode, wait_for,
    TestAgent,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Generous: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(60);
/// The client's cache lifetime in this test.
const TTL: Duration = Duration::from_secs(3);

/// (status, body) of a GET with an optional token.
fn get_as(url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = ureq::get(url).timeout(Duration::from_secs(20));
    if let Some(t) = token {
        req = req.set("X-Nomad-Token", t);
    }
    match req.call() {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

/// A client token with one new policy `name` holding `rules`: (secret,
/// accessor).
fn token_with(server: &str, management: &str, name: &str, rules: &str) -> (String, String) {
    let (code, body) = send_json(
        "PUT",
        &format!("{server}/v1/acl/policy/{name}"),
        Some(management),
        &json!({"Name": name, "Rules": rules}),
    );
    assert_eq!(code, 200, "policy {name}: {body}");
    let (code, body) = send_json(
        "PUT",
        &format!("{server}/v1/acl/token"),
        Some(management),
        &json!({"Name": name, "Type": "client", "Policies": [name]}),
    );
    assert_eq!(code, 200, "token {name}: {body}");
    let token: Value = serde_json::from_str(&body).expect("token JSON");
    let field = |f: &str| token[f].as_str().expect("token field").to_string();
    (field("SecretID"), field("AccessorID"))
}

/// A task that prints a line, writes a file and sleeps.
fn job(namespace: &str) -> Value {
    json!({"Job": {
        "ID": "logger", "Name": "logger", "Namespace": namespace, "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c",
                "echo hello-from-the-task; echo on-disk > \"$NOMAD_TASK_DIR/out.txt\"; exec sleep 3600"]},
            "KillTimeout": 1_000_000_000u64,
            "Resources": {"CPU": 50, "MemoryMB": 32}
        }]}]
    }})
}

/// The server and the client agent with ACLs on, bootstrapped, and the
/// job running on the client: (server, client, management secret,
/// allocation ID).
fn cluster(
    server_dir: &std::path::Path,
    client_dir: &std::path::Path,
) -> (TestAgent, TestAgent, String, String) {
    let mut config = server_config(server_dir);
    config.acl.enabled = true;
    let server = TestAgent::start(config, false);
    let base = format!("http://{}", server.addr);
    let (code, body) = send_json("PUT", &format!("{base}/v1/acl/bootstrap"), None, &json!({}));
    assert_eq!(code, 200, "bootstrap: {body}");
    let management = serde_json::from_str::<Value>(&body).expect("token")["SecretID"]
        .as_str()
        .expect("SecretID")
        .to_string();
    for ns in ["web", "other"] {
        let (code, body) = send_json(
            "PUT",
            &format!("{base}/v1/namespace"),
            Some(&management),
            &json!({"Name": ns}),
        );
        assert_eq!(code, 200, "namespace {ns}: {body}");
    }
    let mut config = client_config(server.addr.port(), client_dir, "worker");
    config.acl.enabled = true;
    config.acl.token_ttl = TTL;
    config.acl.policy_ttl = TTL * 10;
    let client = TestAgent::start(config, false);
    wait_for(WAIT, || {
        let (_, body) = get_as(&format!("{base}/v1/nodes"), Some(&management));
        body.contains("\"ready\"").then_some(())
    })
    .expect("the client's node is ready");
    let (code, body) = send_json(
        "PUT",
        &format!("{base}/v1/jobs"),
        Some(&management),
        &job("web"),
    );
    assert_eq!(code, 200, "register: {body}");
    let alloc = wait_for(WAIT, || {
        let url = format!("{base}/v1/job/logger/allocations?namespace=web");
        let (_, body) = get_as(&url, Some(&management));
        serde_json::from_str::<Vec<Value>>(&body)
            .ok()?
            .into_iter()
            .find(|a| a["ClientStatus"] == "running")
            .and_then(|a| a["ID"].as_str().map(str::to_string))
    })
    .expect("the allocation runs on the client");
    (server, client, management, alloc)
}

#[test]
fn a_client_agent_checks_tokens_through_its_server_and_forgets_deleted_ones_within_the_ttl() {
    let (server_dir, client_dir) = (temp_dir(), temp_dir());
    let (server, client, management, alloc) = cluster(server_dir.path(), client_dir.path());
    let (server_base, client_base) = (
        format!("http://{}", server.addr),
        format!("http://{}", client.addr),
    );
    let (reader, reader_accessor) = token_with(
        &server_base,
        &management,
        "web-reader",
        r#"namespace "web" { capabilities = ["read-logs", "read-fs"] }"#,
    );
    let (other, _) = token_with(
        &server_base,
        &management,
        "other-writer",
        r#"namespace "other" { policy = "write" }"#,
    );
    let (unused, _) = token_with(
        &server_base,
        &management,
        "web-unused",
        r#"namespace "web" { capabilities = ["read-logs"] }"#,
    );
    let logs =
        |agent: &str| format!("{agent}/v1/client/fs/logs/{alloc}?task=t&type=stdout&plain=true");
    let cat = |agent: &str| format!("{agent}/v1/client/fs/cat/{alloc}?path=t/local/out.txt");

    for agent in [&server_base, &client_base] {
        let printed = wait_for(WAIT, || {
            let (code, body) = get_as(&logs(agent), Some(&reader));
            (code == 200 && body.contains("hello-from-the-task")).then_some(body)
        });
        assert!(
            printed.is_some(),
            "logs through {agent}: {:?}",
            get_as(&logs(agent), Some(&reader))
        );
        let file = wait_for(WAIT, || {
            let (code, body) = get_as(&cat(agent), Some(&reader));
            (code == 200).then_some(body)
        });
        assert_eq!(file.as_deref(), Some("on-disk\n"), "fs cat through {agent}");
        for url in [logs(agent), cat(agent)] {
            let (code, body) = get_as(&url, None);
            assert_eq!(
                (code, body.as_str()),
                (403, "Permission denied"),
                "no token: {url}"
            );
            let (code, body) = get_as(&url, Some(&other));
            assert_eq!(
                (code, body.as_str()),
                (403, "Permission denied"),
                "other namespace: {url}"
            );
        }
    }

    // Deleted: the server refuses it at once, the client (which resolved
    // it just now) within its TTL.
    let (code, body) = send_json(
        "DELETE",
        &format!("{server_base}/v1/acl/token/{reader_accessor}"),
        Some(&management),
        &json!({}),
    );
    assert_eq!(code, 200, "delete: {body}");
    let deleted_at = Instant::now();
    let (code, body) = get_as(&cat(&server_base), Some(&reader));
    assert_eq!((code, body.as_str()), (403, "ACL token not found"));
    let refused = wait_for(TTL * 4, || {
        let (code, body) = get_as(&cat(&client_base), Some(&reader));
        (code == 403).then_some(body)
    });
    let took = deleted_at.elapsed();
    assert_eq!(refused.as_deref(), Some("ACL token not found"));
    assert!(
        // The slack is for a loaded machine's request latency, not the cache.
        took <= TTL + Duration::from_secs(4),
        "the client refused the deleted token only after {took:?} (TTL {TTL:?})"
    );

    // No server: a token the client never resolved is refused, saying so.
    server.stop();
    let (code, body) = get_as(&logs(&client_base), Some(&unused));
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("ACL token cannot be resolved") && body.contains("no server reachable"),
        "{body}"
    );
}

/// Nomad's rule: `alloc exec` into a task without filesystem isolation
/// (`raw_exec`) runs on the host, so `alloc-exec` alone is not enough;
/// `alloc-node-exec` is needed too. Checked by the server and by the
/// node's agent.
#[test]
fn alloc_exec_into_a_raw_exec_task_needs_alloc_node_exec() {
    let (server_dir, client_dir) = (temp_dir(), temp_dir());
    let (server, client, management, alloc) = cluster(server_dir.path(), client_dir.path());
    let server_base = format!("http://{}", server.addr);
    let (exec_only, _) = token_with(
        &server_base,
        &management,
        "web-exec",
        r#"namespace "web" { capabilities = ["alloc-exec"] }"#,
    );
    let (node_exec, _) = token_with(
        &server_base,
        &management,
        "web-node-exec",
        r#"namespace "web" { capabilities = ["alloc-exec", "alloc-node-exec"] }"#,
    );
    let command = url_encode("[\"/bin/echo\",\"hi\"]");
    for agent in [server.addr, client.addr] {
        let url =
            format!("http://{agent}/v1/client/allocation/{alloc}/exec?task=t&command={command}");
        let (code, body) = get_as(&url, Some(&exec_only));
        assert_eq!(
            (code, body.as_str()),
            (403, "Permission denied"),
            "alloc-exec alone through {agent}"
        );
        let run = alloc_exec_as(
            agent,
            &alloc,
            "t",
            &["/bin/echo", "hi"],
            false,
            b"",
            Some(&node_exec),
        );
        assert_eq!(run.exit_code, 0, "through {agent}: {}", run.output);
        assert_eq!(run.output.trim(), "hi", "through {agent}");
    }
}
