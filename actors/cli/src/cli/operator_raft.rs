//! `herder operator raft list-peers|remove-peer` and `herder operator
//! gossip keygen` (also `operator keygen`, Nomad 1.1's name): the
//! cluster's Raft configuration, and a new cluster key for
//! `server { encrypt }`.

use super::output;
use anyhow::{bail, Context};
use base64::Engine as _;
use clap::{ArgGroup, Args, Subcommand};
use herder_api_client::ApiClient;
use rand::RngCore;
use serde_json::Value;
use std::io::Write;

/// How many random bytes a new key holds: Nomad 1.1's `operator keygen`
/// makes 16 (AES-128 for its gossip; the HMAC key of herder's RPC port).
pub const KEY_BYTES: usize = 16;

#[derive(Debug, Subcommand)]
pub enum RaftCommand {
    /// Show the servers of the Raft configuration.
    ListPeers(ListPeersArgs),
    /// Remove a server from the Raft configuration.
    RemovePeer(RemovePeerArgs),
}

#[derive(Debug, Args)]
pub struct ListPeersArgs {
    /// Ask any server instead of the leader (when there is no leader).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub stale: Option<bool>,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("peer").required(true).args(["peer_address", "peer_id"])))]
pub struct RemovePeerArgs {
    /// The server's RPC address (`host:port`), as `list-peers` shows it.
    #[arg(long = "peer-address", value_name = "ADDR")]
    pub peer_address: Option<String>,
    /// The server's ID, as `list-peers` shows it.
    #[arg(long = "peer-id", value_name = "ID")]
    pub peer_id: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum GossipCommand {
    /// Print a new cluster key (base64).
    Keygen,
}

/// `operator raft list-peers`.
pub fn list_peers(
    client: &ApiClient,
    args: &ListPeersArgs,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let query: Vec<(&str, String)> = match args.stale {
        Some(true) => vec![("stale", String::new())],
        _ => Vec::new(),
    };
    let answer = client
        .get("/v1/operator/raft/configuration", &query)
        .context("Failed to retrieve raft configuration")?;
    let servers = match answer.body.get("Servers") {
        Some(Value::Array(list)) => list.clone(),
        _ => bail!("Failed to retrieve raft configuration: the answer lists no Servers"),
    };
    write!(out, "{}", output::raft_peers(&servers))?;
    Ok(0)
}

/// `operator raft remove-peer`.
pub fn remove_peer(
    client: &ApiClient,
    args: &RemovePeerArgs,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let (key, value, what) = match (&args.peer_address, &args.peer_id) {
        (Some(addr), _) => ("address", addr.clone(), "address"),
        (None, Some(id)) => ("id", id.clone(), "id"),
        (None, None) => bail!("Missing peer id or address"),
    };
    client
        .delete("/v1/operator/raft/peer", &[(key, value.clone())])
        .with_context(|| format!("Error removing peer: {what} {value:?}"))?;
    writeln!(out, "Removed peer with {what} {value:?}")?;
    Ok(0)
}

/// `operator gossip keygen`: base64 of [`KEY_BYTES`] random bytes.
pub fn keygen(out: &mut dyn Write) -> anyhow::Result<u8> {
    writeln!(out, "{}", new_key())?;
    Ok(0)
}

/// A new cluster key, base64 as `server { encrypt }` takes it.
pub fn new_key() -> String {
    let mut key = [0u8; KEY_BYTES];
    rand::thread_rng().fill_bytes(&mut key);
    base64::engine::general_purpose::STANDARD.encode(key)
}
