//! Autopilot's view of the servers' health (Nomad's
//! `Operator.ServerHealth`, `/v1/operator/autopilot/health`), from what
//! this server already knows: the Raft configuration, what the member
//! poller ([`super::liveness`]) last heard from each member, and
//! autopilot's replicated settings.
//!
//! Nomad asks the leader, whose view comes from its heartbeats; every
//! herder server polls every member once a second, so any server answers
//! from its own view (a follower's may lag the leader's by a round). A
//! server is healthy, as in Nomad, when it answers (`SerfStatus`
//! `alive`), heard from its leader within `LastContactThreshold`, and
//! trails the leader's log by at most `MaxTrailingLogs` entries.

use super::autopilot::CleanupPolicy;
use super::health::MemberHealth;
use super::status::Member;
use super::Cluster;
use crate::NodeId;
use herder::structs::AutopilotConfiguration;
use std::time::{Duration, SystemTime};

/// One server's health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerHealth {
    /// Its ID as the Raft configuration lists it (the RPC address, as
    /// `operator raft list-peers` shows with Raft protocol 2).
    pub id: String,
    pub raft_id: NodeId,
    pub name: String,
    pub address: String,
    /// `alive` when it answered the last poll, `failed` otherwise.
    pub serf_status: &'static str,
    pub version: String,
    pub leader: bool,
    /// How long ago it last heard from its leader (zero on the leader).
    pub last_contact: Duration,
    pub last_term: u64,
    pub last_index: u64,
    pub healthy: bool,
    pub voter: bool,
    /// Since when `healthy` has had its value.
    pub stable_since: SystemTime,
}

/// The cluster's health (Nomad's `OperatorHealthReply`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthReport {
    /// Whether every server is healthy.
    pub healthy: bool,
    /// How many healthy voters could fail without losing the quorum.
    pub failure_tolerance: usize,
    pub servers: Vec<ServerHealth>,
    /// The leader's ID (`""` while none is known).
    pub leader: String,
    /// The voters' IDs.
    pub voters: Vec<String>,
}

/// Autopilot's settings in effect: the replicated ones once an operator
/// set them, else Nomad's defaults with the cleanup as the agent has it.
pub fn effective_config(cluster: &Cluster) -> AutopilotConfiguration {
    let state = cluster.store().snapshot();
    match state.stored_autopilot_config() {
        Some(config) => (**config).clone(),
        None => AutopilotConfiguration {
            cleanup_dead_servers: CleanupPolicy::of(None, cluster.settings().dead_server_cleanup)
                .enabled,
            ..AutopilotConfiguration::default()
        },
    }
}

/// What one member looks like to this server now.
struct Sighting {
    member: Member,
    alive: bool,
    last_contact: Option<Duration>,
    term: u64,
    index: u64,
    version: String,
}

/// The health of every member of the Raft configuration, as this server
/// sees it now.
pub fn report(cluster: &Cluster) -> HealthReport {
    let config = effective_config(cluster);
    let sightings: Vec<Sighting> = cluster
        .members()
        .into_iter()
        .map(|member| sight(cluster, member))
        .collect();
    let leader_index = sightings.iter().find(|s| s.member.leader).map(|s| s.index);
    let now = SystemTime::now();
    let servers: Vec<ServerHealth> = sightings
        .into_iter()
        .map(|s| {
            let healthy = is_healthy(&s, leader_index, &config);
            let stable_since = cluster.liveness().stable_since(s.member.id, healthy, now);
            server_health(s, healthy, stable_since)
        })
        .collect();
    summarise(servers)
}

fn sight(cluster: &Cluster, member: Member) -> Sighting {
    if member.id == cluster.id() {
        let status = cluster.status();
        return Sighting {
            alive: true,
            last_contact: status.leader_contact_millis.map(Duration::from_millis),
            term: status.term,
            index: status.last_applied,
            version: status.node.version,
            member,
        };
    }
    let heard: Option<MemberHealth> = cluster.liveness().get(member.id);
    let alive = heard.as_ref().is_some_and(|h| h.alive);
    let status = heard.and_then(|h| h.status);
    Sighting {
        alive,
        last_contact: status
            .as_ref()
            .and_then(|s| s.leader_contact_millis)
            .map(Duration::from_millis),
        term: status.as_ref().map_or(0, |s| s.term),
        index: status.as_ref().map_or(0, |s| s.last_applied),
        version: status.map_or_else(|| member.node.version.clone(), |s| s.node.version),
        member,
    }
}

/// Nomad's rule: alive, in contact with the leader within the threshold
/// (the leader itself always is), and not too far behind its log.
fn is_healthy(s: &Sighting, leader_index: Option<u64>, config: &AutopilotConfiguration) -> bool {
    let in_contact = s.member.leader
        || s.last_contact
            .is_some_and(|c| c <= config.last_contact_threshold);
    let caught_up =
        leader_index.is_some_and(|l| l.saturating_sub(s.index) <= config.max_trailing_logs);
    s.alive && in_contact && caught_up
}

fn server_health(s: Sighting, healthy: bool, stable_since: SystemTime) -> ServerHealth {
    let name = if s.member.node.name.is_empty() {
        s.member.addr.clone()
    } else {
        s.member.node.name.clone()
    };
    ServerHealth {
        id: s.member.addr.clone(),
        raft_id: s.member.id,
        name,
        address: s.member.addr.clone(),
        serf_status: if s.alive { "alive" } else { "failed" },
        version: s.version,
        leader: s.member.leader,
        last_contact: if s.member.leader {
            Duration::ZERO
        } else {
            s.last_contact.unwrap_or_default()
        },
        last_term: s.term,
        last_index: s.index,
        healthy,
        voter: s.member.voter,
        stable_since,
    }
}

/// The cluster's verdict over its servers' (Nomad's: the failure
/// tolerance is the healthy voters beyond a quorum of all voters).
pub fn summarise(servers: Vec<ServerHealth>) -> HealthReport {
    let voters: Vec<String> = servers
        .iter()
        .filter(|s| s.voter)
        .map(|s| s.id.clone())
        .collect();
    let healthy_voters = servers.iter().filter(|s| s.voter && s.healthy).count();
    let quorum = voters.len() / 2 + 1;
    HealthReport {
        healthy: !servers.is_empty() && servers.iter().all(|s| s.healthy),
        failure_tolerance: healthy_voters.saturating_sub(quorum),
        leader: servers
            .iter()
            .find(|s| s.leader)
            .map(|s| s.id.clone())
            .unwrap_or_default(),
        voters,
        servers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(n: u8, healthy: bool, leader: bool) -> ServerHealth {
        ServerHealth {
            id: format!("10.0.0.{n}:4647"),
            raft_id: u64::from(n),
            name: format!("s{n}.global"),
            address: format!("10.0.0.{n}:4647"),
            serf_status: if healthy { "alive" } else { "failed" },
            version: "0.3.0".into(),
            leader,
            last_contact: Duration::ZERO,
            last_term: 2,
            last_index: 10,
            healthy,
            voter: true,
            stable_since: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn one_dead_voter_of_three_leaves_no_failure_tolerance() {
        let all = summarise(vec![
            server(1, true, true),
            server(2, true, false),
            server(3, true, false),
        ]);
        assert!(all.healthy);
        assert_eq!(all.failure_tolerance, 1);
        assert_eq!(all.leader, "10.0.0.1:4647");
        assert_eq!(all.voters.len(), 3);
        let one_down = summarise(vec![
            server(1, true, true),
            server(2, true, false),
            server(3, false, false),
        ]);
        assert!(!one_down.healthy);
        assert_eq!(one_down.failure_tolerance, 0);
    }

    #[test]
    fn a_server_far_behind_or_out_of_contact_is_unhealthy() {
        let config = AutopilotConfiguration::default();
        let node = crate::ServerNode::at("10.0.0.2:4647".to_string());
        let sighting = |alive, contact_ms, index| Sighting {
            member: Member::new(2, &node, true, false),
            alive,
            last_contact: Some(Duration::from_millis(contact_ms)),
            term: 1,
            index,
            version: String::new(),
        };
        assert!(is_healthy(&sighting(true, 50, 990), Some(1000), &config));
        assert!(!is_healthy(&sighting(false, 50, 990), Some(1000), &config));
        assert!(!is_healthy(&sighting(true, 900, 990), Some(1000), &config));
        assert!(!is_healthy(&sighting(true, 50, 700), Some(1000), &config));
        assert!(!is_healthy(&sighting(true, 50, 990), None, &config));
    }
}
