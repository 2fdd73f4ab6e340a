//! What the scheduler saw while placing an allocation (Nomad's
//! `AllocMetric`), kept compact.
//!
//! Every allocation carries one of these, so at a million allocations each
//! byte here is a megabyte of server memory. Nomad's maps are Go maps;
//! herder keeps the same JSON but stores the small maps as sorted vectors
//! (`CountMap`) and the score names as two-byte indexes (`ScoreMap`): a
//! `BTreeMap` allocates a node of eleven slots for its first entry.

use super::codec::{CodecError, Reader, Writer};
use super::resources::Resources;
use super::serde_util::nullable;
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

    pub fn get(&self, name: &str) -> Option<f64> {
        self.0
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|at| self.0[at].1)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.0.iter().map(|(n, v)| (n.as_str(), *v))
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
/// compact codec (`structs::codec`), about 300 bytes where the decoded
/// `AllocMetric` with its score metadata takes about 660. Every
/// allocation carries one and almost nobody reads it (the API's
/// allocation answer, `alloc status`), so it is unpacked on demand. The
/// bytes are also exactly what an allocation row stores, so persisting
/// them is a copy. Serializes as the `AllocMetric` it holds.
#[derive(Clone, PartialEq)]
pub struct PackedMetric(Arc<[u8]>);

impl PackedMetric {
    pub fn pack(metric: &AllocMetric) -> PackedMetric {
        MetricPacker::default().pack(metric)
    }

    /// The metric. Bytes come from `pack` or were checked by
    /// `from_bytes`, so this cannot fail; a default stands in if it did.
    pub fn unpack(&self) -> AllocMetric {
        Self::decode(&self.0).unwrap_or_default()
    }

    /// Packed bytes read from elsewhere (a stored row), checked.
    pub fn from_bytes(bytes: &[u8]) -> Result<PackedMetric, CodecError> {
        let mut r = Reader { rest: bytes };
        check_metric(&mut r)?;
        match r.rest.len() {
            0 => Ok(PackedMetric(bytes.into())),
            n => Err(CodecError::Trailing(n)),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn decode(bytes: &[u8]) -> Result<AllocMetric, CodecError> {
        let mut r = Reader { rest: bytes };
        let metric = decode_metric(&mut r)?;
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
        if encode_metric_with(&mut w, metric, |w| w.bytes(shared)).is_err() {
            w.0.clear();
            let _ = encode_metric(&mut w, &AllocMetric::default());
        }
        PackedMetric(Arc::from(&scratch[..]))
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

fn encode_metric(w: &mut Writer, m: &AllocMetric) -> Result<(), serde_json::Error> {
    encode_metric_with(w, m, |w| encode_available(w, &m.nodes_available))
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
        w.bytes(meta.node_id.as_bytes());
        w.f64(meta.norm_score);
        w.varint(meta.scores.len() as u64);
        for (name, value) in meta.scores.iter() {
            match CODED_SCORE_NAMES.iter().position(|n| *n == name) {
                Some(at) => w.u8(at as u8 + 1),
                None => {
                    w.u8(0);
                    w.str(name);
                }
            }
            w.f64(value);
        }
    }
    Ok(())
}

fn decode_metric(r: &mut Reader) -> Result<AllocMetric, CodecError> {
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
    m.score_meta_data = (0..metas)
        .map(|_| decode_score_meta(r))
        .collect::<Result<_, _>>()?;
    Ok(m)
}

fn decode_score_meta(r: &mut Reader) -> Result<NodeScoreMeta, CodecError> {
    let mut scores = Vec::new();
    let (node_id, norm_score) = read_score_meta(r, |name, value| {
        let name = match name {
            ScoreNameRead::Coded(name) => std::borrow::Cow::Borrowed(name),
            ScoreNameRead::Named(name) => std::borrow::Cow::Owned(name.to_string()),
        };
        scores.push((name, value));
    })?;
    Ok(NodeScoreMeta {
        node_id,
        scores: ScoreMap::from_entries(scores),
        norm_score,
    })
}

/// A score's name as a packed metric holds it.
enum ScoreNameRead<'a> {
    Coded(&'static str),
    Named(&'a str),
}

/// Reads one node's score metadata, handing each score to `score`; answers
/// the node and its normalized score. The one reading of this layout, for
/// decoding and for checking alike.
fn read_score_meta<'a>(
    r: &mut Reader<'a>,
    mut score: impl FnMut(ScoreNameRead<'a>, f64),
) -> Result<(NodeId, f64), CodecError> {
    let node_id = r.id()?;
    let norm_score = r.f64()?;
    for _ in 0..r.len()? {
        let name = match r.u8()? {
            0 => ScoreNameRead::Named(r.str()?),
            code => match CODED_SCORE_NAMES.get(usize::from(code) - 1) {
                Some(name) => ScoreNameRead::Coded(name),
                None => {
                    return Err(CodecError::BadCode {
                        field: "score name",
                        value: u64::from(code),
                    })
                }
            },
        };
        score(name, r.f64()?);
    }
    Ok((node_id, norm_score))
}

/// Checks that `r` holds a metric as `decode_metric` reads it, without
/// building it: a restart checks a million stored metrics, and building
/// each (its maps, its score list) only to drop it was a fifth of the
/// restart's CPU. Mirrors `decode_metric` field for field (the layout is
/// frozen with format 4); `a_checked_metric_is_one_that_decodes` holds the
/// two to the same answers.
fn check_metric(r: &mut Reader) -> Result<(), CodecError> {
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
    r.json_or_default::<BTreeMap<String, Resources>>()?;
    for _ in 0..r.len()? {
        read_score_meta(r, |_, _| {})?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checking (a restart's `from_bytes`) and decoding read the same
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
            ]),
            norm_score: 0.375,
        }];
        let packed = PackedMetric::pack(&m);
        let bytes = packed.as_bytes();
        assert_eq!(PackedMetric::from_bytes(bytes).expect("checks").unpack(), m);
        let agree = |b: &[u8]| {
            assert_eq!(
                PackedMetric::from_bytes(b).is_ok(),
                PackedMetric::decode(b).is_ok(),
                "{b:?}"
            )
        };
        for cut in 0..bytes.len() {
            assert!(
                PackedMetric::from_bytes(&bytes[..cut]).is_err(),
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
        assert!(packed.as_bytes().len() < 320, "{}", packed.as_bytes().len());
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
        let bytes = PackedMetric::pack(&placement_metric()).as_bytes().to_vec();
        assert!(PackedMetric::from_bytes(&bytes).is_ok());
        for cut in 0..bytes.len() {
            assert!(
                PackedMetric::from_bytes(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            PackedMetric::from_bytes(&longer),
            Err(CodecError::Trailing(1))
        ));
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
