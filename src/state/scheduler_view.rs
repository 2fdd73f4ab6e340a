//! The state store's snapshot as the scheduler sees it: an implementation
//! of [`crate::view::State`], the scheduler's whole read interface, with
//! the node catalog and usage column the tables keep.
//!
//! The store and the scheduler never name each other (both depend on
//! `view`, below them), so the scheduler runs the same over this snapshot
//! in the server and over the in-memory `HarnessState` in its tests.

use super::StateSnapshot;
use crate::structs::fit::NodeAllocUsage;
use crate::structs::{
    AllocId, Allocation, Deployment, DeploymentId, Job, Node, NodeId, SchedulerConfiguration,
};
use crate::view::catalog::NodeCatalog;
use crate::view::usage_column::UsageColumn;
use crate::view::State;
use std::borrow::Cow;
use std::sync::Arc;

impl State for StateSnapshot {
    fn nodes(&self) -> Vec<Arc<Node>> {
        // Ordered by ID: the table is an ordered map.
        StateSnapshot::nodes(self).cloned().collect()
    }

    fn node_by_id(&self, id: &NodeId) -> Option<Arc<Node>> {
        self.node(id).cloned()
    }

    fn allocs_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        StateSnapshot::allocs_by_job(self, namespace, job_id)
            .cloned()
            .collect()
    }

    fn allocs_by_node(&self, node: &NodeId) -> Vec<Arc<Allocation>> {
        StateSnapshot::allocs_by_node(self, node).cloned().collect()
    }

    fn node_catalog(&self) -> Arc<NodeCatalog> {
        self.tables.node_catalog.get(&self.tables.nodes)
    }

    fn node_usage(&self, node: &NodeId) -> Option<Cow<'_, NodeAllocUsage>> {
        StateSnapshot::node_usage(self, node).map(|u| Cow::Borrowed(&**u))
    }

    fn node_usage_column(&self) -> Option<Arc<UsageColumn>> {
        let catalog = State::node_catalog(self);
        Some(
            self.tables
                .usage_columns
                .get(&catalog, &self.tables.node_usage),
        )
    }

    fn alloc_by_id(&self, id: &AllocId) -> Option<Arc<Allocation>> {
        self.alloc(id).cloned()
    }

    fn job_by_id(&self, namespace: &str, job_id: &str) -> Option<Arc<Job>> {
        self.job(namespace, job_id).cloned()
    }

    fn job_by_version(&self, namespace: &str, job_id: &str, version: u64) -> Option<Arc<Job>> {
        StateSnapshot::job_by_version(self, namespace, job_id, version).cloned()
    }

    fn latest_deployment(&self, namespace: &str, job_id: &str) -> Option<Arc<Deployment>> {
        StateSnapshot::latest_deployment(self, namespace, job_id).cloned()
    }

    fn deployments_of_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Deployment>> {
        StateSnapshot::deployments_of_job(self, namespace, job_id)
            .into_iter()
            .cloned()
            .collect()
    }

    fn deployment_by_id(&self, id: &DeploymentId) -> Option<Arc<Deployment>> {
        self.deployment(id).cloned()
    }

    fn scheduler_config(&self) -> SchedulerConfiguration {
        (*StateSnapshot::scheduler_config(self)).clone()
    }

    fn latest_index(&self) -> u64 {
        StateSnapshot::latest_index(self)
    }
}
