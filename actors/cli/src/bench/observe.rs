//! What the load generator reads back from the server: the metrics
//! endpoint (allocation count, plan and worker figures), nodes,
//! evaluations and allocations, and the summaries it prints.

use herder_api_client::{ApiClient, ApiError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

use super::workload::{TASK_CPU_MHZ, TASK_MEMORY_MB};

/// One read of `GET /v1/metrics`.
pub struct MetricsView {
    body: Value,
}

impl MetricsView {
    pub fn read(client: &ApiClient) -> Result<MetricsView, ApiError> {
        Ok(MetricsView {
            body: client.get("/v1/metrics", &[])?.body,
        })
    }

    /// A gauge's value, summed over its labels (0 when absent).
    pub fn gauge(&self, name: &str) -> f64 {
        self.entries("Gauges", name)
            .filter_map(|g| g.get("Value").and_then(Value::as_f64))
            .sum()
    }

    /// A histogram's (sum, count, max) over its labels.
    pub fn sample(&self, name: &str) -> (f64, f64, f64) {
        let field = |s: &Value, f: &str| s.get(f).and_then(Value::as_f64).unwrap_or(0.0);
        self.entries("Samples", name)
            .fold((0.0, 0.0, 0.0), |(sum, count, max), s| {
                (
                    sum + field(s, "Sum"),
                    count + field(s, "Count"),
                    f64::max(max, field(s, "Max")),
                )
            })
    }

    fn entries<'a>(&'a self, kind: &str, name: &'a str) -> impl Iterator<Item = &'a Value> {
        self.body
            .get(kind)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(move |e| e.get("Name").and_then(Value::as_str) == Some(name))
    }
}

/// `GET path`, decoded.
fn get_json<T: serde::de::DeserializeOwned>(client: &ApiClient, path: &str) -> Result<T, ApiError> {
    client
        .get(path, &[])?
        .into_decoded()
        .map_err(|e| ApiError::Decode {
            method: "GET".into(),
            path: path.into(),
            reason: e.to_string(),
        })
}

/// p50 / p99 / max of a set of values.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(values: &mut [f64]) -> Percentiles {
        if values.is_empty() {
            return Percentiles::default();
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        Percentiles {
            count: values.len(),
            p50: at(0.5),
            p99: at(0.99),
            max: values[values.len() - 1],
        }
    }
}

/// A 20-character progress bar.
pub fn bar(done: u64, total: u64) -> String {
    let filled = (done.min(total) * 20).checked_div(total).unwrap_or(20) as usize;
    format!("[{}{}]", "#".repeat(filled), ".".repeat(20 - filled))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct NodeStub {
    status: String,
}

/// How many nodes the server holds ready.
pub fn ready_nodes(client: &ApiClient) -> Result<usize, ApiError> {
    let nodes: Vec<NodeStub> = get_json(client, "/v1/nodes")?;
    Ok(nodes.iter().filter(|n| n.status == "ready").count())
}

/// How many nodes the server holds down.
pub fn down_nodes(client: &ApiClient) -> Result<usize, ApiError> {
    let nodes: Vec<NodeStub> = get_json(client, "/v1/nodes")?;
    Ok(nodes.iter().filter(|n| n.status == "down").count())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct GroupSummary {
    starting: u64,
    running: u64,
    lost: u64,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase", default)]
struct JobSummaryView {
    summary: HashMap<String, GroupSummary>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct JobStub {
    #[serde(default)]
    job_summary: Option<JobSummaryView>,
}

fn group_summaries(client: &ApiClient) -> Result<Vec<GroupSummary>, ApiError> {
    let jobs: Vec<JobStub> = get_json(client, "/v1/jobs")?;
    Ok(jobs
        .into_iter()
        .filter_map(|j| j.job_summary)
        .flat_map(|s| s.summary.into_values())
        .collect())
}

/// Allocations starting or running, over every job's summary.
pub fn live_allocs(client: &ApiClient) -> Result<u64, ApiError> {
    Ok(group_summaries(client)?
        .iter()
        .map(|g| g.starting + g.running)
        .sum())
}

/// Allocations marked lost, over every job's summary.
pub fn lost_allocs(client: &ApiClient) -> Result<u64, ApiError> {
    Ok(group_summaries(client)?.iter().map(|g| g.lost).sum())
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EvalView {
    #[serde(rename = "JobID", default)]
    pub job_id: String,
    pub status: String,
    pub triggered_by: String,
    #[serde(default)]
    pub create_time: i64,
    #[serde(default)]
    pub modify_time: i64,
}

pub fn evaluations(client: &ApiClient) -> Result<Vec<EvalView>, ApiError> {
    get_json(client, "/v1/evaluations")
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AllocStub {
    #[serde(rename = "NodeID")]
    node_id: String,
    desired_status: String,
    client_status: String,
}

/// Nodes whose live allocations (every benchmark task asks the same)
/// hold more CPU or memory than the node has.
pub fn overcommitted_nodes(
    client: &ApiClient,
    node_cpu_mhz: i64,
    node_memory_mb: i64,
) -> Result<usize, ApiError> {
    let allocs: Vec<AllocStub> = get_json(client, "/v1/allocations")?;
    let mut live: HashMap<&str, i64> = HashMap::new();
    for a in &allocs {
        let terminal = matches!(a.client_status.as_str(), "complete" | "failed" | "lost");
        if a.desired_status == "run" && !terminal {
            *live.entry(a.node_id.as_str()).or_default() += 1;
        }
    }
    Ok(live
        .values()
        .filter(|n| **n * TASK_CPU_MHZ > node_cpu_mhz || **n * TASK_MEMORY_MB > node_memory_mb)
        .count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_bar() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&mut v);
        assert_eq!((p.count, p.p50, p.p99, p.max), (100, 51.0, 99.0, 100.0));
        assert_eq!(Percentiles::of(&mut []).count, 0);
        assert_eq!(bar(5, 10), "[##########..........]");
        assert_eq!(bar(0, 0), "[####################]");
    }
}
