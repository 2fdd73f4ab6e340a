//! Pins the stack's decisions exactly: where every allocation lands, the
//! metrics it records (counts, filters, exhaustion) and its top-five score
//! metadata, bit for bit, for clusters with spreads (even and targeted),
//! affinities, distinct_property, ports, reschedule penalties, binpack and
//! spread fit, services and batch.
//!
//! The expected text was produced by the scheduler before its candidate
//! evaluation was made cheaper (caching fit scores, dropping per-candidate
//! allocations); a faster implementation must make the same decisions, so
//! any difference is a behaviour change, not noise. Node and evaluation IDs
//! are fixed so the shuffle and the placements are reproducible. To accept
//! an intended behaviour change, run the test with `HERDER_BLESS=1` and
//! review the diff of `equivalence_golden.txt`.

use super::*;
use crate::structs::{
    Affinity, Constraint, NetworkResource, Port, SchedulerAlgorithm, SchedulerConfiguration,
    Spread, SpreadTarget,
};
use std::fmt::Write;

const GOLDEN: &str = include_str!("equivalence_golden.txt");

/// A node with a fixed ID (`i`), in `dc`, on `rack` (none when `None`).
fn fixed_node(i: u128, dc: &str, rack: Option<&str>) -> Node {
    let mut n = node();
    n.id = uuid::Uuid::from_u128(i);
    n.name = format!("node-{i}").into();
    n.attributes
        .insert("unique.hostname".into(), n.name.clone());
    n.datacenter = dc.into();
    if let Some(r) = rack {
        n.meta.insert("rack".into(), r.into());
    }
    n
}

/// `count` nodes over two datacenters and `racks` racks; every 17th node
/// has no rack, every 11th is small (it fills up), every 13th runs
/// windows (filtered by the kernel constraint).
fn grid(s: &mut Scenario, count: u128, racks: u128) {
    for i in 1..=count {
        let dc = if i % 2 == 0 { "dc1" } else { "dc2" };
        let rack = format!("r{}", i % racks);
        let mut n = fixed_node(i, dc, (i % 17 != 0).then_some(rack.as_str()));
        if i % 11 == 0 {
            n.node_class = "small".into();
            n.node_resources.memory.memory_mb = 1024;
        }
        if i % 13 == 0 {
            n.attributes.insert("kernel.name".into(), "windows".into());
        }
        s.add_node(n);
    }
}

fn fixed_eval(s: &mut Scenario, job: &Job, trigger: TriggeredBy, id: u128) {
    let mut eval = Evaluation::for_job(job, trigger, NOW);
    eval.id = uuid::Uuid::from_u128(id);
    eval.job_modify_index = job.job_modify_index;
    s.process(&eval);
}

fn register(s: &mut Scenario, job: Job, eval_id: u128) -> Arc<Job> {
    let job = s.upsert_job(job);
    fixed_eval(s, &job, TriggeredBy::JobRegister, eval_id);
    job
}

fn spread(attribute: &str, weight: i8, targets: &[(&str, u8)]) -> Spread {
    Spread {
        attribute: attribute.into(),
        weight,
        spread_target: targets
            .iter()
            .map(|(value, percent)| SpreadTarget {
                value: (*value).into(),
                percent: *percent,
            })
            .collect(),
    }
}

fn linux_job(job_type: JobType, count: i32) -> Job {
    let mut j = job(job_type, count);
    j.datacenters = vec!["dc1".into(), "dc2".into()];
    j.constraints
        .push(Constraint::new("${attr.kernel.name}", "=", "linux"));
    j
}

/// Every live allocation of the job (by name) with its node, ports,
/// metrics and score metadata; then the last evaluation's failures.
fn describe(out: &mut String, title: &str, s: &Scenario, job: &Job) {
    let _ = writeln!(out, "== {title}");
    let mut live = s.live(job);
    live.sort_by(|a, b| a.name.cmp(&b.name));
    for a in &live {
        let ports = a.allocated_resources.ports();
        let _ = writeln!(
            out,
            "{} node={} ports={ports:?}",
            a.name,
            a.node_id.as_u128()
        );
        if let Some(m) = &a.metrics {
            describe_metric(out, &m.unpack());
        }
    }
    if let Some(e) = s.h.last_eval() {
        for (group, m) in &e.failed_tg_allocs {
            let _ = writeln!(out, "failed {group}");
            describe_metric(out, m);
        }
    }
}

/// A count map as the golden text has it (`{"name": n, ...}`, sorted),
/// whatever type holds the counts.
fn counts(map: &crate::structs::CountMap) -> String {
    let entries: Vec<String> = map.iter().map(|(k, v)| format!("{k:?}: {v}")).collect();
    format!("{{{}}}", entries.join(", "))
}

fn describe_metric(out: &mut String, m: &crate::structs::AllocMetric) {
    let _ = writeln!(
        out,
        "  evaluated={} filtered={} exhausted={} class_filtered={} constraint_filtered={} \
         class_exhausted={} dimension_exhausted={} coalesced={}",
        m.nodes_evaluated,
        m.nodes_filtered,
        m.nodes_exhausted,
        counts(&m.class_filtered),
        counts(&m.constraint_filtered),
        counts(&m.class_exhausted),
        counts(&m.dimension_exhausted),
        m.coalesced_failures,
    );
    for meta in &m.score_meta_data {
        let scores: Vec<String> = meta
            .scores
            .iter()
            .map(|(name, v)| format!("{name}={v:?}"))
            .collect();
        let _ = writeln!(
            out,
            "  top node={} norm={:?} {}",
            meta.node_id.as_u128(),
            meta.norm_score,
            scores.join(" ")
        );
    }
}

/// Even spread over racks (some nodes rackless) plus a targeted spread
/// over datacenters, on a cluster partly used by another job; then a
/// scale-up that counts the placed allocations, then the reschedule of a
/// failed allocation (penalising its old node).
fn even_and_targeted_spread(out: &mut String) {
    let mut s = Scenario::new();
    grid(&mut s, 240, 12);
    let mut filler = linux_job(JobType::Service, 40);
    filler.id = "filler".into();
    filler.name = "filler".into();
    filler.task_groups[0].tasks[0].resources.cpu = 1500;
    register(&mut s, filler, 1);
    let mut j = linux_job(JobType::Service, 40);
    j.task_groups[0]
        .spreads
        .push(spread("${meta.rack}", 100, &[]));
    j.spreads
        .push(spread("${node.datacenter}", 50, &[("dc1", 70)]));
    let j = register(&mut s, j, 2);
    describe(out, "even+targeted spread, register", &s, &j);
    let mut bigger = (*j).clone();
    bigger.task_groups[0].count = 60;
    let bigger = register(&mut s, bigger, 3);
    describe(out, "even+targeted spread, scale up", &s, &bigger);
    fail_one(&mut s, &bigger, 7);
    fixed_eval(&mut s, &bigger, TriggeredBy::AllocFailure, 4);
    describe(out, "even+targeted spread, reschedule", &s, &bigger);
}

/// Marks the job's `index`th live allocation failed an hour ago, so it is
/// rescheduled at once. One failure at a time: the order of several
/// replacements would follow their (random) allocation IDs.
fn fail_one(s: &mut Scenario, job: &Job, index: usize) {
    let failed = s.live(job)[index].id;
    s.fail_replaceable_at(&failed, NOW - 3600 * SECOND);
}

/// A cluster small enough that every node is among the top five, so the
/// reschedule penalty of the failed allocation's node is recorded.
fn reschedule_penalty(out: &mut String) {
    let mut s = Scenario::new();
    for i in 1..=4 {
        let rack = format!("r{}", i % 2);
        s.add_node(fixed_node(i, "dc1", Some(&rack)));
    }
    let mut j = job(JobType::Service, 4);
    j.task_groups[0]
        .spreads
        .push(spread("${meta.rack}", 100, &[]));
    let j = register(&mut s, j, 9);
    fail_one(&mut s, &j, 2);
    fixed_eval(&mut s, &j, TriggeredBy::AllocFailure, 10);
    describe(out, "reschedule penalty", &s, &j);
}

/// Targeted rack spread with an implicit remainder, an affinity and
/// `distinct_property`, under the spread fit algorithm.
fn targets_affinity_distinct(out: &mut String) {
    let mut s = Scenario::new();
    s.h.state.set_scheduler_config(SchedulerConfiguration {
        scheduler_algorithm: SchedulerAlgorithm::Spread,
        ..Default::default()
    });
    grid(&mut s, 150, 6);
    let mut j = linux_job(JobType::Service, 30);
    j.task_groups[0]
        .spreads
        .push(spread("${meta.rack}", 80, &[("r0", 30), ("r1", 20)]));
    j.task_groups[0].affinities.push(Affinity {
        l_target: "${meta.rack}".into(),
        r_target: "r3".into(),
        operand: "=".into(),
        weight: 50,
    });
    j.task_groups[0]
        .constraints
        .push(Constraint::new("${meta.rack}", "distinct_property", "6"));
    let j = register(&mut s, j, 5);
    describe(out, "targets+affinity+distinct_property", &s, &j);
}

/// No spread: the log2 candidate limit, job anti-affinity, and more
/// allocations than the small cluster holds (exhaustion, failures).
fn plain_service_and_exhaustion(out: &mut String) {
    let mut s = Scenario::new();
    grid(&mut s, 24, 4);
    let mut j = linux_job(JobType::Service, 60);
    j.task_groups[0].tasks[0].resources.memory_mb = 3000;
    let j = register(&mut s, j, 6);
    describe(out, "plain service, exhaustion", &s, &j);
}

/// Batch placements (limit 2) with static and dynamic ports, and a
/// spread (which lifts the limit).
fn batch_with_ports(out: &mut String) {
    for (title, with_spread, eval_id) in
        [("batch ports", false, 7), ("batch ports + spread", true, 8)]
    {
        let mut s = Scenario::new();
        grid(&mut s, 60, 5);
        let mut j = linux_job(JobType::Batch, 20);
        j.task_groups[0].networks = vec![NetworkResource {
            reserved_ports: vec![Port {
                label: "admin".into(),
                value: 9000,
                ..Default::default()
            }],
            dynamic_ports: vec![Port {
                label: "http".into(),
                ..Default::default()
            }],
            ..Default::default()
        }];
        if with_spread {
            j.task_groups[0]
                .spreads
                .push(spread("${meta.rack}", 60, &[]));
        }
        let j = register(&mut s, j, eval_id);
        describe(out, title, &s, &j);
    }
}

/// Every allocation of a system or sysbatch job, live or not, by node
/// (every group has one per node, so names repeat): name, node, statuses,
/// metrics and score metadata; then the last evaluation's failures and
/// queue, and the evaluations the scheduler created (blocked, rolling).
fn describe_system(out: &mut String, title: &str, s: &Scenario, job: &Job) {
    let _ = writeln!(out, "== {title}");
    let mut all = s.all(job);
    all.sort_by(|a, b| {
        (a.node_id, &a.name, a.create_index).cmp(&(b.node_id, &b.name, b.create_index))
    });
    for a in &all {
        let _ = writeln!(
            out,
            "{} node={} desired={:?} client={:?} version={} previous={} preempted={}",
            a.name,
            a.node_id.as_u128(),
            a.desired_status,
            a.client_status,
            a.job_version,
            a.links().previous_allocation.is_some(),
            a.links().preempted_allocations.len(),
        );
        if let Some(m) = &a.metrics {
            describe_metric(out, &m.unpack());
        }
    }
    if let Some(e) = s.h.last_eval() {
        let _ = writeln!(
            out,
            "status={:?} queued={:?}",
            e.status, e.queued_allocations
        );
        for (group, m) in &e.failed_tg_allocs {
            let _ = writeln!(out, "failed {group}");
            describe_metric(out, m);
        }
    }
    for e in &s.h.create_evals {
        let _ = writeln!(
            out,
            "created {:?} {:?} node={:?} failed={:?}",
            e.triggered_by,
            e.status,
            e.node_id.map(|n| n.as_u128()),
            e.failed_tg_allocs.keys().collect::<Vec<_>>()
        );
    }
}

/// A system job over a grid partly used by a service job: windows nodes
/// are filtered (not failures), small nodes are full (one failure, the
/// rest coalesced, a blocked evaluation); then a node joins, one goes
/// down, an in-place update and a destructive one rolled five at a time.
fn system_lifecycle(out: &mut String) {
    let mut s = Scenario::new();
    grid(&mut s, 60, 5);
    let mut filler = linux_job(JobType::Service, 20);
    filler.id = "filler".into();
    filler.name = "filler".into();
    filler.task_groups[0].tasks[0].resources.cpu = 1500;
    register(&mut s, filler, 20);
    let mut j = linux_job(JobType::System, 1);
    j.id = "agent".into();
    j.name = "agent".into();
    j.task_groups[0].tasks[0].resources.memory_mb = 900;
    let j = register(&mut s, j, 21);
    describe_system(out, "system, register", &s, &j);
    s.h.create_evals.clear();
    s.add_node(fixed_node(61, "dc1", Some("r1")));
    fixed_eval(&mut s, &j, TriggeredBy::NodeUpdate, 22);
    describe_system(out, "system, node joins", &s, &j);
    s.h.create_evals.clear();
    s.h.state.update_node(&uuid::Uuid::from_u128(4), |n| {
        n.status = crate::structs::NodeStatus::Down;
    });
    fixed_eval(&mut s, &j, TriggeredBy::NodeUpdate, 23);
    describe_system(out, "system, node down", &s, &j);
    s.h.create_evals.clear();
    let mut meta = (*j).clone();
    meta.meta.insert("owner".into(), "ops".into());
    meta.version += 1;
    let meta = register(&mut s, meta, 24);
    describe_system(out, "system, in-place update", &s, &meta);
    s.h.create_evals.clear();
    let mut bigger = (*meta).clone();
    bigger.task_groups[0].tasks[0].resources.cpu = 600;
    bigger.version += 1;
    bigger.update = Some(crate::structs::UpdateStrategy {
        max_parallel: 5,
        ..Default::default()
    });
    let bigger = register(&mut s, bigger, 25);
    describe_system(out, "system, destructive update rolled", &s, &bigger);
}

/// A sysbatch job under the spread fit algorithm with preemption on: a
/// low-priority job fills some nodes and is evicted from them; then the
/// finished allocations are not placed again.
fn sysbatch_preemption(out: &mut String) {
    let mut s = Scenario::new();
    let mut config = SchedulerConfiguration {
        scheduler_algorithm: SchedulerAlgorithm::Spread,
        ..Default::default()
    };
    config.preemption_config.sys_batch_scheduler_enabled = true;
    s.h.state.set_scheduler_config(config);
    grid(&mut s, 30, 3);
    let mut low = linux_job(JobType::Service, 12);
    low.id = "low".into();
    low.name = "low".into();
    low.priority = 20;
    low.task_groups[0].tasks[0].resources.cpu = 3700;
    register(&mut s, low, 30);
    let mut j = linux_job(JobType::SysBatch, 1);
    j.id = "sweep".into();
    j.name = "sweep".into();
    j.priority = 80;
    let j = register(&mut s, j, 31);
    describe_system(out, "sysbatch, preemption", &s, &j);
    s.h.create_evals.clear();
    // Every other node's allocation (by node: the names are all equal).
    let mut live = s.live(&j);
    live.sort_by_key(|a| a.node_id);
    for a in live.iter().step_by(2) {
        s.set_client_status(&a.id, ClientStatus::Complete, NOW);
    }
    fixed_eval(&mut s, &j, TriggeredBy::NodeUpdate, 32);
    describe_system(out, "sysbatch, after completions", &s, &j);
}

fn render() -> String {
    let mut out = String::new();
    even_and_targeted_spread(&mut out);
    reschedule_penalty(&mut out);
    targets_affinity_distinct(&mut out);
    plain_service_and_exhaustion(&mut out);
    batch_with_ports(&mut out);
    system_lifecycle(&mut out);
    sysbatch_preemption(&mut out);
    out
}

#[test]
fn placements_and_score_metadata_match_the_recorded_decisions() {
    let got = render();
    if std::env::var_os("HERDER_BLESS").is_some() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/scheduler/tests/equivalence_golden.txt"
        );
        std::fs::write(path, &got).expect("write golden file");
        return;
    }
    if got != GOLDEN {
        let first = got
            .lines()
            .zip(GOLDEN.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(got.lines().count().min(GOLDEN.lines().count()));
        panic!(
            "decisions differ from the recorded ones at line {}:\n got: {:?}\nwant: {:?}",
            first + 1,
            got.lines().nth(first),
            GOLDEN.lines().nth(first)
        );
    }
}

#[test]
fn recorded_decisions_are_reproducible() {
    assert_eq!(render(), render());
}
