//! Nodes: the machines herder places work on.
//!
//! A node is registered by its client agent with what it fingerprinted
//! (resources, attributes, drivers) and then carries the scheduling state
//! the servers keep for it: status, eligibility and drain.

use super::resources::{ComparableResources, NodeReservedResources, NodeResources};
use super::serde_util::{labels, null_default, nullable, rfc3339_opt};
use super::shared_str::SharedStr;
use super::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// A node's attributes, meta or a driver's attributes: strings keyed by
/// strings, both interned as they are read (`serde_util::labels`), since
/// ten thousand nodes repeat the same few hundred. One pointer per key and
/// value keeps each node's maps a third of the size with `String`s.
pub type Labels = BTreeMap<SharedStr, SharedStr>;

/// Labels from any string pairs (a client's fingerprint, a config's
/// meta), interned as if they had been read.
pub fn labels<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> Labels {
    pairs
        .into_iter()
        .map(|(k, v)| {
            (
                SharedStr::interned(k.as_ref()),
                SharedStr::interned(v.as_ref()),
            )
        })
        .collect()
}

/// A node's status as the servers see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeStatus {
    #[default]
    Initializing,
    Ready,
    Down,
    Disconnected,
}

impl NodeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Initializing => "initializing",
            NodeStatus::Ready => "ready",
            NodeStatus::Down => "down",
            NodeStatus::Disconnected => "disconnected",
        }
    }

    /// Down or disconnected nodes hold no running work the scheduler trusts.
    pub fn is_terminal(self) -> bool {
        matches!(self, NodeStatus::Down | NodeStatus::Disconnected)
    }
}

impl fmt::Display for NodeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulingEligibility {
    #[default]
    Eligible,
    Ineligible,
}

impl SchedulingEligibility {
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulingEligibility::Eligible => "eligible",
            SchedulingEligibility::Ineligible => "ineligible",
        }
    }
}

/// An operator's drain request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DrainStrategy {
    /// How long allocations may take to migrate; 0 means no deadline,
    /// a negative value in Nomad means "force" (drain now).
    #[serde(deserialize_with = "null_default::deserialize")]
    pub deadline: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub ignore_system_jobs: bool,
    /// When the drain is forced (Unix nanoseconds); `None` when no deadline.
    #[serde(with = "rfc3339_opt")]
    pub force_deadline: Option<i64>,
    #[serde(with = "rfc3339_opt")]
    pub started_at: Option<i64>,
}

impl DrainStrategy {
    pub fn deadline_duration(&self) -> Option<Duration> {
        (self.deadline > 0).then(|| Duration::from_nanos(self.deadline as u64))
    }
}

/// What a node reports of one task driver.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DriverInfo {
    #[serde(with = "labels")]
    pub attributes: Labels,
    pub detected: bool,
    pub healthy: bool,
    /// Interned: ten thousand nodes say "Healthy".
    #[serde(deserialize_with = "labels::deserialize_one")]
    pub health_description: SharedStr,
    #[serde(with = "rfc3339_opt")]
    pub update_time: Option<i64>,
}

/// An entry in a node's event history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeEvent {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub message: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub subsystem: String,
    #[serde(with = "nullable")]
    pub details: BTreeMap<String, String>,
    #[serde(with = "rfc3339_opt")]
    pub timestamp: Option<i64>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub create_index: u64,
}

/// How many events a node keeps, as Nomad (`MaxRetainedNodeEvents`).
pub const MAX_RETAINED_NODE_EVENTS: usize = 10;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Node {
    #[serde(
        rename = "ID",
        deserialize_with = "super::serde_util::id_or_nil::deserialize"
    )]
    pub id: NodeId,
    /// The client's credential; never printed by read APIs.
    #[serde(rename = "SecretID", deserialize_with = "null_default::deserialize")]
    pub secret_id: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub datacenter: String,
    /// Shared with every allocation placed on the node (`node_name`).
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: SharedStr,
    #[serde(rename = "HTTPAddr", deserialize_with = "null_default::deserialize")]
    pub http_addr: String,
    #[serde(rename = "TLSEnabled", deserialize_with = "null_default::deserialize")]
    pub tls_enabled: bool,
    #[serde(with = "labels")]
    pub attributes: Labels,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub node_resources: NodeResources,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub reserved_resources: NodeReservedResources,
    #[serde(with = "nullable")]
    pub links: BTreeMap<String, String>,
    #[serde(with = "labels")]
    pub meta: Labels,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub node_class: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub node_pool: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub computed_class: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub drain: bool,
    pub drain_strategy: Option<DrainStrategy>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub scheduling_eligibility: SchedulingEligibility,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub status: NodeStatus,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub status_description: String,
    /// Unix seconds of the last status change.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub status_updated_at: i64,
    #[serde(with = "nullable")]
    pub events: Vec<NodeEvent>,
    #[serde(
        serialize_with = "nullable::serialize",
        deserialize_with = "labels::deserialize_keyed"
    )]
    pub drivers: BTreeMap<SharedStr, DriverInfo>,
    /// The host volumes the client offers, by name (its `host_volume`
    /// configuration); a group's host volume request places it only on
    /// nodes that offer the source.
    #[serde(with = "nullable")]
    pub host_volumes: BTreeMap<String, ClientHostVolume>,
    /// The artifact/snapshot the node last ran (Scoot's snapshot affinity);
    /// empty when unknown. A herder extension.
    #[serde(
        rename = "LastSnapshotID",
        deserialize_with = "null_default::deserialize"
    )]
    pub last_snapshot_id: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub create_index: u64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub modify_index: u64,
}

/// A host volume a client offers (Nomad's `ClientHostVolumeConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ClientHostVolume {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub path: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub read_only: bool,
}

impl Node {
    /// Ready, eligible and not draining: new work may go here.
    pub fn is_schedulable(&self) -> bool {
        self.status == NodeStatus::Ready
            && self.scheduling_eligibility == SchedulingEligibility::Eligible
            && self.drain_strategy.is_none()
    }

    /// The node's capacity less what it reserves for itself.
    pub fn available(&self) -> ComparableResources {
        ComparableResources {
            cpu: self.node_resources.cpu.cpu_shares - self.reserved_resources.cpu.cpu_shares,
            memory_mb: self.node_resources.memory.memory_mb
                - self.reserved_resources.memory.memory_mb,
            disk_mb: self.node_resources.disk.disk_mb - self.reserved_resources.disk.disk_mb,
        }
    }

    /// The cores tasks may reserve whole (`resources { cores = N }`): the
    /// node's reservable cores (all of `TotalCpuCores` when it lists none),
    /// less those it keeps for itself, ascending.
    pub fn reservable_cores(&self) -> Vec<u32> {
        let cpu = &self.node_resources.cpu;
        let mut cores: Vec<u32> = if cpu.reservable_cpu_cores.is_empty() {
            (0..cpu.total_cpu_cores).collect()
        } else {
            cpu.reservable_cpu_cores.clone()
        };
        let kept = &self.reserved_resources.cpu.reserved_cpu_cores;
        cores.retain(|c| !kept.contains(c));
        cores.sort_unstable();
        cores.dedup();
        cores
    }

    /// MHz of one core: what a task reserving a whole core is counted as
    /// using of the node's CPU.
    pub fn mhz_per_core(&self) -> i64 {
        let cpu = &self.node_resources.cpu;
        match i64::from(cpu.total_cpu_cores) {
            0 => 0,
            cores => cpu.cpu_shares / cores,
        }
    }

    /// The address a node's allocations are reached on: its first network's
    /// IP as fingerprinted, else its `unique.network.ip-address` attribute,
    /// else the host of its HTTP address; empty when it reports none.
    pub fn network_ip(&self) -> &str {
        if let Some(n) = self
            .node_resources
            .networks
            .iter()
            .find(|n| !n.ip.is_empty())
        {
            return &n.ip;
        }
        if let Some(ip) = self.attributes.get("unique.network.ip-address") {
            return ip;
        }
        self.http_addr.rsplit_once(':').map_or("", |(host, _)| {
            host.trim_start_matches('[').trim_end_matches(']')
        })
    }

    /// A driver is usable when detected and healthy, or (for nodes that
    /// only report attributes, as old clients do) `driver.<name>` is truthy.
    pub fn has_healthy_driver(&self, driver: &str) -> bool {
        if let Some(info) = self.drivers.get(driver) {
            return info.detected && info.healthy;
        }
        match self.attributes.get(format!("driver.{driver}").as_str()) {
            Some(v) => matches!(v.as_str(), "1" | "true"),
            None => false,
        }
    }

    /// Computes and stores `ComputedClass`: nodes with equal classes are
    /// interchangeable for feasibility, so the scheduler checks a class once
    /// per evaluation. Unique attributes (`unique.*`) and unique meta are left
    /// out, as Nomad does; the hash is FNV-1a so it is stable across
    /// restarts and builds.
    pub fn compute_class(&mut self) {
        let mut h = Fnv64::new();
        h.write_str(&self.datacenter);
        h.write_str(&self.node_class);
        h.write_str(&self.node_pool);
        for (k, v) in &self.attributes {
            if !is_unique_key(k) {
                h.write_str(k);
                h.write_str(v);
            }
        }
        for (k, v) in &self.meta {
            if !is_unique_key(k) {
                h.write_str(k);
                h.write_str(v);
            }
        }
        for (name, d) in &self.drivers {
            h.write_str(name);
            h.write_str(if d.detected && d.healthy { "1" } else { "0" });
        }
        // Host volumes decide feasibility, so nodes of one class must offer
        // the same ones for the scheduler's per-class cache to hold.
        for (name, v) in &self.host_volumes {
            h.write_str(name);
            h.write_str(if v.read_only { "ro" } else { "rw" });
        }
        self.computed_class = format!("v1:{}", h.finish());
    }

    /// Appends an event, keeping the most recent `MAX_RETAINED_NODE_EVENTS`.
    pub fn push_event(&mut self, event: NodeEvent) {
        self.events.push(event);
        if self.events.len() > MAX_RETAINED_NODE_EVENTS {
            let extra = self.events.len() - MAX_RETAINED_NODE_EVENTS;
            self.events.drain(..extra);
        }
    }
}

/// Keys whose values are unique per node and so do not belong in the class.
pub fn is_unique_key(key: &str) -> bool {
    key.starts_with("unique.") || key.contains(".unique.")
}

struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
    fn write_str(&mut self, s: &str) {
        for b in s.as_bytes().iter().chain(std::iter::once(&0xffu8)) {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two nodes registered with the same labels hold one copy of each
    /// string, and the JSON they answer with is what they were sent
    /// (`null` for an empty map, as Nomad).
    #[test]
    fn labels_read_from_json_are_shared_between_nodes_and_answer_unchanged() {
        let body = |host: &str| {
            format!(
                r#"{{"Attributes":{{"kernel.name":"linux","unique.hostname":"{host}"}},
                    "Meta":{{"rack":"r1"}},"Links":null,
                    "Drivers":{{"exec":{{"Attributes":{{"driver.exec":"1"}},"Detected":true,
                    "HealthDescription":"Healthy"}}}}}}"#
            )
        };
        let a: Node = serde_json::from_str(&body("a")).unwrap();
        let b: Node = serde_json::from_str(&body("b")).unwrap();
        let shared = |x: &Labels, y: &Labels, key: &str| {
            let (kx, vx) = x.get_key_value(key).unwrap();
            let (ky, vy) = y.get_key_value(key).unwrap();
            SharedStr::ptr_eq(kx, ky) && SharedStr::ptr_eq(vx, vy)
        };
        assert!(shared(&a.attributes, &b.attributes, "kernel.name"));
        assert!(shared(&a.meta, &b.meta, "rack"));
        let (name_a, exec_a) = a.drivers.get_key_value("exec").unwrap();
        let (name_b, exec_b) = b.drivers.get_key_value("exec").unwrap();
        assert!(SharedStr::ptr_eq(name_a, name_b));
        assert!(SharedStr::ptr_eq(
            &exec_a.health_description,
            &exec_b.health_description
        ));
        assert_eq!(exec_a.health_description, "Healthy");
        assert!(shared(
            &a.drivers["exec"].attributes,
            &b.drivers["exec"].attributes,
            "driver.exec"
        ));
        assert_eq!(a.attributes["unique.hostname"], "a");
        assert_eq!(b.attributes["unique.hostname"], "b");

        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(
            json["Attributes"],
            serde_json::json!({"kernel.name": "linux", "unique.hostname": "a"})
        );
        assert_eq!(json["Meta"], serde_json::json!({"rack": "r1"}));
        let empty: Node = serde_json::from_str(r#"{"Attributes":null,"Meta":{}}"#).unwrap();
        assert!(empty.attributes.is_empty() && empty.meta.is_empty());
        let json = serde_json::to_value(&empty).unwrap();
        assert!(json["Attributes"].is_null() && json["Meta"].is_null());
        assert!(serde_json::from_str::<Node>(r#"{"Meta":{"rack":1}}"#).is_err());
    }
}
