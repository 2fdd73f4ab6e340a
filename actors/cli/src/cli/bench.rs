//! `herder bench cluster`: the cluster load generator (`crate::bench`)
//! from the command line: presets, a progress line on stderr, a table or
//! `-json` at the end.

use crate::bench::workload::ClusterShape;
use crate::bench::{self, BenchConfig, Mix, ProgressSource, Report, Scenario};
use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Place J jobs x C allocations (or one system job) on N simulated
    /// nodes through a real server, and measure it.
    Cluster(ClusterArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ScenarioArg {
    Placement,
    System,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum MixArg {
    /// A fifth each: unconstrained, kernel name, node class, spread over
    /// racks, one datacenter.
    Mixed,
    /// A quarter spread over racks with a kernel-version constraint.
    User,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ProgressArg {
    /// The server's allocation-count gauge.
    Metrics,
    /// Job summaries from /v1/jobs, as a user's tooling reads them.
    Summaries,
}

#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Size: full (10,000 nodes, 1,000 jobs x 1,000), medium (1,000 nodes,
    /// 100 x 1,000) or ci (500 nodes, 100 x 200).
    #[arg(long, default_value = "full")]
    pub preset: String,
    /// Simulated nodes [default: the preset's].
    #[arg(long)]
    pub nodes: Option<usize>,
    /// Jobs [default: the preset's].
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Allocations per job [default: the preset's].
    #[arg(long)]
    pub count: Option<usize>,
    /// What to place.
    #[arg(long, value_enum, default_value = "placement")]
    pub scenario: ScenarioArg,
    /// Datacenters of the nodes.
    #[arg(long = "dc", value_delimiter = ',', default_value = "dc1,dc2")]
    pub datacenters: Vec<String>,
    /// Node classes, round-robin.
    #[arg(
        long = "class",
        value_delimiter = ',',
        default_value = "general,compute,memory"
    )]
    pub classes: Vec<String>,
    /// Racks (`meta.rack`).
    #[arg(long, default_value_t = 20)]
    pub racks: usize,
    /// CPU of each node, MHz.
    #[arg(long = "node-cpu", default_value_t = 20_000)]
    pub node_cpu_mhz: i64,
    /// Memory of each node, MB.
    #[arg(long = "node-memory", default_value_t = 65_536)]
    pub node_memory_mb: i64,
    /// Concurrent connections registering jobs.
    #[arg(long, default_value_t = 16)]
    pub submitters: usize,
    /// Register at most this many jobs per second in all (0: as fast as
    /// the submitters go), to measure evaluation latency at a given load.
    #[arg(long, default_value_t = 0)]
    pub rate: u32,
    /// Target a running server instead of starting one.
    #[arg(long)]
    pub address: Option<String>,
    /// The herder binary to start the server from [default: this one]:
    /// another build, to compare two builds in one sitting.
    #[arg(long = "server-binary")]
    pub server_binary: Option<PathBuf>,
    /// Data dir of the started server [default: a new temporary one].
    #[arg(long = "data-dir")]
    pub data_dir: Option<PathBuf>,
    /// Threads running the simulated nodes.
    #[arg(long = "sim-threads", default_value_t = 1)]
    pub sim_threads: usize,
    /// Longest wait for the placements, e.g. 10m.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Read every allocation back and check no node is over-committed.
    #[arg(long)]
    pub verify: bool,
    /// Percent of nodes that fail once half the allocations are placed and
    /// return once the server has marked them down.
    #[arg(long, default_value_t = 0)]
    pub churn: u32,
    /// Which jobs a placement run submits.
    #[arg(long, value_enum, default_value = "mixed")]
    pub mix: MixArg,
    /// How progress is followed (`summaries`: `/v1/jobs`, as an outside
    /// client does).
    #[arg(long, value_enum, default_value = "metrics")]
    pub progress: ProgressArg,
    /// Once every job is registered, submit one small job and time its
    /// placement behind the burst (the fair share's figure).
    #[arg(long)]
    pub probe: bool,
    /// Simulated nodes follow their allocations with a blocking query each
    /// (a connection per node, as real clients) and run them: the server's
    /// RSS as a fleet sees it, at the cost of their status reports.
    #[arg(long = "watch-allocs")]
    pub watch_allocs: bool,
    /// Do not restart the server on its data dir at the end.
    #[arg(long = "no-restart")]
    pub no_restart: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: BenchArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    match args.command {
        BenchCommand::Cluster(c) => cluster(c, out),
    }
}

fn cluster(args: ClusterArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    crate::logging::init("warn");
    let config = config_of(&args)?;
    // A live line on a terminal; in a log, a line every few seconds.
    let terminal = std::io::stderr().is_terminal();
    let last = std::cell::Cell::new(std::time::Instant::now());
    let progress = |line: &str| {
        if terminal {
            eprint!("\r\x1b[2K{line}");
            let _ = std::io::stderr().flush();
        } else if last.get().elapsed() >= Duration::from_secs(5) {
            last.set(std::time::Instant::now());
            eprintln!("{line}");
        }
    };
    let report = bench::run(&config, &progress)?;
    eprintln!();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        write_table(&report, out)?;
    }
    let ok = report.all_placed
        && report.overcommitted_nodes.unwrap_or(0) == 0
        && report
            .allocs_after_restart
            .is_none_or(|n| n == report.allocs_before_restart);
    Ok(if ok { 0 } else { 1 })
}

fn config_of(args: &ClusterArgs) -> anyhow::Result<BenchConfig> {
    let Some((nodes, jobs, count)) = BenchConfig::preset(&args.preset) else {
        bail!("-preset {:?}: use full, medium or ci", args.preset);
    };
    let binary = match &args.server_binary {
        Some(path) => path.clone(),
        None => std::env::current_exe().context("locating the herder binary")?,
    };
    Ok(BenchConfig {
        scenario: match args.scenario {
            ScenarioArg::Placement => Scenario::Placement,
            ScenarioArg::System => Scenario::System,
        },
        nodes: args.nodes.unwrap_or(nodes),
        jobs: args.jobs.unwrap_or(jobs),
        count: args.count.unwrap_or(count),
        shape: ClusterShape {
            datacenters: args.datacenters.clone(),
            classes: args.classes.clone(),
            racks: args.racks,
        },
        node_cpu_mhz: args.node_cpu_mhz,
        node_memory_mb: args.node_memory_mb,
        submitters: args.submitters,
        rate: args.rate,
        address: args.address.clone(),
        data_dir: args.data_dir.clone(),
        binary,
        sim_threads: args.sim_threads,
        timeout: args.timeout,
        verify: args.verify,
        restart: !args.no_restart,
        churn_percent: args.churn.min(100),
        probe: args.probe,
        watch_allocs: args.watch_allocs,
        mix: match args.mix {
            MixArg::Mixed => Mix::Mixed,
            MixArg::User => Mix::User,
        },
        progress: match args.progress {
            ProgressArg::Metrics => ProgressSource::Metrics,
            ProgressArg::Summaries => ProgressSource::Summaries,
        },
    })
}

/// The rows of what the cluster did: nodes, jobs, placements and
/// evaluations.
fn workload_rows(r: &Report) -> Vec<(&'static str, String)> {
    vec![
        (
            "Nodes",
            if r.nodes_watch_allocs {
                format!("{} (following and running their allocations)", r.nodes)
            } else {
                r.nodes.to_string()
            },
        ),
        (
            "Node registration",
            format!("{:.2}s", r.node_registration_secs),
        ),
        (
            "Jobs registered",
            format!(
                "{} in {:.2}s ({:.0}/s)",
                r.jobs_registered, r.job_register_secs, r.jobs_per_sec
            ),
        ),
        (
            "Allocations placed",
            format!("{}/{}", r.placed_allocs, r.expected_allocs),
        ),
        ("All placed", r.all_placed.to_string()),
        ("Placement time", format!("{:.2}s", r.placement_secs)),
        ("Placements/s", format!("{:.0}", r.placements_per_sec)),
        (
            "Eval latency p50/p99/max",
            format!(
                "{:.1} / {:.1} / {:.1} ms",
                r.eval_latency_ms.p50, r.eval_latency_ms.p99, r.eval_latency_ms.max
            ),
        ),
        (
            "Probe: placed after (backlog)",
            r.probe.as_ref().map_or("-".into(), |p| {
                format!(
                    "{} ({} allocations unplaced when sent at {:.2}s; its eval {})",
                    p.placed_ms
                        .map_or("not placed".into(), |ms| format!("{ms:.0} ms")),
                    p.backlog_allocs,
                    p.sent_at_secs,
                    r.probe_eval_ms
                        .map_or("-".into(), |ms| format!("{ms:.0} ms"))
                )
            }),
        ),
        (
            "Evals complete/blocked/failed",
            format!(
                "{} / {} / {}",
                r.evals_complete, r.evals_blocked, r.evals_failed
            ),
        ),
    ]
}

/// The rows of how the server did it: plans, scheduling time, its CPU
/// and memory, churn and the restart.
fn server_rows(r: &Report) -> Vec<(&'static str, String)> {
    let opt = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:.2}{unit}"));
    vec![
        (
            "Plans applied (partial)",
            format!(
                "{} ({}, {:.1}%)",
                r.plans_applied,
                r.plans_partial,
                r.partial_commit_rate * 100.0
            ),
        ),
        (
            "Placements refused by partial plans",
            format!("{}", r.refused_placements),
        ),
        (
            "Plan queue depth max",
            format!("{}", r.plan_queue_depth_max),
        ),
        (
            "Scheduling / plan submit time",
            format!(
                "{:.2}s / {:.2}s (longest eval {:.1} ms)",
                r.scheduler_busy_secs, r.plan_submit_secs, r.scheduler_max_ms
            ),
        ),
        (
            "Worker utilisation",
            format!("{:.0}%", r.worker_utilisation * 100.0),
        ),
        ("Server CPU", opt(r.server_cpu_secs, "s")),
        ("Server peak RSS", opt(r.server_peak_rss_mib, " MiB")),
        (
            "Churned nodes (allocations lost)",
            format!("{} ({})", r.churned_nodes, r.lost_allocs),
        ),
        (
            "Over-committed nodes",
            r.overcommitted_nodes.map_or("-".into(), |n| n.to_string()),
        ),
        ("Restart", opt(r.restart_secs, "s")),
        (
            "Allocations before / after restart",
            format!(
                "{} / {}",
                r.allocs_before_restart,
                r.allocs_after_restart.map_or("-".into(), |n| n.to_string())
            ),
        ),
    ]
}

/// The report as aligned `key = value` lines.
fn write_table(r: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    let mut rows = workload_rows(r);
    rows.extend(server_rows(r));
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, value) in rows {
        writeln!(out, "{key:<width$} = {value}")?;
    }
    Ok(())
}
