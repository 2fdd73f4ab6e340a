//! Fingerprinting: describing this machine as a herder node.
//!
//! CPU, memory and disk become `NodeResources`; what a constraint may match
//! becomes attributes named as Nomad names them (`cpu.numcores`,
//! `kernel.name`, `unique.hostname`, ...); drivers report their own health.
//! The node's ID and secret are generated once and kept in the data dir, so
//! a restarted client is the same node to the servers.

use crate::driver::DriverSet;
use herder::structs::node::{labels, ClientHostVolume};
use herder::structs::{NetworkResource, Node, NodeStatus};
use herder_common::config::AgentConfig;
use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// Per-core speed assumed when the machine does not say (as Nomad).
const DEFAULT_CPU_MHZ: f64 = 2000.0;

/// What the machine reported, before it is turned into a node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineFacts {
    pub cores: u32,
    pub mhz_per_core: f64,
    pub model_name: String,
    pub memory_bytes: u64,
    pub disk_free_bytes: u64,
    pub disk_total_bytes: u64,
    pub hostname: String,
    pub kernel_name: String,
    pub kernel_version: String,
    pub arch: String,
    pub os_name: String,
    pub os_version: String,
}

/// Reads CPU, memory, disk (of `data_dir`) and OS facts of this machine.
pub fn machine_facts(data_dir: &Path) -> io::Result<MachineFacts> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let (free, total) = disk_space(data_dir)?;
    let uname = uname();
    let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    Ok(MachineFacts {
        cores,
        mhz_per_core: cpu_mhz(&cpuinfo).unwrap_or(DEFAULT_CPU_MHZ),
        model_name: cpuinfo_field(&cpuinfo, "model name").unwrap_or_default(),
        memory_bytes: meminfo_total_bytes(
            &std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
        )
        .unwrap_or(0),
        disk_free_bytes: free,
        disk_total_bytes: total,
        hostname: uname.nodename,
        kernel_name: uname.sysname.to_lowercase(),
        kernel_version: uname.release,
        arch: go_arch(&uname.machine),
        os_name: os_release_field(&os_release, "ID").unwrap_or_else(|| "linux".into()),
        os_version: os_release_field(&os_release, "VERSION_ID").unwrap_or_default(),
    })
}

/// Builds the node this client registers: identity from the data dir,
/// facts of the machine, settings of the configuration, drivers' health.
pub fn fingerprint(config: &AgentConfig, drivers: &DriverSet) -> io::Result<Node> {
    std::fs::create_dir_all(&config.data_dir)?;
    let facts = machine_facts(&config.data_dir)?;
    let (id, secret) = node_identity(&config.data_dir)?;
    let mut node = node_from_facts(config, &facts, drivers);
    node.id = id;
    node.secret_id = secret;
    Ok(node)
}

/// The node for `facts` (no identity): also what simulated nodes are built
/// from.
pub fn node_from_facts(config: &AgentConfig, facts: &MachineFacts, drivers: &DriverSet) -> Node {
    let c = &config.client;
    let total_mhz = (f64::from(facts.cores) * facts.mhz_per_core).round() as i64;
    let mut node = Node {
        datacenter: config.datacenter.clone(),
        name: if config.name.is_empty() {
            facts.hostname.as_str().into()
        } else {
            config.name.as_str().into()
        },
        http_addr: format!("{}:{}", config.bind_addr, config.ports.http),
        node_class: c.node_class.clone(),
        node_pool: c.node_pool.clone(),
        meta: labels(&c.meta),
        status: NodeStatus::Initializing,
        ..Default::default()
    };
    set_resources(&mut node, config, facts, total_mhz);
    let ip = if config.bind_addr == "0.0.0.0" {
        "127.0.0.1".to_string()
    } else {
        config.bind_addr.clone()
    };
    node.attributes = labels(machine_attributes(config, facts, &ip, total_mhz));
    node.node_resources.networks = vec![host_network(&ip)];
    node.host_volumes = host_volumes(config);
    for driver in drivers.iter() {
        let info = driver.fingerprint();
        if info.detected && info.healthy {
            node.attributes.extend(info.attributes.clone());
        }
        node.drivers.insert(driver.name().into(), info);
    }
    node.compute_class();
    node
}

/// What the machine offers, and what the configuration keeps back from
/// the tasks.
fn set_resources(node: &mut Node, config: &AgentConfig, facts: &MachineFacts, total_mhz: i64) {
    let c = &config.client;
    let res = &mut node.node_resources;
    res.cpu.cpu_shares = total_mhz;
    res.cpu.total_cpu_cores = facts.cores;
    res.cpu.reservable_cpu_cores = (0..facts.cores).collect();
    res.memory.memory_mb = i64::try_from(facts.memory_bytes / (1024 * 1024)).unwrap_or(i64::MAX);
    res.disk.disk_mb = i64::try_from(facts.disk_free_bytes / (1024 * 1024)).unwrap_or(i64::MAX);
    let reserved = &mut node.reserved_resources;
    reserved.cpu.cpu_shares = c.reserved_cpu;
    reserved.memory.memory_mb = c.reserved_memory_mb;
    reserved.disk.disk_mb = c.reserved_disk_mb;
}

/// The machine's attributes under Nomad's names (`cpu.arch`,
/// `kernel.name`, `unique.hostname`, ...); an empty fact is left out.
fn machine_attributes(
    config: &AgentConfig,
    facts: &MachineFacts,
    ip: &str,
    total_mhz: i64,
) -> BTreeMap<String, String> {
    [
        ("cpu.arch", facts.arch.clone()),
        ("cpu.numcores", facts.cores.to_string()),
        (
            "cpu.frequency",
            (facts.mhz_per_core.round() as i64).to_string(),
        ),
        ("cpu.totalcompute", total_mhz.to_string()),
        ("cpu.modelname", facts.model_name.clone()),
        ("memory.totalbytes", facts.memory_bytes.to_string()),
        ("kernel.name", facts.kernel_name.clone()),
        ("kernel.version", facts.kernel_version.clone()),
        ("os.name", facts.os_name.clone()),
        ("os.version", facts.os_version.clone()),
        ("arch", facts.arch.clone()),
        ("unique.hostname", facts.hostname.clone()),
        ("unique.network.ip-address", ip.to_string()),
        (
            "unique.storage.volume",
            config.data_dir.to_string_lossy().into_owned(),
        ),
        (
            "unique.storage.bytesfree",
            facts.disk_free_bytes.to_string(),
        ),
        (
            "unique.storage.bytestotal",
            facts.disk_total_bytes.to_string(),
        ),
        ("herder.version", env!("CARGO_PKG_VERSION").to_string()),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The host volumes the configuration offers to jobs.
fn host_volumes(config: &AgentConfig) -> BTreeMap<String, ClientHostVolume> {
    config
        .client
        .host_volumes
        .iter()
        .map(|(name, v)| {
            let volume = ClientHostVolume {
                name: name.clone(),
                path: v.path.to_string_lossy().into_owned(),
                read_only: v.read_only,
            };
            (name.clone(), volume)
        })
        .collect()
}

/// The host network tasks' ports are bound on, as Nomad reports it.
fn host_network(ip: &str) -> NetworkResource {
    let loopback = ip.starts_with("127.") || ip == "::1";
    let bits = if ip.contains(':') { 128 } else { 32 };
    NetworkResource {
        mode: "host".into(),
        device: if loopback { "lo".into() } else { String::new() },
        cidr: format!("{ip}/{bits}"),
        ip: ip.to_string(),
        mbits: 1000,
        ..Default::default()
    }
}

/// The node's ID and secret, created on first start and kept in
/// `<data_dir>/client/node-id` and `client/secret-id`.
pub fn node_identity(data_dir: &Path) -> io::Result<(uuid::Uuid, String)> {
    let dir = data_dir.join("client");
    std::fs::create_dir_all(&dir)?;
    let id = persisted_uuid(&dir.join("node-id"))?;
    let secret = persisted_uuid(&dir.join("secret-id"))?;
    Ok((id, secret.to_string()))
}

fn persisted_uuid(path: &Path) -> io::Result<uuid::Uuid> {
    match std::fs::read_to_string(path) {
        Ok(text) => uuid::Uuid::parse_str(text.trim()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let id = herder::structs::new_id();
            // Written aside and renamed so a crash never leaves half an ID.
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, id.to_string())?;
            std::fs::rename(&tmp, path)?;
            Ok(id)
        }
        Err(e) => Err(e),
    }
}

/// Per-core MHz: cpufreq's maximum when present, else `cpu MHz` of cpuinfo.
fn cpu_mhz(cpuinfo: &str) -> Option<f64> {
    let from_sysfs =
        std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .map(|khz| khz / 1000.0);
    from_sysfs
        .or_else(|| cpuinfo_field(cpuinfo, "cpu MHz").and_then(|v| v.parse().ok()))
        .filter(|mhz| *mhz > 0.0)
}

fn cpuinfo_field(cpuinfo: &str, key: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

fn meminfo_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn os_release_field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// Free and total bytes of the filesystem holding `path`.
pub fn disk_space(path: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is a valid out-parameter.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok((st.f_bavail as u64 * frsize, st.f_blocks as u64 * frsize))
}

struct Uname {
    sysname: String,
    nodename: String,
    release: String,
    machine: String,
}

fn uname() -> Uname {
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid out-parameter; on failure it stays zeroed.
    unsafe { libc::uname(&mut u) };
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Uname {
        sysname: field(&u.sysname),
        nodename: field(&u.nodename),
        release: field(&u.release),
        machine: field(&u.machine),
    }
}

/// Go's names for architectures, which Nomad's `cpu.arch` / `arch` use.
fn go_arch(machine: &str) -> String {
    match machine {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "i386" | "i686" => "386",
        "armv7l" | "armv6l" => "arm",
        other => other,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use herder_common::config::{ConfigSources, FlagOverrides};

    fn config(data_dir: &Path) -> AgentConfig {
        let mut c = AgentConfig::load(&ConfigSources {
            dev: true,
            env: Some(vec![]),
            flags: FlagOverrides {
                data_dir: Some(data_dir.to_path_buf()),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        c.client.node_class = "batch-box".into();
        c.client.meta.insert("rack".into(), "r7".into());
        c.client.reserved_memory_mb = 256;
        c
    }

    #[test]
    fn this_machine_fingerprints_plausibly() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = config(tmp.path());
        let (drivers, unknown) = DriverSet::from_names(
            &cfg.client.drivers,
            &crate::driver::DriverOptions::from_client_config(&cfg.client),
        );
        assert!(unknown.is_empty());
        let node = fingerprint(&cfg, &drivers).unwrap();
        assert!(node.node_resources.cpu.cpu_shares > 0);
        assert!(node.node_resources.cpu.total_cpu_cores > 0);
        assert!(node.node_resources.memory.memory_mb > 0);
        assert!(node.node_resources.disk.disk_mb > 0);
        assert_eq!(node.attributes["kernel.name"], "linux");
        for key in [
            "cpu.numcores",
            "cpu.frequency",
            "cpu.totalcompute",
            "cpu.arch",
            "memory.totalbytes",
            "kernel.version",
            "os.name",
            "arch",
            "unique.hostname",
            "unique.network.ip-address",
            "unique.storage.bytesfree",
        ] {
            assert!(node.attributes.contains_key(key), "missing {key}");
        }
        assert_eq!(node.attributes["driver.raw_exec"], "1");
        assert!(node.has_healthy_driver("raw_exec"));
        assert!(node.has_healthy_driver("mock_driver"));
        assert_eq!(node.node_class, "batch-box");
        assert_eq!(node.meta["rack"], "r7");
        assert_eq!(node.reserved_resources.memory.memory_mb, 256);
        assert!(node.computed_class.starts_with("v1:"));
        assert!(!node.secret_id.is_empty());
        assert_eq!(node.node_resources.networks[0].ip, "127.0.0.1");
        assert_eq!(node.node_resources.networks[0].cidr, "127.0.0.1/32");
    }

    #[test]
    fn identity_survives_a_restart() {
        let tmp = tempfile::tempdir().unwrap();
        let first = node_identity(tmp.path()).unwrap();
        let again = node_identity(tmp.path()).unwrap();
        assert_eq!(first, again);
        assert_ne!(first.0.to_string(), first.1);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(node_identity(other.path()).unwrap().0, first.0);
    }

    #[test]
    fn proc_files_parse() {
        assert_eq!(
            meminfo_total_bytes("MemTotal:       2048 kB\nMemFree: 1 kB\n"),
            Some(2048 * 1024)
        );
        assert_eq!(
            cpuinfo_field("processor\t: 0\ncpu MHz\t\t: 2599.998\n", "cpu MHz").as_deref(),
            Some("2599.998")
        );
        assert_eq!(
            os_release_field("ID=debian\nVERSION_ID=\"12\"\n", "VERSION_ID").as_deref(),
            Some("12")
        );
        assert_eq!(go_arch("x86_64"), "amd64");
    }
}
