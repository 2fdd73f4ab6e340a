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
//! agent to server, server to node) and never in a loop.

use super::errors::ApiError;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::structs::Node;
use herder_api_client::{self as api_client, ApiClient, ClientConfig};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
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
    let token = req
        .headers()
        .get("X-Nomad-Token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let client = ApiClient::new(ClientConfig {
        address: address.to_string(),
        token,
    })
    .map_err(|e| ApiError::BadGateway(format!("cannot forward the request: {e}")))?
    .with_timeout(timeout)
    .with_header(FORWARDED_HEADER, hop.header_value());
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
        Err(api_client::ApiError::Status { status, body, .. }) => {
            let status = actix_web::http::StatusCode::from_u16(status)
                .unwrap_or(actix_web::http::StatusCode::BAD_GATEWAY);
            Ok(HttpResponse::build(status)
                .content_type("text/plain; charset=utf-8")
                .body(body))
        }
        Err(e @ api_client::ApiError::Unreachable { .. }) => Err(ApiError::BadGateway(format!(
            "cannot reach the agent at {address}: {}",
            e.to_string().lines().next().unwrap_or_default()
        ))),
        Err(e) => Err(ApiError::BadGateway(format!(
            "the agent at {address} answered {path} with what is not JSON: {e}"
        ))),
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
