//! What the scheduler saw while placing an allocation (Nomad's
//! `AllocMetric`), kept compact.
//!
//! Every allocation carries one of these, so at a million allocations each
//! byte here is a megabyte of server memory. Nomad's maps are Go maps;
//! herder keeps the same JSON but stores the small maps as sorted vectors
//! (`CountMap`) and the score names as two-byte indexes (`ScoreMap`): a
//! `BTreeMap` allocates a node of eleven slots for its first entry.

use super::codec::{CodecError, Reader, Writer};
use super::node_numbers;
use super::resources::Resources;
use super::serde_util::nullable;
use super::thin::SharedBytes;
use super::NodeId;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

/// Counts by name, sorted by name (Nomad's `map[string]int`, same JSON).
///
/// Metrics count filtered and exhausted nodes per class, constraint and
/// dimension; a map holds a handful of names at most, so a sorted vector
/// that grows one slot at a time costs what it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CountMap(Vec<(Box<str>, u64)>);

impl CountMap {
    /// Adds `n` to the count of `name` (allocating only for a new name).
    pub fn add(&mut self, name: &str, n: u64) {
        match self.0.binary_search_by(|(k, _)| (**k).cmp(name)) {
            Ok(at) => self.0[at].1 += n,
            Err(at) => {
                self.0.reserve_exact(1);
                self.0.insert(at, (name.into(), n));
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<&u64> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(name))
            .ok()
            .map(|at| &self.0[at].1)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(k, v)| (&**k, *v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<N: AsRef<str>> FromIterator<(N, u64)> for CountMap {
    /// Counts of one name given twice add up.
    fn from_iter<I: IntoIterator<Item = (N, u64)>>(entries: I) -> Self {
        let mut map = CountMap::default();
        for (name, n) in entries {
            map.add(name.as_ref(), n);
        }
        map
    }
}

impl<N: AsRef<str>, const L: usize> From<[(N, u64); L]> for CountMap {
    fn from(entries: [(N, u64); L]) -> Self {
        entries.into_iter().collect()
    }
}

impl<'a> IntoIterator for &'a CountMap {
    type Item = (&'a str, u64);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (Box<str>, u64)>, CountPair>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (&**k, *v))
    }
}

type CountPair = for<'a> fn(&'a (Box<str>, u64)) -> (&'a str, u64);

impl nullable::IsEmpty for CountMap {
    fn is_empty_collection(&self) -> bool {
        self.is_empty()
    }
}

impl Serialize for CountMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, n) in &self.0 {
            map.serialize_entry(&**name, n)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for CountMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CountMap, D::Error> {
        struct CountsVisitor;
        impl<'de> Visitor<'de> for CountsVisitor {
            type Value = CountMap;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of names to counts")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<CountMap, A::Error> {
                let mut map = CountMap::default();
                while let Some((name, n)) = access.next_entry::<std::borrow::Cow<str>, u64>()? {
                    map.add(&name, n);
                }
                Ok(map)
            }
        }
        d.deserialize_map(CountsVisitor)
    }
}

/// The score names herder's ranker writes, sorted. (The store's row
/// encoding keeps its own copy, frozen with its format: this one may grow.)
const SCORE_NAMES: [&str; 7] = [
    "allocation-spread",
    "binpack",
    "job-anti-affinity",
    "node-affinity",
    "node-reschedule-penalty",
    "normalized-score",
    "preemption",
];

/// How many names besides herder's own a process keeps. Other names only
/// come from rows or JSON written by something else (a Nomad fixture, a
/// newer herder); past this bound they are dropped, as they are
/// informational, so a stream of odd names cannot grow memory for ever.
const MAX_OTHER_SCORE_NAMES: usize = 1024;

/// Names seen beyond `SCORE_NAMES`, each leaked once so that a name is a
/// `&'static str` and a score entry is an index.
static OTHER_SCORE_NAMES: RwLock<Vec<&'static str>> = RwLock::new(Vec::new());

/// A score name: an index into `SCORE_NAMES`, then `OTHER_SCORE_NAMES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ScoreName(u16);

/// Herder's own score names, numbered as `SCORE_NAMES` orders them (by
/// their text): a map built in this order is already sorted, and naming
/// an entry is a number, not a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnScore {
    AllocationSpread,
    Binpack,
    JobAntiAffinity,
    NodeAffinity,
    NodeReschedulePenalty,
    NormalizedScore,
    Preemption,
}

impl OwnScore {
    pub const COUNT: usize = SCORE_NAMES.len();
}

/// Each of herder's own scores with its name (checked below).
const OWN_SCORE_NAMES: [(OwnScore, &str); OwnScore::COUNT] = [
    (OwnScore::AllocationSpread, "allocation-spread"),
    (OwnScore::Binpack, "binpack"),
    (OwnScore::JobAntiAffinity, "job-anti-affinity"),
    (OwnScore::NodeAffinity, "node-affinity"),
    (OwnScore::NodeReschedulePenalty, "node-reschedule-penalty"),
    (OwnScore::NormalizedScore, "normalized-score"),
    (OwnScore::Preemption, "preemption"),
];

/// Whether two texts are equal, at compile time.
const fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

// A name's index in `SCORE_NAMES` is its packed code (less one) for the
// frozen coded names, so packing a map writes the index and never compares
// text; `OwnScore` numbers the same list. A change to `SCORE_NAMES` that
// breaks either fails the build here.
const _: () = {
    let mut i = 0;
    while i < CODED_SCORE_NAMES.len() {
        assert!(same_text(SCORE_NAMES[i], CODED_SCORE_NAMES[i]));
        i += 1;
    }
    let mut i = 0;
    while i < OWN_SCORE_NAMES.len() {
        let (score, name) = OWN_SCORE_NAMES[i];
        assert!(same_text(SCORE_NAMES[score as usize], name));
        i += 1;
    }
};

impl ScoreName {
    fn of(name: &str) -> Option<ScoreName> {
        if let Ok(at) = SCORE_NAMES.binary_search(&name) {
            return Some(ScoreName(at as u16));
        }
        let known = |others: &[&str]| others.iter().position(|n| *n == name);
        // A poisoned lock only means another thread panicked mid-push;
        // the vector itself is still whole.
        let others = OTHER_SCORE_NAMES.read().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = known(&others) {
            return Some(ScoreName((SCORE_NAMES.len() + at) as u16));
        }
        drop(others);
        let mut others = OTHER_SCORE_NAMES.write().unwrap_or_else(|e| e.into_inner());
        let at = match known(&others) {
            Some(at) => at,
            None if others.len() < MAX_OTHER_SCORE_NAMES => {
                others.push(Box::leak(name.to_string().into_boxed_str()));
                others.len() - 1
            }
            None => return None,
        };
        Some(ScoreName((SCORE_NAMES.len() + at) as u16))
    }

    fn as_str(self) -> &'static str {
        let at = usize::from(self.0);
        match SCORE_NAMES.get(at) {
            Some(name) => name,
            None => OTHER_SCORE_NAMES
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(at - SCORE_NAMES.len())
                .copied()
                .unwrap_or(""),
        }
    }
}

/// A node's score components by name (Nomad's `Scores` map, same JSON),
/// as one shared slice sorted by name of (two-byte name, value) pairs:
/// the scheduler memoises maps across candidates, and a copy into a
/// placement's metric is then a count bump, not an allocation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScoreMap(Arc<[(ScoreName, f64)]>);

impl ScoreMap {
    /// A map of `entries` (a name given twice keeps its last value).
    ///
    /// The scheduler builds five of these per placement, so the list is
    /// sized once and sorted once rather than grown entry by entry.
    pub fn from_entries<N: AsRef<str>>(entries: impl IntoIterator<Item = (N, f64)>) -> ScoreMap {
        let entries = entries.into_iter();
        let mut list: Vec<(ScoreName, f64)> = Vec::with_capacity(entries.size_hint().0);
        list.extend(
            entries.filter_map(|(name, value)| Some((ScoreName::of(name.as_ref())?, value))),
        );
        // Stable: of equal names the last given comes last, and is kept.
        list.sort_by(|(a, _), (b, _)| a.as_str().cmp(b.as_str()));
        let mut deduped: Vec<(ScoreName, f64)> = Vec::with_capacity(list.len());
        for entry in list {
            match deduped.last_mut() {
                Some(last) if last.0 == entry.0 => *last = entry,
                _ => deduped.push(entry),
            }
        }
        ScoreMap(deduped.into())
    }

    /// A map of herder's own names, with a value where `values` (indexed
    /// by [`OwnScore`]) has one: one allocation and no name looked up. The
    /// scheduler builds five of these per placement.
    pub fn of_own(values: &[Option<f64>; OwnScore::COUNT]) -> ScoreMap {
        let mut list = [(ScoreName(0), 0.0); OwnScore::COUNT];
        let mut len = 0;
        for (at, value) in values.iter().enumerate() {
            if let Some(value) = *value {
                list[len] = (ScoreName(at as u16), value);
                len += 1;
            }
        }
        ScoreMap(Arc::from(&list[..len]))
    }

    pub fn get(&self, name: &str) -> Option<f64> {
        self.0
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|at| self.0[at].1)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, f64)> {
        self.0.iter().map(|(n, v)| (n.as_str(), *v))
    }

    /// The entries as the packer writes their names (see the check on
    /// `CODED_SCORE_NAMES` above).
    fn labels(&self) -> impl ExactSizeIterator<Item = (ScoreLabel<'static>, f64)> + '_ {
        self.0.iter().map(|&(name, value)| {
            let at = usize::from(name.0);
            let label = match at < CODED_SCORE_NAMES.len() {
                true => ScoreLabel::Coded(at),
                false => ScoreLabel::Named(name.as_str()),
            };
            (label, value)
        })
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl nullable::IsEmpty for ScoreMap {
    fn is_empty_collection(&self) -> bool {
        self.is_empty()
    }
}

impl Serialize for ScoreMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.iter() {
            map.serialize_entry(name, &value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ScoreMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ScoreMap, D::Error> {
        let map = BTreeMap::<String, f64>::deserialize(d)?;
        Ok(ScoreMap::from_entries(map))
    }
}

/// How a placement was scored on one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeScoreMeta {
    #[serde(rename = "NodeID")]
    pub node_id: NodeId,
    #[serde(with = "nullable")]
    pub scores: ScoreMap,
    pub norm_score: f64,
}

/// What the scheduler saw while placing (or failing to place) an allocation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocMetric {
    pub nodes_evaluated: u64,
    pub nodes_filtered: u64,
    /// Shared by every placement of one evaluation (the same counts).
    #[serde(with = "nullable")]
    pub nodes_available: Arc<BTreeMap<String, u64>>,
    #[serde(with = "nullable")]
    pub class_filtered: CountMap,
    #[serde(with = "nullable")]
    pub constraint_filtered: CountMap,
    pub nodes_exhausted: u64,
    #[serde(with = "nullable")]
    pub class_exhausted: CountMap,
    #[serde(with = "nullable")]
    pub dimension_exhausted: CountMap,
    #[serde(with = "nullable")]
    pub quota_exhausted: Vec<String>,
    #[serde(with = "nullable")]
    pub resources_exhausted: BTreeMap<String, Resources>,
    #[serde(with = "nullable")]
    pub score_meta_data: Vec<NodeScoreMeta>,
    /// Nanoseconds spent placing.
    pub allocation_time: i64,
    pub coalesced_failures: u64,
}

impl AllocMetric {
    pub fn evaluate_node(&mut self) {
        self.nodes_evaluated += 1;
    }

    pub fn filter_node(&mut self, class: &str, constraint: &str) {
        self.nodes_filtered += 1;
        if !class.is_empty() {
            self.class_filtered.add(class, 1);
        }
        if !constraint.is_empty() {
            self.constraint_filtered.add(constraint, 1);
        }
    }

    pub fn exhausted_node(&mut self, class: &str, dimension: &str) {
        self.nodes_exhausted += 1;
        if !class.is_empty() {
            self.class_exhausted.add(class, 1);
        }
        if !dimension.is_empty() {
            self.dimension_exhausted.add(dimension, 1);
        }
    }
}

/// An allocation's metrics as it keeps them: packed into bytes by the
/// compact codec (`structs::codec`), about 180 bytes where the decoded
/// `AllocMetric` with its score metadata takes about 660. Every
/// allocation carries one and almost nobody reads it (the API's
/// allocation answer, `alloc status`), so it is unpacked on demand. The
/// bytes are also exactly what an allocation row stores, so persisting
/// them is a copy. Serializes as the `AllocMetric` it holds.
#[derive(Clone, PartialEq)]
pub struct PackedMetric(SharedBytes);

impl PackedMetric {
    pub fn pack(metric: &AllocMetric) -> PackedMetric {
        MetricPacker::default().pack(metric)
    }

    /// The metric. Bytes come from `pack` or were checked by
    /// `from_stored`, so this cannot fail; a default stands in if it did.
    pub fn unpack(&self) -> AllocMetric {
        Self::decode(&self.0, NodeRefs::Numbered).unwrap_or_default()
    }

    /// A metric as a stored row holds it (node IDs in full), checked.
    /// Rows written before format 6 spell out scores equal to their
    /// node's normalized score; they are kept in today's shorter form.
    pub fn from_stored(bytes: &[u8]) -> Result<PackedMetric, CodecError> {
        let metas_at = checked_metas_at(bytes)?;
        SCRATCH.with(|scratch| {
            // A decoder's buffer: the numbered bytes are copied once, into
            // their `Arc`. Checked as they are rewritten.
            let mut numbered = scratch.take();
            numbered.clear();
            let written = transcode(
                bytes,
                metas_at,
                NodeRefs::Full,
                NodeRefs::Numbered,
                &mut numbered,
            );
            let packed = written.map(|()| PackedMetric(SharedBytes::new(&numbered)));
            scratch.replace(numbered);
            packed
        })
    }

    /// Appends the metric as a stored row holds it: node IDs in full (the
    /// numbers are this process's own).
    pub fn write_stored(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let written = metas_at(&self.0).and_then(|metas_at| {
            transcode(&self.0, metas_at, NodeRefs::Numbered, NodeRefs::Full, out)
        });
        if written.is_err() {
            // Unreachable: the bytes were packed or checked here, and a
            // number handed out is never taken back. An empty metric is
            // still a readable row.
            out.truncate(start);
            let _ = encode_metric(&mut Writer(out), &AllocMetric::default(), NodeRefs::Full);
        }
    }

    /// [`write_stored`](Self::write_stored) into a vector of its own.
    pub fn to_stored(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.len() + 80);
        self.write_stored(&mut out);
        out
    }

    /// How many bytes it keeps in memory.
    pub fn len_in_memory(&self) -> usize {
        self.0.len()
    }

    /// This metric as format 5 stored it: every score's value written out.
    #[cfg(test)]
    pub(crate) fn spelled_out(&self) -> Vec<u8> {
        let stored = self.to_stored();
        let metas_at = checked_metas_at(&stored).expect("stored bytes check");
        let (head, metas) = stored.split_at(metas_at);
        let mut out = head.to_vec();
        let mut w = Writer(&mut out);
        let mut r = Reader { rest: metas };
        let count = r.len().expect("a count");
        w.varint(count as u64);
        for _ in 0..count {
            let (node_id, norm_score, n) =
                read_meta_head(&mut r, NodeRefs::Full, None).expect("a node");
            w.bytes(node_id.as_bytes());
            w.f64(norm_score);
            w.varint(n as u64);
            for _ in 0..n {
                let score = read_score(&mut r, norm_score).expect("a score");
                match score.name {
                    ScoreLabel::Coded(at) => w.u8(at as u8 + 1),
                    ScoreLabel::Named(name) => {
                        w.u8(0);
                        w.str(name);
                    }
                }
                w.f64(score.value);
            }
        }
        out
    }

    fn decode(bytes: &[u8], refs: NodeRefs) -> Result<AllocMetric, CodecError> {
        let mut r = Reader { rest: bytes };
        let metric = decode_metric(&mut r, refs)?;
        match r.rest.len() {
            0 => Ok(metric),
            n => Err(CodecError::Trailing(n)),
        }
    }
}

/// Packs the metrics of one evaluation's placements (a system job's: one
/// per node): one buffer reused from placement to placement, and the
/// nodes-available counts, which every placement of the evaluation shares,
/// encoded once. Packing was a sixth of a system placement's instructions.
#[derive(Default)]
pub struct MetricPacker {
    scratch: Vec<u8>,
    /// The shared counts last seen (held, so the pointer stays theirs) and
    /// their encoding.
    available: Option<(NodesAvailable, Vec<u8>)>,
}

/// An evaluation's nodes-available counts, shared by its placements.
type NodesAvailable = Arc<BTreeMap<String, u64>>;

impl MetricPacker {
    pub fn pack(&mut self, metric: &AllocMetric) -> PackedMetric {
        let MetricPacker { scratch, available } = self;
        let shared = match available {
            Some((counts, encoded)) if Arc::ptr_eq(counts, &metric.nodes_available) => encoded,
            _ => {
                let mut encoded = Vec::new();
                encode_available(&mut Writer(&mut encoded), &metric.nodes_available);
                &mut available
                    .insert((metric.nodes_available.clone(), encoded))
                    .1
            }
        };
        scratch.clear();
        let mut w = Writer(scratch);
        // Only embedded JSON can fail to encode, and a map of plain
        // numbers and strings cannot; an empty metric stands in if so.
        if encode_metric_with(&mut w, metric, NodeRefs::Numbered, |w| w.bytes(shared)).is_err() {
            w.0.clear();
            let _ = encode_metric(&mut w, &AllocMetric::default(), NodeRefs::Numbered);
        }
        PackedMetric(SharedBytes::new(scratch))
    }
}

impl fmt::Debug for PackedMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.unpack().fmt(f)
    }
}

impl Serialize for PackedMetric {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.unpack().serialize(s)
    }
}

impl<'de> Deserialize<'de> for PackedMetric {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PackedMetric, D::Error> {
        Ok(PackedMetric::pack(&AllocMetric::deserialize(d)?))
    }
}

/// Score names packed as one byte (their index + 1); 0 means the name
/// follows as a string. Frozen: allocation rows on disk (store format 4)
/// hold packed metrics.
const CODED_SCORE_NAMES: [&str; 7] = [
    "allocation-spread",
    "binpack",
    "job-anti-affinity",
    "node-affinity",
    "node-reschedule-penalty",
    "normalized-score",
    "preemption",
];

fn encode_metric(w: &mut Writer, m: &AllocMetric, refs: NodeRefs) -> Result<(), serde_json::Error> {
    encode_metric_with(w, m, refs, |w| encode_available(w, &m.nodes_available))
}

fn encode_available(w: &mut Writer, available: &BTreeMap<String, u64>) {
    w.counts(
        available.iter().map(|(k, v)| (k.as_str(), *v)),
        available.len(),
    );
}

/// The metric's encoding, with its nodes-available counts written by
/// `available` (in their place in the layout).
fn encode_metric_with(
    w: &mut Writer,
    m: &AllocMetric,
    refs: NodeRefs,
    available: impl FnOnce(&mut Writer),
) -> Result<(), serde_json::Error> {
    for n in [
        m.nodes_evaluated,
        m.nodes_filtered,
        m.nodes_exhausted,
        m.coalesced_failures,
    ] {
        w.varint(n);
    }
    w.signed(m.allocation_time);
    available(w);
    for counts in [
        &m.class_filtered,
        &m.constraint_filtered,
        &m.class_exhausted,
        &m.dimension_exhausted,
    ] {
        w.counts(counts.iter(), counts.len());
    }
    w.varint(m.quota_exhausted.len() as u64);
    for quota in &m.quota_exhausted {
        w.str(quota);
    }
    w.json_unless(m.resources_exhausted.is_empty(), &m.resources_exhausted)?;
    w.varint(m.score_meta_data.len() as u64);
    for meta in &m.score_meta_data {
        write_score_meta(w, refs, meta.node_id, meta.norm_score, meta.scores.labels());
    }
    Ok(())
}

/// Set in a score's name byte (format 6): the score is exactly its node's
/// normalized score, and its value is not written. A placement scored by
/// binpack alone has three equal numbers per node (binpack, Nomad's
/// `normalized-score` entry, `NormScore`); with this a placement's metric
/// is about 180 bytes instead of 260, which moves it from the allocator's
/// 320-byte class to the 224-byte one: ~90 MB at a million allocations.
/// Format-5 metrics never set the bit (their name bytes are 0-7).
const SAME_AS_NORM: u8 = 0x80;

thread_local! {
    /// [`PackedMetric::from_stored`]'s buffer.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// How packed bytes name a scored node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeRefs {
    /// The ID's 16 bytes: stored rows (frozen with the store format).
    Full,
    /// In memory: a varint, the node's number in [`node_numbers`] plus
    /// one, or 0 and the ID's 16 bytes when the table had no room.
    Numbered,
}

fn write_node(w: &mut Writer, refs: NodeRefs, node_id: NodeId) {
    let number = match refs {
        NodeRefs::Full => None,
        NodeRefs::Numbered => node_numbers::number_of(node_id),
    };
    write_node_as(w, refs, number, node_id);
}

/// [`write_node`] with the node's number (if it has one) given.
fn write_node_as(w: &mut Writer, refs: NodeRefs, number: Option<u32>, node_id: NodeId) {
    match (refs, number) {
        (NodeRefs::Numbered, Some(n)) => w.varint(u64::from(n) + 1),
        (NodeRefs::Numbered, None) => {
            w.u8(0);
            w.bytes(node_id.as_bytes());
        }
        (NodeRefs::Full, _) => w.bytes(node_id.as_bytes()),
    }
}

/// Reads a node written by [`write_node`]; `numbered` resolves numbers
/// (taken once by the caller, for all of a metric's nodes).
fn read_node(
    r: &mut Reader,
    refs: NodeRefs,
    numbered: Option<&node_numbers::Numbered>,
) -> Result<NodeId, CodecError> {
    match (refs, numbered) {
        (NodeRefs::Full, _) => r.id(),
        (NodeRefs::Numbered, _) => match r.varint()? {
            0 => r.id(),
            n => numbered
                .and_then(|table| table.id(n - 1))
                .ok_or(CodecError::BadCode {
                    field: "node number",
                    value: n,
                }),
        },
    }
}

/// One node's score metadata: node, normalized score, then each score's
/// name byte (a coded name, or 0 and the name), its value unless it is
/// the normalized score. The one writing of this layout.
fn write_score_meta<'s>(
    w: &mut Writer,
    refs: NodeRefs,
    node_id: NodeId,
    norm_score: f64,
    scores: impl ExactSizeIterator<Item = (ScoreLabel<'s>, f64)>,
) {
    write_node(w, refs, node_id);
    w.f64(norm_score);
    w.varint(scores.len() as u64);
    for (name, value) in scores {
        // Bit for bit: a NaN or a negative zero is written out.
        let same = value.to_bits() == norm_score.to_bits();
        let flag = if same { SAME_AS_NORM } else { 0 };
        match name {
            ScoreLabel::Coded(at) => w.u8((at as u8 + 1) | flag),
            ScoreLabel::Named(name) => {
                w.u8(flag);
                w.str(name);
            }
        }
        if !same {
            w.f64(value);
        }
    }
}

fn decode_metric(r: &mut Reader, refs: NodeRefs) -> Result<AllocMetric, CodecError> {
    let mut m = AllocMetric {
        nodes_evaluated: r.varint()?,
        nodes_filtered: r.varint()?,
        nodes_exhausted: r.varint()?,
        coalesced_failures: r.varint()?,
        allocation_time: r.signed()?,
        ..Default::default()
    };
    m.nodes_available = Arc::new(r.counts::<BTreeMap<String, u64>>()?);
    m.class_filtered = r.counts::<CountMap>()?;
    m.constraint_filtered = r.counts::<CountMap>()?;
    m.class_exhausted = r.counts::<CountMap>()?;
    m.dimension_exhausted = r.counts::<CountMap>()?;
    let quotas = r.len()?;
    m.quota_exhausted = (0..quotas).map(|_| r.string()).collect::<Result<_, _>>()?;
    m.resources_exhausted = r.json_or_default()?;
    let metas = r.len()?;
    let numbered = (refs == NodeRefs::Numbered).then(node_numbers::numbered);
    m.score_meta_data = (0..metas)
        .map(|_| decode_score_meta(r, refs, numbered.as_ref()))
        .collect::<Result<_, _>>()?;
    Ok(m)
}

fn decode_score_meta(
    r: &mut Reader,
    refs: NodeRefs,
    numbered: Option<&node_numbers::Numbered>,
) -> Result<NodeScoreMeta, CodecError> {
    let (node_id, norm_score, count) = read_meta_head(r, refs, numbered)?;
    let mut scores = Vec::with_capacity(count);
    for _ in 0..count {
        let score = read_score(r, norm_score)?;
        let name = match score.name {
            ScoreLabel::Coded(at) => std::borrow::Cow::Borrowed(CODED_SCORE_NAMES[at]),
            ScoreLabel::Named(name) => std::borrow::Cow::Owned(name.to_string()),
        };
        scores.push((name, score.value));
    }
    Ok(NodeScoreMeta {
        node_id,
        scores: ScoreMap::from_entries(scores),
        norm_score,
    })
}

/// A score's name as a packed metric holds it.
#[derive(Clone, Copy)]
enum ScoreLabel<'a> {
    /// An index into `CODED_SCORE_NAMES` (written as one more).
    Coded(usize),
    Named(&'a str),
}

/// One score as read back.
struct ScoreRead<'a> {
    name: ScoreLabel<'a>,
    value: f64,
}

/// The start of one node's score metadata: node, normalized score, and
/// how many scores follow (each read by [`read_score`]). With
/// `read_score`, the one reading of `write_score_meta`'s layout, for
/// decoding and for checking alike.
fn read_meta_head(
    r: &mut Reader,
    refs: NodeRefs,
    numbered: Option<&node_numbers::Numbered>,
) -> Result<(NodeId, f64, usize), CodecError> {
    Ok((read_node(r, refs, numbered)?, r.f64()?, r.len()?))
}

fn read_score<'a>(r: &mut Reader<'a>, norm_score: f64) -> Result<ScoreRead<'a>, CodecError> {
    let code = r.u8()?;
    let name = match code & !SAME_AS_NORM {
        0 => ScoreLabel::Named(r.str()?),
        coded => match usize::from(coded) - 1 {
            at if at < CODED_SCORE_NAMES.len() => ScoreLabel::Coded(at),
            _ => {
                return Err(CodecError::BadCode {
                    field: "score name",
                    value: u64::from(code),
                })
            }
        },
    };
    let spelled_out = code & SAME_AS_NORM == 0;
    let value = if spelled_out { r.f64()? } else { norm_score };
    Ok(ScoreRead { name, value })
}

/// Rewrites a metric's score metadata (from `metas_at`) from one way of
/// naming nodes to the other, appending to `out`; every score equal to its
/// node's normalized score comes out written as such (stored rows before
/// format 6 spelled them out). Holds the number table only when reading
/// numbers: giving out numbers (`Full` to `Numbered`) takes it to write.
fn transcode(
    bytes: &[u8],
    metas_at: usize,
    from: NodeRefs,
    to: NodeRefs,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let (head, metas) = bytes.split_at(metas_at);
    out.extend_from_slice(head);
    let mut w = Writer(out);
    let mut r = Reader { rest: metas };
    let numbered = (from == NodeRefs::Numbered).then(node_numbers::numbered);
    let count = r.len()?;
    w.varint(count as u64);
    let mut scores = Vec::new();
    for _ in 0..count {
        let (node_id, norm_score, n) = read_meta_head(&mut r, from, numbered.as_ref())?;
        scores.clear();
        for _ in 0..n {
            let score = read_score(&mut r, norm_score)?;
            scores.push((score.name, score.value));
        }
        write_score_meta(&mut w, to, node_id, norm_score, scores.iter().copied());
    }
    match r.rest.len() {
        0 => Ok(()),
        n => Err(CodecError::Trailing(n)),
    }
}

/// Where the score metadata of bytes this process packed starts (their
/// head holds no node: it is the same in either form).
fn metas_at(bytes: &[u8]) -> Result<usize, CodecError> {
    let mut r = Reader { rest: bytes };
    skip_head(&mut r, |r| r.skip_json())?;
    Ok(bytes.len() - r.rest.len())
}

/// Reads past a metric's counts and exhausted resources (`json` reads or
/// checks the embedded JSON), up to its score metadata.
fn skip_head<'a>(
    r: &mut Reader<'a>,
    json: impl FnOnce(&mut Reader<'a>) -> Result<(), CodecError>,
) -> Result<(), CodecError> {
    for _ in 0..4 {
        r.varint()?;
    }
    r.signed()?;
    for _ in 0..5 {
        // nodes available, then the four count maps
        for _ in 0..r.len()? {
            r.str()?;
            r.varint()?;
        }
    }
    for _ in 0..r.len()? {
        r.str()?;
    }
    json(r)
}

/// Where the score metadata of stored bytes starts, their head checked
/// as `decode_metric` reads it, without building it: a restart reads a
/// million stored metrics, and building each (its maps, its score list)
/// only to drop it was a fifth of the restart's CPU. The metadata is then
/// checked as [`transcode`] rewrites it; `a_checked_metric_is_one_that_decodes`
/// holds the two to `decode_metric`'s answers.
fn checked_metas_at(bytes: &[u8]) -> Result<usize, CodecError> {
    let mut r = Reader { rest: bytes };
    skip_head(&mut r, |r| {
        r.json_or_default::<BTreeMap<String, Resources>>().map(drop)
    })?;
    Ok(bytes.len() - r.rest.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checking (a restart's `from_stored`) and decoding read the same
    /// layout: they accept and refuse the same bytes, for every cut of a
    /// metric with every part present and for every single-byte change.
    #[test]
    fn a_checked_metric_is_one_that_decodes() {
        let mut m = AllocMetric {
            nodes_evaluated: 300,
            nodes_filtered: 2,
            nodes_exhausted: 1,
            coalesced_failures: 1,
            allocation_time: 12_345,
            ..Default::default()
        };
        m.nodes_available = Arc::new(BTreeMap::from([
            ("dc1".to_string(), 200),
            ("dc2".to_string(), 100),
        ]));
        m.filter_node("compute", "${attr.kernel.name} = linux");
        m.exhausted_node("compute", "memory");
        m.quota_exhausted = vec!["q".to_string()];
        m.resources_exhausted = BTreeMap::from([("web".to_string(), Resources::default())]);
        m.score_meta_data = vec![NodeScoreMeta {
            node_id: NodeId::from_u128(7),
            scores: ScoreMap::from_entries(vec![
                (std::borrow::Cow::Borrowed("binpack"), 0.5),
                (std::borrow::Cow::Owned("custom".to_string()), 0.25),
                (std::borrow::Cow::Borrowed("normalized-score"), 0.375),
                (std::borrow::Cow::Owned("custom-norm".to_string()), 0.375),
            ]),
            norm_score: 0.375,
        }];
        let packed = PackedMetric::pack(&m);
        let stored = packed.to_stored();
        let bytes = &stored[..];
        assert_eq!(
            PackedMetric::from_stored(bytes).expect("checks").unpack(),
            m
        );
        let agree = |b: &[u8]| {
            assert_eq!(
                PackedMetric::from_stored(b).is_ok(),
                PackedMetric::decode(b, NodeRefs::Full).is_ok(),
                "{b:?}"
            )
        };
        for cut in 0..bytes.len() {
            assert!(
                PackedMetric::from_stored(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
            agree(&bytes[..cut]);
        }
        agree(&[bytes, &[0]].concat());
        for at in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut changed = bytes.to_vec();
                changed[at] ^= flip;
                agree(&changed);
            }
        }
    }

    #[test]
    fn scores_read_and_write_as_nomads_sorted_map_keeping_unknown_names() {
        let json = r#"{"NodeID":"00000000-0000-0000-0000-000000000001","Scores":{"normalized-score":0.5,"binpack":0.25,"custom-score":1.0},"NormScore":0.5}"#;
        let meta: NodeScoreMeta = serde_json::from_str(json).expect("reads");
        assert_eq!(meta.scores.get("binpack"), Some(0.25));
        assert_eq!(meta.scores.get("custom-score"), Some(1.0));
        assert!(!meta.scores.contains_key("preemption"));
        let written = serde_json::to_string(&meta).expect("writes");
        assert!(
            written
                .contains(r#""Scores":{"binpack":0.25,"custom-score":1.0,"normalized-score":0.5}"#),
            "{written}"
        );
        let empty: NodeScoreMeta = serde_json::from_str(
            r#"{"NodeID":"00000000-0000-0000-0000-000000000001","Scores":null}"#,
        )
        .expect("null scores read as empty");
        assert!(empty.scores.is_empty());
        assert!(serde_json::to_string(&empty)
            .unwrap()
            .contains(r#""Scores":null"#));
    }

    #[test]
    fn a_name_given_twice_keeps_its_last_value() {
        let m = ScoreMap::from_entries([
            ("binpack", 1.0),
            ("allocation-spread", 2.0),
            ("binpack", 3.0),
        ]);
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            [("allocation-spread", 2.0), ("binpack", 3.0)]
        );
    }

    #[test]
    fn own_names_make_the_map_their_text_makes_and_pack_the_same() {
        let own = OWN_SCORE_NAMES;
        // Every subset of the names, in the enum's order and by text.
        for mask in 0u32..(1 << own.len()) {
            let mut values = [None; OwnScore::COUNT];
            let mut named = Vec::new();
            for (i, (score, name)) in own.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    let value = f64::from(i as u32) * 0.25 - 0.5;
                    values[*score as usize] = Some(value);
                    named.push((*name, value));
                }
            }
            let by_own = ScoreMap::of_own(&values);
            assert_eq!(by_own, ScoreMap::from_entries(named.iter().rev().copied()));
            assert_eq!(by_own.iter().collect::<Vec<_>>(), named);
            // Packed, the names are coded as the text's codes are: a
            // metric round-trips, and its stored bytes equal the text's.
            let metric = |scores: ScoreMap| AllocMetric {
                score_meta_data: vec![NodeScoreMeta {
                    node_id: NodeId::from_u128(7),
                    scores,
                    norm_score: -0.5,
                }],
                ..AllocMetric::default()
            };
            let packed = PackedMetric::pack(&metric(by_own.clone()));
            assert_eq!(packed.unpack(), metric(by_own));
            let spelled: Vec<(String, f64)> =
                named.iter().map(|(n, v)| (n.to_string(), *v)).collect();
            let from_text = PackedMetric::pack(&metric(ScoreMap::from_entries(spelled)));
            assert_eq!(packed.to_stored(), from_text.to_stored());
        }
    }

    fn placement_metric() -> AllocMetric {
        AllocMetric {
            nodes_evaluated: 1000,
            nodes_exhausted: 2,
            nodes_available: Arc::new([("dc1".to_string(), 500), ("dc2".to_string(), 500)].into()),
            class_exhausted: [("memory", 2)].into(),
            dimension_exhausted: [("cpu", 2)].into(),
            score_meta_data: (0..5u128)
                .map(|i| NodeScoreMeta {
                    node_id: uuid::Uuid::from_u128(i),
                    scores: ScoreMap::from_entries([
                        ("allocation-spread", 1.0),
                        // Binary fractions: JSON (serde_json's fast float
                        // parsing) reads them back exactly.
                        ("binpack", 0.9375 - i as f64 / 64.0),
                        ("normalized-score", 0.979577228180494),
                    ]),
                    norm_score: 0.979577228180494,
                })
                .collect(),
            allocation_time: 108_903,
            ..Default::default()
        }
    }

    #[test]
    fn a_packed_metric_unpacks_and_serializes_as_the_metric_it_holds() {
        let metric = placement_metric();
        let packed = PackedMetric::pack(&metric);
        assert_eq!(packed.unpack(), metric);
        assert_eq!(
            serde_json::to_value(&packed).unwrap(),
            serde_json::to_value(&metric).unwrap()
        );
        let back: PackedMetric =
            serde_json::from_str(&serde_json::to_string(&metric).unwrap()).unwrap();
        assert_eq!(back, packed);
        // What makes it worth packing: a placement's metric in a few
        // hundred bytes.
        assert!(packed.len_in_memory() < 320, "{}", packed.len_in_memory());
    }

    /// One packer across an evaluation's placements: the shared counts
    /// are encoded once, and counts that are not the same map (another
    /// evaluation's, or a copy with other numbers) are encoded afresh.
    #[test]
    fn a_reused_packer_packs_each_metric_as_a_fresh_one_would() {
        let mut packer = MetricPacker::default();
        let first = placement_metric();
        let mut second = placement_metric();
        second.nodes_evaluated += 1;
        second.nodes_available = first.nodes_available.clone();
        let mut other_counts = placement_metric();
        Arc::make_mut(&mut other_counts.nodes_available).insert("dc9".into(), 3);
        let mut same_names_other_numbers = placement_metric();
        for n in Arc::make_mut(&mut same_names_other_numbers.nodes_available).values_mut() {
            *n += 1;
        }
        for m in [
            &first,
            &second,
            &other_counts,
            &same_names_other_numbers,
            &first,
        ] {
            let packed = packer.pack(m);
            assert_eq!(packed, PackedMetric::pack(m));
            assert_eq!(packed.unpack(), *m);
        }
    }

    #[test]
    fn packed_bytes_from_elsewhere_are_checked() {
        let bytes = PackedMetric::pack(&placement_metric()).to_stored();
        assert!(PackedMetric::from_stored(&bytes).is_ok());
        for cut in 0..bytes.len() {
            assert!(
                PackedMetric::from_stored(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            PackedMetric::from_stored(&longer),
            Err(CodecError::Trailing(1))
        ));
    }

    /// A placement scored by binpack alone, as most are: binpack, the
    /// `normalized-score` entry and `NormScore` are one number per node.
    fn binpack_metric() -> AllocMetric {
        AllocMetric {
            nodes_evaluated: 15,
            nodes_exhausted: 1,
            nodes_available: Arc::new(
                [("dc1".to_string(), 5000), ("dc2".to_string(), 5000)].into(),
            ),
            class_exhausted: [("general", 1)].into(),
            dimension_exhausted: [("cpu", 1)].into(),
            score_meta_data: (0..5u128)
                .map(|i| {
                    let score = 0.7552238902285253 / (i + 1) as f64;
                    let mut scores = vec![("binpack", score), ("normalized-score", score)];
                    if i == 3 {
                        // A collision: binpack and the normalized score part.
                        scores = vec![
                            ("binpack", 2.0 * score + 0.002),
                            ("job-anti-affinity", -0.002),
                            ("normalized-score", score),
                        ];
                    }
                    NodeScoreMeta {
                        node_id: uuid::Uuid::from_u128(i),
                        scores: ScoreMap::from_entries(scores),
                        norm_score: score,
                    }
                })
                .collect(),
            allocation_time: 3447,
            ..Default::default()
        }
    }

    /// The point of format 6: such a metric (one node of five with a
    /// collision) is packed small enough that, with its `Arc`'s 16 bytes,
    /// it sits in the allocator's 224-byte class (format 5: the 320-byte
    /// one), and it reads back exactly.
    #[test]
    fn a_score_equal_to_its_normalized_score_is_packed_as_a_flag() {
        let metric = binpack_metric();
        let packed = PackedMetric::pack(&metric);
        assert_eq!(packed.unpack(), metric);
        let spelled_out = packed.spelled_out().len();
        let stored = packed.to_stored().len();
        assert!(spelled_out + 16 > 256, "format 5 took {spelled_out} bytes");
        assert!(
            stored + 16 <= 224,
            "{stored} bytes stored ({spelled_out} spelled out)"
        );
        assert_eq!(spelled_out - stored, 9 * 8, "nine values not written");
    }

    /// In memory a metric names its nodes by number: the same metric
    /// fits the allocator's 160-byte class with its block's 8-byte header
    /// (224 with the IDs in full), and writes out, and reads back, with
    /// the IDs.
    #[test]
    fn a_metric_in_memory_names_its_nodes_by_number() {
        let metric = binpack_metric();
        let packed = PackedMetric::pack(&metric);
        let stored = packed.to_stored();
        assert!(
            packed.len_in_memory() + 8 <= 160,
            "{} bytes in memory",
            packed.len_in_memory()
        );
        assert!(stored.len() - packed.len_in_memory() >= 5 * 14);
        let read = PackedMetric::from_stored(&stored).expect("checks");
        assert_eq!(read, packed, "the same numbers");
        assert_eq!(read.unpack(), metric);
        assert_eq!(
            PackedMetric::decode(&stored, NodeRefs::Full).expect("decodes"),
            metric
        );
    }

    /// A node the table had no room for is written in full in memory too
    /// (0, then its ID), and a number the table never gave out does not
    /// read.
    #[test]
    fn a_node_without_a_number_is_written_in_full() {
        let id = NodeId::new_v4();
        let mut bytes = Vec::new();
        write_node_as(&mut Writer(&mut bytes), NodeRefs::Numbered, None, id);
        assert_eq!(bytes.len(), 17);
        let table = node_numbers::numbered();
        let read = read_node(
            &mut Reader { rest: &bytes },
            NodeRefs::Numbered,
            Some(&table),
        );
        assert_eq!(read.expect("reads"), id);
        let mut unknown = Vec::new();
        Writer(&mut unknown).varint(node_numbers::MAX_NUMBERED as u64 + 1);
        let read = read_node(
            &mut Reader { rest: &unknown },
            NodeRefs::Numbered,
            Some(&table),
        );
        assert!(matches!(read, Err(CodecError::BadCode { .. })));
    }

    /// Format-5 metrics (every value written out) read back as the same
    /// metric and are kept as today's packing would keep them.
    #[test]
    fn a_metric_stored_before_format_6_is_read_and_kept_shortened() {
        for metric in [binpack_metric(), placement_metric()] {
            let packed = PackedMetric::pack(&metric);
            let old = packed.spelled_out();
            assert!(old.len() > packed.to_stored().len());
            let read = PackedMetric::from_stored(&old).expect("format-5 bytes check");
            assert_eq!(read, packed);
            assert_eq!(read.to_stored(), packed.to_stored());
            assert_eq!(read.unpack(), metric);
            assert_eq!(
                PackedMetric::decode(&old, NodeRefs::Full).expect("decodes"),
                metric
            );
        }
    }

    /// Only a value equal bit for bit is left out: a negative zero beside
    /// a zero normalized score, a NaN, and a named score keep theirs.
    #[test]
    fn only_an_identical_value_is_left_out() {
        let metric = AllocMetric {
            score_meta_data: vec![
                NodeScoreMeta {
                    node_id: uuid::Uuid::from_u128(1),
                    scores: ScoreMap::from_entries([("binpack", -0.0), ("custom", 0.0)]),
                    norm_score: 0.0,
                },
                NodeScoreMeta {
                    node_id: uuid::Uuid::from_u128(2),
                    scores: ScoreMap::from_entries([("binpack", f64::NAN)]),
                    norm_score: 1.5,
                },
            ],
            ..Default::default()
        };
        let packed = PackedMetric::pack(&metric);
        let back = PackedMetric::from_stored(&packed.to_stored())
            .expect("checks")
            .unpack();
        let first = &back.score_meta_data[0].scores;
        assert_eq!(
            first.get("binpack").map(f64::to_bits),
            Some((-0.0f64).to_bits())
        );
        assert_eq!(
            first.get("custom").map(f64::to_bits),
            Some(0.0f64.to_bits())
        );
        assert!(back.score_meta_data[1]
            .scores
            .get("binpack")
            .is_some_and(f64::is_nan));
        assert_eq!(
            packed.spelled_out().len() - packed.to_stored().len(),
            8,
            "only `custom`'s value"
        );
    }

    #[test]
    fn a_score_entry_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<(ScoreName, f64)>(), 16);
    }

    #[test]
    fn counts_stay_sorted_add_up_and_read_and_write_as_a_map() {
        let mut m = CountMap::default();
        m.add("memory", 1);
        m.add("cpu", 2);
        m.add("memory", 3);
        assert_eq!(m.get("memory"), Some(&4));
        assert_eq!(m.iter().collect::<Vec<_>>(), [("cpu", 2), ("memory", 4)]);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, r#"{"cpu":2,"memory":4}"#);
        let back: CountMap = serde_json::from_str(r#"{"memory":4,"cpu":2}"#).unwrap();
        assert_eq!(back, m);
        let metric: AllocMetric =
            serde_json::from_str(r#"{"ClassFiltered":null,"DimensionExhausted":{"cpu":1}}"#)
                .unwrap();
        assert!(metric.class_filtered.is_empty());
        assert_eq!(metric.dimension_exhausted.get("cpu"), Some(&1));
        assert!(serde_json::to_string(&metric)
            .unwrap()
            .contains(r#""ClassFiltered":null"#));
    }
}
