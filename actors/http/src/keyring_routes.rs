//! The keyring (Nomad 1.4+'s `nomad/keyring_endpoint.go` over HTTP):
//!
//! - `GET /v1/operator/keyring/keys`: every root key's metadata (never
//!   its material), a blocking query on the `root_keys` table;
//! - `PUT|POST /v1/operator/keyring/rotate` (`?full=true`): a new active
//!   key, the old ones inactive; `full` re-seals every variable under it;
//!   answers `{"Key": RootKeyMeta, "Index"}`;
//! - `DELETE /v1/operator/keyring/key/:id`: removes an inactive key no
//!   variable is sealed with (refused otherwise); answers `{"Index"}`.

use super::query::{api, ok_with_index, read_json, QueryOptions};
use super::ApiError;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::{Table, TableSet};
use herder::structs::RootKeyMeta;
use herder_server::server_api::variables::root_key_metas;
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/operator/keyring/keys", web::get().to(list_keys))
        .route("/v1/operator/keyring/rotate", web::put().to(rotate))
        .route("/v1/operator/keyring/rotate", web::post().to(rotate))
        .route("/v1/operator/keyring/key/{id}", web::delete().to(remove));
}

/// `GET /v1/operator/keyring/keys`.
async fn list_keys(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    read_json(&info, &req, TableSet::of(&[Table::RootKeys]), |snap, _| {
        Ok(root_key_metas(snap))
    })
    .await
}

/// `PUT /v1/operator/keyring/rotate`.
async fn rotate(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let key: RootKeyMeta = api(&info)?.rotate_root_key(q.flag("full")?).await?;
    let index = key.modify_index;
    Ok(ok_with_index(index).json(json!({ "Key": key, "Index": index })))
}

/// `DELETE /v1/operator/keyring/key/:id`.
async fn remove(
    info: web::Data<AgentInfo>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let index = api(&info)?.remove_root_key(&id).await?;
    Ok(ok_with_index(index).json(json!({ "Index": index })))
}
