//! The agent: one process running a server, a client, or both — and the
//! handle a program holds when it embeds herder.
//!
//! An [`Agent`] runs on a thread of its own (`herder-agent`) with its own
//! actix system; the HTTP API adds two worker threads of actix-web. The
//! caller's runtime is never used for herder's actors, so `Agent::start`
//! works the same from a multi-threaded `#[tokio::main]`, a current-thread
//! runtime, an actix system or a plain `futures` executor. The parts come
//! up in dependency order (data dir, state store, HTTP API, client) and go
//! down in reverse, so nothing acknowledged is lost: the HTTP server stops
//! accepting and drains its requests before the store flushes and closes.
//!
//! The handle is `Send + Sync + Clone`. Dropping the last clone shuts the
//! agent down and waits for it (the port and the data dir's lock are free
//! when the drop returns), so an error path cannot leak a live scheduler.

use actix::{Actor, Addr};
use futures::channel::oneshot;
use herder_client::driver::{DriverOptions, DriverSet};
use herder_client::node_protocol::normalize_server;
use herder_client::server_link::{ClientAgent, ClientAgentConfig, StopClient};
use herder_common::config::AgentConfig;
use herder_common::nomad_metrics::Board;
use herder_http::{self as http, HttpServer};
#[doc(hidden)]
pub use herder_http::{AgentInfo, ClientHandle};
use herder_server::events::{EventFilter, EventStream};
use herder_server::server::{Server, ServerError, ServerHandle};
use herder_server::server_api::ServerApi;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Why an agent did not start. `Display` states the failure; the cause
/// (an I/O or store error) is its `source()`, never repeated in it.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The data dir could not be created or used.
    #[error("data dir {path}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The server did not start (its state store, its worker pool).
    #[error(transparent)]
    Server(#[from] ServerError),
    /// The client did not start.
    #[error("client: {0}")]
    Client(String),
    /// The HTTP API could not bind its address.
    #[error("HTTP API on {addr}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    /// The agent's own thread could not be started.
    #[error("starting the agent's thread")]
    Thread(#[source] std::io::Error),
    /// The agent's thread ended before it reported (it panicked).
    #[error("the agent's thread ended while starting")]
    ThreadEnded,
    /// The call needs a server and this agent runs only a client.
    #[error("this agent runs no server")]
    NoServer,
}

/// A running herder agent: a server, a client, or both, with the HTTP API.
///
/// Cheap to clone; every clone is a handle on the same agent. The agent
/// runs until [`Agent::shutdown`] is called on any handle or the last
/// handle is dropped; either way the HTTP port and the data dir's lock are
/// released before the call (or the drop) returns.
///
/// ```
/// use herder_actors::{Agent, AgentConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Any executor will do: herder brings its own threads.
/// futures::executor::block_on(async {
///     let mut config = AgentConfig::dev()?; // server + client, API on a free loopback port
///     config.client.enabled = false;
///     let agent = Agent::start(config, true).await?;
///     assert!(agent.http_addr().ip().is_loopback());
///     let other_handle = agent.clone();
///     drop(agent); // still running: another handle exists
///     assert!(other_handle.api().is_some());
///     other_handle.shutdown().await;
///     Ok::<(), Box<dyn std::error::Error>>(())
/// })
/// # }
/// ```
#[derive(Clone)]
pub struct Agent {
    running: Arc<Running>,
}

/// The one owner of the agent's thread; dropped with the last handle.
struct Running {
    info: Arc<AgentInfo>,
    http_addr: SocketAddr,
    /// Tells the agent's thread to shut down (taken once).
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// Turns true (or closes) when the agent's thread has shut down.
    stopped: tokio::sync::watch::Receiver<bool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let info = &self.running.info;
        f.debug_struct("Agent")
            .field("http_addr", &self.running.http_addr)
            .field("data_dir", &info.data_dir)
            .field("server", &info.config.server.enabled)
            .field("client", &info.config.client.enabled)
            .field("stopped", &*self.running.stopped.borrow())
            .finish()
    }
}

/// What the agent's thread reports once it is up.
struct Started {
    info: Arc<AgentInfo>,
    http_addr: SocketAddr,
}

impl Agent {
    /// Starts the agent described by `config` on a thread of its own and
    /// returns once its HTTP API is bound and its server's state is open.
    /// With `dev_temp_dir`, state lives in a new temporary directory
    /// (removed at shutdown) instead of `config.data_dir`.
    ///
    /// The returned future needs no particular executor: herder runs its
    /// actors on its own thread and only reports back through a channel.
    pub async fn start(config: AgentConfig, dev_temp_dir: bool) -> Result<Agent, AgentError> {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let (stopped_tx, stopped_rx) = tokio::sync::watch::channel(false);
        let thread = std::thread::Builder::new()
            .name("herder-agent".into())
            .spawn(move || run_agent_thread(config, dev_temp_dir, ready_tx, stop_rx, stopped_tx))
            .map_err(AgentError::Thread)?;
        let started = match ready_rx.await {
            Ok(Ok(started)) => started,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(AgentError::ThreadEnded);
            }
        };
        Ok(Agent {
            running: Arc::new(Running {
                info: started.info,
                http_addr: started.http_addr,
                stop: Mutex::new(Some(stop_tx)),
                stopped: stopped_rx,
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// The address the HTTP API listens on (useful with port 0).
    pub fn http_addr(&self) -> SocketAddr {
        self.running.http_addr
    }

    /// The data dir in use (with `dev_temp_dir`, the temporary one).
    pub fn data_dir(&self) -> &Path {
        &self.running.info.data_dir
    }

    /// The configuration the agent was started with.
    pub fn config(&self) -> &AgentConfig {
        &self.running.info.config
    }

    /// The server's internal parts (store, actors), for herder's own tests
    /// and tools; not part of the embedding contract.
    #[doc(hidden)]
    pub fn server(&self) -> Option<&ServerHandle> {
        self.running.info.server.as_ref()
    }

    /// Typed calls into the server (register jobs and nodes, read
    /// allocations, ...), the embedding equivalent of the HTTP API; `None`
    /// on a client-only agent. The [`ServerApi`] does not keep the agent
    /// alive: once the agent is shut down its calls fail with
    /// `ServerApiError::Unavailable`.
    pub fn api(&self) -> Option<ServerApi> {
        self.running.info.server.clone().map(ServerApi::new)
    }

    /// The ID of this agent's client node, once its client has started.
    pub fn client_node_id(&self) -> Option<herder::structs::NodeId> {
        self.running.info.client_node_id.get().copied()
    }

    /// The server's event stream, as `GET /v1/event/stream` serves it:
    /// every change from now on (or, with `filter.from_index`, from that
    /// index while the server's replay buffer still holds it) whose topic,
    /// key and namespace `filter` selects. The stream ends when the agent
    /// shuts down, or when its reader falls too far behind (resume with
    /// `from_index` set to the last index seen plus one).
    pub fn events(&self, filter: EventFilter) -> Result<EventStream, AgentError> {
        let server = self
            .running
            .info
            .server
            .as_ref()
            .ok_or(AgentError::NoServer)?;
        Ok(EventStream::subscribe(
            &server.store,
            filter,
            Some(self.running.info.shutting_down.subscribe()),
        ))
    }

    /// Shuts the agent down, whatever other handles exist: open event
    /// streams, blocking queries and log follows end; the HTTP server
    /// stops accepting and finishes the requests in flight; the server's
    /// state is flushed and closed. Returns once all of that is done, the
    /// port is free and the data dir can be opened again.
    pub async fn shutdown(self) {
        self.running.request_stop();
        let mut stopped = self.running.stopped.clone();
        // An error means the agent's thread is gone: stopped as well.
        let _ = stopped.wait_for(|down| *down).await;
        self.running.join();
    }
}

impl Running {
    fn request_stop(&self) {
        let sender = match self.stop.lock() {
            Ok(mut guard) => guard.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(sender) = sender {
            let _ = sender.send(());
        }
    }

    /// Waits for the agent's thread to end (at once after `stopped`).
    fn join(&self) {
        let thread = match self.thread.lock() {
            Ok(mut guard) => guard.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(thread) = thread {
            // Never join from the agent's own thread (it cannot hold a
            // handle, but a panic there must not turn into a deadlock).
            if thread.thread().id() != std::thread::current().id() && thread.join().is_err() {
                tracing::error!("the agent's thread panicked");
            }
        }
    }
}

impl Drop for Running {
    /// The last handle is gone: shut down and wait, so that the port and
    /// the data dir are free when the drop returns. This blocks the
    /// dropping thread for the shutdown (well under a second).
    fn drop(&mut self) {
        self.request_stop();
        self.join();
    }
}

/// The body of the agent's thread: start, report, wait for the stop, shut
/// down in order, then let the actix system's arbiters go.
fn run_agent_thread(
    config: AgentConfig,
    dev_temp_dir: bool,
    ready: oneshot::Sender<Result<Started, AgentError>>,
    stop: oneshot::Receiver<()>,
    stopped: tokio::sync::watch::Sender<bool>,
) {
    let system = actix_rt::System::new();
    system.block_on(async move {
        let parts = match Parts::start(config, dev_temp_dir).await {
            Ok(parts) => parts,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let started = Started {
            info: parts.info.clone(),
            http_addr: parts.http.addr(),
        };
        // A caller that went away before the answer means stop at once;
        // otherwise a dropped stop sender (last handle gone) stops too.
        if ready.send(Ok(started)).is_ok() {
            let _ = stop.await;
        }
        parts.shutdown().await;
    });
    drop(system);
    stopped.send_replace(true);
}

/// The parts of a running agent, owned by its thread.
struct Parts {
    info: Arc<AgentInfo>,
    http: HttpServer,
    server: Option<Server>,
    client: Option<Addr<ClientAgent>>,
    /// `-dev`: the client stops its tasks on shutdown instead of leaving
    /// them for a restarted client to re-attach to.
    throwaway: bool,
    /// Removed on shutdown: `-dev` state is throwaway, as in Nomad.
    _temp_dir: Option<tempfile::TempDir>,
}

impl Parts {
    /// Brings the parts up in dependency order; on a failure, stops what
    /// had started.
    async fn start(mut config: AgentConfig, dev_temp_dir: bool) -> Result<Parts, AgentError> {
        let (data_dir, temp) = prepare_data_dir(&config.data_dir, dev_temp_dir)?;
        // The HTTP API is bound before the server starts and served once
        // the server is up: a cluster member advertises its HTTP address
        // to the other servers (they hand it to client nodes), and with
        // `-http-port 0` only the bound listener knows the port. From here
        // on `ports.http` is the port actually bound.
        let listener = http::bind(&config).map_err(|e| AgentError::Bind {
            addr: e.addr,
            source: e.source,
        })?;
        if let Ok(bound) = listener.local_addr() {
            config.ports.http = bound.port();
        }
        let server = if config.server.enabled {
            Some(Server::start(&config, &data_dir).await?)
        } else {
            None
        };
        let nomad_metrics = server
            .as_ref()
            .map_or_else(Board::new, |s| s.handle().nomad_metrics.clone());
        let info = Arc::new(AgentInfo {
            config,
            data_dir,
            started_at: SystemTime::now(),
            http_addr: std::sync::OnceLock::new(),
            server: server.as_ref().map(|s| s.handle().clone()),
            client_node_id: std::sync::OnceLock::new(),
            shutting_down: tokio::sync::watch::Sender::new(false),
            nomad_metrics,
            client: std::sync::OnceLock::new(),
            own_server: std::sync::OnceLock::new(),
        });
        let http = match http::start(info.clone(), listener).await {
            Ok(http) => http,
            Err(e) => {
                if let Some(server) = server {
                    server.stop().await;
                }
                return Err(AgentError::Bind {
                    addr: e.addr,
                    source: e.source,
                });
            }
        };
        let _ = info.http_addr.set(http.addr());
        let client = match start_client(&info, http.addr()) {
            Ok(c) => {
                if let Some(handle) = &c {
                    let _ = info.client.set(handle.clone());
                }
                c.map(|handle| handle.agent)
            }
            Err(e) => {
                info.shutting_down.send_replace(true);
                http.stop().await;
                if let Some(server) = server {
                    server.stop().await;
                }
                return Err(e);
            }
        };
        Ok(Parts {
            info,
            http,
            server,
            client,
            throwaway: temp.is_some(),
            _temp_dir: temp,
        })
    }

    /// Stops accepting requests, lets the ones in flight finish, then
    /// closes the parts below the API.
    async fn shutdown(self) {
        if let Some(client) = &self.client {
            let _ = client
                .send(StopClient {
                    stop_tasks: self.throwaway,
                })
                .await;
        }
        // Streams and parked queries end before the HTTP server stops:
        // they would otherwise hold its graceful stop for its timeout.
        self.info.shutting_down.send_replace(true);
        if let Some(server) = &self.server {
            server.begin_stop();
        }
        self.http.stop().await;
        if let Some(server) = self.server {
            server.stop().await;
        }
        tracing::info!("agent stopped");
    }
}
/// Fingerprints this machine and starts the client's link to the servers:
/// the configured ones, or this agent's own API.
fn start_client(info: &AgentInfo, local: SocketAddr) -> Result<Option<ClientHandle>, AgentError> {
    let c = &info.config.client;
    if !c.enabled {
        return Ok(None);
    }
    let (drivers, unknown) =
        DriverSet::from_names(&c.drivers, &DriverOptions::from_client_config(c));
    if !unknown.is_empty() {
        return Err(AgentError::Client(format!(
            "unknown drivers in client.drivers: {}",
            unknown.join(", ")
        )));
    }
    let mut config = info.config.clone();
    config.data_dir = info.data_dir.clone();
    // The node advertises the port actually bound (with `-http-port 0` the
    // configured one is 0), so `alloc logs` can reach this agent.
    config.ports.http = local.port();
    let node = herder_client::fingerprint::fingerprint(&config, &drivers)
        .map_err(|e| AgentError::Client(format!("fingerprinting this machine: {e}")))?;
    // The configured servers in failover order, or this agent's own API;
    // over HTTPS, presenting this agent's certificate, when `tls.http`.
    let tls = config
        .tls
        .servers_client(&config.region)
        .map_err(|e| AgentError::Client(e.to_string()))?;
    let normalize = |s: &str| match &tls {
        Some(_) if !s.contains("://") => normalize_server(&format!("https://{s}")),
        _ => normalize_server(s),
    };
    let own = normalize(&local.to_string());
    let servers: Vec<String> = if c.servers.is_empty() {
        vec![own.clone()]
    } else {
        c.servers.iter().map(|s| normalize(s)).collect()
    };
    let server = servers.first().cloned().unwrap_or(own);
    tracing::info!(node_id = %node.id, servers = ?servers, "client starting");
    let _ = info.client_node_id.set(node.id);
    let (node_id, node_secret) = (node.id, node.secret_id.clone());
    let agent = ClientAgent::new(ClientAgentConfig {
        servers,
        node,
        data_dir: info.data_dir.clone(),
        drivers,
        readiness_check: c.readiness_check.clone(),
        metrics: info.nomad_metrics.clone(),
        tls,
    })
    .start();
    Ok(Some(ClientHandle {
        agent,
        node_id,
        node_secret,
        server,
    }))
}

fn prepare_data_dir(
    configured: &Path,
    temporary: bool,
) -> Result<(PathBuf, Option<tempfile::TempDir>), AgentError> {
    if temporary {
        let dir = tempfile::Builder::new()
            .prefix("herder-dev-")
            .tempdir()
            .map_err(|source| AgentError::DataDir {
                path: std::env::temp_dir(),
                source,
            })?;
        return Ok((dir.path().to_path_buf(), Some(dir)));
    }
    std::fs::create_dir_all(configured).map_err(|source| AgentError::DataDir {
        path: configured.to_path_buf(),
        source,
    })?;
    Ok((configured.to_path_buf(), None))
}
