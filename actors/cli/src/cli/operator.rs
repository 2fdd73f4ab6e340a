//! `herder operator scheduler get-config|set-config`: the cluster-wide
//! scheduler configuration (algorithm, preemption, broker pause, job
//! registration), with check-and-set; the `raft` and `gossip` verbs
//! ([`super::operator_raft`]); `autopilot` ([`super::operator_autopilot`]);
//! `debug`, a bundle for a bug report ([`super::operator_debug`]); and
//! `snapshot` ([`super::operator_snapshot`]).

use super::flags::ApiFlags;
use super::operator_autopilot::{self, AutopilotCommand};
use super::operator_debug;
use super::operator_keyring::{self, RootCommand};
use super::operator_raft::{self, GossipCommand, RaftCommand};
use super::operator_snapshot::{self, SnapshotCommand};
use super::output;
use super::views::SchedulerConfigView;
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use herder_api_client::{decode_lenient, ApiClient};
use serde_json::{json, Value};
use std::io::Write;

const CONFIG_PATH: &str = "/v1/operator/scheduler/configuration";

#[derive(Debug, Args)]
pub struct OperatorArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: OperatorCommand,
}

#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// The scheduler configuration.
    #[command(subcommand)]
    Scheduler(SchedulerCommand),
    /// The servers of the Raft configuration.
    #[command(subcommand)]
    Raft(RaftCommand),
    /// Autopilot's configuration (dead server cleanup, server health).
    #[command(subcommand)]
    Autopilot(AutopilotCommand),
    /// The cluster key (`server { encrypt }`).
    #[command(subcommand)]
    Gossip(GossipCommand),
    /// Print a new cluster key (Nomad 1.1's `operator keygen`).
    Keygen,
    /// Gather logs, profiles, metrics and state into one archive for a
    /// bug report, secrets redacted.
    Debug(operator_debug::DebugArgs),
    /// Save, restore and inspect snapshots of the whole state.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// The keyring that seals variables (`root keyring list|rotate|remove`).
    #[command(subcommand)]
    Root(RootCommand),
}

#[derive(Debug, Subcommand)]
pub enum SchedulerCommand {
    /// Show the scheduler configuration.
    GetConfig(GetConfigArgs),
    /// Change parts of the scheduler configuration; the rest is kept.
    SetConfig(SetConfigArgs),
}

#[derive(Debug, Args)]
pub struct GetConfigArgs {
    /// Print the API's raw JSON answer.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Default, Args)]
pub struct SetConfigArgs {
    #[arg(long = "scheduler-algorithm", value_name = "ALGORITHM", value_parser = ["binpack", "spread"])]
    pub scheduler_algorithm: Option<String>,
    #[arg(long = "memory-oversubscription", value_name = "BOOL")]
    pub memory_oversubscription: Option<bool>,
    #[arg(long = "preempt-system-scheduler", value_name = "BOOL")]
    pub preempt_system: Option<bool>,
    #[arg(long = "preempt-sysbatch-scheduler", value_name = "BOOL")]
    pub preempt_sysbatch: Option<bool>,
    #[arg(long = "preempt-batch-scheduler", value_name = "BOOL")]
    pub preempt_batch: Option<bool>,
    #[arg(long = "preempt-service-scheduler", value_name = "BOOL")]
    pub preempt_service: Option<bool>,
    /// Stop handing evaluations to the scheduling workers.
    #[arg(long = "pause-eval-broker", value_name = "BOOL")]
    pub pause_eval_broker: Option<bool>,
    /// Refuse new job registrations.
    #[arg(long = "reject-job-registration", value_name = "BOOL")]
    pub reject_job_registration: Option<bool>,
    /// Apply only if the configuration's ModifyIndex is still N.
    #[arg(long = "check-index", value_name = "N")]
    pub check_index: Option<u64>,
}

/// Runs one operator verb and returns its exit status.
pub fn run(args: OperatorArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    // Keygen asks no agent, so a client is made only for the other verbs.
    let client = || args.api.client();
    match args.command {
        OperatorCommand::Scheduler(SchedulerCommand::GetConfig(a)) => {
            get_config(&client()?, &a, out)
        }
        OperatorCommand::Scheduler(SchedulerCommand::SetConfig(a)) => {
            set_config(&client()?, &a, out)
        }
        OperatorCommand::Raft(RaftCommand::ListPeers(a)) => {
            operator_raft::list_peers(&client()?, &a, out)
        }
        OperatorCommand::Raft(RaftCommand::RemovePeer(a)) => {
            operator_raft::remove_peer(&client()?, &a, out)
        }
        OperatorCommand::Autopilot(command) => {
            operator_autopilot::run(&client()?, &command, out, &mut std::io::stderr())
        }
        OperatorCommand::Keygen | OperatorCommand::Gossip(GossipCommand::Keygen) => {
            operator_raft::keygen(out)
        }
        OperatorCommand::Debug(a) => operator_debug::run(a, &client()?, out),
        OperatorCommand::Snapshot(command) => operator_snapshot::run(command, client, out),
        OperatorCommand::Root(command) => operator_keyring::run(&client()?, &command, out),
    }
}

fn get_config(client: &ApiClient, args: &GetConfigArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let answer = client.get(CONFIG_PATH, &[])?;
    if args.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let config: SchedulerConfigView = decode_lenient(&answer.body["SchedulerConfig"])
        .context("reading the scheduler configuration")?;
    write!(out, "{}", output::scheduler_config(&config))?;
    Ok(0)
}

/// The current configuration with the flags' changes applied. Working on
/// the raw JSON keeps fields this CLI does not know about unchanged.
pub fn updated_config(current: &Value, args: &SetConfigArgs) -> anyhow::Result<Value> {
    let mut config = current.clone();
    let Some(fields) = config.as_object_mut() else {
        bail!("the agent answered no SchedulerConfig object");
    };
    let mut set = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            fields.insert(key.to_string(), v);
        }
    };
    set(
        "SchedulerAlgorithm",
        args.scheduler_algorithm.as_ref().map(|a| json!(a)),
    );
    set(
        "MemoryOversubscriptionEnabled",
        args.memory_oversubscription.map(Value::Bool),
    );
    set("PauseEvalBroker", args.pause_eval_broker.map(Value::Bool));
    set(
        "RejectJobRegistration",
        args.reject_job_registration.map(Value::Bool),
    );
    let preemption = fields
        .entry("PreemptionConfig")
        .or_insert_with(|| json!({}));
    if !preemption.is_object() {
        *preemption = json!({});
    }
    for (key, value) in [
        ("SystemSchedulerEnabled", args.preempt_system),
        ("SysBatchSchedulerEnabled", args.preempt_sysbatch),
        ("BatchSchedulerEnabled", args.preempt_batch),
        ("ServiceSchedulerEnabled", args.preempt_service),
    ] {
        if let Some(v) = value {
            preemption[key] = Value::Bool(v);
        }
    }
    Ok(config)
}

fn set_config(client: &ApiClient, args: &SetConfigArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let current = client.get(CONFIG_PATH, &[])?;
    let body = updated_config(&current.body["SchedulerConfig"], args)?;
    let query: Vec<(&str, String)> = args
        .check_index
        .map(|index| ("cas", index.to_string()))
        .into_iter()
        .collect();
    let answer = client
        .put(CONFIG_PATH, &query, &body)
        .context("could not set the scheduler configuration")?;
    // Without ?cas= Nomad answers {Updated: true} too; a false only comes
    // from a lost check-and-set.
    if answer.body.get("Updated").and_then(Value::as_bool) == Some(false) {
        bail!("Scheduler configuration could not be atomically updated, try again");
    }
    writeln!(out, "Scheduler configuration updated!")?;
    Ok(0)
}
