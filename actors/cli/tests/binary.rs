//! The `herder` binary as a user starts it.
//!
//! These tests are also why `cargo test --workspace` builds the binary
//! that the end-to-end tests of `tests/` spawn (`target/debug/herder`):
//! cargo builds a package's binaries for its own integration tests, and
//! `herder-cli` is the package that has the binary.

use std::process::Command;

const HERDER: &str = env!("CARGO_BIN_EXE_herder");

#[test]
fn version_prints_the_version_and_the_commit_like_nomad() {
    let out = Command::new(HERDER)
        .arg("version")
        .output()
        .expect("run herder version");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.trim();
    let commit = line
        .strip_prefix(&format!("Herder v{} (", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not `Herder vX (commit)`: {line:?}"));
    let is_sha = commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit());
    assert!(is_sha || commit == "unknown", "{commit:?}");
}

#[test]
fn an_unknown_verb_is_a_usage_error_that_names_it() {
    let out = Command::new(HERDER)
        .arg("frobnicate")
        .output()
        .expect("run herder");
    assert!(!out.status.success(), "{out:?}");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("frobnicate"), "{text}");
}
