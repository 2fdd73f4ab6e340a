//! Mapping an HCL2 job file onto `structs::Job`, block by block.
//!
//! Nomad decodes job files into its `api` structs, whose unset fields are
//! nil pointers, and its `Canonicalize` then merges written fields over
//! defaults: a group's `restart` over the job type's default policy, a
//! task's over its group's, a group's `update` over the job's. herder's
//! structs have no "unset", so each block here is read *onto* its resolved
//! default, which gives the same result; `Job::canonicalize` fills the rest.

use super::body::{BodyReader, Schema};
use super::describe::kind_of;
use super::eval::Evaluator;
use super::hcl_service;
use super::limits::{self, Budget, HclLimits};
use super::scan;
use super::source::Source;
use super::JobspecError;
use crate::structs::job::{operand, TaskLifecycle};
use crate::structs::{
    Affinity, Constraint, EphemeralDisk, Job, JobType, LogConfig, MigrateStrategy, NetworkResource,
    ParameterizedJobConfig, PeriodicConfig, Port, ReschedulePolicy, Resources, RestartPolicy,
    Spread, SpreadTarget, Task, TaskArtifact, TaskGroup, Template, UpdateStrategy,
};
use hcl::edit::Span;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const TOP_LEVEL: Schema = Schema {
    attributes: &[],
    blocks: &["job", "variable", "locals"],
    ignored: &[],
};

const JOB: Schema = Schema {
    attributes: &[
        "id",
        "region",
        "namespace",
        "type",
        "priority",
        "all_at_once",
        "datacenters",
        "node_pool",
        "meta",
    ],
    blocks: &[
        "constraint",
        "affinity",
        "spread",
        "update",
        "periodic",
        "parameterized",
        "meta",
        "migrate",
        "reschedule",
        "group",
    ],
    ignored: &[
        "vault_token",
        "vault_namespace",
        "consul_token",
        "consul_namespace",
        "multiregion",
        "vault",
        "consul",
        "ui",
    ],
};

const GROUP: Schema = Schema {
    attributes: &[
        "count",
        "meta",
        "stop_after_client_disconnect",
        "max_client_disconnect",
        "shutdown_delay",
    ],
    blocks: &[
        "constraint",
        "affinity",
        "spread",
        "restart",
        "reschedule",
        "ephemeral_disk",
        "update",
        "migrate",
        "network",
        "meta",
        "task",
        "service",
    ],
    ignored: &[
        "volume",
        "scaling",
        "consul",
        "vault",
        "disconnect",
        "prevent_reschedule_on_lost",
    ],
};

const TASK: Schema = Schema {
    attributes: &[
        "driver",
        "user",
        "config",
        "env",
        "meta",
        "kill_timeout",
        "kill_signal",
        "leader",
        "shutdown_delay",
        "kind",
    ],
    blocks: &[
        "config",
        "env",
        "resources",
        "restart",
        "constraint",
        "affinity",
        "meta",
        "logs",
        "lifecycle",
        "artifact",
        "service",
        "template",
    ],
    ignored: &[
        "vault",
        "volume_mount",
        "dispatch_payload",
        "scaling",
        "csi_plugin",
        "identity",
        "consul",
        "action",
        "kill_signal_delay",
    ],
};

/// Parses the file into a job, not yet canonicalized; `vars` are values
/// for the file's `variable` blocks.
///
/// The limits are checked in the order that keeps every step safe: the
/// size before anything reads the text, the nesting and the size of the
/// syntax tree (a linear scan) before the recursive parser sees it, and
/// the rest of the expansion budget while the evaluator builds values.
pub(crate) fn parse(
    text: &str,
    file: &str,
    vars: &BTreeMap<String, String>,
    limits: &HclLimits,
) -> Result<Job, JobspecError> {
    if text.len() > limits.max_source_bytes {
        return Err(limits::source_error(
            file,
            text.len(),
            limits.max_source_bytes,
        ));
    }
    let src = Source::new(text, file);
    let budget = Budget::new(limits.max_expansion_bytes);
    scan::scan(text, limits.max_nesting_depth, &budget)
        .map_err(|refused| scan::scan_error(&src, refused, limits))?;
    let body = hcl::edit::parser::parse_body(text).map_err(|e| JobspecError::Syntax {
        file: file.to_string(),
        line: e.location().line(),
        column: e.location().column(),
        message: syntax_message(&e),
    })?;
    let mut eval = Evaluator::new(&src, &budget, limits.max_nesting_depth);
    eval.declare_top_level(&body, vars)?;
    let top = BodyReader {
        src: &src,
        eval: &eval,
        body: &body,
        place: "the file".to_string(),
        at: None,
    };
    top.check(&TOP_LEVEL)?;
    let job_block = top.single_block("job")?.ok_or_else(|| {
        src.error(
            Some(0..0),
            "no job block: a job file needs one `job \"name\" { ... }`",
        )
    })?;
    let (reader, labels) = top.child(job_block, 1, "the job's name")?;
    read_job(&reader, labels.into_iter().next().unwrap_or_default())
}

fn syntax_message(e: &hcl::edit::parser::Error) -> String {
    // The line can be the whole file: quote at most its start.
    const MAX_CHARS: usize = 80;
    let line = e.line().trim();
    let near = match line.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line.to_string(),
    };
    if near.is_empty() {
        format!("syntax error: {}", e.message())
    } else {
        format!("syntax error: {} (in `{near}`)", e.message())
    }
}

fn read_job(r: &BodyReader, name: String) -> Result<Job, JobspecError> {
    r.check(&JOB)?;
    let job_type = JobType::parse(&r.string("type")?.unwrap_or_else(|| "service".into()));
    let mut job = Job {
        id: r.string("id")?.unwrap_or_else(|| name.clone()),
        name,
        region: r.string("region")?.unwrap_or_default(),
        namespace: r.string("namespace")?.unwrap_or_default(),
        job_type: job_type.clone(),
        priority: r.int_as("priority")?.unwrap_or_default(),
        all_at_once: r.bool("all_at_once")?.unwrap_or_default(),
        datacenters: r.strings("datacenters")?.unwrap_or_default(),
        node_pool: r.string("node_pool")?.unwrap_or_default(),
        meta: r.string_map("meta")?,
        constraints: constraints(r)?,
        affinities: affinities(r)?,
        spreads: spreads(r)?,
        ..Job::default()
    };
    job.update = match r.single_child("update")? {
        Some(u) => Some(update(&u, UpdateStrategy::group_default())?),
        None => None,
    };
    job.periodic = match r.single_child("periodic")? {
        Some(p) => Some(periodic(&p)?),
        None => None,
    };
    job.parameterized_job = match r.single_child("parameterized")? {
        Some(p) => Some(parameterized(&p)?),
        None => None,
    };
    let defaults = GroupDefaults {
        job_type: &job_type,
        update: job.update.clone(),
        reschedule: match r.single_child("reschedule")? {
            Some(b) => reschedule(&b, base_reschedule(&job_type))?,
            None => base_reschedule(&job_type),
        },
        migrate: match r.single_child("migrate")? {
            Some(b) => migrate(&b, MigrateStrategy::default())?,
            None => MigrateStrategy::default(),
        },
    };
    for block in r.blocks("group") {
        let (g, labels) = r.child(block, 1, "the group's name")?;
        let name = labels.into_iter().next().unwrap_or_default();
        job.task_groups.push(group(&g, name, &defaults)?);
    }
    Ok(job)
}

/// What groups inherit from the job.
struct GroupDefaults<'a> {
    job_type: &'a JobType,
    update: Option<UpdateStrategy>,
    reschedule: ReschedulePolicy,
    migrate: MigrateStrategy,
}

fn base_reschedule(job_type: &JobType) -> ReschedulePolicy {
    ReschedulePolicy::default_for(job_type).unwrap_or_default()
}

fn group(r: &BodyReader, name: String, d: &GroupDefaults) -> Result<TaskGroup, JobspecError> {
    r.check(&GROUP)?;
    let restart_policy = match r.single_child("restart")? {
        Some(b) => restart(&b, RestartPolicy::default_for(d.job_type))?,
        None => RestartPolicy::default_for(d.job_type),
    };
    let mut tg = TaskGroup {
        // Nomad runs one allocation of a group that does not say.
        count: r.int_as("count")?.unwrap_or(1),
        name,
        constraints: constraints(r)?,
        affinities: affinities(r)?,
        spreads: spreads(r)?,
        meta: r.string_map("meta")?,
        stop_after_client_disconnect: r.duration("stop_after_client_disconnect")?,
        max_client_disconnect: r.duration("max_client_disconnect")?,
        shutdown_delay: r.duration("shutdown_delay")?,
        restart_policy: Some(restart_policy.clone()),
        ..TaskGroup::default()
    };
    // Groups inherit the job's reschedule and migrate settings; where the
    // job type has none (system), only an explicit block sets one.
    let reschedule_block = r.single_child("reschedule")?;
    tg.reschedule_policy = match reschedule_block {
        Some(b) => Some(reschedule(&b, d.reschedule.clone())?),
        None => ReschedulePolicy::default_for(d.job_type).map(|_| d.reschedule.clone()),
    };
    if *d.job_type == JobType::Service {
        tg.migrate = Some(match r.single_child("migrate")? {
            Some(b) => migrate(&b, d.migrate.clone())?,
            None => d.migrate.clone(),
        });
    }
    tg.update = match r.single_child("update")? {
        Some(b) => {
            let base = d
                .update
                .clone()
                .unwrap_or_else(UpdateStrategy::group_default);
            Some(update(&b, base)?)
        }
        None => d.update.clone(),
    };
    if let Some(b) = r.single_child("ephemeral_disk")? {
        tg.ephemeral_disk = Some(ephemeral_disk(&b)?);
    }
    for block in r.blocks("network") {
        let (n, _) = r.child(block, 0, "")?;
        tg.networks.push(network(&n)?);
    }
    for block in r.blocks("task") {
        let (t, labels) = r.child(block, 1, "the task's name")?;
        let name = labels.into_iter().next().unwrap_or_default();
        tg.tasks.push(task(&t, name, &restart_policy)?);
    }
    tg.services = hcl_service::services(r)?;
    Ok(tg)
}

fn task(r: &BodyReader, name: String, group_restart: &RestartPolicy) -> Result<Task, JobspecError> {
    r.check(&TASK)?;
    let mut t = Task {
        name,
        driver: r.string("driver")?.unwrap_or_default(),
        user: r.string("user")?.unwrap_or_default(),
        config: driver_config(r)?,
        env: r.string_map("env")?,
        meta: r.string_map("meta")?,
        constraints: constraints(r)?,
        affinities: affinities(r)?,
        kill_timeout: r.duration("kill_timeout")?.unwrap_or_default(),
        kill_signal: r.string("kill_signal")?.unwrap_or_default(),
        leader: r.bool("leader")?.unwrap_or_default(),
        shutdown_delay: r.duration("shutdown_delay")?.unwrap_or_default(),
        kind: r.string("kind")?.unwrap_or_default(),
        ..Task::default()
    };
    if let Some(b) = r.single_child("resources")? {
        t.resources = resources(&b)?;
    }
    if let Some(b) = r.single_child("restart")? {
        t.restart_policy = Some(restart(&b, group_restart.clone())?);
    }
    if let Some(b) = r.single_child("logs")? {
        t.log_config = Some(logs(&b)?);
    }
    if let Some(b) = r.single_child("lifecycle")? {
        t.lifecycle = Some(lifecycle(&b)?);
    }
    for block in r.blocks("artifact") {
        let (a, _) = r.child(block, 0, "")?;
        t.artifacts.push(artifact(&a)?);
    }
    for block in r.blocks("template") {
        let (b, _) = r.child(block, 0, "")?;
        t.templates.push(template(&b)?);
    }
    t.services = hcl_service::services(r)?;
    Ok(t)
}

/// `config { ... }` (or `config = { ... }`): free-form, driver-specific.
fn driver_config(r: &BodyReader) -> Result<BTreeMap<String, Value>, JobspecError> {
    let block = r.single_block("config")?;
    let attr = r.json("config")?;
    match (block, attr) {
        (Some(block), Some(_)) => Err(r.src.error(
            block.ident.span(),
            format!(
                "\"config\" is set both as an attribute and as a block in {}",
                r.place
            ),
        )),
        (Some(block), None) => {
            let (c, _) = r.child(block, 0, "")?;
            Ok(c.free_form()?.into_iter().collect())
        }
        (None, Some(Value::Object(map))) => Ok(map.into_iter().collect()),
        (None, Some(other)) => Err(r.src.error(
            r.body.get_attribute("config").and_then(|a| a.value.span()),
            format!(
                "invalid value for \"config\" in {}: an object is required, got {}",
                r.place,
                kind_of(&other)
            ),
        )),
        (None, None) => Ok(Default::default()),
    }
}

/// Operators that can also be written as an attribute naming them:
/// `regexp = "^web"` means `operator = "regexp"`, `value = "^web"`.
/// (`is_set` and `is_not_set` have no shorthand: they name no value, so
/// they are written `operator = "is_set"`.)
const CONSTRAINT_SHORTHANDS: [&str; 6] = [
    operand::VERSION,
    operand::SEMVER,
    operand::REGEXP,
    operand::SET_CONTAINS,
    operand::SET_CONTAINS_ALL,
    operand::SET_CONTAINS_ANY,
];

fn constraints(r: &BodyReader) -> Result<Vec<Constraint>, JobspecError> {
    let mut attributes = vec!["attribute", "operator", "value"];
    attributes.extend(CONSTRAINT_SHORTHANDS);
    attributes.extend([operand::DISTINCT_HOSTS, operand::DISTINCT_PROPERTY]);
    let schema = Schema {
        attributes: &attributes,
        blocks: &[],
        ignored: &[],
    };
    let mut out = Vec::new();
    for block in r.blocks("constraint") {
        let (c, _) = r.child(block, 0, "")?;
        c.check(&schema)?;
        let mut constraint = Constraint {
            l_target: c.string("attribute")?.unwrap_or_default(),
            operand: c.string("operator")?.unwrap_or_default(),
            r_target: c.string("value")?.unwrap_or_default(),
        };
        for op in CONSTRAINT_SHORTHANDS {
            if let Some(v) = c.string(op)?.filter(|v| !v.is_empty()) {
                constraint.operand = op.to_string();
                constraint.r_target = v;
            }
        }
        if c.bool(operand::DISTINCT_HOSTS)? == Some(true) {
            constraint.operand = operand::DISTINCT_HOSTS.to_string();
        }
        if let Some(p) = c
            .string(operand::DISTINCT_PROPERTY)?
            .filter(|p| !p.is_empty())
        {
            constraint.operand = operand::DISTINCT_PROPERTY.to_string();
            constraint.l_target = p;
        }
        if constraint.operand.is_empty() {
            constraint.operand = operand::EQ.to_string();
        }
        out.push(constraint);
    }
    Ok(out)
}

fn affinities(r: &BodyReader) -> Result<Vec<Affinity>, JobspecError> {
    const SHORTHANDS: [&str; 6] = [
        operand::VERSION,
        operand::SEMVER,
        operand::REGEXP,
        operand::SET_CONTAINS_ANY,
        operand::SET_CONTAINS_ALL,
        operand::SET_CONTAINS,
    ];
    let mut attributes = vec!["attribute", "operator", "value", "weight"];
    attributes.extend(SHORTHANDS);
    let schema = Schema {
        attributes: &attributes,
        blocks: &[],
        ignored: &[],
    };
    let mut out = Vec::new();
    for block in r.blocks("affinity") {
        let (a, _) = r.child(block, 0, "")?;
        a.check(&schema)?;
        let mut affinity = Affinity {
            l_target: a.string("attribute")?.unwrap_or_default(),
            operand: a.string("operator")?.unwrap_or_default(),
            r_target: a.string("value")?.unwrap_or_default(),
            // Nomad's default weight for affinities and spreads.
            weight: a.int_as("weight")?.unwrap_or(50),
        };
        for op in SHORTHANDS {
            if let Some(v) = a.string(op)?.filter(|v| !v.is_empty()) {
                affinity.operand = op.to_string();
                affinity.r_target = v;
            }
        }
        if affinity.operand.is_empty() {
            affinity.operand = operand::EQ.to_string();
        }
        out.push(affinity);
    }
    Ok(out)
}

fn spreads(r: &BodyReader) -> Result<Vec<Spread>, JobspecError> {
    const SPREAD: Schema = Schema {
        attributes: &["attribute", "weight"],
        blocks: &["target"],
        ignored: &[],
    };
    const TARGET: Schema = Schema {
        attributes: &["percent"],
        blocks: &[],
        ignored: &[],
    };
    let mut out = Vec::new();
    for block in r.blocks("spread") {
        let (s, _) = r.child(block, 0, "")?;
        s.check(&SPREAD)?;
        let mut spread = Spread {
            attribute: s.string("attribute")?.unwrap_or_default(),
            weight: s.int_as("weight")?.unwrap_or(50),
            spread_target: Vec::new(),
        };
        for tb in s.blocks("target") {
            let (t, labels) = s.child(tb, 1, "the attribute value")?;
            t.check(&TARGET)?;
            spread.spread_target.push(SpreadTarget {
                value: labels.into_iter().next().unwrap_or_default(),
                percent: t.int_as("percent")?.unwrap_or_default(),
            });
        }
        out.push(spread);
    }
    Ok(out)
}

fn update(r: &BodyReader, mut u: UpdateStrategy) -> Result<UpdateStrategy, JobspecError> {
    r.check(&Schema {
        attributes: &[
            "stagger",
            "max_parallel",
            "health_check",
            "min_healthy_time",
            "healthy_deadline",
            "progress_deadline",
            "auto_revert",
            "auto_promote",
            "canary",
        ],
        blocks: &[],
        ignored: &[],
    })?;
    set(&mut u.stagger, r.duration("stagger")?);
    set(&mut u.max_parallel, r.int_as("max_parallel")?);
    set(&mut u.health_check, r.string("health_check")?);
    set(&mut u.min_healthy_time, r.duration("min_healthy_time")?);
    set(&mut u.healthy_deadline, r.duration("healthy_deadline")?);
    set(&mut u.progress_deadline, r.duration("progress_deadline")?);
    set(&mut u.auto_revert, r.bool("auto_revert")?);
    set(&mut u.auto_promote, r.bool("auto_promote")?);
    set(&mut u.canary, r.int_as("canary")?);
    Ok(u)
}

fn migrate(r: &BodyReader, mut m: MigrateStrategy) -> Result<MigrateStrategy, JobspecError> {
    r.check(&Schema {
        attributes: &[
            "max_parallel",
            "health_check",
            "min_healthy_time",
            "healthy_deadline",
        ],
        blocks: &[],
        ignored: &[],
    })?;
    set(&mut m.max_parallel, r.int_as("max_parallel")?);
    set(&mut m.health_check, r.string("health_check")?);
    set(&mut m.min_healthy_time, r.duration("min_healthy_time")?);
    set(&mut m.healthy_deadline, r.duration("healthy_deadline")?);
    Ok(m)
}

fn restart(r: &BodyReader, mut p: RestartPolicy) -> Result<RestartPolicy, JobspecError> {
    r.check(&Schema {
        attributes: &["attempts", "interval", "delay", "mode"],
        blocks: &[],
        ignored: &["render_templates"],
    })?;
    set(&mut p.attempts, r.int_as("attempts")?);
    set(&mut p.interval, r.duration("interval")?);
    set(&mut p.delay, r.duration("delay")?);
    set(&mut p.mode, r.string("mode")?);
    Ok(p)
}

fn reschedule(r: &BodyReader, mut p: ReschedulePolicy) -> Result<ReschedulePolicy, JobspecError> {
    r.check(&Schema {
        attributes: &[
            "attempts",
            "interval",
            "delay",
            "delay_function",
            "max_delay",
            "unlimited",
        ],
        blocks: &[],
        ignored: &[],
    })?;
    set(&mut p.attempts, r.int_as("attempts")?);
    set(&mut p.interval, r.duration("interval")?);
    set(&mut p.delay, r.duration("delay")?);
    set(&mut p.delay_function, r.string("delay_function")?);
    set(&mut p.max_delay, r.duration("max_delay")?);
    set(&mut p.unlimited, r.bool("unlimited")?);
    Ok(p)
}

fn ephemeral_disk(r: &BodyReader) -> Result<EphemeralDisk, JobspecError> {
    r.check(&Schema {
        attributes: &["size", "sticky", "migrate"],
        blocks: &[],
        ignored: &[],
    })?;
    let mut d = EphemeralDisk::default();
    set(&mut d.size_mb, r.int("size")?);
    set(&mut d.sticky, r.bool("sticky")?);
    set(&mut d.migrate, r.bool("migrate")?);
    Ok(d)
}

fn periodic(r: &BodyReader) -> Result<PeriodicConfig, JobspecError> {
    r.check(&Schema {
        attributes: &["cron", "crons", "prohibit_overlap", "time_zone", "enabled"],
        blocks: &[],
        ignored: &[],
    })?;
    let mut spec = r.string("cron")?.unwrap_or_default();
    if let Some(crons) = r.strings("crons")? {
        let span = r.body.get_attribute("crons").and_then(|a| a.value.span());
        match crons.as_slice() {
            [one] if spec.is_empty() => spec = one.clone(),
            _ => {
                return Err(r.src.error(
                    span,
                    "herder supports one cron spec per periodic job: use `cron` or a one-element `crons`",
                ))
            }
        }
    }
    Ok(PeriodicConfig {
        enabled: r.bool("enabled")?.unwrap_or(true),
        spec,
        spec_type: "cron".to_string(),
        prohibit_overlap: r.bool("prohibit_overlap")?.unwrap_or_default(),
        // Nomad reads cron specs in UTC unless told otherwise.
        time_zone: r
            .string("time_zone")?
            .filter(|z| !z.is_empty())
            .unwrap_or_else(|| "UTC".into()),
    })
}

fn parameterized(r: &BodyReader) -> Result<ParameterizedJobConfig, JobspecError> {
    r.check(&Schema {
        attributes: &["payload", "meta_required", "meta_optional"],
        blocks: &[],
        ignored: &[],
    })?;
    Ok(ParameterizedJobConfig {
        payload: r.string("payload")?.unwrap_or_else(|| "optional".into()),
        meta_required: r.strings("meta_required")?.unwrap_or_default(),
        meta_optional: r.strings("meta_optional")?.unwrap_or_default(),
    })
}

fn network(r: &BodyReader) -> Result<NetworkResource, JobspecError> {
    const PORT: Schema = Schema {
        attributes: &["static", "to", "host_network"],
        blocks: &[],
        ignored: &[],
    };
    r.check(&Schema {
        attributes: &["mode", "mbits"],
        blocks: &["port", "dns"],
        ignored: &["hostname", "cni"],
    })?;
    let mut n = NetworkResource {
        mode: r.string("mode")?.unwrap_or_default(),
        mbits: r.int("mbits")?.unwrap_or_default(),
        ..NetworkResource::default()
    };
    if let Some(d) = r.single_child("dns")? {
        d.check(&Schema {
            attributes: &["servers", "searches", "options"],
            blocks: &[],
            ignored: &[],
        })?;
        n.dns = Some(json!({
            "Servers": d.strings("servers")?,
            "Searches": d.strings("searches")?,
            "Options": d.strings("options")?,
        }));
    }
    for block in r.blocks("port") {
        let (p, labels) = r.child(block, 1, "the port's label")?;
        p.check(&PORT)?;
        let static_port = p.int("static")?;
        let port = Port {
            label: labels.into_iter().next().unwrap_or_default(),
            value: static_port.unwrap_or_default(),
            to: p.int("to")?.unwrap_or_default(),
            host_network: p.string("host_network")?.unwrap_or_default(),
        };
        if static_port.is_some_and(|s| s != 0) {
            n.reserved_ports.push(port);
        } else {
            n.dynamic_ports.push(port);
        }
    }
    Ok(n)
}

fn resources(r: &BodyReader) -> Result<Resources, JobspecError> {
    r.check(&Schema {
        attributes: &["cpu", "cores", "memory", "memory_max", "disk", "iops"],
        blocks: &["network"],
        ignored: &["device", "numa", "secrets"],
    })?;
    let mut res = Resources {
        cpu: r.int("cpu")?.unwrap_or_default(),
        cores: r.int("cores")?.unwrap_or_default(),
        memory_mb: r.int("memory")?.unwrap_or_default(),
        memory_max_mb: r.int("memory_max")?.unwrap_or_default(),
        disk_mb: r.int("disk")?.unwrap_or_default(),
        iops: r.int("iops")?.unwrap_or_default(),
        networks: Vec::new(),
        devices: Vec::new(),
    };
    for block in r.blocks("network") {
        let (n, _) = r.child(block, 0, "")?;
        res.networks.push(network(&n)?);
    }
    Ok(res)
}

fn logs(r: &BodyReader) -> Result<LogConfig, JobspecError> {
    r.check(&Schema {
        attributes: &["max_files", "max_file_size"],
        blocks: &[],
        ignored: &["disabled", "enabled"],
    })?;
    let mut l = LogConfig::default();
    set(&mut l.max_files, r.int_as("max_files")?);
    set(&mut l.max_file_size_mb, r.int_as("max_file_size")?);
    Ok(l)
}

fn lifecycle(r: &BodyReader) -> Result<TaskLifecycle, JobspecError> {
    r.check(&Schema {
        attributes: &["hook", "sidecar"],
        blocks: &[],
        ignored: &[],
    })?;
    let hook = r.string("hook")?.ok_or_else(|| {
        r.src.error(
            r.at.clone(),
            format!("{} needs a hook (prestart, poststart or poststop)", r.place),
        )
    })?;
    Ok(TaskLifecycle {
        hook,
        sidecar: r.bool("sidecar")?.unwrap_or_default(),
    })
}

/// An `artifact` block; Nomad's defaults for mode and destination are
/// filled by canonicalization.
fn artifact(r: &BodyReader) -> Result<TaskArtifact, JobspecError> {
    r.check(&Schema {
        attributes: &[
            "source",
            "destination",
            "mode",
            "options",
            "headers",
            "chown",
        ],
        blocks: &["options", "headers"],
        ignored: &[],
    })?;
    let source = r.string("source")?.ok_or_else(|| {
        r.src
            .error(r.at.clone(), format!("{} needs a source", r.place))
    })?;
    Ok(TaskArtifact {
        getter_source: source,
        getter_options: r.string_map("options")?,
        getter_headers: r.string_map("headers")?,
        getter_mode: r.string("mode")?.unwrap_or_else(|| "any".into()),
        relative_dest: r.string("destination")?.unwrap_or_default(),
        chown: r.bool("chown")?.unwrap_or_default(),
    })
}

/// A `template` block; Nomad's defaults (change mode, perms, delimiters)
/// are filled by canonicalization, the splay's here as Nomad's parser does.
fn template(r: &BodyReader) -> Result<Template, JobspecError> {
    r.check(&Schema {
        attributes: &[
            "source",
            "destination",
            "data",
            "change_mode",
            "change_signal",
            "splay",
            "perms",
            "left_delimiter",
            "right_delimiter",
            "env",
            "vault_grace",
        ],
        blocks: &[],
        ignored: &[
            "wait",
            "uid",
            "gid",
            "error_on_missing_key",
            "change_script",
        ],
    })?;
    Ok(Template {
        source_path: r.string("source")?.unwrap_or_default(),
        dest_path: r.string("destination")?.unwrap_or_default(),
        embedded_tmpl: r.string("data")?.unwrap_or_default(),
        change_mode: r.string("change_mode")?.unwrap_or_default(),
        change_signal: r.string("change_signal")?.unwrap_or_default(),
        splay: r.duration("splay")?.unwrap_or(Duration::from_secs(5)),
        perms: r.string("perms")?.unwrap_or_default(),
        left_delim: r.string("left_delimiter")?.unwrap_or_default(),
        right_delim: r.string("right_delimiter")?.unwrap_or_default(),
        envvar: r.bool("env")?.unwrap_or_default(),
        vault_grace: r.duration("vault_grace")?.unwrap_or_default(),
    })
}

/// Overwrites a default with the value the user wrote, if any.
fn set<T>(field: &mut T, written: Option<T>) {
    if let Some(v) = written {
        *field = v;
    }
}
