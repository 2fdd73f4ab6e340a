//! An in-memory [`State`] for the scheduler's tests, its benches and the
//! [`Harness`](super::Harness), which mutates it as it applies plans (the
//! server schedules over the state store's snapshot instead).

use crate::structs::{
    AllocId, Allocation, Deployment, DeploymentId, DeploymentStatusUpdate, Job, Node, NodeId,
    SchedulerConfiguration,
};
use crate::view::catalog::{NodeCatalog, NodeCatalogCache};
use crate::view::State;
use imbl::{HashMap as PHashMap, OrdMap, Vector};
use std::sync::Arc;

type JobKey = (String, String);

/// An in-memory [`State`] built from persistent maps, so that a snapshot is
/// an O(1) clone. Used by the [`Harness`](super::Harness), tests and benches.
#[derive(Clone, Default)]
pub struct HarnessState {
    nodes: OrdMap<NodeId, Arc<Node>>,
    allocs: PHashMap<AllocId, Arc<Allocation>>,
    allocs_by_node: PHashMap<NodeId, Vector<AllocId>>,
    allocs_by_job: PHashMap<JobKey, Vector<AllocId>>,
    jobs: PHashMap<JobKey, Arc<Job>>,
    job_versions: PHashMap<(String, String, u64), Arc<Job>>,
    config: SchedulerConfiguration,
    deployments: OrdMap<DeploymentId, Arc<Deployment>>,
    index: u64,
    /// Shared by clones: a snapshot reuses its parent's catalog until a
    /// node changes.
    catalog: NodeCatalogCache,
}

impl HarnessState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores a deployment (create index kept, modify index moved), as the
    /// store does when a plan or the watcher writes one.
    pub fn upsert_deployment(&mut self, d: Deployment) {
        let index = self.next_index();
        self.put_deployment(d, index);
    }

    /// Stores a deployment at `index` without advancing the state index:
    /// a plan's deployment changes share the index of its allocations.
    pub fn put_deployment(&mut self, mut d: Deployment, index: u64) {
        d.create_index = self
            .deployments
            .get(&d.id)
            .map_or(index, |old| old.create_index);
        d.modify_index = index;
        self.deployments.insert(d.id, Arc::new(d));
    }

    /// Advances and returns the state index.
    pub fn next_index(&mut self) -> u64 {
        self.index += 1;
        self.index
    }

    /// Inserts or replaces a node, computing its class.
    pub fn upsert_node(&mut self, mut node: Node) -> Arc<Node> {
        let index = self.next_index();
        node.compute_class();
        if node.create_index == 0 {
            node.create_index = index;
        }
        node.modify_index = index;
        let node = Arc::new(node);
        self.nodes.insert(node.id, node.clone());
        node
    }

    /// Inserts or replaces a job, keeping every version.
    pub fn upsert_job(&mut self, mut job: Job) -> Arc<Job> {
        let index = self.next_index();
        if job.create_index == 0 {
            job.create_index = index;
        }
        job.modify_index = index;
        job.job_modify_index = index;
        let job = Arc::new(job);
        let key = (job.namespace.clone(), job.id.clone());
        self.job_versions
            .insert((key.0.clone(), key.1.clone(), job.version), job.clone());
        self.jobs.insert(key, job.clone());
        job
    }

    /// Removes a job (a purge); its versions are kept for old allocations.
    pub fn delete_job(&mut self, namespace: &str, job_id: &str) {
        self.next_index();
        self.jobs
            .remove(&(namespace.to_string(), job_id.to_string()));
    }

    /// Inserts or replaces allocations, keeping the indexes in step and
    /// linking a replacement to the allocation it replaces.
    pub fn upsert_allocs(&mut self, allocs: impl IntoIterator<Item = Allocation>) {
        let index = self.next_index();
        let mut job_key: Option<JobKey> = None;
        for mut alloc in allocs {
            if alloc.create_index == 0 {
                alloc.create_index = index;
            }
            alloc.modify_index = index;
            alloc.alloc_modify_index = index;
            if let Some(prev_id) = alloc.links().previous_allocation {
                if let Some(prev) = self.allocs.get(&prev_id).cloned() {
                    if prev.links().next_allocation != Some(alloc.id) {
                        let mut prev = (*prev).clone();
                        prev.links_mut().next_allocation = Some(alloc.id);
                        prev.modify_index = index;
                        self.allocs.insert(prev.id, Arc::new(prev));
                    }
                }
            }
            self.count_in_deployment(&alloc, index);
            let is_new = !self.allocs.contains_key(&alloc.id);
            if is_new {
                self.allocs_by_node
                    .entry(alloc.node_id)
                    .or_default()
                    .push_back(alloc.id);
                // Plans hold one job: build its key once, not per allocation.
                let same_job = job_key.as_ref().is_some_and(|(ns, id): &JobKey| {
                    **ns == *alloc.namespace && **id == *alloc.job_id
                });
                if !same_job {
                    job_key = Some((alloc.namespace.to_string(), alloc.job_id.to_string()));
                }
                if let Some(key) = &job_key {
                    match self.allocs_by_job.get_mut(key) {
                        Some(ids) => ids.push_back(alloc.id),
                        None => {
                            self.allocs_by_job
                                .insert(key.clone(), Vector::unit(alloc.id));
                        }
                    }
                }
            }
            self.allocs.insert(alloc.id, Arc::new(alloc));
        }
    }

    /// Counts an allocation write into its deployment, as the store does.
    fn count_in_deployment(&mut self, alloc: &Allocation, index: u64) {
        let Some(current) = alloc.deployment_id.and_then(|id| self.deployments.get(&id)) else {
            return;
        };
        let mut d = (**current).clone();
        let old = self.allocs.get(&alloc.id).cloned();
        if d.count_alloc(alloc, old.as_deref()) {
            d.modify_index = index;
            self.deployments.insert(d.id, Arc::new(d));
        }
    }

    /// Applies a status change to an active deployment (a plan's cancel or
    /// success, the watcher's verdict); a finished one keeps its verdict.
    pub fn update_deployment_status(&mut self, update: &DeploymentStatusUpdate, index: u64) {
        let Some(current) = self.deployments.get(&update.deployment_id) else {
            return;
        };
        if !current.active() {
            return;
        }
        let mut d = (**current).clone();
        d.status = update.status;
        d.status_description = update.status_description.clone();
        self.put_deployment(d, index);
    }

    /// Applies a change to one existing deployment (promotion, pause in tests).
    pub fn update_deployment(
        &mut self,
        id: &DeploymentId,
        change: impl FnOnce(&mut Deployment),
    ) -> bool {
        let Some(existing) = self.deployments.get(id).cloned() else {
            return false;
        };
        let mut d = (*existing).clone();
        change(&mut d);
        self.upsert_deployment(d);
        true
    }

    /// Applies a change to one existing allocation (client updates in tests).
    pub fn update_alloc(&mut self, id: &AllocId, change: impl FnOnce(&mut Allocation)) -> bool {
        let Some(existing) = self.allocs.get(id).cloned() else {
            return false;
        };
        let mut alloc = (*existing).clone();
        change(&mut alloc);
        self.upsert_allocs([alloc]);
        true
    }

    /// Applies a change to one existing node.
    pub fn update_node(&mut self, id: &NodeId, change: impl FnOnce(&mut Node)) -> bool {
        let Some(existing) = self.nodes.get(id).cloned() else {
            return false;
        };
        let mut node = (*existing).clone();
        change(&mut node);
        self.upsert_node(node);
        true
    }

    pub fn set_scheduler_config(&mut self, config: SchedulerConfiguration) {
        self.next_index();
        self.config = config;
    }

    /// Every allocation (for assertions in tests).
    pub fn all_allocs(&self) -> Vec<Arc<Allocation>> {
        self.allocs.values().cloned().collect()
    }

    fn resolve(&self, ids: Option<&Vector<AllocId>>) -> Vec<Arc<Allocation>> {
        ids.map(|ids| {
            ids.iter()
                .filter_map(|id| self.allocs.get(id).cloned())
                .collect()
        })
        .unwrap_or_default()
    }
}

impl State for HarnessState {
    fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.values().cloned().collect()
    }

    fn node_by_id(&self, id: &NodeId) -> Option<Arc<Node>> {
        self.nodes.get(id).cloned()
    }

    fn node_catalog(&self) -> Arc<NodeCatalog> {
        self.catalog.get(&self.nodes)
    }

    fn allocs_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        self.resolve(
            self.allocs_by_job
                .get(&(namespace.to_string(), job_id.to_string())),
        )
    }

    fn allocs_by_node(&self, node: &NodeId) -> Vec<Arc<Allocation>> {
        self.resolve(self.allocs_by_node.get(node))
    }

    fn alloc_by_id(&self, id: &AllocId) -> Option<Arc<Allocation>> {
        self.allocs.get(id).cloned()
    }

    fn job_by_id(&self, namespace: &str, job_id: &str) -> Option<Arc<Job>> {
        self.jobs
            .get(&(namespace.to_string(), job_id.to_string()))
            .cloned()
    }

    fn job_by_version(&self, namespace: &str, job_id: &str, version: u64) -> Option<Arc<Job>> {
        self.job_versions
            .get(&(namespace.to_string(), job_id.to_string(), version))
            .cloned()
    }

    fn latest_deployment(&self, namespace: &str, job_id: &str) -> Option<Arc<Deployment>> {
        self.deployments
            .values()
            .filter(|d| d.namespace == namespace && d.job_id == job_id)
            .max_by_key(|d| d.create_index)
            .cloned()
    }

    fn deployments_of_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Deployment>> {
        let mut out: Vec<Arc<Deployment>> = self
            .deployments
            .values()
            .filter(|d| d.namespace == namespace && d.job_id == job_id)
            .cloned()
            .collect();
        out.sort_by_key(|d| std::cmp::Reverse(d.create_index));
        out
    }

    fn deployment_by_id(&self, id: &DeploymentId) -> Option<Arc<Deployment>> {
        self.deployments.get(id).cloned()
    }

    fn scheduler_config(&self) -> SchedulerConfiguration {
        self.config.clone()
    }

    fn latest_index(&self) -> u64 {
        self.index
    }
}
