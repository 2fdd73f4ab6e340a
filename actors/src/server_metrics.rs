//! The ServerMetrics actor: publishes the depths of the server's queues as
//! gauges once a second (broker ready / unacked / delayed / failed, per
//! scheduler too; blocked evaluations; plan queue; state index), so the
//! `/v1/metrics` endpoint and a Prometheus scrape see them without asking
//! each actor.

use crate::blocked_evals::{BlockedEvals, GetBlockedStats};
use crate::broker::{EvalBroker, Stats};
use crate::plan_applier::{GetStats, PlanApplier};
use actix::prelude::*;
use herder::state::StateStore;
use std::time::Duration;

pub struct ServerMetrics {
    pub store: StateStore,
    pub broker: Addr<EvalBroker>,
    pub blocked: Addr<BlockedEvals>,
    pub plan_applier: Addr<PlanApplier>,
    pub interval: Duration,
}

impl ServerMetrics {
    fn publish(&self, ctx: &mut Context<Self>) {
        let (broker, blocked, plans) = (
            self.broker.send(Stats),
            self.blocked.send(GetBlockedStats),
            self.plan_applier.send(GetStats),
        );
        metrics::gauge!("herder.state.index").set(self.store.latest_index() as f64);
        ctx.spawn(fut::wrap_future(async move {
            if let Ok(s) = broker.await {
                metrics::gauge!("herder.broker.total_ready").set(s.total_ready as f64);
                metrics::gauge!("herder.broker.total_unacked").set(s.total_unacked as f64);
                metrics::gauge!("herder.broker.total_pending").set(s.total_blocked as f64);
                metrics::gauge!("herder.broker.total_delayed").set(s.total_delayed as f64);
                metrics::gauge!("herder.broker.total_failed").set(s.total_failed as f64);
                for (scheduler, st) in s.by_scheduler {
                    let label = scheduler.as_str().to_string();
                    metrics::gauge!("herder.broker.ready", "scheduler" => label.clone())
                        .set(st.ready as f64);
                    metrics::gauge!("herder.broker.unacked", "scheduler" => label)
                        .set(st.unacked as f64);
                }
            }
            if let Ok(s) = blocked.await {
                metrics::gauge!("herder.blocked_evals.total_blocked").set(s.total_blocked as f64);
                metrics::gauge!("herder.blocked_evals.total_escaped").set(s.total_escaped as f64);
                metrics::gauge!("herder.blocked_evals.total_cancelable")
                    .set(s.total_cancelable as f64);
            }
            if let Ok(s) = plans.await {
                metrics::gauge!("herder.plan.queue_depth").set(s.depth as f64);
                metrics::gauge!("herder.plan.applied").set(s.applied as f64);
                metrics::gauge!("herder.plan.partial").set(s.partial as f64);
                metrics::gauge!("herder.plan.rejected_nodes").set(s.rejected_nodes as f64);
                metrics::gauge!("herder.plan.refused_placements").set(s.refused_placements as f64);
            }
        }));
    }
}

impl Actor for ServerMetrics {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.interval, |act, ctx| act.publish(ctx));
    }
}

/// Stops publishing (server shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopMetrics;

impl Handler<StopMetrics> for ServerMetrics {
    type Result = ();

    fn handle(&mut self, _msg: StopMetrics, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
