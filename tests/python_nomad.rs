//! Nomad's own Python client (python-nomad, from PyPI) against a running
//! herder: register a job, read it, list allocations, evaluations and
//! nodes, deregister it (tests/python/nomad_client.py).
//!
//! The client is installed by this test into a virtualenv under the
//! target dir, once (a file lock keeps concurrent test runs from
//! installing twice). A missing python3 or a failed install fails the
//! test with the reason: it is never skipped.

use herder::state::fixtures;
use herder::state::Command;
use herder_tests::{server_config, temp_dir, TestAgent};
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::sync::Arc;

/// `target/<profile>/python-nomad-venv`, next to the test binaries.
fn venv_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir of the test binary");
    profile_dir.join("python-nomad-venv")
}

fn run(what: &str, cmd: &mut Process) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e} (is python3 installed?)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
    text
}

/// A venv with python-nomad installed; created on first use.
fn python_with_nomad() -> PathBuf {
    let dir = venv_dir();
    let lock_path = dir.with_extension("lock");
    let lock = File::create(&lock_path).expect("create the venv lock file");
    // SAFETY: flock on a file descriptor we own; released when `lock` drops.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "lock {}", lock_path.display());
    let python = dir.join("bin").join("python");
    let ready = python.is_file()
        && Process::new(&python)
            .args(["-c", "import nomad"])
            .status()
            .is_ok_and(|s| s.success());
    if !ready {
        run(
            "creating a virtualenv with `python3 -m venv`",
            Process::new("python3").arg("-m").arg("venv").arg(&dir),
        );
        run(
            "installing python-nomad from PyPI with pip",
            Process::new(&python).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "python-nomad",
            ]),
        );
    }
    drop(lock);
    python
}

#[test]
fn python_nomad_registers_reads_lists_and_deregisters_a_job() {
    let python = python_with_nomad();
    let dir = temp_dir();
    let agent = TestAgent::start(server_config(dir.path()), false);
    let store = &agent.server.as_ref().expect("server").store;
    for i in 0..2 {
        let node = fixtures::node(&format!("node-{i}"));
        store
            .apply(Command::NodeRegister {
                node: Arc::new(node),
            })
            .expect("node registered");
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/nomad_client.py");
    let out = run(
        "the python-nomad script",
        Process::new(&python)
            .arg(&script)
            .env("NOMAD_ADDR", agent.url(""))
            .env("EXPECT_NODES", "2"),
    );
    assert!(out.contains("all checks passed"), "{out}");
    // The script purged its job: herder agrees.
    assert!(store
        .snapshot()
        .job("default", "python-nomad-example")
        .is_none());
}
