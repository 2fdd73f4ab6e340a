//! How servers describe one another: a member of the Raft configuration
//! ([`Member`]) and what a server says about itself on the status call
//! ([`ServerStatus`]). Plain data, below everything that exchanges or
//! keeps it (the handle, the calls, the member poller).

use crate::{NodeId, ServerNode};
use serde::{Deserialize, Serialize};

/// A cluster member as the others see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Member {
    pub id: NodeId,
    /// Its RPC address (`node.rpc_addr`, kept at hand: it is what most
    /// callers need).
    pub addr: String,
    /// What the membership records about it.
    pub node: ServerNode,
    pub voter: bool,
    pub leader: bool,
}

impl Member {
    /// The member `id` as the membership records it.
    pub fn new(id: NodeId, node: &ServerNode, voter: bool, leader: bool) -> Member {
        Member {
            id,
            addr: node.rpc_addr.clone(),
            node: node.clone(),
            voter,
            leader,
        }
    }
}

/// What a server says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ServerStatus {
    pub id: NodeId,
    /// What it advertises about itself (what the membership would record).
    pub node: ServerNode,
    /// Its region and `bootstrap_expect`.
    pub region: String,
    pub bootstrap_expect: usize,
    /// Whether it belongs to a cluster (has a membership).
    pub initialized: bool,
    pub leader: Option<Member>,
    pub last_applied: u64,
    pub term: u64,
    /// Milliseconds since it last heard from its leader (its own leader
    /// contact, for autopilot's health); `None` while it knows no leader,
    /// and from a server before 0.3.0, which does not say.
    #[serde(default)]
    pub leader_contact_millis: Option<u64>,
}
