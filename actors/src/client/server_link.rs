//! The ClientAgent actor: the client's link to the servers.
//!
//! It registers this node (after the readiness check has spoken),
//! heartbeats at half the TTL the servers hand back, follows the node's
//! allocations with blocking queries and feeds them to the allocation
//! manager, and ships the runners' status updates back in batches (the
//! newest state per allocation, every quarter second at most). Once a
//! second it publishes the node's figures under Nomad's names (allocation
//! counts, allocated and free resources, task transitions: see
//! [`crate::client::metrics`]) from what it already handles. Every
//! request has a timeout; failures are retried with a capped backoff, and a
//! server that no longer knows the node (restarted on fresh state) gets a
//! new registration.
//!
//! HTTP calls are blocking (ureq) and run on tokio's blocking pool, never on
//! the actor's thread. A user's restart or signal ([`ControlAlloc`], from
//! the agent's HTTP API) is handed to the allocation manager.

use crate::client::alloc_manager::{
    AllocManager, AllocManagerConfig, AssignedAlloc, ControlAlloc, RestoreAll, ShutdownAll,
    StopAll, SyncAllocs,
};
use crate::client::driver::DriverSet;
use crate::client::metrics::ClientFigures;
use crate::client::readiness::{check_readiness, READINESS_TIMEOUT};
use crate::client::{AllocUpdate, ControlError};
use crate::nomad_metrics::{Board, Section};
use actix::prelude::*;
use herder::state::AllocClientUpdate;
use herder::structs::{AllocId, Allocation, Job, Node, NodeStatus};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a blocking query for allocations waits at the server.
const WATCH_WAIT: Duration = Duration::from_secs(60);
/// Updates are batched for at most this long.
const FLUSH_DELAY: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often the node's Nomad-named figures are published (Nomad's
/// default `collection_interval`).
const METRICS_INTERVAL: Duration = Duration::from_secs(1);

pub struct ClientAgentConfig {
    /// The server's HTTP address, e.g. `http://127.0.0.1:4646`.
    pub server: String,
    pub node: Node,
    pub data_dir: PathBuf,
    pub drivers: DriverSet,
    pub readiness_check: String,
    /// Where the node's Nomad-named figures are published.
    pub metrics: Board,
}

/// Stops the client: with `stop_tasks`, its allocations are stopped first
/// (dev mode); otherwise tasks keep running for the next client to
/// re-attach to.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopClient {
    pub stop_tasks: bool,
}

pub struct ClientAgent {
    base: String,
    http: ureq::Agent,
    node: Arc<Node>,
    data_dir: PathBuf,
    drivers: DriverSet,
    readiness_check: String,
    ready: bool,
    manager: Option<Addr<AllocManager>>,
    pending: BTreeMap<AllocId, AllocUpdate>,
    flush_scheduled: bool,
    alloc_index: u64,
    failures: u32,
    stopping: bool,
    figures: ClientFigures,
    board: Board,
}

impl ClientAgent {
    pub fn new(config: ClientAgentConfig) -> Self {
        let http = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(5))
            .timeout(WATCH_WAIT + Duration::from_secs(30))
            .build();
        ClientAgent {
            base: config.server.trim_end_matches('/').to_string(),
            http,
            node: Arc::new(config.node),
            data_dir: config.data_dir,
            drivers: config.drivers,
            readiness_check: config.readiness_check,
            ready: false,
            manager: None,
            pending: BTreeMap::new(),
            flush_scheduled: false,
            alloc_index: 0,
            failures: 0,
            stopping: false,
            figures: ClientFigures::new(),
            board: config.metrics,
        }
    }

    fn publish_figures(&self) {
        let status = if self.ready { "ready" } else { "initializing" };
        self.board
            .publish(Section::Client, self.figures.families(&self.node, status));
    }

    fn backoff(&mut self) -> Duration {
        self.failures = (self.failures + 1).min(10);
        (Duration::from_millis(250) * 2u32.pow(self.failures)).min(MAX_BACKOFF)
    }

    /// Runs the readiness check (until it first passes), then registers.
    fn register(&mut self, ctx: &mut Context<Self>) {
        let check = (!self.ready).then(|| {
            (
                self.readiness_check.clone(),
                self.data_dir.clone(),
                self.drivers.clone(),
            )
        });
        let mut node = (*self.node).clone();
        let (http, url) = (self.http.clone(), format!("{}/v1/node/register", self.base));
        let fut = async move {
            let ready = match check {
                None => true,
                Some((cmd, dir, drivers)) => {
                    match check_readiness(&cmd, &dir, &drivers, READINESS_TIMEOUT).await {
                        Ok(()) => true,
                        Err(why) => {
                            tracing::warn!(reason = %why, "node not ready yet");
                            false
                        }
                    }
                }
            };
            node.status = if ready {
                NodeStatus::Ready
            } else {
                NodeStatus::Initializing
            };
            let body = json!({ "Node": node });
            let reply = blocking(move || {
                http.put(&url)
                    .send_json(body)
                    .map_err(describe)?
                    .into_json::<Value>()
                    .map_err(|e| e.to_string())
            })
            .await;
            (ready, reply)
        };
        ctx.spawn(
            fut.into_actor(self)
                .map(|(ready, reply), act, ctx| match reply {
                    Ok(v) => {
                        act.failures = 0;
                        act.ready = ready;
                        tracing::info!(node_id = %act.node.id, ready, "node registered");
                        act.schedule_heartbeat(ttl_of(&v), ctx);
                        if act.alloc_index == 0 {
                            act.watch(ctx);
                        }
                    }
                    Err(e) => {
                        let wait = act.backoff();
                        tracing::warn!(error = %e, retry_in = ?wait, "registration failed");
                        ctx.run_later(wait, |act, ctx| act.register(ctx));
                    }
                }),
        );
    }

    fn schedule_heartbeat(&mut self, ttl: Duration, ctx: &mut Context<Self>) {
        ctx.run_later(ttl / 2, |act, ctx| act.heartbeat(ctx));
    }

    fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let check = (!self.ready).then(|| {
            (
                self.readiness_check.clone(),
                self.data_dir.clone(),
                self.drivers.clone(),
            )
        });
        let (http, url, secret) = (
            self.http.clone(),
            format!("{}/v1/node/{}/heartbeat", self.base, self.node.id),
            self.node.secret_id.clone(),
        );
        let fut = async move {
            let ready = match check {
                None => true,
                Some((cmd, dir, drivers)) => {
                    check_readiness(&cmd, &dir, &drivers, READINESS_TIMEOUT)
                        .await
                        .is_ok()
                }
            };
            let status = if ready { "ready" } else { "initializing" };
            let reply = blocking(move || {
                match http
                    .put(&url)
                    .set("X-Nomad-Token", &secret)
                    .send_json(json!({ "Status": status }))
                {
                    Ok(r) => r.into_json::<Value>().map(Some).map_err(|e| e.to_string()),
                    Err(ureq::Error::Status(404, _)) => Ok(None),
                    Err(e) => Err(describe(e)),
                }
            })
            .await;
            (ready, reply)
        };
        ctx.spawn(
            fut.into_actor(self)
                .map(|(ready, reply), act, ctx| match reply {
                    Ok(Some(v)) => {
                        act.ready = ready;
                        act.failures = 0;
                        act.schedule_heartbeat(ttl_of(&v), ctx);
                    }
                    Ok(None) => {
                        tracing::warn!("the servers no longer know this node; registering again");
                        act.register(ctx);
                    }
                    Err(e) => {
                        let wait = act.backoff();
                        tracing::warn!(error = %e, retry_in = ?wait, "heartbeat failed");
                        ctx.run_later(wait, |act, ctx| act.heartbeat(ctx));
                    }
                }),
        );
    }

    /// One blocking query for the node's allocations; loops until stopped.
    fn watch(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let url = format!(
            "{}/v1/node/{}/allocations?index={}&wait={}s",
            self.base,
            self.node.id,
            self.alloc_index,
            WATCH_WAIT.as_secs()
        );
        let (http, secret) = (self.http.clone(), self.node.secret_id.clone());
        let fut = blocking(move || {
            let r = http
                .get(&url)
                .set("X-Nomad-Token", &secret)
                .call()
                .map_err(describe)?;
            let index = r
                .header("X-Nomad-Index")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let body: Vec<Value> = r.into_json().map_err(|e| e.to_string())?;
            Ok((index, parse_allocs(body)?))
        });
        ctx.spawn(fut.into_actor(self).map(|reply, act, ctx| match reply {
            Ok((index, allocs)) => {
                act.failures = 0;
                if index != act.alloc_index {
                    act.alloc_index = index;
                    act.figures.sync(&allocs);
                    if let Some(m) = &act.manager {
                        m.do_send(SyncAllocs { allocs });
                    }
                }
                act.watch(ctx);
            }
            Err(e) => {
                let wait = act.backoff();
                tracing::warn!(error = %e, retry_in = ?wait, "watching allocations failed");
                ctx.run_later(wait, |act, ctx| act.watch(ctx));
            }
        }));
    }

    fn flush(&mut self, ctx: &mut Context<Self>) {
        self.flush_scheduled = false;
        if self.pending.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.pending);
        let updates: Vec<AllocClientUpdate> = batch
            .values()
            .map(|u| AllocClientUpdate {
                id: u.alloc_id,
                client_status: u.client_status,
                client_description: u.client_description.clone(),
                task_states: u.task_states.clone(),
                node_failure: u.node_failure,
                modify_time: crate::client::now_nanos(),
            })
            .collect();
        let (http, url, secret) = (
            self.http.clone(),
            format!("{}/v1/node/{}/allocations", self.base, self.node.id),
            self.node.secret_id.clone(),
        );
        let fut = blocking(move || {
            http.put(&url)
                .set("X-Nomad-Token", &secret)
                .send_json(json!({ "Allocs": updates }))
                .map(|_| ())
                .map_err(describe)
        });
        ctx.spawn(fut.into_actor(self).map(move |reply, act, ctx| {
            if let Err(e) = reply {
                tracing::warn!(error = %e, "reporting allocation status failed; retrying");
                // Keep what failed unless a newer state arrived meanwhile.
                for (id, u) in batch {
                    act.pending.entry(id).or_insert(u);
                }
                let wait = act.backoff();
                act.flush_scheduled = true;
                ctx.run_later(wait, |act, ctx| act.flush(ctx));
            }
        }));
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

/// The server attaches each allocation's job; allocations of one job
/// version share one `Arc<Job>`.
/// The node's allocations with their jobs. One allocation whose job the
/// servers no longer have comes with `None` rather than failing the whole
/// list (which stalled every update to the node, stops included).
fn parse_allocs(body: Vec<Value>) -> Result<Vec<AssignedAlloc>, String> {
    let mut jobs: HashMap<(String, String, u64), Arc<Job>> = HashMap::new();
    let mut out = Vec::with_capacity(body.len());
    for mut v in body {
        let job = v.as_object_mut().and_then(|o| o.remove("Job"));
        let alloc: Allocation =
            serde_json::from_value(v).map_err(|e| format!("bad allocation: {e}"))?;
        let key = (
            alloc.namespace.to_string(),
            alloc.job_id.to_string(),
            alloc.job_version,
        );
        let job = match (jobs.get(&key), job) {
            (Some(j), _) => Some(j.clone()),
            (None, Some(j)) if !j.is_null() => {
                let j: Arc<Job> =
                    Arc::new(serde_json::from_value(j).map_err(|e| format!("bad job: {e}"))?);
                jobs.insert(key, j.clone());
                Some(j)
            }
            (None, _) => None,
        };
        out.push((alloc, job));
    }
    Ok(out)
}

fn describe(e: ureq::Error) -> String {
    match e {
        ureq::Error::Status(code, r) => {
            format!("HTTP {code}: {}", r.into_string().unwrap_or_default())
        }
        other => other.to_string(),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(format!("request task failed: {e}")))
}

impl Actor for ClientAgent {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let manager = AllocManager::new(AllocManagerConfig {
            node: self.node.clone(),
            data_dir: self.data_dir.clone(),
            drivers: self.drivers.clone(),
            host_env: Arc::new(crate::client::task_dir::host_env()),
            updates: ctx.address().recipient(),
            ephemeral: false,
        })
        .start();
        // Re-attach to what a previous client left running before the
        // servers' view arrives, so a sync does not start it twice.
        manager.do_send(RestoreAll);
        self.manager = Some(manager);
        self.register(ctx);
        ctx.run_interval(METRICS_INTERVAL, |act, _| act.publish_figures());
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.board.clear(Section::Client);
    }
}

impl Handler<AllocUpdate> for ClientAgent {
    type Result = ();

    fn handle(&mut self, update: AllocUpdate, ctx: &mut Context<Self>) {
        self.figures.update(&update);
        self.pending.insert(update.alloc_id, update);
        if !self.flush_scheduled {
            self.flush_scheduled = true;
            ctx.run_later(FLUSH_DELAY, |act, ctx| act.flush(ctx));
        }
    }
}

impl Handler<ControlAlloc> for ClientAgent {
    type Result = ResponseFuture<Result<(), ControlError>>;

    fn handle(&mut self, msg: ControlAlloc, _ctx: &mut Context<Self>) -> Self::Result {
        let id = msg.alloc_id;
        let manager = self.manager.clone();
        Box::pin(async move {
            match manager {
                Some(m) => m
                    .send(msg)
                    .await
                    .unwrap_or(Err(ControlError::UnknownAlloc(id))),
                // Stopping: the allocations are no longer this client's.
                None => Err(ControlError::UnknownAlloc(id)),
            }
        })
    }
}

impl Handler<StopClient> for ClientAgent {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: StopClient, _ctx: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        let manager = self.manager.take();
        let stop = async move {
            if let Some(m) = manager {
                if msg.stop_tasks {
                    let _ = m
                        .send(StopAll {
                            timeout: Duration::from_secs(30),
                        })
                        .await;
                } else {
                    let _ = m.send(ShutdownAll).await;
                }
            }
        };
        Box::pin(stop.into_actor(self).map(|_, act, ctx| {
            // Report the final states before going away.
            act.flush(ctx);
        }))
    }
}
