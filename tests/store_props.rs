//! Property test of the state store: random sequences of commands are
//! applied to an in-memory `StateSnapshot` and, in groups (so the group
//! commit mixes accepted and rejected commands), through a store on disk;
//! the store must accept exactly the same commands, and after closing and
//! reopening the data dir it must hold exactly the in-memory state.

use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{
    AllocClientUpdate, Command, PlanResults, StateSnapshot, StateStore, StoreOptions,
};
use herder::structs::fit::NodeAllocUsage;
use herder::structs::{
    AllocStop, ClientStatus, DesiredStatus, DesiredTransition, DrainStrategy, EvalStatus,
    NodeStatus, SchedulerAlgorithm, SchedulerConfiguration, SchedulingEligibility, TriggeredBy,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use uuid::Uuid;

const JOBS: [&str; 3] = ["web", "batch", "cache"];
const NODES: usize = 3;

/// An abstract operation; `pick`s choose among what exists when the
/// operation is turned into a command.
#[derive(Clone, Debug)]
enum Op {
    Register {
        job: usize,
        count: i32,
        priority: i32,
    },
    Deregister {
        job: usize,
        purge: bool,
    },
    Stability {
        job: usize,
        version: u64,
    },
    NodeRegister {
        node: usize,
    },
    NodeStatus {
        node: usize,
        down: bool,
    },
    NodeEligibility {
        node: usize,
        eligible: bool,
    },
    NodeDrain {
        node: usize,
        on: bool,
    },
    NodeDeregister {
        node: usize,
    },
    Place {
        job: usize,
        node: usize,
        count: u32,
    },
    ClientUpdate {
        pick: usize,
        status: usize,
    },
    Stop {
        pick: usize,
    },
    Transition {
        pick: usize,
    },
    EvalDone {
        pick: usize,
        blocked: bool,
    },
    Gc {
        pick: usize,
    },
    Config {
        cas: Option<u64>,
        spread: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..JOBS.len(), 0..4i32, 40..60i32)
            .prop_map(|(job, count, priority)| Op::Register { job, count, priority }),
        1 => (0..JOBS.len(), any::<bool>()).prop_map(|(job, purge)| Op::Deregister { job, purge }),
        1 => (0..JOBS.len(), 0..4u64).prop_map(|(job, version)| Op::Stability { job, version }),
        2 => (0..NODES).prop_map(|node| Op::NodeRegister { node }),
        1 => (0..NODES, any::<bool>()).prop_map(|(node, down)| Op::NodeStatus { node, down }),
        1 => (0..NODES, any::<bool>())
            .prop_map(|(node, eligible)| Op::NodeEligibility { node, eligible }),
        1 => (0..NODES, any::<bool>()).prop_map(|(node, on)| Op::NodeDrain { node, on }),
        1 => (0..NODES).prop_map(|node| Op::NodeDeregister { node }),
        4 => (0..JOBS.len(), 0..NODES, 1..4u32)
            .prop_map(|(job, node, count)| Op::Place { job, node, count }),
        3 => (any::<usize>(), 0..5usize).prop_map(|(pick, status)| Op::ClientUpdate { pick, status }),
        2 => any::<usize>().prop_map(|pick| Op::Stop { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Transition { pick }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, blocked)| Op::EvalDone { pick, blocked }),
        1 => any::<usize>().prop_map(|pick| Op::Gc { pick }),
        1 => (proptest::option::of(0..6u64), any::<bool>())
            .prop_map(|(cas, spread)| Op::Config { cas, spread }),
    ]
}

/// Deterministic IDs, so a failing case replays identically.
struct Ids(u128);

impl Ids {
    fn next(&mut self) -> Uuid {
        self.0 += 1;
        Uuid::from_u128(self.0)
    }
}

fn node_id(n: usize) -> Uuid {
    Uuid::from_u128(0xabc0_0000 + n as u128)
}

fn pick<T: Clone>(items: Vec<T>, pick: usize) -> Option<T> {
    (!items.is_empty()).then(|| items[pick % items.len()].clone())
}

/// Turns an operation into a concrete command against `state`; `None`
/// when the operation has nothing to act on.
fn command(op: &Op, state: &StateSnapshot, ids: &mut Ids, now: i64) -> Option<Command> {
    let statuses = [
        ClientStatus::Running,
        ClientStatus::Complete,
        ClientStatus::Failed,
        ClientStatus::Lost,
        ClientStatus::Pending,
    ];
    Some(match op {
        Op::Register {
            job,
            count,
            priority,
        } => {
            let mut job = fixtures::job("default", JOBS[*job], &[("g", *count)]);
            job.priority = *priority;
            let mut eval = fixtures::eval(&job, TriggeredBy::JobRegister, now);
            eval.id = ids.next();
            Command::JobRegister {
                job: Arc::new(job),
                eval: Some(eval),
                enforce_index: None,
            }
        }
        Op::Deregister { job, purge } => {
            let stored = fixtures::job("default", JOBS[*job], &[]);
            let mut eval = fixtures::eval(&stored, TriggeredBy::JobDeregister, now);
            eval.id = ids.next();
            Command::JobDeregister {
                namespace: "default".into(),
                job_id: JOBS[*job].into(),
                purge: *purge,
                eval: Some(eval),
            }
        }
        Op::Stability { job, version } => Command::JobStabilityUpdate {
            namespace: "default".into(),
            job_id: JOBS[*job].into(),
            version: *version,
            stable: true,
        },
        Op::NodeRegister { node } => {
            let mut n = fixtures::node(&format!("node-{node}"));
            n.id = node_id(*node);
            n.secret_id = "secret".into();
            Command::NodeRegister { node: Arc::new(n) }
        }
        Op::NodeStatus { node, down } => Command::NodeUpdateStatus {
            node_id: node_id(*node),
            status: if *down {
                NodeStatus::Down
            } else {
                NodeStatus::Ready
            },
            event: None,
            evals: vec![],
            updated_at: now,
        },
        Op::NodeEligibility { node, eligible } => Command::NodeUpdateEligibility {
            node_id: node_id(*node),
            eligibility: if *eligible {
                SchedulingEligibility::Eligible
            } else {
                SchedulingEligibility::Ineligible
            },
            event: None,
            evals: vec![],
        },
        Op::NodeDrain { node, on } => Command::NodeUpdateDrain {
            node_id: node_id(*node),
            drain: on.then(|| DrainStrategy {
                deadline: 1_000_000,
                ..Default::default()
            }),
            mark_eligible: !on,
            event: None,
            evals: vec![],
        },
        Op::NodeDeregister { node } => Command::NodeDeregister {
            node_ids: vec![node_id(*node)],
        },
        Op::Place { job, node, count } => {
            let job = state.job("default", JOBS[*job])?.clone();
            let eval = state.evals_by_job("default", &job.id).next()?.id;
            let builder = AllocBuilder::new(&job, "g");
            let allocs = (0..*count)
                .map(|i| {
                    let mut a = builder.build(i, node_id(*node), eval, now);
                    a.id = ids.next();
                    a
                })
                .collect();
            Command::ApplyPlanResults(PlanResults {
                eval_id: eval,
                job: Some(job),
                node_allocation: HashMap::from([(node_id(*node), allocs)]),
                updated_at: now,
                ..Default::default()
            })
        }
        Op::ClientUpdate { pick: p, status } => {
            let alloc = pick(state.allocs().cloned().collect(), *p)?;
            Command::AllocClientUpdate {
                updates: vec![AllocClientUpdate {
                    id: alloc.id,
                    client_status: statuses[*status],
                    client_description: "reported".into(),
                    modify_time: now,
                    ..Default::default()
                }],
                evals: vec![],
            }
        }
        Op::Stop { pick: p } => {
            let alloc = pick(state.allocs().cloned().collect(), *p)?;
            Command::ApplyPlanResults(PlanResults {
                eval_id: alloc.eval_id,
                node_update: HashMap::from([(
                    alloc.node_id,
                    vec![AllocStop {
                        id: alloc.id,
                        desired_status: DesiredStatus::Stop,
                        desired_description: "stopped".into(),
                        client_status: None,
                        followup_eval_id: None,
                        preempted_by: None,
                    }],
                )]),
                updated_at: now,
                ..Default::default()
            })
        }
        Op::Transition { pick: p } => {
            let alloc = pick(state.allocs().cloned().collect(), *p)?;
            Command::AllocDesiredTransition {
                transitions: BTreeMap::from([(
                    alloc.id,
                    DesiredTransition {
                        migrate: Some(true),
                        ..Default::default()
                    },
                )]),
                evals: vec![],
            }
        }
        Op::EvalDone { pick: p, blocked } => {
            let mut eval = (*pick(state.evals().cloned().collect(), *p)?).clone();
            eval.status = if *blocked {
                EvalStatus::Blocked
            } else {
                EvalStatus::Complete
            };
            eval.queued_allocations.insert("g".into(), 1);
            eval.modify_time = now;
            Command::EvalUpdate { evals: vec![eval] }
        }
        Op::Gc { pick: p } => {
            let alloc = pick(state.allocs().cloned().collect(), *p)?;
            Command::EvalDelete {
                eval_ids: vec![alloc.eval_id],
                alloc_ids: vec![alloc.id],
            }
        }
        Op::Config { cas, spread } => Command::SchedulerConfigUpdate {
            config: SchedulerConfiguration {
                scheduler_algorithm: if *spread {
                    SchedulerAlgorithm::Spread
                } else {
                    SchedulerAlgorithm::Binpack
                },
                ..Default::default()
            },
            cas_index: *cas,
        },
    })
}

/// How the log under the reopened state is laid out.
#[derive(Clone, Copy, Debug)]
enum LogShape {
    /// One segment, the default size: the state from the log alone.
    OneSegment,
    /// Tiny segments never folded: the state from dozens of segments, so
    /// the replay's reading ahead and reuse of segment buffers are crossed
    /// by rows rewritten and deleted in later segments.
    ManySegments,
    /// Tiny segments folded into sled as they close: the state from sled's
    /// rows plus the log's newest records.
    Checkpointed,
}

fn run_case(ops: &[Op], group_sizes: &[usize], shape: LogShape) {
    let dir = tempfile::tempdir().unwrap();
    let options = match shape {
        LogShape::OneSegment => StoreOptions::default(),
        LogShape::ManySegments => StoreOptions {
            wal_segment_bytes: 1 << 9,
            checkpoint_bytes: u64::MAX,
            ..StoreOptions::default()
        },
        LogShape::Checkpointed => StoreOptions {
            wal_segment_bytes: 1 << 10,
            checkpoint_bytes: 2 << 10,
            ..StoreOptions::default()
        },
    };
    let store = StateStore::open(dir.path(), options).unwrap();
    let mut memory = StateSnapshot::new();
    let mut ids = Ids(0);
    let mut ops = ops.iter();
    let mut now = 1_000;
    // Commands are submitted a group at a time without waiting, so the
    // writer commits several in one batch.
    for size in group_sizes.iter().cycle() {
        let mut pending = Vec::new();
        for op in ops.by_ref().take(*size) {
            now += 1;
            let Some(cmd) = command(op, &memory, &mut ids, now) else {
                continue;
            };
            let expected = memory
                .apply(memory.latest_index() + 1, &cmd)
                .map(|c| c.index);
            pending.push((expected, store.submit(cmd)));
        }
        if pending.is_empty() {
            break;
        }
        for (expected, receiver) in pending {
            let got = futures::executor::block_on(receiver).unwrap();
            match (expected, got) {
                (Ok(index), Ok(outcome)) => assert_eq!(index, outcome.index),
                (Err(e), Err(herder::state::StoreError::Rejected(got))) => assert_eq!(e, got),
                (expected, got) => panic!("memory: {expected:?}, store: {got:?}"),
            }
        }
    }
    assert!(
        store.snapshot() == memory,
        "the store's state differs from memory"
    );
    store.close();
    drop(store);
    let reopened = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let loaded = reopened.snapshot();
    assert_eq!(loaded.latest_index(), memory.latest_index());
    assert_eq!(
        loaded.allocs().collect::<Vec<_>>(),
        memory.allocs().collect::<Vec<_>>()
    );
    assert_eq!(
        loaded.jobs().collect::<Vec<_>>(),
        memory.jobs().collect::<Vec<_>>()
    );
    assert!(loaded == memory, "the reopened state differs from memory");
    for state in [&memory, &loaded] {
        assert_node_usage_matches_allocations(state);
    }
}

/// The per-node usage the store keeps up to date write by write is what
/// summing the node's allocations gives.
fn assert_node_usage_matches_allocations(state: &StateSnapshot) {
    let nodes: std::collections::BTreeSet<_> = state.allocs().map(|a| a.node_id).collect();
    for node in nodes {
        let summed = NodeAllocUsage::of(state.allocs_by_node(&node).map(|a| &**a));
        let kept = state.node_usage(&node).map(|u| (**u).clone());
        if summed.live == 0 {
            assert_eq!(kept, None, "node {node} has no live allocations");
        } else {
            assert_eq!(kept, Some(summed), "usage of node {node}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn reopened_store_equals_the_in_memory_state(
        ops in proptest::collection::vec(op(), 1..60),
        group_sizes in proptest::collection::vec(1..8usize, 1..4),
        shape in proptest::sample::select(vec![
            LogShape::OneSegment,
            LogShape::ManySegments,
            LogShape::Checkpointed,
        ]),
    ) {
        run_case(&ops, &group_sizes, shape);
    }
}
