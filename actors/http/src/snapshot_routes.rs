//! `/v1/operator/snapshot`: `GET` saves the whole state as one file
//! (Nomad's archive, with its `Digest: sha-256=<base64>` header and the
//! state's index in `X-Nomad-Index`), `PUT` restores one (the body, at
//! most `limits.snapshot_max_bytes`, checked whole before anything
//! changes; a bad file is a 400 naming what is wrong). The work is
//! `ServerApi::save_snapshot` / `restore_snapshot`.

use super::body::{limits, read_within};
use super::errors::ApiError;
use super::query::{api, json_with_index};
use crate::AgentInfo;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/operator/snapshot")
            .route(web::get().to(save))
            .route(web::put().to(restore)),
    );
}

/// The file, whole: Nomad's client reads it to the end and checks the
/// digest. In a cluster the read barrier (`cluster_reads`) runs first, so
/// the file holds every write acknowledged before the request, unless
/// `?stale` lets the server save what its replica has.
async fn save(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let saved = api(&info)?.save_snapshot().await?;
    Ok(HttpResponse::Ok()
        .insert_header(("Digest", saved.digest))
        .insert_header(("X-Nomad-Index", saved.index.to_string()))
        .insert_header(("X-Nomad-KnownLeader", "true"))
        .insert_header(("X-Nomad-LastContact", "0"))
        .insert_header((header::CONTENT_TYPE, "application/octet-stream"))
        .body(saved.file))
}

async fn restore(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let limits = limits(&req);
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let max = (limits.snapshot_max_bytes, "snapshot_max_bytes");
    let file = read_within(payload.into_inner(), declared, max, &limits).await?;
    let restored = api(&info)?
        .restore_snapshot(file.to_vec(), limits.snapshot_max_bytes as u64)
        .await?;
    Ok(json_with_index(
        restored.index,
        &json!({"Index": restored.index, "SavedIndex": restored.saved_index}),
    ))
}
