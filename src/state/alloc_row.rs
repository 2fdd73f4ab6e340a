//! The compact binary encoding of allocation rows (store format 4).
//!
//! Allocations are nearly all of the data dir: a million of them as JSON
//! rows were 1.9 KB each (field names, 36-character UUIDs, floats as
//! text), which the plan applier encoded, wrote and fsynced on the path of
//! every plan, and which sled then cached. This encoding writes the fields
//! in a fixed order with varints, raw 16-byte IDs and raw floats: about a
//! quarter of the size and a fraction of the CPU.
//!
//! Parts that are rare or open-ended (task states, networks and ports,
//! reschedule events, exhausted resources) are embedded as JSON, length
//! first (length 0: empty), so they follow the structs' serde rules.
//!
//! A row starts with its encoding's tag. JSON rows start with `{`, so rows
//! written by format 3 stay readable and are rewritten in this encoding the
//! next time they change. The layout of tag 1 is frozen: a change to it is
//! a new tag, never an edit.

use crate::structs::{
    AllocMetric, AllocatedCpuResources, AllocatedMemoryResources, AllocatedResources,
    AllocatedSharedResources, AllocatedTaskResources, Allocation, ClientStatus, CountMap,
    DesiredStatus, DesiredTransition, NodeScoreMeta, ScoreMap, VecMap,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The tag of this encoding (version 1).
pub(crate) const TAG_V1: u8 = 1;

/// Score names written as one byte (their index + 1); 0 means the name
/// follows as a string. Frozen with the tag.
const CODED_SCORE_NAMES: [&str; 7] = [
    "allocation-spread",
    "binpack",
    "job-anti-affinity",
    "node-affinity",
    "node-reschedule-penalty",
    "normalized-score",
    "preemption",
];

/// Why a row could not be read back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RowError {
    #[error("the row ends early")]
    Truncated,
    #[error("unknown row encoding {0}")]
    UnknownTag(u8),
    #[error("a string is not UTF-8")]
    NotUtf8,
    #[error("{field} has no value {value}")]
    BadCode { field: &'static str, value: u64 },
    #[error("a varint is too long")]
    BadVarint,
    #[error("embedded JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// Appends `alloc`, encoded, to `out`.
pub(crate) fn encode(out: &mut Vec<u8>, a: &Allocation) -> Result<(), serde_json::Error> {
    let mut w = Writer(out);
    w.u8(TAG_V1);
    for id in [a.id, a.eval_id, a.node_id] {
        w.bytes(id.as_bytes());
    }
    for s in [&a.namespace, &a.node_name, &a.job_id, &a.task_group] {
        w.str(s);
    }
    w.str(&a.name);
    w.varint(a.job_version);
    w.u8(desired_code(a.desired_status));
    w.u8(client_code(a.client_status));
    w.str(&a.desired_description);
    w.str(&a.client_description);
    w.u8(transition_code(&a.desired_transition));
    w.u8(u8::from(a.node_failure));
    for id in [
        a.previous_allocation,
        a.next_allocation,
        a.followup_eval_id,
        a.preempted_by_allocation,
    ] {
        w.opt_id(id);
    }
    for n in [a.create_index, a.modify_index, a.alloc_modify_index] {
        w.varint(n);
    }
    w.signed(a.create_time);
    w.signed(a.modify_time);
    encode_resources(&mut w, &a.allocated_resources)?;
    w.json_unless(a.task_states.is_empty(), &a.task_states)?;
    w.varint(a.preempted_allocations.len() as u64);
    for id in &a.preempted_allocations {
        w.bytes(id.as_bytes());
    }
    w.u8(u8::from(a.reschedule_tracker.is_some()));
    if let Some(tracker) = &a.reschedule_tracker {
        w.json(tracker)?;
    }
    w.u8(u8::from(a.metrics.is_some()));
    if let Some(metrics) = &a.metrics {
        encode_metrics(&mut w, metrics)?;
    }
    Ok(())
}

fn encode_resources(w: &mut Writer, r: &AllocatedResources) -> Result<(), serde_json::Error> {
    w.varint(r.tasks.len() as u64);
    for (name, task) in r.tasks.iter() {
        w.str(name);
        w.signed(task.cpu.cpu_shares);
        w.varint(task.cpu.reserved_cores.len() as u64);
        for core in &task.cpu.reserved_cores {
            w.varint(u64::from(*core));
        }
        w.signed(task.memory.memory_mb);
        w.signed(task.memory.memory_max_mb);
        w.json_unless(task.networks.is_empty(), &task.networks)?;
    }
    w.signed(r.shared.disk_mb);
    w.json_unless(r.shared.networks.is_empty(), &r.shared.networks)?;
    w.json_unless(r.shared.ports.is_empty(), &r.shared.ports)
}

fn encode_metrics(w: &mut Writer, m: &AllocMetric) -> Result<(), serde_json::Error> {
    for n in [
        m.nodes_evaluated,
        m.nodes_filtered,
        m.nodes_exhausted,
        m.coalesced_failures,
    ] {
        w.varint(n);
    }
    w.signed(m.allocation_time);
    w.counts(
        m.nodes_available.iter().map(|(k, v)| (k.as_str(), *v)),
        m.nodes_available.len(),
    );
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

/// Reads back a row written by [`encode`].
pub(crate) fn decode(bytes: &[u8]) -> Result<Allocation, RowError> {
    let mut r = Reader { rest: bytes };
    match r.u8()? {
        TAG_V1 => {}
        other => return Err(RowError::UnknownTag(other)),
    }
    let (id, eval_id, node_id) = (r.id()?, r.id()?, r.id()?);
    let (namespace, node_name, job_id, task_group) = (
        r.shared_str()?,
        r.shared_str()?,
        r.shared_str()?,
        r.shared_str()?,
    );
    let mut a = Allocation {
        id,
        eval_id,
        node_id,
        namespace,
        node_name,
        job_id,
        task_group,
        name: r.string()?,
        job_version: r.varint()?,
        desired_status: desired_status(r.u8()?)?,
        client_status: client_status(r.u8()?)?,
        desired_description: r.string()?,
        client_description: r.string()?,
        desired_transition: transition(r.u8()?)?,
        node_failure: r.u8()? != 0,
        previous_allocation: r.opt_id()?,
        next_allocation: r.opt_id()?,
        followup_eval_id: r.opt_id()?,
        preempted_by_allocation: r.opt_id()?,
        create_index: r.varint()?,
        modify_index: r.varint()?,
        alloc_modify_index: r.varint()?,
        create_time: r.signed()?,
        modify_time: r.signed()?,
        ..Default::default()
    };
    a.allocated_resources = Arc::new(decode_resources(&mut r)?);
    a.task_states = r.json_or_default::<VecMap<_, _>>()?;
    let preempted = r.len()?;
    a.preempted_allocations = (0..preempted).map(|_| r.id()).collect::<Result<_, _>>()?;
    if r.u8()? != 0 {
        a.reschedule_tracker = Some(r.json()?);
    }
    if r.u8()? != 0 {
        a.metrics = Some(Arc::new(decode_metrics(&mut r)?));
    }
    match r.rest.len() {
        0 => Ok(a),
        n => Err(RowError::Trailing(n)),
    }
}

fn decode_resources(r: &mut Reader) -> Result<AllocatedResources, RowError> {
    let mut tasks = VecMap::new();
    for _ in 0..r.len()? {
        let name = r.string()?;
        let cpu_shares = r.signed()?;
        let cores = r.len()?;
        let reserved_cores = (0..cores)
            .map(|_| r.varint().map(|c| c as u32))
            .collect::<Result<_, _>>()?;
        let task = AllocatedTaskResources {
            cpu: AllocatedCpuResources {
                cpu_shares,
                reserved_cores,
            },
            memory: AllocatedMemoryResources {
                memory_mb: r.signed()?,
                memory_max_mb: r.signed()?,
            },
            networks: r.json_or_default()?,
        };
        tasks.insert(name, task);
    }
    let shared = AllocatedSharedResources {
        disk_mb: r.signed()?,
        networks: r.json_or_default()?,
        ports: r.json_or_default()?,
    };
    Ok(AllocatedResources { tasks, shared })
}

fn decode_metrics(r: &mut Reader) -> Result<AllocMetric, RowError> {
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

fn decode_score_meta(r: &mut Reader) -> Result<NodeScoreMeta, RowError> {
    let node_id = r.id()?;
    let norm_score = r.f64()?;
    let mut scores = Vec::new();
    for _ in 0..r.len()? {
        let name = match r.u8()? {
            0 => std::borrow::Cow::Owned(r.string()?),
            code => match CODED_SCORE_NAMES.get(usize::from(code) - 1) {
                Some(name) => std::borrow::Cow::Borrowed(*name),
                None => {
                    return Err(RowError::BadCode {
                        field: "score name",
                        value: u64::from(code),
                    })
                }
            },
        };
        scores.push((name, r.f64()?));
    }
    Ok(NodeScoreMeta {
        node_id,
        scores: ScoreMap::from_entries(scores),
        norm_score,
    })
}

const DESIRED: [DesiredStatus; 3] = [
    DesiredStatus::Run,
    DesiredStatus::Stop,
    DesiredStatus::Evict,
];
const CLIENT: [ClientStatus; 6] = [
    ClientStatus::Pending,
    ClientStatus::Running,
    ClientStatus::Complete,
    ClientStatus::Failed,
    ClientStatus::Lost,
    ClientStatus::Unknown,
];

fn desired_code(s: DesiredStatus) -> u8 {
    DESIRED.iter().position(|d| *d == s).unwrap_or(0) as u8
}

fn desired_status(code: u8) -> Result<DesiredStatus, RowError> {
    DESIRED
        .get(usize::from(code))
        .copied()
        .ok_or(RowError::BadCode {
            field: "desired status",
            value: u64::from(code),
        })
}

fn client_code(s: ClientStatus) -> u8 {
    CLIENT.iter().position(|c| *c == s).unwrap_or(0) as u8
}

fn client_status(code: u8) -> Result<ClientStatus, RowError> {
    CLIENT
        .get(usize::from(code))
        .copied()
        .ok_or(RowError::BadCode {
            field: "client status",
            value: u64::from(code),
        })
}

/// Two bits per flag: 0 unset, 1 false, 2 true.
fn transition_code(t: &DesiredTransition) -> u8 {
    let bits = |flag: Option<bool>| match flag {
        None => 0u8,
        Some(false) => 1,
        Some(true) => 2,
    };
    bits(t.migrate) | bits(t.reschedule) << 2 | bits(t.force_reschedule) << 4
}

fn transition(code: u8) -> Result<DesiredTransition, RowError> {
    let flag = |shift: u8| match (code >> shift) & 3 {
        0 => Ok(None),
        1 => Ok(Some(false)),
        2 => Ok(Some(true)),
        _ => Err(RowError::BadCode {
            field: "desired transition",
            value: u64::from(code),
        }),
    };
    Ok(DesiredTransition {
        migrate: flag(0)?,
        reschedule: flag(2)?,
        force_reschedule: flag(4)?,
    })
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, b: u8) {
        self.0.push(b);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }

    /// LEB128: seven bits per byte, low bits first.
    fn varint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.0.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.0.push(n as u8);
    }

    /// Zigzag, so small negative numbers stay short.
    fn signed(&mut self, n: i64) {
        self.varint(((n << 1) ^ (n >> 63)) as u64);
    }

    fn f64(&mut self, v: f64) {
        self.bytes(&v.to_le_bytes());
    }

    fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.bytes(s.as_bytes());
    }

    fn opt_id(&mut self, id: Option<uuid::Uuid>) {
        match id {
            Some(id) => {
                self.u8(1);
                self.bytes(id.as_bytes());
            }
            None => self.u8(0),
        }
    }

    fn counts<'k>(&mut self, entries: impl Iterator<Item = (&'k str, u64)>, len: usize) {
        self.varint(len as u64);
        for (name, n) in entries {
            self.str(name);
            self.varint(n);
        }
    }

    fn json<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), serde_json::Error> {
        let encoded = serde_json::to_vec(value)?;
        self.varint(encoded.len() as u64);
        self.bytes(&encoded);
        Ok(())
    }

    /// Length 0 when `empty`, read back as the type's default.
    fn json_unless<T: Serialize + ?Sized>(
        &mut self,
        empty: bool,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        if empty {
            self.varint(0);
            Ok(())
        } else {
            self.json(value)
        }
    }
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RowError> {
        if self.rest.len() < n {
            return Err(RowError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, RowError> {
        Ok(self.take(1)?[0])
    }

    fn varint(&mut self) -> Result<u64, RowError> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(RowError::BadVarint)
    }

    /// A count of things that follow; each takes at least a byte, so a
    /// corrupt count cannot make a reader allocate more than the row holds.
    fn len(&mut self) -> Result<usize, RowError> {
        let n = self.varint()?;
        match usize::try_from(n) {
            Ok(n) if n <= self.rest.len() => Ok(n),
            _ => Err(RowError::Truncated),
        }
    }

    fn signed(&mut self) -> Result<i64, RowError> {
        let z = self.varint()?;
        Ok((z >> 1) as i64 ^ -((z & 1) as i64))
    }

    fn f64(&mut self) -> Result<f64, RowError> {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(self.take(8)?);
        Ok(f64::from_le_bytes(raw))
    }

    fn id(&mut self) -> Result<uuid::Uuid, RowError> {
        let mut raw = [0u8; 16];
        raw.copy_from_slice(self.take(16)?);
        Ok(uuid::Uuid::from_bytes(raw))
    }

    fn opt_id(&mut self) -> Result<Option<uuid::Uuid>, RowError> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.id()?),
        })
    }

    fn str(&mut self) -> Result<&'a str, RowError> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).map_err(|_| RowError::NotUtf8)
    }

    fn string(&mut self) -> Result<String, RowError> {
        self.str().map(str::to_string)
    }

    fn shared_str(&mut self) -> Result<Arc<str>, RowError> {
        self.str().map(Arc::from)
    }

    fn counts<M: FromIterator<(String, u64)>>(&mut self) -> Result<M, RowError> {
        let n = self.len()?;
        (0..n)
            .map(|_| Ok((self.string()?, self.varint()?)))
            .collect()
    }

    fn json<T: DeserializeOwned>(&mut self) -> Result<T, RowError> {
        let n = self.len()?;
        Ok(serde_json::from_slice(self.take(n)?)?)
    }

    fn json_or_default<T: DeserializeOwned + Default>(&mut self) -> Result<T, RowError> {
        let n = self.len()?;
        if n == 0 {
            return Ok(T::default());
        }
        Ok(serde_json::from_slice(self.take(n)?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs::{
        NetworkResource, Port, RescheduleEvent, RescheduleTracker, Resources, TaskEvent, TaskState,
    };
    use std::time::Duration;

    fn full_alloc() -> Allocation {
        let mut tasks = VecMap::new();
        tasks.insert(
            "web".to_string(),
            AllocatedTaskResources {
                cpu: AllocatedCpuResources {
                    cpu_shares: 500,
                    reserved_cores: vec![0, 3],
                },
                memory: AllocatedMemoryResources {
                    memory_mb: 256,
                    memory_max_mb: 512,
                },
                networks: vec![NetworkResource {
                    mbits: 10,
                    dynamic_ports: vec![Port {
                        label: "http".into(),
                        value: 23456,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            },
        );
        let mut task_states = VecMap::new();
        task_states.insert(
            "web".to_string(),
            TaskState {
                state: "running".into(),
                restarts: 2,
                started_at: Some(1_700_000_000_000_000_000),
                events: vec![TaskEvent {
                    event_type: "Started".into(),
                    time: 17,
                    ..Default::default()
                }],
                ..Default::default()
            },
        );
        let metrics = AllocMetric {
            nodes_evaluated: 1000,
            nodes_filtered: 3,
            nodes_exhausted: 2,
            coalesced_failures: 1,
            allocation_time: 123_456,
            nodes_available: Arc::new([("dc1".to_string(), 500), ("dc2".to_string(), 7)].into()),
            class_filtered: [("gpu", 1)].into(),
            constraint_filtered: [("${attr.kernel.name} = linux", 3)].into(),
            class_exhausted: [("memory", 2)].into(),
            dimension_exhausted: [("cpu", 2)].into(),
            quota_exhausted: vec!["q".into()],
            resources_exhausted: [(
                "web".to_string(),
                Resources {
                    cpu: 100,
                    ..Default::default()
                },
            )]
            .into(),
            score_meta_data: vec![NodeScoreMeta {
                node_id: uuid::Uuid::from_u128(9),
                scores: ScoreMap::from_entries([
                    ("binpack", 0.959154456360988),
                    ("custom-from-elsewhere", -1.5),
                    ("normalized-score", 0.979577228180494),
                ]),
                norm_score: 0.979577228180494,
            }],
        };
        Allocation {
            id: uuid::Uuid::from_u128(1),
            namespace: "default".into(),
            eval_id: uuid::Uuid::from_u128(2),
            name: "web.api[17]".into(),
            node_id: uuid::Uuid::from_u128(3),
            node_name: "node-3".into(),
            job_id: "web".into(),
            job_version: 4,
            task_group: "api".into(),
            allocated_resources: Arc::new(AllocatedResources {
                tasks,
                shared: AllocatedSharedResources {
                    disk_mb: 300,
                    networks: vec![],
                    ports: vec![Port {
                        label: "db".into(),
                        value: 8080,
                        to: 80,
                        host_network: "default".into(),
                    }],
                },
            }),
            metrics: Some(Arc::new(metrics)),
            desired_status: DesiredStatus::Stop,
            desired_description: "alloc is being migrated".into(),
            desired_transition: DesiredTransition {
                migrate: Some(true),
                reschedule: Some(false),
                force_reschedule: None,
            },
            client_status: ClientStatus::Lost,
            client_description: "node is down".into(),
            task_states,
            previous_allocation: Some(uuid::Uuid::from_u128(5)),
            next_allocation: Some(uuid::Uuid::from_u128(6)),
            reschedule_tracker: Some(RescheduleTracker {
                events: vec![RescheduleEvent {
                    reschedule_time: 99,
                    prev_alloc_id: uuid::Uuid::from_u128(5),
                    prev_node_id: uuid::Uuid::from_u128(8),
                    delay: Duration::from_secs(30),
                }],
            }),
            followup_eval_id: Some(uuid::Uuid::from_u128(7)),
            preempted_allocations: vec![uuid::Uuid::from_u128(10), uuid::Uuid::from_u128(11)],
            preempted_by_allocation: None,
            node_failure: true,
            create_index: 1_000_000,
            modify_index: 1_000_007,
            alloc_modify_index: 1_000_003,
            create_time: 1_795_328_878_206_863_004,
            modify_time: -5,
        }
    }

    fn round_trip(a: &Allocation) -> Allocation {
        let mut out = Vec::new();
        encode(&mut out, a).expect("encodes");
        decode(&out).expect("decodes")
    }

    #[test]
    fn every_field_survives_a_round_trip() {
        let a = full_alloc();
        assert_eq!(round_trip(&a), a);
        let bare = Allocation::default();
        assert_eq!(round_trip(&bare), bare);
    }

    #[test]
    fn a_placed_allocation_is_a_fraction_of_its_json() {
        let mut a = full_alloc();
        a.task_states = VecMap::new();
        a.reschedule_tracker = None;
        let mut binary = Vec::new();
        encode(&mut binary, &a).unwrap();
        let json = serde_json::to_vec(&a).unwrap();
        assert!(
            binary.len() * 2 < json.len(),
            "{} bytes binary, {} JSON",
            binary.len(),
            json.len()
        );
    }

    #[test]
    fn damaged_rows_are_errors_not_panics() {
        let mut out = Vec::new();
        encode(&mut out, &full_alloc()).unwrap();
        for cut in 0..out.len() {
            assert!(decode(&out[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = out.clone();
        extra.push(0);
        assert!(matches!(decode(&extra), Err(RowError::Trailing(1))));
        let mut tagged = out.clone();
        tagged[0] = 9;
        assert!(matches!(decode(&tagged), Err(RowError::UnknownTag(9))));
        // Flip every byte in turn: anything may come back, nothing panics.
        for at in 0..out.len() {
            let mut flipped = out.clone();
            flipped[at] ^= 0xff;
            let _ = decode(&flipped);
        }
    }
}
