//! `herder eval list|status`: inspect evaluations and why they could not
//! place allocations.

use super::flags::{ApiFlags, ViewFlags};
use super::lookup::resolve_uuid_prefix;
use super::output;
use super::views::EvalView;
use anyhow::Context;
use clap::{Args, Subcommand};
use herder_api_client::{path_segment, ApiClient};
use std::io::Write;

#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: EvalCommand,
}

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// List evaluations.
    List(EvalListArgs),
    /// Show one evaluation, with its placement failures.
    Status(EvalStatusArgs),
}

#[derive(Debug, Args)]
pub struct EvalListArgs {
    /// Only evaluations of this job.
    #[arg(long, value_name = "JOB")]
    pub job: Option<String>,
    /// Only evaluations with this status (pending, blocked, complete, ...).
    #[arg(long, value_name = "STATUS")]
    pub status: Option<String>,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct EvalStatusArgs {
    /// An evaluation ID or a unique prefix of one.
    pub id: String,
    #[command(flatten)]
    pub view: ViewFlags,
}

/// Runs one eval verb and returns its exit status.
pub fn run(args: EvalArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let client = args.api.client()?;
    match args.command {
        EvalCommand::List(a) => list(&client, &a, out),
        EvalCommand::Status(a) => status(&client, &a, out),
    }
}

fn list(client: &ApiClient, args: &EvalListArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let answer = client.get("/v1/evaluations", &[])?;
    let mut evals: Vec<EvalView> = answer.decode().context("reading the evaluation list")?;
    // Filtered here rather than with `filter=` so older servers work too.
    evals.retain(|e| args.job.as_ref().is_none_or(|j| &e.job_id == j));
    evals.retain(|e| args.status.as_ref().is_none_or(|s| &e.status == s));
    if args.view.json {
        let kept: Vec<&serde_json::Value> = answer
            .body
            .as_array()
            .into_iter()
            .flatten()
            .filter(|raw| {
                let id = raw.get("ID").and_then(|v| v.as_str()).unwrap_or_default();
                evals.iter().any(|e| e.id == id)
            })
            .collect();
        write!(out, "{}", output::json(&serde_json::json!(kept)))?;
    } else {
        write!(out, "{}", output::evals_table(&evals, args.view.verbose))?;
    }
    Ok(0)
}

fn status(client: &ApiClient, args: &EvalStatusArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = resolve_uuid_prefix(client, "/v1/evaluations", "evaluation", &args.id)?;
    let answer = client.get(&format!("/v1/evaluation/{}", path_segment(&id)), &[])?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let eval: EvalView = answer.decode().context("reading the evaluation")?;
    write!(out, "{}", output::eval_detail(&eval, args.view.verbose))?;
    Ok(0)
}
