//! The agent's configuration: typed, layered, and strict.
//!
//! Layers, lowest first: the documented defaults (`config/default.toml`,
//! compiled in), `config/dev.toml` for `-dev`, files given with `-config`,
//! `HERDER_*` environment variables (`__` separates nested keys), then flags.
//! figment merges the layers and remembers where each value came from, so an
//! unknown key or a bad value is reported with the key and its source.

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use herder::structs::JobType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The compiled-in defaults; every key is documented there.
pub const DEFAULT_TOML: &str = include_str!("../../../config/default.toml");
/// The overrides `-dev` applies.
pub const DEV_TOML: &str = include_str!("../../../config/dev.toml");

/// Environment variables the CLI reads that are not configuration keys.
const CLI_ENV: [&str; 6] = [
    "ADDR",
    "TOKEN",
    "NAMESPACE",
    "CACERT",
    "CLIENT_CERT",
    "CLIENT_KEY",
];

/// An agent's configuration. Every key, with its default and meaning, is
/// documented in `config/default.toml`; start from [`AgentConfig::dev`]
/// and change fields, or [`AgentConfig::load`] the binary's layers.
///
/// ```
/// let mut config = herder_common::config::AgentConfig::dev().expect("the defaults are valid");
/// config.client.enabled = false;
/// config.server.num_schedulers = Some(1);
/// assert_eq!(config.ports.http, 0, "dev() picks a free port");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Where state is kept (the server's under `server/`, the client's
    /// allocations under `alloc/`).
    pub data_dir: PathBuf,
    /// This agent's name; the machine's hostname when empty.
    pub name: String,
    pub region: String,
    pub datacenter: String,
    /// The address the HTTP API binds (an IP address).
    pub bind_addr: String,
    /// The `herder` binary's log level (trace, debug, info, warn, error).
    /// An embedded agent installs no log subscriber and ignores it: the
    /// application's `tracing` subscriber decides.
    pub log_level: String,
    /// Serve the profiling endpoints (`/v1/agent/pprof/*`) to anyone who
    /// can reach the API (Nomad's `enable_debug`; `-dev` sets it).
    pub enable_debug: bool,
    /// Bind the HTTP API to 127.0.0.1 whatever `bind_addr` says.
    pub sidecar: bool,
    pub ports: Ports,
    /// Addresses other agents reach this one at.
    pub advertise: Advertise,
    /// Bounds on requests and jobs (`[limits]`).
    pub limits: Limits,
    pub server: ServerConfig,
    pub client: ClientConfig,
    /// TLS on the HTTP API and the RPC port (`[tls]`).
    pub tls: TlsConfig,
    /// Access control on the HTTP API (`[acl]`).
    pub acl: AclConfig,
}

/// Access control (`[acl]` in `config/default.toml`; Nomad's `acl`
/// block). Off by default: every request is then allowed, as before.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AclConfig {
    /// Every request needs a token whose policies allow it.
    pub enabled: bool,
    /// How long a client-only agent keeps what a server said a token
    /// resolves to (Nomad's `token_ttl`)...
    #[serde(with = "humantime_serde")]
    pub token_ttl: Duration,
    /// ... and its policies (Nomad's `policy_ttl`): herder resolves both
    /// in one call, so the shorter of the two applies.
    #[serde(with = "humantime_serde")]
    pub policy_ttl: Duration,
}

impl Default for AclConfig {
    /// Off, with Nomad's 30 s cache lifetimes.
    fn default() -> Self {
        AclConfig {
            enabled: false,
            token_ttl: Duration::from_secs(30),
            policy_ttl: Duration::from_secs(30),
        }
    }
}

/// The ports the agent listens on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ports {
    /// The HTTP API's port; 0 picks a free one (`Agent::http_addr` tells).
    pub http: u16,
    /// The server-to-server port of a server in a cluster.
    pub rpc: u16,
}

/// Addresses other agents reach this one at (`[advertise]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Advertise {
    /// The RPC address other servers dial; empty derives it from
    /// `bind_addr` ([`AgentConfig::rpc_advertise`]).
    pub rpc: String,
}

/// Bounds on what a request or a job may cost (`[limits]` in
/// `config/default.toml`, which documents each).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub http_max_body_bytes: usize,
    #[serde(with = "humantime_serde")]
    pub http_body_read_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub http_cpu_work_timeout: Duration,
    pub json_max_nesting_depth: usize,
    pub hcl_max_source_bytes: usize,
    pub hcl_max_nesting_depth: usize,
    pub hcl_max_expansion_bytes: usize,
    pub filter_max_bytes: usize,
    pub filter_max_depth: usize,
    pub max_job_bytes: usize,
    pub max_task_groups: usize,
    pub max_tasks_per_job: usize,
    pub max_count_per_group: i64,
    pub max_allocs_per_job: i64,
    pub max_name_bytes: usize,
    pub snapshot_max_bytes: usize,
}

impl Default for Limits {
    /// The documented defaults of `config/default.toml`.
    fn default() -> Self {
        Figment::from(Toml::string(DEFAULT_TOML))
            .extract_inner("limits")
            .expect("the compiled-in [limits] are complete (tested below)")
    }
}

impl Limits {
    /// A limit of zero would refuse everything: always a mistake.
    fn check(&self) -> Result<(), String> {
        let l = self;
        let sizes = [
            ("http_max_body_bytes", l.http_max_body_bytes),
            ("json_max_nesting_depth", l.json_max_nesting_depth),
            ("snapshot_max_bytes", l.snapshot_max_bytes),
            ("hcl_max_source_bytes", l.hcl_max_source_bytes),
            ("hcl_max_nesting_depth", l.hcl_max_nesting_depth),
            ("hcl_max_expansion_bytes", l.hcl_max_expansion_bytes),
            ("filter_max_bytes", l.filter_max_bytes),
            ("filter_max_depth", l.filter_max_depth),
            ("max_job_bytes", l.max_job_bytes),
            ("max_task_groups", l.max_task_groups),
            ("max_tasks_per_job", l.max_tasks_per_job),
            ("max_name_bytes", l.max_name_bytes),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(format!("limits.{name}: must be at least 1"));
        }
        if let Some(name) = l.job_limits().above_ceiling() {
            return Err(format!(
                "limits.{name}: above the most any server can schedule ({:?})",
                herder::structs::validate::JobLimits::CEILING
            ));
        }
        if l.max_count_per_group < 1 || l.max_allocs_per_job < 1 {
            return Err(
                "limits.max_count_per_group and max_allocs_per_job: must be at least 1".into(),
            );
        }
        if l.http_body_read_timeout.is_zero() || l.http_cpu_work_timeout.is_zero() {
            return Err(
                "limits.http_body_read_timeout and http_cpu_work_timeout: must be positive".into(),
            );
        }
        Ok(())
    }

    /// The limits a job is validated against.
    pub fn job_limits(&self) -> herder::structs::validate::JobLimits {
        herder::structs::validate::JobLimits {
            max_task_groups: self.max_task_groups,
            max_tasks: self.max_tasks_per_job,
            max_group_count: self.max_count_per_group,
            max_allocs: self.max_allocs_per_job,
            max_name_bytes: self.max_name_bytes,
        }
    }
}

/// The server role (`[server]` in `config/default.toml`, which documents
/// each key).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Run a server.
    pub enabled: bool,
    /// Scheduling workers: unset means one per CPU, 0 means none (as Nomad).
    #[serde(default)]
    pub num_schedulers: Option<usize>,
    pub enabled_schedulers: Vec<String>,
    #[serde(with = "humantime_serde")]
    pub min_heartbeat_ttl: Duration,
    pub max_heartbeats_per_second: f64,
    #[serde(with = "humantime_serde")]
    pub heartbeat_grace: Duration,
    #[serde(with = "humantime_serde")]
    pub failover_heartbeat_ttl: Duration,
    #[serde(with = "humantime_serde")]
    pub eval_nack_timeout: Duration,
    pub eval_delivery_limit: u32,
    #[serde(with = "humantime_serde")]
    pub eval_nack_initial_reenqueue_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub eval_nack_subsequent_reenqueue_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub max_lost_duration: Duration,
    #[serde(with = "humantime_serde")]
    pub max_flaky_duration: Duration,
    #[serde(with = "humantime_serde")]
    pub eval_gc_threshold: Duration,
    #[serde(with = "humantime_serde")]
    pub job_gc_threshold: Duration,
    #[serde(with = "humantime_serde")]
    pub node_gc_threshold: Duration,
    #[serde(with = "humantime_serde")]
    pub deployment_gc_threshold: Duration,
    /// How long an expired ACL token stays before the GC removes it.
    #[serde(with = "humantime_serde")]
    pub acl_token_gc_threshold: Duration,
    #[serde(with = "humantime_serde")]
    pub gc_interval: Duration,
    /// Servers the cluster forms with (Raft); 0 or 1 with no `retry_join`
    /// is a single server without Raft.
    pub bootstrap_expect: usize,
    /// Other servers' RPC addresses to join.
    pub retry_join: Vec<String>,
    /// The cluster key (base64); required in a cluster.
    pub encrypt: String,
    pub raft_snapshot_threshold: u64,
    pub raft_trailing_logs: u64,
    #[serde(with = "humantime_serde")]
    pub dead_server_cleanup: Duration,
}

impl ServerConfig {
    /// Whether this server runs in a Raft cluster (see `config/default.toml`,
    /// `[server] bootstrap_expect`). A data dir that already holds a Raft
    /// log is a cluster member whatever this says (the agent checks that).
    pub fn clustered(&self) -> bool {
        self.enabled && (self.bootstrap_expect > 1 || !self.retry_join.is_empty())
    }
}

/// The client role (`[client]` in `config/default.toml`, which documents
/// each key).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Run a client: fingerprint this machine and run tasks on it.
    pub enabled: bool,
    pub servers: Vec<String>,
    pub node_class: String,
    pub node_pool: String,
    pub meta: BTreeMap<String, String>,
    pub drivers: Vec<String>,
    /// Offer `raw_exec` (no isolation, the agent's own user): off unless
    /// set, as Nomad's `plugin "raw_exec" { config { enabled = true } }`.
    pub raw_exec_enabled: bool,
    /// Host paths the `exec` driver bind-mounts (read-only) into each task's
    /// chroot: host path => path inside the chroot (Nomad's `chroot_env`).
    pub chroot_env: BTreeMap<String, String>,
    pub readiness_check: String,
    pub reserved_cpu: i64,
    pub reserved_memory_mb: i64,
    pub reserved_disk_mb: i64,
    /// Host volumes this client offers, by name (Nomad's `host_volume`).
    pub host_volumes: BTreeMap<String, HostVolumeConfig>,
}

/// One host volume a client offers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostVolumeConfig {
    pub path: PathBuf,
    #[serde(default)]
    pub read_only: bool,
}

/// TLS on the agent's ports (`[tls]` in `config/default.toml`, which
/// documents each key; Nomad's `tls` block). The rustls configurations are
/// made from it by [`crate::tls`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub http: bool,
    pub rpc: bool,
    /// Empty: not given.
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub verify_server_hostname: bool,
    pub verify_https_client: bool,
}

impl TlsConfig {
    /// The files that make it up, empty paths left out.
    pub fn files(&self) -> crate::tls::TlsFiles {
        let given = |p: &PathBuf| (!p.as_os_str().is_empty()).then(|| p.clone());
        crate::tls::TlsFiles {
            ca_file: given(&self.ca_file),
            cert_file: given(&self.cert_file),
            key_file: given(&self.key_file),
        }
    }

    /// Whether any port speaks TLS.
    pub fn enabled(&self) -> bool {
        self.http || self.rpc
    }

    /// Every file given and readable, the key the certificate's.
    fn check(&self) -> Result<(), String> {
        if !self.enabled() {
            return Ok(());
        }
        let files = self.files();
        let missing = [
            ("tls.ca_file", &files.ca_file),
            ("tls.cert_file", &files.cert_file),
            ("tls.key_file", &files.key_file),
        ];
        if let Some((key, _)) = missing.iter().find(|(_, f)| f.is_none()) {
            return Err(format!(
                "{key}: required when tls.http or tls.rpc is set (`herder tls ca create` and \
                 `herder tls cert create` make a development CA and certificates)"
            ));
        }
        crate::tls::check_files(&files).map_err(|e| e.to_string())
    }
}

/// Values given as command-line flags: the top layer. `None` leaves the
/// lower layers' value.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FlagOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub datacenter: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind_addr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar: Option<bool>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ports: BTreeMap<String, u16>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub server: BTreeMap<String, serde_json::Value>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub client: BTreeMap<String, serde_json::Value>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub acl: BTreeMap<String, serde_json::Value>,
}

/// Where the configuration comes from.
#[derive(Clone, Debug, Default)]
pub struct ConfigSources {
    pub dev: bool,
    pub files: Vec<PathBuf>,
    /// Environment variables to read; `None` reads the process environment.
    /// Tests pass their own so they do not race on process state.
    pub env: Option<Vec<(String, String)>>,
    pub flags: FlagOverrides,
}

/// Why a configuration was refused; the message names the key and where
/// its value came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration file {0}: not found")]
    MissingFile(PathBuf),
    #[error("configuration: {0}")]
    Invalid(String),
}

impl AgentConfig {
    /// `-dev`'s configuration with the HTTP API on a free port, reading
    /// neither files nor the environment: the starting point of a program
    /// that embeds herder (change fields, then `Agent::start`).
    pub fn dev() -> Result<AgentConfig, ConfigError> {
        let mut flags = FlagOverrides::default();
        flags.ports.insert("http".into(), 0);
        AgentConfig::load(&ConfigSources {
            dev: true,
            env: Some(Vec::new()),
            flags,
            ..Default::default()
        })
    }

    /// Merges every layer and checks the result. `HERDER_*` environment
    /// variables that name no configuration key are ignored, with a
    /// `tracing` warning naming them.
    pub fn load(sources: &ConfigSources) -> Result<AgentConfig, ConfigError> {
        let (config, ignored) = AgentConfig::load_reporting_ignored(sources)?;
        if !ignored.is_empty() {
            tracing::warn!("{}", describe_ignored_env(&ignored));
        }
        Ok(config)
    }

    /// [`AgentConfig::load`], answering the names of the ignored `HERDER_*`
    /// variables instead of logging them (the binary loads its
    /// configuration before it can log).
    pub fn load_reporting_ignored(
        sources: &ConfigSources,
    ) -> Result<(AgentConfig, Vec<String>), ConfigError> {
        let ignored = ignored_env_names(sources.env.as_deref());
        Ok((AgentConfig::merge_layers(sources)?, ignored))
    }

    fn merge_layers(sources: &ConfigSources) -> Result<AgentConfig, ConfigError> {
        let mut fig = Figment::from(Toml::string(DEFAULT_TOML));
        if sources.dev {
            fig = fig.merge(Toml::string(DEV_TOML));
        }
        for file in &sources.files {
            if !file.is_file() {
                return Err(ConfigError::MissingFile(file.clone()));
            }
            fig = fig.merge(Toml::file_exact(file));
        }
        fig = merge_env(fig, sources.env.as_deref());
        fig = fig.merge(Serialized::defaults(&sources.flags));
        let config: AgentConfig = fig
            .extract()
            .map_err(|e| ConfigError::Invalid(describe_figment_error(e)))?;
        config.check()?;
        Ok(config)
    }

    /// Checks the values no type can express.
    fn check(&self) -> Result<(), ConfigError> {
        let bad = |msg: String| Err(ConfigError::Invalid(msg));
        if !matches!(
            self.log_level.as_str(),
            "trace" | "debug" | "info" | "warn" | "error"
        ) {
            return bad(format!(
                "log_level: must be one of trace, debug, info, warn, error; got {:?}",
                self.log_level
            ));
        }
        if self.bind_addr.parse::<std::net::IpAddr>().is_err() {
            return bad(format!(
                "bind_addr: {:?} is not an IP address",
                self.bind_addr
            ));
        }
        if let Err(e) = parse_enabled_schedulers(&self.server.enabled_schedulers) {
            return bad(format!("server.enabled_schedulers: {e}"));
        }
        if self.server.max_heartbeats_per_second <= 0.0 {
            return bad("server.max_heartbeats_per_second: must be positive".into());
        }
        if self.server.eval_delivery_limit == 0 {
            return bad("server.eval_delivery_limit: must be at least 1".into());
        }
        self.limits.check().map_err(ConfigError::Invalid)?;
        self.tls.check().map_err(ConfigError::Invalid)?;
        if self.server.clustered() && self.server.encrypt.trim().is_empty() {
            return bad(
                "server.encrypt: a server in a cluster (bootstrap_expect > 1 or retry_join) needs the \
                 cluster key (-encrypt; `herder operator gossip keygen` prints one)"
                    .into(),
            );
        }
        if self.server.raft_snapshot_threshold == 0 {
            return bad("server.raft_snapshot_threshold: must be at least 1".into());
        }
        if !self.server.enabled && !self.client.enabled {
            return bad(
                "neither server.enabled nor client.enabled is set: give -server, -client or -dev"
                    .into(),
            );
        }
        if self.client.enabled && !self.server.enabled && self.client.servers.is_empty() {
            return bad(
                "client.servers: a client without a local server needs servers to join (-servers)"
                    .into(),
            );
        }
        Ok(())
    }

    /// The address the HTTP API binds: loopback when `sidecar` is set.
    pub fn http_bind(&self) -> (String, u16) {
        let host = if self.sidecar {
            "127.0.0.1".to_string()
        } else {
            self.bind_addr.clone()
        };
        (host, self.ports.http)
    }

    /// The address other servers reach this server's RPC port at, given the
    /// port actually bound: `advertise.rpc` (its port, if it names one,
    /// wins), else `bind_addr`, else (bound to every interface) the
    /// address this machine routes outside traffic from.
    pub fn rpc_advertise(&self, bound_port: u16) -> String {
        let configured = self.advertise.rpc.trim();
        if !configured.is_empty() {
            if configured.parse::<std::net::SocketAddr>().is_ok() || configured.contains(':') {
                return configured.to_string();
            }
            return format!("{configured}:{bound_port}");
        }
        self.http_advertise(bound_port)
    }

    /// The address clients and other servers reach this agent's HTTP API
    /// at, given the port actually bound: the bind address, or (bound to
    /// every interface) the address this machine routes outside traffic
    /// from.
    pub fn http_advertise(&self, bound_port: u16) -> String {
        let (host, _) = self.http_bind();
        let ip: std::net::IpAddr = host
            .parse()
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        let ip = if ip.is_unspecified() {
            outbound_ip().unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
        } else {
            ip
        };
        std::net::SocketAddr::new(ip, bound_port).to_string()
    }

    /// This agent's name: `name`, or the machine's hostname when empty.
    pub fn name_or_hostname(&self) -> String {
        if !self.name.is_empty() {
            return self.name.clone();
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "herder".to_string())
    }

    /// Worker count in effect: `num_schedulers`, or one per CPU when unset.
    pub fn effective_num_schedulers(&self) -> usize {
        self.server
            .num_schedulers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

/// The local address outside traffic leaves from (no packet is sent: a UDP
/// socket's `connect` only picks the route).
fn outbound_ip() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// The message naming ignored environment variables.
pub fn describe_ignored_env(names: &[String]) -> String {
    format!(
        "ignoring environment variables that name no configuration key: {} \
         (keys are documented in config/default.toml; `__` separates nested keys)",
        names.join(", ")
    )
}

/// Every configuration key, as the defaults serialize (an unset optional
/// key is `null`, a free-form map such as `client.meta` an empty object).
fn known_keys() -> &'static serde_json::Value {
    static KNOWN: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    KNOWN.get_or_init(|| {
        Figment::from(Toml::string(DEFAULT_TOML))
            .extract::<AgentConfig>()
            .ok()
            .and_then(|c| serde_json::to_value(c).ok())
            .unwrap_or_default()
    })
}

/// Whether `HERDER_<rest>` names a configuration key: each `__`-separated
/// part is a key of the table above it (any key inside a free-form map).
fn is_config_env(rest: &str) -> bool {
    let mut at = known_keys();
    for part in rest.split("__") {
        match at {
            serde_json::Value::Object(map) if map.is_empty() => return true,
            serde_json::Value::Object(map) => match map.get(&part.to_lowercase()) {
                Some(next) => at = next,
                None => return false,
            },
            _ => return false,
        }
    }
    true
}

/// Whether the loader reads the variable `HERDER_<rest>`.
fn is_read_env(rest: &str) -> bool {
    !CLI_ENV.contains(&rest) && is_config_env(rest)
}

/// The `HERDER_*` variables (of `vars`, or the process) that are neither
/// configuration keys nor the CLI's own, sorted.
fn ignored_env_names(vars: Option<&[(String, String)]>) -> Vec<String> {
    let names: Vec<String> = match vars {
        Some(vars) => vars.iter().map(|(k, _)| k.clone()).collect(),
        None => std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .collect(),
    };
    let mut ignored: Vec<String> = names
        .into_iter()
        .filter(|k| {
            k.strip_prefix("HERDER_")
                .is_some_and(|rest| !CLI_ENV.contains(&rest) && !is_config_env(rest))
        })
        .collect();
    ignored.sort();
    ignored
}

fn merge_env(fig: Figment, vars: Option<&[(String, String)]>) -> Figment {
    let keep = |key: &figment::value::UncasedStr| is_read_env(&key.as_str().to_uppercase());
    match vars {
        None => fig.merge(Env::prefixed("HERDER_").filter(keep).split("__")),
        Some(vars) => {
            // figment reads the process environment only; a test's variables
            // are turned into a nested map here with the same rules.
            let mut root = serde_json::Map::new();
            for (k, v) in vars {
                let Some(rest) = k.strip_prefix("HERDER_") else {
                    continue;
                };
                if !is_read_env(rest) {
                    continue;
                }
                let path: Vec<String> = rest.split("__").map(|s| s.to_lowercase()).collect();
                insert_path(&mut root, &path, parse_env_value(v));
            }
            fig.merge(Serialized::defaults(serde_json::Value::Object(root)))
        }
    }
}

fn insert_path(
    map: &mut serde_json::Map<String, serde_json::Value>,
    path: &[String],
    v: serde_json::Value,
) {
    match path {
        [] => {}
        [last] => {
            map.insert(last.clone(), v);
        }
        [first, rest @ ..] => {
            let child = map
                .entry(first.clone())
                .or_insert_with(|| serde_json::Value::Object(Default::default()));
            if let serde_json::Value::Object(m) = child {
                insert_path(m, rest, v);
            }
        }
    }
}

/// Environment values are strings; like figment, read numbers, booleans and
/// arrays when they parse as such.
fn parse_env_value(v: &str) -> serde_json::Value {
    serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::String(v.to_string()))
}

fn describe_figment_error(e: figment::Error) -> String {
    e.into_iter()
        .map(|one| {
            let key = one.path.join(".");
            let source = one
                .metadata
                .as_ref()
                .map(|m| match &m.source {
                    Some(s) => format!(" (from {s})"),
                    None => format!(" (from {})", m.name),
                })
                .unwrap_or_default();
            if key.is_empty() {
                format!("{}{source}", one.kind)
            } else {
                format!("key {key:?}: {}{source}", one.kind)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Parses `enabled_schedulers`: known scheduler names, `_core` required.
pub fn parse_enabled_schedulers(names: &[String]) -> Result<Vec<JobType>, String> {
    let mut out = Vec::new();
    for n in names {
        match JobType::parse(n) {
            JobType::Unknown(u) => {
                return Err(format!(
                    "unknown scheduler {u:?} (one of service, batch, system, sysbatch, _core)"
                ))
            }
            t => {
                if !out.contains(&t) {
                    out.push(t)
                }
            }
        }
    }
    if !out.contains(&JobType::Core) {
        return Err("\"_core\" must be enabled".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(sources: ConfigSources) -> Result<AgentConfig, String> {
        AgentConfig::load(&ConfigSources {
            env: Some(sources.env.clone().unwrap_or_default()),
            ..sources
        })
        .map_err(|e| e.to_string())
    }

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn dev_mode_enables_server_and_client_on_loopback() {
        let c = load(ConfigSources {
            dev: true,
            ..Default::default()
        })
        .unwrap();
        assert!(c.server.enabled && c.client.enabled);
        assert_eq!(c.bind_addr, "127.0.0.1");
        assert_eq!(c.ports.http, 4646);
        assert_eq!(c.server.eval_nack_timeout, Duration::from_secs(60));
        assert_eq!(c.server.eval_delivery_limit, 3);
    }

    #[test]
    fn layers_apply_in_order_defaults_file_env_flags() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(&dir, "a.toml", "datacenter = \"file-dc\"\nname = \"file-name\"\n[server]\nenabled = true\nnum_schedulers = 3\n");
        let mut flags = FlagOverrides {
            name: Some("flag-name".into()),
            ..Default::default()
        };
        flags.ports.insert("http".into(), 0);
        let c = load(ConfigSources {
            files: vec![f],
            env: Some(vec![
                ("HERDER_DATACENTER".into(), "env-dc".into()),
                ("HERDER_NAME".into(), "env-name".into()),
                ("HERDER_SERVER__NUM_SCHEDULERS".into(), "2".into()),
                ("HERDER_ADDR".into(), "http://ignored:4646".into()),
            ]),
            flags,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.datacenter, "env-dc");
        assert_eq!(c.name, "flag-name");
        assert_eq!(c.server.num_schedulers, Some(2));
        assert_eq!(c.ports.http, 0);
        assert_eq!(c.region, "global", "untouched keys keep their default");
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            &dir,
            "bad.toml",
            "[server]\nenabled = true\nnum_schedulrs = 2\n",
        );
        let err = load(ConfigSources {
            files: vec![f],
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("num_schedulrs"), "{err}");
        assert!(err.contains("bad.toml"), "{err}");
    }

    #[test]
    fn unknown_environment_variables_are_ignored_and_named() {
        let sources = ConfigSources {
            dev: true,
            env: Some(vec![
                ("HERDER_BIN".into(), "/usr/bin/x".into()),
                ("HERDER_SERVER__NUM_SCHEDULRS".into(), "2".into()),
                ("HERDER_SERVER__NUM_SCHEDULERS".into(), "1".into()),
                ("HERDER_CLIENT__META__RACK".into(), "r1".into()),
                ("HERDER_ADDR".into(), "http://h:1".into()),
                ("HERDER_NAMESPACE".into(), "prod".into()),
            ]),
            ..Default::default()
        };
        let (c, ignored) = AgentConfig::load_reporting_ignored(&sources).unwrap();
        assert_eq!(ignored, ["HERDER_BIN", "HERDER_SERVER__NUM_SCHEDULRS"]);
        assert_eq!(c.server.num_schedulers, Some(1), "known keys still apply");
        assert_eq!(c.client.meta.get("rack").map(String::as_str), Some("r1"));
        let message = describe_ignored_env(&ignored);
        assert!(
            message.contains("HERDER_BIN, HERDER_SERVER__NUM_SCHEDULRS"),
            "{message}"
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            &dir,
            "bad.toml",
            "[server]\nenabled = true\nheartbeat_grace = \"soon\"\n",
        );
        let err = load(ConfigSources {
            files: vec![f],
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("server.heartbeat_grace"), "{err}");
        let err = load(ConfigSources {
            dev: true,
            env: Some(vec![(
                "HERDER_SERVER__ENABLED_SCHEDULERS".into(),
                "[\"service\"]".into(),
            )]),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("_core"), "{err}");
        let err = load(ConfigSources {
            dev: true,
            env: Some(vec![("HERDER_LOG_LEVEL".into(), "loud".into())]),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("log_level"), "{err}");
    }

    #[test]
    fn missing_file_and_missing_role_are_errors() {
        let err = load(ConfigSources {
            files: vec![PathBuf::from("/nonexistent/herder.toml")],
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("not found"), "{err}");
        let err = load(ConfigSources::default()).unwrap_err();
        assert!(err.contains("-server, -client or -dev"), "{err}");
    }

    #[test]
    fn tls_is_off_by_default_and_on_needs_readable_files_named_in_errors() {
        let dev = load(ConfigSources {
            dev: true,
            ..Default::default()
        })
        .unwrap();
        assert!(!dev.tls.enabled());
        assert!(dev.tls.http_listener().unwrap().is_none());
        assert!(dev.tls.rpc_client("global").unwrap().is_none());

        let dir = tempfile::tempdir().unwrap();
        let with = |name: &str, text: &str| {
            let f = write(&dir, name, text);
            load(ConfigSources {
                dev: true,
                files: vec![f],
                ..Default::default()
            })
            .map(|c| c.tls)
        };
        let err = with("a.toml", "[tls]\nhttp = true\n").unwrap_err();
        assert!(err.contains("tls.ca_file: required"), "{err}");
        let err = with("b.toml", "[tls]\nrcp = true\n").unwrap_err();
        assert!(err.contains("rcp"), "{err}");
        let junk = write(&dir, "junk.pem", "junk");
        let missing = dir.path().join("missing.pem");
        let text = format!(
            "[tls]\nrpc = true\nca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\n",
            junk.display().to_string(),
            junk.display().to_string(),
            missing.display().to_string()
        );
        let err = with("c.toml", &text).unwrap_err();
        assert!(
            err.contains("tls.ca_file") && err.contains("junk.pem"),
            "{err}"
        );
    }

    #[test]
    fn the_clis_tls_variables_are_not_reported_as_ignored() {
        let names: Vec<(String, String)> =
            ["HERDER_CACERT", "HERDER_CLIENT_CERT", "HERDER_CLIENT_KEY"]
                .iter()
                .map(|n| (n.to_string(), "/x.pem".to_string()))
                .collect();
        assert!(ignored_env_names(Some(&names)).is_empty());
    }

    #[test]
    fn every_default_key_is_documented_in_default_toml() {
        // The compiled-in file is the single source of defaults: it must
        // parse on its own into a complete configuration.
        let c: AgentConfig = Figment::from(Toml::string(DEFAULT_TOML)).extract().unwrap();
        assert_eq!(c.server.enabled_schedulers.len(), 5);
    }
}
