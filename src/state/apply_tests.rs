//! Unit tests of command application: indexes, versions, summaries, job
//! status, and rejections that must leave the state untouched.

use super::command::{AllocClientUpdate, Command, PlanResults};
use super::fixtures::{self, AllocBuilder};
use super::{ApplyError, RowKey, StateSnapshot, Table, JOB_TRACKED_VERSIONS};
use crate::structs::{
    AllocStop, Allocation, ClientStatus, Deployment, DesiredStatus, DesiredTransition,
    DrainStrategy, EvalStatus, Evaluation, Job, JobType, Node, NodeEvent, NodeStatus,
    SchedulerAlgorithm, SchedulerConfiguration, SchedulingEligibility, TriggeredBy,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

struct Harness {
    state: StateSnapshot,
}

impl Harness {
    fn new() -> Self {
        Harness {
            state: StateSnapshot::new(),
        }
    }

    fn apply(&mut self, cmd: Command) -> Result<super::AppliedChanges, ApplyError> {
        let index = self.state.latest_index() + 1;
        self.state.apply(index, &cmd)
    }

    fn ok(&mut self, cmd: Command) -> u64 {
        self.apply(cmd).expect("command applies").index
    }

    /// Applies a command that must fail, and checks nothing changed.
    fn rejected(&mut self, cmd: Command) -> ApplyError {
        let before = self.state.clone();
        let err = self.apply(cmd).expect_err("command must be rejected");
        assert_eq!(self.state, before, "a rejected command changed the state");
        err
    }

    fn register(&mut self, job: &Job) -> (u64, Evaluation) {
        let eval = fixtures::eval(job, TriggeredBy::JobRegister, 1);
        let index = self.ok(Command::JobRegister {
            job: Arc::new(job.clone()),
            eval: Some(eval.clone()),
            enforce_index: None,
        });
        (index, eval)
    }

    fn add_node(&mut self, name: &str) -> Node {
        let node = fixtures::node(name);
        self.ok(Command::NodeRegister {
            node: Arc::new(node.clone()),
        });
        node
    }

    fn place(&mut self, allocs: &[Allocation], job: &Job) -> u64 {
        self.ok(plan_placing(allocs, job))
    }

    fn job(&self, id: &str) -> Arc<Job> {
        self.state.job("default", id).expect("job exists").clone()
    }

    fn client_status(&mut self, alloc: &Allocation, status: ClientStatus) -> u64 {
        self.ok(Command::AllocClientUpdate {
            updates: vec![AllocClientUpdate {
                id: alloc.id,
                client_status: status,
                modify_time: 99,
                ..Default::default()
            }],
            evals: vec![],
        })
    }

    fn complete(&mut self, eval: &Evaluation) -> u64 {
        let mut done = eval.clone();
        done.status = EvalStatus::Complete;
        self.ok(Command::EvalUpdate { evals: vec![done] })
    }
}

/// A plan's committed part that places `allocs` (of `job`, planned by the
/// first one's evaluation).
fn plan_placing(allocs: &[Allocation], job: &Job) -> Command {
    let mut node_allocation: HashMap<_, Vec<_>> = HashMap::new();
    for a in allocs {
        node_allocation
            .entry(a.node_id)
            .or_default()
            .push(a.clone());
    }
    Command::ApplyPlanResults(PlanResults {
        eval_id: allocs[0].eval_id,
        job: Some(Arc::new(job.clone())),
        node_allocation,
        updated_at: 10,
        ..Default::default()
    })
}

fn web() -> Job {
    fixtures::job("default", "web", &[("frontend", 3)])
}

fn allocs_for(job: &Job, node: &Node, eval: &Evaluation, n: u32) -> Vec<Allocation> {
    let builder = AllocBuilder::new(job, "frontend");
    (0..n)
        .map(|i| builder.build(i, node.id, eval.id, 5))
        .collect()
}

#[test]
fn registering_a_job_sets_indexes_version_summary_and_eval() {
    let mut h = Harness::new();
    let job = web();
    let (index, eval) = h.register(&job);

    let stored = h.job("web");
    assert_eq!(
        (
            stored.create_index,
            stored.modify_index,
            stored.job_modify_index
        ),
        (index, index, index)
    );
    assert_eq!(stored.version, 0);
    assert_eq!(
        stored.status, "pending",
        "a pending eval makes the job pending"
    );
    let stored_eval = h.state.eval(&eval.id).unwrap();
    assert_eq!(stored_eval.job_modify_index, index);
    assert_eq!(
        (stored_eval.create_index, stored_eval.modify_index),
        (index, index)
    );
    assert_eq!(h.state.evals_by_job("default", "web").count(), 1);
    let summary = h.state.job_summary("default", "web").unwrap();
    assert_eq!(summary.summary.keys().collect::<Vec<_>>(), vec!["frontend"]);
    assert_eq!(summary.create_index, index);
    assert_eq!(
        h.state
            .job_versions("default", "web")
            .map(|j| j.version)
            .collect::<Vec<_>>(),
        vec![0]
    );
    for table in [Table::Jobs, Table::JobSummaries, Table::Evals] {
        assert_eq!(h.state.table_index(table), index, "{table:?}");
    }
    assert_eq!(h.state.table_index(Table::Allocs), 0);
    assert_eq!(h.state.latest_index(), index);
}

#[test]
fn same_spec_keeps_the_version_and_a_changed_spec_bumps_it() {
    let mut h = Harness::new();
    let job = web();
    let (first, _) = h.register(&job);
    let (_, eval) = h.register(&job);
    let same = h.job("web");
    assert_eq!((same.version, same.job_modify_index), (0, first));
    assert_eq!(h.state.eval(&eval.id).unwrap().job_modify_index, first);

    let mut bigger = job.clone();
    bigger.task_groups[0].count = 5;
    let (third, _) = h.register(&bigger);
    let updated = h.job("web");
    assert_eq!(updated.version, 1);
    assert_eq!(updated.job_modify_index, third);
    assert_eq!(updated.create_index, first, "CreateIndex survives updates");
    assert_eq!(
        h.state
            .job_versions("default", "web")
            .map(|j| j.version)
            .collect::<Vec<_>>(),
        vec![1, 0],
        "versions come newest first"
    );
    assert_eq!(
        h.state
            .job_by_version("default", "web", 0)
            .unwrap()
            .task_groups[0]
            .count,
        3
    );
}

#[test]
fn enforce_index_mismatch_is_rejected_without_changes() {
    let mut h = Harness::new();
    let job = web();
    let err = h.rejected(Command::JobRegister {
        job: Arc::new(job.clone()),
        eval: Some(fixtures::eval(&job, TriggeredBy::JobRegister, 1)),
        enforce_index: Some(7),
    });
    assert_eq!(
        err,
        ApplyError::JobModifyIndexConflict {
            expected: 7,
            actual: 0
        }
    );
    assert!(
        h.state.evals().next().is_none(),
        "the eval was not written either"
    );

    let (index, _) = h.register(&job);
    let mut changed = job.clone();
    changed.priority = 70;
    let err = h.rejected(Command::JobRegister {
        job: Arc::new(changed.clone()),
        eval: None,
        enforce_index: Some(0),
    });
    assert_eq!(
        err,
        ApplyError::JobModifyIndexConflict {
            expected: 0,
            actual: index
        }
    );
    h.ok(Command::JobRegister {
        job: Arc::new(changed),
        eval: None,
        enforce_index: Some(index),
    });
    assert_eq!(h.job("web").priority, 70);
}

#[test]
fn old_versions_are_pruned_unless_an_allocation_runs_them() {
    let mut h = Harness::new();
    let node = h.add_node("n1");
    let mut job = web();
    let (_, eval) = h.register(&job);
    let v0 = h.job("web");
    let allocs = allocs_for(&v0, &node, &eval, 1);
    h.place(&allocs, &v0);
    for count in 4..(4 + JOB_TRACKED_VERSIONS as i32 + 2) {
        job.task_groups[0].count = count;
        h.register(&job);
    }
    let versions: Vec<u64> = h
        .state
        .job_versions("default", "web")
        .map(|j| j.version)
        .collect();
    assert_eq!(
        versions,
        vec![8, 7, 6, 5, 4, 3, 0],
        "v0 stays: an allocation runs it"
    );

    let changes = h
        .apply(Command::EvalDelete {
            eval_ids: vec![],
            alloc_ids: vec![allocs[0].id],
        })
        .unwrap();
    assert!(h.state.job_by_version("default", "web", 0).is_none());
    assert!(changes.changes.iter().any(|c| c.key
        == RowKey::JobVersion(super::changes::JobVersionKey {
            job: super::JobKey::new("default", "web"),
            version: 0
        })
        && c.row.is_none()));
    assert_eq!(
        h.state.job_versions("default", "web").count(),
        JOB_TRACKED_VERSIONS
    );
}

#[test]
fn placements_update_indexes_summary_and_job_status() {
    let mut h = Harness::new();
    let node = h.add_node("n1");
    let job = web();
    let (_, eval) = h.register(&job);
    let mut queued = eval.clone();
    queued.queued_allocations.insert("frontend".into(), 3);
    h.ok(Command::EvalUpdate {
        evals: vec![queued],
    });
    assert_eq!(
        h.state.job_summary("default", "web").unwrap().summary["frontend"].queued,
        3
    );

    let allocs = allocs_for(&h.job("web"), &node, &eval, 2);
    let index = h.place(&allocs, &job);
    let stored = h.state.alloc(&allocs[0].id).unwrap();
    assert_eq!(
        (
            stored.create_index,
            stored.modify_index,
            stored.alloc_modify_index
        ),
        (index, index, index)
    );
    let tg = &h.state.job_summary("default", "web").unwrap().summary["frontend"];
    assert_eq!((tg.queued, tg.starting), (1, 2));
    assert_eq!(h.job("web").status, "running");
    assert_eq!(h.state.allocs_by_node(&node.id).count(), 2);
    assert_eq!(h.state.allocs_by_job("default", "web").count(), 2);
    assert_eq!(h.state.allocs_by_eval(&eval.id).count(), 2);
    assert_eq!(
        h.state.eval(&eval.id).unwrap().modify_index,
        index,
        "planning eval moved"
    );
    assert_eq!(h.state.table_index(Table::Allocs), index);

    // Running on the client, then re-placed by the servers (in-place
    // update): CreateIndex and client fields survive.
    // The plan's copy still says CreateIndex 0 (new), as a wrong plan
    // might: the store finds the ID and updates instead.
    h.client_status(&allocs[0], ClientStatus::Running);
    assert_eq!(allocs[0].create_index, 0);
    let again = h.place(&allocs[..1], &job);
    let stored = h.state.alloc(&allocs[0].id).unwrap();
    assert_eq!(stored.create_index, index);
    assert_eq!(stored.alloc_modify_index, again);
    assert_eq!(stored.client_status, ClientStatus::Running);
    let tg = &h.state.job_summary("default", "web").unwrap().summary["frontend"];
    assert_eq!((tg.starting, tg.running), (1, 1));
    assert_eq!(h.state.node_usage(&node.id).unwrap().live, 2);
    assert_eq!(h.state.allocs_by_node(&node.id).count(), 2);
}

#[test]
fn stops_and_client_updates_change_the_right_fields() {
    let mut h = Harness::new();
    let node = h.add_node("n1");
    let mut job = web();
    job.job_type = JobType::Batch;
    job.update = None;
    let (_, eval) = h.register(&job);
    let allocs = allocs_for(&h.job("web"), &node, &eval, 2);
    let placed = h.place(&allocs, &job);
    h.complete(&eval);

    let client = h.client_status(&allocs[0], ClientStatus::Complete);
    let a = h.state.alloc(&allocs[0].id).unwrap();
    assert_eq!((a.modify_index, a.alloc_modify_index), (client, placed));
    assert_eq!(a.modify_time, 99);
    assert_eq!(h.job("web").status, "running", "one allocation still runs");

    let mut node_update = HashMap::new();
    node_update.insert(
        node.id,
        vec![AllocStop {
            id: allocs[1].id,
            desired_status: DesiredStatus::Stop,
            desired_description: "alloc not needed".into(),
            client_status: Some(ClientStatus::Lost),
            followup_eval_id: None,
            preempted_by: None,
        }],
    );
    let stop = h.ok(Command::ApplyPlanResults(PlanResults {
        eval_id: eval.id,
        node_update,
        updated_at: 42,
        ..Default::default()
    }));
    let b = h.state.alloc(&allocs[1].id).unwrap();
    assert_eq!(b.desired_status, DesiredStatus::Stop);
    assert_eq!(&*b.desired_description, "alloc not needed");
    assert_eq!(b.client_status, ClientStatus::Lost);
    assert_eq!((b.alloc_modify_index, b.modify_time), (stop, 42));
    assert_eq!(
        h.job("web").status,
        "dead",
        "all allocations and evals are terminal"
    );
    let tg = &h.state.job_summary("default", "web").unwrap().summary["frontend"];
    assert_eq!((tg.starting, tg.complete, tg.lost), (0, 1, 1));
}

#[test]
fn a_replacement_links_the_allocation_it_replaces() {
    let mut h = Harness::new();
    let node = h.add_node("n1");
    let job = web();
    let (_, eval) = h.register(&job);
    let first = allocs_for(&h.job("web"), &node, &eval, 1);
    h.place(&first, &job);
    h.client_status(&first[0], ClientStatus::Failed);
    let mut next = allocs_for(&h.job("web"), &node, &eval, 1);
    next[0].id = crate::structs::new_id();
    next[0].links_mut().previous_allocation = Some(first[0].id);
    let placed = h.place(&next, &job);
    let prev = h.state.alloc(&first[0].id).unwrap();
    assert_eq!(prev.links().next_allocation, Some(next[0].id));
    assert_eq!(prev.modify_index, placed);
    assert_eq!(
        prev.client_status,
        ClientStatus::Failed,
        "client fields kept"
    );
}

#[test]
fn desired_transitions_merge_and_bump_alloc_modify_index() {
    let mut h = Harness::new();
    let node = h.add_node("n1");
    let job = web();
    let (_, eval) = h.register(&job);
    let allocs = allocs_for(&h.job("web"), &node, &eval, 1);
    h.place(&allocs, &job);
    let mut transitions = BTreeMap::new();
    transitions.insert(
        allocs[0].id,
        DesiredTransition {
            migrate: Some(true),
            ..Default::default()
        },
    );
    h.ok(Command::AllocDesiredTransition {
        transitions: transitions.clone(),
        evals: vec![],
    });
    transitions.insert(
        allocs[0].id,
        DesiredTransition {
            reschedule: Some(true),
            ..Default::default()
        },
    );
    let index = h.ok(Command::AllocDesiredTransition {
        transitions,
        evals: vec![],
    });
    let a = h.state.alloc(&allocs[0].id).unwrap();
    assert_eq!(
        a.desired_transition.migrate,
        Some(true),
        "earlier request kept"
    );
    assert_eq!(a.desired_transition.reschedule, Some(true));
    assert_eq!(a.alloc_modify_index, index);
}

#[test]
fn deregister_stops_with_a_new_version_and_purge_removes() {
    let mut h = Harness::new();
    let job = web();
    let (first, eval) = h.register(&job);
    let stop_eval = fixtures::eval(&job, TriggeredBy::JobDeregister, 2);
    let index = h.ok(Command::JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: false,
        eval: Some(stop_eval.clone()),
    });
    let stopped = h.job("web");
    assert!(stopped.stop);
    assert_eq!((stopped.version, stopped.job_modify_index), (1, index));
    assert_eq!(stopped.create_index, first);
    assert_eq!(h.state.eval(&stop_eval.id).unwrap().job_modify_index, index);

    h.complete(&eval);
    h.complete(&stop_eval);
    assert_eq!(h.job("web").status, "dead");

    h.ok(Command::JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: true,
        eval: None,
    });
    assert!(h.state.job("default", "web").is_none());
    assert!(h.state.job_summary("default", "web").is_none());
    assert_eq!(h.state.job_versions("default", "web").count(), 0);

    let err = h.rejected(Command::JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: true,
        eval: None,
    });
    assert!(matches!(err, ApplyError::JobNotFound { .. }));
}

#[test]
fn node_commands_keep_the_servers_view_and_reject_unknown_nodes() {
    let mut h = Harness::new();
    let node = h.add_node("n1");
    let created = h.state.node(&node.id).unwrap().create_index;
    assert!(!h.state.node(&node.id).unwrap().computed_class.is_empty());

    h.ok(Command::NodeUpdateDrain {
        node_id: node.id,
        drain: Some(DrainStrategy {
            deadline: 60_000_000_000,
            ..Default::default()
        }),
        mark_eligible: false,
        event: Some(NodeEvent {
            message: "Node drain strategy set".into(),
            subsystem: "Drain".into(),
            ..Default::default()
        }),
        evals: vec![],
    });
    let drained = h.state.node(&node.id).unwrap().clone();
    assert_eq!(
        drained.scheduling_eligibility,
        SchedulingEligibility::Ineligible
    );
    assert!(drained.drain);
    assert_eq!(
        drained.events.last().unwrap().create_index,
        drained.modify_index
    );

    let err = h.rejected(Command::NodeUpdateEligibility {
        node_id: node.id,
        eligibility: SchedulingEligibility::Eligible,
        event: None,
        evals: vec![],
    });
    assert_eq!(err, ApplyError::NodeDraining(node.id));

    // A client re-registering does not undo the drain.
    let mut again = node.clone();
    again.name = "renamed".into();
    h.ok(Command::NodeRegister {
        node: Arc::new(again),
    });
    let stored = h.state.node(&node.id).unwrap();
    assert_eq!(stored.name, "renamed");
    assert!(stored.drain_strategy.is_some());
    assert_eq!(stored.create_index, created);

    h.ok(Command::NodeUpdateDrain {
        node_id: node.id,
        drain: None,
        mark_eligible: true,
        event: None,
        evals: vec![],
    });
    assert!(h.state.node(&node.id).unwrap().is_schedulable());

    let unknown = crate::structs::new_id();
    let err = h.rejected(Command::NodeUpdateStatus {
        node_id: unknown,
        status: NodeStatus::Down,
        event: None,
        evals: vec![],
        updated_at: 5,
    });
    assert_eq!(err, ApplyError::NodeNotFound(unknown));
    let err = h.rejected(Command::NodeDeregister {
        node_ids: vec![node.id, unknown],
    });
    assert_eq!(err, ApplyError::NodeNotFound(unknown));
    assert!(h.state.node(&node.id).is_some(), "all or nothing");

    h.ok(Command::NodeUpdateStatus {
        node_id: node.id,
        status: NodeStatus::Down,
        event: None,
        evals: vec![],
        updated_at: 5,
    });
    let down = h.state.node(&node.id).unwrap();
    assert_eq!((down.status, down.status_updated_at), (NodeStatus::Down, 5));
    h.ok(Command::NodeDeregister {
        node_ids: vec![node.id],
    });
    assert_eq!(h.state.node_count(), 0);
}

#[test]
fn a_successful_eval_cancels_the_jobs_blocked_evals() {
    let mut h = Harness::new();
    let job = web();
    let (_, eval) = h.register(&job);
    let mut blocked = eval.follow_up(TriggeredBy::QueuedAllocs, 3);
    blocked.status = EvalStatus::Blocked;
    h.ok(Command::EvalUpdate {
        evals: vec![blocked.clone()],
    });
    let index = h.complete(&eval);
    let canceled = h.state.eval(&blocked.id).unwrap();
    assert_eq!(canceled.status, EvalStatus::Canceled);
    assert_eq!(canceled.modify_index, index);
}

#[test]
fn scheduler_config_check_and_set() {
    let mut h = Harness::new();
    assert_eq!(
        h.state.scheduler_config().scheduler_algorithm,
        SchedulerAlgorithm::Binpack
    );
    let spread = SchedulerConfiguration {
        scheduler_algorithm: SchedulerAlgorithm::Spread,
        ..Default::default()
    };
    let err = h.rejected(Command::SchedulerConfigUpdate {
        config: spread.clone(),
        cas_index: Some(3),
    });
    assert_eq!(
        err,
        ApplyError::CasMismatch {
            expected: 3,
            actual: 0
        }
    );
    let first = h.ok(Command::SchedulerConfigUpdate {
        config: spread.clone(),
        cas_index: Some(0),
    });
    let err = h.rejected(Command::SchedulerConfigUpdate {
        config: SchedulerConfiguration::default(),
        cas_index: Some(0),
    });
    assert_eq!(
        err,
        ApplyError::CasMismatch {
            expected: 0,
            actual: first
        }
    );
    let second = h.ok(Command::SchedulerConfigUpdate {
        config: SchedulerConfiguration::default(),
        cas_index: None,
    });
    let stored = h.state.scheduler_config();
    assert_eq!((stored.create_index, stored.modify_index), (first, second));
    assert_eq!(h.state.table_index(Table::SchedulerConfig), second);
}

#[test]
fn autopilot_config_check_and_set() {
    let mut h = Harness::new();
    assert!(h.state.stored_autopilot_config().is_none());
    let off = crate::structs::AutopilotConfiguration {
        cleanup_dead_servers: false,
        ..Default::default()
    };
    let err = h.rejected(Command::AutopilotConfigUpdate {
        config: off.clone(),
        cas_index: Some(5),
    });
    assert_eq!(
        err,
        ApplyError::CasMismatch {
            expected: 5,
            actual: 0
        }
    );
    let first = h.ok(Command::AutopilotConfigUpdate {
        config: off,
        cas_index: Some(0),
    });
    let second = h.ok(Command::AutopilotConfigUpdate {
        config: crate::structs::AutopilotConfiguration::default(),
        cas_index: Some(first),
    });
    let stored = h.state.stored_autopilot_config().expect("stored");
    assert!(stored.cleanup_dead_servers);
    assert_eq!((stored.create_index, stored.modify_index), (first, second));
    assert_eq!(h.state.table_index(Table::AutopilotConfig), second);
}

#[test]
fn job_stability_marks_the_version_and_the_current_job() {
    let mut h = Harness::new();
    let (_, _) = h.register(&web());
    h.ok(Command::JobStabilityUpdate {
        namespace: "default".into(),
        job_id: "web".into(),
        version: 0,
        stable: true,
    });
    assert!(h.job("web").stable);
    assert!(h.state.job_by_version("default", "web", 0).unwrap().stable);
}

#[test]
fn stale_indexes_are_rejected() {
    let mut h = Harness::new();
    h.register(&web());
    let before = h.state.clone();
    let err = h
        .state
        .apply(1, &Command::EvalUpdate { evals: vec![] })
        .unwrap_err();
    assert_eq!(
        err,
        ApplyError::StaleIndex {
            index: 1,
            latest: 1
        }
    );
    assert_eq!(h.state, before);
}

#[test]
fn garbage_collection_makes_an_emptied_job_dead() {
    let mut h = Harness::new();
    let node = h.add_node("n1");
    let job = web();
    let (_, eval) = h.register(&job);
    let allocs = allocs_for(&h.job("web"), &node, &eval, 1);
    h.place(&allocs, &job);
    h.ok(Command::EvalDelete {
        eval_ids: vec![eval.id],
        alloc_ids: vec![allocs[0].id],
    });
    assert_eq!(h.state.alloc_count(), 0);
    assert_eq!(h.state.allocs_by_node(&node.id).count(), 0);
    assert_eq!(h.state.evals_by_job("default", "web").count(), 0);
    assert_eq!(h.job("web").status, "dead");
}

#[test]
fn preemptions_evict_and_record_who_preempted() {
    let mut h = Harness::new();
    let node = h.add_node("n1");
    let job = web();
    let (_, eval) = h.register(&job);
    let victims = allocs_for(&h.job("web"), &node, &eval, 1);
    h.place(&victims, &job);

    let system = fixtures::job("default", "agent", &[("frontend", 1)]);
    let (_, system_eval) = h.register(&system);
    let mut placed = allocs_for(&h.job("agent"), &node, &system_eval, 1);
    placed[0].links_mut().preempted_allocations = vec![victims[0].id];
    let follow_up = fixtures::eval(&job, TriggeredBy::Preemption, 7);
    let index = h.ok(Command::ApplyPlanResults(PlanResults {
        eval_id: system_eval.id,
        job: Some(h.job("agent")),
        node_allocation: HashMap::from([(node.id, placed.clone())]),
        node_preemptions: HashMap::from([(
            node.id,
            vec![AllocStop {
                id: victims[0].id,
                desired_status: DesiredStatus::Evict,
                desired_description: "preempted".into(),
                client_status: None,
                followup_eval_id: None,
                preempted_by: Some(placed[0].id),
            }],
        )]),
        evals: vec![follow_up.clone()],
        updated_at: 50,
        ..Default::default()
    }));
    let victim = h.state.alloc(&victims[0].id).unwrap();
    assert_eq!(victim.desired_status, DesiredStatus::Evict);
    assert_eq!(victim.links().preempted_by_allocation, Some(placed[0].id));
    assert_eq!((victim.alloc_modify_index, victim.modify_time), (index, 50));
    assert_eq!(h.state.eval(&follow_up.id).unwrap().create_index, index);
    assert_eq!(
        h.state
            .alloc(&placed[0].id)
            .unwrap()
            .links()
            .preempted_allocations,
        vec![victims[0].id]
    );
}

#[test]
fn a_periodic_parent_counts_its_children_by_status() {
    let mut h = Harness::new();
    let mut parent = fixtures::job("default", "nightly", &[("frontend", 1)]);
    parent.periodic = Some(crate::structs::PeriodicConfig {
        enabled: true,
        spec: "0 0 * * *".into(),
        ..Default::default()
    });
    h.ok(Command::JobRegister {
        job: Arc::new(parent),
        eval: None,
        enforce_index: None,
    });
    assert_eq!(
        h.job("nightly").status,
        "running",
        "templates run until stopped"
    );

    let mut child = fixtures::job("default", "nightly/periodic-1", &[("frontend", 1)]);
    child.parent_id = "nightly".into();
    let (_, eval) = h.register(&child);
    let children = |h: &Harness| {
        h.state
            .job_summary("default", "nightly")
            .unwrap()
            .children
            .clone()
            .unwrap()
    };
    assert_eq!((children(&h).pending, children(&h).dead), (1, 0));
    h.complete(&eval);
    assert_eq!((children(&h).pending, children(&h).dead), (0, 1));
}

#[test]
fn applied_changes_name_the_touched_tables_and_rows() {
    let mut h = Harness::new();
    let job = web();
    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
    let changes = h
        .apply(Command::JobRegister {
            job: Arc::new(job),
            eval: Some(eval.clone()),
            enforce_index: None,
        })
        .unwrap();
    let tables: Vec<Table> = changes.tables.iter().collect();
    assert_eq!(tables, vec![Table::Jobs, Table::JobSummaries, Table::Evals]);
    assert_eq!(
        changes.evals().map(|e| e.id).collect::<Vec<_>>(),
        vec![eval.id]
    );
    assert_eq!(
        changes.jobs().next().unwrap().status,
        "pending",
        "final values"
    );
    assert_eq!(changes.changes.len(), 4, "job, version, summary, eval");
}

/// A large plan's new placements are applied in two stages on two threads
/// (`Txn::place_new_allocs`); the state and the change records must be
/// those of placing them one by one, also with a placement whose ID exists
/// (a wrong plan: it becomes an update) and a replacement that marks the
/// allocation it replaces.
#[test]
fn a_large_plan_applies_as_its_placements_one_by_one() {
    let nodes: Vec<Node> = (0..3).map(|i| fixtures::node(&format!("n{i}"))).collect();
    let job = web();
    let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
    let first = allocs_for(&job, &nodes[0], &eval, 3);
    let mut big: Vec<Allocation> = (0..120)
        .map(|i| AllocBuilder::new(&job, "frontend").build(i, nodes[i as usize % 3].id, eval.id, 5))
        .collect();
    big[7].links_mut().previous_allocation = Some(first[1].id);
    // A placement replacing another of the same plan.
    big[9].links_mut().previous_allocation = Some(big[3].id);
    // Most in a deployment the plan brings, a few of another version.
    let mut deployment = Deployment::new(&job, 50);
    deployment.task_groups.insert(
        "frontend".into(),
        crate::structs::DeploymentState {
            desired_total: 120,
            progress_deadline: std::time::Duration::from_secs(600),
            ..Default::default()
        },
    );
    for a in big.iter_mut().take(100) {
        a.deployment_id = Some(deployment.id);
    }
    for a in big.iter_mut().skip(110) {
        a.job_version += 1;
    }
    // CreateIndex 0, but the ID exists (on another node).
    let mut moved = first[2].clone();
    moved.node_id = nodes[1].id;
    big.push(moved);
    // Another job's placements in the same plan.
    let other = fixtures::job("default", "api", &[("frontend", 3)]);
    let other_eval = fixtures::eval(&other, TriggeredBy::JobRegister, 1);
    big.extend((0..30).map(|i| {
        AllocBuilder::new(&other, "frontend").build(i, nodes[i as usize % 3].id, other_eval.id, 5)
    }));
    let plan = |allocs: &[Allocation]| plan_placing(allocs, &job);
    let mut commands: Vec<Command> = nodes
        .iter()
        .map(|n| Command::NodeRegister {
            node: Arc::new(n.clone()),
        })
        .collect();
    commands.push(Command::JobRegister {
        job: Arc::new(job.clone()),
        eval: Some(eval.clone()),
        enforce_index: None,
    });
    commands.push(Command::JobRegister {
        job: Arc::new(other.clone()),
        eval: Some(other_eval.clone()),
        enforce_index: None,
    });
    commands.push(plan(&first));
    commands.push(Command::AllocClientUpdate {
        updates: vec![AllocClientUpdate {
            id: first[1].id,
            client_status: ClientStatus::Failed,
            modify_time: 20,
            ..Default::default()
        }],
        evals: vec![],
    });
    let mut big_plan = plan(&big);
    if let Command::ApplyPlanResults(p) = &mut big_plan {
        p.deployment = Some(Arc::new(deployment.clone()));
    }
    commands.push(big_plan);
    let run = |threshold: usize| {
        super::apply::PARALLEL_PLACEMENTS_IN_TESTS.with(|c| c.set(threshold));
        let mut h = Harness::new();
        let changes: Vec<_> = commands
            .iter()
            .map(|c| h.apply(c.clone()).unwrap())
            .collect();
        (h.state, changes)
    };
    let (two_stages, staged_changes) = run(1);
    let (one_by_one, changes) = run(usize::MAX);
    super::apply::PARALLEL_PLACEMENTS_IN_TESTS.with(|c| c.set(64));
    assert!(two_stages == one_by_one, "the states differ");
    let rows = |c: &[super::AppliedChanges]| -> Vec<_> {
        c.iter()
            .flat_map(|c| c.changes.iter().map(|r| (r.key.clone(), r.row.clone())))
            .collect()
    };
    assert_eq!(rows(&staged_changes), rows(&changes));
    // What the two ways agree on is right: every placement counted once.
    let s = &two_stages;
    assert_eq!(s.alloc_count(), 153);
    let live: u32 = nodes
        .iter()
        .filter_map(|n| s.node_usage(&n.id))
        .map(|u| u.live)
        .sum();
    assert_eq!(live, 152, "all but the failed one are live, none twice");
    assert_eq!(s.allocs_by_node(&nodes[0].id).count(), 52);
    assert_eq!(s.allocs_by_node(&nodes[1].id).count(), 51);
    assert_eq!(
        s.alloc(&first[1].id).unwrap().links().next_allocation,
        Some(big[7].id)
    );
    assert_eq!(
        s.alloc(&big[3].id).unwrap().links().next_allocation,
        Some(big[9].id),
        "linked to its successor in the same plan"
    );
    let placed = &s.deployment(&deployment.id).unwrap().task_groups["frontend"];
    assert_eq!(placed.placed_allocs, 100);
    assert_eq!(s.allocs_by_job("default", "api").count(), 30);
    assert_eq!(
        s.job_summary("default", "api").unwrap().summary["frontend"].starting,
        30
    );
    let replaced = s.alloc(&first[2].id).unwrap();
    assert_eq!(
        replaced.create_index,
        s.alloc(&first[0].id).unwrap().create_index
    );
    let tg = &s.job_summary("default", "web").unwrap().summary["frontend"];
    assert_eq!((tg.starting, tg.failed), (122, 1));
}

fn parameterized_parent() -> Job {
    let mut parent = fixtures::job("default", "batch", &[("g", 1)]);
    parent.job_type = JobType::Batch;
    parent.parameterized_job = Some(crate::structs::ParameterizedJobConfig {
        payload: "optional".into(),
        ..Default::default()
    });
    parent
}

fn dispatched(parent: &Job, id: &str, token: &str) -> Command {
    let mut child = parent.derive_child(format!("batch/dispatch-1-{id}"), 5);
    child.dispatched = true;
    child.dispatch_idempotency_token = token.into();
    let eval = fixtures::eval(&child, TriggeredBy::JobRegister, 5);
    Command::JobDispatch {
        job: Arc::new(child),
        eval: Some(eval),
    }
}

#[test]
fn a_dispatch_token_makes_one_child_and_the_parent_counts_it() {
    let mut h = Harness::new();
    let parent = parameterized_parent();
    h.register(&parent);
    h.ok(dispatched(&parent, "aaaaaaaa", "tok"));
    let err = h.rejected(dispatched(&parent, "bbbbbbbb", "tok"));
    assert_eq!(
        err,
        ApplyError::DispatchTokenUsed {
            job_id: "batch/dispatch-1-aaaaaaaa".into()
        }
    );
    // Without a token, or with another, a second child is made; an ID that
    // exists is refused.
    h.ok(dispatched(&parent, "cccccccc", ""));
    h.ok(dispatched(&parent, "dddddddd", "other"));
    assert!(h.apply(dispatched(&parent, "cccccccc", "")).is_err());
    let child = h.state.job("default", "batch/dispatch-1-aaaaaaaa").unwrap();
    assert!(child.dispatched && !child.is_parameterized() && !child.is_template());
    assert_eq!(child.status, "pending", "a dispatched child is scheduled");
    let summary = h.state.job_summary("default", "batch").unwrap();
    assert_eq!(summary.children.as_ref().map(|c| c.pending), Some(3));
    assert!(h
        .state
        .job_summary("default", &child.id)
        .unwrap()
        .children
        .is_none());
}

#[test]
fn scaling_records_events_with_or_without_a_new_version_and_purge_drops_them() {
    use crate::structs::ScalingEvent;
    let mut h = Harness::new();
    let job = web();
    h.register(&job);
    let mut bigger = job.clone();
    bigger.task_groups[0].count = 5;
    let eval = fixtures::eval(&bigger, TriggeredBy::JobScaling, 2);
    let scale = |job: Option<Job>, eval: Option<Evaluation>, message: &str| Command::JobScale {
        namespace: "default".into(),
        job_id: "web".into(),
        group: "frontend".into(),
        job: job.map(Arc::new),
        eval,
        enforce_index: None,
        event: ScalingEvent {
            message: message.into(),
            ..Default::default()
        },
    };
    let first = h.ok(scale(Some(bigger), Some(eval.clone()), "up"));
    let stored = h.state.job("default", "web").unwrap();
    assert_eq!((stored.version, stored.task_groups[0].count), (1, 5));
    assert!(h.state.eval(&eval.id).is_some());
    let second = h.ok(scale(None, None, "note"));
    assert_eq!(h.state.job("default", "web").unwrap().version, 1);
    assert_eq!(h.state.table_index(Table::ScalingEvents), second);
    let events = h.state.scaling_events("default", "web").unwrap();
    let group = &events.scaling_events["frontend"];
    assert_eq!(
        group
            .iter()
            .map(|e| (e.message.as_str(), e.create_index))
            .collect::<Vec<_>>(),
        vec![("note", second), ("up", first)]
    );
    assert_eq!(events.modify_index, second);
    // An unknown job is refused whole.
    let mut missing = scale(None, None, "x");
    if let Command::JobScale { job_id, .. } = &mut missing {
        *job_id = "nope".into();
    }
    assert!(matches!(
        h.rejected(missing),
        ApplyError::JobNotFound { .. }
    ));
    // Purging the job removes its events with it.
    let changes = h
        .apply(Command::JobDeregister {
            namespace: "default".into(),
            job_id: "web".into(),
            purge: true,
            eval: None,
        })
        .unwrap();
    assert!(h.state.scaling_events("default", "web").is_none());
    assert!(changes
        .changes
        .iter()
        .any(|c| matches!(c.key, RowKey::ScalingEvents(_)) && c.row.is_none()));
}

#[test]
fn a_scaling_policy_keeps_its_indexes_while_unchanged() {
    use crate::structs::ScalingPolicy;
    let mut h = Harness::new();
    let mut job = web();
    job.task_groups[0].scaling = Some(ScalingPolicy {
        id: "p1".into(),
        min: Some(0),
        max: Some(5),
        ..Default::default()
    });
    let (created, _) = h.register(&job);
    let policy = |h: &Harness| {
        h.state.job("default", "web").unwrap().task_groups[0]
            .scaling
            .clone()
            .unwrap()
    };
    assert_eq!(
        (policy(&h).create_index, policy(&h).modify_index),
        (created, created)
    );
    // Same spec: no new version, same policy indexes.
    h.register(&job);
    assert_eq!(h.state.job("default", "web").unwrap().version, 0);
    assert_eq!(policy(&h).modify_index, created);
    // Another change of the job leaves the policy's indexes alone.
    job.priority = 70;
    h.register(&job);
    assert_eq!(policy(&h).modify_index, created);
    // A changed policy moves its modify index only.
    job.task_groups[0].scaling.as_mut().unwrap().max = Some(9);
    let (changed, _) = h.register(&job);
    assert_eq!(
        (policy(&h).create_index, policy(&h).modify_index),
        (created, changed)
    );
}

#[test]
fn reconciling_summaries_recounts_them_from_this_jobs_allocations() {
    let mut h = Harness::new();
    let node = h.add_node("n1");
    let (_, eval) = h.register(&web());
    let old = allocs_for(&h.job("web"), &node, &eval, 2);
    h.place(&old, &web());
    // Purged and registered again under the same ID: the first job's
    // allocations still report, and count in the new job's summary (the
    // drift Nomad's reconciliation repairs, hashicorp/nomad#2304).
    h.ok(Command::JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: true,
        eval: None,
    });
    let (_, eval) = h.register(&web());
    let new = allocs_for(&h.job("web"), &node, &eval, 1);
    h.place(&new, &web());
    h.client_status(&old[0], ClientStatus::Running);
    let mut queued = eval.clone();
    queued.queued_allocations.insert("frontend".into(), 2);
    h.ok(Command::EvalUpdate {
        evals: vec![queued],
    });
    let tg =
        |h: &Harness| h.state.job_summary("default", "web").unwrap().summary["frontend"].clone();
    assert_eq!((tg(&h).starting, tg(&h).running), (0, 1), "drifted");

    let changes = h.apply(Command::ReconcileJobSummaries).unwrap();
    let tg = tg(&h);
    assert_eq!((tg.starting, tg.running, tg.queued), (1, 0, 2));
    let summary = h.state.job_summary("default", "web").unwrap();
    assert_eq!(summary.modify_index, changes.index);
    assert_eq!(summary.create_index, h.job("web").create_index);
    assert_eq!(
        changes.tables.iter().collect::<Vec<_>>(),
        vec![Table::JobSummaries]
    );
    assert_eq!(h.state.table_index(Table::JobSummaries), changes.index);

    // Right summaries are left as they are.
    let again = h.apply(Command::ReconcileJobSummaries).unwrap();
    assert!(again.changes.is_empty(), "{:?}", again.changes);
}

#[test]
fn reconciling_summaries_recounts_a_parents_children() {
    let mut h = Harness::new();
    let mut parent = fixtures::job("default", "nightly", &[("frontend", 1)]);
    parent.periodic = Some(crate::structs::PeriodicConfig {
        enabled: true,
        spec: "0 0 * * *".into(),
        ..Default::default()
    });
    h.register(&parent);
    for i in 0..3 {
        let mut child = fixtures::job(
            "default",
            &format!("nightly/periodic-{i}"),
            &[("frontend", 1)],
        );
        child.parent_id = "nightly".into();
        let (_, eval) = h.register(&child);
        if i == 0 {
            h.complete(&eval);
        }
    }
    let children = |h: &Harness| {
        h.state
            .job_summary("default", "nightly")
            .unwrap()
            .children
            .clone()
            .unwrap()
    };
    let before = children(&h);
    assert_eq!((before.pending, before.dead), (2, 1));
    h.ok(Command::ReconcileJobSummaries);
    assert_eq!(children(&h), before, "already right");
    assert_eq!(
        serde_json::to_string(&super::CommandEnvelope::new(Command::ReconcileJobSummaries))
            .unwrap(),
        r#"{"Version":1,"Command":{"Type":"ReconcileJobSummaries"}}"#
    );
}

#[path = "apply_services_tests.rs"]
mod services;

#[path = "apply_namespaces_tests.rs"]
mod namespaces;
#[path = "apply_variables_tests.rs"]
mod variables;
