//! `/v1/operator/scheduler/configuration`: the cluster-wide scheduler
//! settings, with check-and-set writes; and `/v1/operator/quarantine`
//! (herder's own): the stored records the server set aside at start
//! because they could not be loaded.

use super::body::Body;
use super::errors::ApiError;
use super::job_routes::write_answer;
use super::query::{blocking_read, decode_json, json_with_index, server, QueryOptions};
use crate::agent::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::{ApplyError, Command, StoreError, Table, TableSet};
use herder::structs::SchedulerConfiguration;
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
    let store = &server(&info)?.store;
    let config: SchedulerConfiguration = decode_json(&body)?;
    let cas_index = match q.param("cas") {
        None => None,
        Some(v) => Some(v.parse::<u64>().map_err(|_| {
            ApiError::BadRequest(format!("Error parsing cas value: {v:?} is not a number"))
        })?),
    };
    let command = Command::SchedulerConfigUpdate { config, cas_index };
    let outcome = store
        .submit(command)
        .await
        .map_err(|_| ApiError::Unavailable("the server is shutting down".into()))?;
    match outcome {
        Ok(applied) => Ok(write_answer(applied.index, json!({"Updated": true}))),
        Err(StoreError::Rejected(ApplyError::CasMismatch { .. })) => {
            let index = store.snapshot().table_index(Table::SchedulerConfig).max(1);
            Ok(write_answer(index, json!({"Updated": false})))
        }
        Err(e) => Err(super::query::store_error(e)),
    }
}
