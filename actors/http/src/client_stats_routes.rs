//! What a client measures and collects, with Nomad's paths and shapes:
//! `GET /v1/client/allocation/:id/stats[?task=]` (`AllocResourceUsage`),
//! `GET /v1/client/stats[?node_id=]` (`HostStats`), and the forced garbage
//! collection of finished allocations, `/v1/client/allocation/:id/gc` and
//! `/v1/client/gc[?node_id=]`.
//!
//! Figures come from `herder_client::stats` on the agent whose client runs
//! the allocation (or is the node); any other agent routes the request
//! there (`alloc_routing`), as Nomad's agents do.

use super::alloc_routing::{alloc_route, node_route, path_and_query, unknown_alloc, Route};
use super::errors::ApiError;
use super::forward::forward_get;
use super::query::QueryOptions;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::structs::AllocId;
use herder_client::alloc_manager::alloc_gc::{CollectAll, CollectAlloc, GcError};
use herder_client::alloc_runner::persisted_alloc;
use herder_client::stats::{self, CpuCapacity};
use herder_client::task_dir::AllocDir;
use std::sync::OnceLock;
use std::time::Duration;

/// How long a forwarded request may wait for the other agent's answer.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a collection may take (tasks already dead: removing files).
const GC_TIMEOUT: Duration = Duration::from_secs(60);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/v1/client/allocation/{id}/stats",
        web::get().to(alloc_stats),
    )
    .service(
        web::resource("/v1/client/allocation/{id}/gc")
            .route(web::get().to(alloc_gc))
            .route(web::put().to(alloc_gc))
            .route(web::post().to(alloc_gc)),
    )
    .route("/v1/client/stats", web::get().to(host_stats))
    .service(
        web::resource("/v1/client/gc")
            .route(web::get().to(gc_all))
            .route(web::put().to(gc_all))
            .route(web::post().to(gc_all)),
    );
}

/// The machine's CPU, to turn percentages into MHz as Nomad does.
fn capacity(info: &AgentInfo) -> CpuCapacity {
    static CAPACITY: OnceLock<CpuCapacity> = OnceLock::new();
    *CAPACITY.get_or_init(|| {
        let facts = herder_client::fingerprint::machine_facts(&info.data_dir).unwrap_or_default();
        CpuCapacity {
            cores: facts.cores.max(1),
            total_mhz: f64::from(facts.cores.max(1)) * facts.mhz_per_core,
        }
    })
}

/// The allocation asked for and where it is answered; here only when this
/// agent runs a client that keeps it.
fn route(info: &AgentInfo, req: &HttpRequest, raw: &str) -> Result<(AllocId, Route), ApiError> {
    let id: AllocId = raw.parse().map_err(|_| unknown_alloc(raw))?;
    let here = info.client.get().is_some()
        && persisted_alloc(&info.data_dir, &id)
            .map_err(|e| ApiError::Internal(format!("reading allocation {id}: {e}")))?
            .is_some();
    Ok((id, alloc_route(info, req, &id, here, |_| Ok(()))?))
}

async fn alloc_stats(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let id = match route(&info, &req, &id)? {
        (id, Route::Here) => id,
        (_, Route::There { address, hop }) => {
            return forward_get(&req, &address, hop, &path_and_query(&req), FORWARD_TIMEOUT).await
        }
    };
    let only = q
        .param("task")
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let capacity = capacity(&info);
    let data_dir = info.data_dir.clone();
    let usage = web::block(move || {
        let (alloc, job) = persisted_alloc(&data_dir, &id).ok()??;
        let tasks: Vec<String> = job
            .lookup_task_group(&alloc.task_group)
            .map(|g| g.tasks.iter().map(|t| t.name.clone()).collect())
            .unwrap_or_default();
        let dir = AllocDir::new(&data_dir, &id);
        Some(stats::alloc_usage(&dir, &tasks, only.as_deref(), capacity))
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?
    .ok_or_else(|| unknown_alloc(&id.to_string()))?;
    Ok(HttpResponse::Ok().json(usage))
}

async fn host_stats(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let node_id = q.param("node_id").unwrap_or_default().to_string();
    if let Route::There { address, hop } = node_route(&info, &req, &node_id)? {
        return forward_get(&req, &address, hop, &path_and_query(&req), FORWARD_TIMEOUT).await;
    }
    let capacity = capacity(&info);
    let alloc_root = info.data_dir.join("alloc");
    let stats = web::block(move || {
        let root = if alloc_root.is_dir() {
            alloc_root
        } else {
            alloc_root
                .parent()
                .map(|p| p.to_path_buf())
                .unwrap_or(alloc_root)
        };
        stats::host_stats(&root, capacity)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok().json(stats))
}

async fn alloc_gc(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let _ = QueryOptions::from_request(&req)?;
    let id = match route(&info, &req, &id)? {
        (id, Route::Here) => id,
        (_, Route::There { address, hop }) => {
            return forward_get(&req, &address, hop, &path_and_query(&req), FORWARD_TIMEOUT).await
        }
    };
    let client = info
        .client
        .get()
        .ok_or_else(|| unknown_alloc(&id.to_string()))?;
    let ask = client.agent.send(CollectAlloc(id));
    match tokio::time::timeout(GC_TIMEOUT, ask).await {
        Err(_) => Err(ApiError::Unavailable(format!(
            "the allocation was not collected within {GC_TIMEOUT:?}"
        ))),
        Ok(Err(e)) => Err(ApiError::Internal(e.to_string())),
        Ok(Ok(Ok(()))) => Ok(HttpResponse::Ok().finish()),
        Ok(Ok(Err(e @ GcError::UnknownAlloc(_)))) => Err(ApiError::NotFound(e.to_string())),
        Ok(Ok(Err(e @ GcError::NotEligible))) => Err(ApiError::Internal(e.to_string())),
    }
}

async fn gc_all(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let node_id = q.param("node_id").unwrap_or_default().to_string();
    if let Route::There { address, hop } = node_route(&info, &req, &node_id)? {
        return forward_get(&req, &address, hop, &path_and_query(&req), FORWARD_TIMEOUT).await;
    }
    let client = info
        .client
        .get()
        .ok_or_else(|| ApiError::BadRequest("No local Node and node_id not provided".into()))?;
    let ask = client.agent.send(CollectAll);
    match tokio::time::timeout(GC_TIMEOUT, ask).await {
        Err(_) => Err(ApiError::Unavailable(format!(
            "the allocations were not collected within {GC_TIMEOUT:?}"
        ))),
        Ok(Err(e)) => Err(ApiError::Internal(e.to_string())),
        Ok(Ok(collected)) => {
            tracing::info!(collected, "finished allocations collected on request");
            Ok(HttpResponse::Ok().finish())
        }
    }
}
