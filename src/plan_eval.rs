//! Plan evaluation: what the plan applier checks before it commits.
//!
//! A scheduler plans against a snapshot that may be stale by the time its
//! plan reaches the applier: other workers' plans may have landed on the
//! same nodes, nodes may have gone down. So every node a plan touches is
//! checked again against the newest state (plus, when the applier
//! pipelines, the effect of the plan it is still writing): the node must
//! exist, be ready and eligible (unless the plan only stops allocations
//! there), and the full proposed set of allocations must fit. Nodes that
//! fail are dropped from the result (partial commit) unless the plan is
//! all-at-once, in which case nothing is committed.

use crate::state::{StateSnapshot, Table};
use crate::structs::fit::{FitError, NodeAllocUsage};
use crate::structs::{AllocId, NodeId, Plan, PlanResult};
use std::collections::HashSet;
use std::sync::Arc;

/// Why a node of a plan was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeRejection {
    Missing,
    NotReady(String),
    Ineligible,
    DoesNotFit(FitError),
}

impl std::fmt::Display for NodeRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeRejection::Missing => f.write_str("node does not exist"),
            NodeRejection::NotReady(s) => write!(f, "node is {s}, not ready"),
            NodeRejection::Ineligible => f.write_str("node is not eligible for placements"),
            NodeRejection::DoesNotFit(e) => write!(f, "allocations do not fit: {e}"),
        }
    }
}

/// The verdict on a whole plan.
#[derive(Clone, Debug, Default)]
pub struct PlanVerdict {
    pub result: PlanResult,
    pub rejected: Vec<(NodeId, NodeRejection)>,
    /// What each accepted node the plan places on would hold, by node ID
    /// (sorted): worked out to check the fit, and kept so that applying
    /// the plan's usage to the state it was judged against need not work
    /// it out again (`StateSnapshot::apply_judged_usage`).
    pub usage: Vec<(NodeId, Arc<NodeAllocUsage>)>,
}

/// Checks every node of `plan` against `snap` and returns what may be
/// committed. `RefreshIndex` is set when anything was refused, so the
/// scheduler waits for a state that shows why before it retries.
pub fn evaluate_plan(snap: &StateSnapshot, plan: &Plan) -> PlanVerdict {
    let mut verdict = judge_plan(snap, plan);
    verdict.result.copy_committed(plan);
    verdict
}

/// [`evaluate_plan`] without the plan's entries in the result: which
/// nodes are refused and why, the refresh index and the rejected nodes.
/// The plan applier copies the committed entries once, into the store's
/// command (see `PlanResult::copy_committed`), rather than into the result
/// and again into the command.
pub fn judge_plan(snap: &StateSnapshot, plan: &Plan) -> PlanVerdict {
    let mut verdict = PlanVerdict::default();
    // `nodes` comes sorted, and so does `usage`.
    for node_id in plan.nodes() {
        match check_node(snap, plan, node_id) {
            Ok(Some(usage)) => verdict.usage.push((node_id, Arc::new(usage))),
            Ok(None) => {}
            Err(why) => verdict.rejected.push((node_id, why)),
        }
    }
    if !verdict.rejected.is_empty() {
        verdict.result.refresh_index = snap.max_table_index(&[Table::Allocs, Table::Nodes]).max(1);
        verdict.result.rejected_nodes = verdict.rejected.iter().map(|(n, _)| *n).collect();
    }
    verdict
}

/// Checks one node of a plan.
pub fn evaluate_node(
    snap: &StateSnapshot,
    plan: &Plan,
    node_id: NodeId,
) -> Result<(), NodeRejection> {
    check_node(snap, plan, node_id).map(drop)
}

/// [`evaluate_node`], with what the node would hold when the plan places
/// anything there.
fn check_node(
    snap: &StateSnapshot,
    plan: &Plan,
    node_id: NodeId,
) -> Result<Option<NodeAllocUsage>, NodeRejection> {
    let placing = plan
        .node_allocation
        .get(&node_id)
        .is_some_and(|a| !a.is_empty());
    if !placing {
        // Stopping and evicting always succeed, whatever the node's state.
        return Ok(None);
    }
    let node = snap.node(&node_id).ok_or(NodeRejection::Missing)?;
    if node.status != crate::structs::NodeStatus::Ready {
        return Err(NodeRejection::NotReady(node.status.to_string()));
    }
    if !node.is_schedulable() && !only_updates_existing(snap, plan, node_id) {
        return Err(NodeRejection::Ineligible);
    }
    let usage = proposed_usage(snap, plan, node_id);
    usage.fits(node).map_err(NodeRejection::DoesNotFit)?;
    Ok(Some(usage))
}

/// In-place updates of allocations already on an ineligible (e.g.
/// draining) node are allowed: they add nothing new there.
fn only_updates_existing(snap: &StateSnapshot, plan: &Plan, node_id: NodeId) -> bool {
    plan.node_allocation.get(&node_id).is_some_and(|allocs| {
        allocs
            .iter()
            .all(|a| snap.alloc(&a.id).is_some_and(|old| old.node_id == node_id))
    })
}

/// What the node would hold if the plan were committed: the store's usage
/// of its live allocations, less those the plan stops, preempts or
/// replaces in place, plus the plan's placements. O(the plan's entries
/// for the node), whatever already runs there.
fn proposed_usage(snap: &StateSnapshot, plan: &Plan, node_id: NodeId) -> NodeAllocUsage {
    let mut usage = snap
        .node_usage(&node_id)
        .map_or_else(NodeAllocUsage::default, |u| (**u).clone());
    let placed = plan
        .node_allocation
        .get(&node_id)
        .map_or(&[][..], |v| &v[..]);
    let stopped = [
        plan.node_update.get(&node_id),
        plan.node_preemptions.get(&node_id),
    ];
    // A placement the scheduler made new (`CreateIndex` 0) replaces
    // nothing, so only updates in place are looked up: a lookup in the
    // allocation table is the costly part of checking a plan of new work.
    // Were such an ID to exist after all, it would be counted twice here,
    // which can only refuse, never over-commit.
    let leaving = stopped
        .into_iter()
        .flatten()
        .flat_map(|list| list.iter().map(|s| s.id))
        .chain(placed.iter().filter(|a| a.create_index != 0).map(|a| a.id));
    let mut released: HashSet<AllocId> = HashSet::new();
    for id in leaving {
        if let Some(old) = snap.alloc(&id).filter(|a| a.node_id == node_id) {
            if released.insert(id) {
                usage.remove(old);
            }
        }
    }
    for alloc in placed {
        usage.add(alloc);
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::{self, AllocBuilder};
    use crate::state::{Command, PlanResults};
    use crate::structs::{
        AllocStop, Allocation, DesiredStatus, DrainStrategy, Job, Node, NodeStatus, TriggeredBy,
    };
    use std::sync::Arc;

    struct World {
        snap: StateSnapshot,
        index: u64,
        job: Arc<Job>,
        builder: AllocBuilder,
    }

    impl World {
        fn new(nodes: &[&Node]) -> World {
            let mut w = World {
                snap: StateSnapshot::new(),
                index: 0,
                job: Arc::new(fixtures::job("default", "web", &[("g", 1)])),
                builder: AllocBuilder::new(&fixtures::job("default", "web", &[("g", 1)]), "g"),
            };
            for n in nodes {
                w.apply(Command::NodeRegister {
                    node: Arc::new((*n).clone()),
                });
            }
            let job = w.job.clone();
            w.apply(Command::JobRegister {
                job,
                eval: None,
                enforce_index: None,
            });
            w
        }

        fn apply(&mut self, cmd: Command) {
            self.index += 1;
            self.snap.apply(self.index, &cmd).expect("command applies");
        }

        /// An allocation using 100 MHz / 64 MB / 300 MB disk on `node`.
        fn alloc(&self, node: &Node, i: u32) -> Allocation {
            self.builder.build(i, node.id, crate::structs::new_id(), 1)
        }

        fn commit(&mut self, allocs: Vec<Allocation>) {
            let mut results = PlanResults {
                job: Some(self.job.clone()),
                ..Default::default()
            };
            for a in allocs {
                results
                    .node_allocation
                    .entry(a.node_id)
                    .or_default()
                    .push(a);
            }
            self.apply(Command::ApplyPlanResults(results));
        }

        fn plan(&self, allocs: Vec<Allocation>) -> Plan {
            let mut plan = Plan {
                job: Some(self.job.clone()),
                ..Default::default()
            };
            for a in allocs {
                plan.push_alloc(a);
            }
            plan
        }
    }

    /// A node with room for exactly `n` of the test allocations (by CPU).
    fn node_fitting(n: i64) -> Node {
        let mut node = fixtures::node("n");
        node.node_resources.cpu.cpu_shares = 100 * n;
        node
    }

    fn stop(id: crate::structs::AllocId) -> AllocStop {
        AllocStop {
            id,
            desired_status: DesiredStatus::Stop,
            desired_description: "replaced".into(),
            client_status: None,
            followup_eval_id: None,
            preempted_by: None,
        }
    }

    #[test]
    fn the_workers_cheap_view_of_a_plan_judges_the_next_plan_as_a_full_apply_would() {
        let (a, b, c) = (node_fitting(3), node_fitting(3), node_fitting(3));
        let mut w = World::new(&[&a, &b, &c]);
        let (on_a, on_b) = (w.alloc(&a, 0), w.alloc(&b, 1));
        let moved = w.alloc(&c, 2);
        w.commit(vec![on_a.clone(), on_b.clone(), moved.clone()]);
        // The plan in flight: stops on_a, evicts on_b, updates `moved` in
        // place with twice the CPU, and places two more on a.
        // As a scheduler does: the update starts from the stored row.
        let mut bigger = (**w.snap.alloc(&moved.id).unwrap()).clone();
        std::sync::Arc::make_mut(&mut bigger.allocated_resources)
            .tasks
            .iter_mut()
            .for_each(|(_, t)| t.cpu.cpu_shares *= 2);
        let mut in_flight = PlanResults {
            job: Some(w.job.clone()),
            ..Default::default()
        };
        in_flight.node_update.insert(a.id, vec![stop(on_a.id)]);
        in_flight.node_preemptions.insert(b.id, vec![stop(on_b.id)]);
        in_flight.node_allocation.insert(c.id, vec![bigger]);
        in_flight
            .node_allocation
            .insert(a.id, vec![w.alloc(&a, 3), w.alloc(&a, 4)]);
        let mut full = w.snap.clone();
        full.apply(w.index + 1, &Command::ApplyPlanResults(in_flight.clone()))
            .unwrap();
        let mut view = w.snap.clone();
        view.apply_judged_usage(&in_flight, &[]);
        // The same plan judged against the same state, its view made from
        // the usage the check found instead of worked out again.
        let as_plan = Plan {
            job: in_flight.job.clone(),
            node_update: in_flight.node_update.clone(),
            node_allocation: in_flight.node_allocation.clone(),
            node_preemptions: in_flight.node_preemptions.clone(),
            ..Default::default()
        };
        let verdict = judge_plan(&w.snap, &as_plan);
        assert!(verdict.rejected.is_empty());
        let judged: Vec<_> = verdict.usage.iter().map(|(n, _)| *n).collect();
        let mut placing = vec![a.id, c.id];
        placing.sort_unstable();
        assert_eq!(judged, placing, "the placing nodes, sorted");
        let mut judged_view = w.snap.clone();
        judged_view.apply_judged_usage(&in_flight, &verdict.usage);
        for node in [&a, &b, &c] {
            assert_eq!(view.node_usage(&node.id), full.node_usage(&node.id));
            assert_eq!(judged_view.node_usage(&node.id), full.node_usage(&node.id));
        }
        // What verification reads of an allocation (not its descriptions
        // or indexes, which the view leaves alone).
        let seen = |s: &StateSnapshot, id| {
            s.alloc(&id).map(|a| {
                (
                    a.node_id,
                    a.desired_status,
                    a.client_status,
                    a.allocated_resources.clone(),
                )
            })
        };
        for id in [on_a.id, on_b.id, moved.id] {
            assert_eq!(seen(&view, id), seen(&full, id));
            assert_eq!(seen(&judged_view, id), seen(&full, id));
        }
        // The next plan: a has room for one more, b for three, c for one.
        let cases = [
            (&a, 1, true),
            (&a, 2, false),
            (&b, 3, true),
            (&c, 1, true),
            (&c, 2, false),
        ];
        for (node, n, fits) in cases {
            let allocs = (10..10 + n).map(|i| w.alloc(node, i)).collect();
            let plan = w.plan(allocs);
            let (on_view, on_full) = (evaluate_plan(&view, &plan), evaluate_plan(&full, &plan));
            assert_eq!(on_view.rejected, on_full.rejected);
            assert_eq!(
                evaluate_plan(&judged_view, &plan).rejected,
                on_full.rejected
            );
            assert_eq!(on_view.rejected.is_empty(), fits, "{n} on {}", node.id);
        }
    }

    #[test]
    fn plan_that_fits_is_committed_whole() {
        let (a, b) = (node_fitting(2), node_fitting(2));
        let w = World::new(&[&a, &b]);
        let plan = w.plan(vec![w.alloc(&a, 0), w.alloc(&a, 1), w.alloc(&b, 2)]);
        let v = evaluate_plan(&w.snap, &plan);
        assert!(v.rejected.is_empty());
        assert_eq!(v.result.full_commit(&plan), (true, 3, 3));
        assert_eq!(v.result.refresh_index, 0);
    }

    #[test]
    fn allocations_committed_since_the_plan_was_made_cause_a_partial_commit() {
        let (a, b) = (node_fitting(1), node_fitting(1));
        let mut w = World::new(&[&a, &b]);
        // Another worker's plan landed on node a first.
        let other = w.alloc(&a, 9);
        w.commit(vec![other]);
        let plan = w.plan(vec![w.alloc(&a, 0), w.alloc(&b, 1)]);
        let v = evaluate_plan(&w.snap, &plan);
        assert_eq!(v.rejected.len(), 1);
        assert!(matches!(v.rejected[0], (id, NodeRejection::DoesNotFit(_)) if id == a.id));
        assert!(v.result.node_allocation.contains_key(&b.id));
        assert!(!v.result.node_allocation.contains_key(&a.id));
        assert_eq!(
            v.result.refresh_index, w.index,
            "worker must refresh to see why"
        );
        assert_eq!(v.result.rejected_nodes, vec![a.id]);
    }

    #[test]
    fn all_at_once_plan_commits_nothing_when_a_node_fails() {
        let (a, b) = (node_fitting(1), node_fitting(1));
        let w = World::new(&[&a, &b]);
        let mut plan = w.plan(vec![w.alloc(&a, 0), w.alloc(&a, 1), w.alloc(&b, 2)]);
        plan.all_at_once = true;
        let v = evaluate_plan(&w.snap, &plan);
        assert!(v.result.is_no_op());
        assert!(v.result.refresh_index > 0);
    }

    /// The applier answers a worker with `judge_plan`'s verdict and the
    /// worker fills the entries in from its own plan: the two halves must
    /// give what `evaluate_plan` gives, partial or all-at-once.
    #[test]
    fn a_judged_plan_filled_in_from_the_plan_is_the_evaluated_one() {
        let (a, b) = (node_fitting(1), node_fitting(2));
        let mut w = World::new(&[&a, &b]);
        w.commit(vec![w.alloc(&a, 9)]);
        let mut plan = w.plan(vec![w.alloc(&a, 0), w.alloc(&b, 1), w.alloc(&b, 2)]);
        plan.node_update
            .insert(a.id, vec![stop(crate::structs::new_id())]);
        let (big, small) = (node_fitting(4), node_fitting(4));
        let roomy = World::new(&[&big, &small]);
        let whole = roomy.plan(vec![roomy.alloc(&big, 0), roomy.alloc(&small, 1)]);
        for (snap, all_at_once, plan) in [
            (&w.snap, false, &plan),
            (&w.snap, true, &plan),
            (&roomy.snap, false, &whole),
        ] {
            let mut plan = plan.clone();
            plan.all_at_once = all_at_once;
            let evaluated = evaluate_plan(snap, &plan);
            let judged = judge_plan(snap, &plan);
            assert!(judged.result.is_no_op(), "no entries in a verdict");
            assert_eq!(judged.rejected, evaluated.rejected);
            let mut filled = judged.result.clone();
            filled.take_committed(plan.clone());
            assert_eq!(filled, evaluated.result, "all at once: {all_at_once}");
            let mut copied = judged.result;
            copied.copy_committed(&plan);
            assert_eq!(copied, evaluated.result);
        }
        let evaluated = evaluate_plan(&w.snap, &plan);
        assert_eq!(evaluated.result.full_commit(&plan), (false, 3, 2));
        assert!(evaluated.result.node_update.is_empty(), "a's stop with a");
    }

    #[test]
    fn down_or_missing_nodes_refuse_placements_but_accept_stops() {
        let (a, b) = (node_fitting(4), node_fitting(4));
        let mut w = World::new(&[&a, &b]);
        let old = w.alloc(&a, 0);
        w.commit(vec![old.clone()]);
        w.apply(Command::NodeUpdateStatus {
            node_id: a.id,
            status: NodeStatus::Down,
            event: None,
            evals: vec![],
            updated_at: 2,
        });
        let mut plan = w.plan(vec![w.alloc(&a, 1)]);
        plan.push_stop(
            a.id,
            AllocStop {
                id: old.id,
                desired_status: DesiredStatus::Stop,
                desired_description: "node down".into(),
                client_status: None,
                followup_eval_id: None,
                preempted_by: None,
            },
        );
        let ghost = fixtures::node("ghost");
        plan.push_alloc(w.alloc(&ghost, 2));
        let v = evaluate_plan(&w.snap, &plan);
        let reasons: Vec<_> = v.rejected.iter().map(|(n, r)| (*n, r.clone())).collect();
        assert!(reasons.contains(&(a.id, NodeRejection::NotReady("down".into()))));
        assert!(reasons.contains(&(ghost.id, NodeRejection::Missing)));
        // Node a's stop is dropped with its placement (the node as a whole
        // was refused); a plan of stops alone is always accepted.
        let stops_only = Plan {
            node_update: plan.node_update.clone(),
            ..Default::default()
        };
        let v = evaluate_plan(&w.snap, &stops_only);
        assert!(v.rejected.is_empty());
        assert_eq!(v.result.node_update[&a.id].len(), 1);
    }

    #[test]
    fn a_stop_in_the_same_plan_frees_room_for_a_placement() {
        let a = node_fitting(1);
        let mut w = World::new(&[&a]);
        let old = w.alloc(&a, 0);
        w.commit(vec![old.clone()]);
        let mut plan = w.plan(vec![w.alloc(&a, 1)]);
        assert!(
            !evaluate_plan(&w.snap, &plan).rejected.is_empty(),
            "full without the stop"
        );
        plan.push_stop(
            a.id,
            AllocStop {
                id: old.id,
                desired_status: DesiredStatus::Stop,
                desired_description: "replaced".into(),
                client_status: None,
                followup_eval_id: None,
                preempted_by: None,
            },
        );
        let v = evaluate_plan(&w.snap, &plan);
        assert!(v.rejected.is_empty(), "{:?}", v.rejected);
    }

    #[test]
    fn draining_node_takes_in_place_updates_but_no_new_work() {
        let a = node_fitting(4);
        let mut w = World::new(&[&a]);
        let old = w.alloc(&a, 0);
        w.commit(vec![old.clone()]);
        w.apply(Command::NodeUpdateDrain {
            node_id: a.id,
            drain: Some(DrainStrategy::default()),
            mark_eligible: false,
            event: None,
            evals: vec![crate::state::fixtures::eval(
                &w.job,
                TriggeredBy::NodeDrain,
                3,
            )],
        });
        let mut updated = old.clone();
        updated.job_version = 1;
        let v = evaluate_plan(&w.snap, &w.plan(vec![updated]));
        assert!(v.rejected.is_empty(), "{:?}", v.rejected);
        let v = evaluate_plan(&w.snap, &w.plan(vec![w.alloc(&a, 1)]));
        assert_eq!(v.rejected[0].1, NodeRejection::Ineligible);
    }
}
