//! Resources: what a task asks for, what a node offers, what an allocation holds.
//!
//! Three shapes, as in Nomad: `Resources` (the task's `resources` block,
//! also Nomad's legacy node shape), `NodeResources` / `NodeReservedResources`
//! (what a node fingerprinted and keeps back), and `AllocatedResources` (what
//! the scheduler granted an allocation, with its assigned ports).
//! `ComparableResources` is the flat sum the feasibility and fit checks use.

use super::serde_util::{null_default, nullable};
use super::VecMap;
use serde::{Deserialize, Serialize};

/// A task's `resources` block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Resources {
    #[serde(rename = "CPU", deserialize_with = "null_default::deserialize")]
    pub cpu: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub cores: i64,
    #[serde(rename = "MemoryMB", deserialize_with = "null_default::deserialize")]
    pub memory_mb: i64,
    #[serde(rename = "MemoryMaxMB", deserialize_with = "null_default::deserialize")]
    pub memory_max_mb: i64,
    #[serde(rename = "DiskMB", deserialize_with = "null_default::deserialize")]
    pub disk_mb: i64,
    #[serde(rename = "IOPS", deserialize_with = "null_default::deserialize")]
    pub iops: i64,
    #[serde(with = "nullable")]
    pub networks: Vec<NetworkResource>,
    /// Kept as written and not acted on (see [`super::unhonoured`]).
    #[serde(with = "nullable")]
    pub devices: Vec<serde_json::Value>,
}

impl Resources {
    /// Nomad's task defaults: 100 MHz, 300 MB.
    pub const DEFAULT_CPU: i64 = 100;
    pub const DEFAULT_MEMORY_MB: i64 = 300;

    pub fn canonicalize(&mut self) {
        if self.cpu == 0 && self.cores == 0 {
            self.cpu = Self::DEFAULT_CPU;
        }
        if self.memory_mb == 0 {
            self.memory_mb = Self::DEFAULT_MEMORY_MB;
        }
    }
}

/// A network ask (task or group) or a node's network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NetworkResource {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub mode: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub device: String,
    #[serde(rename = "CIDR", deserialize_with = "null_default::deserialize")]
    pub cidr: String,
    #[serde(rename = "IP", deserialize_with = "null_default::deserialize")]
    pub ip: String,
    #[serde(rename = "MBits", deserialize_with = "null_default::deserialize")]
    pub mbits: i64,
    #[serde(rename = "DNS")]
    pub dns: Option<serde_json::Value>,
    #[serde(with = "nullable")]
    pub reserved_ports: Vec<Port>,
    #[serde(with = "nullable")]
    pub dynamic_ports: Vec<Port>,
}

impl NetworkResource {
    /// Every port of this ask, static first.
    pub fn all_ports(&self) -> impl Iterator<Item = &Port> {
        self.reserved_ports.iter().chain(self.dynamic_ports.iter())
    }
}

/// A named port: static (`Value` set by the user) or dynamic (assigned).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Port {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub label: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub value: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub to: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub host_network: String,
}

/// Nomad's default range for dynamic ports.
pub const MIN_DYNAMIC_PORT: u16 = 20000;
pub const MAX_DYNAMIC_PORT: u16 = 32000;

/// What a node offers in total.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeResources {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub cpu: NodeCpuResources,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub memory: NodeMemoryResources,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub disk: NodeDiskResources,
    #[serde(with = "nullable")]
    pub networks: Vec<NetworkResource>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub min_dynamic_port: u16,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub max_dynamic_port: u16,
}

impl NodeResources {
    /// The dynamic port range in effect (Nomad's default when unset).
    pub fn dynamic_port_range(&self) -> (u16, u16) {
        let lo = if self.min_dynamic_port == 0 {
            MIN_DYNAMIC_PORT
        } else {
            self.min_dynamic_port
        };
        let hi = if self.max_dynamic_port == 0 {
            MAX_DYNAMIC_PORT
        } else {
            self.max_dynamic_port
        };
        (lo, hi.max(lo))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeCpuResources {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub cpu_shares: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub total_cpu_cores: u32,
    #[serde(with = "nullable")]
    pub reservable_cpu_cores: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeMemoryResources {
    #[serde(rename = "MemoryMB", deserialize_with = "null_default::deserialize")]
    pub memory_mb: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeDiskResources {
    #[serde(rename = "DiskMB", deserialize_with = "null_default::deserialize")]
    pub disk_mb: i64,
}

/// What a node keeps back for itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeReservedResources {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub cpu: NodeReservedCpuResources,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub memory: NodeMemoryResources,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub disk: NodeDiskResources,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub networks: NodeReservedNetworkResources,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeReservedCpuResources {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub cpu_shares: i64,
    #[serde(with = "nullable")]
    pub reserved_cpu_cores: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeReservedNetworkResources {
    /// Comma-separated ports and ranges, e.g. `"22,80,8000-8100"`.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub reserved_host_ports: String,
}

impl NodeReservedNetworkResources {
    /// Parses `ReservedHostPorts`; a malformed entry is an error naming it.
    pub fn parse_ports(&self) -> Result<Vec<u16>, String> {
        parse_port_list(&self.reserved_host_ports)
    }
}

/// Parses a port list such as `"22,80,8000-8002"`.
pub fn parse_port_list(spec: &str) -> Result<Vec<u16>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("invalid port {part:?} in {spec:?}");
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u16 = a.trim().parse().map_err(|_| bad())?;
                let b: u16 = b.trim().parse().map_err(|_| bad())?;
                if a > b {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(out)
}

/// What the scheduler granted an allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedResources {
    #[serde(with = "nullable")]
    pub tasks: VecMap<String, AllocatedTaskResources>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub shared: AllocatedSharedResources,
}

impl AllocatedResources {
    /// The flat sum used for fit checks.
    pub fn comparable(&self) -> ComparableResources {
        let mut c = ComparableResources {
            disk_mb: self.shared.disk_mb,
            ..Default::default()
        };
        // Saturating, as every sum of resources: validation bounds each
        // value far below overflow, and a sum that still reached it must
        // read as "does not fit", never wrap to a small number.
        for t in self.tasks.values() {
            c.cpu = c.cpu.saturating_add(t.cpu.cpu_shares);
            c.memory_mb = c.memory_mb.saturating_add(t.memory.memory_mb);
        }
        c
    }

    /// Every CPU core this allocation's tasks reserve.
    pub fn reserved_cores(&self) -> impl Iterator<Item = &u32> {
        self.tasks
            .values()
            .flat_map(|t| t.cpu.reserved_cores.iter())
    }

    /// Every host port this allocation holds on its node, each once. A
    /// group port is listed twice in Nomad's shape (in `Shared.Networks`
    /// and in `Shared.Ports`); it is still one port.
    pub fn ports(&self) -> Vec<u16> {
        let shared = self
            .shared
            .networks
            .iter()
            .flat_map(|n| n.all_ports())
            .chain(self.shared.ports.iter());
        let tasks = self
            .tasks
            .values()
            .flat_map(|t| t.networks.iter().flat_map(|n| n.all_ports()));
        let mut ports: Vec<u16> = shared
            .chain(tasks)
            .filter_map(|p| u16::try_from(p.value).ok())
            .filter(|p| *p > 0)
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedTaskResources {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub cpu: AllocatedCpuResources,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub memory: AllocatedMemoryResources,
    #[serde(with = "nullable")]
    pub networks: Vec<NetworkResource>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedCpuResources {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub cpu_shares: i64,
    #[serde(with = "nullable")]
    pub reserved_cores: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedMemoryResources {
    #[serde(rename = "MemoryMB", deserialize_with = "null_default::deserialize")]
    pub memory_mb: i64,
    #[serde(rename = "MemoryMaxMB", deserialize_with = "null_default::deserialize")]
    pub memory_max_mb: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedSharedResources {
    #[serde(rename = "DiskMB", deserialize_with = "null_default::deserialize")]
    pub disk_mb: i64,
    #[serde(with = "nullable")]
    pub networks: Vec<NetworkResource>,
    #[serde(with = "nullable")]
    pub ports: Vec<Port>,
}

/// Flat resource totals: what fit checks add up and compare.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ComparableResources {
    pub cpu: i64,
    pub memory_mb: i64,
    pub disk_mb: i64,
}

impl ComparableResources {
    /// Saturating (see [`AllocatedResources::comparable`]).
    pub fn add(&mut self, other: &ComparableResources) {
        self.cpu = self.cpu.saturating_add(other.cpu);
        self.memory_mb = self.memory_mb.saturating_add(other.memory_mb);
        self.disk_mb = self.disk_mb.saturating_add(other.disk_mb);
    }

    /// Saturating (see [`AllocatedResources::comparable`]).
    pub fn sub(&mut self, other: &ComparableResources) {
        self.cpu = self.cpu.saturating_sub(other.cpu);
        self.memory_mb = self.memory_mb.saturating_sub(other.memory_mb);
        self.disk_mb = self.disk_mb.saturating_sub(other.disk_mb);
    }

    /// Whether `self` fits inside `capacity`; if not, the first dimension
    /// that is exhausted, named as Nomad names it ("cpu", "memory", "disk").
    pub fn superset_of(
        capacity: &ComparableResources,
        ask: &ComparableResources,
    ) -> Result<(), &'static str> {
        if ask.cpu > capacity.cpu {
            return Err("cpu");
        }
        if ask.memory_mb > capacity.memory_mb {
            return Err("memory");
        }
        if ask.disk_mb > capacity.disk_mb {
            return Err("disk");
        }
        Ok(())
    }
}
