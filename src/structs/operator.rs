//! Cluster-wide settings an operator can change at run time: the
//! scheduler's (`/v1/operator/scheduler/configuration`) and autopilot's
//! (`/v1/operator/autopilot/configuration`).

use serde::{Deserialize, Serialize};
use std::time::Duration;

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

/// Autopilot's settings (Nomad's `structs.AutopilotConfig`, in the API's
/// encoding: durations as Go prints them, `"200ms"`). The Enterprise
/// fields are kept as written so a configuration read back is the one
/// set; what herder acts on is said where it is read
/// (`herder-raft`'s `cluster::autopilot`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AutopilotConfiguration {
    /// Whether the leader removes dead servers from the Raft configuration.
    pub cleanup_dead_servers: bool,
    /// How long a server may go without contact from the leader and still
    /// count as healthy.
    #[serde(with = "go_duration")]
    pub last_contact_threshold: Duration,
    /// How many log entries a server may trail the leader by and still
    /// count as healthy.
    pub max_trailing_logs: u64,
    /// The fewest servers the dead server cleanup leaves.
    pub min_quorum: u64,
    /// How long a server must stay healthy to count as stable.
    #[serde(with = "go_duration")]
    pub server_stabilization_time: Duration,
    /// Enterprise: redundancy zones (accepted, not acted on).
    pub enable_redundancy_zones: bool,
    /// Enterprise: upgrade migrations (accepted, not acted on).
    pub disable_upgrade_migration: bool,
    /// Enterprise: custom upgrade versions (accepted, not acted on).
    pub enable_custom_upgrades: bool,
    pub create_index: u64,
    pub modify_index: u64,
}

impl Default for AutopilotConfiguration {
    /// Nomad's server defaults (`autopilot` stanza left out).
    fn default() -> Self {
        AutopilotConfiguration {
            cleanup_dead_servers: true,
            last_contact_threshold: Duration::from_millis(200),
            max_trailing_logs: 250,
            min_quorum: 0,
            server_stabilization_time: Duration::from_secs(10),
            enable_redundancy_zones: false,
            disable_upgrade_migration: false,
            enable_custom_upgrades: false,
            create_index: 0,
            modify_index: 0,
        }
    }
}

impl AutopilotConfiguration {
    /// One warning per setting switched on that herder accepts and keeps
    /// but does not act on (Nomad Enterprise's), naming it: a write answers
    /// them (`X-Herder-Warnings`), the server logs them, the CLI prints them.
    pub fn unhonoured_fields(&self) -> Vec<String> {
        [
            ("EnableRedundancyZones", self.enable_redundancy_zones),
            ("DisableUpgradeMigration", self.disable_upgrade_migration),
            ("EnableCustomUpgrades", self.enable_custom_upgrades),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| {
            format!("{name} is a Nomad Enterprise setting: herder keeps it but does not act on it")
        })
        .collect()
    }
}

/// A duration as Go's `Duration.String` writes it and `ParseDuration`
/// reads it (an empty string: zero, as Nomad's decoder leaves it).
mod go_duration {
    use crate::jobspec::{format_go_duration, parse_go_duration};
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(&format_go_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(input)?;
        if text.is_empty() {
            return Ok(Duration::ZERO);
        }
        parse_go_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autopilot_configuration_reads_and_writes_nomads_encoding() {
        let text = r#"{"CleanupDeadServers":false,"LastContactThreshold":"1s",
            "MaxTrailingLogs":100,"MinQuorum":3,"ServerStabilizationTime":"1m30s",
            "EnableRedundancyZones":true,"CreateIndex":4,"ModifyIndex":9}"#;
        let config: AutopilotConfiguration = serde_json::from_str(text).unwrap();
        assert!(!config.cleanup_dead_servers);
        assert_eq!(config.last_contact_threshold, Duration::from_secs(1));
        assert_eq!(config.server_stabilization_time, Duration::from_secs(90));
        assert_eq!(config.min_quorum, 3);
        let warnings = config.unhonoured_fields();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("EnableRedundancyZones "),
            "{warnings:?}"
        );
        let written = serde_json::to_value(&config).unwrap();
        assert_eq!(written["LastContactThreshold"], "1s");
        assert_eq!(written["ServerStabilizationTime"], "1m30s");
        assert_eq!(written["DisableUpgradeMigration"], false);
        assert!(serde_json::from_str::<AutopilotConfiguration>(
            r#"{"LastContactThreshold":"soon"}"#
        )
        .is_err());
    }
}
