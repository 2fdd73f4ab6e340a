//! The PlanApplier against a real (on-disk) state store: plans racing for
//! the same node, pipelined writes that must never over-commit a node,
//! stale tokens, and leadership loss.

use actix::prelude::*;
use herder::state::fixtures::{self, AllocBuilder};
use herder::state::{Command, StateStore, StoreOptions};
use herder::structs::{new_id, Allocation, Job, Node, Plan};
use herder_server::broker::{BrokerConfig, Dequeue, Enqueue, EvalBroker, EvalWrites};
use herder_server::plan_applier::{
    PlanAnswer, PlanApplier, PlanApplyError, SetEnabled, SubmitPlan,
};
use std::sync::Arc;
use std::time::Duration;

struct Cluster {
    store: StateStore,
    job: Arc<Job>,
    builder: AllocBuilder,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Nodes with room for `slots` test allocations each (by CPU).
    fn new(nodes: &[&Node]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
        for n in nodes {
            store
                .apply(Command::NodeRegister {
                    node: Arc::new((*n).clone()),
                })
                .unwrap();
        }
        let job = Arc::new(fixtures::job("default", "web", &[("g", 100)]));
        store
            .apply(Command::JobRegister {
                job: job.clone(),
                eval: None,
                enforce_index: None,
            })
            .unwrap();
        let builder = AllocBuilder::new(&job, "g");
        Cluster {
            store,
            job,
            builder,
            _dir: dir,
        }
    }

    fn plan(&self, node: &Node, count: u32) -> Plan {
        let mut plan = Plan {
            job: Some(self.job.clone()),
            priority: 50,
            ..Default::default()
        };
        for i in 0..count {
            plan.push_alloc(self.builder.build(i, node.id, new_id(), 1));
        }
        plan
    }

    fn allocs_on(&self, node: &Node) -> Vec<Arc<Allocation>> {
        self.store
            .snapshot()
            .allocs_by_node(&node.id)
            .cloned()
            .collect()
    }
}

/// The plan's result as its worker reads it once the write is over: a
/// plan answered ahead of its write gets its index from the write's
/// outcome, and the committed entries are filled in from the plan (the
/// answer carries only the verdict).
async fn settled(answer: PlanAnswer, plan: &Plan) -> herder::structs::PlanResult {
    let mut result = answer.result;
    if let Some(write) = answer.write {
        result.alloc_index = write.await.expect("outcome sent").expect("written");
    }
    result.take_committed(plan.clone());
    result
}

fn node_with_slots(slots: i64) -> Node {
    let mut n = fixtures::node("n");
    n.node_resources.cpu.cpu_shares = 100 * slots;
    n
}

#[actix::test]
async fn two_plans_racing_for_one_slot_one_wins_the_other_must_refresh() {
    let node = node_with_slots(1);
    let c = Cluster::new(&[&node]);
    let applier = PlanApplier::new(c.store.clone(), None).start();
    let plans = [Arc::new(c.plan(&node, 1)), Arc::new(c.plan(&node, 1))];
    let first = applier.send(SubmitPlan(plans[0].clone()));
    let second = applier.send(SubmitPlan(plans[1].clone()));
    let (a, b) = (
        settled(first.await.unwrap().unwrap(), &plans[0]).await,
        settled(second.await.unwrap().unwrap(), &plans[1]).await,
    );
    let placed =
        |r: &herder::structs::PlanResult| r.node_allocation.values().map(Vec::len).sum::<usize>();
    assert_eq!(placed(&a) + placed(&b), 1, "exactly one plan got the slot");
    let loser = if placed(&a) == 0 { &a } else { &b };
    let winner = if placed(&a) == 0 { &b } else { &a };
    assert_eq!(loser.rejected_nodes, vec![node.id]);
    assert!(
        loser.refresh_index >= winner.alloc_index,
        "refresh to a state that shows the winner"
    );
    assert_eq!(c.allocs_on(&node).len(), 1);
}

#[actix::test]
async fn pipelined_plans_never_over_commit_a_node() {
    let node = node_with_slots(10);
    let c = Cluster::new(&[&node]);
    let applier = PlanApplier::new(c.store.clone(), None).start();
    let plans: Vec<Arc<Plan>> = (0..20).map(|_| Arc::new(c.plan(&node, 1))).collect();
    let replies: Vec<_> = (plans.iter())
        .map(|p| applier.send(SubmitPlan(p.clone())))
        .collect();
    let mut committed = 0;
    for (r, plan) in futures::future::join_all(replies)
        .await
        .into_iter()
        .zip(&plans)
    {
        let r = settled(r.unwrap().unwrap(), plan).await;
        committed += r.node_allocation.values().map(Vec::len).sum::<usize>();
    }
    assert_eq!(committed, 10);
    assert_eq!(
        c.allocs_on(&node).len(),
        10,
        "durable state agrees with the answers"
    );
}

#[actix::test]
async fn a_refused_write_in_the_pipeline_leaves_the_plans_around_it_committed_and_in_bounds() {
    let node = node_with_slots(10);
    let c = Cluster::new(&[&node]);
    let applier = PlanApplier::new(c.store.clone(), None).start();
    // An allocation with no ID: the check lets it through (it fits), the
    // store refuses the write, and its plan is answered with that error.
    let mut malformed = c.plan(&node, 1);
    for allocs in malformed.node_allocation.values_mut() {
        allocs[0].id = Default::default();
    }
    let mut plans: Vec<Arc<Plan>> = (0..4).map(|_| Arc::new(c.plan(&node, 1))).collect();
    plans.push(Arc::new(malformed));
    plans.extend((0..12).map(|_| Arc::new(c.plan(&node, 1))));
    let replies: Vec<_> = (plans.iter())
        .map(|p| applier.send(SubmitPlan(p.clone())))
        .collect();
    let mut committed = 0;
    let mut refused = 0;
    for (r, plan) in futures::future::join_all(replies)
        .await
        .into_iter()
        .zip(&plans)
    {
        match r.unwrap() {
            Ok(answer) => {
                let r = settled(answer, plan).await;
                committed += r.node_allocation.values().map(Vec::len).sum::<usize>();
            }
            Err(PlanApplyError::Store(_)) => refused += 1,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(refused, 1, "only the malformed plan fails");
    assert_eq!(committed, 10, "the node fills, and no further");
    assert_eq!(c.allocs_on(&node).len(), 10, "as the answers said");
}

#[actix::test]
async fn plans_to_different_nodes_all_commit_at_increasing_indexes() {
    let nodes: Vec<Node> = (0..8).map(|_| node_with_slots(4)).collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    let c = Cluster::new(&refs);
    let applier = PlanApplier::new(c.store.clone(), None).start();
    let plans: Vec<Arc<Plan>> = nodes.iter().map(|n| Arc::new(c.plan(n, 4))).collect();
    let replies: Vec<_> = (plans.iter())
        .map(|p| applier.send(SubmitPlan(p.clone())))
        .collect();
    let mut indexes = Vec::new();
    for (r, plan) in futures::future::join_all(replies)
        .await
        .into_iter()
        .zip(&plans)
    {
        let r = settled(r.unwrap().unwrap(), plan).await;
        assert!(r.rejected_nodes.is_empty());
        indexes.push(r.alloc_index);
    }
    let mut sorted = indexes.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), indexes.len(), "each plan its own index");
    assert_eq!(c.store.snapshot().alloc_count(), 32);
}

struct NullSink;
impl Actor for NullSink {
    type Context = Context<Self>;
}
impl Handler<EvalWrites> for NullSink {
    type Result = Result<u64, herder_server::broker::EvalWriteError>;
    fn handle(&mut self, _: EvalWrites, _: &mut Context<Self>) -> Self::Result {
        Ok(1)
    }
}

#[actix::test]
async fn a_plan_whose_eval_is_not_outstanding_under_its_token_is_refused() {
    let node = node_with_slots(4);
    let c = Cluster::new(&[&node]);
    let broker =
        EvalBroker::new(BrokerConfig::default(), NullSink.start().recipient(), None).start();
    broker
        .send(herder_server::broker::SetEnabled(true))
        .await
        .unwrap();
    let eval = fixtures::eval(&c.job, herder::structs::TriggeredBy::JobRegister, 1);
    broker
        .send(Enqueue::new(eval.clone()))
        .await
        .unwrap()
        .unwrap();
    let delivery = broker
        .send(Dequeue {
            schedulers: vec![herder::structs::JobType::Service],
            timeout: Duration::from_secs(5),
        })
        .await
        .unwrap()
        .unwrap()
        .expect("delivered");
    let applier = PlanApplier::new(c.store.clone(), Some(broker.clone().recipient())).start();

    let mut stale = c.plan(&node, 1);
    stale.eval_id = eval.id;
    stale.eval_token = new_id().to_string();
    let err = applier
        .send(SubmitPlan(Arc::new(stale)))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, PlanApplyError::StaleToken(id) if id == eval.id),
        "{err}"
    );
    assert!(c.allocs_on(&node).is_empty(), "nothing written");

    let mut good = c.plan(&node, 1);
    good.eval_id = eval.id;
    good.eval_token = delivery.token.to_string();
    let good = Arc::new(good);
    let answer = applier.send(SubmitPlan(good.clone())).await.unwrap();
    let r = settled(answer.unwrap(), &good).await;
    assert_eq!(r.node_allocation[&node.id].len(), 1);
}

#[actix::test]
async fn a_disabled_queue_refuses_plans_as_a_transient_error() {
    let node = node_with_slots(4);
    let c = Cluster::new(&[&node]);
    let applier = PlanApplier::new(c.store.clone(), None).start();
    applier.send(SetEnabled(false)).await.unwrap();
    let err = applier
        .send(SubmitPlan(Arc::new(c.plan(&node, 1))))
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert_eq!(err.to_string(), "plan queue is disabled");
}

/// A plan that fits whole is answered as soon as its write starts, the
/// write's outcome following; one that is partly refused is answered only
/// after its write, so that its submitter can refresh to a state that
/// holds it.
#[actix::test]
async fn a_whole_plan_is_answered_ahead_of_its_write_a_partial_one_after() {
    let node = node_with_slots(3);
    let c = Cluster::new(&[&node]);
    let applier = PlanApplier::new(c.store.clone(), None).start();
    let plan = Arc::new(c.plan(&node, 3));
    let answer = applier
        .send(SubmitPlan(plan.clone()))
        .await
        .unwrap()
        .unwrap();
    assert!(
        answer.result.node_allocation.is_empty(),
        "the entries go to the store only"
    );
    assert_eq!(answer.result.alloc_index, 0, "not known before the write");
    let mut committed = answer.result.clone();
    committed.take_committed((*plan).clone());
    assert_eq!(committed.node_allocation[&node.id].len(), 3);
    let write = answer.write.expect("answered ahead of its write");
    let index = write.await.expect("outcome sent").expect("written");
    assert!(c.store.snapshot().latest_index() >= index);
    assert_eq!(
        c.allocs_on(&node).len(),
        3,
        "durable once the outcome is in"
    );

    let answer = applier
        .send(SubmitPlan(Arc::new(c.plan(&node, 2))))
        .await
        .unwrap()
        .unwrap();
    assert!(answer.write.is_none(), "a refused plan waits for its write");
    assert_eq!(answer.result.rejected_nodes, vec![node.id]);
    assert!(answer.result.refresh_index >= index);
    assert_eq!(c.allocs_on(&node).len(), 3);
}
