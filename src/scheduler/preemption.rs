//! Preemption: which lower-priority allocations to evict from a full node so
//! a higher-priority group fits.
//!
//! As in Nomad, only allocations whose job priority is lower by at least
//! [`PRIORITY_DELTA`] are candidates. Candidates are taken lowest priority
//! first and, within a priority, the ones whose size is closest to what is
//! still missing; afterwards any chosen allocation that turned out not to be
//! needed is handed back, so no more is evicted than necessary.

use super::context::EvalContext;
use crate::structs::{Allocation, ComparableResources, Node};
use std::sync::Arc;

/// The minimum priority difference for an allocation to be preempted.
pub const PRIORITY_DELTA: i32 = 10;

/// Picks allocations to evict on `node` so that `ask` fits, or `None` when
/// even evicting every candidate would not be enough.
pub fn select_preemptions(
    ctx: &mut EvalContext,
    node: &Node,
    job_priority: i32,
    ask: &ComparableResources,
) -> Option<Vec<Arc<Allocation>>> {
    let capacity = node.available();
    let used = ctx.usage(node).used;
    let others = ctx.preemption_candidates(node);
    let mut candidates: Vec<(i32, Arc<Allocation>)> = Vec::new();
    for alloc in others {
        let p = ctx.job_priority(&alloc);
        if job_priority - p >= PRIORITY_DELTA {
            candidates.push((p, alloc));
        }
    }
    let mut needed = missing(&capacity, &used, ask);
    if is_satisfied(&needed) {
        return Some(Vec::new());
    }
    let mut chosen: Vec<(i32, Arc<Allocation>)> = Vec::new();
    while !is_satisfied(&needed) {
        let best = candidates
            .iter()
            .enumerate()
            .min_by(|(_, (pa, a)), (_, (pb, b))| {
                pa.cmp(pb).then(
                    distance(&needed, &a.allocated_resources.comparable())
                        .total_cmp(&distance(&needed, &b.allocated_resources.comparable())),
                )
            })
            .map(|(i, _)| i)?;
        let (p, alloc) = candidates.swap_remove(best);
        needed.sub(&alloc.allocated_resources.comparable());
        chosen.push((p, alloc));
    }
    // Hand back the highest-priority choices that were not needed after all.
    chosen.sort_by_key(|c| std::cmp::Reverse(c.0));
    let mut i = 0;
    while i < chosen.len() {
        let mut without = needed;
        without.add(&chosen[i].1.allocated_resources.comparable());
        if is_satisfied(&without) {
            needed = without;
            chosen.remove(i);
        } else {
            i += 1;
        }
    }
    Some(chosen.into_iter().map(|(_, a)| a).collect())
}

/// What is missing for `ask` to fit (positive components are shortfalls).
fn missing(
    capacity: &ComparableResources,
    used: &ComparableResources,
    ask: &ComparableResources,
) -> ComparableResources {
    let mut m = *used;
    m.add(ask);
    m.sub(capacity);
    m
}

fn is_satisfied(needed: &ComparableResources) -> bool {
    needed.cpu <= 0 && needed.memory_mb <= 0 && needed.disk_mb <= 0
}

/// How far an allocation's size is from the shortfall (Euclidean over the
/// relative differences of the dimensions still missing).
fn distance(needed: &ComparableResources, have: &ComparableResources) -> f64 {
    let rel = |need: i64, got: i64| {
        if need <= 0 {
            0.0
        } else {
            (need - got) as f64 / need as f64
        }
    };
    let c = rel(needed.cpu, have.cpu);
    let m = rel(needed.memory_mb, have.memory_mb);
    let d = rel(needed.disk_mb, have.disk_mb);
    (c * c + m * m + d * d).sqrt()
}
