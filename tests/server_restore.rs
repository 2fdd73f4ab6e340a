//! The server's evaluation routing through a running agent: a stored
//! pending evaluation reaches the broker, and after a restart on the same
//! data dir every pending evaluation is back in the broker exactly once.

use futures::executor::block_on;
use herder::state::fixtures;
use herder::state::Command;
use herder::structs::{JobType, TriggeredBy};
use herder_actors::broker::{Dequeue, Stats};
use herder_tests::{server_config, temp_dir, wait_for, TestAgent};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// A server without scheduling workers: evaluations stay in the broker
/// for the test to look at.
fn quiet_server(dir: &std::path::Path) -> herder_actors::config::AgentConfig {
    let mut config = server_config(dir);
    config.server.num_schedulers = Some(0);
    config
}

fn register_jobs(agent: &TestAgent, n: usize) -> BTreeSet<uuid::Uuid> {
    let server = agent.server.as_ref().expect("server");
    let mut ids = BTreeSet::new();
    for i in 0..n {
        let job = fixtures::job("default", &format!("job-{i}"), &[("g", 1)]);
        let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
        ids.insert(eval.id);
        server
            .store
            .apply(Command::JobRegister {
                job: Arc::new(job),
                eval: Some(eval),
                enforce_index: None,
            })
            .expect("registered");
    }
    ids
}

fn ready_in_broker(agent: &TestAgent) -> usize {
    let broker = agent.server.as_ref().expect("server").test_broker();
    block_on(broker.send(Stats))
        .expect("broker answers")
        .total_ready
}

#[test]
fn stored_pending_evals_are_routed_to_the_broker() {
    let dir = temp_dir();
    let agent = TestAgent::start(quiet_server(dir.path()), false);
    register_jobs(&agent, 3);
    let routed = wait_for(Duration::from_secs(10), || {
        (ready_in_broker(&agent) == 3).then_some(())
    });
    assert!(
        routed.is_some(),
        "3 ready evals, saw {}",
        ready_in_broker(&agent)
    );
}

#[test]
fn restart_restores_every_pending_eval_exactly_once() {
    let dir = temp_dir();
    let agent = TestAgent::start(quiet_server(dir.path()), false);
    let registered = register_jobs(&agent, 5);
    agent.stop();

    let agent = TestAgent::start(quiet_server(dir.path()), false);
    let broker = agent.server.as_ref().expect("server").test_broker().clone();
    let mut seen = Vec::new();
    while let Some(d) = block_on(broker.send(Dequeue {
        schedulers: vec![JobType::Service],
        timeout: Duration::from_millis(500),
    }))
    .expect("broker answers")
    .expect("broker enabled")
    {
        seen.push(d.eval.id);
    }
    let unique: BTreeSet<_> = seen.iter().copied().collect();
    assert_eq!(unique, registered, "every pending eval restored");
    assert_eq!(seen.len(), registered.len(), "and each exactly once");
}
