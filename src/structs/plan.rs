//! Plans: what a scheduler wants changed, and what the plan applier granted.
//!
//! A plan names, per node, the allocations to stop and the allocations to
//! place or update. Stops carry only what changes (ID, desired status and
//! why), as Nomad's normalised plans do: the applier already has the rest.

use super::alloc::{Allocation, ClientStatus, DesiredStatus};
use super::deployment::{Deployment, DeploymentStatusUpdate};
use super::job::Job;
use super::{AllocId, EvalId, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// A stop or eviction of an existing allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AllocStop {
    #[serde(rename = "ID")]
    pub id: AllocId,
    pub desired_status: DesiredStatus,
    pub desired_description: String,
    /// Set when the client status changes with the stop (e.g. `lost`).
    pub client_status: Option<ClientStatus>,
    #[serde(rename = "FollowupEvalID")]
    pub followup_eval_id: Option<EvalId>,
    /// For preemptions: the allocation that displaced this one.
    pub preempted_by: Option<AllocId>,
}

/// Counts of what a plan does to one task group, for `job plan` dry runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DesiredUpdates {
    pub ignore: u64,
    pub place: u64,
    pub migrate: u64,
    pub stop: u64,
    pub in_place_update: u64,
    pub destructive_update: u64,
    pub canary: u64,
    pub preemptions: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PlanAnnotations {
    #[serde(rename = "DesiredTGUpdates")]
    pub desired_tg_updates: BTreeMap<String, DesiredUpdates>,
    #[serde(with = "super::serde_util::nullable")]
    pub preempted_allocs: Vec<AllocId>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Plan {
    #[serde(rename = "EvalID")]
    pub eval_id: EvalId,
    pub eval_token: String,
    pub priority: i32,
    /// All or nothing: a partial fit commits nothing.
    pub all_at_once: bool,
    /// The job version the placements run (absent for a pure stop plan of a
    /// deregistered job).
    pub job: Option<Arc<Job>>,
    pub node_update: HashMap<NodeId, Vec<AllocStop>>,
    pub node_allocation: HashMap<NodeId, Vec<Allocation>>,
    pub node_preemptions: HashMap<NodeId, Vec<AllocStop>>,
    pub annotations: Option<PlanAnnotations>,
    /// The state index the scheduler planned against.
    pub snapshot_index: u64,
    /// The deployment this plan creates or moves on (its placements name it).
    pub deployment: Option<Arc<Deployment>>,
    /// Status changes of other deployments: an older version's deployment
    /// cancelled by a newer job, a stopped job's.
    #[serde(with = "super::serde_util::nullable")]
    pub deployment_updates: Vec<DeploymentStatusUpdate>,
}

impl Plan {
    pub fn is_no_op(&self) -> bool {
        self.node_update.values().all(Vec::is_empty)
            && self.node_allocation.values().all(Vec::is_empty)
            && self.node_preemptions.values().all(Vec::is_empty)
            && self.deployment.is_none()
            && self.deployment_updates.is_empty()
    }

    pub fn push_stop(&mut self, node: NodeId, stop: AllocStop) {
        self.node_update.entry(node).or_default().push(stop);
    }

    pub fn push_alloc(&mut self, alloc: Allocation) {
        self.node_allocation
            .entry(alloc.node_id)
            .or_default()
            .push(alloc);
    }

    /// Removes a placement made earlier in the same plan (a retried
    /// placement, or one preempted within the plan).
    pub fn pop_alloc(&mut self, node: NodeId, id: AllocId) -> Option<Allocation> {
        let list = self.node_allocation.get_mut(&node)?;
        let pos = list.iter().position(|a| a.id == id)?;
        Some(list.remove(pos))
    }

    /// Every node the plan touches.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        let mut seen: Vec<NodeId> = self
            .node_update
            .keys()
            .chain(self.node_allocation.keys())
            .chain(self.node_preemptions.keys())
            .copied()
            .collect();
        seen.sort_unstable();
        seen.dedup();
        seen.into_iter()
    }
}

/// What the plan applier committed of a plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PlanResult {
    pub node_update: HashMap<NodeId, Vec<AllocStop>>,
    pub node_allocation: HashMap<NodeId, Vec<Allocation>>,
    pub node_preemptions: HashMap<NodeId, Vec<AllocStop>>,
    /// Non-zero when only part was committed: the state index the scheduler
    /// must wait for before retrying.
    pub refresh_index: u64,
    /// The index the committed part was written at.
    pub alloc_index: u64,
    /// Nodes that were rejected, for metrics and logs.
    #[serde(with = "super::serde_util::nullable")]
    pub rejected_nodes: Vec<NodeId>,
}

impl PlanResult {
    pub fn is_no_op(&self) -> bool {
        self.node_update.values().all(Vec::is_empty)
            && self.node_allocation.values().all(Vec::is_empty)
            && self.node_preemptions.values().all(Vec::is_empty)
    }

    /// Whether everything the plan asked for was committed, and how many
    /// placements (expected, committed) there were.
    pub fn full_commit(&self, plan: &Plan) -> (bool, usize, usize) {
        let expected: usize = plan.node_allocation.values().map(Vec::len).sum();
        let actual: usize = self.node_allocation.values().map(Vec::len).sum();
        (expected == actual, expected, actual)
    }

    /// Copies in what a plan applier that judged `plan` as this result
    /// says (its `rejected_nodes`) committed of it: the plan's entries on
    /// every other node, or nothing of an all-at-once plan with a node
    /// rejected. (A copy of the whole plan, then kept as `take_committed`
    /// keeps it: mostly nothing is rejected, and then that is all of it.)
    pub fn copy_committed(&mut self, plan: &Plan) {
        self.take_committed(plan.clone());
    }

    /// [`copy_committed`](Self::copy_committed), moving the entries out of
    /// a plan the caller owns instead of copying them. A worker answered
    /// without the entries (the applier sends them only to the store) fills
    /// them in from its own plan.
    pub fn take_committed(&mut self, plan: Plan) {
        let Some(rejected) = self.rejected_set(&plan) else {
            return;
        };
        let kept = |n: &NodeId| !rejected.contains(n);
        self.node_update = take_kept(plan.node_update, kept);
        self.node_allocation = take_kept(plan.node_allocation, kept);
        self.node_preemptions = take_kept(plan.node_preemptions, kept);
    }

    /// The rejected nodes, or `None` when nothing of the plan was committed.
    fn rejected_set(&self, plan: &Plan) -> Option<HashSet<NodeId>> {
        if plan.all_at_once && !self.rejected_nodes.is_empty() {
            return None;
        }
        Some(self.rejected_nodes.iter().copied().collect())
    }
}

fn take_kept<T>(
    entries: HashMap<NodeId, Vec<T>>,
    kept: impl Fn(&NodeId) -> bool,
) -> HashMap<NodeId, Vec<T>> {
    entries.into_iter().filter(|(n, _)| kept(n)).collect()
}
