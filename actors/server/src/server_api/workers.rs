//! This server's scheduling workers: how many run and which scheduler
//! types they serve, read and changed while the server runs (Nomad's
//! `/v1/agent/schedulers` and `/v1/agent/schedulers/config`).
//!
//! The pool belongs to this server process, not to the replicated state:
//! these calls never cross the write path to a leader. A resize keeps the
//! running workers and a stopped worker first finishes (and acks) the
//! evaluation in hand (see `worker_supervisor`).
//!
//! [`ServerApi::pause_workers`] pauses this server's pool (each worker
//! finishes the evaluation in hand, then dequeues nothing until
//! [`ServerApi::resume_workers`]); the seed's worker Pause/Resume, for the
//! whole pool. To pause scheduling cluster-wide, use the scheduler
//! configuration's `PauseEvalBroker` ([`ServerApi::pause_eval_broker`]).

use super::{ServerApi, ServerApiError};
use crate::worker_supervisor::{GetConfig, GetWorkers, SetConfig, SetPaused};

pub use crate::worker::{WorkerInfo, WorkerStatus};
pub use crate::worker_supervisor::{WorkerConfigInfo, WorkersInfo};

/// A change of the worker pool (`PUT /v1/agent/schedulers/config`); a
/// field left `None` keeps its current value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetWorkerConfig {
    /// Between 0 and the number of CPUs.
    pub num_schedulers: Option<i64>,
    /// Scheduler names (`service`, `batch`, `system`, `sysbatch`,
    /// `_core`); `_core` must be among them.
    pub enabled_schedulers: Option<Vec<String>>,
}

impl ServerApi {
    /// Every worker with its status.
    pub async fn workers(&self) -> Result<WorkersInfo, ServerApiError> {
        self.workers.send(GetWorkers).await.map_err(unavailable)
    }

    /// The worker pool's configuration in effect.
    pub async fn worker_config(&self) -> Result<WorkerConfigInfo, ServerApiError> {
        self.workers.send(GetConfig).await.map_err(unavailable)
    }

    /// Resizes the pool or changes its scheduler types; an invalid
    /// configuration is refused whole (nothing changes). Answers the
    /// configuration now in effect.
    pub async fn set_worker_config(
        &self,
        request: SetWorkerConfig,
    ) -> Result<WorkerConfigInfo, ServerApiError> {
        let current = self.worker_config().await?;
        let num_schedulers = match request.num_schedulers {
            Some(n) => n,
            None => i64::try_from(current.num_schedulers).unwrap_or(i64::MAX),
        };
        let set = SetConfig {
            num_schedulers,
            enabled_schedulers: request
                .enabled_schedulers
                .unwrap_or(current.enabled_schedulers),
        };
        self.workers
            .send(set)
            .await
            .map_err(unavailable)?
            .map_err(|e| ServerApiError::Invalid(e.to_string()))
    }
}

impl ServerApi {
    /// Pauses every worker of this server: each finishes the evaluation
    /// in hand and takes no more (status `Pausing`, then `Paused` in
    /// [`ServerApi::workers`] and `/v1/agent/schedulers`). Evaluations
    /// wait in the broker. The pause holds across resizes.
    pub async fn pause_workers(&self) -> Result<(), ServerApiError> {
        self.workers
            .send(SetPaused(true))
            .await
            .map_err(unavailable)
    }

    /// Resumes the workers [`ServerApi::pause_workers`] paused (on a
    /// leader, the workers it keeps paused for the plan applier stay so).
    pub async fn resume_workers(&self) -> Result<(), ServerApiError> {
        self.workers
            .send(SetPaused(false))
            .await
            .map_err(unavailable)
    }
}

fn unavailable(e: actix::MailboxError) -> ServerApiError {
    ServerApiError::Unavailable(format!("worker supervisor: {e}"))
}
