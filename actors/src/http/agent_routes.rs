//! `/v1/agent/*` and `/v1/status/*`: about the agent itself.

use super::body::Body;
use super::ApiError;
use crate::agent::AgentInfo;
use crate::worker_supervisor::{GetConfig, GetWorkers, SetConfig, WorkerSupervisor};
use actix::Addr;
use actix_web::{web, HttpResponse};
use serde::Deserialize;
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/agent/health", web::get().to(health))
        .route("/v1/agent/self", web::get().to(agent_self))
        .route("/v1/agent/members", web::get().to(members))
        .route("/v1/status/leader", web::get().to(leader))
        .route("/v1/status/peers", web::get().to(peers))
        .route("/v1/agent/schedulers", web::get().to(workers))
        .route("/v1/agent/schedulers/config", web::get().to(worker_config))
        .route(
            "/v1/agent/schedulers/config",
            web::put().to(set_worker_config),
        )
        .route(
            "/v1/agent/schedulers/config",
            web::post().to(set_worker_config),
        );
}

fn supervisor(info: &AgentInfo) -> Result<Addr<WorkerSupervisor>, ApiError> {
    info.server
        .as_ref()
        .map(|s| s.workers.clone())
        .ok_or_else(|| {
            ApiError::BadRequest("this agent runs no server, so no scheduling workers".into())
        })
}

fn unavailable(e: actix::MailboxError) -> ApiError {
    ApiError::Unavailable(format!("worker supervisor: {e}"))
}

/// `GET /v1/agent/schedulers`: every worker with its status (snake_case,
/// as Nomad's agent API).
async fn workers(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let reply = supervisor(&info)?
        .send(GetWorkers)
        .await
        .map_err(unavailable)?;
    Ok(HttpResponse::Ok().json(reply))
}

async fn worker_config(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let reply = supervisor(&info)?
        .send(GetConfig)
        .await
        .map_err(unavailable)?;
    Ok(HttpResponse::Ok().json(reply))
}

/// The body of `PUT /v1/agent/schedulers/config`; a field left out keeps
/// its current value.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerConfigRequest {
    num_schedulers: Option<i64>,
    enabled_schedulers: Option<Vec<String>>,
}

async fn set_worker_config(
    info: web::Data<AgentInfo>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let request: WorkerConfigRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("invalid worker configuration: {e}")))?;
    let workers = supervisor(&info)?;
    let current = workers.send(GetConfig).await.map_err(unavailable)?;
    let reply = workers
        .send(SetConfig {
            num_schedulers: request
                .num_schedulers
                .unwrap_or(current.num_schedulers as i64),
            enabled_schedulers: request
                .enabled_schedulers
                .unwrap_or(current.enabled_schedulers),
        })
        .await
        .map_err(unavailable)?
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(HttpResponse::Ok().json(reply))
}

fn advertise(info: &AgentInfo) -> String {
    info.http_addr
        .get()
        .map(|a| a.to_string())
        .unwrap_or_default()
}

/// Nomad's shape: `{"server": {"ok", "message"}, "client": {...}}`, with
/// only the roles this agent runs.
async fn health(info: web::Data<AgentInfo>) -> HttpResponse {
    let mut body = serde_json::Map::new();
    if info.config.server.enabled {
        body.insert("server".into(), json!({"ok": true, "message": "ok"}));
    }
    if info.config.client.enabled {
        body.insert("client".into(), json!({"ok": true, "message": "ok"}));
    }
    HttpResponse::Ok().json(body)
}

async fn agent_self(info: web::Data<AgentInfo>) -> HttpResponse {
    let uptime = info.started_at.elapsed().map(|d| d.as_secs()).unwrap_or(0);
    HttpResponse::Ok().json(json!({
        "config": {
            "Region": info.config.region,
            "Datacenter": info.config.datacenter,
            "NodeName": info.config.name,
            "DataDir": info.data_dir,
            "BindAddr": info.config.bind_addr,
            "Ports": {"HTTP": info.http_addr.get().map(|a| a.port())},
            "Server": {"Enabled": info.config.server.enabled,
                       "NumSchedulers": info.config.effective_num_schedulers(),
                       "EnabledSchedulers": info.config.server.enabled_schedulers},
            "Client": {"Enabled": info.config.client.enabled},
            "Version": {"Version": env!("CARGO_PKG_VERSION")},
        },
        "member": {"Name": info.config.name, "Addr": advertise(&info), "Status": "alive"},
        "stats": {"agent": {"uptime_seconds": uptime}},
    }))
}

/// A single server is always its own leader.
async fn leader(info: web::Data<AgentInfo>) -> HttpResponse {
    if info.config.server.enabled {
        HttpResponse::Ok().json(advertise(&info))
    } else {
        HttpResponse::Ok().json("")
    }
}

async fn peers(info: web::Data<AgentInfo>) -> HttpResponse {
    if info.config.server.enabled {
        HttpResponse::Ok().json(vec![advertise(&info)])
    } else {
        HttpResponse::Ok().json(Vec::<String>::new())
    }
}

/// The gossip members: a single agent knows only itself. Servers carry
/// Nomad's tags so that clients can tell servers, regions and DCs apart.
async fn members(info: web::Data<AgentInfo>) -> HttpResponse {
    let addr = info.http_addr.get();
    let host = addr.map(|a| a.ip().to_string()).unwrap_or_default();
    let port = addr.map(|a| a.port()).unwrap_or(0);
    let name = format!("{}.{}", info.config.name, info.config.region);
    let mut tags = serde_json::Map::new();
    tags.insert("region".into(), json!(info.config.region));
    tags.insert("dc".into(), json!(info.config.datacenter));
    tags.insert("build".into(), json!(env!("CARGO_PKG_VERSION")));
    tags.insert("port".into(), json!(port.to_string()));
    if info.config.server.enabled {
        tags.insert("role".into(), json!("nomad"));
        tags.insert("bootstrap".into(), json!("1"));
        tags.insert("expect".into(), json!("1"));
    }
    let members = if info.config.server.enabled {
        vec![json!({
            "Name": name, "Addr": host, "Port": port, "Tags": tags, "Status": "alive",
            "ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2,
            "DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4,
        })]
    } else {
        vec![]
    };
    HttpResponse::Ok().json(json!({
        "ServerName": info.config.name,
        "ServerRegion": info.config.region,
        "ServerDC": info.config.datacenter,
        "Members": members,
    }))
}
