//! `/v1/agent/*` and `/v1/status/*`: about the agent itself.

use crate::agent::AgentInfo;
use actix_web::{web, HttpResponse};
use serde_json::json;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/agent/health", web::get().to(health))
        .route("/v1/agent/self", web::get().to(agent_self))
        .route("/v1/status/leader", web::get().to(leader))
        .route("/v1/status/peers", web::get().to(peers));
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
