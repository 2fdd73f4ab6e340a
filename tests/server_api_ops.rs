//! The operator's writes and the worker pool through `ServerApi`, the
//! server's one front door: each call here is made in Rust, without HTTP,
//! and its effect is checked where a user would see it, over the HTTP API
//! of the same agent.

use herder::state::{fixtures, Command};
use herder::structs::{
    DriverInfo, EvalStatus, Evaluation, Job, Node, SchedulerAlgorithm, SchedulerConfiguration,
    SchedulingEligibility, TriggeredBy,
};
use herder_actors::server_api::{
    DrainNode, DrainSpec, RegisterJob, ServerApi, ServerApiError, SetSchedulerConfig,
    SetWorkerConfig,
};
use herder_tests::{get, server_config, temp_dir, TestAgent};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

/// A server-only agent (in its own thread, as another process would be)
/// and the Rust API of its server.
fn start(num_schedulers: Option<usize>) -> (TestAgent, ServerApi, tempfile::TempDir) {
    let dir = temp_dir();
    let mut config = server_config(dir.path());
    config.server.num_schedulers = num_schedulers;
    let agent = TestAgent::start(config, false);
    let handle = agent.server.clone().expect("a server agent");
    (agent, ServerApi::new(handle), dir)
}

/// GET as JSON, asserting a 200.
fn get_json(agent: &TestAgent, path: &str) -> Value {
    let (status, body) = get(&agent.url(path));
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).expect("a JSON answer")
}

fn mock_node(name: &str) -> Node {
    let mut node = fixtures::node(name);
    node.drivers.insert(
        "mock_driver".into(),
        DriverInfo {
            detected: true,
            healthy: true,
            ..Default::default()
        },
    );
    node.compute_class();
    node
}

/// A job of two mock tasks (one for a system job); `hcl_body` adds to
/// the job stanza (type, periodic).
fn mock_job(hcl_body: &str, id: &str) -> Job {
    let count = if hcl_body.contains("system") { 1 } else { 2 };
    let hcl = format!(
        r#"job "{id}" {{
             {hcl_body}
             group "g" {{
               count = {count}
               task "t" {{
                 driver = "mock_driver"
                 config {{ run_for = "1h" }}
                 resources {{
                   cpu    = 100
                   memory = 64
                 }}
               }}
             }}
           }}"#
    );
    herder::jobspec::parse_hcl(&hcl, "ops.hcl").expect("job parses")
}

/// A ready node with the mock driver, registered as a client would.
async fn ready_node(api: &ServerApi, name: &str) -> Node {
    let node = mock_node(name);
    api.register_node(node.clone()).await.expect("registers");
    api.heartbeat(node.id, &node.secret_id, true)
        .await
        .expect("heartbeat");
    node
}

#[actix_rt::test]
async fn a_drain_set_in_rust_shows_on_the_node_and_cancels() {
    let (agent, api, _dir) = start(None);
    let node = ready_node(&api, "drained").await;
    let written = api
        .register_job(RegisterJob::new(mock_job("", "web")))
        .await
        .expect("job registers");
    let eval = written.eval_id.expect("evaluated");
    api.wait_for_evaluation(&eval, WAIT).await.expect("placed");

    let drained = api
        .drain_node(DrainNode {
            node_id: node.id,
            spec: Some(DrainSpec {
                deadline: Duration::from_secs(3600).as_nanos() as i64,
                ignore_system_jobs: false,
            }),
            mark_eligible: false,
        })
        .await
        .expect("drain set");
    assert_eq!(
        drained.eval_ids.len(),
        1,
        "the job on the node is evaluated"
    );
    assert_eq!(drained.eval_create_index, drained.index);
    let shown = get_json(&agent, &format!("/v1/node/{}", node.id));
    assert_eq!(shown["SchedulingEligibility"], "ineligible");
    assert!(shown["DrainStrategy"].is_object(), "{shown}");
    let (status, _) = get(&agent.url(&format!("/v1/evaluation/{}", drained.eval_ids[0])));
    assert_eq!(status, 200, "the drain's evaluation is stored");

    // A draining node cannot be made eligible: refused, nothing changes.
    // The node's own record is compared, not the store's latest index: the
    // drain's evaluation is being scheduled meanwhile and writes plans.
    let before = api.snapshot().node(&node.id).map(|n| n.modify_index);
    match api
        .set_node_eligibility(node.id, SchedulingEligibility::Eligible)
        .await
    {
        Err(ServerApiError::Invalid(m)) => assert!(m.contains("draining"), "{m}"),
        other => panic!("eligible while draining must be refused, got {other:?}"),
    }
    assert_eq!(
        api.snapshot().node(&node.id).map(|n| n.modify_index),
        before,
        "a refused eligibility change leaves the node as it was"
    );

    api.drain_node(DrainNode {
        node_id: node.id,
        spec: None,
        mark_eligible: true,
    })
    .await
    .expect("drain cancelled");
    let shown = get_json(&agent, &format!("/v1/node/{}", node.id));
    assert_eq!(shown["SchedulingEligibility"], "eligible");
    assert!(shown["DrainStrategy"].is_null(), "{shown}");
}

#[actix_rt::test]
async fn eligibility_evaluate_and_purge_in_rust_are_seen_over_http() {
    let (agent, api, _dir) = start(Some(0));
    let node = ready_node(&api, "operated").await;
    let unknown = herder::structs::new_id();
    match api.evaluate_node(unknown).await {
        Err(ServerApiError::NotFound(m)) => assert_eq!(m, "node not found"),
        other => panic!("an unknown node is not found, got {other:?}"),
    }

    let r = api
        .set_node_eligibility(node.id, SchedulingEligibility::Ineligible)
        .await
        .expect("ineligible");
    assert!(
        r.eval_ids.is_empty(),
        "an ineligible node takes no new work"
    );
    let shown = get_json(&agent, &format!("/v1/node/{}", node.id));
    assert_eq!(shown["SchedulingEligibility"], "ineligible");

    // A system job may place on any node: evaluating the node evaluates it.
    api.register_job(RegisterJob::new(mock_job(r#"type = "system""#, "agentd")))
        .await
        .expect("system job registers");
    let evaluated = api.evaluate_node(node.id).await.expect("evaluated");
    assert_eq!(evaluated.eval_ids.len(), 1);
    let eval = get_json(&agent, &format!("/v1/evaluation/{}", evaluated.eval_ids[0]));
    assert_eq!(eval["JobID"], "agentd");
    assert_eq!(eval["NodeID"], node.id.to_string());

    api.purge_node(node.id).await.expect("purged");
    assert_eq!(get(&agent.url(&format!("/v1/node/{}", node.id))).0, 404);
    assert!(api.node(&node.id).is_none());
}

#[actix_rt::test]
async fn an_allocation_stopped_in_rust_is_migrated_with_an_alloc_stop_eval() {
    let (agent, api, _dir) = start(None);
    ready_node(&api, "runner").await;
    let written = api
        .register_job(RegisterJob::new(mock_job("", "svc")))
        .await
        .expect("registers");
    let eval = written.eval_id.expect("evaluated");
    let eval = api.wait_for_evaluation(&eval, WAIT).await.expect("placed");
    assert_eq!(eval.status, EvalStatus::Complete);
    let alloc = api.job_allocations("default", "svc")[0].clone();

    let stopped = api.stop_allocation(alloc.id).await.expect("stopped");
    let shown = get_json(&agent, &format!("/v1/allocation/{}", alloc.id));
    assert_eq!(shown["DesiredTransition"]["Migrate"], true, "{shown}");
    let stop_eval = get_json(&agent, &format!("/v1/evaluation/{}", stopped.eval_id));
    assert_eq!(stop_eval["TriggeredBy"], "alloc-stop");
    match api.stop_allocation(herder::structs::new_id()).await {
        Err(ServerApiError::NotFound(m)) => assert_eq!(m, "alloc not found"),
        other => panic!("an unknown allocation is not found, got {other:?}"),
    }
}

#[actix_rt::test]
async fn a_stale_check_and_set_of_the_scheduler_configuration_changes_nothing() {
    let (agent, api, _dir) = start(Some(0));
    let read = api.scheduler_config();
    let spread = SchedulerConfiguration {
        scheduler_algorithm: SchedulerAlgorithm::Spread,
        ..(*read.config).clone()
    };
    let first = api
        .set_scheduler_config(SetSchedulerConfig {
            config: spread.clone(),
            cas_index: Some(read.config.modify_index),
        })
        .await
        .expect("write");
    assert!(first.updated);

    // The same index again is stale now: refused as an outcome.
    let stale = api
        .set_scheduler_config(SetSchedulerConfig {
            config: SchedulerConfiguration {
                scheduler_algorithm: SchedulerAlgorithm::Binpack,
                reject_job_registration: true,
                ..spread
            },
            cas_index: Some(read.config.modify_index),
        })
        .await
        .expect("a stale write is an outcome, not an error");
    assert!(!stale.updated);
    assert_eq!(stale.index, first.index);
    let shown = get_json(&agent, "/v1/operator/scheduler/configuration");
    assert_eq!(shown["SchedulerConfig"]["SchedulerAlgorithm"], "spread");
    assert_eq!(shown["SchedulerConfig"]["RejectJobRegistration"], false);
    assert_eq!(shown["Index"], first.index);

    let paused = api.pause_eval_broker(true).await.expect("paused");
    assert!(paused.updated);
    let shown = get_json(&agent, "/v1/operator/scheduler/configuration");
    assert_eq!(shown["SchedulerConfig"]["PauseEvalBroker"], true);
    assert_eq!(
        shown["SchedulerConfig"]["SchedulerAlgorithm"], "spread",
        "pausing keeps the rest of the configuration"
    );
}

#[actix_rt::test]
async fn resizing_the_worker_pool_in_rust_shows_in_agent_schedulers() {
    let (agent, api, _dir) = start(Some(1));
    assert_eq!(api.workers().await.expect("workers").schedulers.len(), 1);

    let set = api
        .set_worker_config(SetWorkerConfig {
            num_schedulers: Some(0),
            enabled_schedulers: None,
        })
        .await
        .expect("resized");
    assert_eq!(set.num_schedulers, 0);
    let shown = get_json(&agent, "/v1/agent/schedulers");
    assert_eq!(shown["schedulers"].as_array().map(Vec::len), Some(0));

    let set = api
        .set_worker_config(SetWorkerConfig {
            num_schedulers: Some(1),
            enabled_schedulers: Some(vec!["batch".into(), "_core".into()]),
        })
        .await
        .expect("reconfigured");
    assert_eq!(set.enabled_schedulers, vec!["batch", "_core"]);
    let shown = get_json(&agent, "/v1/agent/schedulers");
    assert_eq!(shown["schedulers"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        shown["schedulers"][0]["enabled_schedulers"],
        serde_json::json!(["batch", "_core"])
    );

    // Refused whole: without `_core`, nothing changes.
    match api
        .set_worker_config(SetWorkerConfig {
            num_schedulers: Some(0),
            enabled_schedulers: Some(vec!["service".into()]),
        })
        .await
    {
        Err(ServerApiError::Invalid(m)) => assert!(m.contains("_core"), "{m}"),
        other => panic!("a pool without _core must be refused, got {other:?}"),
    }
    let config = get_json(&agent, "/v1/agent/schedulers/config");
    assert_eq!(config["num_schedulers"], 1);
    assert_eq!(api.worker_config().await.expect("config"), set);
}

#[actix_rt::test]
async fn job_evaluate_periodic_force_and_plan_in_rust() {
    let (agent, api, _dir) = start(Some(0));
    ready_node(&api, "planner").await;

    // A plan writes nothing and says what a registration would place.
    let before = api.snapshot().latest_index();
    let plan = api.plan_job(mock_job("", "planned")).expect("planned");
    assert_eq!(plan.annotations.desired_tg_updates["g"].place, 2);
    assert!(plan.previous.is_none());
    assert_eq!(api.snapshot().latest_index(), before);
    assert_eq!(get(&agent.url("/v1/job/planned")).0, 404);

    api.register_job(RegisterJob::new(mock_job("", "batchy")))
        .await
        .expect("registers");
    let evaluated = api.evaluate_job("default", "batchy").await.expect("eval");
    let eval_id = evaluated.eval_id.expect("an evaluation");
    let eval = get_json(&agent, &format!("/v1/evaluation/{eval_id}"));
    assert_eq!(eval["JobID"], "batchy");

    let cron = mock_job(
        r#"type = "batch"
           periodic { cron = "0 0 1 1 *" }"#,
        "nightly",
    );
    api.register_job(RegisterJob::new(cron))
        .await
        .expect("periodic registers");
    match api.evaluate_job("default", "nightly").await {
        Err(ServerApiError::Invalid(m)) => assert_eq!(m, "can't evaluate periodic job"),
        other => panic!("a periodic parent is not evaluated, got {other:?}"),
    }
    let launched = api
        .force_periodic_launch("default", "nightly")
        .await
        .expect("forced");
    assert!(launched.job_id.starts_with("nightly/periodic-"));
    let child = get_json(
        &agent,
        &format!("/v1/job/{}", herder_tests::url_encode(&launched.job_id)),
    );
    assert_eq!(child["ParentID"], "nightly");
    match api.force_periodic_launch("default", "batchy").await {
        Err(ServerApiError::Invalid(m)) => assert_eq!(m, "can't force launch non-periodic job"),
        other => panic!("only periodic jobs are forced, got {other:?}"),
    }
}

#[actix_rt::test]
async fn forced_gc_and_summary_reconcile_in_rust() {
    let (agent, api, _dir) = start(Some(0));
    // Stopped, its last evaluation complete: dead, whatever its age.
    let mut dead = fixtures::job("default", "old-web", &[("g", 1)]);
    dead.stop = true;
    let done = Evaluation {
        status: EvalStatus::Complete,
        ..fixtures::eval(&dead, TriggeredBy::JobDeregister, 1)
    };
    let store = &agent.server.as_ref().expect("server").store;
    store
        .apply(Command::JobRegister {
            job: Arc::new(dead),
            eval: Some(done),
            enforce_index: None,
        })
        .expect("seeded");
    api.register_job(RegisterJob::new(mock_job("", "live")))
        .await
        .expect("registers");

    let before = api.snapshot().latest_index();
    let index = api.reconcile_job_summaries().await.expect("reconciled");
    assert!(index > before, "the reconcile is a write");
    let summary = get_json(&agent, "/v1/job/live/summary");
    assert_eq!(summary["JobID"], "live", "{summary}");

    let report = api.force_gc().await.expect("collected");
    assert_eq!(report.jobs, 1, "{report:?}");
    assert_eq!(get(&agent.url("/v1/job/old-web")).0, 404, "dead job purged");
    assert_eq!(get(&agent.url("/v1/job/live")).0, 200, "live job kept");
}
