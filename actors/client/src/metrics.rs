//! The client's figures under Nomad's names (`nomad.client.*`), as Nomad's
//! client publishes them every collection interval (see
//! `herder_common::nomad_metrics`):
//!
//! - per node (labels `node_id`, `datacenter`, `node_class`, `node_status`,
//!   `node_scheduling_eligibility`): the CPU, memory and disk the servers
//!   allocated to the allocations still running here and what is left
//!   (`allocated.*`, `unallocated.*`), and the allocations by client status
//!   (`allocations.pending|running|terminal`);
//! - per task (labels `job`, `task_group`, `alloc_id`, `task`, `namespace`):
//!   how many times it started running, completed, failed and restarted
//!   (`allocs.running|complete|failed|restart`, counters).
//!
//! [`ClientFigures`] is fed what the client agent already handles (the
//! servers' allocation list, the runners' status updates) and keeps only
//! the allocations the servers still list for this node, so a collected
//! allocation's series go away with it.

use crate::AllocUpdate;
use herder::structs::{AllocId, Allocation, ClientStatus, ComparableResources, Job, Node};
use herder_common::nomad_metrics::{child_job_labels, Family, Kind, Labels};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// What the servers say of an allocation: whose it is, what it holds.
struct AllocMeta {
    namespace: herder::structs::SharedStr,
    /// The job's name (Nomad labels task metrics with it, not the ID).
    job_name: String,
    task_group: herder::structs::SharedStr,
    resources: ComparableResources,
    server_terminal: bool,
}

/// A task's last state and how often it made each transition.
#[derive(Default)]
struct TaskFigures {
    state: String,
    restarts: u64,
    running: u64,
    complete: u64,
    failed: u64,
    restart: u64,
}

struct AllocFigures {
    /// `None` until the servers' list names the allocation (a restored
    /// runner may report before it).
    meta: Option<AllocMeta>,
    client_status: ClientStatus,
    tasks: BTreeMap<String, TaskFigures>,
}

impl AllocFigures {
    fn new(client_status: ClientStatus) -> AllocFigures {
        AllocFigures {
            meta: None,
            client_status,
            tasks: BTreeMap::new(),
        }
    }

    /// Holds resources on the node: neither stopped by the servers nor
    /// ended on the client.
    fn holds_resources(&self) -> bool {
        self.meta.as_ref().is_some_and(|m| !m.server_terminal) && !self.client_status.is_terminal()
    }
}

/// The allocations of this node as the metrics see them.
#[derive(Default)]
pub struct ClientFigures {
    allocs: HashMap<AllocId, AllocFigures>,
}

impl ClientFigures {
    pub fn new() -> ClientFigures {
        ClientFigures::default()
    }

    /// The servers' whole list of this node's allocations: new ones are
    /// added, known ones updated, those no longer listed forgotten.
    pub fn sync(&mut self, allocs: &[(Allocation, Option<Arc<Job>>)]) {
        let listed: HashSet<AllocId> = allocs.iter().map(|(a, _)| a.id).collect();
        self.allocs.retain(|id, _| listed.contains(id));
        for (alloc, job) in allocs {
            let figures = self
                .allocs
                .entry(alloc.id)
                .or_insert_with(|| AllocFigures::new(alloc.client_status));
            figures.meta = Some(AllocMeta {
                namespace: alloc.namespace.clone(),
                // Without its job (see `SyncAllocs`), the job's ID.
                job_name: match job.as_deref() {
                    Some(job) if !job.name.is_empty() => job.name.clone(),
                    _ => alloc.job_id.to_string(),
                },
                task_group: alloc.task_group.clone(),
                resources: alloc.allocated_resources.comparable(),
                server_terminal: alloc.server_terminal(),
            });
        }
    }

    /// A runner's report: the allocation's status, and each task's
    /// transitions since the last report.
    pub fn update(&mut self, update: &AllocUpdate) {
        let figures = self
            .allocs
            .entry(update.alloc_id)
            .or_insert_with(|| AllocFigures::new(update.client_status));
        figures.client_status = update.client_status;
        for (name, state) in update.task_states.iter() {
            let seen_before = figures.tasks.contains_key(name);
            let task = figures.tasks.entry(name.clone()).or_default();
            if state.state == "running" && task.state != "running" {
                task.running += 1;
            }
            if state.state == "dead" && task.state != "dead" {
                if state.failed {
                    task.failed += 1;
                } else {
                    task.complete += 1;
                }
            }
            // Restarts before this client first saw the task (a restored
            // runner) are not this client's to count.
            if seen_before && state.restarts > task.restarts {
                task.restart += state.restarts - task.restarts;
            }
            task.restarts = state.restarts;
            task.state.clone_from(&state.state);
        }
    }

    /// Nomad's client families for `node`, whose status is `node_status`.
    pub fn families(&self, node: &Node, node_status: &str) -> Vec<Family> {
        let mut families = self.node_gauges(node, &node_labels(node, node_status));
        families.extend(self.task_counters());
        families
    }

    /// The node's allocated and unallocated resources and its allocations
    /// by client status, one gauge family each.
    fn node_gauges(&self, node: &Node, base: &Labels) -> Vec<Family> {
        let mut allocated = ComparableResources::default();
        let (mut pending, mut running, mut terminal) = (0u64, 0u64, 0u64);
        for a in self.allocs.values() {
            if a.holds_resources() {
                if let Some(meta) = &a.meta {
                    allocated.add(&meta.resources);
                }
            }
            match a.client_status {
                ClientStatus::Pending => pending += 1,
                ClientStatus::Running => running += 1,
                ClientStatus::Complete | ClientStatus::Failed => terminal += 1,
                ClientStatus::Lost | ClientStatus::Unknown => {}
            }
        }
        let mut free = node.available();
        free.sub(&allocated);

        let mut families = Vec::new();
        let mut gauge = |name: &'static str, value: i64| {
            let mut family = Family::new(name, Kind::Gauge);
            family.push(base.clone(), value as f64);
            families.push(family);
        };
        gauge("nomad.client.allocated.cpu", allocated.cpu);
        gauge("nomad.client.allocated.memory", allocated.memory_mb);
        gauge("nomad.client.allocated.disk", allocated.disk_mb);
        gauge("nomad.client.unallocated.cpu", free.cpu);
        gauge("nomad.client.unallocated.memory", free.memory_mb);
        gauge("nomad.client.unallocated.disk", free.disk_mb);
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        gauge("nomad.client.allocations.pending", count(pending));
        gauge("nomad.client.allocations.running", count(running));
        gauge("nomad.client.allocations.terminal", count(terminal));
        families
    }

    /// The per-task counters (running, complete, failed, restart), with a
    /// sample for each task whose count moved.
    fn task_counters(&self) -> impl Iterator<Item = Family> {
        let mut counters = [
            "nomad.client.allocs.running",
            "nomad.client.allocs.complete",
            "nomad.client.allocs.failed",
            "nomad.client.allocs.restart",
        ]
        .map(|name| Family::new(name, Kind::Counter));
        for (id, a) in &self.allocs {
            let Some(meta) = &a.meta else {
                continue;
            };
            for (task_name, task) in &a.tasks {
                let mut labels = vec![
                    ("job", meta.job_name.clone()),
                    ("task_group", meta.task_group.to_string()),
                    ("alloc_id", id.to_string()),
                    ("task", task_name.clone()),
                    ("namespace", meta.namespace.to_string()),
                ];
                child_job_labels(&meta.job_name, &mut labels);
                let labels: Labels = labels.into();
                let counts = [task.running, task.complete, task.failed, task.restart];
                // A counter Nomad never incremented does not exist.
                for (family, n) in counters.iter_mut().zip(counts).filter(|(_, n)| *n > 0) {
                    family.push(labels.clone(), n as f64);
                }
            }
        }
        counters.into_iter().filter(|f| !f.samples.is_empty())
    }
}

/// The labels every node gauge carries.
fn node_labels(node: &Node, node_status: &str) -> Labels {
    let node_class = if node.node_class.is_empty() {
        "none".to_string()
    } else {
        node.node_class.clone()
    };
    vec![
        ("node_id", node.id.to_string()),
        ("datacenter", node.datacenter.clone()),
        ("node_class", node_class),
        ("node_status", node_status.to_string()),
        (
            "node_scheduling_eligibility",
            node.scheduling_eligibility.as_str().to_string(),
        ),
    ]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use herder::state::fixtures;
    use herder::structs::{TaskState, VecMap};

    fn update(
        alloc: AllocId,
        status: ClientStatus,
        task: &str,
        state: &str,
        restarts: u64,
    ) -> AllocUpdate {
        let mut task_states = VecMap::new();
        task_states.insert(
            task.to_string(),
            TaskState {
                state: state.to_string(),
                failed: state == "dead" && status == ClientStatus::Failed,
                restarts,
                ..Default::default()
            },
        );
        AllocUpdate {
            alloc_id: alloc,
            client_status: status,
            client_description: String::new(),
            task_states,
            node_failure: false,
            deployment_status: None,
            services: Vec::new(),
        }
    }

    fn value(families: &[Family], name: &str) -> Option<f64> {
        families
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.samples.iter().map(|s| s.value).sum())
    }

    #[test]
    fn allocations_are_counted_and_their_resources_allocated_until_they_end() {
        let mut node = fixtures::node("n1");
        node.node_class.clear();
        let mut job = fixtures::job("default", "web", &[("g", 2)]);
        job.canonicalize();
        let job = Arc::new(job);
        let builder = fixtures::AllocBuilder::new(&job, "g");
        let eval = herder::structs::new_id();
        let (a, b) = (
            builder.build(0, node.id, eval, 1),
            builder.build(1, node.id, eval, 1),
        );
        let per_alloc = a.allocated_resources.comparable();
        let mut figures = ClientFigures::new();
        figures.sync(&[
            (a.clone(), Some(job.clone())),
            (b.clone(), Some(job.clone())),
        ]);
        figures.update(&update(a.id, ClientStatus::Running, "main", "running", 0));

        let f = figures.families(&node, "ready");
        assert_eq!(value(&f, "nomad.client.allocations.running"), Some(1.0));
        assert_eq!(value(&f, "nomad.client.allocations.pending"), Some(1.0));
        assert_eq!(
            value(&f, "nomad.client.allocated.cpu"),
            Some(2.0 * per_alloc.cpu as f64)
        );
        assert_eq!(
            value(&f, "nomad.client.unallocated.memory"),
            Some((node.available().memory_mb - 2 * per_alloc.memory_mb) as f64)
        );
        assert_eq!(value(&f, "nomad.client.allocs.running"), Some(1.0));
        assert_eq!(
            value(&f, "nomad.client.allocs.failed"),
            None,
            "never incremented"
        );
        let running = f.iter().find(|f| f.name == "nomad.client.allocs.running");
        let labels = running.map(|f| f.samples[0].labels.clone());
        assert!(
            labels.is_some_and(|l| l.contains(&("alloc_id", a.id.to_string()))
                && l.contains(&("job", "web".to_string())))
        );

        // A restart, then the task fails for good.
        figures.update(&update(a.id, ClientStatus::Running, "main", "pending", 1));
        figures.update(&update(a.id, ClientStatus::Running, "main", "running", 1));
        figures.update(&update(a.id, ClientStatus::Failed, "main", "dead", 1));
        let f = figures.families(&node, "ready");
        assert_eq!(value(&f, "nomad.client.allocs.running"), Some(2.0));
        assert_eq!(value(&f, "nomad.client.allocs.restart"), Some(1.0));
        assert_eq!(value(&f, "nomad.client.allocs.failed"), Some(1.0));
        assert_eq!(value(&f, "nomad.client.allocations.terminal"), Some(1.0));
        assert_eq!(
            value(&f, "nomad.client.allocated.cpu"),
            Some(per_alloc.cpu as f64)
        );

        // Collected by the servers: gone from every figure.
        figures.sync(&[(b, Some(job))]);
        let f = figures.families(&node, "ready");
        assert_eq!(value(&f, "nomad.client.allocations.terminal"), Some(0.0));
        assert_eq!(value(&f, "nomad.client.allocs.running"), None);
        let labels = &f[0].samples[0].labels;
        assert!(labels.contains(&("node_class", "none".to_string())));
        assert!(labels.contains(&("node_status", "ready".to_string())));
    }
}
