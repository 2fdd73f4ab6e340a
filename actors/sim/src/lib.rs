//! Simulated nodes: thousands of lightweight herder nodes in one process,
//! for scale tests and load generation (`herder sim nodes`).
//!
//! Each simulated node registers with a real fingerprint's shape (kernel,
//! arch, OS, `unique.hostname`, a healthy `mock_driver`, `meta.rack`) and
//! speaks the node protocol of [`herder_client::node_protocol`], as the real client
//! does: heartbeats at the TTL the server returns, re-registers when a
//! restarted server no longer knows it, fails over to the next server,
//! follows its allocations with the per-node blocking query, and runs them with the mock driver's semantics in
//! memory: `run_for` then complete (or failed on a non-zero `exit_code`),
//! `start_error` fails at once, no `run_for` runs until stopped. Status
//! reports are batched per node.
//!
//! Nodes are spread over a few shards, each one thread with a
//! single-threaded runtime and one async HTTP client, so 10,000 nodes cost
//! 10,000 long-poll connections and some timers, not threads.
//!
//! ```no_run
//! use herder_sim::{SimConfig, SimNodes};
//! let sim = SimNodes::start(SimConfig {
//!     count: 1000,
//!     servers: vec!["http://127.0.0.1:4646".into()],
//!     ..SimConfig::default()
//! }).unwrap();
//! while sim.stats().registered < 1000 { std::thread::sleep(std::time::Duration::from_millis(100)); }
//! sim.stop();
//! ```

mod counters;
pub mod http;
pub mod mock_alloc;
pub mod node;

pub use counters::{Counters, SimStats};
use herder::structs::node::labels;
use herder::structs::{new_id, Node, NodeId, NodeStatus};
use herder_client::driver::{mock::MockDriver, DriverSet};
use herder_client::fingerprint::{node_from_facts, MachineFacts};
use herder_client::node_protocol::normalize_server;
use herder_common::config::{AgentConfig, ConfigSources, FlagOverrides};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What to simulate and where.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub count: usize,
    /// Server HTTP addresses (`http://host:port` or `host:port`); nodes are
    /// spread over them round-robin and fail over to the others.
    pub servers: Vec<String>,
    /// Datacenters, assigned round-robin (`dc1` when empty).
    pub datacenters: Vec<String>,
    /// Node classes, assigned round-robin (none when empty).
    pub classes: Vec<String>,
    /// Racks: node `i` gets `meta.rack = r<i mod racks>` (0: no rack).
    pub racks: usize,
    /// CPU of each node, MHz.
    pub cpu_mhz: i64,
    /// Memory of each node, MB.
    pub memory_mb: i64,
    /// Disk of each node, MB.
    pub disk_mb: i64,
    /// Meta every node carries (besides `rack`).
    pub meta: BTreeMap<String, String>,
    /// Node names are `<name_prefix>-<i>`.
    pub name_prefix: String,
    /// Threads, each with its own runtime and HTTP client.
    pub threads: usize,
    /// Registrations, heartbeats and status reports in flight per thread.
    pub max_in_flight: usize,
    /// Status reports of a node are batched for this long.
    pub flush_window: Duration,
    /// How long a blocking query on allocations waits at the server.
    pub watch_wait: Duration,
    /// Whether nodes follow and run their allocations (default); off,
    /// they only register and heartbeat.
    pub watch_allocs: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            count: 100,
            servers: vec!["http://127.0.0.1:4646".into()],
            datacenters: vec![],
            classes: vec![],
            racks: 0,
            cpu_mhz: 4000,
            memory_mb: 8192,
            disk_mb: 100 * 1024,
            meta: BTreeMap::new(),
            name_prefix: "sim".into(),
            threads: 1,
            max_in_flight: 128,
            flush_window: Duration::from_millis(250),
            watch_wait: Duration::from_secs(60),
            watch_allocs: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{0}")]
    Config(String),
    #[error(
        "{wanted} simulated nodes need about {needed} open files but the hard limit \
         (ulimit -Hn) is {hard}: raise it (ulimit -Hn, LimitNOFILE= in systemd, \
         /etc/security/limits.conf) or run fewer nodes per process"
    )]
    FileLimit {
        wanted: usize,
        needed: u64,
        hard: u64,
    },
    #[error("cannot start a simulation thread: {0}")]
    Thread(std::io::Error),
}

/// A running simulation. Dropping it (or `stop`) ends every node: they
/// simply stop heartbeating, as machines that vanish.
pub struct SimNodes {
    counters: Arc<Counters>,
    node_ids: Vec<NodeId>,
    shards: Vec<(actix_rt::System, Option<JoinHandle<()>>)>,
}

impl SimNodes {
    /// Builds the nodes and starts them registering (returns at once).
    pub fn start(config: SimConfig) -> Result<SimNodes, SimError> {
        let nodes = build_nodes(&config);
        SimNodes::start_nodes(config, nodes)
    }

    /// Starts given nodes (from [`build_nodes`]): starting the same nodes
    /// again after `stop` is a machine that failed and came back.
    pub fn start_nodes(config: SimConfig, nodes: Vec<Node>) -> Result<SimNodes, SimError> {
        if config.servers.is_empty() {
            return Err(SimError::Config("no server address given".into()));
        }
        let threads = config.threads.clamp(1, nodes.len().max(1));
        raise_file_limit(nodes.len(), (config.max_in_flight * threads) as u64)?;
        let node_ids = nodes.iter().map(|n| n.id).collect();
        let servers: Vec<String> = config.servers.iter().map(|s| normalize_server(s)).collect();
        let counters = Arc::new(Counters::default());
        let mut by_shard: Vec<Vec<(Node, Vec<String>)>> = vec![Vec::new(); threads];
        for (i, node) in nodes.into_iter().enumerate() {
            // Each node starts on the next server and fails over to the
            // others in turn.
            let mut list = servers.clone();
            list.rotate_left(i % servers.len());
            by_shard[i % threads].push((node, list));
        }
        let mut shards = Vec::with_capacity(threads);
        for (i, nodes) in by_shard.into_iter().enumerate() {
            match start_shard(i, nodes, &config, counters.clone()) {
                Ok(shard) => shards.push(shard),
                Err(e) => {
                    let started = SimNodes {
                        counters,
                        node_ids: vec![],
                        shards,
                    };
                    started.stop();
                    return Err(SimError::Thread(e));
                }
            }
        }
        Ok(SimNodes {
            counters,
            node_ids,
            shards,
        })
    }

    pub fn stats(&self) -> SimStats {
        self.counters.snapshot()
    }

    /// The simulated nodes' IDs, in creation order.
    pub fn node_ids(&self) -> &[NodeId] {
        &self.node_ids
    }

    /// Stops every node and waits for the threads.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        for (system, _) in &self.shards {
            system.stop();
        }
        for (_, thread) in &mut self.shards {
            if let Some(thread) = thread.take() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for SimNodes {
    fn drop(&mut self) {
        self.halt();
    }
}

type Shard = (actix_rt::System, Option<JoinHandle<()>>);

fn start_shard(
    index: usize,
    nodes: Vec<(Node, Vec<String>)>,
    config: &SimConfig,
    counters: Arc<Counters>,
) -> std::io::Result<Shard> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (max_in_flight, watch_wait, flush_window, watch_allocs) = (
        config.max_in_flight,
        config.watch_wait,
        config.flush_window,
        config.watch_allocs,
    );
    let thread = std::thread::Builder::new()
        .name(format!("herder-sim-{index}"))
        .spawn(move || {
            let system = actix_rt::System::new();
            let _ = tx.send(actix_rt::System::current());
            system.block_on(async move {
                let http = Rc::new(http::SimHttp::new(max_in_flight, watch_wait));
                let settings = Rc::new(node::NodeSettings {
                    watch_wait,
                    flush_window,
                    watch_allocs,
                });
                for (node, servers) in nodes {
                    let sim = node::SimNode::new(
                        node,
                        http.clone(),
                        servers,
                        settings.clone(),
                        counters.clone(),
                    );
                    actix_rt::spawn(sim.run());
                }
            });
            let _ = system.run();
        })?;
    let system = rx
        .recv()
        .map_err(|_| std::io::Error::other("the simulation thread ended at start"))?;
    Ok((system, Some(thread)))
}

/// The nodes to simulate: one fingerprint (as a real client builds it, with
/// the mock driver), varied per node in identity, datacenter, class and
/// rack.
pub fn build_nodes(config: &SimConfig) -> Vec<Node> {
    let template = template_node(config);
    let width = config.count.max(1).to_string().len();
    (0..config.count)
        .map(|i| {
            let mut node = template.clone();
            node.id = new_id();
            node.secret_id = new_id().to_string();
            node.name = format!("{}-{i:0width$}", config.name_prefix).into();
            node.attributes
                .insert("unique.hostname".into(), node.name.clone());
            if !config.datacenters.is_empty() {
                node.datacenter = config.datacenters[i % config.datacenters.len()].clone();
            }
            if !config.classes.is_empty() {
                node.node_class = config.classes[i % config.classes.len()].clone();
            }
            if config.racks > 0 {
                node.meta
                    .insert("rack".into(), format!("r{}", i % config.racks).into());
            }
            node.compute_class();
            node
        })
        .collect()
}

fn template_node(config: &SimConfig) -> Node {
    let mut drivers = DriverSet::default();
    drivers.insert(Arc::new(MockDriver::new()));
    let agent = sim_agent_config();
    let cores = u32::try_from((config.cpu_mhz / 1000).max(1)).unwrap_or(1);
    let facts = MachineFacts {
        cores,
        mhz_per_core: config.cpu_mhz as f64 / f64::from(cores),
        model_name: "herder simulated CPU".into(),
        memory_bytes: u64::try_from(config.memory_mb.max(0)).unwrap_or(0) * 1024 * 1024,
        disk_free_bytes: u64::try_from(config.disk_mb.max(0)).unwrap_or(0) * 1024 * 1024,
        disk_total_bytes: u64::try_from(config.disk_mb.max(0)).unwrap_or(0) * 1024 * 1024,
        hostname: "sim".into(),
        kernel_name: "linux".into(),
        // A release number: a `version` constraint without a pre-release
        // clause (`>= 5.4`) never matches a pre-release such as "6.1.0-sim",
        // in Nomad as in herder, and benchmarks constrain on it.
        kernel_version: "6.1.0".into(),
        arch: "amd64".into(),
        os_name: "ubuntu".into(),
        os_version: "22.04".into(),
    };
    let mut node = node_from_facts(&agent, &facts, &drivers);
    node.meta.extend(labels(&config.meta));
    node.status = NodeStatus::Ready;
    node
}

/// A client agent configuration with the defaults (no files, no
/// environment): what `node_from_facts` reads besides the facts.
fn sim_agent_config() -> AgentConfig {
    let mut flags = FlagOverrides::default();
    flags.client.insert("enabled".into(), true.into());
    flags
        .client
        .insert("servers".into(), serde_json::json!(["127.0.0.1:4646"]));
    flags.data_dir = Some("/var/lib/herder-sim".into());
    let sources = ConfigSources {
        env: Some(vec![]),
        flags,
        ..Default::default()
    };
    // The defaults with these flags always pass the checks.
    AgentConfig::load(&sources).unwrap_or_else(|e| unreachable!("default configuration: {e}"))
}

/// Raises the soft limit on open files to the hard limit: every node keeps
/// a connection open for its long-poll.
pub fn raise_file_limit(nodes: usize, extra: u64) -> Result<u64, SimError> {
    let needed = nodes as u64 + extra + 64;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read or write the struct passed.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if got != 0 {
        return Ok(0);
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = limit.rlim_max;
        }
    }
    if limit.rlim_cur < needed {
        return Err(SimError::FileLimit {
            wanted: nodes,
            needed,
            hard: limit.rlim_max,
        });
    }
    Ok(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_distinct_and_spread_over_datacenters_classes_and_racks() {
        let nodes = build_nodes(&SimConfig {
            count: 6,
            datacenters: vec!["dc1".into(), "dc2".into()],
            classes: vec!["small".into(), "big".into(), "gpu".into()],
            racks: 2,
            meta: BTreeMap::from([("team".into(), "infra".into())]),
            ..SimConfig::default()
        });
        let ids: std::collections::HashSet<_> = nodes.iter().map(|n| n.id).collect();
        assert_eq!(ids.len(), 6);
        assert_eq!(nodes[3].name, "sim-3");
        assert_eq!(nodes[3].datacenter, "dc2");
        assert_eq!(nodes[4].node_class, "big");
        assert_eq!(nodes[3].meta.get("rack").map(|s| s.as_str()), Some("r1"));
        assert_eq!(nodes[0].meta.get("team").map(|s| s.as_str()), Some("infra"));
        let attrs = &nodes[2].attributes;
        assert_eq!(
            attrs.get("unique.hostname").map(|s| s.as_str()),
            Some("sim-2")
        );
        assert_eq!(attrs.get("kernel.name").map(|s| s.as_str()), Some("linux"));
        assert!(attrs.contains_key("driver.mock_driver"));
        assert!(nodes[2].drivers["mock_driver"].healthy);
        assert_eq!(nodes[2].node_resources.cpu.cpu_shares, 4000);
        assert_eq!(nodes[2].node_resources.memory.memory_mb, 8192);
        assert_ne!(
            nodes[0].computed_class, nodes[1].computed_class,
            "class and datacenter feed the computed class"
        );
    }
}
