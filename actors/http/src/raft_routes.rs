//! `/v1/operator/raft/configuration` and `/v1/status/peers`: the servers
//! that vote on the state, in Nomad's shapes (`nomad operator raft
//! list-peers`, `nomad server members`).
//!
//! herder runs a single server without Raft: it is the only voter and
//! always the leader, known by the address clients reach it at (its HTTP
//! address: herder's servers take no RPC connections). Both answers name
//! the same address, and `/v1/status/leader` answers it too.

use super::errors::ApiError;
use super::query::server;
use crate::AgentInfo;
use actix_web::{web, HttpResponse};
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/operator/raft/configuration").route(web::get().to(configuration)),
    )
    .service(web::resource("/v1/status/peers").route(web::get().to(peers)));
}

/// The Raft protocol version Nomad 1.1 servers speak by default, which
/// `RaftProtocol` reports.
const RAFT_PROTOCOL: &str = "2";

/// This server's address as a peer (`host:port`), once the API is bound.
pub fn peer_address(info: &AgentInfo) -> String {
    info.http_addr
        .get()
        .map(|a| a.to_string())
        .unwrap_or_default()
}

/// `{"Servers": [{"ID", "Node", "Address", "Leader", "Voter",
/// "RaftProtocol"}], "Index"}` (Nomad's `RaftConfigurationResponse`; the
/// ID is the address, as in Nomad 1.1 with Raft protocol 2).
async fn configuration(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    server(&info)?;
    let address = peer_address(&info);
    Ok(HttpResponse::Ok().json(json!({
        "Servers": [{
            "ID": address,
            "Node": format!("{}.{}", info.config.name, info.config.region),
            "Address": address,
            "Leader": true,
            "Voter": true,
            "RaftProtocol": RAFT_PROTOCOL,
        }],
        // The configuration never changes: it is the one the server
        // bootstrapped with, at Raft index 1 in Nomad.
        "Index": 1,
    })))
}

/// The peers' addresses: this server alone (`[]` on a client-only agent,
/// as Nomad's answer when it knows no peers).
async fn peers(info: web::Data<AgentInfo>) -> HttpResponse {
    if info.config.server.enabled {
        HttpResponse::Ok().json([peer_address(&info)])
    } else {
        HttpResponse::Ok().json(Vec::<String>::new())
    }
}
