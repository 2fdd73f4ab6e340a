//! `/v1/search` and `/v1/search/fuzzy`: Nomad's prefix and fuzzy search
//! (the CLI's ID completion, the UI's search box).
//!
//! The search itself is `herder::search` over the current snapshot;
//! bounded work, so it runs on the HTTP worker. As in Nomad, neither is a
//! blocking query, and the namespace comes from `?namespace=`, else the
//! body's `Namespace`, else `default`.

use super::body::Body;
use super::errors::ApiError;
use super::query::{decode_json, json_with_index, server, QueryOptions};
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::search::{self, SearchError};
use herder::structs::job::DEFAULT_NAMESPACE;
use serde::Deserialize;
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/search")
            .route(web::put().to(prefix_search))
            .route(web::post().to(prefix_search)),
    )
    .service(
        web::resource("/v1/search/fuzzy")
            .route(web::put().to(fuzzy_search))
            .route(web::post().to(fuzzy_search)),
    );
}

/// The body of `/v1/search` (Nomad's `SearchRequest`; other
/// `QueryOptions` members are accepted and ignored, as Nomad's decoder
/// does).
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct SearchRequest {
    prefix: String,
    context: String,
    namespace: String,
}

/// The body of `/v1/search/fuzzy` (Nomad's `FuzzySearchRequest`).
#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct FuzzySearchRequest {
    text: String,
    context: String,
    namespace: String,
}

/// `?namespace=` wins over the body's, as in Nomad's `parseNamespace`.
fn namespace<'a>(q: &'a QueryOptions, body: &'a str) -> &'a str {
    match q.param("namespace") {
        Some(ns) if !ns.is_empty() => ns,
        _ if !body.is_empty() => body,
        _ => DEFAULT_NAMESPACE,
    }
}

/// Nomad answers these with 500; they are the request's fault, so 400.
fn refused(e: SearchError) -> ApiError {
    ApiError::BadRequest(e.to_string())
}

/// `{"Matches": {context: [ID] | null}, "Truncations": {context: bool},
/// "Index", "KnownLeader", "LastContact"}`.
async fn prefix_search(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let request: SearchRequest = decode_json(&body)?;
    let snap = server(&info)?.store.snapshot();
    let namespace = namespace(&q, &request.namespace);
    let answer = search::prefix_search(&snap, &request.prefix, &request.context, namespace)
        .map_err(refused)?;
    Ok(json_with_index(
        answer.index,
        &json!({
            "Matches": answer.matches,
            "Truncations": answer.truncations,
            "Index": answer.index,
            "KnownLeader": true,
            "LastContact": 0,
        }),
    ))
}

/// `{"Matches": {context: [{"ID", "Scope"}]}, "Truncations", "Index",
/// ...}`; 400 for a term shorter than 2 bytes (Nomad's
/// `min_term_length`).
async fn fuzzy_search(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let request: FuzzySearchRequest = decode_json(&body)?;
    let snap = server(&info)?.store.snapshot();
    let namespace = namespace(&q, &request.namespace);
    let answer =
        search::fuzzy_search(&snap, &request.text, &request.context, namespace).map_err(refused)?;
    Ok(json_with_index(
        answer.index,
        &json!({
            "Matches": answer.matches,
            "Truncations": answer.truncations,
            "Index": answer.index,
            "KnownLeader": true,
            "LastContact": 0,
        }),
    ))
}
