//! The WorkerSupervisor: owns the server's scheduling workers and changes
//! how many run, and for which scheduler types, while the server runs
//! (Nomad's `/v1/agent/schedulers/config`).
//!
//! Changing only the number keeps the running workers: new ones are
//! started, or the newest are stopped. Changing the scheduler types
//! replaces every worker, since a worker's types are fixed for its life.
//! Either way a stopped worker first finishes (and acks) the evaluation in
//! hand, so no evaluation is lost to a resize.
//!
//! On the leader, 3/4 of the workers are paused to leave CPU to the plan
//! applier and the other leader duties ([`SetLeader`]).

use crate::worker::{
    Pause, Resume, SharedInfo, Stop, Worker, WorkerDeps, WorkerInfo, WorkerStatus,
};
use actix::prelude::*;
use herder::structs::JobType;
use serde::Serialize;

/// Why a worker configuration was refused. The agent API answers 400.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WorkerConfigError {
    #[error("num_schedulers must be between 0 and the number of CPUs ({cpus}), got {requested}")]
    NumSchedulers { requested: i64, cpus: usize },
    #[error("unknown scheduler {0:?} (known: service, batch, system, sysbatch, _core)")]
    UnknownScheduler(String),
    #[error("enabled_schedulers must include \"_core\"")]
    CoreNotEnabled,
}

/// How many workers run and which scheduler types they serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerPoolConfig {
    pub num_schedulers: usize,
    pub enabled_schedulers: Vec<JobType>,
}

impl WorkerPoolConfig {
    /// Checks a requested configuration as Nomad does: 0 <= n <= CPUs,
    /// known scheduler names only (duplicates dropped), `_core` included.
    pub fn validate(
        num_schedulers: i64,
        enabled_schedulers: &[String],
        cpus: usize,
    ) -> Result<WorkerPoolConfig, WorkerConfigError> {
        let num = usize::try_from(num_schedulers)
            .ok()
            .filter(|n| *n <= cpus)
            .ok_or(WorkerConfigError::NumSchedulers {
                requested: num_schedulers,
                cpus,
            })?;
        let mut types = Vec::with_capacity(enabled_schedulers.len());
        for name in enabled_schedulers {
            match JobType::parse(name) {
                JobType::Unknown(unknown) => {
                    return Err(WorkerConfigError::UnknownScheduler(unknown))
                }
                known if !types.contains(&known) => types.push(known),
                _ => {}
            }
        }
        if !types.contains(&JobType::Core) {
            return Err(WorkerConfigError::CoreNotEnabled);
        }
        Ok(WorkerPoolConfig {
            num_schedulers: num,
            enabled_schedulers: types,
        })
    }
}

/// The worker configuration as the agent API reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkerConfigInfo {
    pub server_id: String,
    pub num_schedulers: usize,
    pub enabled_schedulers: Vec<String>,
}

/// Every worker's info, as `/v1/agent/schedulers` reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkersInfo {
    pub server_id: String,
    pub schedulers: Vec<WorkerInfo>,
}

/// Read every worker's info (never waits for a worker's loop).
#[derive(Message)]
#[rtype(result = "WorkersInfo")]
pub struct GetWorkers;

/// Read the configuration in effect.
#[derive(Message)]
#[rtype(result = "WorkerConfigInfo")]
pub struct GetConfig;

/// Change the configuration; refused whole (nothing changes) when invalid.
#[derive(Message)]
#[rtype(result = "Result<WorkerConfigInfo, WorkerConfigError>")]
pub struct SetConfig {
    pub num_schedulers: i64,
    pub enabled_schedulers: Vec<String>,
}

/// Leadership gained (pause 3/4 of the workers) or lost (resume them).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetLeader(pub bool);

/// Pause (`true`) or resume (`false`) every worker of this server, as an
/// operator or embedder asks; a paused worker finishes the evaluation in
/// hand and dequeues nothing more until resumed. Stays in force across
/// resizes and leadership changes.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetPaused(pub bool);

/// Stop every worker; answered once all have finished their evaluations.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopAll;

struct WorkerHandle {
    addr: Addr<Worker>,
    info: SharedInfo,
}

pub struct WorkerSupervisor {
    server_id: String,
    cpus: usize,
    deps: WorkerDeps,
    config: WorkerPoolConfig,
    workers: Vec<WorkerHandle>,
    /// Workers told to stop that may still be finishing an evaluation.
    retiring: Vec<WorkerHandle>,
    leader: bool,
    /// Paused by `SetPaused`: every worker, whatever the leadership says.
    paused: bool,
}

impl WorkerSupervisor {
    /// A supervisor for `config` (validated against `cpus`, the machine's
    /// CPU count, passed in so behaviour does not depend on the host).
    /// Workers start with the actor.
    pub fn new(
        server_id: String,
        cpus: usize,
        deps: WorkerDeps,
        config: WorkerPoolConfig,
    ) -> Result<WorkerSupervisor, WorkerConfigError> {
        if config.num_schedulers > cpus {
            return Err(WorkerConfigError::NumSchedulers {
                requested: i64::try_from(config.num_schedulers).unwrap_or(i64::MAX),
                cpus,
            });
        }
        if !config.enabled_schedulers.contains(&JobType::Core) {
            return Err(WorkerConfigError::CoreNotEnabled);
        }
        Ok(WorkerSupervisor {
            server_id,
            cpus,
            deps,
            config,
            workers: Vec::new(),
            retiring: Vec::new(),
            leader: false,
            paused: false,
        })
    }

    fn spawn_worker(&mut self) {
        let worker = Worker::new(self.deps.clone(), self.config.enabled_schedulers.clone());
        let info = worker.info();
        let addr = worker.start();
        self.workers.push(WorkerHandle { addr, info });
    }

    fn retire(&mut self, handle: WorkerHandle) {
        handle.addr.do_send(Stop);
        self.retiring.push(handle);
    }

    /// Brings the running workers to the configuration.
    fn reconcile(&mut self) {
        self.retiring
            .retain(|w| w.info.status() != WorkerStatus::Stopped);
        let stale: Vec<usize> = self
            .workers
            .iter()
            .enumerate()
            .filter(|(_, w)| w.info.get().enabled_schedulers != self.config.enabled_schedulers)
            .map(|(i, _)| i)
            .collect();
        for i in stale.into_iter().rev() {
            let handle = self.workers.remove(i);
            self.retire(handle);
        }
        while self.workers.len() > self.config.num_schedulers {
            if let Some(handle) = self.workers.pop() {
                self.retire(handle);
            }
        }
        while self.workers.len() < self.config.num_schedulers {
            self.spawn_worker();
        }
        self.apply_leader_pause();
        tracing::info!(
            workers = self.workers.len(),
            retiring = self.retiring.len(),
            "scheduling workers reconfigured"
        );
    }

    /// Every worker is paused when the pool is (`SetPaused`); otherwise, on
    /// the leader, the first 3/4 of the workers are.
    fn apply_leader_pause(&self) {
        let paused = if self.paused {
            self.workers.len()
        } else if self.leader {
            self.workers.len() * 3 / 4
        } else {
            0
        };
        for (i, worker) in self.workers.iter().enumerate() {
            if i < paused {
                worker.addr.do_send(Pause);
            } else {
                worker.addr.do_send(Resume);
            }
        }
    }

    fn config_info(&self) -> WorkerConfigInfo {
        WorkerConfigInfo {
            server_id: self.server_id.clone(),
            num_schedulers: self.config.num_schedulers,
            enabled_schedulers: self
                .config
                .enabled_schedulers
                .iter()
                .map(|t| t.as_str().to_string())
                .collect(),
        }
    }
}

impl Actor for WorkerSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Context<Self>) {
        self.reconcile();
    }
}

impl Handler<GetWorkers> for WorkerSupervisor {
    type Result = MessageResult<GetWorkers>;

    fn handle(&mut self, _msg: GetWorkers, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(WorkersInfo {
            server_id: self.server_id.clone(),
            schedulers: self.workers.iter().map(|w| w.info.get()).collect(),
        })
    }
}

impl Handler<GetConfig> for WorkerSupervisor {
    type Result = MessageResult<GetConfig>;

    fn handle(&mut self, _msg: GetConfig, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.config_info())
    }
}

impl Handler<SetConfig> for WorkerSupervisor {
    type Result = Result<WorkerConfigInfo, WorkerConfigError>;

    fn handle(&mut self, msg: SetConfig, _ctx: &mut Context<Self>) -> Self::Result {
        let config =
            WorkerPoolConfig::validate(msg.num_schedulers, &msg.enabled_schedulers, self.cpus)?;
        self.config = config;
        self.reconcile();
        Ok(self.config_info())
    }
}

impl Handler<SetLeader> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, msg: SetLeader, _ctx: &mut Context<Self>) {
        self.leader = msg.0;
        self.apply_leader_pause();
    }
}

impl Handler<SetPaused> for WorkerSupervisor {
    type Result = ();

    fn handle(&mut self, msg: SetPaused, _ctx: &mut Context<Self>) {
        self.paused = msg.0;
        self.apply_leader_pause();
    }
}

impl Handler<StopAll> for WorkerSupervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _msg: StopAll, _ctx: &mut Context<Self>) -> Self::Result {
        self.config.num_schedulers = 0;
        let handles: Vec<WorkerHandle> = self.workers.drain(..).collect();
        for handle in handles {
            self.retire(handle);
        }
        let stops: Vec<_> = self.retiring.iter().map(|w| w.addr.send(Stop)).collect();
        Box::pin(async move {
            futures::future::join_all(stops).await;
        })
    }
}
