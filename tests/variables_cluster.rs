//! Variables on a three-server cluster (the real binary): written through
//! a follower, read back on every server, each opening the items with the
//! replicated root key; a rotation on another follower leaves one active
//! key that every server agrees on. The keyring's entries pass the version
//! gate because every server runs this build.

use herder_tests::cluster::{http_get, http_send, Cluster, ClusterOptions, SERVERS};
use herder_tests::wait_for;
use serde_json::{json, Value};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);

fn body(answer: &herder_tests::cluster::Answer) -> Value {
    serde_json::from_str(&answer.body).unwrap_or(Value::Null)
}

#[test]
fn variables_and_root_keys_replicate_to_every_server() {
    let mut cluster = Cluster::start(ClusterOptions::default());
    cluster.wait_until_answering(Duration::from_secs(60));
    let leader = cluster.wait_for_leader(Duration::from_secs(60));
    let follower = (leader + 1) % SERVERS;
    let other = (leader + 2) % SERVERS;

    let written = http_send(
        "PUT",
        &cluster.url(follower, "/v1/var/app/db"),
        Some(&json!({"Items": {"password": "s3cret"}})),
        TIMEOUT,
    )
    .expect("write through a follower");
    assert_eq!(written.status, 200, "{}", written.body);

    let rotated = http_send(
        "PUT",
        &cluster.url(other, "/v1/operator/keyring/rotate"),
        None,
        TIMEOUT,
    )
    .expect("rotate through another follower");
    assert_eq!(rotated.status, 200, "{}", rotated.body);

    for i in 0..SERVERS {
        let url = cluster.url(i, "/v1/var/app/db");
        let read = wait_for(Duration::from_secs(10), || {
            let a = http_get(&url, TIMEOUT).ok()?;
            (a.status == 200).then(|| body(&a))
        })
        .unwrap_or_else(|| panic!("server {i} never answered the variable"));
        assert_eq!(read["Items"]["password"], "s3cret", "server {i}");
        let keys =
            http_get(&cluster.url(i, "/v1/operator/keyring/keys?stale"), TIMEOUT).expect("keys");
        let keys = body(&keys);
        let states: Vec<&str> = keys
            .as_array()
            .expect("a key list")
            .iter()
            .filter_map(|k| k["State"].as_str())
            .collect();
        assert_eq!(states, ["inactive", "active"], "server {i}: {keys}");
    }
    cluster.stop_all();
}
