//! Runs herder inside another program.
//!
//! The program starts a server and a client in its own process (HTTP API
//! on loopback only, a throwaway data dir), registers a batch job parsed
//! from HCL text, waits for it to be placed and to finish, prints what
//! happened, and shuts herder down gracefully. Nomad tools can reach the
//! same agent over HTTP while it runs.
//!
//! Run it with `cargo run -p herder-actors --example embed`.

use herder::jobspec;
use herder::state::{Table, TableSet};
use herder::structs::ClientStatus;
use herder_actors::agent::Agent;
use herder_actors::config::AgentConfig;
use herder_actors::server_api::RegisterJob;
use std::time::Duration;

const JOB: &str = r#"
job "hello" {
  type = "batch"
  group "greet" {
    task "say" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello from an embedded herder"]
      }
    }
  }
}
"#;

fn main() -> anyhow::Result<()> {
    actix_rt::System::new().block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let mut config = AgentConfig::dev()?;
    // A sidecar: the API binds loopback whatever `bind_addr` says.
    config.sidecar = true;
    config.log_level = "warn".into();
    let agent = Agent::start(config, true).await?;
    println!("herder API on http://{}", agent.http_addr());
    let result = wait_for_job(&agent).await;
    agent.shutdown().await;
    result
}

async fn wait_for_job(agent: &Agent) -> anyhow::Result<()> {
    let api = agent
        .api()
        .ok_or_else(|| anyhow::anyhow!("the dev agent runs a server"))?;
    // The client registers itself in the background; wait for its node.
    api.wait_until(
        TableSet::of(&[Table::Nodes]),
        Duration::from_secs(10),
        |snap| snap.nodes().any(|n| n.is_schedulable()).then_some(()),
    )
    .await?;
    let job = jobspec::parse_hcl(JOB, "hello.nomad.hcl")?;
    let registered = api.register_job(RegisterJob::new(job)).await?;
    let eval_id = registered
        .eval_id
        .ok_or_else(|| anyhow::anyhow!("a batch job is evaluated"))?;
    let eval = api
        .wait_for_evaluation(&eval_id, Duration::from_secs(10))
        .await?;
    println!("evaluation {eval_id}: {:?}", eval.status);
    let finished = api
        .wait_until(
            TableSet::of(&[Table::Allocs]),
            Duration::from_secs(20),
            |snap| {
                let allocs: Vec<_> = snap.allocs_by_job("default", "hello").cloned().collect();
                let done = !allocs.is_empty()
                    && allocs
                        .iter()
                        .all(|a| a.client_status == ClientStatus::Complete);
                done.then_some(allocs)
            },
        )
        .await?;
    for alloc in finished {
        println!(
            "allocation {} on node {}: {:?}",
            alloc.id, alloc.node_id, alloc.client_status
        );
    }
    Ok(())
}
