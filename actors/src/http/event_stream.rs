//! `GET /v1/event/stream`: the state store's applied changes as Nomad's
//! event stream, one JSON object per line.
//!
//! Each applied command becomes one frame `{"Index", "Events": [...]}`
//! with an event per changed job, evaluation, allocation or node, named
//! after the command as Nomad names them (JobRegistered,
//! AllocationUpdated, NodeDrain, ...). A client resumes with `?index=` from
//! the store's bounded replay buffer; `{}` is sent when the stream opens
//! and every 30 s of silence so that clients and proxies see it alive.

use super::errors::ApiError;
use super::query::{server, QueryOptions};
use super::stubs::node_read;
use crate::agent::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use futures::channel::mpsc;
use futures::StreamExt;
use herder::state::{AppliedChanges, Row, RowKey};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// Silence after which a heartbeat `{}` is sent.
pub const HEARTBEAT: Duration = Duration::from_secs(30);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/event/stream", web::get().to(stream));
}

/// Which events a client asked for: `topic=Topic:Key`, repeatable; `*`
/// for any topic or key. No topic means everything.
#[derive(Clone, Debug)]
struct TopicFilter {
    topics: Vec<(String, String)>,
    namespace: String,
}

impl TopicFilter {
    fn parse(query: &str, namespace: &str) -> Result<TopicFilter, ApiError> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
            .map_err(|e| ApiError::BadRequest(format!("Invalid query string: {e}")))?;
        let mut topics = Vec::new();
        for (name, value) in pairs.into_iter().filter(|(k, _)| k == "topic") {
            let (topic, key) = match value.split_once(':') {
                Some((t, k)) => (t.to_string(), k.to_string()),
                None => (value.clone(), "*".to_string()),
            };
            const KNOWN: [&str; 6] = ["*", "Job", "Evaluation", "Allocation", "Node", "Deployment"];
            if topic.is_empty() || key.is_empty() || !KNOWN.contains(&topic.as_str()) {
                return Err(ApiError::BadRequest(format!(
                    "Invalid {name} {value:?}: expected Topic:Key with Topic one of {}",
                    KNOWN.join(", ")
                )));
            }
            topics.push((topic, key));
        }
        Ok(TopicFilter {
            topics,
            namespace: namespace.to_string(),
        })
    }

    fn wants(&self, event: &Value) -> bool {
        let field = |k: &str| event.get(k).and_then(Value::as_str).unwrap_or("");
        let ns = field("Namespace");
        if !ns.is_empty() && self.namespace != "*" && ns != self.namespace {
            return false;
        }
        if self.topics.is_empty() {
            return true;
        }
        let topic = field("Topic");
        let key = field("Key");
        let filter_keys: Vec<&str> = event
            .get("FilterKeys")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        self.topics.iter().any(|(t, k)| {
            (t == "*" || t == topic) && (k == "*" || k == key || filter_keys.contains(&k.as_str()))
        })
    }
}

/// The event type of a change to `topic` made by `command`, as Nomad.
fn event_type(command: &str, topic: &str, created: bool) -> &'static str {
    match (command, topic) {
        ("JobRegister", "Job" | "Evaluation") => "JobRegistered",
        ("JobDeregister", "Job" | "Evaluation") => "JobDeregistered",
        ("NodeRegister", _) => "NodeRegistration",
        ("NodeDeregister", _) => "NodeDeregistration",
        ("NodeUpdateStatus", "Node") => "NodeStreamEvent",
        ("NodeUpdateEligibility", "Node" | "Evaluation") => "NodeEligibility",
        ("NodeUpdateDrain", "Node" | "Evaluation") => "NodeDrain",
        ("AllocDesiredTransition", _) => "AllocationUpdateDesiredStatus",
        ("ApplyPlanResults", "Job") => "PlanResult",
        (_, "Allocation") if created => "AllocationCreated",
        (_, "Allocation") => "AllocationUpdated",
        (_, "Evaluation") => "EvaluationUpdated",
        (_, "Node") => "NodeStreamEvent",
        _ => "JobRegistered",
    }
}

/// The events of one applied command.
fn events_of(changes: &AppliedChanges) -> Vec<Value> {
    let mut events = Vec::new();
    let mut push = |topic: &str, key: String, ns: &str, filter: Value, payload: Value, created| {
        events.push(json!({
            "Topic": topic,
            "Type": event_type(changes.command, topic, created),
            "Key": key,
            "Namespace": ns,
            "FilterKeys": filter,
            "Index": changes.index,
            "Payload": payload,
        }));
    };
    for change in &changes.changes {
        match (&change.key, &change.row) {
            (_, Some(Row::Job(job))) => push(
                "Job",
                job.id.clone(),
                &job.namespace,
                Value::Null,
                json!({"Job": job}),
                false,
            ),
            (RowKey::Job(key), None) => push(
                "Job",
                key.id.to_string(),
                &key.namespace,
                Value::Null,
                json!({"Job": {"ID": &*key.id, "Namespace": &*key.namespace}}),
                false,
            ),
            (_, Some(Row::Eval(eval))) => push(
                "Evaluation",
                eval.id.to_string(),
                &eval.namespace,
                json!([eval.job_id, eval.deployment_id]),
                json!({"Evaluation": eval}),
                false,
            ),
            (_, Some(Row::Alloc(alloc))) => push(
                "Allocation",
                alloc.id.to_string(),
                &alloc.namespace,
                json!([&*alloc.job_id, ""]),
                json!({"Allocation": alloc}),
                alloc.create_index == changes.index,
            ),
            (_, Some(Row::Node(node))) => push(
                "Node",
                node.id.to_string(),
                "",
                Value::Null,
                json!({"Node": node_read(node)}),
                node.create_index == changes.index,
            ),
            (RowKey::Node(id), None) => push(
                "Node",
                id.to_string(),
                "",
                Value::Null,
                json!({"Node": {"ID": id}}),
                false,
            ),
            _ => {}
        }
    }
    events
}

/// One ndjson line for a command, or `None` when nothing in it is wanted.
fn frame(changes: &AppliedChanges, filter: &TopicFilter) -> Option<web::Bytes> {
    let events: Vec<Value> = events_of(changes)
        .into_iter()
        .filter(|e| filter.wants(e))
        .collect();
    if events.is_empty() {
        return None;
    }
    let mut line = serde_json::to_vec(&json!({"Index": changes.index, "Events": events})).ok()?;
    line.push(b'\n');
    Some(web::Bytes::from(line))
}

struct StreamState {
    backlog: VecDeque<Arc<AppliedChanges>>,
    receiver: mpsc::Receiver<Arc<AppliedChanges>>,
    filter: TopicFilter,
    opened: bool,
    heartbeat: Duration,
    /// The agent's shutdown: the stream ends when it starts, so that an
    /// open stream never holds the HTTP server's graceful stop (it did,
    /// for its whole 10 s timeout).
    shutdown: Option<tokio::sync::watch::Receiver<bool>>,
}

impl StreamState {
    /// The next line to send; `None` ends the stream (store closed, or the
    /// client fell too far behind and must resume from its last index).
    async fn next_line(&mut self) -> Option<web::Bytes> {
        if !self.opened {
            self.opened = true;
            return Some(web::Bytes::from_static(b"{}\n"));
        }
        loop {
            let changes = match self.backlog.pop_front() {
                Some(c) => c,
                None => {
                    let shutdown = wait_for_shutdown(self.shutdown.as_mut());
                    tokio::select! {
                        next = self.receiver.next() => next?,
                        _ = tokio::time::sleep(self.heartbeat) => {
                            return Some(web::Bytes::from_static(b"{}\n"));
                        }
                        _ = shutdown => return None,
                    }
                }
            };
            if let Some(line) = frame(&changes, &self.filter) {
                return Some(line);
            }
        }
    }
}

/// Resolves once the agent starts shutting down; never without a watch.
async fn wait_for_shutdown(watch: Option<&mut tokio::sync::watch::Receiver<bool>>) {
    match watch {
        Some(w) => {
            // A closed watch means the agent is gone: end as well.
            let _ = w.wait_for(|down| *down).await;
        }
        None => std::future::pending().await,
    }
}

async fn stream(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let filter = TopicFilter::parse(req.query_string(), &q.namespace)?;
    let store = &server(&info)?.store;
    // Without an index the stream starts now; with one it replays what the
    // store's buffer still holds from there.
    let from = if q.index > 0 {
        q.index
    } else {
        store.latest_index() + 1
    };
    let subscription = store.subscribe(from);
    let state = StreamState {
        backlog: subscription.backlog.into(),
        receiver: subscription.receiver,
        filter,
        opened: false,
        heartbeat: HEARTBEAT,
        shutdown: Some(info.shutting_down.subscribe()),
    };
    let body = futures::stream::unfold(state, |mut state| async move {
        let line = state.next_line().await?;
        Some((Ok::<_, std::convert::Infallible>(line), state))
    });
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .streaming(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::SinkExt;

    fn state(heartbeat: Duration) -> (StreamState, mpsc::Sender<Arc<AppliedChanges>>) {
        let (sender, receiver) = mpsc::channel(8);
        let filter = TopicFilter::parse("topic=Node:*", "default").expect("filter");
        let state = StreamState {
            backlog: VecDeque::new(),
            receiver,
            filter,
            opened: false,
            heartbeat,
            shutdown: None,
        };
        (state, sender)
    }

    fn node_change(index: u64) -> Arc<AppliedChanges> {
        let node = herder::state::fixtures::node("n1");
        Arc::new(AppliedChanges {
            index,
            command: "NodeRegister",
            tables: herder::state::TableSet::of(&[herder::state::Table::Nodes]),
            changes: vec![herder::state::RowChange {
                key: RowKey::Node(node.id),
                row: Some(Row::Node(Arc::new(node))),
            }],
        })
    }

    #[actix_rt::test]
    async fn silence_is_broken_by_heartbeats_and_unwanted_topics_are_skipped() {
        let (mut state, mut sender) = state(Duration::from_millis(50));
        assert_eq!(state.next_line().await.as_deref(), Some(&b"{}\n"[..]));
        let started = std::time::Instant::now();
        assert_eq!(state.next_line().await.as_deref(), Some(&b"{}\n"[..]));
        assert!(started.elapsed() >= Duration::from_millis(50));

        // A job-only change is not a Node event: nothing is sent for it.
        let job = herder::state::fixtures::job("default", "web", &[("g", 1)]);
        let job_change = Arc::new(AppliedChanges {
            index: 6,
            command: "JobRegister",
            tables: herder::state::TableSet::of(&[herder::state::Table::Jobs]),
            changes: vec![herder::state::RowChange {
                key: RowKey::Job(herder::state::JobKey::of_job(&job)),
                row: Some(Row::Job(Arc::new(job))),
            }],
        });
        sender.send(job_change).await.expect("send");
        sender.send(node_change(7)).await.expect("send");
        let line = state.next_line().await.expect("a frame");
        let frame: Value = serde_json::from_slice(&line).expect("JSON line");
        assert_eq!(frame["Index"], 7);
        assert_eq!(frame["Events"][0]["Type"], "NodeRegistration");
        assert!(frame["Events"][0]["Payload"]["Node"]["SecretID"].is_null());

        drop(sender);
        assert!(
            state.next_line().await.is_none(),
            "a closed feed ends the stream"
        );
    }
}
