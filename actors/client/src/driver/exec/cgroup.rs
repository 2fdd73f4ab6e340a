//! cgroup v2 limits for `exec` tasks: CPU weight from the task's CPU
//! shares and a hard memory limit, each task in a cgroup of its own under
//! `<cgroup2 mount>/herder/`.
//!
//! Only cgroup v2 is used: a host whose cgroup2 hierarchy lacks the `cpu`
//! or `memory` controller (a cgroup v1 or hybrid host, where v1 holds
//! them), or where herder cannot enable them, runs tasks without limits,
//! and [`probe`] says why so the fingerprint can report it.

use std::io;
use std::path::{Path, PathBuf};

/// The subtree herder's task cgroups live in, under the cgroup2 mount.
const HERDER_GROUP: &str = "herder";

/// A writable cgroup2 hierarchy with `cpu` and `memory` enabled for
/// herder's task cgroups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroups {
    /// `<mount>/herder`.
    parent: PathBuf,
}

/// Finds the cgroup2 mount of this host and prepares herder's subtree,
/// or says why limits cannot be enforced.
pub fn probe() -> Result<Cgroups, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    let mount = cgroup2_mount(&mountinfo).ok_or("no cgroup2 filesystem is mounted")?;
    probe_at(&mount)
}

/// [`probe`] of the cgroup2 hierarchy mounted at `mount`.
pub fn probe_at(mount: &Path) -> Result<Cgroups, String> {
    let controllers = std::fs::read_to_string(mount.join("cgroup.controllers"))
        .map_err(|e| format!("{}: {e}", mount.display()))?;
    let have: Vec<&str> = controllers.split_whitespace().collect();
    let missing: Vec<&str> = ["cpu", "memory"]
        .into_iter()
        .filter(|c| !have.contains(c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the cgroup v2 hierarchy at {} has no {} controller (a cgroup v1 or hybrid host)",
            mount.display(),
            missing.join(" or ")
        ));
    }
    let parent = mount.join(HERDER_GROUP);
    let enable = |dir: &Path| -> io::Result<()> {
        std::fs::write(dir.join("cgroup.subtree_control"), "+cpu +memory")
    };
    enable(mount)
        .and_then(|()| std::fs::create_dir_all(&parent))
        .and_then(|()| enable(&parent))
        .map_err(|e| {
            format!(
                "cannot enable the cpu and memory controllers under {}: {e}",
                mount.display()
            )
        })?;
    Ok(Cgroups { parent })
}

/// The mount point of the cgroup2 filesystem in `mountinfo`; the unified
/// hierarchy of a hybrid host (`/sys/fs/cgroup/unified`) counts.
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        let mount_point = left.split_whitespace().nth(4)?;
        (fstype == "cgroup2").then(|| PathBuf::from(mount_point))
    })
}

/// CPU weight (1..=10000) for CPU shares (MHz), as runc converts them.
pub fn cpu_weight(shares: i64) -> u64 {
    let shares = shares.clamp(2, 262_144) as u64;
    (1 + ((shares - 2) * 9999) / 262_142).clamp(1, 10_000)
}

/// One task's cgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskCgroup {
    pub dir: PathBuf,
}

impl Cgroups {
    /// Creates the cgroup of task `name` with its limits.
    pub fn create(&self, name: &str, cpu_shares: i64, memory_mb: i64) -> io::Result<TaskCgroup> {
        let dir = self.parent.join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("cpu.weight"), cpu_weight(cpu_shares).to_string())?;
        if memory_mb > 0 {
            let bytes = memory_mb.saturating_mul(1024 * 1024);
            std::fs::write(dir.join("memory.max"), bytes.to_string())?;
            // No swap beyond the limit: a task over it is killed, as
            // Nomad's are, rather than slowed down.
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        }
        Ok(TaskCgroup { dir })
    }
}

impl TaskCgroup {
    /// The file a process writes `0` to join this cgroup.
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Kills every process left in the cgroup and removes it.
    pub fn destroy(&self) {
        if std::fs::write(self.dir.join("cgroup.kill"), "1").is_err() {
            let procs = std::fs::read_to_string(self.procs_file()).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: kill has no memory effects.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        for _ in 0..50 {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                // Busy while the killed processes are being reaped.
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
        tracing::warn!(cgroup = %self.dir.display(), "a task's cgroup could not be removed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_on_hybrid_and_unified_hosts() {
        let hybrid = "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                      31 25 0:27 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let v1 = "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(cgroup2_mount(v1), None);
    }

    #[test]
    fn cpu_shares_become_weights_as_runc_converts_them() {
        assert_eq!(cpu_weight(2), 1);
        assert_eq!(cpu_weight(1024), 39);
        assert_eq!(cpu_weight(262_144), 10_000);
        assert_eq!(cpu_weight(0), 1);
    }

    #[test]
    fn a_hierarchy_without_controllers_is_refused_and_one_with_them_limits_tasks() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("cgroup.controllers"), "").unwrap();
        let err = probe_at(tmp.path()).unwrap_err();
        assert!(err.contains("no cpu or memory controller"), "{err}");

        std::fs::write(
            tmp.path().join("cgroup.controllers"),
            "cpuset cpu io memory pids",
        )
        .unwrap();
        let cgroups = probe_at(tmp.path()).unwrap();
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
        assert_eq!(
            read(tmp.path().join("cgroup.subtree_control")),
            "+cpu +memory"
        );
        let task = cgroups.create("a1.web", 500, 256).unwrap();
        assert_eq!(
            read(task.dir.join("cpu.weight")),
            cpu_weight(500).to_string()
        );
        assert_eq!(
            read(task.dir.join("memory.max")),
            (256u64 << 20).to_string()
        );
        assert!(task.procs_file().starts_with(tmp.path().join("herder")));
    }
}
