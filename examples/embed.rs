//! Runs herder inside another program, through the crate's public items
//! only (`herder_actors::{Agent, AgentConfig, ...}`).
//!
//! The program starts a server and a client in its own process (HTTP API
//! on loopback only, a throwaway data dir), registers a batch job parsed
//! from HCL text, follows it on the event stream until it is placed,
//! waits for it to finish, prints what happened, and shuts herder down.
//! Nomad tools can reach the same agent over HTTP while it runs.
//!
//! Run it with `cargo run -p herder-actors --example embed`; an outside
//! crate builds it with the dependency line of docs/EMBEDDING.md.

use futures::StreamExt;
use herder_actors::herder::jobspec;
use herder_actors::herder::state::{Table, TableSet};
use herder_actors::herder::structs::ClientStatus;
use herder_actors::{Agent, AgentConfig, EventFilter, RegisterJob, Topic};
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

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut config = AgentConfig::dev()?;
    // A sidecar: the API binds loopback whatever `bind_addr` says.
    config.sidecar = true;
    let agent = Agent::start(config, true).await?;
    println!("herder API on http://{}", agent.http_addr());
    let result = run_job(&agent).await;
    agent.shutdown().await;
    result
}

async fn run_job(agent: &Agent) -> anyhow::Result<()> {
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
    let mut allocations = agent.events(EventFilter::new().topic(Topic::Allocation, "hello"))?;
    let job = jobspec::parse_hcl(JOB, "hello.nomad.hcl")?;
    let registered = api.register_job(RegisterJob::new(job)).await?;
    println!("registered at index {}", registered.index);
    let placed = tokio::time::timeout(Duration::from_secs(10), allocations.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("the event stream ended"))?;
    for event in &placed.events {
        println!(
            "event {} {} at index {}",
            event.event_type, event.key, event.index
        );
    }
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
