//! Which cluster members answer: every server asks each other member of
//! the Raft configuration for its status (the signed status call, with
//! the cluster's quick client) once a second, and keeps what it last
//! heard.
//!
//! Nomad learns this from its gossip pool; herder has none, so this poller
//! stands in for it. Keeping the answers in a cache means
//! `/v1/agent/members` answers at once instead of waiting on a dead
//! server's timeout; `force-leave` finds a dead server by the name it had
//! when it last answered; and the leader's dead server cleanup
//! ([`super::autopilot`]) reads how long each member has been silent.

use super::{autopilot, autopilot_health, rpc, Cluster};
use std::time::{Duration, Instant};

// Kept in a module of their own, which the handle holds without naming
// this poller (whose rounds need the handle).
pub use super::health::{Liveness, MemberHealth};

/// Pause between two rounds of status calls (each bounded by the
/// cluster's quick client's timeout, 1 s: a member slower than that
/// counts as failed for the round).
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Polls the members until the cluster stops; on the leader, each round
/// ends with the dead server cleanup.
pub async fn watch(cluster: Cluster) {
    let mut stopping = cluster.stopping();
    let mut cleanup = autopilot::Cleanup::default();
    loop {
        probe_round(&cluster).await;
        // Keeps each member's health verdict current, so `StableSince`
        // is when it changed and not when someone last asked.
        autopilot_health::report(&cluster);
        cleanup.round(&cluster).await;
        tokio::select! {
            _ = tokio::time::sleep(POLL_INTERVAL) => {}
            _ = stopping.changed() => return,
        }
    }
}

/// Asks every other member for its status, all at once.
async fn probe_round(cluster: &Cluster) {
    let client = cluster.quick_client();
    let members = cluster.members();
    let calls = members
        .iter()
        .filter(|m| m.id != cluster.id())
        .map(|m| async move {
            let answer = rpc::probe_status(client, &m.addr).await;
            if let Err(e) = &answer {
                tracing::debug!(id = m.id, addr = %m.addr, "member did not answer: {e}");
            }
            (m.id, answer.ok())
        });
    let answers = futures::future::join_all(calls).await;
    cluster.liveness().record(&members, answers, Instant::now());
}
