//! How the CLI shows the API's answers: Nomad-style tables and `key = value`
//! blocks, placement-failure explanations, plan diffs, and `-json`.
//!
//! Every renderer returns a `String` and takes "now" as an argument, so the
//! output for a given answer is fixed and testable against the Nomad
//! fixtures.

use super::views::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How many characters of a UUID tables show unless `-verbose`.
pub const SHORT_ID_LEN: usize = 8;

/// The first eight characters of an ID, or all of it with `verbose`.
pub fn short_id(id: &str, verbose: bool) -> String {
    if verbose {
        id.to_string()
    } else {
        id.chars().take(SHORT_ID_LEN).collect()
    }
}

/// Pretty JSON for `-json` and `job inspect`, newline-terminated.
pub fn json(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    text.push('\n');
    text
}

/// Columns padded to their widest cell, two spaces apart (Nomad's
/// `columnize` look). The last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 < row.len() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `Key = value` lines with the `=` signs aligned.
pub fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (key, value) in pairs {
        let pad = width - key.chars().count();
        let _ = writeln!(out, "{key}{} = {value}", " ".repeat(pad));
    }
    out
}

/// Unix nanoseconds as an RFC 3339 UTC time; "<none>" for zero.
pub fn format_time(unix_nanos: i64) -> String {
    if unix_nanos <= 0 {
        return "<none>".to_string();
    }
    chrono::DateTime::from_timestamp_nanos(unix_nanos)
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Unix time in nanoseconds, for "5m ago" columns.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// How long before `now` something happened, Nomad's short form ("4m2s ago").
pub fn time_ago(unix_nanos: i64, now_nanos: i64) -> String {
    if unix_nanos <= 0 {
        return "<none>".to_string();
    }
    let secs = (now_nanos.saturating_sub(unix_nanos) / 1_000_000_000).max(0);
    let (days, hours, mins, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let text = if days > 0 {
        format!("{days}d{hours}h")
    } else if hours > 0 {
        format!("{hours}h{mins}m")
    } else if mins > 0 {
        format!("{mins}m{s}s")
    } else {
        format!("{s}s")
    };
    format!("{text} ago")
}

fn or_none(text: &str) -> String {
    if text.is_empty() {
        "<none>".to_string()
    } else {
        text.to_string()
    }
}

/// `herder job status` without an ID.
pub fn jobs_table(jobs: &[JobStub]) -> String {
    if jobs.is_empty() {
        return "No running jobs\n".to_string();
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.clone(),
                j.job_type.clone(),
                j.priority.to_string(),
                j.status.clone(),
                format_time(j.submit_time),
            ]
        })
        .collect();
    table(&["ID", "Type", "Priority", "Status", "Submit Date"], &rows)
}

/// `herder job status ID`: the job, its group summary, its latest
/// deployment and its allocations.
pub fn job_status(
    job: &JobView,
    summary: &JobSummaryView,
    deployment: Option<&DeploymentView>,
    allocs: &[AllocView],
    now_nanos: i64,
    verbose: bool,
) -> String {
    let mut out = key_values(&[
        ("ID", job.id.clone()),
        ("Name", job.name.clone()),
        ("Submit Date", format_time(job.submit_time)),
        ("Type", job.job_type.clone()),
        ("Priority", job.priority.to_string()),
        ("Datacenters", job.datacenters.join(",")),
        ("Namespace", job.namespace.clone()),
        ("Status", job_status_text(job)),
        ("Periodic", job.periodic.is_some().to_string()),
        (
            "Parameterized",
            (job.parameterized_job.is_some() && !job.dispatched).to_string(),
        ),
    ]);
    out.push_str("\nSummary\n");
    let rows: Vec<Vec<String>> = summary
        .summary
        .iter()
        .map(|(group, s)| {
            [
                s.queued, s.starting, s.running, s.failed, s.complete, s.lost,
            ]
            .iter()
            .map(u64::to_string)
            .fold(vec![group.clone()], |mut row, n| {
                row.push(n);
                row
            })
        })
        .collect();
    out.push_str(&table(
        &[
            "Task Group",
            "Queued",
            "Starting",
            "Running",
            "Failed",
            "Complete",
            "Lost",
        ],
        &rows,
    ));
    if let Some(d) = deployment {
        out.push_str("\nLatest Deployment\n");
        out.push_str(&latest_deployment(d, verbose));
    }
    out.push_str("\nAllocations\n");
    if allocs.is_empty() {
        out.push_str("No allocations placed\n");
    } else {
        out.push_str(&allocs_table(allocs, now_nanos, verbose, true));
    }
    out
}

/// A stopped job reads "dead (stopped)", as Nomad shows it.
fn job_status_text(job: &JobView) -> String {
    if job.stop {
        format!("{} (stopped)", job.status)
    } else {
        job.status.clone()
    }
}

/// Allocation rows as `job status` and `node status ID` show them.
pub fn allocs_table(
    allocs: &[AllocView],
    now_nanos: i64,
    verbose: bool,
    with_node: bool,
) -> String {
    let rows: Vec<Vec<String>> = allocs
        .iter()
        .map(|a| {
            let mut row = vec![short_id(&a.id, verbose)];
            if with_node {
                row.push(short_id(&a.node_id, verbose));
            } else {
                row.push(a.job_id.clone());
            }
            row.extend([
                a.task_group.clone(),
                a.job_version.to_string(),
                a.desired_status.clone(),
                a.client_status.clone(),
                time_ago(a.create_time, now_nanos),
                time_ago(a.modify_time, now_nanos),
            ]);
            row
        })
        .collect();
    let second = if with_node { "Node ID" } else { "Job ID" };
    table(
        &[
            "ID",
            second,
            "Task Group",
            "Version",
            "Desired",
            "Status",
            "Created",
            "Modified",
        ],
        &rows,
    )
}

/// `herder node status`.
pub fn nodes_table(nodes: &[NodeView], verbose: bool) -> String {
    if nodes.is_empty() {
        return "No nodes registered\n".to_string();
    }
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                short_id(&n.id, verbose),
                n.name.clone(),
                n.datacenter.clone(),
                or_none(&n.node_class),
                n.drain.to_string(),
                n.scheduling_eligibility.clone(),
                n.status.clone(),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "Name",
            "DC",
            "Class",
            "Drain",
            "Eligibility",
            "Status",
        ],
        &rows,
    )
}

/// `herder node status ID`: the node and its allocations.
pub fn node_detail(node: &NodeView, allocs: &[AllocView], now_nanos: i64, verbose: bool) -> String {
    let drivers: Vec<&str> = node
        .drivers
        .iter()
        .filter(|(_, d)| d.detected && d.healthy)
        .map(|(name, _)| name.as_str())
        .collect();
    let drain = match &node.drain_strategy {
        Some(strategy) if node.drain => format!("true; {}", drain_deadline_text(strategy)),
        _ => node.drain.to_string(),
    };
    let mut out = key_values(&[
        ("ID", node.id.clone()),
        ("Name", node.name.clone()),
        ("Class", or_none(&node.node_class)),
        ("DC", node.datacenter.clone()),
        ("Drain", drain),
        ("Eligibility", node.scheduling_eligibility.clone()),
        ("Status", node.status.clone()),
        (
            "Address",
            or_none(if node.http_addr.is_empty() {
                &node.address
            } else {
                &node.http_addr
            }),
        ),
        ("Version", or_none(&node.version)),
        ("Drivers", or_none(&drivers.join(","))),
    ]);
    out.push_str("\nAllocations\n");
    if allocs.is_empty() {
        out.push_str("No allocations placed\n");
    } else {
        out.push_str(&allocs_table(allocs, now_nanos, verbose, false));
    }
    out
}

fn drain_deadline_text(strategy: &DrainStrategyView) -> String {
    let text = match strategy.deadline {
        d if d < 0 => "forced".to_string(),
        0 => "no deadline".to_string(),
        d => format!(
            "deadline {}",
            humantime::format_duration(std::time::Duration::from_secs((d / 1_000_000_000) as u64))
        ),
    };
    if strategy.ignore_system_jobs {
        format!("{text}, ignoring system jobs")
    } else {
        text
    }
}

/// `herder eval list`.
pub fn evals_table(evals: &[EvalView], verbose: bool) -> String {
    if evals.is_empty() {
        return "No evals found\n".to_string();
    }
    let rows: Vec<Vec<String>> = evals
        .iter()
        .map(|e| {
            vec![
                short_id(&e.id, verbose),
                e.priority.to_string(),
                e.triggered_by.clone(),
                e.job_id.clone(),
                e.status.clone(),
                (!e.failed_tg_allocs.is_empty()).to_string(),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "Priority",
            "Triggered By",
            "Job ID",
            "Status",
            "Placement Failures",
        ],
        &rows,
    )
}

/// `herder eval status ID`, placement failures included.
pub fn eval_detail(eval: &EvalView, verbose: bool) -> String {
    let mut pairs = vec![
        ("ID", short_id(&eval.id, verbose)),
        ("Create Time", format_time(eval.create_time)),
        ("Modify Time", format_time(eval.modify_time)),
        ("Status", eval.status.clone()),
        ("Status Description", or_none(&eval.status_description)),
        ("Type", eval.eval_type.clone()),
        ("TriggeredBy", eval.triggered_by.clone()),
    ];
    if !eval.job_id.is_empty() {
        pairs.push(("Job ID", eval.job_id.clone()));
    }
    if !eval.node_id.is_empty() {
        pairs.push(("Node ID", short_id(&eval.node_id, verbose)));
    }
    pairs.push(("Priority", eval.priority.to_string()));
    pairs.push((
        "Placement Failures",
        (!eval.failed_tg_allocs.is_empty()).to_string(),
    ));
    let mut out = key_values(&pairs);
    if !eval.failed_tg_allocs.is_empty() {
        out.push_str("\n==> Failed Placements\n");
        out.push_str(&failed_placements(&eval.failed_tg_allocs, ""));
        if !eval.blocked_eval.is_empty() {
            let _ = writeln!(
                out,
                "Evaluation {:?} waiting for additional capacity to place remainder",
                short_id(&eval.blocked_eval, verbose)
            );
        }
    }
    out
}

/// `herder deployment list`: newest first.
pub fn deployments_table(deployments: &[DeploymentView], verbose: bool) -> String {
    if deployments.is_empty() {
        return "No deployments found\n".to_string();
    }
    let mut sorted: Vec<&DeploymentView> = deployments.iter().collect();
    sorted.sort_by_key(|d| std::cmp::Reverse(d.create_index));
    let rows: Vec<Vec<String>> = sorted
        .iter()
        .map(|d| {
            vec![
                short_id(&d.id, verbose),
                d.job_id.clone(),
                d.job_version.to_string(),
                d.status.clone(),
                d.status_description.clone(),
            ]
        })
        .collect();
    table(
        &["ID", "Job ID", "Job Version", "Status", "Description"],
        &rows,
    )
}

/// `herder deployment status ID`: the deployment and its groups, as
/// Nomad's `formatDeployment`.
pub fn deployment_detail(d: &DeploymentView, verbose: bool) -> String {
    deployment_block(
        &[
            ("ID", short_id(&d.id, verbose)),
            ("Job ID", d.job_id.clone()),
            ("Job Version", d.job_version.to_string()),
            ("Status", d.status.clone()),
            ("Description", d.status_description.clone()),
        ],
        d,
    )
}

/// The `Latest Deployment` block of `job status`.
fn latest_deployment(d: &DeploymentView, verbose: bool) -> String {
    deployment_block(
        &[
            ("ID", short_id(&d.id, verbose)),
            ("Status", d.status.clone()),
            ("Description", d.status_description.clone()),
        ],
        d,
    )
}

fn deployment_block(pairs: &[(&str, String)], d: &DeploymentView) -> String {
    let mut out = key_values(pairs);
    if !d.task_groups.is_empty() {
        out.push_str("\nDeployed\n");
        out.push_str(&deployment_groups(d));
    }
    out
}

/// One row per group; the `Auto Revert`, `Promoted`, `Canaries` and
/// `Progress Deadline` columns only when some group uses them (Nomad's
/// `formatDeploymentGroups`).
fn deployment_groups(d: &DeploymentView) -> String {
    let groups = d.task_groups.values();
    let auto_revert = groups.clone().any(|g| g.auto_revert);
    let canaries = groups.clone().any(|g| g.desired_canaries > 0);
    let deadlines = groups.clone().any(|g| g.progress_deadline > 0);
    let mut header = vec!["Task Group"];
    if auto_revert {
        header.push("Auto Revert");
    }
    if canaries {
        header.push("Promoted");
    }
    header.push("Desired");
    if canaries {
        header.push("Canaries");
    }
    header.extend(["Placed", "Healthy", "Unhealthy"]);
    if deadlines {
        header.push("Progress Deadline");
    }
    let rows: Vec<Vec<String>> = d
        .task_groups
        .iter()
        .map(|(name, g)| {
            let mut row = vec![name.clone()];
            if auto_revert {
                row.push(g.auto_revert.to_string());
            }
            if canaries && g.desired_canaries > 0 {
                row.push(g.promoted.to_string());
            } else if canaries {
                row.push("N/A".to_string());
            }
            row.push(g.desired_total.to_string());
            if canaries {
                row.push(g.desired_canaries.to_string());
            }
            row.extend([
                g.placed_allocs.to_string(),
                g.healthy_allocs.to_string(),
                g.unhealthy_allocs.to_string(),
            ]);
            if deadlines {
                row.push(progress_deadline(&g.require_progress_by));
            }
            row
        })
        .collect();
    table(&header, &rows)
}

/// A group's `RequireProgressBy`, "N/A" while unset (Nomad's zero time).
fn progress_deadline(rfc3339: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .ok()
        .and_then(|t| t.timestamp_nanos_opt())
        .filter(|n| *n > 0)
        .map_or_else(|| "N/A".to_string(), format_time)
}

/// One `Task Group "g" (failed to place N allocations):` block per group,
/// each followed by the scheduler's reasons; `indent` prefixes every line.
pub fn failed_placements(failed: &BTreeMap<String, AllocMetricView>, indent: &str) -> String {
    let mut out = String::new();
    for (group, metric) in failed {
        let count = metric.coalesced_failures + 1;
        let plural = if count == 1 { "" } else { "s" };
        let _ = writeln!(
            out,
            "{indent}Task Group {group:?} (failed to place {count} allocation{plural}):"
        );
        for reason in metric_reasons(metric) {
            let _ = writeln!(out, "{indent}  * {reason}");
        }
    }
    out
}

/// The scheduler's explanation of a failed placement, one reason a line.
pub fn metric_reasons(m: &AllocMetricView) -> Vec<String> {
    let mut reasons = Vec::new();
    if m.nodes_evaluated == 0 {
        reasons.push("No nodes were eligible for evaluation".to_string());
    }
    for (dc, available) in &m.nodes_available {
        if *available == 0 {
            reasons.push(format!("No nodes are available in datacenter {dc:?}"));
        }
    }
    for (class, n) in &m.class_filtered {
        reasons.push(format!("Class {class:?}: {n} nodes excluded by filter"));
    }
    for (constraint, n) in &m.constraint_filtered {
        reasons.push(format!(
            "Constraint {constraint:?}: {n} nodes excluded by filter"
        ));
    }
    if m.nodes_exhausted > 0 {
        reasons.push(format!(
            "Resources exhausted on {} nodes",
            m.nodes_exhausted
        ));
    }
    for (class, n) in &m.class_exhausted {
        reasons.push(format!("Class {class:?} exhausted on {n} nodes"));
    }
    for (dimension, n) in &m.dimension_exhausted {
        reasons.push(format!("Dimension {dimension:?} exhausted on {n} nodes"));
    }
    for quota in &m.quota_exhausted {
        reasons.push(format!("Quota limit hit {quota:?}"));
    }
    reasons
}

/// `herder alloc status ID`: the allocation, each task's state and its
/// most recent events (all of them with `verbose`).
pub fn alloc_detail(alloc: &AllocView, now_nanos: i64, verbose: bool) -> String {
    let mut out = key_values(&[
        ("ID", alloc.id.clone()),
        ("Eval ID", short_id(&alloc.eval_id, verbose)),
        ("Name", alloc.name.clone()),
        ("Node ID", short_id(&alloc.node_id, verbose)),
        ("Node Name", alloc.node_name.clone()),
        ("Job ID", alloc.job_id.clone()),
        ("Job Version", alloc.job_version.to_string()),
        ("Client Status", alloc.client_status.clone()),
        ("Client Description", or_none(&alloc.client_description)),
        ("Desired Status", alloc.desired_status.clone()),
        ("Desired Description", or_none(&alloc.desired_description)),
        ("Created", time_ago(alloc.create_time, now_nanos)),
        ("Modified", time_ago(alloc.modify_time, now_nanos)),
    ]);
    for (task, state) in &alloc.task_states {
        let _ = writeln!(out, "\nTask {task:?} is {:?}", state.state);
        if state.restarts > 0 || state.failed {
            let _ = writeln!(
                out,
                "Restarts = {}, Failed = {}",
                state.restarts, state.failed
            );
        }
        out.push_str(&task_events(&state.events, verbose));
    }
    out
}

/// Nomad shows the ten latest events unless asked for all.
const RECENT_EVENTS: usize = 10;

fn task_events(events: &[TaskEventView], verbose: bool) -> String {
    if events.is_empty() {
        return String::new();
    }
    let take = if verbose { events.len() } else { RECENT_EVENTS };
    let rows: Vec<Vec<String>> = events
        .iter()
        .rev()
        .take(take)
        .map(|e| {
            let text = if e.display_message.is_empty() {
                &e.message
            } else {
                &e.display_message
            };
            vec![format_time(e.time), e.event_type.clone(), text.clone()]
        })
        .collect();
    format!(
        "Recent Events:\n{}",
        table(&["Time", "Type", "Description"], &rows)
    )
}

/// Whether a plan would change anything Nomad counts as a change (exit 1).
pub fn plan_has_changes(plan: &PlanResponse) -> bool {
    plan.annotations
        .desired_tg_updates
        .values()
        .any(|u| u.stop + u.place + u.migrate + u.destructive_update + u.canary > 0)
}

/// `herder job plan FILE`: the diff, the scheduler's dry run, and how to
/// submit with `-check-index`.
pub fn plan(plan: &PlanResponse, file: &str, verbose: bool) -> String {
    let mut out = String::new();
    if let Some(diff) = &plan.diff {
        out.push_str(&job_diff(
            diff,
            &plan.annotations.desired_tg_updates,
            verbose,
        ));
        out.push('\n');
    }
    out.push_str("Scheduler dry-run:\n");
    if plan.failed_tg_allocs.is_empty() {
        out.push_str("- All tasks successfully allocated.\n");
    } else {
        out.push_str("- WARNING: Failed to place all allocations.\n");
        out.push_str(&failed_placements(&plan.failed_tg_allocs, "  "));
    }
    if !plan.warnings.is_empty() {
        let _ = writeln!(out, "\nJob Warnings:\n{}", plan.warnings.trim_end());
    }
    let _ = write!(
        out,
        "\nJob Modify Index: {index}\n\
         To submit the job with version verification run:\n\n\
         herder job run -check-index {index} {file}\n\n\
         When running the job with the check-index flag, the job will only be run if the\n\
         job modify index given matches the server-side version. If the index has\n\
         changed, another user has modified the job and the plan's results are\n\
         potentially invalid.\n",
        index = plan.job_modify_index
    );
    out
}

fn diff_marker(diff_type: &str) -> &'static str {
    match diff_type {
        "Added" => "+",
        "Deleted" => "-",
        "Edited" => "+/-",
        _ => "",
    }
}

fn marked(diff_type: &str, text: &str) -> String {
    match diff_marker(diff_type) {
        "" => format!("    {text}"),
        m => format!("{m:>3} {text}"),
    }
}

fn job_diff(diff: &JobDiff, updates: &BTreeMap<String, DesiredUpdates>, verbose: bool) -> String {
    let mut out = format!(
        "{}\n",
        marked(&diff.diff_type, &format!("Job: {:?}", diff.id)).trim_start()
    );
    for field in &diff.fields {
        push_field(&mut out, field, 0, verbose);
    }
    for object in &diff.objects {
        push_object(&mut out, object, 0, verbose);
    }
    for group in &diff.task_groups {
        push_group(&mut out, group, updates.get(&group.name));
        if group.diff_type == "None" && !verbose {
            continue;
        }
        for field in &group.fields {
            push_field(&mut out, field, 2, verbose);
        }
        for object in &group.objects {
            push_object(&mut out, object, 2, verbose);
        }
        for task in &group.tasks {
            push_task(&mut out, task, 2, verbose);
        }
    }
    out
}

fn push_group(out: &mut String, group: &GroupDiff, updates: Option<&DesiredUpdates>) {
    let counts: Vec<String> = match updates {
        Some(u) => [
            (u.place, "create"),
            (u.destructive_update, "create/destroy update"),
            (u.in_place_update, "in-place update"),
            (u.stop, "destroy"),
            (u.migrate, "migrate"),
            (u.canary, "canary"),
            (u.ignore, "ignore"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect(),
        None => group
            .updates
            .iter()
            .map(|(what, n)| format!("{n} {what}"))
            .collect(),
    };
    let suffix = if counts.is_empty() {
        String::new()
    } else {
        format!(" ({})", counts.join(", "))
    };
    let _ = writeln!(
        out,
        "{}{suffix}",
        marked(&group.diff_type, &format!("Task Group: {:?}", group.name))
    );
}

fn push_field(out: &mut String, field: &FieldDiff, depth: usize, verbose: bool) {
    if field.diff_type == "None" && !verbose {
        return;
    }
    let change = match field.diff_type.as_str() {
        "Added" => format!("{:?}", field.new),
        "Deleted" => format!("{:?}", field.old),
        "Edited" => format!("{:?} => {:?}", field.old, field.new),
        _ => format!("{:?}", field.new),
    };
    let notes = if field.annotations.is_empty() {
        String::new()
    } else {
        format!(" ({})", field.annotations.join(", "))
    };
    let _ = writeln!(
        out,
        "{}{}",
        " ".repeat(depth),
        marked(
            &field.diff_type,
            &format!("{}: {change}{notes}", field.name)
        )
    );
}

/// A nested object: `+/- Resources {` ... `}`, fields indented inside.
fn push_object(out: &mut String, object: &ObjectDiff, depth: usize, verbose: bool) {
    if object.diff_type == "None" && !verbose {
        return;
    }
    let pad = " ".repeat(depth);
    let _ = writeln!(
        out,
        "{pad}{}",
        marked(&object.diff_type, &format!("{} {{", object.name))
    );
    for field in &object.fields {
        push_field(out, field, depth + 2, verbose);
    }
    for child in &object.objects {
        push_object(out, child, depth + 2, verbose);
    }
    let _ = writeln!(out, "{pad}    }}");
}

/// A task: `Task: "t" (forces create/destroy update)` and its changes.
fn push_task(out: &mut String, task: &ObjectDiff, depth: usize, verbose: bool) {
    let notes = if task.annotations.is_empty() {
        String::new()
    } else {
        format!(" ({})", task.annotations.join(", "))
    };
    let label = format!("Task: {:?}{notes}", task.name);
    let _ = writeln!(
        out,
        "{}{}",
        " ".repeat(depth),
        marked(&task.diff_type, &label)
    );
    if task.diff_type == "None" && !verbose {
        return;
    }
    for field in &task.fields {
        push_field(out, field, depth + 2, verbose);
    }
    for object in &task.objects {
        push_object(out, object, depth + 2, verbose);
    }
}

/// `herder operator scheduler get-config`.
pub fn scheduler_config(config: &SchedulerConfigView) -> String {
    let p = &config.preemption_config;
    key_values(&[
        ("Scheduler Algorithm", config.scheduler_algorithm.clone()),
        (
            "Memory Oversubscription",
            config.memory_oversubscription_enabled.to_string(),
        ),
        (
            "Reject Job Registration",
            config.reject_job_registration.to_string(),
        ),
        ("Pause Eval Broker", config.pause_eval_broker.to_string()),
        (
            "Preemption System Scheduler",
            p.system_scheduler_enabled.to_string(),
        ),
        (
            "Preemption Service Scheduler",
            p.service_scheduler_enabled.to_string(),
        ),
        (
            "Preemption Batch Scheduler",
            p.batch_scheduler_enabled.to_string(),
        ),
        (
            "Preemption SysBatch Scheduler",
            p.sys_batch_scheduler_enabled.to_string(),
        ),
        ("Modify Index", config.modify_index.to_string()),
    ])
}

/// `herder server members`: Nomad's columns; a member leads when its
/// `Addr:port` tag is its region's leader address.
pub fn members(members: &[Value], leaders: &BTreeMap<String, String>) -> String {
    let rows: Vec<Vec<String>> = members
        .iter()
        .map(|m| {
            let tag = |key: &str| m["Tags"][key].as_str().unwrap_or_default().to_string();
            let addr = m["Addr"].as_str().unwrap_or_default();
            let leader = leaders
                .get(&tag("region"))
                .is_some_and(|l| *l == format!("{addr}:{}", tag("port")));
            vec![
                m["Name"].as_str().unwrap_or_default().to_string(),
                addr.to_string(),
                m["Port"].as_u64().unwrap_or(0).to_string(),
                m["Status"].as_str().unwrap_or_default().to_string(),
                leader.to_string(),
                m["ProtocolCur"].as_u64().unwrap_or(0).to_string(),
                tag("build"),
                tag("dc"),
                tag("region"),
            ]
        })
        .collect();
    table(
        &[
            "Name",
            "Address",
            "Port",
            "Status",
            "Leader",
            "Protocol",
            "Build",
            "Datacenter",
            "Region",
        ],
        &rows,
    )
}

/// `herder server members -detailed`: every tag, `key=value` sorted.
pub fn members_detailed(members: &[Value]) -> String {
    let rows: Vec<Vec<String>> = members
        .iter()
        .map(|m| {
            let tags: Vec<String> = m["Tags"]
                .as_object()
                .map(|t| {
                    t.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect()
                })
                .unwrap_or_default();
            vec![
                m["Name"].as_str().unwrap_or_default().to_string(),
                m["Addr"].as_str().unwrap_or_default().to_string(),
                m["Port"].as_u64().unwrap_or(0).to_string(),
                tags.join(","),
            ]
        })
        .collect();
    table(&["Name", "Address", "Port", "Tags"], &rows)
}

/// `herder operator raft list-peers`: Nomad's columns, sorted by node.
pub fn raft_peers(servers: &[Value]) -> String {
    let mut rows: Vec<Vec<String>> = servers
        .iter()
        .map(|s| {
            let field = |key: &str| s[key].as_str().unwrap_or_default().to_string();
            let state = if s["Leader"].as_bool() == Some(true) {
                "leader"
            } else {
                "follower"
            };
            vec![
                field("Node"),
                field("ID"),
                field("Address"),
                state.to_string(),
                s["Voter"].as_bool().unwrap_or(false).to_string(),
                field("RaftProtocol"),
            ]
        })
        .collect();
    rows.sort_by(|a, b| a[0].cmp(&b[0]));
    table(
        &["Node", "ID", "Address", "State", "Voter", "RaftProtocol"],
        &rows,
    )
}

/// `herder server workers`.
pub fn workers(view: &WorkersView, verbose: bool) -> String {
    let mut out = format!("Server ID = {}\n\n", or_none(&view.server_id));
    if view.schedulers.is_empty() {
        out.push_str("No scheduler workers running\n");
        return out;
    }
    let rows: Vec<Vec<String>> = view
        .schedulers
        .iter()
        .map(|w| {
            vec![
                short_id(&w.id, verbose),
                w.status.clone(),
                w.workload_status.clone(),
                w.enabled_schedulers.join(","),
                w.started.clone(),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "ID",
            "Status",
            "Workload Status",
            "Enabled Schedulers",
            "Started",
        ],
        &rows,
    ));
    out
}

/// One entry of `herder job history`: version, stability, submit date,
/// the diff to the version before it, and with `full` the job's JSON
/// (Nomad's `formatJobVersion`).
pub fn job_version(job: &Value, diff: Option<&JobDiff>, full: bool) -> String {
    let number = |key: &str| job.get(key).and_then(Value::as_i64).unwrap_or(0);
    let mut pairs = vec![
        ("Version", number("Version").to_string()),
        (
            "Stable",
            job.get("Stable")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
        ),
        ("Submit Date", format_time(number("SubmitTime"))),
    ];
    if let Some(diff) = diff {
        pairs.push((
            "Diff",
            format!("\n{}", job_diff(diff, &BTreeMap::new(), false).trim()),
        ));
    }
    if full {
        pairs.push(("Full", format!("JSON Job:\n{}", json(job).trim_end())));
    }
    key_values(&pairs)
}

/// Renders the `{{.Field}}` subset of a Go template against a JSON answer:
/// text, `{{.}}`, and `{{.A.B}}` paths (a list's elements are not
/// addressable by field, as in Go). Any other action (`range`, `if`,
/// pipelines, functions) is refused: herder's CLI does not run Go
/// templates; `-json` with a JSON tool does the rest.
pub fn go_template(template: &str, value: &Value) -> anyhow::Result<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| anyhow::anyhow!("template: unclosed action in {template:?}"))?;
        let action = after[..end].trim().trim_matches('-').trim();
        out.push_str(&template_field(action, value)?);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn template_field(action: &str, value: &Value) -> anyhow::Result<String> {
    let unsupported = || {
        anyhow::anyhow!(
            "template action {{{{{action}}}}} is not supported: herder's CLI renders only \
             {{{{.Field}}}} paths of a Go template; use -json and a JSON tool for more"
        )
    };
    let path = action.strip_prefix('.').ok_or_else(unsupported)?;
    if path
        .chars()
        .any(|c| c.is_whitespace() || c == '|' || c == '(')
    {
        return Err(unsupported());
    }
    let mut current = value;
    for key in path.split('.').filter(|k| !k.is_empty()) {
        current = match current {
            Value::Object(map) => map.get(key).unwrap_or(&Value::Null),
            _ => &Value::Null,
        };
    }
    Ok(match current {
        Value::Null => "<no value>".to_string(),
        Value::String(s) => s.clone(),
        Value::Object(_) | Value::Array(_) => current.to_string(),
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::fake_server::fixture;
    use herder_api_client::decode_lenient;

    fn load<T: serde::de::DeserializeOwned>(name: &str) -> T {
        decode_lenient(&serde_json::from_str::<Value>(&fixture(name)).unwrap()).unwrap()
    }

    /// A fixed "now": one minute after the fixtures' allocations were made.
    const NOW: i64 = 1_795_310_774_132_000_000;

    #[test]
    fn jobs_table_lists_every_job_with_type_priority_and_status() {
        let jobs: Vec<JobStub> = load("jobs-list.json");
        let text = jobs_table(&jobs);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("ID "), "{text}");
        assert!(lines[0].contains("Submit Date"));
        let big = lines.iter().find(|l| l.starts_with("big ")).unwrap();
        assert!(
            big.contains("service") && big.contains("50") && big.contains("pending"),
            "{big}"
        );
        assert!(big.contains("2026-"), "{big}");
    }

    #[test]
    fn job_status_shows_summary_counts_and_short_alloc_ids() {
        let job: JobView = load("job.json");
        let summary: JobSummaryView = load("job-summary.json");
        let allocs: Vec<AllocView> = load("job-allocations-list.json");
        let text = job_status(&job, &summary, None, &allocs, NOW, false);
        assert!(text.contains("ID            = svc"), "{text}");
        assert!(text.contains("Status        = running"), "{text}");
        assert!(text.contains("Periodic      = false"), "{text}");
        let summary_line = text.lines().find(|l| l.starts_with("g ")).unwrap();
        let counts: Vec<&str> = summary_line.split_whitespace().collect();
        assert_eq!(counts, ["g", "0", "0", "2", "0", "0", "0"]);
        let alloc_line = text.lines().find(|l| l.starts_with("9aa2a59e ")).unwrap();
        assert!(alloc_line.contains("4380b079"), "{alloc_line}");
        assert!(
            alloc_line.contains("run") && alloc_line.contains("running"),
            "{alloc_line}"
        );
        assert!(alloc_line.contains("1m0s ago"), "{alloc_line}");
        let stopped = JobView {
            stop: true,
            status: "dead".into(),
            ..job.clone()
        };
        let text = job_status(&stopped, &summary, None, &[], NOW, false);
        assert!(text.contains("Status        = dead (stopped)"), "{text}");
        assert!(text.contains("No allocations placed"), "{text}");
        let verbose = job_status(&job, &summary, None, &allocs, NOW, true);
        assert!(verbose.contains("9aa2a59e-6fa8-af5c-b7f9-17e6ea01f340"));
    }

    #[test]
    fn nodes_table_and_detail_show_drain_eligibility_and_allocs() {
        let nodes: Vec<NodeView> = load("nodes-list.json");
        let text = nodes_table(&nodes, false);
        assert_eq!(
            text.lines()
                .next()
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>(),
            [
                "ID",
                "Name",
                "DC",
                "Class",
                "Drain",
                "Eligibility",
                "Status"
            ]
        );
        let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            row,
            ["4380b079", "vm", "dc1", "<none>", "false", "eligible", "ready"]
        );

        let node: NodeView = load("node.json");
        let allocs: Vec<AllocView> = load("node-allocations.json");
        let detail = node_detail(&node, &allocs, NOW, false);
        assert!(detail.contains("Eligibility = eligible"), "{detail}");
        assert!(
            detail.contains("Drivers     = exec,java,mock_driver,raw_exec"),
            "{detail}"
        );
        assert!(detail
            .lines()
            .any(|l| l.starts_with("514d422c ") && l.contains("sysjob")));
    }

    #[test]
    fn drain_strategy_is_spelled_out() {
        let mut node: NodeView = load("node.json");
        node.drain = true;
        node.drain_strategy = Some(DrainStrategyView {
            deadline: 3_600_000_000_000,
            ignore_system_jobs: true,
        });
        let detail = node_detail(&node, &[], NOW, false);
        assert!(
            detail.contains("true; deadline 1h, ignoring system jobs"),
            "{detail}"
        );
        assert!(detail.contains("No allocations placed"));
    }

    #[test]
    fn eval_list_flags_placement_failures() {
        let evals: Vec<EvalView> = load("evaluations-list.json");
        let text = evals_table(&evals, false);
        assert!(text.lines().next().unwrap().contains("Placement Failures"));
        let failing: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_end().ends_with("true"))
            .map(|l| &l[..8])
            .collect();
        assert_eq!(failing, ["92d8f48f", "acbd1001"], "{text}");
        assert!(text
            .lines()
            .any(|l| l.starts_with("92d8f48f ") && l.contains("queued-allocs")));
    }

    #[test]
    fn blocked_eval_detail_explains_the_failed_placement() {
        let evals: Vec<EvalView> = load("job-evaluations-blocked.json");
        let text = eval_detail(&evals[1], false);
        assert!(text.contains("Placement Failures = true"), "{text}");
        assert!(text.contains("==> Failed Placements"), "{text}");
        assert!(
            text.contains("Task Group \"g\" (failed to place 2 allocations):"),
            "{text}"
        );
        assert!(
            text.contains("  * Resources exhausted on 1 nodes"),
            "{text}"
        );
        assert!(
            text.contains("  * Dimension \"cpu\" exhausted on 1 nodes"),
            "{text}"
        );
        assert!(
            text.contains("Evaluation \"92d8f48f\" waiting for additional capacity"),
            "{text}"
        );
    }

    #[test]
    fn metric_reasons_cover_filters_and_empty_datacenters() {
        let metric = AllocMetricView {
            nodes_evaluated: 0,
            nodes_available: [("dc9".to_string(), 0)].into(),
            constraint_filtered: [("${attr.kernel.name} = windows".to_string(), 3)].into(),
            class_filtered: [("gpu".to_string(), 1)].into(),
            coalesced_failures: 0,
            ..Default::default()
        };
        let reasons = metric_reasons(&metric);
        assert_eq!(
            reasons,
            [
                "No nodes were eligible for evaluation",
                "No nodes are available in datacenter \"dc9\"",
                "Class \"gpu\": 1 nodes excluded by filter",
                "Constraint \"${attr.kernel.name} = windows\": 3 nodes excluded by filter",
            ]
        );
        let block = failed_placements(&[("web".to_string(), metric)].into(), "");
        assert!(block.starts_with("Task Group \"web\" (failed to place 1 allocation):"));
    }

    #[test]
    fn alloc_detail_shows_task_state_and_latest_event_first() {
        let alloc: AllocView = load("allocation.json");
        let text = alloc_detail(&alloc, NOW, false);
        assert!(text.contains("Name                = svc.g[0]"), "{text}");
        assert!(text.contains("Client Status       = running"), "{text}");
        assert!(text.contains("Task \"t\" is \"running\""), "{text}");
        let events: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("Recent Events:"))
            .skip(2)
            .collect();
        assert!(events[0].contains("Started"), "{text}");
        assert!(
            events.last().unwrap().contains("Task received by client"),
            "{text}"
        );
    }

    #[test]
    fn plan_shows_the_diff_annotations_and_check_index() {
        let response: PlanResponse = load("plan-response.json");
        let text = plan(&response, "svc.nomad", false);
        assert!(text.starts_with("+/- Job: \"svc\"\n"), "{text}");
        assert!(
            text.contains("+/- Task Group: \"g\" (2 create, 2 in-place update)"),
            "{text}"
        );
        assert!(
            text.contains("  +/- Count: \"2\" => \"4\" (forces create)"),
            "{text}"
        );
        assert!(text.contains("      Task: \"t\""), "{text}");
        assert!(
            text.contains("- All tasks successfully allocated."),
            "{text}"
        );
        assert!(
            text.contains("herder job run -check-index 10 svc.nomad"),
            "{text}"
        );
        assert!(plan_has_changes(&response));
    }

    #[test]
    fn in_place_updates_alone_are_not_changes_but_failures_are_shown() {
        let mut response: PlanResponse = load("plan-response.json");
        let group = response
            .annotations
            .desired_tg_updates
            .get_mut("g")
            .unwrap();
        group.place = 0;
        assert!(!plan_has_changes(&response));
        let blocked: Vec<EvalView> = load("job-evaluations-blocked.json");
        response.failed_tg_allocs = blocked[1].failed_tg_allocs.clone();
        let text = plan(&response, "f", false);
        assert!(
            text.contains("- WARNING: Failed to place all allocations."),
            "{text}"
        );
        assert!(
            text.contains("  Task Group \"g\" (failed to place 2 allocations):"),
            "{text}"
        );
    }

    #[test]
    fn scheduler_config_reads_nomads_answer() {
        let answer: Value =
            serde_json::from_str(&fixture("operator-scheduler-configuration.json")).unwrap();
        let config: SchedulerConfigView = decode_lenient(&answer["SchedulerConfig"]).unwrap();
        let text = scheduler_config(&config);
        assert!(
            text.contains("Scheduler Algorithm           = binpack"),
            "{text}"
        );
        assert!(
            text.contains("Preemption System Scheduler   = true"),
            "{text}"
        );
        assert!(
            text.contains("Preemption Service Scheduler  = false"),
            "{text}"
        );
        assert!(text.contains("Modify Index                  = 5"), "{text}");
    }

    #[test]
    fn workers_table_reads_the_snake_case_api() {
        let answer = serde_json::json!({
            "server_id": "srv1.global",
            "schedulers": [{
                "id": "0a1b2c3d-0000-0000-0000-000000000000",
                "enabled_schedulers": ["service", "batch", "_core"],
                "started": "2026-11-22T02:00:00Z",
                "status": "Started",
                "workload_status": "WaitingToDequeue"
            }]
        });
        let view: WorkersView = decode_lenient(&answer).unwrap();
        let text = workers(&view, false);
        assert!(text.starts_with("Server ID = srv1.global\n"), "{text}");
        let row: Vec<&str> = text.lines().nth(3).unwrap().split_whitespace().collect();
        assert_eq!(
            row,
            [
                "0a1b2c3d",
                "Started",
                "WaitingToDequeue",
                "service,batch,_core",
                "2026-11-22T02:00:00Z"
            ]
        );
    }

    #[test]
    fn deployment_groups_show_only_the_columns_some_group_uses() {
        let plain: DeploymentView = serde_json::from_value(serde_json::json!({
            "ID": "0b23b149-971d-1a5a-2f6b-b9d4b5c7c2f2", "JobID": "web", "JobVersion": 0,
            "Status": "successful", "StatusDescription": "Deployment completed successfully",
            "TaskGroups": {
                "web": {"DesiredTotal": 2, "PlacedAllocs": 2, "HealthyAllocs": 2},
                "api": {"DesiredTotal": 1, "PlacedAllocs": 1, "UnhealthyAllocs": 1}
            }
        }))
        .unwrap();
        assert_eq!(
            deployment_detail(&plain, false),
            "ID          = 0b23b149\n\
             Job ID      = web\n\
             Job Version = 0\n\
             Status      = successful\n\
             Description = Deployment completed successfully\n\
             \n\
             Deployed\n\
             Task Group  Desired  Placed  Healthy  Unhealthy\n\
             api         1        1       0        1\n\
             web         2        2       2        0\n"
        );
        let mut canaries = plain.clone();
        if let Some(g) = canaries.task_groups.get_mut("web") {
            g.desired_canaries = 1;
            g.progress_deadline = 600_000_000_000;
        }
        let text = deployment_detail(&canaries, false);
        assert!(text.contains("Task Group  Promoted  Desired  Canaries  Placed  Healthy  Unhealthy  Progress Deadline\n"), "{text}");
        assert!(
            text.contains(
                "api         N/A       1        0         1       0        1          N/A\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn tables_align_columns_and_times_read_naturally() {
        let text = table(&["A", "Long"], &[vec!["wide-cell".into(), "x".into()]]);
        assert_eq!(text, "A          Long\nwide-cell  x\n");
        assert_eq!(time_ago(NOW - 3_725_000_000_000, NOW), "1h2m ago");
        assert_eq!(time_ago(0, NOW), "<none>");
        assert_eq!(
            format_time(1_795_310_714_000_000_000),
            "2026-11-22T01:25:14Z"
        );
    }
}
