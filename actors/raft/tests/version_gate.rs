//! The version gate in a mixed-version cluster: three real cluster members
//! (the state store as the state machine, the signed RPC port on loopback,
//! bootstrap by `bootstrap_expect`), one of which advertises a version too
//! old for the entries the others write. Every write is refused, naming
//! that server, and nothing is written; once it restarts on the current
//! version ("upgrades") it brings its new entry to the leader and the same
//! write goes through on every replica.
//!
//! `StateCommands` needs herder 0.1.0; the old server advertises 0.0.9, a
//! release that cannot apply it. `Keyring` (variables and root keys) needs
//! 0.2.0: a 0.1.0 member holds it back while plain commands go through.

mod support;
use actix_web::{App, HttpServer};
use herder::state::{fixtures, Command, StateStore, StoreError, StoreOptions};
use herder_raft::cluster::rpc;
use herder_raft::{config_with, Cluster, ClusterKey, ClusterSettings, ServerNode};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::eventually;
use tempfile::TempDir;

const KEY: &str = "cg8StVXbQJ0gPvMd9o7yrg==";
const PATIENCE: Duration = Duration::from_secs(30);
const CURRENT: &str = env!("CARGO_PKG_VERSION");
const TOO_OLD: &str = "0.0.9";

/// One member: its replica, its store and its RPC port's server.
struct Member {
    cluster: Cluster,
    store: StateStore,
    rpc: actix_web::dev::ServerHandle,
}

impl Member {
    /// Starts member `n` (0-based) of `addrs` on `listener`, advertising
    /// `version`.
    async fn start(
        dir: &TempDir,
        n: usize,
        addrs: &[String],
        listener: TcpListener,
        version: &str,
    ) -> Member {
        let data_dir = data_dir(dir, n);
        std::fs::create_dir_all(&data_dir).unwrap();
        let store = StateStore::open(data_dir.join("state"), StoreOptions::default()).unwrap();
        let settings = ClusterSettings {
            node: ServerNode {
                rpc_addr: addrs[n].clone(),
                http_addr: format!("127.0.0.1:{}", 14646 + n),
                name: format!("s{}.global", n + 1),
                version: version.to_string(),
                datacenter: "dc1".into(),
            },
            region: "global".into(),
            bootstrap_expect: addrs.len(),
            retry_join: addrs.to_vec(),
            dead_server_cleanup: std::time::Duration::ZERO,
            max_restore_bytes: 0,
            faults: None,
            key: ClusterKey::from_base64(KEY).unwrap(),
            tls: None,
            raft: Arc::new(config_with(8192, 1024).unwrap()),
        };
        let cluster = Cluster::start(settings, &data_dir, store.clone())
            .await
            .unwrap();
        let served = cluster.clone();
        let rpc = HttpServer::new(move || App::new().configure(rpc::configure(served.clone())))
            .workers(1)
            .disable_signals()
            .listen(listener)
            .unwrap()
            .run();
        let handle = rpc.handle();
        tokio::spawn(rpc);
        Member {
            cluster,
            store,
            rpc: handle,
        }
    }

    /// Stops it as a process exit would: its data dir stays.
    async fn stop(self) {
        self.cluster.shutdown().await;
        self.rpc.stop(false).await;
        self.store.close();
    }

    /// The version this member's membership records for server `name`.
    fn recorded_version(&self, name: &str) -> Option<String> {
        self.cluster
            .members()
            .into_iter()
            .find(|m| m.node.name == name)
            .map(|m| m.node.version)
    }
}

/// `n` bound loopback ports and their addresses.
fn loopback_ports(n: usize) -> (Vec<TcpListener>, Vec<String>) {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    (listeners, addrs)
}

fn data_dir(dir: &TempDir, n: usize) -> PathBuf {
    dir.path().join(format!("server-{n}"))
}

fn register(n: u64) -> (Command, herder::structs::NodeId) {
    let node = fixtures::node(&format!("node-{n}"));
    let id = node.id;
    let command = Command::NodeRegister {
        node: Arc::new(node),
    };
    (command, id)
}

async fn submit(store: &StateStore, command: Command) -> Result<u64, StoreError> {
    match store.submit(command).await {
        Ok(outcome) => outcome.map(|o| o.index),
        Err(_) => Err(StoreError::Closed),
    }
}

async fn wait_for_a_leader(members: &[Member]) {
    eventually("a leader of three members", PATIENCE, || {
        members.iter().any(|m| m.cluster.is_leader())
            && members.iter().all(|m| m.cluster.members().len() == 3)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_server_holds_writes_back_until_it_upgrades() {
    let dir = tempfile::tempdir().unwrap();
    let (listeners, addrs) = loopback_ports(3);
    let mut members = Vec::new();
    for (n, listener) in listeners.into_iter().enumerate() {
        let version = if n == 2 { TOO_OLD } else { CURRENT };
        members.push(Member::start(&dir, n, &addrs, listener, version).await);
    }
    wait_for_a_leader(&members).await;
    for member in &members {
        assert_eq!(
            member.recorded_version("s3.global").as_deref(),
            Some(TOO_OLD)
        );
    }

    // Refused, from the leader's own store and forwarded from a follower
    // alike, with the old server named; nothing reaches any replica.
    let (command, node_id) = register(1);
    for member in &members[..2] {
        let refused = submit(&member.store, command.clone()).await;
        let Err(StoreError::NotCommitted(message)) = refused else {
            panic!("the write was not refused: {refused:?}");
        };
        assert!(
            message.contains(&format!("s3.global ({}) at {TOO_OLD}", addrs[2])),
            "{message}"
        );
        assert!(message.contains("0.1.0 or newer"), "{message}");
    }
    for member in &members {
        assert!(member.store.snapshot().node(&node_id).is_none());
    }

    // The old server restarts on the current version, at the same address
    // with the same data dir, and tells the leader.
    let old = members.pop().unwrap();
    old.stop().await;
    let listener = TcpListener::bind(&addrs[2]).unwrap();
    members.push(Member::start(&dir, 2, &addrs, listener, CURRENT).await);
    eventually("every member to record the upgrade", PATIENCE, || {
        members
            .iter()
            .all(|m| m.recorded_version("s3.global").as_deref() == Some(CURRENT))
    })
    .await;

    // The same write goes through now and reaches every replica.
    let deadline = Instant::now() + PATIENCE;
    let index = loop {
        match submit(&members[0].store, command.clone()).await {
            Ok(index) => break index,
            Err(e) => {
                assert!(Instant::now() < deadline, "write never accepted: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    for member in &members {
        let store = member.store.clone();
        eventually("every replica to apply the write", PATIENCE, || {
            store.latest_index() >= index && store.snapshot().node(&node_id).is_some()
        })
        .await;
    }
    for member in members {
        member.stop().await;
    }
}

/// The gate's other side: once every member writes a kind, a server too
/// old to apply it is not let in (it would fail on the first such entry);
/// the same server on the current version joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_too_old_for_what_the_members_write_is_not_let_in() {
    let dir = tempfile::tempdir().unwrap();
    let (mut listeners, addrs) = loopback_ports(4);
    let late = listeners.pop().unwrap();
    let mut members = Vec::new();
    for (n, listener) in listeners.into_iter().enumerate() {
        members.push(Member::start(&dir, n, &addrs[..3], listener, CURRENT).await);
    }
    wait_for_a_leader(&members).await;

    let old = Member::start(&dir, 3, &addrs, late, TOO_OLD).await;
    // retry_join asks the leader about once a second; give it several tries.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for member in &members {
        assert_eq!(
            member.recorded_version("s4.global"),
            None,
            "the old server got in"
        );
    }
    let leader = members.iter().find(|m| m.cluster.is_leader()).unwrap();
    let (command, _) = register(1);
    submit(&leader.store, command).await.expect("writes go on");
    old.stop().await;

    // The same server, upgraded (its data dir kept), joins.
    let listener = TcpListener::bind(&addrs[3]).unwrap();
    let upgraded = Member::start(&dir, 3, &addrs, listener, CURRENT).await;
    eventually("the upgraded server to join", PATIENCE, || {
        members
            .iter()
            .all(|m| m.recorded_version("s4.global").as_deref() == Some(CURRENT))
    })
    .await;
    upgraded.stop().await;
    for member in members {
        member.stop().await;
    }
}

/// The seed's lesson (Nomad 1.4's keyring entry crashed the 1.3 servers
/// still in the cluster): with a 0.1.0 server among 0.2.0 ones, plain
/// commands are written but a keyring command is refused, naming it, and
/// no replica gets a root key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyring_commands_wait_for_every_server_to_run_0_2_0() {
    use herder::structs::{KeyMaterial, RootKey, RootKeyMeta};
    let dir = tempfile::tempdir().unwrap();
    let (listeners, addrs) = loopback_ports(3);
    let mut members = Vec::new();
    for (n, listener) in listeners.into_iter().enumerate() {
        let version = if n == 1 { "0.1.0" } else { CURRENT };
        members.push(Member::start(&dir, n, &addrs, listener, version).await);
    }
    wait_for_a_leader(&members).await;
    let (plain, node_id) = register(7);
    let deadline = Instant::now() + PATIENCE;
    while let Err(e) = submit(&members[0].store, plain.clone()).await {
        assert!(
            Instant::now() < deadline,
            "a plain write never went through: {e}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(members[0].store.snapshot().node(&node_id).is_some());

    let key = RootKey {
        meta: RootKeyMeta {
            key_id: "k1".into(),
            ..Default::default()
        },
        key: KeyMaterial(vec![1; 32]),
    };
    let refused = submit(&members[2].store, Command::RootKeyInit { key }).await;
    let Err(StoreError::NotCommitted(message)) = refused else {
        panic!("the keyring write was not refused: {refused:?}");
    };
    assert!(
        message.contains(&format!("s2.global ({}) at 0.1.0", addrs[1])),
        "{message}"
    );
    assert!(message.contains("0.2.0 or newer"), "{message}");
    for member in &members {
        assert_eq!(member.store.snapshot().root_keys().count(), 0);
    }
    for member in members {
        member.stop().await;
    }
}
