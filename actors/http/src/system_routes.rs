//! `/v1/system/*`: the operator's forced garbage collection and job
//! summary reconciliation.
//!
//! As Nomad's, a forced collection ignores every age threshold: every
//! terminal evaluation and allocation, dead job and empty down node that
//! the collector would take goes now. Nomad answers 200 with an empty body
//! once the collection is scheduled; herder answers once it is done, so a
//! read right after sees the result.
//!
//! `/v1/system/reconcile/summaries` recounts every job's summary from its
//! allocations (and a parent's children from its child jobs), as one
//! command through the store: 200 with an empty body once it is durable,
//! as Nomad answers once its Raft entry is applied.

use super::errors::ApiError;
use super::query::api;
use crate::AgentInfo;
use actix_web::{web, HttpResponse};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/system/gc")
            .route(web::put().to(force_gc))
            .route(web::post().to(force_gc)),
    )
    .service(
        web::resource("/v1/system/reconcile/summaries")
            .route(web::put().to(reconcile_summaries))
            .route(web::post().to(reconcile_summaries)),
    );
}

async fn reconcile_summaries(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    api(&info)?.reconcile_job_summaries().await?;
    Ok(HttpResponse::Ok().finish())
}

async fn force_gc(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    api(&info)?.force_gc().await?;
    Ok(HttpResponse::Ok().finish())
}
