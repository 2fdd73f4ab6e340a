//! `/v1/jobs`, `/v1/job/:id/*` (register, read, stop, versions, revert,
//! stable, dispatch, scale, ...), `/v1/jobs/parse`, `/v1/validate/job` and
//! the scaling policies (`/v1/scaling/policies`, `/v1/scaling/policy/:id`,
//! read from the jobs' groups).
//!
//! Handlers decode and render; the writes themselves are `ServerApi`'s.
//!
//! Writes validate first (a bad job is a 400 that changes nothing), then
//! submit one command carrying the job and the evaluation it triggers, and
//! answer once the command is durable; the eval router hands the
//! evaluation to the broker from the store's change feed.

use super::body::off_worker;
use super::body::Body;
use super::errors::ApiError;
use super::job_body::{decode_job_body, parse_job_body};
use super::plan;
use super::query::{
    api, blocking_read, decode_json, json_with_index, list_response, paginate, read_json, server,
    QueryOptions,
};
use super::stubs::{alloc_stub, job_stub};
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::jobspec::{self, JobspecError, LimitKind};
use herder::state::{StateSnapshot, Table, TableSet};
use herder::structs::unhonoured::{join_warnings, unhonoured_fields};
use herder::structs::Job;
use herder_server::server_api::{DispatchJob, JobWriteResult, RegisterJob, ScaleJob};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/jobs")
            .route(web::get().to(list_jobs))
            .route(web::put().to(register_new))
            .route(web::post().to(register_new)),
    )
    .service(
        web::resource("/v1/jobs/parse")
            .route(web::put().to(parse_job))
            .route(web::post().to(parse_job)),
    )
    .service(
        web::resource("/v1/validate/job")
            .route(web::put().to(validate_job))
            .route(web::post().to(validate_job)),
    )
    .service(
        web::resource("/v1/job/{id}")
            .route(web::get().to(read_job))
            .route(web::put().to(register_existing))
            .route(web::post().to(register_existing))
            .route(web::delete().to(deregister)),
    )
    .route("/v1/job/{id}/allocations", web::get().to(job_allocations))
    .route("/v1/job/{id}/evaluations", web::get().to(job_evaluations))
    .route("/v1/job/{id}/summary", web::get().to(job_summary))
    .route("/v1/job/{id}/versions", web::get().to(job_versions))
    .service(
        web::resource("/v1/job/{id}/plan")
            .route(web::put().to(plan::plan_job))
            .route(web::post().to(plan::plan_job)),
    )
    .service(
        web::resource("/v1/job/{id}/evaluate")
            .route(web::put().to(evaluate))
            .route(web::post().to(evaluate)),
    )
    .service(
        web::resource("/v1/job/{id}/periodic/force")
            .route(web::put().to(periodic_force))
            .route(web::post().to(periodic_force)),
    )
    .service(
        web::resource("/v1/job/{id}/scale")
            .route(web::get().to(scale_status))
            .route(web::put().to(scale))
            .route(web::post().to(scale)),
    )
    .service(
        web::resource("/v1/job/{id}/dispatch")
            .route(web::put().to(dispatch))
            .route(web::post().to(dispatch)),
    )
    .service(
        web::resource("/v1/job/{id}/revert")
            .route(web::put().to(revert))
            .route(web::post().to(revert)),
    )
    .service(
        web::resource("/v1/job/{id}/stable")
            .route(web::put().to(stable))
            .route(web::post().to(stable)),
    )
    .route("/v1/scaling/policies", web::get().to(scaling_policies))
    .route("/v1/scaling/policy/{id}", web::get().to(scaling_policy));
}

const JOBS: &[Table] = &[Table::Jobs, Table::JobSummaries];

async fn list_jobs(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let store = &server(&info)?.store;
    let (page, index) = blocking_read(store, TableSet::of(JOBS), &q, |snap| {
        let items = snap.jobs().map(|j| (j.id.clone(), j.namespace.as_str(), j));
        paginate(&q, items, |j| job_stub(snap, j))
    })
    .await?;
    Ok(list_response(index, page))
}

/// The current job, or 404 "job not found".
pub(super) fn find_job<'a>(
    snap: &'a StateSnapshot,
    q: &QueryOptions,
    id: &str,
) -> Result<&'a Arc<Job>, ApiError> {
    snap.job(&q.namespace, id)
        .ok_or_else(|| ApiError::NotFound("job not found".into()))
}

async fn read_job(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    read_json(&info, &req, TableSet::of(&[Table::Jobs]), |snap, q| {
        find_job(snap, q, &id).cloned()
    })
    .await
}

async fn job_allocations(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let tables = TableSet::of(&[Table::Allocs, Table::Jobs]);
    read_json(&info, &req, tables, |snap, q| {
        let all = q.flag("all")?;
        let current = snap.job(&q.namespace, &id).map(|j| j.create_index);
        Ok(snap
            .allocs_by_job(&q.namespace, &id)
            // Without `all`, allocations of an older job of the same ID
            // (purged and registered again) are left out, as in Nomad.
            .filter(|a| all || current.is_none_or(|c| a.create_index >= c))
            .map(|a| alloc_stub(snap, a))
            .collect::<Vec<_>>())
    })
    .await
}

async fn job_evaluations(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    read_json(&info, &req, TableSet::of(&[Table::Evals]), |snap, q| {
        Ok(snap
            .evals_by_job(&q.namespace, &id)
            .cloned()
            .collect::<Vec<_>>())
    })
    .await
}

async fn job_summary(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let tables = TableSet::of(&[Table::JobSummaries]);
    read_json(&info, &req, tables, |snap, q| {
        snap.job_summary(&q.namespace, &id)
            .cloned()
            .ok_or_else(|| ApiError::NotFound("job not found".into()))
    })
    .await
}

async fn job_versions(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let store = &server(&info)?.store;
    let want_diffs = q.flag("diffs")?;
    let (body, index) = blocking_read(store, TableSet::of(&[Table::Jobs]), &q, |snap| {
        // Only the current job's versions: a purged job of the same ID may
        // leave versions behind while its allocations run (they reference
        // their job by version), and Nomad shows none of them.
        let current = snap.job(&q.namespace, &id).map(|j| j.create_index);
        let versions: Vec<Arc<Job>> = snap
            .job_versions(&q.namespace, &id)
            .filter(|v| current.is_some_and(|c| v.create_index >= c))
            .cloned()
            .collect();
        if versions.is_empty() {
            return Err(ApiError::NotFound("job versions not found".into()));
        }
        // Each version against the one before it, newest first, with
        // unchanged groups and tasks listed as Nomad's contextual diff does.
        let diffs = want_diffs.then(|| {
            versions
                .windows(2)
                .map(|w| plan::job_diff(Some(&w[1]), &w[0], true))
                .collect::<Vec<_>>()
        });
        Ok(json!({"Versions": versions, "Diffs": diffs}))
    })
    .await?;
    Ok(write_answer(index, body))
}

/// Adds the fields every Nomad write answer carries.
pub(super) fn write_answer(index: u64, mut body: Value) -> HttpResponse {
    if let Value::Object(map) = &mut body {
        map.insert("Index".into(), json!(index));
        map.insert("LastContact".into(), json!(0));
        map.insert("KnownLeader".into(), json!(true));
    }
    json_with_index(index, &body)
}

/// The options of `PUT /v1/jobs` besides the job itself. `PolicyOverride`
/// is accepted and ignored: herder has no Sentinel policies to override.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct RegisterOptions {
    enforce_index: bool,
    job_modify_index: u64,
    preserve_counts: bool,
    eval_priority: i32,
}

async fn register_new(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    register(info, req, None, body).await
}

async fn register_existing(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    register(info, req, Some(id.into_inner()), body).await
}

async fn register(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path_id: Option<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let api = api(&info)?;
    let max_job_bytes = info.config.limits.max_job_bytes;
    let (mut job, value) = off_worker(&info, move || parse_job_body(max_job_bytes, &body)).await?;
    if let Some(namespace) = namespace_for_job(&value, q.param("namespace")) {
        job.namespace = namespace;
    }
    crate::acl_rules::require_namespace(&req, &job.namespace, herder::acl::Capability::SubmitJob)?;
    if path_id.as_ref().is_some_and(|id| *id != job.id) {
        return Err(ApiError::BadRequest("Job ID does not match name".into()));
    }
    let options: RegisterOptions = serde_json::from_value(value)
        .map_err(|e| ApiError::BadRequest(format!("Failed to decode request body: {e}")))?;
    let result = api
        .register_job(RegisterJob {
            job,
            enforce_index: options.enforce_index.then_some(options.job_modify_index),
            preserve_counts: options.preserve_counts,
            eval_priority: (options.eval_priority != 0).then_some(options.eval_priority),
        })
        .await?;
    Ok(write_answer(result.index, register_answer(&result)))
}

/// The namespace of a job whose body names none (Nomad's
/// `namespaceForJob`): the `?namespace=` of the request, else the
/// request body's own `Namespace`; `None` keeps the job's.
fn namespace_for_job(value: &Value, query: Option<&str>) -> Option<String> {
    let named = |ns: Option<&str>| {
        ns.filter(|ns| !ns.is_empty() && *ns != "*")
            .map(str::to_string)
    };
    let in_job = value.get("Job").and_then(|j| j.get("Namespace"));
    if named(in_job.and_then(Value::as_str)).is_some() {
        return None;
    }
    named(query).or_else(|| named(value.get("Namespace").and_then(Value::as_str)))
}

/// Nomad's `JobRegisterResponse` body.
pub(super) fn register_answer(r: &JobWriteResult) -> Value {
    json!({
        "EvalID": r.eval_id.map(|id| id.to_string()).unwrap_or_default(),
        "EvalCreateIndex": r.eval_create_index,
        "JobModifyIndex": r.job_modify_index,
        "Warnings": join_warnings(&r.warnings),
    })
}

async fn deregister(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let api = api(&info)?;
    let purge = q.flag("purge")?;
    // Validated as Nomad does; herder has one region.
    let _global = q.flag("global")?;
    let r = api.deregister_job(&q.namespace, &id, purge).await?;
    Ok(write_answer(
        r.index,
        json!({
            "EvalID": r.eval_id.map(|id| id.to_string()).unwrap_or_default(),
            "EvalCreateIndex": r.eval_create_index,
            "JobModifyIndex": r.job_modify_index,
            "VolumeEvalID": "",
            "VolumeEvalIndex": 0,
        }),
    ))
}

async fn evaluate(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let r = api(&info)?.evaluate_job(&q.namespace, &id).await?;
    Ok(write_answer(
        r.index,
        json!({
            "EvalID": r.eval_id,
            "EvalCreateIndex": r.eval_create_index,
            "JobModifyIndex": r.job_modify_index,
        }),
    ))
}

/// Launches a periodic job's child now, as its schedule would.
async fn periodic_force(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let launched = api(&info)?.force_periodic_launch(&q.namespace, &id).await?;
    Ok(write_answer(
        launched.index,
        json!({"EvalID": launched.eval_id, "EvalCreateIndex": launched.index}),
    ))
}

/// `POST /v1/job/:id/scale` (Nomad's `api.ScalingRequest`).
/// `PolicyOverride` is accepted and ignored: herder has no Sentinel.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ScaleRequest {
    count: Option<i64>,
    target: BTreeMap<String, String>,
    message: String,
    error: bool,
    meta: BTreeMap<String, Value>,
}

/// Changes a group's count (a new job version and a scaling evaluation)
/// and records the scaling event; without a count, records the event.
async fn scale(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    use herder::structs::scaling::scaling_target;
    let q = QueryOptions::from_request(&req)?;
    let request: ScaleRequest = decode_json(&body)?;
    let target = |key: &str| request.target.get(key).filter(|v| !v.is_empty());
    if target(scaling_target::JOB).is_some_and(|job| **job != *id) {
        return Err(ApiError::BadRequest(
            "job ID in payload did not match URL".into(),
        ));
    }
    if target(scaling_target::NAMESPACE).is_some_and(|ns| *ns != q.namespace) {
        return Err(ApiError::BadRequest(
            "namespace in payload did not match header".into(),
        ));
    }
    let group = target(scaling_target::GROUP).cloned().unwrap_or_default();
    let api = api(&info)?;
    let result = api
        .scale_job(ScaleJob {
            namespace: q.namespace.clone(),
            job_id: id.into_inner(),
            group,
            count: request.count,
            message: request.message,
            error: request.error,
            meta: request.meta,
        })
        .await?;
    Ok(write_answer(result.index, register_answer(&result)))
}

/// `PUT /v1/job/:id/dispatch`: `{"Payload" (base64), "Meta",
/// "IdempotencyToken", "IdPrefixTemplate"}`. The token is also read from
/// `?idempotency_token=`, as Nomad's write requests take it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DispatchRequest {
    #[serde(rename = "JobID")]
    job_id: String,
    #[serde(rename = "Payload")]
    payload: String,
    #[serde(rename = "Meta")]
    meta: BTreeMap<String, String>,
    #[serde(rename = "IdempotencyToken")]
    idempotency_token: String,
    #[serde(rename = "IdPrefixTemplate")]
    id_prefix_template: String,
}

async fn dispatch(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    use base64::Engine;
    let q = QueryOptions::from_request(&req)?;
    let request: DispatchRequest = decode_json(&body)?;
    if !request.job_id.is_empty() && request.job_id != *id {
        return Err(ApiError::BadRequest("Job ID does not match".into()));
    }
    let payload = base64::engine::general_purpose::STANDARD
        .decode(request.payload.trim())
        .map_err(|e| ApiError::BadRequest(format!("Payload is not valid base64: {e}")))?;
    let token = match q.param("idempotency_token").filter(|t| !t.is_empty()) {
        Some(t) => t.to_string(),
        None => request.idempotency_token,
    };
    let api = api(&info)?;
    let r = api
        .dispatch_job(DispatchJob {
            namespace: q.namespace.clone(),
            job_id: id.into_inner(),
            payload,
            meta: request.meta,
            idempotency_token: token,
            id_prefix_template: request.id_prefix_template,
        })
        .await?;
    Ok(json_with_index(
        r.index,
        &json!({
            "DispatchedJobID": r.dispatched_job_id,
            "EvalID": r.eval_id.map(|id| id.to_string()).unwrap_or_default(),
            "EvalCreateIndex": r.eval_create_index,
            "JobCreateIndex": r.job_create_index,
            "Index": r.index,
        }),
    ))
}

/// `PUT /v1/job/:id/revert`: `{"JobID", "JobVersion", "EnforcePriorVersion"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct RevertRequest {
    #[serde(rename = "JobID")]
    job_id: String,
    job_version: u64,
    enforce_prior_version: Option<u64>,
}

async fn revert(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let request: RevertRequest = decode_json(&body)?;
    check_body_job_id(&request.job_id, &id)?;
    let api = api(&info)?;
    let result = api
        .revert_job(
            &q.namespace,
            &id,
            request.job_version,
            request.enforce_prior_version,
        )
        .await?;
    Ok(write_answer(result.index, register_answer(&result)))
}

/// `PUT /v1/job/:id/stable`: `{"JobID", "JobVersion", "Stable"}` ->
/// `{"Index"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct StableRequest {
    #[serde(rename = "JobID")]
    job_id: String,
    job_version: u64,
    stable: bool,
}

async fn stable(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let request: StableRequest = decode_json(&body)?;
    check_body_job_id(&request.job_id, &id)?;
    let api = api(&info)?;
    let index = api
        .set_job_stability(&q.namespace, &id, request.job_version, request.stable)
        .await?;
    Ok(json_with_index(index, &json!({"Index": index})))
}

/// Revert and stable name the job in the body too, as Nomad requires.
fn check_body_job_id(body_id: &str, path_id: &str) -> Result<(), ApiError> {
    if body_id.is_empty() {
        return Err(ApiError::BadRequest("JobID must be specified".into()));
    }
    if body_id != path_id {
        return Err(ApiError::BadRequest("Job ID does not match".into()));
    }
    Ok(())
}

async fn scale_status(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let tables = TableSet::of(&[Table::Jobs, Table::Allocs, Table::ScalingEvents]);
    read_json(&info, &req, tables, |snap, q| {
        let job = find_job(snap, q, &id)?;
        let events = snap.scaling_events(&job.namespace, &job.id);
        let mut groups = serde_json::Map::new();
        for tg in &job.task_groups {
            let group_events = events.and_then(|e| e.scaling_events.get(&tg.name));
            let allocs: Vec<_> = snap
                .allocs_by_job(&job.namespace, &job.id)
                .filter(|a| *a.task_group == *tg.name && !a.is_terminal())
                .collect();
            let running = allocs
                .iter()
                .filter(|a| a.client_status == herder::structs::ClientStatus::Running)
                .count();
            groups.insert(
                tg.name.clone(),
                json!({"Desired": tg.count, "Placed": allocs.len(), "Running": running,
                       "Healthy": running, "Unhealthy": 0, "Events": group_events}),
            );
        }
        Ok(json!({
            // Nomad answers the job's ModifyIndex as `JobModifyIndex` here.
            "JobID": job.id, "Namespace": job.namespace, "JobCreateIndex": job.create_index,
            "JobModifyIndex": job.modify_index, "JobStopped": job.stop, "TaskGroups": groups,
        }))
    })
    .await
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ParseRequest {
    #[serde(rename = "JobHCL")]
    job_hcl: String,
}

/// HCL to the JSON job. herder always answers the canonical job (its
/// parser fills defaults as it reads), whatever `Canonicalize` says.
async fn parse_job(info: web::Data<AgentInfo>, body: Body) -> Result<HttpResponse, ApiError> {
    let request: ParseRequest = decode_json(&body)?;
    let limits = hcl_limits(&info.config.limits);
    let job = off_worker(&info, move || {
        let vars = Default::default();
        jobspec::parse_hcl_with_limits(&request.job_hcl, "input.hcl", &vars, &limits).map_err(|e| {
            match e {
                JobspecError::Limit {
                    limit: LimitKind::SourceBytes,
                    ..
                } => ApiError::PayloadTooLarge(e.to_string()),
                other => ApiError::BadRequest(other.to_string()),
            }
        })
    })
    .await?;
    Ok(HttpResponse::Ok().json(job))
}

/// The HCL parser's bounds from the agent's `[limits]`.
fn hcl_limits(limits: &herder_common::config::Limits) -> jobspec::HclLimits {
    jobspec::HclLimits {
        max_source_bytes: limits.hcl_max_source_bytes,
        max_nesting_depth: limits.hcl_max_nesting_depth,
        max_expansion_bytes: limits.hcl_max_expansion_bytes,
    }
}

/// Nomad's `JobValidateResponse`: problems are listed, not an error.
async fn validate_job(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let value: Value = decode_json(&body)?;
    if value.get("Job").is_none_or(Value::is_null) {
        return Err(ApiError::BadRequest("Job must be specified".into()));
    }
    // Checked before the job is decoded: a job that does not decode still
    // names the namespace it was meant for (Nomad's default when none).
    let namespace = value
        .pointer("/Job/Namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .unwrap_or("default");
    crate::acl_rules::require_namespace(&req, namespace, herder::acl::Capability::ReadJob)?;
    let mut warnings = Vec::new();
    let errors: Vec<String> = match decode_job_body(&info, body).await {
        Ok((job, _)) => {
            warnings = unhonoured_fields(&job);
            vec![]
        }
        Err(e) => e
            .to_string()
            .lines()
            .map(|l| l.trim_start_matches(['\t', '*', ' ']).to_string())
            .filter(|l| !l.is_empty() && !l.ends_with("errors occurred:"))
            .collect(),
    };
    Ok(HttpResponse::Ok().json(json!({
        "DriverConfigValidated": false,
        "ValidationErrors": if errors.is_empty() { Value::Null } else { json!(errors) },
        "Error": errors.join("; "),
        "Warnings": join_warnings(&warnings),
    })))
}

/// `GET /v1/scaling/policies?job=&type=&prefix=`: the scaling policies of
/// the current jobs' groups, as Nomad's `ScalingPolicyListStub`s, by job
/// and group.
async fn scaling_policies(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    read_json(&info, &req, TableSet::of(JOBS), |snap, q| {
        let job_filter = q.param("job").filter(|j| !j.is_empty());
        let type_prefix = q.param("type").unwrap_or("");
        let stubs: Vec<Value> = snap
            .jobs()
            .filter(|j| q.in_namespace(&j.namespace))
            .filter(|j| job_filter.is_none_or(|id| j.id == id))
            .flat_map(|j| j.scaling_policies())
            .filter(|p| p.r#type.starts_with(type_prefix) && p.id.starts_with(&q.prefix))
            .map(|p| {
                json!({
                    "ID": p.id, "Enabled": p.enabled, "Type": p.r#type, "Target": p.target,
                    "CreateIndex": p.create_index, "ModifyIndex": p.modify_index,
                })
            })
            .collect();
        Ok(stubs)
    })
    .await
}

/// `GET /v1/scaling/policy/:id`: one policy, or 404 "policy not found".
async fn scaling_policy(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    read_json(&info, &req, TableSet::of(JOBS), |snap, _q| {
        snap.jobs()
            .flat_map(|j| j.scaling_policies())
            .find(|p| p.id == *id)
            .cloned()
            .ok_or_else(|| ApiError::NotFound("policy not found".into()))
    })
    .await
}
