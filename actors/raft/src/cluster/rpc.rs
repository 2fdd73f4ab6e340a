//! The cluster's own calls on the RPC port, beside the Raft RPCs: a
//! server's status (how servers find each other), a write forwarded to the
//! leader, the read barrier's commit index, and membership changes. Each
//! is a signed exchange ([`serve_signed`] / [`SignedClient`]), so only a
//! holder of the cluster key can make one.

use super::{Cluster, Member};
use crate::entry::{LogEntry, WriteResponse};
use crate::http::{serve_signed, HttpError, MAX_BODY_BYTES};
use crate::NodeId;
use actix_web::{web, HttpRequest, HttpResponse};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

pub const STATUS_PATH: &str = "/v1/raft/status";
pub const WRITE_PATH: &str = "/v1/raft/write";
pub const READ_INDEX_PATH: &str = "/v1/raft/read-index";
pub const JOIN_PATH: &str = "/v1/raft/join";
pub const REMOVE_PATH: &str = "/v1/raft/remove";

/// What a server says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ServerStatus {
    pub id: NodeId,
    pub name: String,
    pub rpc_addr: String,
    pub version: String,
    /// Whether it belongs to a cluster (has a membership).
    pub initialized: bool,
    pub leader: Option<Member>,
    pub last_applied: u64,
    pub term: u64,
}

/// Why a server refused a call meant for the leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    /// Ask the leader (its RPC address, when known).
    #[error("this server is not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<String> },
    /// Leadership moved while the write was being committed: it may or may
    /// not have been applied.
    #[error("leadership changed while committing; the write may or may not have been applied")]
    Interrupted,
    #[error("{0}")]
    Failed(String),
}

/// A server asking to be a voting member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct JoinRequest {
    pub id: NodeId,
    pub addr: String,
}

/// A member to remove, by ID or RPC address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RemoveRequest {
    pub id: Option<NodeId>,
    pub addr: Option<String>,
}

/// Registers the cluster calls (and the Raft RPCs) on the RPC port's app.
pub fn configure(cluster: Cluster) -> impl FnOnce(&mut web::ServiceConfig) {
    move |config| {
        let raft = cluster.node().raft().clone();
        let key = cluster.settings().key.clone();
        crate::http::configure(raft, key)(config);
        config
            .app_data(web::Data::new(cluster))
            .app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
            .route(STATUS_PATH, web::post().to(status))
            .route(WRITE_PATH, web::post().to(write))
            .route(READ_INDEX_PATH, web::post().to(read_index_handler))
            .route(JOIN_PATH, web::post().to(join))
            .route(REMOVE_PATH, web::post().to(remove));
    }
}

async fn status(
    cluster: web::Data<Cluster>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let c = cluster.clone();
    serve_signed(
        &cluster.settings().key,
        STATUS_PATH,
        &request,
        &body,
        |_: ()| async move { Ok::<_, Refusal>(c.status()) },
    )
    .await
}

async fn write(
    cluster: web::Data<Cluster>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let c = cluster.clone();
    serve_signed(
        &cluster.settings().key,
        WRITE_PATH,
        &request,
        &body,
        |entry: LogEntry| async move { write_as_leader(&c, entry).await },
    )
    .await
}

async fn read_index_handler(
    cluster: web::Data<Cluster>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let c = cluster.clone();
    serve_signed(
        &cluster.settings().key,
        READ_INDEX_PATH,
        &request,
        &body,
        |_: ()| async move { leader_read_index(&c).await },
    )
    .await
}

async fn join(cluster: web::Data<Cluster>, request: HttpRequest, body: web::Bytes) -> HttpResponse {
    let c = cluster.clone();
    serve_signed(
        &cluster.settings().key,
        JOIN_PATH,
        &request,
        &body,
        |join: JoinRequest| async move { add_voter(&c, join).await },
    )
    .await
}

async fn remove(
    cluster: web::Data<Cluster>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let c = cluster.clone();
    serve_signed(
        &cluster.settings().key,
        REMOVE_PATH,
        &request,
        &body,
        |r: RemoveRequest| async move { remove_member(&c, r).await },
    )
    .await
}

/// The refusal for a call only the leader takes.
fn not_leader(cluster: &Cluster) -> Refusal {
    Refusal::NotLeader {
        leader: cluster.leader().map(|l| l.addr),
    }
}

/// Commits `entry` on this server, which must lead.
///
/// Openraft keeps a leader cut off from its quorum leading (and its write
/// waiting) until it hears of a newer term. Like Nomad's leader lease,
/// the write is given up as interrupted once no quorum has acknowledged
/// this leader for two election timeouts: by then the others have elected
/// another, and the entry is overwritten when this server rejoins (unless
/// it reached them: hence "may or may not").
pub async fn write_as_leader(cluster: &Cluster, entry: LogEntry) -> Result<WriteResponse, Refusal> {
    if !cluster.is_leader() {
        return Err(not_leader(cluster));
    }
    let written = cluster.node().raft().client_write(entry);
    let answer = tokio::select! {
        answer = written => answer,
        () = quorum_lost(cluster) => return Err(Refusal::Interrupted),
    };
    match answer {
        Ok(response) => Ok(response.data),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => Err(Refusal::Interrupted),
        Err(e) => Err(Refusal::Failed(e.to_string())),
    }
}

/// Returns once this leader has gone two election timeouts without a
/// quorum's acknowledgement (never while it has one).
async fn quorum_lost(cluster: &Cluster) {
    let lease = Duration::from_millis(cluster.settings().raft.election_timeout_max);
    let limit = 2 * lease.as_millis() as u64;
    let metrics = cluster.metrics();
    loop {
        tokio::time::sleep(lease / 4).await;
        let since_ack = metrics.borrow().millis_since_quorum_ack;
        if since_ack.is_some_and(|millis| millis > limit) {
            tracing::warn!(
                millis = since_ack,
                "no quorum acknowledged this leader; giving up a write"
            );
            return;
        }
    }
}

/// The leader's commit index once it has confirmed it still leads.
async fn leader_read_index(cluster: &Cluster) -> Result<u64, Refusal> {
    if !cluster.is_leader() {
        return Err(not_leader(cluster));
    }
    match cluster.node().raft().ensure_linearizable().await {
        Ok(log_id) => Ok(log_id.map_or(0, |l| l.index)),
        Err(e) => Err(Refusal::Failed(e.to_string())),
    }
}

/// The index a read must wait for: the leader's, asked of it when this
/// server follows.
pub async fn read_index(cluster: &Cluster) -> Result<u64, HttpError> {
    if cluster.is_leader() {
        return leader_read_index(cluster).await.map_err(refusal_error);
    }
    let leader = cluster.leader().ok_or_else(no_leader)?;
    let answer: Result<u64, Refusal> = cluster
        .quick_client()
        .call(&leader.addr, READ_INDEX_PATH, &())
        .await?;
    answer.map_err(refusal_error)
}

fn refusal_error(refusal: Refusal) -> HttpError {
    HttpError::Lost {
        url: "the leader".into(),
        reason: refusal.to_string(),
    }
}

fn no_leader() -> HttpError {
    HttpError::Unreachable {
        url: "the leader".into(),
        reason: "No cluster leader".into(),
    }
}

/// Asks the server at `addr` about itself.
pub async fn server_status(cluster: &Cluster, addr: &str) -> Result<ServerStatus, HttpError> {
    let answer: Result<ServerStatus, Refusal> =
        cluster.quick_client().call(addr, STATUS_PATH, &()).await?;
    answer.map_err(refusal_error)
}

/// Makes `join` a voter (the leader's side). A member already at that
/// address under another ID is the same server with a wiped data dir, so
/// it is replaced; the newcomer first catches up as a learner.
async fn add_voter(cluster: &Cluster, join: JoinRequest) -> Result<(), Refusal> {
    if !cluster.is_leader() {
        return Err(not_leader(cluster));
    }
    let members = cluster.members();
    if members.iter().any(|m| m.id == join.id && m.voter) {
        return Ok(());
    }
    let raft = cluster.node().raft();
    let node = BasicNode {
        addr: join.addr.clone(),
    };
    raft.add_learner(join.id, node, true)
        .await
        .map_err(|e| Refusal::Failed(format!("adding {} as a learner: {e}", join.id)))?;
    let voters: BTreeSet<NodeId> = members
        .iter()
        .filter(|m| m.voter && m.addr != join.addr)
        .map(|m| m.id)
        .chain(std::iter::once(join.id))
        .collect();
    raft.change_membership(ChangeMembers::ReplaceAllVoters(voters), false)
        .await
        .map_err(|e| Refusal::Failed(format!("making {} a voter: {e}", join.id)))?;
    tracing::info!(id = join.id, addr = %join.addr, "server joined the cluster");
    Ok(())
}

/// Removes a member (the leader's side): `operator raft remove-peer`,
/// `force-leave`, and the dead server cleanup.
pub async fn remove_member(cluster: &Cluster, request: RemoveRequest) -> Result<(), Refusal> {
    if !cluster.is_leader() {
        return Err(not_leader(cluster));
    }
    let members = cluster.members();
    let target = members
        .iter()
        .find(|m| request.id == Some(m.id) || request.addr.as_deref() == Some(m.addr.as_str()));
    let Some(target) = target else {
        return Err(Refusal::Failed(format!(
            "no server with {} in the raft configuration",
            describe(&request)
        )));
    };
    let remaining: BTreeSet<NodeId> = members
        .iter()
        .filter(|m| m.voter && m.id != target.id)
        .map(|m| m.id)
        .collect();
    if remaining.is_empty() {
        return Err(Refusal::Failed("cannot remove the last server".into()));
    }
    cluster
        .node()
        .raft()
        .change_membership(ChangeMembers::ReplaceAllVoters(remaining), false)
        .await
        .map_err(|e| Refusal::Failed(format!("removing {}: {e}", target.id)))?;
    tracing::info!(id = target.id, addr = %target.addr, "server removed from the cluster");
    Ok(())
}

fn describe(request: &RemoveRequest) -> String {
    match (&request.id, &request.addr) {
        (Some(id), _) => format!("ID {id}"),
        (None, Some(addr)) => format!("address {addr}"),
        (None, None) => "no ID or address".into(),
    }
}

/// Sends a membership call to the leader (or handles it here when this
/// server leads).
pub async fn remove_via_leader(cluster: &Cluster, request: RemoveRequest) -> Result<(), Refusal> {
    if cluster.is_leader() {
        return remove_member(cluster, request).await;
    }
    let leader = cluster
        .leader()
        .ok_or(Refusal::NotLeader { leader: None })?;
    let answer: Result<(), Refusal> = cluster
        .client()
        .call(&leader.addr, REMOVE_PATH, &request)
        .await
        .map_err(|e| Refusal::Failed(e.to_string()))?;
    answer
}
