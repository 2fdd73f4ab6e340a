//! State store benchmarks: durable allocation upserts per second with one
//! and with 64 concurrent writers (group commit), `snapshot()` cost with
//! 1,000,000 allocations in the store, a plan of 1,000 placements onto
//! them, and resident memory per allocation.
//!
//! Run: `cargo bench -p herder --bench store -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{Command, PlanResults, StateStore, StoreOptions};
use herder::structs::{Job, NodeId, TriggeredBy};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Allocations per ApplyPlanResults command in the throughput benches.
const ALLOCS_PER_PLAN: usize = 100;
const CONCURRENT_WRITERS: usize = 64;
/// Commands each of the 64 writers submits per measured iteration (one
/// after the other), so the measurement covers a steady state rather than
/// 64 threads being woken on two cores.
const COMMANDS_PER_WRITER: usize = 8;

/// A store with one registered job and `nodes` nodes.
fn prepared_store(store: &StateStore, job_id: &str, nodes: usize) -> (Arc<Job>, Vec<NodeId>) {
    let job = fixtures::job("default", job_id, &[("g", 1000)]);
    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
    store
        .apply(Command::JobRegister {
            job: Arc::new(job.clone()),
            eval: Some(eval),
            enforce_index: None,
        })
        .expect("job registers");
    let node_ids = (0..nodes)
        .map(|i| {
            let node = fixtures::node(&format!("node-{i}"));
            let id = node.id;
            store
                .apply(Command::NodeRegister {
                    node: Arc::new(node),
                })
                .expect("node registers");
            id
        })
        .collect();
    let job = store
        .snapshot()
        .job("default", job_id)
        .cloned()
        .expect("job stored");
    (job, node_ids)
}

/// One plan placing `count` new allocations of `job` spread over `nodes`.
fn plan(job: &Arc<Job>, builder: &AllocBuilder, nodes: &[NodeId], count: usize) -> Command {
    let eval = herder::structs::new_id();
    let mut node_allocation: HashMap<NodeId, Vec<_>> = HashMap::new();
    for i in 0..count {
        let node = nodes[i % nodes.len()];
        node_allocation
            .entry(node)
            .or_default()
            .push(builder.build(i as u32, node, eval, 1));
    }
    Command::ApplyPlanResults(PlanResults {
        eval_id: eval,
        job: Some(job.clone()),
        node_allocation,
        updated_at: 1,
        ..Default::default()
    })
}

fn durable_throughput(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = StateStore::open(dir.path(), StoreOptions::default()).expect("store opens");
    let (job, nodes) = prepared_store(&store, "bench", 100);
    let builder = AllocBuilder::new(&job, "g");

    let mut group = c.benchmark_group("durable_alloc_upserts");
    group.throughput(Throughput::Elements(ALLOCS_PER_PLAN as u64));
    group.bench_function("1_writer_100_allocs_per_command", |b| {
        b.iter_batched(
            || plan(&job, &builder, &nodes, ALLOCS_PER_PLAN),
            |cmd| store.apply(cmd).expect("durable apply"),
            BatchSize::SmallInput,
        )
    });
    group.throughput(Throughput::Elements(
        (ALLOCS_PER_PLAN * CONCURRENT_WRITERS * COMMANDS_PER_WRITER) as u64,
    ));
    group.bench_function("64_writers_100_allocs_per_command", |b| {
        b.iter_custom(|iters| {
            // Plans are built before the clock starts: the bench measures
            // the store, not 64 threads building allocations on 2 cores.
            let plans: Vec<Vec<Command>> = (0..CONCURRENT_WRITERS)
                .map(|_| {
                    (0..iters as usize * COMMANDS_PER_WRITER)
                        .map(|_| plan(&job, &builder, &nodes, ALLOCS_PER_PLAN))
                        .collect()
                })
                .collect();
            // Threads are started before the clock too; a barrier releases
            // them together.
            let barrier = std::sync::Barrier::new(CONCURRENT_WRITERS + 1);
            std::thread::scope(|scope| {
                let workers: Vec<_> = plans
                    .into_iter()
                    .map(|commands| {
                        let (store, barrier) = (&store, &barrier);
                        scope.spawn(move || {
                            barrier.wait();
                            for cmd in commands {
                                store.apply(cmd).expect("durable apply");
                            }
                        })
                    })
                    .collect();
                barrier.wait();
                let start = Instant::now();
                for worker in workers {
                    worker.join().expect("writer thread");
                }
                start.elapsed()
            })
        })
    });
    group.finish();
    store.close();
}

/// Resident set size of this process in bytes (Linux).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn snapshot_with_a_million_allocs(c: &mut Criterion) {
    const JOBS: usize = 1_000;
    const ALLOCS_PER_JOB: usize = 1_000;
    const NODES: usize = 10_000;
    let store = StateStore::in_memory();
    let nodes: Vec<NodeId> = fixtures::register_nodes(&store, NODES);
    let before = resident_bytes();
    let started = Instant::now();
    for j in 0..JOBS {
        let job = fixtures::job(
            "default",
            &format!("job-{j}"),
            &[("g", ALLOCS_PER_JOB as i32)],
        );
        store
            .apply(Command::JobRegister {
                job: Arc::new(job.clone()),
                eval: Some(fixtures::eval(&job, TriggeredBy::JobRegister, 1)),
                enforce_index: None,
            })
            .expect("job registers");
        let builder = AllocBuilder::new(&job, "g");
        let offset = (j * 7) % NODES;
        let spread: Vec<NodeId> = nodes[offset..]
            .iter()
            .chain(&nodes[..offset])
            .copied()
            .collect();
        store
            .apply(plan(&Arc::new(job), &builder, &spread, ALLOCS_PER_JOB))
            .expect("plan applies");
    }
    let loaded_in = started.elapsed();
    let after = resident_bytes();
    let allocs = store.snapshot().alloc_count();
    assert_eq!(allocs, JOBS * ALLOCS_PER_JOB);
    if let (Some(before), Some(after)) = (before, after) {
        let per_alloc = after.saturating_sub(before) as f64 / allocs as f64;
        println!(
            "state with {allocs} allocations (+{JOBS} jobs, {NODES} nodes): \
             {:.0} MiB resident for the allocations, {per_alloc:.0} bytes per allocation; \
             applied in {loaded_in:.1?}",
            after.saturating_sub(before) as f64 / (1024.0 * 1024.0)
        );
    }

    let mut group = c.benchmark_group("snapshot");
    group.bench_function("1M_allocs", |b| b.iter(|| store.snapshot()));
    group.finish();

    // A plan of 1,000 new placements onto the million while a reader (a
    // worker) holds the state before it, which it then lets go of: the
    // copies the plan's writes make of the tables' shared leaves, and
    // their release by the last holder of the old state.
    let job = fixtures::job("default", "onto-1M", &[("g", 1_000)]);
    store
        .apply(Command::JobRegister {
            job: Arc::new(job.clone()),
            eval: None,
            enforce_index: None,
        })
        .expect("job registers");
    let job = Arc::new(job);
    let builder = AllocBuilder::new(&job, "g");
    let mut group = c.benchmark_group("plan_onto_1M_allocs");
    group.throughput(Throughput::Elements(1_000));
    group.bench_function("1000_placements_and_the_old_state_released", |b| {
        b.iter_batched(
            || plan(&job, &builder, &nodes, 1_000),
            |plan| {
                let held = store.snapshot();
                store.apply(plan).expect("plan applies");
                drop(held);
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
    // Keep the populated store alive until the bench ran against it.
    drop(store);
}

/// With `HERDER_BENCH_DURABLE_1M=<dir>`: when `<dir>` holds no store
/// yet, writes 1,000,000 allocations through a store there (4 concurrent
/// writers, 1,000 allocations per command) and prints the rate and the
/// resident memory per allocation; when it already holds one, measures a
/// restart instead: how long opening takes and the resident memory per
/// allocation of the reopened store, in this fresh process. Off by
/// default: it writes about a gigabyte and takes minutes.
fn durable_million_and_restart(_: &mut Criterion) {
    let Ok(dir) = std::env::var("HERDER_BENCH_DURABLE_1M") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let before = resident_bytes();
    if dir.join("db").exists() {
        let started = Instant::now();
        let store = StateStore::open(&dir, StoreOptions::default()).expect("store reopens");
        let reopened_in = started.elapsed();
        let allocs = store.snapshot().alloc_count();
        if let (Some(before), Some(after)) = (before, resident_bytes()) {
            println!(
                "restart with {allocs} allocations: opened in {reopened_in:.1?}, \
                 {:.0} bytes resident per allocation (state + sled)",
                after.saturating_sub(before) as f64 / allocs.max(1) as f64
            );
        }
        return;
    }
    const JOBS: usize = 1_000;
    const ALLOCS_PER_JOB: usize = 1_000;
    let store = StateStore::open(&dir, StoreOptions::default()).expect("store opens");
    let (_, nodes) = prepared_store(&store, "seed", 10_000);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for writer in 0..4 {
            let store = &store;
            let nodes = &nodes;
            scope.spawn(move || {
                for j in (writer..JOBS).step_by(4) {
                    let job = fixtures::job("default", &format!("job-{j}"), &[("g", 1000)]);
                    store
                        .apply(Command::JobRegister {
                            job: Arc::new(job.clone()),
                            eval: Some(fixtures::eval(&job, TriggeredBy::JobRegister, 1)),
                            enforce_index: None,
                        })
                        .expect("job registers");
                    let builder = AllocBuilder::new(&job, "g");
                    store
                        .apply(plan(&Arc::new(job), &builder, nodes, ALLOCS_PER_JOB))
                        .expect("plan applies");
                }
            });
        }
    });
    let written_in = started.elapsed();
    let allocs = store.snapshot().alloc_count();
    if let (Some(before), Some(after)) = (before, resident_bytes()) {
        println!(
            "durable store with {allocs} allocations: written in {written_in:.1?} \
             ({:.0} allocs/s), {:.0} bytes resident per allocation after writing \
             (state + sled + allocator garbage of the writes)",
            allocs as f64 / written_in.as_secs_f64(),
            after.saturating_sub(before) as f64 / allocs as f64
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(1));
    // The memory measurements come first, while the heap is fresh (memory
    // freed by an earlier bench would be reused and hide real growth).
    targets = durable_million_and_restart, snapshot_with_a_million_allocs, durable_throughput
}
criterion_main!(benches);
