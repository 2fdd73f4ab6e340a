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

use super::error::{shutting_down, store_error, ServerApiError};
use crate::gc::{ForceGc, GarbageCollector, GcError, GcReport};
use crate::leader_link::{call_leader, CallError, LeaderAnswer, LeaderCall, Refused};
use crate::node_tracker::{
    Heartbeat, NodeError, NodeReply, NodeTracker, RegisterNode, UpdateAllocs,
};
use crate::periodic::{ForceLaunch, Launched, PeriodicError, PeriodicLauncher};
use crate::server_handle::ServerHandle;
use actix::Addr;
use herder::state::{AllocClientUpdate, ApplyOutcome, Command, StateStore, StoreError};
use herder::structs::{Node, NodeId};
use herder_raft::Cluster;

/// Where writes go: this process's server; on a follower, the duties'
/// writes go on to the leader (store commands find it through the store's
/// replicated log).
#[derive(Clone, Debug)]
pub(crate) enum WritePath {
    Local(LocalServer),
}

/// This process's server: its store and the duties that write to it.
#[derive(Clone)]
pub(crate) struct LocalServer {
    store: StateStore,
    nodes: Addr<NodeTracker>,
    periodic: Addr<PeriodicLauncher>,
    gc: Addr<GarbageCollector>,
    /// Set on a cluster member.
    cluster: Option<Cluster>,
}

impl std::fmt::Debug for LocalServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalServer")
    }
}

impl WritePath {
    /// The write path of a running server.
    pub(crate) fn of(server: &ServerHandle) -> WritePath {
        WritePath::Local(LocalServer {
            store: server.store.clone(),
            nodes: server.nodes.clone(),
            periodic: server.periodic.clone(),
            gc: server.gc.clone(),
            cluster: server.cluster.clone(),
        })
    }

    /// The cluster to forward a duty's write to: set on a follower.
    fn leader_elsewhere(&self) -> Option<&Cluster> {
        match self {
            WritePath::Local(local) => local.cluster.as_ref().filter(|c| !c.is_leader()),
        }
    }

    /// Runs a forwarded call on this server (the leader).
    pub(crate) async fn execute_here(
        &self,
        call: LeaderCall,
    ) -> Result<LeaderAnswer, ServerApiError> {
        let WritePath::Local(local) = self;
        match call {
            LeaderCall::RegisterNode(node) => {
                node_answer(local.nodes.send(RegisterNode(*node)).await).map(LeaderAnswer::Node)
            }
            LeaderCall::Heartbeat {
                node_id,
                secret_id,
                ready,
            } => {
                let beat = Heartbeat {
                    node_id,
                    secret_id,
                    ready,
                };
                node_answer(local.nodes.send(beat).await).map(LeaderAnswer::Node)
            }
            LeaderCall::UpdateAllocs {
                node_id,
                secret_id,
                updates,
            } => {
                let update = UpdateAllocs {
                    node_id,
                    secret_id,
                    updates,
                };
                node_answer(local.nodes.send(update).await).map(LeaderAnswer::Index)
            }
            LeaderCall::ForcePeriodic { namespace, job_id } => {
                let force = ForceLaunch { namespace, job_id };
                let launched =
                    local.periodic.send(force).await.map_err(|e| {
                        ServerApiError::Unavailable(format!("periodic launcher: {e}"))
                    })?;
                launched.map(LeaderAnswer::Launched).map_err(periodic_error)
            }
            LeaderCall::ForceGc => {
                let report = local.gc.send(ForceGc).await.map_err(|_| shutting_down())?;
                report.map(LeaderAnswer::Gc).map_err(gc_error)
            }
            _ => Err(ServerApiError::Invalid(
                "not a write of the leader's duties".into(),
            )),
        }
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
        self.duty(LeaderCall::RegisterNode(Box::new(node)))
            .await
            .and_then(|a| expect_answer(a, node_reply))
    }

    pub(super) async fn heartbeat(
        &self,
        node_id: NodeId,
        secret_id: &str,
        ready: bool,
    ) -> Result<NodeReply, ServerApiError> {
        let call = LeaderCall::Heartbeat {
            node_id,
            secret_id: secret_id.to_string(),
            ready,
        };
        self.duty(call)
            .await
            .and_then(|a| expect_answer(a, node_reply))
    }

    pub(super) async fn update_allocs(
        &self,
        node_id: NodeId,
        secret_id: &str,
        updates: Vec<AllocClientUpdate>,
    ) -> Result<u64, ServerApiError> {
        let call = LeaderCall::UpdateAllocs {
            node_id,
            secret_id: secret_id.to_string(),
            updates,
        };
        self.duty(call).await.and_then(|a| {
            expect_answer(a, |a| match a {
                LeaderAnswer::Index(i) => Some(i),
                _ => None,
            })
        })
    }

    /// Launches a periodic job's child now: the launcher is the one place
    /// children are derived, on schedule or forced.
    pub(super) async fn force_periodic(
        &self,
        namespace: String,
        job_id: String,
    ) -> Result<Launched, ServerApiError> {
        let call = LeaderCall::ForcePeriodic { namespace, job_id };
        self.duty(call).await.and_then(|a| {
            expect_answer(a, |a| match a {
                LeaderAnswer::Launched(l) => Some(l),
                _ => None,
            })
        })
    }

    /// A garbage collection that ignores every age threshold.
    pub(super) async fn force_gc(&self) -> Result<GcReport, ServerApiError> {
        self.duty(LeaderCall::ForceGc).await.and_then(|a| {
            expect_answer(a, |a| match a {
                LeaderAnswer::Gc(r) => Some(r),
                _ => None,
            })
        })
    }

    /// A duty's write: here, or at the leader when this server follows.
    async fn duty(&self, call: LeaderCall) -> Result<LeaderAnswer, ServerApiError> {
        match self.leader_elsewhere() {
            Some(cluster) => call_duty(cluster, call).await,
            None => self.execute_here(call).await,
        }
    }
}

fn node_reply(answer: LeaderAnswer) -> Option<NodeReply> {
    match answer {
        LeaderAnswer::Node(reply) => Some(reply),
        _ => None,
    }
}

/// A periodic launcher's refusal, as the API answers it.
fn periodic_error(e: PeriodicError) -> ServerApiError {
    match e {
        PeriodicError::NotFound(_) => ServerApiError::NotFound("job not found".into()),
        PeriodicError::NotPeriodic(_) => {
            ServerApiError::Invalid("can't force launch non-periodic job".into())
        }
        PeriodicError::AlreadyLaunched(_) | PeriodicError::Spec { .. } => {
            ServerApiError::Invalid(e.to_string())
        }
        PeriodicError::NotLeader => ServerApiError::Unavailable(e.to_string()),
        PeriodicError::Store(e) => ServerApiError::Internal(e.to_string()),
    }
}

fn gc_error(e: GcError) -> ServerApiError {
    match e {
        GcError::Busy => ServerApiError::Unavailable(
            "a garbage collection is already running; retry once it is done".into(),
        ),
        e @ GcError::NotLeader => ServerApiError::Unavailable(e.to_string()),
        e => ServerApiError::Internal(format!("garbage collection: {e}")),
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

/// Sends a duty's write to the leader and returns its answer.
pub(super) async fn call_duty(
    cluster: &Cluster,
    call: LeaderCall,
) -> Result<LeaderAnswer, ServerApiError> {
    call_leader(cluster, &call).await.map_err(|e| match e {
        CallError::NoLeader => ServerApiError::Internal("No cluster leader".into()),
        CallError::Refused(Refused::Api(e)) => e,
        CallError::Refused(other) => ServerApiError::Internal(other.to_string()),
        CallError::Lost(e) => ServerApiError::Unavailable(format!("forwarding to the leader: {e}")),
    })
}

/// The answer of the expected kind, or an internal error.
fn expect_answer<T>(
    answer: LeaderAnswer,
    pick: impl FnOnce(LeaderAnswer) -> Option<T>,
) -> Result<T, ServerApiError> {
    pick(answer).ok_or_else(|| {
        ServerApiError::Internal("the leader answered a forwarded call with another kind".into())
    })
}
