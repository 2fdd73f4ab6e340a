//! The DeploymentWatcher against a real on-disk state store and a clock
//! the test moves: what an operator sees of a deployment as its
//! allocations report health (the writes stand in for clients and
//! schedulers).

use actix::prelude::*;
use chrono::{DateTime, TimeZone, Utc};
use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{AllocClientUpdate, Command, PlanResults, StateStore, StoreOptions};
use herder::structs::deployment::description;
use herder::structs::{
    AllocDeploymentStatus, Allocation, ClientStatus, Deployment, DeploymentState, DeploymentStatus,
    Evaluation, Job, Node, TriggeredBy,
};
use herder_server::deployment_watcher::{
    CheckDeadlines, DeploymentWatcher, SetLeader, Watched, EVAL_BATCH_WINDOW,
};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECOND: i64 = 1_000_000_000;

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0).unwrap()
}

fn nanos(t: DateTime<Utc>) -> i64 {
    t.timestamp_nanos_opt().unwrap()
}

/// Job `web` at version 0 (stable) and version 1 being deployed to one
/// node, with a watcher whose clock the test moves.
struct World {
    store: StateStore,
    job: Job,
    node: Node,
    d: Deployment,
    /// Seconds after `start()`.
    offset: Arc<AtomicI64>,
    _dir: tempfile::TempDir,
}

impl World {
    fn new(progress_deadline: Duration, canaries: u32, auto_promote: bool) -> World {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
        let node = fixtures::node("n1");
        store
            .apply(Command::NodeRegister {
                node: Arc::new(node.clone()),
            })
            .unwrap();
        let mut job = fixtures::job("default", "web", &[("web", 3)]);
        register(&store, &job);
        store
            .apply(Command::JobStabilityUpdate {
                namespace: "default".into(),
                job_id: "web".into(),
                version: 0,
                stable: true,
            })
            .unwrap();
        job.meta.insert("v".into(), "1".into());
        register(&store, &job);
        let job = (**store.snapshot().job("default", "web").unwrap()).clone();
        let mut d = Deployment::new(&job, 50);
        d.task_groups.insert(
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
        World {
            store,
            job,
            node,
            d,
            offset: Arc::new(AtomicI64::new(0)),
            _dir: dir,
        }
    }

    fn now(&self) -> i64 {
        nanos(start()) + self.offset.load(Ordering::SeqCst) * SECOND
    }

    fn watcher(&self, leader: bool) -> Addr<DeploymentWatcher> {
        let o = self.offset.clone();
        let clock = Arc::new(move || start() + chrono::Duration::seconds(o.load(Ordering::SeqCst)));
        DeploymentWatcher::new(self.store.clone(), clock)
            .with_leadership(leader)
            .start()
    }

    /// Places `n` allocations of version 1 (the first `canaries` canaries)
    /// with the deployment, as a scheduler's plan does.
    fn place(&self, n: u32, canaries: u32) -> Vec<Allocation> {
        let builder = AllocBuilder::new(&self.job, "web");
        let eval = fixtures::eval(&self.job, TriggeredBy::JobRegister, self.now());
        let allocs: Vec<Allocation> = (0..n)
            .map(|i| {
                let mut a = builder.build(i, self.node.id, eval.id, self.now());
                a.deployment_id = Some(self.d.id);
                a.set_deployment_status((i < canaries).then(|| AllocDeploymentStatus {
                    canary: true,
                    ..Default::default()
                }));
                a
            })
            .collect();
        let mut results = PlanResults {
            eval_id: eval.id,
            job: Some(Arc::new(self.job.clone())),
            updated_at: self.now(),
            deployment: Some(Arc::new(self.d.clone())),
            ..Default::default()
        };
        results.node_allocation.insert(self.node.id, allocs.clone());
        self.store
            .apply(Command::EvalUpdate {
                evals: vec![Evaluation {
                    status: herder::structs::EvalStatus::Complete,
                    ..eval
                }],
            })
            .unwrap();
        self.store
            .apply(Command::ApplyPlanResults(results))
            .unwrap();
        allocs
    }

    /// A client's health report.
    fn report(&self, allocs: &[&Allocation], healthy: bool) {
        let updates = allocs
            .iter()
            .map(|a| AllocClientUpdate {
                id: a.id,
                client_status: ClientStatus::Running,
                modify_time: self.now(),
                deployment_status: Some(AllocDeploymentStatus {
                    healthy: Some(healthy),
                    timestamp: Some(self.now()),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        self.store
            .apply(Command::AllocClientUpdate {
                updates,
                evals: vec![],
            })
            .unwrap();
    }

    fn deployment(&self) -> Arc<Deployment> {
        self.store
            .snapshot()
            .deployment(&self.d.id)
            .unwrap()
            .clone()
    }

    /// The evaluations the watcher wrote for the deployment.
    fn watcher_evals(&self) -> Vec<Arc<Evaluation>> {
        self.store
            .snapshot()
            .evals_by_job("default", "web")
            .filter(|e| e.triggered_by == TriggeredBy::DeploymentWatcher)
            .filter(|e| e.deployment_id == self.d.id.to_string())
            .cloned()
            .collect()
    }
}

fn register(store: &StateStore, job: &Job) {
    store
        .apply(Command::JobRegister {
            job: Arc::new(job.clone()),
            eval: None,
            enforce_index: None,
        })
        .unwrap();
}

async fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
    check()
}

const TEN_MINUTES: Duration = Duration::from_secs(600);

#[actix::test]
async fn an_unhealthy_allocation_fails_the_deployment_and_reverts_to_the_stable_version() {
    let w = World::new(Duration::ZERO, 0, false);
    let _watcher = w.watcher(true);
    let allocs = w.place(3, 0);
    w.report(&[&allocs[0]], true);
    w.report(&[&allocs[1]], false);
    let failed = wait_until(Duration::from_secs(5), || {
        w.deployment().status == DeploymentStatus::Failed
    })
    .await;
    assert!(failed, "the deployment fails");
    assert_eq!(
        w.deployment().status_description,
        "Failed due to unhealthy allocations - rolling back to job version 0"
    );
    let snap = w.store.snapshot();
    let job = snap.job("default", "web").unwrap();
    assert_eq!(job.version, 2, "the stable version registered again");
    assert!(!job.meta.contains_key("v"), "with version 0's spec");
    assert!(
        !w.watcher_evals().is_empty(),
        "an evaluation places the reverted job"
    );
}

#[actix::test]
async fn a_missed_progress_deadline_fails_the_deployment_but_not_while_paused() {
    let w = World::new(TEN_MINUTES, 0, false);
    let watcher = w.watcher(true);
    w.place(3, 0);
    let by = w.deployment().task_groups["web"].require_progress_by;
    assert_eq!(by, Some(w.now() + 600 * SECOND));
    let mut watched = None;
    for _ in 0..100 {
        watched = watcher.send(Watched).await.unwrap().get(&w.d.id).copied();
        if watched.is_some() {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(watched, Some(by), "the watcher knows the deadline");

    w.offset.store(300, Ordering::SeqCst);
    watcher.send(CheckDeadlines).await.unwrap();
    assert_eq!(w.deployment().status, DeploymentStatus::Running);

    w.store
        .apply(Command::DeploymentStatusUpdate {
            update: herder::structs::DeploymentStatusUpdate {
                deployment_id: w.d.id,
                status: DeploymentStatus::Paused,
                status_description: description::PAUSED.into(),
            },
            job: None,
            eval: None,
        })
        .unwrap();
    w.offset.store(900, Ordering::SeqCst);
    watcher.send(CheckDeadlines).await.unwrap();
    actix_rt::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(w.deployment().status, DeploymentStatus::Paused);

    w.store
        .apply(Command::DeploymentStatusUpdate {
            update: herder::structs::DeploymentStatusUpdate {
                deployment_id: w.d.id,
                status: DeploymentStatus::Running,
                status_description: description::RUNNING.into(),
            },
            job: None,
            eval: None,
        })
        .unwrap();
    let failed = wait_until(Duration::from_secs(5), || {
        w.deployment().status == DeploymentStatus::Failed
    })
    .await;
    assert!(failed, "resumed past its deadline, it fails");
    assert_eq!(
        w.deployment().status_description,
        "Failed due to progress deadline - rolling back to job version 0"
    );
}

#[actix::test]
async fn health_changes_close_together_make_one_evaluation() {
    let w = World::new(TEN_MINUTES, 0, false);
    let _watcher = w.watcher(true);
    let allocs = w.place(3, 0);
    w.report(&[&allocs[0]], true);
    w.report(&[&allocs[1]], true);
    let one = wait_until(Duration::from_secs(5), || w.watcher_evals().len() == 1).await;
    assert!(one, "an evaluation for the next batch");
    actix_rt::time::sleep(EVAL_BATCH_WINDOW * 3).await;
    assert_eq!(w.watcher_evals().len(), 1, "both changes in one evaluation");
    assert_eq!(w.deployment().status, DeploymentStatus::Running);
}

#[actix::test]
async fn healthy_canaries_are_promoted_automatically() {
    let w = World::new(TEN_MINUTES, 1, true);
    let _watcher = w.watcher(true);
    let allocs = w.place(1, 1);
    w.report(&[&allocs[0]], true);
    let promoted = wait_until(Duration::from_secs(5), || {
        w.deployment().task_groups["web"].promoted
    })
    .await;
    assert!(promoted, "the canary is promoted");
    assert_eq!(w.deployment().status_description, description::RUNNING);
    assert!(!w.watcher_evals().is_empty(), "the rest of the group rolls");
}

#[actix::test]
async fn the_last_healthy_allocation_completes_the_deployment_and_marks_the_version_stable() {
    let w = World::new(TEN_MINUTES, 0, false);
    let _watcher = w.watcher(true);
    let allocs = w.place(3, 0);
    w.report(&allocs.iter().collect::<Vec<_>>(), true);
    let done = wait_until(Duration::from_secs(5), || {
        w.deployment().status == DeploymentStatus::Successful
    })
    .await;
    assert!(done, "complete with no evaluation to visit it: successful");
    assert_eq!(w.deployment().status_description, description::SUCCESSFUL);
    let snap = w.store.snapshot();
    assert!(snap.job("default", "web").unwrap().stable);
}

#[actix::test]
async fn a_follower_watches_nothing_until_it_leads() {
    let w = World::new(Duration::ZERO, 0, false);
    let watcher = w.watcher(false);
    let allocs = w.place(3, 0);
    w.report(&[&allocs[0]], false);
    actix_rt::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(w.deployment().status, DeploymentStatus::Running);
    assert!(watcher.send(Watched).await.unwrap().is_empty());

    watcher.send(SetLeader(true)).await.unwrap();
    let failed = wait_until(Duration::from_secs(5), || {
        w.deployment().status == DeploymentStatus::Failed
    })
    .await;
    assert!(failed, "the new leader finds the unhealthy allocation");
}

#[actix::test]
async fn with_a_progress_deadline_an_unhealthy_allocation_is_replaced_not_failed() {
    let w = World::new(TEN_MINUTES, 0, false);
    let _watcher = w.watcher(true);
    let allocs = w.place(3, 0);
    w.report(&[&allocs[2]], false);
    let handed_back = wait_until(Duration::from_secs(5), || {
        w.store
            .snapshot()
            .alloc(&allocs[2].id)
            .is_some_and(|a| a.desired_transition.reschedule == Some(true))
    })
    .await;
    assert!(handed_back, "the scheduler may replace it");
    assert_eq!(w.deployment().status, DeploymentStatus::Running);
    assert_eq!(
        w.watcher_evals().len(),
        1,
        "with an evaluation that does it"
    );
}

/// On starting with many active deployments (a restart of a large
/// cluster), the watcher assesses them a turn at a time and answers other
/// messages in between (in one go, a thousand of them held up the
/// server's thread, the API's first answers included, for a second); in
/// the end it watches every one.
#[actix::test]
async fn a_rebuild_over_many_deployments_answers_in_between_and_watches_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let total = 300;
    for i in 0..total {
        let job = fixtures::job("default", &format!("web-{i}"), &[("web", 3)]);
        register(&store, &job);
        let job = (**store.snapshot().job("default", &job.id).unwrap()).clone();
        let mut d = Deployment::new(&job, 50);
        d.task_groups.insert(
            "web".into(),
            DeploymentState {
                desired_total: 3,
                progress_deadline: TEN_MINUTES,
                ..Default::default()
            },
        );
        let eval = fixtures::eval(&job, TriggeredBy::JobRegister, nanos(start()));
        store
            .apply(Command::ApplyPlanResults(PlanResults {
                eval_id: eval.id,
                job: Some(Arc::new(job)),
                updated_at: nanos(start()),
                deployment: Some(Arc::new(d)),
                ..Default::default()
            }))
            .unwrap();
    }
    let clock = Arc::new(start);
    let watcher = DeploymentWatcher::new(store.clone(), clock).start();
    let first = watcher.send(Watched).await.unwrap().len();
    assert!(
        first > 0 && first < total,
        "watched {first} of {total} at the first answer: not assessed in turns"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut watched = first;
    while watched < total && Instant::now() < deadline {
        actix_rt::time::sleep(Duration::from_millis(5)).await;
        watched = watcher.send(Watched).await.unwrap().len();
    }
    assert_eq!(
        watched, total,
        "every active deployment is watched in the end"
    );
}
