//! `GET /v1/agent/host`: what the machine an agent runs on looks like, for
//! a bug report or an operator without a shell there (Nomad's
//! `AgentHost`): `{"AgentID": ..., "HostData": {OS, Network, ResolvConf,
//! Hosts, Environment, Disk}}`, plus `CPU` and `Memory`, which Nomad's
//! answer lacks and an operator asks for next.
//!
//! The environment lists the agent's variables by name only: every value
//! is `<redacted>`. Nomad redacts only names that look secret; a value
//! such as a database URL carries credentials under any name, and the
//! names are what a report needs. `?node_id=` asks a client's agent,
//! through its server.

use super::alloc_routing::{node_route, path_and_query, Route};
use super::forward::forward_get;
use super::query::QueryOptions;
use super::ApiError;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Map, Value};
use std::time::Duration;

const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of /etc/resolv.conf and /etc/hosts answered (they are small;
/// a huge hosts file is cut, not copied whole into every answer).
const FILE_BYTES: usize = 64 * 1024;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/agent/host", web::get().to(host));
}

async fn host(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let node_id = q.param("node_id").unwrap_or("").to_string();
    if !node_id.is_empty() {
        if let Route::There { address, hop } = node_route(&info, &req, &node_id)? {
            return forward_get(&req, &address, hop, &path_and_query(&req), FORWARD_TIMEOUT).await;
        }
    }
    let agent_id = match info.config.name.as_str() {
        "" => herder_common::nomad_metrics::hostname().to_string(),
        name => name.to_string(),
    };
    let data_dir = info.data_dir.clone();
    let data = web::block(move || host_data(&data_dir))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok().json(json!({"AgentID": agent_id, "HostData": data})))
}

fn host_data(data_dir: &std::path::Path) -> Value {
    let facts = herder_client::fingerprint::machine_facts(data_dir).unwrap_or_default();
    json!({
        "OS": format!(
            "{} {} {} {} {}",
            facts.kernel_name, facts.hostname, facts.kernel_version, facts.arch,
            [facts.os_name.as_str(), facts.os_version.as_str()].join(" ").trim()
        ),
        "CPU": {"Cores": facts.cores, "MHzPerCore": facts.mhz_per_core, "Model": facts.model_name},
        "Memory": {"TotalBytes": facts.memory_bytes, "AvailableBytes": mem_available()},
        "Network": network(),
        "ResolvConf": read_capped("/etc/resolv.conf"),
        "Hosts": read_capped("/etc/hosts"),
        "Environment": environment_names(),
        "Disk": disks(data_dir),
    })
}

fn read_capped(path: &str) -> String {
    let mut text = std::fs::read_to_string(path).unwrap_or_default();
    if text.len() > FILE_BYTES {
        let mut cut = FILE_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

fn mem_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Every variable of the agent's environment, its value withheld.
fn environment_names() -> Map<String, Value> {
    std::env::vars_os()
        .map(|(k, _)| (k.to_string_lossy().into_owned(), json!("<redacted>")))
        .collect()
}

/// The filesystems of real devices (and the data dir's) by mount point:
/// `{DiskMB, UsedMB}` as Nomad reports them.
fn disks(data_dir: &std::path::Path) -> Map<String, Value> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut points: Vec<String> = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (device, point) = (f.next()?, f.next()?);
            device.starts_with('/').then(|| point.replace("\\040", " "))
        })
        .collect();
    points.push(data_dir.display().to_string());
    points.sort();
    points.dedup();
    points
        .into_iter()
        .filter_map(|p| {
            let (free, total) =
                herder_client::fingerprint::disk_space(std::path::Path::new(&p)).ok()?;
            let mb = |b: u64| b / (1024 * 1024);
            Some((
                p,
                json!({"DiskMB": mb(total), "UsedMB": mb(total.saturating_sub(free))}),
            ))
        })
        .collect()
}

/// Each interface address: `{"interface": name, "address": ip}`.
fn network() -> Vec<Value> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed below with
    // freeifaddrs; the list is only read in between.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cursor = head;
    while !cursor.is_null() {
        // SAFETY: `cursor` is a node of the list getifaddrs returned.
        let entry = unsafe { &*cursor };
        if let Some(ip) = address_of(entry.ifa_addr) {
            // SAFETY: ifa_name is a NUL-terminated string of the list.
            let name = unsafe { std::ffi::CStr::from_ptr(entry.ifa_name) };
            out.push(json!({"interface": name.to_string_lossy(), "address": ip.to_string()}));
        }
        cursor = entry.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

fn address_of(addr: *const libc::sockaddr) -> Option<std::net::IpAddr> {
    if addr.is_null() {
        return None;
    }
    // SAFETY: a non-null sockaddr of the list; its family says which
    // larger struct it is the head of.
    unsafe {
        match i32::from((*addr).sa_family) {
            libc::AF_INET => {
                let v4 = &*(addr as *const libc::sockaddr_in);
                Some(std::net::Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)).into())
            }
            libc::AF_INET6 => {
                let v6 = &*(addr as *const libc::sockaddr_in6);
                Some(std::net::Ipv6Addr::from(v6.sin6_addr.s6_addr).into())
            }
            _ => None,
        }
    }
}
