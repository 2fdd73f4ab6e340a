//! An in-process [`Transport`] for tests, with fault injection.
//!
//! Every server of a test cluster registers its `Raft` handle; an RPC is a
//! direct call on the target's handle, unless a fault says otherwise:
//!
//! - a server that is not registered (killed) or is isolated (a partition
//!   of one server from all others) is unreachable, both ways;
//! - with a drop probability, a request is lost before it arrives, or its
//!   answer after it was handled (the case that tests idempotency);
//! - with a delay range, each message waits a random time in it.
//!
//! The random draws come from a seeded generator, so a failing run's
//! fault pattern can be told apart from luck (the interleaving of tasks is
//! still the runtime's).

use crate::transport::{RpcError, SnapshotRpcError, Transport};
use crate::{NodeId, ServerNode, TypeConfig};
use openraft::error::{NetworkError, RPCError, RemoteError, Unreachable};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::Raft;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Why the router did not deliver a message.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error("server {0} is not running")]
    Down(NodeId),
    #[error("server {0} is partitioned off")]
    Isolated(NodeId),
    #[error("message from {from} to {target} dropped")]
    Dropped { from: NodeId, target: NodeId },
}

impl RouterError {
    /// As openraft sees it: a server that is down or cut off is
    /// unreachable (it backs off); a lost message is a network error.
    fn into_rpc<E: std::error::Error>(self) -> RPCError<NodeId, ServerNode, E> {
        match self {
            RouterError::Dropped { .. } => RPCError::Network(NetworkError::new(&self)),
            RouterError::Down(_) | RouterError::Isolated(_) => {
                RPCError::Unreachable(Unreachable::new(&self))
            }
        }
    }
}

struct Faults {
    isolated: BTreeSet<NodeId>,
    drop_probability: f64,
    delay: Option<(Duration, Duration)>,
}

impl Faults {
    fn none() -> Faults {
        Faults {
            isolated: BTreeSet::new(),
            drop_probability: 0.0,
            delay: None,
        }
    }
}

struct RouterState {
    servers: BTreeMap<NodeId, Raft<TypeConfig>>,
    faults: Faults,
    rng: SmallRng,
}

/// What happens to one message.
struct Delivery {
    raft: Raft<TypeConfig>,
    delay: Option<Duration>,
    drop_answer: bool,
}

/// The in-process network of a test cluster. Clones share it.
#[derive(Clone)]
pub struct Router {
    state: Arc<Mutex<RouterState>>,
}

impl Router {
    /// A router without faults; `seed` drives its random draws.
    pub fn new(seed: u64) -> Router {
        Router {
            state: Arc::new(Mutex::new(RouterState {
                servers: BTreeMap::new(),
                faults: Faults::none(),
                rng: SmallRng::seed_from_u64(seed),
            })),
        }
    }

    fn state(&self) -> MutexGuard<'_, RouterState> {
        // Each change under the lock is one assignment or insertion.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes a server reachable (again).
    pub fn add(&self, id: NodeId, raft: Raft<TypeConfig>) {
        self.state().servers.insert(id, raft);
    }

    /// Takes a server off the network (as if its process died).
    pub fn remove(&self, id: NodeId) {
        self.state().servers.remove(&id);
    }

    /// Cuts one server off from all others, both ways.
    pub fn isolate(&self, id: NodeId) {
        self.state().faults.isolated.insert(id);
    }

    /// Loses each message (request or answer) with `probability`.
    pub fn set_drop_probability(&self, probability: f64) {
        self.state().faults.drop_probability = probability.clamp(0.0, 1.0);
    }

    /// Delays each message by a random time in `min..=max`.
    pub fn set_delay(&self, min: Duration, max: Duration) {
        self.state().faults.delay = Some((min, max.max(min)));
    }

    /// Ends every fault: partitions, drops and delays.
    pub fn heal(&self) {
        self.state().faults = Faults::none();
    }

    fn check_link(state: &RouterState, from: NodeId, target: NodeId) -> Result<(), RouterError> {
        for id in [from, target] {
            if state.faults.isolated.contains(&id) {
                return Err(RouterError::Isolated(id));
            }
        }
        Ok(())
    }

    fn plan(&self, from: NodeId, target: NodeId) -> Result<Delivery, RouterError> {
        let mut state = self.state();
        Self::check_link(&state, from, target)?;
        let raft = state
            .servers
            .get(&target)
            .cloned()
            .ok_or(RouterError::Down(target))?;
        let drop_probability = state.faults.drop_probability;
        // Half the losses hit the request, half the answer.
        let lost = drop_probability > 0.0 && state.rng.gen_bool(drop_probability);
        let drop_answer = lost && state.rng.gen_bool(0.5);
        if lost && !drop_answer {
            return Err(RouterError::Dropped { from, target });
        }
        let delay = state
            .faults
            .delay
            .map(|(min, max)| state.rng.gen_range(min..=max));
        Ok(Delivery {
            raft,
            delay,
            drop_answer,
        })
    }

    async fn deliver<R, E, F, Fut>(
        &self,
        from: NodeId,
        target: NodeId,
        call: F,
    ) -> Result<R, RPCError<NodeId, ServerNode, E>>
    where
        E: std::error::Error,
        F: FnOnce(Raft<TypeConfig>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let delivery = self.plan(from, target).map_err(RouterError::into_rpc)?;
        if let Some(delay) = delivery.delay {
            tokio::time::sleep(delay).await;
        }
        let answer = call(delivery.raft).await;
        // A partition raised while the message was on its way loses the
        // answer, as a real one would.
        Self::check_link(&self.state(), from, target).map_err(RouterError::into_rpc)?;
        if delivery.drop_answer {
            return Err(RouterError::Dropped { from, target }.into_rpc());
        }
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }
}

impl Transport for Router {
    async fn append_entries(
        &self,
        from: NodeId,
        target: NodeId,
        _node: &ServerNode,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcError> {
        self.deliver(from, target, |raft| async move {
            raft.append_entries(rpc).await
        })
        .await
    }

    async fn vote(
        &self,
        from: NodeId,
        target: NodeId,
        _node: &ServerNode,
        rpc: VoteRequest<NodeId>,
    ) -> Result<VoteResponse<NodeId>, RpcError> {
        self.deliver(from, target, |raft| async move { raft.vote(rpc).await })
            .await
    }

    async fn install_snapshot(
        &self,
        from: NodeId,
        target: NodeId,
        _node: &ServerNode,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> Result<InstallSnapshotResponse<NodeId>, SnapshotRpcError> {
        self.deliver(from, target, |raft| async move {
            raft.install_snapshot(rpc).await
        })
        .await
    }
}
