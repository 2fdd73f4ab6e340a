//! The seam between openraft and the wire: a [`Transport`] carries the
//! three Raft RPCs to another server, and [`Network`] adapts any transport
//! to openraft's `RaftNetworkFactory` / `RaftNetwork`.
//!
//! Two transports are meant to sit behind it: the in-process `Router` of
//! the tests (with fault injection) and, next, HTTP on the RPC port with
//! the cluster key check. Openraft's default chunked snapshot sending is
//! kept, so a transport only ever carries bounded messages.

use crate::{NodeId, ServerNode, TypeConfig};
use openraft::error::{InstallSnapshotError, RPCError, RaftError};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use std::future::Future;
use std::time::Duration;

/// An RPC failure as openraft classifies it, for RPCs answering `E`.
pub type RpcError<E = RaftError<NodeId>> = RPCError<NodeId, ServerNode, E>;
/// The install-snapshot RPC's error.
pub type SnapshotRpcError = RpcError<RaftError<NodeId, InstallSnapshotError>>;

/// Carries Raft RPCs from `from` to `target` (at `node`'s address).
pub trait Transport: Clone + Send + Sync + 'static {
    fn append_entries(
        &self,
        from: NodeId,
        target: NodeId,
        node: &ServerNode,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> impl Future<Output = Result<AppendEntriesResponse<NodeId>, RpcError>> + Send;

    fn vote(
        &self,
        from: NodeId,
        target: NodeId,
        node: &ServerNode,
        rpc: VoteRequest<NodeId>,
    ) -> impl Future<Output = Result<VoteResponse<NodeId>, RpcError>> + Send;

    fn install_snapshot(
        &self,
        from: NodeId,
        target: NodeId,
        node: &ServerNode,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> impl Future<Output = Result<InstallSnapshotResponse<NodeId>, SnapshotRpcError>> + Send;
}

/// How long a connection waits before retrying an unreachable server:
/// short enough that a healed partition is noticed well within an
/// election timeout, long enough not to spin.
const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(100);

/// Openraft's network factory over a transport, for server `from`.
pub struct Network<X: Transport> {
    from: NodeId,
    transport: X,
}

impl<X: Transport> Network<X> {
    pub fn new(from: NodeId, transport: X) -> Self {
        Network { from, transport }
    }
}

/// A connection from one server to another.
pub struct Connection<X: Transport> {
    from: NodeId,
    target: NodeId,
    node: ServerNode,
    transport: X,
}

impl<X: Transport> RaftNetworkFactory<TypeConfig> for Network<X> {
    type Network = Connection<X>;

    async fn new_client(&mut self, target: NodeId, node: &ServerNode) -> Connection<X> {
        Connection {
            from: self.from,
            target,
            node: node.clone(),
            transport: self.transport.clone(),
        }
    }
}

impl<X: Transport> RaftNetwork<TypeConfig> for Connection<X> {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcError> {
        self.transport
            .append_entries(self.from, self.target, &self.node, rpc)
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, SnapshotRpcError> {
        self.transport
            .install_snapshot(self.from, self.target, &self.node, rpc)
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcError> {
        self.transport
            .vote(self.from, self.target, &self.node, rpc)
            .await
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(UNREACHABLE_BACKOFF))
    }
}
