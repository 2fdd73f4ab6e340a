//! `herder sim nodes`: registers N simulated nodes with the servers and
//! keeps them alive (heartbeats, allocations run with the mock driver's
//! semantics) until Ctrl-C or SIGTERM. Progress goes to stderr.

use anyhow::bail;
use clap::{Args, Subcommand};
use herder_sim::{SimConfig, SimNodes, SimStats};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct SimArgs {
    #[command(subcommand)]
    pub command: SimCommand,
}

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Register and run N simulated nodes against the servers.
    Nodes(NodesArgs),
}

#[derive(Debug, Args)]
pub struct NodesArgs {
    /// How many nodes to simulate.
    #[arg(long, default_value_t = 100)]
    pub count: usize,
    /// Server HTTP addresses, comma-separated.
    #[arg(long, value_name = "ADDR", value_delimiter = ',', required = true)]
    pub servers: Vec<String>,
    /// Datacenters, assigned round-robin [default: dc1].
    #[arg(long = "dc", value_name = "DC", value_delimiter = ',')]
    pub datacenters: Vec<String>,
    /// Node classes, assigned round-robin.
    #[arg(long = "class", value_name = "CLASS", value_delimiter = ',')]
    pub classes: Vec<String>,
    /// Number of racks (`meta.rack` = r0, r1, ...; 0 for none).
    #[arg(long, default_value_t = 0)]
    pub racks: usize,
    /// CPU of each node, MHz.
    #[arg(long = "cpu", value_name = "MHZ", default_value_t = 4000)]
    pub cpu_mhz: i64,
    /// Memory of each node, MB.
    #[arg(long = "memory", value_name = "MB", default_value_t = 8192)]
    pub memory_mb: i64,
    /// Node meta, `key=value` (repeatable).
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    pub meta: Vec<String>,
    /// Node names are `<prefix>-<n>`.
    #[arg(long = "name-prefix", default_value = "sim")]
    pub name_prefix: String,
    /// Threads running the nodes (each with its own HTTP client).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Seconds between progress lines on stderr.
    #[arg(long = "progress-interval", default_value_t = 5)]
    pub progress_interval: u64,
}

pub fn run(args: SimArgs) -> anyhow::Result<u8> {
    match args.command {
        SimCommand::Nodes(nodes) => run_nodes(nodes),
    }
}

fn parse_meta(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut meta = BTreeMap::new();
    for pair in pairs {
        match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                meta.insert(k.to_string(), v.to_string());
            }
            _ => bail!("-meta {pair:?}: expected key=value"),
        }
    }
    Ok(meta)
}

fn run_nodes(args: NodesArgs) -> anyhow::Result<u8> {
    crate::logging::init("warn");
    let config = SimConfig {
        count: args.count,
        servers: args.servers,
        datacenters: args.datacenters,
        classes: args.classes,
        racks: args.racks,
        cpu_mhz: args.cpu_mhz,
        memory_mb: args.memory_mb,
        meta: parse_meta(&args.meta)?,
        name_prefix: args.name_prefix,
        threads: args.threads,
        ..SimConfig::default()
    };
    let count = config.count as u64;
    let started = Instant::now();
    let sim = SimNodes::start(config)?;
    eprintln!("==> simulating {count} nodes");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let every = Duration::from_secs(args.progress_interval.max(1));
    runtime.block_on(async {
        let mut ticker = tokio::time::interval(every);
        let mut all_registered = false;
        let signal = wait_for_signal();
        tokio::pin!(signal);
        loop {
            tokio::select! {
                _ = &mut signal => break,
                _ = ticker.tick() => {
                    let stats = sim.stats();
                    report(&stats, started);
                    if !all_registered && stats.registered >= count {
                        all_registered = true;
                        eprintln!(
                            "==> all {count} nodes registered in {:.1}s",
                            started.elapsed().as_secs_f64()
                        );
                    }
                }
            }
        }
    });
    eprintln!("==> caught signal, stopping the simulated nodes");
    sim.stop();
    Ok(0)
}

fn report(stats: &SimStats, started: Instant) {
    eprintln!("    [{:>6.0}s] {stats}", started.elapsed().as_secs_f64());
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
