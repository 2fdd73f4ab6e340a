//! One simulated node: the I/O shell of [`herder_client::node_protocol`] on the
//! shard's async HTTP client, plus mock runs of its allocations.
//!
//! The [`NodeSession`] decides what to send and when (registration,
//! heartbeats at a jittered fraction of the TTL, the blocking query on the
//! node's allocations, batched status reports, backoff, server failover);
//! the node's driver task sends each request as its own task and sleeps
//! until the next is due or an answer or a report wakes it. Everything runs
//! on its shard's single-threaded runtime, so a node's state is a plain
//! `RefCell` and a node costs a few small futures and timers, not threads.

use super::counters::Counters;
use super::http::SimHttp;
use super::mock_alloc::{report, with_health, AllocView, Outcome};
use herder::state::AllocClientUpdate;
use herder::structs::{AllocId, ClientStatus, DesiredStatus, Node};
use herder_client::node_protocol::{
    wire, Action, Backoff, Failure, NodeAnswer, NodeSession, Request, SessionConfig,
};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Settings every node of a shard shares.
pub struct NodeSettings {
    /// How long the blocking query on allocations waits at the server.
    pub watch_wait: Duration,
    /// Status changes are batched for this long: one request per node per
    /// window at most.
    pub flush_window: Duration,
    /// Whether nodes follow and run their allocations (a placement
    /// benchmark's nodes only register and heartbeat).
    pub watch_allocs: bool,
}

impl NodeSettings {
    /// The protocol's pacing for a simulated node: heartbeats spread over
    /// [0.5, 0.9) of the TTL (before it expires, the server adds its grace
    /// on top; close enough to it that the rate stays near what the server
    /// sized the TTL for; nodes registered together drift apart) and
    /// retries jittered by up to a quarter second, so thousands of nodes
    /// do not come back in step after a server restart.
    fn session_config(&self, servers: Vec<String>) -> SessionConfig {
        let client = SessionConfig::client(servers, rand::random());
        SessionConfig {
            heartbeat_fraction: (0.5, 0.9),
            flush_window: self.flush_window,
            backoff: Backoff {
                jitter: Duration::from_millis(250),
                ..client.backoff
            },
            watch_allocs: self.watch_allocs,
            ..client
        }
    }
}

/// What the node knows of one allocation.
struct LocalAlloc {
    status: ClientStatus,
    tasks: Vec<String>,
    started_at: i64,
}

impl LocalAlloc {
    fn is_running(&self) -> bool {
        !self.status.is_terminal()
    }
}

#[derive(Default)]
struct NodeState {
    allocs: HashMap<AllocId, LocalAlloc>,
    registered_once: bool,
    /// Whether the last registration or heartbeat was accepted.
    live: bool,
}

pub struct SimNode {
    node: Node,
    http: Rc<SimHttp>,
    settings: Rc<NodeSettings>,
    counters: Arc<Counters>,
    state: RefCell<NodeState>,
    session: RefCell<NodeSession<AllocClientUpdate>>,
    /// Wakes the driver task: an answer came or a report was queued.
    wake: Notify,
}

impl SimNode {
    /// A node that talks to `servers`, in failover order.
    pub fn new(
        node: Node,
        http: Rc<SimHttp>,
        servers: Vec<String>,
        settings: Rc<NodeSettings>,
        counters: Arc<Counters>,
    ) -> Rc<SimNode> {
        let session = NodeSession::new(settings.session_config(servers), Instant::now());
        Rc::new(SimNode {
            node,
            http,
            settings,
            counters,
            state: RefCell::new(NodeState::default()),
            session: RefCell::new(session),
            wake: Notify::new(),
        })
    }

    /// Drives the session until the runtime stops: sends what is due,
    /// sleeps until the next request is due or something wakes it.
    pub async fn run(self: Rc<Self>) {
        loop {
            match self.send_due() {
                Some(at) => {
                    let at = tokio::time::Instant::from_std(at);
                    let _ = tokio::time::timeout_at(at, self.wake.notified()).await;
                }
                None => self.wake.notified().await,
            }
        }
    }

    /// Starts every request the session has due; when the next one is.
    fn send_due(self: &Rc<Self>) -> Option<Instant> {
        loop {
            let action = self.session.borrow_mut().next_action(Instant::now());
            match action {
                Action::Register { server } => actix_rt::spawn(self.clone().register(server)),
                Action::Heartbeat { server } => actix_rt::spawn(self.clone().heartbeat(server)),
                Action::WatchAllocs { server, index } => {
                    actix_rt::spawn(self.clone().watch(server, index))
                }
                Action::UpdateAllocs { server, batch } => {
                    actix_rt::spawn(self.clone().send_updates(server, batch))
                }
                Action::Wait(until) => return until,
            };
        }
    }

    fn set_live(&self, live: bool) {
        let mut state = self.state.borrow_mut();
        if state.live != live {
            state.live = live;
            if live {
                self.counters.live.fetch_add(1, Relaxed);
            } else {
                self.counters.live.fetch_sub(1, Relaxed);
            }
        }
    }

    async fn register(self: Rc<Self>, server: String) {
        let body = wire::register_body(&self.node);
        let reply = self
            .http
            .put(&wire::register_url(&server), None, &body)
            .await;
        let now = Instant::now();
        match reply {
            Ok((_, answer)) => {
                self.set_live(true);
                if !std::mem::replace(&mut self.state.borrow_mut().registered_once, true) {
                    self.counters.registered.fetch_add(1, Relaxed);
                }
                let answer = NodeAnswer::from_json(&answer);
                self.session.borrow_mut().registered(&answer, now);
            }
            Err(e) => {
                self.counters.errors.fetch_add(1, Relaxed);
                tracing::debug!(node = %self.node.name, error = %e, "registration failed");
                let mut session = self.session.borrow_mut();
                session.request_failed(Request::Register, &server, &e, now);
            }
        }
        self.wake.notify_one();
    }

    async fn heartbeat(self: Rc<Self>, server: String) {
        let url = wire::heartbeat_url(&server, &self.node.id);
        let body = wire::heartbeat_body(true);
        let reply = self.http.put(&url, Some(&self.node.secret_id), &body).await;
        let now = Instant::now();
        match reply {
            Ok((_, answer)) => {
                self.set_live(true);
                self.counters.heartbeats.fetch_add(1, Relaxed);
                let answer = NodeAnswer::from_json(&answer);
                self.session.borrow_mut().heartbeat_answered(&answer, now);
            }
            Err(e) => {
                if matches!(e, Failure::Status(404, _)) {
                    // The server lost the node (fresh state): the session
                    // registers it again.
                    self.set_live(false);
                    self.counters.reregistrations.fetch_add(1, Relaxed);
                } else {
                    self.counters.errors.fetch_add(1, Relaxed);
                    tracing::debug!(node = %self.node.name, error = %e, "heartbeat failed");
                }
                let mut session = self.session.borrow_mut();
                session.request_failed(Request::Heartbeat, &server, &e, now);
            }
        }
        self.wake.notify_one();
    }

    /// One blocking query on the node's allocations.
    async fn watch(self: Rc<Self>, server: String, index: u64) {
        let url = wire::watch_url(&server, &self.node.id, index, self.settings.watch_wait);
        let reply = self.http.get_allocs(&url, &self.node.secret_id).await;
        let now = Instant::now();
        match reply {
            Ok((new_index, allocs)) => {
                let changed = self.session.borrow_mut().allocs_answered(new_index, now);
                if changed {
                    self.sync(allocs);
                }
            }
            Err(e) => {
                self.counters.errors.fetch_add(1, Relaxed);
                tracing::debug!(node = %self.node.name, error = %e, "watching allocations failed");
                let mut session = self.session.borrow_mut();
                session.request_failed(Request::WatchAllocs, &server, &e, now);
            }
        }
        self.wake.notify_one();
    }

    /// Brings the local allocations in line with the servers' list.
    fn sync(self: &Rc<Self>, allocs: Vec<AllocView>) {
        let mut seen = Vec::with_capacity(allocs.len());
        for alloc in allocs {
            seen.push(alloc.id);
            let known = self
                .state
                .borrow()
                .allocs
                .get(&alloc.id)
                .map(LocalAlloc::is_running);
            match known {
                Some(true) if alloc.desired_status != DesiredStatus::Run => self.stop(alloc.id),
                Some(_) => {}
                None => self.receive(alloc),
            }
        }
        // Allocations the servers no longer list were garbage collected.
        let seen: std::collections::HashSet<AllocId> = seen.into_iter().collect();
        let mut state = self.state.borrow_mut();
        let counters = &self.counters;
        state.allocs.retain(|id, a| {
            let keep = seen.contains(id);
            if !keep && a.is_running() {
                counters.allocs_running.fetch_sub(1, Relaxed);
            }
            keep
        });
    }

    /// A newly assigned allocation: start it (or record what the servers
    /// already decided).
    fn receive(self: &Rc<Self>, alloc: AllocView) {
        let tasks = alloc.task_names();
        if alloc.client_status.is_terminal() || alloc.desired_status != DesiredStatus::Run {
            // Finished before (a restarted simulation) or stopped before it
            // started: nothing runs. A stop of a started one is reported.
            let status = if alloc.client_status.is_terminal() {
                alloc.client_status
            } else {
                ClientStatus::Complete
            };
            if !alloc.client_status.is_terminal() && alloc.client_status != ClientStatus::Pending {
                self.queue(report(alloc.id, &tasks, status, "stopped", 0));
            }
            self.state.borrow_mut().allocs.insert(
                alloc.id,
                LocalAlloc {
                    status,
                    tasks,
                    started_at: 0,
                },
            );
            return;
        }
        let now = herder_client::now_nanos();
        match alloc.outcome() {
            Outcome::FailsToStart(why) => {
                self.counters.allocs_failed.fetch_add(1, Relaxed);
                let failed = report(alloc.id, &tasks, ClientStatus::Failed, &why, 0);
                self.queue(if alloc.reports_health() {
                    with_health(failed, false)
                } else {
                    failed
                });
                self.state.borrow_mut().allocs.insert(
                    alloc.id,
                    LocalAlloc {
                        status: ClientStatus::Failed,
                        tasks,
                        started_at: 0,
                    },
                );
            }
            outcome => {
                self.counters.allocs_running.fetch_add(1, Relaxed);
                let running = report(
                    alloc.id,
                    &tasks,
                    ClientStatus::Running,
                    "Tasks are running",
                    now,
                );
                self.queue(if alloc.reports_health() {
                    with_health(running, true)
                } else {
                    running
                });
                self.state.borrow_mut().allocs.insert(
                    alloc.id,
                    LocalAlloc {
                        status: ClientStatus::Running,
                        tasks,
                        started_at: now,
                    },
                );
                if let Outcome::RunsFor { duration, failed } = outcome {
                    let node = self.clone();
                    let id = alloc.id;
                    actix_rt::spawn(async move {
                        tokio::time::sleep(duration).await;
                        let (status, why) = if failed {
                            (ClientStatus::Failed, "Failed tasks")
                        } else {
                            (ClientStatus::Complete, "All tasks have completed")
                        };
                        node.finish(id, status, why);
                    });
                }
            }
        }
    }

    /// The servers want the allocation stopped: its tasks end at once.
    fn stop(self: &Rc<Self>, id: AllocId) {
        self.finish(id, ClientStatus::Complete, "All tasks have completed");
    }

    /// Ends a running allocation (a finished one stays as it ended).
    fn finish(self: &Rc<Self>, id: AllocId, status: ClientStatus, why: &str) {
        let update = {
            let mut state = self.state.borrow_mut();
            let Some(alloc) = state.allocs.get_mut(&id) else {
                return;
            };
            if !alloc.is_running() {
                return;
            }
            alloc.status = status;
            report(id, &alloc.tasks, status, why, alloc.started_at)
        };
        self.counters.allocs_running.fetch_sub(1, Relaxed);
        match status {
            ClientStatus::Failed => self.counters.allocs_failed.fetch_add(1, Relaxed),
            _ => self.counters.allocs_complete.fetch_add(1, Relaxed),
        };
        self.queue(update);
    }

    /// Keeps the newest report per allocation; the session ships them
    /// together at the end of the window.
    fn queue(self: &Rc<Self>, update: AllocClientUpdate) {
        let woke = self
            .session
            .borrow_mut()
            .queue_update(update.id, update, Instant::now());
        if woke {
            self.wake.notify_one();
        }
    }

    async fn send_updates(
        self: Rc<Self>,
        server: String,
        batch: BTreeMap<AllocId, AllocClientUpdate>,
    ) {
        let updates: Vec<&AllocClientUpdate> = batch.values().collect();
        let url = wire::update_allocs_url(&server, &self.node.id);
        let body = wire::update_allocs_body(&updates);
        let reply = self.http.put(&url, Some(&self.node.secret_id), &body).await;
        let now = Instant::now();
        match reply {
            Ok(_) => {
                self.counters.updates_sent.fetch_add(1, Relaxed);
                self.session.borrow_mut().updates_sent(now);
            }
            Err(e) => {
                self.counters.errors.fetch_add(1, Relaxed);
                tracing::debug!(node = %self.node.name, error = %e, "reporting allocations failed");
                let mut session = self.session.borrow_mut();
                session.updates_failed(batch, &server, &e, now);
            }
        }
        self.wake.notify_one();
    }
}
