//! `herder job run|plan|status|stop|inspect|validate`: Nomad's job verbs
//! against a running agent.

use super::monitor::{monitor, MonitorOptions};
use super::views::{AllocView, JobStub, JobSummaryView, JobView, PlanResponse, WriteResponse};
use super::{now_nanos, output, resolve_job_id, ApiFlags, ViewFlags};
use crate::api_client::{path_segment, ApiClient};
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use herder::jobspec::{self, JobspecError};
use herder::structs::Job;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;

/// Exit status of `job plan` when the plan itself failed (Nomad's).
pub const EXIT_PLAN_ERROR: u8 = 255;

#[derive(Debug, Args)]
pub struct JobArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: JobCommand,
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Register a job file (HCL or JSON) and follow its evaluation.
    Run(RunArgs),
    /// Dry-run a job file: what would change and whether it would fit.
    Plan(PlanArgs),
    /// List jobs, or show one job's summary and allocations.
    Status(StatusArgs),
    /// Stop (deregister) a job.
    Stop(StopArgs),
    /// Print a registered job as JSON.
    Inspect(InspectArgs),
    /// Check a job file locally without submitting it.
    Validate(JobFileArgs),
}

/// A job file and the values for its `variable` blocks.
#[derive(Debug, Args)]
pub struct JobFileArgs {
    /// The job file (HCL or JSON); `-` reads standard input.
    pub file: PathBuf,
    /// A value for one of the file's variables, `name=value`; repeatable.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub job: JobFileArgs,
    /// Return after registering instead of following the evaluation.
    #[arg(long)]
    pub detach: bool,
    /// Register only if the job's modify index is still N (0: only if the
    /// job does not exist yet).
    #[arg(long = "check-index", value_name = "N")]
    pub check_index: Option<u64>,
    /// Print the job as the API's JSON instead of submitting it.
    #[arg(long)]
    pub output: bool,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub job: JobFileArgs,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// A job ID or a unique prefix of one; all jobs when left out.
    pub id: Option<String>,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct StopArgs {
    /// A job ID or a unique prefix of one.
    pub id: String,
    /// Remove the job from the state entirely, not only stop it.
    #[arg(long)]
    pub purge: bool,
    /// Return after deregistering instead of following the evaluation.
    #[arg(long)]
    pub detach: bool,
    /// Accepted for Nomad compatibility; this verb never prompts.
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A job ID or a unique prefix of one.
    pub id: String,
}

/// Runs one job verb and returns its exit status.
pub fn run(args: JobArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    match args.command {
        JobCommand::Validate(file) => validate(&file, out),
        JobCommand::Run(run) if run.output => print_job_json(&run.job, out),
        JobCommand::Run(run) => register(&args.api.client()?, &run, out),
        // Nomad's plan exits 255 on any error so scripts can tell an error
        // from "changes" (1).
        JobCommand::Plan(plan_args) => match args
            .api
            .client()
            .map_err(anyhow::Error::from)
            .and_then(|c| plan(&c, &plan_args, out))
        {
            Ok(code) => Ok(code),
            Err(e) => {
                eprintln!("Error: {e:#}");
                Ok(EXIT_PLAN_ERROR)
            }
        },
        JobCommand::Status(status_args) => status(&args.api.client()?, &status_args, out),
        JobCommand::Stop(stop_args) => stop(&args.api.client()?, &stop_args, out),
        JobCommand::Inspect(inspect_args) => inspect(&args.api.client()?, &inspect_args, out),
    }
}

/// Reads, parses and validates a job file, with `file:line:column` errors.
pub fn load_job(args: &JobFileArgs) -> anyhow::Result<Job> {
    let name = args.file.display().to_string();
    let text = if name == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the job from standard input")?;
        text
    } else {
        std::fs::read_to_string(&args.file).with_context(|| format!("reading job file {name}"))?
    };
    let vars = parse_vars(&args.vars)?;
    if !vars.is_empty() && is_json_job(&text, &name) {
        bail!("{name}: -var applies to HCL job files; a JSON job has no variables");
    }
    parse_job_text(&text, &name, &vars).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Parses job text (HCL with variables, or JSON) and validates the job.
pub fn parse_job_text(
    text: &str,
    name: &str,
    vars: &BTreeMap<String, String>,
) -> Result<Job, JobspecError> {
    let is_json =
        name.to_ascii_lowercase().ends_with(".json") || text.trim_start().starts_with('{');
    let job = if is_json {
        jobspec::parse_any(text, name)?
    } else {
        jobspec::parse_hcl_with_vars(text, name, vars)?
    };
    job.validate().map_err(|source| JobspecError::Validation {
        file: name.to_string(),
        source,
    })?;
    Ok(job)
}

/// The same rule as `jobspec::parse_any`: a `.json` name or a leading `{`.
fn is_json_job(text: &str, name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".json") || text.trim_start().starts_with('{')
}

fn parse_vars(raw: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    raw.iter()
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() => {
                Ok((name.trim().to_string(), value.to_string()))
            }
            _ => bail!("-var {pair:?}: expected name=value"),
        })
        .collect()
}

fn job_json(job: &Job) -> anyhow::Result<Value> {
    serde_json::to_value(job).context("encoding the job as JSON")
}

fn validate(args: &JobFileArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    match load_job(args) {
        Ok(_) => {
            writeln!(out, "Job validation successful")?;
            Ok(0)
        }
        Err(e) => bail!("Job validation errors:\n{e:#}"),
    }
}

fn print_job_json(args: &JobFileArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let job = load_job(args)?;
    write!(out, "{}", output::json(&json!({ "Job": job_json(&job)? })))?;
    Ok(0)
}

/// The body of `PUT /v1/jobs`.
pub fn register_body(job: &Job, check_index: Option<u64>) -> anyhow::Result<Value> {
    let mut body = json!({ "Job": job_json(job)? });
    if let Some(index) = check_index {
        body["EnforceIndex"] = json!(true);
        body["JobModifyIndex"] = json!(index);
    }
    Ok(body)
}

fn register(client: &ApiClient, args: &RunArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let job = load_job(&args.job)?;
    let answer = client
        .put("/v1/jobs", &[], &register_body(&job, args.check_index)?)
        .context("could not submit the job")?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let response: WriteResponse = answer.decode().context("reading the register answer")?;
    if !response.warnings.is_empty() {
        writeln!(out, "Job Warnings:\n{}\n", response.warnings.trim_end())?;
    }
    // Periodic and parameterized jobs get no evaluation until launched.
    if response.eval_id.is_empty() {
        writeln!(out, "Job registration successful")?;
        return Ok(0);
    }
    if args.detach {
        writeln!(
            out,
            "Job registration successful\nEvaluation ID: {}",
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

/// The body of `POST /v1/job/:id/plan`.
pub fn plan_body(job: &Job) -> anyhow::Result<Value> {
    Ok(json!({ "Job": job_json(job)?, "Diff": true, "PolicyOverride": false }))
}

fn plan(client: &ApiClient, args: &PlanArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let job = load_job(&args.job)?;
    let path = format!("/v1/job/{}/plan", path_segment(&job.id));
    let answer = client
        .post(&path, &[], &plan_body(&job)?)
        .context("could not plan the job")?;
    let response: PlanResponse = answer.decode().context("reading the plan")?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
    } else {
        let file = args.job.file.display().to_string();
        write!(out, "{}", output::plan(&response, &file, args.view.verbose))?;
    }
    Ok(u8::from(output::plan_has_changes(&response)))
}

fn status(client: &ApiClient, args: &StatusArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let Some(given) = &args.id else {
        let answer = client.get("/v1/jobs", &[])?;
        if args.view.json {
            write!(out, "{}", output::json(&answer.body))?;
        } else {
            let jobs: Vec<JobStub> = answer.decode().context("reading the job list")?;
            write!(out, "{}", output::jobs_table(&jobs))?;
        }
        return Ok(0);
    };
    let id = resolve_job_id(client, given)?;
    let base = format!("/v1/job/{}", path_segment(&id));
    let job = client.get(&base, &[])?;
    if args.view.json {
        write!(out, "{}", output::json(&job.body))?;
        return Ok(0);
    }
    let summary = client.get(&format!("{base}/summary"), &[])?;
    let allocs = client.get(&format!("{base}/allocations"), &[])?;
    let job: JobView = job.decode().context("reading the job")?;
    let summary: JobSummaryView = summary.decode().context("reading the job summary")?;
    let mut allocs: Vec<AllocView> = allocs.decode().context("reading the allocations")?;
    allocs.sort_by_key(|a| std::cmp::Reverse(a.create_index));
    let text = output::job_status(&job, &summary, &allocs, now_nanos(), args.view.verbose);
    write!(out, "{text}")?;
    Ok(0)
}

fn stop(client: &ApiClient, args: &StopArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = resolve_job_id(client, &args.id)?;
    let mut query = Vec::new();
    if args.purge {
        query.push(("purge", "true".to_string()));
    }
    let answer = client
        .delete(&format!("/v1/job/{}", path_segment(&id)), &query)
        .context("could not stop the job")?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let response: WriteResponse = answer.decode().context("reading the deregister answer")?;
    if args.detach || response.eval_id.is_empty() {
        writeln!(
            out,
            "Job {id:?} deregistered\nEvaluation ID: {}",
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

fn inspect(client: &ApiClient, args: &InspectArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = resolve_job_id(client, &args.id)?;
    let answer = client.get(&format!("/v1/job/{}", path_segment(&id)), &[])?;
    write!(out, "{}", output::json(&json!({ "Job": answer.body })))?;
    Ok(0)
}
