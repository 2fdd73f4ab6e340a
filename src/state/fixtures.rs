//! Small builders of realistic rows (jobs, nodes, evaluations,
//! allocations) for the store's tests and benchmarks, and for other
//! crates' tests. Each returns a valid, canonical value that callers
//! adjust with struct update syntax.

use crate::structs::{
    new_id, AllocatedCpuResources, AllocatedMemoryResources, AllocatedResources,
    AllocatedSharedResources, AllocatedTaskResources, Allocation, DriverInfo, EvalId, Evaluation,
    Job, JobType, Node, NodeCpuResources, NodeDiskResources, NodeId, NodeMemoryResources,
    NodeResources, NodeStatus, Resources, SharedStr, Task, TaskGroup, TriggeredBy, VecMap,
};
use std::sync::Arc;

/// A service job with the given task groups (name, count), one `exec`
/// task each, canonicalized.
pub fn job(namespace: &str, id: &str, groups: &[(&str, i32)]) -> Job {
    let mut job = Job {
        id: id.to_string(),
        namespace: namespace.to_string(),
        job_type: JobType::Service,
        datacenters: vec!["dc1".to_string()],
        task_groups: groups
            .iter()
            .map(|(name, count)| TaskGroup {
                name: name.to_string(),
                count: *count,
                tasks: vec![Task {
                    name: "main".to_string(),
                    driver: "exec".to_string(),
                    resources: Resources {
                        cpu: 100,
                        memory_mb: 64,
                        ..Default::default()
                    },
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    job.canonicalize();
    job
}

/// A ready node with 4 GHz, 8 GiB and 100 GiB of disk, offering `exec`.
pub fn node(name: &str) -> Node {
    let mut node = Node {
        id: new_id(),
        secret_id: new_id().to_string(),
        datacenter: "dc1".to_string(),
        name: name.into(),
        node_class: "standard".to_string(),
        status: NodeStatus::Ready,
        node_resources: NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: 4000,
                total_cpu_cores: 4,
                ..Default::default()
            },
            memory: NodeMemoryResources { memory_mb: 8192 },
            disk: NodeDiskResources { disk_mb: 100_000 },
            ..Default::default()
        },
        ..Default::default()
    };
    node.attributes.insert("kernel.name".into(), "linux".into());
    node.drivers.insert(
        "exec".into(),
        DriverInfo {
            detected: true,
            healthy: true,
            ..Default::default()
        },
    );
    node.compute_class();
    node
}

/// Registers `count` fixture nodes named `node-00000`, `node-00001`, ...
/// in `store` and answers their IDs, in that order.
pub fn register_nodes(store: &super::StateStore, count: usize) -> Vec<NodeId> {
    (0..count)
        .map(|n| {
            let node = node(&format!("node-{n:05}"));
            let id = node.id;
            store
                .apply(super::Command::NodeRegister {
                    node: Arc::new(node),
                })
                .expect("a fixture node registers");
            id
        })
        .collect()
}

/// Registers `job` in `store` with the pending evaluation a user's
/// registration makes (at time 1), and answers that evaluation's ID.
pub fn register_job(store: &super::StateStore, job: Job) -> EvalId {
    let eval = eval(&job, TriggeredBy::JobRegister, 1);
    let id = eval.id;
    store
        .apply(super::Command::JobRegister {
            job: Arc::new(job),
            eval: Some(eval),
            enforce_index: None,
        })
        .expect("a fixture job registers");
    id
}

/// A pending evaluation of `job`.
pub fn eval(job: &Job, triggered_by: TriggeredBy, now: i64) -> Evaluation {
    Evaluation::for_job(job, triggered_by, now)
}

/// An allocation of group `group` of `job`, number `index`, on `node`,
/// placed by `eval`. Namespace, job ID and group name are shared `Arc`s
/// so many allocations of one job share their strings.
pub struct AllocBuilder {
    namespace: SharedStr,
    job_id: SharedStr,
    job_version: u64,
    group: SharedStr,
    resources: AllocatedResources,
}

impl AllocBuilder {
    pub fn new(job: &Job, group: &str) -> Self {
        let mut tasks = VecMap::new();
        tasks.insert(
            "main".to_string(),
            AllocatedTaskResources {
                cpu: AllocatedCpuResources {
                    cpu_shares: 100,
                    ..Default::default()
                },
                memory: AllocatedMemoryResources {
                    memory_mb: 64,
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        AllocBuilder {
            namespace: SharedStr::from(job.namespace.as_str()),
            job_id: SharedStr::from(job.id.as_str()),
            job_version: job.version,
            group: SharedStr::from(group),
            resources: AllocatedResources {
                tasks,
                shared: AllocatedSharedResources {
                    disk_mb: 300,
                    ..Default::default()
                },
            },
        }
    }

    pub fn build(&self, index: u32, node: NodeId, eval: EvalId, now: i64) -> Allocation {
        Allocation {
            id: new_id(),
            namespace: self.namespace.clone(),
            eval_id: eval,
            name: Allocation::name_for(&self.job_id, &self.group, index).into(),
            node_id: node,
            node_name: SharedStr::default(),
            job_id: self.job_id.clone(),
            job_version: self.job_version,
            task_group: self.group.clone(),
            allocated_resources: Arc::new(self.resources.clone()),
            create_time: now,
            modify_time: now,
            ..Default::default()
        }
    }
}
