//! Property tests: whatever the cluster and jobs, no node is over-committed
//! on any resource or port, and every placed allocation satisfies every
//! constraint of its group.

use super::*;
use crate::scheduler::feasible::{node_meets, ConstraintCache};
use crate::structs::{ComparableResources, Constraint, NetworkResource, Port};
use proptest::prelude::*;
use std::collections::HashSet;

#[derive(Debug, Clone)]
struct NodeSpec {
    cpu: i64,
    memory: i64,
    rack: u8,
    tier: u8,
    reserved_port: bool,
    narrow_ports: bool,
}

#[derive(Debug, Clone)]
struct JobSpec {
    batch: bool,
    count: i32,
    cpu: i64,
    memory: i64,
    static_port: Option<i64>,
    dynamic_ports: usize,
    rack_rule: Option<(bool, u8)>,
    tier_rule: Option<(bool, u8)>,
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        1000i64..4000,
        1000i64..8000,
        0u8..3,
        1u8..4,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(cpu, memory, rack, tier, reserved_port, narrow_ports)| NodeSpec {
                cpu,
                memory,
                rack,
                tier,
                reserved_port,
                narrow_ports,
            },
        )
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        any::<bool>(),
        1i32..8,
        100i64..1500,
        100i64..2000,
        prop::option::of(prop_oneof![Just(8080i64), Just(8081i64)]),
        0usize..3,
        prop::option::of((any::<bool>(), 0u8..3)),
        prop::option::of((any::<bool>(), 1u8..4)),
    )
        .prop_map(
            |(batch, count, cpu, memory, static_port, dynamic_ports, rack_rule, tier_rule)| {
                JobSpec {
                    batch,
                    count,
                    cpu,
                    memory,
                    static_port,
                    dynamic_ports,
                    rack_rule,
                    tier_rule,
                }
            },
        )
}

fn build_node(spec: &NodeSpec) -> Node {
    let mut n = node();
    n.node_resources.cpu.cpu_shares = spec.cpu;
    n.node_resources.memory.memory_mb = spec.memory;
    n.meta
        .insert("rack".into(), format!("r{}", spec.rack).into());
    n.attributes
        .insert("tier".into(), spec.tier.to_string().into());
    if spec.reserved_port {
        n.reserved_resources.networks.reserved_host_ports = "8080,30001".into();
    }
    if spec.narrow_ports {
        n.node_resources.min_dynamic_port = 30000;
        n.node_resources.max_dynamic_port = 30004;
    }
    n
}

fn build_job(i: usize, spec: &JobSpec) -> Job {
    let mut j = job(
        if spec.batch {
            JobType::Batch
        } else {
            JobType::Service
        },
        spec.count,
    );
    j.id = format!("job-{i}");
    j.name = j.id.clone();
    let tg = &mut j.task_groups[0];
    tg.tasks[0].resources.cpu = spec.cpu;
    tg.tasks[0].resources.memory_mb = spec.memory;
    if spec.static_port.is_some() || spec.dynamic_ports > 0 {
        tg.networks = vec![NetworkResource {
            reserved_ports: spec
                .static_port
                .map(|p| Port {
                    label: "fixed".into(),
                    value: p,
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            dynamic_ports: (0..spec.dynamic_ports)
                .map(|k| Port {
                    label: format!("dyn{k}"),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }];
    }
    if let Some((eq, rack)) = spec.rack_rule {
        let op = if eq { "=" } else { "!=" };
        tg.constraints
            .push(Constraint::new("${meta.rack}", op, &format!("r{rack}")));
    }
    if let Some((lt, tier)) = spec.tier_rule {
        let op = if lt { "<" } else { ">=" };
        j.constraints
            .push(Constraint::new("${attr.tier}", op, &tier.to_string()));
    }
    j
}

fn run(nodes: &[NodeSpec], jobs: &[JobSpec]) -> Scenario {
    let mut s = Scenario::new();
    for n in nodes {
        s.add_node(build_node(n));
    }
    for (i, spec) in jobs.iter().enumerate() {
        s.register(build_job(i, spec));
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn no_node_is_overcommitted(nodes in prop::collection::vec(node_spec(), 1..8),
                                jobs in prop::collection::vec(job_spec(), 1..5)) {
        let s = run(&nodes, &jobs);
        for node in s.h.state.nodes() {
            let mut used = ComparableResources::default();
            let mut ports: HashSet<u16> = node
                .reserved_resources
                .networks
                .parse_ports()
                .unwrap_or_default()
                .into_iter()
                .collect();
            for a in s.h.state.allocs_by_node(&node.id) {
                if a.is_terminal() {
                    continue;
                }
                used.add(&a.allocated_resources.comparable());
                for p in a.allocated_resources.ports() {
                    prop_assert!(ports.insert(p), "port {} used twice on {}", p, node.name);
                }
            }
            prop_assert!(ComparableResources::superset_of(&node.available(), &used).is_ok(),
                "node {} over-committed: {:?} > {:?}", node.name, used, node.available());
        }
    }

    #[test]
    fn placements_satisfy_every_constraint(nodes in prop::collection::vec(node_spec(), 1..8),
                                           jobs in prop::collection::vec(job_spec(), 1..5)) {
        let s = run(&nodes, &jobs);
        let mut cache = ConstraintCache::default();
        for (i, spec) in jobs.iter().enumerate() {
            let job = build_job(i, spec);
            let rules: Vec<&Constraint> = job.constraints.iter()
                .chain(job.task_groups[0].constraints.iter())
                .collect();
            for a in s.live(&job) {
                let node = s.h.state.node_by_id(&a.node_id).unwrap();
                for c in &rules {
                    prop_assert!(node_meets(&node, c, &mut cache),
                        "{} on {} violates {}", a.name, node.name, c);
                }
            }
        }
    }
}
