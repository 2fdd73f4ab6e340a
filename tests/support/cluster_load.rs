//! Load and invariants for the cluster fault tests: writer threads that
//! register and stop jobs through any live server and record every write
//! a server acknowledged, and the checks a user would make afterwards
//! (every acknowledged write is there, no allocation placed twice, no node
//! over-committed, the simulated nodes are ready).
//!
//! A write counts as acknowledged only when a server answered 200 with an
//! evaluation ID. Writers retry anything else on another server, so an
//! error can hide a write that did commit: checks only ever look for the
//! acknowledged writes, and a job whose last write was never acknowledged
//! is left out of the final-state check.

use crate::cluster::{http_get, http_send, Answer};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long one write may take before the writer tries another server.
const WRITE_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a writer keeps retrying one write before giving it up.
const WRITE_GIVE_UP: Duration = Duration::from_secs(60);

/// How long one read of the checks may take.
const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// CPU (MHz) and memory (MB) of each allocation of a writer's job.
pub const WRITER_ALLOC_CPU: i64 = 300;
pub const WRITER_ALLOC_MEMORY_MB: i64 = 256;

/// Allocations per writer job.
pub const WRITER_JOB_COUNT: u32 = 3;

/// The HTTP base URLs writers may send to; tests change it as servers
/// come and go (a paused server must not get writes: see
/// `Targets::set`).
#[derive(Clone, Default)]
pub struct Targets(Arc<RwLock<Vec<String>>>);

impl Targets {
    pub fn new(urls: Vec<String>) -> Targets {
        Targets(Arc::new(RwLock::new(urls)))
    }

    /// Replaces the list. A request already sent to a server that is then
    /// SIGSTOPped would be applied when it resumes, after its writer gave
    /// up on it and wrote newer state elsewhere: take a server out of the
    /// list (and let in-flight requests finish) before pausing it.
    pub fn set(&self, urls: Vec<String>) {
        if let Ok(mut t) = self.0.write() {
            *t = urls;
        }
    }

    fn pick(&self, rng: &mut XorShift) -> Option<String> {
        let t = self.0.read().ok()?;
        if t.is_empty() {
            return None;
        }
        Some(t[rng.below(t.len())].clone())
    }
}

/// A small deterministic generator: writers need variety, not security.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// What an acknowledged write did to its job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// `PUT /v1/jobs` with `Meta.seq` = this number.
    Register { seq: u64 },
    /// `DELETE /v1/job/:id` (stop, no purge).
    Stop,
}

/// A write a server acknowledged.
#[derive(Clone, Debug)]
pub struct AckedWrite {
    pub job: String,
    pub kind: WriteKind,
    pub eval_id: String,
    /// The `JobModifyIndex` of the answer.
    pub job_modify_index: u64,
    /// The server that answered.
    pub server: String,
}

/// A service job of the mock driver: `count` allocations of `cpu` MHz and
/// `memory_mb` MB each, `Meta.seq` = `seq`.
pub fn mock_service_job(id: &str, count: u32, cpu: i64, memory_mb: i64, seq: u64) -> Value {
    json!({"Job": {
        "ID": id, "Name": id, "Type": "service", "Datacenters": ["dc1"],
        "Meta": {"seq": seq.to_string()},
        "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {},
            "Resources": {"CPU": cpu, "MemoryMB": memory_mb}
        }]}]
    }})
}

/// Progress the writers share with the test while they run.
#[derive(Default)]
struct Progress {
    acks: AtomicU64,
    attempts: AtomicU64,
    errors: AtomicU64,
    last_errors: Mutex<Vec<String>>,
}

impl Progress {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last_errors.lock() {
            if last.len() >= 8 {
                last.remove(0);
            }
            last.push(what);
        }
    }
}

/// What one writer did.
#[derive(Default)]
struct WriterLog {
    acks: Vec<AckedWrite>,
    /// Jobs whose last write was given up unacknowledged.
    ambiguous: BTreeSet<String>,
}

/// Writer threads registering and stopping jobs until told to finish.
pub struct Writers {
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    threads: Vec<JoinHandle<WriterLog>>,
}

/// Everything the writers did, once they finished.
pub struct Load {
    pub acks: Vec<AckedWrite>,
    pub ambiguous: BTreeSet<String>,
    pub attempts: u64,
    pub errors: u64,
    pub last_errors: Vec<String>,
}

impl Writers {
    /// Starts `count` writers, each owning `jobs_each` jobs named
    /// `w<writer>-j<n>`, sending to random servers of `targets`.
    pub fn start(targets: &Targets, count: usize, jobs_each: usize) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Progress::default());
        let threads = (0..count)
            .map(|w| {
                let (targets, stop, progress) = (targets.clone(), stop.clone(), progress.clone());
                std::thread::spawn(move || writer(w, jobs_each, &targets, &stop, &progress))
            })
            .collect();
        Writers {
            stop,
            progress,
            threads,
        }
    }

    /// Writes acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.progress.acks.load(Ordering::Relaxed)
    }

    /// Waits until `more` writes past `from` are acknowledged; the time it
    /// took, or `None` after `timeout`.
    pub fn wait_for_acks(&self, from: u64, more: u64, timeout: Duration) -> Option<Duration> {
        let started = Instant::now();
        crate::wait_for(timeout, || (self.acked() >= from + more).then_some(()))
            .map(|()| started.elapsed())
    }

    /// A one-line summary for messages.
    pub fn describe(&self) -> String {
        let p = &self.progress;
        format!(
            "{} acknowledged of {} attempts, {} errors, last errors: {:?}",
            p.acks.load(Ordering::Relaxed),
            p.attempts.load(Ordering::Relaxed),
            p.errors.load(Ordering::Relaxed),
            p.last_errors.lock().map(|l| l.clone()).unwrap_or_default()
        )
    }

    /// Tells the writers to finish their current write and stop; collects
    /// what they did.
    pub fn finish(self) -> Load {
        self.stop.store(true, Ordering::Relaxed);
        let mut load = Load {
            acks: Vec::new(),
            ambiguous: BTreeSet::new(),
            attempts: self.progress.attempts.load(Ordering::Relaxed),
            errors: 0,
            last_errors: Vec::new(),
        };
        for t in self.threads {
            let log = t.join().expect("writer thread");
            load.acks.extend(log.acks);
            load.ambiguous.extend(log.ambiguous);
        }
        load.errors = self.progress.errors.load(Ordering::Relaxed);
        load.last_errors = self
            .progress
            .last_errors
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        load
    }
}

/// One writer: picks one of its jobs at random, registers it (new
/// `Meta.seq`) if it is stopped or new, stops it otherwise, and retries
/// each write until a server acknowledges it.
fn writer(
    w: usize,
    jobs_each: usize,
    targets: &Targets,
    stop: &AtomicBool,
    p: &Progress,
) -> WriterLog {
    let mut rng = XorShift::new(w as u64 + 1);
    let mut registered = vec![false; jobs_each];
    let mut retired = vec![false; jobs_each];
    let mut seq = 0;
    let mut log = WriterLog::default();
    while !stop.load(Ordering::Relaxed) && retired.iter().any(|r| !r) {
        let k = rng.below(jobs_each);
        if retired[k] {
            continue;
        }
        let job = format!("w{w}-j{k}");
        let kind = if registered[k] {
            WriteKind::Stop
        } else {
            seq += 1;
            WriteKind::Register { seq }
        };
        match write_until_acked(&job, &kind, targets, &mut rng, p) {
            Some(ack) => {
                registered[k] = matches!(kind, WriteKind::Register { .. });
                p.acks.fetch_add(1, Ordering::Relaxed);
                log.acks.push(ack);
            }
            None => {
                retired[k] = true;
                log.ambiguous.insert(job);
            }
        }
    }
    log
}

/// Sends one write until a server acknowledges it, or gives up after
/// [`WRITE_GIVE_UP`].
fn write_until_acked(
    job: &str,
    kind: &WriteKind,
    targets: &Targets,
    rng: &mut XorShift,
    p: &Progress,
) -> Option<AckedWrite> {
    let started = Instant::now();
    let mut backoff = Duration::from_millis(20);
    while started.elapsed() < WRITE_GIVE_UP {
        if let Some(server) = targets.pick(rng) {
            p.attempts.fetch_add(1, Ordering::Relaxed);
            match send_write(&server, job, kind) {
                Ok(ack) => return Some(ack),
                Err(e) => p.error(format!("{kind:?} {job} via {server}: {e}")),
            }
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
    p.error(format!("gave up {kind:?} {job} after {WRITE_GIVE_UP:?}"));
    None
}

fn send_write(server: &str, job: &str, kind: &WriteKind) -> Result<AckedWrite, String> {
    let answer = match kind {
        WriteKind::Register { seq } => {
            let body = mock_service_job(
                job,
                WRITER_JOB_COUNT,
                WRITER_ALLOC_CPU,
                WRITER_ALLOC_MEMORY_MB,
                *seq,
            );
            http_send(
                "PUT",
                &format!("{server}/v1/jobs"),
                Some(&body),
                WRITE_TIMEOUT,
            )
        }
        WriteKind::Stop => http_send(
            "DELETE",
            &format!("{server}/v1/job/{job}"),
            None,
            WRITE_TIMEOUT,
        ),
    }?;
    let v = answer.json();
    let eval_id = v["EvalID"].as_str().unwrap_or_default().to_string();
    if answer.status != 200 || eval_id.is_empty() {
        return Err(format!("{} {}", answer.status, answer.body.trim()));
    }
    Ok(AckedWrite {
        job: job.to_string(),
        kind: kind.clone(),
        eval_id,
        job_modify_index: v["JobModifyIndex"].as_u64().unwrap_or(0),
        server: server.to_string(),
    })
}

/// `?stale` appended to `path` (which may already have a query) when
/// `stale` holds.
fn with_stale(path: &str, stale: bool) -> String {
    match (stale, path.contains('?')) {
        (false, _) => path.to_string(),
        (true, true) => format!("{path}&stale"),
        (true, false) => format!("{path}?stale"),
    }
}

/// GET `base` + `path` (with `?stale` when asked), requiring a 200.
pub fn read(base: &str, path: &str, stale: bool) -> Result<Answer, String> {
    let url = format!("{base}{}", with_stale(path, stale));
    let answer = http_get(&url, READ_TIMEOUT).map_err(|e| format!("GET {url}: {e}"))?;
    if answer.status != 200 {
        return Err(format!(
            "GET {url}: {} {}",
            answer.status,
            answer.body.trim()
        ));
    }
    Ok(answer)
}

/// A job as the lists show it: whether it is stopped, and its
/// `JobModifyIndex`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobState {
    pub stop: bool,
    pub job_modify_index: u64,
}

/// Every job `GET /v1/jobs` lists on `base`.
pub fn job_table(base: &str, stale: bool) -> Result<BTreeMap<String, JobState>, String> {
    let list = read(base, "/v1/jobs", stale)?.json();
    let items = list.as_array().ok_or("/v1/jobs is not a list")?;
    Ok(items
        .iter()
        .map(|j| {
            let state = JobState {
                stop: j["Stop"].as_bool().unwrap_or(false),
                job_modify_index: j["JobModifyIndex"].as_u64().unwrap_or(0),
            };
            (j["ID"].as_str().unwrap_or_default().to_string(), state)
        })
        .collect())
}

/// The acknowledged writes `base` does not show (read with `?stale` when
/// asked): each missing evaluation, and each job whose state is not what
/// its last acknowledged write left.
pub fn missing_writes(base: &str, stale: bool, load: &Load) -> Result<Vec<String>, String> {
    let evals = read(base, "/v1/evaluations", stale)?.json();
    let eval_ids: BTreeSet<&str> = evals
        .as_array()
        .ok_or("/v1/evaluations is not a list")?
        .iter()
        .filter_map(|e| e["ID"].as_str())
        .collect();
    let jobs = job_table(base, stale)?;
    let mut missing: Vec<String> = load
        .acks
        .iter()
        .filter(|a| !eval_ids.contains(a.eval_id.as_str()))
        .map(|a| {
            format!(
                "evaluation {} of {:?} {} (answered by {})",
                a.eval_id, a.kind, a.job, a.server
            )
        })
        .collect();
    let mut last: HashMap<&str, &AckedWrite> = HashMap::new();
    for a in &load.acks {
        last.insert(a.job.as_str(), a);
    }
    for (job, a) in last {
        if load.ambiguous.contains(job) {
            continue;
        }
        let want_stop = a.kind == WriteKind::Stop;
        match jobs.get(job) {
            None => missing.push(format!("job {job} (last acknowledged: {:?})", a.kind)),
            Some(s) if s.stop != want_stop || s.job_modify_index < a.job_modify_index => missing
                .push(format!(
                    "job {job} is {s:?}, its last acknowledged write was {:?} at JobModifyIndex {}",
                    a.kind, a.job_modify_index
                )),
            Some(_) => {}
        }
    }
    Ok(missing)
}

/// Whether an allocation (list stub or full) still holds its place: the
/// scheduler wants it running and the client has not ended it.
pub fn holds_place(alloc: &Value) -> bool {
    alloc["DesiredStatus"] == "run"
        && matches!(alloc["ClientStatus"].as_str(), Some("pending" | "running"))
}

/// Allocations that hold a place under a name another such allocation of
/// the same job and group also has.
pub fn double_placements(base: &str) -> Result<Vec<String>, String> {
    let allocs = read(base, "/v1/allocations", false)?.json();
    let mut by_name: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for a in allocs.as_array().ok_or("/v1/allocations is not a list")? {
        if holds_place(a) {
            let text = |k: &str| a[k].as_str().unwrap_or_default().to_string();
            let key = (text("JobID"), text("Name"));
            by_name.entry(key).or_default().push(format!(
                "{} on node {}",
                text("ID"),
                text("NodeID")
            ));
        }
    }
    Ok(by_name
        .into_iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|((job, name), ids)| format!("job {job} {name}: {}", ids.join(", ")))
        .collect())
}

/// What a node can give allocations: its resources less its reserved ones
/// (CPU MHz, memory MB), from a `GET /v1/nodes` stub.
fn node_capacity(stub: &Value) -> (i64, i64) {
    let total = &stub["NodeResources"];
    let reserved = &stub["ReservedResources"];
    let get = |v: &Value, a: &str, b: &str| v[a][b].as_i64().unwrap_or(0);
    (
        get(total, "Cpu", "CpuShares") - get(reserved, "Cpu", "CpuShares"),
        get(total, "Memory", "MemoryMB") - get(reserved, "Memory", "MemoryMB"),
    )
}

/// Nodes whose allocations holding a place need more CPU or memory than
/// the node has.
pub fn overcommitted_nodes(base: &str) -> Result<Vec<String>, String> {
    let allocs = read(base, "/v1/allocations", false)?.json();
    let busy: BTreeSet<String> = allocs
        .as_array()
        .ok_or("/v1/allocations is not a list")?
        .iter()
        .filter(|a| holds_place(a))
        .filter_map(|a| a["NodeID"].as_str().map(str::to_string))
        .collect();
    let nodes = read(base, "/v1/nodes", false)?.json();
    let capacity: HashMap<String, (i64, i64)> = nodes
        .as_array()
        .ok_or("/v1/nodes is not a list")?
        .iter()
        .map(|n| {
            (
                n["ID"].as_str().unwrap_or_default().to_string(),
                node_capacity(n),
            )
        })
        .collect();
    let mut over = Vec::new();
    for node in busy {
        let (cpu_cap, mem_cap) = capacity.get(&node).copied().unwrap_or((0, 0));
        let on_node = read(base, &format!("/v1/node/{node}/allocations"), false)?.json();
        let (mut cpu, mut mem) = (0, 0);
        for a in on_node
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| holds_place(a))
        {
            cpu += a["Resources"]["CPU"].as_i64().unwrap_or(0);
            mem += a["Resources"]["MemoryMB"].as_i64().unwrap_or(0);
        }
        if cpu > cpu_cap || mem > mem_cap {
            over.push(format!(
                "node {node}: {cpu} MHz / {mem} MB placed on {cpu_cap} MHz / {mem_cap} MB"
            ));
        }
    }
    Ok(over)
}

/// How many nodes `base` lists as ready.
pub fn ready_nodes(base: &str) -> Result<usize, String> {
    Ok(node_statuses(base, false)?
        .get("ready")
        .copied()
        .unwrap_or(0))
}

/// How many nodes `base` lists in each status (read with `?stale` when
/// asked).
pub fn node_statuses(base: &str, stale: bool) -> Result<BTreeMap<String, usize>, String> {
    let nodes = read(base, "/v1/nodes", stale)?.json();
    let mut counts = BTreeMap::new();
    for n in nodes.as_array().ok_or("/v1/nodes is not a list")? {
        let status = n["Status"].as_str().unwrap_or("(none)").to_string();
        *counts.entry(status).or_insert(0) += 1;
    }
    Ok(counts)
}

/// Registers a small job `id` (one allocation) through any of `servers`,
/// retrying, and waits until it is placed on a node; the time from the
/// first attempt to the placement, or what went wrong.
pub fn place_probe(servers: &[String], id: &str, timeout: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let body = mock_service_job(id, 1, 50, 64, 0);
    let mut rng = XorShift::new(started.elapsed().as_nanos() as u64 + 7);
    let mut last = String::new();
    let registered_via = crate::wait_for(timeout, || {
        let server = &servers[rng.below(servers.len())];
        match http_send(
            "PUT",
            &format!("{server}/v1/jobs"),
            Some(&body),
            WRITE_TIMEOUT,
        ) {
            Ok(a) if a.status == 200 => Some(server.clone()),
            Ok(a) => {
                last = format!("{} {}", a.status, a.body.trim());
                None
            }
            Err(e) => {
                last = e;
                None
            }
        }
    })
    .ok_or_else(|| format!("registering {id} failed for {timeout:?}: {last}"))?;
    let placed = crate::wait_for(timeout.saturating_sub(started.elapsed()), || {
        let allocs = read(&registered_via, &format!("/v1/job/{id}/allocations"), false).ok()?;
        allocs
            .json()
            .as_array()?
            .iter()
            .any(|a| holds_place(a) && a["NodeID"].as_str().is_some_and(|n| !n.is_empty()))
            .then_some(())
    });
    placed.map(|()| started.elapsed()).ok_or_else(|| {
        format!(
            "{id} registered via {registered_via} but not placed within {timeout:?}; \
             its evaluations: {}; nodes: {:?}",
            describe_evals(&registered_via, id),
            node_statuses(&registered_via, false)
        )
    })
}

/// Job `id`'s evaluations as `base` answers them (status, description,
/// why groups did not fit), for failure messages.
fn describe_evals(base: &str, id: &str) -> String {
    let Ok(answer) = read(base, &format!("/v1/job/{id}/evaluations"), false) else {
        return "(unreadable)".into();
    };
    let evals = answer.json();
    let described: Vec<String> = evals
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{} {} {:?} failed groups {}",
                e["ID"].as_str().unwrap_or_default(),
                e["Status"].as_str().unwrap_or_default(),
                e["StatusDescription"].as_str().unwrap_or_default(),
                e["FailedTGAllocs"]
            )
        })
        .collect();
    format!("[{}]", described.join("; "))
}
