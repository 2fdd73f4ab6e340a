//! `/v1/metrics`: the process's `metrics` in Nomad's JSON shape, or in
//! Prometheus' text format with `?format=prometheus`.
//!
//! One Prometheus recorder is installed per process (the first agent to
//! start installs it); the JSON answer is read from the same rendering so
//! both formats always agree. herder's own names keep Prometheus' spelling
//! (`herder_plan_queue_depth`); the figures Nomad exports too follow under
//! Nomad's names (see `herder_common::nomad_metrics`), dotted in the JSON
//! (`nomad.nomad.plan.queue_depth`) as Nomad answers them.

use super::errors::ApiError;
use super::query::QueryOptions;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder_common::nomad_metrics;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide recorder once. When the embedding program
/// installed its own recorder first, `/v1/metrics` says so instead.
pub fn install_recorder() {
    RECORDER.get_or_init(|| match PrometheusBuilder::new().install_recorder() {
        Ok(handle) => Some(handle),
        Err(e) => {
            tracing::warn!(error = %e, "metrics recorder not installed; /v1/metrics is unavailable");
            None
        }
    });
}

/// The lines of the server's queue gauges (broker, blocked evaluations,
/// plan queue, workers) as the recorder renders them now; none on an agent
/// without a server or without the recorder.
pub fn rendered_queue_gauges() -> Vec<String> {
    const QUEUES: [&str; 4] = [
        "herder_broker_",
        "herder_blocked_evals_",
        "herder_plan_queue",
        "herder_worker",
    ];
    let Some(handle) = RECORDER.get().and_then(Option::as_ref) else {
        return Vec::new();
    };
    let mut lines: Vec<String> = handle
        .render()
        .lines()
        .filter(|l| QUEUES.iter().any(|q| l.starts_with(q)))
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// Counts and times every request by method, route pattern (not the
/// concrete path, which would make one series per job) and status.
pub fn observe_request<S, B>(
    req: actix_web::dev::ServiceRequest,
    service: &S,
) -> impl std::future::Future<Output = Result<actix_web::dev::ServiceResponse<B>, actix_web::Error>>
where
    S: actix_web::dev::Service<
        actix_web::dev::ServiceRequest,
        Response = actix_web::dev::ServiceResponse<B>,
        Error = actix_web::Error,
    >,
{
    let started = std::time::Instant::now();
    let method = req.method().to_string();
    let response = service.call(req);
    async move {
        let response = response.await?;
        let route = response
            .request()
            .match_pattern()
            .unwrap_or_else(|| "unmatched".to_string());
        let status = response.status().as_u16().to_string();
        metrics::counter!("herder.http.requests", "method" => method.clone(), "route" => route.clone(), "status" => status)
            .increment(1);
        metrics::histogram!("herder.http.request_seconds", "method" => method, "route" => route)
            .record(started.elapsed().as_secs_f64());
        Ok(response)
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/metrics", web::get().to(metrics));
}

/// Gauges of the state's size, refreshed on each read of the metrics.
fn record_state_gauges(info: &AgentInfo) {
    if let Some(server) = &info.server {
        let snap = server.store.snapshot();
        metrics::gauge!("herder.state.jobs").set(snap.jobs().count() as f64);
        metrics::gauge!("herder.state.nodes").set(snap.node_count() as f64);
        metrics::gauge!("herder.state.allocs").set(snap.alloc_count() as f64);
        metrics::gauge!("herder.state.index").set(snap.latest_index() as f64);
    }
    let uptime = info
        .started_at
        .elapsed()
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    metrics::gauge!("herder.agent.uptime_seconds").set(uptime);
    if let Some(bytes) = resident_memory_bytes() {
        metrics::gauge!("herder.process.resident_memory_bytes").set(bytes as f64);
    }
}

/// This process's resident memory (`VmRSS` in `/proc/self/status`); `None`
/// where there is no such file.
fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

async fn metrics(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let handle = RECORDER.get().and_then(Option::as_ref).ok_or_else(|| {
        ApiError::Unavailable("no metrics recorder is installed in this process".into())
    })?;
    record_state_gauges(&info);
    let mut text = handle.render();
    let nomad = nomad_metrics::render(&text, &info.nomad_metrics, nomad_metrics::hostname());
    if !text.is_empty() && !text.ends_with("\n\n") {
        text.push('\n');
    }
    text.push_str(&nomad.text);
    match q.param("format") {
        Some("prometheus") => Ok(HttpResponse::Ok()
            .content_type("text/plain; version=0.0.4; charset=utf-8")
            .body(text)),
        None | Some("" | "json") => Ok(HttpResponse::Ok().json(to_json(&text, &nomad.dotted))),
        Some(other) => Err(ApiError::BadRequest(format!(
            "Invalid format {other:?}: use prometheus or leave it out for JSON"
        ))),
    }
}

/// Summaries (how histograms render) as Nomad's `Samples`.
#[derive(Default)]
struct Summary {
    name: String,
    labels: Map<String, Value>,
    count: f64,
    sum: f64,
    min: f64,
    max: f64,
}

/// Nomad's JSON shape from the Prometheus text; `names` renames families
/// (Prometheus name → the name the JSON gives, Nomad's dotted one).
fn to_json(text: &str, names: &HashMap<String, String>) -> Value {
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    let (mut gauges, mut counters) = (Vec::new(), Vec::new());
    // One per series: by name and labels (the quantile aside).
    let mut summaries: BTreeMap<(String, String), Summary> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ') {
                kinds.insert(name.to_string(), kind.to_string());
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some(sample) = nomad_metrics::parse_line(line) else {
            continue;
        };
        let name = sample.name.as_str();
        let base = name
            .strip_suffix("_sum")
            .or_else(|| name.strip_suffix("_count"))
            .filter(|b| kinds.get(*b).is_some_and(|k| k == "summary"))
            .unwrap_or(name)
            .to_string();
        let shown = names.get(&base).cloned().unwrap_or_else(|| base.clone());
        let mut quantile = None;
        let mut labels = Map::new();
        for (k, v) in sample.labels {
            if k == "quantile" {
                quantile = v.parse::<f64>().ok();
            } else {
                labels.insert(k, json!(v));
            }
        }
        let value = sample.value;
        match kinds.get(&base).map(String::as_str) {
            Some("counter") => counters.push(json!({
                "Name": shown, "Count": value, "Rate": value, "Sum": value, "Min": value,
                "Max": value, "Mean": value, "Stddev": 0, "Labels": labels,
            })),
            Some("summary") => {
                let key = (base, Value::Object(labels.clone()).to_string());
                let s = summaries.entry(key).or_default();
                match quantile {
                    Some(0.0) => s.min = value,
                    Some(1.0) => s.max = value,
                    Some(_) => {}
                    None if name.ends_with("_sum") => s.sum = value,
                    None => s.count = value,
                }
                s.name = shown;
                s.labels = labels;
            }
            _ => gauges.push(json!({"Name": shown, "Value": value, "Labels": labels})),
        }
    }
    let samples: Vec<Value> = summaries
        .into_values()
        .map(|s| {
            let mean = if s.count > 0.0 { s.sum / s.count } else { 0.0 };
            json!({"Name": s.name, "Count": s.count, "Sum": s.sum, "Min": s.min, "Max": s.max,
                   "Mean": mean, "Rate": s.sum, "Stddev": 0, "Labels": s.labels})
        })
        .collect();
    json!({
        "Timestamp": chrono_like_now(),
        "Gauges": gauges,
        "Counters": counters,
        "Samples": samples,
        "Points": [],
    })
}

/// `YYYY-MM-DD HH:MM:SS +0000 UTC` as Nomad's metrics timestamp, from
/// the Unix time (no calendar crate needed for UTC).
fn chrono_like_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} +0000 UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_becomes_nomads_json_shape() {
        let text = "# TYPE jobs gauge\njobs{ns=\"default\"} 3\n\
                    # TYPE evals_total counter\nevals_total 7\n\
                    # TYPE apply_seconds summary\n\
                    apply_seconds{quantile=\"0\"} 0.5\napply_seconds{quantile=\"1\"} 2\n\
                    apply_seconds_sum 4\napply_seconds_count 4\n";
        let json = to_json(text, &HashMap::new());
        assert_eq!(json["Gauges"][0]["Name"], "jobs");
        assert_eq!(json["Gauges"][0]["Value"], 3.0);
        assert_eq!(json["Gauges"][0]["Labels"]["ns"], "default");
        assert_eq!(json["Counters"][0]["Count"], 7.0);
        let s = &json["Samples"][0];
        assert_eq!(
            (s["Name"].as_str(), s["Count"].as_f64()),
            (Some("apply_seconds"), Some(4.0))
        );
        assert_eq!(
            (s["Min"].as_f64(), s["Max"].as_f64(), s["Mean"].as_f64()),
            (Some(0.5), Some(2.0), Some(1.0))
        );
    }

    #[test]
    fn each_summary_series_is_one_sample_and_nomads_names_are_dotted() {
        let text = "# TYPE req_seconds summary\n\
                    req_seconds{route=\"/a\",quantile=\"1\"} 3\n\
                    req_seconds_sum{route=\"/a\"} 3\nreq_seconds_count{route=\"/a\"} 1\n\
                    req_seconds{route=\"/b\",quantile=\"1\"} 5\n\
                    req_seconds_sum{route=\"/b\"} 9\nreq_seconds_count{route=\"/b\"} 2\n\
                    # TYPE nomad_nomad_plan_queue_depth gauge\n\
                    nomad_nomad_plan_queue_depth{host=\"h\"} 0\n";
        let names = HashMap::from([(
            "nomad_nomad_plan_queue_depth".to_string(),
            "nomad.nomad.plan.queue_depth".to_string(),
        )]);
        let json = to_json(text, &names);
        let samples = json["Samples"].as_array().cloned().unwrap_or_default();
        assert_eq!(samples.len(), 2, "{json}");
        let b = samples
            .iter()
            .find(|s| s["Labels"]["route"] == "/b")
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (b["Count"].as_f64(), b["Max"].as_f64()),
            (Some(2.0), Some(5.0))
        );
        assert_eq!(json["Gauges"][0]["Name"], "nomad.nomad.plan.queue_depth");
        assert_eq!(json["Gauges"][0]["Labels"]["host"], "h");
    }
}
