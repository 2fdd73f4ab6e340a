//! The watcher's decisions on a store snapshot built command by command:
//! unhealthy allocations, the progress deadline, auto-promotion, the
//! evaluation a health change asks for, success.

use super::*;
use herder::state::command::PlanResults;
use herder::state::fixtures::{self, AllocBuilder};
use herder::state::AllocClientUpdate;
use herder::structs::{
    AllocDeploymentStatus, ClientStatus, DeploymentState, EvalStatus, Job, TriggeredBy,
};
use std::time::Duration;

const SECOND: i64 = 1_000_000_000;

struct World {
    snap: StateSnapshot,
    job: Job,
    d: Deployment,
    node: herder::structs::Node,
    /// What the last command changed.
    last_changes: Option<herder::state::AppliedChanges>,
}

impl World {
    /// Job `web` version 0 (stable) then version 1, with a running
    /// deployment of version 1: group `web` wants 3, `canaries` of them
    /// canaries first, the given progress deadline, auto-revert on.
    fn new(progress_deadline: Duration, canaries: u32, auto_promote: bool) -> World {
        let mut w = World {
            snap: StateSnapshot::new(),
            job: fixtures::job("default", "web", &[("web", 3)]),
            d: Deployment::default(),
            node: fixtures::node("n1"),
            last_changes: None,
        };
        w.register();
        w.apply(Command::JobStabilityUpdate {
            namespace: "default".into(),
            job_id: "web".into(),
            version: 0,
            stable: true,
        });
        w.job.meta.insert("v".into(), "1".into());
        w.register();
        w.job = (**w.snap.job("default", "web").unwrap()).clone();
        w.d = Deployment::new(&w.job, 50);
        w.d.task_groups.insert(
            "web".into(),
            DeploymentState {
                auto_revert: true,
                auto_promote,
                progress_deadline,
                desired_total: 3,
                desired_canaries: canaries,
                ..Default::default()
            },
        );
        w.apply(Command::NodeRegister {
            node: Arc::new(w.node.clone()),
        });
        w
    }

    fn register(&mut self) {
        self.apply(Command::JobRegister {
            job: Arc::new(self.job.clone()),
            eval: None,
            enforce_index: None,
        });
    }

    fn apply(&mut self, cmd: Command) -> u64 {
        let index = self.snap.latest_index() + 1;
        let changes = self.snap.apply(index, &cmd).expect("applies");
        let index = changes.index;
        self.last_changes = Some(changes);
        index
    }

    /// Places `n` allocations (the first `canaries` canaries) at 1 s.
    fn place(&mut self, n: u32, canaries: u32) -> Vec<Allocation> {
        let builder = AllocBuilder::new(&self.job, "web");
        let allocs: Vec<Allocation> = (0..n)
            .map(|i| {
                let mut a = builder.build(i, self.node.id, herder::structs::new_id(), SECOND);
                a.deployment_id = Some(self.d.id);
                a.set_deployment_status((i < canaries).then(|| AllocDeploymentStatus {
                    canary: true,
                    ..Default::default()
                }));
                a
            })
            .collect();
        let node_allocation = [(self.node.id, allocs.clone())].into_iter().collect();
        self.apply(Command::ApplyPlanResults(PlanResults {
            eval_id: allocs[0].eval_id,
            job: Some(Arc::new(self.job.clone())),
            node_allocation,
            updated_at: SECOND,
            deployment: Some(Arc::new(self.d.clone())),
            ..Default::default()
        }));
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
        });
    }

    fn deployment(&self) -> Deployment {
        (**self.snap.deployment(&self.d.id).unwrap()).clone()
    }

    /// A first look, as after a start or a failover.
    fn assess(&self, now: i64) -> Assessment {
        self.assess_with(now, false)
    }

    fn assess_with(&self, now: i64, eval_coming: bool) -> Assessment {
        let d = self.deployment();
        let (allocs, health) = first_look(&self.snap, &d);
        let news = News {
            allocs: &allocs,
            health,
            eval_coming,
        };
        assess(&self.snap, &d, now, news)
    }

    /// Writes a (complete) evaluation of the job, as a scheduler pass would.
    fn evaluated(&mut self) {
        let mut eval = fixtures::eval(&self.job, TriggeredBy::DeploymentWatcher, 0);
        eval.status = EvalStatus::Complete;
        self.apply(Command::EvalUpdate { evals: vec![eval] });
    }
}

const TEN_MINUTES: Duration = Duration::from_secs(600);

#[test]
fn an_unhealthy_allocation_without_progress_deadline_fails_and_reverts() {
    let mut w = World::new(Duration::ZERO, 0, false);
    let allocs = w.place(2, 0);
    w.report(&allocs[0], true, 2 * SECOND);
    w.report(&allocs[1], false, 3 * SECOND);
    let Some(Action::Fail(failure)) = w.assess(4 * SECOND).action else {
        panic!("an unhealthy allocation must fail the deployment");
    };
    assert_eq!(failure.reverted_version(), Some(0));
    assert_eq!(
        failure.update.status_description,
        "Failed due to unhealthy allocations - rolling back to job version 0"
    );
    let mut after = w.snap.clone();
    let cmd = Action::Fail(failure).into_command(&w.d);
    after.apply(after.latest_index() + 1, &cmd).unwrap();
    assert_eq!(
        after.deployment(&w.d.id).unwrap().status,
        DeploymentStatus::Failed
    );
    let job = after.job("default", "web").unwrap();
    assert_eq!(job.version, 2, "version 0 registered again as version 2");
    assert!(!job.meta.contains_key("v"));
}

#[test]
fn with_a_progress_deadline_an_unhealthy_allocation_is_replaced_not_failed() {
    let mut w = World::new(TEN_MINUTES, 0, false);
    let allocs = w.place(2, 0);
    w.report(&allocs[1], false, 3 * SECOND);
    let Some(Action::AllowReplacements(ids, eval)) = w.assess(4 * SECOND).action else {
        panic!("the unhealthy allocation is handed back for a replacement");
    };
    assert_eq!(ids, vec![allocs[1].id]);
    assert_eq!(eval.deployment_id, w.d.id.to_string());
    let cmd = Action::AllowReplacements(ids, eval).into_command(&w.d);
    w.apply(cmd);
    let a = w.assess(5 * SECOND);
    assert_eq!(a.action, None, "handed back once");
    assert_eq!(a.deadline, Some(SECOND + 600 * SECOND));
}

#[test]
fn a_missed_progress_deadline_fails_and_reverts() {
    let mut w = World::new(TEN_MINUTES, 0, false);
    w.place(3, 0);
    let before = w.assess(2 * SECOND);
    assert_eq!(before.action, None);
    let by = SECOND + 600 * SECOND;
    assert_eq!(before.deadline, Some(by));
    let Some(Action::Fail(failure)) = w.assess(by).action else {
        panic!("the deadline fails the deployment");
    };
    assert_eq!(
        failure.update.status_description,
        "Failed due to progress deadline - rolling back to job version 0"
    );
}

#[test]
fn a_paused_deployment_has_no_deadline() {
    let mut w = World::new(TEN_MINUTES, 0, false);
    w.place(3, 0);
    w.apply(Command::DeploymentStatusUpdate {
        update: DeploymentStatusUpdate {
            deployment_id: w.d.id,
            status: DeploymentStatus::Paused,
            status_description: description::PAUSED.into(),
        },
        job: None,
        eval: None,
    });
    let late = w.assess(10_000 * SECOND);
    assert_eq!(late.action, None);
    assert_eq!(late.deadline, None);
}

#[test]
fn healthy_canaries_that_auto_promote_are_promoted() {
    let mut w = World::new(TEN_MINUTES, 1, true);
    let allocs = w.place(1, 1);
    assert_eq!(w.assess(2 * SECOND).action, None, "canary not yet healthy");
    w.report(&allocs[0], true, 3 * SECOND);
    let Some(Action::Promote(eval)) = w.assess(4 * SECOND).action else {
        panic!("a healthy auto-promoting canary is promoted");
    };
    w.apply(Action::Promote(eval).into_command(&w.d));
    assert!(w.deployment().task_groups["web"].promoted);
}

#[test]
fn canaries_without_auto_promote_wait_for_a_user() {
    let mut w = World::new(TEN_MINUTES, 1, false);
    let allocs = w.place(1, 1);
    w.report(&allocs[0], true, 3 * SECOND);
    let a = w.assess(4 * SECOND);
    assert_eq!(a.action, None);
    assert!(a.wants_eval);
    // Awaiting promotion is not done: the deadline still counts (Nomad).
    assert_eq!(a.deadline, Some(3 * SECOND + 600 * SECOND));
}

#[test]
fn a_health_change_asks_for_one_evaluation_until_one_is_written() {
    let mut w = World::new(TEN_MINUTES, 0, false);
    let allocs = w.place(3, 0);
    w.evaluated();
    assert!(!w.assess(2 * SECOND).wants_eval, "no health yet");
    w.report(&allocs[0], true, 3 * SECOND);
    let a = w.assess(4 * SECOND);
    assert!(a.wants_eval);
    assert!(
        !w.assess_with(4 * SECOND, true).wants_eval,
        "not while one is coming"
    );
    w.evaluated();
    assert!(!w.assess(5 * SECOND).wants_eval, "the evaluation saw it");
    w.report(&allocs[1], true, 6 * SECOND);
    assert!(w.assess(7 * SECOND).wants_eval, "a later health asks again");
}

#[test]
fn a_complete_deployment_no_evaluation_visits_succeeds() {
    let mut w = World::new(TEN_MINUTES, 0, false);
    let allocs = w.place(3, 0);
    let mut pending = fixtures::eval(&w.job, TriggeredBy::DeploymentWatcher, 0);
    w.apply(Command::EvalUpdate {
        evals: vec![pending.clone()],
    });
    for (i, a) in allocs.iter().enumerate() {
        w.report(a, true, (2 + i as i64) * SECOND);
    }
    let waiting = w.assess(9 * SECOND);
    assert_eq!(waiting.action, None, "a pending evaluation will visit it");
    assert_eq!(waiting.deadline, None, "every group is done");
    pending.status = EvalStatus::Complete;
    w.apply(Command::EvalUpdate {
        evals: vec![pending],
    });
    let Some(action @ Action::Succeed(_)) = w.assess(10 * SECOND).action else {
        panic!("complete and unvisited: successful");
    };
    w.apply(action.into_command(&w.d));
    let d = w.deployment();
    assert_eq!(d.status, DeploymentStatus::Successful);
    assert_eq!(d.status_description, description::SUCCESSFUL);
    assert!(w.snap.job("default", "web").unwrap().stable);
}

#[test]
fn news_of_an_unhealthy_allocation_is_what_is_handed_back() {
    let mut w = World::new(TEN_MINUTES, 0, false);
    let allocs = w.place(3, 0);
    w.report(&allocs[2], false, 3 * SECOND);
    let d = w.deployment();
    let quiet = News::default();
    assert_eq!(
        assess(&w.snap, &d, 4 * SECOND, quiet).action,
        None,
        "without news of it, only the counts are read"
    );
    let changed = [w.snap.alloc(&allocs[2].id).unwrap().clone()];
    let news = News {
        allocs: &changed,
        ..News::default()
    };
    assert!(matches!(
        assess(&w.snap, &d, 4 * SECOND, news).action,
        Some(Action::AllowReplacements(ids, _)) if ids == vec![allocs[2].id]
    ));
}

#[test]
fn a_terminal_deployment_is_left_alone() {
    let mut w = World::new(Duration::ZERO, 0, false);
    let allocs = w.place(1, 0);
    w.apply(Command::DeploymentStatusUpdate {
        update: DeploymentStatusUpdate {
            deployment_id: w.d.id,
            status: DeploymentStatus::Cancelled,
            status_description: description::NEWER_JOB.into(),
        },
        job: None,
        eval: None,
    });
    w.report(&allocs[0], false, 2 * SECOND);
    assert_eq!(w.assess(3 * SECOND), Assessment::default());
}

/// What the watcher's shortcut relies on: the change set that creates a
/// deployment holds every allocation the state has of it, and only that
/// change set counts as its birth.
#[test]
fn a_deployment_born_in_a_change_set_has_exactly_that_change_sets_allocations() {
    let mut w = World::new(TEN_MINUTES, 0, false);
    let allocs = w.place(3, 0);
    let changes = w.last_changes.clone().expect("the plan's changes");
    let d = w.deployment();
    assert_eq!(born(&changes).collect::<Vec<_>>(), [d.id]);
    let news: Vec<Arc<Allocation>> = changes
        .changes
        .iter()
        .filter_map(|c| match &c.row {
            Some(herder::state::Row::Alloc(a)) if a.deployment_id == Some(d.id) => Some(a.clone()),
            _ => None,
        })
        .collect();
    let (at_birth, health_at_birth) = first_look_at_birth(&w.snap, &d, news);
    let (read, health_read) = first_look(&w.snap, &d);
    let ids = |v: &[Arc<Allocation>]| {
        let mut ids: Vec<_> = v.iter().map(|a| a.id).collect();
        ids.sort();
        ids
    };
    assert_eq!(at_birth.len(), 3);
    assert_eq!(ids(&at_birth), ids(&read));
    assert_eq!(health_at_birth, health_read);

    // A health report updates the deployment's counts: its row changes,
    // but it was not born there.
    w.report(&allocs[0], true, 2 * SECOND);
    let later = w.last_changes.clone().expect("the report's changes");
    let rewritten = later
        .changes
        .iter()
        .any(|c| matches!(&c.row, Some(herder::state::Row::Deployment(r)) if r.id == d.id));
    assert!(rewritten, "the report rewrites the deployment's row");
    assert_eq!(born(&later).count(), 0);
}
