//! `GET /v1/client/fs/logs/{alloc_id}`: a task's stdout or stderr, served
//! by the agent whose client runs the allocation (registered only on
//! agents that run a client).
//!
//! Parameters are Nomad's: `task` and `type` (`stdout`/`stderr`) are
//! required; `offset` bytes from `origin` (`start`, the default, or `end`)
//! say where reading begins, across the rotated files as one stream;
//! `follow=true` keeps streaming new output until the task is dead and its
//! log drained (or the caller hangs up). The answer is a stream of Nomad's
//! `StreamFrame`s, one JSON object per line, `{"Offset": <where Data ends in
//! File>, "Data": "<base64>", "File": "alloc/logs/web.stdout.0"}`, with `{}`
//! heartbeats while following (one also marks the moment the backlog has
//! been sent); `plain=true` streams the raw bytes instead.
//!
//! The client's state is read from its data dir (the allocation runners
//! persist each allocation with its job and task states), so this route
//! needs no handle on the client actors. A request for an allocation this
//! agent's client does not keep is routed as Nomad routes it
//! (`alloc_routing`): a server sends it on to the agent of the node that
//! runs it, a client-only agent to its server.

use super::alloc_routing::{alloc_route, path_and_query, unknown_alloc, Route};
use super::errors::ApiError;
use super::eval_alloc_routes::parse_id;
use super::forward::forward_stream;
use super::query::QueryOptions;
use super::stream_frame::{StreamFrame, FRAME_BYTES};
use crate::AgentInfo;
use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use herder::structs::{AllocId, Allocation, Job};
use herder_client::alloc_runner::persisted_alloc;
use herder_client::logs::{
    log_file_name, log_indices, position_of, read_segment, LogKind, LogPosition, Origin,
};
use herder_client::task_dir::{log_dir, AllocDir};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often a follower looks for new output.
const FOLLOW_POLL: Duration = Duration::from_millis(250);
/// An idle follower sends `{}` this often, so a dead connection is noticed.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How long a forwarded request may wait for the other agent's first bytes.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// After the task is seen dead, output still in flight (the client drains
/// the task's pipe after it exits) is waited for this long.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/client/fs/logs/{alloc_id}", web::get().to(logs));
}

/// What a logs request asks for.
#[derive(Debug)]
struct LogsRequest {
    task: String,
    kind: LogKind,
    follow: bool,
    plain: bool,
    offset: u64,
    origin: Origin,
}

impl LogsRequest {
    /// Reads and checks the parameters, with Nomad's messages.
    fn parse(q: &QueryOptions) -> Result<LogsRequest, ApiError> {
        let task = q
            .param("task")
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ApiError::BadRequest("must provide task name".into()))?
            .to_string();
        let follow = q.flag("follow")?;
        let plain = q.flag("plain")?;
        let kind = q
            .param("type")
            .and_then(LogKind::parse)
            .ok_or_else(|| ApiError::BadRequest("must provide log type (stdout/stderr)".into()))?;
        let offset = match q.param("offset").filter(|o| !o.is_empty()) {
            None => 0,
            Some(o) => o
                .parse()
                .map_err(|e| ApiError::BadRequest(format!("error parsing offset: {o:?}: {e}")))?,
        };
        let origin = match q.param("origin") {
            None | Some("" | "start") => Origin::Start,
            Some("end") => Origin::End,
            Some(_) => return Err(ApiError::BadRequest("origin must be start or end".into())),
        };
        Ok(LogsRequest {
            task,
            kind,
            follow,
            plain,
            offset,
            origin,
        })
    }
}

async fn logs(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    alloc_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = parse_id(&alloc_id, "allocation")?;
    let q = QueryOptions::from_request(&req)?;
    let request = LogsRequest::parse(&q)?;
    let content_type = if request.plain {
        "text/plain; charset=utf-8"
    } else {
        "application/json"
    };
    let (alloc, job) = match local_alloc(&info, &req, &id)? {
        Ok(found) => found,
        Err(Route::There { address, hop }) => {
            let path = path_and_query(&req);
            return forward_stream(&req, &address, hop, &path, content_type, FORWARD_TIMEOUT).await;
        }
        Err(Route::Here) => return Err(unknown_alloc(&id.to_string())),
    };
    check_task(&info, &alloc, &job, &request)?;

    let alloc_dir = AllocDir::new(&info.data_dir, &id).root;
    let start = position_of(
        &alloc_dir,
        &request.task,
        request.kind,
        request.offset,
        request.origin,
    )
    .map_err(|e| ApiError::Internal(format!("reading the {} log: {e}", request.kind.as_str())))?;
    let stream = LogStream {
        data_dir: info.data_dir.clone(),
        alloc_id: id,
        log_dir: log_dir(&alloc_dir),
        task: request.task,
        kind: request.kind,
        pos: start,
        follow: request.follow,
        plain: request.plain,
        caught_up: false,
        last_sent: Instant::now(),
        dead_since: None,
    };
    // A follow ends when the agent starts shutting down: it would hold the
    // HTTP server's graceful stop for its whole timeout otherwise.
    let mut shutting_down = info.shutting_down.subscribe();
    let body = futures::stream::unfold(stream, |mut s| async move {
        s.next_chunk()
            .await
            .map(|chunk| (Ok::<_, ApiError>(chunk), s))
    })
    .take_until(async move {
        let _ = shutting_down.wait_for(|down| *down).await;
    });
    Ok(HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("Cache-Control", "no-store"))
        .streaming(body))
}

/// The allocation as this node's client keeps it, or, when it does not,
/// where the request goes instead (`alloc_routing`).
fn local_alloc(
    info: &AgentInfo,
    req: &HttpRequest,
    id: &AllocId,
) -> Result<Result<(Allocation, Job), Route>, ApiError> {
    let local = persisted_alloc(&info.data_dir, id)
        .map_err(|e| ApiError::Internal(format!("reading allocation {id}: {e}")))?;
    match local {
        Some(found) => Ok(Ok(found)),
        None => Ok(Err(alloc_route(info, req, id, false, |_| Ok(()))?)),
    }
}

/// The task must be one of the allocation's and have started (or left
/// output behind), as Nomad requires.
fn check_task(
    info: &AgentInfo,
    alloc: &Allocation,
    job: &Job,
    request: &LogsRequest,
) -> Result<(), ApiError> {
    let group = job
        .lookup_task_group(&alloc.task_group)
        .ok_or_else(|| ApiError::Internal("Failed to lookup task group for allocation".into()))?;
    if !group.tasks.iter().any(|t| t.name == request.task) {
        return Err(ApiError::NotFound(format!(
            "task group {:?} does not have task with name {:?}",
            alloc.task_group, request.task
        )));
    }
    let started = alloc
        .task_states
        .get(&request.task)
        .is_some_and(|s| s.started_at.is_some());
    let dir = log_dir(&AllocDir::new(&info.data_dir, &alloc.id).root);
    let has_logs = log_indices(&dir, &request.task, request.kind)
        .map(|i| !i.is_empty())
        .unwrap_or(false);
    if !started && !has_logs {
        return Err(ApiError::NotFound(format!(
            "task {:?} not started yet. No logs available",
            request.task
        )));
    }
    Ok(())
}

/// One reader of one task log, producing the response body piece by piece.
struct LogStream {
    data_dir: PathBuf,
    alloc_id: AllocId,
    log_dir: PathBuf,
    task: String,
    kind: LogKind,
    pos: LogPosition,
    follow: bool,
    plain: bool,
    /// A heartbeat went out once the backlog was sent.
    caught_up: bool,
    last_sent: Instant,
    /// When the task was first seen dead (or its allocation gone).
    dead_since: Option<Instant>,
}

impl LogStream {
    /// The next piece of the body, `None` at its end.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            let segment = match read_segment(
                &self.log_dir,
                &self.task,
                self.kind,
                self.pos,
                FRAME_BYTES,
            ) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(alloc = %self.alloc_id, task = %self.task, error = %e, "reading a task log");
                    return None;
                }
            };
            self.pos = segment.next;
            if !segment.data.is_empty() {
                return Some(self.data_chunk(segment.index, segment.data));
            }
            if !self.follow {
                return None;
            }
            if !self.caught_up {
                self.caught_up = true;
                if !self.plain {
                    return Some(self.heartbeat());
                }
            }
            match self.dead_since {
                Some(t) if t.elapsed() >= DRAIN_GRACE => return None,
                Some(_) => {}
                None => {
                    if self.task_over() {
                        self.dead_since = Some(Instant::now());
                    }
                }
            }
            tokio::time::sleep(FOLLOW_POLL).await;
            if !self.plain && self.last_sent.elapsed() >= HEARTBEAT_EVERY {
                return Some(self.heartbeat());
            }
        }
    }

    fn data_chunk(&mut self, index: u32, data: Vec<u8>) -> Bytes {
        self.last_sent = Instant::now();
        if self.plain {
            return Bytes::from(data);
        }
        StreamFrame::data(
            log_file_name(&self.task, self.kind, index),
            &data,
            self.pos.offset,
        )
        .encode()
    }

    fn heartbeat(&mut self) -> Bytes {
        self.last_sent = Instant::now();
        StreamFrame::default().encode()
    }

    /// The task will write no more: it is dead, or its allocation is gone
    /// from this node.
    fn task_over(&self) -> bool {
        match persisted_alloc(&self.data_dir, &self.alloc_id) {
            Ok(Some((alloc, _))) => alloc
                .task_states
                .get(&self.task)
                .is_some_and(|s| s.state == herder_client::task_runner::task_state::DEAD),
            Ok(None) => true,
            // A file being replaced can be read half-written on some file
            // systems; the next poll looks again.
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody;
    use actix_web::{test as web_test, App};
    use herder::state::{fixtures, Command, PlanResults};
    use herder::structs::{NodeStatus, TaskState, TriggeredBy};
    use herder_common::config::{AgentConfig, ConfigSources, FlagOverrides};
    use std::sync::Arc;

    fn parse(query: &str) -> Result<LogsRequest, String> {
        let req = actix_web::test::TestRequest::get()
            .uri(&format!("/v1/client/fs/logs/x?{query}"))
            .to_http_request();
        let q = QueryOptions::from_request(&req).map_err(|e| e.to_string())?;
        LogsRequest::parse(&q).map_err(|e| e.to_string())
    }

    #[test]
    fn parameters_are_checked_with_nomads_messages() {
        assert_eq!(parse("type=stdout").unwrap_err(), "must provide task name");
        assert_eq!(
            parse("task=web").unwrap_err(),
            "must provide log type (stdout/stderr)"
        );
        assert_eq!(
            parse("task=web&type=stdin").unwrap_err(),
            "must provide log type (stdout/stderr)"
        );
        assert_eq!(
            parse("task=web&type=stderr&origin=middle").unwrap_err(),
            "origin must be start or end"
        );
        assert!(parse("task=web&type=stderr&offset=-3")
            .unwrap_err()
            .contains("error parsing offset"));
        let r = parse("task=web&type=stderr&follow=true&plain=1&offset=12&origin=end").unwrap();
        assert_eq!(r.task, "web");
        assert_eq!(r.kind, LogKind::Stderr);
        assert!(r.follow && r.plain);
        assert_eq!((r.offset, r.origin), (12, Origin::End));
        let d = parse("task=web&type=stdout").unwrap();
        assert!(!d.follow && !d.plain);
        assert_eq!((d.offset, d.origin), (0, Origin::Start));
    }

    /// A server agent whose store holds one job with an allocation on this
    /// node (persisted by its runner, with a log) and one on another node.
    struct Fixture {
        info: Arc<AgentInfo>,
        server: herder_server::server::Server,
        local: Allocation,
        remote: Allocation,
        _dir: tempfile::TempDir,
    }

    async fn fixture(task_state: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mut flags = FlagOverrides::default();
        flags.server.insert("enabled".into(), true.into());
        flags.server.insert("num_schedulers".into(), 0.into());
        flags.data_dir = Some(dir.path().to_path_buf());
        let config = AgentConfig::load(&ConfigSources {
            env: Some(Vec::new()),
            flags,
            ..Default::default()
        })
        .unwrap();
        let server = herder_server::server::Server::start(&config, dir.path())
            .await
            .unwrap();
        let store = server.handle().store.clone();
        let (mut here, mut there) = (fixtures::node("here"), fixtures::node("there"));
        for node in [&mut here, &mut there] {
            node.status = NodeStatus::Ready;
            store
                .apply(Command::NodeRegister {
                    node: Arc::new(node.clone()),
                })
                .unwrap();
        }
        let mut job = fixtures::job("default", "web", &[("g", 2)]);
        job.canonicalize();
        let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
        store
            .apply(Command::JobRegister {
                job: Arc::new(job.clone()),
                eval: Some(eval.clone()),
                enforce_index: None,
            })
            .unwrap();
        let builder = fixtures::AllocBuilder::new(&job, "g");
        let mut local = builder.build(0, here.id, eval.id, 1);
        let remote = builder.build(1, there.id, eval.id, 1);
        let mut node_allocation = std::collections::HashMap::new();
        node_allocation.insert(here.id, vec![local.clone()]);
        node_allocation.insert(there.id, vec![remote.clone()]);
        store
            .apply(Command::ApplyPlanResults(PlanResults {
                eval_id: eval.id,
                job: Some(Arc::new(job.clone())),
                node_allocation,
                updated_at: 1,
                ..Default::default()
            }))
            .unwrap();

        // What the client keeps: its node ID, the runner's copy, the log.
        std::fs::create_dir_all(dir.path().join("client")).unwrap();
        std::fs::write(dir.path().join("client/node-id"), here.id.to_string()).unwrap();
        local.task_states.insert(
            "main".into(),
            TaskState {
                state: task_state.into(),
                started_at: Some(1),
                ..Default::default()
            },
        );
        let root = AllocDir::new(dir.path(), &local.id).root;
        std::fs::create_dir_all(log_dir(&root)).unwrap();
        std::fs::write(log_dir(&root).join("main.stdout.0"), "hello\n").unwrap();
        std::fs::write(
            root.join(herder_client::alloc_runner::ALLOC_STATE_FILE),
            serde_json::to_vec(&serde_json::json!({ "alloc": local, "job": job })).unwrap(),
        )
        .unwrap();
        let info = Arc::new(AgentInfo {
            config,
            data_dir: dir.path().to_path_buf(),
            started_at: std::time::SystemTime::now(),
            http_addr: std::sync::OnceLock::new(),
            server: Some(server.handle().clone()),
            client_node_id: std::sync::OnceLock::new(),
            shutting_down: tokio::sync::watch::Sender::new(false),
            nomad_metrics: server.handle().nomad_metrics.clone(),
            client: std::sync::OnceLock::new(),
            own_server: std::sync::OnceLock::new(),
        });
        Fixture {
            info,
            server,
            local,
            remote,
            _dir: dir,
        }
    }

    async fn call(f: &Fixture, uri: &str) -> (u16, String) {
        let app = web_test::init_service(
            App::new()
                .app_data(web::Data::from(f.info.clone()))
                .configure(configure),
        )
        .await;
        let resp =
            web_test::call_service(&app, web_test::TestRequest::get().uri(uri).to_request()).await;
        let status = resp.status().as_u16();
        let body = web_test::read_body(resp).await;
        (status, String::from_utf8_lossy(&body).to_string())
    }

    #[actix_rt::test]
    async fn serves_this_nodes_allocations_and_names_the_node_of_others() {
        let f = fixture("dead").await;
        let (code, body) = call(
            &f,
            &format!("/v1/client/fs/logs/{}?task=main&type=stdout", f.remote.id),
        )
        .await;
        assert_eq!(
            (code, body),
            (404, format!("No path to node {}", f.remote.node_id))
        );
        let unknown = herder::structs::new_id();
        let (code, body) = call(
            &f,
            &format!("/v1/client/fs/logs/{unknown}?task=main&type=stdout"),
        )
        .await;
        assert_eq!(
            (code, body),
            (404, format!("Unknown allocation \"{unknown}\""))
        );

        let local = f.local.id;
        let (code, body) = call(
            &f,
            &format!("/v1/client/fs/logs/{local}?task=main&type=stdout"),
        )
        .await;
        assert_eq!(code, 200);
        assert_eq!(
            body,
            "{\"Offset\":6,\"Data\":\"aGVsbG8K\",\"File\":\"alloc/logs/main.stdout.0\"}\n"
        );
        // Following a dead task: the backlog, the caught-up heartbeat, end.
        let (code, body) = call(
            &f,
            &format!("/v1/client/fs/logs/{local}?task=main&type=stdout&follow=true&plain=true"),
        )
        .await;
        assert_eq!((code, body.as_str()), (200, "hello\n"));
        let (code, body) = call(
            &f,
            &format!("/v1/client/fs/logs/{local}?task=other&type=stdout"),
        )
        .await;
        assert_eq!(code, 404, "{body}");
        f.server.stop().await;
    }

    /// The next piece of a streamed body, waiting at most 20 s.
    async fn next_frame<B>(body: &mut B) -> String
    where
        B: MessageBody + Unpin,
        B::Error: std::fmt::Debug,
    {
        let chunk = tokio::time::timeout(
            Duration::from_secs(20),
            futures::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_next(cx)),
        )
        .await
        .expect("a frame within 20 s")
        .expect("the stream goes on")
        .unwrap();
        String::from_utf8(chunk.to_vec()).unwrap()
    }

    #[actix_rt::test]
    async fn a_running_tasks_follower_gets_new_output_and_heartbeats() {
        let f = fixture("running").await;
        let app = web_test::init_service(
            App::new()
                .app_data(web::Data::from(f.info.clone()))
                .configure(configure),
        )
        .await;
        let uri = format!(
            "/v1/client/fs/logs/{}?task=main&type=stdout&follow=true&origin=end&offset=0",
            f.local.id
        );
        let resp =
            web_test::call_service(&app, web_test::TestRequest::get().uri(&uri).to_request()).await;
        assert_eq!(resp.status().as_u16(), 200);
        let mut body = resp.into_body();
        assert_eq!(next_frame(&mut body).await, "{}\n");
        drop(body);
        f.server.stop().await;
    }
}
