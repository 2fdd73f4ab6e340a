//! Cluster-wide operator calls: the scheduler configuration (Nomad's
//! `Operator.SchedulerGetConfiguration` / `SchedulerSetConfiguration`,
//! with check-and-set), a forced garbage collection (`System.GarbageCollect`)
//! and job summary reconciliation (`System.ReconcileJobSummaries`).
//!
//! Pausing scheduling cluster-wide is a scheduler configuration setting,
//! as in Nomad: `PauseEvalBroker` (see [`ServerApi::pause_eval_broker`]).

use super::{store_error, ServerApi, ServerApiError};
use herder::state::{ApplyError, Command, StoreError, Table};
use herder::structs::SchedulerConfiguration;
use std::sync::Arc;

pub use crate::gc::GcReport;

/// The scheduler configuration and the index it was read at.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfigRead {
    pub config: Arc<SchedulerConfiguration>,
    /// The scheduler configuration table's index (at least 1).
    pub index: u64,
}

/// A scheduler configuration write (`PUT
/// /v1/operator/scheduler/configuration`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetSchedulerConfig {
    /// Replaces the whole configuration.
    pub config: SchedulerConfiguration,
    /// Check-and-set: write only if the stored configuration's
    /// `ModifyIndex` is still this.
    pub cas_index: Option<u64>,
}

/// Nomad's `SchedulerSetConfigurationResponse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfigWrite {
    /// `false`: a check-and-set found another index, and nothing changed
    /// (an outcome, not an error, as in Nomad).
    pub updated: bool,
    /// The index of the write, or the table's index when nothing changed.
    pub index: u64,
}

impl ServerApi {
    /// The scheduler configuration in effect.
    pub fn scheduler_config(&self) -> SchedulerConfigRead {
        let snap = self.snapshot();
        SchedulerConfigRead {
            config: snap.scheduler_config(),
            index: snap.table_index(Table::SchedulerConfig).max(1),
        }
    }

    /// Replaces the scheduler configuration; with a `cas_index`, only if it
    /// is still the stored configuration's modify index.
    pub async fn set_scheduler_config(
        &self,
        request: SetSchedulerConfig,
    ) -> Result<SchedulerConfigWrite, ServerApiError> {
        let SetSchedulerConfig { config, cas_index } = request;
        let outcome = self
            .writes
            .submit_raw(Command::SchedulerConfigUpdate { config, cas_index })
            .await?;
        match outcome {
            Ok(applied) => Ok(SchedulerConfigWrite {
                updated: true,
                index: applied.index,
            }),
            Err(StoreError::Rejected(ApplyError::CasMismatch { .. })) => Ok(SchedulerConfigWrite {
                updated: false,
                index: self.scheduler_config().index,
            }),
            Err(e) => Err(store_error(e)),
        }
    }

    /// Pauses (or resumes) the evaluation broker cluster-wide: no worker
    /// is handed an evaluation while it is paused. A read-modify-write of
    /// the scheduler configuration with check-and-set, retried when
    /// another write came in between.
    pub async fn pause_eval_broker(
        &self,
        paused: bool,
    ) -> Result<SchedulerConfigWrite, ServerApiError> {
        const ATTEMPTS: usize = 5;
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let current = self.snapshot().scheduler_config();
            let request = SetSchedulerConfig {
                cas_index: Some(current.modify_index),
                config: SchedulerConfiguration {
                    pause_eval_broker: paused,
                    ..(*current).clone()
                },
            };
            let written = self.set_scheduler_config(request).await?;
            if written.updated {
                return Ok(written);
            }
            last = Some(written);
        }
        last.ok_or_else(|| ServerApiError::Internal("no attempt was made".into()))
    }

    /// Collects now everything the garbage collector would take, ignoring
    /// every age threshold; answers once it is done.
    pub async fn force_gc(&self) -> Result<GcReport, ServerApiError> {
        let report = self.writes.force_gc().await?;
        tracing::info!(
            evals = report.evals,
            allocs = report.allocs,
            jobs = report.jobs,
            nodes = report.nodes,
            "forced garbage collection"
        );
        Ok(report)
    }

    /// Recounts every job's summary from its allocations (and a parent's
    /// children from its child jobs); returns the index of the write.
    pub async fn reconcile_job_summaries(&self) -> Result<u64, ServerApiError> {
        let applied = self.writes.submit(Command::ReconcileJobSummaries).await?;
        tracing::info!(index = applied.index, "job summaries reconciled");
        Ok(applied.index)
    }
}
