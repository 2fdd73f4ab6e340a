//! How the service commands change the native catalog, and the catalog's
//! clean-up when an allocation ends or its node goes down: nothing is left
//! registered for an allocation that no longer runs.

use super::super::changes::{RowKey, ServiceKey};
use super::super::ApplyError;
use super::Txn;
use crate::structs::{AllocId, NodeId, ServiceRegistration};
use std::sync::Arc;

impl Txn {
    /// Stores each registration of a live allocation; `CreateIndex` is
    /// kept across updates, as in Nomad.
    pub(super) fn upsert_services(&mut self, services: &[ServiceRegistration]) {
        for service in services {
            let Ok(alloc_id) = service.alloc_id.parse::<AllocId>() else {
                continue;
            };
            let live = self
                .t
                .allocs
                .get(&alloc_id)
                .is_some_and(|a| !a.client_status.is_terminal());
            if !live || service.id.is_empty() {
                continue;
            }
            let key = ServiceKey {
                alloc_id,
                id: service.id.clone(),
            };
            let mut row = service.clone();
            row.create_index = match self.t.services.get(&key) {
                Some(old) if *old.as_ref() == with_indexes(service, old) => continue,
                Some(old) => old.create_index,
                None => self.index,
            };
            row.modify_index = self.index;
            self.t.services.insert(key.clone(), Arc::new(row));
            self.touched.insert(RowKey::Service(key));
        }
    }

    /// Removes registrations by ID in a namespace; an ID not registered
    /// there is an error (Nomad answers 404).
    pub(super) fn delete_services(
        &mut self,
        namespace: &str,
        ids: &[String],
    ) -> Result<(), ApplyError> {
        for id in ids {
            let key = self
                .t
                .services
                .iter()
                .find(|(k, s)| k.id == *id && s.namespace == namespace)
                .map(|(k, _)| k.clone());
            let Some(key) = key else {
                return Err(ApplyError::Invalid(format!(
                    "service registration {id:?} not found"
                )));
            };
            self.t.services.remove(&key);
            self.touched.insert(RowKey::Service(key));
        }
        Ok(())
    }

    /// Removes every registration of one allocation (one range of the
    /// table).
    pub(super) fn delete_alloc_services(&mut self, alloc_id: &AllocId) {
        let start = ServiceKey {
            alloc_id: *alloc_id,
            id: String::new(),
        };
        let keys: Vec<ServiceKey> = self
            .t
            .services
            .range(start..)
            .take_while(|(k, _)| k.alloc_id == *alloc_id)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.t.services.remove(&key);
            self.touched.insert(RowKey::Service(key));
        }
    }

    /// Removes the registrations of every allocation on a node.
    pub(super) fn delete_node_services(&mut self, node_id: &NodeId) {
        let allocs: Vec<AllocId> = self
            .t
            .allocs_by_node
            .get(node_id)
            .map(|ids| ids.iter().copied().collect())
            .unwrap_or_default();
        for id in allocs {
            self.delete_alloc_services(&id);
        }
    }
}

/// `service` with `old`'s indexes: equal to `old` when nothing changed.
fn with_indexes(service: &ServiceRegistration, old: &ServiceRegistration) -> ServiceRegistration {
    ServiceRegistration {
        create_index: old.create_index,
        modify_index: old.modify_index,
        ..service.clone()
    }
}
