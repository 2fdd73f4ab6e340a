//! System and sysbatch scenarios, following the behaviour of Nomad's
//! `scheduler_system.go`.

use super::*;
use crate::scheduler::util::{ALLOC_LOST, ALLOC_NODE_TAINTED};
use crate::structs::{
    Constraint, DesiredStatus, DesiredTransition, DrainStrategy, PreemptionConfig,
    SchedulerConfiguration, SchedulingEligibility, UpdateStrategy,
};
use std::time::Duration;

fn system_job() -> Job {
    let mut j = job(JobType::System, 1);
    j.id = "agent".into();
    j.name = "agent".into();
    j
}

fn sysbatch_job() -> Job {
    let mut j = job(JobType::SysBatch, 1);
    j.id = "sweep".into();
    j.name = "sweep".into();
    j
}

#[test]
fn register_places_one_per_ready_node() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(5);
    let (j, _) = s.register(system_job());
    let live = s.live(&j);
    assert_eq!(live.len(), 5);
    assert_eq!(s.per_node(&j).len(), 5);
    assert!(live.iter().all(|a| &*a.name == "agent.web[0]"));
    assert!(nodes.iter().all(|n| live.iter().any(|a| a.node_id == n.id)));
    let e = s.h.last_eval().unwrap();
    assert_eq!(e.status, EvalStatus::Complete);
    assert_eq!(e.queued_allocations.get("web"), Some(&0));
}

#[test]
fn node_added_gets_an_allocation() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let (j, _) = s.register(system_job());
    let before: Vec<_> = s.live(&j).iter().map(|a| a.id).collect();
    let new = s.add_node(node());
    let mut eval = Evaluation::for_job(&j, TriggeredBy::NodeUpdate, NOW);
    eval.node_id = Some(new.id);
    s.process(&eval);
    let live = s.live(&j);
    assert_eq!(live.len(), 4);
    assert!(before.iter().all(|id| live.iter().any(|a| a.id == *id)));
    assert!(live.iter().any(|a| a.node_id == new.id));
}

#[test]
fn node_down_marks_lost_and_replaces_when_back() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(3);
    let (j, _) = s.register(system_job());
    let down = nodes[0].id;
    let old = s.live(&j).into_iter().find(|a| a.node_id == down).unwrap();
    s.h.state
        .update_node(&down, |n| n.status = NodeStatus::Down);
    s.eval(&j, TriggeredBy::NodeUpdate);
    let lost = s.h.state.alloc_by_id(&old.id).unwrap();
    assert_eq!(lost.client_status, ClientStatus::Lost);
    assert_eq!(&*lost.desired_description, ALLOC_LOST);
    assert_eq!(s.live(&j).len(), 2, "nothing placed on a down node");
    s.h.state
        .update_node(&down, |n| n.status = NodeStatus::Ready);
    s.eval(&j, TriggeredBy::NodeUpdate);
    let back = s.live(&j).into_iter().find(|a| a.node_id == down).unwrap();
    assert_ne!(back.id, old.id);
    assert_eq!(back.links().previous_allocation, Some(old.id));
}

#[test]
fn drain_with_migrate_stops_without_placing_elsewhere() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(3);
    let (j, _) = s.register(system_job());
    let drained = nodes[1].id;
    let a = s
        .live(&j)
        .into_iter()
        .find(|a| a.node_id == drained)
        .unwrap();
    s.h.state.update_node(&drained, |n| {
        n.drain_strategy = Some(DrainStrategy::default());
        n.scheduling_eligibility = SchedulingEligibility::Ineligible;
    });
    s.h.state.update_alloc(&a.id, |a| {
        a.desired_transition = DesiredTransition {
            migrate: Some(true),
            ..Default::default()
        }
    });
    s.eval(&j, TriggeredBy::NodeDrain);
    let stopped = s.h.state.alloc_by_id(&a.id).unwrap();
    assert_eq!(stopped.desired_status, DesiredStatus::Stop);
    assert_eq!(&*stopped.desired_description, ALLOC_NODE_TAINTED);
    assert_eq!(s.live(&j).len(), 2);
    assert!(s.live(&j).iter().all(|x| x.node_id != drained));
}

#[test]
fn in_place_update_keeps_allocations() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let (j, _) = s.register(system_job());
    let before: Vec<_> = s.live(&j).iter().map(|a| a.id).collect();
    let mut j2 = (*j).clone();
    j2.version += 1;
    j2.meta.insert("k".into(), "v".into());
    let (j2, _) = s.register(j2);
    let live = s.live(&j2);
    assert_eq!(live.len(), 3);
    assert!(live
        .iter()
        .all(|a| a.job_version == j2.version && before.contains(&a.id)));
}

#[test]
fn destructive_update_without_rolling_replaces_all() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let (j, _) = s.register(system_job());
    let before: Vec<_> = s.live(&j).iter().map(|a| a.id).collect();
    let mut j2 = (*j).clone();
    j2.version += 1;
    j2.task_groups[0].tasks[0].resources.cpu = 600;
    let (j2, _) = s.register(j2);
    let live = s.live(&j2);
    assert_eq!(live.len(), 3);
    assert!(live
        .iter()
        .all(|a| !before.contains(&a.id) && a.job_version == j2.version));
    assert!(s.h.create_evals.is_empty());
}

#[test]
fn destructive_update_is_rolled_with_max_parallel() {
    let mut s = Scenario::new();
    s.add_nodes(4);
    let mut j = system_job();
    j.update = Some(UpdateStrategy {
        max_parallel: 1,
        stagger: Duration::from_secs(10),
        ..Default::default()
    });
    let (j, _) = s.register(j);
    let mut j2 = (*j).clone();
    j2.version += 1;
    j2.task_groups[0].tasks[0].driver = "mock_driver".into();
    let (j2, _) = s.register(j2);
    let updated = s
        .live(&j2)
        .iter()
        .filter(|a| a.job_version == j2.version)
        .count();
    assert_eq!(updated, 1);
    assert_eq!(s.live(&j2).len(), 4);
    let next = s.h.create_evals.last().unwrap().clone();
    assert_eq!(next.triggered_by, TriggeredBy::RollingUpdate);
    assert_eq!(next.wait, Duration::from_secs(10));
    assert_eq!(s.h.last_eval().unwrap().next_eval, Some(next.id));
    s.process(&next);
    let updated = s
        .live(&j2)
        .iter()
        .filter(|a| a.job_version == j2.version)
        .count();
    assert_eq!(updated, 2);
}

#[test]
fn deregister_stops_everything() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let (j, _) = s.register(system_job());
    let mut stopped = (*j).clone();
    stopped.stop = true;
    let stopped = s.upsert_job(stopped);
    s.eval(&stopped, TriggeredBy::JobDeregister);
    assert!(s.live(&j).is_empty());
    assert_eq!(s.last_status(), EvalStatus::Complete);
}

#[test]
fn sysbatch_completed_allocations_are_not_placed_again() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let (j, _) = s.register(sysbatch_job());
    for a in s.live(&j) {
        s.set_client_status(&a.id, ClientStatus::Complete, NOW);
    }
    let plans = s.h.plans.len();
    s.eval(&j, TriggeredBy::PeriodicJob);
    assert_eq!(s.all(&j).len(), 3);
    assert_eq!(s.h.plans.len(), plans, "nothing to do");
    assert_eq!(s.last_status(), EvalStatus::Complete);
}

#[test]
fn sysbatch_reruns_when_the_job_changes() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let (j, _) = s.register(sysbatch_job());
    for a in s.live(&j) {
        s.set_client_status(&a.id, ClientStatus::Complete, NOW);
    }
    let mut j2 = (*j).clone();
    j2.version += 1;
    j2.task_groups[0].tasks[0]
        .config
        .insert("args".into(), serde_json::json!(["--full"]));
    let (j2, _) = s.register(j2);
    let live = s.live(&j2);
    assert_eq!(live.len(), 2);
    assert!(live.iter().all(|a| a.job_version == j2.version));
}

#[test]
fn sysbatch_on_a_down_node_after_success_is_ignored() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(2);
    let (j, _) = s.register(sysbatch_job());
    let a = s
        .live(&j)
        .into_iter()
        .find(|a| a.node_id == nodes[0].id)
        .unwrap();
    s.set_client_status(&a.id, ClientStatus::Complete, NOW);
    s.h.state
        .update_node(&nodes[0].id, |n| n.status = NodeStatus::Down);
    s.eval(&j, TriggeredBy::NodeUpdate);
    let after = s.h.state.alloc_by_id(&a.id).unwrap();
    assert_eq!(after.client_status, ClientStatus::Complete);
}

#[test]
fn constraint_filtered_node_is_not_a_failure() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let mut win = node();
    win.attributes
        .insert("kernel.name".into(), "windows".into());
    s.add_node(win);
    let mut j = system_job();
    j.constraints
        .push(Constraint::new("${attr.kernel.name}", "=", "linux"));
    let (j, _) = s.register(j);
    assert_eq!(s.live(&j).len(), 2);
    let e = s.h.last_eval().unwrap();
    assert!(e.failed_tg_allocs.is_empty());
    assert_eq!(e.queued_allocations.get("web"), Some(&0));
    assert!(s.h.create_evals.is_empty(), "no blocked eval");
}

#[test]
fn full_node_is_a_failure_with_a_blocked_eval() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let mut small = node();
    small.node_resources.memory.memory_mb = 300;
    let small = s.add_node(small);
    let (j, _) = s.register(system_job());
    assert_eq!(s.live(&j).len(), 2);
    let e = s.h.last_eval().unwrap();
    assert_eq!(e.status, EvalStatus::Complete);
    let failed = &e.failed_tg_allocs["web"];
    assert_eq!(failed.nodes_exhausted, 1);
    assert_eq!(failed.dimension_exhausted.get("memory"), Some(&1));
    assert_eq!(e.queued_allocations.get("web"), Some(&1));
    let blocked = s.h.create_evals.last().unwrap();
    assert_eq!(blocked.status, EvalStatus::Blocked);
    assert_eq!(blocked.node_id, Some(small.id));
}

fn low_priority_filler(s: &mut Scenario, priority: i32, node: &Node) -> Arc<Job> {
    let mut f = job(JobType::Service, 1);
    f.id = "filler".into();
    f.priority = priority;
    f.task_groups[0].tasks[0].resources.cpu = 3800;
    f.constraints.push(Constraint::new(
        "${node.unique.id}",
        "=",
        &node.id.to_string(),
    ));
    s.register(f).0
}

#[test]
fn system_job_preempts_lower_priority_work() {
    let mut s = Scenario::new();
    let n = s.add_node(node());
    let filler = low_priority_filler(&mut s, 20, &n);
    let mut j = system_job();
    j.priority = 70;
    let (j, _) = s.register(j);
    let placed = s.live(&j);
    assert_eq!(placed.len(), 1);
    let victim = s.all(&filler)[0].clone();
    assert_eq!(victim.desired_status, DesiredStatus::Evict);
    assert_eq!(placed[0].links().preempted_allocations, vec![victim.id]);
    let plan = s.h.plans.last().unwrap();
    assert_eq!(plan.node_preemptions[&n.id].len(), 1);
}

#[test]
fn no_preemption_within_ten_priority_points() {
    let mut s = Scenario::new();
    let n = s.add_node(node());
    let filler = low_priority_filler(&mut s, 65, &n);
    let mut j = system_job();
    j.priority = 70;
    let (j, _) = s.register(j);
    assert!(s.live(&j).is_empty());
    assert_eq!(s.live(&filler).len(), 1);
    assert!(s
        .h
        .last_eval()
        .unwrap()
        .failed_tg_allocs
        .contains_key("web"));
}

#[test]
fn no_preemption_when_disabled_for_system() {
    let mut s = Scenario::new();
    s.h.state.set_scheduler_config(SchedulerConfiguration {
        preemption_config: PreemptionConfig {
            system_scheduler_enabled: false,
            ..Default::default()
        },
        ..Default::default()
    });
    let n = s.add_node(node());
    let filler = low_priority_filler(&mut s, 10, &n);
    let mut j = system_job();
    j.priority = 90;
    let (j, _) = s.register(j);
    assert!(s.live(&j).is_empty());
    assert_eq!(s.live(&filler).len(), 1);
}

#[test]
fn sysbatch_preempts_only_when_enabled() {
    let mut s = Scenario::new();
    let n = s.add_node(node());
    low_priority_filler(&mut s, 10, &n);
    let mut j = sysbatch_job();
    j.priority = 90;
    let (j, _) = s.register(j);
    assert!(
        s.live(&j).is_empty(),
        "sysbatch preemption is off by default"
    );
    s.h.state.set_scheduler_config(SchedulerConfiguration {
        preemption_config: PreemptionConfig {
            sys_batch_scheduler_enabled: true,
            ..Default::default()
        },
        ..Default::default()
    });
    s.eval(&j, TriggeredBy::JobRegister);
    assert_eq!(s.live(&j).len(), 1);
}

#[test]
fn trigger_reasons_follow_the_seed() {
    let mut s = Scenario::new();
    s.add_nodes(1);
    let j = s.upsert_job(system_job());
    s.eval(&j, TriggeredBy::PeriodicJob);
    assert_eq!(s.last_status(), EvalStatus::Failed);
    s.eval(&j, TriggeredBy::AllocFailure);
    assert_eq!(s.last_status(), EvalStatus::Failed);
    let b = s.upsert_job(sysbatch_job());
    s.eval(&b, TriggeredBy::PeriodicJob);
    assert_eq!(s.last_status(), EvalStatus::Complete);
    assert_eq!(s.live(&b).len(), 1);
}

#[test]
fn ineligible_node_keeps_its_allocation() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(2);
    let (j, _) = s.register(system_job());
    s.h.state.update_node(&nodes[0].id, |n| {
        n.scheduling_eligibility = SchedulingEligibility::Ineligible
    });
    s.eval(&j, TriggeredBy::NodeUpdate);
    assert_eq!(s.live(&j).len(), 2);
}

#[test]
fn node_outside_the_job_datacenters_is_stopped() {
    let mut s = Scenario::new();
    let mut east = node();
    east.datacenter = "dc2".into();
    let east = s.add_node(east);
    s.add_node(node());
    let mut j = system_job();
    j.datacenters = vec!["dc1".into(), "dc2".into()];
    let (j, _) = s.register(j);
    assert_eq!(s.live(&j).len(), 2);
    let mut j2 = (*j).clone();
    j2.version += 1;
    j2.datacenters = vec!["dc1".into()];
    let (j2, _) = s.register(j2);
    assert_eq!(s.live(&j2).len(), 1);
    assert!(s.live(&j2).iter().all(|a| a.node_id != east.id));
}

#[test]
fn annotated_system_plan_counts_places_minus_filtered() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let mut win = node();
    win.attributes
        .insert("kernel.name".into(), "windows".into());
    s.add_node(win);
    let mut j = system_job();
    j.constraints
        .push(Constraint::new("${attr.kernel.name}", "=", "linux"));
    let j = s.upsert_job(j);
    let mut eval = Evaluation::for_job(&j, TriggeredBy::JobRegister, NOW);
    eval.annotate_plan = true;
    s.process(&eval);
    let ann = s.h.plans.last().unwrap().annotations.clone().unwrap();
    assert_eq!(ann.desired_tg_updates["web"].place, 2);
}

#[test]
fn rejected_plans_fail_after_the_attempt_limit() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    s.h.reject_plans = true;
    s.register(sysbatch_job());
    assert_eq!(s.h.plans.len(), 2);
    let e = s.h.last_eval().unwrap();
    assert_eq!(e.status, EvalStatus::Failed);
    assert_eq!(e.status_description, "maximum attempts reached (2)");
}
