//! `/v1/operator/scheduler/configuration`: the cluster-wide scheduler
//! settings, with check-and-set writes; and `/v1/operator/quarantine`
//! (herder's own): the stored records the server set aside at start
//! because they could not be loaded.

use super::body::Body;
use super::errors::ApiError;
use super::job_routes::write_answer;
use super::query::{api, blocking_read, decode_json, json_with_index, server, QueryOptions};
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::{Table, TableSet};
use herder::structs::SchedulerConfiguration;
use herder_server::server_api::SetSchedulerConfig;
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/operator/scheduler/configuration")
            .route(web::get().to(read_config))
            .route(web::put().to(write_config))
            .route(web::post().to(write_config)),
    )
    .route("/v1/operator/quarantine", web::get().to(quarantine));
}

/// What the store quarantined when it opened: each record's key, why, where
/// it was found and its size. The raw bytes stay in the data dir's
/// `quarantine` tree for an operator to inspect or restore.
async fn quarantine(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let store = &server(&info)?.store;
    let records: Vec<_> = store
        .quarantined()
        .into_iter()
        .map(|q| {
            json!({
                "Key": q.key,
                "Reason": q.reason,
                "Source": q.source,
                "FoundAtIndex": q.found_at_index,
                "ValueBytes": q.value_bytes,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(records))
}

async fn read_config(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let store = &server(&info)?.store;
    let tables = TableSet::of(&[Table::SchedulerConfig]);
    let (config, index) =
        blocking_read(store, tables, &q, |snap| Ok(snap.scheduler_config())).await?;
    Ok(json_with_index(
        index,
        &json!({"SchedulerConfig": config, "Index": index, "KnownLeader": true, "LastContact": 0}),
    ))
}

/// Replaces the configuration; with `?cas=N` only when its ModifyIndex is
/// still N, answering `Updated: false` otherwise (not an error, as Nomad).
async fn write_config(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let api = api(&info)?;
    let config: SchedulerConfiguration = decode_json(&body)?;
    let cas_index = q.cas_index()?;
    let r = api
        .set_scheduler_config(SetSchedulerConfig { config, cas_index })
        .await?;
    Ok(write_answer(r.index, json!({"Updated": r.updated})))
}
