//! The process side of the `exec` driver's isolation: what runs between
//! `fork` and `exec` to put a task (or an `alloc exec` command) into its
//! namespaces and chroot, as its user.
//!
//! Why a `pre_exec` hook and a shim process: `unshare(CLONE_NEWPID)` (and
//! `setns` into a PID namespace) moves only the caller's *children* into
//! the namespace, so the process `std::process::Command` forks cannot
//! itself become the task. It becomes a shim instead: it unshares the
//! mount, PID, IPC and UTS namespaces, forks the task (PID 1 of the new
//! namespace), forwards every signal it gets to it and exits as it exits.
//! The client sees an ordinary child (the shim) to wait for and signal, so
//! the log pipes, reaper and recovery of `raw_exec` serve `exec` as they
//! are. SIGKILL, which the shim cannot forward, kills the task through
//! `PR_SET_PDEATHSIG`; the death of a PID namespace's first process kills
//! everything in it, so nothing the task started survives a stop.
//!
//! The shim closes its copies of the parent's descriptors, among them the
//! pipe `std` reads an `exec` failure from, so `spawn` reports the task's
//! own `exec` (success, or why it failed) rather than waiting for the shim.
//!
//! Only async-signal-safe calls run after `fork`: every path and argument
//! is prepared (as `CString`s) before, so the hooks allocate nothing.
//! Bind mounts are made inside the task's private mount namespace, so the
//! host sees only the empty mount points in the task directory.

use crate::driver::{DriverError, TaskConfig};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Device nodes of the host a task's `/dev` offers (on a tmpfs of its own).
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// Who a task runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, from the group database.
    pub groups: Vec<libc::gid_t>,
}

/// Looks `name` up in the user and group databases.
pub fn resolve_user(name: &str) -> Result<Creds, DriverError> {
    let (uid, gid) = crate::driver::raw_exec::lookup_user(name)?;
    let cname = CString::new(name).map_err(|_| DriverError::task("invalid user name"))?;
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: the buffer holds `n` gids; getgrouplist writes at most
        // that many and sets `n` to the count it needs.
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(usize::try_from(n).unwrap_or(0));
            break;
        }
        if groups.len() >= 65_536 {
            return Err(DriverError::task(format!(
                "user {name:?} is in too many groups"
            )));
        }
        groups.resize(groups.len() * 4, 0);
    }
    Ok(Creds { uid, gid, groups })
}

/// What a mount point must be before mounting on it, inside the task's
/// mount namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MakeTarget {
    /// Exists already (made on the host before the fork).
    Nothing,
    File,
    Dir,
}

/// One `mount(2)` call, prepared.
#[derive(Debug)]
struct MountOp {
    source: Option<CString>,
    target: CString,
    fstype: Option<CString>,
    flags: libc::c_ulong,
    data: Option<CString>,
    /// Remount read-only afterwards with these extra flags (a bind mount
    /// takes `MS_RDONLY` only on a remount, which must keep the source's
    /// locked `nosuid`/`nodev`/`noexec`).
    readonly_remount: Option<libc::c_ulong>,
    make: MakeTarget,
}

/// Everything the task's process does between fork and exec.
#[derive(Debug)]
pub struct Sandbox {
    root: CString,
    mounts: Vec<MountOp>,
    creds: Creds,
    cgroup_procs: Option<CString>,
}

fn cpath(p: &Path) -> Result<CString, DriverError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| DriverError::task(format!("path {} has a NUL byte", p.display())))
}

/// `inside` (absolute, no `..`) under `root`.
pub fn confined(root: &Path, inside: &str) -> Result<PathBuf, DriverError> {
    let rel = Path::new(inside.trim_start_matches('/'));
    if rel.as_os_str().is_empty() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(DriverError::task(format!(
            "{inside:?} is not a path inside the task's chroot"
        )));
    }
    Ok(root.join(rel))
}

/// The mount flags of the filesystem holding `path` that a read-only
/// remount of a bind of it must keep.
fn locked_flags(path: &Path) -> libc::c_ulong {
    let Ok(c) = cpath(path) else { return 0 };
    // SAFETY: statvfs fills the struct it is given.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    let mut flags = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            flags |= ms_flag;
        }
    }
    flags
}

/// Makes `target` on the host (an empty directory, or an empty file for
/// a file source) so a bind mount has something to cover.
fn make_mount_point(source: &Path, target: &Path) -> Result<(), DriverError> {
    let node_err = |e: io::Error| DriverError::Node(format!("{}: {e}", target.display()));
    if source.is_dir() {
        std::fs::create_dir_all(target).map_err(node_err)
    } else {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(node_err)?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(target)
            .map(drop)
            .map_err(node_err)
    }
}

impl Sandbox {
    /// Plans the chroot of `config`'s task: `chroot_env` and the task's
    /// host volumes bound in, the shared alloc dir at `/alloc`, a fresh
    /// `/proc` and a minimal `/dev`. Makes the mount points on the host.
    pub fn plan(
        config: &TaskConfig,
        chroot_env: &BTreeMap<String, String>,
        creds: Creds,
        cgroup_procs: Option<&Path>,
    ) -> Result<Sandbox, DriverError> {
        let root = &config.task_dir;
        let mut mounts = Vec::new();
        for (host, inside) in chroot_env {
            let source = Path::new(host);
            if inside.is_empty() || !source.exists() {
                continue;
            }
            mounts.push(Self::bind(source, &confined(root, inside)?, true)?);
        }
        mounts.push(Self::bind(&config.shared_dir, &root.join("alloc"), false)?);
        for m in &config.volume_mounts {
            let target = confined(root, &m.destination)?;
            mounts.push(Self::bind(&m.host_path, &target, m.read_only)?);
        }
        mounts.extend(Self::proc_and_dev(root)?);
        Ok(Sandbox {
            root: cpath(root)?,
            mounts,
            creds,
            cgroup_procs: cgroup_procs.map(cpath).transpose()?,
        })
    }

    fn bind(source: &Path, target: &Path, read_only: bool) -> Result<MountOp, DriverError> {
        if !source.exists() {
            return Err(DriverError::Node(format!(
                "{} does not exist on this node",
                source.display()
            )));
        }
        make_mount_point(source, target)?;
        Ok(MountOp {
            source: Some(cpath(source)?),
            target: cpath(target)?,
            fstype: None,
            flags: libc::MS_BIND | libc::MS_REC,
            data: None,
            readonly_remount: read_only.then(|| locked_flags(source)),
            make: MakeTarget::Nothing,
        })
    }

    /// A `/proc` of the task's PID namespace, and a tmpfs `/dev` with the
    /// few host devices programs expect and a `/dev/shm`.
    fn proc_and_dev(root: &Path) -> Result<Vec<MountOp>, DriverError> {
        let node_err = |e: io::Error| DriverError::Node(format!("{}: {e}", root.display()));
        for dir in ["proc", "dev"] {
            std::fs::create_dir_all(root.join(dir)).map_err(node_err)?;
        }
        let c = |s: &str| CString::new(s).map_err(|_| DriverError::Node("NUL".into()));
        let fs = |fstype: &str, target: PathBuf, flags, data: Option<&str>, make| {
            Ok::<_, DriverError>(MountOp {
                source: Some(c(fstype)?),
                target: cpath(&target)?,
                fstype: Some(c(fstype)?),
                flags,
                data: data.map(c).transpose()?,
                readonly_remount: None,
                make,
            })
        };
        let mut ops = vec![
            fs(
                "proc",
                root.join("proc"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                None,
                MakeTarget::Nothing,
            )?,
            fs(
                "tmpfs",
                root.join("dev"),
                libc::MS_NOSUID | libc::MS_NOEXEC,
                Some("mode=755,size=65536k"),
                MakeTarget::Nothing,
            )?,
        ];
        for dev in DEVICES {
            let host = Path::new("/dev").join(dev);
            if host.exists() {
                ops.push(MountOp {
                    source: Some(cpath(&host)?),
                    target: cpath(&root.join("dev").join(dev))?,
                    fstype: None,
                    flags: libc::MS_BIND,
                    data: None,
                    readonly_remount: None,
                    make: MakeTarget::File,
                });
            }
        }
        // The terminals' filesystem, so an `alloc exec -t` command finds
        // its terminal by name (`tty`, `ttyname`): each terminal is its
        // owner's alone.
        ops.push(MountOp {
            source: Some(c("/dev/pts")?),
            target: cpath(&root.join("dev/pts"))?,
            fstype: None,
            flags: libc::MS_BIND,
            data: None,
            readonly_remount: None,
            make: MakeTarget::Dir,
        });
        ops.push(fs(
            "tmpfs",
            root.join("dev/shm"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=1777,size=65536k"),
            MakeTarget::Dir,
        )?);
        Ok(ops)
    }

    /// Installs the task's isolation on `cmd`: the shim unshares the
    /// namespaces and forks; the task mounts, chroots, drops to its user.
    pub fn install(self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: the hook makes only async-signal-safe system calls on
        // data prepared before the fork (see the module comment).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                crate::driver::reset_ignored_signals();
                if let Some(procs) = &self.cgroup_procs {
                    join_cgroup(procs)?;
                }
                let flags = libc::CLONE_NEWNS
                    | libc::CLONE_NEWPID
                    | libc::CLONE_NEWIPC
                    | libc::CLONE_NEWUTS;
                check(libc::unshare(flags))?;
                fork_behind_shim()?;
                // The task: PID 1 of its namespace, in a group of its own
                // so a signal to the shim's group reaches it once.
                check(libc::setpgid(0, 0))?;
                self.enter_chroot()?;
                drop_privileges(&self.creds)
            });
        }
    }

    /// Mounts everything planned (privately: nothing propagates to the
    /// host) and chroots into the task dir.
    unsafe fn enter_chroot(&self) -> io::Result<()> {
        let none = std::ptr::null::<libc::c_char>();
        let root = c"/";
        check(libc::mount(
            none,
            root.as_ptr(),
            none,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        for op in &self.mounts {
            make_target(op)?;
            let opt = |c: &Option<CString>| c.as_ref().map_or(none, |c| c.as_ptr());
            check(libc::mount(
                opt(&op.source),
                op.target.as_ptr(),
                opt(&op.fstype),
                op.flags,
                opt(&op.data).cast(),
            ))?;
            if let Some(extra) = op.readonly_remount {
                check(libc::mount(
                    none,
                    op.target.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | extra,
                    std::ptr::null(),
                ))?;
            }
        }
        check(libc::chroot(self.root.as_ptr()))?;
        check(libc::chdir(root.as_ptr()))
    }
}

/// The namespaces and chroot of a running `exec` task, opened for an
/// `alloc exec` command to enter.
pub struct TaskNamespaces {
    /// ipc, uts, pid, mnt: the mount namespace last, as it changes what
    /// the others' paths would mean.
    fds: Vec<(OwnedFd, libc::c_int)>,
    root: CString,
    creds: Creds,
}

impl TaskNamespaces {
    /// Opens the namespaces of the task whose first process is `pid` (as
    /// the host numbers it).
    pub fn open(pid: i32, task_dir: &Path, creds: Creds) -> Result<Self, DriverError> {
        let mut fds = Vec::new();
        for (name, kind) in [
            ("ipc", libc::CLONE_NEWIPC),
            ("uts", libc::CLONE_NEWUTS),
            ("pid", libc::CLONE_NEWPID),
            ("mnt", libc::CLONE_NEWNS),
        ] {
            let path = format!("/proc/{pid}/ns/{name}");
            let file = std::fs::File::open(&path)
                .map_err(|e| DriverError::task(format!("task not running ({path}: {e})")))?;
            fds.push((OwnedFd::from(file), kind));
        }
        Ok(TaskNamespaces {
            fds,
            root: cpath(task_dir)?,
            creds,
        })
    }

    /// Makes `cmd` run inside the task: its namespaces, its chroot, its
    /// user; a shim outside forwards signals as for the task itself.
    pub fn install(self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: as for `Sandbox::install`: system calls on prepared data.
        unsafe {
            cmd.pre_exec(move || {
                crate::driver::reset_ignored_signals();
                for (fd, kind) in &self.fds {
                    check(libc::setns(fd.as_raw_fd(), *kind))?;
                }
                fork_behind_shim()?;
                check(libc::chroot(self.root.as_ptr()))?;
                check(libc::chdir(c"/".as_ptr()))?;
                drop_privileges(&self.creds)
            });
        }
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Creates a mount point inside the new mount tree (for `/dev` entries,
/// which live on the task's own tmpfs).
unsafe fn make_target(op: &MountOp) -> io::Result<()> {
    match op.make {
        MakeTarget::Nothing => Ok(()),
        MakeTarget::Dir => {
            if libc::mkdir(op.target.as_ptr(), 0o755) < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(e);
                }
            }
            Ok(())
        }
        MakeTarget::File => {
            let fd = libc::open(
                op.target.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                0o644,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            libc::close(fd);
            Ok(())
        }
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is
/// `procs` (cgroup v2: writing `0` moves the writer).
unsafe fn join_cgroup(procs: &CString) -> io::Result<()> {
    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let written = libc::write(fd, c"0".as_ptr().cast(), 1);
    libc::close(fd);
    if written != 1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Supplementary groups, group, user; then the parent-death signal, which
/// a change of credentials would clear.
unsafe fn drop_privileges(creds: &Creds) -> io::Result<()> {
    check(libc::setgroups(creds.groups.len(), creds.groups.as_ptr()))?;
    check(libc::setgid(creds.gid))?;
    check(libc::setuid(creds.uid))?;
    check(libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        0,
        0,
        0,
    ))
}

/// Forks; returns in the child (the process to become the command), while
/// the parent becomes the shim and never returns (see the module comment).
unsafe fn fork_behind_shim() -> io::Result<()> {
    let mut all: libc::sigset_t = std::mem::zeroed();
    let mut old: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    // Blocked before the fork so no signal meant for the child is lost
    // between the fork and the shim's first wait.
    check(libc::sigprocmask(libc::SIG_BLOCK, &all, &mut old))?;
    let child = libc::fork();
    if child < 0 {
        let e = io::Error::last_os_error();
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        return Err(e);
    }
    if child == 0 {
        check(libc::sigprocmask(
            libc::SIG_SETMASK,
            &old,
            std::ptr::null_mut(),
        ))?;
        return Ok(());
    }
    close_descriptors_from(3);
    shim(child, &all)
}

/// Closes every descriptor from `first` on.
unsafe fn close_descriptors_from(first: libc::c_uint) {
    if libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) != 0 {
        for fd in first..4096 {
            libc::close(fd as libc::c_int);
        }
    }
}

/// Forwards every signal to `child` until it exits, then exits as it did.
unsafe fn shim(child: libc::pid_t, all: &libc::sigset_t) -> ! {
    loop {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let sig = libc::sigwaitinfo(all, &mut info);
        if sig < 0 {
            continue;
        }
        if sig != libc::SIGCHLD {
            libc::kill(child, sig);
            continue;
        }
        let mut status = 0;
        if libc::waitpid(child, &mut status, libc::WNOHANG) == child {
            exit_as(status);
        }
    }
}

/// Exits with the child's `status`: its code, or death by its signal.
unsafe fn exit_as(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        libc::signal(sig, libc::SIG_DFL);
        let mut only: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut only);
        libc::sigaddset(&mut only, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
    libc::_exit(libc::WEXITSTATUS(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_the_chroot_stay_inside() {
        let root = Path::new("/t");
        assert_eq!(confined(root, "/data").unwrap(), Path::new("/t/data"));
        assert_eq!(confined(root, "etc/app").unwrap(), Path::new("/t/etc/app"));
        assert!(confined(root, "/../etc").is_err());
        assert!(confined(root, "/").is_err());
        assert!(confined(root, "a/./../b").is_err());
    }

    #[test]
    fn users_resolve_with_their_groups() {
        let root = resolve_user("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0));
        assert!(resolve_user("no-such-user-herder").is_err());
    }
}
