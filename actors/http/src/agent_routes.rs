//! `/v1/agent/*` and `/v1/status/leader`: about the agent itself.
//!
//! `/v1/agent/self` answers Nomad's `AgentSelf` shape: `config` (a free
//! map), `member` (the gossip member) and `stats`, a map of sections whose
//! values are all strings (`map[string]map[string]string` in Nomad's Go
//! API; `nomad agent-info` and `nomad node status -self` decode it).
//! A single server (no Raft) has no gossip pool: `join` joins nobody and
//! `force-leave` has nobody to remove, both answered as Nomad answers a
//! join that failed and a leave of an unknown member. A cluster member
//! answers them, `members` and the Raft stats from its cluster
//! ([`super::agent_cluster`]).
//!
//! `/v1/agent/schedulers/pause` and `/resume` are herder's own: they pause
//! and resume this server's scheduling workers (the web UI's buttons).

use super::agent_cluster;
use super::body::Body;
use super::query::QueryOptions;
use super::ApiError;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder_client::node_protocol::normalize_server;
use herder_client::server_link::{GetServers, SetServers};
use herder_raft::Cluster;
use herder_server::server_api::{ServerApi, SetWorkerConfig};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/agent/health", web::get().to(health))
        .route("/v1/agent/self", web::get().to(agent_self))
        .route("/v1/agent/members", web::get().to(members))
        .service(
            web::resource("/v1/agent/servers")
                .route(web::get().to(servers))
                .route(web::put().to(set_servers))
                .route(web::post().to(set_servers)),
        )
        .service(
            web::resource("/v1/agent/join")
                .route(web::put().to(join))
                .route(web::post().to(join)),
        )
        .service(
            web::resource("/v1/agent/force-leave")
                .route(web::put().to(force_leave))
                .route(web::post().to(force_leave)),
        )
        .route("/v1/agent/schedulers", web::get().to(workers))
        .route("/v1/agent/schedulers/config", web::get().to(worker_config))
        .route(
            "/v1/agent/schedulers/config",
            web::put().to(set_worker_config),
        )
        .route(
            "/v1/agent/schedulers/config",
            web::post().to(set_worker_config),
        )
        .service(
            web::resource("/v1/agent/schedulers/pause")
                .route(web::put().to(pause_workers))
                .route(web::post().to(pause_workers)),
        )
        .service(
            web::resource("/v1/agent/schedulers/resume")
                .route(web::put().to(resume_workers))
                .route(web::post().to(resume_workers)),
        );
}

/// The server's operations; a client-only agent has no workers.
fn server_api(info: &AgentInfo) -> Result<ServerApi, ApiError> {
    info.server.as_ref().map(ServerApi::of).ok_or_else(|| {
        ApiError::BadRequest("this agent runs no server, so no scheduling workers".into())
    })
}

/// `GET /v1/agent/schedulers`: every worker with its status (snake_case,
/// as Nomad's agent API).
async fn workers(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let reply = server_api(&info)?.workers().await?;
    Ok(HttpResponse::Ok().json(reply))
}

async fn worker_config(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let reply = server_api(&info)?.worker_config().await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// The body of `PUT /v1/agent/schedulers/config`; a field left out keeps
/// its current value.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerConfigRequest {
    num_schedulers: Option<i64>,
    enabled_schedulers: Option<Vec<String>>,
}

async fn set_worker_config(
    info: web::Data<AgentInfo>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let request: WorkerConfigRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("invalid worker configuration: {e}")))?;
    let reply = server_api(&info)?
        .set_worker_config(SetWorkerConfig {
            num_schedulers: request.num_schedulers,
            enabled_schedulers: request.enabled_schedulers,
        })
        .await?;
    Ok(HttpResponse::Ok().json(reply))
}

/// `PUT /v1/agent/schedulers/pause` (herder's own, Nomad has no HTTP
/// call for it): every worker of this server finishes the evaluation in
/// hand and takes no more until resumed; answers the workers as
/// `GET /v1/agent/schedulers` does.
async fn pause_workers(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let api = server_api(&info)?;
    api.pause_workers().await?;
    Ok(HttpResponse::Ok().json(api.workers().await?))
}

/// `PUT /v1/agent/schedulers/resume`: undoes the pause.
async fn resume_workers(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let api = server_api(&info)?;
    api.resume_workers().await?;
    Ok(HttpResponse::Ok().json(api.workers().await?))
}

/// Nomad's shape: `{"server": {"ok", "message"}, "client": {...}}`, with
/// only the roles this agent runs.
async fn health(info: web::Data<AgentInfo>) -> HttpResponse {
    let mut body = serde_json::Map::new();
    if info.config.server.enabled {
        body.insert("server".into(), json!({"ok": true, "message": "ok"}));
    }
    if info.config.client.enabled {
        body.insert("client".into(), json!({"ok": true, "message": "ok"}));
    }
    HttpResponse::Ok().json(body)
}

async fn agent_self(info: web::Data<AgentInfo>) -> HttpResponse {
    // The address actually bound: a sidecar binds loopback whatever
    // `bind_addr` says, and a user checking exposure must be told so.
    let bind_addr = info
        .http_addr
        .get()
        .map_or_else(|| info.config.http_bind().0, |a| a.ip().to_string());
    HttpResponse::Ok().json(json!({
        "config": {
            "Region": info.config.region,
            "Datacenter": info.config.datacenter,
            "NodeName": info.config.name,
            "DataDir": info.data_dir,
            "BindAddr": bind_addr,
            "Ports": {"HTTP": info.http_addr.get().map(|a| a.port())},
            "AdvertiseAddrs": {"HTTP": peer_address(&info)},
            "Server": {"Enabled": info.config.server.enabled,
                       "NumSchedulers": info.config.effective_num_schedulers(),
                       "EnabledSchedulers": info.config.server.enabled_schedulers},
            "Client": {"Enabled": info.config.client.enabled,
                       "Servers": info.config.client.servers},
            "Version": {"Version": env!("CARGO_PKG_VERSION"),
                        "Revision": env!("HERDER_GIT_SHA")},
        },
        "member": match cluster_of(&info) {
            Some(cluster) => agent_cluster::own_member(cluster, &info.config),
            None => member(&info),
        },
        "stats": stats(&info),
    }))
}

/// Nomad's stats sections, every value a string: `nomad` and `raft` on a
/// server (a single server without Raft: the leader, with no peers; the
/// store's index stands for the log's), `client` on a client, `runtime`,
/// and herder's own `agent` (uptime).
fn stats(info: &AgentInfo) -> BTreeMap<&'static str, BTreeMap<&'static str, String>> {
    let mut stats = BTreeMap::new();
    let uptime = info.started_at.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    stats.insert(
        "agent",
        BTreeMap::from([("uptime_seconds", uptime.to_string())]),
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    stats.insert(
        "runtime",
        BTreeMap::from([
            ("kernel.name", std::env::consts::OS.to_string()),
            ("arch", arch.to_string()),
            ("cpu_count", cpus.to_string()),
            ("max_procs", cpus.to_string()),
        ]),
    );
    if let Some(cluster) = cluster_of(info) {
        let (nomad, raft) = agent_cluster::stats(cluster);
        stats.insert("nomad", nomad);
        stats.insert("raft", raft);
    } else if let Some(server) = &info.server {
        let address = peer_address(info);
        stats.insert(
            "nomad",
            BTreeMap::from([
                ("server", "true".to_string()),
                ("leader", "true".to_string()),
                ("leader_addr", address.clone()),
                ("bootstrap", "true".to_string()),
                ("known_regions", "1".to_string()),
            ]),
        );
        let index = server.store.snapshot().latest_index().to_string();
        stats.insert(
            "raft",
            BTreeMap::from([
                ("state", "Leader".to_string()),
                ("num_peers", "0".to_string()),
                ("applied_index", index.clone()),
                ("commit_index", index.clone()),
                ("last_log_index", index),
                ("protocol_version", "2".to_string()),
                (
                    "latest_configuration",
                    format!("[{{Suffrage:Voter ID:{address} Address:{address}}}]"),
                ),
            ]),
        );
    }
    if info.config.client.enabled {
        let mut client = BTreeMap::from([("known_servers", client_servers(info).join(","))]);
        if let Some(id) = info.client_node_id.get() {
            client.insert("node_id", id.to_string());
        }
        stats.insert("client", client);
    }
    stats
}

/// The servers this agent's client talks to (`host:port`): the configured
/// ones, or this agent's own API.
/// A server URL as `host:port`.
fn host_port(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string()
}

fn client_servers(info: &AgentInfo) -> Vec<String> {
    let configured = &info.config.client.servers;
    if configured.is_empty() {
        return vec![peer_address(info)];
    }
    let mut servers: Vec<String> = configured.iter().map(|s| host_port(s)).collect();
    servers.sort();
    servers
}

/// `GET /v1/agent/servers`: the servers the client talks to now (the ones
/// configured, then those the servers told it of), sorted; 501 on an
/// agent without a client, as Nomad.
async fn servers(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    if !info.config.client.enabled {
        return Err(ApiError::NotImplemented("Invalid method".into()));
    }
    let mut servers: Vec<String> = match info.client.get() {
        Some(client) => match client.agent.send(GetServers).await {
            // The client keeps URLs; Nomad answers `host:port`.
            Ok(urls) => urls.iter().map(|u| host_port(u)).collect(),
            Err(_) => client_servers(&info),
        },
        None => client_servers(&info),
    };
    servers.sort();
    Ok(HttpResponse::Ok().json(servers))
}

/// `PUT /v1/agent/servers?address=host:port` (repeatable): the servers
/// the client talks to from now on, as Nomad's `SetServers`.
async fn set_servers(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    if !info.config.client.enabled {
        return Err(ApiError::NotImplemented("Invalid method".into()));
    }
    let addresses = query_values(&req, "address")?;
    if addresses.is_empty() {
        return Err(ApiError::BadRequest("missing server address".into()));
    }
    let client = info
        .client
        .get()
        .ok_or_else(|| ApiError::Unavailable("the client is still starting".into()))?;
    let https = info.config.tls.http;
    let servers: Vec<String> = addresses
        .iter()
        .map(|a| match a.contains("://") {
            false if https => normalize_server(&format!("https://{a}")),
            _ => normalize_server(a),
        })
        .collect();
    client
        .agent
        .send(SetServers(servers))
        .await
        .map_err(|_| ApiError::Unavailable("the client is shutting down".into()))?;
    Ok(HttpResponse::Ok().finish())
}

/// `PUT /v1/agent/join?address=...`: `{"num_joined", "error"}`. A cluster
/// member joins the cluster of the servers named; a single server answers
/// as Nomad answers a join that reached nobody.
async fn join(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    if !info.config.server.enabled {
        return Err(ApiError::NotImplemented("Invalid method".into()));
    }
    let addresses: Vec<String> = query_values(&req, "address")?;
    if addresses.is_empty() {
        return Err(ApiError::BadRequest("missing address to join".into()));
    }
    if let Some(cluster) = cluster_of(&info) {
        return Ok(HttpResponse::Ok().json(agent_cluster::join(cluster, &addresses).await));
    }
    Ok(HttpResponse::Ok().json(json!({
        "num_joined": 0,
        "error": format!(
            "herder runs a single server and joins no gossip pool; not joined: {}",
            addresses.join(", ")
        ),
    })))
}

/// `PUT /v1/agent/force-leave?node=...`: 200 with an empty body. A
/// cluster member removes that server from the Raft configuration; a
/// single server has no other member to remove.
async fn force_leave(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    if !info.config.server.enabled {
        return Err(ApiError::NotImplemented("Invalid method".into()));
    }
    let q = QueryOptions::from_request(&req)?;
    let Some(node) = q.param("node").filter(|n| !n.is_empty()) else {
        return Err(ApiError::BadRequest("missing node to force leave".into()));
    };
    if let Some(cluster) = cluster_of(&info) {
        agent_cluster::force_leave(cluster, &info.config, node)
            .await
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    }
    Ok(HttpResponse::Ok().finish())
}

/// Every value of a repeatable query parameter.
fn query_values(req: &HttpRequest, name: &str) -> Result<Vec<String>, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(req.query_string())
        .map_err(|e| ApiError::BadRequest(format!("Invalid query string: {e}")))?;
    Ok(pairs
        .into_iter()
        .filter(|(k, v)| k == name && !v.is_empty())
        .map(|(_, v)| v)
        .collect())
}

/// This agent's HTTP address (`host:port`), once the API is bound.
pub fn peer_address(info: &AgentInfo) -> String {
    info.http_addr
        .get()
        .map(|a| a.to_string())
        .unwrap_or_default()
}

/// This agent's cluster, when it is a member of one.
fn cluster_of(info: &AgentInfo) -> Option<&Cluster> {
    info.server.as_ref().and_then(|s| s.cluster.as_ref())
}

/// The gossip members: every server of a cluster, or a single agent
/// alone. Servers carry Nomad's tags so that clients can tell servers,
/// regions and DCs apart.
async fn members(info: web::Data<AgentInfo>) -> HttpResponse {
    let members = if let Some(cluster) = cluster_of(&info) {
        agent_cluster::members(cluster, &info.config).await
    } else if info.config.server.enabled {
        vec![member(&info)]
    } else {
        vec![]
    };
    HttpResponse::Ok().json(json!({
        "ServerName": info.config.name,
        "ServerRegion": info.config.region,
        "ServerDC": info.config.datacenter,
        "Members": members,
    }))
}

/// This agent as a gossip member (Nomad's `Member`: `Addr` an IP, `Port`
/// a number, string `Tags`). Servers carry Nomad's tags so that clients
/// can tell servers, regions and DCs apart.
fn member(info: &AgentInfo) -> serde_json::Value {
    let addr = info.http_addr.get();
    let host = addr.map(|a| a.ip().to_string()).unwrap_or_default();
    let port = addr.map(|a| a.port()).unwrap_or(0);
    let name = format!("{}.{}", info.config.name_or_hostname(), info.config.region);
    let mut tags = serde_json::Map::new();
    tags.insert("region".into(), json!(info.config.region));
    tags.insert("dc".into(), json!(info.config.datacenter));
    tags.insert("build".into(), json!(env!("CARGO_PKG_VERSION")));
    tags.insert("port".into(), json!(port.to_string()));
    if info.config.server.enabled {
        tags.insert("role".into(), json!("nomad"));
        tags.insert("bootstrap".into(), json!("1"));
        tags.insert("expect".into(), json!("1"));
        tags.insert("raft_vsn".into(), json!("2"));
    }
    json!({
        "Name": name, "Addr": host, "Port": port, "Tags": tags, "Status": "alive",
        "ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2,
        "DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4,
    })
}
