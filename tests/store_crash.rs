//! Crash test of the state store: a child process (this test binary,
//! re-executed) applies commands from several threads and prints each
//! acknowledged one; the parent kills it with SIGKILL at a random moment,
//! reopens the data dir, and checks that every acknowledged command is
//! there and that no command is half-applied. Repeated on the same data
//! dir, so each run also recovers what the previous kill left.

use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{Command, PlanResults, StateStore, StoreOptions};
use herder::structs::TriggeredBy;
use rand::Rng;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command as Process, Stdio};
use std::sync::{mpsc, Arc};
use std::time::Duration;

const CHILD_DIR_ENV: &str = "HERDER_STORE_CRASH_CHILD_DIR";
const CHILD_RUN_ENV: &str = "HERDER_STORE_CRASH_RUN";
const WRITER_THREADS: usize = 4;
const ALLOCS_PER_PLAN: u32 = 3;
const KILLS: usize = 24;

/// The child: registers jobs (with their evaluation, one command) and
/// places allocations for each (a second command), printing
/// `ack job <name> <index>` / `ack plan <name> <index>` after each returns.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR_ENV) else {
        return; // only meaningful when started by the parent below
    };
    let run = std::env::var(CHILD_RUN_ENV).unwrap_or_default();
    // Small log segments and checkpoints, so kills also land while a
    // segment is being folded into sled.
    let options = StoreOptions {
        wal_segment_bytes: 8 << 10,
        checkpoint_bytes: 32 << 10,
        ..StoreOptions::default()
    };
    let store = StateStore::open(&dir, options).unwrap();
    let node = fixtures::node("crash-node");
    store
        .apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        })
        .unwrap();
    let threads: Vec<_> = (0..WRITER_THREADS)
        .map(|t| {
            let store = store.clone();
            let run = run.clone();
            std::thread::spawn(move || {
                for i in 0.. {
                    let name = format!("r{run}-t{t}-j{i}");
                    let job = fixtures::job("default", &name, &[("g", ALLOCS_PER_PLAN as i32)]);
                    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, i);
                    let outcome = store
                        .apply(Command::JobRegister {
                            job: Arc::new(job.clone()),
                            eval: Some(eval.clone()),
                            enforce_index: None,
                        })
                        .unwrap();
                    println!("ack job {name} {}", outcome.index);
                    let builder = AllocBuilder::new(&job, "g");
                    let allocs = (0..ALLOCS_PER_PLAN)
                        .map(|n| builder.build(n, node.id, eval.id, i))
                        .collect();
                    let outcome = store
                        .apply(Command::ApplyPlanResults(PlanResults {
                            eval_id: eval.id,
                            job: Some(Arc::new(job)),
                            node_allocation: HashMap::from([(node.id, allocs)]),
                            updated_at: i,
                            ..Default::default()
                        }))
                        .unwrap();
                    println!("ack plan {name} {}", outcome.index);
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

#[derive(Default)]
struct Acks {
    jobs: Vec<String>,
    plans: Vec<String>,
    max_index: u64,
}

/// Runs one child until it has acknowledged some commands, kills it after
/// a random delay, and returns what it acknowledged.
fn run_and_kill(dir: &Path, run: usize, rng: &mut impl Rng) -> Acks {
    let exe = std::env::current_exe().unwrap();
    let mut child = Process::new(exe)
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir)
        .env(CHILD_RUN_ENV, run.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    // Wait for the first acknowledgement so the kill lands mid-writing.
    loop {
        let line = lines_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the child acknowledges commands");
        let is_ack = line.starts_with("ack ");
        lines.push(line);
        if is_ack {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(rng.gen_range(0..150)));
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    reader.join().unwrap();
    lines.extend(lines_rx.try_iter());

    let mut acks = Acks::default();
    for line in lines {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let ["ack", kind, name, index] = parts[..] {
            let index: u64 = index.parse().unwrap();
            acks.max_index = acks.max_index.max(index);
            match kind {
                "job" => acks.jobs.push(name.to_string()),
                _ => acks.plans.push(name.to_string()),
            }
        }
    }
    acks
}

#[test]
fn acknowledged_commands_survive_sigkill_and_none_is_half_applied() {
    if std::env::var(CHILD_DIR_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::thread_rng();
    let mut acknowledged = Acks::default();
    for run in 0..KILLS {
        let acks = run_and_kill(dir.path(), run, &mut rng);
        acknowledged.jobs.extend(acks.jobs);
        acknowledged.plans.extend(acks.plans);
        acknowledged.max_index = acknowledged.max_index.max(acks.max_index);

        let store = StateStore::open(dir.path(), StoreOptions::default())
            .unwrap_or_else(|e| panic!("reopening after kill {run}: {e}"));
        // A crash tears at most the log's tail: it never makes a row bad.
        assert!(
            store.quarantined().is_empty(),
            "a kill -9 quarantined rows: {:?}",
            store.quarantined()
        );
        let state = store.snapshot();
        assert!(state.latest_index() >= acknowledged.max_index);
        for name in &acknowledged.jobs {
            assert!(
                state.job("default", name).is_some(),
                "acknowledged job {name} lost"
            );
        }
        for name in &acknowledged.plans {
            let placed = state.allocs_by_job("default", name).count();
            assert_eq!(
                placed, ALLOCS_PER_PLAN as usize,
                "acknowledged plan of {name} lost"
            );
        }
        // Atomicity: a job is there with its evaluation, and its plan
        // with all of its allocations, or not at all.
        for job in state.jobs() {
            assert_eq!(
                state.evals_by_job("default", &job.id).count(),
                1,
                "job {} without its evaluation",
                job.id
            );
            let placed = state.allocs_by_job("default", &job.id).count();
            assert!(
                placed == 0 || placed == ALLOCS_PER_PLAN as usize,
                "plan of {} half-applied: {placed} allocations",
                job.id
            );
        }
        for alloc in state.allocs() {
            assert!(
                state.job("default", &alloc.job_id).is_some(),
                "allocation {} without its job",
                alloc.id
            );
        }
        store.close();
    }
    // Every run acknowledged at least its first command before the kill.
    assert!(acknowledged.jobs.len() >= KILLS);
}
