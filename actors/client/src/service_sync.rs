//! Keeps the servers' service catalog in step with what this node's
//! allocations want registered, as a pure state machine the client's
//! link drives: each allocation's wanted registrations (from its
//! runner's updates) against what the servers last accepted, one call in
//! flight, a failed call retried by the link later.
//!
//! The servers drop an allocation's registrations themselves when it ends
//! or its node goes down; the explicit deregistration here takes a
//! stopping allocation out of the catalog before its tasks are killed.

use herder::structs::{AllocId, ServiceRegistration};
use std::collections::BTreeMap;

/// A call the link should make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncCall {
    /// `PUT /v1/node/:id/services` with these registrations, the whole
    /// wanted set of each allocation named.
    Register {
        allocs: Vec<AllocId>,
        services: Vec<ServiceRegistration>,
    },
    /// `PUT /v1/node/:id/services/deregister`.
    Deregister { allocs: Vec<AllocId> },
}

#[derive(Debug, Default)]
pub struct ServiceSync {
    wanted: BTreeMap<AllocId, Vec<ServiceRegistration>>,
    registered: BTreeMap<AllocId, Vec<ServiceRegistration>>,
    /// The call in flight, with what it asked for.
    in_flight: Option<(SyncCall, BTreeMap<AllocId, Vec<ServiceRegistration>>)>,
}

impl ServiceSync {
    /// An allocation's runner reported what it wants registered now.
    pub fn want(&mut self, alloc: AllocId, services: Vec<ServiceRegistration>) {
        if services.is_empty() && !self.registered.contains_key(&alloc) {
            self.wanted.remove(&alloc);
        } else {
            self.wanted.insert(alloc, services);
        }
    }

    /// The next call to make, if nothing is in flight and something
    /// differs: registrations first, then removals.
    pub fn next_call(&mut self) -> Option<SyncCall> {
        if self.in_flight.is_some() {
            return None;
        }
        let differs = |(id, want): &(&AllocId, &Vec<ServiceRegistration>)| {
            self.registered.get(*id) != Some(*want)
        };
        let to_register: BTreeMap<AllocId, Vec<ServiceRegistration>> = self
            .wanted
            .iter()
            .filter(|e| !e.1.is_empty() && differs(e))
            .map(|(id, s)| (*id, s.clone()))
            .collect();
        let call = if !to_register.is_empty() {
            SyncCall::Register {
                allocs: to_register.keys().copied().collect(),
                services: to_register.values().flatten().cloned().collect(),
            }
        } else {
            let gone: Vec<AllocId> = self
                .registered
                .keys()
                .filter(|id| self.wanted.get(*id).is_none_or(Vec::is_empty))
                .copied()
                .collect();
            if gone.is_empty() {
                return None;
            }
            SyncCall::Deregister { allocs: gone }
        };
        self.in_flight = Some((call.clone(), to_register));
        Some(call)
    }

    /// The call in flight succeeded (`ok`) or failed (it is asked again
    /// by the next [`next_call`](Self::next_call)).
    pub fn call_done(&mut self, ok: bool) {
        let Some((call, sent)) = self.in_flight.take() else {
            return;
        };
        if !ok {
            return;
        }
        match call {
            SyncCall::Register { .. } => self.registered.extend(sent),
            SyncCall::Deregister { allocs } => {
                for id in allocs {
                    self.registered.remove(&id);
                    if self.wanted.get(&id).is_some_and(Vec::is_empty) {
                        self.wanted.remove(&id);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(alloc: AllocId, port: i64) -> ServiceRegistration {
        ServiceRegistration {
            id: format!("{alloc}-{port}"),
            alloc_id: alloc.to_string(),
            port,
            ..Default::default()
        }
    }

    #[test]
    fn registers_what_changed_then_removes_what_stopped() {
        let (a, b) = (herder::structs::new_id(), herder::structs::new_id());
        let mut sync = ServiceSync::default();
        assert_eq!(sync.next_call(), None);
        sync.want(a, vec![reg(a, 1)]);
        sync.want(b, vec![]);
        let call = sync.next_call().unwrap();
        assert_eq!(
            call,
            SyncCall::Register {
                allocs: vec![a],
                services: vec![reg(a, 1)]
            }
        );
        assert_eq!(sync.next_call(), None, "one call in flight");
        sync.call_done(false);
        assert_eq!(sync.next_call(), Some(call), "a failed call is asked again");
        sync.call_done(true);
        assert_eq!(sync.next_call(), None, "nothing differs");
        sync.want(a, vec![reg(a, 1)]);
        assert_eq!(sync.next_call(), None, "the same set again is no call");

        sync.want(a, vec![]);
        assert_eq!(
            sync.next_call(),
            Some(SyncCall::Deregister { allocs: vec![a] })
        );
        sync.call_done(true);
        assert_eq!(sync.next_call(), None);
        assert!(sync.wanted.is_empty() && sync.registered.is_empty());
    }
}
