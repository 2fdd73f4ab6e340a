//! The cluster load generator behind `herder bench cluster`: the whole
//! pipeline (HTTP -> durable state -> broker -> workers -> plan applier ->
//! durable state) driven at cluster scale, measured from outside as a user
//! would see it.
//!
//! It starts a `herder agent -server` child process on its own data dir
//! (or targets a running one), registers simulated nodes (`herder_sim`),
//! submits jobs over HTTP from several connections, follows the server's
//! allocation count until everything is placed, then reads evaluation
//! latencies and the server's plan and worker metrics, checks that no node
//! holds more than it has, and restarts the server on the data dir to time
//! the restart and check that every placement survived it.
//!
//! By default the simulated nodes register and heartbeat but do not run
//! their allocations (`watch_allocs: false`): the figure is placement
//! throughput, and a million client status reports would be a different
//! benchmark. `-watch-allocs` turns them into clients that follow their
//! allocations with a blocking query each and run them, so that the
//! server's memory includes a connection per node, as a real fleet's does.

pub mod observe;
pub mod probe;
pub mod server_process;
pub mod workload;

use herder_api_client::{ApiClient, ClientConfig};
use herder_sim::{SimConfig, SimNodes};
use observe::{MetricsView, Percentiles};
use probe::Probe;
use serde::Serialize;
use server_process::ServerProcess;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use workload::ClusterShape;

/// Which jobs a placement run submits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mix {
    /// `workload::mixed_job`: a fifth each unconstrained, kernel name,
    /// node class, spread over racks, one datacenter.
    #[default]
    Mixed,
    /// `workload::user_job`: a quarter spread over racks with a
    /// kernel-version constraint, the rest unconstrained.
    User,
}

/// How the placement loop follows progress.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgressSource {
    /// The server's allocation-count gauge in `/v1/metrics`.
    #[default]
    Metrics,
    /// Every job's summary in `/v1/jobs`, as a user's tooling reads it.
    Summaries,
}

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// J jobs x C allocations of the mixed workload.
    Placement,
    /// One system job onto every node.
    System,
}

#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub scenario: Scenario,
    pub nodes: usize,
    pub jobs: usize,
    pub count: usize,
    pub shape: ClusterShape,
    pub node_cpu_mhz: i64,
    pub node_memory_mb: i64,
    /// Concurrent HTTP connections submitting jobs.
    pub submitters: usize,
    /// Jobs per second in all (0: unpaced).
    pub rate: u32,
    /// A running server to target instead of starting one (no restart and
    /// no RSS figures then).
    pub address: Option<String>,
    /// Where the started server keeps its state (a new temporary
    /// directory when `None`).
    pub data_dir: Option<PathBuf>,
    /// The `herder` binary to start the server from.
    pub binary: PathBuf,
    /// Threads of the simulated nodes.
    pub sim_threads: usize,
    /// Longest wait for placements.
    pub timeout: Duration,
    /// Read every allocation back and check per-node capacity (costly at
    /// a million allocations).
    pub verify: bool,
    /// Restart the started server on its data dir and check what survived.
    pub restart: bool,
    /// Percent of the nodes that fail (stop heartbeating) once half the
    /// allocations are placed and come back once the server has marked
    /// them down (0: none).
    pub churn_percent: u32,
    /// Submit one small job once the burst is registered and time its
    /// placement (`probe`).
    pub probe: bool,
    /// Nodes follow their allocations (a blocking query each, held open
    /// as a real client's) and run them with the mock driver.
    pub watch_allocs: bool,
    pub mix: Mix,
    pub progress: ProgressSource,
}

impl BenchConfig {
    /// A named size: `full` (10,000 nodes, 1,000 x 1,000), `medium`
    /// (1,000 nodes, 100 x 1,000), `ci` (500 nodes, 100 x 200).
    pub fn preset(name: &str) -> Option<(usize, usize, usize)> {
        match name {
            "full" => Some((10_000, 1_000, 1_000)),
            "medium" => Some((1_000, 100, 1_000)),
            "ci" => Some((500, 100, 200)),
            _ => None,
        }
    }

    fn expected_allocs(&self) -> usize {
        match self.scenario {
            Scenario::Placement => self.jobs * self.count + usize::from(self.probe),
            Scenario::System => self.nodes,
        }
    }

    fn probing(&self) -> bool {
        self.probe && self.scenario == Scenario::Placement
    }
}

/// Everything measured, as printed (and as `-json`).
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub scenario: Option<Scenario>,
    pub nodes: usize,
    /// Whether the nodes followed and ran their allocations (`-watch-allocs`).
    pub nodes_watch_allocs: bool,
    pub jobs: usize,
    pub expected_allocs: usize,
    pub node_registration_secs: f64,
    pub jobs_registered: usize,
    pub job_register_secs: f64,
    pub jobs_per_sec: f64,
    pub placed_allocs: u64,
    pub all_placed: bool,
    /// From the first job sent to the last allocation durable.
    pub placement_secs: f64,
    pub placements_per_sec: f64,
    pub eval_latency_ms: Percentiles,
    pub evals_complete: usize,
    pub evals_blocked: usize,
    pub evals_failed: usize,
    pub plans_applied: f64,
    pub plans_partial: f64,
    pub partial_commit_rate: f64,
    /// Placements refused with their nodes by partial commits (scheduled
    /// again).
    pub refused_placements: f64,
    pub plan_queue_depth_max: f64,
    /// Scheduling alone, summed over evaluations (plan submission and
    /// its wait excluded).
    pub scheduler_busy_secs: f64,
    /// Time workers spent submitting plans and waiting for them.
    pub plan_submit_secs: f64,
    /// Scheduler time over (placement time x CPUs).
    pub worker_utilisation: f64,
    /// The longest evaluation, plan submission included.
    pub scheduler_max_ms: f64,
    pub server_cpu_secs: Option<f64>,
    pub server_peak_rss_mib: Option<f64>,
    pub overcommitted_nodes: Option<usize>,
    /// Nodes that failed and came back during the run.
    pub churned_nodes: usize,
    /// Allocations the server marked lost on failed nodes.
    pub lost_allocs: u64,
    pub restart_secs: Option<f64>,
    /// Rows in the allocations table when the run ended (lost ones too).
    pub allocs_before_restart: u64,
    pub allocs_after_restart: Option<u64>,
    /// The small job submitted behind the burst (`-probe`).
    pub probe: Option<probe::ProbeReport>,
    /// The probe's evaluation, created -> complete (server clock).
    pub probe_eval_ms: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Server(#[from] server_process::ServerProcessError),
    #[error("simulated nodes: {0}")]
    Sim(#[from] herder_sim::SimError),
    #[error("API: {0}")]
    Api(#[from] herder_api_client::ApiError),
    #[error("{0}")]
    Setup(String),
}

/// Runs the benchmark; `progress` gets one-line updates for a terminal.
pub fn run(config: &BenchConfig, progress: &dyn Fn(&str)) -> Result<Report, BenchError> {
    let temp;
    let data_dir = match &config.data_dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("herder-bench-")
                .tempdir()
                .map_err(|e| BenchError::Setup(format!("temporary data dir: {e}")))?;
            temp.path().to_path_buf()
        }
    };
    let env = server_env(config);
    let server = match &config.address {
        Some(_) => None,
        None => Some(ServerProcess::start(&config.binary, &data_dir, &env)?),
    };
    let address = match (&server, &config.address) {
        (Some(s), _) => s.address.clone(),
        (None, Some(a)) => a.clone(),
        (None, None) => unreachable!("either a started server or an address"),
    };
    let client = api_client(&address)?;
    let mut report = Report {
        scenario: Some(config.scenario),
        nodes: config.nodes,
        nodes_watch_allocs: config.watch_allocs,
        jobs: config.jobs,
        expected_allocs: config.expected_allocs(),
        ..Report::default()
    };
    let (sim, mut churn) = register_nodes(config, &address, &client, &mut report, progress)?;
    let base = MetricsView::read(&client)?;
    let bodies = job_bodies(config);
    let placed = place(
        config,
        &client,
        &bodies,
        &base,
        &mut churn,
        &mut report,
        progress,
    )?;
    report.placed_allocs = placed;
    read_evaluations(&client, &mut report)?;
    read_metrics(&client, &base, &mut report)?;
    report.allocs_before_restart = settled_alloc_count(&client, config.timeout)?;
    if config.verify {
        report.overcommitted_nodes = Some(observe::overcommitted_nodes(
            &client,
            config.node_cpu_mhz,
            config.node_memory_mb,
        )?);
    }
    // The server stops before the nodes do: a simulated node that stopped
    // heartbeating first could miss its TTL (short under churn) and be
    // marked down, its allocations replaced after the count was read.
    let stop_nodes = move || {
        sim.stop();
        drop(churn);
    };
    if let Some(server) = server {
        report.server_cpu_secs = server.cpu_time().map(|d| d.as_secs_f64());
        report.server_peak_rss_mib = server.peak_rss_bytes().map(|b| b as f64 / 1048576.0);
        if config.restart {
            progress("restarting the server on its data dir");
            server.stop();
            let again = ServerProcess::start(&config.binary, &data_dir, &env)?;
            report.restart_secs = Some(again.start_time.as_secs_f64());
            let view = MetricsView::read(&api_client(&again.address)?)?;
            report.allocs_after_restart = Some(view.gauge("herder_state_allocs") as u64);
            stop_nodes();
            again.stop();
        } else {
            server.stop();
            stop_nodes();
        }
    } else {
        stop_nodes();
    }
    Ok(report)
}

/// The allocation count once the server has nothing left to schedule.
///
/// The placement loop stops as soon as enough allocations run, but with
/// churn the evaluations of returning nodes may still be placing: reading
/// the count then and comparing it with the count after a restart would
/// blame the restart for placements that were merely late. So wait until
/// the broker and the plan queue are empty and the count has stayed the
/// same over two reads of the metrics (sampled once a second), within
/// `timeout`; past it, answer the count as it is.
fn settled_alloc_count(client: &ApiClient, timeout: Duration) -> Result<u64, BenchError> {
    const BUSY: [&str; 4] = [
        "herder_broker_total_ready",
        "herder_broker_total_unacked",
        "herder_broker_total_pending",
        "herder_plan_queue_depth",
    ];
    let deadline = Instant::now() + timeout;
    let mut last: Option<u64> = None;
    loop {
        let view = MetricsView::read(client)?;
        let count = view.gauge("herder_state_allocs") as u64;
        let idle = BUSY.iter().all(|name| view.gauge(name) == 0.0);
        if (idle && last == Some(count)) || Instant::now() >= deadline {
            return Ok(count);
        }
        last = idle.then_some(count);
        std::thread::sleep(Duration::from_millis(1100));
    }
}

fn api_client(address: &str) -> Result<ApiClient, BenchError> {
    Ok(ApiClient::new(ClientConfig {
        address: address.to_string(),
        token: None,
    })?)
}

/// Server settings of a run: with churn, short heartbeats so failed nodes
/// are noticed in seconds, at a heartbeat rate the server can carry.
fn server_env(config: &BenchConfig) -> Vec<(String, String)> {
    if config.churn_percent == 0 {
        return Vec::new();
    }
    let rate = (config.nodes / 5).max(50);
    vec![
        ("HERDER_SERVER__MIN_HEARTBEAT_TTL".into(), "5s".into()),
        ("HERDER_SERVER__HEARTBEAT_GRACE".into(), "2s".into()),
        (
            "HERDER_SERVER__MAX_HEARTBEATS_PER_SECOND".into(),
            rate.to_string(),
        ),
    ]
}

fn sim_config(config: &BenchConfig, address: &str, count: usize, prefix: &str) -> SimConfig {
    SimConfig {
        count,
        servers: vec![address.to_string()],
        datacenters: config.shape.datacenters.clone(),
        classes: config.shape.classes.clone(),
        racks: config.shape.racks,
        cpu_mhz: config.node_cpu_mhz,
        memory_mb: config.node_memory_mb,
        name_prefix: prefix.into(),
        threads: config.sim_threads,
        watch_allocs: config.watch_allocs,
        ..SimConfig::default()
    }
}

/// Starts the simulated nodes (the churning ones apart) and waits until
/// the server holds them all ready.
fn register_nodes(
    config: &BenchConfig,
    address: &str,
    client: &ApiClient,
    report: &mut Report,
    progress: &dyn Fn(&str),
) -> Result<(SimNodes, Churn), BenchError> {
    let started = Instant::now();
    let churning = config.nodes * config.churn_percent as usize / 100;
    let sim = SimNodes::start(sim_config(
        config,
        address,
        config.nodes - churning,
        "bench",
    ))?;
    let churn = Churn::start(sim_config(config, address, churning, "churn"))?;
    wait_for_ready(client, config.nodes, started + config.timeout, progress)?;
    report.node_registration_secs = started.elapsed().as_secs_f64();
    Ok((sim, churn))
}

fn wait_for_ready(
    client: &ApiClient,
    nodes: usize,
    deadline: Instant,
    progress: &dyn Fn(&str),
) -> Result<(), BenchError> {
    loop {
        let ready = observe::ready_nodes(client)?;
        progress(&format!("nodes ready {ready}/{nodes}"));
        if ready >= nodes {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Setup(format!(
                "only {ready} of {nodes} nodes were ready in time"
            )));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The nodes that fail and come back: running, failed (silent until the
/// server marks them down), back.
struct Churn {
    config: SimConfig,
    nodes: Vec<herder::structs::Node>,
    running: Option<SimNodes>,
    phase: ChurnPhase,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChurnPhase {
    Up,
    Failed,
    Back,
}

impl Churn {
    fn start(config: SimConfig) -> Result<Churn, BenchError> {
        let nodes = herder_sim::build_nodes(&config);
        let running = if nodes.is_empty() {
            None
        } else {
            Some(SimNodes::start_nodes(config.clone(), nodes.clone())?)
        };
        Ok(Churn {
            config,
            nodes,
            running,
            phase: ChurnPhase::Up,
        })
    }

    fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Advances the churn: fail once half the allocations are placed;
    /// come back once the server shows every failed node down.
    fn step(&mut self, placed: u64, expected: u64, client: &ApiClient) -> Result<(), BenchError> {
        if self.is_empty() {
            return Ok(());
        }
        match self.phase {
            ChurnPhase::Up if placed * 2 >= expected => {
                if let Some(sim) = self.running.take() {
                    sim.stop();
                }
                self.phase = ChurnPhase::Failed;
            }
            ChurnPhase::Failed if observe::down_nodes(client)? >= self.nodes.len() => {
                self.running = Some(SimNodes::start_nodes(
                    self.config.clone(),
                    self.nodes.clone(),
                )?);
                self.phase = ChurnPhase::Back;
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether the churn has run its course.
    fn settled(&self) -> bool {
        self.is_empty() || self.phase == ChurnPhase::Back
    }
}

fn job_bodies(config: &BenchConfig) -> Vec<serde_json::Value> {
    match config.scenario {
        Scenario::Placement => (0..config.jobs)
            .map(|i| match config.mix {
                Mix::Mixed => workload::mixed_job(i, config.count, &config.shape),
                Mix::User => workload::user_job(i, config.count, &config.shape),
            })
            .collect(),
        Scenario::System => vec![workload::system_job(
            "bench-system",
            &config.shape.datacenters,
        )],
    }
}

/// How long the placement loop waits between two reads of the server's
/// progress. Each read renders `/v1/metrics` (or, when following
/// summaries, `/v1/jobs`, with the metrics once a second): read every 50 ms
/// through a 30-second run, they took about a sixth of the server's CPU in
/// its profile (docs/PERFORMANCE.md), work no user's tooling asks of it;
/// every 250 ms, still 2% of it.
///
/// So the wait is a quarter of the time the rest should take at the rate
/// of the last wait, from 50 ms to 1 s: about one read a second while the
/// end is far, and the end is still caught within 50 ms or so. Until the
/// count first moves, 1/40 of the time so far (50 to 250 ms).
#[derive(Default)]
struct PollPacer {
    /// When the count was last read, and what it was.
    last: Option<(Instant, u64)>,
}

impl PollPacer {
    const MIN: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(1);

    fn next(&mut self, now: Instant, started: Instant, placed: u64, expected: u64) -> Duration {
        let last = self.last.replace((now, placed));
        let early = (now.duration_since(started) / 40).clamp(Self::MIN, Duration::from_millis(250));
        let Some((then, before)) = last else {
            return early;
        };
        let moved = placed.saturating_sub(before);
        let took = now.duration_since(then);
        if moved == 0 || took.is_zero() {
            return early;
        }
        let left = expected.saturating_sub(placed);
        // The rest at the last wait's rate: took * left / moved.
        let rest = took.mul_f64(left as f64 / moved as f64);
        (rest / 4).clamp(Self::MIN, Self::MAX)
    }
}

/// Submits every job from `submitters` connections while following the
/// allocation count; returns the allocations placed.
fn place(
    config: &BenchConfig,
    client: &ApiClient,
    bodies: &[serde_json::Value],
    base: &MetricsView,
    churn: &mut Churn,
    report: &mut Report,
    progress: &dyn Fn(&str),
) -> Result<u64, BenchError> {
    let expected = config.expected_allocs() as u64;
    let already = base.gauge("herder_state_allocs") as u64;
    let started = Instant::now();
    let submitted = submit_all(client, bodies, config.submitters, config.rate, started);
    let probe = config.probing().then(|| {
        let metrics = client.clone();
        let burst = expected.saturating_sub(1);
        Probe::start(
            client.clone(),
            workload::probe_job(probe::PROBE_JOB, &config.shape.datacenters),
            submitted.done.clone(),
            bodies.len(),
            started,
            config.timeout,
            move || {
                MetricsView::read(&metrics).map_or(0, |view| {
                    let placed = (view.gauge("herder_state_allocs") as u64).saturating_sub(already);
                    burst.saturating_sub(placed)
                })
            },
        )
    });
    let mut queue_max: f64 = 0.0;
    let mut placed;
    let by_metrics = churn.is_empty() && config.progress == ProgressSource::Metrics;
    let mut metrics_read: Option<Instant> = None;
    let mut pacer = PollPacer::default();
    loop {
        // Following summaries, the metrics give only the plan queue's depth:
        // read once a second, not at every poll (see `PollPacer`).
        let due = metrics_read.is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
        let view = if by_metrics || due {
            metrics_read = Some(Instant::now());
            Some(MetricsView::read(client)?)
        } else {
            None
        };
        let sent = submitted.done.load(Ordering::Relaxed);
        placed = match &view {
            Some(view) if by_metrics => {
                (view.gauge("herder_state_allocs") as u64).saturating_sub(already)
            }
            // Lost allocations and their replacements both count in the
            // table: count what runs (or is starting) instead. (Also the
            // way a user's tooling follows a burst: job summaries.)
            _ => observe::live_allocs(client)?,
        };
        churn.step(placed, expected, client)?;
        if let Some(view) = &view {
            queue_max = queue_max.max(view.gauge("herder_plan_queue_depth"));
        }
        let secs = started.elapsed().as_secs_f64();
        progress(&format!(
            "{} placed {placed}/{expected} ({:.0}/s), jobs sent {}/{}",
            observe::bar(placed, expected),
            placed as f64 / secs.max(1e-9),
            sent,
            bodies.len()
        ));
        if (placed >= expected && churn.settled() && sent == bodies.len())
            || started.elapsed() > config.timeout
        {
            break;
        }
        std::thread::sleep(pacer.next(Instant::now(), started, placed, expected));
    }
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(probe) = probe {
        report.probe = Some(probe.finish().map_err(BenchError::Setup)?);
    }
    let (sent, register_secs, errors) = submitted.finish();
    if let Some(e) = errors.first() {
        return Err(BenchError::Setup(format!("job registration failed: {e}")));
    }
    report.jobs_registered = sent;
    report.job_register_secs = register_secs;
    report.jobs_per_sec = sent as f64 / register_secs.max(1e-9);
    report.all_placed = placed >= expected;
    report.churned_nodes = churn.nodes.len();
    if !churn.is_empty() {
        report.lost_allocs = observe::lost_allocs(client)?;
    }
    report.placement_secs = elapsed;
    report.placements_per_sec = placed as f64 / elapsed.max(1e-9);
    report.plan_queue_depth_max = queue_max;
    Ok(placed)
}

/// Job submissions in flight on their own threads.
struct Submitted {
    threads: Vec<std::thread::JoinHandle<()>>,
    done: Arc<AtomicUsize>,
    finished_at: Arc<Mutex<Option<Instant>>>,
    errors: Arc<Mutex<Vec<String>>>,
    started: Instant,
}

impl Submitted {
    /// Waits for every submitter: jobs sent, seconds to send them all,
    /// errors.
    fn finish(self) -> (usize, f64, Vec<String>) {
        for t in self.threads {
            let _ = t.join();
        }
        let end = self
            .finished_at
            .lock()
            .map(|g| g.unwrap_or_else(Instant::now))
            .unwrap_or_else(|_| Instant::now());
        let errors = self.errors.lock().map(|e| e.clone()).unwrap_or_default();
        (
            self.done.load(Ordering::Relaxed),
            end.duration_since(self.started).as_secs_f64(),
            errors,
        )
    }
}

fn submit_all(
    client: &ApiClient,
    bodies: &[serde_json::Value],
    submitters: usize,
    rate: u32,
    started: Instant,
) -> Submitted {
    // Job i is due at i / rate seconds after the start when paced.
    let interval = (rate > 0).then(|| Duration::from_secs(1) / rate);
    let bodies = Arc::new(bodies.to_vec());
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let finished_at = Arc::new(Mutex::new(None));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let threads = (0..submitters.max(1))
        .map(|_| {
            let (client, bodies, next, done) =
                (client.clone(), bodies.clone(), next.clone(), done.clone());
            let (finished_at, errors) = (finished_at.clone(), errors.clone());
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else {
                    break;
                };
                if let Some(due) = interval.map(|d| started + d * i as u32) {
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                }
                match client.put("/v1/jobs", &[], body) {
                    Ok(_) => {
                        if done.fetch_add(1, Ordering::Relaxed) + 1 == bodies.len() {
                            if let Ok(mut at) = finished_at.lock() {
                                *at = Some(Instant::now());
                            }
                        }
                    }
                    Err(e) => {
                        if let Ok(mut list) = errors.lock() {
                            list.push(e.to_string());
                        }
                        break;
                    }
                }
            })
        })
        .collect();
    Submitted {
        threads,
        done,
        finished_at,
        errors,
        started,
    }
}

/// Evaluation latencies (created -> complete, server clock) of the
/// registrations, and how the evaluations ended.
fn read_evaluations(client: &ApiClient, report: &mut Report) -> Result<(), BenchError> {
    let evals = observe::evaluations(client)?;
    let mut latencies = Vec::new();
    for e in &evals {
        match e.status.as_str() {
            "complete" => report.evals_complete += 1,
            "blocked" => report.evals_blocked += 1,
            "failed" => report.evals_failed += 1,
            _ => {}
        }
        if e.triggered_by == "job-register" && e.status == "complete" {
            let latency = (e.modify_time - e.create_time) as f64 / 1e6;
            latencies.push(latency);
            if e.job_id == probe::PROBE_JOB {
                report.probe_eval_ms = Some(latency);
            }
        }
    }
    report.eval_latency_ms = Percentiles::of(&mut latencies);
    Ok(())
}

/// Plan and worker figures: differences of the server's metrics over the
/// run.
fn read_metrics(
    client: &ApiClient,
    base: &MetricsView,
    report: &mut Report,
) -> Result<(), BenchError> {
    let view = MetricsView::read(client)?;
    report.plans_applied = view.gauge("herder_plan_applied") - base.gauge("herder_plan_applied");
    report.plans_partial = view.gauge("herder_plan_partial") - base.gauge("herder_plan_partial");
    report.partial_commit_rate = report.plans_partial / report.plans_applied.max(1.0);
    report.refused_placements =
        view.gauge("herder_plan_refused_placements") - base.gauge("herder_plan_refused_placements");
    // A scheduler's run includes submitting its plans and waiting for
    // them to be durable; its CPU time is the scheduling alone.
    let delta = |name: &str| view.sample(name).0 - base.sample(name).0;
    report.scheduler_busy_secs = delta("herder_worker_scheduler_cpu_seconds");
    report.plan_submit_secs = delta("herder_worker_submit_plan_seconds");
    report.scheduler_max_ms = view.sample("herder_worker_invoke_scheduler_seconds").2 * 1000.0;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    report.worker_utilisation =
        report.scheduler_busy_secs / (report.placement_secs * cpus).max(1e-9);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads at `at_ms` with `placed` allocations each; the waits asked.
    fn waits(reads: &[(u64, u64)], expected: u64) -> Vec<Duration> {
        let started = Instant::now();
        let mut pacer = PollPacer::default();
        reads
            .iter()
            .map(|&(at_ms, placed)| {
                pacer.next(
                    started + Duration::from_millis(at_ms),
                    started,
                    placed,
                    expected,
                )
            })
            .collect()
    }

    #[test]
    fn the_pacer_reads_once_a_second_while_the_end_is_far_and_often_near_it() {
        // 100 placed a millisecond, a million expected: 10 s in all.
        let w = waits(&[(0, 0), (1_000, 100_000), (2_000, 200_000)], 1_000_000);
        // Nothing placed yet: the early wait, at its 50 ms floor.
        assert_eq!(w[0], Duration::from_millis(50));
        // 9 s left at the first second's rate: a quarter is 2.25 s, held
        // to 1 s; and again a second later.
        assert_eq!(w[1], Duration::from_secs(1));
        assert_eq!(w[2], Duration::from_secs(1));
        // The last half second placed 400 a millisecond: the 400,000 left
        // take 1 s at that rate, and the wait is a quarter of it.
        let w = waits(
            &[(0, 0), (1_000, 100_000), (2_000, 300_000), (2_500, 500_000)],
            900_000,
        );
        assert_eq!(w[3], Duration::from_millis(250));

        // 0.4 s left at the last wait's rate: 100 ms.
        let w = waits(&[(0, 0), (9_000, 900_000), (9_600, 960_000)], 1_000_000);
        assert_eq!(w[2], Duration::from_millis(100));
        // Nearly done: never under 50 ms.
        let w = waits(&[(0, 0), (9_000, 999_000), (9_100, 999_990)], 1_000_000);
        assert_eq!(w[2], Duration::from_millis(50));
    }

    #[test]
    fn the_pacer_waits_the_early_wait_while_the_count_stands_still() {
        // Twenty seconds in with no progress since the last read (a stall):
        // 1/40 of the time so far, at most 250 ms.
        let w = waits(&[(0, 0), (19_000, 5_000), (20_000, 5_000)], 1_000_000);
        assert_eq!(w[2], Duration::from_millis(250));
        // Done (or past it: lost allocations and their replacements).
        let w = waits(&[(0, 0), (1_000, 10), (1_100, 20)], 10);
        assert_eq!(w[2], Duration::from_millis(50));
    }
}
