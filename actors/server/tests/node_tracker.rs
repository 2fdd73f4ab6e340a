//! The NodeTracker against a real state store, with short timings: what an
//! operator sees of nodes as they register, heartbeat, fail and vanish.

use actix::prelude::*;
use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{AllocClientUpdate, Command, PlanResults, StateStore, StoreOptions};
use herder::structs::{ClientStatus, EvalStatus, JobType, Node, NodeStatus, TriggeredBy};
use herder_server::node_lifecycle::LifecycleConfig;
use herder_server::node_tracker::{
    Heartbeat, NodeError, NodeTracker, RegisterNode, TrackerConfig, UpdateAllocs,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn fast_config() -> TrackerConfig {
    TrackerConfig {
        lifecycle: LifecycleConfig {
            min_heartbeat_ttl: Duration::from_millis(300),
            max_heartbeats_per_second: 1000.0,
            heartbeat_grace: Duration::from_millis(200),
            failover_heartbeat_ttl: Duration::from_secs(300),
            max_lost_duration: Duration::from_millis(600),
            max_flaky_duration: Duration::from_secs(300),
            readiness_checks: true,
        },
        tick: Duration::from_millis(25),
    }
}

fn open_store() -> (StateStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    (store, dir)
}

fn ready_node() -> Node {
    let mut n = fixtures::node("n1");
    n.status = NodeStatus::Ready;
    n
}

async fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

fn status(store: &StateStore, node: &Node) -> Option<NodeStatus> {
    store.snapshot().node(&node.id).map(|n| n.status)
}

#[actix::test]
async fn a_ready_node_is_stored_ready_and_gets_system_job_evals() {
    let (store, _dir) = open_store();
    let mut system = fixtures::job("default", "agent", &[("g", 1)]);
    system.job_type = JobType::System;
    store
        .apply(Command::JobRegister {
            job: Arc::new(system),
            eval: None,
            enforce_index: None,
        })
        .unwrap();
    let tracker = NodeTracker::new(store.clone(), fast_config()).start();
    let node = ready_node();
    let reply = tracker
        .send(RegisterNode(node.clone()))
        .await
        .unwrap()
        .unwrap();
    assert!(reply.heartbeat_ttl >= Duration::from_millis(300));
    assert_eq!(status(&store, &node), Some(NodeStatus::Ready));
    let snap = store.snapshot();
    let stored = snap.node(&node.id).unwrap();
    assert_eq!(stored.events[0].message, "Node registered");
    assert_eq!(reply.eval_ids.len(), 1);
    let eval = snap.eval(&reply.eval_ids[0]).unwrap();
    assert_eq!(
        (eval.job_id.as_str(), eval.triggered_by),
        ("agent", TriggeredBy::NodeUpdate)
    );
    assert_eq!(eval.node_id, Some(node.id));
}

#[actix::test]
async fn an_initializing_node_waits_for_a_ready_heartbeat() {
    let (store, _dir) = open_store();
    let tracker = NodeTracker::new(store.clone(), fast_config()).start();
    let mut node = ready_node();
    node.status = NodeStatus::Initializing;
    tracker
        .send(RegisterNode(node.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status(&store, &node), Some(NodeStatus::Initializing));
    let hb = |ready| Heartbeat {
        node_id: node.id,
        secret_id: node.secret_id.clone(),
        ready,
    };
    tracker.send(hb(false)).await.unwrap().unwrap();
    assert_eq!(status(&store, &node), Some(NodeStatus::Initializing));
    tracker.send(hb(true)).await.unwrap().unwrap();
    assert_eq!(status(&store, &node), Some(NodeStatus::Ready));
}

#[actix::test]
async fn wrong_secrets_and_unknown_nodes_are_refused() {
    let (store, _dir) = open_store();
    let tracker = NodeTracker::new(store.clone(), fast_config()).start();
    let node = ready_node();
    tracker
        .send(RegisterNode(node.clone()))
        .await
        .unwrap()
        .unwrap();
    let mut impostor = node.clone();
    impostor.secret_id = "not-the-secret".into();
    let err = tracker
        .send(RegisterNode(impostor))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, NodeError::SecretMismatch), "{err}");
    let err = tracker
        .send(Heartbeat {
            node_id: node.id,
            secret_id: "x".into(),
            ready: true,
        })
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, NodeError::SecretMismatch), "{err}");
    let err = tracker
        .send(Heartbeat {
            node_id: herder::structs::new_id(),
            secret_id: "x".into(),
            ready: true,
        })
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, NodeError::NotFound), "{err}");
    let mut nameless = ready_node();
    nameless.name = Default::default();
    let err = tracker
        .send(RegisterNode(nameless))
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("missing node name"), "{err}");
}

#[actix::test]
async fn a_silent_node_goes_down_with_evals_for_its_jobs_then_is_removed() {
    let (store, _dir) = open_store();
    let tracker = NodeTracker::new(store.clone(), fast_config()).start();
    let node = ready_node();
    tracker
        .send(RegisterNode(node.clone()))
        .await
        .unwrap()
        .unwrap();
    let job = Arc::new(fixtures::job("default", "web", &[("g", 1)]));
    store
        .apply(Command::JobRegister {
            job: job.clone(),
            eval: None,
            enforce_index: None,
        })
        .unwrap();
    let alloc = AllocBuilder::new(&job, "g").build(0, node.id, herder::structs::new_id(), 1);
    let mut results = PlanResults {
        job: Some(job.clone()),
        ..Default::default()
    };
    results.node_allocation.insert(node.id, vec![alloc]);
    store.apply(Command::ApplyPlanResults(results)).unwrap();

    assert!(
        wait_until(Duration::from_secs(10), || status(&store, &node)
            == Some(NodeStatus::Down))
        .await,
        "node marked down after TTL + grace"
    );
    let snap = store.snapshot();
    let evals: Vec<_> = snap.evals_by_job("default", "web").collect();
    assert_eq!(evals.len(), 1);
    assert_eq!(evals[0].triggered_by, TriggeredBy::NodeUpdate);
    assert_eq!(evals[0].status, EvalStatus::Pending);

    assert!(
        wait_until(Duration::from_secs(10), || status(&store, &node).is_none()).await,
        "lost node removed after max_lost_duration"
    );
}

#[actix::test]
async fn heartbeats_keep_a_node_ready() {
    let (store, _dir) = open_store();
    let tracker = NodeTracker::new(store.clone(), fast_config()).start();
    let node = ready_node();
    tracker
        .send(RegisterNode(node.clone()))
        .await
        .unwrap()
        .unwrap();
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        tracker
            .send(Heartbeat {
                node_id: node.id,
                secret_id: node.secret_id.clone(),
                ready: true,
            })
            .await
            .unwrap()
            .unwrap();
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status(&store, &node), Some(NodeStatus::Ready));
}

#[actix::test]
async fn a_node_caused_failure_suspends_the_node_and_reschedules_the_work() {
    let (store, _dir) = open_store();
    let tracker = NodeTracker::new(store.clone(), fast_config()).start();
    let node = ready_node();
    tracker
        .send(RegisterNode(node.clone()))
        .await
        .unwrap()
        .unwrap();
    let job = Arc::new(fixtures::job("default", "web", &[("g", 1)]));
    store
        .apply(Command::JobRegister {
            job: job.clone(),
            eval: None,
            enforce_index: None,
        })
        .unwrap();
    let alloc = AllocBuilder::new(&job, "g").build(0, node.id, herder::structs::new_id(), 1);
    let mut results = PlanResults {
        job: Some(job.clone()),
        ..Default::default()
    };
    results.node_allocation.insert(node.id, vec![alloc.clone()]);
    store.apply(Command::ApplyPlanResults(results)).unwrap();

    tracker
        .send(UpdateAllocs {
            node_id: node.id,
            secret_id: node.secret_id.clone(),
            updates: vec![AllocClientUpdate {
                id: alloc.id,
                client_status: ClientStatus::Failed,
                client_description: "driver failure".into(),
                node_failure: true,
                ..Default::default()
            }],
        })
        .await
        .unwrap()
        .unwrap();
    let snap = store.snapshot();
    assert_eq!(
        snap.alloc(&alloc.id).unwrap().client_status,
        ClientStatus::Failed
    );
    assert_eq!(
        snap.node(&node.id).unwrap().status,
        NodeStatus::Initializing,
        "flaky: no new work"
    );
    let triggers: Vec<_> = snap
        .evals_by_job("default", "web")
        .map(|e| e.triggered_by)
        .collect();
    assert!(
        triggers.contains(&TriggeredBy::AllocFailure),
        "{triggers:?}"
    );
}
