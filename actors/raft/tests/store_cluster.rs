//! Three in-process replicas whose state machine is herder's real state
//! store, each on its own data dir (`<dir>/state` beside the Raft log in
//! `<dir>/raft`): nodes and jobs registered through the leader end up in
//! identical tables at identical indexes on every replica, through a
//! leader's loss, a snapshot install and a restart from disk.

mod support;
use herder::state::{fixtures, Command, StateSnapshot, StateStore, StoreOptions};
use herder::structs::TriggeredBy;
use herder_raft::{default_config, NodeId, RaftNode, Router, ServerNode, WriteResponse};
use openraft::{Config, ServerState, SnapshotPolicy};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::eventually;
use tempfile::TempDir;

const IDS: [NodeId; 3] = [1, 2, 3];
const PATIENCE: Duration = Duration::from_secs(20);

fn register_job(n: u64) -> Command {
    let job = fixtures::job("default", &format!("job-{n}"), &[("g", 2)]);
    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1_700_000_000);
    Command::JobRegister {
        job: Arc::new(job),
        eval: Some(eval),
        enforce_index: None,
    }
}

fn register_node(n: u64) -> Command {
    Command::NodeRegister {
        node: Arc::new(fixtures::node(&format!("node-{n}"))),
    }
}

struct Cluster {
    router: Router,
    config: Arc<Config>,
    dir: TempDir,
    nodes: BTreeMap<NodeId, RaftNode<StateStore>>,
}

impl Cluster {
    async fn start(config: Config) -> Cluster {
        let mut cluster = Cluster {
            router: Router::new(18),
            config: Arc::new(config),
            dir: tempfile::tempdir().unwrap(),
            nodes: BTreeMap::new(),
        };
        for id in IDS {
            let store = cluster.open_store(id);
            cluster.start_node(id, store).await;
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

    fn open_store(&self, id: NodeId) -> StateStore {
        StateStore::open(self.data_dir(id).join("state"), StoreOptions::default()).unwrap()
    }

    async fn start_node(&mut self, id: NodeId, store: StateStore) {
        let node = RaftNode::start(
            id,
            &self.data_dir(id),
            Arc::new(store),
            self.router.clone(),
            self.config.clone(),
        )
        .await
        .unwrap();
        self.router.add(id, node.raft().clone());
        self.nodes.insert(id, node);
    }

    fn node(&self, id: NodeId) -> &RaftNode<StateStore> {
        &self.nodes[&id]
    }

    fn state(&self, id: NodeId) -> StateSnapshot {
        self.node(id).target().snapshot()
    }

    /// Off the network, Raft stopped, the store closed: only the data dir
    /// is left.
    async fn kill(&mut self, id: NodeId) {
        self.router.remove(id);
        if let Some(node) = self.nodes.remove(&id) {
            node.shutdown().await;
            node.target().close();
        }
    }

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

    /// Registers nodes and jobs `range` (a node and a job per entry) and
    /// checks each was applied on the leader.
    async fn register(&self, range: std::ops::Range<u64>) -> Vec<WriteResponse> {
        let mut responses = Vec::new();
        for n in range {
            let response = self.write(vec![register_node(n), register_job(n)]).await;
            assert_eq!(
                response.results,
                vec![herder_raft::CommandResult::Applied; 2],
                "entry {n}"
            );
            responses.push(response);
        }
        responses
    }

    /// Waits until every running replica holds the leader's state, index
    /// included, and returns it.
    async fn wait_identical(&self) -> StateSnapshot {
        let leader = self.leader().await;
        let mut reference = self.state(leader);
        eventually("every replica to hold the leader's state", PATIENCE, || {
            reference = self.state(leader);
            self.nodes.keys().all(|id| self.state(*id) == reference)
        })
        .await;
        reference
    }
}

fn assert_holds_jobs(state: &StateSnapshot, range: std::ops::Range<u64>) {
    for n in range {
        let id = format!("job-{n}");
        assert!(
            state.job("default", &id).is_some(),
            "acknowledged {id} lost"
        );
        assert!(state.job_summary("default", &id).is_some());
        assert_eq!(state.evals_by_job("default", &id).count(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_through_the_leader_give_identical_replicas() {
    let cluster = Cluster::start(default_config().unwrap()).await;
    let responses = cluster.register(0..10).await;
    let state = cluster.wait_identical().await;
    assert_eq!(state.node_count(), 10);
    assert_holds_jobs(&state, 0..10);
    // Each entry's commands were applied at the entry's log index.
    for (n, response) in responses.iter().enumerate() {
        let job = state.job("default", &format!("job-{n}")).unwrap();
        assert_eq!(job.create_index, response.index);
    }
    for id in IDS {
        let store = cluster.node(id).target();
        assert!(store.applied_position().is_some(), "server {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_leader_loses_no_acknowledged_registration() {
    let mut cluster = Cluster::start(default_config().unwrap()).await;
    cluster.register(0..8).await;
    let old_leader = cluster.leader().await;
    cluster.kill(old_leader).await;
    let new_leader = cluster.leader().await;
    assert_ne!(new_leader, old_leader);
    cluster.register(8..16).await;
    let state = cluster.wait_identical().await;
    assert_eq!(cluster.nodes.len(), 2);
    assert_holds_jobs(&state, 0..16);
    assert_eq!(state.node_count(), 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_the_purged_log_is_rebuilt_from_the_stores_checkpoint() {
    let config = Config {
        snapshot_policy: SnapshotPolicy::LogsSinceLast(10),
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        ..default_config().unwrap()
    };
    let cluster = Cluster::start(config).await;
    cluster.register(0..3).await;
    cluster.wait_identical().await;
    let leader = cluster.leader().await;
    let follower = IDS.into_iter().find(|id| *id != leader).unwrap_or_default();
    cluster.router.isolate(follower);

    let responses = cluster.register(3..40).await;
    let last_index = responses.last().map(|r| r.index).unwrap_or_default();
    let raft = cluster.node(leader).raft().clone();
    let mut purged = 0;
    eventually("the leader to purge its log", PATIENCE, || {
        purged = raft.metrics().borrow().purged.map(|p| p.index).unwrap_or(0);
        purged >= last_index - 10
    })
    .await;
    assert_eq!(cluster.state(follower).node_count(), 3);

    cluster.router.heal();
    let state = cluster.wait_identical().await;
    assert_holds_jobs(&cluster.state(follower), 0..40);
    assert_eq!(state.node_count(), 40);
    // The entries it lacked were gone from the leader's log: it got them
    // through a snapshot, which it now holds.
    let snapshot = cluster.node(follower).raft().metrics().borrow().snapshot;
    assert!(
        snapshot.is_some_and(|s| s.index >= purged),
        "follower snapshot {snapshot:?}, leader purged up to {purged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_follower_rejoins_from_its_data_dir_without_applying_twice() {
    let mut cluster = Cluster::start(default_config().unwrap()).await;
    cluster.register(0..10).await;
    cluster.wait_identical().await;
    let leader = cluster.leader().await;
    let follower = IDS.into_iter().find(|id| *id != leader).unwrap_or_default();
    let before = cluster.state(follower);
    cluster.kill(follower).await;
    cluster.register(10..15).await;

    // Its store reopens at the index and position it had...
    let store = cluster.open_store(follower);
    assert!(store.snapshot() == before, "the reopened store differs");
    let position = store.applied_position();
    assert!(position.is_some());
    // ...and everything it applies from now on is new: openraft starts
    // from the stored position instead of replaying its log over it.
    let mut changes = store.subscribe(0);
    assert!(changes.backlog.is_empty());
    cluster.start_node(follower, store).await;
    cluster.register(15..20).await;
    let state = cluster.wait_identical().await;
    assert_holds_jobs(&state, 0..20);
    let mut applied = 0;
    while let Ok(change) = changes.receiver.try_recv() {
        assert!(
            change.index > before.latest_index(),
            "entry {} applied again (already in the store at {})",
            change.index,
            before.latest_index()
        );
        applied += 1;
    }
    // Two commands per entry for the ten entries written since.
    assert_eq!(applied, 20);
}
