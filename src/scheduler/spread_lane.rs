//! The spread lane: what a spread placement needs of the candidates it has
//! already scored on untouched nodes, packed in the walk's order.
//!
//! A group with a spread compares about `count` candidates per placement,
//! so a 1,000-allocation spread job visits each of 10,000 nodes about a
//! hundred times. On a node nothing in the evaluation has touched, every
//! one of those visits gives the same answer but for the spread's boost:
//! the class is feasible, the group fits with the same fit score, and the
//! node's attribute value is fixed. Only the boost moves, and it depends on
//! the value alone (the counts are fixed for the length of one placement).
//!
//! So after the full path has scored such a candidate once, the lane keeps
//! its fit and value in one 16-byte entry per candidate slot, read in slot
//! order (the walk's order), and a placement scores a revisit from a table
//! of boosts by value computed once per placement. Without the lane a
//! revisit read the touched-node marks and the attribute column by catalog
//! position: shuffled reads, a cache miss each, on every visit.
//!
//! A node the group does not fit on is remembered too, with the first
//! resource it lacks: a revisit only counts it exhausted, unless the
//! placement may preempt (then the full path looks for evictions).
//!
//! An entry is valid for one group (its stamp) while the node stays
//! untouched. The evaluation's context logs every node it marks touched
//! (`EvalContext::touched_log`); the lane drains that log before it
//! answers and forgets the entries of those nodes. Nodes are never
//! untouched again within an evaluation, so nothing else invalidates an
//! entry. The stack decides when the lane may answer (one spread, no
//! affinity, no reschedule penalty: see `Stack::lane_boosts`); the scores it
//! answers are bit for bit those of the full path, which the scheduler's
//! tests check by running the same evaluations with and without the usage
//! column (no column, no lane).

/// An entry's value when the node lacks the spread's attribute.
pub const VALUE_MISSING: u32 = u32::MAX;
/// An entry's value when the group does not fit on the node.
const VALUE_EXHAUSTED: u32 = u32::MAX - 1;

/// One candidate's remembered outcome: the group (stamp; 0 none) that fits
/// there, the node's spread value, and the fit score.
#[derive(Clone, Copy, Default)]
struct LaneEntry {
    stamp: u32,
    value: u32,
    fit: f64,
}

/// What the lane answers for a revisited candidate that fits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaneHit {
    pub fit: f64,
    /// The spread's boost for the node's value in this placement.
    pub boost: f64,
}

/// What the lane answers for a revisited candidate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LaneAnswer {
    Fits(LaneHit),
    /// The group does not fit: the first resource the node lacks.
    Exhausted(&'static str),
}

#[derive(Default)]
pub struct SpreadLane {
    /// By candidate slot.
    entries: Vec<LaneEntry>,
    /// By candidate slot, for the exhausted entries: the resource lacking
    /// (read only for those).
    lacking: Vec<&'static str>,
    /// Candidate slot by catalog position, built on the first drain that
    /// finds entries to forget (empty until then).
    slot_of: Vec<u32>,
    /// How much of the context's touched-node log has been drained.
    log_seen: usize,
    /// Whether any entry was remembered since the last reset.
    filled: bool,
    /// The group whose placement is in progress, when the lane may answer
    /// for it (0: it may not).
    active: u32,
    /// Whether exhausted entries may answer in this placement (not when
    /// it may preempt).
    exhausted_answer: bool,
    /// Boost by interned value for the placement in progress.
    boosts: Vec<f64>,
    missing_boost: f64,
}

impl SpreadLane {
    /// Forgets every entry: the candidate list changed (`len` slots now).
    pub fn reset(&mut self, len: usize) {
        self.entries.clear();
        self.entries.resize(len, LaneEntry::default());
        self.lacking.clear();
        self.lacking.resize(len, "");
        self.slot_of.clear();
        self.active = 0;
        self.filled = false;
    }

    /// Lets the lane answer for group `stamp` in the placement starting,
    /// with the boosts of every value (`boosts[v]`) and of a node without
    /// the attribute; exhausted nodes too unless the placement may
    /// `preempt`. `stamp` 0 turns the lane off for the placement.
    pub fn activate(
        &mut self,
        stamp: u32,
        preempt: bool,
        boosts: impl Iterator<Item = f64>,
        missing: f64,
    ) {
        self.active = stamp;
        self.exhausted_answer = !preempt;
        self.boosts.clear();
        if stamp != 0 {
            self.boosts.extend(boosts);
            self.missing_boost = missing;
        }
    }

    /// Turns the lane off for the rest of the placement.
    pub fn deactivate(&mut self) {
        self.active = 0;
    }

    /// The group the lane answers for in this placement (0: none).
    #[inline(always)]
    pub fn active(&self) -> u32 {
        self.active
    }

    /// Forgets the entries of the nodes touched since the last call.
    /// `log` is the context's whole touched-node log (it only grows within
    /// an evaluation); `order` the candidates' catalog positions by slot.
    #[inline(always)]
    pub fn forget_touched(&mut self, log: &[u32], order: &[u32]) {
        if log.len() != self.log_seen {
            self.drain(log, order);
        }
    }

    #[cold]
    #[inline(never)]
    fn drain(&mut self, log: &[u32], order: &[u32]) {
        let touched = log.get(self.log_seen..).unwrap_or(&[]);
        self.log_seen = log.len();
        if !self.filled {
            return;
        }
        if self.slot_of.is_empty() {
            let len = order.iter().map(|p| *p as usize + 1).max().unwrap_or(0);
            self.slot_of = vec![u32::MAX; len];
            for (slot, position) in order.iter().enumerate() {
                self.slot_of[*position as usize] = slot as u32;
            }
        }
        for position in touched {
            let slot = self.slot_of.get(*position as usize).copied();
            if let Some(entry) = slot.and_then(|s| self.entries.get_mut(s as usize)) {
                entry.stamp = 0;
            }
        }
    }

    /// The candidate at `slot`'s outcome, if the lane holds it for the
    /// active group (the log drained first).
    #[inline(always)]
    pub fn hit(&self, slot: usize) -> Option<LaneAnswer> {
        let entry = self.entries.get(slot)?;
        if entry.stamp == 0 || entry.stamp != self.active {
            return None;
        }
        let boost = match entry.value {
            VALUE_MISSING => self.missing_boost,
            VALUE_EXHAUSTED if self.exhausted_answer => {
                return self.lacking.get(slot).map(|d| LaneAnswer::Exhausted(d));
            }
            VALUE_EXHAUSTED => return None,
            v => *self.boosts.get(v as usize)?,
        };
        Some(LaneAnswer::Fits(LaneHit {
            fit: entry.fit,
            boost,
        }))
    }

    /// Remembers that the active group fits on the untouched node at
    /// `slot` with this fit, its spread value `value` (or
    /// [`VALUE_MISSING`]).
    #[inline]
    pub fn remember(&mut self, slot: usize, value: u32, fit: f64) {
        debug_assert_ne!(value, VALUE_EXHAUSTED, "not an attribute value");
        self.set(slot, value, fit);
    }

    /// Remembers that the active group does not fit on the untouched node
    /// at `slot`, for lack of `dimension`.
    #[inline]
    pub fn remember_exhausted(&mut self, slot: usize, dimension: &'static str) {
        if let Some(lacking) = self.lacking.get_mut(slot) {
            *lacking = dimension;
            self.set(slot, VALUE_EXHAUSTED, 0.0);
        }
    }

    fn set(&mut self, slot: usize, value: u32, fit: f64) {
        let stamp = self.active;
        if let Some(entry) = self.entries.get_mut(slot) {
            *entry = LaneEntry { stamp, value, fit };
            self.filled = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane_with_two_values() -> SpreadLane {
        let mut lane = SpreadLane::default();
        lane.reset(3);
        lane.activate(1, false, [0.5, -0.25].into_iter(), -1.0);
        lane
    }

    fn fits(fit: f64, boost: f64) -> Option<LaneAnswer> {
        Some(LaneAnswer::Fits(LaneHit { fit, boost }))
    }

    #[test]
    fn a_remembered_candidate_is_scored_from_the_placements_boosts() {
        let mut lane = lane_with_two_values();
        lane.remember(0, 1, 0.75);
        lane.remember(2, VALUE_MISSING, 0.5);
        assert_eq!(lane.hit(0), fits(0.75, -0.25));
        assert_eq!(lane.hit(1), None, "never remembered");
        assert_eq!(lane.hit(2), fits(0.5, -1.0));
        // The next placement's counts change the boosts, not the entries.
        lane.activate(1, false, [0.0, 0.125].into_iter(), -1.0);
        assert_eq!(lane.hit(0), fits(0.75, 0.125));
    }

    #[test]
    fn entries_answer_only_for_their_group_and_only_while_active() {
        let mut lane = lane_with_two_values();
        lane.remember(0, 0, 0.75);
        lane.activate(2, false, [0.5, -0.25].into_iter(), -1.0);
        assert_eq!(lane.hit(0), None, "another group");
        lane.activate(1, false, [0.5, -0.25].into_iter(), -1.0);
        lane.deactivate();
        assert_eq!(lane.hit(0), None, "off for this placement");
    }

    #[test]
    fn a_touched_node_is_forgotten_and_a_new_candidate_list_forgets_all() {
        let mut lane = lane_with_two_values();
        // Slots 0, 1, 2 hold catalog positions 7, 3, 5.
        let order = [7, 3, 5];
        lane.remember(0, 0, 0.75);
        lane.remember(2, 1, 0.5);
        lane.forget_touched(&[5, 9], &order);
        assert!(lane.hit(0).is_some());
        assert_eq!(lane.hit(2), None, "position 5 was touched");
        // Only what was logged since: slot 2 is remembered again.
        lane.remember(2, 1, 0.5);
        lane.forget_touched(&[5, 9, 7], &order);
        assert!(lane.hit(2).is_some(), "position 5 was drained before");
        assert_eq!(lane.hit(0), None, "position 7 was touched");
        lane.reset(3);
        lane.activate(1, false, [0.5, -0.25].into_iter(), -1.0);
        assert_eq!(lane.hit(0), None);
    }

    #[test]
    fn an_exhausted_node_answers_unless_the_placement_may_preempt() {
        let mut lane = lane_with_two_values();
        lane.remember_exhausted(1, "memory");
        assert_eq!(lane.hit(1), Some(LaneAnswer::Exhausted("memory")));
        lane.activate(1, true, [0.5, -0.25].into_iter(), -1.0);
        assert_eq!(lane.hit(1), None, "evictions could make room");
    }
}
