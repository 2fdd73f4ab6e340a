//! The node lifecycle as a pure state machine: Nomad's heartbeats joined
//! with Twitter Scoot's healthy / suspended / offlined node sets.
//!
//! Time is always passed in (`now`), so every rule is testable without
//! sleeping; the `NodeTracker` actor owns one of these, feeds it events and
//! timer ticks, and turns the `Transition`s it returns into state commands.
//!
//! Scoot's states map onto the node status Nomad's API shows, so clients
//! see no new vocabulary:
//! - waiting for a readiness check (new, or flaky and being readmitted):
//!   `initializing`;
//! - healthy: `ready`;
//! - lost (missed heartbeats): `down`; removed after `max_lost_duration`;
//! - flaky (tasks failed for node reasons): `initializing` for
//!   `max_flaky_duration`, then readmitted through the readiness check;
//! - offlined by an operator: the node keeps its status but is ineligible
//!   (that lives in the node's eligibility, which this machine leaves to the
//!   operator endpoints).

use herder::structs::NodeId;
use rand::Rng;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The timings of the lifecycle; defaults are Nomad's and Scoot's.
#[derive(Clone, Debug)]
pub struct LifecycleConfig {
    pub min_heartbeat_ttl: Duration,
    pub max_heartbeats_per_second: f64,
    pub heartbeat_grace: Duration,
    pub failover_heartbeat_ttl: Duration,
    pub max_lost_duration: Duration,
    pub max_flaky_duration: Duration,
    /// Whether new and readmitted nodes wait for a readiness check.
    pub readiness_checks: bool,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        LifecycleConfig {
            min_heartbeat_ttl: Duration::from_secs(10),
            max_heartbeats_per_second: 50.0,
            heartbeat_grace: Duration::from_secs(10),
            failover_heartbeat_ttl: Duration::from_secs(300),
            max_lost_duration: Duration::from_secs(60),
            max_flaky_duration: Duration::from_secs(15 * 60),
            readiness_checks: true,
        }
    }
}

/// Where a node stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Waiting for its readiness check (new, or readmitted after flaky).
    AwaitingReadiness,
    /// The readiness check gave up (zero backoff): out until re-registered.
    NotReady,
    Healthy,
    /// Missed its heartbeat at `since`.
    Lost {
        since: Instant,
    },
    /// Tasks failed for node reasons at `since`.
    Flaky {
        since: Instant,
    },
}

/// What the tracker must make true in the state store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Run the readiness check for this node now.
    CheckReadiness(NodeId),
    /// Mark the node `ready`.
    MarkReady(NodeId),
    /// Mark the node `initializing` with this reason (placement stops).
    MarkInitializing(NodeId, &'static str),
    /// Mark the node `down`: its allocations are lost and replaced.
    MarkDown(NodeId),
    /// Forget the node (lost for longer than `max_lost_duration`).
    Remove(NodeId),
}

#[derive(Clone, Debug)]
struct Tracked {
    health: Health,
    /// When the node is considered gone without a heartbeat.
    deadline: Instant,
    /// Next readiness check, when one is scheduled.
    next_check: Option<Instant>,
    /// The snapshot (artifact) the node last ran, and whether it is busy.
    snapshot: String,
    busy: bool,
}

/// Scoot's snapshot-affinity groups: nodes by the snapshot they last ran.
#[derive(Clone, Debug, Default)]
pub struct SnapshotGroup {
    pub idle: HashSet<NodeId>,
    pub busy: HashSet<NodeId>,
}

/// All tracked nodes and their timers.
#[derive(Debug)]
pub struct NodeLifecycle {
    config: LifecycleConfig,
    nodes: HashMap<NodeId, Tracked>,
    groups: HashMap<String, SnapshotGroup>,
}

impl NodeLifecycle {
    pub fn new(config: LifecycleConfig) -> Self {
        NodeLifecycle {
            config,
            nodes: HashMap::new(),
            groups: HashMap::new(),
        }
    }

    pub fn config(&self) -> &LifecycleConfig {
        &self.config
    }

    pub fn health(&self, id: &NodeId) -> Option<Health> {
        self.nodes.get(id).map(|n| n.health)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The nodes with a live heartbeat deadline: every tracked node but
    /// the lost ones (Nomad's count of heartbeat timers).
    pub fn heartbeating(&self) -> usize {
        self.nodes
            .values()
            .filter(|n| !matches!(n.health, Health::Lost { .. }))
            .count()
    }

    /// The TTL a node is told to heartbeat within: the whole cluster
    /// heartbeats at no more than `max_heartbeats_per_second`, never less
    /// than `min_heartbeat_ttl`, plus up to one TTL of random jitter so the
    /// heartbeats of a restarted cluster do not arrive in lockstep.
    pub fn heartbeat_ttl(&self, rng: &mut impl Rng) -> Duration {
        let n = self.nodes.len().max(1) as f64;
        let scaled = Duration::from_secs_f64(n / self.config.max_heartbeats_per_second);
        let base = scaled.max(self.config.min_heartbeat_ttl);
        let jitter = rng.gen_range(0.0..1.0);
        base + base.mul_f64(jitter)
    }

    /// A node (re-)registered. New nodes wait for their readiness check; a
    /// lost node that comes back is recovered; a flaky node stays out.
    pub fn register(&mut self, id: NodeId, ttl: Duration, now: Instant) -> Vec<Transition> {
        let deadline = now + ttl + self.config.heartbeat_grace;
        let checks = self.config.readiness_checks;
        match self.nodes.get_mut(&id) {
            None => {
                let (health, next_check, out) = if checks {
                    (
                        Health::AwaitingReadiness,
                        Some(now),
                        vec![
                            Transition::MarkInitializing(id, "waiting for readiness check"),
                            Transition::CheckReadiness(id),
                        ],
                    )
                } else {
                    (Health::Healthy, None, vec![Transition::MarkReady(id)])
                };
                self.nodes.insert(
                    id,
                    Tracked {
                        health,
                        deadline,
                        next_check,
                        snapshot: String::new(),
                        busy: false,
                    },
                );
                self.groups
                    .entry(String::new())
                    .or_default()
                    .idle
                    .insert(id);
                out
            }
            Some(node) => {
                node.deadline = deadline;
                match node.health {
                    Health::Lost { .. } => {
                        node.health = Health::Healthy;
                        vec![Transition::MarkReady(id)]
                    }
                    Health::NotReady if checks => {
                        node.health = Health::AwaitingReadiness;
                        node.next_check = Some(now);
                        vec![Transition::CheckReadiness(id)]
                    }
                    _ => Vec::new(),
                }
            }
        }
    }

    /// A heartbeat arrived: push the deadline out; a lost node is back.
    /// Unknown nodes must register first (`None`).
    pub fn heartbeat(
        &mut self,
        id: NodeId,
        ttl: Duration,
        now: Instant,
    ) -> Option<Vec<Transition>> {
        let grace = self.config.heartbeat_grace;
        let node = self.nodes.get_mut(&id)?;
        node.deadline = now + ttl + grace;
        if let Health::Lost { .. } = node.health {
            node.health = Health::Healthy;
            return Some(vec![Transition::MarkReady(id)]);
        }
        Some(Vec::new())
    }

    /// The readiness check answered. Ready: the node joins the healthy set.
    /// Not ready: check again after `backoff`; a zero backoff gives up.
    pub fn readiness_result(
        &mut self,
        id: NodeId,
        ready: bool,
        backoff: Duration,
        now: Instant,
    ) -> Vec<Transition> {
        let Some(node) = self.nodes.get_mut(&id) else {
            return Vec::new();
        };
        if node.health != Health::AwaitingReadiness {
            return Vec::new();
        }
        if ready {
            node.health = Health::Healthy;
            node.next_check = None;
            return vec![Transition::MarkReady(id)];
        }
        if backoff.is_zero() {
            node.health = Health::NotReady;
            node.next_check = None;
            return vec![Transition::MarkInitializing(id, "readiness check gave up")];
        }
        node.next_check = Some(now + backoff);
        Vec::new()
    }

    /// A task on the node failed because of the node itself: the node is
    /// suspended for `max_flaky_duration`.
    pub fn node_caused_failure(&mut self, id: NodeId, now: Instant) -> Vec<Transition> {
        match self.nodes.get_mut(&id) {
            Some(node) if node.health == Health::Healthy => {
                node.health = Health::Flaky { since: now };
                vec![Transition::MarkInitializing(
                    id,
                    "suspended: tasks failed for node reasons",
                )]
            }
            _ => Vec::new(),
        }
    }

    /// The TTL a node gets when this server takes the lead (or restarts):
    /// the whole failover window, so no node is marked down because its
    /// last heartbeats went to the old leader (Nomad's
    /// `FailoverHeartbeatTTL`). The same for every node, as Nomad gives
    /// it: a fleet that stays silent (a partition between the servers and
    /// the clients, a datacenter's network down) then goes down in one
    /// tick, and its work is marked lost with nowhere to go (blocked
    /// evaluations) rather than replaced onto nodes about to be marked
    /// down for the same silence. Spreading the deadlines (as herder once
    /// did, to smooth the node updates) made each expiry reschedule onto
    /// the still-unexpired rest, generation after generation: a silent
    /// 10,000-node fleet holding 1,000,000 allocations grew the state past
    /// 20 GB before the last node was down.
    pub fn failover_ttl(&self) -> Duration {
        self.config.failover_heartbeat_ttl
    }

    /// Starts tracking a node known from the state (after a restart or on
    /// gaining leadership), due to heartbeat within `ttl`.
    pub fn restore(&mut self, id: NodeId, healthy: bool, ttl: Duration, now: Instant) {
        let health = if healthy || !self.config.readiness_checks {
            Health::Healthy
        } else {
            Health::AwaitingReadiness
        };
        let next_check = (health == Health::AwaitingReadiness).then_some(now);
        self.nodes.insert(
            id,
            Tracked {
                health,
                deadline: now + ttl,
                next_check,
                snapshot: String::new(),
                busy: false,
            },
        );
        self.groups
            .entry(String::new())
            .or_default()
            .idle
            .insert(id);
    }

    /// Forgets every node and its timers (leadership lost: the next leader
    /// tracks them).
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.groups.clear();
    }

    /// Stops tracking a node (purged by an operator or the GC).
    pub fn forget(&mut self, id: &NodeId) {
        if let Some(node) = self.nodes.remove(id) {
            self.leave_group(id, &node.snapshot);
        }
    }

    /// Advances time: expired heartbeats, lost nodes past their limit, flaky
    /// nodes due for readmission, and readiness checks due.
    pub fn tick(&mut self, now: Instant) -> Vec<Transition> {
        let mut out = Vec::new();
        let mut removed = Vec::new();
        for (id, node) in self.nodes.iter_mut() {
            match node.health {
                Health::Lost { since }
                    if now.duration_since(since) > self.config.max_lost_duration =>
                {
                    removed.push(*id);
                    out.push(Transition::Remove(*id));
                    continue;
                }
                Health::Flaky { since }
                    if now.duration_since(since) > self.config.max_flaky_duration =>
                {
                    // The snapshot association is dropped: whatever the node
                    // held may have been the cause.
                    node.snapshot.clear();
                    if self.config.readiness_checks {
                        node.health = Health::AwaitingReadiness;
                        node.next_check = Some(now);
                    } else {
                        node.health = Health::Healthy;
                        out.push(Transition::MarkReady(*id));
                    }
                }
                _ => {}
            }
            let alive = !matches!(node.health, Health::Lost { .. });
            if alive && now >= node.deadline {
                node.health = Health::Lost { since: now };
                node.next_check = None;
                out.push(Transition::MarkDown(*id));
                continue;
            }
            if let Some(at) = node.next_check {
                if now >= at && node.health == Health::AwaitingReadiness {
                    node.next_check = None;
                    out.push(Transition::CheckReadiness(*id));
                }
            }
        }
        for id in removed {
            self.forget(&id);
        }
        out
    }

    /// The earliest moment `tick` has something to do, for the actor's timer.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.nodes
            .values()
            .flat_map(|n| {
                let limit = match n.health {
                    Health::Lost { since } => Some(since + self.config.max_lost_duration),
                    Health::Flaky { since } => Some(since + self.config.max_flaky_duration),
                    _ => None,
                };
                let deadline = (!matches!(n.health, Health::Lost { .. })).then_some(n.deadline);
                [limit, deadline, n.next_check]
            })
            .flatten()
            .min()
    }

    /// Records that `id` started work from `snapshot` (Scoot's affinity).
    pub fn task_scheduled(&mut self, id: NodeId, snapshot: &str) {
        let Some(node) = self.nodes.get_mut(&id) else {
            return;
        };
        let old = std::mem::replace(&mut node.snapshot, snapshot.to_string());
        node.busy = true;
        self.leave_group(&id, &old);
        self.groups
            .entry(snapshot.to_string())
            .or_default()
            .busy
            .insert(id);
    }

    /// Records that `id` finished its work; it stays in its snapshot group,
    /// now idle, so the next task of that snapshot can prefer it.
    pub fn task_completed(&mut self, id: NodeId) {
        let Some(node) = self.nodes.get_mut(&id) else {
            return;
        };
        node.busy = false;
        let group = self.groups.entry(node.snapshot.clone()).or_default();
        group.busy.remove(&id);
        group.idle.insert(id);
    }

    /// Healthy idle nodes that last ran `snapshot`.
    pub fn idle_with_snapshot(&self, snapshot: &str) -> Vec<NodeId> {
        let Some(group) = self.groups.get(snapshot) else {
            return Vec::new();
        };
        group
            .idle
            .iter()
            .filter(|id| self.health(id) == Some(Health::Healthy))
            .copied()
            .collect()
    }

    fn leave_group(&mut self, id: &NodeId, snapshot: &str) {
        if let Some(g) = self.groups.get_mut(snapshot) {
            g.idle.remove(id);
            g.busy.remove(id);
            if g.idle.is_empty() && g.busy.is_empty() && !snapshot.is_empty() {
                self.groups.remove(snapshot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herder::structs::new_id;
    use rand::SeedableRng;

    const TTL: Duration = Duration::from_secs(10);

    fn lifecycle(readiness: bool) -> NodeLifecycle {
        NodeLifecycle::new(LifecycleConfig {
            readiness_checks: readiness,
            ..Default::default()
        })
    }

    #[test]
    fn new_node_waits_for_readiness_then_is_ready() {
        let mut lc = lifecycle(true);
        let t0 = Instant::now();
        let n = new_id();
        let out = lc.register(n, TTL, t0);
        assert!(out.contains(&Transition::CheckReadiness(n)));
        assert_eq!(lc.health(&n), Some(Health::AwaitingReadiness));
        // Not ready yet: retried after the backoff it asked for.
        assert!(lc
            .readiness_result(n, false, Duration::from_secs(2), t0)
            .is_empty());
        assert!(lc.tick(t0 + Duration::from_secs(1)).is_empty());
        assert_eq!(
            lc.tick(t0 + Duration::from_secs(2)),
            vec![Transition::CheckReadiness(n)]
        );
        assert_eq!(
            lc.readiness_result(n, true, Duration::ZERO, t0 + Duration::from_secs(2)),
            vec![Transition::MarkReady(n)]
        );
        assert_eq!(lc.health(&n), Some(Health::Healthy));
    }

    #[test]
    fn zero_backoff_gives_up_until_reregistered() {
        let mut lc = lifecycle(true);
        let t0 = Instant::now();
        let n = new_id();
        lc.register(n, TTL, t0);
        lc.readiness_result(n, false, Duration::ZERO, t0);
        assert_eq!(lc.health(&n), Some(Health::NotReady));
        assert!(lc.tick(t0 + Duration::from_secs(5)).is_empty());
        assert_eq!(
            lc.register(n, TTL, t0 + Duration::from_secs(6)),
            vec![Transition::CheckReadiness(n)]
        );
    }

    #[test]
    fn missed_heartbeat_marks_down_after_ttl_plus_grace_and_heartbeat_recovers() {
        let mut lc = lifecycle(false);
        let t0 = Instant::now();
        let n = new_id();
        assert_eq!(lc.register(n, TTL, t0), vec![Transition::MarkReady(n)]);
        assert!(
            lc.tick(t0 + Duration::from_secs(19)).is_empty(),
            "within TTL + grace"
        );
        assert_eq!(lc.heartbeating(), 1);
        assert_eq!(
            lc.tick(t0 + Duration::from_secs(20)),
            vec![Transition::MarkDown(n)]
        );
        assert_eq!((lc.len(), lc.heartbeating()), (1, 0), "lost: no timer");
        assert!(
            lc.tick(t0 + Duration::from_secs(21)).is_empty(),
            "down only once"
        );
        let back = lc.heartbeat(n, TTL, t0 + Duration::from_secs(30)).unwrap();
        assert_eq!(back, vec![Transition::MarkReady(n)]);
        assert_eq!(lc.heartbeating(), 1);
    }

    #[test]
    fn lost_node_is_removed_after_max_lost_duration() {
        let mut lc = lifecycle(false);
        let t0 = Instant::now();
        let n = new_id();
        lc.register(n, TTL, t0);
        let down_at = t0 + Duration::from_secs(20);
        lc.tick(down_at);
        assert!(lc.tick(down_at + Duration::from_secs(60)).is_empty());
        assert_eq!(
            lc.tick(down_at + Duration::from_secs(61)),
            vec![Transition::Remove(n)]
        );
        assert_eq!(lc.health(&n), None);
        assert!(lc
            .heartbeat(n, TTL, down_at + Duration::from_secs(62))
            .is_none());
    }

    #[test]
    fn flaky_node_sits_out_then_is_readmitted_through_readiness() {
        let mut lc = lifecycle(true);
        let t0 = Instant::now();
        let n = new_id();
        lc.register(n, Duration::from_secs(3600), t0);
        lc.readiness_result(n, true, Duration::ZERO, t0);
        let out = lc.node_caused_failure(n, t0);
        assert!(matches!(out[..], [Transition::MarkInitializing(id, _)] if id == n));
        // Flaky nodes ignore re-registration while suspended.
        assert!(lc
            .register(n, Duration::from_secs(3600), t0 + Duration::from_secs(1))
            .is_empty());
        assert!(lc.tick(t0 + Duration::from_secs(15 * 60)).is_empty());
        assert_eq!(
            lc.tick(t0 + Duration::from_secs(15 * 60 + 1)),
            vec![Transition::CheckReadiness(n)]
        );
        assert_eq!(lc.health(&n), Some(Health::AwaitingReadiness));
    }

    #[test]
    fn a_restored_node_is_marked_down_only_after_its_failover_ttl() {
        let mut lc = lifecycle(false);
        let t0 = Instant::now();
        let n = new_id();
        let ttl = lc.failover_ttl();
        lc.restore(n, true, ttl, t0);
        assert!(ttl >= Duration::from_secs(300), "{ttl:?}");
        assert!(lc.tick(t0 + ttl - Duration::from_millis(1)).is_empty());
        assert_eq!(lc.tick(t0 + ttl), vec![Transition::MarkDown(n)]);
    }

    #[test]
    fn a_silent_restored_fleet_is_marked_down_in_one_tick() {
        let mut lc = lifecycle(false);
        let t0 = Instant::now();
        let ttl = lc.failover_ttl();
        let fleet: Vec<NodeId> = (0..1_000).map(|_| new_id()).collect();
        for n in &fleet {
            lc.restore(*n, true, ttl, t0);
        }
        assert!(lc.tick(t0 + ttl - Duration::from_millis(1)).is_empty());
        let mut down = lc.tick(t0 + ttl);
        assert_eq!(down.len(), fleet.len(), "every silent node at once");
        down.sort_by_key(|t| format!("{t:?}"));
        let mut expected: Vec<Transition> =
            fleet.iter().map(|n| Transition::MarkDown(*n)).collect();
        expected.sort_by_key(|t| format!("{t:?}"));
        assert_eq!(down, expected);
    }

    #[test]
    fn clear_forgets_every_node_and_its_timer() {
        let mut lc = lifecycle(false);
        let t0 = Instant::now();
        let n = new_id();
        lc.register(n, TTL, t0);
        lc.clear();
        assert!(lc.is_empty());
        assert_eq!(lc.next_wakeup(), None);
        assert!(lc.tick(t0 + Duration::from_secs(3600)).is_empty());
    }

    #[test]
    fn ttl_scales_with_cluster_size_with_jitter_below_one_ttl() {
        let mut lc = lifecycle(false);
        let t0 = Instant::now();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let small = lc.heartbeat_ttl(&mut rng);
        assert!(small >= TTL && small < 2 * TTL, "{small:?}");
        for _ in 0..10_000 {
            lc.register(new_id(), TTL, t0);
        }
        // 10,000 nodes at 50/s: a 200 s base TTL.
        let big = lc.heartbeat_ttl(&mut rng);
        assert!(
            big >= Duration::from_secs(200) && big < Duration::from_secs(400),
            "{big:?}"
        );
    }

    #[test]
    fn snapshot_affinity_prefers_idle_nodes_that_ran_the_snapshot() {
        let mut lc = lifecycle(false);
        let t0 = Instant::now();
        let (a, b) = (new_id(), new_id());
        lc.register(a, TTL, t0);
        lc.register(b, TTL, t0);
        lc.task_scheduled(a, "snap-1");
        assert!(
            lc.idle_with_snapshot("snap-1").is_empty(),
            "busy nodes are not offered"
        );
        lc.task_completed(a);
        assert_eq!(lc.idle_with_snapshot("snap-1"), vec![a]);
        lc.task_scheduled(a, "snap-2");
        assert!(lc.idle_with_snapshot("snap-1").is_empty());
        // A down node is not offered either.
        lc.task_completed(a);
        lc.tick(t0 + Duration::from_secs(25));
        assert!(lc.idle_with_snapshot("snap-2").is_empty());
    }

    #[test]
    fn next_wakeup_is_the_earliest_deadline() {
        let mut lc = lifecycle(false);
        let t0 = Instant::now();
        assert_eq!(lc.next_wakeup(), None);
        lc.register(new_id(), TTL, t0);
        lc.register(new_id(), Duration::from_secs(5), t0);
        assert_eq!(lc.next_wakeup(), Some(t0 + Duration::from_secs(15)));
    }
}
