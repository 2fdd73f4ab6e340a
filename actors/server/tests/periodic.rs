//! The PeriodicLauncher against a real on-disk state store and a fake
//! clock: children launched at the cron instants (in the job's time zone),
//! overlap prohibited, launches ending with the parent, forced launches,
//! and no double launch across a restart.

use actix::prelude::*;
use chrono::{DateTime, TimeZone, Utc};
use herder::state::{fixtures, Command, StateStore, StoreOptions};
use herder::structs::job::job_status;
use herder::structs::{EvalStatus, Job, JobType, PeriodicConfig, TriggeredBy};
use herder_server::periodic::{
    ForceLaunch, NextLaunches, PeriodicError, PeriodicLauncher, StopLauncher, Tick,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct FakeClock(Arc<Mutex<DateTime<Utc>>>);

impl FakeClock {
    fn at(t: DateTime<Utc>) -> Self {
        FakeClock(Arc::new(Mutex::new(t)))
    }
    fn set(&self, t: DateTime<Utc>) {
        *self.0.lock().unwrap() = t;
    }
    fn clock(&self) -> herder_server::periodic::Clock {
        let t = self.0.clone();
        Arc::new(move || *t.lock().unwrap())
    }
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn open_store(dir: &tempfile::TempDir) -> StateStore {
    StateStore::open(dir.path(), StoreOptions::default()).unwrap()
}

fn periodic_job(id: &str, spec: &str, time_zone: &str, prohibit_overlap: bool) -> Job {
    let mut job = fixtures::job("default", id, &[("g", 1)]);
    job.job_type = JobType::Batch;
    job.periodic = Some(PeriodicConfig {
        enabled: true,
        spec: spec.to_string(),
        spec_type: "cron".to_string(),
        prohibit_overlap,
        time_zone: time_zone.to_string(),
    });
    job.canonicalize();
    job
}

fn register(store: &StateStore, job: Job) {
    store
        .apply(Command::JobRegister {
            job: Arc::new(job),
            eval: None,
            enforce_index: None,
        })
        .unwrap();
}

fn children(store: &StateStore, parent: &str) -> Vec<Arc<Job>> {
    let snap = store.snapshot();
    let mut c: Vec<_> = snap
        .jobs()
        .filter(|j| j.parent_id == parent)
        .cloned()
        .collect();
    c.sort_by(|a, b| a.id.cmp(&b.id));
    c
}

async fn next_launch(launcher: &Addr<PeriodicLauncher>, id: &str) -> Option<DateTime<Utc>> {
    let all = launcher.send(NextLaunches).await.unwrap();
    all.get(&("default".to_string(), id.to_string()))
        .copied()
        .flatten()
}

async fn is_tracked(launcher: &Addr<PeriodicLauncher>, id: &str) -> bool {
    let all = launcher.send(NextLaunches).await.unwrap();
    all.contains_key(&("default".to_string(), id.to_string()))
}

/// Polls `check` (the change feed reaches the launcher asynchronously).
async fn eventually<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Completes every evaluation of `job_id`: with no allocations, the job is
/// then dead.
fn finish(store: &StateStore, job_id: &str) {
    let snap = store.snapshot();
    let evals: Vec<_> = snap
        .evals_by_job("default", job_id)
        .map(|e| {
            let mut e = (**e).clone();
            e.status = EvalStatus::Complete;
            e
        })
        .collect();
    store.apply(Command::EvalUpdate { evals }).unwrap();
    let status = store
        .snapshot()
        .job("default", job_id)
        .unwrap()
        .status
        .clone();
    assert_eq!(status, job_status::DEAD);
}

#[actix::test]
async fn children_are_launched_at_each_cron_instant() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir);
    register(&store, periodic_job("report", "*/15 * * * *", "", false));
    let clock = FakeClock::at(utc(2026, 1, 1, 0, 5, 0));
    let launcher = PeriodicLauncher::new(store.clone(), clock.clock()).start();

    assert_eq!(
        next_launch(&launcher, "report").await,
        Some(utc(2026, 1, 1, 0, 15, 0))
    );
    clock.set(utc(2026, 1, 1, 0, 14, 59));
    assert!(launcher.send(Tick).await.unwrap().unwrap().is_empty());
    assert!(children(&store, "report").is_empty());

    clock.set(utc(2026, 1, 1, 0, 15, 0));
    let first = format!("report/periodic-{}", utc(2026, 1, 1, 0, 15, 0).timestamp());
    assert_eq!(
        launcher.send(Tick).await.unwrap().unwrap(),
        vec![first.clone()]
    );
    let snap = store.snapshot();
    let child = snap.job("default", &first).expect("child registered");
    assert_eq!(child.parent_id, "report");
    assert_eq!(child.periodic, None);
    assert_eq!(child.job_type, JobType::Batch);
    assert!(!child.is_template());
    let evals: Vec<_> = snap.evals_by_job("default", &first).collect();
    assert_eq!(evals.len(), 1);
    assert_eq!(evals[0].triggered_by, TriggeredBy::PeriodicJob);
    assert_eq!(evals[0].status, EvalStatus::Pending);
    // The parent itself is never evaluated.
    assert_eq!(snap.evals_by_job("default", "report").count(), 0);

    assert_eq!(
        next_launch(&launcher, "report").await,
        Some(utc(2026, 1, 1, 0, 30, 0))
    );
    // The same instant is not launched again.
    assert!(launcher.send(Tick).await.unwrap().unwrap().is_empty());
    clock.set(utc(2026, 1, 1, 0, 30, 0));
    assert_eq!(launcher.send(Tick).await.unwrap().unwrap().len(), 1);
    let ids: Vec<_> = children(&store, "report")
        .iter()
        .map(|j| j.id.clone())
        .collect();
    assert_eq!(
        ids,
        vec![
            first,
            format!("report/periodic-{}", utc(2026, 1, 1, 0, 30, 0).timestamp())
        ]
    );
}

#[actix::test]
async fn the_spec_is_read_in_the_jobs_time_zone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir);
    register(
        &store,
        periodic_job("ny", "0 9 * * *", "America/New_York", false),
    );
    register(&store, periodic_job("utc", "0 9 * * *", "", false));
    // 07:00 in New York (EST, UTC-5); 09:00 UTC has passed.
    let clock = FakeClock::at(utc(2026, 1, 15, 12, 0, 0));
    let launcher = PeriodicLauncher::new(store.clone(), clock.clock()).start();

    assert_eq!(
        next_launch(&launcher, "ny").await,
        Some(utc(2026, 1, 15, 14, 0, 0))
    );
    assert_eq!(
        next_launch(&launcher, "utc").await,
        Some(utc(2026, 1, 16, 9, 0, 0))
    );
    clock.set(utc(2026, 1, 15, 14, 0, 0));
    let launched = launcher.send(Tick).await.unwrap().unwrap();
    assert_eq!(
        launched,
        vec![format!(
            "ny/periodic-{}",
            utc(2026, 1, 15, 14, 0, 0).timestamp()
        )]
    );
    // In summer New York is UTC-4: 09:00 there is 13:00 UTC.
    clock.set(utc(2026, 7, 1, 12, 0, 0));
    launcher.send(Tick).await.unwrap().unwrap();
    assert_eq!(
        next_launch(&launcher, "ny").await,
        Some(utc(2026, 7, 1, 13, 0, 0))
    );
}

#[actix::test]
async fn prohibit_overlap_skips_launches_while_a_child_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir);
    register(&store, periodic_job("exclusive", "* * * * *", "", true));
    register(&store, periodic_job("overlapping", "* * * * *", "", false));
    let clock = FakeClock::at(utc(2026, 3, 1, 10, 0, 30));
    let launcher = PeriodicLauncher::new(store.clone(), clock.clock()).start();
    assert_eq!(
        next_launch(&launcher, "exclusive").await,
        Some(utc(2026, 3, 1, 10, 1, 0))
    );

    clock.set(utc(2026, 3, 1, 10, 1, 0));
    assert_eq!(launcher.send(Tick).await.unwrap().unwrap().len(), 2);
    clock.set(utc(2026, 3, 1, 10, 2, 0));
    let launched = launcher.send(Tick).await.unwrap().unwrap();
    assert_eq!(
        launched,
        vec![format!(
            "overlapping/periodic-{}",
            utc(2026, 3, 1, 10, 2, 0).timestamp()
        )]
    );
    assert_eq!(children(&store, "exclusive").len(), 1);

    // Once the running child is dead, the next instant launches again.
    finish(&store, &children(&store, "exclusive")[0].id);
    clock.set(utc(2026, 3, 1, 10, 3, 0));
    let launched = launcher.send(Tick).await.unwrap().unwrap();
    assert!(launched.contains(&format!(
        "exclusive/periodic-{}",
        utc(2026, 3, 1, 10, 3, 0).timestamp()
    )));
    assert_eq!(children(&store, "exclusive").len(), 2);
    assert_eq!(children(&store, "overlapping").len(), 3);
}

#[actix::test]
async fn stopping_or_deregistering_the_parent_ends_its_launches() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir);
    let clock = FakeClock::at(utc(2026, 3, 1, 10, 0, 30));
    let launcher = PeriodicLauncher::new(store.clone(), clock.clock()).start();
    // Registered after start: picked up from the change feed.
    register(&store, periodic_job("stopped", "* * * * *", "", false));
    register(&store, periodic_job("purged", "* * * * *", "", false));
    assert!(eventually(|| is_tracked(&launcher, "stopped")).await);
    assert!(eventually(|| is_tracked(&launcher, "purged")).await);

    let mut stopped = periodic_job("stopped", "* * * * *", "", false);
    stopped.stop = true;
    register(&store, stopped);
    store
        .apply(Command::JobDeregister {
            namespace: "default".into(),
            job_id: "purged".into(),
            purge: true,
            eval: None,
        })
        .unwrap();
    assert!(eventually(|| async { !is_tracked(&launcher, "stopped").await }).await);
    assert!(eventually(|| async { !is_tracked(&launcher, "purged").await }).await);

    clock.set(utc(2026, 3, 1, 10, 5, 0));
    assert!(launcher.send(Tick).await.unwrap().unwrap().is_empty());
    assert!(children(&store, "stopped").is_empty());
    assert!(children(&store, "purged").is_empty());

    // Running it again resumes launches.
    register(&store, periodic_job("stopped", "* * * * *", "", false));
    assert!(eventually(|| is_tracked(&launcher, "stopped")).await);
    clock.set(utc(2026, 3, 1, 10, 6, 0));
    assert_eq!(launcher.send(Tick).await.unwrap().unwrap().len(), 1);
}

#[actix::test]
async fn force_launch_registers_a_child_now() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir);
    register(&store, periodic_job("nightly", "0 3 * * *", "", true));
    register(&store, fixtures::job("default", "web", &[("g", 1)]));
    let now = utc(2026, 5, 5, 12, 34, 56);
    let clock = FakeClock::at(now);
    let launcher = PeriodicLauncher::new(store.clone(), clock.clock()).start();

    let force = |id: &str| ForceLaunch {
        namespace: "default".into(),
        job_id: id.into(),
    };
    let launched = launcher.send(force("nightly")).await.unwrap().unwrap();
    assert_eq!(
        launched.job_id,
        format!("nightly/periodic-{}", now.timestamp())
    );
    let snap = store.snapshot();
    let eval = snap.eval(&launched.eval_id).expect("eval stored");
    assert_eq!(eval.job_id, launched.job_id);
    assert_eq!(eval.triggered_by, TriggeredBy::PeriodicJob);
    assert!(snap.job("default", &launched.job_id).is_some());

    assert!(matches!(
        launcher.send(force("nightly")).await.unwrap(),
        Err(PeriodicError::AlreadyLaunched(_))
    ));
    // prohibit_overlap does not hold back a forced launch.
    clock.set(now + chrono::Duration::seconds(1));
    assert!(launcher.send(force("nightly")).await.unwrap().is_ok());
    assert!(matches!(
        launcher.send(force("web")).await.unwrap(),
        Err(PeriodicError::NotPeriodic(_))
    ));
    assert!(matches!(
        launcher.send(force("missing")).await.unwrap(),
        Err(PeriodicError::NotFound(_))
    ));
    assert_eq!(children(&store, "nightly").len(), 2);
}

#[actix::test]
async fn a_restart_never_launches_the_same_instant_twice() {
    let dir = tempfile::tempdir().unwrap();
    let launch = utc(2026, 1, 1, 0, 15, 0);
    {
        let store = open_store(&dir);
        register(&store, periodic_job("report", "*/15 * * * *", "", false));
        let clock = FakeClock::at(utc(2026, 1, 1, 0, 5, 0));
        let launcher = PeriodicLauncher::new(store.clone(), clock.clock()).start();
        assert!(is_tracked(&launcher, "report").await);
        clock.set(launch);
        assert_eq!(launcher.send(Tick).await.unwrap().unwrap().len(), 1);
        launcher.send(StopLauncher).await.unwrap();
        store.close();
    }
    // The new leader's clock runs a little behind the old one's, so the
    // same instant comes due again.
    let store = open_store(&dir);
    assert_eq!(children(&store, "report").len(), 1);
    let clock = FakeClock::at(launch - chrono::Duration::seconds(2));
    let launcher = PeriodicLauncher::new(store.clone(), clock.clock()).start();
    assert_eq!(next_launch(&launcher, "report").await, Some(launch));
    clock.set(launch);
    assert!(launcher.send(Tick).await.unwrap().unwrap().is_empty());
    assert_eq!(children(&store, "report").len(), 1);
    assert_eq!(
        next_launch(&launcher, "report").await,
        Some(utc(2026, 1, 1, 0, 30, 0))
    );
}

#[actix::test]
async fn the_launcher_wakes_itself_at_the_next_instant() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir);
    register(&store, periodic_job("minutely", "* * * * *", "", false));
    // A clock that runs in real time from 300 ms before a full minute.
    let base = utc(2026, 2, 2, 8, 59, 59) + chrono::Duration::milliseconds(700);
    let started = Instant::now();
    let clock: herder_server::periodic::Clock =
        Arc::new(move || base + chrono::Duration::from_std(started.elapsed()).unwrap());
    let _launcher = PeriodicLauncher::new(store.clone(), clock).start();

    let launched = eventually(|| async { children(&store, "minutely").len() == 1 }).await;
    assert!(launched, "no child launched by the launcher's own timer");
    assert_eq!(
        children(&store, "minutely")[0].id,
        format!("minutely/periodic-{}", utc(2026, 2, 2, 9, 0, 0).timestamp())
    );
}

#[actix::test]
async fn a_launch_missed_while_down_is_made_once_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open_store(&dir);
        register(&store, periodic_job("report", "*/15 * * * *", "", false));
        let clock = FakeClock::at(utc(2026, 1, 1, 0, 5, 0));
        let launcher = PeriodicLauncher::new(store.clone(), clock.clock()).start();
        assert!(is_tracked(&launcher, "report").await);
        clock.set(utc(2026, 1, 1, 0, 15, 0));
        assert_eq!(launcher.send(Tick).await.unwrap().unwrap().len(), 1);
        launcher.send(StopLauncher).await.unwrap();
        store.close();
    }
    // Down from 00:15 to 00:47: the 00:30 and 00:45 launches were missed.
    let store = open_store(&dir);
    let restart = utc(2026, 1, 1, 0, 47, 0);
    let launcher = PeriodicLauncher::new(store.clone(), FakeClock::at(restart).clock()).start();
    assert!(eventually(|| async { children(&store, "report").len() == 2 }).await);
    let caught_up = format!("report/periodic-{}", restart.timestamp());
    assert!(store.snapshot().job("default", &caught_up).is_some());
    assert_eq!(
        next_launch(&launcher, "report").await,
        Some(utc(2026, 1, 1, 1, 0, 0))
    );
    actix_rt::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        children(&store, "report").len(),
        2,
        "launched more than once"
    );
}

#[actix::test]
async fn a_changed_spec_moves_the_next_launch() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir);
    register(&store, periodic_job("report", "0 * * * *", "", false));
    let clock = FakeClock::at(utc(2026, 1, 1, 0, 5, 0));
    let launcher = PeriodicLauncher::new(store.clone(), clock.clock()).start();
    assert_eq!(
        next_launch(&launcher, "report").await,
        Some(utc(2026, 1, 1, 1, 0, 0))
    );
    register(&store, periodic_job("report", "*/10 * * * *", "", false));
    let moved = eventually(|| async {
        next_launch(&launcher, "report").await == Some(utc(2026, 1, 1, 0, 10, 0))
    })
    .await;
    assert!(moved, "the new spec was not followed");
}
