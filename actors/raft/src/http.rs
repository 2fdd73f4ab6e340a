//! The HTTP transport: the three Raft RPCs as `POST /v1/raft/append`,
//! `/v1/raft/vote` and `/v1/raft/snapshot` on a server's RPC port, guarded
//! by the cluster key (issue 18, item 8).
//!
//! Bodies are JSON (openraft's own request and answer types, with its
//! serde feature). Every request carries, in [`AUTH_HEADER`], an
//! HMAC-SHA256 under the cluster key of the direction, the path and the
//! body; a server refuses a request without a valid one (401) before
//! decoding it, and a client refuses an answer that is not signed likewise,
//! so a process without the key can neither drive a server's Raft nor pose
//! as one. (It does not hide the traffic or stop a replay of a captured
//! message: TLS on the RPC port comes later.)
//!
//! The client sends from a blocking thread with ureq: openraft needs `Send`
//! futures, which actix's client does not give.

use crate::faults::{FaultLink, Faults};
// Defined in a leaf module so that the fault injector, which this
// transport consults, can name it without importing the transport back.
pub use crate::http_error::HttpError;
use crate::transport::{RpcError, SnapshotRpcError, Transport};
use crate::{NodeId, ServerNode, TypeConfig};
use actix_web::{web, HttpRequest, HttpResponse};
use base64::Engine;
use hmac::{Hmac, Mac};
use openraft::error::{NetworkError, RPCError, RemoteError, Unreachable};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::Raft;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::Sha256;
use std::future::Future;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

pub const APPEND_PATH: &str = "/v1/raft/append";
pub const VOTE_PATH: &str = "/v1/raft/vote";
pub const SNAPSHOT_PATH: &str = "/v1/raft/snapshot";
/// The query parameter naming the server a Raft RPC is meant for.
pub const TARGET_PARAM: &str = "target";

/// The header that carries a message's signature under the cluster key.
pub const AUTH_HEADER: &str = "X-Herder-Cluster-Auth";
/// The largest body either side reads: a batch of entries (openraft sends
/// at most `max_payload_entries`) or one snapshot chunk, with room.
pub const MAX_BODY_BYTES: usize = 64 << 20;

type HmacSha256 = Hmac<Sha256>;

/// Which way a message goes: a request's signature is no answer's.
#[derive(Clone, Copy)]
enum Direction {
    Request,
    Answer,
}

/// Why a cluster key was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the cluster key is not base64: {0}")]
    NotBase64(String),
    #[error("the cluster key is {0} bytes; it must be 16, 24 or 32 (`herder operator gossip keygen` makes one)")]
    BadLength(usize),
}

/// The shared cluster key (`server { encrypt = "..." }`), ready to sign.
#[derive(Clone)]
pub struct ClusterKey {
    keyed: HmacSha256,
}

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

impl ClusterKey {
    /// Reads a key as Nomad's `encrypt` setting holds it: base64 of 16, 24
    /// or 32 random bytes.
    pub fn from_base64(text: &str) -> Result<ClusterKey, KeyError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| KeyError::NotBase64(e.to_string()))?;
        if ![16, 24, 32].contains(&bytes.len()) {
            return Err(KeyError::BadLength(bytes.len()));
        }
        let keyed =
            HmacSha256::new_from_slice(&bytes).map_err(|_| KeyError::BadLength(bytes.len()))?;
        Ok(ClusterKey { keyed })
    }

    fn mac(&self, direction: Direction, path: &str, body: &[u8]) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        let tag: &[u8] = match direction {
            Direction::Request => b"herder-raft request\n",
            Direction::Answer => b"herder-raft answer\n",
        };
        mac.update(tag);
        mac.update(path.as_bytes());
        mac.update(b"\n");
        mac.update(body);
        mac
    }

    fn sign(&self, direction: Direction, path: &str, body: &[u8]) -> String {
        let tag = self.mac(direction, path, body).finalize().into_bytes();
        base64::engine::general_purpose::STANDARD.encode(tag)
    }

    /// Whether `signature` is this key's for the message (in constant time).
    fn verify(&self, direction: Direction, path: &str, body: &[u8], signature: &str) -> bool {
        let Ok(tag) = base64::engine::general_purpose::STANDARD.decode(signature) else {
            return false;
        };
        self.mac(direction, path, body).verify_slice(&tag).is_ok()
    }
}

/// What the RPC handlers share.
struct RaftService {
    raft: Raft<TypeConfig>,
    key: ClusterKey,
    contact: LeaderContact,
}

/// When this server last took entries or a heartbeat from a leader it
/// follows, for `X-Nomad-LastContact` on a follower (openraft's metrics
/// only give the leader's side). Clones share the time.
#[derive(Clone, Debug, Default)]
pub struct LeaderContact {
    last: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

impl LeaderContact {
    fn heard(&self) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        *last = Some(std::time::Instant::now());
    }

    /// Milliseconds since a leader was last heard from (none yet: `None`).
    pub fn millis_since(&self) -> Option<u64> {
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.map(|t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX))
    }
}

/// Registers the Raft RPC routes on an actix-web app (the RPC port's);
/// `contact` records every append a leader this server follows sent.
/// Bodies up to `body_limit` are read (at least [`MAX_BODY_BYTES`]; more
/// for an append that carries an operator's restore entry).
pub fn configure(
    raft: Raft<TypeConfig>,
    key: ClusterKey,
    contact: LeaderContact,
    body_limit: usize,
) -> impl FnOnce(&mut web::ServiceConfig) {
    move |config| {
        config
            .app_data(web::Data::new(RaftService { raft, key, contact }))
            .app_data(web::PayloadConfig::new(body_limit.max(MAX_BODY_BYTES)))
            .route(APPEND_PATH, web::post().to(append))
            .route(VOTE_PATH, web::post().to(vote))
            .route(SNAPSHOT_PATH, web::post().to(install_snapshot));
    }
}

/// A refusal when a Raft RPC names another server than this one.
fn misaddressed(service: &RaftService, request: &HttpRequest) -> Option<HttpResponse> {
    let me = service.raft.metrics().borrow().id;
    let target = request
        .query_string()
        .split('&')
        .find_map(|pair| pair.strip_prefix(TARGET_PARAM)?.strip_prefix('='))?;
    if target == me.to_string() {
        return None;
    }
    Some(HttpResponse::MisdirectedRequest().body(format!(
        "this is server {me}, not {target} (its data dir was replaced?)"
    )))
}

/// One Raft RPC: refused when meant for another server, else checked,
/// decoded, handed to this server's replica by `call`, and answered.
async fn serve_raft<Req, Answer, F, Fut>(
    service: &RaftService,
    path: &str,
    request: &HttpRequest,
    body: &web::Bytes,
    call: F,
) -> HttpResponse
where
    Req: DeserializeOwned,
    Answer: Serialize,
    F: FnOnce(Raft<TypeConfig>, Req) -> Fut,
    Fut: Future<Output = Answer>,
{
    if let Some(refusal) = misaddressed(service, request) {
        return refusal;
    }
    let raft = service.raft.clone();
    serve_signed(&service.key, path, request, body, |rpc: Req| {
        call(raft, rpc)
    })
    .await
}

async fn append(
    service: web::Data<RaftService>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let contact = service.contact.clone();
    serve_raft(
        &service,
        APPEND_PATH,
        &request,
        &body,
        |raft, rpc| async move {
            let answer = raft.append_entries(rpc).await;
            // A stale leader is told of a newer vote; anything else came
            // from the leader this server follows.
            if matches!(
                answer,
                Ok(AppendEntriesResponse::Success
                    | AppendEntriesResponse::PartialSuccess(_)
                    | AppendEntriesResponse::Conflict)
            ) {
                contact.heard();
            }
            answer
        },
    )
    .await
}

async fn vote(
    service: web::Data<RaftService>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    serve_raft(
        &service,
        VOTE_PATH,
        &request,
        &body,
        |raft, rpc: VoteRequest<NodeId>| async move { raft.vote(rpc).await },
    )
    .await
}

async fn install_snapshot(
    service: web::Data<RaftService>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    serve_raft(
        &service,
        SNAPSHOT_PATH,
        &request,
        &body,
        |raft, rpc: InstallSnapshotRequest<TypeConfig>| async move {
            raft.install_snapshot(rpc).await
        },
    )
    .await
}

/// Checks the signature, decodes the request, runs it, and answers with
/// the signed JSON of its answer (every RPC answers a `Result`, so the
/// caller tells a refusal from a failure to reach the server).
pub async fn serve_signed<Req, Answer, F, Fut>(
    key: &ClusterKey,
    path: &str,
    request: &HttpRequest,
    body: &[u8],
    call: F,
) -> HttpResponse
where
    Req: DeserializeOwned,
    Answer: Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Answer>,
{
    let signature = request
        .headers()
        .get(AUTH_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if !key.verify(Direction::Request, path, body, signature) {
        return HttpResponse::Unauthorized()
            .body("the request is not signed with this cluster's key (server { encrypt })");
    }
    let rpc: Req = match serde_json::from_slice(body) {
        Ok(rpc) => rpc,
        Err(e) => return HttpResponse::BadRequest().body(format!("undecodable Raft request: {e}")),
    };
    let answer = call(rpc).await;
    match serde_json::to_vec(&answer) {
        Ok(bytes) => HttpResponse::Ok()
            .insert_header((AUTH_HEADER, key.sign(Direction::Answer, path, &bytes)))
            .content_type("application/json")
            .body(bytes),
        Err(e) => HttpResponse::InternalServerError().body(format!("encoding the answer: {e}")),
    }
}

/// The client side of every signed exchange on the RPC port (the Raft
/// RPCs, forwarded writes, status and membership calls): posts JSON to
/// `http://<addr><path>` from a blocking thread and checks the answer's
/// signature before decoding it. Over TLS (`https://`, mTLS) when the
/// servers' `tls.rpc` is set ([`SignedClient::over_tls`]).
#[derive(Clone)]
pub struct SignedClient {
    agent: ureq::Agent,
    /// `https` when the RPC port speaks TLS, else `http`.
    scheme: &'static str,
    key: Arc<ClusterKey>,
    /// Injected transport faults (tests only): none on a real server.
    faults: Option<Arc<FaultLink>>,
}

impl SignedClient {
    /// A client that gives up on an exchange after `timeout` (connect,
    /// send and answer each).
    pub fn new(key: ClusterKey, timeout: Duration) -> SignedClient {
        SignedClient::over_tls(key, timeout, None)
    }

    /// A client of RPC ports that speak TLS with `tls` (herder-common's
    /// `TlsConfig::rpc_client`), or plain HTTP with `None`.
    pub fn over_tls(
        key: ClusterKey,
        timeout: Duration,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> SignedClient {
        let builder = ureq::AgentBuilder::new()
            .timeout_connect(timeout)
            .timeout_read(timeout)
            .timeout_write(timeout);
        let (agent, scheme) = match tls {
            Some(tls) => (builder.tls_config(tls).build(), "https"),
            None => (builder.build(), "http"),
        };
        SignedClient {
            agent,
            scheme,
            key: Arc::new(key),
            faults: None,
        }
    }

    /// The same client, subject to `faults` as the server at `from` (its
    /// RPC address) sees them: for tests.
    pub fn with_faults(mut self, faults: &Faults, from: &str) -> SignedClient {
        self.faults = Some(Arc::new(faults.link(from)));
        self
    }

    /// Sends `request` to the server at `addr` and decodes its answer.
    pub async fn call<Req, Resp>(
        &self,
        addr: &str,
        path: &'static str,
        request: &Req,
    ) -> Result<Resp, HttpError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        let scheme = self.scheme;
        self.send(addr, format!("{scheme}://{addr}{path}"), path, request)
            .await
    }

    /// [`call`](Self::call) for a Raft RPC meant for server `target`: the
    /// server at `addr` refuses it unless it is that server (a member whose
    /// data dir was wiped comes back at the same address under a new ID,
    /// and must not answer for the old one).
    pub async fn call_member<Req, Resp>(
        &self,
        addr: &str,
        target: NodeId,
        path: &'static str,
        request: &Req,
    ) -> Result<Resp, HttpError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        self.send(
            addr,
            format!("{}://{addr}{path}?{TARGET_PARAM}={target}", self.scheme),
            path,
            request,
        )
        .await
    }

    async fn send<Req, Resp>(
        &self,
        addr: &str,
        url: String,
        path: &'static str,
        request: &Req,
    ) -> Result<Resp, HttpError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        let body = serde_json::to_vec(request).map_err(|e| HttpError::Body {
            url: url.clone(),
            reason: e.to_string(),
        })?;
        let signature = self.key.sign(Direction::Request, path, &body);
        let fault = match &self.faults {
            Some(link) => Some(link.before_sending(addr, &url).await?),
            None => None,
        };
        let agent = self.agent.clone();
        let key = self.key.clone();
        let target = url.clone();
        let exchange = move || post_signed(&agent, &key, &target, path, &signature, &body);
        let bytes =
            tokio::task::spawn_blocking(exchange)
                .await
                .map_err(|e| HttpError::Unreachable {
                    url: url.clone(),
                    reason: format!("the sending thread ended: {e}"),
                })??;
        if let (Some(link), Some(fault)) = (&self.faults, fault) {
            link.after_answer(addr, &url, fault)?;
        }
        serde_json::from_slice(&bytes).map_err(|e| HttpError::Body {
            url,
            reason: e.to_string(),
        })
    }
}

/// The Raft RPCs over [`SignedClient`].
#[derive(Clone)]
pub struct HttpTransport {
    client: SignedClient,
}

impl HttpTransport {
    /// A transport that gives up on an exchange after `timeout`.
    pub fn new(key: ClusterKey, timeout: Duration) -> HttpTransport {
        HttpTransport::over(SignedClient::new(key, timeout))
    }

    /// A transport sending with `client`.
    pub fn over(client: SignedClient) -> HttpTransport {
        HttpTransport { client }
    }

    async fn call<Req, Resp, E>(
        &self,
        target: NodeId,
        node: &ServerNode,
        path: &'static str,
        rpc: &Req,
    ) -> Result<Resp, RPCError<NodeId, ServerNode, E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let answer: Result<Resp, E> = self
            .client
            .call_member(&node.rpc_addr, target, path, rpc)
            .await
            .map_err(|e| match e {
                HttpError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&e)),
                _ => RPCError::Network(NetworkError::new(&e)),
            })?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }
}

/// One blocking exchange: the answer's body once its signature checks out.
fn post_signed(
    agent: &ureq::Agent,
    key: &ClusterKey,
    url: &str,
    path: &str,
    signature: &str,
    body: &[u8],
) -> Result<Vec<u8>, HttpError> {
    let response = agent
        .post(url)
        .set(AUTH_HEADER, signature)
        .set("Content-Type", "application/json")
        .send_bytes(body);
    let response = match response {
        Ok(response) => response,
        Err(ureq::Error::Status(status, response)) => {
            let body = read_body(response, 4096).unwrap_or_default();
            let body = String::from_utf8_lossy(&body).into_owned();
            return Err(HttpError::Status {
                url: url.to_string(),
                status,
                body,
            });
        }
        // Only a failed connection proves the request never arrived; any
        // later failure may have been received and acted on.
        Err(ureq::Error::Transport(e))
            if matches!(
                e.kind(),
                ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Dns
            ) =>
        {
            return Err(HttpError::Unreachable {
                url: url.to_string(),
                reason: e.to_string(),
            })
        }
        Err(ureq::Error::Transport(e)) => {
            return Err(HttpError::Lost {
                url: url.to_string(),
                reason: e.to_string(),
            })
        }
    };
    let answer_signature = response.header(AUTH_HEADER).unwrap_or_default().to_string();
    let bytes = read_body(response, MAX_BODY_BYTES).map_err(|e| HttpError::Body {
        url: url.to_string(),
        reason: e.to_string(),
    })?;
    if !key.verify(Direction::Answer, path, &bytes, &answer_signature) {
        return Err(HttpError::Unsigned {
            url: url.to_string(),
        });
    }
    Ok(bytes)
}

fn read_body(response: ureq::Response, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    response
        .into_reader()
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() > limit {
        return Err(std::io::Error::other(format!(
            "answer larger than {limit} bytes"
        )));
    }
    Ok(bytes)
}

impl Transport for HttpTransport {
    async fn append_entries(
        &self,
        _from: NodeId,
        target: NodeId,
        node: &ServerNode,
        rpc: AppendEntriesRequest<TypeConfig>,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcError> {
        self.call(target, node, APPEND_PATH, &rpc).await
    }

    async fn vote(
        &self,
        _from: NodeId,
        target: NodeId,
        node: &ServerNode,
        rpc: VoteRequest<NodeId>,
    ) -> Result<VoteResponse<NodeId>, RpcError> {
        self.call(target, node, VOTE_PATH, &rpc).await
    }

    async fn install_snapshot(
        &self,
        _from: NodeId,
        target: NodeId,
        node: &ServerNode,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> Result<InstallSnapshotResponse<NodeId>, SnapshotRpcError> {
        self.call(target, node, SNAPSHOT_PATH, &rpc).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "cg8StVXbQJ0gPvMd9o7yrg==";

    #[test]
    fn a_signature_checks_out_only_for_its_key_direction_path_and_body() {
        let key = ClusterKey::from_base64(KEY).unwrap();
        let other = ClusterKey::from_base64("HbSsQiUzzsRWKRXz7b2b3w==").unwrap();
        let signature = key.sign(Direction::Request, VOTE_PATH, b"{}");
        assert!(key.verify(Direction::Request, VOTE_PATH, b"{}", &signature));
        assert!(!other.verify(Direction::Request, VOTE_PATH, b"{}", &signature));
        assert!(!key.verify(Direction::Answer, VOTE_PATH, b"{}", &signature));
        assert!(!key.verify(Direction::Request, APPEND_PATH, b"{}", &signature));
        assert!(!key.verify(Direction::Request, VOTE_PATH, b"{ }", &signature));
        assert!(!key.verify(Direction::Request, VOTE_PATH, b"{}", "not base64!"));
    }

    #[test]
    fn keys_must_be_base64_of_16_24_or_32_bytes() {
        assert!(ClusterKey::from_base64(KEY).is_ok());
        assert_eq!(
            ClusterKey::from_base64("c2hvcnQ=").unwrap_err(),
            KeyError::BadLength(5)
        );
        assert!(matches!(
            ClusterKey::from_base64("%%%"),
            Err(KeyError::NotBase64(_))
        ));
    }
}
