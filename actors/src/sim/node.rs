//! One simulated node: registration, heartbeats, the blocking query on its
//! allocations, mock runs, and batched status reports.
//!
//! Everything runs on its shard's single-threaded runtime, so a node's
//! state is a plain `RefCell` and a node costs a few small futures and
//! timers, not threads.

use super::http::{HttpError, SimHttp};
use super::mock_alloc::{report, AllocView, Outcome};
use super::Counters;
use herder::state::AllocClientUpdate;
use herder::structs::{AllocId, ClientStatus, DesiredStatus, Node};
use rand::Rng;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

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

const MAX_BACKOFF: Duration = Duration::from_secs(10);

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
    pending: BTreeMap<AllocId, AllocClientUpdate>,
    flush_scheduled: bool,
    /// The node's allocation index seen last (0: ask without blocking).
    alloc_index: u64,
    watching: bool,
    registered_once: bool,
    /// Whether the last registration or heartbeat was accepted.
    live: bool,
}

pub struct SimNode {
    node: Node,
    http: Rc<SimHttp>,
    server: String,
    settings: Rc<NodeSettings>,
    counters: Arc<Counters>,
    state: RefCell<NodeState>,
}

fn backoff(failures: u32) -> Duration {
    let jitter = rand::thread_rng().gen_range(0..250);
    (Duration::from_millis(250) * 2u32.pow(failures.min(6)) + Duration::from_millis(jitter))
        .min(MAX_BACKOFF)
}

impl SimNode {
    pub fn new(
        node: Node,
        http: Rc<SimHttp>,
        server: String,
        settings: Rc<NodeSettings>,
        counters: Arc<Counters>,
    ) -> Rc<SimNode> {
        Rc::new(SimNode {
            node,
            http,
            server,
            settings,
            counters,
            state: RefCell::new(NodeState::default()),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.server, path)
    }

    /// Registers, then heartbeats at the TTL the server hands back, until
    /// the runtime stops.
    pub async fn run(self: Rc<Self>) {
        let mut ttl = self.register_until_accepted().await;
        let mut failures = 0;
        loop {
            // Spread over [0.5, 0.9) of the TTL: before it expires (the
            // server adds its grace on top), close enough to it that the
            // rate stays near what the server sized the TTL for, and nodes
            // registered together drift apart.
            let factor = rand::thread_rng().gen_range(0.5..0.9);
            tokio::time::sleep(ttl.mul_f64(factor)).await;
            match self.heartbeat().await {
                Ok(new_ttl) => {
                    failures = 0;
                    ttl = new_ttl;
                    self.set_live(true);
                    self.counters.heartbeats.fetch_add(1, Relaxed);
                }
                Err(HttpError::Status(404, _)) => {
                    // The server lost the node (fresh state): start over.
                    self.set_live(false);
                    self.counters.reregistrations.fetch_add(1, Relaxed);
                    self.state.borrow_mut().alloc_index = 0;
                    ttl = self.register_until_accepted().await;
                }
                Err(e) => {
                    self.counters.errors.fetch_add(1, Relaxed);
                    tracing::debug!(node = %self.node.name, error = %e, "heartbeat failed");
                    failures += 1;
                    // Retry soon, not a whole period later.
                    ttl = backoff(failures).mul_f64(2.0);
                }
            }
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

    async fn register_until_accepted(self: &Rc<Self>) -> Duration {
        let mut failures = 0;
        loop {
            let body = json!({ "Node": &self.node });
            match self
                .http
                .put(&self.url("/v1/node/register"), None, &body)
                .await
            {
                Ok((_, reply)) => {
                    self.set_live(true);
                    let first = {
                        let mut state = self.state.borrow_mut();
                        let first = !state.registered_once;
                        state.registered_once = true;
                        first
                    };
                    if first {
                        self.counters.registered.fetch_add(1, Relaxed);
                    }
                    let start_watch =
                        !std::mem::replace(&mut self.state.borrow_mut().watching, true);
                    if start_watch && self.settings.watch_allocs {
                        actix_rt::spawn(self.clone().watch());
                    }
                    return ttl_of(&reply);
                }
                Err(e) => {
                    self.counters.errors.fetch_add(1, Relaxed);
                    tracing::debug!(node = %self.node.name, error = %e, "registration failed");
                    failures += 1;
                    tokio::time::sleep(backoff(failures)).await;
                }
            }
        }
    }

    async fn heartbeat(&self) -> Result<Duration, HttpError> {
        let url = self.url(&format!("/v1/node/{}/heartbeat", self.node.id));
        let (_, reply) = self
            .http
            .put(
                &url,
                Some(&self.node.secret_id),
                &json!({ "Status": "ready" }),
            )
            .await?;
        Ok(ttl_of(&reply))
    }

    /// The blocking query on the node's allocations, forever.
    async fn watch(self: Rc<Self>) {
        let mut failures = 0;
        loop {
            let index = self.state.borrow().alloc_index;
            let url = self.url(&format!(
                "/v1/node/{}/allocations?index={index}&wait={}s",
                self.node.id,
                self.settings.watch_wait.as_secs()
            ));
            match self.http.get_allocs(&url, &self.node.secret_id).await {
                Ok((new_index, allocs)) => {
                    failures = 0;
                    if new_index != index {
                        self.state.borrow_mut().alloc_index = new_index;
                        self.sync(allocs);
                    }
                }
                Err(e) => {
                    self.counters.errors.fetch_add(1, Relaxed);
                    tracing::debug!(node = %self.node.name, error = %e, "watching allocations failed");
                    failures += 1;
                    tokio::time::sleep(backoff(failures)).await;
                }
            }
        }
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
        let now = crate::client::now_nanos();
        match alloc.outcome() {
            Outcome::FailsToStart(why) => {
                self.counters.allocs_failed.fetch_add(1, Relaxed);
                self.queue(report(alloc.id, &tasks, ClientStatus::Failed, &why, 0));
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
                self.queue(report(
                    alloc.id,
                    &tasks,
                    ClientStatus::Running,
                    "Tasks are running",
                    now,
                ));
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

    /// Keeps the newest report per allocation and ships them together at
    /// the end of the window.
    fn queue(self: &Rc<Self>, update: AllocClientUpdate) {
        let mut state = self.state.borrow_mut();
        state.pending.insert(update.id, update);
        if !state.flush_scheduled {
            state.flush_scheduled = true;
            let node = self.clone();
            actix_rt::spawn(async move {
                tokio::time::sleep(node.settings.flush_window).await;
                node.flush().await;
            });
        }
    }

    async fn flush(self: Rc<Self>) {
        let mut failures = 0;
        loop {
            let batch = {
                let mut state = self.state.borrow_mut();
                if state.pending.is_empty() {
                    state.flush_scheduled = false;
                    return;
                }
                std::mem::take(&mut state.pending)
            };
            let updates: Vec<&AllocClientUpdate> = batch.values().collect();
            let url = self.url(&format!("/v1/node/{}/allocations", self.node.id));
            let result = self
                .http
                .put(
                    &url,
                    Some(&self.node.secret_id),
                    &json!({ "Allocs": updates }),
                )
                .await;
            match result {
                Ok(_) => self.counters.updates_sent.fetch_add(1, Relaxed),
                Err(e) => {
                    self.counters.errors.fetch_add(1, Relaxed);
                    tracing::debug!(node = %self.node.name, error = %e, "reporting allocations failed");
                    // Keep what failed unless a newer report came meanwhile.
                    {
                        let mut state = self.state.borrow_mut();
                        for (id, u) in batch {
                            state.pending.entry(id).or_insert(u);
                        }
                    }
                    failures += 1;
                    tokio::time::sleep(backoff(failures)).await;
                    continue;
                }
            };
            // Reports that arrived during the request wait for their window.
            tokio::time::sleep(self.settings.flush_window).await;
        }
    }
}

/// The answer's `HeartbeatTTL` (nanoseconds), or Nomad's 10 s minimum.
fn ttl_of(v: &Value) -> Duration {
    v["HeartbeatTTL"]
        .as_u64()
        .map(Duration::from_nanos)
        .filter(|d| !d.is_zero())
        .unwrap_or(Duration::from_secs(10))
}
