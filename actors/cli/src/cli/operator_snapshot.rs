//! `herder operator snapshot save|restore|inspect FILE`: back up the
//! whole state to a file, put one back, and describe one without an
//! agent (Nomad's verbs and output, plus counts of what the state holds).
//!
//! `save` checks the file before keeping it (the `Digest` header against
//! the bytes received, then the archive itself) and writes it under a
//! temporary name renamed into place, so FILE is either a whole, checked
//! snapshot or untouched. `inspect` reads the file alone (no agent);
//! `restore` sends it and the agent checks it again before it changes
//! anything.

use anyhow::Context;
use clap::{Args, Subcommand};
use herder::state::StateStore;
use herder_api_client::ApiClient;
use herder_common::config::Limits;
use herder_common::snapshot_archive::{self, Archive};
use std::io::Write;
use std::path::{Path, PathBuf};

const SNAPSHOT_PATH: &str = "/v1/operator/snapshot";

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Save the whole state of the cluster to FILE.
    Save(SaveArgs),
    /// Replace the whole state of the cluster by FILE's.
    Restore(FileArgs),
    /// Describe a snapshot file (no agent needed).
    Inspect(FileArgs),
}

#[derive(Debug, Args)]
pub struct SaveArgs {
    /// Let any server answer (each saves from its own replica).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub stale: Option<bool>,
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct FileArgs {
    pub file: PathBuf,
}

/// Runs one snapshot verb (`client` is made only for the verbs that ask an
/// agent) and returns its exit status.
pub fn run(
    command: SnapshotCommand,
    client: impl FnOnce() -> anyhow::Result<ApiClient>,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    match command {
        SnapshotCommand::Save(a) => save(&client()?, &a, out),
        SnapshotCommand::Restore(a) => restore(&client()?, &a.file, out),
        SnapshotCommand::Inspect(a) => inspect(&a.file, out),
    }
}

/// The most a snapshot file may unpack to here: the agent's default limit.
fn max_unpacked() -> u64 {
    Limits::default().snapshot_max_bytes as u64
}

fn save(client: &ApiClient, args: &SaveArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let query: Vec<(&str, String)> = match args.stale {
        Some(true) => vec![("stale", String::new())],
        _ => Vec::new(),
    };
    let answer = client.get_raw(SNAPSHOT_PATH, &query)?;
    let digest = answer
        .header("Digest")
        .context("the agent's answer has no Digest header")?;
    snapshot_archive::check_digest(digest, &answer.body)?;
    snapshot_archive::read(&answer.body, max_unpacked()).context("checking the snapshot")?;
    write_atomically(&args.file, &answer.body)?;
    writeln!(out, "State file written to {}", args.file.display())?;
    Ok(0)
}

/// Writes `bytes` beside `path` and renames it into place.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    tmp.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn restore(client: &ApiClient, file: &Path, out: &mut dyn Write) -> anyhow::Result<u8> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    client.put_raw(SNAPSHOT_PATH, &[], &bytes)?;
    writeln!(out, "Snapshot Restored")?;
    Ok(0)
}

fn inspect(file: &Path, out: &mut dyn Write) -> anyhow::Result<u8> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let Archive { meta, state } = snapshot_archive::read(&bytes, max_unpacked())
        .with_context(|| format!("reading the snapshot {}", file.display()))?;
    let state = StateStore::decode_checkpoint(&state)
        .with_context(|| format!("reading the state in {}", file.display()))?;
    let rows = [
        ("ID", meta.id.clone()),
        ("Size", meta.size.to_string()),
        ("Index", meta.index.to_string()),
        ("Term", meta.term.to_string()),
        ("Version", meta.version.to_string()),
    ];
    for (name, value) in rows {
        writeln!(out, "{name:<12} = {value}")?;
    }
    let counts = [
        ("Jobs", state.jobs().count()),
        ("Job summaries", state.job_summaries().count()),
        ("Allocations", state.alloc_count()),
        ("Evaluations", state.evals().count()),
        ("Nodes", state.node_count()),
        ("Deployments", state.deployments().count()),
        ("Services", state.services().count()),
    ];
    writeln!(out)?;
    writeln!(out, "{:<16} Count", "Kind")?;
    for (kind, count) in counts {
        writeln!(out, "{kind:<16} {count}")?;
    }
    Ok(0)
}
