//! The HTTP API: Nomad's paths, JSON shapes, status codes and headers.
//!
//! Handlers are thin: they decode and check the request, ask the state
//! store or an actor, and encode the answer. Bad input is a 4xx with a
//! message that says what to fix; a handler never panics on user input.

mod acl_remote;
mod acl_routes;
pub mod acl_rules;
mod agent_cluster;
mod agent_info;
mod agent_routes;
mod alloc_checks_routes;
mod alloc_routing;
mod autopilot_routes;
mod body;
mod client_alloc_routes;
mod client_exec_routes;
mod client_fs_routes;
mod client_routes;
mod client_stats_routes;
mod cluster_reads;
mod deployment_routes;
mod errors;
mod eval_alloc_routes;
mod event_stream;
pub mod filter;
mod forward;
mod fs_routes;
mod host_routes;
mod in_flight;
mod job_body;
mod job_routes;
mod keyring_routes;
mod metrics_routes;
mod monitor_routes;
mod namespace_routes;
mod node_routes;
mod operator_routes;
mod plan;
mod pprof_routes;
pub mod query;
mod raft_routes;
mod region_routes;
mod search_routes;
mod service_routes;
mod snapshot_routes;
mod stream_frame;
mod stubs;
mod system_routes;
mod ui_routes;
mod variable_routes;

use actix_web::{web, App};
pub use agent_info::{AgentInfo, ClientHandle};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

pub use errors::ApiError;

/// Longest a graceful stop waits for the requests in flight.
const GRACEFUL_STOP: std::time::Duration = std::time::Duration::from_secs(10);

/// A bound, running HTTP server.
pub struct HttpServer {
    addr: SocketAddr,
    handle: actix_web::dev::ServerHandle,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    in_flight: in_flight::InFlight,
}

impl HttpServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Graceful stop: no new connections, requests in flight complete
    /// (for at most 10 s), then the idle connections close at once.
    /// Streams and parked queries end on the agent's shutdown signal,
    /// which is sent before this.
    pub async fn stop(self) {
        self.handle.pause().await;
        if tokio::time::timeout(GRACEFUL_STOP, self.in_flight.idle())
            .await
            .is_err()
        {
            tracing::warn!("HTTP requests still in flight after {GRACEFUL_STOP:?}; closing");
        }
        self.handle.stop(false).await;
        if let Err(e) = self.task.await {
            tracing::warn!(error = %e, "HTTP server task ended abnormally");
        }
    }
}

/// The HTTP API could not bind its address.
#[derive(Debug, thiserror::Error)]
#[error("HTTP API on {addr}")]
pub struct BindError {
    pub addr: String,
    pub source: std::io::Error,
}

/// Binds the API's address (`bind_addr`, `ports.http`) without serving
/// yet: the agent binds first so that the server it starts next knows the
/// port it will be reached at (`-http-port 0` included).
pub fn bind(config: &herder_common::config::AgentConfig) -> Result<TcpListener, BindError> {
    let (host, port) = config.http_bind();
    TcpListener::bind((host.as_str(), port)).map_err(|source| BindError {
        addr: format!("{host}:{port}"),
        source,
    })
}

/// Starts serving the API on `listener` (from [`bind`]): HTTPS only when
/// `tls.http` is set (a plain HTTP request then fails its handshake).
pub async fn start(info: Arc<AgentInfo>, listener: TcpListener) -> Result<HttpServer, BindError> {
    metrics_routes::install_recorder();
    let bound = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let tls = info.config.tls.http_listener().map_err(|e| BindError {
        addr: bound.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let body_limit = info.config.limits.http_max_body_bytes;
    let data = web::Data::from(info.clone());
    let in_flight = in_flight::InFlight::default();
    let tracker = in_flight.clone();
    let acl_state = web::Data::new(acl_rules::AclState::default());
    let server = actix_web::HttpServer::new(move || {
        let tracker = tracker.clone();
        App::new()
            .wrap(actix_web::middleware::from_fn(
                cluster_reads::consistent_reads,
            ))
            // Outside the read barrier: a refused request costs nothing.
            .wrap(actix_web::middleware::from_fn(acl_rules::enforce))
            .wrap_fn(metrics_routes::observe_request)
            .wrap(actix_web::middleware::ErrorHandlers::new().handler(
                actix_web::http::StatusCode::METHOD_NOT_ALLOWED,
                errors::explain_method_not_allowed,
            ))
            .app_data(data.clone())
            .app_data(acl_state.clone())
            .app_data(web::JsonConfig::default().limit(body_limit))
            .app_data(web::PayloadConfig::new(body_limit))
            .app_data(web::PathConfig::default().error_handler(errors::path_error))
            .configure(acl_routes::configure)
            .configure(agent_routes::configure)
            .configure(monitor_routes::configure)
            .configure(pprof_routes::configure)
            .configure(host_routes::configure)
            .configure(client_routes::configure)
            .configure(client_alloc_routes::configure)
            .configure(client_exec_routes::configure)
            .configure(alloc_checks_routes::configure)
            .configure(metrics_routes::configure)
            .configure(job_routes::configure)
            .configure(eval_alloc_routes::configure)
            .configure(deployment_routes::configure)
            .configure(node_routes::configure)
            .configure(operator_routes::configure)
            .configure(autopilot_routes::configure)
            .configure(snapshot_routes::configure)
            .configure(system_routes::configure)
            .configure(region_routes::configure)
            .configure(namespace_routes::configure)
            .configure(search_routes::configure)
            .configure(service_routes::configure)
            .configure(variable_routes::configure)
            .configure(keyring_routes::configure)
            .configure(raft_routes::configure)
            .configure(event_stream::configure)
            // Every agent: one without the allocation routes the request.
            .configure(fs_routes::configure)
            .configure(client_fs_routes::configure)
            .configure(client_stats_routes::configure)
            .configure(ui_routes::configure)
            .default_service(web::to(errors::not_found))
            // Outermost: counts every request until its answer is sent.
            .wrap_fn(move |req, service| tracker.track(req, service))
    })
    .workers(2)
    .shutdown_timeout(10)
    .disable_signals();
    let server = match tls {
        Some(tls) => server.listen_rustls_0_23(listener, Arc::unwrap_or_clone(tls)),
        None => server.listen(listener),
    }
    .map_err(|source| BindError {
        addr: bound.clone(),
        source,
    })?;
    let addr = server.addrs().first().copied().ok_or_else(|| BindError {
        addr: bound,
        source: std::io::Error::other("no address bound"),
    })?;
    let server = server.run();
    let handle = server.handle();
    let task = tokio::spawn(server);
    Ok(HttpServer {
        addr,
        handle,
        task,
        in_flight,
    })
}
