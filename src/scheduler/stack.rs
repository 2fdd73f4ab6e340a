//! The placement stack: from a shuffled list of candidate nodes, find the
//! best node for one allocation of a task group.
//!
//! The order of checks is Nomad's: a node is pulled from the (shuffled,
//! wrapping) source, checked for feasibility (class-cached constraints and
//! drivers, then `distinct_hosts` / `distinct_property` against the plan),
//! checked for fit (CPU, memory, disk, ports; evicting lower-priority work
//! when preemption is on), then scored. Only `limit` scored candidates are
//! considered per placement (about log2(n) for services, 2 for batch, at
//! least 100 when affinities or spreads make the choice matter), skipping
//! up to three candidates with non-positive scores, and the best is chosen.
//! Because the source resumes where the previous placement stopped,
//! consecutive placements look at different nodes.
//!
//! A worker's planner may name a share of the nodes ([`NodeShare`]): the
//! shuffled candidates of that share come first and the walk stays within
//! them (its *window*) until a placement finds no node there or a group's
//! limit is larger than the share; from then on the evaluation walks every
//! candidate. Concurrent workers thus plan on disjoint nodes while there is
//! room, and fewer of their plans are refused in part.
//!
//! With spreads a job scores about `count` candidates per placement, so the
//! per-candidate path is kept lean without changing any decision: what a
//! candidate's score needs is remembered per candidate slot (its usage
//! cache slot, its fit for its current usage, its spread values, and for
//! a node the evaluation has not touched whether the group fits there),
//! candidates travel as small records, filter and exhaustion counts are
//! tallied and written into the metrics once per placement, and the rare
//! paths (a class seen for the first time, preemption, ports, affinities,
//! distinct_*) are out of line. A group with one spread and nothing else
//! to score goes further: its revisits of untouched nodes are answered by
//! the spread lane (`spread_lane.rs`) in runs, in the walk's order,
//! from each candidate's fit and value and the placement's boost by value.

use super::context::{EvalContext, UsageHint};
use super::feasible::{check_operand, ConstraintCache, DistinctProperty, GroupFeasibility};
use super::planner::NodeShare;
use super::preemption::select_preemptions;
use super::rank::{apply_cores, assign_cores, assign_ports, fit_score, GroupAsk, CORES_EXHAUSTED};
use super::spread_lane::{LaneAnswer, LaneHit, SpreadLane, VALUE_MISSING};
use super::tally::MetricTally;
use crate::structs::{
    Affinity, AllocatedResources, Allocation, ComparableResources, Job, Node, NodeId,
    NodeScoreMeta, OwnScore, SchedulerAlgorithm, ScoreMap, TaskGroup,
};
use crate::view::catalog::{AttributeColumn, CandidateMeta, Interner, NodeCatalog};
use crate::view::fast_map::FastMap;
use crate::view::node_target::resolve_target;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::HashMap;
use std::sync::Arc;

/// Candidates with a final score at or below this may be skipped.
const SKIP_SCORE_THRESHOLD: f64 = 0.0;
/// How many low-scoring candidates may be skipped per placement.
const MAX_SKIP: usize = 3;
/// How many top candidates the metrics keep.
const TOP_SCORES: usize = 5;
/// The spread target matching every value not named explicitly.
const IMPLICIT_TARGET: &str = "*";
/// A share with fewer candidates than this is not walked alone: on a small
/// cluster every placement sees every node, as without shares.
const MIN_SHARE_CANDIDATES: usize = 100;

/// Which scheduler the stack serves; decides the candidate limit and the
/// score components.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackKind {
    Service,
    Batch,
    System,
}

/// Per-placement options.
#[derive(Clone, Debug, Default)]
pub struct SelectOptions {
    /// Nodes the allocation being rescheduled ran on: scored down.
    pub penalty_nodes: Vec<NodeId>,
    /// Evict lower-priority allocations if nothing fits otherwise.
    pub preempt: bool,
}

/// A score component besides the fit, which every candidate has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    JobAntiAffinity,
    ReschedulePenalty,
    NodeAffinity,
    Spread,
    /// Set when the placement evicts allocations: fewer and lower-priority
    /// evictions score higher.
    Preemption,
}

impl Component {
    /// In the order the final score sums them.
    const ALL: [Component; 5] = [
        Component::JobAntiAffinity,
        Component::ReschedulePenalty,
        Component::NodeAffinity,
        Component::Spread,
        Component::Preemption,
    ];

    /// The name in `ScoreMetaData`, as Nomad's.
    fn name(self) -> OwnScore {
        match self {
            Component::JobAntiAffinity => OwnScore::JobAntiAffinity,
            Component::ReschedulePenalty => OwnScore::NodeReschedulePenalty,
            Component::NodeAffinity => OwnScore::NodeAffinity,
            Component::Spread => OwnScore::AllocationSpread,
            Component::Preemption => OwnScore::Preemption,
        }
    }
}

/// The score components of one candidate (absent ones are not averaged).
/// Kept small and `Copy`: every candidate of a placement carries one.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scores {
    pub binpack: f64,
    /// Indexed by [`Component`]; meaningful where `present` has its bit.
    others: [f64; 5],
    present: u8,
    /// The sum of the present components and how many there are, kept as
    /// they are set (in component order, so the sum is the same as adding
    /// them up afterwards).
    sum: f64,
    count: u8,
}

impl Scores {
    fn with_fit(binpack: f64) -> Self {
        Scores {
            binpack,
            sum: binpack,
            count: 1,
            ..Default::default()
        }
    }

    /// Sets a component; components are set in [`Component`] order.
    fn set(&mut self, component: Component, value: f64) {
        debug_assert!(
            self.present >> component as u8 == 0,
            "{component:?} set out of order"
        );
        self.others[component as usize] = value;
        self.present |= 1 << component as u8;
        self.sum += value;
        self.count += 1;
    }

    pub fn get(&self, component: Component) -> Option<f64> {
        let i = component as usize;
        (self.present & (1 << i) != 0).then(|| self.others[i])
    }

    /// The mean of the present components. Summed in component order
    /// starting from the fit: bit for bit what summing them as an iterator
    /// (which starts from -0.0, the identity) gives.
    fn final_score(&self) -> f64 {
        self.sum / f64::from(self.count)
    }

    /// Whether both have the same components with bit-identical values
    /// (so their score maps are equal).
    fn same_as(&self, other: &Scores) -> bool {
        self.present == other.present
            && self.binpack.to_bits() == other.binpack.to_bits()
            && Component::ALL.into_iter().all(|c| {
                let i = c as usize;
                self.present & (1 << i) == 0
                    || self.others[i].to_bits() == other.others[i].to_bits()
            })
    }

    fn to_map(self, final_score: f64) -> ScoreMap {
        let mut values = [None; OwnScore::COUNT];
        values[OwnScore::Binpack as usize] = Some(self.binpack);
        for c in Component::ALL {
            values[c.name() as usize] = self.get(c);
        }
        values[OwnScore::NormalizedScore as usize] = Some(final_score);
        ScoreMap::of_own(&values)
    }
}

/// The score map of the last candidate recorded in the metrics, and what
/// it was made from: building a map names, sorts and allocates, and
/// consecutive placements often record equal scores (a system job's
/// nodes, alike and equally used, all do).
#[derive(Default)]
struct ScoreMapMemo {
    last: Option<(Scores, u64, ScoreMap)>,
}

impl ScoreMapMemo {
    fn map_of(&mut self, scores: &Scores, final_score: f64) -> ScoreMap {
        if let Some((s, f, map)) = &self.last {
            if *f == final_score.to_bits() && s.same_as(scores) {
                return map.clone();
            }
        }
        let map = scores.to_map(final_score);
        self.last = Some((*scores, final_score.to_bits(), map.clone()));
        map
    }
}

/// The chosen node and what the allocation is granted there.
pub struct RankedNode {
    pub node: Arc<Node>,
    pub final_score: f64,
    pub scores: Scores,
    /// Allocations to evict for this placement.
    pub preempted: Vec<Arc<Allocation>>,
}

/// A candidate that is feasible and fits, with its final score. Small, so
/// that handing candidates through the limit and max-score steps is cheap;
/// its score components travel beside it, only as far as they are needed.
struct Scored {
    /// Position of the node in the candidate list.
    slot: usize,
    final_score: f64,
    /// Only for placements with ports or evictions.
    grant: Option<Box<Grant>>,
}

/// What a candidate would be granted beyond the group's template.
#[derive(Default)]
struct Grant {
    /// Set when ports had to be assigned; otherwise the group's template.
    resources: Option<AllocatedResources>,
    /// Allocations to evict for this placement.
    preempted: Vec<Arc<Allocation>>,
}

const SLOT_UNKNOWN: u32 = u32::MAX;
const SLOT_MISSING: u32 = u32::MAX - 1;

/// Where a candidate sits in the stack's current candidate list; the
/// generation changes whenever the list does.
#[derive(Clone, Copy)]
struct SlotRef {
    slot: usize,
    /// The candidate's catalog position (`None` for a node given directly).
    position: Option<u32>,
    len: usize,
    generation: u64,
}

/// Counts the evaluation job's live allocations per value of a node
/// attribute (for spread scoring and distinct_property), updated from the
/// context's plan log rather than recomputed. Values are interned so the
/// per-candidate work is a map lookup by node ID and a vector index.
struct PropertyCounter {
    /// Interned values by candidate slot (see [`SlotRef`]), so repeated
    /// visits of a candidate do not even hash its ID.
    slot_values: Vec<u32>,
    slot_generation: u64,
    attribute: String,
    group: Option<Arc<str>>,
    value_ids: FastMap<String, u32>,
    values: Vec<String>,
    counts: Vec<u64>,
    node_values: FastMap<NodeId, Option<u32>>,
    /// The attribute on every catalog node; its value numbers are this
    /// counter's first ones.
    column: Option<Arc<AttributeColumn>>,
    log_offset: usize,
    initialised: bool,
}

impl PropertyCounter {
    fn new(attribute: &str, group: Option<&str>) -> Self {
        PropertyCounter {
            slot_values: Vec::new(),
            slot_generation: 0,
            attribute: attribute.to_string(),
            group: group.map(Arc::from),
            value_ids: FastMap::default(),
            values: Vec::new(),
            counts: Vec::new(),
            node_values: FastMap::default(),
            column: None,
            log_offset: 0,
            initialised: false,
        }
    }

    fn sync(&mut self, ctx: &EvalContext, job: &Job, catalog: &NodeCatalog) {
        if !self.initialised {
            self.initialised = true;
            let column = catalog.attribute_column(&self.attribute);
            for value in column.values() {
                self.intern(value);
            }
            self.column = Some(column);
            let allocs = if ctx.is_job(&job.namespace, &job.id) {
                ctx.job_allocs_in_state()
            } else {
                Arc::new(ctx.state.allocs_by_job(&job.namespace, &job.id))
            };
            for alloc in allocs.iter() {
                if !alloc.is_terminal() && self.group_matches(&alloc.task_group) {
                    self.add(ctx, alloc.node_id, 1);
                }
            }
        }
        let start = self.log_offset;
        self.log_offset = ctx.plan_log.len();
        for change in &ctx.plan_log[start..] {
            if self.group_matches(&change.group) {
                self.add(ctx, change.node, change.delta);
            }
        }
    }

    fn group_matches(&self, group: &str) -> bool {
        self.group.as_deref().is_none_or(|g| g == group)
    }

    fn intern(&mut self, value: &str) -> u32 {
        if let Some(id) = self.value_ids.get(value) {
            return *id;
        }
        let id = self.values.len() as u32;
        self.value_ids.insert(value.to_string(), id);
        self.values.push(value.to_string());
        self.counts.push(0);
        id
    }

    /// The interned value of the attribute on a node (cached per node).
    fn value_of(&mut self, id: NodeId, node: &Node) -> Option<u32> {
        if let Some(v) = self.node_values.get(&id) {
            return *v;
        }
        let interned = self.resolve(node);
        self.node_values.insert(id, interned);
        interned
    }

    /// The interned value of the attribute on a node, uncached. Interned
    /// from the node's own string: no copy unless the value is new.
    fn resolve(&mut self, node: &Node) -> Option<u32> {
        let attribute = std::mem::take(&mut self.attribute);
        let interned = resolve_target(&attribute, node).map(|v| self.intern(&v));
        self.attribute = attribute;
        interned
    }

    /// The interned value for the candidate at `at`.
    #[inline]
    fn value_at<'n>(&mut self, at: SlotRef, node: impl FnOnce() -> &'n Node) -> Option<u32> {
        if let (Some(column), Some(position)) = (&self.column, at.position) {
            let v = column.at(position);
            return (v != AttributeColumn::MISSING).then_some(v);
        }
        if self.slot_generation != at.generation || self.slot_values.len() != at.len {
            self.slot_generation = at.generation;
            self.slot_values.clear();
            self.slot_values.resize(at.len, SLOT_UNKNOWN);
        }
        match self.slot_values[at.slot] {
            SLOT_UNKNOWN => {
                // Cached by slot only: an evaluation visits nearly every
                // node once; the by-ID cache is for the few it places on.
                let v = self.resolve(node());
                self.slot_values[at.slot] = v.unwrap_or(SLOT_MISSING);
                v
            }
            SLOT_MISSING => None,
            v => Some(v),
        }
    }

    fn add(&mut self, ctx: &EvalContext, node: NodeId, delta: i32) {
        let value = match self.node_values.get(&node) {
            Some(v) => *v,
            None => match ctx.state.node_by_id(&node) {
                Some(n) => self.value_of(node, &n),
                None => None,
            },
        };
        if let Some(v) = value {
            let c = &mut self.counts[v as usize];
            *c = c.saturating_add_signed(i64::from(delta));
        }
    }

    fn count(&self, value: u32) -> u64 {
        self.counts.get(value as usize).copied().unwrap_or(0)
    }
}

struct SpreadInfo {
    weight: f64,
    /// Desired allocations per value; empty means "spread evenly".
    desired: HashMap<String, f64>,
    counter: PropertyCounter,
    /// `desired` resolved per interned value (`None`: no target matches).
    desired_by_id: Vec<Option<f64>>,
    /// Least and most allocations on any used value (0 when none), fixed
    /// for the length of one placement.
    min_used: u64,
    max_used: u64,
}

/// Everything about a task group the stack computes once per evaluation.
struct GroupInfo {
    name: String,
    feasibility: GroupFeasibility,
    ask: GroupAsk,
    affinities: Vec<Affinity>,
    affinity_weight_sum: f64,
    spreads: Vec<SpreadInfo>,
    spread_weight_sum: f64,
    distinct: Vec<DistinctTracker>,
    /// Why a candidate fails distinct_hosts (shared by every such filter).
    distinct_hosts_label: Arc<str>,
    count: u32,
    /// `ask.template`, shared by every placement granted it unchanged.
    template: Arc<AllocatedResources>,
    /// The group's number in the stack + 1, naming it in the candidates'
    /// [`UntouchedMemo`]s (0 names no group).
    stamp: u32,
    /// Whether a candidate's outcome is its resources alone: no cores,
    /// ports or distinct_* rules to check against the plan.
    plain: bool,
}

/// A `distinct_property` rule, its per-value counts, and the reasons a
/// candidate fails it (made once, shared by every filtered candidate).
struct DistinctTracker {
    rule: DistinctProperty,
    counter: PropertyCounter,
    missing_label: Arc<str>,
    over_label: Arc<str>,
}

impl GroupInfo {
    fn new(job: &Job, tg: &TaskGroup) -> Self {
        let feasibility = GroupFeasibility::new(job, tg);
        let affinities: Vec<Affinity> = job
            .affinities
            .iter()
            .chain(&tg.affinities)
            .chain(tg.tasks.iter().flat_map(|t| t.affinities.iter()))
            .cloned()
            .collect();
        let affinity_weight_sum = affinities.iter().map(|a| f64::from(a.weight).abs()).sum();
        let count = tg.count.max(0) as u32;
        let mut spread_weight_sum = 0.0;
        let spreads = tg
            .spreads
            .iter()
            .chain(&job.spreads)
            .map(|s| {
                spread_weight_sum += f64::from(s.weight);
                let mut desired = HashMap::new();
                let mut sum = 0.0;
                for t in &s.spread_target {
                    let d = f64::from(t.percent) / 100.0 * f64::from(count);
                    desired.insert(t.value.clone(), d);
                    sum += d;
                }
                if sum > 0.0 && sum < f64::from(count) {
                    desired.insert(IMPLICIT_TARGET.to_string(), f64::from(count) - sum);
                }
                SpreadInfo {
                    weight: f64::from(s.weight),
                    desired,
                    counter: PropertyCounter::new(&s.attribute, Some(&tg.name)),
                    desired_by_id: Vec::new(),
                    min_used: 0,
                    max_used: 0,
                }
            })
            .collect();
        let distinct = feasibility
            .distinct_properties
            .iter()
            .map(|d| {
                let group = d.group_scoped.then_some(tg.name.as_str());
                DistinctTracker {
                    rule: d.clone(),
                    counter: PropertyCounter::new(&d.attribute, group),
                    missing_label: Arc::from(format!("missing property {:?}", d.attribute)),
                    over_label: Arc::from(d.label.as_str()),
                }
            })
            .collect();
        let ask = GroupAsk::new(tg);
        let mut info = GroupInfo {
            name: tg.name.clone(),
            feasibility,
            template: Arc::new(ask.template.clone()),
            ask,
            affinities,
            affinity_weight_sum,
            spreads,
            spread_weight_sum,
            distinct,
            distinct_hosts_label: Arc::from("distinct_hosts"),
            count: count.max(1),
            stamp: 0,
            plain: false,
        };
        info.plain =
            info.ask.cores.is_empty() && !info.ask.has_networks() && !info.has_placement_rules();
        info
    }

    fn sync(&mut self, ctx: &EvalContext, job: &Job, catalog: &NodeCatalog) {
        for s in &mut self.spreads {
            s.counter.sync(ctx, job, catalog);
            let used = s.counter.counts.iter().copied().filter(|c| *c > 0);
            let (min, max) = used.fold((u64::MAX, 0), |(lo, hi), c| (lo.min(c), hi.max(c)));
            s.min_used = if max == 0 { 0 } else { min };
            s.max_used = max;
        }
        for d in &mut self.distinct {
            d.counter.sync(ctx, job, catalog);
        }
    }

    /// distinct_hosts or distinct_property: checked against the plan.
    fn has_placement_rules(&self) -> bool {
        let f = &self.feasibility;
        f.distinct_hosts_job || f.distinct_hosts_group || !self.distinct.is_empty()
    }

    fn has_soft_preferences(&self) -> bool {
        !self.affinities.is_empty() || !self.spreads.is_empty()
    }
}

/// What the stack remembers about a candidate between visits (a spread
/// placement looks at the same node about every tenth placement).
#[derive(Clone, Copy, Default)]
struct CandidateCache {
    /// Where the context keeps the node's usage.
    usage: UsageHint,
    fit: FitMemo,
    untouched: UntouchedMemo,
}

/// What a group's allocation would do to a node nothing in the evaluation
/// has touched (most of them): its usage is the state's for the whole
/// evaluation, so whether the group fits there, and its fit score, are
/// the same at every visit. Remembered, a revisit (a spread placement
/// comes back to each node about every tenth placement) skips reading the
/// usage column, whose entries it would read in shuffled order (a cache
/// miss each), and the fit checks.
#[derive(Clone, Copy, Default)]
struct UntouchedMemo {
    /// [`GroupInfo::stamp`] of the group remembered; 0: none.
    group: u32,
    /// The first resource the node lacks, or `None` if the group fits.
    exhausted: Option<&'static str>,
    fit: f64,
}

/// The last fit score computed for a candidate and the usage it was
/// computed for: the fit (two `powf`s) only depends on the usage and the
/// node's fixed capacity, and a node's usage changes only when the plan
/// places on it or takes from it.
#[derive(Clone, Copy, Default)]
struct FitMemo {
    valid: bool,
    cpu: i64,
    memory_mb: i64,
    score: f64,
}

/// The candidate nodes: positions in the state's catalog (shuffled), or
/// one node given directly.
struct Candidates {
    catalog: Arc<NodeCatalog>,
    order: Vec<u32>,
    single: Option<Arc<Node>>,
}

impl Candidates {
    #[inline]
    fn node(&self, slot: usize) -> &Arc<Node> {
        match &self.single {
            Some(node) => node,
            None => self.catalog.node(self.order[slot]),
        }
    }

    /// The candidate's catalog position (`None` for a node given directly).
    #[inline]
    fn position(&self, slot: usize) -> Option<u32> {
        match &self.single {
            Some(_) => None,
            None => Some(self.order[slot]),
        }
    }
}

pub struct Stack {
    kind: StackKind,
    job: Arc<Job>,
    algorithm: SchedulerAlgorithm,
    /// Preemption allowed by the scheduler configuration for this job type.
    preemption: bool,
    candidates: Candidates,
    /// Per candidate slot: the candidate's catalog entry.
    meta: Vec<CandidateMeta>,
    /// Per candidate, like `meta`, but updated as candidates are scored.
    cached: Vec<CandidateCache>,
    /// Bumped whenever the candidate list changes.
    generation: u64,
    /// Computed classes of single nodes outside the catalog, numbered
    /// after the catalog's.
    extra_classes: Interner,
    /// Node classes of single nodes outside the catalog, likewise.
    extra_node_classes: Interner,
    /// Filter and exhaustion counts of the placement being computed.
    tally: MetricTally,
    offset: usize,
    /// How many candidates (from the first) the walk visits: the share's
    /// when one is walked alone, else all of them.
    window: usize,
    /// The planner's share of the nodes, if any.
    share: Option<NodeShare>,
    base_limit: usize,
    rng: SmallRng,
    /// Per-group state, looked up by name (jobs have few groups).
    groups: Vec<(String, Option<Box<GroupInfo>>)>,
    cache: ConstraintCache,
    score_maps: ScoreMapMemo,
    /// The last fit computed: capacity and usage (CPU, memory), score.
    last_fit: Option<([i64; 4], f64)>,
    /// Room for a placement's top scores, kept between placements.
    top: Vec<(f64, NodeId, Scores)>,
    /// Spread revisits of untouched nodes, in slot order.
    lane: SpreadLane,
}

impl Stack {
    pub fn new(kind: StackKind, job: Arc<Job>, ctx: &EvalContext, seed: u64) -> Self {
        let config = ctx.state.scheduler_config();
        Stack {
            kind,
            algorithm: config.scheduler_algorithm,
            preemption: config.preemption_enabled(&job.job_type),
            job,
            candidates: Candidates {
                catalog: ctx.state.node_catalog(),
                order: Vec::new(),
                single: None,
            },
            meta: Vec::new(),
            cached: Vec::new(),
            generation: 0,
            extra_classes: Interner::default(),
            extra_node_classes: Interner::default(),
            tally: MetricTally::default(),
            offset: 0,
            window: 0,
            share: None,
            base_limit: 2,
            rng: SmallRng::seed_from_u64(seed),
            groups: Vec::new(),
            cache: ConstraintCache::default(),
            score_maps: ScoreMapMemo::default(),
            last_fit: None,
            top: Vec::with_capacity(TOP_SCORES + 1),
            lane: SpreadLane::default(),
        }
    }

    pub fn preemption_enabled(&self) -> bool {
        self.preemption
    }

    /// The catalog of the state the stack was made for: where
    /// [`set_candidates`](Self::set_candidates) positions point.
    pub fn catalog(&self) -> &Arc<NodeCatalog> {
        &self.candidates.catalog
    }

    /// Restricts the candidates to one node (system placements and
    /// in-place checks), reusing the candidate list.
    pub fn set_single_node(&mut self, node: Arc<Node>) {
        self.generation += 1;
        self.meta.clear();
        let meta = self.candidate_meta(&node);
        self.meta.push(meta);
        self.cached.clear();
        self.cached.push(CandidateCache::default());
        self.lane.reset(1);
        self.candidates.order.clear();
        self.candidates.single = Some(node);
        self.offset = 0;
        self.window = 1;
        self.base_limit = match self.kind {
            StackKind::System => usize::MAX,
            _ => 2,
        };
    }

    /// Restricts the candidates to the catalog node at `position` (system
    /// placements): as [`set_single_node`](Self::set_single_node), but the
    /// node's entry is the catalog's (not worked out again from the node)
    /// and its usage can be read from the state's usage column.
    pub fn set_single_position(&mut self, position: u32) {
        self.generation += 1;
        self.meta.clear();
        self.meta.push(*self.candidates.catalog.meta(position));
        self.cached.clear();
        self.cached.push(CandidateCache::default());
        self.lane.reset(1);
        self.candidates.order.clear();
        self.candidates.order.push(position);
        self.candidates.single = None;
        self.offset = 0;
        self.window = 1;
        self.base_limit = match self.kind {
            StackKind::System => usize::MAX,
            _ => 2,
        };
    }

    /// Walks the nodes of `share` first (see the module's comment); for
    /// the candidates set after this call.
    pub fn set_share(&mut self, share: Option<NodeShare>) {
        self.share = share.filter(|s| s.count > 1);
    }

    /// Sets the candidates to these catalog positions (see
    /// [`NodeCatalog::ready_for`]), shuffled with the evaluation's seed.
    /// Shuffling positions draws from the seed exactly as shuffling the
    /// nodes themselves would, so the order is the same.
    pub fn set_candidates(&mut self, mut positions: Vec<u32>) {
        if positions.len() > 1 {
            positions.shuffle(&mut self.rng);
        }
        let (positions, window) = self.share_first(positions);
        let n = positions.len();
        self.base_limit = match self.kind {
            StackKind::Batch => 2,
            StackKind::Service => ((n.max(1) as f64).log2().ceil() as usize).max(2),
            StackKind::System => usize::MAX,
        };
        self.generation += 1;
        let catalog = &self.candidates.catalog;
        self.meta.clear();
        self.meta
            .extend(positions.iter().map(|p| *catalog.meta(*p)));
        self.cached.clear();
        self.cached.resize(n, CandidateCache::default());
        self.lane.reset(n);
        self.candidates.order = positions;
        self.candidates.single = None;
        self.offset = 0;
        self.window = window;
    }

    /// The shuffled positions with the share's first (each part keeps its
    /// shuffled order), and the walk's window: the share's size, or every
    /// candidate when there is no share or it is too small to walk alone.
    fn share_first(&self, positions: Vec<u32>) -> (Vec<u32>, usize) {
        let n = positions.len();
        let Some(share) = self.share else {
            return (positions, n);
        };
        let (mut ordered, rest): (Vec<u32>, Vec<u32>) =
            positions.into_iter().partition(|p| share.holds(*p));
        let held = ordered.len();
        ordered.extend(rest);
        let window = if held < MIN_SHARE_CANDIDATES { n } else { held };
        (ordered, window)
    }

    /// Stops walking the share alone: every candidate from now on.
    fn widen(&mut self) -> bool {
        let widened = self.window < self.meta.len();
        self.window = self.meta.len();
        widened
    }

    /// A node's entry, numbered like the catalog's (a node outside it is
    /// numbered after the catalog's classes).
    fn candidate_meta(&mut self, node: &Node) -> CandidateMeta {
        let catalog = &self.candidates.catalog;
        let class = (!node.computed_class.is_empty()).then(|| {
            number_in(
                catalog.classes(),
                &mut self.extra_classes,
                &node.computed_class,
            )
        });
        CandidateMeta {
            id: node.id,
            class,
            node_class: number_in(
                catalog.node_classes(),
                &mut self.extra_node_classes,
                &node.node_class,
            ),
            capacity: node.available(),
        }
    }

    /// Finds the best node for one allocation of `tg`, filling the
    /// context's metrics either way.
    pub fn select(
        &mut self,
        ctx: &mut EvalContext,
        tg: &TaskGroup,
        opts: &SelectOptions,
    ) -> Option<(RankedNode, Arc<AllocatedResources>)> {
        ctx.reset_metrics();
        let started = ctx.clock.as_ref().map(|c| c());
        // Taken out of its slot for the call (and put back) so the stack
        // can be borrowed mutably alongside it.
        let slot = match self.groups.iter().position(|(name, _)| *name == tg.name) {
            Some(i) => i,
            None => {
                self.groups.push((tg.name.clone(), None));
                self.groups.len() - 1
            }
        };
        let mut info = match self.groups[slot].1.take() {
            Some(info) => info,
            None => {
                let mut info = Box::new(GroupInfo::new(&self.job, tg));
                info.stamp = u32::try_from(slot + 1).unwrap_or(0);
                if info.feasibility.escaped {
                    ctx.eligibility.set_escaped();
                }
                info
            }
        };
        info.sync(ctx, &self.job, &self.candidates.catalog);
        let mut result = self.select_with(ctx, &mut info, opts);
        if result.is_none() && self.widen() {
            // Nothing in the share: the placement is made (or reported as
            // failed) over every candidate, with metrics to match.
            ctx.reset_metrics();
            self.tally.clear();
            result = self.select_with(ctx, &mut info, opts);
        }
        let (catalog, extra) = (&self.candidates.catalog, &self.extra_node_classes);
        self.tally.flush_into(&mut ctx.metrics, |class| {
            name_of(catalog.node_classes(), extra, class)
        });
        let result = result.map(|(r, scores)| {
            let grant = r.grant.map(|g| *g).unwrap_or_default();
            // Most placements get the group's template as it is: shared,
            // not copied (a copy and a comparison per placement were a
            // tenth of a system evaluation).
            let resources = match grant.resources {
                Some(own) => Arc::new(own),
                None => info.template.clone(),
            };
            let ranked = RankedNode {
                node: self.candidates.node(r.slot).clone(),
                final_score: r.final_score,
                scores,
                preempted: grant.preempted,
            };
            (ranked, resources)
        });
        self.groups[slot].1 = Some(info);
        if let (Some(start), Some(clock)) = (started, ctx.clock.as_ref()) {
            ctx.metrics.allocation_time =
                i64::try_from(clock().saturating_sub(start)).unwrap_or(i64::MAX);
        }
        result
    }

    fn select_with(
        &mut self,
        ctx: &mut EvalContext,
        info: &mut GroupInfo,
        opts: &SelectOptions,
    ) -> Option<(Scored, Scores)> {
        let limit = if info.has_soft_preferences() && self.kind != StackKind::System {
            (info.count as usize).max(100)
        } else {
            self.base_limit
        };
        if self.window < limit {
            // The share cannot offer the candidates this group compares.
            self.widen();
        }
        self.activate_lane(info, opts, limit);
        let mut seen = 0usize;
        let mut skipped: Vec<(Scored, Scores)> = Vec::new();
        let mut skipped_next = 0usize;
        // The top-scores list is the stack's, reused by every placement.
        let mut chosen = Chosen {
            top: std::mem::take(&mut self.top),
            ..Chosen::default()
        };
        // Nomad's limit iterator: up to MAX_SKIP candidates with low scores
        // are put aside while later ones are pulled, and handed out once
        // the source runs dry. One loop with a single pull from the source
        // (so the per-candidate path is inlined once); `skipping` is set
        // while pulling in place of a candidate just put aside.
        let mut skipping = false;
        loop {
            if !skipping && chosen.returned >= limit {
                break;
            }
            if self.lane.active() != 0 {
                let mut run = LaneRun {
                    chosen: &mut chosen,
                    skipped: &mut skipped,
                    skipping: &mut skipping,
                    seen: &mut seen,
                    limit,
                };
                self.run_lane(ctx, &mut run);
                if !skipping && chosen.returned >= limit {
                    break;
                }
            }
            let (candidate, scores) = match self.next_ranked(ctx, info, opts, &mut seen) {
                Some(ranked) => ranked,
                None if skipped_next < skipped.len() => {
                    let (c, scores) = take_skipped(&mut skipped, &mut skipped_next);
                    if skipping {
                        // In place of a skipped candidate, a put-aside one
                        // is taken whatever its score.
                        skipping = false;
                        let id = self.meta[c.slot].id;
                        chosen.accept(c, &scores, || id);
                        continue;
                    }
                    (c, scores)
                }
                None => break,
            };
            let keep = candidate.final_score > SKIP_SCORE_THRESHOLD || skipped.len() >= MAX_SKIP;
            if !keep {
                skipped.push((candidate, scores));
                skipping = true;
                continue;
            }
            skipping = false;
            let id = self.meta[candidate.slot].id;
            chosen.accept(candidate, &scores, || id);
        }
        let Chosen { mut top, best, .. } = chosen;
        let memo = &mut self.score_maps;
        // Into the metric's own list: blank metrics keep its room.
        let meta = &mut ctx.metrics.score_meta_data;
        meta.clear();
        meta.extend(top.drain(..).map(|(score, node_id, scores)| NodeScoreMeta {
            node_id,
            scores: memo.map_of(&scores, score),
            norm_score: score,
        }));
        self.top = top;
        best
    }

    /// Takes the lane's answers for the candidates from the walk's offset
    /// on, exactly as the loop in [`select_with`](Self::select_with) takes
    /// them one by one (skipping low scores, counting them evaluated,
    /// tallying the exhausted), until a candidate the lane does not hold
    /// (left for the full path), the limit, or the end of the window.
    /// Nothing in the run touches a node, so the touched-node log is
    /// drained once, before it.
    #[inline(never)]
    fn run_lane(&mut self, ctx: &mut EvalContext, run: &mut LaneRun<'_>) {
        self.lane
            .forget_touched(ctx.touched_log(), &self.candidates.order);
        // In locals for the loop: written back once, after it.
        let (n, limit) = (self.window, run.limit);
        let (mut offset, mut seen) = (self.offset, *run.seen);
        let meta = &self.meta;
        let chosen = &mut *run.chosen;
        // A kept candidate scoring at or below the bar changes nothing
        // but the count (see `Chosen::bar`); neither does one above the
        // floor while there is put-aside room. The lane counts those in a
        // loop of their own (`QuietView::quiet_run`), against a view taken
        // again when either moves.
        let floor = |skipped: usize| (skipped < MAX_SKIP).then_some(SKIP_SCORE_THRESHOLD);
        let mut bar = chosen.bar();
        let mut quiet = self.lane.quiet_view(bar, floor(run.skipped.len()));
        while seen < n && chosen.returned < limit {
            // The quiet candidates ahead, counted in a loop of their own
            // (as far as the walk may go without a check it skips: the
            // window's end, the candidates left, the limit).
            let room = (n - offset).min(n - seen).min(limit - chosen.returned);
            let quiet_ahead = quiet.quiet_run(offset, room);
            if quiet_ahead > 0 {
                chosen.returned += quiet_ahead;
                *run.skipping = false;
                seen += quiet_ahead;
                offset += quiet_ahead;
                if offset == n {
                    offset = 0;
                }
                continue;
            }
            let slot = offset;
            let hit = match self.lane.hit(slot) {
                Some(LaneAnswer::Fits(hit)) => Some(hit),
                Some(LaneAnswer::Exhausted(dimension)) => {
                    self.tally.exhaust(meta[slot].node_class, dimension);
                    None
                }
                None => break,
            };
            offset += 1;
            if offset == n {
                offset = 0;
            }
            seen += 1;
            let Some(hit) = hit else {
                continue;
            };
            // The components are built only for a candidate that is kept
            // aside, makes the top scores or is the best so far.
            let final_score = hit.final_score();
            if final_score > SKIP_SCORE_THRESHOLD || run.skipped.len() >= MAX_SKIP {
                *run.skipping = false;
                if final_score <= bar {
                    chosen.returned += 1;
                } else {
                    let (candidate, scores) = lane_scored(slot, hit);
                    chosen.accept(candidate, &scores, || meta[slot].id);
                    bar = chosen.bar();
                    quiet = self.lane.quiet_view(bar, floor(run.skipped.len()));
                }
            } else {
                run.skipped.push(lane_scored(slot, hit));
                *run.skipping = true;
                quiet = self.lane.quiet_view(bar, floor(run.skipped.len()));
            }
        }
        let evaluated = (seen - *run.seen) as u64;
        self.offset = offset;
        *run.seen = seen;
        ctx.metrics.nodes_evaluated += evaluated;
    }

    /// Pulls nodes from the source until one is feasible and fits.
    /// Inlined into its one caller so that what the per-candidate path
    /// needs is set up once per placement, not once per candidate.
    #[inline(always)]
    fn next_ranked(
        &mut self,
        ctx: &mut EvalContext,
        info: &mut GroupInfo,
        opts: &SelectOptions,
        seen: &mut usize,
    ) -> Option<(Scored, Scores)> {
        let n = self.window;
        while *seen < n {
            let slot = self.offset;
            self.offset += 1;
            if self.offset == n {
                self.offset = 0;
            }
            *seen += 1;
            ctx.metrics.evaluate_node();
            if self.lane.active() != 0 {
                self.lane
                    .forget_touched(ctx.touched_log(), &self.candidates.order);
                match self.lane.hit(slot) {
                    Some(LaneAnswer::Fits(hit)) => return Some(lane_scored(slot, hit)),
                    Some(LaneAnswer::Exhausted(dimension)) => {
                        self.tally.exhaust(self.meta[slot].node_class, dimension);
                        continue;
                    }
                    None => {}
                }
            }
            if let Some(ranked) = self.rank_candidate(ctx, info, opts, slot) {
                return Some(ranked);
            }
        }
        None
    }

    /// Ranks the candidate at `slot`: `None` when it is filtered or
    /// exhausted (counted in the tally), else its final score and its
    /// components. The common path (class already
    /// checked, fits, no ports) touches only the stack's per-candidate
    /// vectors, the usage cache and the spread counters; the rest is out of
    /// line.
    #[inline(always)]
    fn rank_candidate(
        &mut self,
        ctx: &mut EvalContext,
        info: &mut GroupInfo,
        opts: &SelectOptions,
        slot: usize,
    ) -> Option<(Scored, Scores)> {
        // Fields read as needed rather than the record copied: the filter
        // and exhaustion paths are the only ones that need the class.
        let (id, capacity) = (self.meta[slot].id, self.meta[slot].capacity);
        let at = SlotRef {
            slot,
            position: self.candidates.position(slot),
            len: self.meta.len(),
            generation: self.generation,
        };
        let class_cached = match info.feasibility.cached(self.meta[slot].class) {
            Some(Ok(())) => true,
            Some(Err(label)) => {
                self.tally.filter(self.meta[slot].node_class, label);
                return None;
            }
            None => {
                if !self.check_feasibility(ctx, info, slot) {
                    return None;
                }
                false
            }
        };
        if info.plain {
            match self.untouched_outcome(ctx, info, at, &capacity) {
                Some(UntouchedMemo {
                    exhausted: None,
                    fit,
                    ..
                }) => {
                    let scores = self.score(info, opts, at, fit, 0);
                    if class_cached && self.lane.active() == info.stamp {
                        self.remember_in_lane(info, at, fit);
                    }
                    let scored = Scored {
                        final_score: scores.final_score(),
                        slot,
                        grant: None,
                    };
                    return Some((scored, scores));
                }
                // Evictions could make room: the full path below.
                Some(UntouchedMemo {
                    exhausted: Some(dimension),
                    ..
                }) if !opts.preempt => {
                    self.tally.exhaust(self.meta[slot].node_class, dimension);
                    if class_cached && self.lane.active() == info.stamp {
                        self.lane.remember_exhausted(slot, dimension);
                    }
                    return None;
                }
                _ => {}
            }
        }
        if info.has_placement_rules() {
            if let Some(reason) = placement_conflict(ctx, info, self.candidates.node(slot), at) {
                self.tally.filter(self.meta[slot].node_class, reason);
                return None;
            }
        }
        let (mut util, group_collisions) = {
            let candidates = &self.candidates;
            let node = || &**candidates.node(slot);
            let position = candidates.position(slot);
            let hint = &mut self.cached[slot].usage;
            ctx.used_and_collisions(hint, id, position, &info.name, node)
        };
        util.add(&info.ask.resources);
        let cores = if info.ask.cores.is_empty() {
            None
        } else {
            match self.grant_cores(ctx, info, slot, &mut util) {
                Some(c) => Some(c),
                None => {
                    self.tally
                        .exhaust(self.meta[slot].node_class, CORES_EXHAUSTED);
                    return None;
                }
            }
        };
        let mut grant: Option<Box<Grant>> = None;
        if let Err(dimension) = ComparableResources::superset_of(&capacity, &util) {
            match self.preempt_for(ctx, info, opts, slot, &mut util) {
                Some(g) => grant = Some(g),
                None => {
                    self.tally.exhaust(self.meta[slot].node_class, dimension);
                    return None;
                }
            }
        }
        if info.ask.has_networks() {
            match self.grant_ports(ctx, info, slot) {
                Ok(r) => grant.get_or_insert_with(Box::default).resources = Some(r),
                Err(dimension) => {
                    self.tally.exhaust(self.meta[slot].node_class, dimension);
                    return None;
                }
            }
        }
        if let Some(cores) = cores {
            let per_core = self.candidates.node(slot).mhz_per_core();
            let g = grant.get_or_insert_with(Box::default);
            let resources = g.resources.get_or_insert_with(|| info.ask.template.clone());
            apply_cores(resources, cores, per_core);
        }
        let fit = self.fit(slot, &capacity, &util);
        let mut scores = self.score(info, opts, at, fit, group_collisions);
        if let Some(g) = grant.as_ref().filter(|g| !g.preempted.is_empty()) {
            let priorities: Vec<i32> = g.preempted.iter().map(|a| ctx.job_priority(a)).collect();
            scores.set(Component::Preemption, preemption_score(&priorities));
        }
        let scored = Scored {
            final_score: scores.final_score(),
            slot,
            grant,
        };
        Some((scored, scores))
    }

    /// Lets the spread lane answer for this placement's revisits of
    /// untouched nodes when their score is the fit and one spread's boost
    /// alone: a plain group (no cores, ports or distinct_* rules; so no
    /// job anti-affinity on an untouched node either), one spread, no
    /// affinity, no reschedule penalty. The boosts are worked out for every
    /// value, so the lane is used only where the values are fewer than the
    /// candidates a placement compares.
    fn activate_lane(&mut self, info: &mut GroupInfo, opts: &SelectOptions, limit: usize) {
        let eligible = info.plain
            && self.kind != StackKind::System
            && self.candidates.single.is_none()
            && info.spreads.len() == 1
            && info.affinity_weight_sum <= 0.0
            && opts.penalty_nodes.is_empty()
            && info.spreads[0].counter.values.len() < limit;
        if !eligible {
            self.lane.deactivate();
            return;
        }
        let weight_sum = info.spread_weight_sum;
        let spread = &mut info.spreads[0];
        // As `spread_score` sums them: from 0.0.
        let missing = 0.0 + spread_term(spread, weight_sum, None);
        let values = spread.counter.values.len() as u32;
        let boosts = (0..values).map(|v| 0.0 + spread_term(spread, weight_sum, Some(v)));
        self.lane
            .activate(info.stamp, opts.preempt, boosts, missing);
    }

    /// Remembers in the lane that the group fits on the untouched node at
    /// `at` with `fit`, and the node's spread value.
    #[inline(never)]
    fn remember_in_lane(&mut self, info: &mut GroupInfo, at: SlotRef, fit: f64) {
        let candidates = &self.candidates;
        let value = info.spreads[0]
            .counter
            .value_at(at, || candidates.node(at.slot));
        self.lane
            .remember(at.slot, value.unwrap_or(VALUE_MISSING), fit);
    }

    /// The group's outcome on the candidate at `at` while nothing in the
    /// evaluation has touched its node, remembered per candidate (see
    /// [`UntouchedMemo`]); `None` for a touched node, or when the state
    /// keeps no usage column.
    #[inline(always)]
    fn untouched_outcome(
        &mut self,
        ctx: &mut EvalContext,
        info: &GroupInfo,
        at: SlotRef,
        capacity: &ComparableResources,
    ) -> Option<UntouchedMemo> {
        let position = at.position?;
        if !ctx.is_untouched(position) {
            return None;
        }
        let memo = self.cached[at.slot].untouched;
        if memo.group != 0 && memo.group == info.stamp {
            return Some(memo);
        }
        self.remember_untouched(ctx, info, at.slot, position, capacity)
    }

    /// Works out and remembers [`untouched_outcome`](Self::untouched_outcome)
    /// from the usage column, as the full path would: fit checked on the
    /// column's usage plus the group's ask, scored only if it fits.
    #[inline(never)]
    fn remember_untouched(
        &mut self,
        ctx: &mut EvalContext,
        info: &GroupInfo,
        slot: usize,
        position: u32,
        capacity: &ComparableResources,
    ) -> Option<UntouchedMemo> {
        let mut util = ctx.untouched_usage(position, &self.meta[slot].id)?;
        util.add(&info.ask.resources);
        let exhausted = ComparableResources::superset_of(capacity, &util).err();
        let fit = match exhausted {
            None => self.fit(slot, capacity, &util),
            Some(_) => 0.0,
        };
        let memo = UntouchedMemo {
            group: info.stamp,
            exhausted,
            fit,
        };
        self.cached[slot].untouched = memo;
        Some(memo)
    }

    /// Feasibility of a candidate the class cache cannot answer for (a new
    /// class, no class, or a group that escapes the cache).
    #[cold]
    #[inline(never)]
    fn check_feasibility(
        &mut self,
        ctx: &mut EvalContext,
        info: &mut GroupInfo,
        slot: usize,
    ) -> bool {
        let node = self.candidates.node(slot);
        let meta = &self.meta[slot];
        let escaped = info.feasibility.escaped;
        let (feasible, first_sight) = info.feasibility.check(node, meta.class, &mut self.cache);
        if first_sight && !escaped {
            ctx.eligibility
                .record(&node.computed_class, feasible.is_ok());
        }
        match feasible {
            Ok(()) => true,
            Err(label) => {
                self.tally.filter(meta.node_class, &label);
                false
            }
        }
    }

    /// When the group does not fit: the evictions that would make room
    /// (taken off `util`), if preemption is on and finds any.
    #[cold]
    #[inline(never)]
    fn preempt_for(
        &mut self,
        ctx: &mut EvalContext,
        info: &GroupInfo,
        opts: &SelectOptions,
        slot: usize,
        util: &mut ComparableResources,
    ) -> Option<Box<Grant>> {
        if !opts.preempt {
            return None;
        }
        let node = self.candidates.node(slot);
        let list = select_preemptions(ctx, node, self.job.priority, &info.ask.resources)?;
        for a in &list {
            util.sub(&a.allocated_resources.comparable());
        }
        Some(Box::new(Grant {
            resources: None,
            preempted: list,
        }))
    }

    /// The whole cores the group's tasks reserve on the candidate, given
    /// those the plan leaves in use there; their MHz are added to `util`.
    #[cold]
    #[inline(never)]
    fn grant_cores(
        &mut self,
        ctx: &mut EvalContext,
        info: &GroupInfo,
        slot: usize,
        util: &mut ComparableResources,
    ) -> Option<Vec<(String, Vec<u32>)>> {
        let node = self.candidates.node(slot);
        let cores = assign_cores(&info.ask, node, &ctx.cores_in_use(node))?;
        let count: usize = cores.iter().map(|(_, ids)| ids.len()).sum();
        let mhz = node
            .mhz_per_core()
            .saturating_mul(i64::try_from(count).unwrap_or(i64::MAX));
        util.cpu = util.cpu.saturating_add(mhz);
        Some(cores)
    }

    /// The group's networks granted on the candidate, given the ports the
    /// plan leaves in use there.
    #[inline(never)]
    fn grant_ports(
        &mut self,
        ctx: &mut EvalContext,
        info: &GroupInfo,
        slot: usize,
    ) -> Result<AllocatedResources, &'static str> {
        let node = self.candidates.node(slot);
        let position = self.candidates.position(slot);
        let usage = ctx.usage_hinted(&mut self.cached[slot].usage, node.id, position, || node);
        assign_ports(&info.ask, node, &usage.ports, &mut self.rng)
    }

    #[inline(always)]
    fn score(
        &mut self,
        info: &mut GroupInfo,
        opts: &SelectOptions,
        at: SlotRef,
        fit: f64,
        group_collisions: u32,
    ) -> Scores {
        let mut scores = Scores::with_fit(fit);
        if self.kind == StackKind::System {
            return scores;
        }
        if group_collisions > 0 {
            let penalty = -f64::from(group_collisions + 1) / f64::from(info.count);
            scores.set(Component::JobAntiAffinity, penalty);
        }
        if !opts.penalty_nodes.is_empty() && opts.penalty_nodes.contains(&self.meta[at.slot].id) {
            scores.set(Component::ReschedulePenalty, -1.0);
        }
        // The node itself is looked up only where it is read: a spread
        // candidate seen before needs nothing of it.
        let candidates = &self.candidates;
        if info.affinity_weight_sum > 0.0 {
            let total = affinity_total(info, candidates.node(at.slot), &mut self.cache);
            if total != 0.0 {
                scores.set(Component::NodeAffinity, total / info.affinity_weight_sum);
            }
        }
        if !info.spreads.is_empty() {
            let total = spread_score(info, || candidates.node(at.slot), at);
            if total != 0.0 {
                scores.set(Component::Spread, total);
            }
        }
        scores
    }

    /// The candidate's fit score, from its memo when its usage is the same
    /// as last time.
    fn fit(
        &mut self,
        slot: usize,
        capacity: &ComparableResources,
        util: &ComparableResources,
    ) -> f64 {
        let memo = &mut self.cached[slot].fit;
        if memo.valid && memo.cpu == util.cpu && memo.memory_mb == util.memory_mb {
            return memo.score;
        }
        // Then from the last fit computed for any candidate: alike nodes
        // equally used (a system job's, one visit each) have equal fits.
        let key = [capacity.cpu, capacity.memory_mb, util.cpu, util.memory_mb];
        let score = match self.last_fit {
            Some((k, score)) if k == key => score,
            _ => {
                let score = fit_score(self.algorithm, capacity, util);
                self.last_fit = Some((key, score));
                score
            }
        };
        let memo = &mut self.cached[slot].fit;
        *memo = FitMemo {
            valid: true,
            cpu: util.cpu,
            memory_mb: util.memory_mb,
            score,
        };
        score
    }
}

/// The number of `name` in `base`, or after `base`'s numbers in `extra`.
fn number_in(base: &Interner, extra: &mut Interner, name: &str) -> u32 {
    base.get(name)
        .unwrap_or_else(|| (base.len() + extra.intern(name) as usize) as u32)
}

/// The name numbered `number` by [`number_in`].
fn name_of<'a>(base: &'a Interner, extra: &'a Interner, number: usize) -> &'a str {
    match number.checked_sub(base.len()) {
        None => &base.names()[number],
        Some(i) => &extra.names()[i],
    }
}

/// distinct_hosts and distinct_property, checked against the plan; the
/// reason a candidate conflicts.
fn placement_conflict<'i>(
    ctx: &mut EvalContext,
    info: &'i mut GroupInfo,
    node: &Node,
    at: SlotRef,
) -> Option<&'i Arc<str>> {
    let f = &info.feasibility;
    if f.distinct_hosts_job || f.distinct_hosts_group {
        let usage = ctx.usage(node);
        if f.distinct_hosts_job && usage.job_count(None) > 0 {
            return Some(&info.distinct_hosts_label);
        }
        if f.distinct_hosts_group && usage.job_count(Some(&info.name)) > 0 {
            return Some(&info.distinct_hosts_label);
        }
    }
    for d in &mut info.distinct {
        let Some(value) = d.counter.value_at(at, || node) else {
            return Some(&d.missing_label);
        };
        if d.counter.count(value) >= d.rule.limit {
            return Some(&d.over_label);
        }
    }
    None
}

/// The state of a placement's candidate loop that a run of lane answers
/// carries on (see [`Stack::run_lane`]).
struct LaneRun<'a> {
    chosen: &'a mut Chosen,
    skipped: &'a mut Vec<(Scored, Scores)>,
    skipping: &'a mut bool,
    seen: &'a mut usize,
    limit: usize,
}

/// The candidates a placement has taken so far: how many, the best, and
/// the top scores for the metrics.
#[derive(Default)]
struct Chosen {
    returned: usize,
    best: Option<(Scored, Scores)>,
    top: Vec<(f64, NodeId, Scores)>,
}

impl Chosen {
    /// Takes a candidate; `id` names its node, read only if it makes the
    /// top scores (most candidates do not: their entry stays unread).
    #[inline(always)]
    fn accept(&mut self, candidate: Scored, scores: &Scores, id: impl FnOnce() -> NodeId) {
        self.returned += 1;
        record_top(&mut self.top, &candidate, scores, id);
        if self
            .best
            .as_ref()
            .is_none_or(|(b, _)| candidate.final_score > b.final_score)
        {
            self.best = Some((candidate, *scores));
        }
    }

    /// The score a candidate must beat to change the best or the top
    /// scores: the lower of the two once both are set. A candidate at or
    /// below it is only counted (`accept` would do nothing else with it).
    /// Minus infinity while either is unset or either is NaN; a NaN
    /// candidate is never at or below the bar: `accept` takes it.
    #[inline(always)]
    fn bar(&self) -> f64 {
        match (&self.best, self.top.len() == TOP_SCORES) {
            (Some((best, _)), true) => {
                let last = self.top.last().map_or(f64::NAN, |l| l.0);
                if last.is_nan() || best.final_score.is_nan() {
                    // `min` would pass over a NaN; `accept` is always right.
                    return f64::NEG_INFINITY;
                }
                best.final_score.min(last)
            }
            _ => f64::NEG_INFINITY,
        }
    }
}

fn take_skipped(skipped: &mut [(Scored, Scores)], next: &mut usize) -> (Scored, Scores) {
    let (c, scores) = &mut skipped[*next];
    *next += 1;
    let taken = Scored {
        slot: c.slot,
        final_score: c.final_score,
        grant: c.grant.take(),
    };
    (taken, *scores)
}

#[inline]
fn record_top(
    top: &mut Vec<(f64, NodeId, Scores)>,
    c: &Scored,
    scores: &Scores,
    id: impl FnOnce() -> NodeId,
) {
    if top.len() == TOP_SCORES && top.last().is_some_and(|l| l.0 >= c.final_score) {
        return;
    }
    let id = id();
    let pos = top
        .iter()
        .position(|t| t.0 < c.final_score)
        .unwrap_or(top.len());
    top.insert(pos, (c.final_score, id, *scores));
    top.truncate(TOP_SCORES);
}

/// The summed weights of the affinities the node matches.
#[inline(never)]
fn affinity_total(info: &GroupInfo, node: &Node, cache: &mut ConstraintCache) -> f64 {
    info.affinities
        .iter()
        .filter(|a| affinity_matches(a, node, cache))
        .map(|a| f64::from(a.weight))
        .sum()
}

fn affinity_matches(a: &Affinity, node: &Node, cache: &mut ConstraintCache) -> bool {
    let l = resolve_target(&a.l_target, node);
    let r = if a.r_target.is_empty() {
        None
    } else {
        resolve_target(&a.r_target, node)
    };
    check_operand(&a.operand, l.as_deref(), r.as_deref(), cache)
}

/// Nomad's spread boost: with targets, how far the value is below its
/// desired count (weighted); without, how far below the least-used value.
fn spread_score<'n>(info: &mut GroupInfo, node: impl Fn() -> &'n Node, at: SlotRef) -> f64 {
    let weight_sum = info.spread_weight_sum;
    let mut total = 0.0;
    for s in &mut info.spreads {
        let value = s.counter.value_at(at, &node);
        total += spread_term(s, weight_sum, value);
    }
    total
}

/// One spread's part of [`spread_score`] for a node whose value is `value`
/// (`None`: the node lacks the attribute): -1 for a missing value or one
/// no target wants.
fn spread_term(s: &mut SpreadInfo, weight_sum: f64, value: Option<u32>) -> f64 {
    let Some(value) = value else {
        return -1.0;
    };
    if s.desired.is_empty() {
        return even_spread_boost(s, value);
    }
    let used = s.counter.count(value) as f64 + 1.0;
    while s.desired_by_id.len() <= value as usize {
        let name = &s.counter.values[s.desired_by_id.len()];
        let d = s
            .desired
            .get(name)
            .or_else(|| s.desired.get(IMPLICIT_TARGET))
            .copied();
        s.desired_by_id.push(d);
    }
    match s.desired_by_id[value as usize] {
        Some(d) if d > 0.0 => {
            let weight = if weight_sum > 0.0 {
                s.weight / weight_sum
            } else {
                0.0
            };
            (d - used) / d * weight
        }
        _ => -1.0,
    }
}

/// A candidate the spread lane answered for, scored as the full path
/// scores an untouched node: its fit and the spread's boost.
#[inline(always)]
fn lane_scored(slot: usize, hit: LaneHit) -> (Scored, Scores) {
    let mut scores = Scores::with_fit(hit.fit);
    if hit.boost != 0.0 {
        scores.set(Component::Spread, hit.boost);
    }
    let final_score = scores.final_score();
    debug_assert_eq!(final_score.to_bits(), hit.final_score().to_bits());
    let scored = Scored {
        final_score,
        slot,
        grant: None,
    };
    (scored, scores)
}

fn even_spread_boost(s: &SpreadInfo, value: u32) -> f64 {
    let (min, max) = (s.min_used, s.max_used);
    if max == 0 {
        // Nothing placed yet: every value is as good as any other.
        return 0.0;
    }
    let current = s.counter.count(value);
    if current != min {
        // Fewer than the least-used value (a new value) is a boost; more is
        // a penalty proportional to the excess.
        return (min as f64 - current as f64) / min as f64;
    }
    if min == max {
        return -1.0;
    }
    (max - min) as f64 / min as f64
}

/// Nomad's preemption score: a logistic curve over the "net priority" of
/// the evicted allocations (the highest priority plus the sum relative to
/// it), 0.5 at a net priority of 2,048 and falling as it grows.
fn preemption_score(priorities: &[i32]) -> f64 {
    let max = priorities.iter().copied().max().unwrap_or(0).max(1) as f64;
    let sum: f64 = priorities.iter().map(|p| f64::from(*p)).sum();
    let net = max + sum / max;
    1.0 / (1.0 + (0.0048 * (net - 2048.0)).exp())
}

#[cfg(test)]
mod class_numbers {
    use super::{name_of, number_in, Interner};

    /// A single node outside the catalog (an in-place update on an
    /// ineligible node) must not share a class number, and with it the
    /// group's cached feasibility, with a different catalog class.
    #[test]
    fn classes_outside_the_catalog_are_numbered_after_its_own() {
        let mut catalog = Interner::default();
        catalog.intern("small");
        catalog.intern("large");
        let mut extra = Interner::default();
        assert_eq!(number_in(&catalog, &mut extra, "large"), 1);
        assert_eq!(number_in(&catalog, &mut extra, "gpu"), 2);
        assert_eq!(number_in(&catalog, &mut extra, "arm"), 3);
        assert_eq!(number_in(&catalog, &mut extra, "gpu"), 2);
        let names: Vec<&str> = (0..4).map(|i| name_of(&catalog, &extra, i)).collect();
        assert_eq!(names, ["small", "large", "gpu", "arm"]);
    }
}
