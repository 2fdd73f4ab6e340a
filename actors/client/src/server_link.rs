//! The ClientAgent actor: the client's link to the servers, the I/O shell
//! of [`crate::node_protocol`].
//!
//! The protocol's decisions (register first, heartbeat at half the TTL the
//! servers hand back, the blocking query on the node's allocations, the
//! runners' status updates batched as the newest state per allocation
//! every quarter second at most, capped backoff, the failover list of
//! servers, registering again with a server that no longer knows the node)
//! are the [`NodeSession`]'s; this actor sends what it asks for with
//! blocking `ureq` calls on tokio's blocking pool (never on the actor's
//! thread), feeds the answers back, and hands the allocations to the
//! allocation manager. Before registering, and with each heartbeat until
//! it first passes, it runs the readiness check. Once a second it
//! publishes the node's figures under Nomad's names (allocation counts,
//! allocated and free resources, task transitions: see
//! [`crate::metrics`]) from what it already handles. A user's
//! restart or signal ([`ControlAlloc`], from the agent's HTTP API) is
//! handed to the allocation manager. The services the allocations want
//! registered are kept in step with the servers' catalog
//! ([`crate::service_sync`]), signed with the node's secret.

use crate::alloc_manager::alloc_gc::{CollectAll, CollectAlloc, GcError};
use crate::alloc_manager::{
    AllocManager, AllocManagerConfig, AssignedAlloc, ControlAlloc, ExecAlloc, GetAllocChecks,
    RestoreAll, ShutdownAll, StopAll, SyncAllocs,
};
use crate::driver::DriverSet;
use crate::metrics::ClientFigures;
use crate::node_protocol::{
    wire, Action, Failure, NodeAnswer, NodeSession, Request, SessionConfig,
};
use crate::readiness::{check_readiness, READINESS_TIMEOUT};
use crate::service_sync::{ServiceSync, SyncCall};
use crate::template::funcs::ServiceCatalog;
use crate::{AllocUpdate, ControlError};
use actix::prelude::*;
use herder::state::AllocClientUpdate;
use herder::structs::{AllocId, Allocation, Job, Node, NodeStatus};
use herder_common::nomad_metrics::{Board, Section};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a blocking query for allocations waits at the server.
const WATCH_WAIT: Duration = Duration::from_secs(60);
/// How often the node's Nomad-named figures are published (Nomad's
/// default `collection_interval`).
const METRICS_INTERVAL: Duration = Duration::from_secs(1);
/// How long a failed service registration waits before it is sent again.
const SERVICES_RETRY: Duration = Duration::from_secs(1);

pub struct ClientAgentConfig {
    /// The servers' HTTP addresses in failover order, e.g.
    /// `http://127.0.0.1:4646` (or `host:port`).
    pub servers: Vec<String>,
    pub node: Node,
    pub data_dir: PathBuf,
    pub drivers: DriverSet,
    pub readiness_check: String,
    /// Where the node's Nomad-named figures are published.
    pub metrics: Board,
    /// TLS towards `https://` servers (herder-common's
    /// `TlsConfig::servers_client`: this agent's certificate presented).
    pub tls: Option<Arc<rustls::ClientConfig>>,
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
    http: ureq::Agent,
    node: Arc<Node>,
    data_dir: PathBuf,
    drivers: DriverSet,
    readiness_check: String,
    ready: bool,
    manager: Option<Addr<AllocManager>>,
    session: NodeSession<AllocUpdate>,
    /// Wakes `drive` when the session's next request is due.
    timer: Option<SpawnHandle>,
    figures: ClientFigures,
    board: Board,
    /// The allocations' services against the servers' catalog.
    services: ServiceSync,
    /// Wakes `sync_services` after a failed call.
    services_retry: Option<SpawnHandle>,
    /// The servers templates read `nomadService` from (kept with the
    /// session's list).
    catalog: ServiceCatalog,
}

/// A request's outcome as the session takes it.
type Reply<T> = Result<T, Failure>;

impl ClientAgent {
    pub fn new(config: ClientAgentConfig) -> Self {
        let http = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(5))
            .timeout(WATCH_WAIT + Duration::from_secs(30));
        let http = match config.tls {
            Some(tls) => http.tls_config(tls).build(),
            None => http.build(),
        };
        let session = NodeSession::new(
            SessionConfig::client(config.servers, rand::random()),
            Instant::now(),
        );
        let catalog = ServiceCatalog::new(session.servers().to_vec());
        ClientAgent {
            catalog,
            http,
            node: Arc::new(config.node),
            data_dir: config.data_dir,
            drivers: config.drivers,
            readiness_check: config.readiness_check,
            ready: false,
            manager: None,
            session,
            timer: None,
            figures: ClientFigures::new(),
            board: config.metrics,
            services: ServiceSync::default(),
            services_retry: None,
        }
    }

    fn publish_figures(&self) {
        let status = if self.ready { "ready" } else { "initializing" };
        self.board
            .publish(Section::Client, self.figures.families(&self.node, status));
    }

    /// Sends every request the session has due, then sleeps until the next.
    fn drive(&mut self, ctx: &mut Context<Self>) {
        loop {
            match self.session.next_action(Instant::now()) {
                Action::Register { server } => self.register(server, ctx),
                Action::Heartbeat { server } => self.heartbeat(server, ctx),
                Action::WatchAllocs { server, index } => self.watch(server, index, ctx),
                Action::UpdateAllocs { server, batch } => self.send_updates(server, batch, ctx),
                Action::Wait(until) => return self.wake_at(until, ctx),
            }
        }
    }

    fn wake_at(&mut self, until: Option<Instant>, ctx: &mut Context<Self>) {
        if let Some(timer) = self.timer.take() {
            ctx.cancel_future(timer);
        }
        if let Some(at) = until {
            let wait = at.saturating_duration_since(Instant::now());
            self.timer = Some(ctx.run_later(wait, |act, ctx| {
                act.timer = None;
                act.drive(ctx);
            }));
        }
    }

    /// The readiness check to run before a registration or heartbeat: until
    /// it first passes.
    fn pending_check(&self) -> Option<(String, PathBuf, DriverSet)> {
        (!self.ready).then(|| {
            (
                self.readiness_check.clone(),
                self.data_dir.clone(),
                self.drivers.clone(),
            )
        })
    }

    /// Runs the readiness check (until it first passes), then registers.
    fn register(&mut self, server: String, ctx: &mut Context<Self>) {
        let check = self.pending_check();
        let mut node = (*self.node).clone();
        let (http, url) = (self.http.clone(), wire::register_url(&server));
        let fut = async move {
            let ready = is_ready(check, true).await;
            node.status = if ready {
                NodeStatus::Ready
            } else {
                NodeStatus::Initializing
            };
            let body = wire::register_body(&node);
            // The node's secret is its token (under ACLs, what proves a
            // registration comes from the node itself).
            let secret = node.secret_id.clone();
            let reply = blocking(move || {
                read_json(
                    http.put(&url)
                        .set(wire::TOKEN_HEADER, &secret)
                        .send_json(body),
                )
            })
            .await;
            (ready, reply)
        };
        ctx.spawn(fut.into_actor(self).map(move |(ready, reply), act, ctx| {
            let now = Instant::now();
            match reply {
                Ok(v) => {
                    act.ready = ready;
                    tracing::info!(node_id = %act.node.id, ready, %server, "node registered");
                    act.session.registered(&NodeAnswer::from_json(&v), now);
                }
                Err(e) => {
                    tracing::warn!(error = %e, %server, "registration failed");
                    act.session
                        .request_failed(Request::Register, &server, &e, now);
                }
            }
            act.drive(ctx);
        }));
    }

    fn heartbeat(&mut self, server: String, ctx: &mut Context<Self>) {
        let check = self.pending_check();
        let (http, url, secret) = (
            self.http.clone(),
            wire::heartbeat_url(&server, &self.node.id),
            self.node.secret_id.clone(),
        );
        let fut = async move {
            let ready = is_ready(check, false).await;
            let body = wire::heartbeat_body(ready);
            let reply = blocking(move || {
                read_json(
                    http.put(&url)
                        .set(wire::TOKEN_HEADER, &secret)
                        .send_json(body),
                )
            })
            .await;
            (ready, reply)
        };
        ctx.spawn(
            fut.into_actor(self)
                .map(move |(ready, reply), act, ctx| {
                    let now = Instant::now();
                    match reply {
                        Ok(v) => {
                            act.ready = ready;
                            act.session.heartbeat_answered(&NodeAnswer::from_json(&v), now);
                            act.catalog.set_servers(act.session.servers().to_vec());
                        }
                        Err(e) => {
                            if matches!(e, Failure::Status(404, _)) {
                                tracing::warn!(%server, "the servers no longer know this node; registering again");
                            } else {
                                tracing::warn!(error = %e, %server, "heartbeat failed");
                            }
                            act.session
                                .request_failed(Request::Heartbeat, &server, &e, now);
                        }
                    }
                    act.drive(ctx);
                }),
        );
    }

    /// One blocking query for the node's allocations.
    fn watch(&mut self, server: String, index: u64, ctx: &mut Context<Self>) {
        let url = wire::watch_url(&server, &self.node.id, index, WATCH_WAIT);
        let (http, secret) = (self.http.clone(), self.node.secret_id.clone());
        let fut = blocking(move || {
            let r = http
                .get(&url)
                .set(wire::TOKEN_HEADER, &secret)
                .call()
                .map_err(failure)?;
            let index = r
                .header("X-Nomad-Index")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let body: Vec<Value> = r
                .into_json()
                .map_err(|e| Failure::BadAnswer(e.to_string()))?;
            Ok((index, parse_allocs(body).map_err(Failure::BadAnswer)?))
        });
        ctx.spawn(fut.into_actor(self).map(move |reply, act, ctx| {
            let now = Instant::now();
            match reply {
                Ok((index, allocs)) => {
                    if act.session.allocs_answered(index, now) {
                        act.figures.sync(&allocs);
                        if let Some(m) = &act.manager {
                            m.do_send(SyncAllocs { allocs });
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, %server, "watching allocations failed");
                    act.session
                        .request_failed(Request::WatchAllocs, &server, &e, now);
                }
            }
            act.drive(ctx);
        }));
    }

    fn send_updates(
        &mut self,
        server: String,
        batch: BTreeMap<AllocId, AllocUpdate>,
        ctx: &mut Context<Self>,
    ) {
        let updates: Vec<AllocClientUpdate> = batch
            .values()
            .map(|u| AllocClientUpdate {
                id: u.alloc_id,
                client_status: u.client_status,
                client_description: u.client_description.clone(),
                task_states: u.task_states.clone(),
                node_failure: u.node_failure,
                modify_time: crate::now_nanos(),
                deployment_status: u.deployment_status.clone(),
            })
            .collect();
        let (http, url, secret) = (
            self.http.clone(),
            wire::update_allocs_url(&server, &self.node.id),
            self.node.secret_id.clone(),
        );
        let body = wire::update_allocs_body(&updates);
        let fut = blocking(move || {
            http.put(&url)
                .set(wire::TOKEN_HEADER, &secret)
                .send_json(body)
                .map(|_| ())
                .map_err(failure)
        });
        ctx.spawn(fut.into_actor(self).map(move |reply, act, ctx| {
            let now = Instant::now();
            match reply {
                Ok(()) => act.session.updates_sent(now),
                Err(e) => {
                    tracing::warn!(error = %e, %server, "reporting allocation status failed; retrying");
                    act.session.updates_failed(batch, &server, &e, now);
                }
            }
            act.drive(ctx);
        }));
    }
}

impl ClientAgent {
    /// Sends the next service registration or removal the catalog needs,
    /// to the server the session talks to now.
    fn sync_services(&mut self, ctx: &mut Context<Self>) {
        if self.services_retry.is_some() {
            return;
        }
        let Some(call) = self.services.next_call() else {
            return;
        };
        let server = self.session.current_server().to_string();
        let (http, secret, node) = (self.http.clone(), self.node.secret_id.clone(), self.node.id);
        let fut = blocking(move || {
            let (url, body) = match &call {
                SyncCall::Register { services, .. } => (
                    wire::register_services_url(&server, &node),
                    serde_json::json!({ "Services": services }),
                ),
                SyncCall::Deregister { allocs } => (
                    wire::deregister_services_url(&server, &node),
                    serde_json::json!({ "AllocIDs": allocs }),
                ),
            };
            read_json(
                http.put(&url)
                    .set(wire::TOKEN_HEADER, &secret)
                    .send_json(body),
            )
        });
        ctx.spawn(fut.into_actor(self).map(|reply, act, ctx| {
            match reply {
                Ok(_) => act.services.call_done(true),
                // The servers refused it for good (the allocation is gone
                // or not this node's): asking again would not help.
                Err(Failure::Status(code, body)) if (400..500).contains(&code) && code != 404 => {
                    tracing::warn!(code, %body, "service registration refused");
                    act.services.call_done(true);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "service registration failed; retrying");
                    act.services.call_done(false);
                    act.services_retry = Some(ctx.run_later(SERVICES_RETRY, |act, ctx| {
                        act.services_retry = None;
                        act.sync_services(ctx);
                    }));
                    return;
                }
            }
            act.sync_services(ctx);
        }));
    }
}

/// Runs the readiness check when one is pending; a failed check is logged
/// when `log` (the registration's) and reads as not ready.
async fn is_ready(check: Option<(String, PathBuf, DriverSet)>, log: bool) -> bool {
    let Some((cmd, dir, drivers)) = check else {
        return true;
    };
    match check_readiness(&cmd, &dir, &drivers, READINESS_TIMEOUT).await {
        Ok(()) => true,
        Err(why) => {
            if log {
                tracing::warn!(reason = %why, "node not ready yet");
            }
            false
        }
    }
}

/// A request's JSON answer, or why there is none.
fn read_json(response: Result<ureq::Response, ureq::Error>) -> Reply<Value> {
    response
        .map_err(failure)?
        .into_json::<Value>()
        .map_err(|e| Failure::BadAnswer(e.to_string()))
}

fn failure(e: ureq::Error) -> Failure {
    match e {
        ureq::Error::Status(code, r) => Failure::Status(code, r.into_string().unwrap_or_default()),
        other => Failure::Unreachable(other.to_string()),
    }
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

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Reply<T> + Send + 'static) -> Reply<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(Failure::Unreachable(format!("request task failed: {e}"))))
}

impl Actor for ClientAgent {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let manager = AllocManager::new(AllocManagerConfig {
            node: self.node.clone(),
            data_dir: self.data_dir.clone(),
            drivers: self.drivers.clone(),
            host_env: Arc::new(crate::task_dir::host_env()),
            updates: ctx.address().recipient(),
            ephemeral: false,
            catalog: self.catalog.clone(),
        })
        .start();
        // Re-attach to what a previous client left running before the
        // servers' view arrives, so a sync does not start it twice.
        manager.do_send(RestoreAll);
        self.manager = Some(manager);
        self.drive(ctx);
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
        self.services.want(update.alloc_id, update.services.clone());
        self.sync_services(ctx);
        if self
            .session
            .queue_update(update.alloc_id, update, Instant::now())
        {
            self.drive(ctx);
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

impl Handler<ExecAlloc> for ClientAgent {
    type Result = ResponseFuture<Result<crate::driver::ExecSession, ControlError>>;

    fn handle(&mut self, msg: ExecAlloc, _ctx: &mut Context<Self>) -> Self::Result {
        let id = msg.alloc_id;
        let manager = self.manager.clone();
        Box::pin(async move {
            match manager {
                Some(m) => m
                    .send(msg)
                    .await
                    .unwrap_or(Err(ControlError::UnknownAlloc(id))),
                None => Err(ControlError::UnknownAlloc(id)),
            }
        })
    }
}

impl Handler<GetAllocChecks> for ClientAgent {
    type Result = ResponseFuture<Option<Vec<crate::checks::CheckResult>>>;

    fn handle(&mut self, msg: GetAllocChecks, _ctx: &mut Context<Self>) -> Self::Result {
        let manager = self.manager.clone();
        Box::pin(async move { manager?.send(msg).await.ok().flatten() })
    }
}

/// A user's collection of one finished allocation, handed to the manager.
impl Handler<CollectAlloc> for ClientAgent {
    type Result = ResponseFuture<Result<(), GcError>>;

    fn handle(&mut self, msg: CollectAlloc, _ctx: &mut Context<Self>) -> Self::Result {
        let manager = self.manager.clone();
        Box::pin(async move {
            match manager {
                Some(m) => m
                    .send(msg.clone())
                    .await
                    .unwrap_or(Err(GcError::UnknownAlloc(msg.0))),
                None => Err(GcError::UnknownAlloc(msg.0)),
            }
        })
    }
}

/// A user's collection of every finished allocation of this node.
impl Handler<CollectAll> for ClientAgent {
    type Result = ResponseFuture<usize>;

    fn handle(&mut self, msg: CollectAll, _ctx: &mut Context<Self>) -> Self::Result {
        let manager = self.manager.clone();
        Box::pin(async move {
            match manager {
                Some(m) => m.send(msg).await.unwrap_or(0),
                None => 0,
            }
        })
    }
}

/// Replaces the servers the client talks to (`PUT /v1/agent/servers`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetServers(pub Vec<String>);

impl Handler<SetServers> for ClientAgent {
    type Result = ();
    fn handle(&mut self, msg: SetServers, _ctx: &mut Context<Self>) {
        tracing::info!(servers = ?msg.0, "servers set by the operator");
        self.session.set_servers(&msg.0);
        self.catalog.set_servers(self.session.servers().to_vec());
    }
}

/// The servers the client talks to now, in failover order.
#[derive(Message)]
#[rtype(result = "Vec<String>")]
pub struct GetServers;

impl Handler<GetServers> for ClientAgent {
    type Result = Vec<String>;
    fn handle(&mut self, _msg: GetServers, _ctx: &mut Context<Self>) -> Vec<String> {
        self.session.servers().to_vec()
    }
}

impl Handler<StopClient> for ClientAgent {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, msg: StopClient, _ctx: &mut Context<Self>) -> Self::Result {
        // No more heartbeats or queries; the last updates go out at once.
        self.session.shut_down(Instant::now());
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
            act.drive(ctx);
        }))
    }
}
