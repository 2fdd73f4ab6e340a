//! Variables (Nomad 1.4+'s `command/agent/variable_endpoint.go`):
//!
//! - `GET /v1/vars?prefix=&namespace=`: the metadata of the variables
//!   under a path prefix (never their items), a blocking query;
//! - `GET /v1/var/:path`: one variable with its items, 404 when absent;
//! - `PUT /v1/var/:path` (`?cas=N`; `?lock-acquire`, `?lock-renew`,
//!   `?lock-release`): writes it and answers it as stored;
//! - `DELETE /v1/var/:path` (`?cas=N`): removes it.
//!
//! A refused check-and-set or lock answers 409 with the variable as it is
//! (an empty object when there is none), as Nomad does. Every handler
//! first works out its [`VariableTarget`] (namespace and path): what a
//! path-scoped ACL check needs.

use super::body::Body;
use super::query::blocking_read;
use super::query::{api, json_with_index, ok_with_index, read_json, server, QueryOptions};
use super::ApiError;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::{Table, TableSet};
use herder::structs::variable::MAX_VARIABLE_SIZE;
use herder::structs::{VariableDecrypted, VariableMetadata};
use herder_server::server_api::variables::open_variable;
use herder_server::server_api::{LockRequest, PutVariable, VariableWrite};
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/vars", web::get().to(list_variables))
        .route("/v1/var/{path:.*}", web::get().to(read_variable))
        .route("/v1/var/{path:.*}", web::put().to(write_variable))
        .route("/v1/var/{path:.*}", web::post().to(write_variable))
        .route("/v1/var/{path:.*}", web::delete().to(delete_variable));
}

const VARIABLES: &[Table] = &[Table::Variables];

/// The largest body a variable's write may have: its items may weigh 64
/// KiB, and JSON's escapes can make a string up to six times longer
/// (`\u0001`); past this no valid variable fits, so it is refused before
/// it is parsed.
const MAX_BODY: usize = 6 * MAX_VARIABLE_SIZE + 16 * 1024;

/// The variable a request is about.
#[derive(Debug)]
pub struct VariableTarget {
    pub namespace: String,
    pub path: String,
}

impl VariableTarget {
    fn of(q: &QueryOptions, path: &str) -> VariableTarget {
        VariableTarget {
            namespace: q.namespace.clone(),
            path: path.trim_matches('/').to_string(),
        }
    }
}

/// `GET /v1/vars`.
async fn list_variables(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    read_json(&info, &req, TableSet::of(VARIABLES), |snap, q| {
        let found: Vec<VariableMetadata> = snap
            .variables_by_prefix(&q.namespace, &q.prefix)
            .map(|v| v.meta.clone())
            .collect();
        Ok(found)
    })
    .await
}

/// `GET /v1/var/:path`.
async fn read_variable(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let target = VariableTarget::of(&q, &path);
    let store = &server(&info)?.store;
    let (found, index) = blocking_read(store, TableSet::of(VARIABLES), &q, |snap| {
        snap.variable(&target.namespace, &target.path)
            .map(|v| open_variable(snap, v))
            .transpose()
            .map_err(ApiError::from)
    })
    .await?;
    match found {
        Some(variable) => Ok(json_with_index(index, &variable)),
        None => Err(ApiError::NotFound("variable not found".into())),
    }
}

/// `PUT /v1/var/:path`: a write, or a lock operation.
async fn write_variable(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let mut target = VariableTarget::of(&q, &path);
    let mut variable = decode_variable(&body)?;
    // The namespace of the query string, else the body's, else default.
    if q.param("namespace").is_none() && !variable.meta.namespace.is_empty() {
        target.namespace = variable.meta.namespace.clone();
    }
    variable.meta.namespace = target.namespace.clone();
    variable.meta.path = target.path.clone();
    let lock_id = variable.meta.lock.as_ref().map(|l| l.id.clone());
    let api = api(&info)?;
    let written = if q.flag("lock-acquire")? {
        let ttl = variable
            .meta
            .lock
            .as_ref()
            .filter(|l| !l.ttl.is_empty())
            .map(|l| parse_duration(&l.ttl))
            .transpose()?;
        variable.meta.lock = None;
        api.lock_variable(LockRequest::Acquire { variable, ttl })
            .await?
    } else if q.flag("lock-renew")? || q.flag("lock-release")? {
        let lock_id = lock_id
            .filter(|id| !id.is_empty())
            .ok_or_else(|| ApiError::BadRequest("missing lock ID".into()))?;
        let (namespace, path) = (target.namespace, target.path);
        let request = if q.flag("lock-renew")? {
            LockRequest::Renew {
                namespace,
                path,
                lock_id,
            }
        } else {
            LockRequest::Release {
                namespace,
                path,
                lock_id,
            }
        };
        api.lock_variable(request).await?
    } else {
        variable.meta.lock = None;
        api.put_variable(PutVariable {
            variable,
            cas: cas(&q)?,
            lock_id,
        })
        .await?
    };
    Ok(answer(written))
}

/// `DELETE /v1/var/:path`.
async fn delete_variable(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let target = VariableTarget::of(&q, &path);
    let written = api(&info)?
        .delete_variable(&target.namespace, &target.path, cas(&q)?, None)
        .await?;
    Ok(answer(written))
}

/// A write's answer: the variable (200), nothing (200 after a delete), or
/// the conflicting variable (409).
fn answer(written: VariableWrite) -> HttpResponse {
    match written {
        VariableWrite::Written(variable) => json_with_index(variable.meta.modify_index, &variable),
        VariableWrite::Deleted { index } => ok_with_index(index).finish(),
        VariableWrite::Conflict(current) => {
            let body = match current {
                Some(variable) => serde_json::to_value(&variable).unwrap_or_else(|_| json!({})),
                None => json!({}),
            };
            HttpResponse::Conflict().json(body)
        }
    }
}

/// The body, bounded before it is parsed.
fn decode_variable(body: &[u8]) -> Result<VariableDecrypted, ApiError> {
    if body.len() > MAX_BODY {
        return Err(ApiError::PayloadTooLarge(format!(
            "a variable's body may not exceed {MAX_BODY} bytes"
        )));
    }
    super::query::decode_json(body)
}

/// `?cas=N`: the `ModifyIndex` the writer last saw.
fn cas(q: &QueryOptions) -> Result<Option<u64>, ApiError> {
    q.param("cas")
        .map(|text| {
            text.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("failed to parse cas value {text:?}")))
        })
        .transpose()
}

/// A Go duration ("15s", "1m30s").
fn parse_duration(text: &str) -> Result<std::time::Duration, ApiError> {
    herder::jobspec::parse_go_duration(text)
        .map_err(|e| ApiError::BadRequest(format!("invalid lock TTL: {e}")))
}
