//! Three in-process replicas on the fault-injecting router: election,
//! ordered replication, leader loss, partitions, snapshot catch-up,
//! restart from disk, and lossy, slow networks. Every wait is a condition
//! polled until a generous deadline; no sleep is an assertion.

mod support;
use herder::state::Command;
use herder_raft::{
    default_config, MemoryTarget, NodeId, RaftNode, Router, ServerNode, SledLogStore,
    WriteResponse, LOG_DIR,
};
use openraft::storage::RaftLogStorage;
use openraft::{Config, ServerState, SnapshotPolicy};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::eventually;
use tempfile::TempDir;

const IDS: [NodeId; 3] = [1, 2, 3];
/// How long any expected change may take (elections are 0.5-1 s).
const PATIENCE: Duration = Duration::from_secs(15);

/// The command of write number `n`: distinct, and its place in the
/// sequence readable from it.
fn command(n: u64) -> Command {
    Command::JobStabilityUpdate {
        namespace: "default".to_string(),
        job_id: format!("job-{n}"),
        version: n,
        stable: true,
    }
}

fn commands(range: std::ops::Range<u64>) -> Vec<Command> {
    range.map(command).collect()
}

struct Cluster {
    router: Router,
    config: Arc<Config>,
    dir: TempDir,
    nodes: BTreeMap<NodeId, RaftNode<MemoryTarget>>,
}

impl Cluster {
    /// Three replicas, initialised as one cluster, with a leader.
    async fn start(config: Config) -> Cluster {
        let mut cluster = Cluster {
            router: Router::new(18),
            config: Arc::new(config),
            dir: tempfile::tempdir().unwrap(),
            nodes: BTreeMap::new(),
        };
        for id in IDS {
            cluster.start_node(id).await;
        }
        let members: BTreeMap<NodeId, ServerNode> = IDS
            .iter()
            .map(|id| (*id, support::server_node(format!("server-{id}"))))
            .collect();
        cluster.node(1).raft().initialize(members).await.unwrap();
        cluster.leader().await;
        cluster
    }

    fn data_dir(&self, id: NodeId) -> std::path::PathBuf {
        self.dir.path().join(format!("server-{id}"))
    }

    async fn start_node(&mut self, id: NodeId) {
        let data_dir = self.data_dir(id);
        let target = Arc::new(MemoryTarget::new());
        let node = RaftNode::start(
            id,
            &data_dir,
            target,
            self.router.clone(),
            self.config.clone(),
        )
        .await
        .unwrap();
        self.router.add(id, node.raft().clone());
        self.nodes.insert(id, node);
    }

    fn node(&self, id: NodeId) -> &RaftNode<MemoryTarget> {
        &self.nodes[&id]
    }

    /// Stops a server as a crash would: off the network, its tasks ended,
    /// only its data dir left.
    async fn kill(&mut self, id: NodeId) {
        self.router.remove(id);
        if let Some(node) = self.nodes.remove(&id) {
            node.shutdown().await;
        }
    }

    /// The server that is leader by its own account, among the running.
    fn current_leader(&self) -> Option<NodeId> {
        self.nodes.values().find_map(|node| {
            let metrics = node.raft().metrics().borrow().clone();
            (metrics.state == ServerState::Leader && metrics.current_leader == Some(node.id()))
                .then_some(node.id())
        })
    }

    async fn leader(&self) -> NodeId {
        let mut leader = None;
        eventually("a leader", PATIENCE, || {
            leader = self.current_leader();
            leader.is_some()
        })
        .await;
        leader.unwrap_or_default()
    }

    /// Writes through whoever leads, retrying through elections and lost
    /// messages until the write is acknowledged.
    async fn write(&self, commands: Vec<Command>) -> WriteResponse {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let leader = self.leader().await;
            match self.node(leader).write(commands.clone()).await {
                Ok(response) => return response,
                Err(error) => {
                    assert!(
                        Instant::now() < deadline,
                        "write never acknowledged: {error}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// Writes each command as its own entry, in order.
    async fn write_each(&self, commands: &[Command]) -> Vec<WriteResponse> {
        let mut responses = Vec::new();
        for command in commands {
            responses.push(self.write(vec![command.clone()]).await);
        }
        responses
    }

    async fn wait_applied(&self, id: NodeId, expected: &[Command]) {
        let target = self.node(id).target().clone();
        eventually(
            &format!("server {id} to apply {} commands", expected.len()),
            PATIENCE,
            || target.commands() == expected,
        )
        .await;
    }

    async fn wait_all_applied(&self, expected: &[Command]) {
        for id in self.nodes.keys() {
            self.wait_applied(*id, expected).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_elect_a_leader_and_apply_writes_in_order() {
    let cluster = Cluster::start(default_config().unwrap()).await;
    let written = commands(0..20);
    let mut responses = cluster.write_each(&written[..10]).await;
    // A batch is one entry: its commands share one index.
    responses.push(cluster.write(written[10..].to_vec()).await);

    let indexes: Vec<u64> = responses.iter().map(|r| r.index).collect();
    assert!(
        indexes.windows(2).all(|w| w[0] < w[1]),
        "indexes not increasing: {indexes:?}"
    );
    assert_eq!(responses[10].results.len(), 10);
    cluster.wait_all_applied(&written).await;
    for id in IDS {
        let batches = cluster.node(id).target().batches();
        let applied: Vec<u64> = batches.iter().map(|b| b.index).collect();
        assert_eq!(applied, indexes, "server {id} applied at other indexes");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_leader_elects_another_that_keeps_every_acknowledged_write() {
    let mut cluster = Cluster::start(default_config().unwrap()).await;
    let written = commands(0..20);
    cluster.write_each(&written[..10]).await;
    let old_leader = cluster.leader().await;

    let killed_at = Instant::now();
    cluster.kill(old_leader).await;
    let new_leader = cluster.leader().await;
    let failover = killed_at.elapsed();
    assert_ne!(new_leader, old_leader);
    assert!(
        failover < Duration::from_secs(5),
        "failover took {failover:?}"
    );
    eprintln!("failover: new leader {new_leader} after {failover:?}");

    cluster.write_each(&written[10..]).await;
    cluster.wait_all_applied(&written).await;
    assert_eq!(cluster.nodes.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_follower_catches_up_after_the_partition_heals() {
    let cluster = Cluster::start(default_config().unwrap()).await;
    let written = commands(0..30);
    cluster.write_each(&written[..5]).await;
    cluster.wait_all_applied(&written[..5]).await;
    let leader = cluster.leader().await;
    let follower = IDS.into_iter().find(|id| *id != leader).unwrap_or_default();

    cluster.router.isolate(follower);
    cluster.write_each(&written[5..]).await;
    // The majority committed without it, and it really was cut off.
    assert_eq!(cluster.node(follower).target().commands(), written[..5]);

    cluster.router.heal();
    cluster.wait_all_applied(&written).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_the_purged_log_is_rebuilt_from_a_snapshot() {
    let config = Config {
        snapshot_policy: SnapshotPolicy::LogsSinceLast(10),
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        ..default_config().unwrap()
    };
    let cluster = Cluster::start(config).await;
    let leader = cluster.leader().await;
    let follower = IDS.into_iter().find(|id| *id != leader).unwrap_or_default();
    cluster.router.isolate(follower);

    let written = commands(0..40);
    let responses = cluster.write_each(&written).await;
    let last_index = responses.last().map(|r| r.index).unwrap_or_default();
    // The leader no longer holds the entries the follower lacks.
    let raft = cluster.node(leader).raft().clone();
    eventually("the leader to purge its log", PATIENCE, || {
        raft.metrics().borrow().purged.map(|p| p.index).unwrap_or(0) >= last_index - 10
    })
    .await;

    cluster.router.heal();
    cluster.wait_applied(follower, &written).await;
    assert!(cluster.node(follower).target().snapshots_installed() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_reads_its_log_back_and_rejoins() {
    let mut cluster = Cluster::start(default_config().unwrap()).await;
    let written = commands(0..15);
    cluster.write_each(&written[..10]).await;
    cluster.wait_all_applied(&written[..10]).await;
    let leader = cluster.leader().await;
    let follower = IDS.into_iter().find(|id| *id != leader).unwrap_or_default();
    let vote_before = cluster.node(follower).raft().metrics().borrow().vote;

    cluster.kill(follower).await;
    // What it voted is on its disk (a forgotten vote allows two leaders in
    // one term).
    let log_dir = cluster.data_dir(follower).join(LOG_DIR);
    let stored_vote = SledLogStore::open(&log_dir)
        .unwrap()
        .read_vote()
        .await
        .unwrap();
    let stored_term = stored_vote.map(|v| v.leader_id().term).unwrap_or_default();
    assert_eq!(stored_term, vote_before.leader_id().term);
    // Cut off while it starts: what it applies now comes from its own disk.
    cluster.router.isolate(follower);
    cluster.start_node(follower).await;
    cluster.wait_applied(follower, &written[..10]).await;

    cluster.router.heal();
    cluster.write_each(&written[10..]).await;
    cluster.wait_all_applied(&written).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_and_delayed_messages_lose_no_acknowledged_write() {
    let cluster = Cluster::start(default_config().unwrap()).await;
    cluster.router.set_drop_probability(0.2);
    cluster
        .router
        .set_delay(Duration::ZERO, Duration::from_millis(30));

    let written = commands(0..30);
    let responses = cluster.write_each(&written).await;
    cluster.router.heal();

    // A write retried after a lost answer may be applied twice; none is
    // lost, and every replica applied the same sequence.
    let acknowledged: BTreeSet<u64> = responses.iter().map(|r| r.index).collect();
    assert_eq!(acknowledged.len(), written.len());
    let reference = cluster.node(1).target().clone();
    eventually("every replica to apply the same sequence", PATIENCE, || {
        let expected = reference.batches();
        let complete = acknowledged
            .iter()
            .all(|index| expected.iter().any(|b| b.index == *index));
        complete
            && IDS
                .iter()
                .all(|id| cluster.node(*id).target().batches() == expected)
    })
    .await;
    let applied = reference.commands();
    for command in &written {
        assert!(
            applied.contains(command),
            "acknowledged write lost: {command:?}"
        );
    }
}
