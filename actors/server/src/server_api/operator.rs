//! Cluster-wide operator calls: the scheduler configuration (Nomad's
//! `Operator.SchedulerGetConfiguration` / `SchedulerSetConfiguration`,
//! with check-and-set), autopilot's (`Operator.AutopilotGetConfiguration`
//! / `AutopilotSetConfiguration`, the same way) and its health
//! (`Operator.ServerHealth`), a forced garbage collection
//! (`System.GarbageCollect`) and job summary reconciliation
//! (`System.ReconcileJobSummaries`).
//!
//! Pausing scheduling cluster-wide is a scheduler configuration setting,
//! as in Nomad: `PauseEvalBroker` (see [`ServerApi::pause_eval_broker`]).

use super::{store_error, ServerApi, ServerApiError};
use herder::state::{ApplyError, Command, StoreError, Table};
use herder::structs::{AutopilotConfiguration, SchedulerConfiguration};
use herder_raft::cluster::autopilot_health::{self, HealthReport, ServerHealth};
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

/// An autopilot configuration write (`PUT
/// /v1/operator/autopilot/configuration`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SetAutopilotConfig {
    /// Replaces the whole configuration.
    pub config: AutopilotConfiguration,
    /// Check-and-set: write only if the stored configuration's
    /// `ModifyIndex` is still this (0: none stored).
    pub cas_index: Option<u64>,
}

/// What an autopilot configuration write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutopilotConfigWrite {
    /// `false`: a check-and-set found another index, nothing changed.
    pub updated: bool,
    /// The index of the write, or the table's index when nothing changed.
    pub index: u64,
    /// The settings written that herder keeps but does not act on.
    pub warnings: Vec<String>,
}

impl ServerApi {
    /// Autopilot's configuration in effect and the index it was read at:
    /// the one an operator set, else (in a cluster) Nomad's defaults with
    /// the dead server cleanup as this agent's configuration has it, and
    /// Nomad's defaults on a single server.
    pub fn autopilot_config(&self) -> (AutopilotConfiguration, u64) {
        let snap = self.snapshot();
        let index = snap.table_index(Table::AutopilotConfig).max(1);
        let config = match (&self.cluster, snap.stored_autopilot_config()) {
            (_, Some(stored)) => (**stored).clone(),
            (Some(cluster), None) => autopilot_health::effective_config(cluster),
            (None, None) => AutopilotConfiguration::default(),
        };
        (config, index)
    }

    /// Replaces autopilot's configuration (replicated to every server);
    /// with a `cas_index`, only if it is still the stored one's modify
    /// index.
    pub async fn set_autopilot_config(
        &self,
        request: SetAutopilotConfig,
    ) -> Result<AutopilotConfigWrite, ServerApiError> {
        let SetAutopilotConfig { config, cas_index } = request;
        let warnings = config.unhonoured_fields();
        let outcome = self
            .writes
            .submit_raw(Command::AutopilotConfigUpdate { config, cas_index })
            .await?;
        match outcome {
            Ok(applied) => {
                for warning in &warnings {
                    tracing::warn!("autopilot configuration: {warning}");
                }
                Ok(AutopilotConfigWrite {
                    updated: true,
                    index: applied.index,
                    warnings,
                })
            }
            Err(StoreError::Rejected(ApplyError::CasMismatch { .. })) => Ok(AutopilotConfigWrite {
                updated: false,
                index: self.autopilot_config().1,
                warnings: Vec::new(),
            }),
            Err(e) => Err(store_error(e)),
        }
    }

    /// The servers' health as autopilot judges it (see
    /// `herder_raft::cluster::autopilot_health`). A single server without
    /// Raft is one healthy voter that leads, as Nomad answers for one
    /// server: healthy, no failure tolerance. `me` describes it then.
    pub fn autopilot_health(&self, me: &herder_raft::Member) -> HealthReport {
        match &self.cluster {
            Some(cluster) => autopilot_health::report(cluster),
            None => autopilot_health::summarise(vec![ServerHealth {
                id: me.addr.clone(),
                raft_id: me.id,
                name: me.node.name.clone(),
                address: me.addr.clone(),
                serf_status: "alive",
                version: me.node.version.clone(),
                leader: true,
                last_contact: std::time::Duration::ZERO,
                last_term: 0,
                last_index: self.store.latest_index(),
                healthy: true,
                voter: true,
                stable_since: self.started_at,
            }]),
        }
    }

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
