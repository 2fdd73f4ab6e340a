//! `herder server ...`: the agent's scheduling workers (`workers [set N]`,
//! read and resized live through Nomad's snake_case worker API) and the
//! cluster's servers (`members`, `join`, `force-leave`, as Nomad's
//! `server` verbs).

use super::flags::{ApiFlags, ViewFlags};
use super::output;
use super::views::{WorkerConfigView, WorkersView};
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use herder_api_client::ApiClient;
use serde_json::{json, Value};
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
    /// List the cluster's servers and their status.
    Members(MembersArgs),
    /// Make the agent's server join the cluster of the servers at ADDR
    /// (their RPC address, `host:port`).
    Join(JoinArgs),
    /// Remove a server from the cluster's Raft configuration.
    ForceLeave(ForceLeaveArgs),
}

#[derive(Debug, Args)]
pub struct MembersArgs {
    /// Every member's tags instead of the status table.
    #[arg(long)]
    pub detailed: bool,
    /// Print the API's raw JSON answer.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// Servers' RPC addresses (`host:port`; port 4647 when left out).
    #[arg(required = true, value_name = "ADDR")]
    pub addresses: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ForceLeaveArgs {
    /// The server's name (as `server members` lists it) or RPC address.
    pub node: String,
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
    match args.command {
        ServerCommand::Workers(workers) => match &workers.action {
            None => list(&client, &workers.view, out),
            Some(WorkersAction::Set(set)) => set_workers(&client, set, &workers.view, out),
        },
        ServerCommand::Members(a) => members(&client, &a, out),
        ServerCommand::Join(a) => join(&client, &a, out),
        ServerCommand::ForceLeave(a) => force_leave(&client, &a),
    }
}

/// `server members`: Nomad's table, the leader found as Nomad's CLI finds
/// it (the region's leader address against each member's `Addr:port`).
fn members(client: &ApiClient, args: &MembersArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let answer = client
        .get("/v1/agent/members", &[])
        .context("Error querying servers")?;
    if args.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let mut members: Vec<Value> = match answer.body.get("Members") {
        Some(Value::Array(list)) => list.clone(),
        _ => Vec::new(),
    };
    members.sort_by_key(|m| text(m, "Name"));
    if args.detailed {
        write!(out, "{}", output::members_detailed(&members))?;
        return Ok(0);
    }
    let leaders = region_leaders(client, &members)?;
    write!(out, "{}", output::members(&members, &leaders))?;
    Ok(0)
}

fn text(value: &Value, key: &str) -> String {
    value[key].as_str().unwrap_or_default().to_string()
}

/// Each region's leader address; a region without a leader is left out.
fn region_leaders(
    client: &ApiClient,
    members: &[Value],
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let regions: std::collections::BTreeSet<String> = members
        .iter()
        .filter_map(|m| m["Tags"]["region"].as_str().map(str::to_string))
        .collect();
    let mut leaders = std::collections::BTreeMap::new();
    for region in regions {
        let answer = client
            .get("/v1/status/leader", &[("region", region.clone())])
            .context("Error determining leaders")?;
        if let Some(leader) = answer.body.as_str().filter(|l| !l.is_empty()) {
            leaders.insert(region, leader.to_string());
        }
    }
    Ok(leaders)
}

/// `server join ADDR...`: Nomad's answer is a count and an error text;
/// any error fails the verb, as Nomad's CLI does.
fn join(client: &ApiClient, args: &JoinArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let query: Vec<(&str, String)> = args
        .addresses
        .iter()
        .map(|a| ("address", a.clone()))
        .collect();
    let answer = client
        .put("/v1/agent/join", &query, &Value::Null)
        .context("Error joining")?;
    let error = answer.body["error"].as_str().unwrap_or_default();
    if !error.is_empty() {
        bail!("Error joining: {error}");
    }
    let joined = answer.body["num_joined"].as_u64().unwrap_or(0);
    writeln!(out, "Joined {joined} servers successfully")?;
    Ok(0)
}

/// `server force-leave NODE`: silent on success, as Nomad.
fn force_leave(client: &ApiClient, args: &ForceLeaveArgs) -> anyhow::Result<u8> {
    client
        .put(
            "/v1/agent/force-leave",
            &[("node", args.node.clone())],
            &Value::Null,
        )
        .with_context(|| format!("Error force-leaving server {}", args.node))?;
    Ok(0)
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
