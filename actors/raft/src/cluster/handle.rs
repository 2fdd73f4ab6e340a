//! The handle on this server's part in a cluster ([`Cluster`]): its
//! replica, its settings and clients, what the member poller last heard,
//! and the watches its background tasks share, with the questions the
//! rest of herder asks of it (who leads, who the members are, whether
//! this server should carry the leader's duties).
//!
//! It names none of the cluster's task modules: they all hold a
//! [`Cluster`], so the handle sits below them, and what starts the
//! replica and spawns their tasks ([`Cluster::start`], in the parent
//! module) sits above them.

use super::health::Liveness;
use super::settings::{ClusterSettings, QUICK_TIMEOUT, RPC_TIMEOUT};
use super::status::{Member, ServerStatus};
use crate::http::{LeaderContact, SignedClient};
use crate::node::RaftNode;
use crate::{NodeId, ServerNode};
use herder::state::StateStore;
use openraft::{RaftMetrics, ServerState};
use std::sync::Arc;

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
    liveness: Liveness,
    /// When a leader's append last reached this server (RPC port).
    contact: LeaderContact,
    stop: tokio::sync::watch::Sender<bool>,
    /// How many writes this server gave up while leading
    /// ([`super::rpc::write_as_leader`]): each may still commit later.
    interrupted: tokio::sync::watch::Sender<u64>,
    /// Whether this server should carry the leader's duties now
    /// ([`super::leadership`]).
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

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Cluster {
    /// The handle on a started replica: `node` runs on `runtime`, which
    /// the handle owns from now on. No background task runs yet.
    pub(super) fn assemble(
        runtime: tokio::runtime::Runtime,
        node: RaftNode<StateStore>,
        store: StateStore,
        settings: ClusterSettings,
    ) -> Cluster {
        let (stop, _) = tokio::sync::watch::channel(false);
        let (interrupted, _) = tokio::sync::watch::channel(0);
        let (duty_leader, _) = tokio::sync::watch::channel(false);
        Cluster {
            inner: Arc::new(Inner {
                runtime: Some(runtime),
                node,
                store,
                client: settings.client(RPC_TIMEOUT),
                quick: settings.client(QUICK_TIMEOUT),
                settings,
                liveness: Liveness::default(),
                contact: LeaderContact::default(),
                stop,
                interrupted,
                duty_leader,
            }),
        }
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
    pub fn liveness(&self) -> &Liveness {
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
    /// ([`super::leadership`]). Starts false.
    pub fn duty_leadership(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.duty_leader.subscribe()
    }

    pub(super) fn set_duty_leader(&self, leading: bool) {
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
    pub(crate) fn leader_contact(&self) -> LeaderContact {
        self.inner.contact.clone()
    }

    /// This server's status, as [`super::rpc::STATUS_PATH`] answers it.
    pub fn status(&self) -> ServerStatus {
        let contact = self.millis_since_leader_contact();
        ServerStatus {
            leader_contact_millis: contact,
            ..self.status_from_metrics()
        }
    }

    fn status_from_metrics(&self) -> ServerStatus {
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
        ServerStatus {
            id: self.id(),
            node: self.inner.settings.node.clone(),
            region: self.inner.settings.region.clone(),
            bootstrap_expect: self.inner.settings.bootstrap_expect,
            initialized,
            leader,
            last_applied: m.last_applied.map_or(0, |l| l.index),
            term: m.current_term,
            leader_contact_millis: None,
        }
    }

    /// A receiver that turns true when the cluster shuts down.
    pub(crate) fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.stop.subscribe()
    }

    /// Whether the cluster is shutting down: calls that wait for a leader
    /// give up at once instead of waiting out their time.
    pub fn is_stopping(&self) -> bool {
        *self.inner.stop.borrow()
    }

    /// Marks the cluster as stopping, ahead of [`Self::shutdown`]: waits for
    /// a leader and leader-side writes give up at once, so requests still
    /// in flight end before the agent's HTTP server waits for them.
    pub fn begin_shutdown(&self) {
        self.inner.stop.send_replace(true);
    }

    /// Stops the background tasks and the replica (its log stays on disk).
    /// The store is left to its owner, who closes it after this.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        let node = self.inner.node.clone();
        let stopping = self.spawn(async move { node.shutdown().await });
        let _ = stopping.await;
    }
}
