//! `/v1/client/allocation/:alloc_id/restart` and `.../signal`: a user's
//! restart of, or signal for, a running allocation (`nomad alloc restart`,
//! `nomad alloc signal`), served by every agent and carried out by the
//! client that runs the allocation.
//!
//! Routing follows Nomad's: an agent whose client runs the allocation acts
//! on it at once; otherwise the request goes where `alloc_routing` says (a
//! server to the node's agent, a client-only agent to its server). Answers are Nomad's: 200
//! `{"Index": 0}`; 404 `Unknown allocation "<id>"` (also for an ID that is
//! not one); 400 for an allocation that is over, a task that is not
//! running, a bad signal; 404 for a task the allocation does not have.

use super::alloc_routing::{alloc_route, Route};
use super::body::Body;
use super::errors::ApiError;
use super::forward::forward;
use super::query::{decode_json, QueryOptions};
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder_client::alloc_manager::ControlAlloc;
use herder_client::driver::{parse_user_signal, DriverError};
use herder_client::{AllocControl, ControlError};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::Duration;

/// How long a restart may wait for the old process to exit (its
/// `kill_timeout`, then SIGKILL) before the answer goes out anyway (503;
/// the restart goes on).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(60);
/// A forwarded request leaves the other agent time to give its own answer,
/// timeout included.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(70);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/client/allocation/{id}/restart")
            .route(web::put().to(restart))
            .route(web::post().to(restart)),
    )
    .service(
        web::resource("/v1/client/allocation/{id}/signal")
            .route(web::put().to(signal))
            .route(web::post().to(signal)),
    );
}

/// `PUT /v1/client/allocation/:id/restart`'s body; it may be left out.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase", default)]
struct RestartRequest {
    /// One task; empty: every running task.
    task_name: String,
    /// Nomad 1.2's "every task"; herder restarts every running task then
    /// too (a task that is over is not run again).
    all_tasks: bool,
}

/// `PUT /v1/client/allocation/:id/signal`'s body.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "PascalCase", default)]
struct SignalRequest {
    /// One task; empty: every running task.
    task: String,
    signal: String,
}

async fn restart(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let _ = QueryOptions::from_request(&req)?;
    let request: RestartRequest = if body.iter().all(u8::is_ascii_whitespace) {
        RestartRequest::default()
    } else {
        decode_json(&body)?
    };
    if request.all_tasks && !request.task_name.is_empty() {
        return Err(ApiError::BadRequest(
            "task name cannot be set when restarting all tasks".into(),
        ));
    }
    let control = AllocControl::Restart {
        task: non_empty(&request.task_name),
    };
    let body = serde_json::to_value(&request).unwrap_or_default();
    route(&info, &req, &id, control, "restart", body).await
}

async fn signal(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let _ = QueryOptions::from_request(&req)?;
    let request: SignalRequest = decode_json(&body)?;
    parse_user_signal(&request.signal).map_err(ApiError::BadRequest)?;
    let control = AllocControl::Signal {
        task: non_empty(&request.task),
        signal: request.signal.clone(),
    };
    let body = serde_json::to_value(&request).unwrap_or_default();
    route(&info, &req, &id, control, "signal", body).await
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}

/// Acts on the allocation here when this agent's client runs it, else
/// forwards the request (`action`, `body`) towards the agent that does.
async fn route(
    info: &AgentInfo,
    req: &HttpRequest,
    id: &str,
    control: AllocControl,
    action: &str,
    body: serde_json::Value,
) -> Result<HttpResponse, ApiError> {
    // Nomad's text, for an ID that names no allocation or is not one.
    let unknown = |id: &str| ApiError::NotFound(format!("Unknown allocation \"{id}\""));
    let Ok(alloc_id) = uuid::Uuid::parse_str(id) else {
        return Err(unknown(id));
    };
    let path = format!("/v1/client/allocation/{alloc_id}/{action}");
    if let Some(client) = info.client.get() {
        let ask = client.agent.send(ControlAlloc { alloc_id, control });
        match tokio::time::timeout(CONTROL_TIMEOUT, ask).await {
            Err(_) => {
                return Err(ApiError::Unavailable(format!(
                    "the allocation's tasks did not answer within {CONTROL_TIMEOUT:?}; \
                     the {action} goes on"
                )))
            }
            Ok(Ok(Err(ControlError::UnknownAlloc(_)))) | Ok(Err(_)) => {}
            Ok(Ok(done)) => return answer(done),
        }
    }
    // Over on the servers: refused there, not sent on to its node.
    let check = |alloc: &herder::structs::Allocation| {
        if !alloc.is_terminal() {
            return Ok(());
        }
        let why = if alloc.client_status.is_terminal() {
            alloc.client_status.as_str().to_string()
        } else {
            "being stopped".to_string()
        };
        Err(control_error(ControlError::Terminal { alloc_id, why }))
    };
    match alloc_route(info, req, &alloc_id, false, check)? {
        Route::There { address, hop } => {
            forward(req, &address, hop, &path, &body, FORWARD_TIMEOUT).await
        }
        Route::Here => Err(unknown(id)),
    }
}

/// The HTTP answer to a restart or signal carried out here.
fn answer(done: Result<(), ControlError>) -> Result<HttpResponse, ApiError> {
    match done {
        // Nomad answers its `GenericResponse`.
        Ok(()) => Ok(HttpResponse::Ok().json(json!({ "Index": 0 }))),
        Err(e) => Err(control_error(e)),
    }
}

fn control_error(e: ControlError) -> ApiError {
    let text = e.to_string();
    match e {
        ControlError::UnknownAlloc(_) | ControlError::UnknownTask(_) => ApiError::NotFound(text),
        ControlError::Terminal { .. }
        | ControlError::NotRunning(_)
        | ControlError::InvalidSignal(_)
        | ControlError::Driver(DriverError::Task { .. }) => ApiError::BadRequest(text),
        ControlError::Driver(DriverError::Node(_)) => ApiError::Internal(text),
    }
}
