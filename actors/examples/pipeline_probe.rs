//! Temporary probe: in-process server pipeline throughput.
use herder::state::{fixtures, Command, Table, TableSet};
use herder::structs::{JobType, NodeStatus};
use herder_actors::agent::Agent;
use herder_actors::config::AgentConfig;
use herder_actors::server_api::RegisterJob;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    actix_rt::System::new().block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let (nodes, jobs, count) = (args[0], args[1], args[2] as i32);
    let dir = tempfile::tempdir_in("/work/tmp")?;
    let mut config = AgentConfig::dev()?;
    config.client.enabled = false;
    config.log_level = "warn".into();
    config.data_dir = dir.path().to_path_buf();
    herder_actors::logging::init(&config.log_level);
    let agent = Agent::start(config, false).await?;
    let api = agent.api().unwrap();
    let store = agent.server().unwrap().store.clone();
    let t = Instant::now();
    let mut pending = Vec::new();
    for i in 0..nodes {
        let mut node = fixtures::node(&format!("n{i}"));
        node.status = NodeStatus::Ready;
        pending.push(store.submit(Command::NodeRegister {
            node: Arc::new(node),
        }));
    }
    for p in pending {
        p.await.unwrap().unwrap();
    }
    eprintln!("nodes registered in {:?}", t.elapsed());
    let t = Instant::now();
    let mut futs = Vec::new();
    for i in 0..jobs {
        let mut job = fixtures::job("default", &format!("j{i}"), &[("g", count)]);
        job.job_type = if i % 2 == 0 {
            JobType::Service
        } else {
            JobType::Batch
        };
        let r = &mut job.task_groups[0].tasks[0].resources;
        r.cpu = 20;
        r.memory_mb = 32;
        if let Some(d) = job.task_groups[0].ephemeral_disk.as_mut() {
            d.size_mb = 10;
        }
        job.canonicalize();
        let api = api.clone();
        futs.push(async move { api.register_job(RegisterJob::new(job)).await.unwrap() });
    }
    futures::future::join_all(futs).await;
    eprintln!("jobs registered in {:?}", t.elapsed());
    let total = jobs * count as usize;
    let mut last = 0;
    api.wait_until(
        TableSet::of(&[Table::Allocs]),
        Duration::from_secs(600),
        |snap| {
            let n = snap.alloc_count();
            if n >= last + 100_000 {
                last = n;
                eprintln!("{:?} {n}", t.elapsed());
            }
            (n >= total).then_some(())
        },
    )
    .await?;
    let e = t.elapsed();
    eprintln!(
        "placed {total} in {e:?}: {:.0}/s",
        total as f64 / e.as_secs_f64()
    );
    agent.shutdown().await;
    Ok(())
}
