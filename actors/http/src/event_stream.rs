//! `GET /v1/event/stream`: the server's events (`herder_server::events`, the same
//! source an embedding program reads as a Rust stream) as Nomad's event
//! stream, one JSON object per line.
//!
//! Each frame is `{"Index", "Events": [...]}`. A client resumes with
//! `?index=` from the store's bounded replay buffer; `{}` is sent when the
//! stream opens and every 30 s of silence so that clients and proxies see
//! it alive. The stream ends when the agent starts shutting down, so an
//! open stream never holds the HTTP server's graceful stop.

use super::errors::ApiError;
use super::query::{server, QueryOptions};
use super::stubs::node_read;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use herder::acl::{Acl, Capability};
use herder_server::events::{Event, EventFilter, EventPayload, EventStream, Events};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// Silence after which a heartbeat `{}` is sent.
pub const HEARTBEAT: Duration = Duration::from_secs(30);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/event/stream", web::get().to(stream));
}

/// An event as Nomad's JSON (a node without its secret).
fn event_json(event: &Event) -> Value {
    let payload = match &event.payload {
        EventPayload::Job(job) => json!({"Job": job}),
        EventPayload::JobRemoved { namespace, id } => {
            json!({"Job": {"ID": id, "Namespace": namespace}})
        }
        EventPayload::Evaluation(eval) => json!({"Evaluation": eval}),
        EventPayload::Allocation(alloc) => json!({"Allocation": alloc}),
        EventPayload::Node(node) => json!({"Node": node_read(node)}),
        EventPayload::NodeRemoved(id) => json!({"Node": {"ID": id}}),
        EventPayload::Deployment(d) => json!({"Deployment": d}),
    };
    let filter_keys = if event.filter_keys.is_empty() {
        Value::Null
    } else {
        json!(event.filter_keys)
    };
    json!({
        "Topic": event.topic.as_str(),
        "Type": event.event_type,
        "Key": event.key,
        "Namespace": event.namespace,
        "FilterKeys": filter_keys,
        "Index": event.index,
        "Payload": payload,
    })
}

/// Whether a token may see an event: a node's with `node:read`, any
/// other's with `read-job` in its namespace (ACLs off: `None`, all).
fn may_see(acl: Option<&Acl>, event: &Event) -> bool {
    match acl {
        None => true,
        Some(acl) if event.namespace.is_empty() => acl.allow_node_read(),
        Some(acl) => acl.allow_namespace_op(&event.namespace, Capability::ReadJob),
    }
}

/// One ndjson line for a frame; `None` when the token may see none of
/// its events.
fn frame_line(frame: &Events, acl: Option<&Acl>) -> Option<web::Bytes> {
    let events: Vec<Value> = frame
        .events
        .iter()
        .filter(|e| may_see(acl, e))
        .map(event_json)
        .collect();
    if events.is_empty() && !frame.events.is_empty() {
        return None;
    }
    let mut line = serde_json::to_vec(&json!({"Index": frame.index, "Events": events})).ok()?;
    line.push(b'\n');
    Some(web::Bytes::from(line))
}

struct StreamState {
    events: EventStream,
    opened: bool,
    heartbeat: Duration,
    /// The request's ACL (`None` with ACLs off).
    acl: Option<Arc<Acl>>,
}

impl StreamState {
    /// The next line to send; `None` ends the stream (shutdown, store
    /// closed, or the client fell too far behind and must resume from its
    /// last index).
    async fn next_line(&mut self) -> Option<web::Bytes> {
        if !self.opened {
            self.opened = true;
            return Some(web::Bytes::from_static(b"{}\n"));
        }
        loop {
            // `next()` is cancel-safe: a heartbeat loses no frame.
            tokio::select! {
                frame = self.events.next() => {
                    if let Some(line) = frame_line(&frame?, self.acl.as_deref()) {
                        return Some(line);
                    }
                }
                _ = tokio::time::sleep(self.heartbeat) => {
                    return Some(web::Bytes::from_static(b"{}\n"));
                }
            }
        }
    }
}

async fn stream(info: web::Data<AgentInfo>, req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(&req)?;
    let mut filter = EventFilter::new()
        .namespace(q.namespace.clone())
        .with_query_topics(req.query_string())
        .map_err(ApiError::BadRequest)?;
    // Without an index the stream starts now; with one it replays what the
    // store's buffer still holds from there.
    if q.index > 0 {
        filter = filter.from_index(q.index);
    }
    let store = &server(&info)?.store;
    let state = StreamState {
        events: EventStream::subscribe(store, filter, Some(info.shutting_down.subscribe())),
        opened: false,
        heartbeat: HEARTBEAT,
        acl: crate::acl_rules::caller(&req).map(|c| c.acl),
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
    use futures::channel::mpsc;
    use futures::SinkExt;
    use herder::state::{AppliedChanges, Row, RowKey};

    fn state(heartbeat: Duration) -> (StreamState, mpsc::Sender<Arc<AppliedChanges>>) {
        let (sender, receiver) = mpsc::channel(8);
        let filter = EventFilter::new()
            .with_query_topics("topic=Node:*")
            .expect("filter");
        let state = StreamState {
            events: EventStream::from_feed(Default::default(), receiver, filter, None),
            opened: false,
            heartbeat,
            acl: None,
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
