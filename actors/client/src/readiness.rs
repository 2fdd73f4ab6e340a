//! The node's readiness check: whether this machine may be given work.
//!
//! The servers keep a new (or flaky) node out of placement until its client
//! says it is ready. The check is the configured `client.readiness_check`
//! command (run with `/bin/sh -c`; exit 0 means ready, its output explains a
//! failure), or, when none is configured, the built-in one: the data dir is
//! writable and at least one driver is healthy.

use crate::driver::DriverSet;
use std::path::Path;
use std::time::Duration;

/// How long a readiness command may run before it counts as failed.
pub const READINESS_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the readiness check; `Err` says why the node is not ready.
pub async fn check_readiness(
    command: &str,
    data_dir: &Path,
    drivers: &DriverSet,
    timeout: Duration,
) -> Result<(), String> {
    if command.trim().is_empty() {
        return builtin_check(data_dir, drivers);
    }
    // Its own process group, so a timeout ends everything it started.
    let child = tokio::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .current_dir(data_dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("readiness check could not run: {e}"))?;
    let pgid = child.id().and_then(|p| i32::try_from(p).ok());
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Err(_) => {
            if let Some(pgid) = pgid.filter(|p| *p > 1) {
                // SAFETY: kill has no memory effects; the group is ours.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
            }
            return Err(format!("readiness check did not finish within {timeout:?}"));
        }
        Ok(Err(e)) => return Err(format!("readiness check failed to run: {e}")),
        Ok(Ok(o)) => o,
    };
    if output.status.success() {
        return Ok(());
    }
    let mut why = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if why.is_empty() {
        why = String::from_utf8_lossy(&output.stdout).trim().to_string();
    }
    Err(format!("readiness check failed ({}): {why}", output.status))
}

fn builtin_check(data_dir: &Path, drivers: &DriverSet) -> Result<(), String> {
    std::fs::create_dir_all(data_dir)
        .map_err(|e| format!("data dir {}: {e}", data_dir.display()))?;
    let probe = data_dir.join(".herder-readiness");
    std::fs::write(&probe, b"ok")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| format!("data dir {} is not writable: {e}", data_dir.display()))?;
    if !drivers.iter().any(|d| {
        let info = d.fingerprint();
        info.detected && info.healthy
    }) {
        return Err("no healthy task driver".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn command_and_builtin_checks_decide_readiness() {
        let tmp = tempfile::tempdir().unwrap();
        let (drivers, _) = DriverSet::from_names(&["mock_driver".into()], &Default::default());
        let t = Duration::from_secs(30);
        assert_eq!(check_readiness("", tmp.path(), &drivers, t).await, Ok(()));
        assert_eq!(
            check_readiness("test -d .", tmp.path(), &drivers, t).await,
            Ok(())
        );
        let err = check_readiness("echo disk full >&2; exit 1", tmp.path(), &drivers, t)
            .await
            .unwrap_err();
        assert!(err.contains("disk full"), "{err}");
        let err = check_readiness("sleep 30", tmp.path(), &drivers, Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(err.contains("did not finish"), "{err}");
        let none = DriverSet::default();
        let err = check_readiness("", tmp.path(), &none, t).await.unwrap_err();
        assert!(err.contains("no healthy task driver"), "{err}");
    }
}
