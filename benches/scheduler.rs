//! Scheduler benchmarks in two shapes (see NOMAD_REFERENCE.md):
//!
//! - the peer shape: N identical ready nodes and one service, batch or
//!   system job of M small allocations, one registration evaluation; timed
//!   from taking the snapshot to the evaluation being processed. Plain
//!   variants hand the plan to a planner that commits it without writing it
//!   anywhere ("scheduling only"); "+apply" variants write the placements
//!   into the in-memory state as well;
//! - Nomad's own grid (`scheduler/benchmarks`): two datacenters, nodes with
//!   a `rack` meta over a number of racks, one service job of 300-1,200
//!   large allocations, with and without `spread` on `${meta.rack}`.
//!
//! The scheduler is single-threaded, so the benches measure the CPU time of
//! the benchmarking thread (`/proc/thread-self/schedstat`): on a shared
//! machine wall time mostly measures the other tenants. Where that file is
//! missing the wall clock is used.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, BatchSize, BenchmarkId, Criterion};
use herder::scheduler::{
    new_scheduler, Harness, HarnessState, Planner, PlannerError, Scheduler, State,
};
use herder::state::{Command, PlanResults, StateSnapshot};
use herder::structs::{
    Constraint, DriverInfo, Evaluation, Job, JobType, Node, NodeStatus, Plan, PlanResult,
    Resources, Spread, Task, TaskGroup, TriggeredBy,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NOW: i64 = 1_700_000_000_000_000_000;

/// CPU time of the calling thread.
struct ThreadCpu;

static WALL: WallTime = WallTime;

/// Nanoseconds the thread has run, or wall-clock nanoseconds since the
/// first call if the kernel does not say.
fn thread_cpu_nanos() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| START.get_or_init(Instant::now).elapsed().as_nanos() as u64)
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = Duration;

    fn start(&self) -> u64 {
        thread_cpu_nanos()
    }
    fn end(&self, start: u64) -> Duration {
        Duration::from_nanos(thread_cpu_nanos().saturating_sub(start))
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        WALL.formatter()
    }
}

/// A planner that commits every plan in full without storing it.
#[derive(Default)]
struct CommitAll {
    /// Allocations placed by the plans committed so far.
    placed: usize,
    /// When set, a digest of every placement (name, node, metrics with
    /// score metadata) is folded in, to compare two builds' decisions.
    digest: Option<u64>,
}

impl CommitAll {
    fn fold_digest(&mut self, plan: &Plan) {
        let Some(digest) = self.digest.as_mut() else {
            return;
        };
        let mut allocs: Vec<_> = plan.node_allocation.values().flatten().collect();
        // By name, then node: a system job's allocations share one name.
        allocs.sort_by(|a, b| (&a.name, a.node_id).cmp(&(&b.name, b.node_id)));
        for a in allocs {
            let line = format!("{} {} {:?}\n", a.name, a.node_id, a.metrics);
            for byte in line.bytes() {
                // FNV-1a
                *digest = (*digest ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
}

/// The answer to a plan committed whole at `alloc_index`.
fn committed_whole(plan: Plan, alloc_index: u64) -> PlanResult {
    PlanResult {
        node_allocation: plan.node_allocation,
        node_update: plan.node_update,
        node_preemptions: plan.node_preemptions,
        alloc_index,
        ..Default::default()
    }
}

impl Planner for CommitAll {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Arc<dyn State>>), PlannerError> {
        self.placed += plan.node_allocation.values().map(Vec::len).sum::<usize>();
        self.fold_digest(&plan);
        let index = plan.snapshot_index + 1;
        Ok((committed_whole(plan, index), None))
    }
    fn update_eval(&mut self, _: Evaluation) -> Result<(), PlannerError> {
        Ok(())
    }
    fn create_eval(&mut self, _: Evaluation) -> Result<(), PlannerError> {
        Ok(())
    }
    fn reblock_eval(&mut self, _: Evaluation) -> Result<(), PlannerError> {
        Ok(())
    }
}

fn peer_node(i: usize) -> Node {
    let mut n = Node {
        id: herder::structs::new_id(),
        name: format!("node-{i}").into(),
        datacenter: "dc1".into(),
        node_class: "linux-medium-pci".into(),
        node_pool: "default".into(),
        status: NodeStatus::Ready,
        ..Default::default()
    };
    n.node_resources.cpu.cpu_shares = 4000;
    n.node_resources.memory.memory_mb = 8192;
    n.node_resources.disk.disk_mb = 100 * 1024;
    n.reserved_resources.cpu.cpu_shares = 100;
    n.reserved_resources.memory.memory_mb = 256;
    n.reserved_resources.disk.disk_mb = 4 * 1024;
    n.attributes.insert("kernel.name".into(), "linux".into());
    n.attributes.insert("arch".into(), "x86".into());
    for d in ["exec", "mock_driver"] {
        n.drivers.insert(
            d.into(),
            DriverInfo {
                detected: true,
                healthy: true,
                ..Default::default()
            },
        );
    }
    n
}

fn peer_job(job_type: JobType, count: i32) -> Job {
    let mut j = Job {
        id: format!("bench-{job_type}"),
        job_type,
        datacenters: vec!["dc1".into()],
        constraints: vec![Constraint::new("${attr.kernel.name}", "=", "linux")],
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count,
            tasks: vec![Task {
                name: "web".into(),
                driver: "exec".into(),
                resources: Resources {
                    cpu: 10,
                    memory_mb: 16,
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    j.canonicalize();
    if let Some(d) = j.task_groups[0].ephemeral_disk.as_mut() {
        d.size_mb = 10;
    }
    j
}

fn state_with(nodes: impl IntoIterator<Item = Node>, job: Job) -> (HarnessState, Arc<Job>) {
    let mut state = HarnessState::new();
    for n in nodes {
        state.upsert_node(n);
    }
    let job = state.upsert_job(job);
    (state, job)
}

/// Times snapshot + scheduler construction + processing of one
/// registration evaluation, over a fresh copy of `base` each iteration.
fn bench_eval(
    c: &mut Criterion<ThreadCpu>,
    group: &str,
    id: BenchmarkId,
    base: &HarnessState,
    job: &Job,
    apply: bool,
) {
    let eval = Evaluation::for_job(job, TriggeredBy::JobRegister, NOW);
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    g.bench_function(id, |b| {
        b.iter_batched(
            || base.clone(),
            |state| {
                if apply {
                    let mut h = Harness::with_state(state);
                    h.now = NOW;
                    h.record_plans = false;
                    h.process(&eval).expect("process");
                    // Returned so it is dropped after the timer stops.
                    (Some(h), None)
                } else {
                    let snapshot: Arc<dyn State> = Arc::new(state);
                    // A tiny planner leaked for 'static: nearly free, and it
                    // lets the scheduler (holding the plan result) be
                    // returned, so dropping the result is not timed (Nomad's
                    // garbage collector frees plans outside the call too).
                    let planner: &'static mut CommitAll = Box::leak(Box::new(CommitAll::default()));
                    let mut s =
                        new_scheduler(&eval.eval_type, snapshot, planner, NOW).expect("scheduler");
                    s.process(&eval).expect("process");
                    (None::<Harness>, Some(s))
                }
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn peer(c: &mut Criterion<ThreadCpu>) {
    // (type, nodes, allocations): every type at 1K-10K nodes and 1K-10K
    // allocations (issue 23 added the shapes the first table lacked).
    let cases: &[(JobType, usize, i32)] = &[
        (JobType::Service, 1_000, 1_000),
        (JobType::Service, 5_000, 1_000),
        (JobType::Service, 10_000, 1_000),
        (JobType::Service, 1_000, 10_000),
        (JobType::Service, 5_000, 10_000),
        (JobType::Service, 10_000, 10_000),
        (JobType::Batch, 1_000, 1_000),
        (JobType::Batch, 5_000, 1_000),
        (JobType::Batch, 10_000, 1_000),
        (JobType::Batch, 1_000, 10_000),
        (JobType::Batch, 5_000, 10_000),
        (JobType::Batch, 10_000, 10_000),
        (JobType::System, 1_000, 1),
        (JobType::System, 5_000, 1),
        (JobType::System, 10_000, 1),
        (JobType::SysBatch, 1_000, 1),
        (JobType::SysBatch, 5_000, 1),
        (JobType::SysBatch, 10_000, 1),
    ];
    for (job_type, n, m) in cases {
        let (state, job) = state_with((0..*n).map(peer_node), peer_job(job_type.clone(), *m));
        let m_label = if job_type.is_system_like() {
            *n as i32
        } else {
            *m
        };
        for apply in [false, true] {
            let name = format!("{job_type}{}", if apply { "+apply" } else { "" });
            let id = BenchmarkId::new(name, format!("N={n}/M={m_label}"));
            bench_eval(c, "peer", id, &state, &job, apply);
        }
    }
}

/// A node of Nomad's benchmark grid.
fn grid_node(i: usize, racks: usize) -> Node {
    let mut n = peer_node(i);
    n.datacenter = if i % 2 == 0 { "dc1" } else { "dc2" }.into();
    n.node_resources.cpu.cpu_shares = 32_000;
    n.node_resources.memory.memory_mb = 32_000;
    n.node_resources.disk.disk_mb = 100 * 1024;
    n.reserved_resources = Default::default();
    n.meta
        .insert("rack".into(), format!("r{}", i % racks).into());
    n
}

fn grid_job(count: i32, spread: bool) -> Job {
    let mut j = peer_job(JobType::Service, count);
    j.datacenters = vec!["dc1".into(), "dc2".into()];
    j.constraints.clear();
    let t = &mut j.task_groups[0].tasks[0];
    t.resources.cpu = 6_000;
    t.resources.memory_mb = 6_000;
    if spread {
        j.task_groups[0].spreads.push(Spread {
            attribute: "${meta.rack}".into(),
            weight: 100,
            spread_target: vec![],
        });
    }
    j
}

fn nomad_grid(c: &mut Criterion<ThreadCpu>) {
    for nodes in [1_000usize, 5_000, 10_000] {
        for racks in [10usize, 75] {
            for count in [300i32, 1_200] {
                for spread in [false, true] {
                    let (state, job) = state_with(
                        (0..nodes).map(|i| grid_node(i, racks)),
                        grid_job(count, spread),
                    );
                    let name = if spread { "spread" } else { "no-spread" };
                    let id = BenchmarkId::new(
                        name,
                        format!("nodes={nodes}/racks={racks}/allocs={count}"),
                    );
                    bench_eval(c, "nomad-grid", id, &state, &job, false);
                }
            }
        }
    }
}

fn cpu_criterion() -> Criterion<ThreadCpu> {
    Criterion::default().with_measurement(ThreadCpu)
}

criterion_group! {
    name = benches;
    config = cpu_criterion();
    targets = peer, nomad_grid
}

/// Processes one registration evaluation of the grid job and nothing else,
/// for instruction counting under callgrind (repeatable on a busy machine,
/// unlike timings):
///
/// ```text
/// HERDER_SCHED_ONCE=spread valgrind --tool=callgrind \
///     --toggle-collect='*process_once*' target/release/deps/scheduler-<hash>
/// ```
///
/// The value is `spread` or `no-spread`, optionally followed by
/// `/nodes/racks/allocs` (default `10000/20/1000`, the cluster
/// benchmark's spread jobs), or `peer/nodes/allocs` (the peer shape's
/// service job, default `10000/10000`; `batch/nodes/allocs` its batch
/// job, `system/nodes` and `sysbatch/nodes` its system and sysbatch jobs); `store/` before a grid case counts
/// a later evaluation over the store's snapshot instead (see
/// [`run_once_on_store`]). Node and evaluation IDs are fixed, so with
/// `HERDER_SCHED_DIGEST=1` the printed digest of every placement and its
/// metrics must be equal for two builds that decide the same.
fn run_once(spec: &str) {
    if let Some(rest) = spec.strip_prefix("store/") {
        run_once_on_store(spec, rest);
        return;
    }
    let mut parts = spec.split('/');
    // `peer/<nodes>/<allocs>`: the peer shape's service job instead;
    // `batch/<nodes>/<allocs>`, `system/<nodes>`, `sysbatch/<nodes>`: the
    // peer shape's other job types.
    let (spread, peer) = match parts.next() {
        Some("spread") => (true, None),
        Some("no-spread") => (false, None),
        Some("peer") => (false, Some(JobType::Service)),
        Some("batch") => (false, Some(JobType::Batch)),
        Some("system") => (false, Some(JobType::System)),
        Some("sysbatch") => (false, Some(JobType::SysBatch)),
        other => panic!("HERDER_SCHED_ONCE: unknown case {other:?}"),
    };
    let system = peer.as_ref().is_some_and(JobType::is_system_like);
    let mut next = |default: usize| {
        parts
            .next()
            .map_or(default, |p| p.parse().expect("HERDER_SCHED_ONCE: number"))
    };
    let (nodes, racks) = (next(10_000), if peer.is_some() { 1 } else { next(20) });
    let count = if system {
        1
    } else {
        next(if peer.is_some() { 10_000 } else { 1_000 })
    };
    let is_peer = peer.is_some();
    let fixed_node = |i: usize| {
        let mut n = if is_peer {
            peer_node(i)
        } else {
            grid_node(i, racks)
        };
        n.id = uuid::Uuid::from_u128(i as u128 + 1);
        n
    };
    let job = match peer {
        Some(job_type) => peer_job(job_type, count as i32),
        None => grid_job(count as i32, spread),
    };
    let (state, job) = state_with((0..nodes).map(fixed_node), job);
    let mut planner = CommitAll {
        digest: std::env::var_os("HERDER_SCHED_DIGEST").map(|_| 0xcbf2_9ce4_8422_2325),
        ..Default::default()
    };
    let scheduler = process_once(Arc::new(state), &job, &mut planner, 0x5eed);
    drop(scheduler);
    println!("{spec}: {} allocations placed", planner.placed);
    if let Some(digest) = planner.digest {
        println!("{spec}: placement digest {digest:016x}");
    }
}

/// The `store/<case>` variant of [`run_once`]: the evaluation the server's
/// workers see in the middle of a run. The state is the store's snapshot
/// (`StateSnapshot`), every node already runs an allocation (a system job),
/// and an evaluation of a first grid job ran and was committed on it
/// before the counted one (of a second grid job), so anything derived
/// once per snapshot and shared by evaluations is already there.
fn run_once_on_store(spec: &str, case: &str) {
    let mut parts = case.split('/');
    let spread = match parts.next() {
        Some("spread") => true,
        Some("no-spread") => false,
        other => panic!("HERDER_SCHED_ONCE: unknown case {other:?}"),
    };
    let mut next = |default: usize| {
        parts
            .next()
            .map_or(default, |p| p.parse().expect("HERDER_SCHED_ONCE: number"))
    };
    let (nodes, racks, count) = (next(10_000), next(20), next(1_000));
    let mut store = StoreCommit::default();
    for i in 0..nodes {
        let mut node = grid_node(i, racks);
        node.id = uuid::Uuid::from_u128(i as u128 + 1);
        node.compute_class();
        store.apply(Command::NodeRegister {
            node: Arc::new(node),
        });
    }
    let mut filler = peer_job(JobType::System, 1);
    filler.id = "filler".into();
    filler.datacenters = vec!["dc1".into(), "dc2".into()];
    filler.constraints.clear();
    let mut first = grid_job(count as i32, spread);
    first.id = "first".into();
    let mut second = grid_job(count as i32, spread);
    second.id = "second".into();
    for (i, job) in [filler, first, second].into_iter().enumerate() {
        let job = Arc::new(job);
        store.apply(Command::JobRegister {
            job: job.clone(),
            eval: None,
            enforce_index: None,
        });
        let state: Arc<dyn State> = Arc::new(store.snap.clone());
        if i == 2 {
            drop(process_once(state, &job, &mut store, 0x5eed));
        } else {
            // Not through `process_once`, so not counted.
            let mut eval = Evaluation::for_job(&job, TriggeredBy::JobRegister, NOW);
            eval.id = uuid::Uuid::from_u128(i as u128 + 1);
            new_scheduler(&eval.eval_type, state, &mut store, NOW)
                .expect("scheduler")
                .process(&eval)
                .expect("process");
        }
        store.commit();
    }
    println!("{spec}: {} allocations placed", store.placed);
}

/// A planner that commits every plan in full into a store snapshot,
/// writing them once the evaluation is done (so that callgrind counts the
/// scheduler's work only).
#[derive(Default)]
struct StoreCommit {
    snap: StateSnapshot,
    index: u64,
    placed: usize,
    pending: Vec<PlanResults>,
}

impl StoreCommit {
    fn apply(&mut self, cmd: Command) {
        self.index += 1;
        self.snap.apply(self.index, &cmd).expect("command applies");
    }

    fn commit(&mut self) {
        for plan in std::mem::take(&mut self.pending) {
            self.apply(Command::ApplyPlanResults(plan));
        }
    }
}

impl Planner for StoreCommit {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Arc<dyn State>>), PlannerError> {
        self.placed += plan.node_allocation.values().map(Vec::len).sum::<usize>();
        self.pending.push(PlanResults {
            eval_id: plan.eval_id,
            job: plan.job.clone(),
            node_update: plan.node_update.clone(),
            node_allocation: plan.node_allocation.clone(),
            node_preemptions: plan.node_preemptions.clone(),
            evals: vec![],
            updated_at: NOW,
            deployment: plan.deployment.clone(),
            deployment_updates: plan.deployment_updates.clone(),
        });
        let index = self.index + self.pending.len() as u64;
        Ok((committed_whole(plan, index), None))
    }
    fn update_eval(&mut self, _: Evaluation) -> Result<(), PlannerError> {
        Ok(())
    }
    fn create_eval(&mut self, _: Evaluation) -> Result<(), PlannerError> {
        Ok(())
    }
    fn reblock_eval(&mut self, _: Evaluation) -> Result<(), PlannerError> {
        Ok(())
    }
}

/// One evaluation through the scheduler: the part callgrind should count.
/// The plan is committed without being written anywhere, and the
/// scheduler (holding the snapshot and the plan result) is returned so
/// that freeing them is not counted.
#[inline(never)]
fn process_once<'p>(
    snapshot: Arc<dyn State>,
    job: &Job,
    planner: &'p mut dyn Planner,
    eval_id: u128,
) -> Box<dyn Scheduler + 'p> {
    let mut eval = Evaluation::for_job(job, TriggeredBy::JobRegister, NOW);
    eval.id = uuid::Uuid::from_u128(eval_id);
    let mut s = new_scheduler(&eval.eval_type, snapshot, planner, NOW).expect("scheduler");
    s.process(&eval).expect("process");
    s
}

fn main() {
    if let Ok(spec) = std::env::var("HERDER_SCHED_ONCE") {
        run_once(&spec);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
