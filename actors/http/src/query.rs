//! Query parameters shared by reads, blocking queries, and the headers
//! every answer carries.
//!
//! A blocking query (`?index=N&wait=5s`) parks on the state store's watch
//! for the tables the answer is built from; the store's writer wakes it
//! when one of them passes `N`, so nothing polls. The wait is capped at
//! Nomad's 300 s and, as in Nomad, stretched by a random jitter of up to
//! wait/16 so that many clients woken together do not return together.

use super::errors::ApiError;
use super::filter::{Filter, FilterLimits};
use crate::AgentInfo;
use actix_web::{http::header, HttpRequest, HttpResponse, HttpResponseBuilder};
use herder::state::{StateSnapshot, StateStore, TableSet};
use herder_server::server::ServerHandle;
use herder_server::server_api::ServerApi;
use rand::Rng;
use serde::Serialize;
use std::collections::HashMap;
use std::time::Duration;

/// Longest a blocking query waits, and the wait when none is given.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// The common query parameters of reads.
#[derive(Debug, Default)]
pub struct QueryOptions {
    /// Block until the answer's index passes this (0: answer at once).
    pub index: u64,
    pub wait: Duration,
    pub prefix: String,
    pub filter: Option<Filter>,
    pub per_page: Option<usize>,
    pub next_token: Option<String>,
    /// `*` lists every namespace.
    pub namespace: String,
    params: HashMap<String, String>,
    /// The agent's shutdown signal: ends a parked blocking query early.
    shutting_down: Option<tokio::sync::watch::Receiver<bool>>,
}

impl QueryOptions {
    /// Reads the query string; a malformed value is a 400 naming it.
    pub fn from_request(req: &HttpRequest) -> Result<QueryOptions, ApiError> {
        let params = parse_query(req.query_string())?;
        let mut q = QueryOptions {
            wait: MAX_WAIT,
            namespace: herder::structs::job::DEFAULT_NAMESPACE.to_string(),
            shutting_down: req
                .app_data::<actix_web::web::Data<AgentInfo>>()
                .map(|info| info.shutting_down.subscribe()),
            ..Default::default()
        };
        // One region per cluster: a request for another one has nowhere to
        // go (Nomad would forward it between federated regions; herder has
        // no federation), so it is refused rather than answered from here.
        if let Some(v) = params.get("region").filter(|v| !v.is_empty()) {
            let ours = req
                .app_data::<actix_web::web::Data<AgentInfo>>()
                .map(|info| info.config.region.as_str());
            if ours.is_some_and(|r| r != v) {
                return Err(ApiError::BadRequest(format!("No path to region {v:?}")));
            }
        }
        if let Some(v) = params.get("index") {
            q.index = v
                .parse()
                .map_err(|_| ApiError::BadRequest(format!("Invalid index: {v:?}")))?;
        }
        if let Some(v) = params.get("wait") {
            let wait = herder::jobspec::parse_go_duration(v)
                .map_err(|e| ApiError::BadRequest(format!("Invalid wait time: {e}")))?;
            q.wait = wait.min(MAX_WAIT);
        }
        if let Some(v) = params.get("prefix") {
            q.prefix = v.clone();
        }
        if let Some(v) = params.get("filter").filter(|v| !v.is_empty()) {
            let limits = req
                .app_data::<actix_web::web::Data<AgentInfo>>()
                .map(|info| FilterLimits {
                    max_bytes: info.config.limits.filter_max_bytes,
                    max_depth: info.config.limits.filter_max_depth,
                })
                .unwrap_or_default();
            q.filter = Some(
                Filter::parse_with_limits(v, &limits)
                    .map_err(|e| ApiError::BadRequest(e.to_string()))?,
            );
        }
        if let Some(v) = params.get("per_page") {
            let n: usize = v
                .parse()
                .map_err(|_| ApiError::BadRequest(format!("Invalid per_page: {v:?}")))?;
            q.per_page = (n > 0).then_some(n);
        }
        if let Some(v) = params.get("next_token").filter(|v| !v.is_empty()) {
            q.next_token = Some(v.clone());
        }
        if let Some(v) = params.get("namespace").filter(|v| !v.is_empty()) {
            q.namespace = v.clone();
        }
        q.params = params;
        Ok(q)
    }

    /// Any other parameter, by name.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }

    /// A boolean parameter: absent is false, `?purge` alone is true, and
    /// otherwise the spellings Go's `strconv.ParseBool` takes (python-nomad
    /// sends `True`).
    pub fn flag(&self, name: &str) -> Result<bool, ApiError> {
        match self.param(name) {
            None => Ok(false),
            Some("" | "1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            // Nomad's words (strconv.ParseBool's error included).
            Some(v) => Err(ApiError::BadRequest(format!(
                "Failed to parse value of {name:?} ({v}) as a bool: strconv.ParseBool: parsing {v:?}: invalid syntax"
            ))),
        }
    }

    /// `?cas=N` of a check-and-set write: `None` when absent, Nomad's
    /// words when it is not a number.
    pub fn cas_index(&self) -> Result<Option<u64>, ApiError> {
        self.param("cas")
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    ApiError::BadRequest(format!("Error parsing cas value: {v:?} is not a number"))
                })
            })
            .transpose()
    }

    /// Whether an object of `namespace` is in the asked namespace.
    pub fn in_namespace(&self, namespace: &str) -> bool {
        self.namespace == "*" || self.namespace == namespace
    }

    /// Parks a blocking query until `changed` fires, its wait (with
    /// jitter) runs out, or the agent starts shutting down; whichever
    /// comes first, the caller answers with the state at that moment.
    pub async fn park<T>(&self, changed: impl std::future::Future<Output = T>) {
        let wait = tokio::time::timeout(self.wait_with_jitter(), changed);
        match self.shutting_down.clone() {
            Some(mut shutting_down) => {
                tokio::select! {
                    _ = wait => {}
                    _ = shutting_down.wait_for(|down| *down) => {}
                }
            }
            None => {
                let _ = wait.await;
            }
        }
    }

    /// The wait with its random jitter (up to wait/16).
    pub fn wait_with_jitter(&self) -> Duration {
        let jitter_ceiling = self.wait.as_nanos() as u64 / 16;
        let jitter = if jitter_ceiling > 0 {
            rand::thread_rng().gen_range(0..jitter_ceiling)
        } else {
            0
        };
        self.wait + Duration::from_nanos(jitter)
    }
}

fn parse_query(text: &str) -> Result<HashMap<String, String>, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(text)
        .map_err(|e| ApiError::BadRequest(format!("Invalid query string: {e}")))?;
    Ok(pairs.into_iter().collect())
}

/// The server's parts, or 400 on a client-only agent.
pub fn server(info: &AgentInfo) -> Result<&ServerHandle, ApiError> {
    info.server
        .as_ref()
        .ok_or_else(|| ApiError::BadRequest("this agent does not run a server".into()))
}

/// The server's operations, or 400 on a client-only agent: every write a
/// handler makes goes through this.
pub fn api(info: &AgentInfo) -> Result<ServerApi, ApiError> {
    server(info).map(ServerApi::of)
}

/// Runs a (possibly blocking) read: waits until one of `tables` passes
/// `q.index` or the wait ends, then builds the answer from the state at
/// that moment. Answers with the tables' index (at least 1, as Nomad's).
pub async fn blocking_read<T>(
    store: &StateStore,
    tables: TableSet,
    q: &QueryOptions,
    read: impl FnOnce(&StateSnapshot) -> Result<T, ApiError>,
) -> Result<(T, u64), ApiError> {
    if q.index > 0 {
        let changed = store.watch(tables, q.index);
        // Every outcome answers with the current state: a timeout is not
        // an error for a blocking query.
        q.park(changed).await;
    }
    let snap = store.snapshot();
    let index = tables
        .iter()
        .map(|t| snap.table_index(t))
        .max()
        .unwrap_or(0)
        .max(1);
    Ok((read(&snap)?, index))
}

/// A whole read route: reads the query options, blocks on `tables` as
/// asked, and answers `read`'s value as JSON with the blocking-query
/// headers.
pub async fn read_json<T: Serialize>(
    info: &AgentInfo,
    req: &HttpRequest,
    tables: TableSet,
    read: impl FnOnce(&StateSnapshot, &QueryOptions) -> Result<T, ApiError>,
) -> Result<HttpResponse, ApiError> {
    let q = QueryOptions::from_request(req)?;
    let store = &server(info)?.store;
    let (value, index) = blocking_read(store, tables, &q, |snap| read(snap, &q)).await?;
    Ok(json_with_index(index, &value))
}

/// A 200 with the blocking-query headers.
pub fn ok_with_index(index: u64) -> HttpResponseBuilder {
    let mut b = HttpResponse::Ok();
    b.insert_header(("X-Nomad-Index", index.to_string()))
        .insert_header(("X-Nomad-KnownLeader", "true"))
        .insert_header(("X-Nomad-LastContact", "0"))
        .insert_header((header::CONTENT_TYPE, "application/json"));
    b
}

/// JSON answer with the blocking-query headers.
pub fn json_with_index<T: Serialize>(index: u64, body: &T) -> HttpResponse {
    ok_with_index(index).json(body)
}

/// One page of a list: what passes the prefix (on the ID), the namespace
/// and the filter, starting at `next_token`, at most `per_page` long; with
/// the token of the page after it. Entries are rendered only once their
/// ID and namespace pass, so a narrow prefix over a large table costs
/// little; they become a `Value` only for a filter to read.
///
/// The page is written out here, while the entries may still borrow the
/// snapshot they were read from (see [`ListPage`]).
pub fn paginate<'a, T, I, R>(
    q: &QueryOptions,
    items: I,
    render: impl Fn(T) -> R,
) -> Result<ListPage, ApiError>
where
    I: Iterator<Item = (String, &'a str, T)>,
    R: Serialize,
{
    let mut page = Vec::new();
    let mut next = None;
    for (id, namespace, item) in items {
        if !id.starts_with(&q.prefix) || !q.in_namespace(namespace) {
            continue;
        }
        if q.next_token
            .as_ref()
            .is_some_and(|t| id.as_str() < t.as_str())
        {
            continue;
        }
        let value = render(item);
        if let Some(filter) = &q.filter {
            // What cannot be shown as JSON cannot match (nothing listed
            // fails to serialize: its keys are strings).
            let passes = serde_json::to_value(&value).is_ok_and(|v| filter.matches(&v));
            if !passes {
                continue;
            }
        }
        if q.per_page.is_some_and(|n| page.len() >= n) {
            next = Some(id);
            break;
        }
        page.push(value);
    }
    let body = serde_json::to_vec(&page)
        .map_err(|e| ApiError::Internal(format!("writing the list: {e}")))?;
    Ok(ListPage { body, next })
}

/// One page of a list as its answer's JSON body (an array), and the token
/// of the page after it.
pub struct ListPage {
    body: Vec<u8>,
    next: Option<String>,
}

/// A list answer: a bare array, with `X-Nomad-NextToken` when more follow.
pub fn list_response(index: u64, page: ListPage) -> HttpResponse {
    let mut b = ok_with_index(index);
    if let Some(token) = page.next {
        b.insert_header(("X-Nomad-NextToken", token));
    }
    b.body(page.body)
}

/// Nanoseconds since the Unix epoch, as Nomad's times are written.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Reads a JSON body, answering 400 with the decoder's message when it is
/// malformed or has wrong types. `null` anywhere means "not set", as in
/// Nomad's API.
pub fn decode_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::BadRequest("Request body is empty".into()));
    }
    herder::structs::serde_util::from_slice_nulls_unset(body)
        .map_err(|e| ApiError::BadRequest(format!("Failed to decode request body: {e}")))
}
