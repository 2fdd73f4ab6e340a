//! `/v1/agent/pprof/*`: profiles of a running agent, for the moment a
//! server is slow and an operator needs to see why (Nomad's agent pprof
//! endpoints, which serve Go's runtime profiles).
//!
//! - `profile?seconds=N`: a CPU profile sampled for N seconds (default 1,
//!   at most [`MAX_SECONDS`]) at 99 Hz by SIGPROF, in pprof's protobuf
//!   format (uncompressed; `pprof` and `go tool pprof` read it). One at a
//!   time per process, as Go's.
//! - `heap`: what the allocator tells. herder runs on glibc's malloc,
//!   which keeps no per-call-site records, so this is not a heap profile:
//!   it is malloc's own counters (`mallinfo2`: bytes in use, free in the
//!   arenas, mapped) beside the resident set, as JSON.
//! - `goroutine`: Go's goroutine dump has no direct equivalent (actors and
//!   futures have no stacks to list); it answers each thread of the
//!   process (name, state, what it waits in) and the depth of every queue
//!   of the server's actors (broker, blocked evaluations, plan queue), as
//!   text.
//!
//! Without ACLs, served only when the agent's `enable_debug` is set
//! (`-dev` sets it), otherwise `403 Permission denied`; under ACLs, to a
//! token with `agent:write` (a management token), as Nomad.
//! `?node_id=` asks a client's agent, through its server.

use super::alloc_routing::{node_route, path_and_query, Route};
use super::forward::forward_stream;
use super::query::QueryOptions;
use super::ApiError;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The longest CPU profile one request may take.
pub const MAX_SECONDS: u64 = 300;
/// Samples per second (Go's default rate, shifted off 100 Hz so that the
/// sampling does not beat with periodic work).
const FREQUENCY: i32 = 99;
/// How long reaching a node's agent may take (a profile's own length is
/// added).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/agent/pprof/profile", web::get().to(cpu_profile))
        .route("/v1/agent/pprof/heap", web::get().to(heap))
        .route("/v1/agent/pprof/goroutine", web::get().to(goroutine));
}

/// Refuses unless the agent serves debugging endpoints; a request naming
/// another node goes there (its agent decides for itself).
async fn admitted(
    info: &AgentInfo,
    req: &HttpRequest,
    extra_wait: Duration,
) -> Result<Option<HttpResponse>, ApiError> {
    let q = QueryOptions::from_request(req)?;
    let node_id = q.param("node_id").unwrap_or("");
    if !node_id.is_empty() {
        if let Route::There { address, hop } = node_route(info, req, node_id)? {
            let path = path_and_query(req);
            let timeout = FORWARD_TIMEOUT + extra_wait;
            let forwarded = forward_stream(
                req,
                &address,
                hop,
                &path,
                "application/octet-stream",
                timeout,
            );
            return forwarded.await.map(Some);
        }
    }
    // Under ACLs the route's rule (agent:write) decided; without them,
    // only an agent that serves debugging answers.
    if !info.config.acl.enabled && !info.config.enable_debug {
        return Err(ApiError::Forbidden("Permission denied".into()));
    }
    Ok(None)
}

fn seconds_of(req: &HttpRequest) -> Result<u64, ApiError> {
    let q = QueryOptions::from_request(req)?;
    match q.param("seconds").unwrap_or("") {
        "" => Ok(1),
        text => match text.parse::<u64>() {
            Ok(n) if (1..=MAX_SECONDS).contains(&n) => Ok(n),
            _ => Err(ApiError::BadRequest(format!(
                "Error parsing seconds: {text:?} is not a whole number of seconds from 1 to {MAX_SECONDS}"
            ))),
        },
    }
}

/// Whether a CPU profile is being taken in this process.
static PROFILING: AtomicBool = AtomicBool::new(false);

/// Clears [`PROFILING`] however the profile ends (the caller hanging up
/// drops the future mid-sleep).
struct ProfilingTurn;

impl ProfilingTurn {
    fn take() -> Option<ProfilingTurn> {
        PROFILING
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| ProfilingTurn)
    }
}

impl Drop for ProfilingTurn {
    fn drop(&mut self) {
        PROFILING.store(false, Ordering::Release);
    }
}

async fn cpu_profile(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let seconds = seconds_of(&req)?;
    if let Some(answer) = admitted(&info, &req, Duration::from_secs(seconds)).await? {
        return Ok(answer);
    }
    let turn = ProfilingTurn::take().ok_or_else(|| {
        ApiError::BadRequest(
            "Unable to start CPU profile: a CPU profile is already being taken".into(),
        )
    })?;
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .map_err(|e| ApiError::Internal(format!("Unable to start CPU profile: {e}")))?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    // Symbolizing the samples reads debug info: off the HTTP workers.
    let bytes = web::block(move || encode_profile(&guard))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    drop(turn);
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header(("Content-Disposition", "attachment; filename=\"profile\""))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .body(bytes))
}

fn encode_profile(guard: &pprof::ProfilerGuard<'static>) -> Result<Vec<u8>, ApiError> {
    use pprof::protos::Message;
    let failed = |e: &dyn std::fmt::Display| {
        ApiError::Internal(format!("Unable to build the CPU profile: {e}"))
    };
    let report = guard.report().build().map_err(|e| failed(&e))?;
    let profile = report.pprof().map_err(|e| failed(&e))?;
    profile.write_to_bytes().map_err(|e| failed(&e))
}

async fn heap(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    if let Some(answer) = admitted(&info, &req, Duration::ZERO).await? {
        return Ok(answer);
    }
    Ok(HttpResponse::Ok().json(heap_figures()))
}

/// glibc malloc's counters and the resident set.
fn heap_figures() -> serde_json::Value {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let m = unsafe { libc::mallinfo2() };
    serde_json::json!({
        "Measures": "glibc malloc's own counters (mallinfo2) and the process's resident set; \
                     not a per-call-site heap profile: the system allocator keeps none",
        "InUseBytes": m.uordblks + m.hblkhd,
        "FreeInArenasBytes": m.fordblks,
        "ArenaBytes": m.arena,
        "MmappedBytes": m.hblkhd,
        "MmappedRegions": m.hblks,
        "ReleasableBytes": m.keepcost,
        "ResidentBytes": resident_bytes(),
    })
}

fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

async fn goroutine(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    if let Some(answer) = admitted(&info, &req, Duration::ZERO).await? {
        return Ok(answer);
    }
    let queues = super::metrics_routes::rendered_queue_gauges();
    let text = web::block(move || thread_dump(&queues))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .body(text))
}

/// Every thread of the process with its state and wait channel, then the
/// server's queue depths.
fn thread_dump(queues: &[String]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let mut threads: Vec<(u32, String)> = std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            Some((tid, describe_thread(&e.path())))
        })
        .collect();
    threads.sort();
    let _ = writeln!(out, "threads: {}", threads.len());
    for (tid, line) in &threads {
        let _ = writeln!(out, "  {tid:>7} {line}");
    }
    let _ = writeln!(out, "\nqueues:");
    if queues.is_empty() {
        let _ = writeln!(out, "  (no server on this agent)");
    }
    for q in queues {
        let _ = writeln!(out, "  {q}");
    }
    out
}

/// `name  state  wchan` of one thread from its /proc entry.
fn describe_thread(dir: &std::path::Path) -> String {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let name = read("comm").trim().to_string();
    let stat = read("stat");
    // The state follows the parenthesised name, which may hold spaces.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("?")
        .to_string();
    let wchan = read("wchan");
    let wchan = if wchan.is_empty() || wchan == "0" {
        "-".to_string()
    } else {
        wchan
    };
    format!("{name:<24} {state} {wchan}")
}
