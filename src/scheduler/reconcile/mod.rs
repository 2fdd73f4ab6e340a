//! The generic scheduler's reconciler: per task group, compare what the job
//! wants with the allocations that exist and the state of their nodes, and
//! say what to place, stop, update in place, replace, migrate, and
//! reschedule now or later.
//!
//! It follows Nomad's `reconcile.go`: allocations are sorted into
//! untainted, migrating (drain) and lost (node down or gone); failed ones
//! are split by the reschedule policy into "now", "later" (a follow-up
//! evaluation at the time the delay ends) and "not any more"; counts are
//! honoured by stopping the highest indexes first and naming new
//! allocations with the lowest free indexes; version changes become
//! in-place or destructive updates. Service groups with an update strategy
//! roll out under a deployment ([`deployment`]): canaries first, then at
//! most `max_parallel` unhealthy new allocations at a time.

mod deployment;

pub use deployment::DeploymentChanges;
use deployment::Rollout;

use crate::scheduler::util::{
    next_reschedule_time, node_is_lost, reschedule_policy, UpdateKind, ALLOC_LOST, ALLOC_MIGRATING,
    ALLOC_NOT_NEEDED, FOLLOWUP_BATCH_WINDOW, RESCHEDULE_WINDOW,
};
use crate::structs::{
    AllocId, Allocation, ClientStatus, Deployment, DeploymentState, DesiredStatus, DesiredUpdates,
    EvalStatus, Evaluation, Job, Node, NodeId, TaskGroup, TriggeredBy,
};
use crate::view::State;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// A new allocation to place.
#[derive(Clone, Debug)]
pub struct PlaceRequest {
    pub name: String,
    pub group: String,
    /// The allocation this one replaces (rescheduled, lost or migrated).
    pub previous: Option<Arc<Allocation>>,
    /// Replacing a failed allocation under its reschedule policy.
    pub reschedule: bool,
    /// A canary of the deployment (or the replacement of one).
    pub canary: bool,
    /// Nomad's `downgradeNonCanary`: while the group's canaries wait for
    /// promotion, what replaces (or adds to) the old version's allocations
    /// runs the old version, not the one under trial. Holds the lowest
    /// version acceptable (the replaced allocation's).
    pub downgrade_from: Option<u64>,
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
    /// The deployment to create, status changes, and the deployment new
    /// allocations belong to. Destructive updates held back by
    /// `max_parallel` wait for the deployment's allocations to turn
    /// healthy: any later evaluation of the job (the watcher's) places the
    /// next batch, so no stagger follow-up is scheduled here.
    pub deployment: DeploymentChanges,
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
    /// The job's latest deployment.
    pub deployment: Option<Arc<Deployment>>,
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
        let mut rollout = Rollout::new(self.deployment.clone(), self.job.map(|j| &**j));
        let job = match self.job {
            Some(job) if !job.stop => job,
            _ => {
                for (group, allocs) in by_group {
                    self.stop_all(group, &allocs, &mut results);
                }
                results.deployment = rollout.finish(false);
                return results;
            }
        };
        for (group, allocs) in &by_group {
            if job.lookup_task_group(group).is_none() {
                self.stop_all(group, allocs, &mut results);
            }
        }
        let mut complete = true;
        for tg in &job.task_groups {
            let allocs = by_group.remove(tg.name.as_str()).unwrap_or_default();
            let group_complete =
                self.compute_group(job, tg, allocs, &mut rollout, &mut results, update);
            complete = complete && group_complete;
        }
        let changes = rollout.finish(complete);
        // An allocation updated in place joins the version's deployment.
        for a in &mut results.inplace {
            if a.deployment_id != changes.current_id {
                a.deployment_id = changes.current_id;
                a.set_deployment_status(None);
            }
        }
        results.deployment = changes;
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

    /// Reconciles one group (Nomad's `computeGroup`); returns whether the
    /// group is complete as far as its deployment is concerned.
    fn compute_group(
        &self,
        job: &Job,
        tg: &TaskGroup,
        all: Set,
        rollout: &mut Rollout,
        results: &mut ReconcileResults,
        update: &mut dyn FnMut(&TaskGroup, &Arc<Allocation>) -> UpdateKind,
    ) -> bool {
        let mut desired = DesiredUpdates::default();
        let (mut dstate, in_deployment) = rollout.group_state(tg);
        let had_running = all.iter().any(|a| a.job_version == job.version);
        let Sorted {
            mut canaries,
            mut untainted,
            mut migrate,
            lost,
            reschedule_now,
            waiting,
        } = self.sort_group(job, tg, all, rollout, &mut desired, results);
        let count = tg.count.max(0) as u32;
        let mut names = NameIndex::new(
            untainted
                .iter()
                .chain(&migrate)
                .chain(&reschedule_now)
                .filter_map(|a| a.index()),
        );
        canaries.holding = dstate.awaiting_promotion();
        let stopped = self.compute_stop(
            count,
            &mut names,
            &mut untainted,
            &mut migrate,
            &canaries,
            results,
        );
        desired.stop += stopped;

        let (inplace, destructive) =
            classify_updates(tg, &untainted, &mut desired, results, update);
        if !in_deployment {
            dstate.desired_total += (destructive.len() + inplace) as u32;
        }
        if canaries.holding {
            // Waiting canaries are not counted toward the group's count.
            untainted.retain(|a| !canaries.ids.contains(&a.id));
        }
        let wanted = Wanted { job, tg, count };
        let require_canary = wanted.canaries(
            &mut dstate,
            &canaries,
            &destructive,
            rollout.halted(),
            &mut names,
            &mut desired,
            results,
        );
        canaries.holding = dstate.awaiting_promotion();
        let limit = rollout.limit(
            tg,
            &untainted,
            destructive.len() + migrate.len(),
            canaries.holding,
        );
        let existing = (untainted.len() + migrate.len() + reschedule_now.len()) as u32;
        let canarying = dstate.desired_canaries > 0 && !dstate.promoted;
        let place = wanted.placements(&reschedule_now, &lost, existing, &mut names, canarying);
        if !in_deployment {
            dstate.desired_total += place.len() as u32;
        }
        let nothing_to_do = destructive.len()
            + inplace
            + place.len()
            + migrate.len()
            + reschedule_now.len()
            + waiting
            == 0
            && !require_canary;
        let updating_spec = !destructive.is_empty() || inplace > 0;
        let ready = !rollout.halted() && !canaries.holding;
        let limit = admit_placements(place, &lost, ready, rollout, limit, &mut desired, results);
        admit_destructive(tg, destructive, ready, limit, &mut desired, results);
        migrate_all(tg, migrate, canarying, &mut desired, results);
        results.desired.insert(tg.name.clone(), desired);

        if !in_deployment && (!had_running || updating_spec) {
            rollout.attach(job, tg, dstate, self.eval.priority);
        }
        rollout.group_complete(&tg.name, nothing_to_do)
    }

    /// Sorts a group's allocations by what must happen to them: canaries,
    /// untainted, migrating, lost (stopped here), failed to reschedule now
    /// or later (follow-up evaluations made here).
    fn sort_group(
        &self,
        job: &Job,
        tg: &TaskGroup,
        mut all: Set,
        rollout: &Rollout,
        desired: &mut DesiredUpdates,
        results: &mut ReconcileResults,
    ) -> Sorted {
        if self.batch {
            // Finished work of an older version does not count any more.
            all.retain(|a| !(a.is_terminal() && a.job_version < job.version));
        }
        let (canaries, all) = self.split_canaries(rollout, all, desired, results);
        let (untainted, migrate, lost) = self.split_by_node(all);
        let (untainted, reschedule_now, reschedule_later) =
            self.split_by_reschedule(job, untainted, rollout.active_id());
        let waiting = reschedule_later.len();
        self.delay_reschedules(&tg.name, reschedule_later, results);
        // Lost allocations are always stopped (and maybe replaced later).
        for a in &lost {
            results.stop.push(StopRequest {
                alloc: a.clone(),
                description: ALLOC_LOST,
                client_status: Some(ClientStatus::Lost),
            });
            desired.stop += 1;
        }
        Sorted {
            canaries,
            untainted,
            migrate,
            lost,
            reschedule_now,
            waiting,
        }
    }

    /// Nomad's `handleGroupCanaries`: stops the unpromoted canaries of an
    /// older or failed deployment, and those of the current deployment that
    /// are on draining or lost nodes (new ones are placed instead); returns
    /// the current canaries and the group's allocations without the stopped.
    fn split_canaries(
        &self,
        rollout: &Rollout,
        all: Set,
        desired: &mut DesiredUpdates,
        results: &mut ReconcileResults,
    ) -> (Canaries, Set) {
        let stale = rollout.canaries_to_stop();
        let current = rollout.canaries();
        let mut canaries = Canaries::default();
        let mut rest = Vec::with_capacity(all.len());
        for a in all {
            let live = !a.is_terminal();
            let stop = if stale.contains(&a.id) {
                Some((ALLOC_NOT_NEEDED, None))
            } else if !current.contains(&a.id) {
                None
            } else if live && a.desired_transition.should_migrate() {
                Some((ALLOC_MIGRATING, None))
            } else if live && self.tainted.get(&a.node_id).is_some_and(node_is_lost) {
                Some((ALLOC_LOST, Some(ClientStatus::Lost)))
            } else {
                canaries.ids.insert(a.id);
                canaries.set.push(a.clone());
                None
            };
            match stop {
                Some((description, client_status)) => {
                    if live {
                        desired.stop += 1;
                        results.stop.push(StopRequest {
                            alloc: a,
                            description,
                            client_status,
                        });
                    }
                }
                None => rest.push(a),
            }
        }
        (canaries, rest)
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
    /// A failed allocation of the active deployment is left to the
    /// deployment watcher (it fails the deployment) unless marked for
    /// rescheduling.
    fn split_by_reschedule(
        &self,
        job: &Job,
        set: Set,
        active_deployment: Option<uuid::Uuid>,
    ) -> (Set, Set, Vec<(Arc<Allocation>, i64)>) {
        let mut untainted = Vec::new();
        let mut now_set = Vec::new();
        let mut later = Vec::new();
        for a in set {
            if a.links().next_allocation.is_some() && a.is_terminal() {
                continue;
            }
            let (keep, ignore) = self.should_filter(&a);
            if ignore {
                if keep {
                    untainted.push(a);
                }
                continue;
            }
            let in_deployment = active_deployment.is_some() && a.deployment_id == active_deployment;
            if in_deployment && a.desired_transition.reschedule != Some(true) {
                untainted.push(a);
                continue;
            }
            let policy = reschedule_policy(self.state, Some(job), &a);
            let (at, eligible) = next_reschedule_time(policy.as_ref(), &a);
            let forced = a.desired_transition.should_force_reschedule();
            let ours = a.links().followup_eval_id == Some(self.eval.id);
            let due = at - self.now <= RESCHEDULE_WINDOW.as_nanos() as i64;
            if forced || (eligible && (ours || due)) {
                now_set.push(a);
                continue;
            }
            if eligible && a.links().followup_eval_id.is_none() {
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
            updated.links_mut().followup_eval_id = Some(eval_id);
            results.attribute_updates.push(updated);
        }
    }

    /// Stops what exceeds the count: once canaries are promoted, the old
    /// allocations holding their names; then migrating allocations; then
    /// the highest indexes. Canaries waiting for promotion do not count.
    fn compute_stop(
        &self,
        count: u32,
        names: &mut NameIndex,
        untainted: &mut Set,
        migrate: &mut Set,
        canaries: &Canaries,
        results: &mut ReconcileResults,
    ) -> u64 {
        let counted = untainted
            .iter()
            .filter(|a| !(canaries.holding && canaries.ids.contains(&a.id)))
            .count();
        let mut remove = (counted + migrate.len()).saturating_sub(count as usize);
        if remove == 0 {
            return 0;
        }
        let mut stopped = 0;
        let stop = |alloc: Arc<Allocation>, results: &mut ReconcileResults| {
            results.stop.push(StopRequest {
                alloc,
                description: ALLOC_NOT_NEEDED,
                client_status: None,
            });
        };
        if !canaries.holding && !canaries.set.is_empty() {
            let canary_names: HashSet<&str> = canaries.set.iter().map(|a| &*a.name).collect();
            let mut keep = Vec::with_capacity(untainted.len());
            for a in untainted.drain(..) {
                let replaced_by_canary = !a.is_terminal()
                    && !canaries.ids.contains(&a.id)
                    && canary_names.contains(&*a.name);
                if remove > 0 && replaced_by_canary {
                    stop(a, results);
                    remove -= 1;
                    stopped += 1;
                } else {
                    keep.push(a);
                }
            }
            *untainted = keep;
        }
        // Prefer stopping allocations that would have to move anyway.
        migrate.sort_by_key(|a| std::cmp::Reverse(a.index()));
        while remove > 0 && !migrate.is_empty() {
            let a = migrate.remove(0);
            if let Some(i) = a.index() {
                names.unset(i);
            }
            stop(a, results);
            remove -= 1;
            stopped += 1;
        }
        // Then the highest indexes among live allocations.
        let mut live: Vec<usize> = (0..untainted.len())
            .filter(|&i| !untainted[i].is_terminal())
            .filter(|&i| !(canaries.holding && canaries.ids.contains(&untainted[i].id)))
            .collect();
        live.sort_by_key(|&i| std::cmp::Reverse(untainted[i].index()));
        let chosen: HashSet<usize> = live.into_iter().take(remove).collect();
        let mut keep = Vec::with_capacity(untainted.len());
        for (i, a) in untainted.drain(..).enumerate() {
            if chosen.contains(&i) {
                if let Some(idx) = a.index() {
                    names.unset(idx);
                }
                stop(a, results);
                stopped += 1;
            } else {
                keep.push(a);
            }
        }
        *untainted = keep;
        stopped
    }
}

/// A group's allocations sorted by what must happen to them.
struct Sorted {
    canaries: Canaries,
    untainted: Set,
    migrate: Set,
    lost: Set,
    reschedule_now: Set,
    /// Failed allocations to reschedule later.
    waiting: usize,
}

/// The current deployment's canaries in a group.
#[derive(Default)]
struct Canaries {
    set: Set,
    ids: HashSet<AllocId>,
    /// They wait for promotion: the rest of the group holds still.
    holding: bool,
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

    /// Names for `n` canaries (Nomad's `NextCanaries`): first the indexes
    /// of allocations being replaced that no canary holds yet, then free
    /// indexes below `count`, then any free index.
    pub fn next_canaries(
        &mut self,
        n: usize,
        held_by_canaries: &HashSet<u32>,
        replaced: &[u32],
        count: u32,
    ) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::with_capacity(n);
        for &i in replaced {
            if out.len() == n {
                return out;
            }
            if i < count && !held_by_canaries.contains(&i) && !out.contains(&i) {
                out.push(i);
            }
        }
        for i in 0..count {
            if out.len() == n {
                return out;
            }
            if self.used.insert(i) {
                out.push(i);
            }
        }
        let rest = n - out.len();
        out.extend(self.next(rest as u32));
        out
    }

    /// The next `n` free indexes, lowest first.
    ///
    /// The gaps are found by walking the used indexes in order beside the
    /// candidates, and the new ones are added in one sorted merge: a job of
    /// a thousand allocations took a thousand tree inserts here, a few
    /// percent of its whole evaluation.
    pub fn next(&mut self, n: u32) -> Vec<u32> {
        let mut out = Vec::with_capacity(n as usize);
        let mut used = self.used.iter().copied().peekable();
        let mut candidate = Some(0u32);
        while let Some(c) = candidate.filter(|_| out.len() < n as usize) {
            while used.next_if(|&u| u < c).is_some() {}
            if used.next_if_eq(&c).is_none() {
                out.push(c);
            }
            candidate = c.checked_add(1);
        }
        let mut taken: BTreeSet<u32> = out.iter().copied().collect();
        self.used.append(&mut taken);
        out
    }
}

/// The version changes of a group's untainted allocations: in place where
/// `update` can (added to the results; their number returned), destructive
/// (replaced) otherwise.
fn classify_updates(
    tg: &TaskGroup,
    untainted: &Set,
    desired: &mut DesiredUpdates,
    results: &mut ReconcileResults,
    update: &mut dyn FnMut(&TaskGroup, &Arc<Allocation>) -> UpdateKind,
) -> (usize, Set) {
    let mut destructive = Vec::new();
    let mut inplace = 0;
    for a in untainted {
        match update(tg, a) {
            UpdateKind::Ignore => desired.ignore += 1,
            UpdateKind::InPlace(updated) => {
                desired.in_place_update += 1;
                inplace += 1;
                results.inplace.push(*updated);
            }
            UpdateKind::Destructive => destructive.push(a.clone()),
        }
    }
    (inplace, destructive)
}

/// Places what the group needs: everything when the deployment lets it
/// (the placements use up the rolling limit first, which is returned);
/// otherwise (paused, failed, canaries waiting) only replacements of lost
/// allocations and reschedules, except reschedules of a failed
/// deployment's own allocations.
fn admit_placements(
    place: Vec<PlaceRequest>,
    lost: &Set,
    ready: bool,
    rollout: &Rollout,
    limit: usize,
    desired: &mut DesiredUpdates,
    results: &mut ReconcileResults,
) -> usize {
    if ready {
        let used = place.len().min(limit);
        desired.place += place.len() as u64;
        results.place.extend(place);
        return limit - used;
    }
    let failed = rollout.failed().then(|| rollout.current_id()).flatten();
    let lost: HashSet<AllocId> = lost.iter().map(|a| a.id).collect();
    for p in place {
        let prev = p.previous.as_ref();
        let replaces_lost = !p.reschedule && prev.is_some_and(|a| lost.contains(&a.id));
        let of_failed = failed.is_some() && prev.is_some_and(|a| a.deployment_id == failed);
        if replaces_lost || (p.reschedule && !of_failed) {
            desired.place += 1;
            results.place.push(p);
        }
    }
    limit
}

/// Destructive updates, lowest indexes first, as many as the limit allows
/// when the deployment lets the group move; the rest wait.
fn admit_destructive(
    tg: &TaskGroup,
    mut destructive: Set,
    ready: bool,
    limit: usize,
    desired: &mut DesiredUpdates,
    results: &mut ReconcileResults,
) {
    destructive.sort_by_key(|a| a.index());
    let take = if ready {
        destructive.len().min(limit)
    } else {
        0
    };
    desired.ignore += (destructive.len() - take) as u64;
    desired.destructive_update += take as u64;
    for a in destructive.into_iter().take(take) {
        results.destructive.push(DestructiveRequest {
            name: a.name.to_string(),
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
    /// Places the canaries a destructive change needs while fewer than the
    /// strategy's `canary` exist and the group is not promoted (none while
    /// the deployment is paused or failed); returns whether canaries are
    /// required.
    #[allow(clippy::too_many_arguments)]
    fn canaries(
        &self,
        dstate: &mut DeploymentState,
        canaries: &Canaries,
        destructive: &Set,
        halted: bool,
        names: &mut NameIndex,
        desired: &mut DesiredUpdates,
        results: &mut ReconcileResults,
    ) -> bool {
        let tg = self.tg;
        let wanted = tg
            .update
            .as_ref()
            .filter(|u| u.max_parallel > 0)
            .map_or(0, |u| u.canary.max(0) as usize);
        let required = !destructive.is_empty() && canaries.set.len() < wanted && !dstate.promoted;
        if !required {
            return false;
        }
        dstate.desired_canaries = wanted as u32;
        if halted {
            return true;
        }
        let n = wanted - canaries.set.len();
        desired.canary += n as u64;
        let held: HashSet<u32> = canaries.set.iter().filter_map(|a| a.index()).collect();
        let mut replaced: Vec<u32> = destructive.iter().filter_map(|a| a.index()).collect();
        replaced.sort_unstable();
        for index in names.next_canaries(n, &held, &replaced, self.count) {
            results.place.push(PlaceRequest {
                name: Allocation::name_for(&self.job.id, &tg.name, index),
                group: tg.name.clone(),
                previous: None,
                reschedule: false,
                canary: true,
                downgrade_from: None,
            });
        }
        true
    }

    /// What to place, in order: reschedules, replacements of lost
    /// allocations while fewer than `count` exist, then new allocations
    /// under the lowest free indexes.
    fn placements(
        &self,
        reschedule_now: &Set,
        lost: &Set,
        mut existing: u32,
        names: &mut NameIndex,
        canarying: bool,
    ) -> Vec<PlaceRequest> {
        let tg = self.tg;
        let mut place = Vec::new();
        for a in reschedule_now {
            place.push(PlaceRequest {
                name: a.name.to_string(),
                group: tg.name.clone(),
                previous: Some(a.clone()),
                reschedule: true,
                canary: a.is_canary(),
                downgrade_from: downgrade(canarying, a),
            });
        }
        for a in lost {
            if existing >= self.count {
                break;
            }
            existing += 1;
            place.push(PlaceRequest {
                name: a.name.to_string(),
                group: tg.name.clone(),
                previous: Some(a.clone()),
                reschedule: false,
                canary: a.is_canary(),
                downgrade_from: downgrade(canarying, a),
            });
        }
        if existing < self.count {
            for name in names.next(self.count - existing) {
                place.push(PlaceRequest {
                    name: Allocation::name_for(&self.job.id, &tg.name, name),
                    group: tg.name.clone(),
                    previous: None,
                    reschedule: false,
                    canary: false,
                    downgrade_from: canarying.then_some(0),
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
    canarying: bool,
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
            name: a.name.to_string(),
            group: tg.name.clone(),
            canary: a.is_canary(),
            downgrade_from: downgrade(canarying, &a),
            previous: Some(a),
            reschedule: false,
        });
    }
}

/// What replaces `a` runs the old version while canaries are on trial,
/// unless `a` is itself a canary (see `PlaceRequest::downgrade_from`).
fn downgrade(canarying: bool, a: &Allocation) -> Option<u64> {
    (canarying && !a.is_canary()).then_some(a.job_version)
}

#[cfg(test)]
mod tests {
    use super::NameIndex;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;

    /// The lowest free indexes, one by one: what `next` must hand out.
    fn lowest_free(used: &mut BTreeSet<u32>, n: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut candidate = 0;
        while out.len() < n as usize {
            if used.insert(candidate) {
                out.push(candidate);
            }
            candidate += 1;
        }
        out
    }

    #[test]
    fn new_names_take_the_lowest_free_indexes_and_are_then_used() {
        let mut rng = SmallRng::seed_from_u64(23);
        for _ in 0..200 {
            let start: BTreeSet<u32> = (0..rng.gen_range(0..40))
                .map(|_| rng.gen_range(0..60))
                .collect();
            let mut names = NameIndex::new(start.iter().copied());
            let mut model = start;
            for _ in 0..6 {
                if rng.gen_bool(0.3) {
                    let freed = rng.gen_range(0..80);
                    names.unset(freed);
                    model.remove(&freed);
                }
                let n = rng.gen_range(0..30);
                assert_eq!(names.next(n), lowest_free(&mut model, n));
                assert_eq!(names.used, model);
            }
        }
    }
}
