//! The writes only the leader's duties can do, carried from a follower to
//! the leader: node registration, heartbeats and allocation updates (the
//! node tracker's TTL timers run on the leader alone), a forced periodic
//! launch, a forced garbage collection and an operator's snapshot restore
//! (the leader's duties stop around it). Store commands need none of
//! this: on a cluster member `StateStore::submit` already goes through the
//! replicated log to the leader (herder-raft's `LogReplicator`).
//!
//! The follower's side is `write_path::call_duty` (the write path is
//! where a follower's write leaves, and it needs nothing of this serving
//! side); the leader answers every [`LeaderCall`] here, at [`LEADER_CALL_PATH`] on the RPC port: the
//! duties' writes through its own [`WritePath`], the scheduling workers'
//! calls through its queues (`leader_link`). The answer, refusals
//! included, is the leader's own, so a caller of a follower's `ServerApi`
//! cannot tell the difference.

use super::write_path::WritePath;
use crate::leader_link::{LeaderAnswer, LeaderCall, LeaderQueues, Refused};
use crate::server_handle::ServerHandle;
use actix_web::{web, HttpRequest, HttpResponse};
use herder_raft::http::serve_signed;
use herder_raft::Cluster;

pub use crate::leader_link::LEADER_CALL_PATH;

/// Registers [`LEADER_CALL_PATH`] on the RPC port's app.
pub fn configure(server: ServerHandle, cluster: Cluster) -> impl FnOnce(&mut web::ServiceConfig) {
    move |config| {
        config
            .app_data(web::Data::new((server, cluster)))
            .route(LEADER_CALL_PATH, web::post().to(serve_call));
    }
}

async fn serve_call(
    parts: web::Data<(ServerHandle, Cluster)>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let (server, cluster) = (parts.0.clone(), parts.1.clone());
    let key = cluster.settings().key.clone();
    serve_signed(
        &key,
        LEADER_CALL_PATH,
        &request,
        &body,
        |call: LeaderCall| async move {
            if !cluster.is_leader() {
                return Err(Refused::NotLeader);
            }
            if let LeaderCall::RestoreSnapshot(entry) = call {
                return super::snapshot::restore_as_leader(&server.duties, &cluster, *entry)
                    .await
                    .map(LeaderAnswer::Index)
                    .map_err(Refused::Api);
            }
            answer_here(&server, call).await
        },
    )
    .await
}

/// Answers a call on this server, the leader.
async fn answer_here(server: &ServerHandle, call: LeaderCall) -> Result<LeaderAnswer, Refused> {
    let queues = LeaderQueues {
        broker: server.broker.clone(),
        blocked: server.blocked.clone(),
        plan_applier: server.plan_applier.clone(),
    };
    match queues
        .execute(call.clone(), server.store.latest_index())
        .await
    {
        Some(answer) => answer,
        None => WritePath::of(server)
            .execute_here(call)
            .await
            .map_err(Refused::Api),
    }
}
