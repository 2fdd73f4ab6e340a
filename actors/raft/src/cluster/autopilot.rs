//! Autopilot's dead server cleanup: the leader removes a voter that has
//! not answered for `server.dead_server_cleanup` (zero: never) from the
//! Raft configuration, so a server that died for good stops counting
//! towards the quorum.
//!
//! It lives here, beside the liveness poller whose findings it reads, and
//! not among the server crate's leader duties: it is a membership change,
//! made with the same call as `operator raft remove-peer`
//! ([`rpc::remove_member`]), and it needs nothing of the scheduler. It runs
//! on every server after each poll round but acts only while this server
//! leads, so it moves with leadership as the duties do.
//!
//! It never shrinks the voters below a quorum of `bootstrap_expect`
//! (3 servers: never below 2), so a partition that silences most servers
//! cannot talk the leader into a cluster of one; a server held back by
//! that floor is logged once.

use super::rpc::{self, RemoveRequest};
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
        let after = cluster.settings().dead_server_cleanup;
        if after.is_zero() || !cluster.is_leader() {
            self.held_back.clear();
            return;
        }
        let voters: Vec<NodeId> = cluster
            .members()
            .iter()
            .filter(|m| m.voter)
            .map(|m| m.id)
            .collect();
        let dead = dead_voters(cluster, &voters, after, Instant::now());
        self.held_back.retain(|id| dead.contains(id));
        let floor = voter_floor(cluster.settings().bootstrap_expect);
        match next_removal(voters.len(), &dead, floor) {
            Some(id) => remove(cluster, id, after).await,
            None => {
                for id in dead.iter().filter(|id| self.held_back.insert(**id)) {
                    tracing::warn!(
                        id, voters = voters.len(), floor,
                        "dead server kept in the raft configuration: removing it would leave fewer voters than a quorum of bootstrap_expect"
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
            "dead server removed from the raft configuration (server.dead_server_cleanup)"
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
    fn a_dead_voter_goes_only_while_a_quorum_of_expect_remains() {
        assert_eq!(next_removal(3, &[7], 2), Some(7));
        assert_eq!(next_removal(2, &[7], 2), None);
        assert_eq!(next_removal(5, &[7, 8], 3), Some(7));
        assert_eq!(next_removal(3, &[], 2), None);
    }
}
