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
//! first (length 0: empty), so they follow the structs' serde rules. The
//! metrics come last, as the bytes the allocation keeps them packed in
//! (`structs::PackedMetric`; from store format 6 a score may be a flag
//! meaning "the normalized score", which older rows never hold). The building blocks are `structs::codec`.
//!
//! A row starts with its encoding's tag. JSON rows start with `{`, so rows
//! written by format 3 stay readable and are rewritten in this encoding the
//! next time they change. The layout of tag 1 is frozen: a change to it is
//! a new tag, never an edit.

use crate::structs::codec::{CodecError, Reader, Writer};
use crate::structs::{
    AllocLinks, AllocatedCpuResources, AllocatedMemoryResources, AllocatedResources,
    AllocatedSharedResources, AllocatedTaskResources, Allocation, ClientStatus, DesiredStatus,
    DesiredTransition, PackedMetric, Seldom, SharedStr, TaskStates, VecMap,
};
use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The tag of this encoding (version 1).
pub(crate) const TAG_V1: u8 = 1;
/// Version 2: version 1 with the allocation's deployment (ID and status)
/// before the metrics. Written only for allocations in a deployment, so
/// every other row keeps version 1's size.
pub(crate) const TAG_V2: u8 = 2;

/// Appends `alloc`, encoded, to `out`.
pub(crate) fn encode(out: &mut Vec<u8>, a: &Allocation) -> Result<(), serde_json::Error> {
    let mut w = Writer(out);
    let in_deployment = a.deployment_id.is_some() || a.deployment_status().is_some();
    w.u8(if in_deployment { TAG_V2 } else { TAG_V1 });
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
        a.links().previous_allocation,
        a.links().next_allocation,
        a.links().followup_eval_id,
        a.links().preempted_by_allocation,
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
    let links = a.links();
    w.varint(links.preempted_allocations.len() as u64);
    for id in &links.preempted_allocations {
        w.bytes(id.as_bytes());
    }
    w.u8(u8::from(links.reschedule_tracker.is_some()));
    if let Some(tracker) = &links.reschedule_tracker {
        w.json(tracker)?;
    }
    if in_deployment {
        w.opt_id(a.deployment_id);
        w.json_unless(a.deployment_status().is_none(), &a.deployment_status())?;
    }
    // Last, so the packed bytes need no length: they are the rest.
    w.u8(u8::from(a.metrics.is_some()));
    if let Some(metrics) = &a.metrics {
        metrics.write_stored(w.0);
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

/// Reads back a row written by [`encode`].
#[cfg(test)]
pub(crate) fn decode(bytes: &[u8]) -> Result<Allocation, CodecError> {
    decode_sharing(bytes, &mut RowSharing::default())
}

/// [`decode`], sharing with the rows `sharing` saw before it the values
/// many allocations repeat (a loader's decoder keeps one across its rows).
pub(crate) fn decode_sharing(
    bytes: &[u8],
    sharing: &mut RowSharing,
) -> Result<Allocation, CodecError> {
    let mut r = Reader { rest: bytes };
    let in_deployment = match r.u8()? {
        TAG_V1 => false,
        TAG_V2 => true,
        other => return Err(CodecError::UnknownTag(other)),
    };
    let (id, eval_id, node_id) = (r.id()?, r.id()?, r.id()?);
    let namespace = sharing.str(0, &mut r)?;
    let node_name = sharing.str(1, &mut r)?;
    let job_id = sharing.str(2, &mut r)?;
    let task_group = sharing.str(3, &mut r)?;
    let name = r.str()?.into();
    let job_version = r.varint()?;
    let desired_status = desired_status(r.u8()?)?;
    let client_status = client_status(r.u8()?)?;
    let desired_description = sharing.str(4, &mut r)?;
    let client_description = sharing.str(5, &mut r)?;
    let desired_transition = transition(r.u8()?)?;
    let node_failure = r.u8()? != 0;
    let mut links = AllocLinks {
        previous_allocation: r.opt_id()?,
        next_allocation: r.opt_id()?,
        followup_eval_id: r.opt_id()?,
        preempted_by_allocation: r.opt_id()?,
        ..AllocLinks::NONE
    };
    let (create_index, modify_index, alloc_modify_index) = (r.varint()?, r.varint()?, r.varint()?);
    let (create_time, modify_time) = (r.signed()?, r.signed()?);
    let allocated_resources = sharing.resources(&mut r)?;
    let task_states = r.json_or_default::<TaskStates>()?;
    let preempted = r.len()?;
    links.preempted_allocations = (0..preempted).map(|_| r.id()).collect::<Result<_, _>>()?;
    if r.u8()? != 0 {
        links.reschedule_tracker = Some(r.json()?);
    }
    let (deployment_id, deployment_status) = if in_deployment {
        (r.opt_id()?, r.json_or_default::<Option<_>>()?)
    } else {
        (None, None)
    };
    let has_metrics = r.u8()? != 0;
    let rest = std::mem::take(&mut r.rest);
    let metrics = match (has_metrics, rest.len()) {
        (true, _) => Some(PackedMetric::from_stored(rest)?),
        (false, 0) => None,
        (false, n) => return Err(CodecError::Trailing(n)),
    };
    // Every field spelled out: `..Default::default()` built (and dropped)
    // a default grant for each of a restart's million rows.
    Ok(Allocation {
        id,
        namespace,
        eval_id,
        name,
        node_id,
        node_name,
        job_id,
        job_version,
        task_group,
        allocated_resources,
        metrics,
        desired_status,
        desired_description,
        desired_transition,
        client_status,
        client_description,
        task_states,
        // Boxed only when one of them is set (see `structs::Seldom`).
        seldom: Seldom::new(links, deployment_status),
        node_failure,
        deployment_id,
        create_index,
        modify_index,
        alloc_modify_index,
        create_time,
        modify_time,
    })
}

/// One copy of each value many allocation rows repeat, for one decoder.
///
/// The scheduler shares an allocation's namespace, job, group and node
/// name strings, and one plan's allocations share their grant; rows read
/// back would otherwise each get their own copies, and a restarted server
/// would hold more memory than the one that wrote them. Sharing here, as
/// each row is decoded, also spares building a copy only to drop it: a
/// known string is looked up by its bytes (not even checked as UTF-8
/// again), and a grant encoded exactly as the previous row's is that grant.
#[derive(Default)]
pub(crate) struct RowSharing {
    /// Keyed by the standard hash: job IDs and node names are a client's
    /// choice, and a chosen set of colliding names must not turn a restart
    /// quadratic.
    strings: HashSet<KnownStr>,
    /// Each string field's value in the previous row: one plan's rows
    /// repeat their namespace, job, group, stop reason and client's
    /// description, found by one comparison.
    recent: [Option<SharedStr>; 6],
    /// The last grant decoded and the bytes it was decoded from: rows come
    /// back in creation order, so one plan's allocations arrive together.
    last_resources: Option<(Vec<u8>, Arc<AllocatedResources>)>,
    /// The same for rows read as JSON, which have no bytes to match.
    last_json_resources: Option<Arc<AllocatedResources>>,
}

impl RowSharing {
    /// The string at the reader (the row's `field`th string), shared.
    fn str(&mut self, field: usize, r: &mut Reader) -> Result<SharedStr, CodecError> {
        let n = r.len()?;
        let bytes = r.take(n)?;
        let recent = &mut self.recent[field];
        if let Some(last) = recent.as_ref().filter(|s| s.as_bytes() == bytes) {
            return Ok(last.clone());
        }
        let s = match self.strings.get(bytes) {
            Some(known) => known.0.clone(),
            None => {
                let s =
                    SharedStr::from(std::str::from_utf8(bytes).map_err(|_| CodecError::NotUtf8)?);
                self.strings.insert(KnownStr(s.clone()));
                s
            }
        };
        *recent = Some(s.clone());
        Ok(s)
    }

    /// The grant at the reader, shared with the previous row's when it is
    /// encoded the same. The encoding is read front to back and decides
    /// its own end, so the same bytes decode to the same grant and end at
    /// the same place.
    fn resources(&mut self, r: &mut Reader) -> Result<Arc<AllocatedResources>, CodecError> {
        if let Some((bytes, grant)) = &self.last_resources {
            if r.rest.starts_with(bytes) {
                r.take(bytes.len())?;
                return Ok(grant.clone());
            }
        }
        let before = r.rest;
        let grant = Arc::new(decode_resources(r)?);
        let used = &before[..before.len() - r.rest.len()];
        self.last_resources = Some((used.to_vec(), grant.clone()));
        Ok(grant)
    }

    /// Shares the values of an allocation decoded some other way (a JSON
    /// row written by format 3): its strings, and its grant when it equals
    /// the previous row's (compared by value: there are no bytes to match).
    pub(crate) fn share(&mut self, a: &mut Allocation) {
        match &self.last_json_resources {
            Some(grant) if **grant == *a.allocated_resources => {
                a.allocated_resources = grant.clone();
            }
            _ => self.last_json_resources = Some(a.allocated_resources.clone()),
        }
        for s in [
            &mut a.namespace,
            &mut a.node_name,
            &mut a.job_id,
            &mut a.task_group,
            &mut a.desired_description,
            &mut a.client_description,
        ] {
            match self.strings.get(s.as_bytes()) {
                Some(known) => *s = known.0.clone(),
                None => {
                    self.strings.insert(KnownStr(s.clone()));
                }
            }
        }
    }
}

/// A shared string found by its bytes (its hash is its bytes' hash, so a
/// row's raw bytes look it up without being checked as UTF-8 first).
#[derive(PartialEq, Eq)]
struct KnownStr(SharedStr);

impl Hash for KnownStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.as_bytes().hash(state);
    }
}

impl Borrow<[u8]> for KnownStr {
    fn borrow(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

fn decode_resources(r: &mut Reader) -> Result<AllocatedResources, CodecError> {
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

fn desired_status(code: u8) -> Result<DesiredStatus, CodecError> {
    DESIRED
        .get(usize::from(code))
        .copied()
        .ok_or(CodecError::BadCode {
            field: "desired status",
            value: u64::from(code),
        })
}

fn client_code(s: ClientStatus) -> u8 {
    CLIENT.iter().position(|c| *c == s).unwrap_or(0) as u8
}

fn client_status(code: u8) -> Result<ClientStatus, CodecError> {
    CLIENT
        .get(usize::from(code))
        .copied()
        .ok_or(CodecError::BadCode {
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

fn transition(code: u8) -> Result<DesiredTransition, CodecError> {
    let flag = |shift: u8| match (code >> shift) & 3 {
        0 => Ok(None),
        1 => Ok(Some(false)),
        2 => Ok(Some(true)),
        _ => Err(CodecError::BadCode {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs::{
        AllocMetric, NetworkResource, NodeScoreMeta, Port, RescheduleEvent, RescheduleTracker,
        Resources, ScoreMap, TaskEvent, TaskState,
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
            metrics: Some(PackedMetric::pack(&metrics)),
            desired_status: DesiredStatus::Stop,
            desired_description: "alloc is being migrated".into(),
            desired_transition: DesiredTransition {
                migrate: Some(true),
                reschedule: Some(false),
                force_reschedule: None,
            },
            client_status: ClientStatus::Lost,
            client_description: "node is down".into(),
            task_states: task_states.into(),
            seldom: Seldom::new(
                AllocLinks {
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
                    preempted_allocations: vec![
                        uuid::Uuid::from_u128(10),
                        uuid::Uuid::from_u128(11),
                    ],
                    preempted_by_allocation: None,
                },
                Some(crate::structs::AllocDeploymentStatus {
                    healthy: Some(true),
                    timestamp: Some(1_795_328_878_206_863_010),
                    canary: true,
                    modify_index: 1_000_005,
                }),
            ),
            node_failure: true,
            deployment_id: Some(uuid::Uuid::from_u128(12)),
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
    fn only_rows_in_a_deployment_take_version_2() {
        let mut a = full_alloc();
        let mut out = Vec::new();
        encode(&mut out, &a).expect("encodes");
        assert_eq!(out[0], TAG_V2);
        a.deployment_id = None;
        a.set_deployment_status(None);
        out.clear();
        encode(&mut out, &a).expect("encodes");
        assert_eq!(out[0], TAG_V1);
        assert_eq!(decode(&out).expect("decodes"), a);
        a.deployment_id = Some(uuid::Uuid::from_u128(3));
        assert_eq!(round_trip(&a), a);
    }

    #[test]
    fn a_placed_allocation_is_a_fraction_of_its_json() {
        let mut a = full_alloc();
        a.task_states = TaskStates::default();
        a.links_mut().reschedule_tracker = None;
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

    fn encoded(a: &Allocation) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, a).expect("encodes");
        out
    }

    #[test]
    fn rows_decoded_in_a_row_share_their_repeated_values() {
        let first = full_alloc();
        let mut same_plan = first.clone();
        same_plan.id = uuid::Uuid::from_u128(21);
        same_plan.node_name = "node-4".into();
        let mut bigger = same_plan.clone();
        bigger.id = uuid::Uuid::from_u128(22);
        Arc::make_mut(&mut bigger.allocated_resources)
            .shared
            .disk_mb = 301;
        let mut back_on_node_3 = first.clone();
        back_on_node_3.id = uuid::Uuid::from_u128(23);
        back_on_node_3.job_id = "other".into();

        let mut sharing = RowSharing::default();
        let decoded: Vec<Allocation> = [&first, &same_plan, &bigger, &back_on_node_3]
            .into_iter()
            .map(|a| decode_sharing(&encoded(a), &mut sharing).expect("decodes"))
            .collect();
        for (got, want) in decoded
            .iter()
            .zip([&first, &same_plan, &bigger, &back_on_node_3])
        {
            assert_eq!(got, want);
        }
        let [a, b, c, d] = &decoded[..] else {
            unreachable!("four rows")
        };
        assert!(
            SharedStr::ptr_eq(&a.job_id, &b.job_id)
                && SharedStr::ptr_eq(&a.namespace, &c.namespace)
        );
        assert!(Arc::ptr_eq(&a.allocated_resources, &b.allocated_resources));
        assert!(!Arc::ptr_eq(&b.allocated_resources, &c.allocated_resources));
        // Not the previous row's node, but seen before: the same string.
        assert!(SharedStr::ptr_eq(&a.node_name, &d.node_name));
        assert!(!SharedStr::ptr_eq(&a.node_name, &b.node_name));
    }

    #[test]
    fn json_rows_share_their_strings_and_grant_too() {
        let first = full_alloc();
        let mut second = first.clone();
        second.id = uuid::Uuid::from_u128(31);
        let mut sharing = RowSharing::default();
        let [a, b] = [&first, &second].map(|a| {
            let mut read: Allocation =
                serde_json::from_slice(&serde_json::to_vec(a).expect("encodes")).expect("decodes");
            sharing.share(&mut read);
            read
        });
        assert_eq!((&a, &b), (&first, &second));
        assert!(SharedStr::ptr_eq(&a.job_id, &b.job_id));
        assert!(Arc::ptr_eq(&a.allocated_resources, &b.allocated_resources));
    }

    #[test]
    fn a_shared_grant_decodes_as_the_row_says() {
        // A decoder that has just read the original row (its grant now the
        // one to share) reads every damaged copy of it exactly as a fresh
        // decoder does: the same allocation or an error.
        let original = encoded(&full_alloc());
        let damaged = (0..original.len())
            .map(|at| {
                let mut flipped = original.clone();
                flipped[at] ^= 0xff;
                flipped
            })
            .chain((0..original.len()).map(|cut| original[..cut].to_vec()));
        for row in damaged {
            let mut sharing = RowSharing::default();
            decode_sharing(&original, &mut sharing).expect("decodes");
            let shared = decode_sharing(&row, &mut sharing).map_err(|e| e.to_string());
            let fresh = decode(&row).map_err(|e| e.to_string());
            assert_eq!(shared, fresh);
        }
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
        assert!(matches!(decode(&extra), Err(CodecError::Trailing(1))));
        let mut tagged = out.clone();
        tagged[0] = 9;
        assert!(matches!(decode(&tagged), Err(CodecError::UnknownTag(9))));
        // Flip every byte in turn: anything may come back, nothing panics.
        for at in 0..out.len() {
            let mut flipped = out.clone();
            flipped[at] ^= 0xff;
            let _ = decode(&flipped);
        }
    }
}
