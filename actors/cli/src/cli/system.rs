//! `herder system gc`: Nomad's system verbs against a running agent.

use super::flags::ApiFlags;
use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;
use std::io::Write;

#[derive(Debug, Args)]
pub struct SystemArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: SystemCommand,
}

#[derive(Debug, Subcommand)]
pub enum SystemCommand {
    /// Collect garbage now: terminal evaluations, allocations, jobs and
    /// down nodes, whatever their age.
    Gc,
}

pub fn run(args: SystemArgs, _out: &mut dyn Write) -> anyhow::Result<u8> {
    let client = args.api.client()?;
    match args.command {
        SystemCommand::Gc => {
            // Nomad's `system gc` prints nothing on success.
            client
                .put("/v1/system/gc", &[], &json!({}))
                .context("Error running system garbage-collection")?;
            Ok(0)
        }
    }
}
