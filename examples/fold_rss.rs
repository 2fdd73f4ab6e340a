//! Measures what folding a data dir's log into sled costs in memory: opens
//! the store on a copy of a server's data dir (`<data dir>/server`), makes
//! one write so that every closed log segment is handed to the
//! checkpointer at once, and prints the resident set every two seconds
//! until the log is folded (docs/PERFORMANCE.md, session 19).
//!
//! ```sh
//! cargo build --release --example fold_rss
//! cp -a <data dir> /tmp/copy && target/release/examples/fold_rss /tmp/copy/server
//! ```
//!
//! It changes the data dir it is given (the log ends up in sled): run it on
//! a copy.

use herder::state::{Command, StateStore, StoreOptions};
use std::path::Path;
use std::time::{Duration, Instant};

fn resident() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS"))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "VmRSS: unknown".to_string())
}

fn log_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("wal")).map_or(0, |d| d.count())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: fold_rss <a copy of a data dir>/server")?;
    let dir = Path::new(&dir);
    // Every closed segment is past a zero threshold: the next commit hands
    // them all to the checkpointer.
    let options = StoreOptions {
        checkpoint_bytes: 0,
        ..StoreOptions::default()
    };
    let store = StateStore::open(dir, options)?;
    println!("loaded: {}", resident());
    let started = Instant::now();
    store.apply(Command::EvalDelete {
        eval_ids: vec![],
        alloc_ids: vec![],
    })?;
    while log_files(dir) > 1 && started.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_secs(2));
        let files = log_files(dir);
        let secs = started.elapsed().as_secs_f64();
        println!("{secs:>5.1}s log files={files} {}", resident());
    }
    store.close();
    println!("folded: {}", resident());
    Ok(())
}
