//! Variables end to end over the HTTP API: write, read, list by prefix,
//! check-and-set conflicts (409 with the current variable), delete; they
//! survive a restart and key rotations (plain and full), a key that still
//! seals a variable cannot be removed, and the data dir never holds the
//! plaintext.

use herder_tests::{get, send_json, send_raw, server_config, temp_dir, TestAgent};
use serde_json::{json, Value};
use std::path::Path;

const SECRET: &str = "correct-horse-battery-staple-4f1c";

fn put(agent: &TestAgent, path: &str, items: Value) -> (u16, Value) {
    let (code, body) = send_json("PUT", &agent.url(path), None, &json!({ "Items": items }));
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn read(agent: &TestAgent, path: &str) -> (u16, Value) {
    let (code, body) = get(&agent.url(path));
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn paths(agent: &TestAgent, query: &str) -> Vec<String> {
    let (code, body) = read(agent, &format!("/v1/vars{query}"));
    assert_eq!(code, 200, "{body}");
    body.as_array()
        .expect("a list")
        .iter()
        .map(|v| {
            assert!(v.get("Items").is_none(), "a list shows no items: {v}");
            v["Path"].as_str().unwrap_or_default().to_string()
        })
        .collect()
}

/// Every file under `dir`, read whole.
fn files_contain(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(p.display().to_string());
                }
            }
        }
    }
    found
}

#[test]
fn variables_put_get_list_cas_and_delete() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let (code, first) = put(
        &agent,
        "/v1/var/app/db",
        json!({"user": "u", "password": SECRET}),
    );
    assert_eq!(code, 200, "{first}");
    assert_eq!(first["Path"], "app/db");
    assert_eq!(first["Namespace"], "default");
    assert_eq!(first["Items"]["password"], SECRET);
    let index = first["ModifyIndex"].as_u64().unwrap();
    assert_eq!(first["CreateIndex"].as_u64(), Some(index));

    put(&agent, "/v1/var/app/cache", json!({"k": "v"}));
    put(&agent, "/v1/var/other", json!({"k": "v"}));
    let (code, got) = read(&agent, "/v1/var/app/db");
    assert_eq!(code, 200);
    assert_eq!(got["Items"]["password"], SECRET);
    assert_eq!(paths(&agent, "?prefix=app/"), ["app/cache", "app/db"]);
    assert_eq!(paths(&agent, ""), ["app/cache", "app/db", "other"]);
    assert!(paths(&agent, "?namespace=prod").is_empty());
    assert_eq!(read(&agent, "/v1/var/missing").0, 404);

    // A stale check-and-set is refused with the variable as it is.
    let (code, body) = send_json(
        "PUT",
        &agent.url(&format!("/v1/var/app/db?cas={}", index + 100)),
        None,
        &json!({"Items": {"password": "new"}}),
    );
    assert_eq!(code, 409, "{body}");
    let current: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(current["ModifyIndex"].as_u64(), Some(index));
    assert_eq!(current["Items"]["password"], SECRET);
    // cas=0: only when it does not exist.
    let (code, _) = send_json(
        "PUT",
        &agent.url("/v1/var/app/db?cas=0"),
        None,
        &json!({"Items": {"a": "b"}}),
    );
    assert_eq!(code, 409);
    let (code, body) = send_json(
        "PUT",
        &agent.url(&format!("/v1/var/app/db?cas={index}")),
        None,
        &json!({"Items": {"password": "rotated"}}),
    );
    assert_eq!(code, 200, "{body}");
    let updated: Value = serde_json::from_str(&body).unwrap();
    assert!(updated["ModifyIndex"].as_u64().unwrap() > index);
    assert_eq!(updated["CreateIndex"].as_u64(), Some(index));

    // Refusals: bad paths, reserved prefix, no items.
    assert_eq!(put(&agent, "/v1/var/a..b", json!({"k": "v"})).0, 400);
    assert_eq!(
        put(&agent, "/v1/var/nomad/secret", json!({"k": "v"})).0,
        400
    );
    assert_eq!(
        put(&agent, "/v1/var/nomad/jobs/web", json!({"k": "v"})).0,
        200
    );
    assert_eq!(put(&agent, "/v1/var/empty", json!({})).0, 400);
    assert_eq!(
        put(&agent, "/v1/var/everywhere?namespace=*", json!({"k": "v"})).0,
        400
    );
    let huge = "x".repeat(70 * 1024);
    assert_eq!(put(&agent, "/v1/var/huge", json!({ "k": huge })).0, 400);

    // Delete with a stale cas: 409, then with the right one.
    let modify = updated["ModifyIndex"].as_u64().unwrap();
    let url = agent.url(&format!("/v1/var/app/db?cas={}", modify + 1));
    assert_eq!(send_raw("DELETE", &url, "").0, 409);
    let url = agent.url(&format!("/v1/var/app/db?cas={modify}"));
    assert_eq!(send_raw("DELETE", &url, "").0, 200);
    assert_eq!(read(&agent, "/v1/var/app/db").0, 404);
}

#[test]
fn variables_survive_restart_and_rotation_and_are_never_stored_in_the_clear() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    put(&agent, "/v1/var/app/db", json!({"password": SECRET}));
    let (_, keys) = read(&agent, "/v1/operator/keyring/keys");
    let keys = keys.as_array().unwrap().clone();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0]["State"], "active");
    assert_eq!(keys[0]["Algorithm"], "aes256-gcm");
    assert!(keys[0].get("Key").is_none(), "no key material in the list");
    let first_key = keys[0]["KeyID"].as_str().unwrap().to_string();

    // A plain rotation: the old key stays (inactive) and still opens.
    let (code, body) = send_raw("PUT", &agent.url("/v1/operator/keyring/rotate"), "");
    assert_eq!(code, 200, "{body}");
    let (_, got) = read(&agent, "/v1/var/app/db");
    assert_eq!(got["Items"]["password"], SECRET);
    let (code, body) = send_raw(
        "DELETE",
        &agent.url(&format!("/v1/operator/keyring/key/{first_key}")),
        "",
    );
    assert_eq!(code, 400, "a key in use cannot go: {body}");
    assert!(body.contains("in use"), "{body}");
    agent.stop();

    let agent = TestAgent::start(server_config(dir.path()), false);
    let (code, got) = read(&agent, "/v1/var/app/db");
    assert_eq!(code, 200, "after a restart: {got}");
    assert_eq!(got["Items"]["password"], SECRET);

    // A full rotation re-seals it; the old keys are then unused.
    let (code, body) = send_raw(
        "PUT",
        &agent.url("/v1/operator/keyring/rotate?full=true"),
        "",
    );
    assert_eq!(code, 200, "{body}");
    let (_, keys) = read(&agent, "/v1/operator/keyring/keys");
    let states: Vec<&str> = keys
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["State"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["deprecated", "deprecated", "active"]);
    let (_, got) = read(&agent, "/v1/var/app/db");
    assert_eq!(got["Items"]["password"], SECRET);
    let (code, body) = send_raw(
        "DELETE",
        &agent.url(&format!("/v1/operator/keyring/key/{first_key}")),
        "",
    );
    assert_eq!(code, 200, "{body}");
    agent.stop();

    let agent = TestAgent::start(server_config(dir.path()), false);
    let (_, got) = read(&agent, "/v1/var/app/db");
    assert_eq!(got["Items"]["password"], SECRET);
    agent.stop();
    let leaks = files_contain(dir.path(), SECRET.as_bytes());
    assert!(leaks.is_empty(), "plaintext found on disk in {leaks:?}");
}

#[test]
fn a_lock_is_acquired_held_and_released() {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let (code, body) = send_json(
        "PUT",
        &agent.url("/v1/var/locks/leader?lock-acquire"),
        None,
        &json!({"Items": {"holder": "a"}, "Lock": {"TTL": "15s"}}),
    );
    assert_eq!(code, 200, "{body}");
    let held: Value = serde_json::from_str(&body).unwrap();
    let lock_id = held["Lock"]["ID"].as_str().unwrap().to_string();
    // Someone else can neither take it nor write the variable.
    let (code, _) = send_json(
        "PUT",
        &agent.url("/v1/var/locks/leader?lock-acquire"),
        None,
        &json!({"Items": {"holder": "b"}}),
    );
    assert_eq!(code, 409);
    assert_eq!(
        put(&agent, "/v1/var/locks/leader", json!({"holder": "b"})).0,
        409
    );
    let release = |id: &str| {
        send_json(
            "PUT",
            &agent.url("/v1/var/locks/leader?lock-release"),
            None,
            &json!({"Items": {"holder": "a"}, "Lock": {"ID": id}}),
        )
        .0
    };
    assert_eq!(release("not-the-holder"), 409);
    assert_eq!(release(&lock_id), 200);
    assert_eq!(
        put(&agent, "/v1/var/locks/leader", json!({"holder": "b"})).0,
        200
    );
}
