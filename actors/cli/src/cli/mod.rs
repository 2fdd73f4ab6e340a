//! The `herder` command line: Nomad's verbs and flags.
//!
//! Nomad spells long flags with one dash (`-dev`, `-data-dir D`); clap wants
//! two. `nomad_style_args` rewrites a single-dash word into its double-dash
//! form before clap sees it, so both spellings work.
//!
//! The verbs other than `agent` are clients of a running agent's HTTP API
//! (see [`herder_api_client`]); each returns the process exit status Nomad
//! would use for the same outcome.

pub mod agent;
pub mod alloc;
pub mod alloc_logs;
pub mod bench;
pub mod eval;
pub mod job;
pub mod monitor;
pub mod node;
pub mod operator;
pub mod operator_raft;
pub mod output;
pub mod server;
pub mod sim;
pub mod system;
pub mod views;

#[cfg(test)]
mod fake_server;
#[cfg(test)]
mod verb_tests;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use herder_api_client::{ApiClient, ApiError, ClientConfig};
use std::ffi::OsString;

#[derive(Debug, Parser)]
#[command(
    name = "herder",
    version,
    about = "A cluster workload scheduler with Nomad's API",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a herder agent (server, client, or both with -dev).
    Agent(agent::AgentArgs),
    /// Submit, plan, inspect and stop jobs.
    Job(job::JobArgs),
    /// List nodes, drain them, set their scheduling eligibility.
    Node(node::NodeArgs),
    /// List and inspect evaluations.
    Eval(eval::EvalArgs),
    /// Inspect and stop allocations.
    Alloc(alloc::AllocArgs),
    /// Cluster-wide settings: the scheduler configuration, the Raft
    /// peers, the cluster key.
    Operator(operator::OperatorArgs),
    /// The cluster's servers (members, join, force-leave) and this
    /// server's scheduling workers.
    Server(server::ServerArgs),
    /// Cluster-wide maintenance (`system gc`).
    System(system::SystemArgs),
    /// Simulated nodes for scale tests (`sim nodes -count N -servers ADDR`).
    Sim(sim::SimArgs),
    /// Load generators (`bench cluster`).
    Bench(bench::BenchArgs),
    /// Print the version and the commit it was built from.
    Version,
}

/// `herder version`'s line, as `nomad version` prints its own:
/// `Herder v0.1.0 (<commit>)`; the commit is recorded at build time
/// (`actors/build.rs`), "unknown" when built outside git.
pub fn version_line() -> String {
    format!(
        "Herder v{} ({})",
        env!("CARGO_PKG_VERSION"),
        env!("HERDER_GIT_SHA")
    )
}

/// Runs a parsed command and returns the process exit status.
pub fn run(command: Command, out: &mut dyn std::io::Write) -> anyhow::Result<u8> {
    match command {
        Command::Agent(args) => agent::run(args).map(|()| 0),
        Command::Job(args) => job::run(args, out),
        Command::Node(args) => node::run(args, out),
        Command::Eval(args) => eval::run(args, out),
        Command::Alloc(args) => alloc::run(args, out),
        Command::Operator(args) => operator::run(args, out),
        Command::Server(args) => server::run(args, out),
        Command::System(args) => system::run(args, out),
        Command::Sim(args) => sim::run(args),
        Command::Bench(args) => bench::run(args, out),
        Command::Version => {
            writeln!(out, "{}", version_line())?;
            Ok(0)
        }
    }
}

/// How a client verb reaches the agent; accepted after any verb word.
#[derive(Clone, Debug, Default, Args)]
pub struct ApiFlags {
    /// The agent's HTTP address [default: $HERDER_ADDR, $NOMAD_ADDR,
    /// http://127.0.0.1:4646].
    #[arg(long = "address", value_name = "ADDR", global = true)]
    pub address: Option<String>,
    /// ACL token sent as X-Nomad-Token [default: $HERDER_TOKEN, $NOMAD_TOKEN].
    #[arg(long = "token", value_name = "TOKEN", global = true)]
    pub token: Option<String>,
    /// The namespace of jobs and their objects [default: $HERDER_NAMESPACE,
    /// $NOMAD_NAMESPACE, default]; `*` lists every namespace.
    #[arg(long = "namespace", value_name = "NAMESPACE", global = true)]
    pub namespace: Option<String>,
    /// The region to ask [default: $HERDER_REGION, $NOMAD_REGION, the
    /// agent's].
    #[arg(long = "region", value_name = "REGION", global = true)]
    pub region: Option<String>,
}

impl ApiFlags {
    /// A client for the agent these flags and the environment name.
    pub fn client(&self) -> Result<ApiClient, ApiError> {
        self.client_with_env(|key| std::env::var(key).ok())
    }

    /// As [`ApiFlags::client`], looking variables up with `env`.
    pub fn client_with_env(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ApiClient, ApiError> {
        let pick = |flag: &Option<String>, ours: &str, nomads: &str| {
            flag.clone()
                .or_else(|| env(ours).filter(|v| !v.is_empty()))
                .or_else(|| env(nomads).filter(|v| !v.is_empty()))
        };
        let namespace = pick(&self.namespace, "HERDER_NAMESPACE", "NOMAD_NAMESPACE");
        let region = pick(&self.region, "HERDER_REGION", "NOMAD_REGION");
        let config = ClientConfig::resolve(self.address.as_deref(), self.token.as_deref(), &env);
        Ok(ApiClient::new(config)?.with_scope(namespace, region))
    }
}

/// Output switches most read verbs share.
#[derive(Clone, Debug, Default, Args)]
pub struct ViewFlags {
    /// Print the API's raw JSON answer instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Full IDs and every event instead of short forms.
    #[arg(long)]
    pub verbose: bool,
}

/// `-t`: a Go template for the answer. herder renders the simple subset
/// (text and `{{.Field}}` / `{{.A.B}}` / `{{.}}` actions); anything else is
/// refused with a message saying so.
#[derive(Clone, Debug, Default, Args)]
pub struct TemplateFlag {
    /// Format the answer with a Go template (the `{{.Field}}` subset).
    #[arg(short = 't', value_name = "TEMPLATE")]
    pub template: Option<String>,
}

impl TemplateFlag {
    /// Renders `value` with the template, if one was given; refuses it
    /// together with `-json`, as Nomad does.
    pub fn render(&self, json: bool, value: &serde_json::Value) -> anyhow::Result<Option<String>> {
        let Some(template) = &self.template else {
            return Ok(None);
        };
        if json {
            bail!("Both json and template formatting are not allowed");
        }
        output::go_template(template, value).map(Some)
    }
}

/// Resolves a UUID or a unique prefix of one (as Nomad's CLI does) with
/// `GET <list_path>?prefix=`. `kind` names the object in messages.
pub fn resolve_uuid_prefix(
    client: &ApiClient,
    list_path: &str,
    kind: &str,
    given: &str,
) -> anyhow::Result<String> {
    if uuid::Uuid::parse_str(given).is_ok() && given.len() == 36 {
        return Ok(given.to_string());
    }
    if given.len() < 2 {
        bail!("Identifier must contain at least two characters.");
    }
    // The server looks prefixes up as bytes of the UUID, so Nomad's CLI
    // drops an odd trailing hex digit; do the same to work against Nomad.
    let even = &given[..given.len() - given.len() % 2];
    let ids = list_ids(client, list_path, even)?;
    pick_unique(ids, kind, given, |_| false)
}

/// Resolves a job ID or a unique prefix of one; an exact match wins.
pub fn resolve_job_id(client: &ApiClient, given: &str) -> anyhow::Result<String> {
    let ids = list_ids(client, "/v1/jobs", given)?;
    pick_unique(ids, "job", given, |id| id == given)
}

fn list_ids(client: &ApiClient, list_path: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
    let answer = client.get(list_path, &[("prefix", prefix.to_string())])?;
    let items = answer
        .body
        .as_array()
        .with_context(|| format!("GET {list_path}: expected a JSON array"))?;
    Ok(items
        .iter()
        .filter_map(|item| item.get("ID").and_then(|id| id.as_str()))
        .filter(|id| id.starts_with(prefix))
        .map(str::to_string)
        .collect())
}

fn pick_unique(
    mut ids: Vec<String>,
    kind: &str,
    given: &str,
    exact: impl Fn(&str) -> bool,
) -> anyhow::Result<String> {
    if let Some(found) = ids.iter().find(|id| exact(id)) {
        return Ok(found.clone());
    }
    match ids.len() {
        0 => bail!("No {kind} with prefix or id {given:?} found"),
        1 => Ok(ids.remove(0)),
        _ => bail!(
            "Prefix {given:?} matched multiple {kind}s; use more characters:\n{}",
            ids.join("\n")
        ),
    }
}

/// Unix time in nanoseconds, for "5m ago" columns.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Rewrites `-word` and `-word=value` into `--word...`; leaves short flags
/// (`-h`), negative numbers, `-` and everything after `--` alone.
pub fn nomad_style_args<I: IntoIterator<Item = OsString>>(args: I) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut passthrough = false;
    for (i, arg) in args.into_iter().enumerate() {
        if i == 0 || passthrough {
            out.push(arg);
            continue;
        }
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            passthrough = true;
            out.push(arg);
            continue;
        }
        let is_word_flag = text.len() > 2
            && text.starts_with('-')
            && !text.starts_with("--")
            && text[1..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic());
        if is_word_flag {
            out.push(OsString::from(format!("-{text}")));
        } else {
            out.push(arg);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(args: &[&str]) -> Vec<String> {
        nomad_style_args(args.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn single_dash_words_become_long_flags() {
        assert_eq!(
            rewrite(&[
                "herder",
                "agent",
                "-dev",
                "-data-dir=/x",
                "-h",
                "-5",
                "--",
                "-keep"
            ]),
            vec![
                "herder",
                "agent",
                "--dev",
                "--data-dir=/x",
                "-h",
                "-5",
                "--",
                "-keep"
            ]
        );
    }

    #[test]
    fn agent_flags_parse_in_nomad_spelling() {
        let cli = Cli::parse_from(nomad_style_args(
            [
                "herder",
                "agent",
                "-dev",
                "-http-port",
                "0",
                "-node",
                "n1",
                "-dc",
                "dc2",
            ]
            .iter()
            .map(OsString::from),
        ));
        let Command::Agent(a) = cli.command else {
            panic!("not the agent command");
        };
        assert!(a.dev);
        assert_eq!(a.http_port, Some(0));
        assert_eq!(a.node.as_deref(), Some("n1"));
        assert_eq!(a.dc.as_deref(), Some("dc2"));
    }
}
