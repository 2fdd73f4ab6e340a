//! Deployments through the generic scheduler, Nomad's reconciler cases:
//! creation, rolling by `max_parallel` and health, canaries and
//! promotion, failures, cancels, lost nodes, scaling, pause and drains
//! during a deployment. The harness counts placements and health into
//! the deployment as the store does; tests play the client (health) and
//! the deployment watcher (promotion, pause, evaluations).

use super::*;
use crate::scheduler::util::{ALLOC_NOT_NEEDED, ALLOC_UPDATING};
use crate::structs::deployment::description;
use crate::structs::{DeploymentStatus, DesiredTransition, JobType};

/// A service job of `count` rolling `max_parallel` at a time with
/// `canary` canaries.
fn rolling_job(count: i32, max_parallel: i32, canary: i32) -> Job {
    let mut j = job(JobType::Service, count);
    let update = j.task_groups[0].update.get_or_insert_with(Default::default);
    update.max_parallel = max_parallel;
    update.canary = canary;
    j
}

/// The job's next version with a changed task (a destructive update).
fn new_version(job: &Job, command: &str) -> Job {
    let mut j = job.clone();
    j.version += 1;
    j.task_groups[0].tasks[0]
        .config
        .insert("command".into(), serde_json::json!(command));
    j
}

/// Registers the job and settles it: every allocation healthy, the
/// deployment successful.
fn settled(s: &mut Scenario, job: Job) -> Arc<Job> {
    let (j, _) = s.register(job);
    s.all_healthy(&j);
    s.eval(&j, TriggeredBy::DeploymentWatcher);
    assert_eq!(s.deployment(&j).status, DeploymentStatus::Successful);
    j
}

fn of_version(s: &Scenario, job: &Job) -> Vec<Arc<Allocation>> {
    s.live(job)
        .into_iter()
        .filter(|a| a.job_version == job.version)
        .collect()
}

#[test]
fn first_registration_creates_a_deployment() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let (j, _) = s.register(job(JobType::Service, 3));
    let d = s.deployment(&j);
    assert!(d.is_for(&j));
    assert_eq!(d.status, DeploymentStatus::Running);
    assert_eq!(d.status_description, description::RUNNING);
    let g = &d.task_groups["web"];
    assert_eq!((g.desired_total, g.placed_allocs), (3, 3));
    assert_eq!(g.progress_deadline, std::time::Duration::from_secs(600));
    assert!(s.live(&j).iter().all(|a| a.deployment_id == Some(d.id)));
    // Once every allocation is healthy the reconciler completes it.
    s.all_healthy(&j);
    s.eval(&j, TriggeredBy::DeploymentWatcher);
    let d = s.deployment(&j);
    assert_eq!(d.status, DeploymentStatus::Successful);
    assert_eq!(d.status_description, description::SUCCESSFUL);
    assert_eq!(d.task_groups["web"].healthy_allocs, 3);
}

#[test]
fn batch_jobs_and_unchanged_versions_get_no_deployment() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let (b, _) = s.register(job(JobType::Batch, 2));
    assert!(s.h.state.latest_deployment(&b.namespace, &b.id).is_none());
    let mut s = Scenario::new();
    s.add_nodes(2);
    let j = settled(&mut s, job(JobType::Service, 2));
    let before = s.deployment(&j).id;
    s.eval(&j, TriggeredBy::NodeUpdate);
    assert_eq!(s.deployment(&j).id, before, "nothing to deploy");
}

#[test]
fn rolling_update_replaces_max_parallel_unhealthy_at_a_time() {
    let mut s = Scenario::new();
    s.add_nodes(5);
    let j1 = settled(&mut s, rolling_job(5, 2, 0));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let d = s.deployment(&j2);
    assert!(d.is_for(&j2));
    assert_eq!(d.task_groups["web"].desired_total, 5);
    for expected in [2, 4, 5] {
        let new = of_version(&s, &j2);
        assert_eq!(new.len(), expected);
        assert_eq!(s.live(&j2).len(), 5, "old allocations keep serving");
        assert!(new.iter().all(|a| a.deployment_id == Some(d.id)));
        // Nothing more until the new ones are healthy.
        s.eval(&j2, TriggeredBy::DeploymentWatcher);
        assert_eq!(of_version(&s, &j2).len(), expected);
        s.all_healthy(&j2);
        s.eval(&j2, TriggeredBy::DeploymentWatcher);
    }
    assert_eq!(of_version(&s, &j2).len(), 5);
    assert_eq!(s.deployment(&j2).status, DeploymentStatus::Successful);
    let replaced: Vec<_> = s
        .all(&j2)
        .into_iter()
        .filter(|a| a.job_version == j1.version)
        .collect();
    assert!(replaced
        .iter()
        .all(|a| &*a.desired_description == ALLOC_UPDATING));
}

#[test]
fn canary_waits_for_promotion_then_the_rest_rolls() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let j1 = settled(&mut s, rolling_job(3, 1, 1));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let d = s.deployment(&j2);
    assert_eq!(d.status_description, description::RUNNING_NEEDS_PROMOTION);
    let g = &d.task_groups["web"];
    assert_eq!((g.desired_canaries, g.placed_canaries.len()), (1, 1));
    let canary = of_version(&s, &j2);
    assert_eq!(canary.len(), 1);
    assert!(canary[0].deployment_status().is_some_and(|s| s.canary));
    assert_eq!(&*canary[0].name, "web.web[0]", "named after a replaced one");
    assert_eq!(s.live(&j2).len(), 4, "beside the three old allocations");
    // Healthy but not promoted: nothing else changes.
    s.set_health(&canary[0].id, true);
    s.eval(&j2, TriggeredBy::DeploymentWatcher);
    assert_eq!(s.live(&j2).len(), 4);
    assert_eq!(of_version(&s, &j2).len(), 1);
    assert_eq!(s.deployment(&j2).status, DeploymentStatus::Running);
    // Promotion (as the store does it): the old web[0] stops, one rolls.
    promote(&mut s, &j2);
    s.eval(&j2, TriggeredBy::DeploymentWatcher);
    assert_eq!(s.live(&j2).len(), 3);
    assert_eq!(of_version(&s, &j2).len(), 2);
    let old0 = s
        .all(&j2)
        .into_iter()
        .find(|a| &*a.name == "web.web[0]" && a.job_version == j1.version)
        .unwrap();
    assert_eq!(&*old0.desired_description, ALLOC_NOT_NEEDED);
    for _ in 0..2 {
        s.all_healthy(&j2);
        s.eval(&j2, TriggeredBy::DeploymentWatcher);
    }
    assert_eq!(of_version(&s, &j2).len(), 3);
    assert_eq!(s.live(&j2).len(), 3);
    assert_eq!(s.deployment(&j2).status, DeploymentStatus::Successful);
}

/// What the store does on promotion: the groups are promoted and their
/// canaries become ordinary allocations.
fn promote(s: &mut Scenario, job: &Job) {
    let d = s.deployment(job);
    s.h.state.update_deployment(&d.id, |d| {
        for g in d.task_groups.values_mut() {
            g.promoted = true;
        }
    });
    for id in d
        .task_groups
        .values()
        .flat_map(|g| g.placed_canaries.clone())
    {
        s.h.state.update_alloc(&id, |a| {
            if let Some(st) = a.deployment_status_mut() {
                st.canary = false;
            }
        });
    }
}

#[test]
fn failed_canary_is_not_replaced_in_an_active_deployment() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let j1 = settled(&mut s, rolling_job(3, 1, 1));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let canary = of_version(&s, &j2)[0].clone();
    s.fail_at(&canary.id, NOW - 3600 * SECOND);
    s.eval(&j2, TriggeredBy::AllocFailure);
    assert!(
        of_version(&s, &j2).is_empty(),
        "no new canary, no reschedule"
    );
    assert_eq!(s.live(&j2).len(), 3, "the old allocations keep running");
    assert!(s.h.create_evals.is_empty());
}

#[test]
fn failed_allocation_of_an_active_deployment_is_left_to_the_watcher() {
    let mut s = Scenario::new();
    s.add_nodes(4);
    let j1 = settled(&mut s, rolling_job(4, 2, 0));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let new = of_version(&s, &j2);
    s.fail_at(&new[0].id, NOW - 3600 * SECOND);
    s.set_health(&new[0].id, false);
    s.eval(&j2, TriggeredBy::AllocFailure);
    assert_eq!(of_version(&s, &j2).len(), 1, "not rescheduled, nothing new");
    // Once the watcher allows its replacement, it is rescheduled, but
    // the unhealthy allocation still holds the rollout.
    s.h.state
        .update_alloc(&new[0].id, |a| a.desired_transition.reschedule = Some(true));
    s.eval(&j2, TriggeredBy::AllocFailure);
    let now_new = of_version(&s, &j2);
    assert_eq!(now_new.len(), 2);
    assert!(now_new
        .iter()
        .any(|a| a.links().previous_allocation == Some(new[0].id)));
    assert_eq!(s.live(&j2).len(), 4);
}

#[test]
fn a_new_version_cancels_the_running_deployment() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let j1 = settled(&mut s, rolling_job(3, 1, 0));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let d2 = s.deployment(&j2);
    let (j3, _) = s.register(new_version(&j2, "/bin/v3"));
    let plan = s.h.plans.last().unwrap();
    assert_eq!(plan.deployment_updates.len(), 1);
    assert_eq!(plan.deployment_updates[0].deployment_id, d2.id);
    let d2 = s.h.state.deployment_by_id(&d2.id).unwrap();
    assert_eq!(d2.status, DeploymentStatus::Cancelled);
    assert_eq!(d2.status_description, description::NEWER_JOB);
    let d3 = s.deployment(&j3);
    assert!(d3.is_for(&j3));
    assert_eq!(d3.status, DeploymentStatus::Running);
}

#[test]
fn stopping_the_job_cancels_its_deployment() {
    let mut s = Scenario::new();
    s.add_nodes(2);
    let (j, _) = s.register(job(JobType::Service, 2));
    let mut stopped = (*j).clone();
    stopped.stop = true;
    let (stopped, _) = s.register(stopped);
    let d = s.deployment(&stopped);
    assert_eq!(d.status, DeploymentStatus::Cancelled);
    assert_eq!(d.status_description, description::STOPPED_JOB);
    assert!(s.live(&stopped).is_empty());
}

#[test]
fn lost_allocations_are_replaced_during_a_deployment() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(5);
    let j1 = settled(&mut s, rolling_job(5, 1, 0));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let d = s.deployment(&j2);
    let old = s
        .live(&j2)
        .into_iter()
        .find(|a| a.job_version == j1.version)
        .unwrap();
    assert!(nodes.iter().any(|n| n.id == old.node_id));
    s.h.state
        .update_node(&old.node_id, |n| n.status = NodeStatus::Down);
    s.eval(&j2, TriggeredBy::NodeUpdate);
    let live = s.live(&j2);
    assert_eq!(live.len(), 5);
    let replacement = live
        .iter()
        .find(|a| a.links().previous_allocation == Some(old.id))
        .unwrap();
    assert_eq!(replacement.deployment_id, Some(d.id));
    assert_eq!(replacement.job_version, j2.version);
}

#[test]
fn scaling_during_a_deployment_redeploys_with_the_new_count() {
    let mut s = Scenario::new();
    s.add_nodes(6);
    let j1 = settled(&mut s, rolling_job(4, 2, 0));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let d2 = s.deployment(&j2);
    // Scaling registers a new version of the same spec.
    let mut j3 = (*j2).clone();
    j3.version += 1;
    j3.task_groups[0].count = 6;
    let (j3, _) = s.register(j3);
    let d3 = s.deployment(&j3);
    assert_ne!(d3.id, d2.id);
    assert_eq!(d3.task_groups["web"].desired_total, 6);
    assert_eq!(s.live(&j3).len(), 6);
    let mut j4 = (*j3).clone();
    j4.version += 1;
    j4.task_groups[0].count = 3;
    let (j4, _) = s.register(j4);
    assert_eq!(s.deployment(&j4).task_groups["web"].desired_total, 3);
    assert_eq!(s.live(&j4).len(), 3);
}

#[test]
fn paused_deployment_places_nothing_new() {
    let mut s = Scenario::new();
    s.add_nodes(4);
    let j1 = settled(&mut s, rolling_job(4, 1, 0));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let d = s.deployment(&j2);
    s.h.state
        .update_deployment(&d.id, |d| d.status = DeploymentStatus::Paused);
    s.all_healthy(&j2);
    s.eval(&j2, TriggeredBy::DeploymentWatcher);
    assert_eq!(of_version(&s, &j2).len(), 1);
    s.h.state
        .update_deployment(&d.id, |d| d.status = DeploymentStatus::Running);
    s.eval(&j2, TriggeredBy::DeploymentWatcher);
    assert_eq!(of_version(&s, &j2).len(), 2, "resumed, the rollout goes on");
}

#[test]
fn drained_allocations_migrate_during_a_deployment() {
    let mut s = Scenario::new();
    s.add_nodes(4);
    let j1 = settled(&mut s, rolling_job(4, 1, 0));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let d = s.deployment(&j2);
    let moving = s
        .live(&j2)
        .into_iter()
        .find(|a| a.job_version == j1.version)
        .unwrap();
    s.h.state.update_alloc(&moving.id, |a| {
        a.desired_transition = DesiredTransition {
            migrate: Some(true),
            ..Default::default()
        }
    });
    s.eval(&j2, TriggeredBy::NodeDrain);
    let live = s.live(&j2);
    assert_eq!(live.len(), 4);
    let moved = live
        .iter()
        .find(|a| a.links().previous_allocation == Some(moving.id))
        .unwrap();
    assert_eq!(moved.deployment_id, Some(d.id));
    assert_eq!(moved.name, moving.name);
}

#[test]
fn failed_deployment_places_nothing_new_of_its_version() {
    let mut s = Scenario::new();
    s.add_nodes(4);
    let j1 = settled(&mut s, rolling_job(4, 1, 0));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let d = s.deployment(&j2);
    s.h.state
        .update_deployment(&d.id, |d| d.status = DeploymentStatus::Failed);
    s.all_healthy(&j2);
    s.eval(&j2, TriggeredBy::DeploymentWatcher);
    assert_eq!(of_version(&s, &j2).len(), 1);
    assert_eq!(s.live(&j2).len(), 4);
    let d = s.deployment(&j2);
    assert_eq!(d.status, DeploymentStatus::Failed, "a verdict is kept");
}

#[test]
fn auto_revert_stops_the_failed_canaries_and_redeploys_the_stable_spec() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let j1 = settled(&mut s, rolling_job(3, 1, 1));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let canary = of_version(&s, &j2)[0].clone();
    let d2 = s.deployment(&j2);
    s.h.state
        .update_deployment(&d2.id, |d| d.status = DeploymentStatus::Failed);
    // The revert registers the stable spec as a new version.
    let mut j3 = (*j1).clone();
    j3.version = j2.version + 1;
    let (j3, _) = s.register(j3);
    let canary = s.h.state.alloc_by_id(&canary.id).unwrap();
    assert!(canary.is_terminal(), "the unpromoted canary is stopped");
    assert_eq!(&*canary.desired_description, ALLOC_NOT_NEEDED);
    let live = s.live(&j3);
    assert_eq!(live.len(), 3);
    assert!(
        live.iter().all(|a| a.job_version == j3.version),
        "updated in place"
    );
    let d3 = s.deployment(&j3);
    assert!(d3.is_for(&j3));
    assert!(live.iter().all(|a| a.deployment_id == Some(d3.id)));
}

#[test]
fn job_plan_counts_canaries() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let j1 = settled(&mut s, rolling_job(3, 1, 2));
    let j2 = s.upsert_job(new_version(&j1, "/bin/v2"));
    let mut eval = Evaluation::for_job(&j2, TriggeredBy::JobRegister, NOW);
    eval.annotate_plan = true;
    s.process(&eval);
    let plan = s.h.plans.last().unwrap();
    let desired = &plan.annotations.as_ref().unwrap().desired_tg_updates["web"];
    assert_eq!(desired.canary, 2);
    assert_eq!(desired.destructive_update, 0);
    assert_eq!(desired.ignore, 3, "the old allocations wait for promotion");
}

#[test]
fn lost_old_allocation_is_replaced_with_the_old_version_while_canaries_wait() {
    // Nomad's downgradeNonCanary: only the canaries run the version on
    // trial until it is promoted; a replacement runs the proven version.
    let mut s = Scenario::new();
    s.add_nodes(4);
    let j1 = settled(&mut s, rolling_job(3, 1, 1));
    let d1 = s.deployment(&j1);
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let canary = of_version(&s, &j2)[0].clone();
    let old = s
        .live(&j2)
        .into_iter()
        .find(|a| a.job_version == j1.version && a.node_id != canary.node_id)
        .unwrap();
    s.h.state
        .update_node(&old.node_id, |n| n.status = NodeStatus::Down);
    s.eval(&j2, TriggeredBy::NodeUpdate);
    let replacement = s
        .live(&j2)
        .into_iter()
        .find(|a| a.links().previous_allocation == Some(old.id))
        .expect("the lost allocation is replaced");
    assert_eq!(replacement.job_version, j1.version, "with the old version");
    assert_eq!(replacement.deployment_id, Some(d1.id));
    assert!(replacement.deployment_status().is_none(), "not a canary");
    assert_eq!(of_version(&s, &j2).len(), 1, "still one canary on trial");
    // Once promoted, the downgraded allocation is rolled like the others.
    s.set_health(&canary.id, true);
    promote(&mut s, &j2);
    for _ in 0..3 {
        s.all_healthy(&j2);
        s.eval(&j2, TriggeredBy::DeploymentWatcher);
    }
    assert_eq!(of_version(&s, &j2).len(), 3);
    assert_eq!(s.live(&j2).len(), 3);
}

#[test]
fn failed_old_allocation_is_rescheduled_with_the_old_version_while_canaries_wait() {
    let mut s = Scenario::new();
    s.add_nodes(4);
    let j1 = settled(&mut s, rolling_job(3, 1, 1));
    let (j2, _) = s.register(new_version(&j1, "/bin/v2"));
    let old = s
        .live(&j2)
        .into_iter()
        .find(|a| a.job_version == j1.version)
        .unwrap();
    s.fail_at(&old.id, NOW - 3600 * SECOND);
    s.eval(&j2, TriggeredBy::AllocFailure);
    let replacement = s
        .live(&j2)
        .into_iter()
        .find(|a| a.links().previous_allocation == Some(old.id))
        .expect("the failed allocation is rescheduled");
    assert_eq!(replacement.job_version, j1.version);
    assert!(replacement.links().reschedule_tracker.is_some());
    assert_eq!(of_version(&s, &j2).len(), 1, "still one canary on trial");
}
