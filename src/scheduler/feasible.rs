//! Feasibility: can a task group run on a node at all, ignoring capacity?
//!
//! Constraints are written over node targets (`${attr.*}`, `${meta.*}`,
//! `${node.*}`); every operator Nomad knows is supported. Results that only
//! depend on a node's computed class are cached per class for the length of
//! an evaluation, the way Nomad avoids re-checking thousands of identical
//! nodes; a group whose constraints read node-unique values "escapes" the
//! cache and is checked node by node. `distinct_hosts` and
//! `distinct_property` depend on where the job already runs, so they are
//! checked by the stack against the plan, not here.

use crate::structs::job::operand;
use crate::structs::job::VolumeRequest;
use crate::structs::version::VersionConstraint;
use crate::structs::{Constraint, Job, Node, TaskGroup};
use crate::view::node_target::resolve_target;
use regex::Regex;
use std::collections::HashMap;
use std::sync::Arc;

/// Whether a target reads a value unique to each node (so node classes
/// cannot stand in for nodes).
pub fn target_is_unique(target: &str) -> bool {
    target.contains("unique.")
}

/// Compiled regexes and version constraints, kept for the evaluation.
#[derive(Default)]
pub struct ConstraintCache {
    regexes: HashMap<String, Option<Regex>>,
    versions: HashMap<(String, bool), Option<VersionConstraint>>,
}

impl ConstraintCache {
    fn regex(&mut self, pattern: &str) -> Option<&Regex> {
        self.regexes
            .entry(pattern.to_string())
            .or_insert_with(|| Regex::new(pattern).ok())
            .as_ref()
    }

    fn version(&mut self, spec: &str, strict: bool) -> Option<&VersionConstraint> {
        self.versions
            .entry((spec.to_string(), strict))
            .or_insert_with(|| VersionConstraint::parse(spec, strict).ok())
            .as_ref()
    }
}

/// Evaluates `l <operand> r` where either side may be missing.
pub fn check_operand(
    op: &str,
    l: Option<&str>,
    r: Option<&str>,
    cache: &mut ConstraintCache,
) -> bool {
    match op {
        operand::EQ | operand::EQ2 | operand::IS => matches!((l, r), (Some(a), Some(b)) if a == b),
        operand::NE | operand::NOT => l != r,
        operand::LT | operand::LE | operand::GT | operand::GE => match (l, r) {
            (Some(a), Some(b)) => check_order(op, a, b),
            _ => false,
        },
        operand::REGEXP => match (l, r) {
            (Some(a), Some(b)) => cache.regex(b).is_some_and(|re| re.is_match(a)),
            _ => false,
        },
        operand::VERSION | operand::SEMVER => match (l, r) {
            (Some(a), Some(b)) => cache
                .version(b, op == operand::SEMVER)
                .is_some_and(|v| v.matches(a)),
            _ => false,
        },
        operand::SET_CONTAINS | operand::SET_CONTAINS_ALL => match (l, r) {
            (Some(a), Some(b)) => {
                let have = split_set(a);
                split_set(b).iter().all(|x| have.contains(x))
            }
            _ => false,
        },
        operand::SET_CONTAINS_ANY => match (l, r) {
            (Some(a), Some(b)) => {
                let have = split_set(a);
                split_set(b).iter().any(|x| have.contains(x))
            }
            _ => false,
        },
        operand::IS_SET => l.is_some(),
        operand::IS_NOT_SET => l.is_none(),
        // Placement-dependent operators are checked by the stack.
        operand::DISTINCT_HOSTS | operand::DISTINCT_PROPERTY => true,
        _ => false,
    }
}

fn split_set(s: &str) -> Vec<&str> {
    s.split(',').map(str::trim).collect()
}

/// Numeric comparison when both sides are numbers, lexical otherwise, as
/// Nomad's `checkOrder`.
fn check_order(op: &str, l: &str, r: &str) -> bool {
    use std::cmp::Ordering;
    let ord = match (l.trim().parse::<f64>(), r.trim().parse::<f64>()) {
        (Ok(a), Ok(b)) => a.partial_cmp(&b),
        _ => Some(l.cmp(r)),
    };
    let Some(ord) = ord else { return false };
    match op {
        operand::LT => ord == Ordering::Less,
        operand::LE => ord != Ordering::Greater,
        operand::GT => ord == Ordering::Greater,
        operand::GE => ord != Ordering::Less,
        _ => false,
    }
}

/// Whether a node satisfies one constraint (placement-dependent operators
/// always pass here).
pub fn node_meets(node: &Node, c: &Constraint, cache: &mut ConstraintCache) -> bool {
    let l = resolve_target(&c.l_target, node);
    let r = if c.r_target.is_empty() {
        None
    } else {
        resolve_target(&c.r_target, node)
    };
    check_operand(&c.operand, l.as_deref(), r.as_deref(), cache)
}

/// A `distinct_property` rule: at most `limit` allocations per value of
/// `attribute`, over the whole job or one group.
#[derive(Clone, Debug)]
pub struct DistinctProperty {
    pub attribute: String,
    pub limit: u64,
    pub group_scoped: bool,
    pub label: String,
}

/// The static (class-cacheable) feasibility of one task group.
pub struct GroupFeasibility {
    constraints: Vec<Constraint>,
    labels: Vec<Arc<str>>,
    drivers: Vec<String>,
    /// Host volumes the group needs: (source on the node, read-only).
    host_volumes: Vec<(String, bool)>,
    /// A constraint reads node-unique values: no class caching.
    pub escaped: bool,
    /// `distinct_hosts` on the job: one allocation of the job per node.
    pub distinct_hosts_job: bool,
    /// `distinct_hosts` on the group: one allocation of the group per node.
    pub distinct_hosts_group: bool,
    pub distinct_properties: Vec<DistinctProperty>,
    /// Results per interned class number (see the stack's class table).
    class_cache: Vec<Option<Result<(), Arc<str>>>>,
}

const MISSING_DRIVERS: &str = "missing drivers";
/// Nomad's name for the filter, as `nomad job plan` shows it.
const MISSING_HOST_VOLUMES: &str = "missing compatible host volumes";

impl GroupFeasibility {
    pub fn new(job: &Job, tg: &TaskGroup) -> Self {
        let task_constraints = tg.tasks.iter().flat_map(|t| t.constraints.iter());
        let mut me = GroupFeasibility {
            constraints: Vec::new(),
            labels: Vec::new(),
            drivers: Vec::new(),
            host_volumes: tg
                .volumes
                .values()
                .filter(|v| v.volume_type == VolumeRequest::HOST)
                .map(|v| (v.source.clone(), v.read_only))
                .collect(),
            escaped: false,
            distinct_hosts_job: false,
            distinct_hosts_group: false,
            distinct_properties: Vec::new(),
            class_cache: Vec::new(),
        };
        let scoped = job
            .constraints
            .iter()
            .map(|c| (c, false))
            .chain(tg.constraints.iter().map(|c| (c, true)))
            .chain(task_constraints.map(|c| (c, true)));
        for (c, group_scoped) in scoped {
            match c.operand.as_str() {
                operand::DISTINCT_HOSTS => {
                    // `distinct_hosts = false` is allowed and means nothing.
                    if c.r_target.is_empty() || c.r_target == "true" {
                        if group_scoped {
                            me.distinct_hosts_group = true;
                        } else {
                            me.distinct_hosts_job = true;
                        }
                    }
                }
                operand::DISTINCT_PROPERTY => me.distinct_properties.push(DistinctProperty {
                    attribute: c.l_target.clone(),
                    limit: c.r_target.parse().unwrap_or(1).max(1),
                    group_scoped,
                    label: c.to_string(),
                }),
                _ => {
                    if target_is_unique(&c.l_target) || target_is_unique(&c.r_target) {
                        me.escaped = true;
                    }
                    me.labels.push(Arc::from(c.to_string()));
                    me.constraints.push(c.clone());
                }
            }
        }
        for t in &tg.tasks {
            if !t.driver.is_empty() && !me.drivers.contains(&t.driver) {
                me.drivers.push(t.driver.clone());
            }
        }
        me
    }

    /// The class cache's answer for a node of interned class `class`, if
    /// the class was checked already and the group does not escape the
    /// cache; `None` means [`check`](Self::check) must look at the node.
    #[inline]
    pub fn cached(&self, class: Option<u32>) -> Option<&Result<(), Arc<str>>> {
        if self.escaped {
            return None;
        }
        self.class_cache.get(class? as usize)?.as_ref()
    }

    /// Checks drivers and constraints, answering from the class cache when
    /// the group does not escape it. `Err` names the failed constraint; the
    /// flag says the node's class was checked for the first time (so its
    /// eligibility is news).
    /// `class` is the node's interned computed class (`None` when it has
    /// none).
    pub fn check(
        &mut self,
        node: &Node,
        class: Option<u32>,
        cache: &mut ConstraintCache,
    ) -> (Result<(), Arc<str>>, bool) {
        match class {
            Some(class) if !self.escaped => {
                let slot = class as usize;
                if let Some(Some(r)) = self.class_cache.get(slot) {
                    return (r.clone(), false);
                }
                let r = self.check_uncached(node, cache);
                if self.class_cache.len() <= slot {
                    self.class_cache.resize(slot + 1, None);
                }
                self.class_cache[slot] = Some(r.clone());
                (r, true)
            }
            _ => (self.check_uncached(node, cache), false),
        }
    }

    fn check_uncached(&self, node: &Node, cache: &mut ConstraintCache) -> Result<(), Arc<str>> {
        if !self.drivers.iter().all(|d| node.has_healthy_driver(d)) {
            return Err(Arc::from(MISSING_DRIVERS));
        }
        // A writable request needs a writable volume; a read-only one
        // takes either.
        let offers = |(source, read_only): &(String, bool)| {
            node.host_volumes
                .get(source)
                .is_some_and(|v| *read_only || !v.read_only)
        };
        if !self.host_volumes.iter().all(offers) {
            return Err(Arc::from(MISSING_HOST_VOLUMES));
        }
        for (c, label) in self.constraints.iter().zip(&self.labels) {
            if !node_meets(node, c, cache) {
                return Err(label.clone());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn order_is_numeric_when_both_numbers() {
        assert!(check_order("<", "9", "10"));
        assert!(!check_order("<", "b", "a"));
        assert!(check_order(">=", "2.5", "2.5"));
    }
}
