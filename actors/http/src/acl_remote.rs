//! Token resolution on a client-only agent, as Nomad's client does it
//! (`resolveTokenValue`): the agent holds no ACL tables, so it asks a
//! server what a user's secret resolves to (`PUT /v1/node/:id/acl/
//! resolve-token`, authenticated by this node's `SecretID`), compiles the
//! policies it is sent as a server would (`TokenResolution::into_resolved`)
//! and keeps the answer for `acl.token_ttl` (and `policy_ttl`: the shorter
//! of the two). A deleted token or a changed policy therefore takes
//! effect here within that time; an expired token at once, as its
//! expiration time travels with it.
//!
//! Where Nomad differs: its client keeps using a stale answer when no
//! server can be reached. Herder refuses instead (503, naming the servers
//! tried), so that no token outlives its deletion by more than the TTL.
//! Every call is bounded ([`RESOLVE_TIMEOUT`] per server, at most
//! [`MAX_SERVERS_TRIED`] of them in failover order).

use crate::errors::ApiError;
use crate::{AgentInfo, ClientHandle};
use actix_web::web;
use herder_api_client::{self as api_client, ApiClient, ClientConfig};
use herder_client::server_link::GetServers;
use herder_server::server_api::acl::{
    ResolvedToken, TokenResolution, TOKEN_EXPIRED, TOKEN_NOT_FOUND,
};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest one server is given to answer a resolution.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Servers asked before giving up (each unreachable one costs a timeout).
const MAX_SERVERS_TRIED: usize = 3;
/// Longest the client actor is given to name its servers.
const SERVERS_TIMEOUT: Duration = Duration::from_secs(2);
/// Most answers kept (the cache is emptied when it is full).
const CACHE_ENTRIES: usize = 4096;

/// Why a secret was not resolved.
#[derive(Debug)]
pub enum Refusal {
    /// The secret is no valid token (unknown, expired): a failed
    /// authentication, answered as the server answered it.
    Token(ApiError),
    /// No server said: the request is refused, but the caller did nothing
    /// wrong.
    NoServer(ApiError),
}

/// The answers of servers, by secret, with when each was received.
#[derive(Default)]
pub struct RemoteTokens {
    cache: Mutex<HashMap<String, (Instant, ResolvedToken)>>,
}

impl RemoteTokens {
    /// What `secret` resolves to: the kept answer while it is younger than
    /// `ttl` and its token has not expired, else a server's.
    pub async fn resolve(
        &self,
        info: &AgentInfo,
        client: &ClientHandle,
        secret: &str,
    ) -> Result<ResolvedToken, Refusal> {
        let ttl = info.config.acl.token_ttl.min(info.config.acl.policy_ttl);
        if let Some(kept) = self.kept(secret, ttl) {
            return Ok(kept);
        }
        let resolution = ask_servers(info, client, secret).await?;
        let resolved = resolution.into_resolved(secret);
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(secret.to_string(), (Instant::now(), resolved.clone()));
        }
        Ok(resolved)
    }

    fn kept(&self, secret: &str, ttl: Duration) -> Option<ResolvedToken> {
        let mut cache = self.cache.lock().ok()?;
        let (at, resolved) = cache.get(secret)?;
        let expired = resolved
            .token
            .as_ref()
            .is_some_and(|t| t.is_expired(chrono::Utc::now()));
        if at.elapsed() < ttl && !expired {
            return Some(resolved.clone());
        }
        cache.remove(secret);
        None
    }
}

/// Asks this client's servers, in failover order, until one answers.
async fn ask_servers(
    info: &AgentInfo,
    client: &ClientHandle,
    secret: &str,
) -> Result<TokenResolution, Refusal> {
    let tls = info
        .config
        .tls
        .servers_client(&info.config.region)
        .map_err(|e| no_server(format!("TLS towards the servers: {e}")))?;
    let mut failures = Vec::new();
    for server in servers(client).await.into_iter().take(MAX_SERVERS_TRIED) {
        let address = match &tls {
            Some(_) if !server.contains("://") => format!("https://{server}"),
            _ => server.clone(),
        };
        let api = ApiClient::new(ClientConfig {
            address,
            token: Some(client.node_secret.clone()),
        })
        .map_err(|e| no_server(format!("server address {server:?}: {e}")))?
        .with_timeout(RESOLVE_TIMEOUT);
        let api = match &tls {
            Some(tls) => api.with_tls(tls.clone()),
            None => api,
        };
        let path = format!("/v1/node/{}/acl/resolve-token", client.node_id);
        let body = json!({"SecretID": secret});
        let call = web::block(move || api.put(&path, &[], &body));
        let answer =
            match tokio::time::timeout(RESOLVE_TIMEOUT + Duration::from_secs(1), call).await {
                Err(_) => Err(format!("{server}: no answer within {RESOLVE_TIMEOUT:?}")),
                Ok(Err(e)) => Err(format!("{server}: {e}")),
                Ok(Ok(answer)) => Ok(answer),
            };
        match answer.map(|a| a.map(|a| a.body)) {
            Ok(Ok(body)) => {
                return serde_json::from_value(body).map_err(|e| {
                    no_server(format!("{server} answered what is not a resolution: {e}"))
                })
            }
            Ok(Err(api_client::ApiError::Status { status, body, .. })) => {
                return Err(refused_by_server(&server, status, body))
            }
            Ok(Err(e)) => failures.push(format!("{server}: {}", first_line(&e.to_string()))),
            Err(e) => failures.push(e),
        }
    }
    Err(no_server(format!(
        "no server reachable ({})",
        failures.join("; ")
    )))
}

/// A server's refusal: of the token (Nomad's texts) or of this node.
fn refused_by_server(server: &str, status: u16, body: String) -> Refusal {
    let body = body.trim().to_string();
    if status == 403 && (body == TOKEN_NOT_FOUND || body == TOKEN_EXPIRED) {
        return Refusal::Token(ApiError::Forbidden(body));
    }
    no_server(format!("{server} refused to resolve it: {status} {body}"))
}

fn no_server(why: String) -> Refusal {
    Refusal::NoServer(ApiError::Unavailable(format!(
        "ACL token cannot be resolved on this client agent: {why}"
    )))
}

/// The client's servers now, in failover order; its first one when the
/// client actor does not say in time.
async fn servers(client: &ClientHandle) -> Vec<String> {
    match tokio::time::timeout(SERVERS_TIMEOUT, client.agent.send(GetServers)).await {
        Ok(Ok(list)) if !list.is_empty() => list,
        _ => vec![client.server.clone()],
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}
