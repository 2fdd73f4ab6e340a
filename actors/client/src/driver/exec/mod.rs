//! `exec`: runs a task isolated, as Nomad's `exec` driver does.
//!
//! The task gets mount, PID, IPC and UTS namespaces of its own, is
//! chrooted into its task directory (populated by read-only bind mounts of
//! the client's `chroot_env`, its host volumes, the group's shared `alloc/`
//! and its own `local/`, `secrets/` and `tmp/`), and runs as the job's
//! `user`, `nobody` when none is given (as Nomad 1.1's `exec`). Where the
//! host has a writable cgroup v2 hierarchy with the `cpu` and `memory`
//! controllers, the task's CPU weight and memory limit are enforced there.
//!
//! What the host cannot give is never claimed: [`Isolation::probe`] finds
//! out once, and the fingerprint reports it — not root: the driver is not
//! detected; no namespaces: unhealthy; no cgroup v2 limits: healthy but
//! degraded, with the reason in its health description and
//! `driver.exec.limits.*` attributes set to `false`.
//!
//! Once started the task is an ordinary child of the client (see
//! `sandbox`), so waiting, stopping, signalling, recovery and logs are
//! `raw_exec`'s.

pub mod cgroup;
pub mod sandbox;

use super::exec_session::run_session;
use super::raw_exec::{self, live_of, Live};
use super::{
    BoxFuture, Driver, DriverError, ExecRequest, ExecSession, ExitResult, HandleState, TaskConfig,
    TaskHandle,
};
use cgroup::{Cgroups, TaskCgroup};
use herder::structs::node::labels;
use herder::structs::DriverInfo;
use sandbox::{Creds, Sandbox, TaskNamespaces};
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

pub const NAME: &str = "exec";

/// The user a task runs as when its job names none (Nomad's `exec`).
pub const DEFAULT_USER: &str = "nobody";

/// How long a stopped task's namespace may take to die once its shim is
/// gone.
const NAMESPACE_GONE_WITHIN: Duration = Duration::from_secs(10);

/// The namespaces every task gets.
const NAMESPACES: &str = "mount,pid,ipc,uts";

/// What this host lets the driver do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Isolation {
    pub root: bool,
    /// Why namespaces cannot be created, if they cannot.
    pub namespaces: Result<(), String>,
    /// cgroup v2 limits, or why there are none.
    pub cgroups: Result<Cgroups, String>,
}

impl Isolation {
    /// Finds out what this host allows (namespaces by creating them in a
    /// throwaway child).
    pub fn probe() -> Isolation {
        // SAFETY: geteuid cannot fail and has no effects.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            return Isolation {
                root,
                namespaces: Err("not running as root".into()),
                cgroups: Err("not running as root".into()),
            };
        }
        Isolation {
            root,
            namespaces: probe_namespaces(),
            cgroups: cgroup::probe(),
        }
    }

    /// The driver's fingerprint for this isolation.
    pub fn driver_info(&self) -> DriverInfo {
        let mut info = DriverInfo {
            update_time: Some(crate::clock::now_nanos()),
            ..Default::default()
        };
        if !self.root {
            info.health_description = "exec driver must run as root".into();
            return info;
        }
        info.detected = true;
        if let Err(e) = &self.namespaces {
            info.health_description = format!("cannot create namespaces: {e}").into();
            return info;
        }
        info.healthy = true;
        let limits = self.cgroups.is_ok().to_string();
        info.attributes = labels([
            (format!("driver.{NAME}"), "1".to_string()),
            (format!("driver.{NAME}.namespaces"), NAMESPACES.to_string()),
            (format!("driver.{NAME}.chroot"), "true".to_string()),
            (format!("driver.{NAME}.limits.cpu"), limits.clone()),
            (format!("driver.{NAME}.limits.memory"), limits),
        ]);
        info.health_description = match &self.cgroups {
            Ok(_) => "Healthy".into(),
            Err(e) => {
                format!("Healthy, degraded: CPU and memory limits are not enforced: {e}").into()
            }
        };
        info
    }
}

/// Whether a child can unshare the namespaces tasks get.
fn probe_namespaces() -> Result<(), String> {
    let mut cmd = std::process::Command::new("/bin/true");
    // SAFETY: unshare is a system call on no shared memory.
    unsafe {
        cmd.pre_exec(|| {
            let flags =
                libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
            if libc::unshare(flags) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("/bin/true in new namespaces exited with {s}")),
        Err(e) => Err(e.to_string()),
    }
}

pub struct ExecDriver {
    chroot_env: BTreeMap<String, String>,
    isolation: OnceLock<Isolation>,
}

impl ExecDriver {
    /// An `exec` driver populating chroots from `chroot_env` (host path =>
    /// path in the chroot); the host is probed on first use.
    pub fn new(chroot_env: BTreeMap<String, String>) -> Self {
        ExecDriver {
            chroot_env,
            isolation: OnceLock::new(),
        }
    }

    fn isolation(&self) -> &Isolation {
        self.isolation.get_or_init(Isolation::probe)
    }

    fn start(&self, mut config: TaskConfig) -> Result<TaskHandle, DriverError> {
        let isolation = self.isolation();
        let info = isolation.driver_info();
        if !info.healthy {
            return Err(DriverError::Node(format!(
                "exec driver unavailable: {}",
                info.health_description
            )));
        }
        let (command, args) = raw_exec::command_and_args(&config.config)?;
        if config.user.is_empty() {
            config.user = DEFAULT_USER.into();
        }
        let creds = sandbox::resolve_user(&config.user)?;
        self.check_command(&config, &command)?;
        give_dirs_to(&config, &creds)?;
        config.env = chroot_env_vars(&config.env);
        let cgroup = match &isolation.cgroups {
            Ok(cgroups) => Some(task_cgroup(cgroups, &config)?),
            Err(_) => None,
        };
        let plan = Sandbox::plan(
            &config,
            &self.chroot_env,
            creds,
            cgroup.as_ref().map(|c| c.procs_file()).as_deref(),
        );
        let started = plan.and_then(|sandbox| {
            raw_exec::start_process(&config, NAME, &command, |out, err| {
                let mut cmd = std::process::Command::new(&command);
                cmd.args(&args)
                    .env_clear()
                    .envs(&config.env)
                    .stdin(std::process::Stdio::null())
                    .stdout(out)
                    .stderr(err);
                sandbox.install(&mut cmd);
                Ok(tokio::process::Command::from(cmd))
            })
        });
        match started {
            Ok(mut handle) => {
                if let Some(cg) = cgroup {
                    if let serde_json::Value::Object(data) = &mut handle.state.data {
                        data.insert("cgroup".into(), cg.dir.to_string_lossy().into());
                    }
                    remove_cgroup_after_exit(&handle, cg);
                }
                Ok(handle)
            }
            Err(e) => {
                if let Some(cg) = cgroup {
                    cg.destroy();
                }
                Err(e)
            }
        }
    }

    /// Fails (as the job's error) when the command is not in the chroot.
    fn check_command(&self, config: &TaskConfig, command: &str) -> Result<(), DriverError> {
        let inside: Vec<String> = if command.contains('/') {
            vec![command.to_string()]
        } else {
            let path = config
                .env
                .get("PATH")
                .map_or("/usr/local/bin:/usr/bin:/bin", String::as_str);
            path.split(':')
                .filter(|d| d.starts_with('/'))
                .map(|d| format!("{}/{command}", d.trim_end_matches('/')))
                .collect()
        };
        let found = inside
            .iter()
            .any(|p| self.host_path(config, p).is_some_and(|h| h.is_file()));
        if found {
            Ok(())
        } else {
            Err(DriverError::task(format!(
                "binary {command:?} not found in the task's chroot"
            )))
        }
    }

    /// Where the path `inside` the task's chroot is on the host.
    fn host_path(&self, config: &TaskConfig, inside: &str) -> Option<PathBuf> {
        let inside = Path::new(inside);
        let inside = if inside.is_absolute() {
            inside.to_path_buf()
        } else {
            Path::new("/").join(inside)
        };
        let mounts = self
            .chroot_env
            .iter()
            .filter(|(_, dest)| !dest.is_empty())
            .map(|(host, dest)| (PathBuf::from(host), PathBuf::from(dest)))
            .chain(
                config
                    .volume_mounts
                    .iter()
                    .map(|m| (m.host_path.clone(), PathBuf::from(&m.destination))),
            )
            .chain(std::iter::once((
                config.shared_dir.clone(),
                "/alloc".into(),
            )));
        let best = mounts
            .filter_map(|(host, dest)| {
                let rest = inside.strip_prefix(&dest).ok()?;
                Some((dest.components().count(), host.join(rest)))
            })
            .max_by_key(|(depth, _)| *depth);
        match best {
            Some((_, host)) => Some(host),
            None => sandbox::confined(&config.task_dir, &inside.to_string_lossy()).ok(),
        }
    }
}

/// The task's cgroup, named after its allocation, task and start.
fn task_cgroup(cgroups: &Cgroups, config: &TaskConfig) -> Result<TaskCgroup, DriverError> {
    let memory = if config.memory_max_mb > 0 {
        config.memory_max_mb
    } else {
        config.memory_mb
    };
    cgroups
        .create(
            // A new cgroup per start: the previous run's is removed (its
            // leftovers killed) in the background and must not be this one.
            &format!(
                "{}.{}.{}",
                config.alloc_id,
                config.task_name,
                crate::clock::now_nanos()
            ),
            config.cpu_mhz,
            memory,
        )
        .map_err(|e| DriverError::Node(format!("creating the task's cgroup: {e}")))
}

fn remove_cgroup_after_exit(handle: &TaskHandle, cgroup: TaskCgroup) {
    if let Some(live) = handle.live::<Live>() {
        let exit = live.exit.clone();
        tokio::spawn(async move {
            raw_exec::wait_exit(exit).await;
            let _ = tokio::task::spawn_blocking(move || cgroup.destroy()).await;
        });
    }
}

/// The directories the task writes to, owned by its user (as Nomad gives
/// them to a task that is not root's).
fn give_dirs_to(config: &TaskConfig, creds: &Creds) -> Result<(), DriverError> {
    use std::os::unix::fs::PermissionsExt;
    // The task dir is the task's `/`: every user must be able to enter it.
    std::fs::set_permissions(&config.task_dir, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| DriverError::Node(format!("{}: {e}", config.task_dir.display())))?;
    let dirs = [
        config.task_dir.join("local"),
        config.task_dir.join("secrets"),
        config.task_dir.join("tmp"),
        config.shared_dir.join("data"),
        config.shared_dir.join("tmp"),
    ];
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        std::os::unix::fs::chown(dir, Some(creds.uid), Some(creds.gid))
            .map_err(|e| DriverError::Node(format!("chown {}: {e}", dir.display())))?;
    }
    Ok(())
}

/// The task's environment with its directories as the task sees them
/// from inside its chroot.
pub fn chroot_env_vars(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env = env.clone();
    for prefix in ["NOMAD_", "HERDER_"] {
        for (var, inside) in [
            ("ALLOC_DIR", "/alloc"),
            ("TASK_DIR", "/local"),
            ("SECRETS_DIR", "/secrets"),
        ] {
            let key = format!("{prefix}{var}");
            if env.contains_key(&key) {
                env.insert(key, inside.to_string());
            }
        }
    }
    env
}

/// The host pid of `parent`'s first child (the task behind its shim).
fn first_child(parent: i32) -> Option<i32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(parent)
        })
        .min()
}

impl Driver for ExecDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn fingerprint(&self) -> DriverInfo {
        self.isolation().driver_info()
    }

    fn start_task(&self, config: TaskConfig) -> BoxFuture<'_, Result<TaskHandle, DriverError>> {
        Box::pin(async move { self.start(config) })
    }

    fn wait(&self, handle: TaskHandle) -> BoxFuture<'_, ExitResult> {
        Box::pin(raw_exec::wait_handle(handle))
    }

    fn stop(
        &self,
        handle: TaskHandle,
        kill_timeout: Duration,
        signal: String,
    ) -> BoxFuture<'_, Result<(), DriverError>> {
        Box::pin(async move {
            let live = live_of(&handle)?;
            let task = first_child(live.pid)
                .and_then(|pid| raw_exec::process_start_time(pid).map(|start| (pid, start)));
            raw_exec::stop(&live, kill_timeout, &signal).await?;
            // The shim is gone; its task (and with it the namespace) dies
            // of the parent-death signal: wait until it has.
            if let Some((pid, start)) = task {
                let deadline = tokio::time::Instant::now() + NAMESPACE_GONE_WITHIN;
                while raw_exec::same_process_alive(pid, start) {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(DriverError::Node(format!(
                            "the task's process {pid} outlived its stop"
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            Ok(())
        })
    }

    fn recover(&self, state: HandleState) -> BoxFuture<'_, Result<TaskHandle, DriverError>> {
        Box::pin(async move {
            let cgroup = state
                .data
                .get("cgroup")
                .and_then(|v| v.as_str())
                .map(|d| TaskCgroup {
                    dir: PathBuf::from(d),
                });
            let handle = raw_exec::recover(state)?;
            if let Some(cg) = cgroup {
                remove_cgroup_after_exit(&handle, cg);
            }
            Ok(handle)
        })
    }

    fn signal(&self, handle: TaskHandle, signal: String) -> BoxFuture<'_, Result<(), DriverError>> {
        Box::pin(async move { raw_exec::send_signal(&*live_of(&handle)?, &signal) })
    }

    fn exec_streaming(
        &self,
        handle: TaskHandle,
        request: ExecRequest,
    ) -> BoxFuture<'_, Result<ExecSession, DriverError>> {
        Box::pin(async move {
            let live = live_of(&handle)?;
            let task = first_child(live.pid)
                .filter(|_| !raw_exec::exited(&live))
                .ok_or_else(|| DriverError::task("Task not running"))?;
            let state = &live.state;
            let user = if state.user.is_empty() {
                DEFAULT_USER
            } else {
                &state.user
            };
            let namespaces =
                TaskNamespaces::open(task, &state.task_dir, sandbox::resolve_user(user)?)?;
            let (program, args) = request
                .command
                .split_first()
                .ok_or_else(|| DriverError::task("command is empty"))?;
            let mut cmd = std::process::Command::new(program);
            cmd.args(args).env_clear().envs(&state.env);
            namespaces.install(&mut cmd);
            run_session(cmd, request.tty)
        })
    }
}

#[cfg(test)]
mod tests;
