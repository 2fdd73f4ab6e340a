//! `herder agent`: load the configuration and run the agent until a signal.

use clap::Args;
use herder_common::config::{AgentConfig, ConfigSources, FlagOverrides};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Development mode: a server and a client in one process, on loopback,
    /// with a temporary data dir.
    #[arg(long)]
    pub dev: bool,
    /// A configuration file (TOML); may be repeated, later files win.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Vec<PathBuf>,
    /// Where state is kept.
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address the HTTP API binds.
    #[arg(long = "bind", value_name = "ADDR")]
    pub bind: Option<String>,
    /// Run a server.
    #[arg(long)]
    pub server: bool,
    /// Run a client.
    #[arg(long)]
    pub client: bool,
    /// This agent's name.
    #[arg(long = "node", value_name = "NAME")]
    pub node: Option<String>,
    /// This agent's datacenter.
    #[arg(long = "dc", value_name = "DC")]
    pub dc: Option<String>,
    /// Servers a client joins, comma-separated host:port.
    #[arg(long = "servers", value_name = "ADDR", value_delimiter = ',')]
    pub servers: Vec<String>,
    /// HTTP API port; 0 picks a free port and prints it.
    #[arg(long = "http-port", value_name = "PORT")]
    pub http_port: Option<u16>,
    /// Bind loopback only (sidecar next to an application).
    #[arg(long)]
    pub sidecar: bool,
    /// Servers the cluster forms with (Raft); see `[server]
    /// bootstrap_expect` in config/default.toml.
    #[arg(long = "bootstrap-expect", value_name = "N")]
    pub bootstrap_expect: Option<usize>,
    /// Another server's RPC address to join (repeatable).
    #[arg(long = "retry-join", value_name = "HOST:PORT")]
    pub retry_join: Vec<String>,
    /// The server-to-server port (default 4647).
    #[arg(long = "rpc-port", value_name = "PORT")]
    pub rpc_port: Option<u16>,
    /// The cluster key (base64; `herder operator gossip keygen`).
    #[arg(long = "encrypt", value_name = "KEY")]
    pub encrypt: Option<String>,
    /// Turn ACLs on (`[acl] enabled`).
    #[arg(long = "acl-enabled")]
    pub acl_enabled: bool,
    /// Log level: trace, debug, info, warn, error.
    #[arg(long = "log-level", value_name = "LEVEL")]
    pub log_level: Option<String>,
}

impl AgentArgs {
    /// The configuration layers these flags describe.
    pub fn sources(&self) -> ConfigSources {
        let mut flags = FlagOverrides {
            data_dir: self.data_dir.clone(),
            name: self.node.clone(),
            datacenter: self.dc.clone(),
            bind_addr: self.bind.clone(),
            log_level: self.log_level.clone(),
            sidecar: self.sidecar.then_some(true),
            ..Default::default()
        };
        if let Some(p) = self.http_port {
            flags.ports.insert("http".into(), p);
        }
        if let Some(p) = self.rpc_port {
            flags.ports.insert("rpc".into(), p);
        }
        if self.server {
            flags.server.insert("enabled".into(), true.into());
        }
        if let Some(n) = self.bootstrap_expect {
            flags.server.insert("bootstrap_expect".into(), n.into());
        }
        if !self.retry_join.is_empty() {
            flags
                .server
                .insert("retry_join".into(), serde_json::json!(self.retry_join));
        }
        if let Some(key) = &self.encrypt {
            flags.server.insert("encrypt".into(), key.clone().into());
        }
        if self.client {
            flags.client.insert("enabled".into(), true.into());
        }
        if self.acl_enabled {
            flags.acl.insert("enabled".into(), true.into());
        }
        if !self.servers.is_empty() {
            flags
                .client
                .insert("servers".into(), serde_json::json!(self.servers));
        }
        ConfigSources {
            dev: self.dev,
            files: self.config.clone(),
            env: None,
            flags,
        }
    }

    pub fn load_config(&self) -> anyhow::Result<AgentConfig> {
        Ok(AgentConfig::load(&self.sources())?)
    }
}

/// Loads the configuration, installs the log subscriber at its level,
/// then warns of the `HERDER_*` variables that were ignored (they could
/// not be logged before the subscriber existed).
fn load_and_init_logging(
    args: &AgentArgs,
) -> anyhow::Result<(AgentConfig, Option<crate::logging::LogLevel>)> {
    let (config, ignored) = AgentConfig::load_reporting_ignored(&args.sources())?;
    let level = crate::logging::init(&config.log_level);
    if !ignored.is_empty() {
        tracing::warn!("{}", herder_common::config::describe_ignored_env(&ignored));
    }
    Ok((config, level))
}

/// Runs the agent until SIGINT or SIGTERM, then shuts it down in order;
/// SIGHUP reloads what can change while it runs (the log level, the TLS
/// certificates); a second
/// SIGINT or SIGTERM during the shutdown exits at once.
pub fn run(args: AgentArgs) -> anyhow::Result<()> {
    let (config, log_level) = load_and_init_logging(&args)?;
    let temp = args.dev && args.data_dir.is_none();
    // The agent runs on threads of its own; this runtime only waits for
    // the signal.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // Listening before the agent says it is up: a signal sent as soon
        // as the address is printed finds its handler installed.
        let mut signals = Signals::new()?;
        let agent = herder_actors::agent::Agent::start(config, temp).await?;
        let addr = agent.http_addr();
        say(format_args!("==> herder agent started"));
        let scheme = if agent.config().tls.http {
            "https"
        } else {
            "http"
        };
        say(format_args!("    HTTP API: {scheme}://{addr}"));
        say(format_args!("    data dir: {}", agent.data_dir().display()));
        say(format_args!(
            "    roles:    server={} client={}",
            agent.config().server.enabled,
            agent.config().client.enabled
        ));
        while signals.next().await == Signal::Reload {
            reload(&args, log_level.as_ref());
        }
        say(format_args!(
            "==> caught signal, shutting down (again to exit at once)"
        ));
        exit_on_next_stop_signal();
        agent.shutdown().await;
        anyhow::Ok(())
    })
}

/// A line for the operator on stdout. The agent outlives whoever reads its
/// stdout (a supervisor's pipe, a terminal that closed): a line that cannot
/// be written is dropped, where `println!` would panic and skip the
/// graceful shutdown (the store's flush, the `-dev` data dir's removal).
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// SIGHUP: the configuration is read again and its reloadable parts
/// applied: the log level (`RUST_LOG`, when set, wins) and the TLS
/// certificates' files;
/// what else changed waits for a restart, and the agent says so.
fn reload(args: &AgentArgs, log_level: Option<&crate::logging::LogLevel>) {
    let config = match args.load_config() {
        Ok(config) => config,
        Err(e) => {
            tracing::error!(error = %e, "reload: the configuration is invalid; nothing changed");
            return;
        }
    };
    let applied = log_level.is_some_and(|l| l.set(&config.log_level));
    if applied {
        tracing::warn!(log_level = %config.log_level, "reloaded the configuration (other changes need a restart)");
    } else {
        tracing::warn!("reload: the log level is set by RUST_LOG; nothing changed");
    }
    reload_certificates();
}

/// Reads the TLS certificates and keys in use again from their files (the
/// paths the agent started with), so that a renewed certificate is
/// presented from the next connection on; one that does not read is
/// refused and the one in use kept.
fn reload_certificates() {
    for (cert, outcome) in herder_common::tls::reload_identities() {
        match outcome {
            Ok(()) => tracing::warn!(cert_file = %cert.display(), "reloaded the TLS certificate"),
            Err(e) => tracing::error!(error = %e, "reload: the TLS certificate was not changed"),
        }
    }
}

/// A second SIGINT or SIGTERM ends the process at once, whatever the
/// shutdown is waiting for (a task's `kill_timeout`, say): their default
/// action is restored, so the kernel ends the process without any of its
/// threads having to notice.
fn exit_on_next_stop_signal() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: resets the disposition of a signal to its default;
        // nothing of ours runs in a handler.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
}

/// What the agent is told by a signal.
#[derive(Debug, PartialEq, Eq)]
enum Signal {
    Stop,
    Reload,
}

struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::Stop,
            _ = self.term.recv() => Signal::Stop,
            _ = self.hup.recv() => Signal::Reload,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: AgentArgs,
    }

    fn client_servers(args: &[&str]) -> Vec<String> {
        let cli = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let sources = ConfigSources {
            env: Some(vec![]),
            ..cli.agent.sources()
        };
        let config = AgentConfig::load(&sources).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        config.client.servers
    }

    #[test]
    fn servers_is_the_clients_failover_list_from_the_flag_or_the_config_file() {
        let listed = ["10.0.0.1:4646", "10.0.0.2:4646", "10.0.0.3:4646"];
        let flag = client_servers(&[
            "agent",
            "--client",
            "--servers",
            "10.0.0.1:4646,10.0.0.2:4646",
            "--servers",
            "10.0.0.3:4646",
        ]);
        assert_eq!(flag, listed);

        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temporary dir: {e}"));
        let file = dir.path().join("client.toml");
        let text = "[client]\nenabled = true\nservers = [\"10.0.0.1:4646\", \"10.0.0.2:4646\", \"10.0.0.3:4646\"]\n";
        std::fs::write(&file, text).unwrap_or_else(|e| panic!("writing the file: {e}"));
        let path = file.to_str().unwrap_or_default();
        assert_eq!(client_servers(&["agent", "--config", path]), listed);
    }
}
