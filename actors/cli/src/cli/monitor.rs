//! Following an evaluation to its end, as `nomad job run` does: status
//! changes, allocations as they are created, and placement failures.
//!
//! It waits with blocking queries (`?index=&wait=`) on the evaluation, so
//! the agent wakes it on change rather than it polling; an overall deadline
//! bounds the whole wait.

use super::output::{failed_placements, short_id};
use super::views::{AllocView, EvalView};
use anyhow::{bail, Context};
use herder_api_client::{decode_lenient, path_segment, ApiClient};
use std::collections::HashSet;
use std::io::Write;
use std::time::{Duration, Instant};

/// Exit status when the evaluation could not place everything (Nomad's).
pub const EXIT_PLACEMENT_FAILED: u8 = 2;

/// How long to wait.
#[derive(Clone, Debug)]
pub struct MonitorOptions {
    /// One blocking query's `wait`.
    pub wait: Duration,
    /// Give up (exit 1) after this long without a terminal evaluation.
    pub overall: Duration,
    /// Pause between reads when the agent does not block (no index).
    pub poll: Duration,
    pub verbose: bool,
}

impl Default for MonitorOptions {
    fn default() -> Self {
        MonitorOptions {
            wait: Duration::from_secs(10),
            overall: Duration::from_secs(300),
            poll: Duration::from_millis(250),
            verbose: false,
        }
    }
}

/// Follows `eval_id` (and any `NextEval` it hands over to) until it is
/// terminal. Returns 0 when everything was placed, 2 when some allocations
/// could not be, and an error on timeout or a failed request.
pub fn monitor(
    client: &ApiClient,
    eval_id: &str,
    options: &MonitorOptions,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let deadline = Instant::now() + options.overall;
    let short = |id: &str| short_id(id, options.verbose);
    writeln!(out, "==> Monitoring evaluation {:?}", short(eval_id))?;
    let mut current = eval_id.to_string();
    let mut seen_allocs = HashSet::new();
    loop {
        let eval = follow_one(client, &current, options, deadline, &mut seen_allocs, out)?;
        if eval.status == "complete" && !eval.next_eval.is_empty() {
            writeln!(
                out,
                "==> Monitoring next evaluation {:?}",
                short(&eval.next_eval)
            )?;
            current = eval.next_eval;
            continue;
        }
        return finish(&eval, options.verbose, out);
    }
}

/// Waits for one evaluation to become terminal, printing what changes.
fn follow_one(
    client: &ApiClient,
    eval_id: &str,
    options: &MonitorOptions,
    deadline: Instant,
    seen_allocs: &mut HashSet<String>,
    out: &mut dyn Write,
) -> anyhow::Result<EvalView> {
    let path = format!("/v1/evaluation/{}", path_segment(eval_id));
    let short = |id: &str| short_id(id, options.verbose);
    // Evaluations are created pending; the first read shows where it went.
    let mut last_status = "pending".to_string();
    let mut announced = false;
    let mut index = 0;
    loop {
        let answer = if index == 0 {
            client.get(&path, &[])?
        } else {
            let left = deadline.saturating_duration_since(Instant::now());
            client.get_blocking(
                &path,
                index,
                options.wait.min(left).max(Duration::from_millis(1)),
            )?
        };
        let eval: EvalView = answer.decode().context("reading the evaluation")?;
        if !announced {
            announced = true;
            if !eval.job_id.is_empty() {
                writeln!(out, "    Evaluation triggered by job {:?}", eval.job_id)?;
            } else if !eval.node_id.is_empty() {
                writeln!(
                    out,
                    "    Evaluation triggered by node {:?}",
                    short(&eval.node_id)
                )?;
            }
            if !eval.deployment_id.is_empty() {
                writeln!(
                    out,
                    "    Evaluation within deployment: {:?}",
                    short(&eval.deployment_id)
                )?;
            }
        }
        report_allocations(client, &eval, seen_allocs, options.verbose, out)?;
        if eval.status != last_status {
            writeln!(
                out,
                "    Evaluation status changed: {last_status:?} -> {:?}",
                eval.status
            )?;
            last_status = eval.status.clone();
        }
        if eval.is_terminal() {
            return Ok(eval);
        }
        if Instant::now() >= deadline {
            bail!(
                "gave up after {} waiting for evaluation {:?} (still {:?}); \
                 check it later with `herder eval status {}`",
                humantime::format_duration(options.overall),
                short(&eval.id),
                eval.status,
                eval.id
            );
        }
        if answer.index <= index {
            // An agent without blocking queries answers at once; don't spin.
            std::thread::sleep(options.poll);
        }
        index = index.max(answer.index);
    }
}

/// Prints each allocation of the evaluation the first time it shows up.
fn report_allocations(
    client: &ApiClient,
    eval: &EvalView,
    seen: &mut HashSet<String>,
    verbose: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let path = format!("/v1/evaluation/{}/allocations", path_segment(&eval.id));
    let answer = client.get(&path, &[])?;
    let allocs: Vec<AllocView> = decode_lenient(&answer.body).context("reading allocations")?;
    for alloc in allocs {
        if !seen.insert(alloc.id.clone()) {
            continue;
        }
        let verb = if alloc.create_index >= eval.create_index {
            "created"
        } else {
            "modified"
        };
        writeln!(
            out,
            "    Allocation {:?} {verb}: node {:?}, group {:?}",
            short_id(&alloc.id, verbose),
            short_id(&alloc.node_id, verbose),
            alloc.task_group
        )?;
    }
    Ok(())
}

fn finish(eval: &EvalView, verbose: bool, out: &mut dyn Write) -> anyhow::Result<u8> {
    let short = short_id(&eval.id, verbose);
    if eval.failed_tg_allocs.is_empty() && eval.status == "complete" {
        writeln!(
            out,
            "==> Evaluation {short:?} finished with status {:?}",
            eval.status
        )?;
        return Ok(0);
    }
    if eval.failed_tg_allocs.is_empty() {
        writeln!(
            out,
            "==> Evaluation {short:?} finished with status {:?}",
            eval.status
        )?;
        if !eval.status_description.is_empty() {
            writeln!(out, "    {}", eval.status_description)?;
        }
        return Ok(EXIT_PLACEMENT_FAILED);
    }
    writeln!(
        out,
        "==> Evaluation {short:?} finished with status {:?} but failed to place all allocations:",
        eval.status
    )?;
    write!(out, "{}", failed_placements(&eval.failed_tg_allocs, "    "))?;
    if !eval.blocked_eval.is_empty() {
        writeln!(
            out,
            "    Evaluation {:?} waiting for additional capacity to place remainder",
            short_id(&eval.blocked_eval, verbose)
        )?;
    }
    Ok(EXIT_PLACEMENT_FAILED)
}
