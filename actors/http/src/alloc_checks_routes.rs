//! `GET /v1/client/allocation/:alloc_id/checks` (Nomad 1.4+): the latest
//! result of each of an allocation's service checks, as a map from check
//! ID to Nomad's `CheckQueryResult` ({ID, Check, Group, Task, Service,
//! Status, StatusCode, Output, Mode, Timestamp, AllocID}).
//!
//! Routed as the allocation's restart and signal are (see
//! `client_alloc_routes`): answered by the agent whose client runs the
//! allocation, forwarded there by a server, asked of its server by a
//! client-only agent that does not run it. An allocation that is known
//! but not running here, or has no checks, answers `{}`.

use super::errors::ApiError;
use super::forward::{forward_get, node_agent_address, Hop};
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::structs::NodeStatus;
use herder_client::alloc_manager::GetAllocChecks;
use serde_json::{Map, Value};
use std::time::Duration;

/// How long a forwarded read may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/v1/client/allocation/{id}/checks",
        web::get().to(alloc_checks),
    );
}

async fn alloc_checks(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let unknown = || ApiError::NotFound(format!("Unknown allocation \"{id}\""));
    let alloc_id = uuid::Uuid::parse_str(&id).map_err(|_| unknown())?;
    let hop = Hop::of(&req);
    let path = format!("/v1/client/allocation/{alloc_id}/checks");
    if let Some(client) = info.client.get() {
        if let Ok(Some(results)) = client.agent.send(GetAllocChecks(alloc_id)).await {
            let by_id: Map<String, Value> = results
                .into_iter()
                .filter_map(|r| Some((r.id.clone(), serde_json::to_value(r).ok()?)))
                .collect();
            return Ok(HttpResponse::Ok().json(by_id));
        }
    }
    if let Some(server) = &info.server {
        let snap = server.store.snapshot();
        let alloc = snap.alloc(&alloc_id).ok_or_else(unknown)?;
        let here = info.client.get().map(|c| c.node_id) == Some(alloc.node_id);
        if hop == Hop::ToNode || here || alloc.is_terminal() {
            // Known, but no check runs for it on any client now.
            return Ok(HttpResponse::Ok().json(Map::new()));
        }
        let no_path = || ApiError::NotFound(format!("No path to node {}", alloc.node_id));
        let node = snap.node(&alloc.node_id).ok_or_else(no_path)?;
        if node.status == NodeStatus::Down {
            return Err(no_path());
        }
        let address = node_agent_address(node).ok_or_else(no_path)?;
        return forward_get(&req, &address, Hop::ToNode, &path, FORWARD_TIMEOUT).await;
    }
    match info.client.get() {
        Some(client) if hop == Hop::Direct => {
            forward_get(&req, &client.server, Hop::ToServer, &path, FORWARD_TIMEOUT).await
        }
        _ => Err(unknown()),
    }
}
