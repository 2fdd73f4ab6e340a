//! The one way out for `ServerApi`'s writes: every change to the cluster's
//! state, whether a store command or a request to a server duty that
//! writes (the node tracker, the periodic launcher, the garbage
//! collector), goes through [`WritePath`] and nowhere else.
//!
//! This is the seam for what a single server does not need yet: with Raft,
//! a follower's `WritePath` forwards each of these to the leader (a
//! `Leader(..)` variant beside `Local`); ACL checks and the audit log of
//! writes belong here too, so that no transport (HTTP, the Rust API, the
//! CLI through HTTP) can go around them. Reads never cross it: they are
//! served from the local snapshot.
//!
//! It is an enum, not a trait object, so that the hot writes (job
//! register, node heartbeat, allocation updates) cost no allocation and no
//! extra task hop: a `match` and the same actor message or store submit
//! the caller would make itself.

use super::{shutting_down, store_error, ServerApiError};
use crate::gc::{ForceGc, GarbageCollector, GcError, GcReport};
use crate::node_tracker::{
    Heartbeat, NodeError, NodeReply, NodeTracker, RegisterNode, UpdateAllocs,
};
use crate::periodic::{ForceLaunch, Launched, PeriodicError, PeriodicLauncher};
use actix::Addr;
use herder::state::{AllocClientUpdate, ApplyOutcome, Command, StateStore, StoreError};
use herder::structs::{Node, NodeId};

/// Where writes go. One variant today: this process's server.
#[derive(Clone, Debug)]
pub(super) enum WritePath {
    Local(LocalServer),
}

/// This process's server: its store and the duties that write to it.
#[derive(Clone)]
pub(super) struct LocalServer {
    store: StateStore,
    nodes: Addr<NodeTracker>,
    periodic: Addr<PeriodicLauncher>,
    gc: Addr<GarbageCollector>,
}

impl std::fmt::Debug for LocalServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalServer")
    }
}

impl WritePath {
    pub(super) fn local(
        store: StateStore,
        nodes: Addr<NodeTracker>,
        periodic: Addr<PeriodicLauncher>,
        gc: Addr<GarbageCollector>,
    ) -> WritePath {
        WritePath::Local(LocalServer {
            store,
            nodes,
            periodic,
            gc,
        })
    }

    /// Applies a command; answers once it is durable.
    pub(super) async fn submit(&self, command: Command) -> Result<ApplyOutcome, ServerApiError> {
        self.submit_raw(command).await?.map_err(store_error)
    }

    /// As [`submit`](Self::submit), with the store's own error, for the
    /// callers that answer a refusal as an outcome (a failed check-and-set
    /// is `Updated: false`, not an error).
    pub(super) async fn submit_raw(
        &self,
        command: Command,
    ) -> Result<Result<ApplyOutcome, StoreError>, ServerApiError> {
        match self {
            WritePath::Local(local) => local
                .store
                .submit(command)
                .await
                .map_err(|_| shutting_down()),
        }
    }

    pub(super) async fn register_node(&self, node: Node) -> Result<NodeReply, ServerApiError> {
        match self {
            WritePath::Local(local) => node_answer(local.nodes.send(RegisterNode(node)).await),
        }
    }

    pub(super) async fn heartbeat(
        &self,
        node_id: NodeId,
        secret_id: &str,
        ready: bool,
    ) -> Result<NodeReply, ServerApiError> {
        let beat = Heartbeat {
            node_id,
            secret_id: secret_id.to_string(),
            ready,
        };
        match self {
            WritePath::Local(local) => node_answer(local.nodes.send(beat).await),
        }
    }

    pub(super) async fn update_allocs(
        &self,
        node_id: NodeId,
        secret_id: &str,
        updates: Vec<AllocClientUpdate>,
    ) -> Result<u64, ServerApiError> {
        let update = UpdateAllocs {
            node_id,
            secret_id: secret_id.to_string(),
            updates,
        };
        match self {
            WritePath::Local(local) => node_answer(local.nodes.send(update).await),
        }
    }

    /// Launches a periodic job's child now: the launcher is the one place
    /// children are derived, on schedule or forced.
    pub(super) async fn force_periodic(
        &self,
        namespace: String,
        job_id: String,
    ) -> Result<Result<Launched, PeriodicError>, ServerApiError> {
        let force = ForceLaunch { namespace, job_id };
        match self {
            WritePath::Local(local) => local
                .periodic
                .send(force)
                .await
                .map_err(|e| ServerApiError::Unavailable(format!("periodic launcher: {e}"))),
        }
    }

    /// A garbage collection that ignores every age threshold.
    pub(super) async fn force_gc(&self) -> Result<Result<GcReport, GcError>, ServerApiError> {
        match self {
            WritePath::Local(local) => local.gc.send(ForceGc).await.map_err(|_| shutting_down()),
        }
    }
}

/// The node tracker's answer, its refusals classified.
fn node_answer<T>(
    sent: Result<Result<T, NodeError>, actix::MailboxError>,
) -> Result<T, ServerApiError> {
    match sent {
        Ok(answer) => answer.map_err(node_error),
        Err(e) => Err(ServerApiError::Unavailable(format!(
            "the server is shutting down ({e})"
        ))),
    }
}

fn node_error(e: NodeError) -> ServerApiError {
    match e {
        NodeError::Invalid(m) => ServerApiError::Invalid(m),
        NodeError::NotFound => ServerApiError::NotFound("node not found".into()),
        NodeError::SecretMismatch => {
            ServerApiError::Forbidden("Permission denied: node secret ID does not match".into())
        }
        NodeError::NotLeader => ServerApiError::Unavailable(e.to_string()),
        NodeError::Store(s) => ServerApiError::Internal(s.to_string()),
    }
}
