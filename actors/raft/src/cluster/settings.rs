//! What a server needs to take its place in a cluster
//! ([`ClusterSettings`]) and how long its exchanges with the other
//! servers may take. Plain settings: every part of the cluster reads them
//! and they name none of those parts.

use crate::faults::Faults;
use crate::http::{ClusterKey, SignedClient};
use crate::ServerNode;
use openraft::Config;
use std::sync::Arc;
use std::time::Duration;

/// How long one exchange with another server may take.
pub(super) const RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a question that is retried elsewhere waits for an answer
/// (a server's status, the leader's commit index): a stopped server must
/// not hold a read for longer than an election takes.
pub(super) const QUICK_TIMEOUT: Duration = Duration::from_secs(1);

/// What a server needs to take its place in a cluster.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    /// This server as it advertises itself: its name (`<node>.<region>`,
    /// as Nomad names servers), the address other servers reach its RPC
    /// port at, its HTTP API address, its datacenter and herder's version.
    /// The membership records it; a change since the last start (an
    /// upgrade) is brought to the leader (`bootstrap`).
    pub node: ServerNode,
    /// Its region, advertised to the other servers (the `region` tag of
    /// `/v1/agent/members`).
    pub region: String,
    /// The cluster forms once this many servers see each other.
    pub bootstrap_expect: usize,
    /// Other servers' RPC addresses to contact.
    pub retry_join: Vec<String>,
    /// How long a server must have been unreachable to count as dead for
    /// autopilot's cleanup ([`super::autopilot`], which the replicated
    /// `CleanupDeadServers` switches on or off); zero: never, unless an
    /// operator switched the cleanup on (then [`DEFAULT_DEAD_AFTER`]).
    pub dead_server_cleanup: Duration,
    /// The largest checkpoint an operator's restore entry may carry
    /// (`limits.snapshot_max_bytes`): the RPC port lets an append of one
    /// through ([`Self::rpc_body_limit`]). Set alike on every server.
    pub max_restore_bytes: usize,
    pub key: ClusterKey,
    /// TLS towards the other servers' RPC ports (mTLS; herder-common's
    /// `TlsConfig::rpc_client`); `None` speaks plain HTTP.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub raft: Arc<Config>,
    /// Transport faults injected into this server's exchanges (tests
    /// only; `None` on a real server).
    pub faults: Option<Faults>,
}

/// How long a server must be unreachable to count as dead when an
/// operator switched the cleanup on but `server.dead_server_cleanup` is
/// zero (its default, `config/default.toml`).
pub const DEFAULT_DEAD_AFTER: Duration = Duration::from_secs(300);

impl ClusterSettings {
    /// The largest body the RPC port reads: a batch of entries or a
    /// snapshot chunk (`http::MAX_BODY_BYTES`), and room for one restore
    /// entry of [`Self::max_restore_bytes`].
    pub fn rpc_body_limit(&self) -> usize {
        crate::http::MAX_BODY_BYTES.saturating_add(crate::entry::RestoreEntry::encoded_bound(
            self.max_restore_bytes,
        ))
    }

    /// The signed client of this server, giving up after `timeout`.
    pub(super) fn client(&self, timeout: Duration) -> SignedClient {
        let client = SignedClient::over_tls(self.key.clone(), timeout, self.tls.clone());
        match &self.faults {
            Some(faults) => client.with_faults(faults, &self.node.rpc_addr),
            None => client,
        }
    }
}
