//! Nodes: the node protocol a client agent speaks (register, heartbeat,
//! allocation updates: Nomad's `Node.Register`, `Node.UpdateStatus`,
//! `Node.UpdateAlloc`) and the operator's writes (Nomad's
//! `Node.UpdateEligibility`, `Node.UpdateDrain`, `Node.Evaluate`,
//! `Node.Deregister`).
//!
//! Node changes that may move work come with evaluations, as Nomad makes
//! them: one per job with allocations on the node plus one per system or
//! sysbatch job (those may now place on, or must leave, the node).

use super::{unix_nanos, ServerApi, ServerApiError};
use crate::node_drainer::DRAIN_SUBSYSTEM;
use herder::state::{AllocClientUpdate, Command, StateSnapshot};
use herder::structs::{
    Allocation, DrainStrategy, EvalId, Evaluation, Node, NodeEvent, NodeId, SchedulingEligibility,
    TriggeredBy,
};
use std::collections::BTreeSet;
use std::sync::Arc;

pub use crate::node_tracker::NodeReply;

/// Nomad's `NodeUpdateResponse`: the answer of the operator's node writes.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeWriteResult {
    /// The evaluations the write created (empty when nothing may move).
    pub eval_ids: Vec<EvalId>,
    /// The index of the evaluations; 0 when there are none.
    pub eval_create_index: u64,
    pub node_modify_index: u64,
    /// The state index at which the write is durable.
    pub index: u64,
}

impl NodeWriteResult {
    fn new(index: u64, evals: &[Evaluation]) -> NodeWriteResult {
        NodeWriteResult {
            eval_ids: evals.iter().map(|e| e.id).collect(),
            eval_create_index: if evals.is_empty() { 0 } else { index },
            node_modify_index: index,
            index,
        }
    }
}

/// How a node drains (Nomad's `DrainSpec`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainSpec {
    /// Nanoseconds the allocations have to move before they are stopped;
    /// 0 waits without limit, a negative value forces the drain now.
    pub deadline: i64,
    /// Leave the system jobs' allocations on the node.
    pub ignore_system_jobs: bool,
}

/// A drain set or cancelled (`PUT /v1/node/:id/drain`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainNode {
    pub node_id: NodeId,
    /// `None` cancels a drain in progress.
    pub spec: Option<DrainSpec>,
    /// With a cancel: make the node eligible for scheduling again.
    pub mark_eligible: bool,
}

impl ServerApi {
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.snapshot().nodes().cloned().collect()
    }

    pub fn node(&self, node_id: &NodeId) -> Option<Arc<Node>> {
        self.snapshot().node(node_id).cloned()
    }

    pub fn node_allocations(&self, node_id: &NodeId) -> Vec<Arc<Allocation>> {
        self.snapshot().allocs_by_node(node_id).cloned().collect()
    }

    /// Registers a node (as a client agent does); the node keeps its
    /// `SecretID` for the calls below.
    pub async fn register_node(&self, node: Node) -> Result<NodeReply, ServerApiError> {
        self.writes.register_node(node).await
    }

    /// A node's heartbeat; `ready: false` reports it initializing.
    pub async fn heartbeat(
        &self,
        node_id: NodeId,
        secret_id: &str,
        ready: bool,
    ) -> Result<NodeReply, ServerApiError> {
        self.writes.heartbeat(node_id, secret_id, ready).await
    }

    /// A node's report of its allocations' client status; returns the
    /// index at which it is durable.
    pub async fn update_allocations(
        &self,
        node_id: NodeId,
        secret_id: &str,
        updates: Vec<AllocClientUpdate>,
    ) -> Result<u64, ServerApiError> {
        if updates.is_empty() {
            return Err(ServerApiError::Invalid("no allocations to update".into()));
        }
        self.writes.update_allocs(node_id, secret_id, updates).await
    }

    /// Marks a node eligible or ineligible for new work. A node that
    /// becomes eligible has its jobs evaluated (it can take work now); a
    /// draining node cannot be made eligible.
    pub async fn set_node_eligibility(
        &self,
        node_id: NodeId,
        eligibility: SchedulingEligibility,
    ) -> Result<NodeWriteResult, ServerApiError> {
        let snap = self.snapshot();
        let node = find_node(&snap, &node_id)?;
        let eligible = eligibility == SchedulingEligibility::Eligible;
        if node.drain_strategy.is_some() && eligible {
            return Err(ServerApiError::Invalid(
                "can not set node's scheduling eligibility to eligible while it is draining".into(),
            ));
        }
        let evals = if eligible && node.scheduling_eligibility != eligibility {
            node_evals(&snap, node, TriggeredBy::NodeUpdate)
        } else {
            vec![]
        };
        let message = if eligible {
            "Node marked as eligible for scheduling"
        } else {
            "Node marked as ineligible for scheduling"
        };
        let outcome = self
            .writes
            .submit(Command::NodeUpdateEligibility {
                node_id,
                eligibility,
                event: Some(node_event(message)),
                evals: evals.clone(),
            })
            .await?;
        Ok(NodeWriteResult::new(outcome.index, &evals))
    }

    /// Sets, updates or cancels a node's drain. Starting a drain
    /// re-evaluates what runs there (the drainer then moves it); ending one
    /// only matters when the node becomes eligible again.
    pub async fn drain_node(&self, request: DrainNode) -> Result<NodeWriteResult, ServerApiError> {
        let DrainNode {
            node_id,
            spec,
            mark_eligible,
        } = request;
        let snap = self.snapshot();
        let node = find_node(&snap, &node_id)?;
        let now = unix_nanos();
        let drain = spec.map(|spec| DrainStrategy {
            deadline: spec.deadline,
            ignore_system_jobs: spec.ignore_system_jobs,
            force_deadline: (spec.deadline != 0).then(|| now.saturating_add(spec.deadline.max(0))),
            started_at: Some(now),
        });
        // Nomad's drain events; cancelling a drain that is not set says nothing.
        let (trigger, message) = match (&drain, &node.drain_strategy) {
            (Some(_), None) => (TriggeredBy::NodeDrain, Some("Node drain strategy set")),
            (Some(_), Some(_)) => (TriggeredBy::NodeDrain, Some("Node drain strategy updated")),
            (None, Some(_)) => (TriggeredBy::NodeUpdate, Some("Node drain disabled")),
            (None, None) => (TriggeredBy::NodeUpdate, None),
        };
        let event = message.map(|m| NodeEvent {
            subsystem: DRAIN_SUBSYSTEM.to_string(),
            ..node_event(m)
        });
        let evals = if drain.is_some() || mark_eligible {
            node_evals(&snap, node, trigger)
        } else {
            vec![]
        };
        let outcome = self
            .writes
            .submit(Command::NodeUpdateDrain {
                node_id,
                drain,
                mark_eligible,
                event,
                evals: evals.clone(),
            })
            .await?;
        Ok(NodeWriteResult::new(outcome.index, &evals))
    }

    /// Evaluates every job that may place on or run on the node. With
    /// nothing to evaluate, nothing is written and the answer carries the
    /// state's latest index.
    pub async fn evaluate_node(&self, node_id: NodeId) -> Result<NodeWriteResult, ServerApiError> {
        let snap = self.snapshot();
        let node = find_node(&snap, &node_id)?;
        let evals = node_evals(&snap, node, TriggeredBy::NodeUpdate);
        if evals.is_empty() {
            return Ok(NodeWriteResult::new(snap.latest_index().max(1), &evals));
        }
        let outcome = self
            .writes
            .submit(Command::EvalUpdate {
                evals: evals.clone(),
            })
            .await?;
        Ok(NodeWriteResult::new(outcome.index, &evals))
    }

    /// Removes the node; its jobs are evaluated so that its work moves.
    pub async fn purge_node(&self, node_id: NodeId) -> Result<NodeWriteResult, ServerApiError> {
        let snap = self.snapshot();
        let node = find_node(&snap, &node_id)?;
        let evals = node_evals(&snap, node, TriggeredBy::NodeUpdate);
        let node_ids = vec![node_id];
        let mut outcome = self
            .writes
            .submit(Command::NodeDeregister { node_ids })
            .await?;
        if !evals.is_empty() {
            outcome = self
                .writes
                .submit(Command::EvalUpdate {
                    evals: evals.clone(),
                })
                .await?;
        }
        Ok(NodeWriteResult::new(outcome.index, &evals))
    }
}

fn find_node<'a>(snap: &'a StateSnapshot, id: &NodeId) -> Result<&'a Node, ServerApiError> {
    snap.node(id)
        .map(|n| &**n)
        .ok_or_else(|| ServerApiError::NotFound("node not found".into()))
}

/// Evaluations for every job that may be affected by a change to `node`.
fn node_evals(snap: &StateSnapshot, node: &Node, trigger: TriggeredBy) -> Vec<Evaluation> {
    let now = unix_nanos();
    let mut seen = BTreeSet::new();
    let mut evals = Vec::new();
    let on_node = snap
        .allocs_by_node(&node.id)
        .filter_map(|a| snap.job(&a.namespace, &a.job_id));
    let system = snap.jobs().filter(|j| j.job_type.is_system_like());
    for job in on_node.chain(system) {
        if job.is_template() || !seen.insert(job.key()) {
            continue;
        }
        let mut eval = Evaluation::for_job(job, trigger, now);
        eval.node_id = Some(node.id);
        eval.node_modify_index = node.modify_index;
        evals.push(eval);
    }
    evals
}

fn node_event(message: &str) -> NodeEvent {
    NodeEvent {
        message: message.to_string(),
        subsystem: "Cluster".to_string(),
        timestamp: Some(unix_nanos()),
        ..Default::default()
    }
}
