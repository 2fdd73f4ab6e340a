//! The read barrier ([`Cluster::read_barrier`]): a consistent read on any
//! server, follower or leader. It asks the leader for its commit index
//! over the RPC port, so it lives beside the calls ([`super::rpc`]) rather
//! than in the handle, which names no task or call module.

use super::rpc;
use super::Cluster;
use crate::http::HttpError;
use std::time::Duration;

/// Pause between attempts of a read barrier.
const BARRIER_RETRY: Duration = Duration::from_millis(100);

impl Cluster {
    /// Waits until this server's replica holds every write committed before
    /// the call (the leader confirms it still leads and names its commit
    /// index; a follower asks the leader), so a read after it sees them.
    pub async fn read_barrier(&self, timeout: Duration) -> Result<u64, HttpError> {
        let deadline = std::time::Instant::now() + timeout;
        let index = loop {
            match rpc::read_index(self).await {
                Ok(index) => break index,
                // The leader may have just died: ask the next one (unless
                // this server is stopping: then the read ends now).
                Err(_)
                    if !self.is_stopping()
                        && std::time::Instant::now() + BARRIER_RETRY < deadline =>
                {
                    tokio::time::sleep(BARRIER_RETRY).await
                }
                Err(e) => return Err(e),
            }
        };
        // The leader names a log index; the state's index may run ahead of
        // it (after a restore, `state_machine::Position::index_offset`), so
        // the wait is for the replica to have applied that log entry. An
        // entry is visible in the store once openraft counts it applied.
        let waited = self
            .node()
            .raft()
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "read barrier")
            .await;
        match waited {
            Ok(_) => Ok(index),
            Err(e) => Err(HttpError::Lost {
                url: "local replica".into(),
                reason: e.to_string(),
            }),
        }
    }
}
