//! The server: the state store and the actors that move evaluations, started
//! and stopped in dependency order.
//!
//! A single server is always the leader, so the leader-only actors (broker,
//! blocked evaluations, plan queue) are enabled at start, after the store
//! has been opened and before the router restores pending work into them.
//! A server of a cluster may start as a follower instead, with every
//! leader duty off; [`Server::duties`] switches them as leadership moves.
//! Shutdown runs the other way: stop taking work, then close the store so
//! every acknowledged write is flushed.

use crate::blocked_evals::{self, BlockedEvals, BlockedEvalsConfig};
use crate::broker::{self, BrokerConfig, EvalBroker};
use crate::cluster_member;
use crate::deployment_watcher::{DeploymentWatcher, StopWatcher};
use crate::eval_router::{EvalRouter, StopRouting};
use crate::eval_writer::EvalWriter;
use crate::gc::{GarbageCollector, GcConfig, StopGc};
use crate::leader_duties::{LeaderActors, LeaderDuties};
use crate::leader_link::{LeaderLink, LeaderQueues};
use crate::node_drainer::{NodeDrainer, StopDrainer};
use crate::node_lifecycle::LifecycleConfig;
use crate::node_shares::NodeShares;
use crate::node_tracker::{NodeTracker, TrackerConfig};
use crate::periodic::{self, PeriodicLauncher, StopLauncher};
use crate::plan_applier::{self, InFlightView, PlanApplier};
use crate::ready_queue::EvalCost;
pub use crate::server_handle::{ServerError, ServerHandle};
use crate::server_metrics::{ServerMetrics, StopMetrics};
use crate::worker::{CoreSchedulers, WorkerDeps, WorkerTiming};
use crate::worker_supervisor::{self, WorkerPoolConfig, WorkerSupervisor};
use actix::prelude::*;
use herder::state::{StateStore, StoreOptions};
use herder::structs::JobType;
use herder_common::config::AgentConfig;
use herder_common::nomad_metrics::Board;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A running server.
pub struct Server {
    handle: ServerHandle,
    router: Addr<EvalRouter>,
    drainer: Addr<NodeDrainer>,
    deployments: Addr<DeploymentWatcher>,
    metrics: Addr<ServerMetrics>,
    /// A cluster member's RPC port.
    rpc: Option<actix_web::dev::ServerHandle>,
}

/// The node lifecycle's timings from the agent configuration.
pub fn tracker_config(config: &AgentConfig) -> TrackerConfig {
    let s = &config.server;
    TrackerConfig {
        lifecycle: LifecycleConfig {
            min_heartbeat_ttl: s.min_heartbeat_ttl,
            max_heartbeats_per_second: s.max_heartbeats_per_second,
            heartbeat_grace: s.heartbeat_grace,
            failover_heartbeat_ttl: s.failover_heartbeat_ttl,
            max_lost_duration: s.max_lost_duration,
            max_flaky_duration: s.max_flaky_duration,
            readiness_checks: true,
        },
        ..TrackerConfig::default()
    }
}

/// The garbage collector's thresholds from the agent configuration.
pub fn gc_config(config: &AgentConfig) -> GcConfig {
    GcConfig {
        eval_gc_threshold: config.server.eval_gc_threshold,
        job_gc_threshold: config.server.job_gc_threshold,
        node_gc_threshold: config.server.node_gc_threshold,
        deployment_gc_threshold: config.server.deployment_gc_threshold,
        acl_token_gc_threshold: config.server.acl_token_gc_threshold,
        gc_interval: config.server.gc_interval,
        ..GcConfig::default()
    }
}

/// The broker's timings from the agent configuration.
pub fn broker_config(config: &AgentConfig) -> BrokerConfig {
    BrokerConfig {
        nack_timeout: config.server.eval_nack_timeout,
        delivery_limit: config.server.eval_delivery_limit,
        initial_nack_delay: config.server.eval_nack_initial_reenqueue_delay,
        subsequent_nack_delay: config.server.eval_nack_subsequent_reenqueue_delay,
        ..BrokerConfig::default()
    }
}

impl Server {
    /// Opens the state under `data_dir/server` and starts the actors as
    /// the leader (a single server always leads). Must run inside an actix
    /// system.
    pub async fn start(config: &AgentConfig, data_dir: &Path) -> Result<Server, ServerError> {
        Server::start_as(config, data_dir, true).await
    }

    /// As [`start`](Self::start), leading or, with `leader` false, as a
    /// follower: every leader duty off until [`Server::duties`] gains them.
    pub async fn start_as(
        config: &AgentConfig,
        data_dir: &Path,
        leader: bool,
    ) -> Result<Server, ServerError> {
        // Checked before anything starts: an actor started and then
        // dropped with a half-built server panics in actix's teardown.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let pool = WorkerPoolConfig::validate(
            config.effective_num_schedulers() as i64,
            &config.server.enabled_schedulers,
            cpus,
        )?;
        let path = data_dir.join("server");
        let store = open_store(path).await?;
        // A cluster member's writes go through the log from here on, so the
        // replica starts before any actor can write; it leads only once
        // elected.
        let replica = if cluster_member::is_member(config, data_dir) {
            Some(cluster_member::start_replica(config, data_dir, &store).await?)
        } else {
            None
        };
        let leader = leader && replica.is_none();
        let cluster = replica.as_ref().map(|r| r.cluster.clone());
        let (queues, in_flight_view) = start_queues(config, &store, leader).await;
        let router = EvalRouter::new(store.clone(), queues.broker.clone(), queues.blocked.clone())
            .with_leadership(leader)
            .start();
        let nodes = NodeTracker::new(store.clone(), tracker_config(config))
            .with_leadership(leader)
            .start();
        let link = LeaderLink::new(queues.clone(), cluster.clone());
        let workers = start_workers(config, cpus, pool, &store, link, in_flight_view)?;
        // Nomad's leader pauses three quarters of its workers to leave CPU
        // to the plan applier, which is right when followers schedule too.
        // A single server is the whole cluster: pausing would leave one
        // worker for everything (placements 1.36x slower in
        // docs/PERFORMANCE.md, "Workers on a single server"), so the
        // supervisor's `SetLeader` waits for the day there are followers.
        let (drainer, periodic, gc) = start_timed_duties(&store, config, leader);
        let deployments = DeploymentWatcher::new(store.clone(), periodic::system_clock())
            .with_leadership(leader)
            .start();
        let duties = LeaderDuties::new(
            LeaderActors {
                plan_applier: queues.plan_applier.clone(),
                broker: queues.broker.clone(),
                blocked: queues.blocked.clone(),
                router: router.clone(),
                nodes: nodes.clone(),
                periodic: periodic.clone(),
                drainer: drainer.clone(),
                deployments: deployments.clone(),
                gc: gc.clone(),
            },
            leader,
        );
        let nomad_metrics = Board::new();
        let metrics = start_metrics(&store, &queues, &nomad_metrics);
        tracing::info!(index = store.latest_index(), leader, "server started");
        let handle = ServerHandle {
            store,
            broker: queues.broker,
            blocked: queues.blocked,
            plan_applier: queues.plan_applier,
            nodes,
            workers,
            periodic,
            gc,
            duties,
            job_limits: config.limits.job_limits(),
            nomad_metrics,
            cluster,
            started_at: std::time::SystemTime::now(),
        };
        let rpc = match replica {
            Some(replica) => Some(cluster_member::serve(replica, &handle)?),
            None => None,
        };
        Ok(Server {
            handle,
            router,
            drainer,
            deployments,
            metrics,
            rpc,
        })
    }

    pub fn handle(&self) -> &ServerHandle {
        &self.handle
    }

    /// Switches this server's leader duties as leadership moves.
    pub fn duties(&self) -> LeaderDuties {
        self.handle.duties.clone()
    }

    /// Stops routing and scheduling, then flushes and closes the store.
    /// The first step of a stop, taken before the agent's HTTP server
    /// drains its requests: a cluster member stops waiting for leaders, so
    /// requests forwarded to one end at once instead of holding the drain.
    pub fn begin_stop(&self) {
        if let Some(cluster) = &self.handle.cluster {
            cluster.begin_shutdown();
        }
    }

    pub async fn stop(self) {
        let h = self.handle;
        let started = std::time::Instant::now();
        if let Some(rpc) = &self.rpc {
            rpc.stop(true).await;
            tracing::debug!(took = ?started.elapsed(), "RPC port stopped");
        }
        if let Some(cluster) = &h.cluster {
            // Ends the replica (and with it the leadership follower, which
            // stops the leader's duties) before the store closes.
            cluster.shutdown().await;
            tracing::debug!(took = ?started.elapsed(), "replica stopped");
        }
        let _ = self.router.send(StopRouting).await;
        let _ = self.drainer.send(StopDrainer).await;
        let _ = self.deployments.send(StopWatcher).await;
        self.metrics.do_send(StopMetrics);
        let _ = h.periodic.send(StopLauncher).await;
        let _ = h.gc.send(StopGc).await;
        // Workers finish (and ack) the evaluations in hand first.
        let _ = h.workers.send(worker_supervisor::StopAll).await;
        tracing::debug!(took = ?started.elapsed(), "workers stopped");
        let _ = h.plan_applier.send(plan_applier::SetEnabled(false)).await;
        let _ = h.broker.send(broker::SetEnabled(false)).await;
        let _ = h.blocked.send(broker::SetEnabled(false)).await;
        tracing::debug!(took = ?started.elapsed(), "queues disabled");
        let store = h.store.clone();
        if tokio::task::spawn_blocking(move || store.close())
            .await
            .is_err()
        {
            tracing::error!("closing the state store panicked");
        }
        tracing::info!("server stopped");
    }
}

/// The evaluation queues (broker with blocked evals, persisting through
/// the eval writer) and the plan queue, each taking work only if this
/// server leads; and the plan applier's view of the plan being written.
async fn start_queues(
    config: &AgentConfig,
    store: &StateStore,
    leader: bool,
) -> (LeaderQueues, InFlightView) {
    let writer = EvalWriter::new(store.clone()).start();
    let (broker, blocked) = blocked_evals::start_with_blocked_evals(
        broker_config(config),
        BlockedEvalsConfig::default(),
        writer.recipient(),
        eval_cost(store),
    );
    let plan_applier = PlanApplier::new(store.clone(), Some(broker.clone().recipient()));
    let in_flight_view = plan_applier.in_flight_view();
    let plan_applier = plan_applier.start();
    lead_queues(leader, &broker, &blocked, &plan_applier).await;
    let queues = LeaderQueues {
        broker,
        blocked,
        plan_applier,
    };
    (queues, in_flight_view)
}

/// An evaluation's expected scheduling work, for the broker's fair share
/// among jobs (`ready_queue`): its job's allocation count in the newest
/// state. Every system or sysbatch job places one allocation per eligible
/// node, the same work for each, so they cost alike; an evaluation whose
/// job is gone (a purge) has next to nothing to do.
fn eval_cost(store: &StateStore) -> EvalCost {
    let store = store.clone();
    EvalCost::new(move |eval| {
        let snapshot = store.snapshot();
        let Some(job) = snapshot.job(&eval.namespace, &eval.job_id) else {
            return 1;
        };
        match job.job_type {
            JobType::Service | JobType::Batch => job
                .task_groups
                .iter()
                .map(|group| u64::try_from(group.count).unwrap_or(0))
                .fold(0u64, u64::saturating_add),
            _ => 1,
        }
    })
}

/// This server's scheduling workers, reaching the leader's queues through
/// `link`.
fn start_workers(
    config: &AgentConfig,
    cpus: usize,
    pool: WorkerPoolConfig,
    store: &StateStore,
    link: LeaderLink,
    in_flight_view: InFlightView,
) -> Result<Addr<WorkerSupervisor>, ServerError> {
    let deps = WorkerDeps {
        store: store.clone(),
        link,
        in_flight_view,
        schedulers: Arc::new(CoreSchedulers),
        timing: WorkerTiming::default(),
        node_shares: NodeShares::default(),
    };
    let server_id = format!("{}.{}", config.name_or_hostname(), config.region);
    Ok(WorkerSupervisor::new(server_id, cpus, deps, pool)?.start())
}

/// The queue depths and Nomad's job figures, published once a second.
fn start_metrics(
    store: &StateStore,
    queues: &LeaderQueues,
    nomad_metrics: &Board,
) -> Addr<ServerMetrics> {
    ServerMetrics::new(
        store.clone(),
        queues.broker.clone(),
        queues.blocked.clone(),
        queues.plan_applier.clone(),
        nomad_metrics.clone(),
        std::time::Duration::from_secs(1),
    )
    .start()
}

/// The leader-only queues take work only on the leader: the broker and
/// blocked evals start disabled, the plan queue enabled.
async fn lead_queues(
    leader: bool,
    broker: &Addr<EvalBroker>,
    blocked: &Addr<BlockedEvals>,
    plan_applier: &Addr<PlanApplier>,
) {
    if leader {
        let _ = broker.send(broker::SetEnabled(true)).await;
        let _ = blocked.send(broker::SetEnabled(true)).await;
    } else {
        let _ = plan_applier.send(plan_applier::SetEnabled(false)).await;
    }
}

/// The leader duties that run on timers: moving work off draining nodes,
/// cron launches of periodic jobs, garbage collection.
fn start_timed_duties(
    store: &StateStore,
    config: &AgentConfig,
    leader: bool,
) -> (
    Addr<NodeDrainer>,
    Addr<PeriodicLauncher>,
    Addr<GarbageCollector>,
) {
    let drainer = NodeDrainer::new(store.clone(), periodic::system_clock())
        .with_leadership(leader)
        .start();
    let periodic = PeriodicLauncher::new(store.clone(), periodic::system_clock())
        .with_leadership(leader)
        .start();
    let gc = GarbageCollector::new(store.clone(), periodic::system_clock(), gc_config(config))
        .with_leadership(leader)
        .start();
    (drainer, periodic, gc)
}

/// Opening reads the whole state into memory: off the async executor.
async fn open_store(path: PathBuf) -> Result<StateStore, ServerError> {
    std::fs::create_dir_all(&path).map_err(|source| ServerError::DataDir {
        path: path.clone(),
        source,
    })?;
    let p = path.clone();
    tokio::task::spawn_blocking(move || StateStore::open(&p, StoreOptions::default()))
        .await
        .map_err(|_| ServerError::OpenInterrupted { path: path.clone() })?
        .map_err(|error| ServerError::Store { path, error })
}
