//! `/v1/operator/autopilot/configuration` and
//! `/v1/operator/autopilot/health`: autopilot's replicated settings (read;
//! replaced with `PUT`, check-and-set with `?cas=`, answering `true` or
//! `false` as Nomad does) and the servers' health as autopilot judges it
//! (429 when a server is unhealthy, as Nomad answers). The work is
//! `ServerApi::autopilot_config` / `set_autopilot_config` /
//! `autopilot_health`.
//!
//! A written setting herder keeps but does not act on (Nomad Enterprise's)
//! is named in the `X-Herder-Warnings` header of the answer, whose body
//! stays Nomad's bare boolean.

use super::body::Body;
use super::errors::ApiError;
use super::query::{api, decode_json, json_with_index, QueryOptions};
use super::raft_routes;
use crate::AgentInfo;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::jobspec::format_go_duration;
use herder::structs::AutopilotConfiguration;
use herder_raft::cluster::autopilot_health::{HealthReport, ServerHealth};
use herder_server::server_api::SetAutopilotConfig;
use serde_json::{json, Value};

/// The header naming the written settings herder does not act on.
pub const WARNINGS_HEADER: &str = "X-Herder-Warnings";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/operator/autopilot/configuration")
            .route(web::get().to(read_config))
            .route(web::put().to(write_config)),
    )
    .service(web::resource("/v1/operator/autopilot/health").route(web::get().to(health)));
}

/// Nomad's `api.AutopilotConfiguration`, with its index.
async fn read_config(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let (config, index) = api(&info)?.autopilot_config();
    Ok(json_with_index(index, &config))
}

/// Replaces the configuration; with `?cas=N` only when its ModifyIndex is
/// still N. Nomad answers `true` for a plain write and the check's outcome
/// for a check-and-set.
async fn write_config(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let config: AutopilotConfiguration = decode_json(&body)?;
    let cas_index = q.cas_index()?;
    let written = api(&info)?
        .set_autopilot_config(SetAutopilotConfig { config, cas_index })
        .await?;
    let mut answer = HttpResponse::Ok();
    answer.insert_header(("X-Nomad-Index", written.index.to_string()));
    if !written.warnings.is_empty() {
        answer.insert_header((WARNINGS_HEADER, written.warnings.join("; ")));
    }
    Ok(answer.json(written.updated))
}

/// Nomad's `api.OperatorHealthReply`; 429 when a server is unhealthy.
async fn health(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let api = api(&info)?;
    let me = raft_routes::servers(&info)
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::BadRequest("this agent does not run a server".into()))?;
    let report = api.autopilot_health(&me);
    let status = if report.healthy {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    Ok(HttpResponse::build(status).json(report_json(&report)))
}

fn report_json(report: &HealthReport) -> Value {
    let servers: Vec<Value> = report.servers.iter().map(server_json).collect();
    json!({
        "Healthy": report.healthy,
        "FailureTolerance": report.failure_tolerance,
        "Servers": servers,
        "Leader": report.leader,
        "Voters": report.voters,
    })
}

/// One server, as Nomad encodes it: `LastContact` as Go prints a
/// duration, `StableSince` in RFC 3339 rounded to the second, UTC.
fn server_json(s: &ServerHealth) -> Value {
    let stable: chrono::DateTime<chrono::Utc> = s.stable_since.into();
    json!({
        "ID": s.id,
        "Name": s.name,
        "Address": s.address,
        "SerfStatus": s.serf_status,
        "Version": s.version,
        "Leader": s.leader,
        "LastContact": format_go_duration(s.last_contact),
        "LastTerm": s.last_term,
        "LastIndex": s.last_index,
        "Healthy": s.healthy,
        "Voter": s.voter,
        "StableSince": stable.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    })
}
