//! `herder deployment list|status|promote|fail|pause|resume`: Nomad's
//! deployment verbs, and the deployment monitor `job run` follows a new
//! version with.

use super::flags::{ApiFlags, ViewFlags};
use super::lookup::resolve_uuid_prefix;
use super::monitor::{monitor, MonitorOptions};
use super::output::{self, short_id};
use super::views::{DeploymentUpdateView, DeploymentView};
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use herder_api_client::{path_segment, ApiClient};
use serde_json::{json, Value};
use std::io::Write;
use std::time::{Duration, Instant};

/// Exit status when a followed deployment ends other than successfully.
pub const EXIT_DEPLOYMENT_FAILED: u8 = 1;

#[derive(Debug, Args)]
pub struct DeploymentArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: DeploymentCommand,
}

#[derive(Debug, Subcommand)]
pub enum DeploymentCommand {
    /// List deployments, newest first.
    List(ViewFlags),
    /// Show one deployment and its groups' progress.
    Status(DeploymentIdArgs),
    /// Promote a deployment's canaries (every group, or `-group G`).
    Promote(PromoteArgs),
    /// Mark a deployment failed (rolling back when it auto-reverts).
    Fail(DeploymentWriteArgs),
    /// Pause a deployment.
    Pause(DeploymentIdArgs),
    /// Resume a paused deployment.
    Resume(DeploymentWriteArgs),
}

#[derive(Debug, Args)]
pub struct DeploymentIdArgs {
    /// A deployment ID or a unique prefix of one.
    pub id: String,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct DeploymentWriteArgs {
    /// A deployment ID or a unique prefix of one.
    pub id: String,
    /// Return after the change instead of following its evaluation.
    #[arg(long)]
    pub detach: bool,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct PromoteArgs {
    #[command(flatten)]
    pub target: DeploymentWriteArgs,
    /// Promote only this group's canaries; repeatable.
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
}

/// Runs one deployment verb and returns its exit status.
pub fn run(args: DeploymentArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let client = args.api.client()?;
    match args.command {
        DeploymentCommand::List(view) => list(&client, &view, out),
        DeploymentCommand::Status(a) => status(&client, &a, out),
        DeploymentCommand::Promote(a) => promote(&client, &a, out),
        DeploymentCommand::Fail(a) => fail(&client, &a, out),
        DeploymentCommand::Pause(a) => pause(&client, &a, out),
        DeploymentCommand::Resume(a) => resume(&client, &a, out),
    }
}

fn resolve(client: &ApiClient, given: &str) -> anyhow::Result<String> {
    resolve_uuid_prefix(client, "/v1/deployments", "deployment", given)
}

fn list(client: &ApiClient, view: &ViewFlags, out: &mut dyn Write) -> anyhow::Result<u8> {
    let answer = client.get("/v1/deployments", &[])?;
    if view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let deployments: Vec<DeploymentView> =
        answer.decode().context("reading the deployment list")?;
    write!(
        out,
        "{}",
        output::deployments_table(&deployments, view.verbose)
    )?;
    Ok(0)
}

fn status(client: &ApiClient, args: &DeploymentIdArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = resolve(client, &args.id)?;
    let answer = client.get(&format!("/v1/deployment/{}", path_segment(&id)), &[])?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let d: DeploymentView = answer.decode().context("reading the deployment")?;
    write!(out, "{}", output::deployment_detail(&d, args.view.verbose))?;
    Ok(0)
}

/// Sends a deployment change (`endpoint`: `promote`, `fail`, `pause`);
/// the answer's raw JSON and its decoded form. `doing` names the change
/// in an error ("promoting").
fn write_change(
    client: &ApiClient,
    endpoint: &str,
    doing: &str,
    id: &str,
    body: &Value,
) -> anyhow::Result<(Value, DeploymentUpdateView)> {
    let path = format!("/v1/deployment/{endpoint}/{}", path_segment(id));
    let answer = client
        .put(&path, &[], body)
        .with_context(|| format!("Error {doing} deployment"))?;
    let update = answer.decode().context("reading the answer")?;
    Ok((answer.body, update))
}

/// Prints `-json`, or the evaluation ID (`-detach`), or follows the
/// evaluation the change created, as Nomad's deployment verbs do.
fn after_change(
    client: &ApiClient,
    args: &DeploymentWriteArgs,
    update: &DeploymentUpdateView,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    if update.eval_id.is_empty() {
        return Ok(0);
    }
    if args.detach {
        writeln!(out, "Evaluation ID: {}", update.eval_id)?;
        return Ok(0);
    }
    writeln!(out)?;
    let options = MonitorOptions {
        verbose: args.view.verbose,
        ..MonitorOptions::default()
    };
    monitor(client, &update.eval_id, &options, out)
}

fn promote(client: &ApiClient, args: &PromoteArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = resolve(client, &args.target.id)?;
    let body = json!({
        "DeploymentID": id,
        "All": args.groups.is_empty(),
        "Groups": args.groups,
    });
    let (raw, update) = write_change(client, "promote", "promoting", &id, &body)?;
    if args.target.view.json {
        write!(out, "{}", output::json(&raw))?;
        return Ok(0);
    }
    after_change(client, &args.target, &update, out)
}

fn fail(client: &ApiClient, args: &DeploymentWriteArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = resolve(client, &args.id)?;
    let (raw, update) = write_change(client, "fail", "failing", &id, &json!({"DeploymentID": id}))?;
    if args.view.json {
        write!(out, "{}", output::json(&raw))?;
        return Ok(0);
    }
    let short = short_id(&id, args.view.verbose);
    match update.reverted_job_version {
        Some(v) => writeln!(
            out,
            "Deployment {short:?} failed. Auto-reverted to job version {v}."
        )?,
        None => writeln!(out, "Deployment {short:?} failed")?,
    }
    after_change(client, args, &update, out)
}

fn pause(client: &ApiClient, args: &DeploymentIdArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = resolve(client, &args.id)?;
    let body = json!({"DeploymentID": id, "Pause": true});
    let (raw, _) = write_change(client, "pause", "pausing", &id, &body)?;
    if args.view.json {
        write!(out, "{}", output::json(&raw))?;
        return Ok(0);
    }
    let short = short_id(&id, args.view.verbose);
    writeln!(out, "Deployment {short:?} paused")?;
    Ok(0)
}

fn resume(
    client: &ApiClient,
    args: &DeploymentWriteArgs,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let id = resolve(client, &args.id)?;
    let body = json!({"DeploymentID": id, "Pause": false});
    let (raw, update) = write_change(client, "pause", "resuming", &id, &body)?;
    if args.view.json {
        write!(out, "{}", output::json(&raw))?;
        return Ok(0);
    }
    let short = short_id(&id, args.view.verbose);
    writeln!(out, "Deployment {short:?} resumed")?;
    after_change(client, args, &update, out)
}

/// How long `job run` follows a deployment at most: a deployment waits
/// for allocations to stay healthy and has a progress deadline (10
/// minutes by default) per group.
pub const DEPLOYMENT_MONITOR_LIMIT: Duration = Duration::from_secs(30 * 60);

/// Follows deployment `id` with blocking queries until it ends (exit 0
/// when successful, 1 otherwise), is paused, or waits for a user to
/// promote its canaries (exit 0, saying so). Prints each change of its
/// status and progress, then the deployment.
pub fn monitor_deployment(
    client: &ApiClient,
    id: &str,
    options: &MonitorOptions,
    limit: Duration,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let deadline = Instant::now() + limit;
    let short = short_id(id, options.verbose);
    writeln!(out, "==> Monitoring deployment {short:?}")?;
    let path = format!("/v1/deployment/{}", path_segment(id));
    let mut index = 0;
    let mut last = String::new();
    loop {
        let answer = if index == 0 {
            client.get(&path, &[])?
        } else {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = options.wait.min(left).max(Duration::from_millis(1));
            client.get_blocking(&path, index, wait)?
        };
        let d: DeploymentView = answer.decode().context("reading the deployment")?;
        let progress = progress_line(&d);
        if progress != last {
            writeln!(out, "    {progress}")?;
            last = progress;
        }
        if let Some(code) = settled(&d, &short, out)? {
            writeln!(out)?;
            write!(out, "{}", output::deployment_detail(&d, options.verbose))?;
            return Ok(code);
        }
        if Instant::now() >= deadline {
            bail!(
                "gave up after {} waiting for deployment {short:?} (still {:?}); \
                 check it later with `herder deployment status {id}`",
                humantime::format_duration(limit),
                d.status
            );
        }
        if answer.index <= index {
            std::thread::sleep(options.poll);
        }
        index = index.max(answer.index);
    }
}

/// The deployment's status and its groups' health, one line.
fn progress_line(d: &DeploymentView) -> String {
    let groups: Vec<String> = d
        .task_groups
        .iter()
        .map(|(name, g)| {
            format!(
                "{name}: {}/{} healthy, {} unhealthy",
                g.healthy_allocs, g.desired_total, g.unhealthy_allocs
            )
        })
        .collect();
    let mut line = format!("Deployment {:?}: {}", d.status, d.status_description);
    if !groups.is_empty() {
        line.push_str(&format!(" ({})", groups.join("; ")));
    }
    line
}

/// The exit status once there is nothing more to wait for.
fn settled(d: &DeploymentView, short: &str, out: &mut dyn Write) -> anyhow::Result<Option<u8>> {
    let code = match d.status.as_str() {
        "successful" => {
            writeln!(out, "  ✓ Deployment {short:?} successful")?;
            0
        }
        _ if d.is_terminal() => {
            writeln!(out, "  ! Deployment {short:?} {}", d.status)?;
            EXIT_DEPLOYMENT_FAILED
        }
        "paused" => {
            writeln!(
                out,
                "    Deployment {short:?} is paused; resume it with `herder deployment resume {}`",
                d.id
            )?;
            0
        }
        _ if d.awaits_manual_promotion() => {
            writeln!(
                out,
                "    Deployment {short:?} waits for its canaries to be promoted: `herder deployment promote {}`",
                d.id
            )?;
            0
        }
        _ => return Ok(None),
    };
    Ok(Some(code))
}
