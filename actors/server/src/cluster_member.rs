//! A server that is one of several: its replica of the state joins the
//! Raft cluster (herder-raft's `Cluster`), its RPC port serves the other
//! servers (Raft, forwarded writes, status and membership calls), and the
//! leader's duties follow leadership: started when this server becomes
//! leader, stopped when it stops being one.
//!
//! A server runs this way when `server.bootstrap_expect` is above 1 or
//! `server.retry_join` names servers, or when its data dir already holds a
//! Raft log (a member stays a member). Otherwise it is a single server
//! with no Raft at all, the cheaper path `-dev` takes.

use crate::leader_duties::LeaderDuties;
use crate::server::ServerError;
use crate::server::ServerHandle;
use crate::server_api::forward;
use herder::state::StateStore;
use herder_common::config::AgentConfig;
use herder_raft::cluster::rpc;
use herder_raft::{config_with, Cluster, ClusterKey, ClusterSettings, ServerNode};
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;

/// Whether this server is (or becomes) a cluster member.
pub fn is_member(config: &AgentConfig, data_dir: &Path) -> bool {
    config.server.clustered() || data_dir.join(herder_raft::LOG_DIR).exists()
}

/// This server's replica and its bound (not yet served) RPC port.
pub struct Replica {
    pub cluster: Cluster,
    pub rpc: TcpListener,
    /// The RPC port's TLS (always mTLS) when `tls.rpc` is set.
    pub rpc_tls: Option<Arc<rustls::ServerConfig>>,
}

/// Binds the RPC port, then starts the replica over `store` (whose writes
/// go through the log from here on).
pub async fn start_replica(
    config: &AgentConfig,
    data_dir: &Path,
    store: &StateStore,
) -> Result<Replica, ServerError> {
    let key = ClusterKey::from_base64(&config.server.encrypt)
        .map_err(|e| ServerError::Cluster(format!("server.encrypt: {e}")))?;
    let tls_error = |e: herder_common::tls::TlsError| ServerError::Cluster(e.to_string());
    let rpc_tls = config.tls.rpc_listener(&config.region).map_err(tls_error)?;
    let tls = config.tls.rpc_client(&config.region).map_err(tls_error)?;
    let (host, _) = config.http_bind();
    let rpc = TcpListener::bind((host.as_str(), config.ports.rpc)).map_err(|source| {
        ServerError::RpcBind {
            addr: format!("{host}:{}", config.ports.rpc),
            source,
        }
    })?;
    let port = rpc
        .local_addr()
        .map_err(|source| ServerError::RpcBind {
            addr: host.clone(),
            source,
        })?
        .port();
    let raft = config_with(
        config.server.raft_snapshot_threshold,
        config.server.raft_trailing_logs,
    )
    .map_err(|e| ServerError::Cluster(format!("raft settings: {e}")))?;
    let settings = ClusterSettings {
        node: advertised_node(config, port),
        region: config.region.clone(),
        bootstrap_expect: config.server.bootstrap_expect,
        retry_join: config
            .server
            .retry_join
            .iter()
            .map(|a| with_rpc_port(a))
            .collect(),
        dead_server_cleanup: config.server.dead_server_cleanup,
        max_restore_bytes: config.limits.snapshot_max_bytes,
        key,
        tls,
        raft: Arc::new(raft),
        faults: None,
    };
    let cluster = Cluster::start(settings, data_dir, store.clone())
        .await
        .map_err(|e| ServerError::Cluster(e.to_string()))?;
    Ok(Replica {
        cluster,
        rpc,
        rpc_tls,
    })
}

/// This server as the membership records it. Its HTTP address is the one
/// clients are told (the `Servers` of a heartbeat answer), so it must be
/// the port actually bound: the agent binds the HTTP API before it starts
/// the server and puts the bound port in `ports.http`
/// (`herder_actors::agent`), so even `-http-port 0` advertises the real
/// port. (Binding first rather than telling the cluster later keeps the
/// entry right from the start: a later value would mean a founding or a
/// join with an incomplete entry, then an update of every member.)
fn advertised_node(config: &AgentConfig, rpc_port: u16) -> ServerNode {
    ServerNode {
        rpc_addr: config.rpc_advertise(rpc_port),
        http_addr: config.http_advertise(config.ports.http),
        name: format!("{}.{}", config.name_or_hostname(), config.region),
        version: env!("CARGO_PKG_VERSION").to_string(),
        datacenter: config.datacenter.clone(),
    }
}

/// A `retry_join` entry with Nomad's default RPC port when it names none.
pub fn with_rpc_port(addr: &str) -> String {
    let addr = addr.trim();
    if addr.parse::<std::net::SocketAddr>().is_ok()
        || addr
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        addr.to_string()
    } else {
        format!("{addr}:4647")
    }
}

/// Serves the RPC port: the cluster's calls and the leader's duties'
/// forwarded writes; over TLS (mTLS) only, when `tls` is given.
pub fn serve_rpc(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    cluster: Cluster,
    server: ServerHandle,
) -> Result<actix_web::dev::ServerHandle, ServerError> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let http = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .configure(rpc::configure(cluster.clone()))
            .configure(forward::configure(server.clone(), cluster.clone()))
    })
    .workers(2)
    .disable_signals()
    .shutdown_timeout(1);
    let http = match tls {
        Some(tls) => http.listen_rustls_0_23(listener, Arc::unwrap_or_clone(tls)),
        None => http.listen(listener),
    }
    .map_err(|source| ServerError::RpcBind { addr, source })?
    .run();
    let handle = http.handle();
    actix_rt::spawn(http);
    Ok(handle)
}

/// Serves the RPC port and starts following leadership with the server's
/// duties.
pub fn serve(
    replica: Replica,
    server: &ServerHandle,
) -> Result<actix_web::dev::ServerHandle, ServerError> {
    let rpc = serve_rpc(
        replica.rpc,
        replica.rpc_tls,
        replica.cluster.clone(),
        server.clone(),
    )?;
    actix_rt::spawn(follow_leadership(replica.cluster, server.duties.clone()));
    Ok(rpc)
}

/// Gains and loses the leader's duties as the cluster's duty leadership
/// changes ([`Cluster::duty_leadership`]: leading with a complete state,
/// no given-up write unsettled), until the cluster stops.
pub async fn follow_leadership(cluster: Cluster, duties: LeaderDuties) {
    let mut duty_leadership = cluster.duty_leadership();
    let mut leading = false;
    loop {
        let now = *duty_leadership.borrow_and_update();
        if now != leading {
            leading = now;
            tracing::info!(leader = now, "leadership changed");
            switch(&duties, now).await;
        }
        if duty_leadership.changed().await.is_err() {
            break;
        }
    }
    if leading {
        switch(&duties, false).await;
    }
}

async fn switch(duties: &LeaderDuties, leader: bool) {
    if leader {
        duties.gain().await;
    } else {
        duties.lose().await;
    }
}
