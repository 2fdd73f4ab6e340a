//! Where a client request is answered, as Nomad's agents decide it
//! (`rpcHandlerForAlloc`, `rpcHandlerForNode`): here when this agent's
//! client has the allocation (or is the node), else a server forwards it
//! to the agent of the node concerned, and a client-only agent asks its
//! server. The forwarding itself is [`super::forward`]'s.

use super::errors::ApiError;
use super::forward::{node_agent_address, Hop};
use crate::AgentInfo;
use actix_web::HttpRequest;
use herder::structs::{AllocId, Allocation, Node, NodeStatus};

/// Where to answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// This agent's client answers.
    Here,
    /// The agent at `address` does; the request goes on as `hop`.
    There { address: String, hop: Hop },
}

/// Nomad's text for an allocation no one here or beyond knows.
pub fn unknown_alloc(id: &str) -> ApiError {
    ApiError::NotFound(format!("Unknown allocation \"{id}\""))
}

/// Where a request about `alloc_id` goes; `here` says whether this
/// agent's client keeps the allocation. `check` may refuse the server's
/// copy of the allocation before the request travels to its node.
pub fn alloc_route(
    info: &AgentInfo,
    req: &HttpRequest,
    alloc_id: &AllocId,
    here: bool,
    check: impl FnOnce(&Allocation) -> Result<(), ApiError>,
) -> Result<Route, ApiError> {
    if here {
        return Ok(Route::Here);
    }
    let hop = Hop::of(req);
    let unknown = || unknown_alloc(&alloc_id.to_string());
    if let Some(server) = &info.server {
        if hop == Hop::ToNode {
            return Err(unknown());
        }
        let snap = server.store.snapshot();
        let alloc = snap.alloc(alloc_id).ok_or_else(unknown)?;
        check(alloc)?;
        if info.client.get().map(|c| c.node_id) == Some(alloc.node_id) {
            // Placed here, but the client has not started it yet.
            return Err(unknown());
        }
        let node = snap.node(&alloc.node_id).map(|n| &**n);
        return to_node(alloc.node_id, node);
    }
    match info.client.get() {
        Some(client) if hop == Hop::Direct => Ok(Route::There {
            address: client.server.clone(),
            hop: Hop::ToServer,
        }),
        _ => Err(unknown()),
    }
}

/// The route to a node's agent, unless the node cannot be reached.
fn to_node(node_id: herder::structs::NodeId, node: Option<&Node>) -> Result<Route, ApiError> {
    let no_path = || ApiError::NotFound(format!("No path to node {node_id}"));
    let node = node.ok_or_else(no_path)?;
    if node.status == NodeStatus::Down {
        return Err(no_path());
    }
    let address = node_agent_address(node).ok_or_else(no_path)?;
    Ok(Route::There {
        address,
        hop: Hop::ToNode,
    })
}

/// Where a request about a node (`?node_id=`, empty: this agent's own)
/// goes, as Nomad's `rpcHandlerForNode`.
pub fn node_route(info: &AgentInfo, req: &HttpRequest, node_id: &str) -> Result<Route, ApiError> {
    let client = info.client.get();
    if client.is_some_and(|c| node_id.is_empty() || c.node_id.to_string() == node_id) {
        return Ok(Route::Here);
    }
    let hop = Hop::of(req);
    let unknown = || ApiError::NotFound(format!("Unknown node {node_id}"));
    match (&info.server, client) {
        (None, Some(client)) if hop == Hop::Direct => Ok(Route::There {
            address: client.server.clone(),
            hop: Hop::ToServer,
        }),
        (None, Some(_)) => Err(unknown()),
        (Some(_), _) | (None, None) if node_id.is_empty() => Err(ApiError::BadRequest(
            "No local Node and node_id not provided".into(),
        )),
        (Some(_), _) if hop == Hop::ToNode => Err(unknown()),
        (Some(server), _) => {
            let id: herder::structs::NodeId = node_id.parse().map_err(|_| unknown())?;
            let snap = server.store.snapshot();
            let node = snap.node(&id).ok_or_else(unknown)?;
            to_node(id, Some(node))
        }
        (None, None) => Err(unknown()),
    }
}

/// The path and query of the request, to send on as it came.
pub fn path_and_query(req: &HttpRequest) -> String {
    req.uri()
        .path_and_query()
        .map_or_else(|| req.path().to_string(), |pq| pq.as_str().to_string())
}
