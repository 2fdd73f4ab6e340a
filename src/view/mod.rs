//! The scheduler's view of the cluster, below both the scheduler and the
//! state store: the [`State`] trait (everything a scheduler reads of a
//! snapshot) and the data derived from a snapshot's node and usage tables
//! that a state keeps for every evaluation to share.
//!
//! - [`catalog`]: the schedulable nodes numbered and described once per
//!   node table ([`NodeCatalog`], kept by a `NodeCatalogCache`), and a
//!   spread or distinct_property attribute resolved on every catalog node
//!   (`AttributeColumn`).
//! - [`usage_column`]: every catalog node's usage in one vector
//!   ([`UsageColumn`], kept by a `UsageColumnCache`), carried from one
//!   state to the next by the usage maps' difference.
//! - [`node_target`]: a constraint target's value on a node, datacenter
//!   patterns (what the catalog and feasibility both read of a node).
//! - [`fast_map`]: the hasher of maps keyed by node IDs and class names.
//!
//! The layers: `structs` <- `view` <- `state`, `scheduler`. The store's
//! snapshot implements [`State`] and its tables carry the two caches; the
//! scheduler reads them through the trait; neither names the other.
//!
//! Why the caches are these concrete types, kept here, and not an opaque
//! slot in the store's tables (an `Arc<dyn Any + Send + Sync>` per table
//! version that the scheduler fills and downcasts): they are the hot path
//! of every evaluation (the catalog lists each placement's candidates, the
//! usage column is read for every candidate scored; a million allocations
//! go through them in the cluster benchmark), and moving them here changed
//! no line of them, so the compiled code is what it was (same types, same
//! calls, nothing dynamic: the scheduler benches' instruction counts are
//! within 0.3% of before, `docs/PERFORMANCE.md`, issue 17). A slot would
//! add a downcast per fetch that can fail, and split each cache in two: a
//! cache answers only for the very table it was built from
//! (`NodeCatalogCache::get` compares the node table's identity,
//! `UsageColumnCache::get` the usage map's and derives the next column
//! from the maps' difference), which needs the tables' types; behind an
//! `Any` the store would have to clear the slot on every change of the
//! table, or the scheduler keep a copy of the table inside it. The data is
//! plain, derived from the store's own tables, so it belongs below both.

pub mod catalog;
pub mod fast_map;
pub mod node_target;
pub mod usage_column;

use crate::structs::fit::NodeAllocUsage;
use crate::structs::{
    AllocId, Allocation, Deployment, DeploymentId, Job, Node, NodeId, SchedulerConfiguration,
};
use catalog::NodeCatalog;
use std::borrow::Cow;
use std::sync::Arc;
use usage_column::UsageColumn;

/// A consistent, read-only view of the cluster: the scheduler's whole read
/// interface. Deliberately small and object-safe: the state store's
/// snapshot implements it, and so does the scheduler's in-memory
/// `HarnessState` for tests. Every method answers from one consistent
/// point in time.
pub trait State: Send + Sync {
    /// Every node (any status). The order must be stable for a given
    /// snapshot (sorted by ID is ideal): placements shuffle it with a seed
    /// derived from the evaluation, so a stable input order makes runs
    /// reproducible.
    fn nodes(&self) -> Vec<Arc<Node>>;
    /// One node, if it exists.
    fn node_by_id(&self, id: &NodeId) -> Option<Arc<Node>>;
    /// Every allocation of a job, terminal ones included.
    fn allocs_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>>;
    /// Every allocation on a node, terminal ones included.
    fn allocs_by_node(&self, node: &NodeId) -> Vec<Arc<Allocation>>;
    /// The schedulable nodes and what placements need of them, derived
    /// from the node table (see [`NodeCatalog`]). Implementations keep it
    /// while their node table does not change.
    fn node_catalog(&self) -> Arc<NodeCatalog>;
    /// What the node's live allocations hold (`None`: nothing). The state
    /// store keeps this up to date per node and lends it (an evaluation
    /// reads it for nearly every node: a reference count moved per node,
    /// on memory the other workers read too, cost more than the lookup);
    /// the default sums the node's allocations.
    fn node_usage(&self, node: &NodeId) -> Option<Cow<'_, NodeAllocUsage>> {
        let usage = NodeAllocUsage::of(self.allocs_by_node(node).iter().map(|a| &**a));
        (usage.live > 0).then_some(Cow::Owned(usage))
    }
    /// Every catalog node's usage in one vector (see [`UsageColumn`]), for
    /// states that keep one; with `None` placements look nodes up one by
    /// one with [`node_usage`](Self::node_usage). Must agree with it.
    fn node_usage_column(&self) -> Option<Arc<UsageColumn>> {
        None
    }
    /// One allocation, if it exists.
    fn alloc_by_id(&self, id: &AllocId) -> Option<Arc<Allocation>>;
    /// The current version of a job (a stopped job is still returned; a
    /// purged one is not).
    fn job_by_id(&self, namespace: &str, job_id: &str) -> Option<Arc<Job>>;
    /// A specific version of a job, for comparing allocations made from an
    /// older version with the current one.
    fn job_by_version(&self, namespace: &str, job_id: &str, version: u64) -> Option<Arc<Job>>;
    /// The job's most recent deployment, whatever its status.
    fn latest_deployment(&self, namespace: &str, job_id: &str) -> Option<Arc<Deployment>>;
    /// The job's deployments, newest first.
    fn deployments_of_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Deployment>>;
    /// One deployment, if it exists.
    fn deployment_by_id(&self, id: &DeploymentId) -> Option<Arc<Deployment>>;
    /// The operator's scheduler configuration (algorithm, preemption).
    fn scheduler_config(&self) -> SchedulerConfiguration;
    /// The index of the latest change in the snapshot.
    fn latest_index(&self) -> u64;
}
