//! The agent endpoints of a cluster member: `/v1/agent/members` lists every
//! server of the Raft configuration as Nomad lists its gossip members,
//! `/v1/agent/join` and `/v1/agent/force-leave` change the membership, and
//! the `nomad`/`raft` stats of `/v1/agent/self` come from the replica.
//!
//! herder has no gossip pool: a member's liveness is what the liveness
//! poller of herder-raft last heard (a signed status call each second), so
//! a listing never waits on a dead server; a member the poller has not
//! asked yet is asked on the spot, with the cluster's quick client (1 s).
//! Servers are addressed by their RPC address, so a member's `Addr`,
//! `Port` and `port` tag name that address (Nomad's CLI finds the leader
//! by `Addr:port` tag).

use herder_common::config::AgentConfig;
use herder_raft::cluster::bootstrap;
use herder_raft::cluster::rpc::{self, RemoveRequest, ServerStatus};
use herder_raft::cluster::RaftState;
use herder_raft::{Cluster, Member};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The Raft protocol Nomad 1.1 servers speak (the `raft_vsn` tag).
const RAFT_VSN: &str = "2";

/// One member as this server knows it.
struct Known {
    member: Member,
    status: Option<ServerStatus>,
    alive: bool,
}

/// Every member of the Raft configuration, as Nomad's `AgentMember`
/// objects sorted by name.
pub async fn members(cluster: &Cluster, config: &AgentConfig) -> Vec<Value> {
    let mut known = Vec::new();
    let mut unasked = Vec::new();
    for member in cluster.members() {
        if member.id == cluster.id() {
            let status = Some(cluster.status());
            known.push(Known {
                member,
                status,
                alive: true,
            });
            continue;
        }
        match cluster.liveness().get(member.id) {
            Some(health) => known.push(Known {
                member,
                status: health.status,
                alive: health.alive,
            }),
            None => unasked.push(member),
        }
    }
    known.extend(ask(cluster, unasked).await);
    let mut listed: Vec<Value> = known.iter().map(|k| member_json(k, config)).collect();
    listed.sort_by(|a, b| a["Name"].as_str().cmp(&b["Name"].as_str()));
    listed
}

/// This server as a member (`/v1/agent/self`'s `member`).
pub fn own_member(cluster: &Cluster, config: &AgentConfig) -> Value {
    let member = cluster
        .members()
        .into_iter()
        .find(|m| m.id == cluster.id())
        .unwrap_or_else(|| Member {
            id: cluster.id(),
            addr: cluster.settings().node.rpc_addr.clone(),
            node: cluster.settings().node.clone(),
            voter: false,
            leader: false,
        });
    let known = Known {
        member,
        status: Some(cluster.status()),
        alive: true,
    };
    member_json(&known, config)
}

/// Asks the members the poller has not reached yet, all at once.
async fn ask(cluster: &Cluster, members: Vec<Member>) -> Vec<Known> {
    if members.is_empty() {
        return Vec::new();
    }
    let calls = members.into_iter().map(|member| async move {
        let status = rpc::probe_status(cluster.quick_client(), &member.addr)
            .await
            .ok()
            .filter(|s| s.id == member.id);
        cluster
            .liveness()
            .note(member.id, status.clone(), std::time::Instant::now());
        Known {
            alive: status.is_some(),
            member,
            status,
        }
    });
    futures::future::join_all(calls).await
}

/// Nomad's `AgentMember`. A member never heard from is named by its
/// address; the region is the cluster's (one Raft cluster is one region).
fn member_json(known: &Known, config: &AgentConfig) -> Value {
    let (host, port) = split_addr(&known.member.addr);
    let status = known.status.as_ref();
    let name = status.map_or_else(|| known.member.addr.clone(), |s| s.node.name.clone());
    let region = status
        .map(|s| s.region.clone())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| config.region.clone());
    let tags = json!({
        "role": "nomad",
        "region": region,
        "dc": status.map(|s| s.node.datacenter.clone()).unwrap_or_default(),
        "build": status.map(|s| s.node.version.clone()).unwrap_or_default(),
        "port": port.to_string(),
        "rpc_addr": host,
        "id": known.member.id.to_string(),
        "expect": status.map(|s| s.bootstrap_expect.to_string()).unwrap_or_default(),
        "raft_vsn": RAFT_VSN,
        "vsn": "1",
        "mvn": "1",
    });
    json!({
        "Name": name, "Addr": host, "Port": port, "Tags": tags,
        "Status": if known.alive { "alive" } else { "failed" },
        "ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2,
        "DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4,
    })
}

/// `host:port` split; a port that does not parse reads as 0.
fn split_addr(addr: &str) -> (String, u16) {
    match addr.rsplit_once(':') {
        Some((host, port)) => (
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port.parse().unwrap_or(0),
        ),
        None => (addr.to_string(), 0),
    }
}

/// `PUT /v1/agent/join`: joins the cluster of each server named (an RPC
/// address, port 4647 when left out). Nomad's answer: how many joined,
/// and what went wrong with the others.
pub async fn join(cluster: &Cluster, addresses: &[String]) -> Value {
    let mut joined = 0;
    let mut errors = Vec::new();
    for addr in addresses {
        let addr = herder_server::cluster_member::with_rpc_port(addr);
        match bootstrap::join(cluster, &addr).await {
            Ok(()) => joined += 1,
            Err(e) => errors.push(format!("{addr}: {e}")),
        }
    }
    json!({ "num_joined": joined, "error": errors.join("; ") })
}

/// Why `force-leave` removed nobody.
#[derive(Debug, thiserror::Error)]
pub enum ForceLeaveError {
    #[error("no server named {0:?} in the cluster (give its name, as `server members` lists it, or its RPC address)")]
    Unknown(String),
    #[error("server {0:?} is alive: force-leave removes only failed servers (`operator raft remove-peer` removes a live one)")]
    Alive(String),
    #[error("{0}")]
    Refused(#[from] rpc::Refusal),
}

/// `PUT /v1/agent/force-leave?node=`: removes the failed server with that
/// name (`s1.global`, or `s1` in this region), RPC address or ID from the
/// Raft configuration, through the leader. A server that answers is
/// refused: Nomad's force-leave only moves failed members out (a live one
/// rejoins), and a live server taken out of the configuration would keep
/// running outside the cluster.
pub async fn force_leave(
    cluster: &Cluster,
    config: &AgentConfig,
    node: &str,
) -> Result<(), ForceLeaveError> {
    let (member, alive) = find(cluster, config, node)
        .await
        .ok_or_else(|| ForceLeaveError::Unknown(node.to_string()))?;
    if alive {
        return Err(ForceLeaveError::Alive(node.to_string()));
    }
    let request = RemoveRequest {
        id: Some(member.id),
        addr: None,
    };
    rpc::remove_via_leader(cluster, request).await?;
    Ok(())
}

/// The member `node` names, and whether it is alive.
async fn find(cluster: &Cluster, config: &AgentConfig, node: &str) -> Option<(Member, bool)> {
    let qualified = format!("{node}.{}", config.region);
    let listed = members(cluster, config).await;
    let (id, alive) = listed.iter().find_map(|m| {
        let names = [m["Name"].as_str(), m["Tags"]["id"].as_str()];
        let addr = format!(
            "{}:{}",
            m["Addr"].as_str().unwrap_or_default(),
            m["Port"].as_u64().unwrap_or(0)
        );
        let hit = names
            .iter()
            .flatten()
            .any(|n| *n == node || *n == qualified)
            || addr == node;
        let id = m["Tags"]["id"].as_str()?.parse::<u64>().ok()?;
        hit.then_some((id, m["Status"] == "alive"))
    })?;
    let member = cluster.members().into_iter().find(|m| m.id == id)?;
    Some((member, alive))
}

/// The `nomad` and `raft` sections of `/v1/agent/self`'s stats, as
/// `nomad agent-info` prints them (hashicorp/raft's names; the commit
/// index is the applied one, which openraft reports).
pub fn stats(
    cluster: &Cluster,
) -> (
    BTreeMap<&'static str, String>,
    BTreeMap<&'static str, String>,
) {
    // Everything read through the cluster first: each call borrows the
    // metrics watch itself, and nested borrows could wait on a writer.
    let leader = cluster.leader().map(|l| l.addr).unwrap_or_default();
    let nomad = BTreeMap::from([
        ("server", "true".to_string()),
        ("leader", cluster.is_leader().to_string()),
        ("leader_addr", leader),
        ("bootstrap", "false".to_string()),
        ("known_regions", "1".to_string()),
    ]);
    let members = cluster.members();
    let membership_index = cluster.membership_index();
    let voters = members.iter().filter(|m| m.voter).count();
    let metrics = cluster.metrics();
    let m = metrics.borrow();
    let applied = m.last_applied.map_or(0, |l| l.index).to_string();
    let configuration: Vec<String> = members
        .iter()
        .map(|s| {
            let suffrage = if s.voter { "Voter" } else { "Nonvoter" };
            format!("{{Suffrage:{suffrage} ID:{0} Address:{0}}}", s.addr)
        })
        .collect();
    let raft = BTreeMap::from([
        ("state", raft_state(m.state).to_string()),
        ("term", m.current_term.to_string()),
        ("num_peers", voters.saturating_sub(1).to_string()),
        ("applied_index", applied.clone()),
        ("commit_index", applied),
        ("last_log_index", m.last_log_index.unwrap_or(0).to_string()),
        (
            "last_snapshot_index",
            m.snapshot.map_or(0, |l| l.index).to_string(),
        ),
        ("protocol_version", RAFT_VSN.to_string()),
        (
            "latest_configuration",
            format!("[{}]", configuration.join(" ")),
        ),
        ("latest_configuration_index", membership_index.to_string()),
    ]);
    (nomad, raft)
}

/// hashicorp/raft's state names.
fn raft_state(state: RaftState) -> &'static str {
    match state {
        RaftState::Leader => "Leader",
        RaftState::Follower => "Follower",
        RaftState::Candidate => "Candidate",
        RaftState::Learner => "Learner",
        RaftState::Shutdown => "Shutdown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_split_into_host_and_port() {
        assert_eq!(split_addr("10.0.0.1:4647"), ("10.0.0.1".into(), 4647));
        assert_eq!(split_addr("[::1]:4647"), ("::1".into(), 4647));
        assert_eq!(split_addr("host"), ("host".into(), 0));
    }
}
