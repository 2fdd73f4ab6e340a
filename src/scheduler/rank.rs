//! Ranking: how well a feasible node fits a task group, and the resources
//! (ports included) the group would be granted there.
//!
//! Fit scores follow Nomad's formulas: with `free = 1 - used/capacity` for
//! CPU and memory, bin-packing scores `20 - (10^free_cpu + 10^free_mem)` and
//! the spread algorithm `(10^free_cpu + 10^free_mem) - 2`, both clamped to
//! [0, 18] and divided by 18. The other score components (job
//! anti-affinity, reschedule penalty, affinities, spreads) are computed in
//! the stack and averaged with the fit into the final score.

use crate::structs::{
    AllocatedCpuResources, AllocatedMemoryResources, AllocatedResources, AllocatedTaskResources,
    ComparableResources, NetworkResource, Node, Port, SchedulerAlgorithm, TaskGroup, VecMap,
};
use rand::Rng;
use std::collections::HashSet;

/// The highest raw fit score; fits are normalised by it.
pub const MAX_FIT_SCORE: f64 = 18.0;

/// The normalised fit of `util` (everything on the node including the new
/// allocation) on a node with `capacity` (after reservations).
pub fn fit_score(
    algorithm: SchedulerAlgorithm,
    capacity: &ComparableResources,
    util: &ComparableResources,
) -> f64 {
    let free = |used: i64, cap: i64| {
        if cap <= 0 {
            0.0
        } else {
            1.0 - used as f64 / cap as f64
        }
    };
    let total = 10f64.powf(free(util.cpu, capacity.cpu))
        + 10f64.powf(free(util.memory_mb, capacity.memory_mb));
    let raw = match algorithm {
        SchedulerAlgorithm::Binpack => 20.0 - total,
        SchedulerAlgorithm::Spread => total - 2.0,
    };
    raw.clamp(0.0, MAX_FIT_SCORE) / MAX_FIT_SCORE
}

/// What one allocation of a group asks of a node.
#[derive(Clone, Debug)]
pub struct GroupAsk {
    pub resources: ComparableResources,
    /// The grant without port assignments, cloned for each placement.
    pub template: AllocatedResources,
    /// Group networks, then task networks as (task name, networks).
    pub group_networks: Vec<NetworkResource>,
    pub task_networks: Vec<(String, Vec<NetworkResource>)>,
    /// Whole cores reserved, as (task name, how many); empty for most jobs.
    pub cores: Vec<(String, usize)>,
}

impl GroupAsk {
    pub fn new(tg: &TaskGroup) -> Self {
        let combined = tg.combined_resources();
        let mut tasks = VecMap::new();
        let mut task_networks = Vec::new();
        let mut cores = Vec::new();
        for t in &tg.tasks {
            tasks.insert(
                t.name.clone(),
                AllocatedTaskResources {
                    cpu: AllocatedCpuResources {
                        cpu_shares: t.resources.cpu,
                        reserved_cores: Vec::new(),
                    },
                    memory: AllocatedMemoryResources {
                        memory_mb: t.resources.memory_mb,
                        memory_max_mb: t.resources.memory_max_mb,
                    },
                    networks: Vec::new(),
                },
            );
            if !t.resources.networks.is_empty() {
                task_networks.push((t.name.clone(), t.resources.networks.clone()));
            }
            if let Ok(n @ 1..) = usize::try_from(t.resources.cores) {
                cores.push((t.name.clone(), n));
            }
        }
        let mut template = AllocatedResources {
            tasks,
            ..Default::default()
        };
        template.shared.disk_mb = combined.disk_mb;
        GroupAsk {
            resources: ComparableResources {
                cpu: combined.cpu,
                memory_mb: combined.memory_mb,
                disk_mb: combined.disk_mb,
            },
            template,
            group_networks: tg.networks.clone(),
            task_networks,
            cores,
        }
    }

    pub fn has_networks(&self) -> bool {
        !self.group_networks.is_empty() || !self.task_networks.is_empty()
    }
}

/// Nomad's name for a node without enough free cores.
pub const CORES_EXHAUSTED: &str = "cores";

/// The cores each task of `ask` reserves on a node, lowest free first:
/// `None` when the node has too few free. `used` is what its live
/// allocations hold, sorted.
pub fn assign_cores(ask: &GroupAsk, node: &Node, used: &[u32]) -> Option<Vec<(String, Vec<u32>)>> {
    let mut free = node
        .reservable_cores()
        .into_iter()
        .filter(|c| used.binary_search(c).is_err());
    let mut out = Vec::with_capacity(ask.cores.len());
    for (task, n) in &ask.cores {
        let picked: Vec<u32> = free.by_ref().take(*n).collect();
        if picked.len() < *n {
            return None;
        }
        out.push((task.clone(), picked));
    }
    Some(out)
}

/// Writes granted cores into `resources`: each such task is counted as
/// using its cores' share of the node's MHz, as Nomad counts it.
pub fn apply_cores(
    resources: &mut AllocatedResources,
    cores: Vec<(String, Vec<u32>)>,
    mhz_per_core: i64,
) {
    for (task, ids) in cores {
        if let Some(t) = resources.tasks.get_mut(&task) {
            let n = i64::try_from(ids.len()).unwrap_or(i64::MAX);
            t.cpu.cpu_shares = mhz_per_core.saturating_mul(n);
            t.cpu.reserved_cores = ids;
        }
    }
}

/// Why ports could not be granted, as Nomad names the exhausted dimension.
pub const PORT_COLLISION: &str = "network: reserved port collision";
pub const DYNAMIC_PORT_EXHAUSTED: &str = "network: dynamic port selection failed";

/// How many random picks before scanning the dynamic range in order.
const RANDOM_PORT_ATTEMPTS: usize = 20;

/// Grants the group's networks on a node given the ports already in use:
/// static ports must be free, dynamic ports are picked in the node's range
/// without colliding with anything (including each other).
pub fn assign_ports(
    ask: &GroupAsk,
    node: &Node,
    used: &HashSet<u16>,
    rng: &mut impl Rng,
) -> Result<AllocatedResources, &'static str> {
    let mut granted = ask.template.clone();
    if !ask.has_networks() {
        return Ok(granted);
    }
    let mut taken: HashSet<u16> = HashSet::new();
    // Static ports first, so dynamic picks avoid them.
    let statics = ask
        .group_networks
        .iter()
        .chain(ask.task_networks.iter().flat_map(|(_, n)| n.iter()))
        .flat_map(|n| n.reserved_ports.iter());
    for p in statics {
        let port = u16::try_from(p.value).map_err(|_| PORT_COLLISION)?;
        if used.contains(&port) || !taken.insert(port) {
            return Err(PORT_COLLISION);
        }
    }
    let range = node.node_resources.dynamic_port_range();
    let ip = node.network_ip();
    let mut grant = |net: &NetworkResource| -> Result<NetworkResource, &'static str> {
        let mut out = net.clone();
        // The address the ports are reachable on, as Nomad fills it: tasks
        // and service discovery read it from the allocation.
        if out.ip.is_empty() {
            out.ip = ip.to_string();
        }
        for p in &mut out.dynamic_ports {
            let port = pick_dynamic(range, used, &taken, rng).ok_or(DYNAMIC_PORT_EXHAUSTED)?;
            taken.insert(port);
            p.value = i64::from(port);
            if p.to == -1 {
                p.to = p.value;
            }
        }
        Ok(out)
    };
    for net in &ask.group_networks {
        let g = grant(net)?;
        granted.shared.ports.extend(g.all_ports().map(|p| Port {
            label: p.label.clone(),
            value: p.value,
            to: p.to,
            host_network: p.host_network.clone(),
        }));
        granted.shared.networks.push(g);
    }
    for (task, nets) in &ask.task_networks {
        let mut out = Vec::with_capacity(nets.len());
        for net in nets {
            out.push(grant(net)?);
        }
        if let Some(t) = granted.tasks.get_mut(task) {
            t.networks = out;
        }
    }
    Ok(granted)
}

fn pick_dynamic(
    (lo, hi): (u16, u16),
    used: &HashSet<u16>,
    taken: &HashSet<u16>,
    rng: &mut impl Rng,
) -> Option<u16> {
    let free = |p: &u16| !used.contains(p) && !taken.contains(p);
    for _ in 0..RANDOM_PORT_ATTEMPTS {
        let p = rng.gen_range(lo..=hi);
        if free(&p) {
            return Some(p);
        }
    }
    (lo..=hi).find(free)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn binpack_prefers_fuller_nodes() {
        let cap = ComparableResources {
            cpu: 4000,
            memory_mb: 8000,
            disk_mb: 0,
        };
        let light = ComparableResources {
            cpu: 100,
            memory_mb: 100,
            disk_mb: 0,
        };
        let heavy = ComparableResources {
            cpu: 3000,
            memory_mb: 6000,
            disk_mb: 0,
        };
        let b = SchedulerAlgorithm::Binpack;
        assert!(fit_score(b, &cap, &heavy) > fit_score(b, &cap, &light));
        let s = SchedulerAlgorithm::Spread;
        assert!(fit_score(s, &cap, &heavy) < fit_score(s, &cap, &light));
        // A perfectly full node scores 18/18.
        assert!((fit_score(b, &cap, &cap) - 1.0).abs() < 1e-9);
    }
}
