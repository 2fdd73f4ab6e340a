//! `PUT /v1/system/gc` against a running agent: as Nomad's forced garbage
//! collection it answers 200 with an empty body and collects what is
//! eligible whatever its age (a job stopped a moment ago is far from the
//! configured `job_gc_threshold`), while live jobs stay.

use herder::state::{fixtures, Command};
use herder::structs::{EvalStatus, Evaluation, TriggeredBy};
use herder_tests::{get, server_config, temp_dir, TestAgent};
use std::sync::Arc;
use std::time::Duration;

fn put(url: &str) -> (u16, String) {
    match ureq::put(url).timeout(Duration::from_secs(30)).call() {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("PUT {url}: {e}"),
    }
}

#[test]
fn forced_gc_purges_a_dead_job_and_keeps_a_live_one() {
    let dir = temp_dir();
    let mut config = server_config(dir.path());
    // No workers: the live job's evaluation stays pending, so it is live.
    config.server.num_schedulers = Some(0);
    let agent = TestAgent::start(config, false);
    let store = &agent.server.as_ref().expect("server").store;

    // Stopped, its last evaluation complete: dead.
    let mut dead = fixtures::job("default", "old-web", &[("g", 1)]);
    dead.stop = true;
    let done = Evaluation {
        status: EvalStatus::Complete,
        ..fixtures::eval(&dead, TriggeredBy::JobDeregister, 1)
    };
    store
        .apply(Command::JobRegister {
            job: Arc::new(dead),
            eval: Some(done),
            enforce_index: None,
        })
        .unwrap();
    let live = fixtures::job("default", "live-web", &[("g", 1)]);
    fixtures::register_job(store, live);
    assert_eq!(get(&agent.url("/v1/job/old-web")).0, 200);

    let (status, body) = put(&agent.url("/v1/system/gc"));
    assert_eq!((status, body.as_str()), (200, ""));

    assert_eq!(get(&agent.url("/v1/job/old-web")).0, 404, "dead job purged");
    assert_eq!(get(&agent.url("/v1/job/live-web")).0, 200, "live job kept");
    let (status, _) = get(&agent.url("/v1/system/gc"));
    assert_eq!(status, 405, "only PUT and POST collect");
}
