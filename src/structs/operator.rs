//! Cluster-wide scheduler settings an operator can change at run time
//! (`/v1/operator/scheduler/configuration`).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerAlgorithm {
    /// Fill nodes before using new ones (Nomad's default).
    #[default]
    Binpack,
    /// Prefer the least-used nodes.
    Spread,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PreemptionConfig {
    pub system_scheduler_enabled: bool,
    pub sys_batch_scheduler_enabled: bool,
    pub batch_scheduler_enabled: bool,
    pub service_scheduler_enabled: bool,
}

impl Default for PreemptionConfig {
    /// Nomad's default: only system jobs preempt.
    fn default() -> Self {
        PreemptionConfig {
            system_scheduler_enabled: true,
            sys_batch_scheduler_enabled: false,
            batch_scheduler_enabled: false,
            service_scheduler_enabled: false,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SchedulerConfiguration {
    pub scheduler_algorithm: SchedulerAlgorithm,
    pub preemption_config: PreemptionConfig,
    pub memory_oversubscription_enabled: bool,
    pub reject_job_registration: bool,
    pub pause_eval_broker: bool,
    pub create_index: u64,
    pub modify_index: u64,
}

impl SchedulerConfiguration {
    /// Whether the scheduler of `job_type` may preempt lower-priority work.
    pub fn preemption_enabled(&self, job_type: &super::JobType) -> bool {
        use super::JobType::*;
        let p = &self.preemption_config;
        match job_type {
            System => p.system_scheduler_enabled,
            SysBatch => p.sys_batch_scheduler_enabled,
            Batch => p.batch_scheduler_enabled,
            Service => p.service_scheduler_enabled,
            _ => false,
        }
    }
}
