//! The ServerMetrics actor: publishes the depths of the server's queues as
//! gauges once a second (broker ready / unacked / delayed / failed, per
//! scheduler too; blocked evaluations; plan queue; state index), so the
//! `/v1/metrics` endpoint and a Prometheus scrape see them without asking
//! each actor.
//!
//! It is also the server's publisher of the figures only Nomad's names
//! carry (see `herder_common::nomad_metrics`): every task group's job summary
//! (`nomad.nomad.job_summary.*`) and the count of jobs by status
//! (`nomad.nomad.job_status.*`), as Nomad's leader publishes them. They are
//! computed from a snapshot on the blocking pool, at most once a second and
//! only when the jobs or their summaries changed, so a cluster of thousands
//! of jobs costs one pass over the summaries a second and no write pays
//! for them.

use crate::blocked_evals::{BlockedEvals, BlockedStats, GetBlockedStats};
use crate::broker::{BrokerStats, EvalBroker, Stats};
use crate::plan_applier::{GetStats, PlanApplier, PlanQueueStats};
use actix::prelude::*;
use herder::state::{StateSnapshot, StateStore, Table};
use herder::structs::job::job_status;
use herder_common::nomad_metrics::{child_job_labels, Board, Family, Kind, Section};
use std::collections::BTreeSet;
use std::time::Duration;

pub struct ServerMetrics {
    store: StateStore,
    broker: Addr<EvalBroker>,
    blocked: Addr<BlockedEvals>,
    plan_applier: Addr<PlanApplier>,
    board: Board,
    interval: Duration,
    /// Every scheduler the broker has reported: one it no longer lists
    /// has nothing ready or unacked, and its gauges must say 0.
    schedulers: BTreeSet<String>,
    /// The (jobs, job summaries) table indexes the published job figures
    /// were computed at.
    jobs_published: Option<(u64, u64)>,
    /// A computation of the job figures is running.
    publishing_jobs: bool,
}

impl ServerMetrics {
    pub fn new(
        store: StateStore,
        broker: Addr<EvalBroker>,
        blocked: Addr<BlockedEvals>,
        plan_applier: Addr<PlanApplier>,
        board: Board,
        interval: Duration,
    ) -> Self {
        ServerMetrics {
            store,
            broker,
            blocked,
            plan_applier,
            board,
            interval,
            schedulers: BTreeSet::new(),
            jobs_published: None,
            publishing_jobs: false,
        }
    }

    fn publish(&mut self, ctx: &mut Context<Self>) {
        let (broker, blocked, plans) = (
            self.broker.send(Stats),
            self.blocked.send(GetBlockedStats),
            self.plan_applier.send(GetStats),
        );
        metrics::gauge!("herder.state.index").set(self.store.latest_index() as f64);
        let asked = async move { (broker.await.ok(), blocked.await.ok(), plans.await.ok()) };
        ctx.spawn(
            fut::wrap_future::<_, Self>(asked).map(|(broker, blocked, plans), act, _| {
                if let Some(s) = broker {
                    act.record_broker(s);
                }
                if let Some(s) = blocked {
                    record_blocked(&s);
                }
                if let Some(s) = plans {
                    record_plans(&s);
                }
            }),
        );
        self.publish_jobs(ctx);
    }

    fn record_broker(&mut self, s: BrokerStats) {
        metrics::gauge!("herder.broker.total_ready").set(s.total_ready as f64);
        metrics::gauge!("herder.broker.total_unacked").set(s.total_unacked as f64);
        metrics::gauge!("herder.broker.total_pending").set(s.total_blocked as f64);
        metrics::gauge!("herder.broker.total_delayed").set(s.total_delayed as f64);
        metrics::gauge!("herder.broker.total_failed").set(s.total_failed as f64);
        self.schedulers
            .extend(s.by_scheduler.keys().map(|k| k.as_str().to_string()));
        for label in &self.schedulers {
            let st = s
                .by_scheduler
                .iter()
                .find(|(k, _)| k.as_str() == label)
                .map(|(_, st)| st.clone())
                .unwrap_or_default();
            metrics::gauge!("herder.broker.ready", "scheduler" => label.clone())
                .set(st.ready as f64);
            metrics::gauge!("herder.broker.unacked", "scheduler" => label.clone())
                .set(st.unacked as f64);
        }
    }

    /// Recomputes the job figures when the jobs or their summaries changed
    /// since the last time, off the actor's thread.
    fn publish_jobs(&mut self, ctx: &mut Context<Self>) {
        if self.publishing_jobs {
            return;
        }
        let snap = self.store.snapshot();
        let at = (
            snap.table_index(Table::Jobs),
            snap.table_index(Table::JobSummaries),
        );
        if self.jobs_published == Some(at) {
            return;
        }
        self.publishing_jobs = true;
        let board = self.board.clone();
        let work = tokio::task::spawn_blocking(move || {
            board.publish(Section::Server, job_families(&snap));
        });
        ctx.spawn(fut::wrap_future::<_, Self>(work).map(move |done, act, _| {
            act.publishing_jobs = false;
            match done {
                Ok(()) => act.jobs_published = Some(at),
                Err(e) => tracing::warn!(error = %e, "computing the job metrics failed"),
            }
        }));
    }
}

fn record_blocked(s: &BlockedStats) {
    metrics::gauge!("herder.blocked_evals.total_blocked").set(s.total_blocked as f64);
    metrics::gauge!("herder.blocked_evals.total_escaped").set(s.total_escaped as f64);
    metrics::gauge!("herder.blocked_evals.total_cancelable").set(s.total_cancelable as f64);
}

fn record_plans(s: &PlanQueueStats) {
    metrics::gauge!("herder.plan.queue_depth").set(s.depth as f64);
    metrics::gauge!("herder.plan.applied").set(s.applied as f64);
    metrics::gauge!("herder.plan.partial").set(s.partial as f64);
    metrics::gauge!("herder.plan.rejected_nodes").set(s.rejected_nodes as f64);
    metrics::gauge!("herder.plan.refused_placements").set(s.refused_placements as f64);
}

/// Nomad's leader figures from a snapshot: for every task group of every
/// job, its summary counts (labels `job`, `task_group`, `namespace`, and
/// `parent_id` with `dispatch_id` / `periodic_id` for a child job), then
/// the number of jobs pending, running and dead.
pub fn job_families(snap: &StateSnapshot) -> Vec<Family> {
    let mut summary = [
        "nomad.nomad.job_summary.queued",
        "nomad.nomad.job_summary.complete",
        "nomad.nomad.job_summary.failed",
        "nomad.nomad.job_summary.running",
        "nomad.nomad.job_summary.starting",
        "nomad.nomad.job_summary.lost",
    ]
    .map(|name| Family::new(name, Kind::Gauge));
    for job in snap.job_summaries() {
        for (group, tg) in &job.summary {
            let mut labels = vec![
                ("job", job.job_id.clone()),
                ("task_group", group.clone()),
                ("namespace", job.namespace.clone()),
            ];
            child_job_labels(&job.job_id, &mut labels);
            let labels: herder_common::nomad_metrics::Labels = labels.into();
            let counts = [
                tg.queued,
                tg.complete,
                tg.failed,
                tg.running,
                tg.starting,
                tg.lost,
            ];
            for (family, count) in summary.iter_mut().zip(counts) {
                family.push(labels.clone(), count as f64);
            }
        }
    }
    let (mut pending, mut running, mut dead) = (0u64, 0u64, 0u64);
    for job in snap.jobs() {
        match job.status.as_str() {
            job_status::PENDING => pending += 1,
            job_status::RUNNING => running += 1,
            job_status::DEAD => dead += 1,
            _ => {}
        }
    }
    let mut families = Vec::from(summary);
    for (name, count) in [
        ("nomad.nomad.job_status.pending", pending),
        ("nomad.nomad.job_status.running", running),
        ("nomad.nomad.job_status.dead", dead),
    ] {
        let mut family = Family::new(name, Kind::Gauge);
        family.push(Vec::new(), count as f64);
        families.push(family);
    }
    families
}

impl Actor for ServerMetrics {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.interval, |act, ctx| act.publish(ctx));
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.board.clear(Section::Server);
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

#[cfg(test)]
mod tests {
    use super::*;
    use herder::state::fixtures;
    use herder::state::Command;
    use std::sync::Arc;

    #[test]
    fn every_task_group_of_every_job_is_summarised() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = StateStore::open(dir.path(), Default::default()).expect("store");
        for (id, groups) in [
            ("web", vec![("a", 2), ("b", 1)]),
            ("batch/periodic-17", vec![("c", 1)]),
        ] {
            let mut job = fixtures::job("default", id, &groups);
            job.canonicalize();
            store
                .apply(Command::JobRegister {
                    job: Arc::new(job),
                    eval: None,
                    enforce_index: None,
                })
                .expect("register");
        }
        let families = job_families(&store.snapshot());
        let queued = families
            .iter()
            .find(|f| f.name == "nomad.nomad.job_summary.queued")
            .expect("queued");
        assert_eq!(queued.samples.len(), 3);
        let child = queued
            .samples
            .iter()
            .find(|s| s.labels.contains(&("task_group", "c".to_string())))
            .expect("child job's group");
        assert!(child.labels.contains(&("parent_id", "batch".to_string())));
        assert!(child.labels.contains(&("periodic_id", "17".to_string())));
        let pending = families
            .iter()
            .find(|f| f.name == "nomad.nomad.job_status.pending")
            .expect("pending");
        let total: f64 = ["pending", "running", "dead"]
            .iter()
            .filter_map(|s| {
                families
                    .iter()
                    .find(|f| f.name == format!("nomad.nomad.job_status.{s}"))
            })
            .map(|f| f.samples[0].value)
            .sum();
        assert_eq!(total, 2.0);
        assert!(pending.samples[0].labels.is_empty());
    }
}
