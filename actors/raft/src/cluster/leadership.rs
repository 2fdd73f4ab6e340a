//! Whether this server should carry the leader's duties (broker, plan
//! queue, heartbeat timers...), as a watch the server crate follows.
//!
//! Leadership counts from the moment a quorum has acknowledged this
//! leader (a restarted server may briefly believe it still leads its old
//! term) and its replica has applied an entry of its own term (the no-op a
//! new leader commits first): from then on it holds every committed
//! write, so the duties restore from a complete state.
//!
//! A write this leader gave up without knowing its fate (no quorum
//! acknowledged it for a while, [`Cluster::interruptions`]) may still
//! commit. Whatever acted on that failure (a worker scheduling the
//! evaluation again) would then work from a state without it and place
//! the same allocations twice, so the duties stop there and resume once an
//! entry written after it has applied: every evaluation is then restored
//! from a state that holds the write, or never will. (Nomad's leader steps
//! down in that case and its successor restores the same way; openraft
//! 0.9 has no step-down.)

use super::{rpc, Cluster};
use crate::LogEntry;
use std::time::Duration;

/// Pause between two attempts of the barrier write.
const BARRIER_RETRY: Duration = Duration::from_millis(200);

/// Keeps `cluster`'s duty leadership up to date until the cluster stops.
pub async fn follow(cluster: Cluster) {
    let mut metrics = cluster.metrics();
    let mut interruptions = cluster.interruptions();
    let mut stopping = cluster.stopping();
    // The write that must apply before the duties resume.
    let mut barrier: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        let holds = Cluster::leads_with_complete_state(&metrics.borrow_and_update(), cluster.id());
        if !holds {
            if let Some(pending) = barrier.take() {
                pending.abort();
            }
        }
        cluster.set_duty_leader(holds && barrier.is_none());
        let barrier_passed = async {
            match barrier.as_mut() {
                Some(pending) => {
                    let _ = pending.await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { break },
            changed = interruptions.changed() => {
                if changed.is_err() {
                    break;
                }
                if holds && barrier.is_none() {
                    tracing::warn!(
                        "a write was given up while leading: the leader's duties wait for a later entry"
                    );
                    barrier = Some(cluster.spawn(pass_barrier(cluster.clone())));
                }
            }
            () = barrier_passed => barrier = None,
            _ = stopping.changed() => break,
        }
    }
    if let Some(pending) = barrier.take() {
        pending.abort();
    }
    cluster.set_duty_leader(false);
}

/// Commits an empty entry as leader, retrying until it applies (aborted
/// when leadership goes).
async fn pass_barrier(cluster: Cluster) {
    loop {
        match rpc::write_as_leader(&cluster, LogEntry::commands(Vec::new())).await {
            Ok(_) => {
                tracing::info!("the leader's barrier applied: its duties resume");
                return;
            }
            Err(e) => {
                tracing::warn!("the leader's barrier write failed, retrying: {e}");
                tokio::time::sleep(BARRIER_RETRY).await;
            }
        }
    }
}
