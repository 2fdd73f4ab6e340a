//! `/v1/deployments`, `/v1/deployment/*` and a job's deployments
//! (`/v1/job/:id/deployments`, `/v1/job/:id/deployment`).
//!
//! Reads come from the snapshot and block on the deployments table; the
//! writes (promote, fail, pause and resume, allocation health) go through
//! `ServerApi` and answer Nomad's `DeploymentUpdateResponse`. A write
//! refused because the deployment is terminal answers 500 with Nomad's
//! bare text, as Nomad's agent answers that RPC error.

use super::body::Body;
use super::errors::ApiError;
use super::eval_alloc_routes::parse_id;
use super::job_routes::write_answer;
use super::query::{
    api, blocking_read, decode_json, list_response, paginate, read_json, server, QueryOptions,
};
use super::stubs::alloc_stub;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::{Table, TableSet};
use herder::structs::AllocId;
use herder_server::server_api::{DeploymentUpdateResult, PromoteCanaries};
use serde::Deserialize;
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/deployments", web::get().to(list_deployments))
        .route(
            "/v1/deployment/allocations/{id}",
            web::get().to(deployment_allocations),
        )
        .service(
            web::resource("/v1/deployment/promote/{id}")
                .route(web::put().to(promote))
                .route(web::post().to(promote)),
        )
        .service(
            web::resource("/v1/deployment/fail/{id}")
                .route(web::put().to(fail))
                .route(web::post().to(fail)),
        )
        .service(
            web::resource("/v1/deployment/pause/{id}")
                .route(web::put().to(pause))
                .route(web::post().to(pause)),
        )
        .service(
            web::resource("/v1/deployment/allocation-health/{id}")
                .route(web::put().to(allocation_health))
                .route(web::post().to(allocation_health)),
        )
        .route("/v1/deployment/{id}", web::get().to(read_deployment))
        .route("/v1/job/{id}/deployments", web::get().to(job_deployments))
        .route(
            "/v1/job/{id}/deployment",
            web::get().to(job_latest_deployment),
        );
}

const DEPLOYMENTS: &[Table] = &[Table::Deployments];

async fn list_deployments(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let store = &server(&info)?.store;
    let (page, index) = blocking_read(store, TableSet::of(DEPLOYMENTS), &q, |snap| {
        let items = snap
            .deployments()
            .map(|d| (d.id.to_string(), d.namespace.as_str(), d));
        paginate(&q, items, |d| d)
    })
    .await?;
    Ok(list_response(index, page))
}

fn not_found() -> ApiError {
    ApiError::NotFound("deployment not found".into())
}

async fn read_deployment(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id, "deployment")?;
    read_json(&info, &req, TableSet::of(DEPLOYMENTS), |snap, _q| {
        snap.deployment(&id).cloned().ok_or_else(not_found)
    })
    .await
}

async fn deployment_allocations(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&id, "deployment")?;
    let tables = TableSet::of(&[Table::Allocs, Table::Deployments]);
    read_json(&info, &req, tables, |snap, _q| {
        snap.deployment(&id).ok_or_else(not_found)?;
        Ok(snap
            .allocs_by_deployment(&id)
            .iter()
            .map(|a| alloc_stub(snap, a))
            .collect::<Vec<_>>())
    })
    .await
}

/// `GET /v1/job/:id/deployments`: newest first; without `all`, only the
/// deployments of the current job (not of an older job of the same ID,
/// purged and registered again), as Nomad's.
async fn job_deployments(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let tables = TableSet::of(&[Table::Deployments, Table::Jobs]);
    read_json(&info, &req, tables, |snap, q| {
        let all = q.flag("all")?;
        let current = snap.job(&q.namespace, &id).map(|j| j.create_index);
        Ok(snap
            .deployments_of_job(&q.namespace, &id)
            .into_iter()
            .filter(|d| all || current.is_none_or(|c| d.job_create_index == c))
            .cloned()
            .collect::<Vec<_>>())
    })
    .await
}

/// `GET /v1/job/:id/deployment`: the job's latest deployment, `null` when
/// it has none (Nomad's CLI asks for it in `job status`).
async fn job_latest_deployment(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    read_json(&info, &req, TableSet::of(DEPLOYMENTS), |snap, q| {
        Ok(snap.latest_deployment(&q.namespace, &id).cloned())
    })
    .await
}

/// Nomad's `DeploymentUpdateResponse`, with the write answer's fields.
fn update_answer(r: &DeploymentUpdateResult) -> HttpResponse {
    write_answer(
        r.index,
        json!({
            "EvalID": r.eval_id.map(|e| e.to_string()).unwrap_or_default(),
            "EvalCreateIndex": r.eval_create_index,
            "DeploymentModifyIndex": r.deployment_modify_index,
            "RevertedJobVersion": r.reverted_job_version,
        }),
    )
}

/// The body of a write names its deployment too, as Nomad requires.
fn check_body_id(body_id: &str, path_id: &str) -> Result<(), ApiError> {
    if body_id.is_empty() {
        return Err(ApiError::BadRequest(
            "DeploymentID must be specified".into(),
        ));
    }
    if body_id != path_id {
        return Err(ApiError::BadRequest("Deployment ID does not match".into()));
    }
    Ok(())
}

/// `PUT /v1/deployment/promote/:id`: `{"DeploymentID", "All", "Groups"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct PromoteRequest {
    #[serde(rename = "DeploymentID")]
    deployment_id: String,
    all: bool,
    groups: Vec<String>,
}

async fn promote(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let _ = QueryOptions::from_request(&req)?;
    let request: PromoteRequest = decode_json(&body)?;
    check_body_id(&request.deployment_id, &path)?;
    let id = parse_id(&path, "deployment")?;
    let which = if request.all {
        PromoteCanaries::All
    } else {
        PromoteCanaries::Groups(request.groups)
    };
    let r = api(&info)?.promote_deployment(id, which).await?;
    Ok(update_answer(&r))
}

/// `PUT /v1/deployment/fail/:id` (no body).
async fn fail(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let _ = QueryOptions::from_request(&req)?;
    let id = parse_id(&path, "deployment")?;
    let r = api(&info)?.fail_deployment(id).await?;
    Ok(update_answer(&r))
}

/// `PUT /v1/deployment/pause/:id`: `{"DeploymentID", "Pause"}` (`false`
/// resumes).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct PauseRequest {
    #[serde(rename = "DeploymentID")]
    deployment_id: String,
    pause: bool,
}

async fn pause(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let _ = QueryOptions::from_request(&req)?;
    let request: PauseRequest = decode_json(&body)?;
    check_body_id(&request.deployment_id, &path)?;
    let id = parse_id(&path, "deployment")?;
    let r = api(&info)?.pause_deployment(id, request.pause).await?;
    Ok(update_answer(&r))
}

/// `PUT /v1/deployment/allocation-health/:id`:
/// `{"DeploymentID", "HealthyAllocationIDs", "UnhealthyAllocationIDs"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct AllocHealthRequest {
    #[serde(rename = "DeploymentID")]
    deployment_id: String,
    #[serde(rename = "HealthyAllocationIDs")]
    healthy: Vec<String>,
    /// Go's JSON decoder ignores case, and python-nomad sends it as
    /// `UnHealthyAllocationIDs`.
    #[serde(rename = "UnhealthyAllocationIDs", alias = "UnHealthyAllocationIDs")]
    unhealthy: Vec<String>,
}

async fn allocation_health(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let _ = QueryOptions::from_request(&req)?;
    let request: AllocHealthRequest = decode_json(&body)?;
    check_body_id(&request.deployment_id, &path)?;
    let id = parse_id(&path, "deployment")?;
    let healthy = alloc_ids(&request.healthy)?;
    let unhealthy = alloc_ids(&request.unhealthy)?;
    let r = api(&info)?
        .set_deployment_alloc_health(id, healthy, unhealthy)
        .await?;
    Ok(update_answer(&r))
}

fn alloc_ids(ids: &[String]) -> Result<Vec<AllocId>, ApiError> {
    ids.iter().map(|id| parse_id(id, "allocation")).collect()
}
