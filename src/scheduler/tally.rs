//! Filter and exhaustion counts of one placement, tallied cheaply while the
//! stack scans candidates and written into the placement's
//! [`AllocMetric`] once at the end.
//!
//! `AllocMetric`'s own counters key their maps by owned strings, so
//! recording a filtered or exhausted candidate there allocates two keys;
//! when a nearly full cluster makes most candidates exhausted that cost
//! more than scoring them. Here node classes are numbered by the stack and
//! reasons are shared strings, so a candidate costs a vector increment and
//! a short scan; the resulting metric is the same.

use crate::structs::{AllocMetric, CountMap};
use std::sync::Arc;

#[derive(Default)]
pub struct MetricTally {
    filtered: u64,
    exhausted: u64,
    /// Indexed by the stack's node class numbers.
    class_filtered: Vec<u64>,
    class_exhausted: Vec<u64>,
    /// Few distinct reasons per placement: scanned, not hashed.
    constraint_filtered: Vec<(Arc<str>, u64)>,
    dimension_exhausted: Vec<(&'static str, u64)>,
}

impl MetricTally {
    /// A candidate of node class `class` failed `reason`.
    pub fn filter(&mut self, class: u32, reason: &Arc<str>) {
        self.filtered += 1;
        bump(&mut self.class_filtered, class);
        match self
            .constraint_filtered
            .iter_mut()
            .find(|(r, _)| Arc::ptr_eq(r, reason) || **r == **reason)
        {
            Some((_, n)) => *n += 1,
            None => self.constraint_filtered.push((reason.clone(), 1)),
        }
    }

    /// A candidate of node class `class` lacked room in `dimension`.
    pub fn exhaust(&mut self, class: u32, dimension: &'static str) {
        self.exhausted += 1;
        bump(&mut self.class_exhausted, class);
        match self
            .dimension_exhausted
            .iter_mut()
            // Dimensions are the resources' own constants: the pointer
            // tells them apart but for a copy of the same text.
            .find(|(d, _)| std::ptr::eq(*d, dimension) || *d == dimension)
        {
            Some((_, n)) => *n += 1,
            None => self.dimension_exhausted.push((dimension, 1)),
        }
    }

    /// Forgets the counts (a placement started over).
    pub fn clear(&mut self) {
        self.filtered = 0;
        self.exhausted = 0;
        self.class_filtered.clear();
        self.class_exhausted.clear();
        self.constraint_filtered.clear();
        self.dimension_exhausted.clear();
    }

    /// Adds the counts to `metric` as its own counters would have (empty
    /// class names and reasons are not keyed) and starts over.
    /// `class_name` maps the stack's class numbers to node classes.
    pub fn flush_into<'n>(
        &mut self,
        metric: &mut AllocMetric,
        class_name: impl Fn(usize) -> &'n str,
    ) {
        metric.nodes_filtered += self.filtered;
        metric.nodes_exhausted += self.exhausted;
        for (class, n) in drain_counts(&mut self.class_filtered) {
            add_named(&mut metric.class_filtered, class_name(class), n);
        }
        for (class, n) in drain_counts(&mut self.class_exhausted) {
            add_named(&mut metric.class_exhausted, class_name(class), n);
        }
        for (reason, n) in self.constraint_filtered.drain(..) {
            add_named(&mut metric.constraint_filtered, &reason, n);
        }
        for (dimension, n) in self.dimension_exhausted.drain(..) {
            add_named(&mut metric.dimension_exhausted, dimension, n);
        }
        self.filtered = 0;
        self.exhausted = 0;
    }
}

fn bump(counts: &mut Vec<u64>, class: u32) {
    let i = class as usize;
    if counts.len() <= i {
        counts.resize(i + 1, 0);
    }
    counts[i] += 1;
}

/// The non-zero counts by index, leaving zeros behind.
fn drain_counts(counts: &mut [u64]) -> impl Iterator<Item = (usize, u64)> + '_ {
    counts
        .iter_mut()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(i, n)| (i, std::mem::take(n)))
}

fn add_named(map: &mut CountMap, name: &str, n: u64) {
    if !name.is_empty() {
        map.add(name, n);
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn flushing_gives_what_the_metric_counters_give() {
        let classes = ["small".to_string(), String::new(), "large".to_string()];
        let cpu: Arc<str> = Arc::from("${attr.cpu} > 2");
        let same_text: Arc<str> = Arc::from("${attr.cpu} > 2");
        let mut expected = AllocMetric::default();
        let mut tally = MetricTally::default();
        for (class, reason) in [(0, &cpu), (1, &same_text), (2, &cpu), (0, &cpu)] {
            expected.filter_node(&classes[class as usize], reason);
            tally.filter(class, reason);
        }
        for (class, dimension) in [(2, "memory"), (2, "cpu"), (1, "memory")] {
            expected.exhausted_node(&classes[class as usize], dimension);
            tally.exhaust(class, dimension);
        }
        let mut got = AllocMetric::default();
        tally.flush_into(&mut got, |c| &classes[c]);
        assert_eq!(got, expected);
        // Flushing starts over: a second flush adds nothing.
        tally.flush_into(&mut got, |c| &classes[c]);
        assert_eq!(got, expected);
    }
}
