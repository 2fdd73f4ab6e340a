//! When a server stands for election: only once the leader has been silent
//! for its lease and a quorum says it would vote for this server (Raft's
//! pre-vote, which openraft 0.9 lacks).
//!
//! Openraft's own timer is switched off (`runtime_config().elect(false)`)
//! and [`campaign`] takes its place. Why: with openraft's timer, a server
//! that had just restarted and was still catching up stood first (its
//! timer had no lease to wait out), was refused for its short log, and
//! still moved the term on; the up-to-date survivor then lost its own
//! rounds to that newer term (openraft orders equal terms by node ID, so
//! it even adopted the stale server's vote), and openraft kept the
//! up-to-date server waiting an extra `2 x election_timeout_max` for a
//! longer log it had once seen, long after catching up. The kill loop
//! measured failovers of 3-6 s that way. With a pre-vote a server behind
//! the others never gets to move the term, and the up-to-date one wins
//! the first round.
//!
//! The rules, as the Raft thesis (section 9.6) gives them:
//! - a follower stands after hearing nothing from a leader for the lease
//!   (`election_timeout_max`) plus a timeout drawn afresh each time from
//!   `[election_timeout_min, election_timeout_max)`, and again after
//!   another draw while no leader has appeared;
//! - it first asks every other voter ([`PREVOTE_PATH`]); a voter says yes
//!   when it does not lead, has not heard from a leader within the lease
//!   itself, and the candidate's log is at least as long as its own;
//! - with a quorum of yes (its own included) it triggers openraft's
//!   election, whose votes decide as before.

use super::Cluster;
use crate::NodeId;
use futures::StreamExt;
use openraft::LogId;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The signed cluster call that asks for a pre-vote.
pub const PREVOTE_PATH: &str = "/v1/rpc/prevote";

/// How often the campaign looks at the leader's silence.
const TICK: Duration = Duration::from_millis(50);

/// "Would you vote for me?", with what the answer depends on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PreVoteRequest {
    pub candidate: NodeId,
    /// The server asked (a server at that address under another ID must
    /// not answer for it).
    pub target: NodeId,
    pub last_log: Option<LogId<NodeId>>,
}

/// The answer, with the reason for a no (for the candidate's log).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PreVoteAnswer {
    pub granted: bool,
    pub reason: String,
}

/// What a voter knows when it is asked.
#[derive(Clone, Debug)]
pub struct Standing {
    pub id: NodeId,
    pub leading: bool,
    /// Since its leader's last append (`None`: none since it started).
    pub silent_for: Option<Duration>,
    pub last_log: Option<LogId<NodeId>>,
}

/// The pre-vote rule: why this voter would refuse `request`, if it would.
pub fn refusal(me: &Standing, request: &PreVoteRequest, lease: Duration) -> Option<&'static str> {
    if request.target != me.id {
        Some("asked as another server")
    } else if me.leading {
        Some("this server leads")
    } else if me.silent_for.is_some_and(|silent| silent < lease) {
        Some("this server heard from its leader within the lease")
    } else if request.last_log < me.last_log {
        Some("the candidate's log is behind this server's")
    } else {
        None
    }
}

/// This server's answer to a pre-vote (the RPC port's handler).
pub fn answer(cluster: &Cluster, request: &PreVoteRequest) -> PreVoteAnswer {
    let last_log = match cluster.node().last_log_id() {
        Ok(last) => last,
        Err(e) => {
            return PreVoteAnswer {
                granted: false,
                reason: format!("cannot read this server's log: {e}"),
            }
        }
    };
    let me = Standing {
        id: cluster.id(),
        leading: cluster.is_leader(),
        silent_for: cluster
            .leader_contact()
            .millis_since()
            .map(Duration::from_millis),
        last_log,
    };
    let refused = refusal(&me, request, lease(cluster));
    PreVoteAnswer {
        granted: refused.is_none(),
        reason: refused.unwrap_or_default().to_string(),
    }
}

fn lease(cluster: &Cluster) -> Duration {
    Duration::from_millis(cluster.settings().raft.election_timeout_max)
}

/// A fresh election timeout in `[election_timeout_min, election_timeout_max)`.
fn draw_timeout(cluster: &Cluster) -> Duration {
    let raft = &cluster.settings().raft;
    let (low, high) = (raft.election_timeout_min, raft.election_timeout_max);
    Duration::from_millis(rand::thread_rng().gen_range(low..high.max(low + 1)))
}

/// Whether it is time to stand: the leader silent for the lease and this
/// round's timeout, and the timeout passed since the last attempt.
pub fn due(
    silent_for: Duration,
    since_attempt: Option<Duration>,
    lease: Duration,
    timeout: Duration,
) -> bool {
    silent_for >= lease + timeout && since_attempt.is_none_or(|since| since >= timeout)
}

/// The election timer of a server in a cluster, until the cluster stops.
pub async fn campaign(cluster: Cluster) {
    let started = Instant::now();
    let mut timeout = draw_timeout(&cluster);
    let mut last_attempt: Option<Instant> = None;
    let mut stopping = cluster.stopping();
    loop {
        tokio::select! {
            () = tokio::time::sleep(TICK) => {}
            _ = stopping.changed() => return,
        }
        if cluster.is_leader() || !is_voter(&cluster) {
            continue;
        }
        let silent_for = cluster
            .leader_contact()
            .millis_since()
            .map_or_else(|| started.elapsed(), Duration::from_millis);
        let since_attempt = last_attempt.map(|t| t.elapsed());
        if !due(silent_for, since_attempt, lease(&cluster), timeout) {
            continue;
        }
        last_attempt = Some(Instant::now());
        timeout = draw_timeout(&cluster);
        if quorum_would_vote(&cluster).await {
            tracing::info!(
                silent_ms = silent_for.as_millis() as u64,
                "standing for election"
            );
            if let Err(e) = cluster.node().raft().trigger().elect().await {
                tracing::warn!("could not stand for election: {e}");
            }
        }
    }
}

fn is_voter(cluster: &Cluster) -> bool {
    let id = cluster.id();
    cluster.members().iter().any(|m| m.id == id && m.voter)
}

/// Asks every other voter at once; whether a quorum (this server
/// included) would vote for it.
async fn quorum_would_vote(cluster: &Cluster) -> bool {
    let last_log = match cluster.node().last_log_id() {
        Ok(last) => last,
        Err(e) => {
            tracing::warn!("not standing: cannot read this server's log: {e}");
            return false;
        }
    };
    let me = cluster.id();
    let voters: Vec<_> = cluster.members().into_iter().filter(|m| m.voter).collect();
    let client = cluster.quick_client();
    let asks = voters.iter().filter(|m| m.id != me).map(|m| {
        let request = PreVoteRequest {
            candidate: me,
            target: m.id,
            last_log,
        };
        async move {
            let answer: Result<PreVoteAnswer, _> = client
                .call_member(&m.addr, m.id, PREVOTE_PATH, &request)
                .await;
            match answer {
                Ok(a) if a.granted => true,
                Ok(a) => {
                    tracing::debug!(voter = m.id, reason = %a.reason, "pre-vote refused");
                    false
                }
                Err(e) => {
                    tracing::debug!(voter = m.id, "pre-vote unanswered: {e}");
                    false
                }
            }
        }
    });
    // Decided as soon as a quorum said yes: a voter that does not answer
    // (a frozen old leader) must not hold the election for its timeout.
    let needed = voters.len() / 2 + 1;
    let mut granted = 1;
    let mut answers: futures::stream::FuturesUnordered<_> = asks.collect();
    while granted < needed {
        match answers.next().await {
            Some(true) => granted += 1,
            Some(false) => {}
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn log(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    fn follower(silent_ms: Option<u64>, last_log: Option<LogId<NodeId>>) -> Standing {
        Standing {
            id: 2,
            leading: false,
            silent_for: silent_ms.map(Duration::from_millis),
            last_log,
        }
    }

    fn asks(last_log: Option<LogId<NodeId>>) -> PreVoteRequest {
        PreVoteRequest {
            candidate: 3,
            target: 2,
            last_log,
        }
    }

    const LEASE: Duration = Duration::from_millis(600);

    #[test]
    fn a_voter_that_lost_its_leader_says_yes_to_a_log_as_long_as_its_own() {
        let me = follower(Some(900), log(4, 656));
        assert_eq!(refusal(&me, &asks(log(4, 656)), LEASE), None);
        assert_eq!(refusal(&me, &asks(log(5, 10)), LEASE), None, "newer term");
        // Never heard from a leader since it started: nothing to wait for.
        assert_eq!(refusal(&follower(None, None), &asks(None), LEASE), None);
    }

    #[test]
    fn a_stale_log_a_live_leader_or_a_wrong_address_gets_a_no() {
        let me = follower(Some(900), log(4, 656));
        assert!(refusal(&me, &asks(log(4, 583)), LEASE).is_some_and(|r| r.contains("behind")));
        assert!(refusal(&me, &asks(log(3, 900)), LEASE).is_some_and(|r| r.contains("behind")));
        let hearing = follower(Some(120), log(4, 656));
        assert!(refusal(&hearing, &asks(log(4, 700)), LEASE).is_some_and(|r| r.contains("lease")));
        let leader = Standing {
            leading: true,
            ..follower(None, None)
        };
        assert_eq!(
            refusal(&leader, &asks(log(9, 9)), LEASE),
            Some("this server leads")
        );
        let elsewhere = PreVoteRequest {
            target: 7,
            ..asks(log(9, 9))
        };
        assert!(refusal(&me, &elsewhere, LEASE).is_some());
    }

    #[test]
    fn a_server_stands_after_the_lease_and_its_timeout_then_once_per_timeout() {
        let t = |ms| Duration::from_millis(ms);
        let timeout = t(400);
        assert!(!due(t(999), None, LEASE, timeout));
        assert!(due(t(1000), None, LEASE, timeout));
        assert!(
            !due(t(1300), Some(t(300)), LEASE, timeout),
            "tried 300 ms ago"
        );
        assert!(due(t(1400), Some(t(400)), LEASE, timeout));
    }
}
