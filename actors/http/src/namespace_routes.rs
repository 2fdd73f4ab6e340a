//! Namespaces, as Nomad's HTTP API has them:
//!
//! - `GET /v1/namespaces`: every namespace (`?prefix=`), by name, a
//!   blocking query on the namespace table's index;
//! - `GET /v1/namespace/:name`: one, or 404 `Namespace not found`;
//! - `PUT|POST /v1/namespace` and `/v1/namespace/:name`: create or update
//!   from a `Namespace` body (its `Name` must match the path's);
//! - `DELETE /v1/namespace/:name`.
//!
//! Writes answer an empty 200 with `X-Nomad-Index`, as Nomad's agent does.

use super::body::Body;
use super::query::{api, decode_json, read_json, QueryOptions};
use super::ApiError;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::{Table, TableSet};
use herder::structs::Namespace;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/namespaces", web::get().to(list))
        .route("/v1/namespace", web::put().to(create))
        .route("/v1/namespace", web::post().to(create))
        .route("/v1/namespace/{name}", web::get().to(read))
        .route("/v1/namespace/{name}", web::put().to(update))
        .route("/v1/namespace/{name}", web::post().to(update))
        .route("/v1/namespace/{name}", web::delete().to(delete));
}

fn namespaces_table() -> TableSet {
    TableSet::of(&[Table::Namespaces])
}

/// `GET /v1/namespaces`.
async fn list(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    read_json(&info, &req, namespaces_table(), |snap, q| {
        Ok(snap.namespaces_by_prefix(&q.prefix))
    })
    .await
}

/// `GET /v1/namespace/:name`.
async fn read(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    read_json(&info, &req, namespaces_table(), |snap, _| {
        snap.namespace(&name)
            .ok_or_else(|| ApiError::NotFound("Namespace not found".into()))
    })
    .await
}

/// `PUT /v1/namespace`.
async fn create(info: web::Data<AgentInfo>, body: Body) -> Result<HttpResponse, ApiError> {
    let namespace: Namespace = decode_json(&body)?;
    upsert(&info, namespace).await
}

/// `PUT /v1/namespace/:name`.
async fn update(
    info: web::Data<AgentInfo>,
    name: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let namespace: Namespace = decode_json(&body)?;
    if namespace.name != *name {
        return Err(ApiError::BadRequest(
            "Namespace name does not match request path".into(),
        ));
    }
    upsert(&info, namespace).await
}

async fn upsert(info: &AgentInfo, namespace: Namespace) -> Result<HttpResponse, ApiError> {
    let index = api(info)?.upsert_namespaces(vec![namespace]).await?;
    Ok(written(index))
}

/// `DELETE /v1/namespace/:name`.
async fn delete(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    // Only for its refusal of another region.
    QueryOptions::from_request(&req)?;
    let index = api(&info)?
        .delete_namespace(&name, &info.config.region)
        .await?;
    Ok(written(index))
}

fn written(index: u64) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(("X-Nomad-Index", index.to_string()))
        .finish()
}
