//! `herder job run|plan|status|stop|inspect|validate|history|revert|
//! dispatch|scale|periodic force`: Nomad's job verbs against a running
//! agent.

use super::deployment::{monitor_deployment, DEPLOYMENT_MONITOR_LIMIT};
use super::flags::{ApiFlags, TemplateFlag, ViewFlags};
use super::lookup::resolve_job_id;
use super::monitor::{monitor, MonitorOptions};
use super::output::{self, now_nanos};
use super::views::{
    AllocView, DeploymentView, JobStub, JobSummaryView, JobView, PlanResponse, WriteResponse,
};
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use herder::jobspec::{self, JobspecError};
use herder::structs::Job;
use herder_api_client::{path_segment, ApiClient};
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
    /// Register a job file (HCL or JSON) and follow its evaluation and
    /// the deployment it starts.
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
    /// Show a job's stored versions and what changed between them.
    History(HistoryArgs),
    /// Register an earlier version of a job again.
    Revert(RevertArgs),
    /// Dispatch a parameterized job with an input and meta.
    Dispatch(DispatchArgs),
    /// Change a task group's count.
    Scale(ScaleArgs),
    /// Periodic jobs: `periodic force ID` launches a child now.
    Periodic(PeriodicArgs),
}

#[derive(Debug, Args)]
#[command(disable_version_flag = true)]
pub struct HistoryArgs {
    /// A job ID or a unique prefix of one.
    pub id: String,
    /// Show the changes between each version and the one before it.
    #[arg(short = 'p')]
    pub diff: bool,
    /// Show each version's whole job as JSON.
    #[arg(long)]
    pub full: bool,
    /// Only this version.
    #[arg(long = "version", value_name = "N")]
    pub version: Option<u64>,
    #[command(flatten)]
    pub view: ViewFlags,
    #[command(flatten)]
    pub template: TemplateFlag,
}

#[derive(Debug, Args)]
#[command(disable_version_flag = true)]
pub struct RevertArgs {
    /// A job ID or a unique prefix of one.
    pub id: String,
    /// The version to register again.
    pub version: u64,
    /// Return after reverting instead of following the evaluation.
    #[arg(long)]
    pub detach: bool,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct DispatchArgs {
    /// The parameterized job's ID.
    pub id: String,
    /// A file whose bytes are the payload; `-` reads standard input.
    pub input: Option<PathBuf>,
    /// A meta key and value for the child, `key=value`; repeatable.
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    pub meta: Vec<String>,
    /// A retry with the same token answers the child dispatched the first
    /// time instead of dispatching another.
    #[arg(long = "idempotency-token", value_name = "TOKEN")]
    pub idempotency_token: Option<String>,
    /// Put into the child's ID after `dispatch-`.
    #[arg(long = "id-prefix-template", value_name = "PREFIX")]
    pub id_prefix_template: Option<String>,
    /// Return after dispatching instead of following the evaluation.
    #[arg(long)]
    pub detach: bool,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// `JOB [GROUP] COUNT`: the group may be left out when the job has one.
    #[arg(num_args = 2..=3, value_name = "JOB [GROUP] COUNT", required = true)]
    pub args: Vec<String>,
    /// Return after scaling instead of following the evaluation.
    #[arg(long)]
    pub detach: bool,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct PeriodicArgs {
    #[command(subcommand)]
    pub command: PeriodicCommand,
}

#[derive(Debug, Subcommand)]
pub enum PeriodicCommand {
    /// Launch a periodic job's child now, whatever its schedule says.
    Force(PeriodicForceArgs),
}

#[derive(Debug, Args)]
pub struct PeriodicForceArgs {
    /// A periodic job's ID or a unique prefix of one.
    pub id: String,
    /// Return after launching instead of following the evaluation.
    #[arg(long)]
    pub detach: bool,
    #[command(flatten)]
    pub view: ViewFlags,
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
    /// Return after registering instead of following the evaluation and
    /// the deployment.
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
#[command(disable_version_flag = true)]
pub struct InspectArgs {
    /// A job ID or a unique prefix of one.
    pub id: String,
    /// Inspect this stored version instead of the current one.
    #[arg(long = "version", value_name = "N")]
    pub version: Option<u64>,
    /// Accepted for Nomad compatibility: the output is always JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub template: TemplateFlag,
}

/// Runs one job verb and returns its exit status.
pub fn run(args: JobArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    match args.command {
        JobCommand::Validate(file) => validate(&file, out),
        JobCommand::Run(run) if run.output => print_job_json(&run.job, out),
        JobCommand::Run(run) => register(&args.api.client()?, &run, out),
        // Nomad's plan exits 255 on any error so scripts can tell an error
        // from "changes" (1).
        JobCommand::Plan(plan_args) => {
            match args.api.client().and_then(|c| plan(&c, &plan_args, out)) {
                Ok(code) => Ok(code),
                Err(e) => {
                    eprintln!("Error: {e:#}");
                    Ok(EXIT_PLAN_ERROR)
                }
            }
        }
        JobCommand::Status(status_args) => status(&args.api.client()?, &status_args, out),
        JobCommand::Stop(stop_args) => stop(&args.api.client()?, &stop_args, out),
        JobCommand::Inspect(inspect_args) => inspect(&args.api.client()?, &inspect_args, out),
        JobCommand::History(a) => history(&args.api.client()?, &a, out),
        JobCommand::Revert(a) => revert(&args.api.client()?, &a, out),
        JobCommand::Dispatch(a) => dispatch(&args.api.client()?, &a, out),
        JobCommand::Scale(a) => scale(&args.api.client()?, &a, out),
        JobCommand::Periodic(PeriodicArgs {
            command: PeriodicCommand::Force(a),
        }) => periodic_force(&args.api.client()?, &a, out),
    }
}

/// Reads, parses and validates a job file, with `file:line:column` errors.
pub fn load_job(args: &JobFileArgs) -> anyhow::Result<Job> {
    load_job_noting_namespace(args).map(|(job, _)| job)
}

/// [`load_job`], and whether the file names the job's namespace itself
/// (when it does not, the `-namespace` flag or `NOMAD_NAMESPACE` decides).
pub fn load_job_noting_namespace(args: &JobFileArgs) -> anyhow::Result<(Job, bool)> {
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
    let job = parse_job_text(&text, &name, &vars).map_err(|e| anyhow::anyhow!("{e}"))?;
    let names_namespace = jobspec::job_text_names_namespace(&text, is_json_job(&text, &name));
    Ok((job, names_namespace))
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
    let (job, names_namespace) = load_job_noting_namespace(&args.job)?;
    let mut body = register_body(&job, args.check_index)?;
    if !names_namespace {
        // The agent takes the request's `?namespace=` (the -namespace
        // flag's), or `default`, for a job that names none.
        body["Job"]["Namespace"] = json!("");
    }
    let answer = client
        .put("/v1/jobs", &[], &body)
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
    let code = monitor(client, &response.eval_id, &options, out)?;
    if code != 0 {
        return Ok(code);
    }
    follow_new_deployment(client, &job.id, response.job_modify_index, &options, out)
}

/// Follows the deployment of the version just registered, if its
/// evaluation made one (the job's latest deployment, of this spec), to
/// its end.
fn follow_new_deployment(
    client: &ApiClient,
    job_id: &str,
    job_modify_index: u64,
    options: &MonitorOptions,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let path = format!("/v1/job/{}/deployment", path_segment(job_id));
    let latest: Option<DeploymentView> = client
        .get(&path, &[])?
        .decode()
        .context("reading the job's latest deployment")?;
    match latest {
        Some(d) if d.job_spec_modify_index == job_modify_index => {
            writeln!(out)?;
            monitor_deployment(client, &d.id, options, DEPLOYMENT_MONITOR_LIMIT, out)
        }
        _ => Ok(0),
    }
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
    let deployment = client.get(&format!("{base}/deployment"), &[])?;
    let allocs = client.get(&format!("{base}/allocations"), &[])?;
    let job: JobView = job.decode().context("reading the job")?;
    let summary: JobSummaryView = summary.decode().context("reading the job summary")?;
    let deployment: Option<DeploymentView> = deployment
        .decode()
        .context("reading the latest deployment")?;
    let mut allocs: Vec<AllocView> = allocs.decode().context("reading the allocations")?;
    allocs.sort_by_key(|a| std::cmp::Reverse(a.create_index));
    let text = output::job_status(
        &job,
        &summary,
        deployment.as_ref(),
        &allocs,
        now_nanos(),
        args.view.verbose,
    );
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
    let job = match args.version {
        None => {
            client
                .get(&format!("/v1/job/{}", path_segment(&id)), &[])?
                .body
        }
        Some(version) => find_version(&job_versions(client, &id, false)?.body, version)
            .cloned()
            .with_context(|| format!("job {id:?} has no version {version}"))?,
    };
    if let Some(text) = args.template.render(false, &job)? {
        writeln!(out, "{text}")?;
        return Ok(0);
    }
    write!(out, "{}", output::json(&json!({ "Job": job })))?;
    Ok(0)
}

fn job_versions(
    client: &ApiClient,
    id: &str,
    diffs: bool,
) -> anyhow::Result<herder_api_client::Answer> {
    let query = [("diffs", diffs.to_string())];
    client
        .get(&format!("/v1/job/{}/versions", path_segment(id)), &query)
        .context("Error retrieving job versions")
}

fn find_version(versions: &Value, version: u64) -> Option<&Value> {
    versions["Versions"]
        .as_array()?
        .iter()
        .find(|v| v["Version"].as_u64() == Some(version))
}

/// `job history [-p] [-full] [-version N] ID`: each stored version, newest
/// first, with its diff to the one before it.
fn history(client: &ApiClient, args: &HistoryArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = resolve_job_id(client, &args.id)?;
    let answer = job_versions(client, &id, args.diff)?.body;
    let versions = answer["Versions"].as_array().cloned().unwrap_or_default();
    let diffs: Vec<super::views::JobDiff> = match answer.get("Diffs") {
        Some(Value::Array(d)) => d
            .iter()
            .map(herder_api_client::decode_lenient)
            .collect::<Result<_, _>>()
            .context("reading the version diffs")?,
        _ => vec![],
    };
    let selected: Vec<usize> = match args.version {
        None => (0..versions.len()).collect(),
        Some(v) => {
            let at = versions
                .iter()
                .position(|j| j["Version"].as_u64() == Some(v))
                .with_context(|| format!("job {id:?} has no version {v}"))?;
            vec![at]
        }
    };
    let shown = match args.version {
        Some(_) => selected
            .first()
            .map_or(Value::Null, |i| versions[*i].clone()),
        None => Value::Array(versions.clone()),
    };
    if let Some(text) = args.template.render(args.view.json, &shown)? {
        writeln!(out, "{text}")?;
        return Ok(0);
    }
    if args.view.json {
        write!(out, "{}", output::json(&shown))?;
        return Ok(0);
    }
    let blocks: Vec<String> = selected
        .iter()
        .map(|i| output::job_version(&versions[*i], diffs.get(*i), args.full))
        .collect();
    write!(out, "{}", blocks.join("\n"))?;
    Ok(0)
}

/// `job revert ID VERSION`: registers that version again.
fn revert(client: &ApiClient, args: &RevertArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let id = resolve_job_id(client, &args.id)?;
    let body = json!({"JobID": id, "JobVersion": args.version});
    let answer = client
        .put(&format!("/v1/job/{}/revert", path_segment(&id)), &[], &body)
        .context("Error reverting job")?;
    follow_write(client, &answer, args.detach, &args.view, out)
}

/// Prints a write's answer (`-json`), its evaluation ID (`-detach`), or
/// follows its evaluation as `job run` does.
fn follow_write(
    client: &ApiClient,
    answer: &herder_api_client::Answer,
    detach: bool,
    view: &ViewFlags,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    if view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let response: WriteResponse = answer.decode().context("reading the answer")?;
    if !response.warnings.is_empty() {
        writeln!(out, "Job Warnings:\n{}\n", response.warnings.trim_end())?;
    }
    if detach || response.eval_id.is_empty() {
        writeln!(out, "Evaluation ID: {}", response.eval_id)?;
        return Ok(0);
    }
    let options = MonitorOptions {
        verbose: view.verbose,
        ..MonitorOptions::default()
    };
    monitor(client, &response.eval_id, &options, out)
}

/// `job dispatch [-meta k=v]... [-idempotency-token T] ID [INPUT|-]`.
fn dispatch(client: &ApiClient, args: &DispatchArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    use base64::Engine;
    let payload = match &args.input {
        None => Vec::new(),
        Some(path) if path.as_os_str() == "-" => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("Error reading input data")?;
            bytes
        }
        Some(path) => std::fs::read(path)
            .with_context(|| format!("Error reading input data {}", path.display()))?,
    };
    let mut meta = BTreeMap::new();
    for pair in &args.meta {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("Error parsing meta value: {pair}");
        };
        meta.insert(key.to_string(), value.to_string());
    }
    let mut body = json!({
        "JobID": args.id,
        "Meta": meta,
        "Payload": base64::engine::general_purpose::STANDARD.encode(&payload),
    });
    if let Some(token) = &args.idempotency_token {
        body["IdempotencyToken"] = json!(token);
    }
    if let Some(prefix) = &args.id_prefix_template {
        body["IdPrefixTemplate"] = json!(prefix);
    }
    let answer = client
        .put(
            &format!("/v1/job/{}/dispatch", path_segment(&args.id)),
            &[],
            &body,
        )
        .context("Failed to dispatch job")?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let child = answer.body["DispatchedJobID"].as_str().unwrap_or_default();
    let eval_id = answer.body["EvalID"].as_str().unwrap_or_default();
    let mut pairs = vec![("Dispatched Job ID", child.to_string())];
    if !eval_id.is_empty() {
        pairs.push((
            "Evaluation ID",
            output::short_id(eval_id, args.view.verbose),
        ));
    }
    write!(out, "{}", output::key_values(&pairs))?;
    if args.detach || eval_id.is_empty() {
        return Ok(0);
    }
    writeln!(out)?;
    let options = MonitorOptions {
        verbose: args.view.verbose,
        ..MonitorOptions::default()
    };
    monitor(client, eval_id, &options, out)
}

/// `job scale JOB [GROUP] COUNT`.
fn scale(client: &ApiClient, args: &ScaleArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let (job, group, count) = match args.args.as_slice() {
        [job, count] => (job, None, count),
        [job, group, count] => (job, Some(group.clone()), count),
        _ => bail!("Command requires at least two arguments and no more than three"),
    };
    let count: i64 = count
        .parse()
        .map_err(|e| anyhow::anyhow!("Failed to convert count string to int: {e}"))?;
    let id = resolve_job_id(client, job)?;
    let base = format!("/v1/job/{}/scale", path_segment(&id));
    let status = client.get(&base, &[]).context("Error querying job")?;
    let groups: Vec<String> = status.body["TaskGroups"]
        .as_object()
        .map(|g| g.keys().cloned().collect())
        .unwrap_or_default();
    let group = match group {
        Some(g) if groups.contains(&g) => g,
        Some(g) => bail!("Group {g} not found within job"),
        None if groups.len() == 1 => groups[0].clone(),
        None => bail!("Group name required"),
    };
    let body = json!({
        "Count": count,
        "Target": {"Job": id, "Group": group},
        "Message": "submitted using the herder CLI",
    });
    let answer = client
        .post(&base, &[], &body)
        .context("Error submitting scaling request")?;
    follow_write(client, &answer, args.detach, &args.view, out)
}

/// `job periodic force ID`.
fn periodic_force(
    client: &ApiClient,
    args: &PeriodicForceArgs,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let id = resolve_job_id(client, &args.id)?;
    let answer = client
        .post(
            &format!("/v1/job/{}/periodic/force", path_segment(&id)),
            &[],
            &json!({}),
        )
        .with_context(|| format!("Error forcing periodic job {id:?}"))?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let eval_id = answer.body["EvalID"].as_str().unwrap_or_default();
    if args.detach || eval_id.is_empty() {
        writeln!(out, "Force periodic successful\nEvaluation ID: {eval_id}")?;
        return Ok(0);
    }
    let options = MonitorOptions {
        verbose: args.view.verbose,
        ..MonitorOptions::default()
    };
    monitor(client, eval_id, &options, out)
}
