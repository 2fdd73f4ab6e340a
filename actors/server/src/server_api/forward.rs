//! The writes only the leader's duties can do, carried from a follower to
//! the leader: node registration, heartbeats and allocation updates (the
//! node tracker's TTL timers run on the leader alone), a forced periodic
//! launch and a forced garbage collection. Store commands need none of
//! this: on a cluster member `StateStore::submit` already goes through the
//! replicated log to the leader (herder-raft's `LogReplicator`).
//!
//! One signed call on the RPC port, [`LEADER_CALL_PATH`], with the same
//! cluster key as the Raft RPCs. A call is re-sent only when it provably
//! never reached a leader; the answer, refusals included, is the leader's
//! own, so a caller of a follower's `ServerApi` cannot tell the difference.

use super::write_path::WritePath;
use super::ServerApiError;
use crate::gc::GcReport;
use crate::node_tracker::NodeReply;
use crate::periodic::Launched;
use crate::server::ServerHandle;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::AllocClientUpdate;
use herder::structs::{Node, NodeId};
use herder_raft::http::{serve_signed, HttpError};
use herder_raft::Cluster;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

pub const LEADER_CALL_PATH: &str = "/v1/rpc/leader";

/// How long a call looks for a leader (an election takes 1-3 s).
const FIND_LEADER_FOR: Duration = Duration::from_secs(10);
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// A write for the leader's duties.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum LeaderCall {
    RegisterNode(Box<Node>),
    Heartbeat {
        node_id: NodeId,
        secret_id: String,
        ready: bool,
    },
    UpdateAllocs {
        node_id: NodeId,
        secret_id: String,
        updates: Vec<AllocClientUpdate>,
    },
    ForcePeriodic {
        namespace: String,
        job_id: String,
    },
    ForceGc,
}

/// The leader's answer to a [`LeaderCall`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum LeaderAnswer {
    Node(NodeReply),
    Index(u64),
    Launched(Launched),
    Gc(GcReport),
}

/// Why the leader did not answer a call.
#[derive(Debug, Serialize, Deserialize)]
enum Refused {
    NotLeader,
    Api(ServerApiError),
}

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
            WritePath::of(&server)
                .execute_here(call)
                .await
                .map_err(Refused::Api)
        },
    )
    .await
}

/// Sends `call` to the leader and returns its answer.
pub(super) async fn call_leader(
    cluster: &Cluster,
    call: LeaderCall,
) -> Result<LeaderAnswer, ServerApiError> {
    let deadline = Instant::now() + FIND_LEADER_FOR;
    loop {
        let leader = cluster.leader().filter(|l| l.id != cluster.id());
        let outcome = match &leader {
            None => None,
            Some(leader) => Some(
                cluster
                    .client()
                    .call::<_, Result<LeaderAnswer, Refused>>(
                        leader.addr(),
                        LEADER_CALL_PATH,
                        &call,
                    )
                    .await,
            ),
        };
        match outcome {
            Some(Ok(Ok(answer))) => return Ok(answer),
            Some(Ok(Err(Refused::Api(e)))) => return Err(e),
            Some(Err(e @ HttpError::Lost { .. })) | Some(Err(e @ HttpError::Body { .. })) => {
                return Err(ServerApiError::Unavailable(format!(
                    "forwarding to the leader: {e}"
                )))
            }
            // Not delivered, or not the leader any more: look again.
            _ if Instant::now() < deadline => tokio::time::sleep(RETRY_PAUSE).await,
            _ => return Err(ServerApiError::Internal("No cluster leader".into())),
        }
    }
}

/// The answer of the expected kind, or an internal error.
pub(super) fn expect<T>(
    answer: LeaderAnswer,
    pick: impl FnOnce(LeaderAnswer) -> Option<T>,
) -> Result<T, ServerApiError> {
    pick(answer).ok_or_else(|| {
        ServerApiError::Internal("the leader answered a forwarded call with another kind".into())
    })
}
