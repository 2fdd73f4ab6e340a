//! Autopilot's dead server cleanup: the leader removes a voter that has
//! not answered for `server.dead_server_cleanup` from the Raft
//! configuration, so a server that died for good stops counting towards
//! the quorum.
//!
//! Whether it does is autopilot's replicated configuration
//! (`CleanupDeadServers`, set with `operator autopilot set-config`, the
//! same on every server), and `MinQuorum` raises the floor below. Until an
//! operator sets one, each server follows its agent configuration
//! (`dead_server_cleanup` zero: off). The other settings are the health's
//! ([`super::autopilot_health`]); the Enterprise ones are kept, not acted
//! on, and said so when written.
//!
//! It lives here, beside the liveness poller whose findings it reads, and
//! not among the server crate's leader duties: it is a membership change,
//! made with the same call as `operator raft remove-peer`
//! ([`rpc::remove_member`]), and it needs nothing of the scheduler. It runs
//! on every server after each poll round but acts only while this server
//! leads, so it moves with leadership as the duties do.
//!
//! It never shrinks the voters below a quorum of `bootstrap_expect`
//! (3 servers: never below 2) nor below `MinQuorum`, so a partition that
//! silences most servers cannot talk the leader into a cluster of one; a
//! server held back by that floor is logged once.

use super::rpc::{self, RemoveRequest};
use super::settings::DEFAULT_DEAD_AFTER;
use super::Cluster;
use crate::NodeId;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The fewest voters the cleanup leaves: a majority of
/// `bootstrap_expect` (at least one).
pub fn voter_floor(bootstrap_expect: usize) -> usize {
    bootstrap_expect.max(1) / 2 + 1
}

/// What to do about the dead voters `dead` (silent longer than the
/// cleanup time) among `voters`: the first one to remove, if removing it
/// keeps `floor` voters.
pub fn next_removal(voters: usize, dead: &[NodeId], floor: usize) -> Option<NodeId> {
    let first = dead.first()?;
    (voters > floor).then_some(*first)
}

/// What the cleanup follows this round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// Whether dead voters are removed at all.
    pub enabled: bool,
    /// How long a voter must have been silent to count as dead.
    pub dead_after: Duration,
    /// The fewest voters left (`MinQuorum`; 0: none beyond the quorum
    /// of `bootstrap_expect`).
    pub min_quorum: usize,
}

impl CleanupPolicy {
    /// The replicated configuration `stored` when an operator set one,
    /// else the agent's `dead_server_cleanup` (`agent_dead_after`, zero:
    /// off). Silence counts as death after the agent's time, or
    /// [`DEFAULT_DEAD_AFTER`] when the agent's is zero.
    pub fn of(
        stored: Option<&herder::structs::AutopilotConfiguration>,
        agent_dead_after: Duration,
    ) -> CleanupPolicy {
        match stored {
            Some(config) => CleanupPolicy {
                enabled: config.cleanup_dead_servers,
                dead_after: if agent_dead_after.is_zero() {
                    DEFAULT_DEAD_AFTER
                } else {
                    agent_dead_after
                },
                min_quorum: usize::try_from(config.min_quorum).unwrap_or(usize::MAX),
            },
            None => CleanupPolicy {
                enabled: !agent_dead_after.is_zero(),
                dead_after: agent_dead_after,
                min_quorum: 0,
            },
        }
    }

    /// The policy in effect on `cluster` now.
    pub fn current(cluster: &Cluster) -> CleanupPolicy {
        let state = cluster.store().snapshot();
        CleanupPolicy::of(
            state.stored_autopilot_config().map(|c| &**c),
            cluster.settings().dead_server_cleanup,
        )
    }
}

/// The cleanup's memory between rounds: which dead servers it already
/// said it keeps, so the log says it once per server.
#[derive(Default)]
pub struct Cleanup {
    held_back: BTreeSet<NodeId>,
}

impl Cleanup {
    /// One round: removes at most one dead voter (the next round sees the
    /// new configuration), when this server leads and cleanup is on.
    pub async fn round(&mut self, cluster: &Cluster) {
        let policy = CleanupPolicy::current(cluster);
        if !policy.enabled || !cluster.is_leader() {
            self.held_back.clear();
            return;
        }
        let after = policy.dead_after;
        let voters: Vec<NodeId> = cluster
            .members()
            .iter()
            .filter(|m| m.voter)
            .map(|m| m.id)
            .collect();
        let dead = dead_voters(cluster, &voters, after, Instant::now());
        self.held_back.retain(|id| dead.contains(id));
        let floor = voter_floor(cluster.settings().bootstrap_expect).max(policy.min_quorum);
        match next_removal(voters.len(), &dead, floor) {
            Some(id) => remove(cluster, id, after).await,
            None => {
                for id in dead.iter().filter(|id| self.held_back.insert(**id)) {
                    tracing::warn!(
                        id, voters = voters.len(), floor,
                        "dead server kept in the raft configuration: removing it would leave fewer voters than a quorum of bootstrap_expect or MinQuorum"
                    );
                }
            }
        }
    }
}

/// The voters other than this server that have been silent at least
/// `after`.
fn dead_voters(cluster: &Cluster, voters: &[NodeId], after: Duration, now: Instant) -> Vec<NodeId> {
    let liveness = cluster.liveness();
    voters
        .iter()
        .copied()
        .filter(|id| *id != cluster.id())
        .filter(|id| {
            liveness
                .get(*id)
                .is_some_and(|h| !h.alive && now.duration_since(h.last_contact) >= after)
        })
        .collect()
}

async fn remove(cluster: &Cluster, id: NodeId, after: Duration) {
    let request = RemoveRequest {
        id: Some(id),
        addr: None,
    };
    match rpc::remove_member(cluster, request).await {
        Ok(()) => tracing::warn!(
            id,
            silent_for = ?after,
            "dead server removed from the raft configuration (autopilot's CleanupDeadServers)"
        ),
        Err(e) => tracing::warn!(id, "dead server cleanup: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_a_majority_of_bootstrap_expect() {
        assert_eq!(voter_floor(3), 2);
        assert_eq!(voter_floor(5), 3);
        assert_eq!(voter_floor(0), 1);
    }

    #[test]
    fn the_replicated_configuration_overrides_the_agents() {
        let five_min = Duration::from_secs(300);
        let agent_only = CleanupPolicy::of(None, Duration::from_secs(2));
        assert!(agent_only.enabled);
        assert_eq!(agent_only.dead_after, Duration::from_secs(2));
        assert!(!CleanupPolicy::of(None, Duration::ZERO).enabled);
        let off = herder::structs::AutopilotConfiguration {
            cleanup_dead_servers: false,
            min_quorum: 3,
            ..Default::default()
        };
        let policy = CleanupPolicy::of(Some(&off), Duration::from_secs(2));
        assert!(!policy.enabled);
        assert_eq!(policy.min_quorum, 3);
        let on = herder::structs::AutopilotConfiguration::default();
        let policy = CleanupPolicy::of(Some(&on), Duration::ZERO);
        assert!(policy.enabled);
        assert_eq!(policy.dead_after, five_min);
    }

    #[test]
    fn a_dead_voter_goes_only_while_a_quorum_of_expect_remains() {
        assert_eq!(next_removal(3, &[7], 2), Some(7));
        assert_eq!(next_removal(2, &[7], 2), None);
        assert_eq!(next_removal(5, &[7, 8], 3), Some(7));
        assert_eq!(next_removal(3, &[], 2), None);
    }
}
