//! The native service catalog (Nomad's service discovery with
//! `provider = "nomad"`):
//!
//! - `GET /v1/services`: `[{Namespace, Services: [{ServiceName, Tags}]}]`,
//!   the tags of every instance merged (sorted, once each);
//! - `GET /v1/service/:name`: the service's registrations;
//! - `DELETE /v1/service/:name/:id`: removes one registration;
//!
//! both reads are blocking queries on the catalog's index. Client agents
//! register and remove their allocations' services, signed with the
//! node's SecretID in `X-Nomad-Token` like their other node traffic:
//!
//! - `PUT /v1/node/:id/services` `{"Services": [ServiceRegistration]}`;
//! - `PUT /v1/node/:id/services/deregister` `{"AllocIDs": [...]}`;
//!
//! both answer `{Index}`.

use super::body::Body;
use super::client_routes::{node_id, token};
use super::query::{api, decode_json, read_json};
use super::ApiError;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::{StateSnapshot, Table, TableSet};
use herder::structs::{AllocId, ServiceRegistration};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/services", web::get().to(list_services))
        .route("/v1/service/{name}", web::get().to(service_instances))
        .route("/v1/service/{name}/{id}", web::delete().to(delete_service))
        .route("/v1/node/{id}/services", web::put().to(register))
        .route(
            "/v1/node/{id}/services/deregister",
            web::put().to(deregister),
        );
}

const SERVICES: &[Table] = &[Table::Services];

/// `GET /v1/services`: each namespace's services with their tags.
async fn list_services(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    read_json(&info, &req, TableSet::of(SERVICES), |snap, q| {
        Ok(service_list(snap, |ns| q.in_namespace(ns)))
    })
    .await
}

/// The list `GET /v1/services` answers, by namespace then service name.
fn service_list(snap: &StateSnapshot, wanted: impl Fn(&str) -> bool) -> Vec<Value> {
    let mut by_ns: BTreeMap<&str, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
    for s in snap.services().filter(|s| wanted(&s.namespace)) {
        let tags = by_ns
            .entry(&s.namespace)
            .or_default()
            .entry(&s.service_name)
            .or_default();
        tags.extend(s.tags.iter().map(String::as_str));
    }
    by_ns
        .into_iter()
        .map(|(ns, services)| {
            let services: Vec<Value> = services
                .into_iter()
                .map(|(name, tags)| json!({"ServiceName": name, "Tags": tags}))
                .collect();
            json!({"Namespace": ns, "Services": services})
        })
        .collect()
}

/// `GET /v1/service/:name`: the service's registrations in the namespace.
async fn service_instances(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    read_json(&info, &req, TableSet::of(SERVICES), |snap, q| {
        let found: Vec<ServiceRegistration> = snap
            .services_named(&q.namespace, &name)
            .map(|s| (**s).clone())
            .collect();
        Ok(found)
    })
    .await
}

/// `DELETE /v1/service/:name/:id`.
async fn delete_service(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let q = super::query::QueryOptions::from_request(&req)?;
    let (name, id) = path.into_inner();
    let index = api(&info)?.delete_service(&q.namespace, &name, &id).await?;
    Ok(index_answer(index))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RegisterRequest {
    #[serde(default)]
    services: Vec<ServiceRegistration>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DeregisterRequest {
    #[serde(default, rename = "AllocIDs")]
    alloc_ids: Vec<AllocId>,
}

/// `PUT /v1/node/:id/services`: a client registers its allocations'
/// services.
async fn register(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let request: RegisterRequest = decode_json(&body)?;
    let index = api(&info)?
        .register_services(node_id(&path)?, &token(&req), request.services)
        .await?;
    Ok(index_answer(index))
}

/// `PUT /v1/node/:id/services/deregister`: a client removes the services
/// of allocations that stopped.
async fn deregister(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    path: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let request: DeregisterRequest = decode_json(&body)?;
    let index = api(&info)?
        .deregister_alloc_services(node_id(&path)?, &token(&req), request.alloc_ids)
        .await?;
    Ok(index_answer(index))
}

fn index_answer(index: u64) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(("X-Nomad-Index", index.to_string()))
        .json(json!({ "Index": index }))
}
