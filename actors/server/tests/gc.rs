//! The GarbageCollector against a real on-disk state store and a fake
//! clock: what is old and finished goes, what is young or still needed
//! stays.

use actix::prelude::*;
use chrono::{DateTime, TimeZone, Utc};
use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{Command, PlanResults, StateStore, StoreOptions};
use herder::structs::deployment::description;
use herder::structs::{
    AllocId, ClientStatus, Deployment, DeploymentId, DeploymentStatus, DeploymentStatusUpdate,
    DesiredStatus, EvalId, EvalStatus, Evaluation, Job, JobType, Node, NodeStatus, TriggeredBy,
};
use herder_server::gc::{ForceGc, GarbageCollector, GcConfig, GcReport, RunGc};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const HOUR: i64 = 3600;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0).unwrap()
}

/// Unix nanos `secs` seconds before `now()`.
fn ago(secs: i64) -> i64 {
    (now() - chrono::Duration::seconds(secs))
        .timestamp_nanos_opt()
        .unwrap()
}

fn config() -> GcConfig {
    GcConfig {
        eval_gc_threshold: Duration::from_secs(HOUR as u64),
        job_gc_threshold: Duration::from_secs(4 * HOUR as u64),
        node_gc_threshold: Duration::from_secs(24 * HOUR as u64),
        deployment_gc_threshold: Duration::from_secs(HOUR as u64),
        acl_token_gc_threshold: Duration::from_secs(HOUR as u64),
        // The timer stays out of the way; the tests run passes themselves.
        gc_interval: Duration::from_secs(3600),
        // Small batches, so a pass needs several commands.
        batch_size: 2,
    }
}

struct Cluster {
    store: StateStore,
    node: Node,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
        let node = fixtures::node("n1");
        store
            .apply(Command::NodeRegister {
                node: Arc::new(node.clone()),
            })
            .unwrap();
        Cluster {
            store,
            node,
            _dir: dir,
        }
    }

    fn gc(&self) -> Addr<GarbageCollector> {
        let t = now();
        GarbageCollector::new(self.store.clone(), Arc::new(move || t), config()).start()
    }

    fn job(&self, id: &str, job_type: JobType, stop: bool) -> Arc<Job> {
        let mut job = fixtures::job("default", id, &[("g", 2)]);
        job.job_type = job_type;
        job.stop = stop;
        job.canonicalize();
        self.store
            .apply(Command::JobRegister {
                job: Arc::new(job),
                eval: None,
                enforce_index: None,
            })
            .unwrap();
        self.store.snapshot().job("default", id).unwrap().clone()
    }

    fn eval(&self, job: &Job, status: EvalStatus, modified_secs_ago: i64) -> EvalId {
        let eval = Evaluation {
            status,
            modify_time: ago(modified_secs_ago),
            ..Evaluation::for_job(job, TriggeredBy::JobRegister, ago(modified_secs_ago))
        };
        let id = eval.id;
        self.store
            .apply(Command::EvalUpdate { evals: vec![eval] })
            .unwrap();
        id
    }

    fn alloc(
        &self,
        job: &Arc<Job>,
        eval: EvalId,
        node: &Node,
        desired: DesiredStatus,
        client: ClientStatus,
        modified_secs_ago: i64,
    ) -> AllocId {
        let mut alloc = AllocBuilder::new(job, "g").build(0, node.id, eval, ago(modified_secs_ago));
        alloc.desired_status = desired;
        alloc.client_status = client;
        let id = alloc.id;
        let mut results = PlanResults {
            eval_id: eval,
            job: Some(job.clone()),
            ..Default::default()
        };
        results.node_allocation.insert(node.id, vec![alloc]);
        self.store
            .apply(Command::ApplyPlanResults(results))
            .unwrap();
        id
    }

    fn has_eval(&self, id: &EvalId) -> bool {
        self.store.snapshot().eval(id).is_some()
    }
    fn has_alloc(&self, id: &AllocId) -> bool {
        self.store.snapshot().alloc(id).is_some()
    }
    fn has_job(&self, id: &str) -> bool {
        self.store.snapshot().job("default", id).is_some()
    }
    fn has_node(&self, node: &Node) -> bool {
        self.store.snapshot().node(&node.id).is_some()
    }
}

#[actix::test]
async fn old_finished_evals_and_allocs_go_young_and_needed_ones_stay() {
    let c = Cluster::new();
    let web = c.job("web", JobType::Service, false);
    let (stop, run) = (DesiredStatus::Stop, DesiredStatus::Run);

    let old = c.eval(&web, EvalStatus::Complete, 2 * HOUR);
    let old_alloc = c.alloc(&web, old, &c.node, stop, ClientStatus::Complete, 2 * HOUR);
    let bare: Vec<_> = (0..3)
        .map(|_| c.eval(&web, EvalStatus::Failed, 3 * HOUR))
        .collect();
    let young = c.eval(&web, EvalStatus::Complete, 10 * 60);
    let young_alloc = c.alloc(&web, young, &c.node, stop, ClientStatus::Complete, 10 * 60);
    // An old eval whose allocation still runs.
    let running = c.eval(&web, EvalStatus::Complete, 2 * HOUR);
    let running_alloc = c.alloc(&web, running, &c.node, run, ClientStatus::Running, 2 * HOUR);
    // A failed allocation the servers still want: needed to reschedule.
    let failed = c.eval(&web, EvalStatus::Complete, 2 * HOUR);
    let failed_alloc = c.alloc(&web, failed, &c.node, run, ClientStatus::Failed, 2 * HOUR);
    // An eval not yet processed, however old.
    let pending = c.eval(&web, EvalStatus::Pending, 5 * HOUR);

    let gc = c.gc();
    let before = c.store.latest_index();
    let report = gc.send(RunGc).await.unwrap().unwrap();
    // Five IDs in batches of at most two: three delete commands.
    assert_eq!(c.store.latest_index() - before, 3);
    assert_eq!(
        report,
        GcReport {
            evals: 4,
            allocs: 1,
            jobs: 0,
            nodes: 0,
            deployments: 0,
            acl_tokens: 0,
        }
    );
    assert!(!c.has_eval(&old) && !c.has_alloc(&old_alloc));
    assert!(bare.iter().all(|e| !c.has_eval(e)));
    assert!(c.has_eval(&young) && c.has_alloc(&young_alloc));
    assert!(c.has_eval(&running) && c.has_alloc(&running_alloc));
    assert!(c.has_eval(&failed) && c.has_alloc(&failed_alloc));
    assert!(c.has_eval(&pending));
    assert!(c.has_job("web"));

    // A forced collection ignores the age, not what is still needed.
    let report = gc.send(ForceGc).await.unwrap().unwrap();
    assert_eq!((report.evals, report.allocs), (1, 1));
    assert!(!c.has_eval(&young) && !c.has_alloc(&young_alloc));
    assert!(c.has_alloc(&running_alloc) && c.has_alloc(&failed_alloc));
    assert!(c.has_eval(&pending));
}

#[actix::test]
async fn dead_jobs_are_purged_after_the_threshold() {
    let c = Cluster::new();
    let (stop, run) = (DesiredStatus::Stop, DesiredStatus::Run);

    let old_batch = c.job("old-batch", JobType::Batch, false);
    let e = c.eval(&old_batch, EvalStatus::Complete, 5 * HOUR);
    let old_batch_alloc = c.alloc(
        &old_batch,
        e,
        &c.node,
        run,
        ClientStatus::Complete,
        5 * HOUR,
    );

    let stopped = c.job("stopped-web", JobType::Service, true);
    let e = c.eval(&stopped, EvalStatus::Complete, 5 * HOUR);
    let stopped_alloc = c.alloc(&stopped, e, &c.node, stop, ClientStatus::Complete, 5 * HOUR);

    // Dead, but finished only half an hour ago.
    let young_batch = c.job("young-batch", JobType::Batch, false);
    let young_eval = c.eval(&young_batch, EvalStatus::Complete, 30 * 60);
    let young_alloc = c.alloc(
        &young_batch,
        young_eval,
        &c.node,
        run,
        ClientStatus::Complete,
        30 * 60,
    );

    // Still running: its finished allocations must survive, or the
    // scheduler would run them again.
    let live = c.job("live-batch", JobType::Batch, false);
    let done_eval = c.eval(&live, EvalStatus::Complete, 5 * HOUR);
    let done_alloc = c.alloc(
        &live,
        done_eval,
        &c.node,
        run,
        ClientStatus::Complete,
        5 * HOUR,
    );
    let run_eval = c.eval(&live, EvalStatus::Complete, 5 * HOUR);
    c.alloc(
        &live,
        run_eval,
        &c.node,
        run,
        ClientStatus::Running,
        5 * HOUR,
    );

    // Submitted long ago, finished two hours ago: past the eval threshold,
    // not the job one.
    let recent = c.job("recently-dead", JobType::Batch, false);
    let recent_eval = c.eval(&recent, EvalStatus::Complete, 2 * HOUR);
    c.alloc(
        &recent,
        recent_eval,
        &c.node,
        run,
        ClientStatus::Complete,
        2 * HOUR,
    );

    let snap = c.store.snapshot();
    for id in ["old-batch", "stopped-web", "young-batch", "recently-dead"] {
        assert_eq!(snap.job("default", id).unwrap().status, "dead", "{id}");
    }
    assert_eq!(snap.job("default", "live-batch").unwrap().status, "running");

    let report = c.gc().send(RunGc).await.unwrap().unwrap();
    assert_eq!(report.jobs, 2);
    assert!(!c.has_job("old-batch") && !c.has_alloc(&old_batch_alloc));
    assert!(!c.has_job("stopped-web") && !c.has_alloc(&stopped_alloc));
    assert_eq!(
        c.store
            .snapshot()
            .evals_by_job("default", "old-batch")
            .count(),
        0
    );
    assert!(c.has_job("young-batch") && c.has_eval(&young_eval) && c.has_alloc(&young_alloc));
    assert!(c.has_job("live-batch") && c.has_eval(&done_eval) && c.has_alloc(&done_alloc));
    // A second pass must not purge it either once its evals are judged.
    c.gc().send(RunGc).await.unwrap().unwrap();
    assert!(c.has_job("recently-dead") && c.has_eval(&recent_eval));
}

#[actix::test]
async fn down_nodes_are_purged_only_when_old_and_empty() {
    let c = Cluster::new();
    let mark_down = |node: &Node, secs_ago: i64| {
        c.store
            .apply(Command::NodeRegister {
                node: Arc::new(node.clone()),
            })
            .unwrap();
        c.store
            .apply(Command::NodeUpdateStatus {
                node_id: node.id,
                status: NodeStatus::Down,
                event: None,
                evals: Vec::new(),
                updated_at: ago(secs_ago) / 1_000_000_000,
            })
            .unwrap();
    };
    let empty = fixtures::node("empty");
    mark_down(&empty, 25 * HOUR);
    let finished_work = fixtures::node("finished-work");
    mark_down(&finished_work, 25 * HOUR);
    let busy = fixtures::node("busy");
    mark_down(&busy, 25 * HOUR);
    let recent = fixtures::node("recent");
    mark_down(&recent, HOUR);

    let web = c.job("web", JobType::Service, false);
    let e = c.eval(&web, EvalStatus::Complete, 10);
    c.alloc(
        &web,
        e,
        &busy,
        DesiredStatus::Run,
        ClientStatus::Running,
        10,
    );
    c.alloc(
        &web,
        e,
        &finished_work,
        DesiredStatus::Stop,
        ClientStatus::Lost,
        10,
    );

    let report = c.gc().send(RunGc).await.unwrap().unwrap();
    assert_eq!(report.nodes, 2);
    assert!(!c.has_node(&empty) && !c.has_node(&finished_work));
    assert!(c.has_node(&busy), "a node with live work stays");
    assert!(c.has_node(&recent), "a node down for an hour stays");
    assert!(c.has_node(&c.node), "a ready node stays");
}

#[actix::test]
async fn the_collector_runs_on_its_own_every_interval() {
    let c = Cluster::new();
    let web = c.job("web", JobType::Service, false);
    let old = c.eval(&web, EvalStatus::Complete, 5 * HOUR);
    let t = now();
    let _gc = GarbageCollector::new(
        c.store.clone(),
        Arc::new(move || t),
        GcConfig {
            gc_interval: Duration::from_millis(50),
            ..config()
        },
    )
    .start();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while c.has_job("web") && std::time::Instant::now() < deadline {
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!c.has_job("web"), "the periodic pass did not collect");
    assert!(!c.has_eval(&old));
}

impl Cluster {
    /// A deployment of `job` with one allocation in it (live or finished),
    /// failed at once unless `active`.
    fn deployment(&self, job: &Arc<Job>, live: bool, active: bool) -> DeploymentId {
        let d = Deployment::new(job, 50);
        let eval = self.eval(job, EvalStatus::Complete, 2 * HOUR);
        let mut alloc = AllocBuilder::new(job, "g").build(0, self.node.id, eval, ago(2 * HOUR));
        alloc.deployment_id = Some(d.id);
        if !live {
            alloc.desired_status = DesiredStatus::Stop;
            alloc.client_status = ClientStatus::Complete;
        }
        let mut results = PlanResults {
            eval_id: eval,
            job: Some(job.clone()),
            deployment: Some(Arc::new(d.clone())),
            ..Default::default()
        };
        results.node_allocation.insert(self.node.id, vec![alloc]);
        self.store
            .apply(Command::ApplyPlanResults(results))
            .unwrap();
        if !active {
            self.store
                .apply(Command::DeploymentStatusUpdate {
                    update: DeploymentStatusUpdate {
                        deployment_id: d.id,
                        status: DeploymentStatus::Failed,
                        status_description: description::FAILED_BY_USER.into(),
                    },
                    job: None,
                    eval: None,
                })
                .unwrap();
        }
        d.id
    }

    fn has_deployment(&self, id: &DeploymentId) -> bool {
        self.store.snapshot().deployment(id).is_some()
    }
}

#[actix::test]
async fn terminal_deployments_go_a_threshold_after_a_pass_saw_them_unless_an_alloc_lives() {
    let c = Cluster::new();
    let web = c.job("web", JobType::Service, false);
    let finished = c.deployment(&web, false, false);
    let in_use = c.deployment(&web, true, false);
    let running = c.deployment(&web, false, true);
    let offset = Arc::new(AtomicI64::new(0));
    let o = offset.clone();
    let clock = Arc::new(move || now() + chrono::Duration::seconds(o.load(Ordering::SeqCst)));
    let gc = GarbageCollector::new(c.store.clone(), clock, config()).start();

    let first = gc.send(RunGc).await.unwrap().unwrap();
    assert_eq!(first.deployments, 0, "no pass has dated them yet");
    let young = c.deployment(&web, false, false);

    offset.store(2 * HOUR, Ordering::SeqCst);
    let later = gc.send(RunGc).await.unwrap().unwrap();
    assert_eq!(later.deployments, 1);
    assert!(!c.has_deployment(&finished), "terminal, old, nothing live");
    assert!(c.has_deployment(&in_use), "a live allocation refers to it");
    assert!(c.has_deployment(&running), "still running");
    assert!(c.has_deployment(&young), "failed after the dated pass");

    let forced = gc.send(ForceGc).await.unwrap().unwrap();
    assert_eq!(forced.deployments, 1);
    assert!(
        !c.has_deployment(&young),
        "a forced collection ignores the age"
    );
    assert!(c.has_deployment(&in_use) && c.has_deployment(&running));
}

/// A client token `name` expiring `expired_secs_ago` seconds before now
/// (`None`: never).
fn token(name: &str, expired_secs_ago: Option<i64>) -> herder::structs::acl::AclToken {
    herder::structs::acl::AclToken {
        accessor_id: format!("accessor-{name}"),
        secret_id: format!("secret-{name}"),
        name: name.into(),
        r#type: "client".into(),
        policies: vec!["p".into()],
        expiration_time: expired_secs_ago.map(|s| {
            (now() - chrono::Duration::seconds(s))
                .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
        }),
        ..Default::default()
    }
}

#[actix::test]
async fn expired_acl_tokens_go_after_the_threshold_and_all_of_them_when_forced() {
    let c = Cluster::new();
    let tokens = vec![
        token("long-expired", Some(2 * HOUR)),
        token("just-expired", Some(60)),
        token("not-yet", Some(-HOUR)),
        token("forever", None),
    ];
    c.store
        .apply(Command::AclTokenUpsert { tokens })
        .expect("tokens stored");
    let names = |c: &Cluster| {
        let mut names: Vec<String> = c
            .store
            .snapshot()
            .acl_tokens()
            .map(|t| t.name.clone())
            .collect();
        names.sort();
        names
    };
    let gc = c.gc();
    let report = gc.send(RunGc).await.unwrap().unwrap();
    assert_eq!(report.acl_tokens, 1);
    assert_eq!(names(&c), ["forever", "just-expired", "not-yet"]);
    let report = gc.send(ForceGc).await.unwrap().unwrap();
    assert_eq!(report.acl_tokens, 1);
    assert_eq!(names(&c), ["forever", "not-yet"]);
}
