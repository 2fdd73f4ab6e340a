//! The client side of the API: how client agents (and simulated nodes)
//! talk to the servers. Nomad does this over its RPC protocol; herder uses
//! HTTP with the same message shapes:
//!
//! - `PUT /v1/node/register` `{"Node": {...}}` ->
//!   `{NodeModifyIndex, HeartbeatTTL, EvalIDs, EvalCreateIndex, Index}`
//! - `PUT /v1/node/:id/heartbeat` `{"Status": "ready"}` -> `{HeartbeatTTL, Index}`
//! - `PUT /v1/node/:id/allocations` `{"Allocs": [{ID, ClientStatus,
//!   ClientDescription, TaskStates, NodeFailure}]}` -> `{Index}`
//!
//! Heartbeats and allocation updates are authenticated by the node's
//! SecretID in `X-Nomad-Token`.
//!
//! Register and heartbeat answers carry the servers a node may talk to
//! (`Servers`, Nomad's `NodeUpdateResponse.Servers`), so a client started
//! with one server address learns the others and fails over to them:
//! every member of the cluster (this server alone when it runs without
//! Raft), each with its `HTTPAddr` beside Nomad's fields, since herder's
//! nodes speak the HTTP API rather than Nomad's RPC.

use super::body::Body;
use super::query::decode_json;
use super::ApiError;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::AllocClientUpdate;
use herder::structs::{Node, NodeId};
use herder_server::server_api::{NodeReply, ServerApi};
use serde::Deserialize;
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/node/register", web::put().to(register))
        .route("/v1/node/register", web::post().to(register))
        .route("/v1/node/{id}/heartbeat", web::put().to(heartbeat))
        .route("/v1/node/{id}/heartbeat", web::post().to(heartbeat));
}

/// `PUT /v1/node/{id}/allocations`, registered together with the
/// operator's `GET` on the same path (in `node_routes`).
pub fn update_allocs_route() -> actix_web::Route {
    web::put().to(update_allocs)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RegisterRequest {
    node: Option<Node>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HeartbeatRequest {
    #[serde(default)]
    status: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AllocsRequest {
    #[serde(default)]
    allocs: Vec<AllocClientUpdate>,
}

/// The server's operations; a client-only agent has no server to talk to.
fn api(info: &AgentInfo) -> Result<ServerApi, ApiError> {
    info.server
        .as_ref()
        .map(ServerApi::of)
        .ok_or_else(|| ApiError::BadRequest("this agent runs no server".into()))
}

pub(crate) fn token(req: &HttpRequest) -> String {
    req.headers()
        .get("X-Nomad-Token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// Under ACLs a node registers with its own `SecretID` as its token (a
/// node already registered: the secret it registered with), or with a
/// `node:write` token.
fn check_register_secret(
    info: &AgentInfo,
    req: &HttpRequest,
    api: &ServerApi,
    node: &herder::structs::Node,
) -> Result<(), ApiError> {
    if !info.config.acl.enabled {
        return Ok(());
    }
    let secret = crate::acl_rules::request_secret(req);
    let snap = api.snapshot();
    let expected = snap
        .node(&node.id)
        .map_or(node.secret_id.as_str(), |n| n.secret_id.as_str());
    let own = !secret.is_empty()
        && herder_server::server_api::acl::constant_time_eq(expected.as_bytes(), secret.as_bytes());
    let writer = || {
        api.resolve_token(&secret, chrono::Utc::now())
            .is_ok_and(|r| r.acl.allow_node_write())
    };
    if own || writer() {
        Ok(())
    } else {
        Err(crate::acl_rules::denied())
    }
}

pub(crate) fn node_id(raw: &str) -> Result<NodeId, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::BadRequest(format!("node ID {raw:?} is not a UUID")))
}

/// Nomad's RPC API version (`structs.ApiMajorVersion`/`ApiMinorVersion`
/// of Nomad 1.1), reported per server as `NodeServerInfo` does.
const RPC_MAJOR_VERSION: u32 = 1;
const RPC_MINOR_VERSION: u32 = 1;

/// The `Servers` of a register or heartbeat answer: Nomad's
/// `NodeServerInfo` for every server whose HTTP address is known.
fn servers_json(info: &AgentInfo) -> Vec<serde_json::Value> {
    // The servers of a cluster share their `tls.http`: over HTTPS, the
    // clients are told so.
    let scheme = if info.config.tls.http { "https://" } else { "" };
    super::raft_routes::servers(info)
        .into_iter()
        .filter(|m| !m.node.http_addr.is_empty())
        .map(|m| {
            json!({
                "RPCAdvertiseAddr": m.node.rpc_addr,
                "HTTPAddr": format!("{scheme}{}", m.node.http_addr),
                "RPCMajorVersion": RPC_MAJOR_VERSION,
                "RPCMinorVersion": RPC_MINOR_VERSION,
                "Datacenter": m.node.datacenter,
            })
        })
        .collect()
}

fn node_reply(r: NodeReply, servers: Vec<serde_json::Value>) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(("X-Nomad-Index", r.index.to_string()))
        .json(json!({
            "NodeModifyIndex": r.node_modify_index,
            "HeartbeatTTL": r.heartbeat_ttl.as_nanos() as u64,
            "EvalIDs": r.eval_ids,
            "EvalCreateIndex": if r.eval_ids.is_empty() { 0 } else { r.index },
            "Index": r.index,
            "KnownLeader": true,
            "LastContact": 0,
            "Servers": servers,
        }))
}

async fn register(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let api = api(&info)?;
    let request: RegisterRequest = decode_json(&body)?;
    let node = request
        .node
        .ok_or_else(|| ApiError::BadRequest("missing node for client registration".into()))?;
    check_register_secret(&info, &req, &api, &node)?;
    let reply = api.register_node(node).await?;
    Ok(node_reply(reply, servers_json(&info)))
}

async fn heartbeat(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let api = api(&info)?;
    let ready = heartbeat_ready(&body)?;
    let reply = api.heartbeat(node_id(&path)?, &token(&req), ready).await?;
    Ok(HttpResponse::Ok()
        .insert_header(("X-Nomad-Index", reply.index.to_string()))
        .json(json!({
            "HeartbeatTTL": reply.heartbeat_ttl.as_nanos() as u64,
            "EvalIDs": reply.eval_ids,
            "Index": reply.index,
            "Servers": servers_json(&info),
        })))
}

/// Whether a heartbeat reports the node ready. A client heartbeats with
/// no body or `{"Status": "ready" | "initializing"}`; any other status is
/// the servers' to set (down, disconnected) or unknown, and refused: a
/// typo must not read as "ready".
fn heartbeat_ready(body: &[u8]) -> Result<bool, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(true);
    }
    let request: HeartbeatRequest = decode_json(body)?;
    match request.status.as_deref() {
        None | Some("") | Some("ready") => Ok(true),
        Some("initializing") => Ok(false),
        Some(other) => Err(ApiError::BadRequest(format!(
            "invalid status {other:?} for a node heartbeat: must be \"ready\" or \"initializing\""
        ))),
    }
}

async fn update_allocs(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let api = api(&info)?;
    let updates = decode_json::<AllocsRequest>(&body)?.allocs;
    let index = api
        .update_allocations(node_id(&path)?, &token(&req), updates)
        .await?;
    Ok(HttpResponse::Ok()
        .insert_header(("X-Nomad-Index", index.to_string()))
        .json(json!({ "Index": index })))
}
