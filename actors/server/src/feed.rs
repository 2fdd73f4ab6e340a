//! Following the state store's change feed: how the server's actors
//! (EvalRouter, PeriodicLauncher, NodeDrainer) learn of every applied
//! command, as Nomad's FSM hands changes to the leader's subsystems.
//!
//! The rules are the same for every follower, so they live here once:
//! subscribe after the last index handled; when the feed's buffer no
//! longer reaches back that far, rebuild from a snapshot first; replay the
//! backlog, then take the live stream; when the stream ends, stop if the
//! actor or the store is closing, otherwise the actor fell too far behind
//! and was dropped, so follow again.

use actix::{Actor, ActorContext, AsyncContext, Context, StreamHandler};
use herder::state::{AppliedChanges, StateSnapshot, StateStore};
use std::sync::Arc;

pub trait FeedFollower:
    Actor<Context = Context<Self>> + StreamHandler<Arc<AppliedChanges>>
{
    /// For logs.
    const NAME: &'static str;

    fn store(&self) -> &StateStore;

    /// The index of the last change handled.
    fn last_index(&self) -> u64;

    /// Whether the actor was told to stop.
    fn stop_requested(&self) -> bool;

    /// Rebuilds the actor's view from a whole state (start, or after
    /// falling behind the feed); sets the last index to the snapshot's.
    fn resync(&mut self, ctx: &mut Context<Self>, snap: &StateSnapshot);

    /// Handles one applied command; changes at or below the last index
    /// are ignored.
    fn on_changes(&mut self, ctx: &mut Context<Self>, changes: &AppliedChanges);

    /// Subscribes to the changes after the last index, rebuilding first
    /// when the feed no longer holds them.
    fn follow(&mut self, ctx: &mut Context<Self>) {
        let mut sub = self.store().subscribe(self.last_index() + 1);
        if sub.missed {
            let snap = self.store().snapshot();
            self.resync(ctx, &snap);
            sub = self.store().subscribe(self.last_index() + 1);
        }
        for changes in sub.backlog {
            self.on_changes(ctx, &changes);
        }
        ctx.add_stream(sub.receiver);
    }

    /// What `StreamHandler::finished` does: stops with a closing store or
    /// a stopping actor; otherwise follows again and answers true.
    fn feed_ended(&mut self, ctx: &mut Context<Self>) -> bool {
        if self.stop_requested() || self.store().is_closed() {
            ctx.stop();
            return false;
        }
        tracing::warn!(
            index = self.last_index(),
            "{} fell behind the change feed; resubscribing",
            Self::NAME
        );
        self.follow(ctx);
        true
    }
}
