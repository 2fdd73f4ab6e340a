//! `/v1/status/leader`, `/v1/status/peers`,
//! `/v1/operator/raft/configuration` and `DELETE /v1/operator/raft/peer`:
//! the servers that vote on the state, in Nomad's shapes (`nomad operator
//! raft list-peers`, `nomad server members`).
//!
//! Servers are known by their RPC address, as in Nomad, and named by the
//! name the membership records (`<node>.<region>`). A single server
//! without Raft is the only voter and always the leader, known by the RPC
//! address it would advertise (`ports.rpc` on its bind address), as
//! Nomad's dev agent answers.
//!
//! [`servers`] is also what client nodes are told: the `Servers` list of a
//! register or heartbeat answer (`client_routes`).

use super::errors::ApiError;
use super::query::{server, QueryOptions};
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder_raft::cluster::rpc::{self, RemoveRequest};
use herder_raft::{Member, ServerNode};
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/operator/raft/configuration").route(web::get().to(configuration)),
    )
    .service(web::resource("/v1/operator/raft/peer").route(web::delete().to(remove_peer)))
    .service(web::resource("/v1/status/peers").route(web::get().to(peers)))
    .route("/v1/status/leader", web::get().to(leader));
}

/// The Raft protocol version Nomad 1.1 servers speak by default, which
/// `RaftProtocol` reports.
const RAFT_PROTOCOL: &str = "2";

/// This server's RPC address as the other servers know it.
pub fn own_rpc_address(info: &AgentInfo) -> String {
    match info.server.as_ref().and_then(|s| s.cluster.as_ref()) {
        Some(cluster) => cluster.settings().node.rpc_addr.clone(),
        None => info.config.rpc_advertise(info.config.ports.rpc),
    }
}

/// This single server as a cluster member would advertise itself (the
/// agent put the bound HTTP port in `ports.http` before serving), worked
/// out once per agent.
fn own_node(info: &AgentInfo) -> &ServerNode {
    info.own_server.get_or_init(|| {
        let config = &info.config;
        ServerNode {
            rpc_addr: own_rpc_address(info),
            http_addr: config.http_advertise(config.ports.http),
            name: format!("{}.{}", config.name_or_hostname(), config.region),
            version: env!("CARGO_PKG_VERSION").to_string(),
            datacenter: config.datacenter.clone(),
        }
    })
}

/// The servers: the cluster's members (voters and learners), or this
/// server alone; none on a client-only agent.
pub fn servers(info: &AgentInfo) -> Vec<Member> {
    match info.server.as_ref().and_then(|s| s.cluster.as_ref()) {
        Some(cluster) => cluster.members(),
        None if info.config.server.enabled => vec![Member::new(0, own_node(info), true, true)],
        None => Vec::new(),
    }
}

/// `GET /v1/status/leader`: the leader's RPC address, `""` when none is
/// known (and on a client-only agent).
async fn leader(info: web::Data<AgentInfo>) -> HttpResponse {
    let leader = match info.server.as_ref().and_then(|s| s.cluster.as_ref()) {
        Some(cluster) => cluster
            .leader()
            .map(|l| l.node.rpc_addr)
            .unwrap_or_default(),
        None if info.config.server.enabled => own_node(&info).rpc_addr.clone(),
        None => String::new(),
    };
    HttpResponse::Ok().json(leader)
}

/// `{"Servers": [{"ID", "Node", "Address", "Leader", "Voter",
/// "RaftProtocol"}], "Index"}` (Nomad's `RaftConfigurationResponse`; the
/// ID is the address, as in Nomad 1.1 with Raft protocol 2; the node is
/// the server's name, or its address when the membership records none).
async fn configuration(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let handle = server(&info)?;
    let entries: Vec<_> = servers(&info)
        .into_iter()
        .map(|m| {
            let node = if m.node.name.is_empty() {
                &m.addr
            } else {
                &m.node.name
            };
            json!({
                "ID": m.addr, "Node": node, "Address": m.addr,
                "Leader": m.leader, "Voter": m.voter, "RaftProtocol": RAFT_PROTOCOL,
            })
        })
        .collect();
    // A single server's configuration never changes: the one it started
    // with, at Raft index 1 in Nomad.
    let index = handle.cluster.as_ref().map_or(1, |c| c.membership_index());
    Ok(HttpResponse::Ok().json(json!({ "Servers": entries, "Index": index })))
}

/// The voters' RPC addresses (`[]` on a client-only agent, as Nomad's
/// answer when it knows no peers).
async fn peers(info: web::Data<AgentInfo>) -> HttpResponse {
    let voters: Vec<String> = servers(&info)
        .into_iter()
        .filter(|m| m.voter)
        .map(|m| m.node.rpc_addr)
        .collect();
    HttpResponse::Ok().json(voters)
}

/// `DELETE /v1/operator/raft/peer?address=host:port` (or `?id=`): removes
/// a server from the Raft configuration, through the leader.
async fn remove_peer(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let handle = server(&info)?;
    let q = QueryOptions::from_request(&req)?;
    let addr = q
        .param("address")
        .filter(|a| !a.is_empty())
        .map(str::to_string);
    let id = q.param("id").filter(|i| !i.is_empty()).map(str::to_string);
    if addr.is_none() && id.is_none() {
        return Err(ApiError::BadRequest("Must specify either ?id with the server's ID or ?address with IP:port of peer to remove".into()));
    }
    let Some(cluster) = handle.cluster.as_ref() else {
        return Err(ApiError::BadRequest(
            "this server runs without Raft: it is the only peer and cannot be removed".into(),
        ));
    };
    // Nomad 1.1 names servers by address in both fields; an ID that is
    // not herder's numeric one is taken as the address.
    let (id, addr) = match id.map(|i| i.parse::<u64>().map_err(|_| i)) {
        Some(Ok(id)) => (Some(id), addr),
        Some(Err(text)) => (None, Some(text)),
        None => (None, addr),
    };
    rpc::remove_via_leader(cluster, RemoveRequest { id, addr })
        .await
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(HttpResponse::Ok().finish())
}
