//! `/v1/client/allocation/:alloc_id/exec`: `nomad alloc exec`, a command
//! run beside a running task, its input and output over a websocket in
//! Nomad's framing.
//!
//! Query: `task` (required), `tty` (`true`/`false`), `command` (a JSON
//! array: program and arguments). Frames are JSON text messages, byte
//! strings in base64 as Go encodes `[]byte`:
//! in `{"stdin":{"data":".."}}`, `{"stdin":{"close":true}}`,
//! `{"tty_size":{"height":H,"width":W}}`; out `{"stdout":{"data":".."}}`,
//! `{"stderr":{"data":".."}}`, and last `{"exited":true,"result":
//! {"exit_code":N}}`, after which the socket closes.
//!
//! A request this agent cannot start (bad query, unknown allocation or
//! task, a task that is not running, a driver that cannot exec) is refused
//! with a plain HTTP error before the upgrade. A server asked for an
//! allocation another node runs opens the session on that node's agent
//! (marked as forwarded, so it goes no further) and relays the frames.
//! A client-only agent does not relay to its server: the CLI asks the
//! node's agent itself.

use super::acl_rules::{caller, denied};
use super::errors::ApiError;
use super::forward::{node_agent_address, Hop, FORWARDED_HEADER};
use super::query::QueryOptions;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::Message;
use base64::Engine;
use herder::acl::Capability;
use herder::structs::{Job, NodeStatus};
use herder_client::alloc_manager::ExecAlloc;
use herder_client::alloc_runner::persisted_alloc;
use herder_client::driver::{DriverError, ExecInput, ExecOutput, ExecRequest, ExecSession};
use herder_client::ControlError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long starting the command may take before the request fails.
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/v1/client/allocation/{id}/exec").route(web::get().to(exec)));
}

/// The query of an exec request.
#[derive(Debug, Deserialize)]
struct ExecQuery {
    #[serde(default)]
    task: String,
    #[serde(default)]
    tty: Option<String>,
    #[serde(default)]
    command: String,
}

/// A byte string of a frame (`{"data": base64}`), with stdin's `close`.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct StreamBytes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close: bool,
}

#[derive(Debug, Default, Deserialize)]
struct TtySize {
    #[serde(default)]
    height: u16,
    #[serde(default)]
    width: u16,
}

/// An input frame (Nomad's `ExecStreamingInput`).
#[derive(Debug, Default, Deserialize)]
struct InputFrame {
    #[serde(default)]
    stdin: Option<StreamBytes>,
    #[serde(default)]
    tty_size: Option<TtySize>,
}

/// Reads the query into a request and the task's name.
fn parse_query(query: &str) -> Result<(String, ExecRequest), ApiError> {
    let q: ExecQuery = serde_urlencoded::from_str(query)
        .map_err(|e| ApiError::BadRequest(format!("invalid query: {e}")))?;
    if q.task.is_empty() {
        return Err(ApiError::BadRequest("missing task name".into()));
    }
    let command: Vec<String> = serde_json::from_str(&q.command).map_err(|_| {
        ApiError::BadRequest(format!(
            "command must be a JSON array of strings, got {:?}",
            q.command
        ))
    })?;
    if command.first().is_none_or(|c| c.is_empty()) {
        return Err(ApiError::BadRequest("missing command".into()));
    }
    let tty = match q.tty.as_deref() {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "tty must be true or false, got {other:?}"
            )))
        }
    };
    Ok((q.task, ExecRequest { command, tty }))
}

async fn exec(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let _ = QueryOptions::from_request(&req)?;
    let (task, request) = parse_query(req.query_string())?;
    let unknown = || ApiError::NotFound(format!("Unknown allocation \"{id}\""));
    let alloc_id = uuid::Uuid::parse_str(&id).map_err(|_| unknown())?;
    require_node_exec(&info, &req, alloc_id, &task)?;
    let mut refusal = unknown();
    if let Some(client) = info.client.get() {
        let ask = client.agent.send(ExecAlloc {
            alloc_id,
            task,
            request,
        });
        match tokio::time::timeout(START_TIMEOUT, ask).await {
            Ok(Ok(Ok(session))) => return upgrade(&req, body, session),
            Ok(Ok(Err(ControlError::UnknownAlloc(_)))) | Ok(Err(_)) => {}
            Ok(Ok(Err(e))) => return Err(control_error(e)),
            Err(_) => refusal = ApiError::Unavailable("the command did not start in time".into()),
        }
    }
    if let Some(server) = &info.server {
        let snap = server.store.snapshot();
        let alloc = snap.alloc(&alloc_id).ok_or_else(unknown)?;
        let elsewhere = info.client.get().map(|c| c.node_id) != Some(alloc.node_id);
        if elsewhere && Hop::of(&req) != Hop::ToNode {
            let no_path = || ApiError::NotFound(format!("No path to node {}", alloc.node_id));
            let node = snap.node(&alloc.node_id).ok_or_else(no_path)?;
            if node.status == NodeStatus::Down {
                return Err(no_path());
            }
            let address = node_agent_address(node).ok_or_else(no_path)?;
            return relay_to_node(&req, body, &address, alloc_id).await;
        }
    }
    Err(refusal)
}

/// Nomad's rule for `alloc exec`: a task whose driver does not isolate
/// its filesystem (`raw_exec`, `mock`) runs the command on the host
/// itself, so the token needs `alloc-node-exec` in the allocation's
/// namespace besides the route's `alloc-exec`. Decided where the
/// allocation's job is known (this agent's own allocation, else a
/// server's state); an allocation known to neither is the handler's 404,
/// and a relayed session is checked again by the node's agent.
fn require_node_exec(
    info: &AgentInfo,
    req: &HttpRequest,
    alloc_id: uuid::Uuid,
    task: &str,
) -> Result<(), ApiError> {
    let Some(caller) = caller(req) else {
        return Ok(()); // ACLs off
    };
    if caller.acl.is_management() {
        return Ok(());
    }
    let local = persisted_alloc(&info.data_dir, &alloc_id).ok().flatten();
    let found = match local {
        Some((alloc, job)) => {
            task_driver(&job, &alloc.task_group, task).map(|d| (alloc.namespace, d))
        }
        None => info.server.as_ref().and_then(|server| {
            let snap = server.store.snapshot();
            let alloc = snap.alloc(&alloc_id)?;
            let job = snap.job_by_version(&alloc.namespace, &alloc.job_id, alloc.job_version)?;
            task_driver(job, &alloc.task_group, task).map(|d| (alloc.namespace.clone(), d))
        }),
    };
    match found {
        Some((namespace, driver))
            if !isolates_filesystem(&driver)
                && !caller
                    .acl
                    .allow_namespace_op(&namespace, Capability::AllocNodeExec) =>
        {
            Err(denied())
        }
        _ => Ok(()),
    }
}

fn task_driver(job: &Job, group: &str, task: &str) -> Option<String> {
    let group = job.task_groups.iter().find(|g| g.name == group)?;
    let task = group.tasks.iter().find(|t| t.name == task)?;
    Some(task.driver.clone())
}

/// Whether a driver runs its tasks in a filesystem of their own: only
/// `exec` (a chroot) among herder's.
fn isolates_filesystem(driver: &str) -> bool {
    driver == "exec"
}

fn control_error(e: ControlError) -> ApiError {
    let text = e.to_string();
    match e {
        ControlError::UnknownAlloc(_) | ControlError::UnknownTask(_) => ApiError::NotFound(text),
        ControlError::Driver(DriverError::Node(_)) => ApiError::Internal(text),
        _ => ApiError::BadRequest(text),
    }
}

/// Opens the same session on the agent at `address` (the node's) and
/// relays frames both ways until either side ends it. The node's refusal
/// comes back with its status.
async fn relay_to_node(
    req: &HttpRequest,
    body: web::Payload,
    address: &str,
    alloc_id: uuid::Uuid,
) -> Result<HttpResponse, ApiError> {
    let url = format!(
        "ws://{address}/v1/client/allocation/{alloc_id}/exec?{}",
        req.query_string()
    );
    let mut request = awc::Client::new()
        .ws(url)
        .set_header(FORWARDED_HEADER, "node");
    let token = super::acl_rules::request_secret(req);
    if !token.is_empty() {
        request = request.set_header("X-Nomad-Token", token);
    }
    let (_, upstream) = request.connect().await.map_err(|e| match e {
        awc::error::WsClientError::InvalidResponseStatus(status) => {
            let text = format!("the node's agent at {address} refused the exec session ({status})");
            match status.as_u16() {
                404 => ApiError::NotFound(text),
                400..=499 => ApiError::BadRequest(text),
                _ => ApiError::Internal(text),
            }
        }
        other => ApiError::Unavailable(format!("reaching the node's agent at {address}: {other}")),
    })?;
    let (response, socket, stream) = actix_ws::handle(req, body)
        .map_err(|e| ApiError::BadRequest(format!("a websocket upgrade is required: {e}")))?;
    actix_rt::spawn(relay(upstream, socket, stream));
    Ok(response)
}

/// Copies frames between the user's socket and the node's until one ends.
async fn relay(
    upstream: actix_codec::Framed<awc::BoxedSocket, awc::ws::Codec>,
    mut socket: actix_ws::Session,
    mut stream: actix_ws::MessageStream,
) {
    use awc::ws::{Frame, Message as Up};
    use futures::{SinkExt, StreamExt};
    let (mut to_node, mut from_node) = upstream.split();
    loop {
        tokio::select! {
            frame = stream.recv() => {
                let sent = match frame {
                    Some(Ok(Message::Text(t))) => to_node.send(Up::Text(t)).await,
                    Some(Ok(Message::Binary(b))) => to_node.send(Up::Binary(b)).await,
                    Some(Ok(Message::Ping(p))) => {
                        let _ = socket.pong(&p).await;
                        Ok(())
                    }
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                    Some(Ok(_)) => Ok(()),
                };
                if sent.is_err() {
                    break;
                }
            }
            frame = from_node.next() => {
                let sent = match frame {
                    Some(Ok(Frame::Text(t))) => {
                        socket.text(String::from_utf8_lossy(&t).into_owned()).await
                    }
                    Some(Ok(Frame::Binary(b))) => socket.binary(b).await,
                    Some(Ok(Frame::Ping(p))) => {
                        let _ = to_node.send(Up::Pong(p)).await;
                        Ok(())
                    }
                    // Answered, so the node's agent can let the
                    // connection go at once.
                    Some(Ok(Frame::Close(reason))) => {
                        let _ = to_node.send(Up::Close(reason)).await;
                        break;
                    }
                    Some(Err(_)) | None => break,
                    Some(Ok(_)) => Ok(()),
                };
                if sent.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to_node.send(Up::Close(None)).await;
    let _ = to_node.close().await;
    let _ = socket.close(None).await;
}

/// Upgrades to a websocket that carries `session` until the command
/// exits or the user goes away (which kills the command).
fn upgrade(
    req: &HttpRequest,
    body: web::Payload,
    session: ExecSession,
) -> Result<HttpResponse, ApiError> {
    let (response, socket, stream) = actix_ws::handle(req, body)
        .map_err(|e| ApiError::BadRequest(format!("a websocket upgrade is required: {e}")))?;
    actix_rt::spawn(carry(session, socket, stream));
    Ok(response)
}

async fn carry(
    mut exec: ExecSession,
    mut socket: actix_ws::Session,
    mut stream: actix_ws::MessageStream,
) {
    loop {
        tokio::select! {
            frame = stream.recv() => {
                let text = match frame {
                    Some(Ok(Message::Text(t))) => t.to_string(),
                    Some(Ok(Message::Binary(b))) => String::from_utf8_lossy(&b).into_owned(),
                    Some(Ok(Message::Ping(p))) => {
                        let _ = socket.pong(&p).await;
                        continue;
                    }
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                    Some(Ok(_)) => continue,
                };
                for input in decode_input(&text) {
                    if exec.input.send(input).await.is_err() {
                        break;
                    }
                }
            }
            output = exec.output.recv() => {
                let Some(output) = output else { break };
                let exited = matches!(output, ExecOutput::Exited(_));
                if socket.text(encode_output(&output).to_string()).await.is_err() {
                    break;
                }
                if exited {
                    break;
                }
            }
        }
    }
    let _ = socket.close(None).await;
}

/// The inputs one frame carries; a frame that is not one is ignored, as
/// Nomad's agent skips what it cannot decode.
fn decode_input(text: &str) -> Vec<ExecInput> {
    let Ok(frame) = serde_json::from_str::<InputFrame>(text) else {
        return Vec::new();
    };
    let mut inputs = Vec::new();
    if let Some(stdin) = frame.stdin {
        if let Some(data) = stdin.data.filter(|d| !d.is_empty()) {
            if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) {
                inputs.push(ExecInput::Stdin(bytes));
            }
        }
        if stdin.close {
            inputs.push(ExecInput::CloseStdin);
        }
    }
    if let Some(size) = frame.tty_size {
        inputs.push(ExecInput::Resize {
            height: size.height,
            width: size.width,
        });
    }
    inputs
}

fn encode_output(output: &ExecOutput) -> serde_json::Value {
    let data = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    match output {
        ExecOutput::Stdout(b) => serde_json::json!({"stdout": {"data": data(b)}}),
        ExecOutput::Stderr(b) => serde_json::json!({"stderr": {"data": data(b)}}),
        ExecOutput::Exited(r) => {
            serde_json::json!({"exited": true, "result": {"exit_code": r.exit_code}})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_read_as_nomads_cli_sends_them() {
        let (task, r) =
            parse_query("task=web&tty=true&command=%5B%22%2Fbin%2Fsh%22%2C%22-c%22%2C%22ls%22%5D")
                .unwrap();
        assert_eq!(task, "web");
        assert!(r.tty);
        assert_eq!(r.command, ["/bin/sh", "-c", "ls"]);
        let refused = |q: &str| parse_query(q).unwrap_err().to_string();
        assert!(refused("command=%5B%22ls%22%5D").contains("missing task"));
        assert!(refused("task=web&command=ls").contains("JSON array"));
        assert!(refused("task=web&command=%5B%5D").contains("missing command"));
        assert!(refused("task=web&tty=maybe&command=%5B%22ls%22%5D").contains("tty"));
    }

    #[test]
    fn frames_decode_and_encode_in_nomads_shapes() {
        assert_eq!(
            decode_input(r#"{"stdin":{"data":"aGkK"}}"#),
            vec![ExecInput::Stdin(b"hi\n".to_vec())]
        );
        assert_eq!(
            decode_input(r#"{"stdin":{"close":true}}"#),
            vec![ExecInput::CloseStdin]
        );
        assert_eq!(
            decode_input(r#"{"tty_size":{"height":40,"width":120}}"#),
            vec![ExecInput::Resize {
                height: 40,
                width: 120
            }]
        );
        assert!(decode_input("not json").is_empty());
        assert_eq!(
            encode_output(&ExecOutput::Stderr(b"x".to_vec())),
            serde_json::json!({"stderr": {"data": "eA=="}})
        );
        let exited = ExecOutput::Exited(herder_client::driver::ExitResult {
            exit_code: 3,
            ..Default::default()
        });
        assert_eq!(
            encode_output(&exited),
            serde_json::json!({"exited": true, "result": {"exit_code": 3}})
        );
    }
}
