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
use actix_web::http::header::ContentType;
use actix_web::{web, HttpRequest, HttpResponse};
use herder_common::nomad_metrics;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use std::collections::HashMap;
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
        None | Some("" | "json") => {
            let json = to_json(&text, &nomad.dotted, &chrono_like_now())
                .map_err(|e| ApiError::Internal(format!("metrics as JSON: {e}")))?;
            Ok(HttpResponse::Ok()
                .insert_header(ContentType::json())
                .body(json))
        }
        Some(other) => Err(ApiError::BadRequest(format!(
            "Invalid format {other:?}: use prometheus or leave it out for JSON"
        ))),
    }
}

/// A label as the JSON answer holds it (see [`nomad_metrics::parse_line_into`]).
type Label<'a> = nomad_metrics::LabelRef<'a>;

/// A series' labels as Nomad's JSON map: sorted by name, as
/// `serde_json::Map` (a `BTreeMap` here) kept them.
struct LabelMap<'s, 'a>(&'s [Label<'a>]);

impl Serialize for LabelMap<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// One of Nomad's `Gauges`. The fields are in the order of their names,
/// as the answer built from `serde_json::Value` objects had them.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Gauge<'s, 'a> {
    labels: LabelMap<'s, 'a>,
    name: &'a str,
    value: f64,
}

/// One of Nomad's `Counters` or `Samples` (same shape; a counter's figures
/// are all its value). Fields in the order of their names, as for [`Gauge`].
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Aggregate<'s, 'a> {
    count: f64,
    labels: LabelMap<'s, 'a>,
    max: f64,
    mean: f64,
    min: f64,
    name: &'a str,
    rate: f64,
    stddev: u8,
    sum: f64,
}

impl<'s, 'a> Aggregate<'s, 'a> {
    fn counter(name: &'a str, labels: &'s [Label<'a>], value: f64) -> Self {
        Aggregate {
            count: value,
            labels: LabelMap(labels),
            max: value,
            mean: value,
            min: value,
            name,
            rate: value,
            stddev: 0,
            sum: value,
        }
    }
}

/// A summary series (how histograms render) being gathered from its lines
/// into one of Nomad's `Samples`.
struct Summary<'a> {
    name: &'a str,
    labels: Vec<Label<'a>>,
    count: f64,
    sum: f64,
    min: f64,
    max: f64,
}

impl<'a> Summary<'a> {
    fn new(name: &'a str, labels: &[Label<'a>]) -> Self {
        Summary {
            name,
            labels: labels.to_vec(),
            count: 0.0,
            sum: 0.0,
            min: 0.0,
            max: 0.0,
        }
    }

    fn sample(&self) -> Aggregate<'_, 'a> {
        let mean = if self.count > 0.0 {
            self.sum / self.count
        } else {
            0.0
        };
        Aggregate {
            count: self.count,
            labels: LabelMap(&self.labels),
            max: self.max,
            mean,
            min: self.min,
            name: self.name,
            rate: self.sum,
            stddev: 0,
            sum: self.sum,
        }
    }
}

/// A JSON array being written, one element at a time.
#[derive(Default)]
struct JsonList(Vec<u8>);

impl JsonList {
    fn push(&mut self, element: &impl Serialize) -> serde_json::Result<()> {
        self.0.push(if self.0.is_empty() { b'[' } else { b',' });
        serde_json::to_writer(&mut self.0, element)
    }

    /// The array's text (`[]` when nothing was pushed).
    fn finish(mut self) -> Vec<u8> {
        if self.0.is_empty() {
            self.0.push(b'[');
        }
        self.0.push(b']');
        self.0
    }
}

/// The parts of the answer being gathered from the scrape's lines.
#[derive(Default)]
struct Answer<'a> {
    gauges: JsonList,
    counters: JsonList,
    /// Summary series by family, then by labels (the quantile aside).
    summaries: HashMap<&'a str, HashMap<Vec<Label<'a>>, Summary<'a>>>,
}

/// Nomad's JSON shape from the Prometheus text; `names` renames families
/// (Prometheus name → the name the JSON gives, Nomad's dotted one).
///
/// Written straight out rather than built as a `serde_json::Value`: a
/// loaded server's scrape has thousands of lines and monitoring reads it
/// several times a second. The answer is the one the `Value` gave, key
/// order included (`serde_json::Map` sorts its keys).
fn to_json<'a>(
    text: &'a str,
    names: &'a HashMap<String, String>,
    timestamp: &str,
) -> serde_json::Result<Vec<u8>> {
    let mut kinds: HashMap<&str, &str> = HashMap::new();
    let mut answer = Answer::default();
    let mut labels: Vec<Label<'a>> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ') {
                kinds.insert(name, kind);
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((name, value)) = nomad_metrics::parse_line_into(line, &mut labels) else {
            continue;
        };
        answer.add(name, value, &mut labels, &kinds, names)?;
    }
    answer.finish(timestamp)
}

impl<'a> Answer<'a> {
    /// One sample line, by its family's declared kind (a gauge if none).
    fn add(
        &mut self,
        name: &'a str,
        value: f64,
        labels: &mut Vec<Label<'a>>,
        kinds: &HashMap<&str, &str>,
        names: &'a HashMap<String, String>,
    ) -> serde_json::Result<()> {
        let is_summary = |b: &str| kinds.get(b) == Some(&"summary");
        let base = name
            .strip_suffix("_sum")
            .or_else(|| name.strip_suffix("_count"))
            .filter(|b| is_summary(b))
            .unwrap_or(name);
        let shown = names.get(base).map_or(base, String::as_str);
        let quantile = take_quantile(labels);
        as_json_map(labels);
        match kinds.get(base).copied() {
            Some("counter") => self
                .counters
                .push(&Aggregate::counter(shown, labels, value)),
            Some("summary") => {
                let series = self.summaries.entry(base).or_default();
                // Looked up by the borrowed labels: copied once per series,
                // not once per line.
                if !series.contains_key(labels.as_slice()) {
                    series.insert(labels.clone(), Summary::new(shown, labels));
                }
                let Some(s) = series.get_mut(labels.as_slice()) else {
                    return Ok(());
                };
                match quantile {
                    Some(0.0) => s.min = value,
                    Some(1.0) => s.max = value,
                    Some(_) => {}
                    None if name.ends_with("_sum") => s.sum = value,
                    None => s.count = value,
                }
                Ok(())
            }
            _ => self.gauges.push(&Gauge {
                labels: LabelMap(labels),
                name: shown,
                value,
            }),
        }
    }

    /// The answer's text. Samples come by family, then by the text of
    /// their labels' JSON map, as the answer always ordered them.
    fn finish(self, timestamp: &str) -> serde_json::Result<Vec<u8>> {
        let mut samples = Vec::new();
        for (base, series) in &self.summaries {
            for s in series.values() {
                samples.push((*base, serde_json::to_string(&LabelMap(&s.labels))?, s));
            }
        }
        samples.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut list = JsonList::default();
        for (_, _, s) in &samples {
            list.push(&s.sample())?;
        }
        let mut out = b"{\"Counters\":".to_vec();
        out.extend(self.counters.finish());
        out.extend_from_slice(b",\"Gauges\":");
        out.extend(self.gauges.finish());
        out.extend_from_slice(b",\"Points\":[],\"Samples\":");
        out.extend(list.finish());
        out.extend_from_slice(b",\"Timestamp\":");
        serde_json::to_writer(&mut out, timestamp)?;
        out.push(b'}');
        Ok(out)
    }
}

/// Takes the `quantile` label out of `labels`: a summary's line gives it,
/// Nomad's JSON has no such label. The last one counts.
fn take_quantile(labels: &mut Vec<Label<'_>>) -> Option<f64> {
    let mut quantile = None;
    labels.retain(|(k, v)| {
        let is_quantile = *k == "quantile";
        if is_quantile {
            quantile = v.parse::<f64>().ok();
        }
        !is_quantile
    });
    quantile
}

/// Orders `labels` as a JSON map holds them: by name, a name given twice
/// keeping its last value (as `Map::insert` did).
fn as_json_map(labels: &mut Vec<Label<'_>>) {
    // Stable, so a repeated name's values stay in the line's order.
    labels.sort_by_key(|(name, _)| *name);
    labels.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            std::mem::swap(later, kept);
        }
        same
    });
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

    /// A scrape with every kind of line `/v1/metrics` meets: herder's own
    /// families, Nomad-renamed ones, summaries whose series differ only in
    /// labels, label values with escapes, commas and braces, samples of no
    /// declared type, values JSON cannot hold, lines that do not parse.
    const SCRAPE: &str = "\
# HELP herder_http_requests requests
# TYPE herder_http_requests counter
herder_http_requests{method=\"GET\",route=\"/v1/jobs\",status=\"200\"} 5
herder_http_requests{status=\"500\",route=\"/v1/job/{id}\",method=\"PUT\"} 2

# TYPE herder_state_jobs gauge
herder_state_jobs 1000
herder_state_nodes 12.5
# TYPE herder_odd gauge
herder_odd{a=\"q\\\"uo\\\\te\",b=\"x,y=\\\"z\\\"\",c=\"line\\nbreak\",d=\"}{\"} -0.25
herder_odd{z=\"1\",a=\"2\",a=\"3\",quantile=\"0.5\"} 1e21
herder_odd{a=\"é\\tü\"} NaN
herder_odd{a=\"inf\"} +Inf
herder_odd{a=\"ninf\"} -Inf
herder_odd{a=\"unterminated} 1
herder_odd{a=\"x\"} notanumber
herder_odd_nolabels_trailing_space 7\x20\x20

# TYPE herder_http_request_seconds summary
herder_http_request_seconds{method=\"GET\",route=\"/v1/jobs\",quantile=\"0\"} 0.001
herder_http_request_seconds{method=\"GET\",route=\"/v1/jobs\",quantile=\"0.5\"} 0.002
herder_http_request_seconds{method=\"GET\",route=\"/v1/jobs\",quantile=\"1\"} 0.125
herder_http_request_seconds_sum{method=\"GET\",route=\"/v1/jobs\"} 0.75
herder_http_request_seconds_count{method=\"GET\",route=\"/v1/jobs\"} 30
herder_http_request_seconds{method=\"GET\",quantile=\"1\"} 0.5
herder_http_request_seconds_sum{method=\"GET\"} 1
herder_http_request_seconds_count{method=\"GET\"} 0
herder_http_request_seconds{route=\"/v1/jobs\",method=\"GET\",quantile=\"0.99\"} 0.1
herder_http_request_seconds{method=\"G\\\"ET\",quantile=\"0\"} 3
herder_http_request_seconds_count{method=\"G\\\"ET\"} 3
herder_http_request_seconds{method=\"G ET\",quantile=\"0\"} 4
herder_http_request_seconds_sum{method=\"G ET\"} 8
herder_http_request_seconds{method=\"GET\",route=\"/v1/jobs\",zone=\"a\",quantile=\"1\"} 9
herder_http_request_seconds_sum 2
herder_http_request_seconds_count 1
# TYPE herder_plan_apply_seconds summary
herder_plan_apply_seconds{quantile=\"0\"} 0.0005
herder_plan_apply_seconds{quantile=\"1\"} 0.003
herder_plan_apply_seconds_sum 0.01
herder_plan_apply_seconds_count 4
herder_gauge_sum 3

# TYPE nomad_nomad_job_summary_running gauge
nomad_nomad_job_summary_running{host=\"h1\",job=\"we\\\"b\",namespace=\"default\",task_group=\"g\"} 2
nomad_nomad_job_summary_running{host=\"h1\",job=\"a\\\\b,c\",namespace=\"default\",task_group=\"g\"} 0
# TYPE nomad_nomad_rpc_request counter
nomad_nomad_rpc_request{host=\"h1\"} 7
# TYPE nomad_nomad_plan_apply summary
nomad_nomad_plan_apply{host=\"h1\",quantile=\"0\"} 0.5
nomad_nomad_plan_apply{host=\"h1\",quantile=\"1\"} 3
nomad_nomad_plan_apply_sum{host=\"h1\"} 10
nomad_nomad_plan_apply_count{host=\"h1\"} 4
# TYPE nomad_nomad_unnamed gauge
nomad_nomad_unnamed{host=\"h1\"} 1
";

    const SCRAPE_JSON: &str = concat!(
        r#"{"Counters":["#,
        r#"{"Count":5.0,"Labels":{"method":"GET","route":"/v1/jobs","status":"200"},"Max":5.0,"Mean":5.0,"Min":5.0,"Name":"herder_http_requests","Rate":5.0,"Stddev":0,"Sum":5.0},"#,
        r#"{"Count":2.0,"Labels":{"method":"PUT","route":"/v1/job/{id}","status":"500"},"Max":2.0,"Mean":2.0,"Min":2.0,"Name":"herder_http_requests","Rate":2.0,"Stddev":0,"Sum":2.0},"#,
        r#"{"Count":7.0,"Labels":{"host":"h1"},"Max":7.0,"Mean":7.0,"Min":7.0,"Name":"nomad.nomad.rpc.request","Rate":7.0,"Stddev":0,"Sum":7.0}],"#,
        r#""Gauges":["#,
        r#"{"Labels":{},"Name":"herder_state_jobs","Value":1000.0},"#,
        r#"{"Labels":{},"Name":"renamed.before.its.type","Value":12.5},"#,
        r#"{"Labels":{"a":"q\"uo\\te","b":"x,y=\"z\"","c":"line\nbreak","d":"}{"},"Name":"herder_odd","Value":-0.25},"#,
        r#"{"Labels":{"a":"3","z":"1"},"Name":"herder_odd","Value":1e+21},"#,
        r#"{"Labels":{"a":"étü"},"Name":"herder_odd","Value":null},"#,
        r#"{"Labels":{"a":"inf"},"Name":"herder_odd","Value":null},"#,
        r#"{"Labels":{"a":"ninf"},"Name":"herder_odd","Value":null},"#,
        r#"{"Labels":{},"Name":"herder_odd_nolabels_trailing_space","Value":7.0},"#,
        r#"{"Labels":{},"Name":"herder_gauge_sum","Value":3.0},"#,
        r#"{"Labels":{"host":"h1","job":"we\"b","namespace":"default","task_group":"g"},"Name":"nomad.nomad.job_summary.running","Value":2.0},"#,
        r#"{"Labels":{"host":"h1","job":"a\\b,c","namespace":"default","task_group":"g"},"Name":"nomad.nomad.job_summary.running","Value":0.0},"#,
        r#"{"Labels":{"host":"h1"},"Name":"nomad_nomad_unnamed","Value":1.0}],"#,
        r#""Points":[],"#,
        r#""Samples":["#,
        r#"{"Count":0.0,"Labels":{"method":"G ET"},"Max":0.0,"Mean":0.0,"Min":4.0,"Name":"herder_http_request_seconds","Rate":8.0,"Stddev":0,"Sum":8.0},"#,
        r#"{"Count":0.0,"Labels":{"method":"GET","route":"/v1/jobs","zone":"a"},"Max":9.0,"Mean":0.0,"Min":0.0,"Name":"herder_http_request_seconds","Rate":0.0,"Stddev":0,"Sum":0.0},"#,
        r#"{"Count":30.0,"Labels":{"method":"GET","route":"/v1/jobs"},"Max":0.125,"Mean":0.025,"Min":0.001,"Name":"herder_http_request_seconds","Rate":0.75,"Stddev":0,"Sum":0.75},"#,
        r#"{"Count":0.0,"Labels":{"method":"GET"},"Max":0.5,"Mean":0.0,"Min":0.0,"Name":"herder_http_request_seconds","Rate":1.0,"Stddev":0,"Sum":1.0},"#,
        r#"{"Count":3.0,"Labels":{"method":"G\"ET"},"Max":0.0,"Mean":0.0,"Min":3.0,"Name":"herder_http_request_seconds","Rate":0.0,"Stddev":0,"Sum":0.0},"#,
        r#"{"Count":1.0,"Labels":{},"Max":0.0,"Mean":2.0,"Min":0.0,"Name":"herder_http_request_seconds","Rate":2.0,"Stddev":0,"Sum":2.0},"#,
        r#"{"Count":4.0,"Labels":{},"Max":0.003,"Mean":0.0025,"Min":0.0005,"Name":"herder_plan_apply_seconds","Rate":0.01,"Stddev":0,"Sum":0.01},"#,
        r#"{"Count":4.0,"Labels":{"host":"h1"},"Max":3.0,"Mean":2.5,"Min":0.5,"Name":"nomad.nomad.plan.apply","Rate":10.0,"Stddev":0,"Sum":10.0}],"#,
        r#""Timestamp":"TS"}"#,
    );

    fn scrape_names() -> HashMap<String, String> {
        [
            (
                "nomad_nomad_job_summary_running",
                "nomad.nomad.job_summary.running",
            ),
            ("nomad_nomad_rpc_request", "nomad.nomad.rpc.request"),
            ("nomad_nomad_plan_apply", "nomad.nomad.plan.apply"),
            ("herder_state_nodes", "renamed.before.its.type"),
        ]
        .into_iter()
        .map(|(p, d)| (p.to_string(), d.to_string()))
        .collect()
    }

    /// The answer, read back as JSON.
    fn answer(text: &str, names: &HashMap<String, String>) -> serde_json::Value {
        let json = to_json(text, names, "TS").unwrap_or_default();
        serde_json::from_slice(&json).unwrap_or_default()
    }

    #[test]
    fn the_answer_is_the_one_nomads_shape_always_had() {
        let json = to_json(SCRAPE, &scrape_names(), "TS").unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(&json), SCRAPE_JSON);
    }

    #[test]
    fn prometheus_text_becomes_nomads_json_shape() {
        let text = "# TYPE jobs gauge\njobs{ns=\"default\"} 3\n\
                    # TYPE evals_total counter\nevals_total 7\n\
                    # TYPE apply_seconds summary\n\
                    apply_seconds{quantile=\"0\"} 0.5\napply_seconds{quantile=\"1\"} 2\n\
                    apply_seconds_sum 4\napply_seconds_count 4\n";
        let json = answer(text, &HashMap::new());
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
        let json = answer(text, &names);
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
