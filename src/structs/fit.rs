//! Whether a set of allocations fits on a node: the one rule the scheduler
//! plans by and the plan applier re-checks before committing.
//!
//! Only non-terminal allocations count. CPU, memory and disk must not exceed
//! what the node offers less what it reserves; no two allocations may hold
//! the same host port, and none may hold a port the node reserves; no two
//! may hold the same CPU core, and every core held must be one the node
//! offers for reservation (`resources { cores = N }`).

use super::{Allocation, ComparableResources, Node};

/// Why allocations do not fit, named as Nomad names exhausted dimensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FitError {
    /// "cpu", "memory" or "disk".
    Exhausted(&'static str),
    /// Two allocations, or an allocation and the node, claim this port.
    PortCollision(u16),
    /// The node's reserved port list cannot be read.
    BadReservedPorts(String),
    /// Two allocations claim this core, or the node does not offer it.
    CoreCollision(u32),
}

impl FitError {
    /// The dimension string Nomad reports in `DimensionExhausted`.
    pub fn dimension(&self) -> String {
        match self {
            FitError::Exhausted(d) => (*d).to_string(),
            FitError::PortCollision(_) => "network: port collision".to_string(),
            FitError::BadReservedPorts(_) => "network: reserved ports".to_string(),
            FitError::CoreCollision(_) => "cores".to_string(),
        }
    }
}

impl std::fmt::Display for FitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FitError::Exhausted(d) => write!(f, "{d} exhausted"),
            FitError::PortCollision(p) => write!(f, "port {p} is already in use"),
            FitError::BadReservedPorts(e) => write!(f, "node reserved ports: {e}"),
            FitError::CoreCollision(c) => write!(f, "core {c} is already in use or not offered"),
        }
    }
}

/// What a node's live (non-terminal) allocations hold. The state store
/// keeps one per node, up to date with every write, so that checking a
/// plan against a node costs O(the plan's allocations there) rather than
/// O(every allocation on the node): the difference between a scheduler
/// that slows down as nodes fill up and one that does not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeAllocUsage {
    pub used: ComparableResources,
    /// Host ports held, sorted; a port held twice (which a committed state
    /// never has, but a forced write could) is listed twice.
    pub ports: Vec<u16>,
    /// CPU cores held (`resources.cores`), sorted, as ports are. Empty
    /// unless a job reserves whole cores, so it costs nothing otherwise.
    pub cores: Vec<u32>,
    /// How many live allocations there are.
    pub live: u32,
}

impl NodeAllocUsage {
    /// The usage of `allocs` (terminal ones are skipped).
    pub fn of<'a>(allocs: impl IntoIterator<Item = &'a Allocation>) -> NodeAllocUsage {
        let mut usage = NodeAllocUsage::default();
        for alloc in allocs {
            usage.add(alloc);
        }
        usage
    }

    /// Counts a live allocation in; terminal ones hold nothing.
    pub fn add(&mut self, alloc: &Allocation) {
        if alloc.is_terminal() {
            return;
        }
        self.used.add(&alloc.allocated_resources.comparable());
        for port in alloc.allocated_resources.ports() {
            let at = self.ports.partition_point(|p| *p < port);
            self.ports.insert(at, port);
        }
        for &core in alloc.allocated_resources.reserved_cores() {
            let at = self.cores.partition_point(|c| *c < core);
            self.cores.insert(at, core);
        }
        self.live += 1;
    }

    /// Takes a live allocation out again; terminal ones were never in.
    pub fn remove(&mut self, alloc: &Allocation) {
        if alloc.is_terminal() {
            return;
        }
        self.used.sub(&alloc.allocated_resources.comparable());
        for port in alloc.allocated_resources.ports() {
            if let Ok(at) = self.ports.binary_search(&port) {
                self.ports.remove(at);
            }
        }
        for core in alloc.allocated_resources.reserved_cores() {
            if let Ok(at) = self.cores.binary_search(core) {
                self.cores.remove(at);
            }
        }
        self.live = self.live.saturating_sub(1);
    }

    /// Whether this usage fits on `node`: capacity less reservations, and
    /// no host port held twice or held while the node reserves it.
    pub fn fits(&self, node: &Node) -> Result<(), FitError> {
        let reserved = node
            .reserved_resources
            .networks
            .parse_ports()
            .map_err(FitError::BadReservedPorts)?;
        if let Some(pair) = self.ports.windows(2).find(|w| w[0] == w[1]) {
            return Err(FitError::PortCollision(pair[0]));
        }
        if let Some(port) = reserved
            .into_iter()
            .find(|p| self.ports.binary_search(p).is_ok())
        {
            return Err(FitError::PortCollision(port));
        }
        if let Some(pair) = self.cores.windows(2).find(|w| w[0] == w[1]) {
            return Err(FitError::CoreCollision(pair[0]));
        }
        if !self.cores.is_empty() {
            let offered = node.reservable_cores();
            if let Some(core) = self.cores.iter().find(|c| !offered.contains(c)) {
                return Err(FitError::CoreCollision(*core));
            }
        }
        ComparableResources::superset_of(&node.available(), &self.used).map_err(FitError::Exhausted)
    }
}

/// Checks that `allocs` (the whole proposed set on `node`) fit; returns
/// the resources they use. Terminal allocations are skipped.
pub fn allocs_fit<'a>(
    node: &Node,
    allocs: impl IntoIterator<Item = &'a Allocation>,
) -> Result<ComparableResources, FitError> {
    let usage = NodeAllocUsage::of(allocs);
    usage.fits(node)?;
    Ok(usage.used)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs::*;

    fn node(cpu: i64, mem: i64) -> Node {
        let mut n = Node {
            id: new_id(),
            status: NodeStatus::Ready,
            ..Default::default()
        };
        n.node_resources.cpu.cpu_shares = cpu;
        n.node_resources.memory.memory_mb = mem;
        n.node_resources.disk.disk_mb = 10_000;
        n.reserved_resources.cpu.cpu_shares = 100;
        n.reserved_resources.networks.reserved_host_ports = "22".into();
        n
    }

    fn alloc(cpu: i64, mem: i64, port: Option<i64>) -> Allocation {
        let mut a = Allocation {
            id: new_id(),
            ..Default::default()
        };
        let mut task = AllocatedTaskResources::default();
        task.cpu.cpu_shares = cpu;
        task.memory.memory_mb = mem;
        if let Some(p) = port {
            task.networks.push(NetworkResource {
                dynamic_ports: vec![Port {
                    label: "http".into(),
                    value: p,
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        std::sync::Arc::make_mut(&mut a.allocated_resources)
            .tasks
            .insert("t".into(), task);
        a
    }

    #[test]
    fn fits_until_a_dimension_is_exhausted_after_reservations() {
        let n = node(1100, 1000);
        let a = alloc(500, 400, None);
        let b = alloc(500, 400, None);
        assert_eq!(allocs_fit(&n, [&a, &b]).unwrap().cpu, 1000);
        let c = alloc(1, 1, None);
        assert_eq!(
            allocs_fit(&n, [&a, &b, &c]),
            Err(FitError::Exhausted("cpu"))
        );
        let big = alloc(10, 2000, None);
        assert_eq!(allocs_fit(&n, [&big]).unwrap_err().dimension(), "memory");
    }

    #[test]
    fn terminal_allocations_do_not_count() {
        let n = node(600, 1000);
        let mut old = alloc(500, 100, None);
        old.desired_status = DesiredStatus::Stop;
        let new = alloc(500, 100, None);
        assert!(allocs_fit(&n, [&old, &new]).is_ok());
    }

    #[test]
    fn a_group_port_listed_in_networks_and_ports_is_one_port() {
        let n = node(10_000, 10_000);
        let mut a = alloc(1, 10, None);
        let port = Port {
            label: "http".into(),
            value: 29437,
            ..Default::default()
        };
        std::sync::Arc::make_mut(&mut a.allocated_resources)
            .shared
            .networks
            .push(NetworkResource {
                dynamic_ports: vec![port.clone()],
                ..Default::default()
            });
        std::sync::Arc::make_mut(&mut a.allocated_resources)
            .shared
            .ports
            .push(port);
        assert!(allocs_fit(&n, [&a]).is_ok());
        let mut b = a.clone();
        b.id = new_id();
        assert_eq!(
            allocs_fit(&n, [&a, &b]),
            Err(FitError::PortCollision(29437))
        );
    }

    #[test]
    fn ports_collide_with_each_other_and_with_reserved_ports() {
        let n = node(10_000, 10_000);
        let a = alloc(1, 10, Some(8080));
        let b = alloc(1, 10, Some(8080));
        assert_eq!(allocs_fit(&n, [&a, &b]), Err(FitError::PortCollision(8080)));
        let ssh = alloc(1, 10, Some(22));
        assert_eq!(allocs_fit(&n, [&ssh]), Err(FitError::PortCollision(22)));
        let c = alloc(1, 10, Some(8081));
        assert!(allocs_fit(&n, [&a, &c]).is_ok());
    }

    #[test]
    fn cores_collide_and_must_be_offered_by_the_node() {
        let mut n = node(4000, 4096);
        n.node_resources.cpu.total_cpu_cores = 2;
        let with_cores = |cores: Vec<u32>| {
            let mut a = alloc(100, 100, None);
            let resources = std::sync::Arc::make_mut(&mut a.allocated_resources);
            resources.tasks.get_mut("t").unwrap().cpu.reserved_cores = cores;
            a
        };
        assert!(allocs_fit(&n, [&with_cores(vec![0]), &with_cores(vec![1])]).is_ok());
        assert_eq!(
            allocs_fit(&n, [&with_cores(vec![0]), &with_cores(vec![0])]),
            Err(FitError::CoreCollision(0))
        );
        assert_eq!(
            allocs_fit(&n, [&with_cores(vec![5])]),
            Err(FitError::CoreCollision(5))
        );
        // Taking one out frees its core.
        let mut usage = NodeAllocUsage::of([&with_cores(vec![0]), &with_cores(vec![1])]);
        usage.remove(&with_cores(vec![1]));
        assert_eq!(usage.cores, vec![0]);
    }
}
