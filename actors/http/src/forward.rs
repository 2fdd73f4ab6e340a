//! Forwarding a request to the agent that can answer it, as Nomad's agents
//! forward client RPCs: a server hands a user's restart or signal to the
//! agent of the node that runs the allocation (its `HTTPAddr`), and a
//! client-only agent hands what only a server answers to its server.
//!
//! The request goes out through the CLI's blocking HTTP client
//! ([`ApiClient`], ureq) on the blocking pool, with the caller's token and a
//! timeout, and the other agent's status and body come back as this
//! agent's answer. Each forwarded request carries [`FORWARDED_HEADER`],
//! saying how far it came, so it is forwarded at most twice (client-only
//! agent to server, server to node) and never in a loop. With `tls.http`
//! it goes over HTTPS with this agent's certificate, accepting any agent
//! the CA signed (the other end may be a server or a client).

use super::errors::ApiError;
use super::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::structs::Node;
use herder_api_client::{self as api_client, ApiClient, ClientConfig};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// Marks a forwarded request; the value says who sent it.
pub const FORWARDED_HEADER: &str = "X-Herder-Forwarded";

/// How far a request has travelled, from its [`FORWARDED_HEADER`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hop {
    /// Straight from the user.
    Direct,
    /// From a client-only agent to its server: the server may still hand
    /// it to a node's agent.
    ToServer,
    /// From a server to a node's agent: answered there, never forwarded.
    ToNode,
}

impl Hop {
    pub fn of(req: &HttpRequest) -> Hop {
        match req
            .headers()
            .get(FORWARDED_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            None => Hop::Direct,
            Some("server") => Hop::ToServer,
            // Any other mark (a newer agent's) is taken as the last hop.
            Some(_) => Hop::ToNode,
        }
    }

    fn header_value(self) -> &'static str {
        match self {
            Hop::Direct => "",
            Hop::ToServer => "server",
            Hop::ToNode => "node",
        }
    }
}

/// Sends `body` as a `PUT` of `path` to the agent at `address`, marked as
/// the `hop` it makes, and answers with that agent's status and body. The
/// whole exchange is bounded by `timeout` (504 past it); an agent that
/// cannot be reached is a 502 naming it.
pub async fn forward(
    req: &HttpRequest,
    address: &str,
    hop: Hop,
    path: &str,
    body: &Value,
    timeout: Duration,
) -> Result<HttpResponse, ApiError> {
    let (path_owned, body) = (path.to_string(), body.clone());
    let call = move |client: ApiClient| client.put(&path_owned, &[], &body);
    forward_call(req, address, hop, path, timeout, call).await
}

/// As [`forward`], for a read: the request goes on as a `GET`.
pub async fn forward_get(
    req: &HttpRequest,
    address: &str,
    hop: Hop,
    path: &str,
    timeout: Duration,
) -> Result<HttpResponse, ApiError> {
    let path_owned = path.to_string();
    let call = move |client: ApiClient| client.get(&path_owned, &[]);
    forward_call(req, address, hop, path, timeout, call).await
}

/// The TLS this agent speaks to other agents' HTTP APIs with (its own
/// `[tls]`: the CA's signature checked, its certificate presented), when
/// `tls.http` is set.
fn agents_tls(req: &HttpRequest) -> Result<Option<Arc<rustls::ClientConfig>>, ApiError> {
    let Some(info) = req.app_data::<web::Data<AgentInfo>>() else {
        return Ok(None);
    };
    info.config
        .tls
        .agents_client()
        .map_err(|e| ApiError::Internal(format!("cannot forward the request: {e}")))
}

/// Sends `call` to the agent at `address` with the user's token and the
/// hop, and answers with that agent's status and body.
async fn forward_call(
    req: &HttpRequest,
    address: &str,
    hop: Hop,
    path: &str,
    timeout: Duration,
    call: impl FnOnce(ApiClient) -> Result<api_client::Answer, api_client::ApiError> + Send + 'static,
) -> Result<HttpResponse, ApiError> {
    let client = client_for(req, address, hop, timeout)?;
    let call = web::block(move || call(client));
    // ureq's own timeout ends the call; this one only guards the pool.
    let outcome = tokio::time::timeout(timeout + Duration::from_secs(5), call).await;
    let answer = match outcome {
        Err(_) => {
            return Err(ApiError::GatewayTimeout(format!(
                "the agent at {address} did not answer {path} within {timeout:?}"
            )))
        }
        Ok(Err(e)) => return Err(ApiError::Internal(format!("forwarding failed: {e}"))),
        Ok(Ok(answer)) => answer,
    };
    match answer {
        Err(e) => Err(answer_error(address, path, e)),
        Ok(answer) => {
            let mut response = HttpResponse::Ok();
            if answer.index > 0 {
                response.insert_header(("X-Nomad-Index", answer.index.to_string()));
            }
            if answer.body.is_null() {
                return Ok(response.finish());
            }
            Ok(response.json(answer.body))
        }
    }
}

/// A client for the agent at `address`, carrying the user's token and
/// the hop.
fn client_for(
    req: &HttpRequest,
    address: &str,
    hop: Hop,
    timeout: Duration,
) -> Result<ApiClient, ApiError> {
    // `X-Nomad-Token` or `Authorization: Bearer`: the next agent checks it
    // again (under ACLs, a node's agent resolves it through a server).
    let token = Some(super::acl_rules::request_secret(req)).filter(|t| !t.is_empty());
    let tls = agents_tls(req)?;
    let address = match &tls {
        Some(_) if !address.contains("://") => format!("https://{address}"),
        _ => address.to_string(),
    };
    let client = ApiClient::new(ClientConfig { address, token })
        .map_err(|e| ApiError::BadGateway(format!("cannot forward the request: {e}")))?
        .with_timeout(timeout)
        .with_header(FORWARDED_HEADER, hop.header_value());
    Ok(match tls {
        Some(tls) => client.with_tls(tls),
        None => client,
    })
}

/// The other agent's error as this agent's answer: its status and text as
/// they came, or 502 when it could not be reached or made no sense.
fn answer_error(address: &str, path: &str, e: api_client::ApiError) -> ApiError {
    match e {
        api_client::ApiError::Status { status, body, .. } => ApiError::Forwarded { status, body },
        e @ api_client::ApiError::Unreachable { .. } => ApiError::BadGateway(format!(
            "cannot reach the agent at {address}: {}",
            e.to_string().lines().next().unwrap_or_default()
        )),
        e => ApiError::BadGateway(format!(
            "the agent at {address} answered {path} with what is not JSON: {e}"
        )),
    }
}

/// As [`forward_get`], for an answer that is a stream (a file or a log,
/// followed or not): the other agent's bytes are passed on as they
/// arrive, as `content_type`, until it ends the stream or the caller
/// hangs up. Only getting the answer's head is bounded by `timeout`.
pub async fn forward_stream(
    req: &HttpRequest,
    address: &str,
    hop: Hop,
    path: &str,
    content_type: &'static str,
    timeout: Duration,
) -> Result<HttpResponse, ApiError> {
    let client = client_for(req, address, hop, timeout)?;
    let path_owned = path.to_string();
    let open = web::block(move || client.get_stream(&path_owned, &[]));
    let reader = match tokio::time::timeout(timeout, open).await {
        Err(_) => {
            return Err(ApiError::GatewayTimeout(format!(
                "the agent at {address} did not answer {path} within {timeout:?}"
            )))
        }
        Ok(Err(e)) => return Err(ApiError::Internal(format!("forwarding failed: {e}"))),
        Ok(Ok(Err(e))) => return Err(answer_error(address, path, e)),
        Ok(Ok(Ok(reader))) => reader,
    };
    // A thread of its own per stream: a followed stream may wait long
    // between pieces and must not hold one of the blocking pool's threads.
    let (tx, rx) = tokio::sync::mpsc::channel::<actix_web::web::Bytes>(8);
    std::thread::spawn(move || pump(reader, tx));
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, ApiError>(b), rx))
    });
    Ok(HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("Cache-Control", "no-store"))
        .streaming(body))
}

/// Copies `reader` into `tx` until either side ends.
fn pump(
    mut reader: Box<dyn std::io::Read + Send + Sync>,
    tx: tokio::sync::mpsc::Sender<actix_web::web::Bytes>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let chunk = actix_web::web::Bytes::copy_from_slice(&buf[..n]);
                if tx.blocking_send(chunk).is_err() {
                    return;
                }
            }
        }
    }
}

/// Where a node's agent answers HTTP: its `HTTPAddr`, with an address
/// bound on every interface (`0.0.0.0`) replaced by the node's own IP (or
/// loopback when it reports none). `None` when it advertises no port.
pub fn node_agent_address(node: &Node) -> Option<String> {
    if let Ok(addr) = node.http_addr.parse::<SocketAddr>() {
        if addr.port() == 0 {
            return None;
        }
        if !addr.ip().is_unspecified() {
            return Some(addr.to_string());
        }
        let ip = node
            .network_ip()
            .parse::<IpAddr>()
            .ok()
            .filter(|ip| !ip.is_unspecified())
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        return Some(SocketAddr::new(ip, addr.port()).to_string());
    }
    // A host name and port.
    let (host, port) = node.http_addr.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    (!host.is_empty()).then(|| format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_agent_is_found_at_its_http_addr() {
        let node = |addr: &str| Node {
            http_addr: addr.into(),
            ..Default::default()
        };
        assert_eq!(
            node_agent_address(&node("10.0.0.5:4646")).as_deref(),
            Some("10.0.0.5:4646")
        );
        assert_eq!(
            node_agent_address(&node("[::1]:4646")).as_deref(),
            Some("[::1]:4646")
        );
        assert_eq!(node_agent_address(&node("10.0.0.5:0")), None);
        assert_eq!(node_agent_address(&node("")), None);
        assert_eq!(
            node_agent_address(&node("box.example:4646")).as_deref(),
            Some("box.example:4646")
        );
        let mut wildcard = node("0.0.0.0:4646");
        assert_eq!(
            node_agent_address(&wildcard).as_deref(),
            Some("127.0.0.1:4646")
        );
        wildcard
            .attributes
            .insert("unique.network.ip-address".into(), "10.1.2.3".into());
        assert_eq!(
            node_agent_address(&wildcard).as_deref(),
            Some("10.1.2.3:4646")
        );
    }
}
