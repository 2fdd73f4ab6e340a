//! The schedulers run over the real store's snapshot exactly as over the
//! harness: register nodes and a job through commands, schedule, commit the
//! plan as the plan applier would, and read back. Kept at the crate's top
//! (beside `search_tests.rs`), as the one place that uses both the store
//! and the scheduler: neither may name the other.

use crate::scheduler::{new_scheduler, Planner, PlannerError, State};
use crate::state::fixtures;
use crate::state::{Command, PlanResults, StateSnapshot};
use crate::structs::shared_str::SharedStr;
use crate::structs::{
    DrainStrategy, Evaluation, JobType, NodeStatus, Plan, PlanResult, SchedulingEligibility,
    TriggeredBy,
};
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

    /// The evaluation as stored (with its indexes).
    fn stored(&self, eval: &Evaluation) -> Evaluation {
        let stored = self.snap.eval(&eval.id).map(|e| (**e).clone());
        stored.expect("evaluation stored")
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
            deployment: plan.deployment.clone(),
            deployment_updates: plan.deployment_updates.clone(),
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
    let eval = p.stored(&eval);
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

/// Node changes written through the store reach the next evaluation
/// (the catalog of schedulable nodes is kept per node table, never
/// across a change), while writes to other tables keep the catalog.
#[test]
fn evaluations_see_every_node_change_and_share_the_catalog_otherwise() {
    let mut p = SnapshotPlanner {
        snap: StateSnapshot::new(),
        index: 0,
        evals: vec![],
    };
    let nodes: Vec<_> = (0..5).map(|i| fixtures::node(&format!("n{i}"))).collect();
    for node in &nodes {
        p.apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        });
    }
    let catalog = State::node_catalog(&p.snap);
    assert_eq!(catalog.len(), 5);
    let mut other = fixtures::job("default", "other", &[("g", 1)]);
    other.canonicalize();
    p.apply(Command::JobRegister {
        job: Arc::new(other),
        eval: None,
        enforce_index: None,
    });
    assert!(Arc::ptr_eq(&catalog, &State::node_catalog(&p.snap)));

    let mut job = fixtures::job("default", "web", &[("g", 1)]);
    job.job_type = JobType::System;
    job.canonicalize();
    let ready = |snap: &StateSnapshot| -> Vec<String> {
        let (nodes, _) = crate::scheduler::util::ready_nodes(snap, &job);
        let mut names: Vec<String> = nodes.iter().map(|n| n.name.to_string()).collect();
        names.sort();
        names
    };
    let changes = [
        Command::NodeUpdateEligibility {
            node_id: nodes[1].id,
            eligibility: SchedulingEligibility::Ineligible,
            event: None,
            evals: vec![],
        },
        Command::NodeUpdateStatus {
            node_id: nodes[2].id,
            status: NodeStatus::Down,
            event: None,
            evals: vec![],
            updated_at: 1,
        },
        Command::NodeUpdateDrain {
            node_id: nodes[3].id,
            drain: Some(DrainStrategy::default()),
            mark_eligible: false,
            event: None,
            evals: vec![],
        },
        Command::NodeRegister {
            node: Arc::new(fixtures::node("n5")),
        },
    ];
    let mut expected: Vec<&str> = vec!["n0", "n1", "n2", "n3", "n4"];
    for (cmd, change) in changes.into_iter().zip([
        |e: &mut Vec<&str>| e.retain(|n| *n != "n1"),
        |e: &mut Vec<&str>| e.retain(|n| *n != "n2"),
        |e: &mut Vec<&str>| e.retain(|n| *n != "n3"),
        |e: &mut Vec<&str>| e.push("n5"),
    ]) {
        let before = State::node_catalog(&p.snap);
        p.apply(cmd);
        change(&mut expected);
        assert!(!Arc::ptr_eq(&before, &State::node_catalog(&p.snap)));
        let got = ready(&p.snap);
        let mut want: Vec<String> = expected.iter().map(|n| n.to_string()).collect();
        want.sort();
        assert_eq!(got, want);
    }

    // A service job placed after the changes uses only n0, n4 and n5.
    let mut service = fixtures::job("default", "api", &[("g", 9)]);
    service.canonicalize();
    let eval = fixtures::eval(&service, TriggeredBy::JobRegister, 1);
    p.apply(Command::JobRegister {
        job: Arc::new(service),
        eval: Some(eval.clone()),
        enforce_index: None,
    });
    let state: Arc<dyn State> = Arc::new(p.snap.clone());
    new_scheduler(&JobType::Service, state, &mut p, 1)
        .expect("scheduler")
        .process(&eval)
        .expect("processed");
    let names: std::collections::BTreeSet<String> = p
        .snap
        .allocs_by_job("default", "api")
        .map(|a| p.snap.node(&a.node_id).expect("node").name.to_string())
        .collect();
    assert_eq!(p.snap.allocs_by_job("default", "api").count(), 9);
    // Each allocation names its node with the node's own string: one
    // string per node however many allocations it holds.
    for a in p.snap.allocs_by_job("default", "api") {
        let node = p.snap.node(&a.node_id).expect("node");
        assert!(
            SharedStr::ptr_eq(&a.node_name, &node.name),
            "{}",
            a.node_name
        );
    }
    let allowed = ["n0", "n4", "n5"].map(String::from).into();
    assert!(names.is_subset(&allowed), "placed on {names:?}");
    assert!(names.contains("n5"), "the new node is used: {names:?}");
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
    for a in &allocs {
        let node = p.snap.node(&a.node_id).expect("node");
        assert!(
            SharedStr::ptr_eq(&a.node_name, &node.name),
            "{}",
            a.node_name
        );
    }
}

/// The store's snapshot with its usage column hidden: placements then
/// look every node's usage up one by one, as before the column.
struct WithoutColumn(StateSnapshot);

impl State for WithoutColumn {
    fn nodes(&self) -> Vec<Arc<crate::structs::Node>> {
        State::nodes(&self.0)
    }
    fn node_by_id(&self, id: &crate::structs::NodeId) -> Option<Arc<crate::structs::Node>> {
        self.0.node_by_id(id)
    }
    fn allocs_by_job(&self, ns: &str, id: &str) -> Vec<Arc<crate::structs::Allocation>> {
        State::allocs_by_job(&self.0, ns, id)
    }
    fn allocs_by_node(
        &self,
        node: &crate::structs::NodeId,
    ) -> Vec<Arc<crate::structs::Allocation>> {
        State::allocs_by_node(&self.0, node)
    }
    fn node_catalog(&self) -> Arc<crate::view::catalog::NodeCatalog> {
        State::node_catalog(&self.0)
    }
    fn node_usage(
        &self,
        node: &crate::structs::NodeId,
    ) -> Option<std::borrow::Cow<'_, crate::structs::fit::NodeAllocUsage>> {
        State::node_usage(&self.0, node)
    }
    fn alloc_by_id(&self, id: &crate::structs::AllocId) -> Option<Arc<crate::structs::Allocation>> {
        self.0.alloc_by_id(id)
    }
    fn job_by_id(&self, ns: &str, id: &str) -> Option<Arc<crate::structs::Job>> {
        self.0.job_by_id(ns, id)
    }
    fn job_by_version(&self, ns: &str, id: &str, v: u64) -> Option<Arc<crate::structs::Job>> {
        State::job_by_version(&self.0, ns, id, v)
    }
    fn latest_deployment(&self, ns: &str, id: &str) -> Option<Arc<crate::structs::Deployment>> {
        State::latest_deployment(&self.0, ns, id)
    }
    fn deployments_of_job(&self, ns: &str, id: &str) -> Vec<Arc<crate::structs::Deployment>> {
        State::deployments_of_job(&self.0, ns, id)
    }
    fn deployment_by_id(
        &self,
        id: &crate::structs::DeploymentId,
    ) -> Option<Arc<crate::structs::Deployment>> {
        State::deployment_by_id(&self.0, id)
    }
    fn scheduler_config(&self) -> crate::structs::SchedulerConfiguration {
        State::scheduler_config(&self.0)
    }
    fn latest_index(&self) -> u64 {
        State::latest_index(&self.0)
    }
}

/// A job, the evaluation that schedules it, and the node (by index) whose
/// failure triggers it (`None`: the job's registration does).
type Step = (crate::structs::Job, Evaluation, Option<usize>);

/// Runs evaluations one after the other over one store, each against
/// the state the previous ones left.
fn run_in_turn(
    nodes: &[crate::structs::Node],
    steps: &[Step],
    hide_column: bool,
) -> SnapshotPlanner {
    let mut p = SnapshotPlanner {
        snap: StateSnapshot::new(),
        index: 0,
        evals: vec![],
    };
    for node in nodes {
        p.apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        });
    }
    for (job, eval, down) in steps {
        p.apply(match down {
            // The job is evaluated again because a node went down.
            Some(n) => Command::NodeUpdateStatus {
                node_id: nodes[*n].id,
                status: NodeStatus::Down,
                event: None,
                evals: vec![eval.clone()],
                updated_at: 1,
            },
            None => Command::JobRegister {
                job: Arc::new(job.clone()),
                eval: Some(eval.clone()),
                enforce_index: None,
            },
        });
        let eval = p.stored(eval);
        let state: Arc<dyn State> = if hide_column {
            Arc::new(WithoutColumn(p.snap.clone()))
        } else {
            Arc::new(p.snap.clone())
        };
        new_scheduler(&job.job_type, state, &mut p, 1)
            .expect("scheduler")
            .process(&eval)
            .expect("processed");
    }
    p
}

/// Job `id` of `count` in one group "g", registered: spread over
/// `${meta.rack}` if `spread`.
fn register_step(id: &str, count: i32, kind: JobType, spread: bool) -> Step {
    let mut job = fixtures::job("default", id, &[("g", count)]);
    job.job_type = kind;
    if spread {
        job.spreads.push(crate::structs::Spread {
            attribute: "${meta.rack}".into(),
            weight: 50,
            ..Default::default()
        });
    }
    job.canonicalize();
    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
    (job, eval, None)
}

/// [`run_in_turn`]; where the live allocations ended.
fn place_in_turn(nodes: &[crate::structs::Node], steps: &[Step], hide_column: bool) -> Vec<String> {
    let p = run_in_turn(nodes, steps, hide_column);
    let names: std::collections::HashMap<_, _> =
        nodes.iter().map(|n| (n.id, n.name.clone())).collect();
    // Which node each write placed how many of a job's allocations
    // on; not by name: which lost allocation's replacement goes first
    // follows the allocations' IDs, random in each run.
    let mut placed = Vec::new();
    let jobs: std::collections::BTreeSet<&str> = steps.iter().map(|s| &*s.0.id).collect();
    for job in jobs {
        for a in p.snap.allocs_by_job("default", job) {
            if !a.is_terminal() {
                let node = &names[&a.node_id];
                placed.push(format!("{job} {} {node}", a.create_index));
            }
        }
    }
    placed.sort();
    placed
}

/// [`run_in_turn`]; every allocation's node and metrics (counts,
/// exhaustion, top scores bit for bit), by job and name.
fn placements_and_metrics(
    nodes: &[crate::structs::Node],
    steps: &[Step],
    hide_column: bool,
) -> Vec<String> {
    let p = run_in_turn(nodes, steps, hide_column);
    let names: std::collections::HashMap<_, _> =
        nodes.iter().map(|n| (n.id, n.name.clone())).collect();
    let jobs: std::collections::BTreeSet<&str> = steps.iter().map(|s| &*s.0.id).collect();
    let mut placed = Vec::new();
    for job in jobs {
        for a in p.snap.allocs_by_job("default", job) {
            let metric = a.metrics.as_ref().map(|m| m.unpack());
            let node = &names[&a.node_id];
            placed.push(format!("{} {node} {metric:?}", a.name));
        }
    }
    placed.sort();
    placed
}

/// The stack remembers what it worked out from the usage column for nodes
/// the evaluation has not touched; every decision and every metric (filter
/// and exhaustion counts, the top scores bit for bit) must be what working
/// it out again at each visit gives. Nodes of two sizes filled by earlier
/// jobs, so that spread placements pass over full, untouched nodes.
#[test]
fn remembered_untouched_nodes_score_and_count_as_looked_up_each_time() {
    let nodes: Vec<_> = (0..24)
        .map(|i| {
            let mut n = fixtures::node(&format!("n{i}"));
            n.meta.insert("rack".into(), format!("r{}", i % 4).into());
            if i % 3 == 0 {
                n.node_resources.cpu.cpu_shares = 1500;
            }
            n
        })
        .collect();
    let steps = vec![
        register_step("fill", 300, JobType::Service, false),
        register_step("s", 150, JobType::Service, true),
        register_step("b", 120, JobType::Batch, false),
        register_step("t", 260, JobType::Service, true),
        register_step("s", 220, JobType::Service, true),
    ];
    let with = placements_and_metrics(&nodes, &steps, false);
    let without = placements_and_metrics(&nodes, &steps, true);
    let exhausted = with
        .iter()
        .filter(|l| !l.contains("nodes_exhausted: 0"))
        .count();
    assert!(
        exhausted > 50,
        "too few placements passed over full nodes: {exhausted}"
    );
    assert_eq!(with.len(), without.len());
    for (w, wo) in with.iter().zip(&without) {
        assert_eq!(w, wo);
    }
}

/// The usage column (carried from state to state by difference) must
/// place exactly as looking every node up does: across placements,
/// scale-downs that free capacity, spreads, batch jobs, and nodes that
/// reserve host ports (whose usage is still read from the node).
#[test]
fn the_usage_column_places_exactly_as_per_node_lookups() {
    let nodes: Vec<_> = (0..12)
        .map(|i| {
            let mut n = fixtures::node(&format!("n{i}"));
            n.meta.insert("rack".into(), format!("r{}", i % 3).into());
            if i % 4 == 0 {
                n.reserved_resources.networks.reserved_host_ports = "22".into();
            }
            n
        })
        .collect();
    // Its allocations on node `n` are lost and placed again, beside
    // the job's others on nodes this evaluation does not touch.
    let node_down = |step: &Step, n| {
        let eval = fixtures::eval(&step.0, TriggeredBy::NodeUpdate, 1);
        (step.0.clone(), eval, Some(n))
    };
    let steps = vec![
        register_step("a", 40, JobType::Service, true),
        register_step("b", 25, JobType::Batch, false),
        register_step("c", 30, JobType::Service, false),
        register_step("a", 12, JobType::Service, true),
        register_step("d", 45, JobType::Service, false),
        register_step("b", 5, JobType::Batch, false),
        register_step("e", 20, JobType::Service, true),
        // Scaled up: new placements beside the job's own allocations.
        register_step("c", 44, JobType::Service, false),
        register_step("e", 33, JobType::Service, true),
    ];
    let steps = {
        let mut steps = steps;
        let (c, e) = (steps[7].clone(), steps[8].clone());
        steps.push(node_down(&c, 1));
        steps.push(node_down(&e, 2));
        steps
    };
    let with = place_in_turn(&nodes, &steps, false);
    let without = place_in_turn(&nodes, &steps, true);
    assert_eq!(with.len(), 12 + 5 + 44 + 45 + 33);
    assert_eq!(with, without);
}

/// Spread placements over enough nodes that the lane's quiet test
/// (`SpreadLane::quiet`, by fit against bounds set from the bar) counts
/// most revisits: every decision and metric, the exhaustion counts by
/// class and resource among them, must be what scoring each gives. Racks of uneven size,
/// some nodes without one, and small nodes the filler job exhausts.
#[test]
fn candidates_told_quiet_by_fit_decide_and_count_as_scored_each() {
    let nodes: Vec<_> = (0..240)
        .map(|i| {
            let mut n = fixtures::node(&format!("n{i}"));
            if i % 11 != 0 {
                n.meta
                    .insert("rack".into(), format!("r{}", i % 7 % 5).into());
            }
            if i % 3 == 0 {
                n.node_resources.cpu.cpu_shares = 1500;
                n.node_class = "small".into();
            }
            n
        })
        .collect();
    let steps = vec![
        register_step("fill", 500, JobType::Service, false),
        register_step("s", 160, JobType::Service, true),
        register_step("b", 150, JobType::Batch, true),
        register_step("s", 320, JobType::Service, true),
    ];
    let with = placements_and_metrics(&nodes, &steps, false);
    let without = placements_and_metrics(&nodes, &steps, true);
    // The spread jobs' placements that passed over full nodes.
    let exhausted = with
        .iter()
        .filter(|l| !l.starts_with("fill") && !l.contains("nodes_exhausted: 0"))
        .count();
    assert!(
        exhausted > 100,
        "too few placements passed over full nodes: {exhausted}"
    );
    assert_eq!(with.len(), 500 + 320 + 150);
    for (w, wo) in with.iter().zip(&without) {
        assert_eq!(w, wo);
    }
}
