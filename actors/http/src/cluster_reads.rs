//! Reads on a server that is one of several, as Nomad serves them.
//!
//! Nomad forwards a read to the leader unless it says `?stale`; herder
//! answers it where it arrives, after a read barrier: a follower first
//! asks the leader for its commit index (the leader confirms with a
//! quorum that it still leads) and waits until its own replica has
//! applied it. The answer then holds every write acknowledged before the
//! read was sent, as the leader's would, without carrying the answer (or a
//! blocking query's long wait) over the RPC port. The leader answers from
//! its own state, as Nomad's does, unless `?consistent` asks for the
//! quorum check there too. `?stale` skips the barrier: any server answers
//! at once from what it has.
//!
//! Every answer of a cluster member carries `X-Nomad-KnownLeader` (whether
//! this server knows a leader) and `X-Nomad-LastContact` (milliseconds
//! since the leader was last heard from: on a follower, since the leader's
//! last append or heartbeat reached it; on the leader, since a quorum last
//! acknowledged it).
//!
//! Routes about the agent itself, the cluster's status and the client's
//! allocations are local by nature and never wait.

use crate::AgentInfo;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{web, HttpResponse};
use herder_raft::Cluster;
use std::time::Duration;

/// Longest a read waits for the barrier (an election takes 1-3 s).
const BARRIER_TIMEOUT: Duration = Duration::from_secs(10);

/// Paths whose answers are about this agent or are not replicated state
/// (autopilot's health is this server's view of the others, answered
/// without a leader too).
const LOCAL_PREFIXES: [&str; 6] = [
    "/v1/agent/",
    "/v1/status/",
    "/v1/operator/raft/",
    "/v1/operator/autopilot/health",
    "/v1/client/",
    "/v1/metrics",
];

/// The middleware: a barrier before a consistent read, the leader headers
/// after every answer.
pub async fn consistent_reads(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    let cluster = req
        .app_data::<web::Data<AgentInfo>>()
        .and_then(|info| info.server.as_ref())
        .and_then(|server| server.cluster.clone());
    let Some(cluster) = cluster else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    if let Some(consistency) = wanted(&req) {
        if let Err(e) = barrier(&cluster, consistency).await {
            let answer =
                HttpResponse::InternalServerError().body(format!("No cluster leader: {e}"));
            let mut response = req.into_response(answer);
            leader_headers(&cluster, &mut response);
            return Ok(response);
        }
    }
    let mut response = next.call(req).await?.map_into_boxed_body();
    leader_headers(&cluster, &mut response);
    Ok(response)
}

/// How consistent a read must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Consistency {
    /// Every write acknowledged before the read (Nomad's default).
    Default,
    /// As `Default`, and the leader confirms its leadership first.
    Consistent,
}

/// The barrier a request needs; `None` for a write, a stale read or a
/// local route.
fn wanted(req: &ServiceRequest) -> Option<Consistency> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return None;
    }
    let path = req.path();
    if !path.starts_with("/v1/") || LOCAL_PREFIXES.iter().any(|p| path.starts_with(p)) {
        return None;
    }
    let query = req.query_string();
    let has = |name: &str| {
        query
            .split('&')
            .any(|pair| pair == name || pair.starts_with(&format!("{name}=")))
    };
    if has("stale") {
        None
    } else if has("consistent") {
        Some(Consistency::Consistent)
    } else {
        Some(Consistency::Default)
    }
}

async fn barrier(cluster: &Cluster, consistency: Consistency) -> Result<(), String> {
    if cluster.is_leader() && consistency == Consistency::Default {
        return Ok(());
    }
    cluster
        .read_barrier(BARRIER_TIMEOUT)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn leader_headers(cluster: &Cluster, response: &mut ServiceResponse) {
    let known = cluster.leader().is_some();
    let contact = if known {
        cluster.millis_since_leader_contact().unwrap_or(0)
    } else {
        0
    };
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static("x-nomad-knownleader"),
        HeaderValue::from_static(if known { "true" } else { "false" }),
    );
    if let Ok(value) = HeaderValue::from_str(&contact.to_string()) {
        headers.insert(HeaderName::from_static("x-nomad-lastcontact"), value);
    }
}
