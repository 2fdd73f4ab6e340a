//! The NodeTracker actor: node registration, heartbeats and the node
//! lifecycle, turned into durable state and evaluations.
//!
//! It owns a `NodeLifecycle` (the pure state machine in `node_lifecycle`),
//! feeds it registrations, heartbeats, node-caused task failures and a
//! periodic tick, and writes what the machine decides: a node marked
//! `down` gets node-update evaluations for every job with work on it (the
//! scheduler then marks that work lost and replaces it); a node that
//! becomes `ready` gets evaluations for the system jobs, so they place on
//! it; a node lost past `max_lost_duration` is removed.
//!
//! Readiness is reported by the client: a node registers (or heartbeats)
//! with `Status: ready` once its own readiness check passed; until then it
//! stays `initializing` and receives no placements.
//!
//! Heartbeat timers are a leader duty ([`SetLeader`]): a server that does
//! not lead tracks no node, marks nothing down and refuses the node
//! protocol; on gaining the lead it gives every known node that is not
//! down the failover window as its TTL (the same for all, as Nomad).

use crate::node_lifecycle::{Health, LifecycleConfig, NodeLifecycle, Transition};
use actix::prelude::*;
use herder::state::{AllocClientUpdate, Command, StateSnapshot, StateStore, StoreError};
use herder::structs::{
    ClientStatus, EvalId, Evaluation, Node, NodeEvent, NodeId, NodeStatus, TriggeredBy,
};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Why a node request was refused.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{0}")]
    Invalid(String),
    #[error("node not found")]
    NotFound,
    #[error("node secret ID does not match")]
    SecretMismatch,
    /// Nodes are tracked by the leader only; a follower forwards the node
    /// protocol before it gets here, this is the safety net.
    #[error("this server is not the leader: node heartbeats are handled by the leader")]
    NotLeader,
    #[error("state store: {0}")]
    Store(#[from] StoreError),
}

/// A client registers its node (or re-registers after a restart).
#[derive(Message)]
#[rtype(result = "Result<NodeReply, NodeError>")]
pub struct RegisterNode(pub Node);

/// A client's heartbeat; `ready` is what its readiness check says.
#[derive(Message)]
#[rtype(result = "Result<NodeReply, NodeError>")]
pub struct Heartbeat {
    pub node_id: NodeId,
    pub secret_id: String,
    pub ready: bool,
}

/// A client reports the status of its allocations.
#[derive(Message)]
#[rtype(result = "Result<u64, NodeError>")]
pub struct UpdateAllocs {
    pub node_id: NodeId,
    pub secret_id: String,
    pub updates: Vec<AllocClientUpdate>,
}

/// Leadership gained (`true`: every known node that is not down gets a
/// fresh TTL and the timers run) or lost (`false`: every timer stops).
/// Answered once the change is made.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetLeader(pub bool);

/// What a node is told after registering or heartbeating.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct NodeReply {
    pub heartbeat_ttl: Duration,
    pub node_modify_index: u64,
    pub eval_ids: Vec<EvalId>,
    pub index: u64,
}

/// How often the lifecycle is advanced.
#[derive(Clone, Debug)]
pub struct TrackerConfig {
    pub lifecycle: LifecycleConfig,
    pub tick: Duration,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            lifecycle: LifecycleConfig::default(),
            tick: Duration::from_secs(1),
        }
    }
}

pub struct NodeTracker {
    store: StateStore,
    lifecycle: NodeLifecycle,
    tick: Duration,
    rng: SmallRng,
    leader: bool,
    /// The lifecycle's timer, running while this server leads.
    ticker: Option<SpawnHandle>,
}

impl NodeTracker {
    pub fn new(store: StateStore, config: TrackerConfig) -> Self {
        NodeTracker {
            store,
            lifecycle: NodeLifecycle::new(config.lifecycle),
            tick: config.tick,
            rng: SmallRng::from_entropy(),
            leader: true,
            ticker: None,
        }
    }

    /// Whether the tracker starts as the leader's (the default) or a
    /// follower's, which tracks nothing until [`SetLeader`]`(true)`.
    pub fn with_leadership(mut self, leader: bool) -> Self {
        self.leader = leader;
        self
    }

    fn ensure_leader(&self) -> Result<(), NodeError> {
        if self.leader {
            Ok(())
        } else {
            Err(NodeError::NotLeader)
        }
    }

    fn authenticate(&self, node_id: &NodeId, secret: &str) -> Result<Arc<Node>, NodeError> {
        let snap = self.store.snapshot();
        let node = snap.node(node_id).cloned().ok_or(NodeError::NotFound)?;
        if node.secret_id != secret {
            return Err(NodeError::SecretMismatch);
        }
        Ok(node)
    }

    /// Registration: the node is stored with the status its lifecycle
    /// gives it; a node that is ready at once gets its system-job evals.
    fn register(
        &mut self,
        mut node: Node,
    ) -> Result<(Vec<Command>, Vec<EvalId>, Duration), NodeError> {
        self.ensure_leader()?;
        validate_node(&node)?;
        let snap = self.store.snapshot();
        let known = snap.node(&node.id).cloned();
        if let Some(old) = &known {
            if old.secret_id != node.secret_id {
                return Err(NodeError::SecretMismatch);
            }
        }
        let client_ready = node.status == NodeStatus::Ready;
        let ttl = self.lifecycle.heartbeat_ttl(&mut self.rng);
        let now = Instant::now();
        let transitions = self.lifecycle.register(node.id, ttl, now);
        if transitions.contains(&Transition::CheckReadiness(node.id)) {
            self.lifecycle
                .readiness_result(node.id, client_ready, ttl, now);
        }
        // The stored status is the lifecycle's, not the client's claim.
        let ready = self.lifecycle.health(&node.id) == Some(Health::Healthy);
        node.status = if ready {
            NodeStatus::Ready
        } else {
            NodeStatus::Initializing
        };
        node.status_updated_at = unix_seconds();
        if known.is_none() {
            node.push_event(node_event("Node registered"));
        }
        let became_ready = ready && known.as_ref().is_none_or(|o| o.status != NodeStatus::Ready);
        let evals = if became_ready {
            node_evals(&snap, &[node.id], true)
        } else {
            Vec::new()
        };
        let eval_ids = evals.iter().map(|e| e.id).collect();
        let mut commands = vec![Command::NodeRegister {
            node: Arc::new(node),
        }];
        if !evals.is_empty() {
            commands.push(Command::EvalUpdate { evals });
        }
        Ok((commands, eval_ids, ttl))
    }

    fn heartbeat(
        &mut self,
        hb: &Heartbeat,
    ) -> Result<(Vec<Command>, Vec<EvalId>, Duration), NodeError> {
        self.ensure_leader()?;
        let node = self.authenticate(&hb.node_id, &hb.secret_id)?;
        let ttl = self.lifecycle.heartbeat_ttl(&mut self.rng);
        let now = Instant::now();
        let mut transitions = match self.lifecycle.heartbeat(node.id, ttl, now) {
            Some(t) => t,
            // Known to the store but no longer tracked (removed while
            // lost, then heard from again): track it as re-registered.
            None => self.lifecycle.register(node.id, ttl, now),
        };
        if self.lifecycle.health(&node.id) == Some(Health::AwaitingReadiness) {
            transitions.extend(self.lifecycle.readiness_result(node.id, hb.ready, ttl, now));
        }
        metrics::counter!("herder.heartbeats").increment(1);
        let (commands, eval_ids) = self.transition_commands(transitions);
        Ok((commands, eval_ids, ttl))
    }

    fn update_allocs(&mut self, msg: UpdateAllocs) -> Result<Vec<Command>, NodeError> {
        self.ensure_leader()?;
        let node = self.authenticate(&msg.node_id, &msg.secret_id)?;
        let snap = self.store.snapshot();
        let mut evals: BTreeMap<(String, String), Evaluation> = BTreeMap::new();
        let mut node_failed = false;
        for update in &msg.updates {
            let Some(alloc) = snap.alloc(&update.id) else {
                return Err(NodeError::Invalid(format!(
                    "allocation {} not found",
                    update.id
                )));
            };
            if alloc.node_id != node.id {
                return Err(NodeError::Invalid(format!(
                    "allocation {} does not run on node {}",
                    update.id, node.id
                )));
            }
            node_failed |= update.node_failure;
            // A failure the servers did not ask for: the job's scheduler
            // decides whether to reschedule it.
            let newly_failed = update.client_status == ClientStatus::Failed
                && alloc.client_status != ClientStatus::Failed
                && !alloc.server_terminal();
            if newly_failed {
                if let Some(job) = snap.job(&alloc.namespace, &alloc.job_id) {
                    evals
                        .entry((job.namespace.clone(), job.id.clone()))
                        .or_insert_with(|| {
                            Evaluation::for_job(job, TriggeredBy::AllocFailure, unix_nanos())
                        });
                }
            }
        }
        // The server's clock stamps the change, as Nomad's does: a client's
        // clock may be off or absent (a report without `ModifyTime` left it
        // 0, and the rescheduler, which falls back to it for a failure
        // with no task finish time, never rescheduled such an allocation).
        let now = unix_nanos();
        let mut updates = msg.updates;
        for update in &mut updates {
            update.modify_time = now;
        }
        let mut commands = vec![Command::AllocClientUpdate {
            updates,
            evals: evals.into_values().collect(),
        }];
        if node_failed {
            let t = self.lifecycle.node_caused_failure(node.id, Instant::now());
            commands.extend(self.transition_commands(t).0);
        }
        Ok(commands)
    }

    /// The commands that make the lifecycle's decisions true, and the
    /// evaluations they create.
    fn transition_commands(&self, transitions: Vec<Transition>) -> (Vec<Command>, Vec<EvalId>) {
        let snap = self.store.snapshot();
        let mut eval_ids = Vec::new();
        let mut commands = Vec::new();
        let mut down = Vec::new();
        for t in transitions {
            let (id, status, why, with_system) = match t {
                Transition::CheckReadiness(_) => continue,
                Transition::MarkReady(id) => (id, NodeStatus::Ready, "Node ready", true),
                Transition::MarkInitializing(id, why) => (id, NodeStatus::Initializing, why, false),
                Transition::MarkDown(id) => {
                    tracing::warn!(node_id = %id, "node missed its heartbeat; marking it down");
                    down.push(id);
                    continue;
                }
                Transition::Remove(id) => {
                    tracing::info!(node_id = %id, "node lost for too long; removing it");
                    if snap.node(&id).is_some() {
                        commands.push(Command::NodeDeregister { node_ids: vec![id] });
                    }
                    continue;
                }
            };
            let evals = node_evals(&snap, &[id], with_system);
            eval_ids.extend(evals.iter().map(|e| e.id));
            if let Some(c) = status_command(&snap, id, status, why, evals) {
                commands.push(c);
            }
        }
        let (down_commands, down_evals) = down_commands(&snap, &down);
        commands.extend(down_commands);
        eval_ids.extend(down_evals);
        (commands, eval_ids)
    }

    /// Queues `commands` in order and resolves to the index of the last
    /// once all are durable. Queuing does not block the actor; the store's
    /// group commit covers concurrent registrations with one fsync.
    fn submit(
        &self,
        commands: Vec<Command>,
    ) -> impl std::future::Future<Output = Result<u64, NodeError>> {
        let pending: Vec<_> = commands
            .into_iter()
            .map(|c| self.store.submit_as_leader(c))
            .collect();
        let latest = self.store.latest_index();
        async move {
            let mut index = latest;
            for p in pending {
                match p.await {
                    Ok(Ok(outcome)) => index = index.max(outcome.index),
                    Ok(Err(e)) => return Err(NodeError::Store(e)),
                    Err(_) => return Err(NodeError::Store(StoreError::Closed)),
                }
            }
            Ok(index)
        }
    }

    /// On start as leader, or on gaining the lead: every known node that
    /// is not down is tracked again with the whole failover window as its
    /// TTL, so none is marked down for heartbeats that went to the old
    /// leader, and a fleet that stays silent goes down together (see
    /// `NodeLifecycle::failover_ttl`).
    fn restore(&mut self) {
        let snap = self.store.snapshot();
        let now = Instant::now();
        self.lifecycle.clear();
        for node in snap.nodes() {
            if node.status != NodeStatus::Down {
                let ttl = self.lifecycle.failover_ttl();
                self.lifecycle
                    .restore(node.id, node.status == NodeStatus::Ready, ttl, now);
            }
        }
        tracing::info!(
            nodes = self.lifecycle.len(),
            failover_window = ?self.lifecycle.config().failover_heartbeat_ttl,
            "node heartbeats restored"
        );
    }

    /// Starts the lifecycle's timer: expired heartbeats, readiness checks.
    fn start_ticker(&mut self, ctx: &mut Context<Self>) {
        if let Some(old) = self.ticker.take() {
            ctx.cancel_future(old);
        }
        let ticker = ctx.run_interval(self.tick, |act, ctx| act.on_tick(ctx));
        self.ticker = Some(ticker);
    }

    fn on_tick(&mut self, ctx: &mut Context<Self>) {
        let transitions = self.lifecycle.tick(Instant::now());
        self.publish_gauges();
        if transitions.is_empty() {
            return;
        }
        let (commands, _) = self.transition_commands(transitions);
        let done = self.submit(commands);
        ctx.spawn(fut::wrap_future(async move {
            if let Err(e) = done.await {
                tracing::error!(error = %e, "node lifecycle update failed");
            }
        }));
    }

    fn publish_gauges(&self) {
        metrics::gauge!("herder.nodes.tracked").set(self.lifecycle.len() as f64);
        metrics::gauge!("herder.nodes.heartbeating").set(self.lifecycle.heartbeating() as f64);
    }

    fn set_leader(&mut self, leader: bool, ctx: &mut Context<Self>) {
        if leader == self.leader {
            return;
        }
        self.leader = leader;
        if leader {
            self.restore();
            self.start_ticker(ctx);
        } else {
            if let Some(ticker) = self.ticker.take() {
                ctx.cancel_future(ticker);
            }
            self.lifecycle.clear();
            self.publish_gauges();
            tracing::info!("node heartbeat timers stopped: not the leader");
        }
    }
}

fn validate_node(node: &Node) -> Result<(), NodeError> {
    if node.id.is_nil() {
        return Err(NodeError::Invalid(
            "missing node ID for client registration".into(),
        ));
    }
    if node.secret_id.is_empty() {
        return Err(NodeError::Invalid(
            "missing node secret ID for client registration".into(),
        ));
    }
    if node.datacenter.is_empty() {
        return Err(NodeError::Invalid(
            "missing datacenter for client registration".into(),
        ));
    }
    if node.name.is_empty() {
        return Err(NodeError::Invalid(
            "missing node name for client registration".into(),
        ));
    }
    validate_node_resources(node)
}

/// A node's stated capacity within the bounds jobs are held to, so that
/// adding up what it runs can never overflow (a node offering i64::MAX
/// MHz would wrap its usage negative and be over-committed).
fn validate_node_resources(node: &Node) -> Result<(), NodeError> {
    use herder::structs::validate::{MAX_CORES, MAX_RESOURCE_VALUE};
    let (r, reserved) = (&node.node_resources, &node.reserved_resources);
    for (name, value) in [
        ("NodeResources.Cpu.CpuShares", r.cpu.cpu_shares),
        ("NodeResources.Memory.MemoryMB", r.memory.memory_mb),
        ("NodeResources.Disk.DiskMB", r.disk.disk_mb),
        ("ReservedResources.Cpu.CpuShares", reserved.cpu.cpu_shares),
        (
            "ReservedResources.Memory.MemoryMB",
            reserved.memory.memory_mb,
        ),
        ("ReservedResources.Disk.DiskMB", reserved.disk.disk_mb),
    ] {
        if !(0..=MAX_RESOURCE_VALUE).contains(&value) {
            return Err(NodeError::Invalid(format!(
                "{name} must be between 0 and {MAX_RESOURCE_VALUE}, got {value}"
            )));
        }
    }
    if i64::from(r.cpu.total_cpu_cores) > MAX_CORES
        || r.cpu.reservable_cpu_cores.len() as i64 > MAX_CORES
    {
        return Err(NodeError::Invalid(format!(
            "NodeResources.Cpu: at most {MAX_CORES} cores"
        )));
    }
    if let Some(n) = r
        .networks
        .iter()
        .find(|n| !(0..=MAX_RESOURCE_VALUE).contains(&n.mbits))
    {
        return Err(NodeError::Invalid(format!(
            "NodeResources.Networks: MBits must be between 0 and {MAX_RESOURCE_VALUE}, got {}",
            n.mbits
        )));
    }
    reserved
        .networks
        .parse_ports()
        .map(|_| ())
        .map_err(|e| NodeError::Invalid(format!("ReservedResources.Networks: {e}")))
}

/// The write of a lifecycle transition. It is written even when the
/// snapshot already shows `status`: the lifecycle only decides on a change
/// of its own view, and the snapshot may not yet show a status write still
/// being committed (a `Down` in flight when the node's next heartbeat makes
/// it `Ready` again would otherwise win, and leave a live node down).
fn status_command(
    snap: &StateSnapshot,
    id: NodeId,
    status: NodeStatus,
    why: &str,
    evals: Vec<Evaluation>,
) -> Option<Command> {
    snap.node(&id)?;
    Some(Command::NodeUpdateStatus {
        node_id: id,
        status,
        event: Some(node_event(why)),
        evals,
        updated_at: unix_seconds(),
    })
}

/// The writes that mark `nodes` down together (the nodes one tick found
/// silent): each node's status, and with the last of them one node-update
/// evaluation per job with live work on any of the nodes.
///
/// Nomad writes an evaluation per job per node. The scheduler reconciles
/// the whole job whichever node an evaluation names, so one per job does
/// the same work; per node, a silent fleet of 10,000 nodes running 1,000
/// jobs made about a million evaluations at once, and their writes,
/// routing and cancelation held the leader for minutes and gigabytes.
/// The evaluations come with the last status so that none is scheduled
/// while a node of the same batch still shows `ready`.
fn down_commands(snap: &StateSnapshot, nodes: &[NodeId]) -> (Vec<Command>, Vec<EvalId>) {
    const WHY: &str = "Node heartbeat missed";
    let mut commands: Vec<Command> = nodes
        .iter()
        .filter_map(|id| status_command(snap, *id, NodeStatus::Down, WHY, Vec::new()))
        .collect();
    let Some(Command::NodeUpdateStatus { evals, .. }) = commands.last_mut() else {
        return (commands, Vec::new());
    };
    *evals = node_evals(snap, nodes, false);
    let ids = evals.iter().map(|e| e.id).collect();
    (commands, ids)
}

/// Node-update evaluations for the jobs with live work on any of `nodes`
/// (one per job, naming the first of the nodes it runs on) and, when a
/// node became usable, for every system and sysbatch job.
fn node_evals(snap: &StateSnapshot, nodes: &[NodeId], with_system_jobs: bool) -> Vec<Evaluation> {
    let now = unix_nanos();
    let mut jobs = BTreeMap::new();
    for node_id in nodes {
        for alloc in snap.allocs_by_node(node_id).filter(|a| !a.is_terminal()) {
            let key = (alloc.namespace.clone(), alloc.job_id.clone());
            if jobs.contains_key(&key) {
                continue;
            }
            if let Some(job) = snap.job(&alloc.namespace, &alloc.job_id) {
                jobs.insert(key, (job.clone(), *node_id));
            }
        }
    }
    if let (true, Some(first)) = (with_system_jobs, nodes.first()) {
        for job in snap
            .jobs()
            .filter(|j| j.job_type.is_system_like() && !j.stop)
        {
            jobs.entry((job.namespace.as_str().into(), job.id.as_str().into()))
                .or_insert_with(|| (job.clone(), *first));
        }
    }
    jobs.into_values()
        .filter(|(job, _)| !job.is_template())
        .map(|(job, node_id)| {
            let mut e = Evaluation::for_job(&job, TriggeredBy::NodeUpdate, now);
            e.node_id = Some(node_id);
            e.node_modify_index = snap.node(&node_id).map_or(0, |n| n.modify_index);
            e
        })
        .collect()
}

fn node_event(message: &str) -> NodeEvent {
    NodeEvent {
        message: message.to_string(),
        subsystem: "Cluster".to_string(),
        timestamp: Some(unix_nanos()),
        ..Default::default()
    }
}

fn unix_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

fn unix_seconds() -> i64 {
    unix_nanos() / 1_000_000_000
}

impl Actor for NodeTracker {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.leader {
            self.restore();
            self.start_ticker(ctx);
        }
    }
}

fn reply(
    tracker: &NodeTracker,
    decided: Result<(Vec<Command>, Vec<EvalId>, Duration), NodeError>,
) -> ResponseFuture<Result<NodeReply, NodeError>> {
    let (commands, eval_ids, ttl) = match decided {
        Ok(d) => d,
        Err(e) => return Box::pin(async move { Err(e) }),
    };
    let done = tracker.submit(commands);
    Box::pin(async move {
        let index = done.await?;
        Ok(NodeReply {
            heartbeat_ttl: ttl,
            node_modify_index: index,
            eval_ids,
            index,
        })
    })
}

impl Handler<RegisterNode> for NodeTracker {
    type Result = ResponseFuture<Result<NodeReply, NodeError>>;
    fn handle(&mut self, msg: RegisterNode, _ctx: &mut Context<Self>) -> Self::Result {
        let decided = self.register(msg.0);
        reply(self, decided)
    }
}

impl Handler<Heartbeat> for NodeTracker {
    type Result = ResponseFuture<Result<NodeReply, NodeError>>;
    fn handle(&mut self, msg: Heartbeat, _ctx: &mut Context<Self>) -> Self::Result {
        let decided = self.heartbeat(&msg);
        reply(self, decided)
    }
}

impl Handler<UpdateAllocs> for NodeTracker {
    type Result = ResponseFuture<Result<u64, NodeError>>;
    fn handle(&mut self, msg: UpdateAllocs, _ctx: &mut Context<Self>) -> Self::Result {
        match self.update_allocs(msg) {
            Ok(commands) => Box::pin(self.submit(commands)),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
}

impl Handler<SetLeader> for NodeTracker {
    type Result = ();
    fn handle(&mut self, msg: SetLeader, ctx: &mut Context<Self>) {
        self.set_leader(msg.0, ctx);
    }
}
