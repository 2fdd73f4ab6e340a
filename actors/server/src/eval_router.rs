//! The EvalRouter actor: the one path by which stored evaluations reach the
//! broker and BlockedEvals, and by which new capacity unblocks evaluations.
//!
//! It follows the state store's change feed, as Nomad's FSM does on the
//! leader: a pending evaluation that was written is enqueued, a blocked one
//! is tracked, a node that became usable or an allocation that stopped
//! unblocks the evaluations waiting for that node class. On start (and if
//! it ever falls behind the feed's buffer) it resynchronises from a full
//! snapshot; the broker and BlockedEvals ignore what they already hold, so
//! a resync never runs an evaluation twice. It also hands the scheduler
//! configuration's `PauseEvalBroker` to the broker whenever it changes.
//!
//! Routing is a leader duty ([`SetLeader`]): a follower keeps up with the
//! feed's index but routes nothing; on gaining the lead the router restores
//! from the state as it is then, so the evaluations the old leader had in
//! flight (still pending in the replicated state) are enqueued again.

use crate::blocked_evals::{Block, BlockedEvals, Unblock, UnblockNode};
use crate::broker::{Enqueue, EnqueueAll, EvalBroker, SetPaused};
use crate::feed::FeedFollower;
use actix::prelude::*;
use herder::state::{AppliedChanges, StateSnapshot, StateStore, Table};
use herder::structs::{EvalStatus, Evaluation};
use std::collections::BTreeSet;
use std::sync::Arc;

pub struct EvalRouter {
    store: StateStore,
    broker: Addr<EvalBroker>,
    blocked: Addr<BlockedEvals>,
    /// The last index routed.
    last_index: u64,
    stopping: bool,
    leader: bool,
}

/// Stop following the feed (server shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopRouting;

/// Leadership gained (`true`: restore every pending and blocked evaluation
/// from the current state, then route) or lost (`false`: route nothing).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetLeader(pub bool);

impl EvalRouter {
    pub fn new(store: StateStore, broker: Addr<EvalBroker>, blocked: Addr<BlockedEvals>) -> Self {
        EvalRouter {
            store,
            broker,
            blocked,
            last_index: 0,
            stopping: false,
            leader: true,
        }
    }

    /// Whether the router starts as the leader's (the default) or a
    /// follower's, which routes nothing until [`SetLeader`]`(true)`.
    pub fn with_leadership(mut self, leader: bool) -> Self {
        self.leader = leader;
        self
    }

    /// Hands every stored pending evaluation to the broker and every
    /// blocked one to BlockedEvals (leader restore).
    fn resync(&mut self, snap: &StateSnapshot) {
        self.last_index = snap.latest_index();
        if !self.leader {
            return;
        }
        let mut pending = Vec::new();
        let mut blocked = 0usize;
        for eval in snap.evals() {
            match eval.status {
                EvalStatus::Pending => pending.push((**eval).clone()),
                EvalStatus::Blocked => {
                    blocked += 1;
                    self.blocked.do_send(Block {
                        eval: (**eval).clone(),
                    })
                }
                _ => {}
            }
        }
        tracing::info!(
            pending = pending.len(),
            blocked,
            index = snap.latest_index(),
            "evaluations restored"
        );
        self.broker.do_send(EnqueueAll { evals: pending });
        self.pause_broker_as_configured(snap);
    }

    /// Pauses or resumes the broker's dequeues as `PauseEvalBroker` says
    /// (an operator's way to stop scheduling without losing evaluations:
    /// enqueues go on, workers wait).
    fn pause_broker_as_configured(&self, snap: &StateSnapshot) {
        let paused = snap.scheduler_config().pause_eval_broker;
        self.broker.do_send(SetPaused(paused));
    }

    fn route(&mut self, changes: &AppliedChanges) {
        if changes.index <= self.last_index {
            return;
        }
        self.last_index = changes.index;
        if !self.leader {
            return;
        }
        if changes.tables.contains(Table::SchedulerConfig) {
            self.pause_broker_as_configured(&self.store.snapshot());
        }
        for eval in changes.evals() {
            self.route_eval(eval);
        }
        self.unblock(changes);
    }

    fn route_eval(&self, eval: &Arc<Evaluation>) {
        match eval.status {
            EvalStatus::Pending => self.broker.do_send(Enqueue::new((**eval).clone())),
            EvalStatus::Blocked => self.blocked.do_send(Block {
                eval: (**eval).clone(),
            }),
            _ => {}
        }
    }

    /// New capacity: nodes that are (again) usable, and nodes where an
    /// allocation stopped, unblock the evaluations of their class.
    fn unblock(&self, changes: &AppliedChanges) {
        let mut classes = BTreeSet::new();
        for node in changes.nodes() {
            if node.is_schedulable() {
                classes.insert(node.computed_class.clone());
                self.blocked.do_send(UnblockNode { node_id: node.id });
            }
        }
        let stopped: Vec<_> = changes.allocs().filter(|a| a.is_terminal()).collect();
        if !stopped.is_empty() {
            let snap = self.store.snapshot();
            for alloc in stopped {
                if let Some(node) = snap.node(&alloc.node_id) {
                    classes.insert(node.computed_class.clone());
                }
            }
        }
        for computed_class in classes {
            self.blocked.do_send(Unblock {
                computed_class,
                index: changes.index,
            });
        }
    }
}

impl Actor for EvalRouter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.resync(&self.store.snapshot());
        self.follow(ctx);
    }
}

impl FeedFollower for EvalRouter {
    const NAME: &'static str = "the eval router";

    fn store(&self) -> &StateStore {
        &self.store
    }

    fn last_index(&self) -> u64 {
        self.last_index
    }

    fn stop_requested(&self) -> bool {
        self.stopping
    }

    fn resync(&mut self, _ctx: &mut Context<Self>, snap: &StateSnapshot) {
        EvalRouter::resync(self, snap);
    }

    fn on_changes(&mut self, _ctx: &mut Context<Self>, changes: &AppliedChanges) {
        self.route(changes);
    }
}

impl StreamHandler<Arc<AppliedChanges>> for EvalRouter {
    fn handle(&mut self, changes: Arc<AppliedChanges>, _ctx: &mut Context<Self>) {
        self.route(&changes);
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        self.feed_ended(ctx);
    }
}

impl Handler<StopRouting> for EvalRouter {
    type Result = ();

    fn handle(&mut self, _msg: StopRouting, ctx: &mut Context<Self>) {
        self.stopping = true;
        ctx.stop();
    }
}

impl Handler<SetLeader> for EvalRouter {
    type Result = ();

    fn handle(&mut self, msg: SetLeader, _ctx: &mut Context<Self>) {
        self.leader = msg.0;
        if msg.0 {
            // Every time: the broker and BlockedEvals were flushed when the
            // lead was lost, and what they ignore as already held is
            // harmless to send again.
            self.resync(&self.store.snapshot());
        } else {
            tracing::info!("evaluation routing stopped: not the leader");
        }
    }
}
