//! The operator side of nodes: `/v1/nodes`, `/v1/node/:id`,
//! `/v1/node/:id/allocations`, and eligibility, drain, evaluate, purge.
//!
//! Node changes that may move work come with evaluations, as Nomad makes
//! them: one per job with allocations on the node plus one per system or
//! sysbatch job (those may now place on, or must leave, the node).

use super::body::Body;
use super::errors::ApiError;
use super::eval_alloc_routes::parse_id;
use super::job_routes::write_answer;
use super::query::{
    blocking_read, decode_json, json_with_index, list_response, now_nanos, paginate, read_json,
    server, submit, QueryOptions,
};
use super::stubs::{alloc_with_job, node_read, node_stub};
use crate::agent::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::{node_allocs_index, Command, StateSnapshot, Table, TableSet};
use herder::structs::{
    DrainStrategy, Evaluation, Node, NodeEvent, NodeId, SchedulingEligibility, TriggeredBy,
};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeSet;

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

async fn list_nodes(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let mut q = QueryOptions::from_request(&req)?;
    q.namespace = "*".into(); // nodes belong to no namespace
    let store = &server(&info)?.store;
    let ((page, next), index) = blocking_read(store, TableSet::of(&[Table::Nodes]), &q, |snap| {
        let items = snap.nodes().map(|n| (n.id.to_string(), "", n));
        Ok(paginate(&q, items, |n| node_stub(n)))
    })
    .await?;
    Ok(list_response(index, page, next))
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
        .map(|a| alloc_with_job(&snap, a))
        .collect();
    Ok(json_with_index(index, &list))
}

/// Evaluations for every job that may be affected by a change to `node`.
fn node_evals(snap: &StateSnapshot, node: &Node, trigger: TriggeredBy) -> Vec<Evaluation> {
    let now = now_nanos();
    let mut seen = BTreeSet::new();
    let mut evals = Vec::new();
    let on_node = snap
        .allocs_by_node(&node.id)
        .filter_map(|a| snap.job(&a.namespace, &a.job_id));
    let system = snap.jobs().filter(|j| j.job_type.is_system_like());
    for job in on_node.chain(system) {
        if job.is_template() || !seen.insert(job.key()) {
            continue;
        }
        let mut eval = Evaluation::for_job(job, trigger, now);
        eval.node_id = Some(node.id);
        eval.node_modify_index = node.modify_index;
        evals.push(eval);
    }
    evals
}

fn node_event(message: &str) -> NodeEvent {
    NodeEvent {
        message: message.to_string(),
        subsystem: "Cluster".to_string(),
        timestamp: Some(now_nanos()),
        ..Default::default()
    }
}

/// The answer of node writes: `{EvalIDs, EvalCreateIndex, NodeModifyIndex}`.
fn node_write_answer(index: u64, evals: &[Evaluation]) -> HttpResponse {
    let ids: Vec<String> = evals.iter().map(|e| e.id.to_string()).collect();
    write_answer(
        index,
        json!({
            "EvalIDs": if ids.is_empty() { serde_json::Value::Null } else { json!(ids) },
            "EvalCreateIndex": if evals.is_empty() { 0 } else { index },
            "NodeModifyIndex": index,
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
    let store = &server(&info)?.store;
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
    let snap = store.snapshot();
    let node = find_node(&snap, &id)?;
    if node.drain_strategy.is_some() && eligibility == SchedulingEligibility::Eligible {
        return Err(ApiError::BadRequest(
            "can not set node's scheduling eligibility to eligible while it is draining".into(),
        ));
    }
    // Only a node that becomes eligible can take new work.
    let evals = if eligibility == SchedulingEligibility::Eligible
        && node.scheduling_eligibility != eligibility
    {
        node_evals(&snap, node, TriggeredBy::NodeUpdate)
    } else {
        vec![]
    };
    let outcome = submit(
        store,
        Command::NodeUpdateEligibility {
            node_id: id,
            eligibility,
            event: Some(node_event(match eligibility {
                SchedulingEligibility::Eligible => "Node marked as eligible for scheduling",
                SchedulingEligibility::Ineligible => "Node marked as ineligible for scheduling",
            })),
            evals: evals.clone(),
        },
    )
    .await?;
    Ok(node_write_answer(outcome.index, &evals))
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
struct DrainSpec {
    /// Nanoseconds; negative forces the drain now.
    deadline: i64,
    ignore_system_jobs: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct DrainRequest {
    #[serde(rename = "NodeID")]
    node_id: String,
    drain_spec: Option<DrainSpec>,
    mark_eligible: bool,
}

async fn drain(
    info: web::Data<AgentInfo>,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let store = &server(&info)?.store;
    let id = parse_id(&id, "node")?;
    let request: DrainRequest = decode_json(&body)?;
    check_body_node(&request.node_id, &id)?;
    let snap = store.snapshot();
    let node = find_node(&snap, &id)?;
    let now = now_nanos();
    let drain = request.drain_spec.map(|spec| DrainStrategy {
        deadline: spec.deadline,
        ignore_system_jobs: spec.ignore_system_jobs,
        force_deadline: (spec.deadline != 0).then(|| now.saturating_add(spec.deadline.max(0))),
        started_at: Some(now),
    });
    // Nomad's drain events; cancelling a drain that is not set says nothing.
    let (trigger, message) = match (&drain, &node.drain_strategy) {
        (Some(_), None) => (TriggeredBy::NodeDrain, Some("Node drain strategy set")),
        (Some(_), Some(_)) => (TriggeredBy::NodeDrain, Some("Node drain strategy updated")),
        (None, Some(_)) => (TriggeredBy::NodeUpdate, Some("Node drain disabled")),
        (None, None) => (TriggeredBy::NodeUpdate, None),
    };
    let event = message.map(|m| NodeEvent {
        subsystem: crate::node_drainer::DRAIN_SUBSYSTEM.to_string(),
        ..node_event(m)
    });
    // Starting a drain re-evaluates what runs there; ending one only
    // matters when the node becomes eligible again.
    let evals = if drain.is_some() || request.mark_eligible {
        node_evals(&snap, node, trigger)
    } else {
        vec![]
    };
    let outcome = submit(
        store,
        Command::NodeUpdateDrain {
            node_id: id,
            drain,
            mark_eligible: request.mark_eligible,
            event,
            evals: evals.clone(),
        },
    )
    .await?;
    Ok(node_write_answer(outcome.index, &evals))
}

async fn evaluate(
    info: web::Data<AgentInfo>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let store = &server(&info)?.store;
    let id = parse_id(&id, "node")?;
    let snap = store.snapshot();
    let node = find_node(&snap, &id)?;
    let evals = node_evals(&snap, node, TriggeredBy::NodeUpdate);
    if evals.is_empty() {
        return Ok(node_write_answer(snap.latest_index().max(1), &evals));
    }
    let outcome = submit(
        store,
        Command::EvalUpdate {
            evals: evals.clone(),
        },
    )
    .await?;
    Ok(node_write_answer(outcome.index, &evals))
}

/// Removes the node; its jobs are evaluated so that its work moves.
async fn purge(
    info: web::Data<AgentInfo>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let store = &server(&info)?.store;
    let id = parse_id(&id, "node")?;
    let snap = store.snapshot();
    let node = find_node(&snap, &id)?;
    let evals = node_evals(&snap, node, TriggeredBy::NodeUpdate);
    let mut outcome = submit(store, Command::NodeDeregister { node_ids: vec![id] }).await?;
    if !evals.is_empty() {
        outcome = submit(
            store,
            Command::EvalUpdate {
                evals: evals.clone(),
            },
        )
        .await?;
    }
    Ok(node_write_answer(outcome.index, &evals))
}
