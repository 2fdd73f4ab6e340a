//! What an allocation's tasks and the host really use, in Nomad's shapes
//! (`AllocResourceUsage`, `HostStats`), read on demand from `/proc` and,
//! for a task that runs in a cgroup (v2) of its own, from that cgroup.
//!
//! A task's processes are its driver's process (the pid its handle keeps
//! in `<task>/.herder-handle.json`, checked against the process's start
//! time so a recycled pid is never measured) and every descendant or
//! member of its session. Memory is summed over them; CPU is a rate, so
//! each counter is kept between requests and a request without a recent
//! enough earlier sample measures over a short window of its own.
//! `Measured` names only what was read: RSS and swap from `/proc`, cache,
//! usage and throttling only from a task's own cgroup.

use crate::driver::raw_exec::process_start_time;
use crate::driver::HandleState;
use crate::task_dir::AllocDir;
use crate::task_runner::HANDLE_FILE;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// The window a CPU rate is measured over when no earlier sample serves.
const CPU_WINDOW: Duration = Duration::from_millis(100);
/// An earlier sample younger than this is too close to measure a rate.
const MIN_SAMPLE_AGE: Duration = Duration::from_millis(50);
/// Samples older than this are forgotten.
const SAMPLE_TTL: Duration = Duration::from_secs(600);

/// Nomad's `MemoryStats`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MemoryStats {
    #[serde(rename = "RSS")]
    pub rss: u64,
    pub cache: u64,
    pub swap: u64,
    pub usage: u64,
    pub max_usage: u64,
    pub kernel_usage: u64,
    pub kernel_max_usage: u64,
    pub measured: Vec<String>,
}

/// Nomad's `CpuStats`; the modes and `Percent` are percentages of one core.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CpuStats {
    pub system_mode: f64,
    pub user_mode: f64,
    pub total_ticks: f64,
    pub throttled_periods: u64,
    pub throttled_time: u64,
    pub percent: f64,
    pub measured: Vec<String>,
}

/// Nomad's `ResourceUsage`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ResourceUsage {
    pub memory_stats: MemoryStats,
    pub cpu_stats: CpuStats,
    pub device_stats: Vec<serde_json::Value>,
}

/// Nomad's `TaskResourceUsage`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TaskResourceUsage {
    pub resource_usage: ResourceUsage,
    /// Unix nanoseconds.
    pub timestamp: i64,
    pub pids: BTreeMap<String, ResourceUsage>,
}

/// Nomad's `AllocResourceUsage`: the tasks' sum and each task's usage.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AllocResourceUsage {
    pub resource_usage: ResourceUsage,
    pub tasks: BTreeMap<String, TaskResourceUsage>,
    pub timestamp: i64,
}

/// What CPU figures are turned into MHz ("ticks") with.
#[derive(Clone, Copy, Debug)]
pub struct CpuCapacity {
    pub cores: u32,
    pub total_mhz: f64,
}

impl CpuCapacity {
    /// Nomad's `TicksConsumed`: a percentage of one core as MHz.
    fn ticks(&self, percent: f64) -> f64 {
        (percent / 100.0) * self.total_mhz / f64::from(self.cores.max(1))
    }
}

fn join(into: &mut Vec<String>, names: &[String]) {
    for n in names {
        if !into.contains(n) {
            into.push(n.clone());
        }
    }
}

impl ResourceUsage {
    /// Nomad's `ResourceUsage.Add`: sums, `Measured` joined.
    pub fn add(&mut self, other: &ResourceUsage) {
        let (m, o) = (&mut self.memory_stats, &other.memory_stats);
        m.rss += o.rss;
        m.cache += o.cache;
        m.swap += o.swap;
        m.usage += o.usage;
        m.max_usage += o.max_usage;
        m.kernel_usage += o.kernel_usage;
        m.kernel_max_usage += o.kernel_max_usage;
        join(&mut m.measured, &o.measured);
        let (c, o) = (&mut self.cpu_stats, &other.cpu_stats);
        c.system_mode += o.system_mode;
        c.user_mode += o.user_mode;
        c.total_ticks += o.total_ticks;
        c.throttled_periods += o.throttled_periods;
        c.throttled_time += o.throttled_time;
        c.percent += o.percent;
        join(&mut c.measured, &o.measured);
    }
}

/// Counter readings by key: when each was read, and its values.
type Samples = Mutex<HashMap<String, (Instant, Vec<f64>)>>;

/// Earlier counter readings, by key, for rates.
fn samples() -> &'static Samples {
    static SAMPLES: OnceLock<Samples> = OnceLock::new();
    SAMPLES.get_or_init(Default::default)
}

/// Whether `key` has an earlier reading old enough to measure a rate from.
fn has_baseline(key: &str, now: Instant) -> bool {
    let map = samples().lock().unwrap_or_else(|e| e.into_inner());
    map.get(key)
        .is_some_and(|(at, _)| now.duration_since(*at) >= MIN_SAMPLE_AGE)
}

/// Stores `values` for `key` and answers their rates per second since the
/// reading before, if there was one.
fn rates(key: &str, values: &[f64], now: Instant) -> Option<Vec<f64>> {
    let mut map = samples().lock().unwrap_or_else(|e| e.into_inner());
    map.retain(|_, (at, _)| now.duration_since(*at) < SAMPLE_TTL);
    let previous = map.insert(key.to_string(), (now, values.to_vec()));
    let (at, old) = previous?;
    let secs = now.duration_since(at).as_secs_f64();
    if secs <= 0.0 || old.len() != values.len() {
        return None;
    }
    Some(
        values
            .iter()
            .zip(&old)
            .map(|(v, o)| ((v - o) / secs).max(0.0))
            .collect(),
    )
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// One process's `/proc/<pid>/stat` fields: (ppid, session, user, system
/// seconds).
fn proc_stat(pid: i32) -> Option<(i32, i32, f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start
    // after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| fields.get(i).and_then(|f| f.parse::<i64>().ok());
    let hz = clock_ticks_per_second();
    Some((
        i32::try_from(num(1)?).ok()?,
        i32::try_from(num(3)?).ok()?,
        num(11)? as f64 / hz,
        num(12)? as f64 / hz,
    ))
}

/// A `kB` line of `/proc/<pid>/status`, in bytes.
fn status_kb(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024)
    })
}

/// `root` and every process descending from it or in its session.
pub fn process_tree(root: i32) -> Vec<i32> {
    let mut parent_of: Vec<(i32, i32, i32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Some((ppid, session, _, _)) = proc_stat(pid) {
                parent_of.push((pid, ppid, session));
            }
        }
    }
    let mut tree: Vec<i32> = vec![root];
    let mut seen: HashSet<i32> = HashSet::from([root]);
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        for (pid, ppid, session) in &parent_of {
            if (*ppid == parent || *session == root) && seen.insert(*pid) {
                tree.push(*pid);
            }
        }
        i += 1;
    }
    tree
}

/// One process's memory, and its CPU seconds (user, system).
fn pid_reading(pid: i32) -> Option<(u64, u64, f64, f64)> {
    let (_, _, user, system) = proc_stat(pid)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status_kb(&status, "VmRSS").unwrap_or(0);
    let swap = status_kb(&status, "VmSwap").unwrap_or(0);
    Some((rss, swap, user, system))
}

/// The pid a running task's handle names, if it still names that process.
pub fn task_pid(task_dir: &Path) -> Option<i32> {
    let bytes = std::fs::read(task_dir.join(HANDLE_FILE)).ok()?;
    let handle: HandleState = serde_json::from_slice(&bytes).ok()?;
    let pid = i32::try_from(handle.data.get("pid")?.as_i64()?).ok()?;
    let start = handle.data.get("start_time").and_then(|s| s.as_u64());
    let alive = process_start_time(pid);
    match (start, alive) {
        (_, None) => None,
        (Some(want), Some(got)) if want != 0 && want != got => None,
        _ => (pid > 1).then_some(pid),
    }
}

/// The usage of one task whose driver process is `pid`.
fn task_usage(pid: i32, capacity: CpuCapacity) -> TaskResourceUsage {
    let pids = process_tree(pid);
    let keys: Vec<String> = pids
        .iter()
        .map(|p| format!("pid:{p}:{}", process_start_time(*p).unwrap_or(0)))
        .collect();
    let started = Instant::now();
    if keys.iter().any(|k| !has_baseline(k, started)) {
        for (p, key) in pids.iter().zip(&keys) {
            if let Some((_, _, user, system)) = pid_reading(*p) {
                rates(key, &[user, system], started);
            }
        }
        std::thread::sleep(CPU_WINDOW);
    }
    let now = Instant::now();
    let mut usage = TaskResourceUsage {
        timestamp: now_nanos(),
        ..Default::default()
    };
    for (p, key) in pids.iter().zip(&keys) {
        let Some((rss, swap, user, system)) = pid_reading(*p) else {
            continue;
        };
        let per_second = rates(key, &[user, system], now).unwrap_or_default();
        let user_pct = per_second.first().copied().unwrap_or(0.0) * 100.0;
        let system_pct = per_second.get(1).copied().unwrap_or(0.0) * 100.0;
        let one = ResourceUsage {
            memory_stats: MemoryStats {
                rss,
                swap,
                measured: vec!["RSS".into(), "Swap".into()],
                ..Default::default()
            },
            cpu_stats: CpuStats {
                system_mode: system_pct,
                user_mode: user_pct,
                percent: user_pct + system_pct,
                measured: vec!["System Mode".into(), "User Mode".into(), "Percent".into()],
                ..Default::default()
            },
            device_stats: Vec::new(),
        };
        usage.resource_usage.add(&one);
        usage.pids.insert(p.to_string(), one);
    }
    let cpu = &mut usage.resource_usage.cpu_stats;
    cpu.total_ticks = capacity.ticks(cpu.percent);
    if usage.pids.is_empty() {
        usage.resource_usage.memory_stats.measured.clear();
    }
    add_cgroup(pid, &mut usage.resource_usage);
    usage
}

/// The cgroup (v2) path of a process, relative to the hierarchy's root.
fn cgroup_of(pid: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// Adds what the task's own cgroup knows, when it has one: a task that
/// shares the agent's cgroup (raw_exec) has none to read.
fn add_cgroup(pid: i32, usage: &mut ResourceUsage) {
    let (Some(task), Some(agent)) = (cgroup_of(&pid.to_string()), cgroup_of("self")) else {
        return;
    };
    if task == agent || task == "/" {
        return;
    }
    let dir = Path::new("/sys/fs/cgroup").join(task.trim_start_matches('/'));
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).ok();
    let value = |file: &str| read(file).and_then(|t| t.trim().parse::<u64>().ok());
    let keyed = |file: &str, key: &str| {
        read(file)?.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse::<u64>().ok()).flatten()
        })
    };
    let m = &mut usage.memory_stats;
    let mut measured = Vec::new();
    if let Some(current) = value("memory.current") {
        m.usage = current;
        measured.push("Usage".to_string());
    }
    if let Some(peak) = value("memory.peak") {
        m.max_usage = peak;
        measured.push("Max Usage".to_string());
    }
    if let Some(file) = keyed("memory.stat", "file") {
        m.cache = file;
        measured.push("Cache".to_string());
    }
    join(&mut m.measured, &measured);
    let c = &mut usage.cpu_stats;
    let mut measured = Vec::new();
    if let Some(periods) = keyed("cpu.stat", "nr_throttled") {
        c.throttled_periods = periods;
        measured.push("Throttled Periods".to_string());
    }
    if let Some(usec) = keyed("cpu.stat", "throttled_usec") {
        c.throttled_time = usec * 1000;
        measured.push("Throttled Time".to_string());
    }
    join(&mut c.measured, &measured);
}

/// The usage of an allocation's running tasks (only `only` when given);
/// a task that runs no process this client can see is left out, as
/// Nomad leaves out a task without a reading.
pub fn alloc_usage(
    alloc_dir: &AllocDir,
    tasks: &[String],
    only: Option<&str>,
    capacity: CpuCapacity,
) -> AllocResourceUsage {
    let mut out = AllocResourceUsage::default();
    for task in tasks {
        if only.is_some_and(|t| t != task) {
            continue;
        }
        let Some(pid) = task_pid(&alloc_dir.task_dir(task)) else {
            continue;
        };
        let usage = task_usage(pid, capacity);
        out.resource_usage.add(&usage.resource_usage);
        out.timestamp = out.timestamp.max(usage.timestamp);
        out.tasks.insert(task.clone(), usage);
    }
    out
}

/// Nomad's `HostStats`.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostStats {
    pub memory: HostMemory,
    #[serde(rename = "CPU")]
    pub cpu: Vec<HostCpu>,
    pub disk_stats: Vec<DiskStats>,
    pub alloc_dir_stats: DiskStats,
    pub device_stats: Vec<serde_json::Value>,
    pub uptime: u64,
    pub timestamp: i64,
    #[serde(rename = "CPUTicksConsumed")]
    pub cpu_ticks_consumed: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostMemory {
    pub total: u64,
    pub available: u64,
    pub used: u64,
    pub free: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct HostCpu {
    #[serde(rename = "CPU")]
    pub cpu: String,
    pub user: f64,
    pub system: f64,
    pub idle: f64,
    pub total: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DiskStats {
    pub device: String,
    pub mountpoint: String,
    pub size: u64,
    pub used: u64,
    pub available: u64,
    pub used_percent: f64,
    pub inodes_used_percent: f64,
}

/// The host's memory from `/proc/meminfo` (gopsutil's arithmetic).
fn host_memory() -> HostMemory {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb = |key: &str| status_kb(&text, key).unwrap_or(0);
    let total = kb("MemTotal");
    let free = kb("MemFree");
    let cached = kb("Cached") + kb("SReclaimable");
    let used = total.saturating_sub(free + kb("Buffers") + cached);
    HostMemory {
        total,
        available: kb("MemAvailable"),
        used,
        free,
    }
}

/// Each CPU's counters from `/proc/stat`: (name, idle, user, system, busy,
/// total), in ticks.
fn cpu_counters() -> Vec<(String, [f64; 5])> {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next()?.to_string();
            let v: Vec<f64> = parts.filter_map(|p| p.parse().ok()).collect();
            let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
            // user nice system idle iowait irq softirq steal guest guest_nice
            let busy = at(0) + at(1) + at(2) + at(4) + at(5) + at(6) + at(7);
            let total = busy + at(3);
            Some((name, [at(3), at(0), at(2), busy, total]))
        })
        .collect()
}

fn host_cpus(capacity: CpuCapacity) -> (Vec<HostCpu>, f64) {
    let started = Instant::now();
    if !cpu_counters()
        .iter()
        .all(|(n, _)| has_baseline(&format!("host:{n}"), started))
    {
        for (name, v) in cpu_counters() {
            rates(&format!("host:{name}"), &v, started);
        }
        std::thread::sleep(CPU_WINDOW);
    }
    let now = Instant::now();
    let counters = cpu_counters();
    let count = counters.len().max(1) as f64;
    let mut ticks = 0.0;
    let cpus = counters
        .into_iter()
        .map(|(name, v)| {
            let r = rates(&format!("host:{name}"), &v, now).unwrap_or_default();
            let total_rate = r.get(4).copied().unwrap_or(0.0);
            let pct = |i: usize| {
                if total_rate > 0.0 {
                    r.get(i).copied().unwrap_or(0.0) / total_rate * 100.0
                } else if i == 0 {
                    100.0
                } else {
                    0.0
                }
            };
            let total = pct(3);
            ticks += (total / 100.0) * (capacity.total_mhz / count);
            HostCpu {
                cpu: name,
                user: pct(1),
                system: pct(2),
                idle: pct(0),
                total,
            }
        })
        .collect();
    (cpus, ticks)
}

fn statvfs(path: &Path) -> Option<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value of the plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is a valid out-parameter.
    (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0).then_some(st)
}

// statvfs's counters are `c_ulong`/`fsblkcnt_t`, not u64 everywhere.
#[allow(clippy::unnecessary_cast)]
fn disk_stats(device: &str, mountpoint: &Path) -> Option<DiskStats> {
    let st = statvfs(mountpoint)?;
    let frsize = st.f_frsize as u64;
    let size = st.f_blocks as u64 * frsize;
    let available = st.f_bavail as u64 * frsize;
    let used = (st.f_blocks as u64).saturating_sub(st.f_bfree as u64) * frsize;
    let percent = |part: f64, whole: f64| {
        if whole > 0.0 {
            part / whole * 100.0
        } else {
            0.0
        }
    };
    let inodes_used = (st.f_files as u64).saturating_sub(st.f_ffree as u64) as f64;
    Some(DiskStats {
        device: device.to_string(),
        mountpoint: mountpoint.to_string_lossy().into_owned(),
        size,
        used,
        available,
        used_percent: percent(used as f64, (used + available) as f64),
        inodes_used_percent: percent(inodes_used, st.f_files as f64),
    })
}

/// The mounted file systems on a device (gopsutil's physical partitions):
/// file system types the kernel does not mark `nodev`.
fn physical_disks() -> Vec<DiskStats> {
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let physical: HashSet<&str> = filesystems
        .lines()
        .filter(|l| !l.starts_with("nodev"))
        .map(str::trim)
        .collect();
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut seen = HashSet::new();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (device, mountpoint, kind) = (f.next()?, f.next()?, f.next()?);
            (physical.contains(kind) && seen.insert(mountpoint.to_string()))
                .then(|| disk_stats(device, Path::new(mountpoint)))
                .flatten()
        })
        .collect()
}

/// The host's usage; `alloc_root` is where allocation directories live.
pub fn host_stats(alloc_root: &Path, capacity: CpuCapacity) -> HostStats {
    let (cpu, cpu_ticks_consumed) = host_cpus(capacity);
    let uptime = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |s| s as u64);
    HostStats {
        memory: host_memory(),
        cpu,
        disk_stats: physical_disks(),
        alloc_dir_stats: disk_stats("", alloc_root).unwrap_or_default(),
        device_stats: Vec::new(),
        uptime,
        timestamp: now_nanos(),
        cpu_ticks_consumed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capacity() -> CpuCapacity {
        CpuCapacity {
            cores: 2,
            total_mhz: 4000.0,
        }
    }

    #[test]
    fn a_process_tree_is_measured_with_only_what_proc_gives() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30; wait"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        std::thread::sleep(Duration::from_millis(200));
        let tree = process_tree(pid);
        assert!(tree.len() >= 3, "{tree:?}");
        let usage = task_usage(pid, capacity());
        assert!(usage.resource_usage.memory_stats.rss > 0);
        assert_eq!(usage.pids.len(), tree.len());
        assert!(usage
            .resource_usage
            .memory_stats
            .measured
            .iter()
            .all(|m| m == "RSS" || m == "Swap"));
        assert!(usage.resource_usage.memory_stats.usage == 0);
        let json = serde_json::to_value(&usage).unwrap();
        assert!(
            json["ResourceUsage"]["MemoryStats"]["RSS"]
                .as_u64()
                .unwrap()
                > 0
        );
        assert!(json["ResourceUsage"]["CpuStats"]["Measured"].is_array());
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_stale_or_missing_handle_names_no_process() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(task_pid(dir.path()), None);
        let me = std::process::id() as i32;
        let write = |start: u64| {
            let handle = serde_json::json!({
                "driver": "raw_exec", "task_name": "t",
                "data": { "pid": me, "start_time": start },
            });
            std::fs::write(dir.path().join(HANDLE_FILE), handle.to_string()).unwrap();
        };
        write(process_start_time(me).unwrap());
        assert_eq!(task_pid(dir.path()), Some(me));
        write(process_start_time(me).unwrap() + 1);
        assert_eq!(task_pid(dir.path()), None);
    }

    #[test]
    fn host_stats_read_the_machine() {
        let dir = tempfile::tempdir().unwrap();
        let stats = host_stats(dir.path(), capacity());
        assert!(stats.memory.total > 0 && stats.memory.total >= stats.memory.used);
        assert!(!stats.cpu.is_empty());
        for cpu in &stats.cpu {
            assert!((0.0..=100.0).contains(&cpu.idle), "{cpu:?}");
        }
        assert!(stats.uptime > 0);
        assert!(stats.alloc_dir_stats.size > 0);
        let json = serde_json::to_value(&stats).unwrap();
        for key in [
            "Memory",
            "CPU",
            "DiskStats",
            "AllocDirStats",
            "Uptime",
            "Timestamp",
            "CPUTicksConsumed",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
    }

    #[test]
    fn usage_adds_up_and_joins_measured() {
        let mut a = ResourceUsage::default();
        let b = ResourceUsage {
            memory_stats: MemoryStats {
                rss: 5,
                measured: vec!["RSS".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        a.add(&b);
        a.add(&b);
        assert_eq!(a.memory_stats.rss, 10);
        assert_eq!(a.memory_stats.measured, ["RSS"]);
    }
}
