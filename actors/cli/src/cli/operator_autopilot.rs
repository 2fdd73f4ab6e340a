//! `herder operator autopilot get-config|set-config`: autopilot's
//! replicated settings, as Nomad 1.1's verbs show and change them.
//! `set-config` reads the configuration, changes what its flags name and
//! writes it back with check-and-set, as Nomad does. Nomad 1.1 has no
//! `autopilot health` verb; the health is `/v1/operator/autopilot/health`.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use herder::structs::AutopilotConfiguration;
use herder_api_client::ApiClient;
use std::io::Write;
use std::time::Duration;

const CONFIG_PATH: &str = "/v1/operator/autopilot/configuration";

#[derive(Debug, Subcommand)]
pub enum AutopilotCommand {
    /// Show autopilot's configuration.
    GetConfig,
    /// Change parts of autopilot's configuration; the rest is kept.
    SetConfig(AutopilotSetArgs),
}

/// Nomad's flags; each one left out keeps its setting.
#[derive(Debug, Default, Args)]
pub struct AutopilotSetArgs {
    /// Remove dead servers from the Raft configuration.
    #[arg(long = "cleanup-dead-servers", value_name = "BOOL")]
    pub cleanup_dead_servers: Option<bool>,
    /// How many log entries a server may trail the leader by and stay
    /// healthy.
    #[arg(long = "max-trailing-logs", value_name = "N")]
    pub max_trailing_logs: Option<u64>,
    /// The fewest servers the dead server cleanup leaves.
    #[arg(long = "min-quorum", value_name = "N")]
    pub min_quorum: Option<u64>,
    /// How long a server may go without the leader's contact and stay
    /// healthy (a duration such as "200ms").
    #[arg(long = "last-contact-threshold", value_name = "DURATION", value_parser = duration)]
    pub last_contact_threshold: Option<Duration>,
    /// How long a server must stay healthy to count as stable (such as
    /// "10s").
    #[arg(long = "server-stabilization-time", value_name = "DURATION", value_parser = duration)]
    pub server_stabilization_time: Option<Duration>,
    /// Enterprise: kept, not acted on.
    #[arg(long = "enable-redundancy-zones", value_name = "BOOL")]
    pub enable_redundancy_zones: Option<bool>,
    /// Enterprise: kept, not acted on.
    #[arg(long = "disable-upgrade-migration", value_name = "BOOL")]
    pub disable_upgrade_migration: Option<bool>,
    /// Enterprise: kept, not acted on.
    #[arg(long = "enable-custom-upgrades", value_name = "BOOL")]
    pub enable_custom_upgrades: Option<bool>,
}

fn duration(text: &str) -> Result<Duration, String> {
    herder::jobspec::parse_go_duration(text)
}

/// Runs one autopilot verb; `err` gets the warnings.
pub fn run(
    client: &ApiClient,
    command: &AutopilotCommand,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    match command {
        AutopilotCommand::GetConfig => get_config(client, out),
        AutopilotCommand::SetConfig(args) => set_config(client, args, out, err),
    }
}

fn read(client: &ApiClient) -> anyhow::Result<AutopilotConfiguration> {
    let answer = client
        .get(CONFIG_PATH, &[])
        .context("Error querying Autopilot configuration")?;
    answer
        .decode()
        .context("reading the autopilot configuration")
}

fn get_config(client: &ApiClient, out: &mut dyn Write) -> anyhow::Result<u8> {
    write!(out, "{}", render(&read(client)?))?;
    Ok(0)
}

/// Nomad's `get-config` lines.
pub fn render(config: &AutopilotConfiguration) -> String {
    use herder::jobspec::format_go_duration as go;
    format!(
        "CleanupDeadServers = {}\nLastContactThreshold = {}\nMaxTrailingLogs = {}\n\
         ServerStabilizationTime = {}\nEnableRedundancyZones = {}\n\
         DisableUpgradeMigration = {}\nEnableCustomUpgrades = {}\n",
        config.cleanup_dead_servers,
        go(config.last_contact_threshold),
        config.max_trailing_logs,
        go(config.server_stabilization_time),
        config.enable_redundancy_zones,
        config.disable_upgrade_migration,
        config.enable_custom_upgrades,
    )
}

/// `config` with the flags' changes applied.
pub fn updated(
    mut config: AutopilotConfiguration,
    args: &AutopilotSetArgs,
) -> AutopilotConfiguration {
    fn set<T: Copy>(field: &mut T, flag: Option<T>) {
        if let Some(value) = flag {
            *field = value;
        }
    }
    set(&mut config.cleanup_dead_servers, args.cleanup_dead_servers);
    set(&mut config.max_trailing_logs, args.max_trailing_logs);
    set(&mut config.min_quorum, args.min_quorum);
    set(
        &mut config.last_contact_threshold,
        args.last_contact_threshold,
    );
    set(
        &mut config.server_stabilization_time,
        args.server_stabilization_time,
    );
    set(
        &mut config.enable_redundancy_zones,
        args.enable_redundancy_zones,
    );
    set(
        &mut config.disable_upgrade_migration,
        args.disable_upgrade_migration,
    );
    set(
        &mut config.enable_custom_upgrades,
        args.enable_custom_upgrades,
    );
    config
}

fn set_config(
    client: &ApiClient,
    args: &AutopilotSetArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let config = updated(read(client)?, args);
    let query = [("cas", config.modify_index.to_string())];
    let body = serde_json::to_value(&config)?;
    let answer = client
        .put(CONFIG_PATH, &query, &body)
        .context("Error setting Autopilot configuration")?;
    for warning in config.unhonoured_fields() {
        writeln!(err, "Warning: {warning}")?;
    }
    match answer.body.as_bool() {
        Some(true) => {
            writeln!(out, "Configuration updated!")?;
            Ok(0)
        }
        Some(false) => {
            writeln!(
                out,
                "Configuration could not be atomically updated, please try again"
            )?;
            Ok(1)
        }
        None => bail!(
            "the agent answered {} instead of true or false",
            answer.body
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_change_only_what_they_name() {
        let args = AutopilotSetArgs {
            cleanup_dead_servers: Some(false),
            last_contact_threshold: Some(Duration::from_secs(1)),
            ..Default::default()
        };
        let current = AutopilotConfiguration {
            max_trailing_logs: 77,
            modify_index: 9,
            ..Default::default()
        };
        let config = updated(current, &args);
        assert!(!config.cleanup_dead_servers);
        assert_eq!(config.last_contact_threshold, Duration::from_secs(1));
        assert_eq!(config.max_trailing_logs, 77);
        assert_eq!(config.modify_index, 9);
    }

    #[test]
    fn get_config_prints_nomads_lines() {
        let text = render(&AutopilotConfiguration::default());
        assert_eq!(
            text,
            "CleanupDeadServers = true\nLastContactThreshold = 200ms\nMaxTrailingLogs = 250\n\
             ServerStabilizationTime = 10s\nEnableRedundancyZones = false\n\
             DisableUpgradeMigration = false\nEnableCustomUpgrades = false\n"
        );
    }
}
