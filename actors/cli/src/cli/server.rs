//! `herder server workers [set N]`: the agent's scheduling workers, read
//! and resized live through Nomad's snake_case worker API.

use super::views::{WorkerConfigView, WorkersView};
use super::{output, ApiFlags, ViewFlags};
use anyhow::Context;
use clap::{Args, Subcommand};
use herder_api_client::ApiClient;
use serde_json::json;
use std::io::Write;

const CONFIG_PATH: &str = "/v1/agent/schedulers/config";

#[derive(Debug, Args)]
pub struct ServerArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: ServerCommand,
}

#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// List the scheduling workers, or resize them with `set N`.
    Workers(WorkersArgs),
}

#[derive(Debug, Args)]
pub struct WorkersArgs {
    #[command(subcommand)]
    pub action: Option<WorkersAction>,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Subcommand)]
pub enum WorkersAction {
    /// Run N scheduling workers (0 pauses scheduling on this server).
    Set(SetWorkersArgs),
}

#[derive(Debug, Args)]
pub struct SetWorkersArgs {
    /// How many workers to run.
    pub count: u64,
    /// The schedulers the workers take work for, comma-separated (service,
    /// batch, system, sysbatch, _core); unchanged when left out.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub schedulers: Option<Vec<String>>,
}

/// Runs one server verb and returns its exit status.
pub fn run(args: ServerArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let client = args.api.client()?;
    let ServerCommand::Workers(workers) = args.command;
    match &workers.action {
        None => list(&client, &workers.view, out),
        Some(WorkersAction::Set(set)) => set_workers(&client, set, &workers.view, out),
    }
}

fn list(client: &ApiClient, view: &ViewFlags, out: &mut dyn Write) -> anyhow::Result<u8> {
    let answer = client.get("/v1/agent/schedulers", &[])?;
    if view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let workers: WorkersView = answer.decode().context("reading the workers")?;
    write!(out, "{}", output::workers(&workers, view.verbose))?;
    Ok(0)
}

fn set_workers(
    client: &ApiClient,
    args: &SetWorkersArgs,
    view: &ViewFlags,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    // The API replaces both fields, so keep the enabled list unless given.
    let enabled = match &args.schedulers {
        Some(list) => list.clone(),
        None => {
            let current: WorkerConfigView = client
                .get(CONFIG_PATH, &[])?
                .decode()
                .context("reading the worker configuration")?;
            current.enabled_schedulers
        }
    };
    let body = json!({ "num_schedulers": args.count, "enabled_schedulers": enabled });
    let answer = client
        .put(CONFIG_PATH, &[], &body)
        .context("could not update the scheduler workers")?;
    if view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let config: WorkerConfigView = answer
        .decode()
        .context("reading the worker configuration")?;
    writeln!(
        out,
        "Scheduler workers updated: {} worker(s) for {}",
        config.num_schedulers,
        config.enabled_schedulers.join(",")
    )?;
    Ok(0)
}
