//! The exec driver on this machine: fingerprint honesty everywhere, and
//! real isolated tasks where the host allows them (root, namespaces).

use super::*;
use crate::driver::TaskMount;
use std::time::Instant;

/// Why isolated tasks cannot run here, if they cannot.
fn unavailable() -> Option<String> {
    let info = Isolation::probe().driver_info();
    (!info.healthy).then(|| info.health_description.to_string())
}

#[test]
fn the_fingerprint_claims_only_what_the_host_gives() {
    let isolation = Isolation::probe();
    let info = isolation.driver_info();
    if !isolation.root {
        assert!(!info.detected && !info.healthy, "{info:?}");
        assert!(info.health_description.contains("root"));
        return;
    }
    assert!(info.detected);
    assert_eq!(info.healthy, isolation.namespaces.is_ok());
    if info.healthy {
        let limits = isolation.cgroups.is_ok().to_string();
        assert_eq!(info.attributes["driver.exec.limits.memory"], limits);
        assert_eq!(
            info.health_description.contains("degraded"),
            isolation.cgroups.is_err()
        );
    }
    let no_root = Isolation {
        root: false,
        namespaces: Err("not running as root".into()),
        cgroups: Err("not running as root".into()),
    };
    assert!(!no_root.driver_info().detected);
    let no_limits = Isolation {
        root: true,
        namespaces: Ok(()),
        cgroups: Err("no cpu controller".into()),
    };
    let d = no_limits.driver_info();
    assert!(
        d.healthy
            && d.health_description
                .contains("degraded: CPU and memory limits")
    );
    assert_eq!(d.attributes["driver.exec.limits.cpu"], "false");
}

#[test]
fn directories_are_where_the_task_sees_them() {
    let env = BTreeMap::from([
        (
            "NOMAD_TASK_DIR".to_string(),
            "/data/alloc/x/t/local".to_string(),
        ),
        (
            "HERDER_ALLOC_DIR".to_string(),
            "/data/alloc/x/alloc".to_string(),
        ),
        ("PATH".to_string(), "/bin".to_string()),
    ]);
    let inside = chroot_env_vars(&env);
    assert_eq!(inside["NOMAD_TASK_DIR"], "/local");
    assert_eq!(inside["HERDER_ALLOC_DIR"], "/alloc");
    assert_eq!(inside["PATH"], "/bin");
    assert!(!inside.contains_key("NOMAD_SECRETS_DIR"));
}

fn default_chroot() -> BTreeMap<String, String> {
    ["/bin", "/etc", "/lib", "/lib32", "/lib64", "/sbin", "/usr"]
        .into_iter()
        .map(|p| (p.to_string(), p.to_string()))
        .collect()
}

/// A task config for `script` in a fresh allocation dir under `root`.
fn task(root: &Path, script: &str, volume: Option<TaskMount>) -> TaskConfig {
    let alloc = root.join("alloc-1");
    let task_dir = alloc.join("t");
    crate::task_dir::build_task_dir(&task_dir).unwrap();
    for sub in ["logs", "data", "tmp"] {
        std::fs::create_dir_all(alloc.join("alloc").join(sub)).unwrap();
    }
    TaskConfig {
        task_name: "t".into(),
        config: BTreeMap::from([
            ("command".to_string(), serde_json::json!("/bin/sh")),
            ("args".to_string(), serde_json::json!(["-c", script])),
        ]),
        env: BTreeMap::from([
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ("NOMAD_TASK_DIR".to_string(), task_dir.display().to_string()),
        ]),
        task_dir,
        log_dir: alloc.join("alloc/logs"),
        shared_dir: alloc.join("alloc"),
        volume_mounts: volume.into_iter().collect(),
        memory_mb: 64,
        cpu_mhz: 100,
        ..Default::default()
    }
}

fn stdout_of(config: &TaskConfig) -> String {
    std::fs::read_to_string(config.log_dir.join("t.stdout.0")).unwrap_or_default()
}

#[tokio::test]
async fn a_task_runs_as_nobody_in_its_chroot_and_pid_namespace() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: the exec driver is unavailable here: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let host_only = tmp.path().join("host-volume");
    std::fs::create_dir_all(&host_only).unwrap();
    std::fs::write(host_only.join("f"), "from the host\n").unwrap();
    let script = "echo uid=$(id -u) pid=$$; ls /; cat /data/f; \
                  touch /data/new 2>/dev/null || echo read-only; echo $NOMAD_TASK_DIR";
    let config = task(
        tmp.path(),
        script,
        Some(TaskMount {
            host_path: host_only.clone(),
            destination: "/data".into(),
            read_only: true,
        }),
    );
    let driver = ExecDriver::new(default_chroot());
    let handle = driver.start_task(config.clone()).await.unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(30), driver.wait(handle))
        .await
        .unwrap();
    let out = stdout_of(&config);
    assert!(exit.successful(), "{exit:?} {out}");
    assert!(out.contains("uid=65534 pid=1\n"), "{out}");
    let listing: Vec<&str> = out.lines().collect();
    for inside in [
        "alloc", "bin", "local", "secrets", "tmp", "usr", "proc", "data",
    ] {
        assert!(listing.contains(&inside), "{inside} missing: {out}");
    }
    for host_only in ["root", "home", "var", "srv"] {
        assert!(!listing.contains(&host_only), "{host_only} leaked: {out}");
    }
    assert!(out.contains("from the host\nread-only\n/local\n"), "{out}");
    assert!(!host_only.join("new").exists());
    // The binds were made in the task's namespace only.
    assert_eq!(
        std::fs::read_dir(config.task_dir.join("bin"))
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test]
async fn stop_kills_everything_in_the_namespace_and_exec_enters_it() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: the exec driver is unavailable here: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let config = task(tmp.path(), "sleep 300 & sleep 300", None);
    let driver = ExecDriver::new(default_chroot());
    let handle = driver.start_task(config.clone()).await.unwrap();
    let live = live_of(&handle).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while first_child(live.pid).is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let task_pid = first_child(live.pid).expect("the task runs behind its shim");

    let request = ExecRequest {
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            "echo $$; ls /; exit 7".into(),
        ],
        tty: false,
    };
    let mut session = driver
        .exec_streaming(handle.clone(), request)
        .await
        .unwrap();
    let mut out = Vec::new();
    let code = loop {
        match session
            .output
            .recv()
            .await
            .expect("the session reports its exit")
        {
            crate::driver::ExecOutput::Stdout(b) => out.extend(b),
            crate::driver::ExecOutput::Stderr(_) => {}
            crate::driver::ExecOutput::Exited(r) => break r.exit_code,
        }
    };
    let out = String::from_utf8_lossy(&out);
    assert_eq!(code, 7, "{out}");
    let pid: i32 = out.lines().next().unwrap().parse().unwrap();
    assert!(pid < 10, "a pid of the task's namespace: {out}");
    assert!(out.lines().any(|l| l == "local") && !out.lines().any(|l| l == "root"));

    driver
        .stop(handle.clone(), Duration::from_millis(200), String::new())
        .await
        .unwrap();
    let exit = driver.wait(handle).await;
    assert!(!exit.successful());
    assert!(
        raw_exec::process_start_time(task_pid).is_none(),
        "the task's namespace is gone: {exit:?} {:?} {:?}",
        std::fs::read_to_string(format!("/proc/{task_pid}/status")),
        std::fs::read_to_string(format!("/proc/{}/status", live.pid)),
    );
}

#[tokio::test]
async fn a_command_missing_from_the_chroot_is_the_jobs_error() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: the exec driver is unavailable here: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut config = task(tmp.path(), "", None);
    config
        .config
        .insert("command".into(), serde_json::json!("/root/not-in-chroot"));
    let err = ExecDriver::new(default_chroot())
        .start_task(config)
        .await
        .unwrap_err();
    assert!(!err.is_node_failure(), "{err}");
    assert!(err.to_string().contains("not found in the task's chroot"));
}
