//! The web UI on a large cluster: what a browser opening `/ui/jobs` waits
//! for (the page, then the `/v1/jobs` list it asks for) with 10,000 nodes,
//! 1,000 jobs and 100,000 allocations in the store, and the same for the
//! clients list (`/ui/nodes`, then `/v1/nodes?usage=true`, every node with
//! its allocated resources). The target for the jobs list is 200 ms; the
//! figures go in `docs/PERFORMANCE.md`.
//!
//! Run: `cargo bench -p herder-tests --bench ui_jobs_page -- --warm-up-time 1 --measurement-time 5`

use criterion::{criterion_group, criterion_main, Criterion};
use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{Command, PlanResults};
use herder::structs::new_id;
use herder_tests::{server_config, temp_dir, TestAgent};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const JOBS: usize = 1_000;
const ALLOCS_PER_JOB: usize = 100;
const NODES: usize = 10_000;

/// Writes the jobs and their allocations straight into the agent's store
/// (no evaluation, so no scheduler runs while the bench measures).
fn fill(agent: &TestAgent) {
    let store = &agent.server.as_ref().expect("a server").store;
    let nodes = fixtures::register_nodes(store, NODES);
    for j in 0..JOBS {
        let job = fixtures::job(
            "default",
            &format!("job-{j:04}"),
            &[("g", ALLOCS_PER_JOB as i32)],
        );
        store
            .apply(Command::JobRegister {
                job: Arc::new(job),
                eval: None,
                enforce_index: None,
            })
            .expect("job registers");
        let job = store
            .snapshot()
            .job("default", &format!("job-{j:04}"))
            .cloned()
            .expect("job stored");
        let builder = AllocBuilder::new(&job, "g");
        let eval = new_id();
        let mut node_allocation: HashMap<_, Vec<_>> = HashMap::new();
        for i in 0..ALLOCS_PER_JOB {
            // Each job's allocations on 100 different nodes, all nodes used.
            let node = nodes[(j * ALLOCS_PER_JOB + i) % NODES];
            node_allocation
                .entry(node)
                .or_default()
                .push(builder.build(i as u32, node, eval, 1));
        }
        store
            .apply(Command::ApplyPlanResults(PlanResults {
                eval_id: eval,
                job: Some(job),
                node_allocation,
                updated_at: 1,
                ..Default::default()
            }))
            .expect("allocations placed");
    }
    let snapshot = store.snapshot();
    assert_eq!(snapshot.alloc_count(), JOBS * ALLOCS_PER_JOB);
    assert_eq!(snapshot.nodes().count(), NODES);
}

fn get(url: &str) -> usize {
    let answer = ureq::get(url)
        .timeout(Duration::from_secs(30))
        .call()
        .expect("answered");
    answer.into_string().expect("a body").len()
}

fn ui_pages(c: &mut Criterion) {
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    fill(&agent);
    let page = agent.url("/ui/jobs");
    let list = agent.url("/v1/jobs?namespace=default");
    assert!(get(&page) > 0 && get(&list) > JOBS * 100);
    c.bench_function(
        "ui jobs page + /v1/jobs, 10,000 nodes, 1,000 jobs, 100,000 allocations",
        |b| b.iter(|| get(&page) + get(&list)),
    );
    let page = agent.url("/ui/nodes");
    let list = agent.url("/v1/nodes?usage=true");
    assert!(get(&list) > NODES * 100);
    c.bench_function(
        "ui clients page + /v1/nodes?usage=true, 10,000 nodes, 100,000 allocations",
        |b| b.iter(|| get(&page) + get(&list)),
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = ui_pages
}
criterion_main!(benches);
