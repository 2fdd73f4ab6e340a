//! The server's event stream: every applied change to jobs, evaluations,
//! allocations, nodes and deployments as typed events, selected by topic,
//! key and namespace as Nomad's `/v1/event/stream` selects them.
//!
//! This is the one source of events: `GET /v1/event/stream` renders these
//! frames as JSON lines, and an embedding program reads them as a
//! `futures::Stream` (`herder_actors::Agent::events`). Each
//! applied command becomes one [`Events`] frame with an event per changed
//! row, named after the command as Nomad names them (`JobRegistered`,
//! `AllocationUpdated`, `NodeDrain`, ...).

use futures::channel::mpsc;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use herder::state::{AppliedChanges, Row, RowKey, StateStore};
use herder::structs::{Allocation, Deployment, Evaluation, Job, Node, NodeId};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// What an event is about, as Nomad's `Topic`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Topic {
    /// Jobs (key: the job's ID).
    Job,
    /// Evaluations (key: its ID; filter keys: its job and deployment).
    Evaluation,
    /// Allocations (key: its ID; filter keys: its job and deployment).
    Allocation,
    /// Nodes (key: the node's ID; no namespace).
    Node,
    /// Deployments (key: its ID; filter key: its job).
    Deployment,
}

impl Topic {
    /// Every topic, in Nomad's spelling order.
    pub const ALL: [Topic; 5] = [
        Topic::Job,
        Topic::Evaluation,
        Topic::Allocation,
        Topic::Node,
        Topic::Deployment,
    ];

    /// Nomad's name of the topic (`"Job"`, `"Evaluation"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Topic::Job => "Job",
            Topic::Evaluation => "Evaluation",
            Topic::Allocation => "Allocation",
            Topic::Node => "Node",
            Topic::Deployment => "Deployment",
        }
    }

    /// The topic Nomad names `name`; `None` for anything else.
    pub fn parse(name: &str) -> Option<Topic> {
        Topic::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

/// The object an event carries: the row after the change, or the key of a
/// removed one.
#[derive(Clone, Debug)]
pub enum EventPayload {
    /// A job registered, updated or stopped.
    Job(Arc<Job>),
    /// A job purged: only its key remains.
    JobRemoved {
        namespace: String,
        id: String,
    },
    Evaluation(Arc<Evaluation>),
    Allocation(Arc<Allocation>),
    /// A node as stored, secret included: the HTTP rendering strips the
    /// `SecretID`, an embedding program is trusted with it.
    Node(Arc<Node>),
    /// A node deregistered or collected: only its ID remains.
    NodeRemoved(NodeId),
    /// A deployment created or changed.
    Deployment(Arc<Deployment>),
}

/// One change to one object.
#[derive(Clone, Debug)]
pub struct Event {
    /// What the event is about.
    pub topic: Topic,
    /// Nomad's event type (`JobRegistered`, `AllocationUpdated`, ...).
    pub event_type: &'static str,
    /// The object's ID.
    pub key: String,
    /// The object's namespace; empty for nodes.
    pub namespace: String,
    /// Further keys a topic filter matches: an evaluation's job and
    /// deployment, an allocation's job. Empty for jobs and nodes.
    pub filter_keys: Vec<String>,
    /// The index of the command that made the change.
    pub index: u64,
    /// The object after the change.
    pub payload: EventPayload,
}

/// The events of one applied command (those the filter selected).
#[derive(Clone, Debug)]
pub struct Events {
    /// The index of the command (resume after it with `from_index`).
    pub index: u64,
    /// Its selected events, at least one.
    pub events: Vec<Event>,
}

/// Which events to deliver: topics with keys (`Topic:Key`, `*` for any),
/// a namespace, and where to start.
///
/// No topic means every topic. The namespace is `default` unless set; `*`
/// means every namespace; node events have none and always pass.
///
/// ```
/// use herder_server::events::{EventFilter, Topic};
///
/// // Allocations of the job "web", and every node event, from index 10.
/// let filter = EventFilter::new()
///     .topic(Topic::Allocation, "web")
///     .topic(Topic::Node, "*")
///     .from_index(10);
/// assert_eq!(filter.start_index(), Some(10));
/// ```
#[derive(Clone, Debug)]
pub struct EventFilter {
    /// `None` as the topic: any topic (`*`).
    topics: Vec<(Option<Topic>, String)>,
    namespace: String,
    from_index: Option<u64>,
}

impl Default for EventFilter {
    fn default() -> Self {
        EventFilter::new()
    }
}

impl EventFilter {
    /// Every topic in the `default` namespace, from now on.
    pub fn new() -> EventFilter {
        EventFilter {
            topics: Vec::new(),
            namespace: herder::structs::job::DEFAULT_NAMESPACE.to_string(),
            from_index: None,
        }
    }

    /// Adds `topic` events whose key (or one of their filter keys) is
    /// `key`; `"*"` for every key.
    pub fn topic(mut self, topic: Topic, key: impl Into<String>) -> EventFilter {
        self.topics.push((Some(topic), key.into()));
        self
    }

    /// Adds events of every topic whose key is `key` (`Topic` `*`).
    pub fn any_topic(mut self, key: impl Into<String>) -> EventFilter {
        self.topics.push((None, key.into()));
        self
    }

    /// The namespace whose events are delivered; `"*"` for all.
    pub fn namespace(mut self, namespace: impl Into<String>) -> EventFilter {
        self.namespace = namespace.into();
        self
    }

    /// Replays from `index` what the server's replay buffer still holds,
    /// then goes on live (as `?index=` of the HTTP stream). Without it the
    /// stream starts with the next change.
    pub fn from_index(mut self, index: u64) -> EventFilter {
        self.from_index = Some(index).filter(|i| *i > 0);
        self
    }

    /// The index the stream starts from, if one was set.
    pub fn start_index(&self) -> Option<u64> {
        self.from_index
    }

    /// Reads the HTTP API's repeatable `topic=Topic:Key` parameters (a
    /// bare `Topic` means every key) from a query string; the error says
    /// which parameter is wrong.
    #[doc(hidden)]
    pub fn with_query_topics(mut self, query: &str) -> Result<EventFilter, String> {
        let pairs: Vec<(String, String)> =
            serde_urlencoded::from_str(query).map_err(|e| format!("Invalid query string: {e}"))?;
        for (name, value) in pairs.into_iter().filter(|(k, _)| k == "topic") {
            let (topic, key) = value.split_once(':').unwrap_or((value.as_str(), "*"));
            let parsed = match topic {
                "*" => Some(None),
                t => Topic::parse(t).map(Some),
            };
            match parsed {
                Some(topic) if !key.is_empty() => self.topics.push((topic, key.to_string())),
                _ => {
                    let known: Vec<&str> = std::iter::once("*")
                        .chain(Topic::ALL.iter().map(|t| t.as_str()))
                        .collect();
                    return Err(format!(
                        "Invalid {name} {value:?}: expected Topic:Key with Topic one of {}",
                        known.join(", ")
                    ));
                }
            }
        }
        Ok(self)
    }

    /// Whether `event` is selected.
    pub fn wants(&self, event: &Event) -> bool {
        let ns = event.namespace.as_str();
        if !ns.is_empty() && self.namespace != "*" && ns != self.namespace {
            return false;
        }
        if self.topics.is_empty() {
            return true;
        }
        self.topics.iter().any(|(topic, key)| {
            topic.is_none_or(|t| t == event.topic)
                && (key == "*" || *key == event.key || event.filter_keys.contains(key))
        })
    }
}

/// The event type of a change to `topic` made by `command`, as Nomad.
fn event_type(command: &str, topic: Topic, created: bool) -> &'static str {
    use Topic::*;
    match (command, topic) {
        ("JobRegister", Job | Evaluation) => "JobRegistered",
        ("JobDeregister", Job | Evaluation) => "JobDeregistered",
        ("NodeRegister", _) => "NodeRegistration",
        ("NodeDeregister", _) => "NodeDeregistration",
        ("NodeUpdateStatus", Node) => "NodeStreamEvent",
        ("NodeUpdateEligibility", Node | Evaluation) => "NodeEligibility",
        ("NodeUpdateDrain", Node | Evaluation) => "NodeDrain",
        ("AllocDesiredTransition", _) => "AllocationUpdateDesiredStatus",
        ("ApplyPlanResults", Job | Deployment) => "PlanResult",
        // Every object a deployment change writes (the deployment, its
        // evaluation, an auto-revert's job, marked allocations) carries
        // the change's type, as Nomad's.
        ("DeploymentStatusUpdate", _) => "DeploymentStatusUpdate",
        ("DeploymentPromotion", _) => "DeploymentPromotion",
        ("DeploymentAllocHealth", _) => "DeploymentAllocHealth",
        (_, Allocation) if created => "AllocationCreated",
        (_, Allocation) => "AllocationUpdated",
        (_, Evaluation) => "EvaluationUpdated",
        (_, Node) => "NodeStreamEvent",
        _ => "JobRegistered",
    }
}

/// The events of one applied command, every topic.
pub fn events_of(changes: &AppliedChanges) -> Vec<Event> {
    let mut events = Vec::new();
    let mut push = |topic, key: String, ns: &str, filter_keys, payload, created| {
        events.push(Event {
            topic,
            event_type: event_type(changes.command, topic, created),
            key,
            namespace: ns.to_string(),
            filter_keys,
            index: changes.index,
            payload,
        });
    };
    for change in &changes.changes {
        match (&change.key, &change.row) {
            (_, Some(Row::Job(job))) => push(
                Topic::Job,
                job.id.clone(),
                &job.namespace,
                Vec::new(),
                EventPayload::Job(job.clone()),
                false,
            ),
            (RowKey::Job(key), None) => push(
                Topic::Job,
                key.id.to_string(),
                &key.namespace,
                Vec::new(),
                EventPayload::JobRemoved {
                    namespace: key.namespace.to_string(),
                    id: key.id.to_string(),
                },
                false,
            ),
            (_, Some(Row::Eval(eval))) => push(
                Topic::Evaluation,
                eval.id.to_string(),
                &eval.namespace,
                vec![eval.job_id.clone(), eval.deployment_id.clone()],
                EventPayload::Evaluation(eval.clone()),
                false,
            ),
            (_, Some(Row::Alloc(alloc))) => push(
                Topic::Allocation,
                alloc.id.to_string(),
                &alloc.namespace,
                vec![
                    alloc.job_id.to_string(),
                    alloc
                        .deployment_id
                        .map(|d| d.to_string())
                        .unwrap_or_default(),
                ],
                EventPayload::Allocation(alloc.clone()),
                alloc.create_index == changes.index,
            ),
            (_, Some(Row::Node(node))) => push(
                Topic::Node,
                node.id.to_string(),
                "",
                Vec::new(),
                EventPayload::Node(node.clone()),
                node.create_index == changes.index,
            ),
            (_, Some(Row::Deployment(d))) => push(
                Topic::Deployment,
                d.id.to_string(),
                &d.namespace,
                vec![d.job_id.clone()],
                EventPayload::Deployment(d.clone()),
                d.create_index == changes.index,
            ),
            (RowKey::Node(id), None) => push(
                Topic::Node,
                id.to_string(),
                "",
                Vec::new(),
                EventPayload::NodeRemoved(*id),
                false,
            ),
            _ => {}
        }
    }
    events
}

/// The selected events of one command, or `None` when none is selected.
fn select(changes: &AppliedChanges, filter: &EventFilter) -> Option<Events> {
    let events: Vec<Event> = events_of(changes)
        .into_iter()
        .filter(|e| filter.wants(e))
        .collect();
    (!events.is_empty()).then_some(Events {
        index: changes.index,
        events,
    })
}

/// The server's events as a `futures::Stream` of frames, one per applied
/// command with a selected event.
///
/// The stream needs no particular executor (it is woken by the server's
/// thread). It ends when the agent shuts down, when the server's state
/// closes, or when the reader falls so far behind that the server dropped
/// it; resume with [`EventFilter::from_index`] set past the last index
/// seen.
pub struct EventStream {
    inner: BoxStream<'static, Events>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

/// The stream's state between frames.
struct Source {
    backlog: VecDeque<Arc<AppliedChanges>>,
    receiver: mpsc::Receiver<Arc<AppliedChanges>>,
    filter: EventFilter,
    /// The agent's shutdown: the stream ends when it starts.
    shutdown: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Source {
    async fn next(&mut self) -> Option<Events> {
        loop {
            let changes = match self.backlog.pop_front() {
                Some(c) => c,
                None => {
                    let shutdown = wait_for_shutdown(self.shutdown.as_mut());
                    tokio::select! {
                        next = self.receiver.next() => next?,
                        _ = shutdown => return None,
                    }
                }
            };
            if let Some(events) = select(&changes, &self.filter) {
                return Some(events);
            }
        }
    }
}

/// Resolves once the agent starts shutting down; never without a watch.
async fn wait_for_shutdown(watch: Option<&mut tokio::sync::watch::Receiver<bool>>) {
    match watch {
        // A closed watch means the agent is gone: end as well.
        Some(w) => {
            let _ = w.wait_for(|down| *down).await;
        }
        None => std::future::pending().await,
    }
}

impl EventStream {
    /// Follows `store` from the filter's start index (or the next change).
    #[doc(hidden)]
    pub fn subscribe(
        store: &StateStore,
        filter: EventFilter,
        shutdown: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> EventStream {
        let from = filter
            .from_index
            .unwrap_or_else(|| store.latest_index() + 1);
        let subscription = store.subscribe(from);
        EventStream::from_feed(
            subscription.backlog.into(),
            subscription.receiver,
            filter,
            shutdown,
        )
    }

    /// A stream over a change feed already subscribed to (public for the
    /// HTTP API's tests, not part of the embedding contract).
    #[doc(hidden)]
    pub fn from_feed(
        backlog: VecDeque<Arc<AppliedChanges>>,
        receiver: mpsc::Receiver<Arc<AppliedChanges>>,
        filter: EventFilter,
        shutdown: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> EventStream {
        let source = Source {
            backlog,
            receiver,
            filter,
            shutdown,
        };
        let inner = futures::stream::unfold(source, |mut source| async move {
            let events = source.next().await?;
            Some((events, source))
        })
        .boxed();
        EventStream { inner }
    }
}

impl Stream for EventStream {
    type Item = Events;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Events>> {
        self.inner.poll_next_unpin(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(topic: Topic, key: &str, namespace: &str, filter_keys: &[&str]) -> Event {
        Event {
            topic,
            event_type: "X",
            key: key.into(),
            namespace: namespace.into(),
            filter_keys: filter_keys.iter().map(|k| k.to_string()).collect(),
            index: 1,
            payload: EventPayload::NodeRemoved(NodeId::nil()),
        }
    }

    #[test]
    fn filters_select_by_topic_key_filter_key_and_namespace() {
        let alloc = event(Topic::Allocation, "a1", "default", &["web", ""]);
        let other_ns = event(Topic::Allocation, "a2", "prod", &["web", ""]);
        let node = event(Topic::Node, "n1", "", &[]);
        let by_job = EventFilter::new().topic(Topic::Allocation, "web");
        assert!(by_job.wants(&alloc));
        assert!(!by_job.wants(&other_ns), "another namespace");
        assert!(!by_job.wants(&node), "another topic");
        assert!(EventFilter::new().namespace("*").wants(&other_ns));
        assert!(EventFilter::new().any_topic("n1").wants(&node));
        assert!(!EventFilter::new().topic(Topic::Node, "n2").wants(&node));

        let parsed = EventFilter::new()
            .with_query_topics("topic=Node&topic=Job:web&index=3")
            .expect("valid topics");
        assert!(parsed.wants(&node));
        let err = EventFilter::new()
            .with_query_topics("topic=Jobs:web")
            .expect_err("unknown topic");
        assert!(err.contains("\"Jobs:web\""), "{err}");
        assert!(EventFilter::new().with_query_topics("topic=Job:").is_err());
    }
}
