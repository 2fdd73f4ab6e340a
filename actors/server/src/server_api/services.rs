//! The native service catalog (Nomad's `ServiceRegistration.*` RPCs): a
//! client registers the services of the allocations it runs and removes
//! them when they stop, signed with its node's secret; an operator may
//! delete one registration by ID.
//!
//! The store refuses nothing here beyond a missing ID: it drops the
//! registrations of allocations that have ended, and removes an
//! allocation's registrations itself when it ends or its node goes down.

use super::{ServerApi, ServerApiError};
use herder::state::{Command, StateSnapshot};
use herder::structs::{AllocId, NodeId, ServiceRegistration};

impl ServerApi {
    /// Registers (or updates) services of allocations running on
    /// `node_id`; answers the index at which they are durable.
    pub async fn register_services(
        &self,
        node_id: NodeId,
        secret_id: &str,
        mut services: Vec<ServiceRegistration>,
    ) -> Result<u64, ServerApiError> {
        let snap = self.snapshot();
        check_node_secret(&snap, &node_id, secret_id)?;
        for s in &mut services {
            let alloc_id: AllocId = s.alloc_id.parse().map_err(|_| {
                ServerApiError::Invalid(format!("AllocID {:?} is not an ID", s.alloc_id))
            })?;
            let on_node = snap.alloc(&alloc_id).is_some_and(|a| a.node_id == node_id);
            if !on_node {
                return Err(ServerApiError::Invalid(format!(
                    "allocation {alloc_id} does not run on node {node_id}"
                )));
            }
            if s.id.is_empty() || s.service_name.is_empty() {
                return Err(ServerApiError::Invalid(
                    "a service registration needs an ID and a ServiceName".into(),
                ));
            }
            s.node_id = node_id.to_string();
        }
        if services.is_empty() {
            return Ok(snap.latest_index());
        }
        let outcome = self
            .writes
            .submit(Command::ServiceRegistrationUpsert { services })
            .await?;
        Ok(outcome.index)
    }

    /// Removes every registration of these allocations of `node_id`.
    pub async fn deregister_alloc_services(
        &self,
        node_id: NodeId,
        secret_id: &str,
        alloc_ids: Vec<AllocId>,
    ) -> Result<u64, ServerApiError> {
        let snap = self.snapshot();
        check_node_secret(&snap, &node_id, secret_id)?;
        let alloc_ids: Vec<AllocId> = alloc_ids
            .into_iter()
            .filter(|id| snap.alloc_services(id).next().is_some())
            .collect();
        if alloc_ids.is_empty() {
            return Ok(snap.latest_index());
        }
        let outcome = self
            .writes
            .submit(Command::ServiceRegistrationDeleteByAlloc { alloc_ids })
            .await?;
        Ok(outcome.index)
    }

    /// Deletes one registration of service `name` by ID (Nomad's
    /// `DELETE /v1/service/:name/:id`); 404 when there is none.
    pub async fn delete_service(
        &self,
        namespace: &str,
        name: &str,
        id: &str,
    ) -> Result<u64, ServerApiError> {
        let snap = self.snapshot();
        if !snap.services_named(namespace, name).any(|s| s.id == id) {
            return Err(ServerApiError::NotFound(
                "service registration not found".into(),
            ));
        }
        let outcome = self
            .writes
            .submit(Command::ServiceRegistrationDelete {
                namespace: namespace.to_string(),
                ids: vec![id.to_string()],
            })
            .await?;
        Ok(outcome.index)
    }
}

/// The node exists and `secret_id` is its secret.
fn check_node_secret(
    snap: &StateSnapshot,
    node_id: &NodeId,
    secret_id: &str,
) -> Result<(), ServerApiError> {
    let node = snap
        .node(node_id)
        .ok_or_else(|| ServerApiError::NotFound("node not found".into()))?;
    if node.secret_id != secret_id {
        return Err(ServerApiError::Forbidden(
            "Permission denied: node secret ID does not match".into(),
        ));
    }
    Ok(())
}
