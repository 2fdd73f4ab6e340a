//! The operator side of nodes: `/v1/nodes`, `/v1/node/:id`,
//! `/v1/node/:id/allocations`, and eligibility, drain, evaluate, purge.
//!
//! The writes are `ServerApi`'s (`server_api::nodes`, where the evaluations
//! they create are made); handlers decode the request and render the
//! answer.

use super::body::Body;
use super::errors::ApiError;
use super::eval_alloc_routes::parse_id;
use super::job_routes::write_answer;
use super::query::{
    api, blocking_read, decode_json, json_with_index, list_response, paginate, read_json, server,
    QueryOptions,
};
use super::stubs::{node_read, node_stub, AllocWithJob};
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::{node_allocs_index, StateSnapshot, Table, TableSet};
use herder::structs::{ComparableResources, Node, NodeId, SchedulingEligibility};
use herder_server::server_api::{DrainNode, DrainSpec, NodeWriteResult};
use serde::Deserialize;
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/nodes", web::get().to(list_nodes))
        .route("/v1/node/{id}", web::get().to(read_node))
        // One resource for both sides: operators read (GET), the node's
        // client reports status (PUT).
        .service(
            web::resource("/v1/node/{id}/allocations")
                .route(web::get().to(node_allocs))
                .route(super::client_routes::update_allocs_route()),
        )
        .service(
            web::resource("/v1/node/{id}/eligibility")
                .route(web::put().to(eligibility))
                .route(web::post().to(eligibility)),
        )
        .service(
            web::resource("/v1/node/{id}/drain")
                .route(web::put().to(drain))
                .route(web::post().to(drain)),
        )
        .service(
            web::resource("/v1/node/{id}/evaluate")
                .route(web::put().to(evaluate))
                .route(web::post().to(evaluate)),
        )
        .service(
            web::resource("/v1/node/{id}/purge")
                .route(web::put().to(purge))
                .route(web::post().to(purge)),
        );
}

/// The node list. `?usage=true` (herder's, not Nomad's) adds to each stub
/// what its live allocations hold, `Allocated`, from the store's per-node
/// usage index, so that a view of 10,000 nodes need not read 100,000
/// allocations; the query then also wakes on allocation changes.
async fn list_nodes(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let mut q = QueryOptions::from_request(&req)?;
    q.namespace = "*".into(); // nodes belong to no namespace
    let usage = q.flag("usage")?;
    let tables = if usage {
        TableSet::of(&[Table::Nodes, Table::Allocs])
    } else {
        TableSet::of(&[Table::Nodes])
    };
    let store = &server(&info)?.store;
    let (page, index) = blocking_read(store, tables, &q, |snap| {
        let items = snap.nodes().map(|n| (n.id.to_string(), "", n));
        paginate(&q, items, |n| {
            let mut stub = node_stub(n);
            if usage {
                stub.allocated = Some(allocated(snap, &n.id));
            }
            stub
        })
    })
    .await?;
    Ok(list_response(index, page))
}

/// What a node's live allocations hold, as `?usage=true` shows it.
fn allocated(snap: &StateSnapshot, id: &NodeId) -> serde_json::Value {
    let (used, live) = snap
        .node_usage(id)
        .map_or((ComparableResources::default(), 0), |u| (u.used, u.live));
    json!({
        "CpuShares": used.cpu,
        "MemoryMB": used.memory_mb,
        "DiskMB": used.disk_mb,
        "Allocations": live,
    })
}

fn find_node<'a>(snap: &'a StateSnapshot, id: &NodeId) -> Result<&'a Node, ApiError> {
    snap.node(id)
        .map(|n| &**n)
        .ok_or_else(|| ApiError::NotFound("node not found".into()))
}

async fn read_node(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id, "node")?;
    read_json(&info, &req, TableSet::of(&[Table::Nodes]), |snap, _q| {
        find_node(snap, &id).map(node_read)
    })
    .await
}

/// A node's allocations, with each one's job. The blocking form is what
/// every client long-polls, so it wakes only when one of *this* node's
/// allocations changes (Nomad's `Node.GetClientAllocs`), never on another
/// node's, and answers with the node's own index: the highest modify index
/// of its allocations, or the allocations table's index when it has none.
async fn node_allocs(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let store = &server(&info)?.store;
    let id = parse_id(&id, "node")?;
    if q.index > 0 {
        let changed = store.watch_node_allocs(id, q.index);
        // A timeout answers with the current list, as any blocking query.
        q.park(changed).await;
    }
    let snap = store.snapshot();
    let index = node_allocs_index(&snap, &id).max(1);
    let list: Vec<_> = snap
        .allocs_by_node(&id)
        .map(|a| AllocWithJob::new(&snap, a))
        .collect();
    Ok(json_with_index(index, &list))
}

/// The answer of node writes: `{EvalIDs, EvalCreateIndex, NodeModifyIndex}`.
fn node_write_answer(r: &NodeWriteResult) -> HttpResponse {
    let ids: Vec<String> = r.eval_ids.iter().map(ToString::to_string).collect();
    write_answer(
        r.index,
        json!({
            "EvalIDs": if ids.is_empty() { serde_json::Value::Null } else { json!(ids) },
            "EvalCreateIndex": r.eval_create_index,
            "NodeModifyIndex": r.node_modify_index,
        }),
    )
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct EligibilityRequest {
    #[serde(rename = "NodeID")]
    node_id: String,
    eligibility: String,
}

async fn eligibility(
    info: web::Data<AgentInfo>,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let api = api(&info)?;
    let id = parse_id(&id, "node")?;
    let request: EligibilityRequest = decode_json(&body)?;
    check_body_node(&request.node_id, &id)?;
    let eligibility = match request.eligibility.as_str() {
        "eligible" => SchedulingEligibility::Eligible,
        "ineligible" => SchedulingEligibility::Ineligible,
        other => {
            return Err(ApiError::BadRequest(format!(
                "invalid scheduling eligibility {other:?}"
            )))
        }
    };
    let r = api.set_node_eligibility(id, eligibility).await?;
    Ok(node_write_answer(&r))
}

/// A body naming another node than the path is a mistake to point out.
fn check_body_node(body_id: &str, path_id: &NodeId) -> Result<(), ApiError> {
    if !body_id.is_empty() && body_id != path_id.to_string() {
        return Err(ApiError::BadRequest(format!(
            "NodeID {body_id:?} in the body does not match the node {path_id} in the path"
        )));
    }
    Ok(())
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct DrainSpecBody {
    /// Nanoseconds; negative forces the drain now.
    deadline: i64,
    ignore_system_jobs: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct DrainRequest {
    #[serde(rename = "NodeID")]
    node_id: String,
    drain_spec: Option<DrainSpecBody>,
    mark_eligible: bool,
}

async fn drain(
    info: web::Data<AgentInfo>,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let api = api(&info)?;
    let id = parse_id(&id, "node")?;
    let request: DrainRequest = decode_json(&body)?;
    check_body_node(&request.node_id, &id)?;
    let r = api
        .drain_node(DrainNode {
            node_id: id,
            spec: request.drain_spec.map(|spec| DrainSpec {
                deadline: spec.deadline,
                ignore_system_jobs: spec.ignore_system_jobs,
            }),
            mark_eligible: request.mark_eligible,
        })
        .await?;
    Ok(node_write_answer(&r))
}

async fn evaluate(
    info: web::Data<AgentInfo>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let api = api(&info)?;
    let id = parse_id(&id, "node")?;
    Ok(node_write_answer(&api.evaluate_node(id).await?))
}

/// Removes the node; its jobs are evaluated so that its work moves.
async fn purge(
    info: web::Data<AgentInfo>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let api = api(&info)?;
    let id = parse_id(&id, "node")?;
    Ok(node_write_answer(&api.purge_node(id).await?))
}
