//! `herder node status|drain|eligibility`: Nomad's node verbs.

use super::flags::{ApiFlags, ViewFlags};
use super::lookup::resolve_uuid_prefix;
use super::monitor::MonitorOptions;
use super::output::{self, now_nanos};
use super::views::{AllocView, NodeView};
use anyhow::{bail, Context};
use clap::{ArgGroup, Args, Subcommand};
use herder_api_client::{path_segment, ApiClient};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::{BufRead, IsTerminal, Write};
use std::time::Instant;

#[derive(Debug, Args)]
pub struct NodeArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: NodeCommand,
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// List nodes, or show one node and its allocations.
    Status(NodeStatusArgs),
    /// Start or stop moving a node's allocations elsewhere.
    Drain(DrainArgs),
    /// Allow or forbid placing new allocations on a node.
    Eligibility(EligibilityArgs),
}

#[derive(Debug, Args)]
pub struct NodeStatusArgs {
    /// A node ID or a unique prefix of one; all nodes when left out.
    pub id: Option<String>,
    /// The node of the agent the CLI talks to.
    #[arg(long = "self", conflicts_with = "id")]
    pub this_node: bool,
    /// Show the host's measured CPU, memory and disk usage.
    #[arg(long)]
    pub stats: bool,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("mode").required(true).args(["enable", "disable"])))]
pub struct DrainArgs {
    /// A node ID or a unique prefix of one.
    pub id: String,
    /// Start draining.
    #[arg(long)]
    pub enable: bool,
    /// Stop draining (the node becomes eligible again unless -keep-ineligible).
    #[arg(long)]
    pub disable: bool,
    /// How long allocations may take to move before they are stopped (Go
    /// duration such as 1h or 30m).
    #[arg(long, value_name = "DURATION", default_value = "1h", conflicts_with_all = ["force", "no_deadline"])]
    pub deadline: String,
    /// Stop every allocation at once.
    #[arg(long)]
    pub force: bool,
    /// Wait as long as the allocations take.
    #[arg(long = "no-deadline", conflicts_with = "force")]
    pub no_deadline: bool,
    /// Leave system jobs' allocations running on the node.
    #[arg(long = "ignore-system")]
    pub ignore_system: bool,
    /// With -disable: keep the node ineligible for new allocations.
    #[arg(long = "keep-ineligible")]
    pub keep_ineligible: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
    /// Return once the drain is set instead of following it to the end.
    #[arg(long)]
    pub detach: bool,
    /// Print the API's raw JSON answer (implies -detach).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("mode").required(true).args(["enable", "disable"])))]
pub struct EligibilityArgs {
    /// A node ID or a unique prefix of one.
    pub id: String,
    #[arg(long)]
    pub enable: bool,
    #[arg(long)]
    pub disable: bool,
    /// Print the API's raw JSON answer.
    #[arg(long)]
    pub json: bool,
}

/// Runs one node verb and returns its exit status.
pub fn run(args: NodeArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let client = args.api.client()?;
    match args.command {
        NodeCommand::Status(a) => status(&client, &a, out),
        NodeCommand::Drain(a) => drain(&client, &a, out),
        NodeCommand::Eligibility(a) => eligibility(&client, &a, out),
    }
}

fn node_id(client: &ApiClient, given: &str) -> anyhow::Result<String> {
    resolve_uuid_prefix(client, "/v1/nodes", "node", given)
}

/// The node of the agent the CLI talks to (Nomad's `getLocalNodeID`).
fn local_node_id(client: &ApiClient) -> anyhow::Result<String> {
    let info = client
        .get("/v1/agent/self", &[])
        .map_err(|e| anyhow::anyhow!("Error querying agent info: {e}"))?
        .body;
    let Some(stats) = info["stats"]["client"].as_object() else {
        bail!("Nomad not running in client mode");
    };
    match stats.get("node_id").and_then(Value::as_str) {
        Some(id) => Ok(id.to_string()),
        None => bail!("Failed to determine node ID"),
    }
}

fn status(client: &ApiClient, args: &NodeStatusArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let own = if args.this_node {
        Some(local_node_id(client)?)
    } else {
        None
    };
    let Some(given) = own.as_ref().or(args.id.as_ref()) else {
        let answer = client.get("/v1/nodes", &[])?;
        if args.view.json {
            write!(out, "{}", output::json(&answer.body))?;
        } else {
            let nodes: Vec<NodeView> = answer.decode().context("reading the node list")?;
            write!(out, "{}", output::nodes_table(&nodes, args.view.verbose))?;
        }
        return Ok(0);
    };
    let id = node_id(client, given)?;
    let base = format!("/v1/node/{}", path_segment(&id));
    let node = client.get(&base, &[])?;
    if args.view.json {
        write!(out, "{}", output::json(&node.body))?;
        return Ok(0);
    }
    let raw_node = node.body.clone();
    let node: NodeView = node.decode().context("reading the node")?;
    let allocs = client.get(&format!("{base}/allocations"), &[])?;
    let mut allocs: Vec<AllocView> = allocs.decode().context("reading the node's allocations")?;
    allocs.sort_by_key(|a| std::cmp::Reverse(a.create_index));
    write!(
        out,
        "{}",
        output::node_detail(&node, &allocs, now_nanos(), args.view.verbose)
    )?;
    if args.stats {
        super::usage::write_host_usage(client, &raw_node, out)?;
    }
    Ok(0)
}

/// The body of `POST /v1/node/:id/drain`. Deadline is in nanoseconds:
/// -1 forces the drain, 0 waits without limit.
pub fn drain_body(node_id: &str, args: &DrainArgs) -> anyhow::Result<Value> {
    if args.disable {
        return Ok(json!({
            "NodeID": node_id,
            "DrainSpec": null,
            "MarkEligible": !args.keep_ineligible,
        }));
    }
    let deadline: i64 = if args.force {
        -1
    } else if args.no_deadline {
        0
    } else {
        let d = herder::jobspec::parse_go_duration(&args.deadline)
            .map_err(|e| anyhow::anyhow!("-deadline: {e}"))?;
        i64::try_from(d.as_nanos()).context("-deadline is too long")?
    };
    Ok(json!({
        "NodeID": node_id,
        "DrainSpec": { "Deadline": deadline, "IgnoreSystemJobs": args.ignore_system },
        "MarkEligible": false,
    }))
}

fn drain(client: &ApiClient, args: &DrainArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = node_id(client, &args.id)?;
    let body = drain_body(&id, args)?;
    if args.enable && !args.yes && std::io::stdin().is_terminal() && !confirm(&id, out)? {
        writeln!(out, "Canceling drain")?;
        return Ok(0);
    }
    let answer = client
        .post(&format!("/v1/node/{}/drain", path_segment(&id)), &[], &body)
        .context("could not update the drain strategy")?;
    if args.json {
        write!(out, "{}", output::json(&answer.body))?;
    } else if args.enable {
        writeln!(out, "Node {id:?} drain strategy set")?;
        if !args.detach {
            follow_drain(client, &id, &MonitorOptions::default(), out)?;
        }
    } else {
        writeln!(out, "Node {id:?} drain strategy unset")?;
    }
    Ok(0)
}

/// Follows a drain until the server clears the node's drain strategy,
/// reporting each allocation the drainer stops, then until the node's
/// allocations have stopped. Stopping the CLI does not stop the drain.
pub fn follow_drain(
    client: &ApiClient,
    node_id: &str,
    options: &MonitorOptions,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let node_path = format!("/v1/node/{}", path_segment(node_id));
    let allocs_path = format!("{node_path}/allocations");
    let started = Instant::now();
    writeln!(
        out,
        "==> Monitoring node {node_id:?} drain; Ctrl-C stops monitoring, not the drain"
    )?;
    let mut reported = HashSet::new();
    let mut index = 0;
    let mut draining = true;
    loop {
        let answer = if index == 0 {
            client.get(&node_path, &[])?
        } else {
            client.get_blocking(&node_path, index, options.wait)?
        };
        let node: NodeView = answer.decode().context("reading the node")?;
        let allocs: Vec<AllocView> = client
            .get(&allocs_path, &[])?
            .decode()
            .context("reading the node's allocations")?;
        for alloc in allocs.iter().filter(|a| a.desired_status != "run") {
            if reported.insert(alloc.id.clone()) {
                writeln!(
                    out,
                    "    Allocation {:?} marked for migration",
                    output::short_id(&alloc.id, options.verbose)
                )?;
            }
        }
        if draining && node.drain_strategy.is_none() {
            draining = false;
            writeln!(out, "    Node {node_id:?} drain complete")?;
        }
        let still_running = allocs
            .iter()
            .filter(|a| reported.contains(&a.id))
            .any(|a| matches!(a.client_status.as_str(), "pending" | "running"));
        if !draining && !still_running {
            writeln!(
                out,
                "==> All marked allocations on node {node_id:?} have stopped"
            )?;
            return Ok(());
        }
        if started.elapsed() >= options.overall {
            bail!(
                "stopped following the drain of node {node_id:?} after {}; it goes on \
                 (see `herder node status {node_id}`)",
                humantime::format_duration(options.overall)
            );
        }
        if answer.index <= index {
            std::thread::sleep(options.poll);
        }
        index = index.max(answer.index);
    }
}

fn confirm(id: &str, out: &mut dyn Write) -> anyhow::Result<bool> {
    write!(
        out,
        "Are you sure you want to enable drain mode for node {id:?}? [y/N] "
    )?;
    out.flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// The body of `POST /v1/node/:id/eligibility`.
pub fn eligibility_body(node_id: &str, enable: bool) -> Value {
    let value = if enable { "eligible" } else { "ineligible" };
    json!({ "NodeID": node_id, "Eligibility": value })
}

fn eligibility(
    client: &ApiClient,
    args: &EligibilityArgs,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    if args.enable == args.disable {
        bail!("exactly one of -enable and -disable is required");
    }
    let id = node_id(client, &args.id)?;
    let answer = client
        .post(
            &format!("/v1/node/{}/eligibility", path_segment(&id)),
            &[],
            &eligibility_body(&id, args.enable),
        )
        .context("could not update scheduling eligibility")?;
    if args.json {
        write!(out, "{}", output::json(&answer.body))?;
    } else if args.enable {
        writeln!(
            out,
            "Node {id:?} scheduling eligibility set: eligible for scheduling"
        )?;
    } else {
        writeln!(
            out,
            "Node {id:?} scheduling eligibility set: ineligible for scheduling"
        )?;
    }
    Ok(0)
}
