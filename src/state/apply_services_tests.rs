//! The native service catalog's commands, and that an allocation's
//! registrations go when it ends, is collected, or its node goes down.

use super::*;
use crate::structs::ServiceRegistration;

fn registration(alloc: &Allocation, name: &str, port: i64) -> ServiceRegistration {
    ServiceRegistration {
        id: ServiceRegistration::make_id(
            &alloc.id.to_string(),
            "frontend",
            name,
            &port.to_string(),
        ),
        service_name: name.into(),
        namespace: "default".into(),
        node_id: alloc.node_id.to_string(),
        datacenter: "dc1".into(),
        job_id: alloc.job_id.to_string(),
        alloc_id: alloc.id.to_string(),
        tags: vec!["v1".into()],
        address: "127.0.0.1".into(),
        port,
        ..Default::default()
    }
}

/// A job with two running allocations on one node, each registered.
fn running_with_services(h: &mut Harness) -> (Node, Vec<Allocation>) {
    let node = h.add_node("n1");
    let job = web();
    let (_, eval) = h.register(&job);
    let allocs = allocs_for(&job, &node, &eval, 2);
    h.place(&allocs, &job);
    let services = allocs
        .iter()
        .enumerate()
        .map(|(i, a)| registration(a, "web", 20000 + i as i64))
        .collect();
    h.ok(Command::ServiceRegistrationUpsert { services });
    (node, allocs)
}

fn names(h: &Harness) -> Vec<(String, i64)> {
    h.state
        .services_named("default", "web")
        .map(|s| (s.alloc_id.clone(), s.port))
        .collect()
}

#[test]
fn upsert_keeps_create_index_and_skips_unknown_or_ended_allocations() {
    let mut h = Harness::new();
    let (_, allocs) = running_with_services(&mut h);
    assert_eq!(names(&h).len(), 2);
    let first = h
        .state
        .alloc_services(&allocs[0].id)
        .next()
        .unwrap()
        .clone();
    assert_eq!(first.create_index, first.modify_index);

    let mut changed = registration(&allocs[0], "web", 20000);
    changed.tags = vec!["v2".into()];
    let at = h.ok(Command::ServiceRegistrationUpsert {
        services: vec![changed],
    });
    let now = h
        .state
        .alloc_services(&allocs[0].id)
        .next()
        .unwrap()
        .clone();
    assert_eq!(
        (now.create_index, now.modify_index),
        (first.create_index, at)
    );
    assert_eq!(h.state.table_index(Table::Services), at);

    // An allocation that is not there, or has ended, gets nothing.
    let mut ghost = allocs[0].clone();
    ghost.id = crate::structs::new_id();
    h.client_status(&allocs[1], ClientStatus::Complete);
    h.ok(Command::ServiceRegistrationUpsert {
        services: vec![
            registration(&ghost, "web", 1),
            registration(&allocs[1], "web", 2),
        ],
    });
    assert_eq!(names(&h), vec![(allocs[0].id.to_string(), 20000)]);
}

#[test]
fn an_allocation_that_ends_loses_its_services() {
    let mut h = Harness::new();
    let (_, allocs) = running_with_services(&mut h);
    h.client_status(&allocs[0], ClientStatus::Failed);
    assert_eq!(names(&h), vec![(allocs[1].id.to_string(), 20001)]);
    h.ok(Command::EvalDelete {
        eval_ids: vec![],
        alloc_ids: vec![allocs[1].id],
    });
    assert!(names(&h).is_empty());
}

#[test]
fn a_node_that_goes_down_loses_its_services() {
    let mut h = Harness::new();
    let (node, _) = running_with_services(&mut h);
    h.ok(Command::NodeUpdateStatus {
        node_id: node.id,
        status: NodeStatus::Down,
        event: None,
        evals: vec![],
        updated_at: 5,
    });
    assert!(names(&h).is_empty());
}

#[test]
fn delete_by_id_and_by_alloc() {
    let mut h = Harness::new();
    let (_, allocs) = running_with_services(&mut h);
    let id = registration(&allocs[0], "web", 20000).id;
    let err = h.rejected(Command::ServiceRegistrationDelete {
        namespace: "other".into(),
        ids: vec![id.clone()],
    });
    assert!(err.to_string().contains("not found"), "{err}");
    h.ok(Command::ServiceRegistrationDelete {
        namespace: "default".into(),
        ids: vec![id],
    });
    assert_eq!(names(&h).len(), 1);
    h.ok(Command::ServiceRegistrationDeleteByAlloc {
        alloc_ids: vec![allocs[1].id],
    });
    assert!(names(&h).is_empty());
}
