//! An allocation's services as this node runs them: the registrations it
//! puts in the native catalog (the address and port each service's port
//! label resolves to among the allocation's allocated ports) and the
//! checks the client runs for them, each resolved to a [`Probe`].
//!
//! The catalog's IDs are Nomad's: `_nomad-task-<alloc>-<group|task>-
//! <service>-<port label>`; a check's ID is a hash of where it is, stable
//! across client restarts.

use crate::check_watcher::CheckSpec;
use crate::checks::Probe;
use crate::task_dir::{allocated_ports, build_task_env, AllocDir, EnvInputs};
use herder::structs::service::check_type;
use herder::structs::{
    Allocation, Job, Node, Service, ServiceCheck, ServiceRegistration, TaskGroup,
};
use std::collections::BTreeMap;

/// What an allocation registers and checks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocServices {
    pub registrations: Vec<ServiceRegistration>,
    pub checks: Vec<CheckSpec>,
}

/// The inputs a resolution reads.
pub struct ServiceInputs<'a> {
    pub alloc: &'a Allocation,
    pub job: &'a Job,
    pub group: &'a TaskGroup,
    pub node: &'a Node,
    pub alloc_dir: &'a AllocDir,
    pub host_env: &'a BTreeMap<String, String>,
}

/// The allocation's group and task services, resolved.
pub fn resolve(inputs: &ServiceInputs<'_>) -> AllocServices {
    let mut out = AllocServices::default();
    let group = inputs.group;
    for s in &group.services {
        resolve_service(inputs, s, &group.name, None, &mut out);
    }
    for task in &group.tasks {
        for s in &task.services {
            resolve_service(inputs, s, &task.name, Some(&task.name), &mut out);
        }
    }
    out
}

fn resolve_service(
    inputs: &ServiceInputs<'_>,
    s: &Service,
    owner: &str,
    task: Option<&str>,
    out: &mut AllocServices,
) {
    let alloc = inputs.alloc;
    let (address, port) = port_of(inputs, task, &s.port_label);
    let id = ServiceRegistration::make_id(&alloc.id.to_string(), owner, &s.name, &s.port_label);
    out.registrations.push(ServiceRegistration {
        id: id.clone(),
        service_name: s.name.clone(),
        namespace: alloc.namespace.to_string(),
        node_id: alloc.node_id.to_string(),
        datacenter: inputs.node.datacenter.clone(),
        job_id: alloc.job_id.to_string(),
        alloc_id: alloc.id.to_string(),
        tags: s.tags.clone(),
        address: address.clone(),
        port,
        ..Default::default()
    });
    for check in s.checks.iter().filter(|c| c.is_run()) {
        let check_task = if check.task_name.is_empty() {
            task.map(str::to_string)
                .unwrap_or_else(|| s.task_name.clone())
        } else {
            check.task_name.clone()
        };
        let Some(probe) = probe_of(inputs, s, check, task, &check_task) else {
            continue;
        };
        out.checks.push(CheckSpec {
            id: check_id(&id, &check.name),
            name: check.name.clone(),
            group: inputs.group.name.clone(),
            task: check_task,
            service: s.name.clone(),
            mode: if check.on_update == "ignore" {
                "readiness".into()
            } else {
                "healthiness".into()
            },
            interval: check.interval,
            timeout: check.timeout,
            probe,
            successes_to_pass: threshold(check.success_before_passing),
            failures_to_fail: threshold(check.failures_before_critical),
        });
    }
}

/// The address and port a label resolves to: an allocated port of that
/// label, or a literal port number at the node's address; port 0 when
/// the service names none.
fn port_of(inputs: &ServiceInputs<'_>, task: Option<&str>, label: &str) -> (String, i64) {
    let ports = allocated_ports(inputs.alloc, inputs.node, task);
    if let Some(p) = ports.iter().find(|p| p.label == label) {
        return (p.ip.clone(), p.host_port);
    }
    let node_ip = inputs
        .node
        .attributes
        .get("unique.network.ip-address")
        .map(ToString::to_string)
        .unwrap_or_else(|| "127.0.0.1".to_string());
    (node_ip, label.parse::<i64>().unwrap_or(0))
}

fn probe_of(
    inputs: &ServiceInputs<'_>,
    s: &Service,
    check: &ServiceCheck,
    task: Option<&str>,
    check_task: &str,
) -> Option<Probe> {
    if check.r#type == check_type::SCRIPT {
        let t = inputs.group.lookup_task(check_task)?;
        let env = build_task_env(&EnvInputs {
            alloc: inputs.alloc,
            job: inputs.job,
            group: inputs.group,
            task: t,
            node: inputs.node,
            alloc_dir: inputs.alloc_dir,
            host_env: inputs.host_env,
        });
        return Some(Probe::Script {
            command: check.command.clone(),
            args: check.args.clone(),
            dir: inputs.alloc_dir.task_dir(check_task),
            env,
        });
    }
    let label = if check.port_label.is_empty() {
        &s.port_label
    } else {
        &check.port_label
    };
    let (address, port) = port_of(inputs, task, label);
    let host_port = format!("{}:{port}", bracketed(&address));
    if check.r#type == check_type::TCP {
        return Some(Probe::Tcp { address: host_port });
    }
    let scheme = if check.protocol.is_empty() {
        "http"
    } else {
        &check.protocol
    };
    let path = if check.path.starts_with('/') {
        check.path.clone()
    } else {
        format!("/{}", check.path)
    };
    let headers = check
        .header
        .iter()
        .flat_map(|(name, values)| values.iter().map(move |v| (name.clone(), v.clone())))
        .collect();
    Some(Probe::Http {
        url: format!("{scheme}://{host_port}{path}"),
        method: check.method.clone(),
        headers,
        body: check.body.clone(),
    })
}

/// An IPv6 address in brackets, for a URL or `host:port`.
fn bracketed(address: &str) -> String {
    if address.contains(':') {
        format!("[{address}]")
    } else {
        address.to_string()
    }
}

/// A check's ID: FNV-1a of its service's ID and its name, in hex.
fn check_id(service_id: &str, check_name: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in service_id.bytes().chain([0]).chain(check_name.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// A check's `success_before_passing` or `failures_before_critical` as a
/// count (validation refuses negatives; anything else reads as one).
fn threshold(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use herder::structs::{NetworkResource, Port, Task};
    use std::time::Duration;

    fn group() -> TaskGroup {
        let check = |t: &str| ServiceCheck {
            name: format!("{t}-check"),
            r#type: t.into(),
            path: "health".into(),
            command: "/bin/true".into(),
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            on_update: "require_healthy".into(),
            ..Default::default()
        };
        TaskGroup {
            name: "web".into(),
            services: vec![Service {
                name: "front".into(),
                port_label: "http".into(),
                task_name: "server".into(),
                tags: vec!["v1".into()],
                checks: vec![check("http"), check("tcp"), check("script"), check("grpc")],
                ..Default::default()
            }],
            tasks: vec![Task {
                name: "server".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_port_label_resolves_to_the_allocated_port() {
        let job = Job {
            id: "j".into(),
            ..Default::default()
        };
        let mut alloc = Allocation {
            namespace: "default".into(),
            ..Default::default()
        };
        std::sync::Arc::make_mut(&mut alloc.allocated_resources)
            .shared
            .networks = vec![NetworkResource {
            ip: "10.0.0.5".into(),
            dynamic_ports: vec![Port {
                label: "http".into(),
                value: 23456,
                ..Default::default()
            }],
            ..Default::default()
        }];
        let node = Node::default();
        let dir = AllocDir::new(std::path::Path::new("/tmp/x"), &alloc.id);
        let g = group();
        let resolved = resolve(&ServiceInputs {
            alloc: &alloc,
            job: &job,
            group: &g,
            node: &node,
            alloc_dir: &dir,
            host_env: &BTreeMap::new(),
        });
        let r = &resolved.registrations[0];
        assert_eq!((r.address.as_str(), r.port), ("10.0.0.5", 23456));
        assert!(r.id.ends_with("-web-front-http"), "{}", r.id);
        // The grpc check is kept, not run.
        assert_eq!(resolved.checks.len(), 3);
        let probes: Vec<&Probe> = resolved.checks.iter().map(|c| &c.probe).collect();
        assert!(
            matches!(probes[0], Probe::Http { url, .. } if url == "http://10.0.0.5:23456/health")
        );
        assert!(matches!(probes[1], Probe::Tcp { address } if address == "10.0.0.5:23456"));
        assert!(matches!(probes[2], Probe::Script { dir, .. } if dir.ends_with("server")));
        assert_eq!(resolved.checks[2].task, "server");
        assert_ne!(resolved.checks[0].id, resolved.checks[1].id);
    }
}
