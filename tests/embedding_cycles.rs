//! An embedded agent started and stopped many times in one process leaves
//! nothing behind: no threads, no file descriptors, and no memory beyond
//! what the allocator keeps after the first few cycles.
//!
//! This binary holds one test at a time (the default harness runs tests
//! on threads, which would count in /proc/self/task), so the counts below
//! are the agent's alone. `-- --nocapture` prints the figures quoted in
//! docs/EMBEDDING.md and docs/PERFORMANCE.md.

use herder_actors::{Agent, AgentConfig};
use std::time::{Duration, Instant};

fn count_entries(dir: &str) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[derive(Debug, Clone, Copy)]
struct Usage {
    threads: usize,
    fds: usize,
    rss_kib: u64,
}

fn usage() -> Usage {
    Usage {
        threads: count_entries("/proc/self/task"),
        fds: count_entries("/proc/self/fd"),
        rss_kib: rss_kib(),
    }
}

/// Waits (at most 2 s) for the thread and fd counts to come back to
/// `baseline`: a stopped thread leaves /proc a moment after it is joined.
fn settled(baseline: Usage) -> Usage {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let now = usage();
        let back = now.threads <= baseline.threads && now.fds <= baseline.fds;
        if back || Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn config(data_dir: &std::path::Path, workers: usize) -> AgentConfig {
    let mut config = AgentConfig::dev().expect("dev config");
    config.client.enabled = false;
    config.sidecar = true;
    config.data_dir = data_dir.to_path_buf();
    config.server.num_schedulers = Some(workers);
    config
}

/// Starts and stops `cycles` times on one data dir, every other time by
/// dropping the handle; answers (baseline, after, slowest start).
fn cycle(cycles: usize, workers: usize) -> (Usage, Usage, Duration) {
    let dir = tempfile::tempdir().expect("temp dir");
    // Warm-up: process-wide once-only state (the metrics recorder, the
    // allocator's first arenas) is not a leak.
    for _ in 0..3 {
        let agent = futures::executor::block_on(Agent::start(config(dir.path(), workers), false))
            .expect("starts");
        futures::executor::block_on(agent.shutdown());
    }
    let baseline = settled(usage());
    let mut slowest = Duration::ZERO;
    for i in 0..cycles {
        let started = Instant::now();
        let agent = futures::executor::block_on(Agent::start(config(dir.path(), workers), false))
            .expect("starts again on its data dir");
        slowest = slowest.max(started.elapsed());
        if i % 2 == 0 {
            futures::executor::block_on(agent.shutdown());
        } else {
            drop(agent);
        }
    }
    (baseline, settled(baseline), slowest)
}

fn check(cycles: usize, workers: usize) {
    let started = Instant::now();
    let (before, after, slowest) = cycle(cycles, workers);
    println!(
        "{cycles} start/stop cycles ({workers} workers) in {:?}, slowest start {slowest:?}: \
         threads {} -> {}, fds {} -> {}, RSS {} KiB -> {} KiB",
        started.elapsed(),
        before.threads,
        after.threads,
        before.fds,
        after.fds,
        before.rss_kib,
        after.rss_kib
    );
    assert!(after.threads <= before.threads, "{before:?} -> {after:?}");
    assert!(after.fds <= before.fds, "{before:?} -> {after:?}");
    let grown_mib = after.rss_kib.saturating_sub(before.rss_kib) / 1024;
    assert!(
        grown_mib < 32,
        "RSS grew {grown_mib} MiB: {before:?} -> {after:?}"
    );
}

/// 100 cycles of a server without workers: a few seconds.
#[test]
fn a_hundred_starts_and_stops_leave_no_threads_fds_or_memory_behind() {
    check(100, 0);
}

/// The same with a scheduling worker, whose stop waits for its dequeue
/// poll (up to 500 ms a cycle): about a minute, so run on demand with
/// `cargo test -p herder-tests --test embedding_cycles -- --ignored --nocapture`.
#[test]
#[ignore = "about a minute (a worker's stop waits for its 500 ms dequeue poll); run on demand, the figure is in docs/PERFORMANCE.md; in CI once the worker's stop wakes its poll"]
fn a_hundred_starts_and_stops_with_workers_leave_nothing_behind() {
    check(100, 1);
}

/// What an idle embedded server costs: start-to-ready time, and the
/// threads and resident memory each of 5 servers side by side adds. Run
/// on demand (`-- --ignored --nocapture idle`); the figures are quoted in
/// docs/EMBEDDING.md.
#[test]
#[ignore = "a measurement (prints figures for docs/EMBEDDING.md, asserts only that servers start); run on demand with --ignored --nocapture idle"]
fn idle_embedded_servers_cost() {
    let dirs: Vec<_> = (0..6)
        .map(|_| tempfile::tempdir().expect("temp dir"))
        .collect();
    // The first start pays for process-wide one-time state.
    let first = futures::executor::block_on(Agent::start(config(dirs[5].path(), 2), false))
        .expect("starts");
    futures::executor::block_on(first.shutdown());
    let before = settled(usage());
    let mut agents = Vec::new();
    let mut starts = Vec::new();
    for dir in &dirs[..5] {
        let started = Instant::now();
        let agent = futures::executor::block_on(Agent::start(config(dir.path(), 2), false))
            .expect("starts");
        starts.push(started.elapsed());
        agents.push(agent);
    }
    std::thread::sleep(Duration::from_secs(2));
    let after = usage();
    starts.sort();
    println!(
        "5 idle servers (2 workers each): start-to-ready {:?} (median) .. {:?} (max); \
         per server {} threads, {} KiB RSS",
        starts[2],
        starts[4],
        (after.threads - before.threads) / 5,
        after.rss_kib.saturating_sub(before.rss_kib) / 5
    );
    drop(agents);
}
