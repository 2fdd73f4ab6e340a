//! How a server finds its cluster: Nomad's `bootstrap_expect` and
//! `retry_join`, without a gossip pool.
//!
//! Every second until this server is a voting member, it asks each
//! `retry_join` address for its status (a signed call: strangers without
//! the cluster key get nothing):
//!
//! - If any of them already belongs to a cluster with a leader, this
//!   server asks that leader to make it a voter (it first catches up as a
//!   learner). A server restarted with a wiped data dir comes back this way
//!   under a new ID, and replaces its old self at the same address.
//! - Otherwise, once `bootstrap_expect` distinct servers (this one
//!   included) see each other and none belongs to a cluster, the one with
//!   the lowest ID initializes the cluster with all of them as voters;
//!   the others wait for its first heartbeat. Choosing one initializer
//!   keeps two servers from founding two clusters.
//!
//! A server restarted with its data dir holds its membership in its log
//! and skips all of this.
//!
//! [`join`] is the same first step on demand (`PUT /v1/agent/join`,
//! `herder server join ADDR`): ask one server for its status and its
//! cluster's leader for a place.
//!
//! Once a voter, a server makes sure its own membership entry says what
//! it advertises now ([`ServerNode`]: name, RPC and HTTP addresses,
//! version). A server restarted after an upgrade (or on a new port) finds
//! its old entry in its log and sends the new one to the leader as soon as
//! it knows one, so the leader's version gate always sees every member's
//! current version.

use super::rpc::{self, JoinRequest, Refusal, ServerStatus};
use super::Cluster;
use crate::http::HttpError;
use crate::ServerNode;
use std::collections::BTreeMap;
use std::time::Duration;

/// Pause between rounds.
const ROUND: Duration = Duration::from_secs(1);

/// Runs until this server is a voter whose membership entry is current,
/// or the cluster shuts down.
pub async fn form_or_join(cluster: Cluster) {
    let mut stopping = cluster.stopping();
    let mut announced = false;
    loop {
        let attempt = if is_voter(&cluster) {
            if !announced {
                tracing::info!(id = cluster.id(), "member of the cluster");
                announced = true;
            }
            match keep_entry_current(&cluster).await {
                Ok(true) => return,
                Ok(false) => Ok(()),
                Err(e) => Err(format!("updating this server's membership entry: {e}")),
            }
        } else {
            round(&cluster).await
        };
        if let Err(e) = attempt {
            tracing::info!("joining the cluster: {e}");
        }
        tokio::select! {
            _ = tokio::time::sleep(ROUND) => {}
            _ = stopping.changed() => return,
        }
    }
}

/// Whether this server's entry in the membership is what it advertises
/// now; when it is not, sends the new one to the leader (once a leader is
/// known) and answers false (the next round checks again: the change is
/// a membership entry that reaches this server's log in a moment).
async fn keep_entry_current(cluster: &Cluster) -> Result<bool, Refusal> {
    let own = &cluster.settings().node;
    let recorded: Option<ServerNode> = cluster
        .members()
        .into_iter()
        .find(|m| m.id == cluster.id())
        .map(|m| m.node);
    if recorded.as_ref() == Some(own) {
        return Ok(true);
    }
    let Some(leader) = cluster.leader() else {
        return Ok(false);
    };
    tracing::info!(from = ?recorded, to = ?own, "this server changed since it joined; telling the leader");
    rpc::update_via_leader(cluster, &leader).await?;
    Ok(false)
}

fn is_voter(cluster: &Cluster) -> bool {
    cluster
        .members()
        .iter()
        .any(|m| m.id == cluster.id() && m.voter)
}

/// One attempt: join a running cluster, or found one when it is time.
async fn round(cluster: &Cluster) -> Result<(), String> {
    let peers = reachable_peers(cluster).await;
    if let Some(leader) = peers
        .values()
        .find_map(|s| s.leader.clone().filter(|_| s.initialized))
    {
        return ask_to_join(cluster, &leader.addr)
            .await
            .map_err(|e| e.to_string());
    }
    // Learners get their membership from the leader: a server that is
    // already in a membership as a learner waits for the leader's call.
    if cluster.members().iter().any(|m| m.id == cluster.id()) {
        return Ok(());
    }
    let expect = cluster.settings().bootstrap_expect;
    if expect <= 1 {
        return Err("no server in retry_join leads a cluster yet".into());
    }
    let mut founders: BTreeMap<u64, ServerNode> = peers
        .values()
        .filter(|s| !s.initialized)
        .map(|s| (s.id, s.node.clone()))
        .collect();
    founders.insert(cluster.id(), cluster.settings().node.clone());
    if founders.len() < expect {
        return Err(format!(
            "{} of {expect} servers (bootstrap_expect) see each other",
            founders.len()
        ));
    }
    if founders.keys().next() != Some(&cluster.id()) {
        return Ok(()); // the lowest ID founds the cluster
    }
    let members: BTreeMap<u64, ServerNode> = founders.into_iter().take(expect).collect();
    tracing::info!(servers = ?members.keys().collect::<Vec<_>>(), "founding the cluster");
    cluster
        .node()
        .raft()
        .initialize(members)
        .await
        .map_err(|e| format!("founding the cluster: {e}"))
}

/// The status of every `retry_join` server that answers, by ID (this
/// server's own address left out).
async fn reachable_peers(cluster: &Cluster) -> BTreeMap<u64, ServerStatus> {
    let mut peers = BTreeMap::new();
    for addr in &cluster.settings().retry_join {
        match rpc::server_status(cluster, addr).await {
            Ok(status) if status.id != cluster.id() => {
                peers.insert(status.id, status);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(%addr, "retry_join: {e}"),
        }
    }
    peers
}

/// Why [`join`] did not make this server a member.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(transparent)]
    Unreachable(#[from] HttpError),
    #[error("{addr} is this server")]
    Itself { addr: String },
    #[error("the server at {addr} belongs to no cluster yet")]
    NoCluster { addr: String },
    #[error("the server at {addr} knows no cluster leader")]
    NoLeader { addr: String },
    #[error("this server already belongs to another cluster (its leader is not {leader})")]
    OtherCluster { leader: String },
    #[error("the leader refused: {0}")]
    Refused(#[from] Refusal),
}

/// Joins the cluster the server at `addr` belongs to: asks it for its
/// status, then its leader to make this server a voter. Joining the
/// cluster this server already votes in succeeds at once.
pub async fn join(cluster: &Cluster, addr: &str) -> Result<(), JoinError> {
    let status = rpc::server_status(cluster, addr).await?;
    if status.id == cluster.id() {
        return Err(JoinError::Itself { addr: addr.into() });
    }
    if !status.initialized {
        return Err(JoinError::NoCluster { addr: addr.into() });
    }
    let leader = status
        .leader
        .ok_or_else(|| JoinError::NoLeader { addr: addr.into() })?;
    let members = cluster.members();
    let in_a_cluster = members.iter().any(|m| m.voter && m.id != cluster.id());
    if in_a_cluster && !members.iter().any(|m| m.id == leader.id) {
        return Err(JoinError::OtherCluster {
            leader: leader.addr,
        });
    }
    ask_to_join(cluster, &leader.addr).await
}

/// Asks the leader at `addr` to make this server a voter.
async fn ask_to_join(cluster: &Cluster, addr: &str) -> Result<(), JoinError> {
    let join = JoinRequest {
        id: cluster.id(),
        node: cluster.settings().node.clone(),
    };
    let answer: Result<(), Refusal> = cluster.client().call(addr, rpc::JOIN_PATH, &join).await?;
    Ok(answer?)
}
