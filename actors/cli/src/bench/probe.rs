//! The latency probe of `bench cluster -probe`: one small job submitted
//! once every job of the burst has been registered, while most of the
//! burst still waits for a worker, and the time until its allocation is
//! placed, as its submitter sees it (the issue's "small job while 1,000
//! large ones are queued").
//!
//! It runs on its own thread beside the placement loop and polls only the
//! probe job's own allocations, so it adds one cheap request every 10 ms
//! to the server's load.

use herder_api_client::ApiClient;
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The probe job's ID.
pub const PROBE_JOB: &str = "bench-probe";

/// What the probe saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProbeReport {
    /// Seconds after the burst's first job that the probe was submitted.
    pub sent_at_secs: f64,
    /// Allocations of the burst still to place when it was submitted.
    pub backlog_allocs: u64,
    /// Submission to its allocation visible, in milliseconds (`None`: not
    /// placed within the bench's timeout).
    pub placed_ms: Option<f64>,
}

/// A running probe.
pub struct Probe {
    thread: JoinHandle<Result<ProbeReport, String>>,
}

impl Probe {
    /// Starts the probe: it waits until `done` reaches `total` jobs
    /// registered, then submits `body` (a job named [`PROBE_JOB`] of one
    /// allocation) and follows it. `backlog` answers how many of the
    /// burst's allocations are unplaced.
    pub fn start(
        client: ApiClient,
        body: serde_json::Value,
        done: Arc<AtomicUsize>,
        total: usize,
        started: Instant,
        timeout: Duration,
        backlog: impl Fn() -> u64 + Send + 'static,
    ) -> Probe {
        let thread = std::thread::spawn(move || {
            let deadline = started + timeout;
            while done.load(Ordering::Relaxed) < total {
                if Instant::now() > deadline {
                    return Err("the burst was not registered in time".into());
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            let mut report = ProbeReport {
                sent_at_secs: started.elapsed().as_secs_f64(),
                backlog_allocs: backlog(),
                placed_ms: None,
            };
            let sent = Instant::now();
            client
                .put("/v1/jobs", &[], &body)
                .map_err(|e| format!("probe job: {e}"))?;
            let path = format!("/v1/job/{PROBE_JOB}/allocations");
            while Instant::now() < deadline {
                let placed = client
                    .get(&path, &[])
                    .map_err(|e| format!("probe allocations: {e}"))?
                    .body
                    .as_array()
                    .is_some_and(|allocs| !allocs.is_empty());
                if placed {
                    report.placed_ms = Some(sent.elapsed().as_secs_f64() * 1000.0);
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(report)
        });
        Probe { thread }
    }

    pub fn finish(self) -> Result<ProbeReport, String> {
        self.thread
            .join()
            .map_err(|_| "the probe thread panicked".to_string())?
    }
}
