//! What the Raft membership records about each server: where the other
//! servers reach it (its RPC address), where clients and users reach it
//! (its HTTP API address), its name and the herder version it runs.
//!
//! Every server holds the membership, so every server knows all of this
//! about every member: the leader checks the versions before it writes a
//! new kind of entry (`version_gate`), and any server can tell a client
//! node the HTTP addresses of all servers (the `Servers` list of a
//! heartbeat answer). A server whose name, addresses or version changed
//! since it joined (an upgrade, a new port) brings its own entry up to
//! date through the leader when it starts (`cluster::bootstrap`).

use serde::{Deserialize, Serialize};

/// One server as the membership records it (openraft's `Node` type).
///
/// Every field defaults when absent, and the RPC address also reads from
/// `addr`: a membership written with openraft's `BasicNode` (before this
/// type) reads back as servers of unknown version, which then update their
/// own entries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ServerNode {
    /// The address other servers reach its RPC port at (Raft, forwarded
    /// writes, the cluster's own calls).
    #[serde(alias = "addr")]
    pub rpc_addr: String,
    /// The address of its HTTP API (`host:port`), which client nodes talk
    /// to; empty when not known.
    #[serde(rename = "HTTPAddr")]
    pub http_addr: String,
    /// `<node>.<region>`, as Nomad names servers.
    pub name: String,
    /// The herder version it runs (semver); empty when not known.
    pub version: String,
    /// Its datacenter (Nomad's `NodeServerInfo.Datacenter`).
    pub datacenter: String,
}

impl ServerNode {
    /// A server known only by its RPC address (nothing else advertised).
    pub fn at(rpc_addr: impl Into<String>) -> ServerNode {
        ServerNode {
            rpc_addr: rpc_addr.into(),
            ..ServerNode::default()
        }
    }

    /// The same server running `version`.
    pub fn with_version(mut self, version: impl Into<String>) -> ServerNode {
        self.version = version.into();
        self
    }
}

/// `name (rpc address)`, or the RPC address alone when it has no name: how
/// errors and logs name a server.
impl std::fmt::Display for ServerNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.name.is_empty() {
            f.write_str(&self.rpc_addr)
        } else {
            write!(f, "{} ({})", self.name, self.rpc_addr)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_basic_node_written_before_this_type_reads_back_with_its_address() {
        let old: ServerNode = serde_json::from_str(r#"{"addr":"10.0.0.1:4647"}"#).unwrap();
        assert_eq!(old, ServerNode::at("10.0.0.1:4647"));
        assert_eq!(old.version, "");
    }

    #[test]
    fn a_server_node_survives_its_encoding_and_names_itself() {
        let node = ServerNode {
            rpc_addr: "10.0.0.1:4647".into(),
            http_addr: "10.0.0.1:4646".into(),
            name: "s1.global".into(),
            version: "0.1.0".into(),
            datacenter: "dc1".into(),
        };
        let text = serde_json::to_string(&node).unwrap();
        assert!(text.contains(r#""HTTPAddr":"10.0.0.1:4646""#), "{text}");
        assert_eq!(serde_json::from_str::<ServerNode>(&text).unwrap(), node);
        assert_eq!(node.to_string(), "s1.global (10.0.0.1:4647)");
        assert_eq!(ServerNode::at("10.0.0.2:4647").to_string(), "10.0.0.2:4647");
    }
}
