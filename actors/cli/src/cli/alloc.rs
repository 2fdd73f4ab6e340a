//! `herder alloc status|stop|restart|signal|logs`: inspect, stop, restart
//! and signal single allocations and read their tasks' logs (see
//! [`super::alloc_logs`]). Restart and signal go to the agent the CLI
//! talks to, which hands them to the client that runs the allocation.

use super::alloc_exec::{self, AllocExecArgs};
use super::alloc_fs::{self, AllocFsArgs};
use super::alloc_logs::{self, AllocLogsArgs};
use super::flags::{ApiFlags, ViewFlags};
use super::lookup::resolve_uuid_prefix;
use super::monitor::{monitor, MonitorOptions};
use super::output::{self, now_nanos};
use super::usage;
use super::views::{AllocView, WriteResponse};
use anyhow::Context;
use clap::{Args, Subcommand};
use herder_api_client::{path_segment, ApiClient};
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
    /// Restart an allocation's running tasks (or one of them) in place.
    Restart(AllocRestartArgs),
    /// Send a signal to an allocation's running tasks (or one of them).
    Signal(AllocSignalArgs),
    /// Print or follow a task's stdout or stderr.
    Logs(AllocLogsArgs),
    /// Run a command beside a running task, in its isolation.
    Exec(AllocExecArgs),
    /// List, read or follow the files of an allocation's directory.
    Fs(AllocFsArgs),
}

#[derive(Debug, Args)]
pub struct AllocRestartArgs {
    /// An allocation ID or a unique prefix of one.
    pub id: String,
    /// The task to restart; every running task when left out.
    pub task: Option<String>,
    /// Accepted as Nomad's CLI takes it (IDs in messages are always full).
    #[arg(long)]
    pub verbose: bool,
}

#[derive(Debug, Args)]
pub struct AllocSignalArgs {
    /// The signal to send (`SIGUSR1`, `HUP`, `9`).
    #[arg(short = 's', value_name = "SIGNAL", default_value = "SIGKILL")]
    pub signal: String,
    /// An allocation ID or a unique prefix of one.
    pub id: String,
    /// The task to signal; every running task when left out.
    pub task: Option<String>,
    /// Accepted as Nomad's CLI takes it (IDs in messages are always full).
    #[arg(long)]
    pub verbose: bool,
}

#[derive(Debug, Args)]
pub struct AllocStatusArgs {
    /// An allocation ID or a unique prefix of one.
    pub id: String,
    /// Show each task's measured resource usage.
    #[arg(long)]
    pub stats: bool,
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
        AllocCommand::Restart(a) => restart(&client, &a),
        AllocCommand::Signal(a) => signal(&client, &a),
        AllocCommand::Logs(a) => alloc_logs::run(&client, &a, out),
        AllocCommand::Exec(a) => alloc_exec::run(&client, &a, out),
        AllocCommand::Fs(a) => alloc_fs::run(&client, &a, out),
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
    if args.stats {
        usage::write_task_usage(client, &answer.body, out)?;
    }
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

/// `alloc restart`: as Nomad's, silent on success.
fn restart(client: &ApiClient, args: &AllocRestartArgs) -> anyhow::Result<u8> {
    let id = alloc_id(client, &args.id)?;
    let task = checked_task(client, &id, args.task.as_deref())?;
    client
        .put(
            &format!("/v1/client/allocation/{}/restart", path_segment(&id)),
            &[],
            &serde_json::json!({ "TaskName": task.unwrap_or_default() }),
        )
        .map_err(|e| anyhow::anyhow!("Failed to restart allocation:\n\n{e}"))?;
    Ok(0)
}

/// `alloc signal`: as Nomad's, silent on success.
fn signal(client: &ApiClient, args: &AllocSignalArgs) -> anyhow::Result<u8> {
    let id = alloc_id(client, &args.id)?;
    let task = checked_task(client, &id, args.task.as_deref())?;
    client
        .put(
            &format!("/v1/client/allocation/{}/signal", path_segment(&id)),
            &[],
            &serde_json::json!({ "Task": task.unwrap_or_default(), "Signal": args.signal }),
        )
        .map_err(|e| anyhow::anyhow!("Error signalling allocation: {e}"))?;
    Ok(0)
}

/// The task named, once checked against the allocation's group (as Nomad's
/// CLI checks it before asking).
fn checked_task(
    client: &ApiClient,
    id: &str,
    task: Option<&str>,
) -> anyhow::Result<Option<String>> {
    let Some(task) = task else {
        return Ok(None);
    };
    let alloc = client
        .get(&format!("/v1/allocation/{}", path_segment(id)), &[])
        .context("Error querying allocation")?
        .body;
    let group = alloc["TaskGroup"].as_str().unwrap_or_default();
    let tasks: Vec<&str> = alloc["Job"]["TaskGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["Name"] == group)
        .flat_map(|g| g["Tasks"].as_array().into_iter().flatten())
        .filter_map(|t| t["Name"].as_str())
        .collect();
    if tasks.contains(&task) {
        return Ok(Some(task.to_string()));
    }
    anyhow::bail!(
        "Could not find task named: {task}, found:\n{}",
        tasks
            .iter()
            .map(|t| format!("* {t}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}
