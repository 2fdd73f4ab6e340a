//! One scenario per constraint operator and target: of two nodes, only the
//! one that satisfies the constraint may receive the allocation.

use super::*;
use crate::structs::Constraint;

/// Registers a one-allocation job with `constraint` on a cluster of a
/// "special" node (changed by `setup`) and a plain node, and returns
/// whether the allocation went to the special node (None: not placed).
fn placed_on_special(constraint: Constraint, setup: impl FnOnce(&mut Node)) -> Option<bool> {
    let mut s = Scenario::new();
    let mut special = node();
    setup(&mut special);
    let special = s.add_node(special);
    s.add_node(node());
    let mut j = job(JobType::Service, 1);
    j.task_groups[0].constraints.push(constraint);
    let (j, _) = s.register(j);
    s.live(&j).first().map(|a| a.node_id == special.id)
}

fn attr(n: &mut Node, k: &str, v: &str) {
    n.attributes.insert(k.into(), v.into());
}

macro_rules! constraint_case {
    ($name:ident, $l:expr, $op:expr, $r:expr, $setup:expr, $expect:expr) => {
        #[test]
        fn $name() {
            let got = placed_on_special(Constraint::new($l, $op, $r), $setup);
            assert_eq!(got, $expect, "{} {} {}", $l, $op, $r);
        }
    };
}

const SPECIAL: Option<bool> = Some(true);
const PLAIN: Option<bool> = Some(false);

constraint_case!(
    op_eq,
    "${attr.os.name}",
    "=",
    "ubuntu",
    |n| attr(n, "os.name", "ubuntu"),
    SPECIAL
);
constraint_case!(
    op_eq2,
    "${attr.os.name}",
    "==",
    "ubuntu",
    |n| attr(n, "os.name", "ubuntu"),
    SPECIAL
);
constraint_case!(
    op_is,
    "${attr.os.name}",
    "is",
    "ubuntu",
    |n| attr(n, "os.name", "ubuntu"),
    SPECIAL
);
constraint_case!(
    op_ne,
    "${attr.arch}",
    "!=",
    "x86",
    |n| attr(n, "arch", "arm64"),
    SPECIAL
);
constraint_case!(
    op_not,
    "${attr.arch}",
    "not",
    "arm64",
    |n| attr(n, "arch", "arm64"),
    PLAIN
);
constraint_case!(
    op_ne_missing_attribute_passes,
    "${attr.gpu}",
    "!=",
    "none",
    |n| attr(n, "gpu", "none"),
    PLAIN
);
constraint_case!(
    op_lt_numeric,
    "${attr.cpu.numcores}",
    "<",
    "10",
    |n| attr(n, "cpu.numcores", "8"),
    SPECIAL
);
constraint_case!(
    op_le,
    "${attr.cpu.numcores}",
    "<=",
    "8",
    |n| attr(n, "cpu.numcores", "8"),
    SPECIAL
);
constraint_case!(
    op_gt_numeric_not_lexical,
    "${attr.cpu.numcores}",
    ">",
    "9",
    |n| attr(n, "cpu.numcores", "10"),
    SPECIAL
);
constraint_case!(
    op_ge,
    "${attr.cpu.numcores}",
    ">=",
    "16",
    |n| attr(n, "cpu.numcores", "8"),
    None
);
constraint_case!(
    op_regexp,
    "${attr.kernel.version}",
    "regexp",
    "^5\\.1[0-9]",
    |n| attr(n, "kernel.version", "5.15.0"),
    SPECIAL
);
constraint_case!(
    op_version,
    "${attr.driver.docker.version}",
    "version",
    ">= 20.10, < 25",
    |n| attr(n, "driver.docker.version", "24.0.1"),
    SPECIAL
);
constraint_case!(
    op_version_rejects_out_of_range,
    "${attr.driver.docker.version}",
    "version",
    ">= 25",
    |n| attr(n, "driver.docker.version", "24.0.1"),
    None
);
constraint_case!(
    op_semver,
    "${attr.nomad.version}",
    "semver",
    ">= 1.2.0-beta",
    |n| attr(n, "nomad.version", "1.2.0"),
    SPECIAL
);
constraint_case!(
    op_set_contains,
    "${meta.tags}",
    "set_contains",
    "ssd,gpu",
    |n| {
        n.meta.insert("tags".into(), "gpu, ssd, fast".into());
    },
    SPECIAL
);
constraint_case!(
    op_set_contains_all_needs_every_item,
    "${meta.tags}",
    "set_contains_all",
    "ssd,gpu",
    |n| {
        n.meta.insert("tags".into(), "ssd".into());
    },
    None
);
constraint_case!(
    op_set_contains_any,
    "${meta.tags}",
    "set_contains_any",
    "nvme,gpu",
    |n| {
        n.meta.insert("tags".into(), "gpu".into());
    },
    SPECIAL
);
constraint_case!(
    op_is_set,
    "${meta.zone}",
    "is_set",
    "",
    |n| {
        n.meta.insert("zone".into(), "a".into());
    },
    SPECIAL
);
constraint_case!(
    op_is_not_set,
    "${meta.zone}",
    "is_not_set",
    "",
    |n| {
        n.meta.insert("zone".into(), "a".into());
    },
    PLAIN
);
#[test]
fn target_node_datacenter() {
    let mut s = Scenario::new();
    let mut west = node();
    west.datacenter = "dc2".into();
    let west = s.add_node(west);
    s.add_node(node());
    let mut j = job(JobType::Service, 2);
    j.datacenters = vec!["*".into()];
    j.constraints
        .push(Constraint::new("${node.datacenter}", "=", "dc2"));
    let (j, _) = s.register(j);
    assert_eq!(s.live(&j).len(), 2);
    assert!(s.live(&j).iter().all(|a| a.node_id == west.id));
}

#[test]
fn target_node_class_and_pool() {
    assert_eq!(
        placed_on_special(Constraint::new("${node.class}", "=", "gpu-large"), |n| {
            n.node_class = "gpu-large".into()
        }),
        SPECIAL
    );
    let mut s = Scenario::new();
    let mut p = node();
    p.node_pool = "batch".into();
    let p = s.add_node(p);
    let mut j = job(JobType::Service, 1);
    j.node_pool = "all".into();
    j.constraints
        .push(Constraint::new("${node.pool}", "=", "batch"));
    let (j, _) = s.register(j);
    assert_eq!(s.live(&j)[0].node_id, p.id);
}

#[test]
fn target_node_unique_id_and_name() {
    let mut s = Scenario::new();
    let nodes = s.add_nodes(3);
    let mut j = job(JobType::Service, 1);
    j.constraints.push(Constraint::new(
        "${node.unique.id}",
        "=",
        &nodes[2].id.to_string(),
    ));
    let (j, _) = s.register(j);
    assert_eq!(s.live(&j)[0].node_id, nodes[2].id);

    let mut s = Scenario::new();
    let nodes = s.add_nodes(3);
    let mut j = job(JobType::Service, 1);
    j.constraints
        .push(Constraint::new("${node.unique.name}", "=", &nodes[1].name));
    let (j, _) = s.register(j);
    assert_eq!(s.live(&j)[0].node_id, nodes[1].id);
}

#[test]
fn task_level_constraints_apply_to_the_group() {
    let mut s = Scenario::new();
    let mut arm = node();
    attr(&mut arm, "arch", "arm64");
    let arm = s.add_node(arm);
    s.add_node(node());
    let mut j = job(JobType::Service, 1);
    j.task_groups[0].tasks[0]
        .constraints
        .push(Constraint::new("${attr.arch}", "=", "arm64"));
    let (j, _) = s.register(j);
    assert_eq!(s.live(&j)[0].node_id, arm.id);
}

#[test]
fn constraint_filtered_nodes_are_counted_per_constraint() {
    let mut s = Scenario::new();
    s.add_nodes(3);
    let mut j = job(JobType::Service, 1);
    j.constraints
        .push(Constraint::new("${attr.kernel.name}", "=", "windows"));
    s.register(j);
    let failed = &s.h.last_eval().unwrap().failed_tg_allocs["web"];
    assert_eq!(failed.nodes_filtered, 3);
    assert_eq!(
        failed
            .constraint_filtered
            .get("${attr.kernel.name} = windows"),
        Some(&3)
    );
    assert_eq!(failed.class_filtered.get("linux-medium-pci"), Some(&3));
}
