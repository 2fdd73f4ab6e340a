//! Unit tests of deployments in the store: what a plan, a client's health
//! report and a user's promotion count into a deployment, what is refused
//! (and then changes nothing), and that deployments survive a restart.

use super::command::{AllocClientUpdate, Command, PlanResults};
use super::fixtures::{self, AllocBuilder};
use super::{ApplyError, StateSnapshot, StateStore, StoreOptions};
use crate::structs::deployment::description;
use crate::structs::{
    AllocDeploymentStatus, Allocation, ClientStatus, Deployment, DeploymentState, DeploymentStatus,
    DeploymentStatusUpdate, Job, TriggeredBy,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

struct World {
    state: StateSnapshot,
    job: Job,
    deployment: Deployment,
}

impl World {
    /// A registered job `web` (group `frontend`, 3 wanted) and a running
    /// deployment of it with one canary wanted.
    fn new() -> Self {
        let job = fixtures::job("default", "web", &[("frontend", 3)]);
        let mut state = StateSnapshot::new();
        let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
        state
            .apply(
                1,
                &Command::JobRegister {
                    job: Arc::new(job.clone()),
                    eval: Some(eval),
                    enforce_index: None,
                },
            )
            .unwrap();
        let job = (**state.job("default", "web").unwrap()).clone();
        let mut deployment = Deployment::new(&job, 50);
        deployment.task_groups.insert(
            "frontend".into(),
            DeploymentState {
                desired_total: 3,
                desired_canaries: 1,
                progress_deadline: Duration::from_secs(600),
                ..Default::default()
            },
        );
        World {
            state,
            job,
            deployment,
        }
    }

    fn apply(&mut self, cmd: Command) -> Result<u64, ApplyError> {
        let index = self.state.latest_index() + 1;
        self.state.apply(index, &cmd).map(|c| c.index)
    }

    /// Applies a command that must fail, and checks nothing changed.
    fn refused(&mut self, cmd: Command) -> String {
        let before = self.state.clone();
        let err = self.apply(cmd).expect_err("must be refused");
        assert_eq!(self.state, before, "a refused command changed the state");
        err.to_string()
    }

    /// Places `n` allocations in the deployment (the first `canaries`
    /// marked canaries), with the deployment itself in the same plan.
    fn place(&mut self, n: u32, canaries: u32) -> Vec<Allocation> {
        let node = fixtures::node("n1");
        self.apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        })
        .unwrap();
        let builder = AllocBuilder::new(&self.job, "frontend");
        let allocs: Vec<Allocation> = (0..n)
            .map(|i| {
                let mut a = builder.build(i, node.id, crate::structs::new_id(), 1_000);
                a.deployment_id = Some(self.deployment.id);
                a.set_deployment_status((i < canaries).then(|| AllocDeploymentStatus {
                    canary: true,
                    ..Default::default()
                }));
                a
            })
            .collect();
        let mut node_allocation = HashMap::new();
        node_allocation.insert(node.id, allocs.clone());
        self.apply(Command::ApplyPlanResults(PlanResults {
            eval_id: allocs[0].eval_id,
            job: Some(Arc::new(self.job.clone())),
            node_allocation,
            updated_at: 1_000,
            deployment: Some(Arc::new(self.deployment.clone())),
            ..Default::default()
        }))
        .unwrap();
        allocs
    }

    fn report(&mut self, alloc: &Allocation, healthy: bool, at: i64) {
        self.apply(Command::AllocClientUpdate {
            updates: vec![AllocClientUpdate {
                id: alloc.id,
                client_status: ClientStatus::Running,
                modify_time: at,
                deployment_status: Some(AllocDeploymentStatus {
                    healthy: Some(healthy),
                    timestamp: Some(at),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            evals: vec![],
        })
        .unwrap();
    }

    fn group(&self) -> DeploymentState {
        self.state
            .deployment(&self.deployment.id)
            .unwrap()
            .task_groups["frontend"]
            .clone()
    }
}

#[test]
fn a_plan_creates_its_deployment_and_counts_its_placements_and_canaries() {
    let mut w = World::new();
    let allocs = w.place(2, 1);
    let d = w.state.deployment(&w.deployment.id).unwrap().clone();
    assert_eq!(d.status, DeploymentStatus::Running);
    assert!(d.create_index > 0 && d.modify_index == d.create_index);
    let g = &d.task_groups["frontend"];
    assert_eq!(g.placed_allocs, 2);
    assert_eq!(g.placed_canaries, vec![allocs[0].id]);
    assert_eq!(g.require_progress_by, Some(1_000 + 600_000_000_000));
    let latest = w.state.latest_deployment("default", "web").unwrap();
    assert_eq!(latest.id, d.id);
    assert_eq!(w.state.allocs_by_deployment(&d.id).len(), 2);
}

#[test]
fn health_is_counted_once_and_a_healthy_allocation_extends_the_deadline() {
    let mut w = World::new();
    let allocs = w.place(3, 0);
    w.report(&allocs[0], true, 5_000);
    w.report(&allocs[0], true, 6_000); // repeated: not counted again
    w.report(&allocs[1], false, 7_000);
    let g = w.group();
    assert_eq!((g.healthy_allocs, g.unhealthy_allocs), (1, 1));
    assert_eq!(g.require_progress_by, Some(5_000 + 600_000_000_000));
    let stored = w.state.alloc(&allocs[0].id).unwrap();
    assert!(stored.deployment_status().unwrap().is_healthy());
}

#[test]
fn promotion_waits_for_healthy_canaries_then_clears_the_canary_mark() {
    let mut w = World::new();
    let allocs = w.place(1, 1);
    let id = w.deployment.id;
    let promote = |id| Command::DeploymentPromotion {
        deployment_id: id,
        groups: vec![],
        eval: None,
    };
    let err = w.refused(promote(id));
    assert!(err.contains("has 0/1 healthy allocations"), "{err}");
    w.report(&allocs[0], true, 2_000);
    w.apply(promote(id)).unwrap();
    let d = w.state.deployment(&id).unwrap();
    assert!(d.task_groups["frontend"].promoted);
    assert_eq!(d.status_description, description::RUNNING);
    let canary = w.state.alloc(&allocs[0].id).unwrap();
    assert!(!canary.deployment_status().unwrap().canary);
    // The canary stays counted as placed once.
    assert_eq!(w.group().placed_allocs, 1);
}

#[test]
fn a_terminal_deployment_refuses_changes_in_nomads_words() {
    let mut w = World::new();
    w.place(1, 0);
    let id = w.deployment.id;
    let fail = |status| Command::DeploymentStatusUpdate {
        update: DeploymentStatusUpdate {
            deployment_id: id,
            status,
            status_description: description::FAILED_BY_USER.into(),
        },
        job: None,
        eval: None,
    };
    w.apply(fail(DeploymentStatus::Failed)).unwrap();
    assert_eq!(
        w.refused(fail(DeploymentStatus::Failed)),
        "can't fail terminal deployment"
    );
    assert_eq!(
        w.refused(Command::DeploymentPromotion {
            deployment_id: id,
            groups: vec![],
            eval: None
        }),
        "can't promote terminal deployment"
    );
    assert_eq!(
        w.refused(Command::DeploymentAllocHealth {
            deployment_id: id,
            healthy: vec![],
            unhealthy: vec![],
            timestamp: 1,
            update: None,
            job: None,
            eval: None,
        }),
        "can't set health of allocations for a terminal deployment"
    );
}

#[test]
fn manual_health_marks_only_the_deployments_allocations() {
    let mut w = World::new();
    let allocs = w.place(2, 0);
    let id = w.deployment.id;
    let health = |healthy: Vec<_>| Command::DeploymentAllocHealth {
        deployment_id: id,
        healthy,
        unhealthy: vec![],
        timestamp: 9_000,
        update: None,
        job: None,
        eval: None,
    };
    let stranger = crate::structs::new_id();
    let err = w.refused(health(vec![allocs[0].id, stranger]));
    assert!(err.contains("does not contain allocation"), "{err}");
    w.apply(health(vec![allocs[0].id, allocs[1].id])).unwrap();
    assert_eq!(w.group().healthy_allocs, 2);
}

#[test]
fn purging_the_job_removes_its_deployments() {
    let mut w = World::new();
    w.place(1, 0);
    w.apply(Command::JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: true,
        eval: None,
    })
    .unwrap();
    assert!(w.state.deployment(&w.deployment.id).is_none());
    assert!(w.state.latest_deployment("default", "web").is_none());
}

#[test]
fn deployments_and_allocation_health_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = World::new();
    let allocs = w.place(2, 1);
    w.report(&allocs[0], true, 3_000);
    let commands = {
        // Replay the same history into a store on disk.
        let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
        let job_cmd = Command::JobRegister {
            job: Arc::new(fixtures::job("default", "web", &[("frontend", 3)])),
            eval: None,
            enforce_index: None,
        };
        store.apply(job_cmd).unwrap();
        let job = store.snapshot().job("default", "web").unwrap().clone();
        let node = fixtures::node("n1");
        store
            .apply(Command::NodeRegister {
                node: Arc::new(node.clone()),
            })
            .unwrap();
        let mut a =
            AllocBuilder::new(&job, "frontend").build(0, node.id, crate::structs::new_id(), 1);
        a.deployment_id = Some(w.deployment.id);
        a.set_deployment_status(Some(AllocDeploymentStatus {
            canary: true,
            ..Default::default()
        }));
        let mut node_allocation = HashMap::new();
        node_allocation.insert(node.id, vec![a.clone()]);
        store
            .apply(Command::ApplyPlanResults(PlanResults {
                eval_id: a.eval_id,
                job: Some(job),
                node_allocation,
                deployment: Some(Arc::new(w.deployment.clone())),
                ..Default::default()
            }))
            .unwrap();
        store.close();
        a
    };
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let snap = store.snapshot();
    let d = snap
        .deployment(&w.deployment.id)
        .expect("deployment survives");
    assert_eq!(d.task_groups["frontend"].placed_canaries, vec![commands.id]);
    let a = snap.alloc(&commands.id).unwrap();
    assert_eq!(a.deployment_id, Some(w.deployment.id));
    assert!(a.deployment_status().unwrap().canary);
    assert_eq!(snap.latest_deployment("default", "web").unwrap().id, d.id);
}

#[test]
fn a_successful_deployment_marks_its_job_version_stable() {
    let mut w = World::new();
    w.place(1, 0);
    assert!(!w.state.job("default", "web").unwrap().stable);
    w.apply(Command::DeploymentStatusUpdate {
        update: DeploymentStatusUpdate {
            deployment_id: w.deployment.id,
            status: DeploymentStatus::Successful,
            status_description: description::SUCCESSFUL.into(),
        },
        job: None,
        eval: None,
    })
    .unwrap();
    assert!(w.state.job("default", "web").unwrap().stable);
    let version = w
        .state
        .job_by_version("default", "web", w.job.version)
        .unwrap();
    assert!(version.stable);
}

#[test]
fn a_plan_from_an_older_snapshot_keeps_the_health_counted_since() {
    let mut w = World::new();
    let allocs = w.place(2, 0);
    w.report(&allocs[0], true, 5_000);
    // A scheduler that read the deployment before the report writes it
    // back with a new desired total.
    let mut stale = w.deployment.clone();
    stale.task_groups.get_mut("frontend").unwrap().desired_total = 4;
    w.apply(Command::ApplyPlanResults(PlanResults {
        deployment: Some(Arc::new(stale)),
        ..Default::default()
    }))
    .unwrap();
    let g = w.group();
    assert_eq!(g.desired_total, 4, "the scheduler's wish is taken");
    assert_eq!(
        (g.placed_allocs, g.healthy_allocs),
        (2, 1),
        "the counts are kept"
    );
}

#[test]
fn an_allocation_updated_into_a_deployment_starts_its_deadline_when_updated() {
    // A revert updates allocations of an old deployment in place: created
    // long before, they join the new deployment now. Its progress deadline
    // runs from now; counted from their creation it had passed already and
    // the revert's deployment failed before its allocations could report.
    let mut w = World::new();
    let old = w.place(1, 0).remove(0);
    let mut next = Deployment::new(&w.job, 60);
    next.task_groups.insert(
        "frontend".into(),
        DeploymentState {
            desired_total: 1,
            progress_deadline: Duration::from_secs(600),
            ..Default::default()
        },
    );
    let mut updated = (**w.state.alloc(&old.id).unwrap()).clone();
    updated.deployment_id = Some(next.id);
    updated.set_deployment_status(None);
    // The scheduler leaves its times as they were; the plan's apply stamps it.
    assert_eq!((updated.create_time, updated.modify_time), (1_000, 1_000));
    let mut node_allocation = HashMap::new();
    node_allocation.insert(updated.node_id, vec![updated.clone()]);
    w.apply(Command::ApplyPlanResults(PlanResults {
        eval_id: updated.eval_id,
        job: Some(Arc::new(w.job.clone())),
        node_allocation,
        updated_at: 900_000_000_000,
        deployment: Some(Arc::new(next.clone())),
        ..Default::default()
    }))
    .unwrap();
    assert_eq!(w.state.alloc(&old.id).unwrap().modify_time, 900_000_000_000);
    let g = &w.state.deployment(&next.id).unwrap().task_groups["frontend"];
    assert_eq!(g.placed_allocs, 1);
    assert_eq!(
        g.require_progress_by,
        Some(900_000_000_000 + 600_000_000_000)
    );
}
