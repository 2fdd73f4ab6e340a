//! `GET /v1/agent/monitor`: the agent's log, live from the moment of the
//! call, as Nomad's `AgentMonitor` streams it.
//!
//! Query: `log_level` (Nomad's names, default `info`; a level of its own,
//! the agent's output does not change), `log_json` (one JSON object per
//! line), `plain` (raw lines instead of frames), `node_id` (a client's log,
//! through a server: forwarded to that node's agent). The answer is
//! Nomad's `StreamFrame`s, `{"Data": "<base64 of some lines>"}`, with `{}`
//! heartbeats while the log is quiet, so a client notices a dead
//! connection. The stream ends when the caller hangs up or the agent stops.

use super::alloc_routing::{node_route, path_and_query, Route};
use super::forward::forward_stream;
use super::query::QueryOptions;
use super::stream_frame::StreamFrame;
use super::ApiError;
use crate::AgentInfo;
use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use herder_common::log_tap::{LogTap, TapFormat, TapLevel, Watch};
use std::time::Duration;

/// A quiet log sends `{}` this often.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);
/// Lines gathered into one frame at most (a burst of logging is sent in
/// a few frames, not one per line).
const LINES_PER_FRAME: usize = 64;
/// How long getting a node's agent to answer may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/agent/monitor", web::get().to(monitor));
}

/// What the caller asked for.
struct MonitorRequest {
    level: TapLevel,
    format: TapFormat,
    plain: bool,
    node_id: String,
}

impl MonitorRequest {
    fn of(req: &HttpRequest) -> Result<MonitorRequest, ApiError> {
        let q = QueryOptions::from_request(req)?;
        let name = q.param("log_level").unwrap_or("").trim();
        let level = if name.is_empty() {
            TapLevel::Info
        } else {
            TapLevel::parse(name)
                .ok_or_else(|| ApiError::BadRequest(format!("Unknown log level: {name}")))?
        };
        let flag = |key: &str| -> Result<bool, ApiError> {
            match q.param(key).unwrap_or("") {
                "" => Ok(false),
                v => v
                    .parse::<bool>()
                    .map_err(|_| ApiError::BadRequest(format!("Unknown option for {key}: {v:?}"))),
            }
        };
        let format = if flag("log_json")? {
            TapFormat::Json
        } else {
            TapFormat::Text
        };
        Ok(MonitorRequest {
            level,
            format,
            plain: flag("plain")?,
            node_id: q.param("node_id").unwrap_or("").to_string(),
        })
    }
}

async fn monitor(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let asked = MonitorRequest::of(&req)?;
    let content_type = if asked.plain {
        "text/plain"
    } else {
        "application/json"
    };
    // Only a named node goes elsewhere: without one, the log is this
    // agent's own, whatever it runs (Nomad answers from the local agent).
    if !asked.node_id.is_empty() {
        if let Route::There { address, hop } = node_route(&info, &req, &asked.node_id)? {
            let path = path_and_query(&req);
            return forward_stream(&req, &address, hop, &path, content_type, FORWARD_TIMEOUT).await;
        }
    }
    let tap = LogTap::global();
    if !tap.is_fed() {
        return Err(ApiError::NotImplemented(
            "this agent's log cannot be monitored: the program running it installed its own log subscriber".into(),
        ));
    }
    let watch = tap.watch(asked.level, asked.format);
    let mut shutting_down = info.shutting_down.subscribe();
    let frames = futures::stream::unfold((watch, asked.plain), |(mut watch, plain)| async move {
        let chunk = next_chunk(&mut watch, plain).await?;
        Some((Ok::<_, ApiError>(chunk), (watch, plain)))
    })
    .take_until(async move {
        let _ = shutting_down.wait_for(|down| *down).await;
    });
    Ok(HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("Cache-Control", "no-store"))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .streaming(frames))
}

/// The next piece of the answer: the lines waiting (up to a frame's
/// worth), or a heartbeat after a quiet [`HEARTBEAT_EVERY`] (nothing in a
/// plain answer, which has no frames). `None` once the tap is gone.
async fn next_chunk(watch: &mut Watch, plain: bool) -> Option<Bytes> {
    loop {
        let first = match tokio::time::timeout(HEARTBEAT_EVERY, watch.next()).await {
            Ok(line) => line?,
            Err(_) if plain => continue,
            Err(_) => return Some(StreamFrame::default().encode()),
        };
        let mut lines = first.to_string();
        for _ in 1..LINES_PER_FRAME {
            match futures::FutureExt::now_or_never(watch.next()) {
                Some(Some(line)) => lines.push_str(&line),
                _ => break,
            }
        }
        return Some(if plain {
            Bytes::from(lines)
        } else {
            StreamFrame::data(String::new(), lines.as_bytes(), 0).encode()
        });
    }
}
