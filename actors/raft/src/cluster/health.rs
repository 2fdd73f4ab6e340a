//! What this server last heard from each cluster member ([`Liveness`]):
//! the findings of the member poller ([`super::liveness`]), kept by the
//! handle so that `/v1/agent/members`, `force-leave` and the dead server
//! cleanup read them at once. Storage only: the poller, which needs the
//! handle, writes into it from above.

use super::status::{Member, ServerStatus};
use crate::NodeId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

/// What this server last heard from one member.
#[derive(Clone, Debug)]
pub struct MemberHealth {
    /// Whether it answered the last status call (as this member: a server
    /// at the same address under another ID does not count).
    pub alive: bool,
    /// Its last answer, kept while it is silent (its name, version...).
    pub status: Option<ServerStatus>,
    /// When it last answered, or when this server started watching it.
    pub last_contact: Instant,
}

/// The poller's findings, by member ID. Cheap to clone; clones share.
#[derive(Clone, Default)]
pub struct Liveness {
    seen: Arc<Mutex<BTreeMap<NodeId, MemberHealth>>>,
    /// Each member's last health verdict and since when it holds
    /// (autopilot's `StableSince`).
    verdicts: Arc<Mutex<BTreeMap<NodeId, (bool, SystemTime)>>>,
}

impl Liveness {
    /// What was last heard from member `id` (`None` before the first
    /// round that saw it in the configuration).
    pub fn get(&self, id: NodeId) -> Option<MemberHealth> {
        self.lock().get(&id).cloned()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<NodeId, MemberHealth>> {
        // A panic elsewhere while holding the lock leaves a usable map.
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one round's answers; members that left the configuration
    /// are forgotten, new ones start their silence count now.
    pub fn record(
        &self,
        members: &[Member],
        answers: Vec<(NodeId, Option<ServerStatus>)>,
        now: Instant,
    ) {
        let mut seen = self.lock();
        let current: BTreeSet<NodeId> = members.iter().map(|m| m.id).collect();
        seen.retain(|id, _| current.contains(id));
        self.verdicts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|id, _| current.contains(id));
        for (id, answer) in answers {
            note(&mut seen, id, answer, now);
        }
    }

    /// Records member `id`'s health verdict at `now` and answers since when
    /// it has held (`now` when it just changed, or on the first verdict).
    pub fn stable_since(&self, id: NodeId, healthy: bool, now: SystemTime) -> SystemTime {
        let mut verdicts = self.verdicts.lock().unwrap_or_else(|e| e.into_inner());
        let entry = verdicts.entry(id).or_insert((healthy, now));
        if entry.0 != healthy {
            *entry = (healthy, now);
        }
        entry.1
    }

    /// Records one answer (or silence) of member `id` heard outside the
    /// poller's rounds (a member listing asking on the spot).
    pub fn note(&self, id: NodeId, answer: Option<ServerStatus>, now: Instant) {
        note(&mut self.lock(), id, answer, now);
    }
}

fn note(
    seen: &mut BTreeMap<NodeId, MemberHealth>,
    id: NodeId,
    answer: Option<ServerStatus>,
    now: Instant,
) {
    let entry = seen.entry(id).or_insert_with(|| MemberHealth {
        alive: false,
        status: None,
        last_contact: now,
    });
    match answer.filter(|s| s.id == id) {
        Some(status) => {
            entry.alive = true;
            entry.status = Some(status);
            entry.last_contact = now;
        }
        None => entry.alive = false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn node(id: NodeId) -> crate::ServerNode {
        crate::ServerNode {
            rpc_addr: format!("127.0.0.1:{id}"),
            http_addr: String::new(),
            name: format!("s{id}.global"),
            version: "0.1.0".into(),
            datacenter: "dc1".into(),
        }
    }

    fn member(id: NodeId) -> Member {
        Member {
            id,
            addr: format!("127.0.0.1:{id}"),
            node: node(id),
            voter: true,
            leader: false,
        }
    }

    fn status(id: NodeId) -> ServerStatus {
        ServerStatus {
            id,
            node: node(id),
            region: "global".into(),
            bootstrap_expect: 3,
            initialized: true,
            leader: None,
            last_applied: 1,
            term: 1,
            leader_contact_millis: None,
        }
    }

    #[test]
    fn a_silent_member_keeps_its_last_answer_and_contact_time() {
        let liveness = Liveness::default();
        let t0 = Instant::now();
        let members = [member(1), member(2)];
        liveness.record(&members, vec![(2, Some(status(2)))], t0);
        let later = t0 + Duration::from_secs(5);
        liveness.record(&members, vec![(2, None)], later);
        let health = liveness.get(2).expect("member 2 is watched");
        assert!(!health.alive);
        assert_eq!(health.last_contact, t0);
        assert_eq!(health.status.map(|s| s.node.name), Some("s2.global".into()));
    }

    #[test]
    fn another_server_at_the_address_is_not_the_member() {
        let liveness = Liveness::default();
        let t0 = Instant::now();
        liveness.record(&[member(2)], vec![(2, Some(status(7)))], t0);
        assert!(!liveness.get(2).expect("watched").alive);
    }

    #[test]
    fn members_that_left_the_configuration_are_forgotten() {
        let liveness = Liveness::default();
        let t0 = Instant::now();
        liveness.record(&[member(2)], vec![(2, Some(status(2)))], t0);
        liveness.record(&[member(3)], vec![(3, None)], t0);
        assert!(liveness.get(2).is_none());
        assert_eq!(liveness.get(3).map(|h| h.last_contact), Some(t0));
    }
}
