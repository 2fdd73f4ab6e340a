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

/// The key an entry keeps for `value`: its place in the score terms,
/// whose layout is the exhausted (never quiet), the missing value, each
/// value in turn, then a last never-quiet place for a value past the
/// boosts. Adding two maps the two high values to the first two places,
/// so the walk finds any entry's term with one clamp and no branch.
const fn key_of(value: u32) -> u32 {
    value.wrapping_add(2)
}
const KEY_EXHAUSTED: u32 = key_of(VALUE_EXHAUSTED);
const KEY_MISSING: u32 = key_of(VALUE_MISSING);
const _: () = assert!(KEY_EXHAUSTED == 0 && KEY_MISSING == 1);

/// One candidate's remembered outcome: the group (stamp; 0 none) that fits
/// there, the key of the node's spread value (see [`key_of`]), and the fit
/// score.
#[derive(Clone, Copy, Default)]
struct LaneEntry {
    stamp: u32,
    key: u32,
    fit: f64,
}

/// What the lane answers for a revisited candidate that fits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaneHit {
    pub fit: f64,
    /// The spread's boost for the node's value in this placement.
    pub boost: f64,
}

impl LaneHit {
    /// The candidate's final score: what `Scores::final_score` gives for a
    /// fit and (when not zero) a spread component, by the same operations,
    /// so the same bits (the stack asserts it).
    #[inline(always)]
    pub fn final_score(self) -> f64 {
        if self.boost != 0.0 {
            (self.fit + self.boost) / 2.0
        } else {
            self.fit / 1.0
        }
    }
}

/// How a value's boost enters a remembered fit's score, as
/// [`LaneHit::final_score`] computes it: `(fit + add) * scale`. Halving by
/// multiplying with 0.5 rounds to the same bits as dividing by 2 (both are
/// the one exact half of the rounded sum), and a zero boost adds zero
/// (which can only turn a -0.0 fit into +0.0, equal in every comparison)
/// and scales by one. A NaN `add` makes the score NaN: never quiet.
#[derive(Clone, Copy)]
struct ScoreTerm {
    add: f64,
    scale: f64,
}

impl ScoreTerm {
    const NEVER_QUIET: ScoreTerm = ScoreTerm {
        add: f64::NAN,
        scale: 1.0,
    };

    fn of_boost(boost: f64) -> ScoreTerm {
        if boost != 0.0 {
            ScoreTerm {
                add: boost,
                scale: 0.5,
            }
        } else {
            ScoreTerm {
                add: 0.0,
                scale: 1.0,
            }
        }
    }

    #[inline(always)]
    fn score(self, fit: f64) -> f64 {
        (fit + self.add) * self.scale
    }
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
    /// By value key (see [`key_of`]): how the value's boost enters a
    /// remembered fit's score in this placement; empty while inactive.
    terms: Vec<ScoreTerm>,
}

/// The lane's entries and score terms with the placement's bar and floor,
/// borrowed for a walk: what [`quiet_run`](Self::quiet_run) reads, in
/// locals the loop keeps in registers.
pub struct QuietView<'a> {
    entries: &'a [LaneEntry],
    terms: &'a [ScoreTerm],
    active: u32,
    bar: f64,
    floor: f64,
}

impl QuietView<'_> {
    /// Whether the candidate at `slot` fits with a score that changes
    /// nothing but the count: at or below the bar and above the floor.
    #[cfg(test)]
    pub fn quiet(&self, slot: usize) -> bool {
        self.quiet_run(slot, 1) == 1
    }

    /// How many candidates from `slot` on, at most `room`, are quiet (see
    /// [`quiet`](Self::quiet)): the walk's count of revisits that change
    /// nothing. A loop over a slice, with the terms' index clamped below
    /// their length, so no entry or term is checked for range in it.
    ///
    /// Each entry's score is computed as the full path would (the same
    /// bits, see [`ScoreTerm`]) and compared with the bar itself. An
    /// earlier form compared fits with per-value bounds worked out from
    /// the bar; their rounding could not always be pinned, so alike nodes
    /// were scored again in full, and the bounds were worked out again at
    /// each new bar. Two float operations an entry cost less than both.
    #[inline(always)]
    pub fn quiet_run(&self, slot: usize, room: usize) -> usize {
        let Some(last) = self.terms.len().checked_sub(1) else {
            return 0;
        };
        let ahead = self.entries.get(slot..).unwrap_or(&[]);
        let ahead = ahead.get(..room).unwrap_or(ahead);
        ahead
            .iter()
            .take_while(|entry| {
                // A key past the terms is a value past the boosts: the
                // last place, never quiet (see `key_of`).
                let score = self.terms[(entry.key as usize).min(last)].score(entry.fit);
                entry.stamp == self.active && score <= self.bar && score > self.floor
            })
            .count()
    }
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
        self.terms.clear();
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
        self.terms.clear();
        if stamp != 0 {
            self.boosts.extend(boosts);
            self.missing_boost = missing;
            // By key (see `key_of`): the exhausted's, the missing value's,
            // each value's, then the place of a value past the boosts.
            let keyed = self.boosts.iter().map(|b| ScoreTerm::of_boost(*b));
            self.terms.push(ScoreTerm::NEVER_QUIET);
            self.terms.push(ScoreTerm::of_boost(missing));
            self.terms.extend(keyed);
            self.terms.push(ScoreTerm::NEVER_QUIET);
        }
    }

    /// The entries for a walk against the placement's `bar` (a score at
    /// or below it changes nothing but the count) and, when put-aside room
    /// is left, its `floor` (a score at or below it would be put aside).
    /// None is quiet while the lane is inactive.
    #[inline(always)]
    pub fn quiet_view(&self, bar: f64, floor: Option<f64>) -> QuietView<'_> {
        QuietView {
            entries: &self.entries,
            terms: if self.active != 0 { &self.terms } else { &[] },
            active: self.active,
            bar,
            floor: floor.unwrap_or(f64::NEG_INFINITY),
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
        let boost = match entry.key {
            KEY_MISSING => self.missing_boost,
            KEY_EXHAUSTED if self.exhausted_answer => {
                return self.lacking.get(slot).map(|d| LaneAnswer::Exhausted(d));
            }
            KEY_EXHAUSTED => return None,
            key => *self.boosts.get(key as usize - 2)?,
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
            *entry = LaneEntry {
                stamp,
                key: key_of(value),
                fit,
            };
            self.filled = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next float below `x` (`f64::next_down`, newer than our MSRV). NaN
    /// and minus infinity are returned as they are.
    fn next_toward_minus_infinity(x: f64) -> f64 {
        if x.is_nan() || x == f64::NEG_INFINITY {
            return x;
        }
        if x == 0.0 {
            return -f64::from_bits(1);
        }
        let bits = x.to_bits();
        f64::from_bits(if x > 0.0 { bits - 1 } else { bits + 1 })
    }

    /// The next float above `x` (`f64::next_up`). NaN and plus infinity are
    /// returned as they are.
    fn next_toward_plus_infinity(x: f64) -> f64 {
        -next_toward_minus_infinity(-x)
    }

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

    /// What `quiet` must answer: the walk's own test on the score.
    fn scored_quiet(lane: &SpreadLane, slot: usize, bar: f64, floor: Option<f64>) -> bool {
        match lane.hit(slot) {
            Some(LaneAnswer::Fits(hit)) => {
                let score = hit.final_score();
                score <= bar && floor.is_none_or(|f| score > f)
            }
            _ => false,
        }
    }

    #[test]
    fn quiet_is_the_score_at_or_below_the_bar_and_above_the_floor() {
        let mut lane = SpreadLane::default();
        lane.reset(4);
        lane.activate(1, false, [0.5, -0.25, 0.0].into_iter(), -1.0);
        lane.remember(0, 1, 0.75); // (0.75 - 0.25) / 2 = 0.25
        lane.remember(1, VALUE_MISSING, 0.5); // (0.5 - 1.0) / 2 = -0.25
        lane.remember(2, 2, 0.4); // no boost: 0.4
        lane.remember_exhausted(3, "memory");
        assert!(lane.quiet_view(0.25, None).quiet(0), "at the bar");
        assert!(lane.quiet_view(0.25, None).quiet(1));
        assert!(!lane.quiet_view(0.25, None).quiet(2), "above the bar");
        assert!(
            !lane.quiet_view(0.25, None).quiet(3),
            "exhausted: tallied by the walk"
        );
        assert!(
            !lane.quiet_view(0.25, Some(0.0)).quiet(1),
            "would be put aside"
        );
        assert!(
            !lane.quiet_view(0.25, Some(-0.25)).quiet(1),
            "at the floor is put aside"
        );
        assert!(
            !lane.quiet_view(f64::NEG_INFINITY, None).quiet(0),
            "no bar yet"
        );
        assert!(!lane.quiet_view(f64::NAN, None).quiet(0));
        lane.activate(2, false, [0.5, -0.25, 0.0].into_iter(), -1.0);
        assert!(
            !lane.quiet_view(1.0, None).quiet(0),
            "another group's entry"
        );
        // A value past the placement's boosts is never quiet (nor a hit),
        // even under a bar every fit clears, and it ends a run.
        lane.remember(1, 0, 0.5);
        lane.remember(2, 7, 0.5);
        lane.remember(3, 2, 0.5);
        assert!(lane.quiet_view(10.0, None).quiet(1) && lane.quiet_view(10.0, None).quiet(3));
        assert!(
            !lane.quiet_view(10.0, None).quiet(2),
            "a value past the boosts"
        );
        assert_eq!(lane.hit(2), None);
        assert_eq!(lane.quiet_view(10.0, None).quiet_run(1, 3), 1);
        lane.remember(2, VALUE_MISSING, 0.5);
        assert_eq!(
            lane.quiet_view(10.0, None).quiet_run(1, 3),
            3,
            "missing, a value"
        );
        // Through rounding: fits and boosts whose sums round, against bars
        // and floors at the score and a step or a few either side of it.
        // The quiet answer must be the walk's own every time: a bar set by
        // one node's score must find every alike node quiet (the common
        // case of alike nodes with alike usage).
        let boosts = [0.1, -0.3, 1.0 / 3.0, -1.0, 0.0, 2.0 / 7.0];
        let mut lane = SpreadLane::default();
        lane.reset(66);
        lane.activate(1, false, boosts.into_iter(), -0.7);
        let mut fits: Vec<f64> = (0..64).map(|i| f64::from(i) / 37.0).collect();
        fits.extend([-0.0, f64::MIN_POSITIVE / 3.0]);
        for (slot, fit) in fits.iter().enumerate() {
            let value = if slot % 7 == 6 {
                VALUE_MISSING
            } else {
                (slot % 6) as u32
            };
            lane.remember(slot, value, *fit);
        }
        for slot in 0..fits.len() {
            let exact = match lane.hit(slot) {
                Some(LaneAnswer::Fits(hit)) => hit.final_score(),
                _ => unreachable!("every slot fits"),
            };
            let mut bars = vec![exact];
            for _ in 0..3 {
                bars.push(next_toward_plus_infinity(*bars.last().unwrap()));
            }
            bars.push(next_toward_minus_infinity(exact));
            let floors = [None, Some(exact), Some(next_toward_minus_infinity(exact))];
            for (bar, floor) in bars.iter().flat_map(|&b| floors.map(|f| (b, f))) {
                let view = lane.quiet_view(bar, floor);
                // Every slot against this bar, so alike nodes are compared
                // with the one that set it.
                for other in 0..fits.len() {
                    assert_eq!(
                        view.quiet(other),
                        scored_quiet(&lane, other, bar, floor),
                        "slot {other} bar {bar:e} floor {floor:?}"
                    );
                }
            }
        }
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
