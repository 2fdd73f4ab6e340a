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
    /// The leader removes a server unreachable this long from the Raft
    /// configuration ([`super::autopilot`]); zero never.
    pub dead_server_cleanup: Duration,
    pub key: ClusterKey,
    pub raft: Arc<Config>,
    /// Transport faults injected into this server's exchanges (tests
    /// only; `None` on a real server).
    pub faults: Option<Faults>,
}

impl ClusterSettings {
    /// The signed client of this server, giving up after `timeout`.
    pub(super) fn client(&self, timeout: Duration) -> SignedClient {
        let client = SignedClient::new(self.key.clone(), timeout);
        match &self.faults {
            Some(faults) => client.with_faults(faults, &self.node.rpc_addr),
            None => client,
        }
    }
}
