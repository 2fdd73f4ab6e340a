//! Scenario tests of the schedulers through the [`Harness`], in the manner
//! of Nomad's scheduler tests: build a cluster and a job, process one
//! evaluation, and assert on the plan, the allocations and the evaluations
//! the scheduler wrote.

mod constraints;
mod deployments;
mod equivalence;
mod generic;
mod props;
mod system;

use super::harness::Harness;
use crate::structs::{
    Allocation, ClientStatus, DriverInfo, EvalStatus, Evaluation, Job, JobType, Node,
    NodeCpuResources, NodeDiskResources, NodeMemoryResources, NodeResources, NodeStatus, Resources,
    Task, TaskGroup, TriggeredBy,
};
use crate::view::State;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A fixed clock for every scenario (Unix nanoseconds).
pub const NOW: i64 = 1_700_000_000_000_000_000;
pub const SECOND: i64 = 1_000_000_000;

/// A ready node in the peer benchmark shape: 4,000 MHz, 8,192 MB, 100 GiB,
/// with 100 MHz / 256 MB / 4 GiB reserved, linux/x86, exec + mock_driver.
pub fn node() -> Node {
    let mut n = Node {
        id: crate::structs::new_id(),
        datacenter: "dc1".into(),
        node_class: "linux-medium-pci".into(),
        node_pool: "default".into(),
        status: NodeStatus::Ready,
        ..Default::default()
    };
    n.name = format!("node-{}", &n.id.to_string()[..8]).into();
    n.node_resources = NodeResources {
        cpu: NodeCpuResources {
            cpu_shares: 4000,
            ..Default::default()
        },
        memory: NodeMemoryResources { memory_mb: 8192 },
        disk: NodeDiskResources {
            disk_mb: 100 * 1024,
        },
        ..Default::default()
    };
    n.reserved_resources.cpu.cpu_shares = 100;
    n.reserved_resources.memory.memory_mb = 256;
    n.reserved_resources.disk.disk_mb = 4 * 1024;
    n.attributes.insert("kernel.name".into(), "linux".into());
    n.attributes.insert("arch".into(), "x86".into());
    n.attributes
        .insert("unique.hostname".into(), n.name.clone());
    for d in ["exec", "mock_driver"] {
        n.drivers.insert(
            d.into(),
            DriverInfo {
                detected: true,
                healthy: true,
                ..Default::default()
            },
        );
    }
    n
}

/// A job of one group `web` with one `exec` task of 500 MHz / 256 MB.
pub fn job(job_type: JobType, count: i32) -> Job {
    let mut j = Job {
        id: "web".into(),
        job_type,
        datacenters: vec!["dc1".into()],
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count,
            tasks: vec![Task {
                name: "web".into(),
                driver: "exec".into(),
                resources: Resources {
                    cpu: 500,
                    memory_mb: 256,
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    j.canonicalize();
    if let Some(d) = j.task_groups[0].ephemeral_disk.as_mut() {
        d.size_mb = 150;
    }
    j
}

/// A cluster under test.
pub struct Scenario {
    pub h: Harness,
}

impl Scenario {
    /// Marks an allocation failed at `at`, its task `web` dead, as a
    /// client would report it.
    pub fn fail_at(&mut self, id: &crate::structs::AllocId, at: i64) {
        self.fail_with(id, at, false);
    }

    /// Marks an allocation failed at `at` and, in the same write, allowed
    /// to be replaced although its deployment is active (the deployment
    /// watcher does this for a failed allocation of a group with a
    /// progress deadline, as Nomad's does).
    pub fn fail_replaceable_at(&mut self, id: &crate::structs::AllocId, at: i64) {
        self.fail_with(id, at, true);
    }

    fn fail_with(&mut self, id: &crate::structs::AllocId, at: i64, replaceable: bool) {
        self.h.state.update_alloc(id, |a| {
            if replaceable {
                a.desired_transition.reschedule = Some(true);
            }
            a.client_status = crate::structs::ClientStatus::Failed;
            a.modify_time = at;
            a.task_states.insert(
                "web".into(),
                crate::structs::TaskState {
                    state: "dead".into(),
                    failed: true,
                    finished_at: Some(at),
                    ..Default::default()
                },
            );
        });
    }

    pub fn new() -> Self {
        let mut h = Harness::new();
        h.now = NOW;
        Scenario { h }
    }

    pub fn add_node(&mut self, node: Node) -> Arc<Node> {
        self.h.state.upsert_node(node)
    }

    pub fn add_nodes(&mut self, n: usize) -> Vec<Arc<Node>> {
        (0..n).map(|_| self.add_node(node())).collect()
    }

    pub fn upsert_job(&mut self, job: Job) -> Arc<Job> {
        self.h.state.upsert_job(job)
    }

    /// Registers the job and processes its registration evaluation.
    pub fn register(&mut self, job: Job) -> (Arc<Job>, Evaluation) {
        let job = self.upsert_job(job);
        let eval = self.eval(&job, TriggeredBy::JobRegister);
        (job, eval)
    }

    /// Processes a new evaluation of the job.
    pub fn eval(&mut self, job: &Job, trigger: TriggeredBy) -> Evaluation {
        let mut eval = Evaluation::for_job(job, trigger, NOW);
        eval.job_modify_index = job.job_modify_index;
        self.process(&eval);
        eval
    }

    pub fn process(&mut self, eval: &Evaluation) {
        if let Err(e) = self.h.process(eval) {
            panic!("scheduler error: {e}");
        }
    }

    /// The allocations of the job that are not terminal.
    pub fn live(&self, job: &Job) -> Vec<Arc<Allocation>> {
        let mut v: Vec<_> = self
            .h
            .state
            .allocs_by_job(&job.namespace, &job.id)
            .into_iter()
            .filter(|a| !a.is_terminal())
            .collect();
        v.sort_by_key(|a| a.index());
        v
    }

    pub fn all(&self, job: &Job) -> Vec<Arc<Allocation>> {
        self.h.state.allocs_by_job(&job.namespace, &job.id)
    }

    pub fn last_status(&self) -> EvalStatus {
        self.h.last_eval().map(|e| e.status).unwrap_or_default()
    }

    /// Marks an allocation's client status (as a client would report).
    pub fn set_client_status(
        &mut self,
        id: &crate::structs::AllocId,
        status: ClientStatus,
        at: i64,
    ) {
        self.h.state.update_alloc(id, |a| {
            a.client_status = status;
            a.modify_time = at;
        });
    }

    /// Reports an allocation's deployment health, as its client would.
    pub fn set_health(&mut self, id: &crate::structs::AllocId, healthy: bool) {
        self.h.state.update_alloc(id, |a| {
            let status = a.deployment_status_or_default();
            status.healthy = Some(healthy);
            status.timestamp = Some(NOW);
        });
    }

    /// Reports every live allocation of the job's current version healthy.
    pub fn all_healthy(&mut self, job: &Job) {
        let ids: Vec<_> = self
            .live(job)
            .iter()
            .filter(|a| a.job_version == job.version)
            .filter(|a| !a.deployment_status().is_some_and(|s| s.has_health()))
            .map(|a| a.id)
            .collect();
        for id in ids {
            self.set_health(&id, true);
        }
    }

    /// The job's latest deployment.
    pub fn deployment(&self, job: &Job) -> Arc<crate::structs::Deployment> {
        match self.h.state.latest_deployment(&job.namespace, &job.id) {
            Some(d) => d,
            None => panic!("job {} has no deployment", job.id),
        }
    }

    pub fn names(&self, job: &Job) -> Vec<String> {
        let mut v: Vec<String> = self.live(job).iter().map(|a| a.name.to_string()).collect();
        v.sort();
        v
    }

    /// Live allocations of the job per node.
    pub fn per_node(&self, job: &Job) -> BTreeMap<crate::structs::NodeId, usize> {
        let mut m = BTreeMap::new();
        for a in self.live(job) {
            *m.entry(a.node_id).or_insert(0) += 1;
        }
        m
    }
}
