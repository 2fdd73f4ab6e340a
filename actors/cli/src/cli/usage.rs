//! The measured-usage parts of `alloc status -stats` and `node status
//! -stats`: what the client of the allocation (or the node) reports, read
//! through the agent the CLI talks to, which routes the request there.

use super::stats_output::{host_stats, task_usage};
use herder_api_client::{path_segment, ApiClient};
use serde_json::Value;
use std::io::Write;

/// What a task was given: (CPU MHz, memory MB).
fn task_resources(alloc: &Value, task: &str) -> (i64, i64) {
    let allocated = &alloc["AllocatedResources"]["Tasks"][task];
    let cpu = allocated["Cpu"]["CpuShares"].as_i64();
    let mem = allocated["Memory"]["MemoryMB"].as_i64();
    let group = alloc["TaskGroup"].as_str().unwrap_or_default();
    let spec = alloc["Job"]["TaskGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["Name"] == group)
        .flat_map(|g| g["Tasks"].as_array().into_iter().flatten())
        .find(|t| t["Name"] == task)
        .map(|t| t["Resources"].clone())
        .unwrap_or_default();
    (
        cpu.or_else(|| spec["CPU"].as_i64()).unwrap_or(0),
        mem.or_else(|| spec["MemoryMB"].as_i64()).unwrap_or(0),
    )
}

/// Each task's usage, after `alloc status`'s own lines.
pub fn write_task_usage(
    client: &ApiClient,
    alloc: &Value,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let id = alloc["ID"].as_str().unwrap_or_default();
    let stats = match client.get(
        &format!("/v1/client/allocation/{}/stats", path_segment(id)),
        &[],
    ) {
        Ok(answer) => answer.body,
        Err(e) => {
            writeln!(out, "\nCouldn't retrieve stats: {e}")?;
            return Ok(());
        }
    };
    let Some(tasks) = stats["Tasks"].as_object() else {
        return Ok(());
    };
    for (task, usage) in tasks {
        let (cpu, mem) = task_resources(alloc, task);
        writeln!(out, "\nTask {task:?} resource usage")?;
        write!(out, "{}", task_usage(usage, cpu, mem))?;
    }
    Ok(())
}

/// The host's figures, after `node status`'s own lines.
pub fn write_host_usage(
    client: &ApiClient,
    node: &Value,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let id = node["ID"].as_str().unwrap_or_default();
    match client.get("/v1/client/stats", &[("node_id", id.to_string())]) {
        Ok(answer) => {
            let cpu = node["NodeResources"]["Cpu"]["CpuShares"]
                .as_i64()
                .unwrap_or(0);
            write!(out, "{}", host_stats(&answer.body, cpu))?;
        }
        Err(e) => writeln!(out, "\nerror fetching node stats: {e}")?,
    }
    Ok(())
}
