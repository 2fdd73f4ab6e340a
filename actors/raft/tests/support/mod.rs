//! What the replication tests share: waiting for a condition with a
//! deadline (never a fixed sleep taken as an assertion), and a server's
//! membership entry.

use herder_raft::ServerNode;
use std::time::{Duration, Instant};

/// Polls `condition` every 10 ms until it holds, failing the test after
/// `timeout` with `what` in the message.
pub async fn eventually(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A member at `rpc_addr` running this build: new enough for every entry
/// kind, so the version gate lets the tests' writes through.
#[allow(dead_code)] // each test file compiles its own copy; not all use it
pub fn server_node(rpc_addr: impl Into<String>) -> ServerNode {
    ServerNode::at(rpc_addr).with_version(env!("CARGO_PKG_VERSION"))
}
