//! The node side of the client protocol, once: what a node says to the
//! servers and when, as a pure state machine that both the real client
//! ([`crate::server_link`], blocking `ureq`) and the simulated
//! nodes (`herder_sim::node`, async `awc`) drive with their own I/O.
//!
//! A [`NodeSession`] does no I/O, reads no clock and spawns nothing: the
//! shell asks [`NodeSession::next_action`] what to send now (or until when
//! to wait), sends it, and feeds the answer or the failure back with the
//! time it happened. The session owns:
//!
//! - **registration first**: nothing but `PUT /v1/node/register` until the
//!   servers accepted the node; a heartbeat answered 404 (the servers lost
//!   the node, e.g. restarted on fresh state) registers again;
//! - **the heartbeat schedule**: the next heartbeat is due at a fraction of
//!   the `HeartbeatTTL` the servers answer (the server keeps the node alive
//!   for the TTL plus a grace, so the fraction leaves room for a retry);
//! - **the blocking query** on the node's allocations: its index, one
//!   query in flight, the next at once after an answer;
//! - **the allocation-update batch**: the newest state per allocation,
//!   sent a flush window after the first change, at most
//!   [`SessionConfig::max_batch`] per request, one request in flight; a
//!   failed batch is merged back under anything newer that arrived meanwhile;
//! - **backoff**: a request that failed by a server's fault is retried at
//!   once ([`FAILOVER_PAUSE`]) on the next server until every server of
//!   the list has failed since the last answer; only then does each kind
//!   of request back off, after a capped exponential delay with optional
//!   jitter (so a dead server costs a client a few milliseconds, not its
//!   heartbeat: backing off before trying the others let a client's TTL
//!   run out during a leader failover);
//! - **the server failover list**: requests go to the current server; a
//!   failure the server is to blame for (no answer, 5xx, an unreadable
//!   answer) moves to the next one; a register or heartbeat answer that
//!   lists the servers (`Servers`, as Nomad's `NodeUpdateResponse.Servers`)
//!   becomes the list, followed by the configured servers it does not
//!   name (a fallback for when every listed one is gone, e.g. a cluster
//!   rebuilt at new addresses behind a configured name).
//!
//! The wire format (paths and bodies) is in [`wire`], also shared. Nomad's
//! `NodeServerInfo` carries an RPC address; herder's nodes talk to the HTTP
//! API, so an entry is read from its `HTTPAddr` (entries without one are
//! skipped).

use herder::structs::AllocId;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The TTL assumed when an answer carries none (Nomad's minimum).
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// How long a request that failed by a server's fault waits before it
/// goes to the next server of the list that has not failed yet.
pub const FAILOVER_PAUSE: Duration = Duration::from_millis(50);

/// How the session paces its requests.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    /// The servers' HTTP addresses in failover order (`host:port` or
    /// `http://host:port`); kept after any list the servers send, as a
    /// fallback.
    pub servers: Vec<String>,
    /// The next heartbeat is due after `TTL x f`, `f` drawn from
    /// `[low, high)` (`low == high`: exactly `TTL x low`).
    pub heartbeat_fraction: (f64, f64),
    /// Allocation updates wait this long after the first change, so the
    /// changes of that window go in one request.
    pub flush_window: Duration,
    /// Most allocations in one update request (the rest follow at once).
    pub max_batch: usize,
    pub backoff: Backoff,
    /// Whether the node follows its allocations (a node of a placement
    /// benchmark only registers and heartbeats).
    pub watch_allocs: bool,
    /// Seeds the jitter, so a test sees the same draws every run.
    pub seed: u64,
}

impl SessionConfig {
    /// The real client's pacing: heartbeat at half the TTL, updates
    /// batched for a quarter second, backoff 0.5 s doubling to 10 s.
    pub fn client(servers: Vec<String>, seed: u64) -> SessionConfig {
        SessionConfig {
            servers,
            heartbeat_fraction: (0.5, 0.5),
            flush_window: Duration::from_millis(250),
            max_batch: 1024,
            backoff: Backoff {
                base: Duration::from_millis(250),
                max: Duration::from_secs(10),
                jitter: Duration::ZERO,
            },
            watch_allocs: true,
            seed,
        }
    }
}

/// A capped exponential delay: `base x 2^failures` plus a random part of
/// at most `jitter`, never more than `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
    pub jitter: Duration,
}

impl Backoff {
    /// The delay after `failures` failures in a row; `draw` in `[0, 1)`
    /// picks the jitter.
    pub fn delay(&self, failures: u32, draw: f64) -> Duration {
        let doubled = self.base.saturating_mul(1u32 << failures.min(16));
        doubled
            .saturating_add(self.jitter.mul_f64(draw.clamp(0.0, 1.0)))
            .min(self.max)
    }
}

/// A request the session asks the shell to send.
#[derive(Debug, PartialEq)]
pub enum Action<U> {
    /// `PUT /v1/node/register` to `server`; answer with
    /// [`NodeSession::registered`].
    Register { server: String },
    /// `PUT /v1/node/:id/heartbeat`; answer with
    /// [`NodeSession::heartbeat_answered`].
    Heartbeat { server: String },
    /// The blocking query `GET /v1/node/:id/allocations?index=`; answer
    /// with [`NodeSession::allocs_answered`].
    WatchAllocs { server: String, index: u64 },
    /// `PUT /v1/node/:id/allocations` with these updates; answer with
    /// [`NodeSession::updates_sent`] or give the batch back with
    /// [`NodeSession::updates_failed`].
    UpdateAllocs {
        server: String,
        batch: BTreeMap<AllocId, U>,
    },
    /// Nothing to send before this time (`None`: before the next answer or
    /// queued update).
    Wait(Option<Instant>),
}

/// The requests other than allocation updates, for
/// [`NodeSession::request_failed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    Register,
    Heartbeat,
    WatchAllocs,
}

/// Why a request got no usable answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// No answer: refused, reset, timed out.
    #[error("{0}")]
    Unreachable(String),
    /// An HTTP error status with the server's text.
    #[error("HTTP {0}: {1}")]
    Status(u16, String),
    /// An answer that could not be read.
    #[error("unreadable answer: {0}")]
    BadAnswer(String),
}

impl Failure {
    /// Whether another server may do better: no answer, a server error or
    /// a garbled answer. A 4xx would be the same everywhere.
    pub fn is_server_fault(&self) -> bool {
        match self {
            Failure::Unreachable(_) | Failure::BadAnswer(_) => true,
            Failure::Status(code, _) => *code >= 500,
        }
    }
}

/// What a register or heartbeat answer tells the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAnswer {
    pub heartbeat_ttl: Duration,
    /// The servers to talk to from now on, when the answer lists them.
    pub servers: Option<Vec<String>>,
}

impl NodeAnswer {
    /// Reads `HeartbeatTTL` (nanoseconds; [`DEFAULT_TTL`] when missing or
    /// zero) and `Servers[].HTTPAddr`.
    pub fn from_json(v: &Value) -> NodeAnswer {
        let heartbeat_ttl = v["HeartbeatTTL"]
            .as_u64()
            .map(Duration::from_nanos)
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_TTL);
        let servers = v["Servers"].as_array().map(|list| {
            list.iter()
                .filter_map(|s| s["HTTPAddr"].as_str())
                .filter(|s| !s.trim().is_empty())
                .map(normalize_server)
                .collect::<Vec<_>>()
        });
        NodeAnswer {
            heartbeat_ttl,
            servers: servers.filter(|s| !s.is_empty()),
        }
    }
}

/// `host:port` as `http://host:port`, without a trailing slash.
pub fn normalize_server(server: &str) -> String {
    let trimmed = server.trim().trim_end_matches('/');
    if trimmed.contains("://") {
        trimmed.to_string()
    } else {
        format!("http://{trimmed}")
    }
}

/// Where the node stands with the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A registration is due at this time.
    RegisterAt(Instant),
    Registering,
    /// Registered; the next heartbeat is due at this time.
    HeartbeatAt(Instant),
    Heartbeating,
    /// Shutting down: only allocation updates still go out.
    ShutDown,
}

/// One kind of repeated request: due when, in flight or not, failures in
/// a row.
#[derive(Clone, Copy, Debug, Default)]
struct Lane {
    due: Option<Instant>,
    in_flight: bool,
    failures: u32,
}

impl Lane {
    fn ready(&self, now: Instant) -> bool {
        !self.in_flight && self.due.is_some_and(|t| t <= now)
    }

    fn waiting_until(&self) -> Option<Instant> {
        self.due.filter(|_| !self.in_flight)
    }
}

/// Which kind of request failed, for its failure count.
#[derive(Clone, Copy, Debug)]
enum LaneKind {
    /// Register and heartbeat.
    Liveness,
    Watch,
    Flush,
}

/// The node side of the protocol for one node; `U` is the shell's
/// allocation update (the newest one per allocation is kept).
pub struct NodeSession<U> {
    config: SessionConfig,
    servers: ServerList,
    phase: Phase,
    /// Registration and heartbeat failures in a row.
    liveness_failures: u32,
    registered_once: bool,
    watch: Lane,
    alloc_index: u64,
    /// The index the query in flight asked from.
    asked_index: u64,
    /// The index was reset while a query was in flight: its answer must
    /// not put the old index back.
    index_reset: bool,
    flush: Lane,
    pending: BTreeMap<AllocId, U>,
    rng: SplitMix,
}

impl<U> NodeSession<U> {
    /// A session that registers at `now`.
    pub fn new(config: SessionConfig, now: Instant) -> NodeSession<U> {
        let servers = ServerList::new(&config.servers);
        let rng = SplitMix(config.seed);
        NodeSession {
            config,
            servers,
            phase: Phase::RegisterAt(now),
            liveness_failures: 0,
            registered_once: false,
            watch: Lane::default(),
            alloc_index: 0,
            asked_index: 0,
            index_reset: false,
            flush: Lane::default(),
            pending: BTreeMap::new(),
            rng,
        }
    }

    /// The server requests go to now.
    pub fn current_server(&self) -> &str {
        self.servers.current()
    }

    /// The failover list, in order.
    pub fn servers(&self) -> &[String] {
        &self.servers.list
    }

    /// Replaces the configured servers (`PUT /v1/agent/servers`, Nomad's
    /// `SetServers`): the next request goes to the first of them; the list
    /// the servers send later is still adopted in front of them.
    pub fn set_servers(&mut self, servers: &[String]) {
        self.servers = ServerList::new(servers);
    }

    /// Whether the servers accepted the node's last registration or
    /// heartbeat.
    pub fn is_registered(&self) -> bool {
        matches!(self.phase, Phase::HeartbeatAt(_) | Phase::Heartbeating)
    }

    /// The allocation index the next blocking query asks from.
    pub fn alloc_index(&self) -> u64 {
        self.alloc_index
    }

    /// Updates not yet sent (or sent and failed).
    pub fn pending_updates(&self) -> usize {
        self.pending.len()
    }

    /// The next request to send now, marking it in flight; call again until
    /// it answers [`Action::Wait`].
    pub fn next_action(&mut self, now: Instant) -> Action<U> {
        let server = self.servers.current().to_string();
        match self.phase {
            Phase::RegisterAt(t) if t <= now => {
                self.phase = Phase::Registering;
                return Action::Register { server };
            }
            Phase::HeartbeatAt(t) if t <= now => {
                self.phase = Phase::Heartbeating;
                return Action::Heartbeat { server };
            }
            _ => {}
        }
        if self.flush.ready(now) {
            if let Some(batch) = self.take_batch() {
                self.flush.in_flight = true;
                self.flush.due = None;
                return Action::UpdateAllocs { server, batch };
            }
            self.flush.due = None;
        }
        if self.watch.ready(now) {
            self.watch.in_flight = true;
            self.watch.due = None;
            self.asked_index = self.alloc_index;
            return Action::WatchAllocs {
                server,
                index: self.alloc_index,
            };
        }
        Action::Wait(self.earliest_due())
    }

    fn earliest_due(&self) -> Option<Instant> {
        let phase = match self.phase {
            Phase::RegisterAt(t) | Phase::HeartbeatAt(t) => Some(t),
            Phase::Registering | Phase::Heartbeating | Phase::ShutDown => None,
        };
        [
            phase,
            self.flush.waiting_until(),
            self.watch.waiting_until(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The oldest-keyed `max_batch` pending updates (all when fewer).
    fn take_batch(&mut self) -> Option<BTreeMap<AllocId, U>> {
        if self.pending.is_empty() {
            return None;
        }
        let mut batch = std::mem::take(&mut self.pending);
        if let Some(split) = batch.keys().nth(self.config.max_batch.max(1)).copied() {
            self.pending = batch.split_off(&split);
        }
        Some(batch)
    }

    /// The servers accepted the registration.
    pub fn registered(&mut self, answer: &NodeAnswer, now: Instant) {
        if self.phase == Phase::ShutDown {
            return;
        }
        self.liveness_failures = 0;
        self.servers.answered();
        self.accept(answer, now);
        if !self.registered_once {
            self.registered_once = true;
            if self.config.watch_allocs {
                self.watch.due = Some(now);
            }
            if !self.pending.is_empty() && self.flush.due.is_none() {
                self.flush.due = Some(now + self.config.flush_window);
            }
        }
    }

    /// The servers accepted a heartbeat.
    pub fn heartbeat_answered(&mut self, answer: &NodeAnswer, now: Instant) {
        if self.phase == Phase::ShutDown {
            return;
        }
        self.liveness_failures = 0;
        self.servers.answered();
        self.accept(answer, now);
    }

    fn accept(&mut self, answer: &NodeAnswer, now: Instant) {
        if let Some(list) = &answer.servers {
            let pick = self.rng.next_f64();
            self.servers.replace(list, pick);
        }
        let (low, high) = self.config.heartbeat_fraction;
        let fraction = low + (high - low).max(0.0) * self.rng.next_f64();
        self.phase = Phase::HeartbeatAt(now + answer.heartbeat_ttl.mul_f64(fraction));
    }

    /// The blocking query answered at `index`; whether the allocations
    /// changed since the index asked (the shell then syncs them).
    pub fn allocs_answered(&mut self, index: u64, now: Instant) -> bool {
        let asked = self.asked_index;
        self.watch.in_flight = false;
        self.watch.failures = 0;
        self.servers.answered();
        if self.phase != Phase::ShutDown {
            self.watch.due = Some(now);
        }
        if std::mem::take(&mut self.index_reset) {
            // Registered anew meanwhile: ask from scratch, but the answer
            // is still the servers' word on the allocations.
            return index != asked;
        }
        self.alloc_index = index;
        index != asked
    }

    /// The batch was delivered.
    pub fn updates_sent(&mut self, now: Instant) {
        self.flush.in_flight = false;
        self.flush.failures = 0;
        self.servers.answered();
        if !self.pending.is_empty() && self.flush.due.is_none() {
            // More than one batch's worth: the rest waited already.
            self.flush.due = Some(now);
        }
    }

    /// The batch failed: its updates go back unless a newer one for the
    /// same allocation was queued meanwhile.
    pub fn updates_failed(
        &mut self,
        batch: BTreeMap<AllocId, U>,
        server: &str,
        failure: &Failure,
        now: Instant,
    ) {
        self.flush.in_flight = false;
        for (id, update) in batch {
            self.pending.entry(id).or_insert(update);
        }
        self.blame(server, failure);
        let delay = self.retry_delay(failure, LaneKind::Flush);
        self.flush.due = Some(now + delay);
    }

    /// A register, heartbeat or allocation query failed. A heartbeat
    /// answered 404 means the servers no longer know the node: it
    /// registers again at once, and follows its allocations from scratch.
    pub fn request_failed(
        &mut self,
        request: Request,
        server: &str,
        failure: &Failure,
        now: Instant,
    ) {
        self.blame(server, failure);
        match request {
            Request::Register | Request::Heartbeat if self.phase == Phase::ShutDown => {}
            Request::Heartbeat if matches!(failure, Failure::Status(404, _)) => {
                self.liveness_failures = 0;
                self.phase = Phase::RegisterAt(now);
                self.alloc_index = 0;
                self.index_reset = self.watch.in_flight;
            }
            Request::Register | Request::Heartbeat => {
                let at = now + self.retry_delay(failure, LaneKind::Liveness);
                self.phase = match request {
                    Request::Register => Phase::RegisterAt(at),
                    _ => Phase::HeartbeatAt(at),
                };
            }
            Request::WatchAllocs => {
                self.watch.in_flight = false;
                let delay = self.retry_delay(failure, LaneKind::Watch);
                if self.phase != Phase::ShutDown {
                    self.watch.due = Some(now + delay);
                }
            }
        }
    }

    /// Queues an allocation's newest state; whether this set a new flush
    /// time (the shell's timer may need to move). A flush already due (a
    /// window or a backoff running) is not brought forward.
    pub fn queue_update(&mut self, id: AllocId, update: U, now: Instant) -> bool {
        self.pending.insert(id, update);
        let shut_down = self.phase == Phase::ShutDown;
        if self.flush.due.is_some() || !(self.registered_once || shut_down) {
            return false;
        }
        let window = if shut_down {
            Duration::ZERO
        } else {
            self.config.flush_window
        };
        self.flush.due = Some(now + window);
        true
    }

    /// Stops registering, heartbeating and watching; pending updates go
    /// out at once, and later ones without a window.
    pub fn shut_down(&mut self, now: Instant) {
        self.phase = Phase::ShutDown;
        self.watch.due = None;
        if !self.pending.is_empty() {
            self.flush.due = Some(now);
        }
    }

    /// A failure the server is to blame for moves to the next server.
    fn blame(&mut self, server: &str, failure: &Failure) {
        if failure.is_server_fault() {
            self.servers.failed(server);
        }
    }

    /// How long a request of `lane` waits after `failure` (already
    /// blamed): the failover pause while a server of the list has not
    /// failed since the last answer, else the lane's next backoff.
    fn retry_delay(&mut self, failure: &Failure, lane: LaneKind) -> Duration {
        if failure.is_server_fault() && self.servers.has_untried() {
            return FAILOVER_PAUSE;
        }
        let failures = match lane {
            LaneKind::Liveness => &mut self.liveness_failures,
            LaneKind::Watch => &mut self.watch.failures,
            LaneKind::Flush => &mut self.flush.failures,
        };
        *failures = failures.saturating_add(1);
        let failures = *failures;
        let draw = self.rng.next_f64();
        self.config.backoff.delay(failures, draw)
    }
}

/// The servers in failover order and the one in use.
#[derive(Clone, Debug)]
struct ServerList {
    list: Vec<String>,
    current: usize,
    /// The configured servers, appended to any list the servers send.
    configured: Vec<String>,
    /// Servers of the list that have not failed since the last answer.
    untried: usize,
}

impl ServerList {
    fn new(servers: &[String]) -> ServerList {
        let list = normalized(servers.iter().map(String::as_str));
        ServerList {
            configured: list.clone(),
            untried: list.len(),
            list,
            current: 0,
        }
    }

    fn current(&self) -> &str {
        self.list.get(self.current).map_or("", String::as_str)
    }

    /// Moves on when the server that failed is the one in use (a second
    /// failure from requests already sent there does not skip another).
    fn failed(&mut self, server: &str) {
        if !self.list.is_empty() && self.current() == server {
            self.current = (self.current + 1) % self.list.len();
            self.untried = self.untried.saturating_sub(1);
        }
    }

    /// A server answered: every server is worth a try again.
    fn answered(&mut self) {
        self.untried = self.list.len();
    }

    /// Whether a server of the list has not failed since the last answer.
    fn has_untried(&self) -> bool {
        self.untried > 0
    }

    /// A list from the servers, followed by the configured servers it
    /// does not name; the server in use stays when the servers list it,
    /// otherwise one of theirs is picked by `draw` in `[0, 1)` (so nodes
    /// given the same list spread over it).
    fn replace(&mut self, servers: &[String], draw: f64) {
        let given = normalized(servers.iter().map(String::as_str));
        if given.is_empty() {
            return;
        }
        let keep = self.current().to_string();
        let picked = ((draw * given.len() as f64) as usize).min(given.len() - 1);
        // `given` leads `list`, so a position in it is one in `list`.
        self.current = given.iter().position(|s| *s == keep).unwrap_or(picked);
        self.list = normalized(
            given
                .iter()
                .chain(self.configured.iter())
                .map(String::as_str),
        );
        self.untried = self.list.len();
    }
}

/// Each server once, normalized, in order of first appearance.
fn normalized<'a>(servers: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut list: Vec<String> = Vec::new();
    for s in servers.map(normalize_server) {
        if !list.contains(&s) {
            list.push(s);
        }
    }
    list
}

/// A small deterministic generator for jitter (SplitMix64): the session
/// stays pure and a seeded test sees the same draws.
#[derive(Clone, Debug)]
struct SplitMix(u64);

impl SplitMix {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The node protocol's paths and bodies, as herder's servers read them
/// (`herder_http`'s `client_routes`).
pub mod wire {
    use herder::structs::{Node, NodeId};
    use serde::Serialize;
    use serde_json::{json, Value};
    use std::time::Duration;

    pub fn register_url(server: &str) -> String {
        format!("{server}/v1/node/register")
    }

    pub fn heartbeat_url(server: &str, node: &NodeId) -> String {
        format!("{server}/v1/node/{node}/heartbeat")
    }

    /// The blocking query on the node's allocations.
    pub fn watch_url(server: &str, node: &NodeId, index: u64, wait: Duration) -> String {
        format!(
            "{server}/v1/node/{node}/allocations?index={index}&wait={}s",
            wait.as_secs()
        )
    }

    pub fn update_allocs_url(server: &str, node: &NodeId) -> String {
        format!("{server}/v1/node/{node}/allocations")
    }

    /// Where a node registers its allocations' services.
    pub fn register_services_url(server: &str, node: &NodeId) -> String {
        format!("{server}/v1/node/{node}/services")
    }

    /// Where a node removes the services of allocations that stopped.
    pub fn deregister_services_url(server: &str, node: &NodeId) -> String {
        format!("{server}/v1/node/{node}/services/deregister")
    }

    pub fn register_body(node: &Node) -> Value {
        json!({ "Node": node })
    }

    /// A heartbeat reporting the node ready or still initializing.
    pub fn heartbeat_body(ready: bool) -> Value {
        json!({ "Status": if ready { "ready" } else { "initializing" } })
    }

    pub fn update_allocs_body<U: Serialize>(updates: &[U]) -> Value {
        json!({ "Allocs": updates })
    }

    /// The header that carries the node's SecretID.
    pub const TOKEN_HEADER: &str = "X-Nomad-Token";
}

#[cfg(test)]
mod tests;
