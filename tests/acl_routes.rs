//! ACLs on every route: the rule table covers every route this crate's
//! HTTP API registers (a new route without a rule fails here), each rule
//! holds for no token, a read-only token and a management token, and a
//! token scoped to one namespace cannot read, list, stream or write
//! another's jobs.

use herder::acl::VariableOp;
use herder_actors::http::acl_rules::{Rule, DELETE, GET, POST, PUT, RULES};
use herder_tests::{dev_config, send_json, TestAgent};
use serde_json::{json, Value};
use std::io::BufRead;
use std::time::{Duration, Instant};

const READ_ONLY: &str = r#"namespace "default" { policy = "read" }
node { policy = "read" }"#;

/// An agent with ACLs on, bootstrapped: (agent, management secret).
fn acl_agent() -> (TestAgent, String) {
    let mut config = dev_config();
    config.acl.enabled = true;
    let agent = TestAgent::start(config, true);
    let (code, body) = send_json("PUT", &agent.url("/v1/acl/bootstrap"), None, &json!({}));
    assert_eq!(code, 200, "bootstrap: {body}");
    let token: Value = serde_json::from_str(&body).expect("token JSON");
    let secret = token["SecretID"].as_str().expect("SecretID").to_string();
    (agent, secret)
}

/// A client token holding one new policy with `rules`.
fn token_with(agent: &TestAgent, management: &str, name: &str, rules: &str) -> String {
    let (code, body) = send_json(
        "PUT",
        &agent.url(&format!("/v1/acl/policy/{name}")),
        Some(management),
        &json!({"Name": name, "Rules": rules}),
    );
    assert_eq!(code, 200, "policy {name}: {body}");
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/acl/token"),
        Some(management),
        &json!({"Name": name, "Type": "client", "Policies": [name]}),
    );
    assert_eq!(code, 200, "token {name}: {body}");
    let token: Value = serde_json::from_str(&body).expect("token JSON");
    token["SecretID"].as_str().expect("SecretID").to_string()
}

/// (status, body) of a request; a stream that answers its headers counts
/// as answered (its body is not read).
fn call(method: &str, url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = ureq::request(method, url).timeout(Duration::from_secs(5));
    if let Some(t) = token {
        req = req.set("X-Nomad-Token", t);
    }
    let result = if method == "GET" || method == "DELETE" {
        req.call()
    } else {
        req.send_json(json!({}))
    };
    match result {
        Ok(r) if url.contains("stream") || url.contains("/exec") || url.contains("/monitor") => {
            (r.status(), String::new())
        }
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Nobody,
    ReadOnly,
    Management,
}

/// Whether the middleware lets `who` through `rule` (for paths naming
/// objects that do not exist); `None`: decided by the handler, after the
/// body is read, so not asserted here (see the namespace test).
fn expected(rule: Rule, who: Who) -> Option<bool> {
    use herder::acl::Capability::*;
    // A node's own secret and nothing else, not even management.
    if rule == Rule::NodeSecretOnly {
        return Some(false);
    }
    if who == Who::Management {
        return Some(true);
    }
    let read_only = who == Who::ReadOnly;
    Some(match rule {
        Rule::Public
        | Rule::NsList(_)
        | Rule::Stream
        | Rule::NamespaceList
        | Rule::VariableList => true,
        // `policy = "read"` reads and lists every variable of `default`.
        Rule::Variable(op) => read_only && op == VariableOp::Read,
        // The read-only policy names `default`, not the path's `nosuch`.
        Rule::NamespaceRead => false,
        Rule::NsBody(_) | Rule::NodeRegister => return None,
        Rule::Token => read_only,
        Rule::Ns(cap) => {
            read_only
                && matches!(
                    cap,
                    ListJobs
                        | ParseJob
                        | ReadJob
                        | ReadJobScaling
                        | ListScalingPolicies
                        | ReadScalingPolicy
                )
        }
        Rule::NodeRead | Rule::NodeSecretOrRead => read_only,
        // Objects that do not exist are the management token's 404 only.
        Rule::Alloc(_) | Rule::Eval(_) | Rule::Deployment(_) => false,
        Rule::Management
        | Rule::NodeWrite
        | Rule::NodeSecret
        | Rule::AgentRead
        | Rule::AgentWrite
        | Rule::OperatorRead
        | Rule::OperatorWrite
        | Rule::NodeSecretOnly => false,
    })
}

/// A concrete path for a pattern: unknown IDs and names.
fn concrete(pattern: &str) -> String {
    let id = "5f4dcc3b-0000-4000-8000-000000000001";
    pattern
        .replace("{id}", id)
        .replace("{alloc_id}", id)
        .replace("{accessor}", id)
        .replace("{name}", "nosuch")
        .replace("{path:.*}", "nosuch/path")
        .replace("{tail:.*}", "jobs")
}

#[test]
fn every_rule_holds_for_no_token_read_only_and_management() {
    let (agent, management) = acl_agent();
    let read_only = token_with(&agent, &management, "readonly", READ_ONLY);
    let mut failures = Vec::new();
    for (methods, pattern, rule) in RULES {
        for (bit, method) in [
            (GET, "GET"),
            (PUT, "PUT"),
            (POST, "POST"),
            (DELETE, "DELETE"),
        ] {
            if methods & bit == 0 {
                continue;
            }
            let url = agent.url(&concrete(pattern));
            for (who, token) in [
                (Who::Nobody, None),
                (Who::ReadOnly, Some(read_only.as_str())),
                (Who::Management, Some(management.as_str())),
            ] {
                // A token's reads of named ACL objects are narrowed down by
                // the handler (its own only): asserted below.
                let narrowed =
                    *rule == Rule::Token && pattern.contains('{') && who == Who::ReadOnly;
                let Some(allowed) = expected(*rule, who).filter(|_| !narrowed) else {
                    continue;
                };
                let (code, body) = call(method, &url, token);
                let denied = code == 403;
                if denied == allowed || (denied && body != "Permission denied") {
                    failures.push(format!(
                        "{method} {pattern} ({rule:?}) as {who:?}: {code} {body}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_route_outside_the_table_is_refused_and_bad_tokens_are_refused() {
    let (agent, management) = acl_agent();
    let (code, body) = call("GET", &agent.url("/v1/jobs"), Some("not-a-token"));
    assert_eq!((code, body.as_str()), (403, "ACL token not found"));
    // Authorization: Bearer works like X-Nomad-Token.
    let r = ureq::get(&agent.url("/v1/nodes"))
        .set("Authorization", &format!("Bearer {management}"))
        .call()
        .expect("bearer token accepted");
    assert_eq!(r.status(), 200);
    // A second bootstrap is refused with the reset index to use.
    let (code, body) = send_json("PUT", &agent.url("/v1/acl/bootstrap"), None, &json!({}));
    assert_eq!(code, 400, "{body}");
    assert!(
        body.starts_with("ACL bootstrap already done (reset index: "),
        "{body}"
    );
    // A client token reads its own token and policies, no other.
    let read_only = token_with(&agent, &management, "readonly", READ_ONLY);
    let (code, body) = call("GET", &agent.url("/v1/acl/token/self"), Some(&read_only));
    assert_eq!(code, 200, "{body}");
    let own: Value = serde_json::from_str(&body).expect("token");
    assert_eq!(own["SecretID"], json!(read_only));
    let accessor = own["AccessorID"].as_str().expect("AccessorID");
    let (code, _) = call(
        "GET",
        &agent.url(&format!("/v1/acl/token/{accessor}")),
        Some(&read_only),
    );
    assert_eq!(code, 200);
    assert_eq!(
        call(
            "GET",
            &agent.url("/v1/acl/policy/readonly"),
            Some(&read_only)
        )
        .0,
        200
    );
    token_with(&agent, &management, "other", READ_ONLY);
    let (code, body) = call("GET", &agent.url("/v1/acl/policy/other"), Some(&read_only));
    assert_eq!((code, body.as_str()), (403, "Permission denied"));
    let (code, body) = call("GET", &agent.url("/v1/acl/tokens"), Some(&management));
    assert_eq!(code, 200);
    assert!(
        !body.contains(&read_only),
        "a token list shows a secret: {body}"
    );
    // Repeated failures from one address are throttled.
    let throttled = (0..30)
        .map(|_| call("GET", &agent.url("/v1/jobs"), Some("wrong")).0)
        .any(|code| code == 429);
    assert!(throttled, "30 bad tokens in a row were never throttled");
}

#[test]
fn every_registered_route_has_a_rule_and_every_rule_a_route() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../actors/http/src");
    let mut registered = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("read actors/http/src") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read source");
        for body in configure_bodies(&text) {
            for literal in body.split('"').skip(1).step_by(2) {
                // The API's routes, and the web UI's (`/`, `/ui...`).
                if literal.starts_with("/v1/") || literal == "/" || literal.starts_with("/ui") {
                    registered.insert(literal.to_string());
                }
            }
        }
    }
    assert!(registered.len() > 50, "found only {registered:?}");
    let ruled: std::collections::BTreeSet<String> =
        RULES.iter().map(|(_, p, _)| p.to_string()).collect();
    let missing: Vec<_> = registered.difference(&ruled).collect();
    assert!(
        missing.is_empty(),
        "routes without an ACL rule: {missing:?}"
    );
    let stale: Vec<_> = ruled.difference(&registered).collect();
    assert!(stale.is_empty(), "rules without a route: {stale:?}");
}

/// The bodies of the `configure` functions of a source file (where routes
/// are registered).
fn configure_bodies(text: &str) -> Vec<&str> {
    let mut bodies = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("fn configure(") {
        let from = &rest[at..];
        let end = from.find("\n}\n").unwrap_or(from.len());
        bodies.push(&from[..end]);
        rest = &from[end..];
    }
    bodies
}

fn job(id: &str, namespace: &str) -> Value {
    json!({"Job": {
        "ID": id, "Name": id, "Namespace": namespace, "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"},
            "Resources": {"CPU": 20, "MemoryMB": 16}
        }]}]
    }})
}

#[test]
fn a_token_for_namespace_a_cannot_touch_namespace_b() {
    let (agent, management) = acl_agent();
    let a = token_with(
        &agent,
        &management,
        "team-a",
        r#"namespace "a" { policy = "write" }"#,
    );
    for ns in ["a", "b"] {
        let (code, body) = send_json(
            "PUT",
            &agent.url("/v1/namespace"),
            Some(&management),
            &json!({"Name": ns}),
        );
        assert_eq!(code, 200, "namespace {ns}: {body}");
    }
    // The namespace list shows a's token only a.
    let (code, body) = call("GET", &agent.url("/v1/namespaces"), Some(&a));
    assert_eq!(code, 200, "{body}");
    let names: Vec<String> = serde_json::from_str::<Vec<Value>>(&body)
        .expect("a list")
        .iter()
        .filter_map(|n| n["Name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(names, ["a"]);
    let (code, _) = call("GET", &agent.url("/v1/namespace/b"), Some(&a));
    assert_eq!(code, 403, "namespace b read with a's token");
    let put =
        |body: &Value, token: &str| send_json("PUT", &agent.url("/v1/jobs"), Some(token), body);
    let (code, body) = put(&job("jb", "b"), &management);
    assert_eq!(code, 200, "{body}");
    let eval_b = serde_json::from_str::<Value>(&body).expect("answer")["EvalID"].clone();
    // Write: refused in b, allowed in a.
    let (code, body) = put(&job("jb2", "b"), &a);
    assert_eq!((code, body.as_str()), (403, "Permission denied"));
    let (code, body) = put(&job("ja", "a"), &a);
    assert_eq!(code, 200, "{body}");
    let eval_a = serde_json::from_str::<Value>(&body).expect("answer")["EvalID"].clone();
    // An object by ID: its own namespace decides.
    let eval_url = |id: &Value| agent.url(&format!("/v1/evaluation/{}", id.as_str().unwrap_or("")));
    assert_eq!(call("GET", &eval_url(&eval_b), Some(&a)).0, 403);
    assert_eq!(call("GET", &eval_url(&eval_a), Some(&a)).0, 200);
    // Read.
    let (code, _) = call("GET", &agent.url("/v1/job/jb?namespace=b"), Some(&a));
    assert_eq!(code, 403);
    let (code, _) = call("GET", &agent.url("/v1/job/ja?namespace=a"), Some(&a));
    assert_eq!(code, 200);
    // List: every namespace asked for, only a's jobs answered.
    for query in ["namespace=*", "namespace=b"] {
        let (code, body) = call("GET", &agent.url(&format!("/v1/jobs?{query}")), Some(&a));
        assert_eq!(code, 200, "{body}");
        let ids: Vec<Value> = serde_json::from_str::<Vec<Value>>(&body)
            .expect("list")
            .into_iter()
            .map(|j| j["ID"].clone())
            .collect();
        let expect: Vec<Value> = if query == "namespace=b" {
            vec![]
        } else {
            vec![json!("ja")]
        };
        assert_eq!(ids, expect, "{query}");
    }
    // Stream: from the start of the buffer, a's events only.
    let lines = stream_lines(&agent, &a, Duration::from_secs(3));
    assert!(lines.iter().any(|l| l.contains("\"ja\"")), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains("\"jb\"")), "{lines:?}");
}

/// The event stream's lines (from index 1) for `window`.
fn stream_lines(agent: &TestAgent, token: &str, window: Duration) -> Vec<String> {
    let reader = ureq::get(&agent.url("/v1/event/stream?index=1&namespace=*"))
        .set("X-Nomad-Token", token)
        .timeout(window)
        .call()
        .expect("stream opens")
        .into_reader();
    let deadline = Instant::now() + window;
    let mut lines = Vec::new();
    for line in std::io::BufReader::new(reader).lines() {
        match line {
            Ok(line) => lines.push(line),
            Err(_) => break,
        }
        if Instant::now() > deadline {
            break;
        }
    }
    lines
}

/// (status, body) of a variable's write with one item.
fn put_var(agent: &TestAgent, path: &str, token: &str) -> (u16, String) {
    send_json(
        "PUT",
        &agent.url(&format!("/v1/var/{path}")),
        Some(token),
        &json!({"Path": path, "Items": {"k": "v"}}),
    )
}

#[test]
fn variable_path_rules_decide_reads_lists_and_writes() {
    let (agent, management) = acl_agent();
    let app_reader = token_with(
        &agent,
        &management,
        "app-reader",
        r#"namespace "default" {
  variables {
    path "app/*" { capabilities = ["read", "list"] }
  }
}"#,
    );
    let writer = token_with(
        &agent,
        &management,
        "writer",
        r#"namespace "default" { policy = "write" }"#,
    );
    for path in ["app/db", "secret/x"] {
        let (code, body) = put_var(&agent, path, &management);
        assert_eq!(code, 200, "{path}: {body}");
    }
    // Reads: its paths only.
    let (code, body) = call("GET", &agent.url("/v1/var/app/db"), Some(&app_reader));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"k\""), "{body}");
    let (code, body) = call("GET", &agent.url("/v1/var/secret/x"), Some(&app_reader));
    assert_eq!((code, body.as_str()), (403, "Permission denied"));
    // List: every variable asked for, its paths answered.
    let (code, body) = call("GET", &agent.url("/v1/vars"), Some(&app_reader));
    assert_eq!(code, 200, "{body}");
    let paths: Vec<Value> = serde_json::from_str::<Vec<Value>>(&body)
        .expect("list")
        .into_iter()
        .map(|v| v["Path"].clone())
        .collect();
    assert_eq!(paths, [json!("app/db")]);
    // Writes and deletes: not with read and list.
    let (code, body) = put_var(&agent, "app/db", &app_reader);
    assert_eq!((code, body.as_str()), (403, "Permission denied"));
    let (code, _) = call("DELETE", &agent.url("/v1/var/app/db"), Some(&app_reader));
    assert_eq!(code, 403);
    // `policy = "write"` writes, lists and destroys them all.
    let (code, body) = put_var(&agent, "app/db", &writer);
    assert_eq!(code, 200, "{body}");
    let (code, body) = call("GET", &agent.url("/v1/vars"), Some(&writer));
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Vec<Value>>(&body)
            .expect("list")
            .len(),
        2
    );
    let (code, body) = call("DELETE", &agent.url("/v1/var/secret/x"), Some(&writer));
    assert_eq!(code, 200, "{body}");
    // Another namespace's variables are not the writer's.
    let (code, _) = call(
        "GET",
        &agent.url("/v1/var/app/db?namespace=other"),
        Some(&writer),
    );
    assert_eq!(code, 403);
}

#[test]
fn a_policy_herder_does_not_fully_enforce_and_a_global_token_come_with_warnings() {
    let (agent, management) = acl_agent();
    let rules = r#"namespace "default" {
  policy       = "read"
  capabilities = ["csi-mount-volume"]
}
quota { policy = "read" }
host_volume "certs" { policy = "write" }"#;
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/acl/policy/partly"),
        Some(&management),
        &json!({"Name": "partly", "Rules": rules}),
    );
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("an answer");
    let warnings = answer["Warnings"].as_str().unwrap_or_default();
    assert!(warnings.starts_with("3 warnings:"), "{warnings}");
    for named in ["\"csi-mount-volume\"", "quota:", "host_volume \"certs\""] {
        assert!(warnings.contains(named), "{named} missing from {warnings}");
    }
    // A policy herder enforces whole: no warnings.
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/acl/policy/whole"),
        Some(&management),
        &json!({"Name": "whole", "Rules": READ_ONLY}),
    );
    assert_eq!((code, body.as_str()), (200, "null"));
    // The CLI prints them.
    let file = herder_tests::temp_dir();
    let path = file.path().join("partly.hcl");
    std::fs::write(&path, rules).expect("write the rules");
    let out = std::process::Command::new(herder_tests::herder_bin())
        .args(["acl", "policy", "apply", "-address", &agent.url("")])
        .args(["partly", path.to_str().expect("a path")])
        .env("NOMAD_TOKEN", &management)
        .output()
        .expect("run herder");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(printed.contains("Policy Warnings:"), "{printed}");
    assert!(
        printed.contains("quota: not enforced by herder"),
        "{printed}"
    );
    // A global token: kept, and said to change nothing.
    let token = |global: bool| {
        send_json(
            "PUT",
            &agent.url("/v1/acl/token"),
            Some(&management),
            &json!({"Name": "g", "Type": "client", "Policies": ["whole"], "Global": global}),
        )
    };
    let (code, body) = token(true);
    assert_eq!(code, 200, "{body}");
    let created: Value = serde_json::from_str(&body).expect("a token");
    assert_eq!(created["Global"], json!(true));
    assert!(
        created["Warnings"]
            .as_str()
            .is_some_and(|w| w.contains("single region")),
        "{body}"
    );
    let (code, body) = token(false);
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains("Warnings"), "{body}");
}

#[test]
fn an_expired_token_is_collected_by_the_system_gc() {
    let (agent, management) = acl_agent();
    token_with(&agent, &management, "readonly", READ_ONLY);
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/acl/token"),
        Some(&management),
        &json!({"Name": "brief", "Type": "client", "Policies": ["readonly"],
                "ExpirationTTL": 1_000_000_000u64}),
    );
    assert_eq!(code, 200, "{body}");
    let brief: Value = serde_json::from_str(&body).expect("a token");
    let (accessor, secret) = (
        brief["AccessorID"].as_str().expect("AccessorID"),
        brief["SecretID"].as_str().expect("SecretID"),
    );
    let listed = |accessor: &str| {
        let (code, body) = call("GET", &agent.url("/v1/acl/tokens"), Some(&management));
        assert_eq!(code, 200, "{body}");
        body.contains(accessor)
    };
    assert!(listed(accessor));
    std::thread::sleep(Duration::from_millis(1500));
    // Expired: refused at once, still listed until collected.
    let (code, body) = call("GET", &agent.url("/v1/jobs"), Some(secret));
    assert_eq!((code, body.as_str()), (403, "ACL token expired"));
    assert!(listed(accessor));
    let (code, body) = call("PUT", &agent.url("/v1/system/gc"), Some(&management));
    assert_eq!(code, 200, "{body}");
    assert!(!listed(accessor), "the expired token is still listed");
    // The management token, which never expires, stays.
    let (code, _) = call("GET", &agent.url("/v1/acl/token/self"), Some(&management));
    assert_eq!(code, 200);
}
