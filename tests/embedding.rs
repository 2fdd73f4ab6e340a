//! herder embedded in another Rust program: `Agent::start` with a typed
//! `ServerApi`, and the sidecar mode that keeps the API on loopback.
//!
//! The typed calls and the HTTP API are two doors to the same server: what
//! one writes, the other reads.

use herder::state::{fixtures, AllocClientUpdate, Table, TableSet};
use herder::structs::{ClientStatus, DesiredStatus, DriverInfo, EvalStatus, Job, Node};
use herder_actors::agent::Agent;
use herder_actors::config::AgentConfig;
use herder_actors::server_api::{RegisterJob, ServerApi, ServerApiError};
use herder_tests::get;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

/// A server-only embedded agent in sidecar mode, asked to bind every
/// interface.
async fn embedded_server() -> (Agent, ServerApi, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = AgentConfig::dev().expect("dev config");
    config.client.enabled = false;
    config.sidecar = true;
    config.bind_addr = "0.0.0.0".into();
    config.log_level = "warn".into();
    config.data_dir = dir.path().to_path_buf();
    let agent = Agent::start(config, false).await.expect("agent starts");
    let api = agent.api().expect("a server agent has an API");
    (agent, api, dir)
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

fn mock_service(id: &str, count: i32) -> Job {
    let hcl = format!(
        r#"job "{id}" {{
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
    herder::jobspec::parse_hcl(&hcl, "embedded.hcl").expect("job parses")
}

async fn http_get(url: String) -> (u16, String) {
    actix_rt::task::spawn_blocking(move || get(&url))
        .await
        .expect("request thread")
}

#[actix_rt::test]
async fn sidecar_binds_loopback_even_when_asked_for_every_interface() {
    let (agent, _api, _dir) = embedded_server().await;
    let addr = agent.http_addr();
    assert!(addr.ip().is_loopback(), "sidecar API bound {addr}");
    let (status, _) = http_get(format!("http://{addr}/v1/agent/health")).await;
    assert_eq!(status, 200);
    agent.shutdown().await;
}

#[actix_rt::test]
async fn typed_calls_place_report_and_stop_work_seen_over_http() {
    let (agent, api, _dir) = embedded_server().await;
    let node = mock_node("embedded-1");
    let secret = node.secret_id.clone();
    let reply = api
        .register_node(node.clone())
        .await
        .expect("node registers");
    assert!(reply.heartbeat_ttl > Duration::ZERO);
    api.heartbeat(node.id, &secret, true)
        .await
        .expect("heartbeat");

    let written = api
        .register_job(RegisterJob::new(mock_service("web", 3)))
        .await
        .expect("job registers");
    let eval_id = written.eval_id.expect("a service job is evaluated");
    let eval = api
        .wait_for_evaluation(&eval_id, WAIT)
        .await
        .expect("eval ends");
    assert_eq!(eval.status, EvalStatus::Complete);
    let allocs = api.job_allocations("default", "web");
    assert_eq!(allocs.len(), 3);
    assert!(allocs.iter().all(|a| a.node_id == node.id));

    // The node reports its allocations running, as a client would.
    let updates = allocs
        .iter()
        .map(|a| AllocClientUpdate {
            id: a.id,
            client_status: ClientStatus::Running,
            ..Default::default()
        })
        .collect();
    api.update_allocations(node.id, &secret, updates)
        .await
        .expect("status report");
    let running = api
        .allocation(&allocs[0].id)
        .expect("allocation still there");
    assert_eq!(running.client_status, ClientStatus::Running);

    // The HTTP door sees the same job and allocations.
    let base = format!("http://{}", agent.http_addr());
    let (status, body) = http_get(format!("{base}/v1/job/web/allocations")).await;
    assert_eq!(status, 200);
    let listed: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(listed.as_array().map(Vec::len), Some(3));

    let stopped = api
        .deregister_job("default", "web", false)
        .await
        .expect("job stops");
    let stop_eval = stopped.eval_id.expect("a stop is evaluated");
    api.wait_for_evaluation(&stop_eval, WAIT)
        .await
        .expect("stop eval ends");
    assert!(api
        .job_allocations("default", "web")
        .iter()
        .all(|a| a.desired_status == DesiredStatus::Stop));
    agent.shutdown().await;
}

#[actix_rt::test]
async fn refused_typed_calls_say_why_and_change_nothing() {
    let (agent, api, _dir) = embedded_server().await;
    let before = api.snapshot().latest_index();

    let mut bad = mock_service("bad", 1);
    bad.task_groups[0].tasks[0].driver.clear();
    match api.register_job(RegisterJob::new(bad)).await {
        Err(ServerApiError::Invalid(message)) => assert!(message.contains("driver"), "{message}"),
        other => panic!("an invalid job must be refused, got {other:?}"),
    }
    let mut cas = RegisterJob::new(mock_service("cas", 1));
    cas.enforce_index = Some(7);
    match api.register_job(cas).await {
        Err(ServerApiError::Invalid(message)) => {
            assert!(
                message.starts_with("Enforcing job modify index"),
                "{message}"
            )
        }
        other => panic!("check-and-set on a missing job must fail, got {other:?}"),
    }
    let node = mock_node("embedded-2");
    api.register_node(node.clone())
        .await
        .expect("node registers");
    let after_node = api.snapshot().latest_index();
    match api.heartbeat(node.id, "not-the-secret", true).await {
        Err(ServerApiError::Forbidden(_)) => {}
        other => panic!("a wrong secret must be refused, got {other:?}"),
    }
    match api.deregister_job("default", "missing", false).await {
        Err(ServerApiError::NotFound(_)) => {}
        other => panic!("stopping a missing job is not found, got {other:?}"),
    }
    assert!(api.jobs().is_empty());
    assert!(after_node > before);
    assert_eq!(api.snapshot().latest_index(), after_node);

    // Waiting is bounded: nothing changes the jobs table here.
    let waited = api
        .wait_until(
            TableSet::of(&[Table::Jobs]),
            Duration::from_millis(200),
            |s| s.job("default", "never").cloned(),
        )
        .await;
    assert!(matches!(waited, Err(ServerApiError::Timeout(_))));
    agent.shutdown().await;
}
