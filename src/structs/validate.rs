//! Job validation: every mistake a user can make in a job, reported at
//! once, each message naming the field to fix.
//!
//! `validate` runs on a canonicalized job (defaults filled), as Nomad's
//! `Job.Validate` does after `Canonicalize`.

use super::job::{
    delay_function, operand, restart_mode, Affinity, Constraint, Job, JobType, ReschedulePolicy,
    RestartPolicy, Spread, Task, TaskGroup, MAX_PRIORITY, MIN_PRIORITY,
};
use super::resources::{NetworkResource, Resources};
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

impl Job {
    /// Checks the job; returns every problem found.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut errs = Vec::new();
        validate_job_header(self, &mut errs);
        validate_constraints("Job", &self.constraints, &mut errs);
        validate_affinities("Job", &self.affinities, &mut errs);
        validate_spreads("Job", &self.spreads, &mut errs);
        validate_groups(self, &mut errs);
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

fn validate_job_header(job: &Job, errs: &mut Vec<String>) {
    if job.id.is_empty() {
        errs.push("Missing job ID".into());
    } else if job.id.contains(' ') {
        errs.push("Job ID contains a space".into());
    } else if job.id.contains('\0') {
        errs.push("Job ID contains a null character".into());
    }
    if job.name.is_empty() {
        errs.push("Missing job name".into());
    } else if job.name.contains('\0') {
        errs.push("Job Name contains a null character".into());
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

fn validate_groups(job: &Job, errs: &mut Vec<String>) {
    if job.task_groups.is_empty() {
        errs.push("Missing job task groups".into());
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, tg) in job.task_groups.iter().enumerate() {
        if tg.name.is_empty() {
            errs.push(format!("Job task group {} missing name", i + 1));
        } else if let Some(j) = seen.iter().position(|n| *n == tg.name) {
            errs.push(format!(
                "Job task group {} redefines '{}' from group {}",
                i + 1,
                tg.name,
                j + 1
            ));
        }
        seen.push(&tg.name);
        let mut group_errs = Vec::new();
        validate_group(job, tg, &mut group_errs);
        let label = if tg.name.is_empty() {
            format!("Task group {}", i + 1)
        } else {
            format!("Task group {:?}", tg.name)
        };
        errs.extend(group_errs.into_iter().map(|e| format!("{label}: {e}")));
    }
}

fn validate_group(job: &Job, tg: &TaskGroup, errs: &mut Vec<String>) {
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
        if d.size_mb < 0 {
            errs.push(format!(
                "EphemeralDisk: SizeMB can't be negative, got {}",
                d.size_mb
            ));
        }
    }
    if let Some(u) = &tg.update {
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
    validate_networks("Networks", &tg.networks, errs);
    let mut task_names: Vec<&str> = Vec::new();
    let mut leaders = 0;
    for (i, task) in tg.tasks.iter().enumerate() {
        if task.name.is_empty() {
            errs.push(format!("Task {} missing name", i + 1));
        } else if let Some(j) = task_names.iter().position(|n| *n == task.name) {
            errs.push(format!(
                "Task {} redefines '{}' from task {}",
                i + 1,
                task.name,
                j + 1
            ));
        }
        task_names.push(&task.name);
        leaders += usize::from(task.leader);
        let mut task_errs = Vec::new();
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
    validate_port_labels(tg, errs);
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
    if r.cores < 0 {
        errs.push(format!(
            "Resources: Cores can't be negative, got {}",
            r.cores
        ));
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
        if n.mbits < 0 {
            errs.push(format!("{label}: MBits can't be negative, got {}", n.mbits));
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
    if !rp.interval.is_zero() && rp.delay * rp.attempts.max(0) as u32 > rp.interval {
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
