//! The broker's ready queue for one scheduler type: which ready
//! evaluation a worker gets next.
//!
//! Nomad orders a ready queue by priority, then by creation index: first
//! come, first served. Under a burst that is unkind to small jobs: a job
//! of one allocation submitted behind a thousand jobs of a thousand
//! allocations each waits for every one of them (tens of seconds), though
//! its own scheduling takes a millisecond. herder keeps priority first and
//! strict, and within a priority shares the workers among jobs the way
//! fair queuing shares a link among flows:
//!
//! - each evaluation has a **cost**, the scheduling work it is expected to
//!   be ([`EvalCost`]: on a server, its job's allocation count);
//! - the queue keeps a **virtual time** that advances, on every delivery,
//!   by the delivered cost divided by the number of evaluations that were
//!   ready: the work each waiting job would have had done had the workers
//!   been shared equally among them;
//! - an evaluation made ready at virtual time `V` with cost `c` is due at
//!   `V + c`, and the one due first is delivered first.
//!
//! So evaluations of equal cost keep Nomad's order (first ready, first
//! out; same virtual time: lower creation index first), a cheap one
//! overtakes expensive ones that are waiting, and an expensive one is never
//! starved: virtual time only grows, so later arrivals are due later, and
//! within `c` units of virtual time its turn comes.
//!
//! (The broker lets one evaluation per job be ready at a time, so a
//! "flow" here is a job, and one ready evaluation is its whole backlog.)

use herder::structs::Evaluation;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::Arc;

/// The largest cost an evaluation is given: a bound on the arithmetic,
/// well above any real job (the job limits cap a group's count).
pub const MAX_COST: u64 = 1 << 24;

/// Virtual time is kept in fixed point so that a delivered cost divided
/// among many waiting evaluations keeps its fraction, and the order is a
/// total one (no floating point).
const SCALE: u128 = 1 << 20;

/// How much scheduling work an evaluation is expected to be (any unit;
/// only ratios matter), clamped to `1..=MAX_COST`.
#[derive(Clone)]
pub struct EvalCost(Arc<dyn Fn(&Evaluation) -> u64 + Send + Sync>);

impl EvalCost {
    /// Every evaluation costs the same: the queue is then Nomad's order.
    pub fn uniform() -> Self {
        EvalCost(Arc::new(|_| 1))
    }

    pub fn new(cost: impl Fn(&Evaluation) -> u64 + Send + Sync + 'static) -> Self {
        EvalCost(Arc::new(cost))
    }

    pub fn of(&self, eval: &Evaluation) -> u64 {
        (self.0)(eval).clamp(1, MAX_COST)
    }
}

impl Default for EvalCost {
    fn default() -> Self {
        EvalCost::uniform()
    }
}

impl std::fmt::Debug for EvalCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EvalCost")
    }
}

/// One scheduler type's ready evaluations.
#[derive(Default)]
pub struct ReadyQueue {
    heap: BinaryHeap<ReadyEntry>,
    /// Scaled by `SCALE`.
    virtual_time: u128,
}

impl ReadyQueue {
    /// Make `eval` ready; `seq` breaks the last ties (arrival order).
    pub fn push(&mut self, eval: Arc<Evaluation>, cost: u64, seq: u64) {
        let cost = u128::from(cost.clamp(1, MAX_COST));
        self.heap.push(ReadyEntry {
            due: self.virtual_time.saturating_add(cost * SCALE),
            cost,
            seq,
            eval,
        });
    }

    /// The next evaluation to deliver; virtual time moves on by its cost
    /// shared among everything that was waiting with it.
    pub fn pop(&mut self) -> Option<Arc<Evaluation>> {
        let waiting = self.heap.len() as u128;
        let entry = self.heap.pop()?;
        self.virtual_time = self
            .virtual_time
            .saturating_add(entry.cost * SCALE / waiting.max(1));
        Some(entry.eval)
    }

    /// The priority of the evaluation `pop` would answer.
    pub fn head_priority(&self) -> Option<i32> {
        self.heap.peek().map(|entry| entry.eval.priority)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// Ordered for a max-heap: higher priority first, then due first, then
/// lower creation index, then earlier arrival.
struct ReadyEntry {
    due: u128,
    cost: u128,
    seq: u64,
    eval: Arc<Evaluation>,
}

impl ReadyEntry {
    fn key(&self) -> (i32, Reverse<u128>, Reverse<u64>, Reverse<u64>) {
        (
            self.eval.priority,
            Reverse(self.due),
            Reverse(self.eval.create_index),
            Reverse(self.seq),
        )
    }
}

impl PartialEq for ReadyEntry {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for ReadyEntry {}
impl PartialOrd for ReadyEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ReadyEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(job: &str, priority: i32, create_index: u64) -> Arc<Evaluation> {
        Arc::new(Evaluation {
            job_id: job.to_string(),
            priority,
            create_index,
            ..Evaluation::default()
        })
    }

    fn drain(queue: &mut ReadyQueue) -> Vec<String> {
        std::iter::from_fn(|| queue.pop().map(|e| e.job_id.clone())).collect()
    }

    #[test]
    fn equal_costs_keep_nomads_order_priority_then_creation() {
        let mut queue = ReadyQueue::default();
        queue.push(eval("b", 50, 2), 5, 1);
        queue.push(eval("a", 50, 1), 5, 2);
        queue.push(eval("urgent", 70, 3), 5, 3);
        assert_eq!(drain(&mut queue), ["urgent", "a", "b"]);
    }

    #[test]
    fn a_small_job_overtakes_a_backlog_of_large_ones() {
        let mut queue = ReadyQueue::default();
        for i in 0..1000 {
            queue.push(eval(&format!("large-{i:04}"), 50, i + 1), 1000, i + 1);
        }
        // Five large ones are delivered, then the small one arrives.
        for _ in 0..5 {
            queue.pop();
        }
        queue.push(eval("small", 50, 2000), 1, 2000);
        assert_eq!(
            queue.pop().map(|e| e.job_id.clone()).as_deref(),
            Some("small")
        );
    }

    #[test]
    fn priority_stays_strict_whatever_the_cost() {
        let mut queue = ReadyQueue::default();
        queue.push(eval("cheap-low", 30, 1), 1, 1);
        queue.push(eval("dear-high", 80, 2), MAX_COST, 2);
        assert_eq!(drain(&mut queue), ["dear-high", "cheap-low"]);
    }

    #[test]
    fn a_large_job_is_not_starved_by_a_stream_of_small_ones() {
        let mut queue = ReadyQueue::default();
        queue.push(eval("large", 50, 1), 100, 1);
        let mut seq = 1;
        let mut small_before_large = 0;
        // One small job arrives for every one delivered, for ever: the
        // large one must still come out, after about its cost's worth.
        loop {
            seq += 1;
            queue.push(eval("small", 50, seq), 1, seq);
            let next = queue.pop().expect("never empty");
            if next.job_id == "large" {
                break;
            }
            small_before_large += 1;
            assert!(small_before_large < 1000, "the large job starves");
        }
        assert!(
            (100..=400).contains(&small_before_large),
            "{small_before_large} small jobs went first"
        );
    }

    #[test]
    fn the_uniform_cost_and_the_clamp() {
        let e = eval("j", 50, 1);
        assert_eq!(EvalCost::uniform().of(&e), 1);
        assert_eq!(EvalCost::new(|_| 0).of(&e), 1);
        assert_eq!(EvalCost::new(|_| u64::MAX).of(&e), MAX_COST);
    }
}
