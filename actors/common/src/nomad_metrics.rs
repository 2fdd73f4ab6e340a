//! Nomad's metric names: every figure herder has in common with Nomad, also
//! exported under the name (and labels, and type) Nomad 1.1 exports it
//! with, so dashboards and alerts built for Nomad work against herder.
//! `docs/METRICS.md` is the table.
//!
//! The figures come from two places, neither in a hot path:
//!
//! - **Aliases.** A figure herder already records (`herder_plan_queue_depth`,
//!   `herder_worker_dequeue_eval_seconds`, ...) is copied under Nomad's name
//!   (`nomad_nomad_plan_queue_depth`, `nomad_nomad_worker_dequeue_eval`) when
//!   `/v1/metrics` is read, from the same rendering, so nothing is measured
//!   twice. Timers become milliseconds, as go-metrics records them; a label
//!   Nomad folds into the name (`invoke_scheduler.<type>`) is folded.
//! - **Published sets.** Figures only Nomad's names carry (job summaries and
//!   job statuses on the server; allocation counts, allocated and free
//!   resources, task transitions on a client) are computed by the periodic
//!   actors at most once a second and handed to the agent's [`Board`]. Each
//!   publisher replaces its whole set, so a job or an allocation that is
//!   gone leaves no series behind (Nomad's Prometheus sink expires them).
//!
//! Every Nomad-named series carries Nomad's `host` label (go-metrics adds it
//! to every metric when the hostname is a label, Nomad's default). In the
//! JSON format the names are Nomad's dotted ones (`nomad.nomad.broker.total_ready`),
//! as Nomad's `/v1/metrics` answers them.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock, RwLock};

/// Gauge or counter, as Nomad declares the figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    fn prometheus(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// Nomad's labels of a sample, without `host` (added when rendered);
/// shared by the samples of one subject (a task group's six summary
/// gauges carry the same labels).
pub type Labels = Arc<[(&'static str, String)]>;

/// One labelled value of a published family.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: Labels,
    pub value: f64,
}

/// A published metric: Nomad's dotted name and its samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub samples: Vec<Sample>,
}

impl Family {
    pub fn new(name: &'static str, kind: Kind) -> Family {
        Family {
            name,
            kind,
            samples: Vec::new(),
        }
    }

    pub fn push(&mut self, labels: impl Into<Labels>, value: f64) {
        self.samples.push(Sample {
            labels: labels.into(),
            value,
        });
    }
}

/// Who published a set: each replaces only its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    Server,
    Client,
}

/// The agent's published sets, read by `/v1/metrics`. Cheap to clone (a
/// handle); one per agent, so two agents in one process keep theirs apart.
#[derive(Clone, Default)]
pub struct Board {
    sections: Arc<RwLock<BTreeMap<Section, Arc<Vec<Family>>>>>,
}

impl Board {
    pub fn new() -> Board {
        Board::default()
    }

    /// Replaces `section`'s set whole.
    pub fn publish(&self, section: Section, families: Vec<Family>) {
        let mut sections = self.sections.write().unwrap_or_else(|e| e.into_inner());
        sections.insert(section, Arc::new(families));
    }

    /// Drops `section`'s set (its publisher stopped).
    pub fn clear(&self, section: Section) {
        let mut sections = self.sections.write().unwrap_or_else(|e| e.into_inner());
        sections.remove(&section);
    }

    fn snapshot(&self) -> Vec<Arc<Vec<Family>>> {
        let sections = self.sections.read().unwrap_or_else(|e| e.into_inner());
        sections.values().cloned().collect()
    }
}

/// Nomad's `host` label: this machine's hostname, as go-metrics reads it.
pub fn hostname() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_string())
    })
}

/// The Prometheus spelling of a dotted Nomad name, as go-metrics' sink
/// flattens it (`nomad.nomad.broker.total_ready` →
/// `nomad_nomad_broker_total_ready`); any other character a Prometheus
/// name may not hold becomes `_` too.
pub fn prometheus_name(dotted: &str) -> String {
    dotted
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// How herder's figure becomes Nomad's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AliasKind {
    /// A gauge, value as is.
    Gauge,
    /// A counter; herder's labelled series add up into Nomad's one.
    Counter,
    /// herder's summary in seconds → Nomad's timer summary in milliseconds.
    Timer,
}

/// One herder figure exported under Nomad's name.
struct Alias {
    /// The name herder renders (Prometheus spelling).
    herder: &'static str,
    /// Nomad's dotted name; `{}` stands for the value of `label_in_name`.
    nomad: &'static str,
    kind: AliasKind,
    /// herder's label that Nomad folds into the name.
    label_in_name: Option<&'static str>,
    /// Only herder's series whose label passes the test count.
    only: Option<LabelTest>,
}

/// A label's name and a test of its value.
type LabelTest = (&'static str, fn(&str) -> bool);

const fn alias(herder: &'static str, nomad: &'static str, kind: AliasKind) -> Alias {
    Alias {
        herder,
        nomad,
        kind,
        label_in_name: None,
        only: None,
    }
}

fn server_error(status: &str) -> bool {
    status.starts_with('5')
}

/// Every figure herder records that Nomad exports too (docs/METRICS.md).
const ALIASES: &[Alias] = &[
    alias(
        "herder_broker_total_ready",
        "nomad.nomad.broker.total_ready",
        AliasKind::Gauge,
    ),
    alias(
        "herder_broker_total_unacked",
        "nomad.nomad.broker.total_unacked",
        AliasKind::Gauge,
    ),
    alias(
        "herder_broker_total_pending",
        "nomad.nomad.broker.total_blocked",
        AliasKind::Gauge,
    ),
    alias(
        "herder_broker_total_delayed",
        "nomad.nomad.broker.total_waiting",
        AliasKind::Gauge,
    ),
    Alias {
        label_in_name: Some("scheduler"),
        ..alias(
            "herder_broker_ready",
            "nomad.nomad.broker.{}.ready",
            AliasKind::Gauge,
        )
    },
    Alias {
        label_in_name: Some("scheduler"),
        ..alias(
            "herder_broker_unacked",
            "nomad.nomad.broker.{}.unacked",
            AliasKind::Gauge,
        )
    },
    alias(
        "herder_blocked_evals_total_blocked",
        "nomad.nomad.blocked_evals.total_blocked",
        AliasKind::Gauge,
    ),
    alias(
        "herder_blocked_evals_total_escaped",
        "nomad.nomad.blocked_evals.total_escaped",
        AliasKind::Gauge,
    ),
    alias(
        "herder_plan_queue_depth",
        "nomad.nomad.plan.queue_depth",
        AliasKind::Gauge,
    ),
    alias(
        "herder_plan_apply_seconds",
        "nomad.nomad.plan.apply",
        AliasKind::Timer,
    ),
    alias(
        "herder_plan_wait_seconds",
        "nomad.nomad.plan.submit",
        AliasKind::Timer,
    ),
    alias(
        "herder_worker_dequeue_eval_seconds",
        "nomad.nomad.worker.dequeue_eval",
        AliasKind::Timer,
    ),
    alias(
        "herder_worker_wait_for_index_seconds",
        "nomad.nomad.worker.wait_for_index",
        AliasKind::Timer,
    ),
    Alias {
        label_in_name: Some("scheduler"),
        ..alias(
            "herder_worker_invoke_scheduler_seconds",
            "nomad.nomad.worker.invoke_scheduler.{}",
            AliasKind::Timer,
        )
    },
    alias(
        "herder_worker_submit_plan_seconds",
        "nomad.nomad.worker.submit_plan",
        AliasKind::Timer,
    ),
    alias(
        "herder_worker_update_eval_seconds",
        "nomad.nomad.worker.update_eval",
        AliasKind::Timer,
    ),
    alias(
        "herder_worker_create_eval_seconds",
        "nomad.nomad.worker.create_eval",
        AliasKind::Timer,
    ),
    alias(
        "herder_worker_reblock_eval_seconds",
        "nomad.nomad.worker.reblock_eval",
        AliasKind::Timer,
    ),
    alias(
        "herder_worker_send_ack_seconds",
        "nomad.nomad.worker.send_ack",
        AliasKind::Timer,
    ),
    alias(
        "herder_nodes_heartbeating",
        "nomad.nomad.heartbeat.active",
        AliasKind::Gauge,
    ),
    alias(
        "herder_state_index",
        "nomad.state.snapshotIndex",
        AliasKind::Gauge,
    ),
    alias(
        "herder_http_requests",
        "nomad.nomad.rpc.request",
        AliasKind::Counter,
    ),
    Alias {
        only: Some(("status", server_error)),
        ..alias(
            "herder_http_requests",
            "nomad.nomad.rpc.request_error",
            AliasKind::Counter,
        )
    },
    alias(
        "herder_process_resident_memory_bytes",
        "nomad.runtime.alloc_bytes",
        AliasKind::Gauge,
    ),
];

/// One sample line of Prometheus' text format.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// A label of a sample line, borrowed from the line; the value is copied
/// only when it held escapes.
pub type LabelRef<'a> = (&'a str, Cow<'a, str>);

/// Parses `name{label="value",...} value` (label values unescaped).
pub fn parse_line(line: &str) -> Option<Line> {
    let mut labels = Vec::new();
    let (name, value) = parse_line_into(line, &mut labels)?;
    Some(Line {
        name: name.to_string(),
        labels: labels
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into_owned()))
            .collect(),
        value,
    })
}

/// [`parse_line`] without copying: the name and value, and the labels in
/// `labels` (cleared first). The JSON answer of `/v1/metrics` parses every
/// line of the scrape, thousands of them, so one buffer serves them all.
pub fn parse_line_into<'a>(
    line: &'a str,
    labels: &mut Vec<LabelRef<'a>>,
) -> Option<(&'a str, f64)> {
    labels.clear();
    let (series, value) = line.trim_end().rsplit_once(' ')?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let Some(open) = series.find('{') else {
        return Some((series, value));
    };
    let mut rest = series[open + 1..].strip_suffix('}')?;
    loop {
        rest = rest.trim_start_matches(',');
        if rest.is_empty() {
            break;
        }
        let (key, after) = rest.split_once("=\"")?;
        let (value, after) = label_value(after)?;
        labels.push((key, value));
        rest = after;
    }
    Some((&series[..open], value))
}

/// A label's value, from just after its opening quote: the value
/// unescaped, and what follows its closing quote.
fn label_value(after: &str) -> Option<(Cow<'_, str>, &str)> {
    let stop = after.find(['"', '\\'])?;
    if after[stop..].starts_with('"') {
        return Some((Cow::Borrowed(&after[..stop]), &after[stop + 1..]));
    }
    let mut value = after[..stop].to_string();
    let mut chars = after[stop..].char_indices();
    let end = loop {
        match chars.next()? {
            (i, '"') => break stop + i,
            (_, '\\') => match chars.next()?.1 {
                'n' => value.push('\n'),
                c => value.push(c),
            },
            (_, c) => value.push(c),
        }
    };
    Some((Cow::Owned(value), &after[end + 1..]))
}

/// A value as Prometheus' text format writes it.
fn write_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

fn write_labels<'a>(out: &mut String, labels: impl Iterator<Item = (&'a str, &'a str)>) {
    let mut first = true;
    for (k, v) in labels {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    if !first {
        out.push('}');
    }
}

/// A timer series being gathered: quantiles, sum and count, in ms.
#[derive(Default)]
struct TimerSeries {
    quantiles: Vec<(String, f64)>,
    sum: f64,
    count: f64,
}

enum Gathered {
    /// Gauge or counter values by label set.
    Values(Kind, BTreeMap<Vec<(String, String)>, f64>),
    Timer(BTreeMap<Vec<(String, String)>, TimerSeries>),
}

/// What `/v1/metrics` adds to herder's own text.
pub struct Rendered {
    /// Prometheus text of every Nomad-named family.
    pub text: String,
    /// Prometheus name → Nomad's dotted name, for the JSON format.
    pub dotted: HashMap<String, String>,
}

/// The Nomad-named families: herder's figures from `herder_text` under
/// their Nomad names, then what the agent's publishers last published.
pub fn render(herder_text: &str, board: &Board, host: &str) -> Rendered {
    let mut families: BTreeMap<String, (String, Gathered)> = BTreeMap::new();
    let mut kinds: HashMap<&str, &str> = HashMap::new();
    for line in herder_text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ') {
                kinds.insert(name, kind);
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        // Only the lines of aliased families are parsed.
        let name = &line[..line.find(['{', ' ']).unwrap_or(line.len())];
        let (base, part) = summary_part(name, &kinds);
        if !ALIASES.iter().any(|a| a.herder == base) {
            continue;
        }
        let Some(sample) = parse_line(line) else {
            continue;
        };
        for alias in ALIASES.iter().filter(|a| a.herder == base) {
            gather(alias, part, &sample, host, &mut families);
        }
    }
    let mut text = String::new();
    let mut dotted = HashMap::new();
    for (prom, (name, gathered)) in families {
        write_gathered(&mut text, &prom, gathered);
        dotted.insert(prom, name);
    }
    for section in board.snapshot() {
        for family in section.iter() {
            let prom = prometheus_name(family.name);
            write_family(&mut text, &prom, family, host);
            dotted.insert(prom, family.name.to_string());
        }
    }
    Rendered { text, dotted }
}

/// A summary's line by its family and part: `("x", Sum)` for `x_sum`.
fn summary_part<'a>(name: &'a str, kinds: &HashMap<&str, &str>) -> (&'a str, Part) {
    let is_summary = |base: &str| kinds.get(base).is_some_and(|k| *k == "summary");
    if let Some(base) = name.strip_suffix("_sum").filter(|b| is_summary(b)) {
        return (base, Part::Sum);
    }
    if let Some(base) = name.strip_suffix("_count").filter(|b| is_summary(b)) {
        return (base, Part::Count);
    }
    (name, Part::Value)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Value,
    Sum,
    Count,
}

fn gather(
    alias: &Alias,
    part: Part,
    sample: &Line,
    host: &str,
    families: &mut BTreeMap<String, (String, Gathered)>,
) {
    let label = |name: &str| {
        sample
            .labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if let Some((name, test)) = alias.only {
        if !label(name).is_some_and(test) {
            return;
        }
    }
    let dotted = match alias.label_in_name {
        Some(name) => alias.nomad.replace("{}", label(name).unwrap_or("unknown")),
        None => alias.nomad.to_string(),
    };
    let prom = prometheus_name(&dotted);
    let labels = vec![("host".to_string(), host.to_string())];
    let entry = families.entry(prom).or_insert_with(|| {
        let gathered = match alias.kind {
            AliasKind::Gauge => Gathered::Values(Kind::Gauge, BTreeMap::new()),
            AliasKind::Counter => Gathered::Values(Kind::Counter, BTreeMap::new()),
            AliasKind::Timer => Gathered::Timer(BTreeMap::new()),
        };
        (dotted, gathered)
    });
    match &mut entry.1 {
        Gathered::Values(Kind::Gauge, values) => {
            values.insert(labels, sample.value);
        }
        Gathered::Values(Kind::Counter, values) => {
            *values.entry(labels).or_default() += sample.value;
        }
        Gathered::Timer(series) => {
            let s = series.entry(labels).or_default();
            match part {
                Part::Sum => s.sum += sample.value * 1000.0,
                Part::Count => s.count += sample.value,
                Part::Value => {
                    let Some(q) = label("quantile") else {
                        return;
                    };
                    let ms = sample.value * 1000.0;
                    // Two of herder's series under one Nomad name: the
                    // higher quantile bounds both.
                    match s.quantiles.iter_mut().find(|(k, _)| k == q) {
                        Some((_, v)) => *v = v.max(ms),
                        None => s.quantiles.push((q.to_string(), ms)),
                    }
                }
            }
        }
    }
}

fn write_gathered(out: &mut String, prom: &str, gathered: Gathered) {
    match gathered {
        Gathered::Values(kind, values) => {
            let _ = writeln!(out, "# TYPE {prom} {}", kind.prometheus());
            for (labels, value) in values {
                out.push_str(prom);
                write_labels(out, labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                out.push(' ');
                write_value(out, value);
                out.push('\n');
            }
        }
        Gathered::Timer(series) => {
            let _ = writeln!(out, "# TYPE {prom} summary");
            for (labels, s) in series {
                let base = labels.iter().map(|(k, v)| (k.as_str(), v.as_str()));
                for (q, v) in &s.quantiles {
                    out.push_str(prom);
                    write_labels(out, base.clone().chain([("quantile", q.as_str())]));
                    out.push(' ');
                    write_value(out, *v);
                    out.push('\n');
                }
                for (suffix, v) in [("_sum", s.sum), ("_count", s.count)] {
                    out.push_str(prom);
                    out.push_str(suffix);
                    write_labels(out, base.clone());
                    out.push(' ');
                    write_value(out, v);
                    out.push('\n');
                }
            }
        }
    }
    out.push('\n');
}

fn write_family(out: &mut String, prom: &str, family: &Family, host: &str) {
    let _ = writeln!(out, "# TYPE {prom} {}", family.kind.prometheus());
    for sample in &family.samples {
        let mut labels: Vec<(&str, &str)> = sample
            .labels
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .chain([("host", host)])
            .collect();
        labels.sort_unstable();
        out.push_str(prom);
        write_labels(out, labels.into_iter());
        out.push(' ');
        write_value(out, sample.value);
        out.push('\n');
    }
    out.push('\n');
}

/// Nomad's labels for a job that is a dispatched or periodic child:
/// `parent_id` and `dispatch_id` / `periodic_id`, split from the job's ID
/// (or name) as Nomad splits them.
pub fn child_job_labels(job: &str, labels: &mut Vec<(&'static str, String)>) {
    for (marker, label) in [("/dispatch-", "dispatch_id"), ("/periodic-", "periodic_id")] {
        if let Some((parent, child)) = job.split_once(marker) {
            labels.push(("parent_id", parent.to_string()));
            labels.push((label, child.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERDER: &str = "\
# TYPE herder_broker_total_ready gauge
herder_broker_total_ready 3

# TYPE herder_broker_ready gauge
herder_broker_ready{scheduler=\"service\"} 2
herder_broker_ready{scheduler=\"_core\"} 1

# TYPE herder_http_requests counter
herder_http_requests{method=\"GET\",route=\"/v1/jobs\",status=\"200\"} 5
herder_http_requests{method=\"PUT\",route=\"/v1/jobs\",status=\"500\"} 2

# TYPE herder_worker_invoke_scheduler_seconds summary
herder_worker_invoke_scheduler_seconds{scheduler=\"batch\",quantile=\"0.5\"} 0.002
herder_worker_invoke_scheduler_seconds{scheduler=\"batch\",quantile=\"0.99\"} 0.004
herder_worker_invoke_scheduler_seconds_sum{scheduler=\"batch\"} 0.01
herder_worker_invoke_scheduler_seconds_count{scheduler=\"batch\"} 4

# TYPE herder_state_jobs gauge
herder_state_jobs 7
";

    fn lines(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.is_empty()).collect()
    }

    #[test]
    fn herders_figures_appear_under_nomads_names() {
        let r = render(HERDER, &Board::new(), "h1");
        let l = lines(&r.text);
        assert!(l.contains(&"# TYPE nomad_nomad_broker_total_ready gauge"));
        assert!(l.contains(&"nomad_nomad_broker_total_ready{host=\"h1\"} 3"));
        // The scheduler label is folded into the name, as Nomad names it.
        assert!(l.contains(&"nomad_nomad_broker_service_ready{host=\"h1\"} 2"));
        assert!(l.contains(&"nomad_nomad_broker__core_ready{host=\"h1\"} 1"));
        // Counters add up over herder's labels; errors are the 5xx.
        assert!(l.contains(&"# TYPE nomad_nomad_rpc_request counter"));
        assert!(l.contains(&"nomad_nomad_rpc_request{host=\"h1\"} 7"));
        assert!(l.contains(&"nomad_nomad_rpc_request_error{host=\"h1\"} 2"));
        // Timers in milliseconds, with the summary's parts.
        assert!(l.contains(&"# TYPE nomad_nomad_worker_invoke_scheduler_batch summary"));
        assert!(l.contains(
            &"nomad_nomad_worker_invoke_scheduler_batch{host=\"h1\",quantile=\"0.5\"} 2"
        ));
        assert!(l.contains(
            &"nomad_nomad_worker_invoke_scheduler_batch{host=\"h1\",quantile=\"0.99\"} 4"
        ));
        assert!(l.contains(&"nomad_nomad_worker_invoke_scheduler_batch_sum{host=\"h1\"} 10"));
        assert!(l.contains(&"nomad_nomad_worker_invoke_scheduler_batch_count{host=\"h1\"} 4"));
        // A figure Nomad does not have gets no Nomad name.
        assert!(!r.text.contains("jobs"), "{}", r.text);
        assert_eq!(
            r.dotted["nomad_nomad_worker_invoke_scheduler_batch"],
            "nomad.nomad.worker.invoke_scheduler.batch"
        );
        assert_eq!(
            r.dotted["nomad_nomad_broker__core_ready"],
            "nomad.nomad.broker._core.ready"
        );
    }

    #[test]
    fn published_sets_replace_the_previous_ones() {
        let board = Board::new();
        let mut f = Family::new("nomad.nomad.job_summary.running", Kind::Gauge);
        f.push(
            vec![
                ("job", "we\"b".to_string()),
                ("task_group", "g".to_string()),
                ("namespace", "default".to_string()),
            ],
            2.0,
        );
        board.publish(Section::Server, vec![f]);
        let r = render("", &board, "h1");
        assert!(
            r.text.contains(
                "nomad_nomad_job_summary_running{host=\"h1\",job=\"we\\\"b\",namespace=\"default\",task_group=\"g\"} 2"
            ),
            "{}",
            r.text
        );
        // What the text says reads back the same.
        let line = r.text.lines().nth(1).and_then(parse_line);
        assert_eq!(line.map(|l| l.labels[1].1.clone()), Some("we\"b".into()));
        board.publish(Section::Server, Vec::new());
        assert!(render("", &board, "h1").text.is_empty());
    }

    #[test]
    fn child_jobs_are_labelled_with_their_parent() {
        let mut labels = Vec::new();
        child_job_labels("batch/dispatch-1700000000-abcd", &mut labels);
        assert_eq!(
            labels,
            vec![
                ("parent_id", "batch".to_string()),
                ("dispatch_id", "1700000000-abcd".to_string())
            ]
        );
        let mut labels = Vec::new();
        child_job_labels("web", &mut labels);
        assert!(labels.is_empty());
    }

    #[test]
    fn every_alias_is_a_valid_prometheus_name() {
        for a in ALIASES {
            let prom = prometheus_name(&a.nomad.replace("{}", "service"));
            assert!(prom.starts_with("nomad_"), "{prom}");
            assert!(prom.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        }
        assert_eq!(prometheus_name("nomad.a-b/c d=e"), "nomad_a_b_c_d_e");
    }
}
