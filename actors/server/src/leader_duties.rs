//! The leader's duties, switched on and off as leadership moves.
//!
//! Only the leader runs the eval broker, blocked evaluations, the plan
//! queue, node heartbeat timers, the periodic launcher, the drainer, the
//! deployment watcher and the garbage collector; every server runs workers. When Raft elects this
//! server, [`LeaderDuties::gain`] starts the duties in dependency order:
//! the plan queue first (workers' plans land somewhere), then the broker
//! and blocked evaluations, then the router restores the pending and
//! blocked evaluations of the replicated state into them (what the old
//! leader had in flight is still pending there, so it is enqueued again),
//! then node heartbeat timers (fresh TTLs over the failover window), and
//! last the duties that write on their own: periodic launches, drains,
//! deployments, GC.
//! [`LeaderDuties::lose`] runs the same steps backwards, so nothing writes
//! or routes into a queue that is being flushed.
//!
//! Each step is one message answered by its actor once the switch is made,
//! bounded by a timeout: a stuck actor is logged and skipped rather than
//! hanging the leadership change (the message stays queued and takes
//! effect when the actor gets to it). Changes are serialised, and asking
//! for the state already reached does nothing.

use crate::blocked_evals::BlockedEvals;
use crate::broker::{self, EvalBroker};
use crate::deployment_watcher::{self, DeploymentWatcher};
use crate::eval_router::{self, EvalRouter};
use crate::gc::{self, GarbageCollector};
use crate::node_drainer::{self, NodeDrainer};
use crate::node_tracker::{self, NodeTracker};
use crate::periodic::{self, PeriodicLauncher};
use crate::plan_applier::{self, PlanApplier};
use actix::{Addr, MailboxError};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one step may take before it is logged and skipped.
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// The actors whose work only the leader does.
#[derive(Clone)]
pub struct LeaderActors {
    pub plan_applier: Addr<PlanApplier>,
    pub broker: Addr<EvalBroker>,
    pub blocked: Addr<BlockedEvals>,
    pub router: Addr<EvalRouter>,
    pub nodes: Addr<NodeTracker>,
    pub periodic: Addr<PeriodicLauncher>,
    pub drainer: Addr<NodeDrainer>,
    pub deployments: Addr<DeploymentWatcher>,
    pub gc: Addr<GarbageCollector>,
}

/// Switches the leader's duties on ([`gain`](Self::gain)) and off
/// ([`lose`](Self::lose)). Cheap to clone; clones share the state.
#[derive(Clone)]
pub struct LeaderDuties {
    actors: LeaderActors,
    step_timeout: Duration,
    /// Whether the duties run: `Some(leading)` once every step of the last
    /// change was made, `None` when one failed (the next change, in either
    /// direction, runs every step again). Held for a whole change, so a
    /// gain and a lose never interleave.
    leading: Arc<tokio::sync::Mutex<Option<bool>>>,
}

impl LeaderDuties {
    /// The duties of `actors`, which were started leading or not.
    pub fn new(actors: LeaderActors, leading: bool) -> LeaderDuties {
        LeaderDuties {
            actors,
            step_timeout: DEFAULT_STEP_TIMEOUT,
            leading: Arc::new(tokio::sync::Mutex::new(Some(leading))),
        }
    }

    pub fn with_step_timeout(mut self, step_timeout: Duration) -> LeaderDuties {
        self.step_timeout = step_timeout;
        self
    }

    /// Whether the duties run (`None`: the last change did not complete).
    pub async fn leading(&self) -> Option<bool> {
        *self.leading.lock().await
    }

    /// Leadership gained: start every duty, in dependency order.
    pub async fn gain(&self) {
        let mut leading = self.leading.lock().await;
        if *leading == Some(true) {
            tracing::debug!("leader duties already running");
            return;
        }
        tracing::info!("leadership gained: starting the leader's duties");
        let started = Instant::now();
        let a = &self.actors;
        let steps = [
            self.step(
                "plan queue enabled",
                a.plan_applier.send(plan_applier::SetEnabled(true)),
            )
            .await,
            self.step(
                "eval broker enabled",
                a.broker.send(broker::SetEnabled(true)),
            )
            .await,
            self.step(
                "blocked evals enabled",
                a.blocked.send(broker::SetEnabled(true)),
            )
            .await,
            self.step(
                "pending and blocked evals restored from the state",
                a.router.send(eval_router::SetLeader(true)),
            )
            .await,
            self.step(
                "node heartbeat timers restored with fresh TTLs",
                a.nodes.send(node_tracker::SetLeader(true)),
            )
            .await,
            self.step(
                "periodic launcher resumed",
                a.periodic.send(periodic::SetLeader(true)),
            )
            .await,
            self.step(
                "node drainer resumed",
                a.drainer.send(node_drainer::SetLeader(true)),
            )
            .await,
            self.step(
                "deployment watcher resumed",
                a.deployments.send(deployment_watcher::SetLeader(true)),
            )
            .await,
            self.step("garbage collector resumed", a.gc.send(gc::SetLeader(true)))
                .await,
        ];
        *leading = self.outcome(true, &steps, started);
    }

    /// Leadership lost: stop every duty, the reverse of [`gain`](Self::gain).
    /// Workers keep running; they find the broker disabled.
    pub async fn lose(&self) {
        let mut leading = self.leading.lock().await;
        if *leading == Some(false) {
            tracing::debug!("leader duties already stopped");
            return;
        }
        tracing::info!("leadership lost: stopping the leader's duties");
        let started = Instant::now();
        let a = &self.actors;
        let steps = [
            self.step("garbage collector stopped", a.gc.send(gc::SetLeader(false)))
                .await,
            self.step(
                "deployment watcher stopped",
                a.deployments.send(deployment_watcher::SetLeader(false)),
            )
            .await,
            self.step(
                "node drainer stopped",
                a.drainer.send(node_drainer::SetLeader(false)),
            )
            .await,
            self.step(
                "periodic launcher stopped",
                a.periodic.send(periodic::SetLeader(false)),
            )
            .await,
            self.step(
                "node heartbeat timers stopped",
                a.nodes.send(node_tracker::SetLeader(false)),
            )
            .await,
            self.step(
                "evaluation routing stopped",
                a.router.send(eval_router::SetLeader(false)),
            )
            .await,
            self.step(
                "blocked evals disabled and flushed",
                a.blocked.send(broker::SetEnabled(false)),
            )
            .await,
            self.step(
                "eval broker disabled and flushed",
                a.broker.send(broker::SetEnabled(false)),
            )
            .await,
            self.step(
                "plan queue disabled",
                a.plan_applier.send(plan_applier::SetEnabled(false)),
            )
            .await,
        ];
        *leading = self.outcome(false, &steps, started);
    }

    /// Runs one step within the step timeout; answers whether it was made.
    async fn step(
        &self,
        what: &'static str,
        sent: impl Future<Output = Result<(), MailboxError>>,
    ) -> bool {
        let started = Instant::now();
        match tokio::time::timeout(self.step_timeout, sent).await {
            Ok(Ok(())) => {
                tracing::info!(step = what, took = ?started.elapsed(), "leader duty switched");
                true
            }
            Ok(Err(e)) => {
                tracing::error!(step = what, error = %e, "leader duty step failed: the actor is gone");
                false
            }
            Err(_) => {
                tracing::error!(
                    step = what,
                    timeout = ?self.step_timeout,
                    "leader duty step timed out; going on without it"
                );
                false
            }
        }
    }

    fn outcome(&self, leading: bool, steps: &[bool], started: Instant) -> Option<bool> {
        let failed = steps.iter().filter(|ok| !**ok).count();
        if failed == 0 {
            tracing::info!(leading, took = ?started.elapsed(), "leader duties switched");
            return Some(leading);
        }
        tracing::error!(
            leading,
            failed,
            took = ?started.elapsed(),
            "leader duties switched with steps missing; the next change runs every step again"
        );
        None
    }
}
