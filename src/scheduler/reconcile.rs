//! The generic scheduler's reconciler: per task group, compare what the job
//! wants with the allocations that exist and the state of their nodes, and
//! say what to place, stop, update in place, replace, migrate, and
//! reschedule now or later.
//!
//! It follows Nomad's `reconcile.go` without deployments or canaries:
//! allocations are sorted into untainted, migrating (drain) and lost (node
//! down or gone); failed ones are split by the reschedule policy into
//! "now", "later" (a follow-up evaluation at the time the delay ends) and
//! "not any more"; counts are honoured by stopping the highest indexes
//! first and naming new allocations with the lowest free indexes; version
//! changes become in-place or destructive updates, the latter at most
//! `max_parallel` per evaluation.

use super::util::{
    next_reschedule_time, node_is_lost, reschedule_policy, UpdateKind, ALLOC_LOST, ALLOC_MIGRATING,
    ALLOC_NOT_NEEDED, FOLLOWUP_BATCH_WINDOW, RESCHEDULE_WINDOW,
};
use crate::structs::{
    Allocation, ClientStatus, DesiredStatus, DesiredUpdates, EvalStatus, Evaluation, Job, Node,
    NodeId, TaskGroup, TriggeredBy,
};
use crate::view::State;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// A new allocation to place.
#[derive(Clone, Debug)]
pub struct PlaceRequest {
    pub name: String,
    pub group: String,
    /// The allocation this one replaces (rescheduled, lost or migrated).
    pub previous: Option<Arc<Allocation>>,
    /// Replacing a failed allocation under its reschedule policy.
    pub reschedule: bool,
}

/// An allocation to replace with one of the new job version.
#[derive(Clone, Debug)]
pub struct DestructiveRequest {
    pub name: String,
    pub group: String,
    pub alloc: Arc<Allocation>,
}

/// An allocation to stop.
#[derive(Clone, Debug)]
pub struct StopRequest {
    pub alloc: Arc<Allocation>,
    pub description: &'static str,
    pub client_status: Option<ClientStatus>,
}

#[derive(Debug, Default)]
pub struct ReconcileResults {
    pub place: Vec<PlaceRequest>,
    pub destructive: Vec<DestructiveRequest>,
    pub inplace: Vec<Allocation>,
    pub stop: Vec<StopRequest>,
    /// Allocations whose only change is a follow-up evaluation ID.
    pub attribute_updates: Vec<Allocation>,
    /// Evaluations for delayed reschedules.
    pub followup_evals: Vec<Evaluation>,
    pub desired: BTreeMap<String, DesiredUpdates>,
    /// Set when destructive updates were held back by `max_parallel`: the
    /// wait before the next rolling-update evaluation.
    pub rolling_wait: Option<Duration>,
}

/// The inputs of one reconciliation.
pub struct Reconciler<'a> {
    pub job: Option<&'a Arc<Job>>,
    pub batch: bool,
    pub eval: &'a Evaluation,
    pub now: i64,
    pub allocs: &'a [Arc<Allocation>],
    pub tainted: &'a HashMap<NodeId, Option<Arc<Node>>>,
    pub state: &'a dyn State,
}

type Set = Vec<Arc<Allocation>>;

impl Reconciler<'_> {
    /// Computes the changes. `update` classifies an allocation of an older
    /// job version (it may try the new version on the allocation's node).
    pub fn compute(
        &self,
        update: &mut dyn FnMut(&TaskGroup, &Arc<Allocation>) -> UpdateKind,
    ) -> ReconcileResults {
        let mut results = ReconcileResults::default();
        let mut by_group: BTreeMap<&str, Set> = BTreeMap::new();
        for a in self.allocs {
            by_group.entry(&a.task_group).or_default().push(a.clone());
        }
        let job = match self.job {
            Some(job) if !job.stop => job,
            _ => {
                for (group, allocs) in by_group {
                    self.stop_all(group, &allocs, &mut results);
                }
                return results;
            }
        };
        for (group, allocs) in &by_group {
            if job.lookup_task_group(group).is_none() {
                self.stop_all(group, allocs, &mut results);
            }
        }
        for tg in &job.task_groups {
            let allocs = by_group.remove(tg.name.as_str()).unwrap_or_default();
            self.compute_group(job, tg, allocs, &mut results, update);
        }
        results
    }

    fn stop_all(&self, group: &str, allocs: &[Arc<Allocation>], results: &mut ReconcileResults) {
        let desired = results.desired.entry(group.to_string()).or_default();
        for a in allocs.iter().filter(|a| !a.is_terminal()) {
            let lost = self.tainted.get(&a.node_id).is_some_and(node_is_lost);
            results.stop.push(StopRequest {
                alloc: a.clone(),
                description: if lost { ALLOC_LOST } else { ALLOC_NOT_NEEDED },
                client_status: lost.then_some(ClientStatus::Lost),
            });
            desired.stop += 1;
        }
    }

    fn compute_group(
        &self,
        job: &Job,
        tg: &TaskGroup,
        mut all: Set,
        results: &mut ReconcileResults,
        update: &mut dyn FnMut(&TaskGroup, &Arc<Allocation>) -> UpdateKind,
    ) {
        let mut desired = DesiredUpdates::default();
        if self.batch {
            // Finished work of an older version does not count any more.
            all.retain(|a| !(a.is_terminal() && a.job_version < job.version));
        }
        let (untainted, mut migrate, lost) = self.split_by_node(all);
        let (mut untainted, reschedule_now, reschedule_later) =
            self.split_by_reschedule(job, untainted);
        self.delay_reschedules(&tg.name, reschedule_later, results);

        let count = tg.count.max(0) as u32;
        let mut names = NameIndex::new(
            untainted
                .iter()
                .chain(&migrate)
                .chain(&reschedule_now)
                .filter_map(|a| a.index()),
        );

        // Lost allocations are always stopped (and maybe replaced below).
        for a in &lost {
            results.stop.push(StopRequest {
                alloc: a.clone(),
                description: ALLOC_LOST,
                client_status: Some(ClientStatus::Lost),
            });
            desired.stop += 1;
        }
        let stopped = self.compute_stop(count, &mut names, &mut untainted, &mut migrate, results);
        desired.stop += stopped;

        update_versions(tg, &untainted, &mut desired, results, update);
        let existing = (untainted.len() + migrate.len() + reschedule_now.len()) as u32;
        let wanted = Wanted { job, tg, count };
        let place = wanted.placements(&reschedule_now, &lost, existing, &mut names);
        desired.place += place.len() as u64;
        results.place.extend(place);
        migrate_all(tg, migrate, &mut desired, results);
        results.desired.insert(tg.name.clone(), desired);
    }

    /// Untainted, migrating (marked for migration) and lost (node down or
    /// gone) allocations.
    fn split_by_node(&self, all: Set) -> (Set, Set, Set) {
        let (mut untainted, mut migrate, mut lost) = (Vec::new(), Vec::new(), Vec::new());
        for a in all {
            if a.is_terminal() {
                untainted.push(a);
                continue;
            }
            if a.desired_transition.should_migrate() {
                migrate.push(a);
                continue;
            }
            match self.tainted.get(&a.node_id) {
                Some(node) if node_is_lost(node) => lost.push(a),
                _ => untainted.push(a),
            }
        }
        (untainted, migrate, lost)
    }

    /// Splits out failed allocations to reschedule now or later; the rest
    /// (running, finished batch work, failures out of attempts) stay.
    fn split_by_reschedule(&self, job: &Job, set: Set) -> (Set, Set, Vec<(Arc<Allocation>, i64)>) {
        let mut untainted = Vec::new();
        let mut now_set = Vec::new();
        let mut later = Vec::new();
        for a in set {
            if a.next_allocation.is_some() && a.is_terminal() {
                continue;
            }
            let (keep, ignore) = self.should_filter(&a);
            if ignore {
                if keep {
                    untainted.push(a);
                }
                continue;
            }
            let policy = reschedule_policy(self.state, Some(job), &a);
            let (at, eligible) = next_reschedule_time(policy.as_ref(), &a);
            let forced = a.desired_transition.should_force_reschedule();
            let ours = a.followup_eval_id == Some(self.eval.id);
            let due = at - self.now <= RESCHEDULE_WINDOW.as_nanos() as i64;
            if forced || (eligible && (ours || due)) {
                now_set.push(a);
                continue;
            }
            if eligible && a.followup_eval_id.is_none() {
                later.push((a.clone(), at));
            }
            untainted.push(a);
        }
        (untainted, now_set, later)
    }

    /// Nomad's `shouldFilter`: (counts as untainted, skip reschedule logic).
    fn should_filter(&self, a: &Allocation) -> (bool, bool) {
        if self.batch {
            match a.desired_status {
                DesiredStatus::Stop => return (a.ran_successfully(), true),
                DesiredStatus::Evict => return (false, true),
                DesiredStatus::Run => {}
            }
            return match a.client_status {
                ClientStatus::Failed => (false, false),
                _ => (true, true),
            };
        }
        if a.server_terminal() {
            return (false, true);
        }
        match a.client_status {
            ClientStatus::Complete | ClientStatus::Lost => (false, true),
            _ => (false, false),
        }
    }

    /// One follow-up evaluation per window of delayed reschedules; the
    /// allocations are annotated with it so they are not delayed twice.
    fn delay_reschedules(
        &self,
        group: &str,
        mut later: Vec<(Arc<Allocation>, i64)>,
        results: &mut ReconcileResults,
    ) {
        if later.is_empty() {
            return;
        }
        later.sort_by_key(|(_, at)| *at);
        let window = FOLLOWUP_BATCH_WINDOW.as_nanos() as i64;
        let mut current: Option<(i64, uuid::Uuid)> = None;
        for (alloc, at) in later {
            let eval_id = match current {
                Some((start, id)) if at - start <= window => id,
                _ => {
                    let mut e = self.eval.follow_up(TriggeredBy::AllocFailure, self.now);
                    e.status = EvalStatus::Pending;
                    e.wait_until = Some(at);
                    e.status_description = format!("created for delayed rescheduling of {group}");
                    let id = e.id;
                    results.followup_evals.push(e);
                    current = Some((at, id));
                    id
                }
            };
            let mut updated = (*alloc).clone();
            updated.followup_eval_id = Some(eval_id);
            results.attribute_updates.push(updated);
        }
    }

    /// Stops what exceeds the count: migrating allocations first, then the
    /// highest indexes.
    fn compute_stop(
        &self,
        count: u32,
        names: &mut NameIndex,
        untainted: &mut Set,
        migrate: &mut Set,
        results: &mut ReconcileResults,
    ) -> u64 {
        let total = untainted.len() + migrate.len();
        let mut remove = total.saturating_sub(count as usize);
        if remove == 0 {
            return 0;
        }
        let mut stopped = 0;
        // Prefer stopping allocations that would have to move anyway.
        migrate.sort_by_key(|a| std::cmp::Reverse(a.index()));
        while remove > 0 && !migrate.is_empty() {
            let a = migrate.remove(0);
            if let Some(i) = a.index() {
                names.unset(i);
            }
            results.stop.push(StopRequest {
                alloc: a,
                description: ALLOC_NOT_NEEDED,
                client_status: None,
            });
            remove -= 1;
            stopped += 1;
        }
        // Then the highest indexes among live allocations.
        let mut live: Vec<usize> = (0..untainted.len())
            .filter(|&i| !untainted[i].is_terminal())
            .collect();
        live.sort_by_key(|&i| std::cmp::Reverse(untainted[i].index()));
        let chosen: HashSet<usize> = live.into_iter().take(remove).collect();
        let mut keep = Vec::with_capacity(untainted.len());
        for (i, a) in untainted.drain(..).enumerate() {
            if chosen.contains(&i) {
                if let Some(idx) = a.index() {
                    names.unset(idx);
                }
                results.stop.push(StopRequest {
                    alloc: a,
                    description: ALLOC_NOT_NEEDED,
                    client_status: None,
                });
                stopped += 1;
            } else {
                keep.push(a);
            }
        }
        *untainted = keep;
        stopped
    }
}

/// The allocation indexes in use in a group, to name new allocations with
/// the lowest free index.
pub struct NameIndex {
    used: BTreeSet<u32>,
}

impl NameIndex {
    pub fn new(used: impl IntoIterator<Item = u32>) -> Self {
        NameIndex {
            used: used.into_iter().collect(),
        }
    }

    pub fn unset(&mut self, index: u32) {
        self.used.remove(&index);
    }

    /// The next `n` free indexes, lowest first.
    pub fn next(&mut self, n: u32) -> Vec<u32> {
        let mut out = Vec::with_capacity(n as usize);
        let mut candidate = 0u32;
        while out.len() < n as usize {
            if self.used.insert(candidate) {
                out.push(candidate);
            }
            candidate += 1;
        }
        out
    }
}

/// The version changes of a group's untainted allocations: in place where
/// `update` can, destructive (replaced) otherwise, at most the group's
/// `max_parallel` of those per evaluation (the rest wait, and the results
/// say how long).
fn update_versions(
    tg: &TaskGroup,
    untainted: &Set,
    desired: &mut DesiredUpdates,
    results: &mut ReconcileResults,
    update: &mut dyn FnMut(&TaskGroup, &Arc<Allocation>) -> UpdateKind,
) {
    let mut destructive = Vec::new();
    for a in untainted {
        match update(tg, a) {
            UpdateKind::Ignore => desired.ignore += 1,
            UpdateKind::InPlace(updated) => {
                desired.in_place_update += 1;
                results.inplace.push(*updated);
            }
            UpdateKind::Destructive => destructive.push(a.clone()),
        }
    }
    destructive.sort_by_key(|a| a.index());
    let limit = tg.max_parallel().map_or(usize::MAX, |m| m as usize);
    if destructive.len() > limit {
        desired.ignore += (destructive.len() - limit) as u64;
        destructive.truncate(limit);
        let wait = tg.update.as_ref().map(|u| u.stagger).unwrap_or_default();
        results.rolling_wait = Some(results.rolling_wait.map_or(wait, |w| w.min(wait)));
    }
    desired.destructive_update += destructive.len() as u64;
    for a in destructive {
        results.destructive.push(DestructiveRequest {
            name: a.name.clone(),
            group: tg.name.clone(),
            alloc: a,
        });
    }
}

/// The group a reconciliation is placing for, and how many it wants.
struct Wanted<'j> {
    job: &'j Job,
    tg: &'j TaskGroup,
    count: u32,
}

impl Wanted<'_> {
    /// What to place, in order: reschedules, replacements of lost
    /// allocations while fewer than `count` exist, then new allocations
    /// under the lowest free indexes.
    fn placements(
        &self,
        reschedule_now: &Set,
        lost: &Set,
        mut existing: u32,
        names: &mut NameIndex,
    ) -> Vec<PlaceRequest> {
        let tg = self.tg;
        let mut place = Vec::new();
        for a in reschedule_now {
            place.push(PlaceRequest {
                name: a.name.clone(),
                group: tg.name.clone(),
                previous: Some(a.clone()),
                reschedule: true,
            });
        }
        for a in lost {
            if existing >= self.count {
                break;
            }
            existing += 1;
            place.push(PlaceRequest {
                name: a.name.clone(),
                group: tg.name.clone(),
                previous: Some(a.clone()),
                reschedule: false,
            });
        }
        if existing < self.count {
            for name in names.next(self.count - existing) {
                place.push(PlaceRequest {
                    name: Allocation::name_for(&self.job.id, &tg.name, name),
                    group: tg.name.clone(),
                    previous: None,
                    reschedule: false,
                });
            }
        }
        place
    }
}

/// Migrations: stop and replace, not limited here (the drainer paces them
/// by marking allocations a few at a time).
fn migrate_all(
    tg: &TaskGroup,
    mut migrate: Set,
    desired: &mut DesiredUpdates,
    results: &mut ReconcileResults,
) {
    migrate.sort_by_key(|a| a.index());
    for a in migrate {
        desired.migrate += 1;
        results.stop.push(StopRequest {
            alloc: a.clone(),
            description: ALLOC_MIGRATING,
            client_status: None,
        });
        results.place.push(PlaceRequest {
            name: a.name.clone(),
            group: tg.name.clone(),
            previous: Some(a),
            reschedule: false,
        });
    }
}
