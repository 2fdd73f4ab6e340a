//! The `herder` command line: Nomad's verbs and flags.
//!
//! Nomad spells long flags with one dash (`-dev`, `-data-dir D`); clap wants
//! two. `nomad_style_args` rewrites a single-dash word into its double-dash
//! form before clap sees it, so both spellings work.
//!
//! The verbs other than `agent` are clients of a running agent's HTTP API
//! (see [`herder_api_client`]); each returns the process exit status Nomad
//! would use for the same outcome.

pub mod acl;
pub mod agent;
pub mod agent_monitor;
pub mod alloc;
pub mod alloc_exec;
pub mod alloc_fs;
pub mod alloc_logs;
pub mod bench;
pub mod deployment;
pub mod eval;
pub mod flags;
pub mod job;
pub mod lookup;
pub mod monitor;
pub mod namespace;
pub mod node;
pub mod operator;
pub mod operator_autopilot;
pub mod operator_debug;
pub mod operator_keyring;
pub mod operator_raft;
pub mod operator_snapshot;
pub mod output;
pub mod server;
pub mod service;
pub mod sim;
pub mod stats_output;
pub mod system;
pub mod tls;
pub mod usage;
pub mod var;
pub mod views;

#[cfg(test)]
mod fake_server;
#[cfg(test)]
mod verb_tests;

pub use flags::{ApiFlags, TemplateFlag, ViewFlags};
pub use lookup::{resolve_job_id, resolve_uuid_prefix};

use clap::{Parser, Subcommand};
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
    /// ACLs: bootstrap, policies, tokens and roles.
    Acl(acl::AclArgs),
    /// Run a herder agent (server, client, or both with -dev).
    Agent(agent::AgentArgs),
    /// Submit, plan, inspect and stop jobs.
    Job(job::JobArgs),
    /// List, inspect, create, update and delete namespaces.
    Namespace(namespace::NamespaceArgs),
    /// List nodes, drain them, set their scheduling eligibility.
    Node(node::NodeArgs),
    /// List and inspect evaluations.
    Eval(eval::EvalArgs),
    /// Inspect, promote, fail, pause and resume deployments.
    Deployment(deployment::DeploymentArgs),
    /// Inspect and stop allocations.
    Alloc(alloc::AllocArgs),
    /// Cluster-wide settings: the scheduler configuration, the Raft
    /// peers, the cluster key.
    Operator(operator::OperatorArgs),
    /// The cluster's servers (members, join, force-leave) and this
    /// server's scheduling workers.
    Server(server::ServerArgs),
    /// The native service catalog (`service list`, `service info NAME`).
    Service(service::ServiceArgs),
    /// Variables (`var list|get|put|purge`).
    Var(var::VarArgs),
    /// Cluster-wide maintenance (`system gc`).
    System(system::SystemArgs),
    /// Simulated nodes for scale tests (`sim nodes -count N -servers ADDR`).
    Sim(sim::SimArgs),
    /// Load generators (`bench cluster`).
    Bench(bench::BenchArgs),
    /// A development CA and certificates (`tls ca create`, `tls cert create`).
    Tls(tls::TlsArgs),
    /// Stream an agent's log at a level of your choosing (`-log-level`,
    /// `-json`, `-node-id`), as `nomad monitor`.
    Monitor(agent_monitor::MonitorArgs),
    /// Print the version and the commit it was built from.
    Version,
}

/// `herder version`'s line, as `nomad version` prints its own:
/// `Herder v0.3.0 (<commit>)`; the commit is recorded at build time
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
        Command::Acl(args) => acl::run(args, out),
        Command::Agent(args) => agent::run(args).map(|()| 0),
        Command::Job(args) => job::run(args, out),
        Command::Namespace(args) => namespace::run(args, out),
        Command::Node(args) => node::run(args, out),
        Command::Eval(args) => eval::run(args, out),
        Command::Deployment(args) => deployment::run(args, out),
        Command::Alloc(args) => alloc::run(args, out),
        Command::Operator(args) => operator::run(args, out),
        Command::Server(args) => server::run(args, out),
        Command::Service(args) => service::run(args, out),
        Command::Var(args) => var::run(args, out),
        Command::System(args) => system::run(args, out),
        Command::Sim(args) => sim::run(args),
        Command::Bench(args) => bench::run(args, out),
        Command::Tls(args) => tls::run(args, out),
        Command::Monitor(args) => agent_monitor::run(args, out),
        Command::Version => {
            writeln!(out, "{}", version_line())?;
            Ok(0)
        }
    }
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
