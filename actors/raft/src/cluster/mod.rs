//! One server's place in a cluster of servers: its replica of the state
//! ([`RaftNode`] over the real `StateStore`), the HTTP transport signed
//! with the cluster key, how it forms or joins the cluster
//! ([`bootstrap`]), how every write reaches the leader ([`replicator`]),
//! and the cluster's own calls on the RPC port ([`rpc`]).
//!
//! What it answers is what the rest of herder needs to know about the
//! cluster: who leads ([`Cluster::leader`]), who the members are, whether
//! this server leads (the server crate starts and stops the leader's
//! duties on it), and a read barrier for consistent reads on a follower.

pub mod autopilot;
pub mod bootstrap;
pub mod election;
pub mod leadership;
pub mod liveness;
pub mod replicator;
pub mod rpc;

use crate::faults::Faults;
use crate::http::{ClusterKey, HttpError, HttpTransport, SignedClient};
use crate::node::{RaftNode, StartError};
use crate::{NodeId, ServerNode};
use herder::state::StateStore;
use openraft::{Config, RaftMetrics, ServerState};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The file in the data dir that keeps this server's ID in the Raft group:
/// a restarted server is the same member.
pub const ID_FILE: &str = "raft-id";

/// How long one exchange with another server may take.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a question that is retried elsewhere waits for an answer
/// (a server's status, the leader's commit index): a stopped server must
/// not hold a read for longer than an election takes.
const QUICK_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between attempts of a read barrier.
const BARRIER_RETRY: Duration = Duration::from_millis(100);

/// What a server needs to take its place in a cluster.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    /// This server as it advertises itself: its name (`<node>.<region>`,
    /// as Nomad names servers), the address other servers reach its RPC
    /// port at, its HTTP API address, its datacenter and herder's version.
    /// The membership records it; a change since the last start (an
    /// upgrade) is brought to the leader (`bootstrap`).
    pub node: ServerNode,
    /// Its region, advertised to the other servers (the `region` tag of
    /// `/v1/agent/members`).
    pub region: String,
    /// The cluster forms once this many servers see each other.
    pub bootstrap_expect: usize,
    /// Other servers' RPC addresses to contact.
    pub retry_join: Vec<String>,
    /// The leader removes a server unreachable this long from the Raft
    /// configuration ([`autopilot`]); zero never.
    pub dead_server_cleanup: Duration,
    pub key: ClusterKey,
    pub raft: Arc<Config>,
    /// Transport faults injected into this server's exchanges (tests
    /// only; `None` on a real server).
    pub faults: Option<Faults>,
}

impl ClusterSettings {
    /// The signed client of this server, giving up after `timeout`.
    fn client(&self, timeout: Duration) -> SignedClient {
        let client = SignedClient::new(self.key.clone(), timeout);
        match &self.faults {
            Some(faults) => client.with_faults(faults, &self.node.rpc_addr),
            None => client,
        }
    }
}

/// Why a server could not take its place.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("raft ID file {path}: {source}")]
    IdFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("raft ID file {path} holds {text:?}, not a server ID; refusing to guess")]
    BadId { path: PathBuf, text: String },
    #[error(
        "the state in this data dir was written by a single server without Raft (index {index}); \
         a cluster member cannot take it over: start the cluster with empty data dirs"
    )]
    StandaloneState { index: u64 },
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("starting the replica's threads: {0}")]
    Runtime(std::io::Error),
}

/// Threads of the replica's runtime. Applying entries and syncing the log
/// each hold a thread while the disk works (openraft's storage calls are
/// blocking here); with two, a server catching up after a restart answered
/// votes late and a failover could take a second election round (the kill
/// loop: p90 6.1 s with 2 threads, 4.6 s with 4). Idle threads cost nothing.
const RAFT_THREADS: usize = 4;

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A cluster member as the others see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Member {
    pub id: NodeId,
    /// Its RPC address (`node.rpc_addr`, kept at hand: it is what most
    /// callers need).
    pub addr: String,
    /// What the membership records about it.
    pub node: ServerNode,
    pub voter: bool,
    pub leader: bool,
}

impl Member {
    /// The member `id` as the membership records it.
    pub fn new(id: NodeId, node: &ServerNode, voter: bool, leader: bool) -> Member {
        Member {
            id,
            addr: node.rpc_addr.clone(),
            node: node.clone(),
            voter,
            leader,
        }
    }
}

/// This server's part in a cluster. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    /// The replica's own runtime; shut down (without waiting) when the last
    /// handle goes, which may be inside another runtime.
    runtime: Option<tokio::runtime::Runtime>,
    node: RaftNode<StateStore>,
    store: StateStore,
    client: SignedClient,
    quick: SignedClient,
    settings: ClusterSettings,
    liveness: liveness::Liveness,
    /// When a leader's append last reached this server (RPC port).
    contact: crate::http::LeaderContact,
    stop: tokio::sync::watch::Sender<bool>,
    /// How many writes this server gave up while leading
    /// ([`rpc::write_as_leader`]): each may still commit later.
    interrupted: tokio::sync::watch::Sender<u64>,
    /// Whether this server should carry the leader's duties now
    /// ([`leadership`]).
    duty_leader: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("id", &self.id())
            .field("node", &self.inner.settings.node)
            .finish()
    }
}

impl Cluster {
    /// Starts this server's replica over `store` with its log in
    /// `data_dir/raft`, makes `store.submit` go through the log, and
    /// starts forming or joining the cluster in the background.
    ///
    /// The replica runs on a runtime of its own (`herder-raft` threads):
    /// appending to the log and applying entries to the store wait for the
    /// disk, and on the caller's runtime (the agent's single-threaded actix
    /// system) every such wait would stop every actor and request with it.
    pub async fn start(
        settings: ClusterSettings,
        data_dir: &Path,
        store: StateStore,
    ) -> Result<Cluster, ClusterError> {
        if store.applied_position().is_none() && store.latest_index() > 0 {
            return Err(ClusterError::StandaloneState {
                index: store.latest_index(),
            });
        }
        let id = load_or_create_id(data_dir)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RAFT_THREADS)
            .thread_name("herder-raft")
            .enable_all()
            .build()
            .map_err(ClusterError::Runtime)?;
        let transport = HttpTransport::over(settings.client(RPC_TIMEOUT));
        let starting = runtime.spawn(RaftNode::start(
            id,
            data_dir.to_path_buf(),
            Arc::new(store.clone()),
            transport,
            settings.raft.clone(),
        ));
        let node = match starting.await {
            Ok(node) => node?,
            Err(e) => {
                runtime.shutdown_background();
                return Err(ClusterError::Runtime(std::io::Error::other(e)));
            }
        };
        let (stop, _) = tokio::sync::watch::channel(false);
        let (interrupted, _) = tokio::sync::watch::channel(0);
        let (duty_leader, _) = tokio::sync::watch::channel(false);
        let cluster = Cluster {
            inner: Arc::new(Inner {
                runtime: Some(runtime),
                node,
                store: store.clone(),
                client: settings.client(RPC_TIMEOUT),
                quick: settings.client(QUICK_TIMEOUT),
                settings,
                liveness: liveness::Liveness::default(),
                contact: crate::http::LeaderContact::default(),
                stop,
                interrupted,
                duty_leader,
            }),
        };
        store.set_replicator(Arc::new(replicator::LogReplicator::new(cluster.clone())));
        // The pre-vote campaign stands in for openraft's election timer.
        cluster.inner.node.raft().runtime_config().elect(false);
        cluster.spawn(election::campaign(cluster.clone()));
        cluster.spawn(leadership::follow(cluster.clone()));
        cluster.spawn(bootstrap::form_or_join(cluster.clone()));
        cluster.spawn(liveness::watch(cluster.clone()));
        tracing::info!(id, server = %cluster.inner.settings.node, "raft replica started");
        Ok(cluster)
    }

    pub fn id(&self) -> NodeId {
        self.inner.node.id()
    }

    /// Runs `task` on the replica's runtime.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime().spawn(task)
    }

    /// The replica's runtime.
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        match &self.inner.runtime {
            Some(runtime) => runtime.handle(),
            // Only `Drop` takes it, and then no handle is left to ask.
            None => unreachable!("the replica's runtime lives as long as its handles"),
        }
    }

    pub fn settings(&self) -> &ClusterSettings {
        &self.inner.settings
    }

    pub fn node(&self) -> &RaftNode<StateStore> {
        &self.inner.node
    }

    pub fn store(&self) -> &StateStore {
        &self.inner.store
    }

    /// Which members answer, as the liveness poller last saw them.
    pub fn liveness(&self) -> &liveness::Liveness {
        &self.inner.liveness
    }

    /// The signed client other cluster calls (the server's own RPCs) use.
    pub fn client(&self) -> &SignedClient {
        &self.inner.client
    }

    /// The signed client for questions that are retried elsewhere when
    /// unanswered (short timeout).
    pub fn quick_client(&self) -> &SignedClient {
        &self.inner.quick
    }

    /// Openraft's metrics, as a watch: the leadership follower subscribes.
    pub fn metrics(&self) -> tokio::sync::watch::Receiver<RaftMetrics<NodeId, ServerNode>> {
        self.inner.node.raft().metrics()
    }

    /// Whether this server is the leader now.
    pub fn is_leader(&self) -> bool {
        let metrics = self.metrics();
        let m = metrics.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.id())
    }

    /// Whether `m` shows server `me` leading with a complete state: a
    /// quorum has acknowledged it (a restarted server may briefly believe
    /// it still leads its old term) and its replica has applied an entry
    /// of its own term (the no-op a new leader commits first), so it holds
    /// every committed write.
    pub fn leads_with_complete_state(m: &RaftMetrics<NodeId, ServerNode>, me: NodeId) -> bool {
        m.state == ServerState::Leader
            && m.current_leader == Some(me)
            && m.millis_since_quorum_ack.is_some()
            && m.last_applied
                .is_some_and(|l| l.leader_id.term == m.current_term)
    }

    /// The leader this server knows of, with its RPC address.
    pub fn leader(&self) -> Option<Member> {
        let metrics = self.metrics();
        let m = metrics.borrow();
        let id = m.current_leader?;
        let node = m.membership_config.membership().get_node(&id)?;
        Some(Member::new(id, node, true, true))
    }

    /// Every member of the latest membership (voters and learners).
    pub fn members(&self) -> Vec<Member> {
        let metrics = self.metrics();
        let m = metrics.borrow();
        let membership = m.membership_config.membership();
        let voters: std::collections::BTreeSet<NodeId> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(id, node)| {
                Member::new(
                    *id,
                    node,
                    voters.contains(id),
                    m.current_leader == Some(*id),
                )
            })
            .collect()
    }

    /// The log index of the latest membership (Nomad's raft configuration
    /// `Index`).
    pub fn membership_index(&self) -> u64 {
        let metrics = self.metrics();
        let m = metrics.borrow();
        m.membership_config.log_id().map_or(0, |l| l.index)
    }

    /// How long ago this server last heard from its leader: on the
    /// leader, since a quorum acknowledged it (openraft's metrics); on a
    /// follower, since the leader's last append or heartbeat reached it.
    /// `None` while no leader is known.
    pub fn millis_since_leader_contact(&self) -> Option<u64> {
        let metrics = self.metrics();
        let m = metrics.borrow();
        if m.state == ServerState::Leader {
            return m.millis_since_quorum_ack;
        }
        m.current_leader?;
        Some(self.inner.contact.millis_since().unwrap_or(0))
    }

    /// Counts the writes this server gave up as leader without knowing
    /// their fate: such an entry may still commit, so whatever acted on
    /// the failure (a worker scheduling the evaluation again) must first
    /// see the state after it. The leadership follower in herder-server
    /// pauses the leader's duties until an entry written after it applies
    /// ([`Self::duty_leadership`]).
    pub fn interruptions(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.interrupted.subscribe()
    }

    /// Whether this server should carry the leader's duties: it leads
    /// with a complete state, and no write it gave up is still unsettled
    /// ([`leadership`]). Starts false.
    pub fn duty_leadership(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.duty_leader.subscribe()
    }

    fn set_duty_leader(&self, leading: bool) {
        self.inner.duty_leader.send_if_modified(|now| {
            let changed = *now != leading;
            *now = leading;
            changed
        });
    }

    pub(crate) fn note_interrupted(&self) {
        self.inner.interrupted.send_modify(|n| *n += 1);
    }

    /// The record of the leader's appends, for the RPC port's handlers.
    pub(crate) fn leader_contact(&self) -> crate::http::LeaderContact {
        self.inner.contact.clone()
    }

    /// This server's status, as [`rpc::STATUS_PATH`] answers it.
    pub fn status(&self) -> rpc::ServerStatus {
        let metrics = self.metrics();
        let m = metrics.borrow();
        let initialized = m
            .membership_config
            .membership()
            .voter_ids()
            .next()
            .is_some();
        let leader = m.current_leader.and_then(|id| {
            let node = m.membership_config.membership().get_node(&id)?;
            Some(Member::new(id, node, true, true))
        });
        rpc::ServerStatus {
            id: self.id(),
            node: self.inner.settings.node.clone(),
            region: self.inner.settings.region.clone(),
            bootstrap_expect: self.inner.settings.bootstrap_expect,
            initialized,
            leader,
            last_applied: m.last_applied.map_or(0, |l| l.index),
            term: m.current_term,
        }
    }

    /// Waits until this server's replica holds every write committed before
    /// the call (the leader confirms it still leads and names its commit
    /// index; a follower asks the leader), so a read after it sees them.
    pub async fn read_barrier(&self, timeout: Duration) -> Result<u64, HttpError> {
        let deadline = std::time::Instant::now() + timeout;
        let index = loop {
            match rpc::read_index(self).await {
                Ok(index) => break index,
                // The leader may have just died: ask the next one.
                Err(_) if std::time::Instant::now() + BARRIER_RETRY < deadline => {
                    tokio::time::sleep(BARRIER_RETRY).await
                }
                Err(e) => return Err(e),
            }
        };
        let store = self.inner.store.clone();
        let waited =
            tokio::task::spawn_blocking(move || store.snapshot_min_index(index, timeout)).await;
        match waited {
            Ok(Ok(_)) => Ok(index),
            Ok(Err(e)) => Err(HttpError::Lost {
                url: "local replica".into(),
                reason: e.to_string(),
            }),
            Err(e) => Err(HttpError::Lost {
                url: "local replica".into(),
                reason: e.to_string(),
            }),
        }
    }

    /// A receiver that turns true when the cluster shuts down.
    pub(crate) fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.stop.subscribe()
    }

    /// Stops the background tasks and the replica (its log stays on disk).
    /// The store is left to its owner, who closes it after this.
    pub async fn shutdown(&self) {
        self.inner.stop.send_replace(true);
        let node = self.inner.node.clone();
        let stopping = self.spawn(async move { node.shutdown().await });
        let _ = stopping.await;
    }
}

/// The Raft types, re-exported for the server crate's leadership follower.
pub type Metrics = RaftMetrics<NodeId, ServerNode>;
pub use openraft::ServerState as RaftState;

/// This server's ID: read back from `data_dir/raft-id`, or a new random
/// one written there (atomically) on a server's first start.
fn load_or_create_id(data_dir: &Path) -> Result<NodeId, ClusterError> {
    let path = data_dir.join(ID_FILE);
    let io = |source| ClusterError::IdFile {
        path: path.clone(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|_| ClusterError::BadId {
            path: path.clone(),
            text,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if data_dir.join(crate::node::LOG_DIR).exists() {
                return Err(io(std::io::Error::other(
                    "the Raft log exists but its server ID is gone; refusing to rejoin as a stranger",
                )));
            }
            // Zero is never used: a zero ID is easy to mistake for unset.
            let id = rand::random::<u64>().max(1);
            let temp = data_dir.join(format!("{ID_FILE}.tmp"));
            std::fs::write(&temp, format!("{id}\n")).map_err(io)?;
            std::fs::rename(&temp, &path).map_err(io)?;
            Ok(id)
        }
        Err(e) => Err(io(e)),
    }
}
