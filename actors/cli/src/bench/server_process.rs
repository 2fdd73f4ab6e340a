//! The server under test as a child process: `herder agent -server` on a
//! data dir the load generator owns, so its memory (peak RSS), CPU and
//! restart time are the server's alone, not mixed with the simulated
//! nodes' and the generator's.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a server may take to open its data dir and bind.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a graceful stop may take before the process is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ServerProcessError {
    #[error("cannot start {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error("the server did not print its HTTP address within {0:?} (exit: {1})")]
    NoAddress(Duration, String),
}

/// A running `herder agent -server`.
pub struct ServerProcess {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub address: String,
    /// From spawn to the HTTP API listening (the state loaded).
    pub start_time: Duration,
}

impl ServerProcess {
    /// Starts a server on `data_dir` with extra `env` settings
    /// (`HERDER_SERVER__...`) and waits until its API listens.
    pub fn start(
        binary: &Path,
        data_dir: &Path,
        env: &[(String, String)],
    ) -> Result<ServerProcess, ServerProcessError> {
        let started = Instant::now();
        // The server's own log (warnings such as nodes marked down during
        // churn) goes into its data dir, not over the progress line.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(data_dir.join("server.log"))
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null());
        let mut child = Command::new(binary)
            .args(["agent", "-server", "-http-port", "0", "-log-level", "warn"])
            .arg("-data-dir")
            .arg(data_dir)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|source| ServerProcessError::Spawn {
                binary: binary.to_path_buf(),
                source,
            })?;
        let address = match child.stdout.take() {
            Some(stdout) => wait_for_address(stdout),
            None => None,
        };
        match address {
            Some(address) => Ok(ServerProcess {
                child,
                address,
                start_time: started.elapsed(),
            }),
            None => {
                let _ = child.kill();
                let status = child
                    .wait()
                    .map_or_else(|e| e.to_string(), |s| s.to_string());
                Err(ServerProcessError::NoAddress(START_TIMEOUT, status))
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak resident memory so far (`VmHWM`), in bytes.
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        proc_status_kib(self.pid(), "VmHWM:").map(|kib| kib * 1024)
    }

    /// User + system CPU time so far.
    pub fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        // Fields after the command name (which may hold spaces) start
        // after the last ')'; utime and stime are the 12th and 13th.
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf only reads a configuration value.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let per_second = u64::try_from(per_second).ok().filter(|t| *t > 0)?;
        Some(Duration::from_millis(ticks * 1000 / per_second))
    }

    /// SIGTERM, then waits for the graceful shutdown (SIGKILL after the
    /// stop timeout).
    pub fn stop(mut self) -> Duration {
        let started = Instant::now();
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: signals our own child process.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        while started.elapsed() < STOP_TIMEOUT {
            if let Ok(Some(_)) = self.child.try_wait() {
                return started.elapsed();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        started.elapsed()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads the agent's banner until its `HTTP API: http://...` line; the
/// rest of its output is drained in the background so it never blocks.
fn wait_for_address(stdout: std::process::ChildStdout) -> Option<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if !sent {
                if let Some(addr) = line.trim().strip_prefix("HTTP API: ") {
                    let _ = tx.send(addr.to_string());
                    sent = true;
                }
            }
        }
    });
    rx.recv_timeout(START_TIMEOUT).ok()
}

fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
