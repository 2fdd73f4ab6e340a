//! Three replicas talking HTTP on loopback through the cluster key check:
//! replication works with the key, and a server or a caller without it is
//! refused.

mod support;
use actix_web::{App, HttpServer};
use herder::state::Command;
use herder_raft::http::{configure, LeaderContact, AUTH_HEADER, VOTE_PATH};
use herder_raft::{
    default_config, ClusterKey, HttpTransport, MemoryTarget, NodeId, RaftNode, ServerNode,
    Transport,
};
use openraft::raft::VoteRequest;
use openraft::{ServerState, Vote};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::eventually;
use tempfile::TempDir;

const KEY: &str = "cg8StVXbQJ0gPvMd9o7yrg==";
const OTHER_KEY: &str = "HbSsQiUzzsRWKRXz7b2b3w==";
const PATIENCE: Duration = Duration::from_secs(15);

fn command(n: u64) -> Command {
    Command::JobStabilityUpdate {
        namespace: "default".to_string(),
        job_id: format!("job-{n}"),
        version: n,
        stable: true,
    }
}

struct Server {
    node: RaftNode<MemoryTarget>,
    address: String,
    http: actix_web::dev::ServerHandle,
    contact: LeaderContact,
}

/// A replica serving the Raft RPCs on a free loopback port, holding `key`.
async fn start_server(id: NodeId, dir: &TempDir, key: &str) -> Server {
    let key = ClusterKey::from_base64(key).unwrap();
    let transport = HttpTransport::new(key.clone(), Duration::from_secs(2));
    let config = Arc::new(default_config().unwrap());
    let data_dir = dir.path().join(format!("server-{id}"));
    let node = RaftNode::start(
        id,
        &data_dir,
        Arc::new(MemoryTarget::new()),
        transport,
        config,
    )
    .await
    .unwrap();
    let raft = node.raft().clone();
    let contact = LeaderContact::default();
    let heard = contact.clone();
    let http = HttpServer::new(move || {
        App::new().configure(configure(
            raft.clone(),
            key.clone(),
            heard.clone(),
            herder_raft::http::MAX_BODY_BYTES,
        ))
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .unwrap();
    let address = http.addrs()[0].to_string();
    let http = http.run();
    let handle = http.handle();
    tokio::spawn(http);
    Server {
        node,
        address,
        http: handle,
        contact,
    }
}

/// Three servers (the third with `third_key`), initialised as one cluster.
async fn start_cluster(dir: &TempDir, third_key: &str) -> Vec<Server> {
    let servers = vec![
        start_server(1, dir, KEY).await,
        start_server(2, dir, KEY).await,
        start_server(3, dir, third_key).await,
    ];
    let members: BTreeMap<NodeId, ServerNode> = servers
        .iter()
        .map(|s| (s.node.id(), support::server_node(&s.address)))
        .collect();
    servers[0].node.raft().initialize(members).await.unwrap();
    servers
}

async fn leader(servers: &[Server]) -> &Server {
    let mut found = None;
    eventually("a leader", PATIENCE, || {
        found = servers.iter().position(|s| {
            let metrics = s.node.raft().metrics().borrow().clone();
            metrics.state == ServerState::Leader && metrics.current_leader == Some(s.node.id())
        });
        found.is_some()
    })
    .await;
    &servers[found.unwrap_or_default()]
}

async fn write_all(servers: &[Server], written: &[Command]) {
    for command in written {
        let deadline = Instant::now() + PATIENCE;
        while let Err(e) = leader(servers)
            .await
            .node
            .write(vec![command.clone()])
            .await
        {
            assert!(Instant::now() < deadline, "write never acknowledged: {e}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn stop(servers: Vec<Server>) {
    for server in servers {
        server.node.shutdown().await;
        server.http.stop(false).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_with_the_key_replicate_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let servers = start_cluster(&dir, KEY).await;
    let written: Vec<Command> = (0..10).map(command).collect();
    write_all(&servers, &written).await;
    for server in &servers {
        let target = server.node.target().clone();
        eventually("every server to apply the writes", PATIENCE, || {
            target.commands() == written
        })
        .await;
    }
    // Followers hear the leader's heartbeats (every 100 ms); the leader
    // takes no appends.
    let leader_id = leader(&servers).await.node.id();
    for server in &servers {
        let since = server.contact.millis_since();
        if server.node.id() == leader_id {
            assert_eq!(since, None, "the leader was never sent an append");
        } else {
            assert!(since.is_some_and(|ms| ms < 1_000), "a follower: {since:?}");
        }
    }
    stop(servers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_another_key_gets_nothing_and_the_rest_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let servers = start_cluster(&dir, OTHER_KEY).await;
    let written: Vec<Command> = (0..10).map(command).collect();
    write_all(&servers, &written).await;
    for server in &servers[..2] {
        let target = server.node.target().clone();
        eventually(
            "the two keyed servers to apply the writes",
            PATIENCE,
            || target.commands() == written,
        )
        .await;
    }
    // The leader kept trying it all along, and it never accepted a thing.
    assert!(servers[2].node.target().commands().is_empty());
    assert_ne!(leader(&servers).await.node.id(), 3);
    stop(servers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_or_wrongly_signed_request_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(1, &dir, KEY).await;
    let url = format!("http://{}{VOTE_PATH}", server.address);
    let body =
        r#"{"vote":{"leader_id":{"term":9,"node_id":2},"committed":false},"last_log_id":null}"#;
    let address = url.clone();
    let statuses = tokio::task::spawn_blocking(move || {
        let unsigned = ureq::post(&address).send_string(body);
        let forged = ureq::post(&address)
            .set(AUTH_HEADER, "bm90IHRoZSBrZXk=")
            .send_string(body);
        [unsigned, forged].map(|r| match r {
            Err(ureq::Error::Status(status, _)) => status,
            Ok(response) => response.status(),
            Err(e) => panic!("{e}"),
        })
    })
    .await
    .unwrap();
    assert_eq!(statuses, [401, 401]);
    // Nothing reached its Raft: it still stands at term 0.
    assert_eq!(server.node.raft().metrics().borrow().current_term, 0);

    // The same request signed with the key is answered and moves its term.
    let transport = HttpTransport::new(ClusterKey::from_base64(KEY).unwrap(), PATIENCE);
    let node = support::server_node(&server.address);
    let request = VoteRequest::new(Vote::new(9, 2), None);
    transport.vote(2, 1, &node, request).await.unwrap();
    let raft = server.node.raft().clone();
    eventually("the signed vote to reach its Raft", PATIENCE, || {
        raft.metrics().borrow().current_term == 9
    })
    .await;
    stop(vec![server]).await;
}
