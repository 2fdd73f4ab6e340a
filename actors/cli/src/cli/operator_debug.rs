//! `herder operator debug`: one archive to attach to a bug report, as
//! `nomad operator debug` builds it. For `-duration` it gathers, through
//! the API of the agent it talks to:
//!
//! - `cluster/`: the agent's self description, members, leader, regions,
//!   the Raft configuration and the scheduler configuration, once;
//! - `server/<agent>/` and `client/<node>/` (`-node-id`): the log from
//!   `agent monitor` for the whole duration, a CPU profile
//!   (`-pprof-duration`), malloc's figures and the thread dump;
//! - `interval/NNNN/`: every `-interval`, the metrics, nodes, jobs,
//!   allocations, evaluations and deployments.
//!
//! Every JSON document passes through [`redact`] before it is written
//! (secrets, tokens, keys, passwords), and the bundle is a `.tar.gz` in
//! `-output` (default: the current directory). What an endpoint refuses
//! (a profile without `enable_debug`, a Raft configuration on a single
//! server) is noted in the bundle's `errors.txt` instead of failing it.

use super::alloc_logs::copy_frames;
use anyhow::Context;
use clap::Args;
use herder_api_client::ApiClient;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct DebugArgs {
    /// How long to gather for.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// How often to take the metrics and the lists.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// The level of the logs gathered.
    #[arg(long = "log-level", default_value = "trace")]
    pub log_level: String,
    /// How long each CPU profile samples.
    #[arg(long = "pprof-duration", default_value = "1s", value_parser = humantime::parse_duration)]
    pub pprof_duration: Duration,
    /// Client nodes to gather from: `all`, or IDs separated by commas.
    #[arg(long = "node-id", default_value = "")]
    pub node_id: String,
    /// The most client nodes gathered from.
    #[arg(long = "max-nodes", default_value_t = 10)]
    pub max_nodes: usize,
    /// Where the archive is written (a directory).
    #[arg(long)]
    pub output: Option<PathBuf>,
}

/// A key whose value is a secret, whatever the document.
fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "secret",
        "token",
        "password",
        "passwd",
        "privatekey",
        "private_key",
        "encrypt",
    ]
    .iter()
    .any(|s| k.contains(s))
        || k == "key"
        || k.ends_with("_key") && !k.ends_with("_key_file")
}

/// Replaces the value of every secret-named key with `<redacted>`.
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if is_secret_key(k)
                    && !v.is_null()
                    && !matches!(v, Value::Object(_) | Value::Array(_))
                {
                    *v = Value::String("<redacted>".into());
                } else {
                    redact(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// The bundle being written: its directory and what failed.
struct Bundle {
    root: PathBuf,
    errors: Vec<String>,
}

impl Bundle {
    fn write(&self, rel: &str, bytes: &[u8]) -> anyhow::Result<()> {
        let path = self.root.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
    }

    /// A JSON answer, redacted; a refusal is noted, not fatal.
    fn json(
        &mut self,
        client: &ApiClient,
        rel: &str,
        path: &str,
        query: &[(&str, String)],
    ) -> anyhow::Result<()> {
        match client.get(path, query) {
            Ok(answer) => {
                let mut body = answer.body;
                redact(&mut body);
                self.write(rel, &serde_json::to_vec_pretty(&body)?)
            }
            Err(e) => {
                self.errors.push(format!("{rel}: GET {path}: {e}"));
                Ok(())
            }
        }
    }

    /// A raw answer (a profile, a thread dump).
    fn raw(
        &mut self,
        client: &ApiClient,
        rel: &str,
        path: &str,
        query: &[(&str, String)],
    ) -> anyhow::Result<()> {
        let read = client
            .get_stream(path, query)
            .map_err(anyhow::Error::from)
            .and_then(|mut r| {
                let mut bytes = Vec::new();
                r.read_to_end(&mut bytes)?;
                Ok(bytes)
            });
        match read {
            Ok(bytes) => self.write(rel, &bytes),
            Err(e) => {
                self.errors.push(format!("{rel}: GET {path}: {e}"));
                Ok(())
            }
        }
    }
}

/// One agent whose log and profiles go in the bundle: this agent
/// (`node_id` empty) or a client node through it.
struct Target {
    dir: String,
    node_id: String,
}

impl Target {
    fn query(&self) -> Vec<(&'static str, String)> {
        if self.node_id.is_empty() {
            Vec::new()
        } else {
            vec![("node_id", self.node_id.clone())]
        }
    }
}

/// Collects the log of `target` into a buffer until `stop` is set (the
/// monitor's heartbeats wake the reader at least every 10 s).
fn start_monitor(
    client: &ApiClient,
    target: &Target,
    level: &str,
    stop: Arc<AtomicBool>,
) -> Arc<Mutex<Vec<u8>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut query = target.query();
    query.push(("log_level", level.to_string()));
    let sink = LogSink {
        log: log.clone(),
        stop,
    };
    let client = client.clone();
    std::thread::spawn(move || {
        let mut sink = sink;
        match client.get_stream("/v1/agent/monitor", &query) {
            Ok(stream) => {
                let _ = copy_frames(stream, None, &mut sink);
            }
            Err(e) => {
                let _ = writeln!(sink, "[herder operator debug] monitor refused: {e}");
            }
        }
    });
    log
}

/// Appends to a shared buffer until told to stop, then fails the write so
/// that the frame reader ends.
struct LogSink {
    log: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
}

impl Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("gathering ended"));
        }
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn run(args: DebugArgs, client: &ApiClient, out: &mut dyn Write) -> anyhow::Result<u8> {
    anyhow::ensure!(!args.interval.is_zero(), "-interval must be more than zero");
    anyhow::ensure!(
        args.pprof_duration.as_secs() <= 300,
        "-pprof-duration is at most 5m"
    );
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(':', "-");
    let name = format!("herder-debug-{stamp}");
    let parent = args.output.clone().unwrap_or_else(|| PathBuf::from("."));
    let mut bundle = Bundle {
        root: std::env::temp_dir().join(format!("{name}-{}", std::process::id())),
        errors: Vec::new(),
    };
    std::fs::create_dir_all(&bundle.root)?;
    writeln!(
        out,
        "Starting debugger, gathering for {}...",
        humantime::format_duration(args.duration)
    )?;
    let result = gather(&args, client, &mut bundle, out);
    let archive = parent.join(format!("{name}.tar.gz"));
    let packed = result.and_then(|()| {
        let errors = bundle.errors.join("\n");
        bundle.write("errors.txt", errors.as_bytes())?;
        pack(&bundle.root, &name, &archive)
    });
    let _ = std::fs::remove_dir_all(&bundle.root);
    packed?;
    writeln!(out, "Created debug archive: {}", archive.display())?;
    Ok(0)
}

fn gather(
    args: &DebugArgs,
    client: &ApiClient,
    bundle: &mut Bundle,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let none: &[(&str, String)] = &[];
    bundle.json(client, "cluster/agent-self.json", "/v1/agent/self", none)?;
    bundle.json(client, "cluster/members.json", "/v1/agent/members", none)?;
    bundle.json(client, "cluster/leader.json", "/v1/status/leader", none)?;
    bundle.json(client, "cluster/regions.json", "/v1/regions", none)?;
    bundle.json(
        client,
        "cluster/raft-configuration.json",
        "/v1/operator/raft/configuration",
        none,
    )?;
    bundle.json(
        client,
        "cluster/scheduler-configuration.json",
        "/v1/operator/scheduler/configuration",
        none,
    )?;
    let targets = targets(args, client)?;
    let stop = Arc::new(AtomicBool::new(false));
    let logs: Vec<_> = targets
        .iter()
        .map(|t| start_monitor(client, t, &args.log_level, stop.clone()))
        .collect();
    for t in &targets {
        profile(args, client, bundle, t)?;
    }
    let started = Instant::now();
    let mut round = 0u32;
    loop {
        writeln!(out, "    Capture interval {round:04}")?;
        snapshot_lists(client, bundle, &format!("interval/{round:04}"))?;
        round += 1;
        let next = args.interval.saturating_mul(round);
        if next >= args.duration {
            break;
        }
        std::thread::sleep(next.saturating_sub(started.elapsed()));
    }
    std::thread::sleep(args.duration.saturating_sub(started.elapsed()));
    stop.store(true, Ordering::Relaxed);
    for (t, log) in targets.iter().zip(logs) {
        let text = log.lock().unwrap_or_else(|p| p.into_inner()).clone();
        bundle.write(&format!("{}/monitor.log", t.dir), &text)?;
    }
    Ok(())
}

/// This agent, and the client nodes `-node-id` names (`all`: every node,
/// up to `-max-nodes`).
fn targets(args: &DebugArgs, client: &ApiClient) -> anyhow::Result<Vec<Target>> {
    let mut targets = vec![Target {
        dir: "server/agent".into(),
        node_id: String::new(),
    }];
    let ids: Vec<String> = match args.node_id.as_str() {
        "" => Vec::new(),
        "all" => {
            let nodes = client.get("/v1/nodes", &[]).context("listing the nodes")?;
            nodes
                .body
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|n| n["ID"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        }
        list => list
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
    };
    targets.extend(ids.into_iter().take(args.max_nodes).map(|id| Target {
        dir: format!("client/{id}"),
        node_id: id,
    }));
    Ok(targets)
}

fn profile(
    args: &DebugArgs,
    client: &ApiClient,
    bundle: &mut Bundle,
    target: &Target,
) -> anyhow::Result<()> {
    let mut query = target.query();
    let seconds = args.pprof_duration.as_secs().max(1);
    query.push(("seconds", seconds.to_string()));
    bundle.raw(
        client,
        &format!("{}/profile.prof", target.dir),
        "/v1/agent/pprof/profile",
        &query,
    )?;
    let query = target.query();
    bundle.json(
        client,
        &format!("{}/heap.json", target.dir),
        "/v1/agent/pprof/heap",
        &query,
    )?;
    bundle.raw(
        client,
        &format!("{}/goroutine.txt", target.dir),
        "/v1/agent/pprof/goroutine",
        &query,
    )?;
    Ok(())
}

fn snapshot_lists(client: &ApiClient, bundle: &mut Bundle, dir: &str) -> anyhow::Result<()> {
    let all = [("namespace", "*".to_string())];
    bundle.json(client, &format!("{dir}/metrics.json"), "/v1/metrics", &[])?;
    bundle.json(client, &format!("{dir}/nodes.json"), "/v1/nodes", &[])?;
    bundle.json(client, &format!("{dir}/jobs.json"), "/v1/jobs", &all)?;
    bundle.json(
        client,
        &format!("{dir}/allocations.json"),
        "/v1/allocations",
        &all,
    )?;
    bundle.json(
        client,
        &format!("{dir}/evaluations.json"),
        "/v1/evaluations",
        &all,
    )?;
    bundle.json(
        client,
        &format!("{dir}/deployments.json"),
        "/v1/deployments",
        &all,
    )?;
    Ok(())
}

/// `root`'s files as `name/...` in a gzip'ed tar at `archive`.
fn pack(root: &Path, name: &str, archive: &Path) -> anyhow::Result<()> {
    let file = std::fs::File::create(archive)
        .with_context(|| format!("creating {}", archive.display()))?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.append_dir_all(name, root)
        .context("writing the archive")?;
    tar.into_inner()?.finish()?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_at_any_depth_and_the_rest_is_kept() {
        let mut doc = serde_json::json!({
            "ID": "n1",
            "SecretID": "s3cr3t",
            "config": {"ACL": {"ReplicationToken": "t0k3n"}, "TLS": {"KeyFile": "/etc/k.pem", "key_file": "/etc/k.pem"},
                       "Server": {"Encrypt": "abc=="}},
            "Nodes": [{"SecretID": "x", "Name": "a"}],
            "KeyID": "not-secret-either-way",
        });
        redact(&mut doc);
        let text = doc.to_string();
        for secret in ["s3cr3t", "t0k3n", "abc==", "\"x\""] {
            assert!(!text.contains(secret), "{secret} left in {text}");
        }
        assert_eq!(doc["ID"], "n1");
        assert_eq!(doc["Nodes"][0]["Name"], "a");
        assert_eq!(doc["config"]["TLS"]["key_file"], "/etc/k.pem");
    }
}
