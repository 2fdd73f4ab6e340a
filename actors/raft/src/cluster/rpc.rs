//! The cluster's own calls on the RPC port, beside the Raft RPCs: a
//! server's status (how servers find each other), a write forwarded to the
//! leader, the read barrier's commit index, and membership changes (join,
//! remove, and a member bringing its own entry up to date). Each
//! is a signed exchange ([`serve_signed`] / [`SignedClient`]), so only a
//! holder of the cluster key can make one.

use super::{election, Cluster, Member};
// Defined with `Member` below the handle, which answers it; the status call
// is its home for callers (`rpc::ServerStatus`).
pub use super::status::ServerStatus;
use crate::entry::{LogEntry, WriteResponse};
use crate::http::{serve_signed, HttpError, SignedClient};
use crate::node::ProposeError;
use crate::{NodeId, ServerNode};
use actix_web::{web, HttpRequest};
use openraft::error::{ClientWriteError, RaftError};
use openraft::ChangeMembers;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

pub const STATUS_PATH: &str = "/v1/raft/status";
pub const WRITE_PATH: &str = "/v1/raft/write";
pub const READ_INDEX_PATH: &str = "/v1/raft/read-index";
pub const JOIN_PATH: &str = "/v1/raft/join";
pub const REMOVE_PATH: &str = "/v1/raft/remove";
pub const UPDATE_PATH: &str = "/v1/raft/update";

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
    /// The version gate: some server runs a version that cannot apply the
    /// entry (the message names them). Nothing was written.
    #[error("{0}")]
    VersionGate(String),
    #[error("{0}")]
    Failed(String),
}

/// A server asking to be a voting member ([`JOIN_PATH`]), or a member
/// asking to have its entry replaced by what it advertises now
/// ([`UPDATE_PATH`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct JoinRequest {
    pub id: NodeId,
    pub node: ServerNode,
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
        let body_limit = cluster.settings().rpc_body_limit();
        crate::http::configure(raft, key, cluster.leader_contact(), body_limit)(config);
        config
            .app_data(web::Data::new(cluster))
            .app_data(web::PayloadConfig::new(body_limit));
        serve_call(config, STATUS_PATH, |c, ()| async move {
            Ok::<_, Refusal>(c.status())
        });
        serve_call(config, WRITE_PATH, |c, entry: LogEntry| async move {
            write_as_leader(&c, entry).await
        });
        serve_call(config, READ_INDEX_PATH, |c, ()| async move {
            leader_read_index(&c).await
        });
        serve_call(config, JOIN_PATH, |c, join: JoinRequest| async move {
            add_voter(&c, join).await
        });
        serve_call(config, UPDATE_PATH, |c, update: JoinRequest| async move {
            update_member(&c, update).await
        });
        serve_call(
            config,
            election::PREVOTE_PATH,
            |c, ask: election::PreVoteRequest| async move { election::answer(&c, &ask) },
        );
        serve_call(config, REMOVE_PATH, |c, r: RemoveRequest| async move {
            remove_member(&c, r).await
        });
    }
}

/// Serves the signed call at `path` on `config`, answered by `call` with
/// this server's cluster and the decoded request.
fn serve_call<Req, Answer, F, Fut>(config: &mut web::ServiceConfig, path: &'static str, call: F)
where
    Req: DeserializeOwned + 'static,
    Answer: Serialize + 'static,
    F: Fn(Cluster, Req) -> Fut + Clone + 'static,
    Fut: Future<Output = Answer> + 'static,
{
    let route = web::post().to(
        move |cluster: web::Data<Cluster>, request: HttpRequest, body: web::Bytes| {
            let call = call.clone();
            async move {
                let this = (**cluster).clone();
                let key = cluster.settings().key.clone();
                serve_signed(&key, path, &request, &body, move |req: Req| call(this, req)).await
            }
        },
    );
    config.route(path, route);
}

/// The refusal for a call only the leader takes.
fn not_leader(cluster: &Cluster) -> Refusal {
    Refusal::NotLeader {
        leader: cluster.leader().map(|l| l.node.rpc_addr),
    }
}

/// Commits `entry` on this server, which must lead, once the version gate
/// lets its kind through ([`crate::RaftNode::propose`]).
///
/// Openraft keeps a leader cut off from its quorum leading (and its write
/// waiting) until it hears of a newer term. Like Nomad's leader lease,
/// the write is given up as interrupted once no quorum has acknowledged
/// this leader for `QUORUM_LOST_AFTER` (5 s): by then the others have elected
/// another, and the entry is overwritten when this server rejoins (unless
/// it reached them: hence "may or may not"). Each give-up is counted
/// ([`Cluster::interruptions`]).
pub async fn write_as_leader(cluster: &Cluster, entry: LogEntry) -> Result<WriteResponse, Refusal> {
    if !cluster.is_leader() {
        return Err(not_leader(cluster));
    }
    let proposed = cluster.node().propose(entry);
    let mut stopping = cluster.stopping();
    let answer = tokio::select! {
        answer = proposed => answer,
        _ = stopping.wait_for(|stop| *stop) => return Err(Refusal::Interrupted),
        () = quorum_lost(cluster) => {
            cluster.note_interrupted();
            return Err(Refusal::Interrupted);
        }
    };
    match answer {
        Ok(response) => Ok(response),
        Err(ProposeError::Gate(e)) => Err(Refusal::VersionGate(e.to_string())),
        Err(ProposeError::Raft(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
            Err(Refusal::Interrupted)
        }
        Err(ProposeError::Raft(e)) => Err(Refusal::Failed(e.to_string())),
    }
}

/// How long a leader goes without a quorum's acknowledgement before it
/// gives a write up: well past an election (the others have elected
/// another by then), and past the ack delays of a busy machine (1.2 s
/// gave writes up while a quorum was still there, only slow).
const QUORUM_LOST_AFTER: Duration = Duration::from_secs(5);

/// Returns once this leader has gone [`QUORUM_LOST_AFTER`] without a
/// quorum's acknowledgement (never while it has one).
async fn quorum_lost(cluster: &Cluster) {
    let lease = Duration::from_millis(cluster.settings().raft.election_timeout_max);
    let limit = QUORUM_LOST_AFTER.as_millis() as u64;
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
    probe_status(cluster.quick_client(), addr).await
}

/// Asks the server at `addr` about itself through `client`.
pub async fn probe_status(client: &SignedClient, addr: &str) -> Result<ServerStatus, HttpError> {
    let answer: Result<ServerStatus, Refusal> = client.call(addr, STATUS_PATH, &()).await?;
    answer.map_err(refusal_error)
}

/// Makes `join` a voter (the leader's side). A member already at that
/// address under another ID is the same server with a wiped data dir, so
/// it is replaced; the newcomer first catches up as a learner. A
/// newcomer too old for what the members write is refused
/// ([`crate::version_gate::can_join`]).
async fn add_voter(cluster: &Cluster, join: JoinRequest) -> Result<(), Refusal> {
    if !cluster.is_leader() {
        return Err(not_leader(cluster));
    }
    let members = cluster.members();
    if members.iter().any(|m| m.id == join.id && m.voter) {
        return Ok(());
    }
    // A newcomer must apply every kind the members may already write.
    crate::version_gate::can_join(&join.node, members.iter().map(|m| &m.node))
        .map_err(|e| Refusal::VersionGate(e.to_string()))?;
    let raft = cluster.node().raft();
    let addr = join.node.rpc_addr.clone();
    raft.add_learner(join.id, join.node, true)
        .await
        .map_err(|e| Refusal::Failed(format!("adding {} as a learner: {e}", join.id)))?;
    let voters: BTreeSet<NodeId> = members
        .iter()
        .filter(|m| m.voter && m.addr != addr)
        .map(|m| m.id)
        .chain(std::iter::once(join.id))
        .collect();
    raft.change_membership(ChangeMembers::ReplaceAllVoters(voters), false)
        .await
        .map_err(|e| Refusal::Failed(format!("making {} a voter: {e}", join.id)))?;
    tracing::info!(id = join.id, %addr, "server joined the cluster");
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
    tracing::info!(id = target.id, server = %target.node, "server removed from the cluster");
    Ok(())
}

/// Replaces a member's entry with what it advertises now (the leader's
/// side): a server restarted with a new version, name or addresses. Only
/// the member itself asks (a signed call naming its own ID), and an RPC
/// address another member holds is refused: two entries at one address
/// would let one process vote twice.
pub async fn update_member(cluster: &Cluster, update: JoinRequest) -> Result<(), Refusal> {
    if !cluster.is_leader() {
        return Err(not_leader(cluster));
    }
    let members = cluster.members();
    let Some(current) = members.iter().find(|m| m.id == update.id) else {
        return Err(Refusal::Failed(format!(
            "server {} is not a member; it must join first",
            update.id
        )));
    };
    if current.node == update.node {
        return Ok(());
    }
    if let Some(other) = members
        .iter()
        .find(|m| m.id != update.id && m.addr == update.node.rpc_addr)
    {
        return Err(Refusal::Failed(format!(
            "RPC address {} belongs to server {}",
            update.node.rpc_addr, other.id
        )));
    }
    let nodes = std::iter::once((update.id, update.node.clone())).collect();
    cluster
        .node()
        .raft()
        .change_membership(ChangeMembers::SetNodes(nodes), false)
        .await
        .map_err(|e| Refusal::Failed(format!("updating server {}: {e}", update.id)))?;
    tracing::info!(id = update.id, from = ?current.node, to = ?update.node, "member entry updated");
    Ok(())
}

/// Sends this server's own entry, as it advertises itself now, to the
/// leader (or applies it here when this server leads).
pub async fn update_via_leader(cluster: &Cluster, leader: &Member) -> Result<(), Refusal> {
    let update = JoinRequest {
        id: cluster.id(),
        node: cluster.settings().node.clone(),
    };
    if leader.id == cluster.id() {
        return update_member(cluster, update).await;
    }
    let answer: Result<(), Refusal> = cluster
        .client()
        .call(&leader.addr, UPDATE_PATH, &update)
        .await
        .map_err(|e| Refusal::Failed(e.to_string()))?;
    answer
}

fn describe(request: &RemoveRequest) -> String {
    match (&request.id, &request.addr) {
        (Some(id), _) => format!("ID {id}"),
        (None, Some(addr)) => format!("address {addr}"),
        (None, None) => "no ID or address".into(),
    }
}

/// How long a membership call waits for a leader that answers: removing
/// a dead server often follows the leader's own death, and the election
/// takes a second or two.
pub const LEADER_WAIT: Duration = Duration::from_secs(8);

/// Sends a membership call to the leader (or handles it here when this
/// server leads), waiting up to [`LEADER_WAIT`] while no leader is known,
/// the one known does not answer, or it no longer leads.
pub async fn remove_via_leader(cluster: &Cluster, request: RemoveRequest) -> Result<(), Refusal> {
    let deadline = tokio::time::Instant::now() + LEADER_WAIT;
    loop {
        let outcome = remove_once(cluster, &request).await;
        let retry = matches!(outcome, Err(Attempt::NoLeader(_)));
        if !retry || tokio::time::Instant::now() >= deadline {
            return outcome.map_err(Attempt::into_refusal);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Why one attempt to reach the leader did not settle the call.
enum Attempt {
    /// Worth another try once a leader is elected.
    NoLeader(Refusal),
    Final(Refusal),
}

impl Attempt {
    fn into_refusal(self) -> Refusal {
        match self {
            Attempt::NoLeader(r) | Attempt::Final(r) => r,
        }
    }
}

async fn remove_once(cluster: &Cluster, request: &RemoveRequest) -> Result<(), Attempt> {
    if cluster.is_leader() {
        return remove_member(cluster, request.clone())
            .await
            .map_err(|r| match r {
                Refusal::NotLeader { .. } => Attempt::NoLeader(r),
                other => Attempt::Final(other),
            });
    }
    let leader = cluster
        .leader()
        .ok_or(Attempt::NoLeader(Refusal::NotLeader { leader: None }))?;
    let answer: Result<(), Refusal> = cluster
        .client()
        .call(&leader.addr, REMOVE_PATH, request)
        .await
        .map_err(|e| Attempt::NoLeader(Refusal::Failed(e.to_string())))?;
    answer.map_err(|r| match r {
        Refusal::NotLeader { .. } => Attempt::NoLeader(r),
        other => Attempt::Final(other),
    })
}
