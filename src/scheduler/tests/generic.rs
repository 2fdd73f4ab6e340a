//! Service and batch scenarios: every reconciler outcome, rescheduling,
//! ports, blocked evaluations and plan retries.

use super::*;
use crate::scheduler::util::{next_delay, ALLOC_LOST, ALLOC_MIGRATING, ALLOC_NOT_NEEDED};
use crate::scheduler::NodeShare;
use crate::structs::{AllocLinks, Seldom};
use crate::structs::{
    Constraint, DesiredTransition, DrainStrategy, NetworkResource, Port, PreemptionConfig,
    RescheduleEvent, ReschedulePolicy, RescheduleTracker, SchedulerAlgorithm,
    SchedulerConfiguration, Spread, SpreadTarget,
};
use std::time::Duration;

#[test]
fn register_places_every_allocation_with_distinct_names() {
    let mut s = Scenario::new();
    s.add_nodes(10);
    let (job, _) = s.register(job(JobType::Service, 10));
    assert_eq!(s.live(&job).len(), 10);
    let expected: Vec<String> = {
        let mut v: Vec<String> = (0..10).map(|i| format!("web.web[{i}]")).collect();
        v.sort();
        v
    };
    assert_eq!(s.names(&job), expected);
    let e = s.h.last_eval().unwrap();
    assert_eq!(e.status, EvalStatus::Complete);
    assert_eq!(e.queued_allocations.get("web"), Some(&0));
    assert!(e.failed_tg_allocs.is_empty());
    assert!(s.h.create_evals.is_empty());
    let a = &s.live(&job)[0];
    let m = a.metrics.as_ref().unwrap().unpack();
    assert!(m.nodes_evaluated > 0);
    assert_eq!(m.nodes_available.get("dc1"), Some(&10));
    assert!(!m.score_meta_data.is_empty());
}

#[test]
fn job_anti_affinity_spreads_a_group_over_nodes() {
    let mut s = Scenario::new();
    s.add_nodes(10);
    let (job, _) = s.register(job(JobType::Service, 10));
    let per_node = s.per_node(&job);
    // Co-locating costs -(n+1)/count per existing allocation, more than the
    // bin-packing gain of a small task: most nodes get one.
    assert!(per_node.len() >= 7, "{per_node:?}");
    assert!(per_node.values().all(|c| *c <= 2), "{per_node:?}");
}

#[test]
fn scaling_up_adds_the_next_indexes() {
    let mut s = Scenario::new();
    s.add_nodes(5);
    let (j, _) = s.register(job(JobType::Service, 3));
    let before: Vec<_> = s.live(&j).iter().map(|a| a.id).collect();
    let mut j2 = (*j).clone();
    j2.task_groups[0].count = 5;
    let (j2, _) = s.register(j2);
    let live = s.live(&j2);
    assert_eq!(live.len(), 5);
    assert!(before.iter().all(|id| live.iter().any(|a| a.id == *id)));
    assert!(s.names(&j2).contains(&"web.web[4]".to_string()));
}

#[test]
fn scaling_down_stops_the_highest_indexes() {
    let mut s = Scenario::new();
    s.add_nodes(5);
    let (j, _) = s.register(job(JobType::Service, 5));
    let mut j2 = (*j).clone();
    j2.task_groups[0].count = 2;
    let (j2, _) = s.register(j2);
    assert_eq!(s.names(&j2), vec!["web.web[0]", "web.web[1]"]);
    let stopped: Vec<_> = s
        .all(&j2)
        .into_iter()
        .filter(|a| a.server_terminal())
        .collect();
    assert_eq!(stopped.len(), 3);
    assert!(stopped
        .iter()
        .all(|a| &*a.desired_description == ALLOC_NOT_NEEDED));
}

#[test]
fn a_freed_index_is_reused() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let (j, _) = s.register(job(JobType::Service, 3));
    let victim = s.live(&j)[1].clone();
    assert_eq!(&*victim.name, "web.web[1]");
    s.h.state.update_alloc(&victim.id, |a| {
        a.desired_status = crate::structs::DesiredStatus::Stop
    });
    s.eval(&j, TriggeredBy::AllocStop);
    let names = s.names(&j);
    assert_eq!(names, vec!["web.web[0]", "web.web[1]", "web.web[2]"]);
    assert!(s.live(&j).iter().all(|a| a.id != victim.id));
}

#[test]
fn meta_only_change_updates_in_place() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let (j, _) = s.register(job(JobType::Service, 3));
    let before: Vec<_> = s.live(&j).iter().map(|a| (a.id, a.node_id)).collect();
    let mut j2 = (*j).clone();
    j2.version += 1;
    j2.meta.insert("owner".into(), "team-a".into());
    let (j2, _) = s.register(j2);
    let live = s.live(&j2);
    assert_eq!(live.len(), 3);
    for a in &live {
        assert_eq!(a.job_version, j2.version);
        assert!(before.contains(&(a.id, a.node_id)));
    }
    assert!(s.h.create_evals.is_empty());
}

/// A node's usage counts an allocation updated in place once: the update
/// replaces the version the store holds, so the node still has room for
/// the new placement of the same plan.
#[test]
fn an_update_in_place_and_a_new_placement_share_a_node_with_room_for_both() {
    let mut s = Scenario::new();
    let mut small = node();
    // 1,500 MHz free: room for three allocations of 500 MHz.
    small.node_resources.cpu.cpu_shares = 1600;
    let small = s.add_node(small);
    let (j, _) = s.register(job(JobType::Service, 2));
    let before: Vec<_> = s.live(&j).iter().map(|a| a.id).collect();
    assert_eq!(before.len(), 2);
    let mut j2 = (*j).clone();
    j2.version += 1;
    j2.meta.insert("owner".into(), "team-a".into());
    j2.task_groups[0].count = 3;
    let (j2, _) = s.register(j2);
    let live = s.live(&j2);
    assert_eq!(live.len(), 3, "the third fits beside the two updated");
    assert!(live.iter().all(|a| a.node_id == small.id));
    assert!(live.iter().all(|a| a.job_version == j2.version));
    assert!(before.iter().all(|id| live.iter().any(|a| a.id == *id)));
}

#[test]
fn task_change_is_destructive_and_rolls_max_parallel_at_a_time() {
    let mut s = Scenario::new();
    s.add_nodes(4);
    let (j, _) = s.register(job(JobType::Service, 4));
    let mut j2 = (*j).clone();
    j2.version += 1;
    j2.task_groups[0].tasks[0]
        .config
        .insert("command".into(), serde_json::json!("/bin/new"));
    let (j2, _) = s.register(j2);
    let live = s.live(&j2);
    assert_eq!(live.len(), 4);
    let updated = |s: &Scenario| {
        s.live(&j2)
            .iter()
            .filter(|a| a.job_version == j2.version)
            .count()
    };
    let new: Vec<_> = live
        .iter()
        .filter(|a| a.job_version == j2.version)
        .collect();
    assert_eq!(new.len(), 1, "max_parallel 1 replaces one per evaluation");
    assert!(new[0].links().previous_allocation.is_some());
    // The deployment advances on health, not on a stagger timer.
    assert!(s.h.create_evals.is_empty());
    assert_eq!(s.h.last_eval().unwrap().next_eval, None);
    s.eval(&j2, TriggeredBy::DeploymentWatcher);
    assert_eq!(updated(&s), 1, "the new allocation is not healthy yet");
    s.all_healthy(&j2);
    s.eval(&j2, TriggeredBy::DeploymentWatcher);
    assert_eq!(updated(&s), 2);
}

#[test]
fn destructive_updates_honour_a_larger_max_parallel() {
    let mut s = Scenario::new();
    s.add_nodes(5);
    let mut j = job(JobType::Service, 5);
    j.task_groups[0].update.as_mut().unwrap().max_parallel = 3;
    let (j, _) = s.register(j);
    let mut j2 = (*j).clone();
    j2.version += 1;
    j2.task_groups[0].tasks[0].resources.memory_mb = 512;
    let (j2, _) = s.register(j2);
    let updated = s
        .live(&j2)
        .iter()
        .filter(|a| a.job_version == j2.version)
        .count();
    assert_eq!(updated, 3);
    assert_eq!(s.live(&j2).len(), 5);
}

#[test]
fn batch_jobs_update_everything_at_once() {
    let mut s = Scenario::new();
    s.add_nodes(4);
    let (j, _) = s.register(job(JobType::Batch, 4));
    let mut j2 = (*j).clone();
    j2.version += 1;
    j2.task_groups[0].tasks[0]
        .env
        .insert("X".into(), "1".into());
    let (j2, _) = s.register(j2);
    assert!(s.live(&j2).iter().all(|a| a.job_version == j2.version));
    assert!(s.h.create_evals.is_empty());
}

#[test]
fn lost_allocations_are_stopped_and_replaced_elsewhere() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(4);
    let (j, _) = s.register(job(JobType::Service, 4));
    let down = nodes[0].id;
    let on_down: Vec<_> = s
        .live(&j)
        .into_iter()
        .filter(|a| a.node_id == down)
        .collect();
    assert!(!on_down.is_empty());
    s.h.state
        .update_node(&down, |n| n.status = NodeStatus::Down);
    s.eval(&j, TriggeredBy::NodeUpdate);
    let live = s.live(&j);
    assert_eq!(live.len(), 4);
    assert!(live.iter().all(|a| a.node_id != down));
    for old in on_down {
        let old = s.h.state.alloc_by_id(&old.id).unwrap();
        assert_eq!(old.client_status, ClientStatus::Lost);
        assert_eq!(&*old.desired_description, ALLOC_LOST);
        assert!(live
            .iter()
            .any(|a| a.links().previous_allocation == Some(old.id)));
    }
}

#[test]
fn draining_node_allocations_marked_for_migration_move() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(3);
    let (j, _) = s.register(job(JobType::Service, 3));
    let drain = nodes[1].id;
    let moving: Vec<_> = s
        .live(&j)
        .into_iter()
        .filter(|a| a.node_id == drain)
        .collect();
    assert!(!moving.is_empty());
    s.h.state.update_node(&drain, |n| {
        n.drain_strategy = Some(DrainStrategy::default());
        n.scheduling_eligibility = crate::structs::SchedulingEligibility::Ineligible;
    });
    for a in &moving {
        s.h.state.update_alloc(&a.id, |a| {
            a.desired_transition = DesiredTransition {
                migrate: Some(true),
                ..Default::default()
            }
        });
    }
    s.eval(&j, TriggeredBy::NodeDrain);
    let live = s.live(&j);
    assert_eq!(live.len(), 3);
    assert!(live.iter().all(|a| a.node_id != drain));
    let old = s.h.state.alloc_by_id(&moving[0].id).unwrap();
    assert_eq!(&*old.desired_description, ALLOC_MIGRATING);
}

#[test]
fn draining_node_allocations_not_yet_marked_stay() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(2);
    let (j, _) = s.register(job(JobType::Service, 2));
    let before: Vec<_> = s.live(&j).iter().map(|a| a.id).collect();
    s.h.state.update_node(&nodes[0].id, |n| {
        n.drain_strategy = Some(DrainStrategy::default())
    });
    s.eval(&j, TriggeredBy::NodeDrain);
    let after: Vec<_> = s.live(&j).iter().map(|a| a.id).collect();
    assert_eq!(before, after);
}

#[test]
fn failed_service_allocation_is_rescheduled_on_another_node() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let (j, _) = s.register(job(JobType::Service, 1));
    // The first deployment completed: the failure is the reschedule
    // policy's to handle, not the deployment's.
    s.all_healthy(&j);
    s.eval(&j, TriggeredBy::DeploymentWatcher);
    let first = s.live(&j)[0].clone();
    // Failed long enough ago that the 30 s delay has passed.
    s.fail_at(&first.id, NOW - 60 * SECOND);
    s.eval(&j, TriggeredBy::AllocFailure);
    let live = s.live(&j);
    assert_eq!(live.len(), 1);
    let next = &live[0];
    assert_eq!(next.links().previous_allocation, Some(first.id));
    assert_ne!(next.node_id, first.node_id, "the failed node is penalised");
    let tracker = next.links().reschedule_tracker.as_ref().unwrap();
    assert_eq!(tracker.events.len(), 1);
    assert_eq!(tracker.events[0].prev_alloc_id, first.id);
    assert_eq!(tracker.events[0].delay, Duration::from_secs(30));
    let old = s.h.state.alloc_by_id(&first.id).unwrap();
    assert_eq!(old.links().next_allocation, Some(next.id));
    assert_eq!(next.name, first.name);
}

#[test]
fn recent_failure_is_rescheduled_later_with_a_follow_up_eval() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let (j, _) = s.register(job(JobType::Service, 1));
    // The first deployment completed: the failure is the reschedule
    // policy's to handle, not the deployment's.
    s.all_healthy(&j);
    s.eval(&j, TriggeredBy::DeploymentWatcher);
    let first = s.live(&j)[0].clone();
    s.fail_at(&first.id, NOW - SECOND);
    s.eval(&j, TriggeredBy::AllocFailure);
    assert!(s.live(&j).is_empty(), "no replacement before the delay");
    let follow = s.h.create_evals.last().unwrap().clone();
    assert_eq!(follow.triggered_by, TriggeredBy::AllocFailure);
    assert_eq!(follow.wait_until, Some(NOW - SECOND + 30 * SECOND));
    let old = s.h.state.alloc_by_id(&first.id).unwrap();
    assert_eq!(old.links().followup_eval_id, Some(follow.id));
    // Processing the follow-up reschedules it.
    s.h.now = NOW + 30 * SECOND;
    s.process(&follow);
    assert_eq!(s.live(&j).len(), 1);
    assert_eq!(s.live(&j)[0].links().previous_allocation, Some(first.id));
}

#[test]
fn exponential_delay_doubles_the_last_delay() {
    let policy = ReschedulePolicy::default_for(&JobType::Service).unwrap();
    let mut a = Allocation {
        seldom: Seldom::new(
            AllocLinks {
                reschedule_tracker: Some(RescheduleTracker {
                    events: vec![RescheduleEvent {
                        reschedule_time: NOW,
                        delay: Duration::from_secs(30),
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            },
            None,
        ),
        ..Default::default()
    };
    assert_eq!(next_delay(&policy, &a), Duration::from_secs(60));
    a.links_mut().reschedule_tracker.as_mut().unwrap().events[0].delay = Duration::from_secs(3000);
    // Capped at max_delay (1 h), unless the allocation ran longer than that.
    a.modify_time = NOW + 10 * SECOND;
    assert_eq!(next_delay(&policy, &a), Duration::from_secs(3600));
    a.modify_time = NOW + 7200 * SECOND;
    assert_eq!(next_delay(&policy, &a), Duration::from_secs(30));
}

#[test]
fn fibonacci_and_constant_delays() {
    let fib = ReschedulePolicy {
        delay: Duration::from_secs(5),
        delay_function: "fibonacci".into(),
        max_delay: Duration::from_secs(100),
        unlimited: true,
        ..Default::default()
    };
    let ev = |d: u64| RescheduleEvent {
        delay: Duration::from_secs(d),
        ..Default::default()
    };
    let mut a = Allocation::default();
    assert_eq!(next_delay(&fib, &a), Duration::from_secs(5));
    a.links_mut().reschedule_tracker = Some(RescheduleTracker {
        events: vec![ev(5), ev(5), ev(10)],
    });
    assert_eq!(next_delay(&fib, &a), Duration::from_secs(15));
    let constant = ReschedulePolicy {
        delay_function: "constant".into(),
        ..fib
    };
    assert_eq!(next_delay(&constant, &a), Duration::from_secs(5));
}

#[test]
fn batch_failure_out_of_attempts_is_not_replaced() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let (j, _) = s.register(job(JobType::Batch, 1));
    let first = s.live(&j)[0].clone();
    // The batch default allows one reschedule in 24 h; one already happened.
    s.h.state.update_alloc(&first.id, |a| {
        a.links_mut().reschedule_tracker = Some(RescheduleTracker {
            events: vec![RescheduleEvent {
                reschedule_time: NOW - 3600 * SECOND,
                delay: Duration::from_secs(5),
                ..Default::default()
            }],
        })
    });
    s.fail_at(&first.id, NOW - 60 * SECOND);
    s.eval(&j, TriggeredBy::AllocFailure);
    assert!(s.live(&j).is_empty());
    assert!(s.h.create_evals.is_empty());
    assert_eq!(s.last_status(), EvalStatus::Complete);
}

#[test]
fn batch_failure_within_attempts_is_rescheduled() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let (j, _) = s.register(job(JobType::Batch, 1));
    let first = s.live(&j)[0].clone();
    s.fail_at(&first.id, NOW - 60 * SECOND);
    s.eval(&j, TriggeredBy::AllocFailure);
    let live = s.live(&j);
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].links().previous_allocation, Some(first.id));
}

#[test]
fn completed_batch_allocations_are_never_replaced() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let (j, _) = s.register(job(JobType::Batch, 2));
    let done = s.live(&j)[0].clone();
    s.set_client_status(&done.id, ClientStatus::Complete, NOW);
    s.eval(&j, TriggeredBy::NodeUpdate);
    assert_eq!(s.live(&j).len(), 1);
    assert_eq!(s.all(&j).len(), 2, "nothing new was placed");
}

#[test]
fn completed_service_allocation_is_replaced() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let (j, _) = s.register(job(JobType::Service, 2));
    let done = s.live(&j)[0].clone();
    s.set_client_status(&done.id, ClientStatus::Complete, NOW);
    s.eval(&j, TriggeredBy::NodeUpdate);
    assert_eq!(s.live(&j).len(), 2);
    assert_eq!(s.all(&j).len(), 3);
}

#[test]
fn stopping_a_job_stops_every_allocation() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let (j, _) = s.register(job(JobType::Service, 3));
    let mut stopped = (*j).clone();
    stopped.stop = true;
    let stopped = s.upsert_job(stopped);
    s.eval(&stopped, TriggeredBy::JobDeregister);
    assert!(s.live(&j).is_empty());
    assert_eq!(s.last_status(), EvalStatus::Complete);
}

#[test]
fn purged_job_allocations_are_stopped() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let (j, _) = s.register(job(JobType::Batch, 2));
    s.h.state.delete_job(&j.namespace, &j.id);
    s.eval(&j, TriggeredBy::JobDeregister);
    assert!(s.live(&j).is_empty());
}

#[test]
fn removed_task_group_is_stopped() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let mut j = job(JobType::Service, 1);
    let mut api = j.task_groups[0].clone();
    api.name = "api".into();
    j.task_groups.push(api);
    let (j, _) = s.register(j);
    assert_eq!(s.live(&j).len(), 2);
    let mut j2 = (*j).clone();
    j2.version += 1;
    j2.task_groups.truncate(1);
    let (j2, _) = s.register(j2);
    let live = s.live(&j2);
    assert_eq!(live.len(), 1);
    assert_eq!(&*live[0].task_group, "web");
}

#[test]
fn incomplete_placement_completes_and_creates_a_blocked_eval() {
    let mut s = Scenario::new();
    s.add_nodes(1);
    let mut j = job(JobType::Service, 10);
    j.task_groups[0].tasks[0].resources.cpu = 1500;
    let (j, eval) = s.register(j);
    assert_eq!(s.live(&j).len(), 2, "3,900 MHz fit two 1,500 MHz tasks");
    let e = s.h.last_eval().unwrap().clone();
    assert_eq!(e.id, eval.id);
    assert_eq!(e.status, EvalStatus::Complete);
    assert_eq!(e.queued_allocations.get("web"), Some(&8));
    let failed = &e.failed_tg_allocs["web"];
    assert_eq!(failed.coalesced_failures, 7);
    assert_eq!(failed.dimension_exhausted.get("cpu"), Some(&1));
    assert_eq!(failed.resources_exhausted["web"].cpu, 1500 * 8);
    let blocked = s.h.create_evals.last().unwrap();
    assert_eq!(blocked.status, EvalStatus::Blocked);
    assert_eq!(blocked.triggered_by, TriggeredBy::QueuedAllocs);
    assert_eq!(
        blocked.status_description,
        "created to place remaining allocations"
    );
    assert_eq!(blocked.previous_eval, Some(eval.id));
    assert_eq!(e.blocked_eval, Some(blocked.id));
    assert_eq!(
        blocked.class_eligibility.values().filter(|v| **v).count(),
        1
    );
    assert!(!blocked.escaped_computed_class);
}

#[test]
fn blocked_eval_that_still_cannot_place_is_reblocked() {
    let mut s = Scenario::new();
    s.add_nodes(1);
    let mut j = job(JobType::Service, 4);
    j.task_groups[0].tasks[0].resources.cpu = 1500;
    s.register(j);
    let blocked = s.h.create_evals.last().unwrap().clone();
    let created = s.h.create_evals.len();
    s.process(&blocked);
    assert_eq!(s.h.reblock_evals.len(), 1);
    assert_eq!(s.h.create_evals.len(), created, "no second blocked eval");
    assert!(!s.h.reblock_evals[0].class_eligibility.is_empty());
}

#[test]
fn blocked_eval_places_when_capacity_arrives() {
    let mut s = Scenario::new();
    s.add_nodes(1);
    let mut j = job(JobType::Service, 4);
    j.task_groups[0].tasks[0].resources.cpu = 1500;
    let (j, _) = s.register(j);
    let blocked = s.h.create_evals.last().unwrap().clone();
    s.add_nodes(1);
    s.process(&blocked);
    assert_eq!(s.live(&j).len(), 4);
    assert_eq!(s.last_status(), EvalStatus::Complete);
}

#[test]
fn rejected_plans_exhaust_service_attempts() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    s.h.reject_plans = true;
    let (j, _) = s.register(job(JobType::Service, 2));
    assert_eq!(s.h.plans.len(), 5);
    let e = s.h.last_eval().unwrap();
    assert_eq!(e.status, EvalStatus::Failed);
    assert_eq!(e.status_description, "maximum attempts reached (5)");
    let blocked = s.h.create_evals.last().unwrap();
    assert_eq!(blocked.triggered_by, TriggeredBy::MaxPlanAttempts);
    assert_eq!(
        blocked.status_description,
        "created due to placement conflicts"
    );
    assert_eq!(e.blocked_eval, Some(blocked.id));
    assert!(s.live(&j).is_empty());
}

#[test]
fn rejected_plans_exhaust_batch_attempts_sooner() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    s.h.reject_plans = true;
    s.register(job(JobType::Batch, 2));
    assert_eq!(s.h.plans.len(), 2);
    assert_eq!(s.last_status(), EvalStatus::Failed);
}

#[test]
fn unknown_trigger_fails_the_eval() {
    let mut s = Scenario::new();
    s.add_nodes(1);
    let j = s.upsert_job(job(JobType::Service, 1));
    s.eval(&j, TriggeredBy::Scheduled);
    let e = s.h.last_eval().unwrap();
    assert_eq!(e.status, EvalStatus::Failed);
    assert!(e.status_description.contains("cannot handle 'scheduled'"));
}

#[test]
fn nothing_to_do_submits_no_plan() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let (j, _) = s.register(job(JobType::Service, 2));
    let plans = s.h.plans.len();
    s.eval(&j, TriggeredBy::NodeUpdate);
    assert_eq!(s.h.plans.len(), plans);
    assert_eq!(s.last_status(), EvalStatus::Complete);
}

#[test]
fn annotated_plans_report_desired_updates() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let (j, _) = s.register(job(JobType::Service, 2));
    let mut j2 = (*j).clone();
    j2.task_groups[0].count = 3;
    let j2 = s.upsert_job(j2);
    let mut eval = Evaluation::for_job(&j2, TriggeredBy::JobRegister, NOW);
    eval.annotate_plan = true;
    s.process(&eval);
    let ann = s.h.plans.last().unwrap().annotations.clone().unwrap();
    let d = &ann.desired_tg_updates["web"];
    assert_eq!(d.place, 1);
    assert_eq!(d.ignore, 2);
}

fn with_network(mut j: Job, net: NetworkResource) -> Job {
    j.task_groups[0].networks = vec![net];
    j
}

#[test]
fn static_ports_never_collide() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let net = NetworkResource {
        reserved_ports: vec![Port {
            label: "http".into(),
            value: 8080,
            ..Default::default()
        }],
        ..Default::default()
    };
    let (j, _) = s.register(with_network(job(JobType::Service, 3), net));
    let live = s.live(&j);
    assert_eq!(live.len(), 2, "one 8080 per node");
    assert_ne!(live[0].node_id, live[1].node_id);
    let failed = &s.h.last_eval().unwrap().failed_tg_allocs["web"];
    assert_eq!(
        failed
            .dimension_exhausted
            .get("network: reserved port collision"),
        Some(&2)
    );
}

#[test]
fn dynamic_ports_are_unique_per_node_and_in_range() {
    let mut s = Scenario::new();
    let mut n = node();
    n.node_resources.min_dynamic_port = 30000;
    n.node_resources.max_dynamic_port = 30010;
    s.add_node(n);
    let net = NetworkResource {
        dynamic_ports: vec![
            Port {
                label: "a".into(),
                ..Default::default()
            },
            Port {
                label: "b".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let (j, _) = s.register(with_network(job(JobType::Service, 5), net));
    let live = s.live(&j);
    assert_eq!(live.len(), 5);
    let mut ports: Vec<u16> = live
        .iter()
        .flat_map(|a| a.allocated_resources.ports())
        .collect();
    assert_eq!(ports.len(), 10);
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 10, "no port handed out twice");
    assert!(ports.iter().all(|p| (30000..=30010).contains(p)));
    // 11 ports in range, 10 used: a sixth allocation cannot get two.
    let mut j2 = (*j).clone();
    j2.task_groups[0].count = 6;
    s.register(j2);
    assert_eq!(s.live(&j).len(), 5);
}

#[test]
fn granted_networks_carry_the_nodes_ip() {
    // Issue 16: an allocation's network IP was empty.
    let mut s = Scenario::new();
    let mut n = node();
    n.node_resources.networks = vec![NetworkResource {
        device: "eth0".into(),
        ip: "10.1.2.3".into(),
        cidr: "10.1.2.3/32".into(),
        ..Default::default()
    }];
    s.add_node(n);
    let net = NetworkResource {
        dynamic_ports: vec![Port {
            label: "http".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let (j, _) = s.register(with_network(job(JobType::Service, 1), net));
    let live = s.live(&j);
    let networks: Vec<&NetworkResource> = live[0]
        .allocated_resources
        .shared
        .networks
        .iter()
        .chain(
            live[0]
                .allocated_resources
                .tasks
                .values()
                .flat_map(|t| &t.networks),
        )
        .collect();
    assert!(!networks.is_empty());
    assert!(networks.iter().all(|n| n.ip == "10.1.2.3"), "{networks:?}");
}

#[test]
fn host_volumes_place_only_on_nodes_that_offer_them() {
    // Issue 16: a host volume the node does not have makes it infeasible.
    use crate::structs::job::VolumeRequest;
    use crate::structs::node::ClientHostVolume;
    let mut s = Scenario::new();
    s.add_nodes(2);
    let mut read_only = node();
    read_only.host_volumes.insert(
        "fast".into(),
        ClientHostVolume {
            name: "fast".into(),
            path: "/srv/fast".into(),
            read_only: true,
        },
    );
    read_only.compute_class();
    s.add_node(read_only);
    let mut writable = node();
    writable.host_volumes.insert(
        "fast".into(),
        ClientHostVolume {
            name: "fast".into(),
            path: "/srv/fast".into(),
            read_only: false,
        },
    );
    writable.compute_class();
    let writable = s.add_node(writable);
    let mut j = job(JobType::Service, 2);
    j.task_groups[0].volumes.insert(
        "data".into(),
        VolumeRequest {
            name: "data".into(),
            volume_type: VolumeRequest::HOST.into(),
            source: "fast".into(),
            ..Default::default()
        },
    );
    let (placed, _) = s.register(j.clone());
    let live = s.live(&placed);
    assert_eq!(live.len(), 2);
    assert!(
        live.iter().all(|a| a.node_id == writable.id),
        "only one node offers a writable volume"
    );
    // A source no node offers: nothing placed, and the filter is named.
    j.id = "nowhere".into();
    j.task_groups[0].volumes.get_mut("data").unwrap().source = "missing".into();
    let (nowhere, _) = s.register(j);
    assert!(s.live(&nowhere).is_empty());
    let failed = &s.h.last_eval().unwrap().failed_tg_allocs["web"];
    assert_eq!(
        failed
            .constraint_filtered
            .get("missing compatible host volumes"),
        Some(&4),
        "{failed:?}"
    );
}

#[test]
fn whole_cores_are_reserved_distinct_and_never_more_than_the_node_has() {
    // Issue 16: `resources.cores = 64` was placed on a 2-core node.
    let mut s = Scenario::new();
    let mut n = node();
    n.node_resources.cpu.total_cpu_cores = 2;
    n.node_resources.cpu.cpu_shares = 4000;
    n.reserved_resources.cpu.cpu_shares = 0;
    let n = s.add_node(n);
    let mut big = job(JobType::Service, 1);
    big.id = "big".into();
    big.task_groups[0].tasks[0].resources.cpu = 0;
    big.task_groups[0].tasks[0].resources.cores = 64;
    let (big, _) = s.register(big);
    assert!(s.live(&big).is_empty(), "64 cores placed on a 2-core node");
    let failed = &s.h.last_eval().unwrap().failed_tg_allocs["web"];
    assert_eq!(
        failed.dimension_exhausted.get("cores"),
        Some(&1),
        "{failed:?}"
    );

    let mut one = job(JobType::Service, 3);
    one.task_groups[0].tasks[0].resources.cpu = 0;
    one.task_groups[0].tasks[0].resources.cores = 1;
    let (one, _) = s.register(one);
    let live = s.live(&one);
    assert_eq!(live.len(), 2, "two cores, two single-core allocations");
    let mut held: Vec<u32> = live
        .iter()
        .flat_map(|a| a.allocated_resources.reserved_cores().copied())
        .collect();
    held.sort_unstable();
    assert_eq!(held, vec![0, 1]);
    for a in &live {
        assert_eq!(a.node_id, n.id);
        // A reserved core counts as its share of the node's MHz.
        assert_eq!(a.allocated_resources.comparable().cpu, 2000);
    }
}

#[test]
fn node_reserved_host_ports_are_avoided() {
    let mut s = Scenario::new();
    let mut n = node();
    n.reserved_resources.networks.reserved_host_ports = "8080".into();
    s.add_node(n);
    let ok = s.add_node(node());
    let net = NetworkResource {
        reserved_ports: vec![Port {
            label: "http".into(),
            value: 8080,
            ..Default::default()
        }],
        ..Default::default()
    };
    let (j, _) = s.register(with_network(job(JobType::Service, 1), net));
    assert_eq!(s.live(&j)[0].node_id, ok.id);
}

#[test]
fn distinct_hosts_puts_one_allocation_per_node() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let mut j = job(JobType::Service, 3);
    j.constraints
        .push(Constraint::new("", "distinct_hosts", "true"));
    let (j, _) = s.register(j);
    assert_eq!(s.live(&j).len(), 2);
    assert_eq!(s.per_node(&j).len(), 2);
    let failed = &s.h.last_eval().unwrap().failed_tg_allocs["web"];
    assert_eq!(failed.constraint_filtered.get("distinct_hosts"), Some(&2));
}

fn rack_node(rack: &str) -> Node {
    let mut n = node();
    n.meta.insert("rack".into(), rack.into());
    n
}

#[test]
fn distinct_property_limits_allocations_per_value() {
    let mut s = Scenario::new();
    for r in ["r1", "r1", "r2", "r2"] {
        s.add_node(rack_node(r));
    }
    let mut j = job(JobType::Service, 3);
    j.task_groups[0]
        .constraints
        .push(Constraint::new("${meta.rack}", "distinct_property", ""));
    let (j, _) = s.register(j);
    assert_eq!(s.live(&j).len(), 2);
    let racks: std::collections::BTreeSet<String> = s
        .live(&j)
        .iter()
        .map(|a| s.h.state.node_by_id(&a.node_id).unwrap().meta["rack"].to_string())
        .collect();
    assert_eq!(racks.len(), 2);
}

#[test]
fn distinct_property_with_a_limit_of_two() {
    let mut s = Scenario::new();
    for r in ["r1", "r1", "r1", "r2", "r2", "r2"] {
        s.add_node(rack_node(r));
    }
    let mut j = job(JobType::Service, 5);
    j.constraints
        .push(Constraint::new("${meta.rack}", "distinct_property", "2"));
    let (j, _) = s.register(j);
    assert_eq!(s.live(&j).len(), 4);
}

#[test]
fn affinity_pulls_allocations_to_matching_nodes() {
    let mut s = Scenario::new();
    for r in ["r1", "r2", "r2", "r2", "r2", "r2"] {
        s.add_node(rack_node(r));
    }
    let mut j = job(JobType::Service, 3);
    j.task_groups[0].affinities.push(crate::structs::Affinity {
        l_target: "${meta.rack}".into(),
        r_target: "r1".into(),
        operand: "=".into(),
        weight: 100,
    });
    let (j, _) = s.register(j);
    let r1 = s
        .live(&j)
        .iter()
        .filter(|a| s.h.state.node_by_id(&a.node_id).unwrap().meta["rack"] == "r1")
        .count();
    // One r1 node among six: the affinity (+1) wins over an empty node until
    // the job anti-affinity of a third co-located allocation (-1) cancels it.
    assert_eq!(r1, 2);
}

fn rack_counts(s: &Scenario, j: &Job) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for a in s.live(j) {
        let rack = s.h.state.node_by_id(&a.node_id).unwrap().meta["rack"].to_string();
        *m.entry(rack).or_insert(0) += 1;
    }
    m
}

#[test]
fn spread_with_targets_follows_the_percentages() {
    let mut s = Scenario::new();
    for i in 0..10 {
        s.add_node(rack_node(if i < 7 { "r1" } else { "r2" }));
    }
    let mut j = job(JobType::Service, 10);
    j.task_groups[0].spreads.push(Spread {
        attribute: "${meta.rack}".into(),
        weight: 100,
        spread_target: vec![
            SpreadTarget {
                value: "r1".into(),
                percent: 50,
            },
            SpreadTarget {
                value: "r2".into(),
                percent: 50,
            },
        ],
    });
    let (j, _) = s.register(j);
    let counts = rack_counts(&s, &j);
    assert_eq!(counts.get("r1"), Some(&5), "{counts:?}");
    assert_eq!(counts.get("r2"), Some(&5), "{counts:?}");
}

#[test]
fn spread_without_targets_is_even() {
    let mut s = Scenario::new();
    for i in 0..9 {
        s.add_node(rack_node(["a", "b", "c"][i % 3]));
    }
    let mut j = job(JobType::Service, 9);
    j.spreads.push(Spread {
        attribute: "${meta.rack}".into(),
        weight: 50,
        spread_target: vec![],
    });
    let (j, _) = s.register(j);
    let counts = rack_counts(&s, &j);
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![3, 3, 3]);
}

fn filler_job(id: &str, priority: i32, cpu: i64) -> Job {
    let mut f = job(JobType::Service, 1);
    f.id = id.into();
    f.name = id.into();
    f.priority = priority;
    f.task_groups[0].tasks[0].resources.cpu = cpu;
    f
}

#[test]
fn binpack_prefers_the_used_node_and_spread_the_empty_one() {
    for (algorithm, expect_used) in [
        (SchedulerAlgorithm::Binpack, true),
        (SchedulerAlgorithm::Spread, false),
    ] {
        let mut s = Scenario::new();
        s.h.state.set_scheduler_config(SchedulerConfiguration {
            scheduler_algorithm: algorithm,
            ..Default::default()
        });
        let used = s.add_node(node());
        let filler = filler_job("filler", 50, 2000);
        let mut filler = filler;
        filler.constraints.push(Constraint::new(
            "${node.unique.id}",
            "=",
            &used.id.to_string(),
        ));
        s.register(filler);
        s.add_node(node());
        let (j, _) = s.register(job(JobType::Service, 1));
        let placed = s.live(&j)[0].node_id;
        assert_eq!(placed == used.id, expect_used, "{algorithm:?}");
    }
}

#[test]
fn datacenter_globs_select_matching_datacenters() {
    let mut s = Scenario::new();
    for dc in ["us-east", "us-west", "eu-1"] {
        let mut n = node();
        n.datacenter = dc.into();
        s.add_node(n);
    }
    let mut j = job(JobType::Service, 4);
    j.datacenters = vec!["us-*".into()];
    let (j, _) = s.register(j);
    let dcs: std::collections::BTreeSet<String> = s
        .live(&j)
        .iter()
        .map(|a| s.h.state.node_by_id(&a.node_id).unwrap().datacenter.clone())
        .collect();
    assert_eq!(s.live(&j).len(), 4);
    assert!(dcs.iter().all(|d| d.starts_with("us-")));
}

#[test]
fn node_pool_restricts_candidates() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let mut gpu = node();
    gpu.node_pool = "gpu".into();
    let gpu = s.add_node(gpu);
    let mut j = job(JobType::Service, 2);
    j.node_pool = "gpu".into();
    let (j, _) = s.register(j);
    assert!(s.live(&j).iter().all(|a| a.node_id == gpu.id));
}

#[test]
fn missing_driver_filters_nodes_and_blocks() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let mut j = job(JobType::Service, 1);
    j.task_groups[0].tasks[0].driver = "docker".into();
    let (j, _) = s.register(j);
    assert!(s.live(&j).is_empty());
    let failed = &s.h.last_eval().unwrap().failed_tg_allocs["web"];
    assert_eq!(failed.nodes_filtered, 2);
    assert_eq!(failed.constraint_filtered.get("missing drivers"), Some(&2));
    let blocked = s.h.create_evals.last().unwrap();
    assert_eq!(
        blocked.class_eligibility.values().filter(|v| !**v).count(),
        1
    );
}

#[test]
fn ineligible_and_down_nodes_get_nothing() {
    let mut s = Scenario::new();
    let good = s.add_node(node());
    let mut off = node();
    off.scheduling_eligibility = crate::structs::SchedulingEligibility::Ineligible;
    s.add_node(off);
    let mut down = node();
    down.status = NodeStatus::Down;
    s.add_node(down);
    let (j, _) = s.register(job(JobType::Service, 3));
    assert!(s.live(&j).iter().all(|a| a.node_id == good.id));
}

#[test]
fn service_preemption_when_enabled_evicts_lower_priority() {
    let mut s = Scenario::new();
    s.h.state.set_scheduler_config(SchedulerConfiguration {
        preemption_config: PreemptionConfig {
            service_scheduler_enabled: true,
            ..Default::default()
        },
        ..Default::default()
    });
    s.add_node(node());
    let (low, _) = s.register(filler_job("low", 20, 3500));
    let mut high = filler_job("high", 80, 1000);
    high.task_groups[0].count = 1;
    let (high, _) = s.register(high);
    assert_eq!(s.live(&high).len(), 1);
    let low_alloc = s.all(&low)[0].clone();
    assert_eq!(
        low_alloc.desired_status,
        crate::structs::DesiredStatus::Evict
    );
    assert_eq!(
        low_alloc.links().preempted_by_allocation,
        Some(s.live(&high)[0].id)
    );
    assert_eq!(
        s.live(&high)[0].links().preempted_allocations,
        vec![low_alloc.id]
    );
}

#[test]
fn service_preemption_is_off_by_default() {
    let mut s = Scenario::new();
    s.add_node(node());
    let (low, _) = s.register(filler_job("low", 20, 3500));
    let (high, _) = s.register(filler_job("high", 80, 1000));
    assert!(s.live(&high).is_empty());
    assert_eq!(s.live(&low).len(), 1);
}

#[test]
fn placements_are_reproducible_for_the_same_eval() {
    let mut base = Scenario::new();
    base.add_nodes(50);
    let j = base.upsert_job(job(JobType::Service, 20));
    let eval = Evaluation::for_job(&j, TriggeredBy::JobRegister, NOW);
    let run = |state: crate::scheduler::HarnessState| {
        let mut h = Harness::with_state(state);
        h.now = NOW;
        h.process(&eval).unwrap();
        let mut v: Vec<(String, crate::structs::NodeId)> = h
            .state
            .allocs_by_job(&j.namespace, &j.id)
            .iter()
            .map(|a| (a.name.to_string(), a.node_id))
            .collect();
        v.sort();
        v
    };
    assert_eq!(run(base.h.state.clone()), run(base.h.state.clone()));
}

#[test]
fn memory_exhaustion_is_reported_by_dimension() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let mut j = job(JobType::Batch, 1);
    j.task_groups[0].tasks[0].resources.memory_mb = 100_000;
    let (j, _) = s.register(j);
    assert!(s.live(&j).is_empty());
    let failed = &s.h.last_eval().unwrap().failed_tg_allocs["web"];
    assert_eq!(failed.nodes_exhausted, 2);
    assert_eq!(failed.dimension_exhausted.get("memory"), Some(&2));
    assert_eq!(failed.resources_exhausted["web"].memory_mb, 100_000);
}

#[test]
fn unique_constraints_escape_class_tracking() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let mut j = job(JobType::Service, 1);
    j.constraints
        .push(Constraint::new("${node.unique.name}", "=", "nowhere"));
    s.register(j);
    let blocked = s.h.create_evals.last().unwrap();
    assert!(blocked.escaped_computed_class);
    assert!(blocked.class_eligibility.is_empty());
}

#[test]
fn replacement_for_lost_alloc_keeps_its_name_and_count() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(3);
    let (j, _) = s.register(job(JobType::Service, 2));
    for n in &nodes {
        s.h.state
            .update_node(&n.id, |n| n.status = NodeStatus::Down);
    }
    let extra = s.add_node(node());
    s.eval(&j, TriggeredBy::NodeUpdate);
    assert_eq!(s.names(&j), vec!["web.web[0]", "web.web[1]"]);
    assert!(s.live(&j).iter().all(|a| a.node_id == extra.id));
}

#[test]
fn placement_quality_at_scale_anti_affinity() {
    let mut s = Scenario::new();
    s.add_nodes(200);
    let (j, _) = s.register(job(JobType::Service, 200));
    let per_node = s.per_node(&j);
    assert_eq!(s.live(&j).len(), 200);
    let max = per_node.values().copied().max().unwrap_or(0);
    assert!(max <= 2, "{max} on one node");
    assert!(per_node.len() >= 150, "only {} nodes used", per_node.len());
}

#[test]
fn placement_quality_at_scale_spread() {
    let mut s = Scenario::new();
    for i in 0..200 {
        s.add_node(rack_node(&format!("r{}", i % 10)));
    }
    let mut j = job(JobType::Service, 100);
    j.task_groups[0].spreads.push(Spread {
        attribute: "${meta.rack}".into(),
        weight: 100,
        spread_target: vec![],
    });
    let (j, _) = s.register(j);
    let counts = rack_counts(&s, &j);
    assert_eq!(counts.len(), 10);
    assert!(counts.values().all(|c| (9..=11).contains(c)), "{counts:?}");
}

#[test]
fn preemption_prefers_evicting_lower_priority_work() {
    let mut s = Scenario::new();
    s.h.state.set_scheduler_config(SchedulerConfiguration {
        preemption_config: PreemptionConfig {
            service_scheduler_enabled: true,
            ..Default::default()
        },
        ..Default::default()
    });
    let a = s.add_node(node());
    let b = s.add_node(node());
    for (id, prio, n) in [("low", 10, &a), ("mid", 60, &b)] {
        let mut f = filler_job(id, prio, 3500);
        f.constraints
            .push(Constraint::new("${node.unique.id}", "=", &n.id.to_string()));
        s.register(f);
    }
    let (high, _) = s.register(filler_job("high", 90, 1000));
    let placed = s.live(&high);
    assert_eq!(placed.len(), 1);
    assert_eq!(
        placed[0].node_id, a.id,
        "the priority-10 allocation is evicted"
    );
    let metric = placed[0].metrics.as_ref().unwrap().unpack();
    let scores = &metric.score_meta_data[0].scores;
    assert!(scores.contains_key("preemption"));
}

#[test]
fn annotated_plan_counts_preemptions() {
    let mut s = Scenario::new();
    s.h.state.set_scheduler_config(SchedulerConfiguration {
        preemption_config: PreemptionConfig {
            service_scheduler_enabled: true,
            ..Default::default()
        },
        ..Default::default()
    });
    s.add_node(node());
    let (low, _) = s.register(filler_job("low", 20, 3500));
    let high = s.upsert_job(filler_job("high", 80, 1000));
    let mut eval = Evaluation::for_job(&high, TriggeredBy::JobRegister, NOW);
    eval.annotate_plan = true;
    s.process(&eval);
    let ann = s.h.plans.last().unwrap().annotations.clone().unwrap();
    assert_eq!(ann.desired_tg_updates["web"].preemptions, 1);
    assert_eq!(ann.preempted_allocs, vec![s.all(&low)[0].id]);
}

#[test]
fn each_placement_records_its_allocation_time_from_the_handed_in_clock() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut s = Scenario::new();
    s.add_nodes(3);
    // A clock that advances 1,000 ns on every reading.
    let ticks = std::sync::Arc::new(AtomicU64::new(0));
    let t = ticks.clone();
    s.h.clock = Some(std::sync::Arc::new(move || {
        t.fetch_add(1_000, Ordering::SeqCst)
    }));
    let (job, _) = s.register(job(JobType::Service, 3));
    for a in s.live(&job) {
        assert_eq!(a.metrics.as_ref().unwrap().unpack().allocation_time, 1_000);
    }
    assert!(
        ticks.load(Ordering::SeqCst) >= 6_000,
        "read twice per placement"
    );
}

/// Whether `node` is in `share` by its position in the state's catalog.
fn in_share(s: &Scenario, share: NodeShare, node: &crate::structs::NodeId) -> bool {
    let catalog = s.h.state.node_catalog();
    share.holds(catalog.position(node).expect("a catalog node"))
}

#[test]
fn a_workers_placements_stay_in_its_share_of_the_nodes() {
    let mut s = Scenario::new();
    s.add_nodes(400);
    let share = NodeShare { index: 1, count: 2 };
    s.h.node_share = Some(share);
    let (first, _) = s.register(job(JobType::Service, 40));
    let live = s.live(&first);
    assert_eq!(live.len(), 40);
    assert!(
        live.iter().all(|a| in_share(&s, share, &a.node_id)),
        "every allocation on a node of the share"
    );
    // The other share gets the next job's allocations, as a second worker
    // planning at the same time would place them.
    let other = NodeShare { index: 0, count: 2 };
    s.h.node_share = Some(other);
    let mut second = job(JobType::Service, 40);
    second.id = "api".into();
    let (second, _) = s.register(second);
    assert!(s
        .live(&second)
        .iter()
        .all(|a| in_share(&s, other, &a.node_id)));
}

#[test]
fn a_full_share_sends_placements_to_the_other_nodes() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(400);
    let share = NodeShare { index: 0, count: 2 };
    // The share's nodes have no room for a 500 MHz task.
    let held: Vec<_> = nodes
        .iter()
        .filter(|n| in_share(&s, share, &n.id))
        .cloned()
        .collect();
    for node in held {
        let mut small = (*node).clone();
        small.node_resources.cpu.cpu_shares = 300;
        s.add_node(small);
    }
    s.h.node_share = Some(share);
    let (job, _) = s.register(job(JobType::Service, 30));
    let live = s.live(&job);
    assert_eq!(live.len(), 30, "placed outside the share");
    assert!(live.iter().all(|a| !in_share(&s, share, &a.node_id)));
    assert_eq!(s.last_status(), EvalStatus::Complete);
}

#[test]
fn a_placement_that_fits_nowhere_reports_every_node_it_walked() {
    let mut s = Scenario::new();
    s.add_nodes(300);
    s.h.node_share = Some(NodeShare { index: 0, count: 3 });
    let mut huge = job(JobType::Service, 1);
    huge.task_groups[0].tasks[0].resources.cpu = 100_000;
    let (_, _) = s.register(huge);
    let eval = s.h.last_eval().expect("a status");
    let failed = eval.failed_tg_allocs.get("web").expect("the group failed");
    assert_eq!(
        failed.nodes_evaluated, 300,
        "every node, not the share's 100"
    );
    assert_eq!(failed.nodes_exhausted, 300);
}
