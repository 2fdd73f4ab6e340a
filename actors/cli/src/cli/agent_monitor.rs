//! `herder monitor`: an agent's log, live, as `nomad monitor` shows it
//! (`GET /v1/agent/monitor`): at a level of the watcher's choosing, which
//! leaves the agent's own output as it is; `-node-id` reads a client's log
//! through its server. Runs until interrupted or the agent stops.

use super::alloc_logs::copy_frames;
use super::flags::ApiFlags;
use anyhow::Context;
use clap::Args;
use std::io::Write;

#[derive(Debug, Args)]
pub struct MonitorArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    /// The most verbose level shown: trace, debug, info, warn or error.
    #[arg(long = "log-level", default_value = "info")]
    pub log_level: String,
    /// One JSON object per line.
    #[arg(long = "json")]
    pub json: bool,
    /// A client node's log (its ID), through the server.
    #[arg(long = "node-id", default_value = "")]
    pub node_id: String,
}

pub fn run(args: MonitorArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let client = args.api.client()?;
    let mut query = vec![("log_level", args.log_level.clone())];
    if args.json {
        query.push(("log_json", "true".to_string()));
    }
    if !args.node_id.is_empty() {
        query.push(("node_id", args.node_id.clone()));
    }
    let stream = client
        .get_stream("/v1/agent/monitor", &query)
        .context("Error starting monitor")?;
    copy_frames(stream, None, out)?;
    Ok(0)
}
