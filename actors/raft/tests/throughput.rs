//! Write throughput of the replicated state against the state store alone
//! (issue 18, recorded in docs/PERFORMANCE.md). Ignored by default: it
//! measures, it does not check. Run with
//! `cargo test --release -p herder-raft --test throughput -- --ignored --nocapture`.
//!
//! Every write is one `NodeRegister` command, submitted by `WRITERS`
//! concurrent writers each waiting for its previous write's answer (as
//! HTTP clients do), through (a) `StateStore::submit` on a data dir,
//! (b) a one-server Raft group, (c) a three-server in-process group, the
//! last two with the state store as their state machine.

use herder::state::{fixtures, Command, StateStore, StoreOptions};
use herder_raft::{default_config, LogEntry, NodeId, RaftNode, Router, ServerNode};
use openraft::ServerState;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const WRITERS: u64 = 32;
const WRITES_PER_WRITER: u64 = 60;

fn command(n: u64) -> Command {
    Command::NodeRegister {
        node: Arc::new(fixtures::node(&format!("node-{n}"))),
    }
}

/// Runs `WRITERS` writers of `WRITES_PER_WRITER` writes each through
/// `write`, and answers the writes per second.
async fn measure<F, Fut>(write: F) -> f64
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let write = write.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..WRITES_PER_WRITER {
                write(w * WRITES_PER_WRITER + i).await;
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    (WRITERS * WRITES_PER_WRITER) as f64 / started.elapsed().as_secs_f64()
}

async fn raft_group(size: u64, dir: &std::path::Path) -> Vec<RaftNode<StateStore>> {
    let router = Router::new(18);
    let config = Arc::new(default_config().unwrap());
    let mut nodes = Vec::new();
    for id in 1..=size {
        let data_dir = dir.join(format!("server-{id}"));
        let store = StateStore::open(data_dir.join("state"), StoreOptions::default()).unwrap();
        let node = RaftNode::start(
            id,
            &data_dir,
            Arc::new(store),
            router.clone(),
            config.clone(),
        )
        .await
        .unwrap();
        router.add(id, node.raft().clone());
        nodes.push(node);
    }
    let members: BTreeMap<NodeId, ServerNode> = (1..=size)
        .map(|id| (id, ServerNode::at(format!("server-{id}"))))
        .collect();
    nodes[0].raft().initialize(members).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while nodes[0].raft().metrics().borrow().state != ServerState::Leader {
        assert!(Instant::now() < deadline, "server 1 never led");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    nodes
}

async fn raft_throughput(size: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let nodes = raft_group(size, dir.path()).await;
    let raft = nodes[0].raft().clone();
    let per_second = measure(move |n| {
        let raft = raft.clone();
        async move {
            raft.client_write(LogEntry::commands(vec![command(n)]))
                .await
                .unwrap();
        }
    })
    .await;
    for node in &nodes {
        node.shutdown().await;
        node.target().close();
    }
    per_second
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it with --ignored --nocapture"]
async fn write_throughput_of_the_store_alone_and_of_raft_groups() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let submitter = store.clone();
    let alone = measure(move |n| {
        let receiver = submitter.submit(command(n));
        async move {
            receiver.await.unwrap().unwrap();
        }
    })
    .await;
    store.close();
    let one = raft_throughput(1).await;
    let three = raft_throughput(3).await;
    let writes = WRITERS * WRITES_PER_WRITER;
    println!("{writes} writes, {WRITERS} concurrent writers, one NodeRegister each:");
    println!("  StateStore::submit alone:       {alone:>8.0} writes/s");
    println!(
        "  1-server raft + StateStore:     {one:>8.0} writes/s ({:.0}% of alone)",
        100.0 * one / alone
    );
    println!(
        "  3-server raft (in-process):     {three:>8.0} writes/s ({:.0}% of alone)",
        100.0 * three / alone
    );
}
