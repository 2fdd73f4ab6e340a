//! The JSON shapes of list entries and reads that differ from the stored
//! rows: Nomad's list stubs (`JobListStub`, `AllocListStub`,
//! `NodeListStub`), allocations with their job attached, and nodes
//! without their secret.

use herder::state::StateSnapshot;
use herder::structs::{
    Allocation, DriverInfo, Job, JobSummary, JobType, Labels, NetworkResource, Node, NodeId,
    NodeReservedResources, NodeResources, NodeStatus, SchedulingEligibility, SharedStr,
};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `JobListStub`: what `GET /v1/jobs` lists per job, written straight
/// from the job and its summary. Its fields are in the order of their
/// names, as the `Value` map it replaced wrote them; a `Value` tree built
/// and freed per job was most of a list's cost, and tooling polls the list.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct JobStub<'a> {
    create_index: u64,
    datacenters: &'a [String],
    #[serde(rename = "ID")]
    id: &'a str,
    job_modify_index: u64,
    job_summary: Option<&'a JobSummary>,
    modify_index: u64,
    multiregion: Option<()>,
    name: &'a str,
    namespace: &'a str,
    parameterized_job: bool,
    #[serde(rename = "ParentID")]
    parent_id: &'a str,
    periodic: bool,
    priority: i32,
    status: &'a str,
    status_description: &'a str,
    stop: bool,
    submit_time: i64,
    #[serde(rename = "Type")]
    job_type: &'a JobType,
}

pub fn job_stub<'a>(snap: &'a StateSnapshot, job: &'a Job) -> JobStub<'a> {
    JobStub {
        create_index: job.create_index,
        datacenters: &job.datacenters,
        id: &job.id,
        job_modify_index: job.job_modify_index,
        job_summary: snap.job_summary(&job.namespace, &job.id).map(|s| &**s),
        modify_index: job.modify_index,
        multiregion: None,
        name: &job.name,
        namespace: &job.namespace,
        parameterized_job: job.is_parameterized(),
        parent_id: &job.parent_id,
        periodic: job.periodic.is_some(),
        priority: job.priority,
        status: &job.status,
        status_description: &job.status_description,
        stop: job.stop,
        submit_time: job.submit_time,
        job_type: &job.job_type,
    }
}

/// The job type of an allocation's job (the version it runs, else the
/// current one; a purged job leaves it empty).
fn alloc_job_type(snap: &StateSnapshot, alloc: &Allocation) -> Value {
    snap.job_by_version(&alloc.namespace, &alloc.job_id, alloc.job_version)
        .or_else(|| snap.job(&alloc.namespace, &alloc.job_id))
        .map_or(Value::Null, |j| json!(j.job_type))
}

fn opt_id(id: Option<uuid::Uuid>) -> String {
    id.map(|i| i.to_string()).unwrap_or_default()
}

/// `AllocListStub`: what allocation lists show per allocation.
pub fn alloc_stub(snap: &StateSnapshot, alloc: &Allocation) -> Value {
    let t = &alloc.desired_transition;
    json!({
        "ID": alloc.id,
        "EvalID": alloc.eval_id,
        "Name": alloc.name,
        "Namespace": alloc.namespace,
        "NodeID": alloc.node_id,
        "NodeName": alloc.node_name,
        "JobID": alloc.job_id,
        "JobType": alloc_job_type(snap, alloc),
        "JobVersion": alloc.job_version,
        "TaskGroup": alloc.task_group,
        "AllocatedResources": null,
        "DesiredStatus": alloc.desired_status,
        "DesiredDescription": alloc.desired_description,
        "DesiredTransition": {
            "Migrate": t.migrate,
            "Reschedule": t.reschedule,
            "ForceReschedule": t.force_reschedule,
        },
        "ClientStatus": alloc.client_status,
        "ClientDescription": alloc.client_description,
        "TaskStates": if alloc.task_states.is_empty() { Value::Null } else { json!(alloc.task_states) },
        "DeploymentStatus": alloc.deployment_status(),
        "FollowupEvalID": opt_id(alloc.links().followup_eval_id),
        "RescheduleTracker": alloc.links().reschedule_tracker,
        "PreemptedAllocations": if alloc.links().preempted_allocations.is_empty() { Value::Null } else { json!(alloc.links().preempted_allocations) },
        "PreemptedByAllocation": opt_id(alloc.links().preempted_by_allocation),
        "CreateIndex": alloc.create_index,
        "ModifyIndex": alloc.modify_index,
        "CreateTime": alloc.create_time,
        "ModifyTime": alloc.modify_time,
    })
}

/// A full allocation with the job version it runs attached as `Job` (and
/// the legacy `Resources`), as Nomad's allocation reads embed them. It
/// serializes straight into an answer: a client's blocking query reads
/// every allocation of its node with its job each time one of them
/// changes, and building a `serde_json::Value` tree per allocation first
/// (then writing the tree out) was most of the server's CPU under clients
/// that follow their allocations (docs/PERFORMANCE.md, "session 24").
#[derive(Serialize)]
pub struct AllocWithJob<'a> {
    #[serde(flatten)]
    alloc: &'a Allocation,
    #[serde(rename = "Job")]
    job: Option<&'a Arc<Job>>,
    #[serde(rename = "Resources")]
    resources: LegacyResources<'static>,
}

impl<'a> AllocWithJob<'a> {
    pub fn new(snap: &'a StateSnapshot, alloc: &'a Allocation) -> Self {
        let used = alloc.allocated_resources.comparable();
        AllocWithJob {
            alloc,
            job: snap.job_by_version(&alloc.namespace, &alloc.job_id, alloc.job_version),
            resources: legacy_resources(used.cpu, used.memory_mb, used.disk_mb, &[]),
        }
    }
}

/// [`AllocWithJob`] as a value, for answers that edit or wrap it.
pub fn alloc_with_job(snap: &StateSnapshot, alloc: &Allocation) -> Value {
    json!(AllocWithJob::new(snap, alloc))
}

/// A node as reads show it: everything but its secret.
pub fn node_read(node: &Node) -> Value {
    let mut value = json!(node);
    if let Value::Object(map) = &mut value {
        map.remove("SecretID");
        // Nomad's NodeResources always carries these (null when empty).
        if let Some(Value::Object(resources)) = map.get_mut("NodeResources") {
            for key in ["Devices", "NodeNetworks"] {
                resources.entry(key).or_insert(Value::Null);
            }
        }
        let (total, reserved) = (&node.node_resources, &node.reserved_resources);
        map.insert(
            "Resources".into(),
            json!(legacy_resources(
                total.cpu.cpu_shares,
                total.memory.memory_mb,
                total.disk.disk_mb,
                &total.networks,
            )),
        );
        map.insert(
            "Reserved".into(),
            json!(legacy_resources(
                reserved.cpu.cpu_shares,
                reserved.memory.memory_mb,
                reserved.disk.disk_mb,
                &[],
            )),
        );
    }
    value
}

/// Nomad 1.1's pre-0.9 `Resources` shape, which its answers still carry on
/// nodes and allocations and its CLI still reads: `nomad node status
/// -self` dereferences a node's `Resources` and `Reserved` and each
/// allocation's `Resources`, and crashed on herder without them. A struct
/// rather than a `Value`: every allocation of a node's blocking query
/// carries one.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct LegacyResources<'a> {
    #[serde(rename = "CPU")]
    cpu: i64,
    cores: i64,
    #[serde(rename = "MemoryMB")]
    memory_mb: i64,
    #[serde(rename = "MemoryMaxMB")]
    memory_max_mb: i64,
    #[serde(rename = "DiskMB")]
    disk_mb: i64,
    #[serde(rename = "IOPS")]
    iops: i64,
    /// `null` when the node has none, as Nomad's nil slice.
    networks: Option<&'a [NetworkResource]>,
    devices: Option<()>,
}

fn legacy_resources(
    cpu: i64,
    memory_mb: i64,
    disk_mb: i64,
    networks: &[NetworkResource],
) -> LegacyResources<'_> {
    LegacyResources {
        cpu,
        cores: 0,
        memory_mb,
        memory_max_mb: 0,
        disk_mb,
        iops: 0,
        networks: (!networks.is_empty()).then_some(networks),
        devices: None,
    }
}

/// The host of the node's HTTP address (Nomad's stub `Address`).
fn node_address(node: &Node) -> String {
    let addr = node.http_addr.as_str();
    match addr.rsplit_once(':') {
        Some((host, _)) => host.trim_matches(['[', ']']).to_string(),
        None => addr.to_string(),
    }
}

/// `NodeListStub`: what `GET /v1/nodes` lists per node, written straight
/// from the node (fields in the order of their names, as for
/// [`JobStub`]). `Allocated` is herder's `?usage=true` addition.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct NodeStub<'a> {
    address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated: Option<Value>,
    attributes: &'a Labels,
    create_index: u64,
    datacenter: &'a str,
    drain: bool,
    drivers: &'a BTreeMap<SharedStr, DriverInfo>,
    host_volumes: Option<()>,
    #[serde(rename = "ID")]
    id: NodeId,
    last_drain: Option<()>,
    modify_index: u64,
    name: &'a str,
    node_class: &'a str,
    node_pool: &'a str,
    node_resources: &'a NodeResources,
    reserved_resources: &'a NodeReservedResources,
    scheduling_eligibility: &'a SchedulingEligibility,
    status: &'a NodeStatus,
    status_description: &'a str,
    version: &'a str,
}

pub fn node_stub(node: &Node) -> NodeStub<'_> {
    NodeStub {
        address: node_address(node),
        allocated: None,
        attributes: &node.attributes,
        create_index: node.create_index,
        datacenter: &node.datacenter,
        drain: node.drain,
        drivers: &node.drivers,
        host_volumes: None,
        id: node.id,
        last_drain: None,
        modify_index: node.modify_index,
        name: &node.name,
        node_class: &node.node_class,
        node_pool: &node.node_pool,
        node_resources: &node.node_resources,
        reserved_resources: &node.reserved_resources,
        scheduling_eligibility: &node.scheduling_eligibility,
        status: &node.status,
        status_description: &node.status_description,
        version: node
            .attributes
            .get("nomad.version")
            .map_or("", |v| v.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herder::state::{fixtures, Command, PlanResults, StateStore};
    use herder::structs::TriggeredBy;

    /// The answer written straight from `AllocWithJob` is the allocation's
    /// own JSON with exactly `Job` (the version it runs) and `Resources`
    /// added: no field of the allocation lost or renamed by the flattening.
    #[test]
    fn an_allocation_read_is_the_allocation_plus_its_job_and_resources() {
        let store = StateStore::in_memory();
        let mut job = fixtures::job("default", "web", &[("g", 1)]);
        job.canonicalize();
        let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
        let job = Arc::new(job);
        store
            .apply(Command::JobRegister {
                job: job.clone(),
                eval: Some(eval.clone()),
                enforce_index: None,
            })
            .unwrap();
        let node = fixtures::node("n1");
        let alloc = fixtures::AllocBuilder::new(&job, "g").build(0, node.id, eval.id, 1);
        let mut node_allocation = std::collections::HashMap::new();
        node_allocation.insert(node.id, vec![alloc.clone()]);
        store
            .apply(Command::ApplyPlanResults(PlanResults {
                eval_id: eval.id,
                job: Some(job.clone()),
                node_allocation,
                updated_at: 1,
                ..Default::default()
            }))
            .unwrap();
        let snap = store.snapshot();
        let stored = snap.alloc(&alloc.id).expect("placed");

        let written: Value =
            serde_json::from_slice(&serde_json::to_vec(&AllocWithJob::new(&snap, stored)).unwrap())
                .unwrap();
        let Value::Object(mut expected) = json!(stored) else {
            panic!("an allocation is an object");
        };
        let stored_job = snap.job_by_version("default", "web", stored.job_version);
        expected.insert("Job".into(), json!(stored_job.expect("the job's version")));
        let used = stored.allocated_resources.comparable();
        expected.insert(
            "Resources".into(),
            json!({
                "CPU": used.cpu, "Cores": 0, "MemoryMB": used.memory_mb, "MemoryMaxMB": 0,
                "DiskMB": used.disk_mb, "IOPS": 0, "Networks": null, "Devices": null,
            }),
        );
        assert_eq!(written, Value::Object(expected));
        assert_eq!(written["Job"]["ID"], "web");
        assert_eq!(written["ID"], stored.id.to_string());
    }

    /// The list stubs, written straight from the rows, say field for field
    /// what the `Value` maps they replaced said: same names, same values,
    /// the keys at the top in the same order (nested objects now keep
    /// their fields' order, as every other answer does).
    #[test]
    fn list_stubs_write_what_their_value_maps_wrote() {
        let store = StateStore::in_memory();
        let mut job = fixtures::job("default", "web", &[("g", 2)]);
        job.canonicalize();
        job.parent_id = "web-parent".into();
        job.status_description = "registered".into();
        job.submit_time = 1_700_000_000_000_000_000;
        fixtures::register_job(&store, job);
        let snap = store.snapshot();
        let job = snap.job("default", "web").expect("registered");
        let summary = snap.job_summary("default", "web").expect("a summary");
        let was = json!({
            "ID": job.id, "ParentID": job.parent_id, "Name": job.name,
            "Namespace": job.namespace, "Datacenters": job.datacenters, "Multiregion": null,
            "Type": job.job_type, "Priority": job.priority, "Periodic": false,
            "ParameterizedJob": false, "Stop": job.stop, "Status": job.status,
            "StatusDescription": job.status_description, "JobSummary": summary,
            "CreateIndex": job.create_index, "ModifyIndex": job.modify_index,
            "JobModifyIndex": job.job_modify_index, "SubmitTime": job.submit_time,
        });
        let written = serde_json::to_string(&job_stub(&snap, job)).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&written).unwrap(), was);
        assert!(written.starts_with(r#"{"CreateIndex":"#), "{written}");
        assert!(written.ends_with(r#""Type":"service"}"#), "{written}");

        let mut node = fixtures::node("n1");
        node.http_addr = "[::1]:4646".into();
        node.attributes
            .insert("nomad.version".into(), "1.1.2".into());
        let was = json!({
            "ID": node.id, "Address": "::1", "Attributes": node.attributes,
            "Datacenter": node.datacenter, "Name": node.name, "NodeClass": node.node_class,
            "NodePool": node.node_pool, "Version": "1.1.2", "Drain": node.drain,
            "SchedulingEligibility": node.scheduling_eligibility, "Status": node.status,
            "StatusDescription": node.status_description, "Drivers": node.drivers,
            "HostVolumes": null, "LastDrain": null, "NodeResources": node.node_resources,
            "ReservedResources": node.reserved_resources, "CreateIndex": node.create_index,
            "ModifyIndex": node.modify_index,
        });
        let mut stub = node_stub(&node);
        assert_eq!(serde_json::to_value(&stub).unwrap(), was);
        // `?usage=true` adds `Allocated`, in its place by name.
        stub.allocated = Some(json!({"Allocations": 0}));
        let written = serde_json::to_string(&stub).unwrap();
        let Value::Object(mut was) = was else {
            unreachable!("an object")
        };
        was.insert("Allocated".into(), json!({"Allocations": 0}));
        assert_eq!(
            serde_json::from_str::<Value>(&written).unwrap(),
            Value::Object(was)
        );
        let head = r#"{"Address":"::1","Allocated":{"Allocations":0},"Attributes":{"#;
        assert!(written.starts_with(head), "{written}");
    }

    /// A node's read carries Nomad's pre-0.9 `Resources` (its networks
    /// listed) and `Reserved` (no networks: `null`), with every key
    /// Nomad's CLI reads.
    #[test]
    fn a_node_read_carries_the_legacy_resources_and_reserved() {
        let mut node = fixtures::node("n1");
        node.node_resources.networks = vec![herder::structs::NetworkResource {
            device: "eth0".into(),
            mbits: 1000,
            ..Default::default()
        }];
        let read = node_read(&node);
        let total = &node.node_resources;
        assert_eq!(
            read["Resources"],
            json!({
                "CPU": total.cpu.cpu_shares, "Cores": 0, "MemoryMB": total.memory.memory_mb,
                "MemoryMaxMB": 0, "DiskMB": total.disk.disk_mb, "IOPS": 0,
                "Networks": [json!(total.networks[0])], "Devices": null,
            })
        );
        assert_eq!(read["Reserved"]["Networks"], Value::Null);
        assert_eq!(
            read["Reserved"]["CPU"],
            json!(node.reserved_resources.cpu.cpu_shares)
        );
        assert!(read.get("SecretID").is_none());
    }
}
