//! `/v1/evaluations`, `/v1/evaluation/:id/*`, `/v1/allocations` and
//! `/v1/allocation/:id/*`.
//!
//! IDs in paths may be full UUIDs only; a malformed one is a 400 and an
//! unknown one a 404 with Nomad's text. A client-only agent hands an
//! allocation stop to its server, as Nomad's agents forward the RPC.

use super::errors::ApiError;
use super::forward::{forward, Hop};
use super::query::{api, blocking_read, list_response, paginate, read_json, server, QueryOptions};
use super::stubs::{alloc_stub, alloc_with_job};
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::{Table, TableSet};
use serde_json::json;
use std::time::Duration;

/// How long a client-only agent waits for its server's answer to a stop.
const STOP_FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/evaluations", web::get().to(list_evals))
        .route("/v1/evaluation/{id}", web::get().to(read_eval))
        .route(
            "/v1/evaluation/{id}/allocations",
            web::get().to(eval_allocs),
        )
        .route("/v1/allocations", web::get().to(list_allocs))
        .route("/v1/allocation/{id}", web::get().to(read_alloc))
        .service(
            web::resource("/v1/allocation/{id}/stop")
                .route(web::put().to(stop_alloc))
                .route(web::post().to(stop_alloc)),
        );
}

/// A UUID from the path; anything else cannot name an object.
pub(super) fn parse_id(text: &str, what: &str) -> Result<uuid::Uuid, ApiError> {
    uuid::Uuid::parse_str(text)
        .map_err(|_| ApiError::BadRequest(format!("invalid {what} ID {text:?}: not a UUID")))
}

async fn list_evals(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let store = &server(&info)?.store;
    let (page, index) = blocking_read(store, TableSet::of(&[Table::Evals]), &q, |snap| {
        let items = snap
            .evals()
            .map(|e| (e.id.to_string(), e.namespace.as_str(), e));
        paginate(&q, items, |e| e)
    })
    .await?;
    Ok(list_response(index, page))
}

async fn read_eval(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id, "evaluation")?;
    read_json(&info, &req, TableSet::of(&[Table::Evals]), |snap, _q| {
        snap.eval(&id)
            .cloned()
            .ok_or_else(|| ApiError::NotFound("eval not found".into()))
    })
    .await
}

async fn eval_allocs(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id, "evaluation")?;
    read_json(&info, &req, TableSet::of(&[Table::Allocs]), |snap, _q| {
        Ok(snap
            .allocs_by_eval(&id)
            .map(|a| alloc_stub(snap, a))
            .collect::<Vec<_>>())
    })
    .await
}

async fn list_allocs(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    // Nomad's stub fields: `resources=true` adds each allocation's
    // AllocatedResources (the web UI's node usage and topology add them
    // up), `task_states=false` leaves out TaskStates.
    let resources = q.param("resources") == Some("true");
    let task_states = q.param("task_states") != Some("false");
    let store = &server(&info)?.store;
    let (page, index) = blocking_read(store, TableSet::of(&[Table::Allocs]), &q, |snap| {
        // Read from where the prefix or the page starts, and no further
        // than the prefix goes: the table hands allocations out by ID a few
        // steps each (see `state::alloc_table`).
        // (Both read as text, as `paginate` compares them: a token that is
        // not an ID's text, say in capitals, starts at the prefix.)
        let floor = |text: &str| herder::search::uuid_prefix_floor(text).unwrap_or_default();
        let token = q.next_token.as_deref().map_or(Default::default(), floor);
        let items = snap
            .allocs_from(floor(&q.prefix).max(token))
            .map(|a| (a.id.to_string(), &*a.namespace, a))
            .take_while(|(id, _, _)| id.starts_with(&q.prefix));
        paginate(&q, items, |a| {
            let mut stub = alloc_stub(snap, a);
            if resources {
                stub["AllocatedResources"] = json!(a.allocated_resources);
            }
            if !task_states {
                stub["TaskStates"] = serde_json::Value::Null;
            }
            stub
        })
    })
    .await?;
    Ok(list_response(index, page))
}

async fn read_alloc(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id, "allocation")?;
    read_json(&info, &req, TableSet::of(&[Table::Allocs]), |snap, _q| {
        snap.alloc(&id)
            .map(|a| alloc_with_job(snap, a))
            .ok_or_else(|| ApiError::NotFound("alloc not found".into()))
    })
    .await
}

/// Stops one allocation (`ServerApi::stop_allocation`: its migration, with
/// an `alloc-stop` evaluation of its job); a client-only agent forwards the
/// request to its server.
async fn stop_alloc(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let _ = QueryOptions::from_request(&req)?;
    let id = parse_id(&id, "allocation")?;
    if info.server.is_none() {
        if let (Some(client), Hop::Direct) = (info.client.get(), Hop::of(&req)) {
            let path = format!("/v1/allocation/{id}/stop");
            return forward(
                &req,
                &client.server,
                Hop::ToServer,
                &path,
                &json!({}),
                STOP_FORWARD_TIMEOUT,
            )
            .await;
        }
    }
    let r = api(&info)?.stop_allocation(id).await?;
    Ok(super::job_routes::write_answer(
        r.index,
        json!({"EvalID": r.eval_id}),
    ))
}
