//! Job validation: every mistake a user can make in a job, reported at
//! once, each message naming the field to fix.
//!
//! `validate` runs on a canonicalized job (defaults filled), as Nomad's
//! `Job.Validate` does after `Canonicalize`.

use super::job::{
    cron_schedule, delay_function, operand, restart_mode, Affinity, Constraint, Job, JobType,
    ReschedulePolicy, RestartPolicy, Spread, Task, TaskGroup, UpdateStrategy, MAX_PRIORITY,
    MIN_PRIORITY,
};
use super::resources::{NetworkResource, Resources};
use super::service::{check_type, Service, ServiceCheck};
use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

/// All the problems found in one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationError {
    pub errors: Vec<String>,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.errors.len() == 1 {
            return f.write_str(&self.errors[0]);
        }
        write!(f, "{} errors occurred:", self.errors.len())?;
        for e in &self.errors {
            write!(f, "\n\t* {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationError {}

/// Smallest memory a task may ask for, in MB (Nomad's limit).
pub const MIN_MEMORY_MB: i64 = 10;
/// Smallest CPU a task may ask for, in MHz.
pub const MIN_CPU: i64 = 1;
/// Reschedule delays below this are refused (Nomad's limit).
pub const MIN_RESCHEDULE_DELAY: Duration = Duration::from_secs(5);

/// How large a job may be. Every bound is far above what real jobs use
/// (and what Nomad's own servers handle well), and each is configurable in
/// the agent's `[limits]`; they exist because a job is expanded into
/// allocations, plans and rows, so an absurd size becomes an absurd amount
/// of memory and CPU on every server, and, once written, at every restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobLimits {
    /// Task groups in one job.
    pub max_task_groups: usize,
    /// Tasks in one job, all groups together.
    pub max_tasks: usize,
    /// `Count` of one group.
    pub max_group_count: i64,
    /// The sum of every group's `Count`: the allocations one version of the
    /// job asks for.
    pub max_allocs: i64,
    /// Bytes of an ID or a name (job, group, task, namespace, region,
    /// datacenter, meta key, port label).
    pub max_name_bytes: usize,
}

impl Default for JobLimits {
    fn default() -> Self {
        JobLimits {
            max_task_groups: 1_000,
            max_tasks: 5_000,
            max_group_count: 100_000,
            max_allocs: 100_000,
            max_name_bytes: 200,
        }
    }
}

impl JobLimits {
    /// The largest limits any configuration may set: far past what one
    /// server can schedule. A stored job is checked against these (and
    /// only these) when the state is loaded, so that raising or lowering
    /// the configured limits, or adding a validation rule, never makes a
    /// job accepted earlier disappear at the next start; a job beyond
    /// them could only crash the scheduler and is quarantined.
    pub const CEILING: JobLimits = JobLimits {
        max_task_groups: 10_000,
        max_tasks: 50_000,
        max_group_count: 1_000_000,
        max_allocs: 1_000_000,
        max_name_bytes: 4096,
    };

    /// The first limit above [`JobLimits::CEILING`], by its config name.
    pub fn above_ceiling(&self) -> Option<&'static str> {
        let c = JobLimits::CEILING;
        [
            ("max_task_groups", self.max_task_groups > c.max_task_groups),
            ("max_tasks_per_job", self.max_tasks > c.max_tasks),
            (
                "max_count_per_group",
                self.max_group_count > c.max_group_count,
            ),
            ("max_allocs_per_job", self.max_allocs > c.max_allocs),
            ("max_name_bytes", self.max_name_bytes > c.max_name_bytes),
        ]
        .into_iter()
        .find_map(|(name, above)| above.then_some(name))
    }
}

/// The largest CPU (MHz), memory or disk (MB) and bandwidth (Mbits) one task
/// or node may state: 2^40, a million times any machine built, and small
/// enough that summing every allocation's ask on a node can never overflow
/// an i64 (the plan applier adds them up to decide whether a node fits).
pub const MAX_RESOURCE_VALUE: i64 = 1 << 40;
/// The most cores one task may reserve.
pub const MAX_CORES: i64 = 1 << 16;

impl Job {
    /// Checks the job against the default [`JobLimits`]; returns every
    /// problem found.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.validate_with(&JobLimits::default())
    }

    /// Whether a stored job can be loaded and scheduled without exhausting
    /// the server: its size within [`JobLimits::CEILING`]. Deliberately
    /// not the full validation (see `CEILING`).
    pub fn check_loadable(&self) -> Result<(), ValidationError> {
        let mut errs = Vec::new();
        validate_size(self, &JobLimits::CEILING, &mut errs);
        if let Some(name) = [&self.id, &self.namespace]
            .into_iter()
            .find(|n| n.len() > JobLimits::CEILING.max_name_bytes)
        {
            errs.push(format!("an ID of {} bytes", name.len()));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ValidationError { errors: errs })
        }
    }

    /// Checks the job against `limits`; returns every problem found.
    pub fn validate_with(&self, limits: &JobLimits) -> Result<(), ValidationError> {
        let mut errs = Vec::new();
        if !validate_size(self, limits, &mut errs) {
            // Too large to look at item by item: the size is the problem
            // to fix, and checking 10^5 groups is the work being refused.
            return Err(ValidationError { errors: errs });
        }
        validate_job_header(self, limits, &mut errs);
        validate_constraints("Job", &self.constraints, &mut errs);
        validate_affinities("Job", &self.affinities, &mut errs);
        validate_spreads("Job", &self.spreads, &mut errs);
        validate_groups(self, limits, &mut errs);
        if let Some(p) = &self.periodic {
            if !matches!(self.job_type, JobType::Batch | JobType::SysBatch) {
                errs.push("Periodic: periodic can only be used with batch or sysbatch jobs".into());
            }
            if p.enabled {
                if let Err(e) = cron_schedule(&p.spec) {
                    errs.push(format!("Periodic: Spec {:?}: {e}", p.spec));
                }
                if !p.spec_type.is_empty() && p.spec_type != "cron" {
                    errs.push(format!(
                        "Periodic: unknown SpecType {:?} (only \"cron\")",
                        p.spec_type
                    ));
                }
                if !p.time_zone.is_empty() && p.time_zone.parse::<chrono_tz::Tz>().is_err() {
                    errs.push(format!("Periodic: unknown TimeZone {:?}", p.time_zone));
                }
            }
        }
        if let Some(p) = &self.parameterized_job {
            validate_parameterized(p, &mut errs);
        }
        if self.parameterized_job.is_some() && !self.job_type.is_batch_like() {
            errs.push("ParameterizedJob: parameterized jobs must be batch or sysbatch".into());
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ValidationError { errors: errs })
        }
    }
}

/// The job's shape against the limits; `false` when it is too large to
/// validate further.
fn validate_size(job: &Job, limits: &JobLimits, errs: &mut Vec<String>) -> bool {
    let groups = job.task_groups.len();
    if groups > limits.max_task_groups {
        errs.push(format!(
            "Job has {groups} task groups, more than the limit of {} (limits.max_task_groups)",
            limits.max_task_groups
        ));
    }
    let tasks = job
        .task_groups
        .iter()
        .map(|tg| tg.tasks.len())
        .sum::<usize>();
    if tasks > limits.max_tasks {
        errs.push(format!(
            "Job has {tasks} tasks, more than the limit of {} (limits.max_tasks_per_job)",
            limits.max_tasks
        ));
    }
    if !errs.is_empty() {
        return false;
    }
    let mut allocs: i64 = 0;
    for tg in &job.task_groups {
        let count = i64::from(tg.count);
        if count > limits.max_group_count {
            errs.push(format!(
                "Task group {:?}: Count {count} is more than the limit of {} (limits.max_count_per_group)",
                tg.name, limits.max_group_count
            ));
        }
        allocs = allocs.saturating_add(count.max(0));
    }
    if allocs > limits.max_allocs {
        errs.push(format!(
            "Job asks for {allocs} allocations in all, more than the limit of {} (limits.max_allocs_per_job)",
            limits.max_allocs
        ));
    }
    true
}

/// An ID or name: not longer than the limit, no NUL.
fn check_name(what: &str, name: &str, limits: &JobLimits, errs: &mut Vec<String>) {
    if name.len() > limits.max_name_bytes {
        errs.push(format!(
            "{what} is {} bytes long, more than the limit of {} (limits.max_name_bytes)",
            name.len(),
            limits.max_name_bytes
        ));
    }
    if name.contains('\0') {
        errs.push(format!("{what} contains a null character"));
    }
}

/// A name that becomes a directory or file name on a client (a task's
/// directory and log files, a group's): one plain path component.
fn check_path_name(what: &str, name: &str, errs: &mut Vec<String>) {
    if name.contains(['/', '\\']) {
        errs.push(format!("{what} {name:?} cannot include slashes"));
    } else if name == "." || name == ".." {
        errs.push(format!("{what} {name:?} cannot be a relative path"));
    }
}

fn validate_job_header(job: &Job, limits: &JobLimits, errs: &mut Vec<String>) {
    check_name("Job ID", &job.id, limits, errs);
    check_name("Job Name", &job.name, limits, errs);
    check_name("Job Namespace", &job.namespace, limits, errs);
    check_name("Job Region", &job.region, limits, errs);
    for dc in &job.datacenters {
        check_name("Job datacenter", dc, limits, errs);
    }
    for key in job.meta.keys() {
        check_name("Job meta key", key, limits, errs);
    }
    if job.id.is_empty() {
        errs.push("Missing job ID".into());
    } else if job.id.contains(' ') {
        errs.push("Job ID contains a space".into());
    }
    if job.name.is_empty() {
        errs.push("Missing job name".into());
    }
    if job.namespace.is_empty() {
        errs.push("Job must be in a namespace".into());
    }
    if job.region.is_empty() {
        errs.push("Missing job region".into());
    }
    match &job.job_type {
        JobType::Unknown(t) => errs.push(format!(
            "Invalid job type: {t:?} (Type must be one of service, batch, system, sysbatch)"
        )),
        JobType::Core => errs.push("Invalid job type: \"_core\" is reserved for herder".into()),
        _ => {}
    }
    if !(MIN_PRIORITY..=MAX_PRIORITY).contains(&job.priority) {
        errs.push(format!(
            "Job priority must be between [{MIN_PRIORITY}, {MAX_PRIORITY}], got {}",
            job.priority
        ));
    }
    if job.datacenters.is_empty() {
        errs.push("Missing job datacenters".into());
    }
    if job.datacenters.iter().any(|d| d.is_empty()) {
        errs.push("Job datacenter must be non-empty string".into());
    }
}

fn validate_groups(job: &Job, limits: &JobLimits, errs: &mut Vec<String>) {
    if job.task_groups.is_empty() {
        errs.push("Missing job task groups".into());
    }
    // Names to positions: a list searched per group made validation
    // quadratic in the group count.
    let mut seen: std::collections::HashMap<&str, usize> = Default::default();
    for (i, tg) in job.task_groups.iter().enumerate() {
        if tg.name.is_empty() {
            errs.push(format!("Job task group {} missing name", i + 1));
        } else if let Some(j) = seen.get(tg.name.as_str()) {
            errs.push(format!(
                "Job task group {} redefines '{}' from group {}",
                i + 1,
                tg.name,
                j + 1
            ));
        } else {
            seen.insert(&tg.name, i);
        }
        let mut group_errs = Vec::new();
        check_name("Name", &tg.name, limits, &mut group_errs);
        check_path_name("Task group name", &tg.name, &mut group_errs);
        validate_group(job, tg, limits, &mut group_errs);
        let label = if tg.name.is_empty() {
            format!("Task group {}", i + 1)
        } else {
            format!("Task group {:?}", tg.name)
        };
        errs.extend(group_errs.into_iter().map(|e| format!("{label}: {e}")));
    }
}

fn validate_group(job: &Job, tg: &TaskGroup, limits: &JobLimits, errs: &mut Vec<String>) {
    if tg.count < 0 {
        errs.push(format!("Count can't be negative, got {}", tg.count));
    }
    if job.job_type.is_system_like() && tg.count > 1 {
        errs.push(format!(
            "Count must be 0 or 1 for {} jobs (one allocation per node), got {}",
            job.job_type, tg.count
        ));
    }
    if tg.tasks.is_empty() {
        errs.push("Missing tasks for task group".into());
    }
    if let Some(policy) = &tg.scaling {
        validate_scaling(job, tg, policy, errs);
    }
    validate_constraints("Group", &tg.constraints, errs);
    validate_affinities("Group", &tg.affinities, errs);
    validate_spreads("Group", &tg.spreads, errs);
    if let Some(rp) = &tg.restart_policy {
        validate_restart("RestartPolicy", rp, errs);
    }
    if let Some(rp) = &tg.reschedule_policy {
        if job.job_type.is_system_like() && rp.enabled() {
            errs.push(format!(
                "ReschedulePolicy: {} jobs are not rescheduled",
                job.job_type
            ));
        } else {
            validate_reschedule(rp, errs);
        }
    }
    if let Some(d) = &tg.ephemeral_disk {
        if !(0..=MAX_RESOURCE_VALUE).contains(&d.size_mb) {
            errs.push(format!(
                "EphemeralDisk: SizeMB must be between 0 and {MAX_RESOURCE_VALUE}, got {}",
                d.size_mb
            ));
        }
    }
    for key in tg.meta.keys() {
        check_name("Meta key", key, limits, errs);
    }
    if let Some(update) = &tg.update {
        validate_update(update, errs);
    }
    validate_networks("Networks", &tg.networks, errs);
    validate_group_tasks(tg, limits, errs);
    validate_port_labels(tg, errs);
    validate_services(tg, errs);
}

/// Nomad's smallest check interval and timeout.
const MIN_CHECK_PERIOD: Duration = Duration::from_secs(1);

/// The group's and its tasks' services: named, their ports among the
/// group's port labels (or numbers), their checks runnable.
fn validate_services(tg: &TaskGroup, errs: &mut Vec<String>) {
    let group_nets = tg.networks.iter();
    let task_nets = tg.tasks.iter().flat_map(|t| t.resources.networks.iter());
    let labels: HashSet<&str> = group_nets
        .chain(task_nets)
        .flat_map(|n| n.all_ports())
        .map(|p| p.label.as_str())
        .collect();
    let port_known = |label: &str| labels.contains(label) || label.parse::<u16>().is_ok();
    let owned = tg.services.iter().map(|s| ("Group", s));
    let of_tasks = tg
        .tasks
        .iter()
        .flat_map(|t| t.services.iter().map(|s| ("Task", s)));
    for (owner, s) in owned.chain(of_tasks) {
        let at = format!("{owner} service {:?}", s.name);
        if s.name.is_empty() {
            errs.push(format!("{owner} service: Name must be set"));
        }
        if !s.port_label.is_empty() && !port_known(&s.port_label) {
            errs.push(format!(
                "{at}: port label {:?} is not a port of the group's network",
                s.port_label
            ));
        }
        if !matches!(
            s.address_mode.as_str(),
            "" | "auto" | "host" | "driver" | "alloc"
        ) {
            errs.push(format!(
                "{at}: Service address_mode must be \"auto\", \"host\", \"driver\" or \"alloc\"; not {:?}",
                s.address_mode
            ));
        }
        for (i, c) in s.checks.iter().enumerate() {
            let at = format!(
                "{at}, check {:?}",
                if c.name.is_empty() {
                    (i + 1).to_string()
                } else {
                    c.name.clone()
                }
            );
            validate_check(tg, s, c, &at, &port_known, errs);
        }
    }
}

fn validate_check(
    tg: &TaskGroup,
    s: &Service,
    c: &ServiceCheck,
    at: &str,
    port_known: &dyn Fn(&str) -> bool,
    errs: &mut Vec<String>,
) {
    if !check_type::KNOWN.contains(&c.r#type.as_str()) {
        errs.push(format!(
            "{at}: Type must be one of http, tcp, script, grpc; got {:?}",
            c.r#type
        ));
        return;
    }
    if c.interval < MIN_CHECK_PERIOD {
        errs.push(format!(
            "{at}: Interval must be at least 1s, got {:?}",
            c.interval
        ));
    }
    if c.timeout < MIN_CHECK_PERIOD {
        errs.push(format!(
            "{at}: Timeout must be at least 1s, got {:?}",
            c.timeout
        ));
    }
    if !matches!(c.address_mode.as_str(), "" | "host" | "driver" | "alloc") {
        errs.push(format!("{at}: invalid address_mode {:?}", c.address_mode));
    }
    // Nomad's words for the two thresholds.
    if c.success_before_passing < 0 {
        errs.push(format!("{at}: success_before_passing must be non-negative"));
    }
    if c.failures_before_critical < 0 {
        errs.push(format!(
            "{at}: failures_before_critical must be non-negative"
        ));
    }
    if c.r#type == check_type::SCRIPT {
        if c.command.is_empty() {
            errs.push(format!("{at}: a script check needs a Command"));
        }
        let task = if c.task_name.is_empty() {
            &s.task_name
        } else {
            &c.task_name
        };
        if task.is_empty() {
            errs.push(format!(
                "{at}: a script check of a group service must name its task"
            ));
        } else if tg.lookup_task(task).is_none() {
            errs.push(format!("{at}: task {task:?} is not a task of the group"));
        }
        return;
    }
    if c.r#type == check_type::HTTP && c.path.is_empty() {
        errs.push(format!("{at}: an http check needs a Path"));
    }
    let port = if c.port_label.is_empty() {
        &s.port_label
    } else {
        &c.port_label
    };
    if port.is_empty() {
        errs.push(format!(
            "{at}: the check needs a port, but neither it nor its service names one"
        ));
    } else if !port_known(port) {
        errs.push(format!(
            "{at}: port label {port:?} is not a port of the group's network"
        ));
    }
}

/// A group's `update` block, checked as Nomad checks it.
fn validate_update(u: &UpdateStrategy, errs: &mut Vec<String>) {
    if u.max_parallel < 0 {
        errs.push(format!(
            "Update: MaxParallel can't be negative, got {}",
            u.max_parallel
        ));
    }
    if u.canary < 0 {
        errs.push(format!(
            "Update: Canary can't be negative, got {}",
            u.canary
        ));
    }
    if !matches!(
        u.health_check.as_str(),
        "" | "checks" | "task_states" | "manual"
    ) {
        errs.push(format!(
            "Update: HealthCheck must be one of checks, task_states, manual; got {:?}",
            u.health_check
        ));
    }
}

/// The group's tasks: names unique, at most one leader, and each task's
/// own checks, its messages labelled with the task.
fn validate_group_tasks(tg: &TaskGroup, limits: &JobLimits, errs: &mut Vec<String>) {
    let mut task_names: std::collections::HashMap<&str, usize> = Default::default();
    let mut leaders = 0;
    for (i, task) in tg.tasks.iter().enumerate() {
        if task.name.is_empty() {
            errs.push(format!("Task {} missing name", i + 1));
        } else if let Some(j) = task_names.get(task.name.as_str()) {
            errs.push(format!(
                "Task {} redefines '{}' from task {}",
                i + 1,
                task.name,
                j + 1
            ));
        } else {
            task_names.insert(&task.name, i);
        }
        leaders += usize::from(task.leader);
        let mut task_errs = Vec::new();
        check_name("Name", &task.name, limits, &mut task_errs);
        // A task's name is its directory in the allocation and the stem
        // of its log files on the client.
        check_path_name("Task name", &task.name, &mut task_errs);
        if task.name == "alloc" {
            task_errs
                .push("Task name \"alloc\" is reserved for the shared allocation directory".into());
        }
        for key in task.meta.keys().chain(task.env.keys()) {
            check_name("Meta or env key", key, limits, &mut task_errs);
        }
        validate_task(task, &mut task_errs);
        let label = if task.name.is_empty() {
            format!("Task {}", i + 1)
        } else {
            format!("Task {:?}", task.name)
        };
        errs.extend(task_errs.into_iter().map(|e| format!("{label}: {e}")));
    }
    if leaders > 1 {
        errs.push("Only one task may be marked as leader".into());
    }
}

fn validate_task(task: &Task, errs: &mut Vec<String>) {
    if task.driver.is_empty() {
        errs.push("Missing task driver".into());
    }
    validate_resources(&task.resources, errs);
    validate_constraints("Task", &task.constraints, errs);
    for c in &task.constraints {
        if c.operand == operand::DISTINCT_HOSTS || c.operand == operand::DISTINCT_PROPERTY {
            errs.push(format!(
                "Constraint {c}: {} can only be used at the job or group level",
                c.operand
            ));
        }
    }
    validate_affinities("Task", &task.affinities, errs);
    if let Some(rp) = &task.restart_policy {
        validate_restart("RestartPolicy", rp, errs);
    }
    for (i, t) in task.templates.iter().enumerate() {
        for e in t.validate() {
            errs.push(format!("Template {} validation failed: {e}", i + 1));
        }
    }
    for (i, a) in task.artifacts.iter().enumerate() {
        for e in a.validate() {
            errs.push(format!("Artifact {} validation failed: {e}", i + 1));
        }
    }
    if let Some(l) = &task.lifecycle {
        if !matches!(l.hook.as_str(), "prestart" | "poststart" | "poststop") {
            errs.push(format!(
                "Lifecycle: Hook must be prestart, poststart or poststop; got {:?}",
                l.hook
            ));
        }
    }
}

fn validate_resources(r: &Resources, errs: &mut Vec<String>) {
    if !(0..=MAX_CORES).contains(&r.cores) {
        errs.push(format!(
            "Resources: Cores must be between 0 and {MAX_CORES}, got {}",
            r.cores
        ));
    }
    for (name, value) in [
        ("CPU", r.cpu),
        ("MemoryMB", r.memory_mb),
        ("MemoryMaxMB", r.memory_max_mb),
        ("DiskMB", r.disk_mb),
        ("IOPS", r.iops),
    ] {
        if value > MAX_RESOURCE_VALUE {
            errs.push(format!(
                "Resources: {name} must be at most {MAX_RESOURCE_VALUE}, got {value}"
            ));
        }
    }
    if r.cores > 0 && r.cpu > 0 {
        errs.push("Resources: only one of CPU and Cores may be set".into());
    }
    if r.cores == 0 && r.cpu < MIN_CPU {
        errs.push(format!(
            "Resources: minimum CPU value is {MIN_CPU}; got {}",
            r.cpu
        ));
    }
    if r.memory_mb < MIN_MEMORY_MB {
        errs.push(format!(
            "Resources: minimum MemoryMB value is {MIN_MEMORY_MB}; got {}",
            r.memory_mb
        ));
    }
    if r.memory_max_mb != 0 && r.memory_max_mb < r.memory_mb {
        errs.push(format!(
            "Resources: MemoryMaxMB value ({}) should be larger than MemoryMB value ({})",
            r.memory_max_mb, r.memory_mb
        ));
    }
    if r.disk_mb < 0 {
        errs.push(format!(
            "Resources: DiskMB can't be negative, got {}",
            r.disk_mb
        ));
    }
    validate_networks("Resources: Networks", &r.networks, errs);
}

fn validate_networks(label: &str, nets: &[NetworkResource], errs: &mut Vec<String>) {
    for n in nets {
        if !(0..=MAX_RESOURCE_VALUE).contains(&n.mbits) {
            errs.push(format!(
                "{label}: MBits must be between 0 and {MAX_RESOURCE_VALUE}, got {}",
                n.mbits
            ));
        }
        for p in &n.reserved_ports {
            if p.value <= 0 || p.value > 65535 {
                errs.push(format!(
                    "{label}: static port {:?} must be between 1 and 65535, got {}",
                    p.label, p.value
                ));
            }
        }
        for p in n.all_ports() {
            if p.to < -1 || p.to > 65535 {
                errs.push(format!(
                    "{label}: port {:?} mapped to invalid port {}",
                    p.label, p.to
                ));
            }
        }
    }
}

fn validate_port_labels(tg: &TaskGroup, errs: &mut Vec<String>) {
    let mut labels = HashSet::new();
    let mut static_ports = HashSet::new();
    let group_nets = tg.networks.iter();
    let task_nets = tg.tasks.iter().flat_map(|t| t.resources.networks.iter());
    for n in group_nets.chain(task_nets) {
        for p in n.all_ports() {
            if p.label.is_empty() {
                errs.push("Port: every port needs a label".into());
            } else if !labels.insert(p.label.clone()) {
                errs.push(format!(
                    "Port label {:?} is defined more than once",
                    p.label
                ));
            }
        }
        for p in &n.reserved_ports {
            if p.value > 0 && !static_ports.insert(p.value) {
                errs.push(format!(
                    "Static port {} is reserved more than once",
                    p.value
                ));
            }
        }
    }
}

fn validate_restart(label: &str, rp: &RestartPolicy, errs: &mut Vec<String>) {
    if rp.attempts < 0 {
        errs.push(format!(
            "{label}: Attempts can't be negative, got {}",
            rp.attempts
        ));
    }
    if rp.mode != restart_mode::FAIL && rp.mode != restart_mode::DELAY {
        errs.push(format!(
            "{label}: Mode must be \"fail\" or \"delay\", got {:?}",
            rp.mode
        ));
    }
    if rp.attempts > 0 && rp.interval.is_zero() {
        errs.push(format!("{label}: Interval must be set when Attempts > 0"));
    }
    // Checked: attempts near i32::MAX times a long delay overflows a
    // Duration, and an overflow is as much "can't fit" as any.
    let total = u32::try_from(rp.attempts.max(0))
        .ok()
        .and_then(|n| rp.delay.checked_mul(n));
    if !rp.interval.is_zero() && total.is_none_or(|t| t > rp.interval) {
        errs.push(format!(
            "{label}: {} attempts with a {:?} delay can't fit in the {:?} interval",
            rp.attempts, rp.delay, rp.interval
        ));
    }
}

fn validate_reschedule(rp: &ReschedulePolicy, errs: &mut Vec<String>) {
    let label = "ReschedulePolicy";
    if rp.attempts < 0 {
        errs.push(format!(
            "{label}: Attempts can't be negative, got {}",
            rp.attempts
        ));
    }
    if !rp.enabled() {
        return;
    }
    if ![
        delay_function::CONSTANT,
        delay_function::EXPONENTIAL,
        delay_function::FIBONACCI,
    ]
    .contains(&rp.delay_function.as_str())
    {
        errs.push(format!(
            "{label}: DelayFunction must be constant, exponential or fibonacci; got {:?}",
            rp.delay_function
        ));
    }
    if rp.delay < MIN_RESCHEDULE_DELAY {
        errs.push(format!(
            "{label}: Delay must be at least {MIN_RESCHEDULE_DELAY:?}, got {:?}",
            rp.delay
        ));
    }
    if rp.delay_function != delay_function::CONSTANT
        && !rp.max_delay.is_zero()
        && rp.max_delay < rp.delay
    {
        errs.push(format!(
            "{label}: MaxDelay ({:?}) must not be less than Delay ({:?})",
            rp.max_delay, rp.delay
        ));
    }
    if rp.unlimited && rp.attempts > 0 && !rp.interval.is_zero() {
        errs.push(format!(
            "{label}: Unlimited can't be combined with Attempts and Interval"
        ));
    }
}

/// Checks one constraint's operand and targets.
pub fn validate_constraint(c: &Constraint) -> Result<(), String> {
    if !operand::ALL.contains(&c.operand.as_str()) {
        return Err(format!(
            "Constraint {c}: unknown operand {:?} (one of {})",
            c.operand,
            operand::ALL.join(", ")
        ));
    }
    let needs_l = c.operand != operand::DISTINCT_HOSTS;
    if needs_l && c.l_target.is_empty() {
        return Err(format!(
            "Constraint {c}: LTarget is required for {}",
            c.operand
        ));
    }
    match c.operand.as_str() {
        operand::REGEXP => regex::Regex::new(&c.r_target)
            .map(|_| ())
            .map_err(|e| format!("Constraint {c}: RTarget is not a valid regexp: {e}")),
        operand::VERSION => super::version::VersionConstraint::parse(&c.r_target, false)
            .map(|_| ())
            .map_err(|e| format!("Constraint {c}: RTarget is not a valid version constraint: {e}")),
        operand::SEMVER => super::version::VersionConstraint::parse(&c.r_target, true)
            .map(|_| ())
            .map_err(|e| format!("Constraint {c}: RTarget is not a valid semver constraint: {e}")),
        operand::IS_SET | operand::IS_NOT_SET | operand::DISTINCT_HOSTS => Ok(()),
        operand::DISTINCT_PROPERTY => {
            if c.r_target.is_empty() {
                Ok(())
            } else {
                c.r_target
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .map(|_| ())
                    .ok_or_else(|| {
                        format!("Constraint {c}: RTarget must be a positive count of allowed allocations per value")
                    })
            }
        }
        operand::LT | operand::LE | operand::GT | operand::GE => {
            if c.r_target.is_empty() {
                Err(format!(
                    "Constraint {c}: RTarget is required for {}",
                    c.operand
                ))
            } else {
                Ok(())
            }
        }
        _ => {
            if c.r_target.is_empty() && c.operand.starts_with("set_contains") {
                Err(format!(
                    "Constraint {c}: RTarget is required for {}",
                    c.operand
                ))
            } else {
                Ok(())
            }
        }
    }
}

fn validate_constraints(_level: &str, cs: &[Constraint], errs: &mut Vec<String>) {
    for c in cs {
        if let Err(e) = validate_constraint(c) {
            errs.push(e);
        }
    }
}

fn validate_affinities(_level: &str, affs: &[Affinity], errs: &mut Vec<String>) {
    for a in affs {
        let c = Constraint::new(&a.l_target, &a.operand, &a.r_target);
        if a.operand == operand::DISTINCT_HOSTS || a.operand == operand::DISTINCT_PROPERTY {
            errs.push(format!(
                "Affinity {c}: operand {} is not allowed in an affinity",
                a.operand
            ));
        } else if let Err(e) = validate_constraint(&c) {
            errs.push(e.replacen("Constraint", "Affinity", 1));
        }
        if a.weight == 0 || !(-100..=100).contains(&a.weight) {
            errs.push(format!(
                "Affinity {c}: Weight must be non-zero and between -100 and 100, got {}",
                a.weight
            ));
        }
    }
}

fn validate_spreads(_level: &str, spreads: &[Spread], errs: &mut Vec<String>) {
    let mut attrs = HashSet::new();
    for s in spreads {
        if s.attribute.is_empty() {
            errs.push("Spread: Attribute is required".into());
        } else if !attrs.insert(s.attribute.as_str()) {
            errs.push(format!(
                "Spread {:?}: attribute is spread more than once",
                s.attribute
            ));
        }
        if s.weight <= 0 || s.weight > 100 {
            errs.push(format!(
                "Spread {:?}: Weight must be between 1 and 100, got {}",
                s.attribute, s.weight
            ));
        }
        let mut total: u32 = 0;
        let mut values = HashSet::new();
        for t in &s.spread_target {
            if t.percent > 100 {
                errs.push(format!(
                    "Spread {:?}: target {:?} Percent must be between 0 and 100, got {}",
                    s.attribute, t.value, t.percent
                ));
            }
            if !values.insert(t.value.as_str()) {
                errs.push(format!(
                    "Spread {:?}: target {:?} is listed twice",
                    s.attribute, t.value
                ));
            }
            total += u32::from(t.percent);
        }
        if total > 100 {
            errs.push(format!(
                "Spread {:?}: target percentages add up to {total}, more than 100",
                s.attribute
            ));
        }
    }
}

/// Nomad's `ParameterizedJobConfig.Validate`.
fn validate_parameterized(p: &crate::structs::ParameterizedJobConfig, errs: &mut Vec<String>) {
    use crate::structs::job::dispatch_payload::{FORBIDDEN, OPTIONAL, REQUIRED};
    if ![OPTIONAL, REQUIRED, FORBIDDEN].contains(&p.payload.as_str()) {
        errs.push(format!("Unknown payload requirement: {:?}", p.payload));
    }
    let both: Vec<&String> = p
        .meta_required
        .iter()
        .filter(|k| p.meta_optional.contains(k))
        .collect();
    if !both.is_empty() {
        errs.push(format!(
            "Required and optional meta keys should be disjoint. Following keys exist in both: {both:?}"
        ));
    }
}

/// Nomad's `TaskGroup.validateScalingPolicy` (with `ScalingPolicy.Validate`).
fn validate_scaling(
    job: &Job,
    tg: &TaskGroup,
    policy: &crate::structs::ScalingPolicy,
    errs: &mut Vec<String>,
) {
    use crate::structs::scaling::ScalingPolicy;
    if job.job_type == JobType::System {
        errs.push("Task groups with job type system do not support scaling stanzas".into());
    }
    let invalid = |e: &str| format!("Scaling policy invalid: {e}");
    if policy.r#type.is_empty() {
        errs.push(invalid("missing scaling policy type"));
    } else if policy.r#type != ScalingPolicy::TYPE_HORIZONTAL {
        errs.push(invalid(&format!(
            "scaling policy type {:?} is not valid",
            policy.r#type
        )));
    }
    let (min, max) = (policy.min.unwrap_or(0), policy.max.unwrap_or(-1));
    if max < 0 {
        errs.push(invalid("maximum count must be specified and non-negative"));
    } else if max < min {
        errs.push(invalid("maximum count must not be less than minimum count"));
    }
    if min < 0 {
        errs.push(invalid("minimum count must be specified and non-negative"));
    }
    if max < i64::from(tg.count) {
        errs.push(invalid(
            "task group count must not be greater than maximum count in scaling policy",
        ));
    }
    if i64::from(tg.count) < min {
        errs.push(invalid(
            "task group count must not be less than minimum count in scaling policy",
        ));
    }
}
