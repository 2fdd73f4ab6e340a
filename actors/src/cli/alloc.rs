//! `herder alloc status|stop|logs`: inspect and stop single allocations
//! and read their tasks' logs (see [`super::alloc_logs`]).

use super::alloc_logs::{self, AllocLogsArgs};
use super::monitor::{monitor, MonitorOptions};
use super::views::{AllocView, WriteResponse};
use super::{now_nanos, output, resolve_uuid_prefix, ApiFlags, ViewFlags};
use crate::api_client::{path_segment, ApiClient};
use anyhow::Context;
use clap::{Args, Subcommand};
use std::io::Write;

#[derive(Debug, Args)]
pub struct AllocArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: AllocCommand,
}

#[derive(Debug, Subcommand)]
pub enum AllocCommand {
    /// Show an allocation, its tasks' states and recent events.
    Status(AllocStatusArgs),
    /// Stop an allocation; the scheduler replaces it if its job still wants it.
    Stop(AllocStopArgs),
    /// Print or follow a task's stdout or stderr.
    Logs(AllocLogsArgs),
}

#[derive(Debug, Args)]
pub struct AllocStatusArgs {
    /// An allocation ID or a unique prefix of one.
    pub id: String,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct AllocStopArgs {
    /// An allocation ID or a unique prefix of one.
    pub id: String,
    /// Return at once instead of following the evaluation.
    #[arg(long)]
    pub detach: bool,
    #[command(flatten)]
    pub view: ViewFlags,
}

/// Runs one alloc verb and returns its exit status.
pub fn run(args: AllocArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let client = args.api.client()?;
    match args.command {
        AllocCommand::Status(a) => status(&client, &a, out),
        AllocCommand::Stop(a) => stop(&client, &a, out),
        AllocCommand::Logs(a) => alloc_logs::run(&client, &a, out),
    }
}

fn alloc_id(client: &ApiClient, given: &str) -> anyhow::Result<String> {
    resolve_uuid_prefix(client, "/v1/allocations", "allocation", given)
}

fn status(client: &ApiClient, args: &AllocStatusArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = alloc_id(client, &args.id)?;
    let answer = client.get(&format!("/v1/allocation/{}", path_segment(&id)), &[])?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let alloc: AllocView = answer.decode().context("reading the allocation")?;
    write!(
        out,
        "{}",
        output::alloc_detail(&alloc, now_nanos(), args.view.verbose)
    )?;
    Ok(0)
}

fn stop(client: &ApiClient, args: &AllocStopArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = alloc_id(client, &args.id)?;
    let answer = client
        .post(
            &format!("/v1/allocation/{}/stop", path_segment(&id)),
            &[],
            &serde_json::json!({}),
        )
        .context("could not stop the allocation")?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let response: WriteResponse = answer.decode().context("reading the stop answer")?;
    if args.detach || response.eval_id.is_empty() {
        writeln!(
            out,
            "Allocation {id:?} stopping\nEvaluation ID: {}",
            response.eval_id
        )?;
        return Ok(0);
    }
    let options = MonitorOptions {
        verbose: args.view.verbose,
        ..MonitorOptions::default()
    };
    monitor(client, &response.eval_id, &options, out)
}
