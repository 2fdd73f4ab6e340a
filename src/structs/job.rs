//! Jobs: what a user asks herder to run.
//!
//! The shapes are Nomad's (`nomad job run -output`): PascalCase fields,
//! durations in nanoseconds, `null` for empty lists. `Job::canonicalize`
//! fills the defaults Nomad fills, so a job submitted with only the fields a
//! user wrote reads back the way Nomad would show it.

use super::resources::{NetworkResource, Resources};
use super::scaling::ScalingPolicy;
use super::serde_util::{nanos, nanos_opt, null_default, nullable};
use super::service::Service;
use super::task_files::{TaskArtifact, Template};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

pub const DEFAULT_NAMESPACE: &str = "default";
pub const DEFAULT_REGION: &str = "global";
pub const DEFAULT_NODE_POOL: &str = "default";
pub const DEFAULT_PRIORITY: i32 = 50;
pub const MIN_PRIORITY: i32 = 1;
pub const MAX_PRIORITY: i32 = 100;

/// The scheduler a job (and its evaluations) is handled by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum JobType {
    #[default]
    Service,
    Batch,
    System,
    SysBatch,
    /// Internal evaluations of the garbage collector (`_core`).
    Core,
    /// A type herder does not know; kept so validation can name it.
    Unknown(String),
}

impl JobType {
    pub const ALL_USER: [JobType; 4] = [
        JobType::Service,
        JobType::Batch,
        JobType::System,
        JobType::SysBatch,
    ];

    pub fn as_str(&self) -> &str {
        match self {
            JobType::Service => "service",
            JobType::Batch => "batch",
            JobType::System => "system",
            JobType::SysBatch => "sysbatch",
            JobType::Core => "_core",
            JobType::Unknown(s) => s,
        }
    }

    pub fn parse(s: &str) -> JobType {
        match s {
            "service" => JobType::Service,
            "batch" => JobType::Batch,
            "system" => JobType::System,
            "sysbatch" => JobType::SysBatch,
            "_core" => JobType::Core,
            other => JobType::Unknown(other.to_string()),
        }
    }

    /// System and sysbatch jobs place one allocation per eligible node.
    pub fn is_system_like(&self) -> bool {
        matches!(self, JobType::System | JobType::SysBatch)
    }

    /// Batch and sysbatch allocations run to completion.
    pub fn is_batch_like(&self) -> bool {
        matches!(self, JobType::Batch | JobType::SysBatch)
    }
}

impl fmt::Display for JobType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for JobType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for JobType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Option::<String>::deserialize(d)?.unwrap_or_default();
        Ok(if s.is_empty() {
            JobType::Service
        } else {
            JobType::parse(&s)
        })
    }
}

/// Job status as Nomad reports it.
pub mod job_status {
    pub const PENDING: &str = "pending";
    pub const RUNNING: &str = "running";
    pub const DEAD: &str = "dead";
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Job {
    #[serde(rename = "ID", deserialize_with = "null_default::deserialize")]
    pub id: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub namespace: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub region: String,
    #[serde(rename = "ParentID", deserialize_with = "null_default::deserialize")]
    pub parent_id: String,
    #[serde(rename = "Type")]
    pub job_type: JobType,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub priority: i32,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub all_at_once: bool,
    #[serde(with = "nullable")]
    pub datacenters: Vec<String>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub node_pool: String,
    #[serde(with = "nullable")]
    pub constraints: Vec<Constraint>,
    #[serde(with = "nullable")]
    pub affinities: Vec<Affinity>,
    #[serde(with = "nullable")]
    pub spreads: Vec<Spread>,
    #[serde(with = "nullable")]
    pub task_groups: Vec<TaskGroup>,
    pub update: Option<UpdateStrategy>,
    pub periodic: Option<PeriodicConfig>,
    #[serde(rename = "ParameterizedJob")]
    pub parameterized_job: Option<ParameterizedJobConfig>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub dispatched: bool,
    /// A dispatched job's input, base64 as in Nomad's JSON (`[]byte`).
    /// herder keeps the bytes as sent; Nomad stores them snappy-compressed.
    #[serde(with = "empty_null")]
    pub payload: String,
    /// The token a dispatch was made with (Nomad 1.2's
    /// `DispatchIdempotencyToken`); written only when set.
    #[serde(
        deserialize_with = "null_default::deserialize",
        skip_serializing_if = "String::is_empty"
    )]
    pub dispatch_idempotency_token: String,
    #[serde(with = "nullable")]
    pub meta: BTreeMap<String, String>,
    /// Kept as written and not acted on (see [`super::unhonoured`]).
    pub multiregion: Option<serde_json::Value>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub stop: bool,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub status: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub status_description: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub stable: bool,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub version: u64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub submit_time: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub create_index: u64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub modify_index: u64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub job_modify_index: u64,
}

impl Job {
    /// Whether `new` differs from this job in anything but the fields the
    /// servers maintain (status, version, indexes, submit time, stability):
    /// Nomad's `SpecChanged`.
    pub fn spec_changed(&self, new: &Job) -> bool {
        let mut candidate = new.clone();
        candidate.status = self.status.clone();
        candidate.status_description = self.status_description.clone();
        candidate.stable = self.stable;
        candidate.version = self.version;
        candidate.submit_time = self.submit_time;
        candidate.create_index = self.create_index;
        candidate.modify_index = self.modify_index;
        candidate.job_modify_index = self.job_modify_index;
        candidate != *self
    }

    /// Fills the defaults Nomad fills on registration (`Canonicalize`).
    pub fn canonicalize(&mut self) {
        if self.namespace.is_empty() {
            self.namespace = DEFAULT_NAMESPACE.to_string();
        }
        if self.region.is_empty() {
            self.region = DEFAULT_REGION.to_string();
        }
        if self.name.is_empty() {
            self.name = self.id.clone();
        }
        if self.priority == 0 {
            self.priority = DEFAULT_PRIORITY;
        }
        if self.node_pool.is_empty() {
            self.node_pool = DEFAULT_NODE_POOL.to_string();
        }
        if self.datacenters.is_empty() {
            self.datacenters = vec!["*".to_string()];
        }
        // Only service jobs get a rolling-update strategy by default; batch
        // work has none, and system jobs only when the user wrote one.
        match self.job_type {
            JobType::Service => {
                self.update.get_or_insert_with(UpdateStrategy::job_default);
            }
            JobType::System => {}
            _ => self.update = None,
        }
        let job_update = self.update.clone();
        let job_type = self.job_type.clone();
        let (namespace, id) = (self.namespace.clone(), self.id.clone());
        let job_name = self.name.clone();
        for tg in &mut self.task_groups {
            tg.canonicalize(&job_type, job_update.as_ref());
            tg.canonicalize_services(&job_name);
            if let Some(policy) = &mut tg.scaling {
                policy.canonicalize(&namespace, &id, &tg.name, tg.count);
            }
        }
        if let Some(p) = &mut self.periodic {
            if p.spec_type.is_empty() {
                p.spec_type = "cron".to_string();
            }
        }
    }

    pub fn lookup_task_group(&self, name: &str) -> Option<&TaskGroup> {
        self.task_groups.iter().find(|tg| tg.name == name)
    }

    /// Periodic and parameterized jobs are templates: they are never
    /// scheduled themselves, only their launched children are.
    pub fn is_template(&self) -> bool {
        self.periodic.as_ref().is_some_and(|p| p.enabled) || self.is_parameterized()
    }

    /// A parameterized job that can be dispatched: its dispatched children
    /// keep the `ParameterizedJob` block (as in Nomad) but are not
    /// parameterized themselves.
    pub fn is_parameterized(&self) -> bool {
        self.parameterized_job.is_some() && !self.dispatched
    }

    /// The scaling policies of the job's groups.
    pub fn scaling_policies(&self) -> impl Iterator<Item = &ScalingPolicy> {
        self.task_groups.iter().filter_map(|tg| tg.scaling.as_ref())
    }

    /// A child of this periodic or parameterized job: its spec under
    /// `id`, with the server's fields reset (a new job at version 0) and
    /// its own scaling policy IDs. The launcher and dispatch then set what
    /// makes the child theirs (no `Periodic`; `Dispatched`, payload, meta).
    pub fn derive_child(&self, id: String, now_nanos: i64) -> Job {
        let mut child = self.clone();
        child.name = id.clone();
        child.id = id;
        child.parent_id = self.id.clone();
        child.stop = false;
        child.status.clear();
        child.status_description.clear();
        child.stable = false;
        child.version = 0;
        child.create_index = 0;
        child.modify_index = 0;
        child.job_modify_index = 0;
        child.submit_time = now_nanos;
        let (namespace, child_id) = (child.namespace.clone(), child.id.clone());
        for tg in &mut child.task_groups {
            if let Some(policy) = &mut tg.scaling {
                policy.id.clear();
                policy.canonicalize(&namespace, &child_id, &tg.name, tg.count);
            }
        }
        child.assign_scaling_policy_ids(None);
        child
    }

    /// Gives each group's scaling policy its ID: the one the same group's
    /// policy of the same type has in `old` (the stored job), a new one
    /// otherwise. IDs sent with the job are ignored, as in Nomad
    /// (`propagateScalingPolicyIDs`).
    pub fn assign_scaling_policy_ids(&mut self, old: Option<&Job>) {
        for tg in &mut self.task_groups {
            let Some(policy) = tg.scaling.as_mut() else {
                continue;
            };
            let kept = old
                .and_then(|j| j.lookup_task_group(&tg.name))
                .and_then(|g| g.scaling.as_ref())
                .filter(|p| p.r#type == policy.r#type && !p.id.is_empty());
            policy.id = match kept {
                Some(p) => p.id.clone(),
                None => super::new_id().to_string(),
            };
        }
    }

    /// The key a job is stored under: (namespace, id).
    pub fn key(&self) -> (String, String) {
        (self.namespace.clone(), self.id.clone())
    }

    /// Total allocations the job asks for across its groups.
    pub fn total_count(&self) -> i64 {
        self.task_groups
            .iter()
            .map(|tg| tg.count.max(0) as i64)
            .sum()
    }

    /// True when a change from `self` to `other` needs no new placement
    /// decisions anywhere: only fields that do not affect where or how tasks
    /// run (meta, priority, update strategy of the job) differ.
    pub fn specs_equal_for_placement(&self, other: &Job) -> bool {
        self.datacenters == other.datacenters
            && self.node_pool == other.node_pool
            && self.constraints == other.constraints
            && self.affinities == other.affinities
            && self.spreads == other.spreads
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskGroup {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub count: i32,
    #[serde(with = "nullable")]
    pub constraints: Vec<Constraint>,
    #[serde(with = "nullable")]
    pub affinities: Vec<Affinity>,
    #[serde(with = "nullable")]
    pub spreads: Vec<Spread>,
    #[serde(with = "nullable")]
    pub tasks: Vec<Task>,
    pub restart_policy: Option<RestartPolicy>,
    pub reschedule_policy: Option<ReschedulePolicy>,
    pub ephemeral_disk: Option<EphemeralDisk>,
    pub update: Option<UpdateStrategy>,
    pub migrate: Option<MigrateStrategy>,
    #[serde(with = "nullable")]
    pub networks: Vec<NetworkResource>,
    #[serde(with = "nullable")]
    pub meta: BTreeMap<String, String>,
    #[serde(with = "nanos_opt")]
    pub stop_after_client_disconnect: Option<Duration>,
    #[serde(with = "nanos_opt")]
    pub max_client_disconnect: Option<Duration>,
    #[serde(with = "nanos_opt")]
    pub shutdown_delay: Option<Duration>,
    /// The volumes the group's tasks may mount, by name. Host volumes
    /// decide placement (a node must offer them); mounting them is not
    /// done yet (see [`super::unhonoured`]).
    #[serde(with = "nullable")]
    pub volumes: BTreeMap<String, VolumeRequest>,
    /// The group's services, registered in the native catalog while an
    /// allocation runs, with the checks its client runs.
    #[serde(with = "nullable")]
    pub services: Vec<Service>,
    /// The group's `scaling` block: bounds for `job scale` and the
    /// autoscaler's policy, served by `/v1/scaling/policies`.
    pub scaling: Option<ScalingPolicy>,
}

/// A group's `volume` block: what it needs a node (or CSI) to provide.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VolumeRequest {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
    /// `host` or `csi`.
    #[serde(rename = "Type", deserialize_with = "null_default::deserialize")]
    pub volume_type: String,
    /// The node's host volume (or the CSI volume ID) it refers to.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub source: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub read_only: bool,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub access_mode: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub attachment_mode: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub per_alloc: bool,
}

impl VolumeRequest {
    pub const HOST: &'static str = "host";
    pub const CSI: &'static str = "csi";
}

/// A task's `volume_mount` block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VolumeMount {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub volume: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub destination: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub read_only: bool,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub propagation_mode: String,
}

impl TaskGroup {
    fn canonicalize(&mut self, job_type: &JobType, job_update: Option<&UpdateStrategy>) {
        if self.ephemeral_disk.is_none() {
            self.ephemeral_disk = Some(EphemeralDisk::default());
        }
        if self.restart_policy.is_none() {
            self.restart_policy = Some(RestartPolicy::default_for(job_type));
        }
        if self.reschedule_policy.is_none() {
            self.reschedule_policy = ReschedulePolicy::default_for(job_type);
        }
        match job_type {
            JobType::Service | JobType::System => {
                if *job_type == JobType::Service && self.migrate.is_none() {
                    self.migrate = Some(MigrateStrategy::default());
                }
                let group = self.update.take();
                self.update = match (group, job_update) {
                    (Some(mut g), Some(j)) => {
                        g.inherit(j);
                        Some(g)
                    }
                    (Some(mut g), None) => {
                        g.inherit(&UpdateStrategy::job_default());
                        Some(g)
                    }
                    (None, Some(j)) => {
                        // Nomad copies the job's whole block (canary,
                        // auto_revert, auto_promote included), then fills
                        // what the job left unset with the group defaults.
                        let mut g = j.clone();
                        g.inherit(&UpdateStrategy::group_default());
                        Some(g)
                    }
                    (None, None) => None,
                };
            }
            _ => {
                // Batch jobs have no rolling updates in Nomad.
                self.update = None;
            }
        }
        let group_restart = self.restart_policy.clone();
        for task in &mut self.tasks {
            task.canonicalize(group_restart.as_ref());
        }
    }

    /// Nomad's service defaults: a group service without a name is
    /// `<job>-<group>`, a task's `<job>-<group>-<task>`; a task's services
    /// name their task.
    fn canonicalize_services(&mut self, job_name: &str) {
        for service in &mut self.services {
            if service.name.is_empty() {
                service.name = format!("{job_name}-{}", self.name);
            }
            service.canonicalize();
        }
        for task in &mut self.tasks {
            for service in &mut task.services {
                if service.name.is_empty() {
                    service.name = format!("{job_name}-{}-{}", self.name, task.name);
                }
                if service.task_name.is_empty() {
                    service.task_name = task.name.clone();
                }
                service.canonicalize();
            }
        }
    }

    pub fn lookup_task(&self, name: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.name == name)
    }

    /// Memory the group needs on a node, summed over its tasks.
    pub fn combined_resources(&self) -> Resources {
        let mut r = Resources::default();
        for t in &self.tasks {
            r.cpu += t.resources.cpu;
            r.memory_mb += t.resources.memory_mb;
            r.cores += t.resources.cores;
        }
        r.disk_mb = self.ephemeral_disk.as_ref().map_or(0, |d| d.size_mb);
        r
    }

    /// The update strategy in effect, if rolling updates apply.
    pub fn max_parallel(&self) -> Option<i32> {
        self.update
            .as_ref()
            .map(|u| u.max_parallel)
            .filter(|m| *m > 0)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Task {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub driver: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub user: String,
    /// Driver configuration, free-form as in Nomad (`config { ... }`).
    #[serde(with = "nullable")]
    pub config: BTreeMap<String, serde_json::Value>,
    #[serde(with = "nullable")]
    pub env: BTreeMap<String, String>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub resources: Resources,
    pub restart_policy: Option<RestartPolicy>,
    #[serde(with = "nullable")]
    pub constraints: Vec<Constraint>,
    #[serde(with = "nullable")]
    pub affinities: Vec<Affinity>,
    #[serde(with = "nullable")]
    pub meta: BTreeMap<String, String>,
    #[serde(with = "nanos")]
    pub kill_timeout: Duration,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub kill_signal: String,
    pub log_config: Option<LogConfig>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub leader: bool,
    #[serde(with = "nanos")]
    pub shutdown_delay: Duration,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub kind: String,
    pub lifecycle: Option<TaskLifecycle>,
    /// Files fetched into the task directory before it starts.
    #[serde(with = "nullable")]
    pub artifacts: Vec<TaskArtifact>,
    #[serde(with = "nullable")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Files (or environment variables) rendered before it starts.
    #[serde(with = "nullable")]
    pub templates: Vec<Template>,
    /// The task's services (registered like the group's).
    #[serde(with = "nullable")]
    pub services: Vec<Service>,
    pub vault: Option<serde_json::Value>,
    /// Left out when unset, as Nomad's answers leave it out.
    #[serde(rename = "CSIPluginConfig", skip_serializing_if = "Option::is_none")]
    pub csi_plugin_config: Option<serde_json::Value>,
    /// Where a dispatched job's payload is written in the task directory.
    pub dispatch_payload: Option<DispatchPayloadConfig>,
}

/// `dispatch_payload { file = "..." }`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DispatchPayloadConfig {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub file: String,
}

impl Task {
    fn canonicalize(&mut self, group_restart: Option<&RestartPolicy>) {
        if self.kill_timeout.is_zero() {
            self.kill_timeout = Duration::from_secs(5);
        }
        if self.log_config.is_none() {
            self.log_config = Some(LogConfig::default());
        }
        if self.restart_policy.is_none() {
            self.restart_policy = group_restart.cloned();
        }
        self.resources.canonicalize();
        for t in &mut self.templates {
            t.canonicalize();
        }
        for a in &mut self.artifacts {
            a.canonicalize();
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskLifecycle {
    pub hook: String,
    pub sidecar: bool,
}

impl Default for TaskLifecycle {
    fn default() -> Self {
        TaskLifecycle {
            hook: "prestart".into(),
            sidecar: false,
        }
    }
}

/// A hard placement rule: `LTarget Operand RTarget`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Constraint {
    #[serde(rename = "LTarget", deserialize_with = "null_default::deserialize")]
    pub l_target: String,
    #[serde(rename = "RTarget", deserialize_with = "null_default::deserialize")]
    pub r_target: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub operand: String,
}

impl Constraint {
    pub fn new(l: &str, op: &str, r: &str) -> Self {
        Constraint {
            l_target: l.into(),
            r_target: r.into(),
            operand: op.into(),
        }
    }
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.l_target, self.operand, self.r_target)
    }
}

/// Constraint operators herder understands, as Nomad spells them.
pub mod operand {
    pub const EQ: &str = "=";
    pub const EQ2: &str = "==";
    pub const IS: &str = "is";
    pub const NE: &str = "!=";
    pub const NOT: &str = "not";
    pub const LT: &str = "<";
    pub const LE: &str = "<=";
    pub const GT: &str = ">";
    pub const GE: &str = ">=";
    pub const REGEXP: &str = "regexp";
    pub const VERSION: &str = "version";
    pub const SEMVER: &str = "semver";
    pub const SET_CONTAINS: &str = "set_contains";
    pub const SET_CONTAINS_ALL: &str = "set_contains_all";
    pub const SET_CONTAINS_ANY: &str = "set_contains_any";
    pub const IS_SET: &str = "is_set";
    pub const IS_NOT_SET: &str = "is_not_set";
    pub const DISTINCT_HOSTS: &str = "distinct_hosts";
    pub const DISTINCT_PROPERTY: &str = "distinct_property";

    pub const ALL: [&str; 19] = [
        EQ,
        EQ2,
        IS,
        NE,
        NOT,
        LT,
        LE,
        GT,
        GE,
        REGEXP,
        VERSION,
        SEMVER,
        SET_CONTAINS,
        SET_CONTAINS_ALL,
        SET_CONTAINS_ANY,
        IS_SET,
        IS_NOT_SET,
        DISTINCT_HOSTS,
        DISTINCT_PROPERTY,
    ];
}

/// A soft placement preference with a weight in [-100, 100].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Affinity {
    #[serde(rename = "LTarget", deserialize_with = "null_default::deserialize")]
    pub l_target: String,
    #[serde(rename = "RTarget", deserialize_with = "null_default::deserialize")]
    pub r_target: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub operand: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub weight: i8,
}

/// Spread allocations over the values of a node attribute.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Spread {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub attribute: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub weight: i8,
    #[serde(with = "nullable")]
    pub spread_target: Vec<SpreadTarget>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SpreadTarget {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub value: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub percent: u8,
}

pub mod restart_mode {
    pub const FAIL: &str = "fail";
    pub const DELAY: &str = "delay";
}

/// How the client restarts a failed task in place.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RestartPolicy {
    pub attempts: i32,
    #[serde(with = "nanos")]
    pub interval: Duration,
    #[serde(with = "nanos")]
    pub delay: Duration,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub mode: String,
}

impl RestartPolicy {
    /// Nomad's defaults: service/system 2 attempts in 30 min, batch 3 in 24 h;
    /// 15 s delay, mode fail.
    pub fn default_for(job_type: &JobType) -> Self {
        let (attempts, interval) = if job_type.is_batch_like() {
            (3, Duration::from_secs(24 * 3600))
        } else {
            (2, Duration::from_secs(30 * 60))
        };
        RestartPolicy {
            attempts,
            interval,
            delay: Duration::from_secs(15),
            mode: restart_mode::FAIL.to_string(),
        }
    }
}

pub mod delay_function {
    pub const CONSTANT: &str = "constant";
    pub const EXPONENTIAL: &str = "exponential";
    pub const FIBONACCI: &str = "fibonacci";
}

/// How the server replaces a failed allocation on another node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ReschedulePolicy {
    pub attempts: i32,
    #[serde(with = "nanos")]
    pub interval: Duration,
    #[serde(with = "nanos")]
    pub delay: Duration,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub delay_function: String,
    #[serde(with = "nanos")]
    pub max_delay: Duration,
    pub unlimited: bool,
}

impl ReschedulePolicy {
    /// Nomad's defaults: service unlimited, 30 s exponential up to 1 h;
    /// batch 1 attempt in 24 h, 5 s constant. System jobs are not rescheduled.
    pub fn default_for(job_type: &JobType) -> Option<Self> {
        match job_type {
            JobType::Service => Some(ReschedulePolicy {
                attempts: 0,
                interval: Duration::ZERO,
                delay: Duration::from_secs(30),
                delay_function: delay_function::EXPONENTIAL.to_string(),
                max_delay: Duration::from_secs(3600),
                unlimited: true,
            }),
            JobType::Batch => Some(ReschedulePolicy {
                attempts: 1,
                interval: Duration::from_secs(24 * 3600),
                delay: Duration::from_secs(5),
                delay_function: delay_function::CONSTANT.to_string(),
                max_delay: Duration::ZERO,
                unlimited: false,
            }),
            // Nomad gives sysbatch groups a policy that never reschedules.
            JobType::SysBatch => Some(ReschedulePolicy::default()),
            _ => None,
        }
    }

    /// True when the policy allows any rescheduling at all.
    pub fn enabled(&self) -> bool {
        self.unlimited || (self.attempts > 0 && !self.interval.is_zero())
    }
}

/// Rolling update settings (`update` block).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct UpdateStrategy {
    #[serde(with = "nanos")]
    pub stagger: Duration,
    pub max_parallel: i32,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub health_check: String,
    #[serde(with = "nanos")]
    pub min_healthy_time: Duration,
    #[serde(with = "nanos")]
    pub healthy_deadline: Duration,
    #[serde(with = "nanos")]
    pub progress_deadline: Duration,
    pub auto_revert: bool,
    pub auto_promote: bool,
    pub canary: i32,
}

impl UpdateStrategy {
    /// The job-level default Nomad prints: stagger 30 s, max_parallel 1.
    pub fn job_default() -> Self {
        UpdateStrategy {
            stagger: Duration::from_secs(30),
            max_parallel: 1,
            ..Default::default()
        }
    }

    /// The group-level default: checks, 10 s healthy, 5 min deadline, 10 min progress.
    pub fn group_default() -> Self {
        UpdateStrategy {
            stagger: Duration::from_secs(30),
            max_parallel: 1,
            health_check: "checks".to_string(),
            min_healthy_time: Duration::from_secs(10),
            healthy_deadline: Duration::from_secs(300),
            progress_deadline: Duration::from_secs(600),
            auto_revert: false,
            auto_promote: false,
            canary: 0,
        }
    }

    /// Fields left unset in the group take the job's value.
    fn inherit(&mut self, job: &UpdateStrategy) {
        if job.max_parallel > 0 && self.max_parallel == 0 {
            self.max_parallel = job.max_parallel;
        }
        if !job.health_check.is_empty() && self.health_check.is_empty() {
            self.health_check = job.health_check.clone();
        }
        if self.health_check.is_empty() {
            self.health_check = "checks".to_string();
        }
        if self.min_healthy_time.is_zero() {
            self.min_healthy_time = if job.min_healthy_time.is_zero() {
                Duration::from_secs(10)
            } else {
                job.min_healthy_time
            };
        }
        if self.healthy_deadline.is_zero() {
            self.healthy_deadline = if job.healthy_deadline.is_zero() {
                Duration::from_secs(300)
            } else {
                job.healthy_deadline
            };
        }
        if self.progress_deadline.is_zero() {
            self.progress_deadline = if job.progress_deadline.is_zero() {
                Duration::from_secs(600)
            } else {
                job.progress_deadline
            };
        }
        if self.stagger.is_zero() {
            self.stagger = job.stagger;
        }
    }
}

/// How allocations leave a draining node (`migrate` block).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct MigrateStrategy {
    pub max_parallel: i32,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub health_check: String,
    #[serde(with = "nanos")]
    pub min_healthy_time: Duration,
    #[serde(with = "nanos")]
    pub healthy_deadline: Duration,
}

impl Default for MigrateStrategy {
    fn default() -> Self {
        MigrateStrategy {
            max_parallel: 1,
            health_check: "checks".to_string(),
            min_healthy_time: Duration::from_secs(10),
            healthy_deadline: Duration::from_secs(300),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct EphemeralDisk {
    pub sticky: bool,
    #[serde(rename = "SizeMB")]
    pub size_mb: i64,
    pub migrate: bool,
}

impl Default for EphemeralDisk {
    fn default() -> Self {
        EphemeralDisk {
            sticky: false,
            size_mb: 300,
            migrate: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct LogConfig {
    pub max_files: i32,
    #[serde(rename = "MaxFileSizeMB")]
    pub max_file_size_mb: i32,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            max_files: 10,
            max_file_size_mb: 10,
        }
    }
}

/// Launch the job on a cron schedule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PeriodicConfig {
    pub enabled: bool,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub spec: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub spec_type: String,
    pub prohibit_overlap: bool,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub time_zone: String,
}

impl PeriodicConfig {
    /// The first launch strictly after `after`, by the cron spec read in
    /// the config's time zone (UTC when empty), so "0 9 * * *" in
    /// "Europe/Berlin" means 09:00 there whatever the offset. `None` when
    /// the spec has no further instant.
    pub fn next_launch(
        &self,
        after: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, String> {
        let schedule = cron_schedule(&self.spec)?;
        if self.time_zone.is_empty() || self.time_zone == "UTC" {
            return Ok(schedule.after(&after).next());
        }
        let tz: chrono_tz::Tz = self
            .time_zone
            .parse()
            .map_err(|_| format!("unknown time zone {:?}", self.time_zone))?;
        let local = after.with_timezone(&tz);
        Ok(schedule
            .after(&local)
            .next()
            .map(|t| t.with_timezone(&chrono::Utc)))
    }
}

/// Parses a cron spec as Nomad accepts it: five fields (minute first), six
/// or seven (seconds first), or a shorthand such as `@daily`.
pub fn cron_schedule(spec: &str) -> Result<cron::Schedule, String> {
    use std::str::FromStr;
    let spec = spec.trim();
    if spec.is_empty() {
        return Err("cron spec is empty".into());
    }
    let full = if !spec.starts_with('@') && spec.split_whitespace().count() == 5 {
        format!("0 {spec}")
    } else {
        spec.to_string()
    };
    cron::Schedule::from_str(&full).map_err(|e| e.to_string())
}

/// The job is a template dispatched with a payload.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ParameterizedJobConfig {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub payload: String,
    #[serde(with = "nullable")]
    pub meta_required: Vec<String>,
    #[serde(with = "nullable")]
    pub meta_optional: Vec<String>,
}

pub mod dispatch_payload {
    pub const OPTIONAL: &str = "optional";
    pub const REQUIRED: &str = "required";
    pub const FORBIDDEN: &str = "forbidden";
}

/// A Go `[]byte`/string field: empty is `null` on output, `null` is empty
/// on input.
mod empty_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
        if v.is_empty() {
            s.serialize_none()
        } else {
            s.serialize_str(v)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
    }
}
