//! The state store's snapshot as the scheduler sees it: an implementation
//! of `scheduler::State`, the scheduler's whole read interface.
//!
//! The scheduler never names the store (it depends only on its own trait),
//! so it runs the same over this snapshot in the server and over the
//! in-memory `HarnessState` in its tests.

use super::StateSnapshot;
use crate::scheduler::State;
use crate::structs::fit::NodeAllocUsage;
use crate::structs::{AllocId, Allocation, Job, Node, NodeId, SchedulerConfiguration};
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

    fn node_usage(&self, node: &NodeId) -> NodeAllocUsage {
        StateSnapshot::node_usage(self, node)
            .map_or_else(NodeAllocUsage::default, |u| (**u).clone())
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

    fn scheduler_config(&self) -> SchedulerConfiguration {
        (*StateSnapshot::scheduler_config(self)).clone()
    }

    fn latest_index(&self) -> u64 {
        StateSnapshot::latest_index(self)
    }
}

#[cfg(test)]
mod tests {
    //! The schedulers run over the real store's snapshot exactly as over
    //! the harness: register nodes and a job through commands, schedule,
    //! commit the plan as the plan applier would, and read back.
    use crate::scheduler::{new_scheduler, Planner, PlannerError, State};
    use crate::state::fixtures;
    use crate::state::{Command, PlanResults, StateSnapshot};
    use crate::structs::{Evaluation, JobType, Plan, PlanResult, TriggeredBy};
    use std::sync::Arc;

    /// Applies plans straight to a snapshot, as a one-node plan applier.
    struct SnapshotPlanner {
        snap: StateSnapshot,
        index: u64,
        evals: Vec<Evaluation>,
    }

    impl SnapshotPlanner {
        fn apply(&mut self, cmd: Command) {
            self.index += 1;
            self.snap.apply(self.index, &cmd).expect("command applies");
        }
    }

    impl Planner for SnapshotPlanner {
        fn submit_plan(
            &mut self,
            plan: Plan,
        ) -> Result<(PlanResult, Option<Arc<dyn State>>), PlannerError> {
            let verdict = crate::plan_eval::evaluate_plan(&self.snap, &plan);
            self.apply(Command::ApplyPlanResults(PlanResults {
                eval_id: plan.eval_id,
                job: plan.job.clone(),
                node_update: verdict.result.node_update.clone(),
                node_allocation: verdict.result.node_allocation.clone(),
                node_preemptions: verdict.result.node_preemptions.clone(),
                evals: vec![],
                updated_at: 1,
            }));
            let mut result = verdict.result;
            result.alloc_index = self.index;
            Ok((result, None))
        }
        fn update_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError> {
            self.evals.push(eval.clone());
            self.apply(Command::EvalUpdate { evals: vec![eval] });
            Ok(())
        }
        fn create_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError> {
            self.update_eval(eval)
        }
        fn reblock_eval(&mut self, eval: Evaluation) -> Result<(), PlannerError> {
            self.update_eval(eval)
        }
    }

    fn run(job_type: JobType, count: i32, nodes: usize) -> SnapshotPlanner {
        let mut p = SnapshotPlanner {
            snap: StateSnapshot::new(),
            index: 0,
            evals: vec![],
        };
        for i in 0..nodes {
            let node = fixtures::node(&format!("n{i}"));
            p.apply(Command::NodeRegister {
                node: Arc::new(node),
            });
        }
        let mut job = fixtures::job("default", "web", &[("g", count)]);
        job.job_type = job_type.clone();
        job.canonicalize();
        let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
        p.apply(Command::JobRegister {
            job: Arc::new(job),
            eval: Some(eval.clone()),
            enforce_index: None,
        });
        let eval = p
            .snap
            .eval(&eval.id)
            .map(|e| (**e).clone())
            .expect("eval stored");
        let state: Arc<dyn State> = Arc::new(p.snap.clone());
        let mut planner = SnapshotPlanner {
            snap: p.snap.clone(),
            index: p.index,
            evals: vec![],
        };
        new_scheduler(&job_type, state, &mut planner, 1)
            .expect("scheduler")
            .process(&eval)
            .expect("processed");
        planner
    }

    #[test]
    fn service_job_is_placed_over_the_store_snapshot() {
        let p = run(JobType::Service, 5, 3);
        assert_eq!(p.snap.allocs_by_job("default", "web").count(), 5);
        let done = p.evals.last().expect("eval updated");
        assert_eq!(done.status, crate::structs::EvalStatus::Complete);
        let summary = p.snap.job_summary("default", "web").expect("summary");
        assert_eq!(summary.summary["g"].starting, 5);
    }

    #[test]
    fn system_job_places_one_per_node_over_the_store_snapshot() {
        let p = run(JobType::System, 1, 4);
        let allocs: Vec<_> = p.snap.allocs_by_job("default", "web").collect();
        assert_eq!(allocs.len(), 4);
        let mut nodes: Vec<_> = allocs.iter().map(|a| a.node_id).collect();
        nodes.sort();
        nodes.dedup();
        assert_eq!(nodes.len(), 4, "one per node");
    }
}
