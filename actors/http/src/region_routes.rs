//! `/v1/regions`: the regions this agent knows, as a JSON list of names.
//!
//! herder has no federation yet: the only region is the agent's own
//! (`region` in its configuration).

use crate::AgentInfo;
use actix_web::{web, HttpResponse};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/v1/regions").route(web::get().to(regions)));
}

/// `["global"]`: sorted names, as Nomad's `Region.List`.
async fn regions(info: web::Data<AgentInfo>) -> HttpResponse {
    HttpResponse::Ok().json([&info.config.region])
}
