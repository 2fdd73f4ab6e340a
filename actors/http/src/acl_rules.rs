//! Enforcement of ACLs on every route: one table, [`RULES`], names the
//! rule of each (method, path pattern) the API serves, and the middleware
//! [`enforce`] checks it before any handler runs. A route missing from
//! the table is refused (fail closed) when ACLs are on, and
//! `tests/acl_routes.rs` fails when a route registered in this crate has
//! no entry; adding a route is one line here.
//!
//! Under ACLs a request's token (`X-Nomad-Token`, or `Authorization:
//! Bearer`) is resolved to its compiled ACL (cached by secret and the ACL
//! tables' indexes); no token means the `anonymous` policy. Every denial
//! is 403 `Permission denied`; an unknown secret is 403 `ACL token not
//! found`. Failed authentications are rate-limited per client address: a
//! small token bucket, and past it 429 with `Retry-After` (not a delayed
//! 403, which would hold a connection and a timer per attempt for the
//! attacker's benefit, and tell a real client nothing).
//!
//! Lists (`NsList`) are filtered here, after the handler, to the items
//! whose `Namespace` the token may read (the variable list to the items
//! whose `Namespace` and `Path` grant `list`); the event stream filters its
//! events itself, and the routes whose namespace is in the body
//! (`NsBody`) and the ACL reads a token may make of itself (`Token`)
//! check in their handler through [`caller`] / [`require_namespace`].
//!
//! A variable read carrying a node's `SecretID` instead of a token is a
//! client agent rendering a template: it may read its workloads' own
//! paths (Nomad's `nomad/jobs/<job>[/<group>[/<task>]]`, see
//! [`workload_reads`]) and nothing else.
//!
//! The checks are one implementation for every agent: what they need of
//! the agent (a secret resolved, the namespace of an allocation named in
//! the path) comes through [`Authority`]. A server answers from its state;
//! a client-only agent (no state) asks a server what the secret resolves
//! to, keeps the answer for `acl.token_ttl` (`acl_remote`), and reads an
//! allocation's namespace from the allocations its client runs. A request
//! forwarded from a server to a node's agent is checked again there.

use crate::acl_remote::{Refusal, RemoteTokens};
use crate::errors::ApiError;
use crate::forward::Hop;
use crate::{AgentInfo, ClientHandle};
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse};
use herder::acl::variables::workload_may_read;
use herder::acl::Capability::{self, *};
use herder::acl::{VariableOp, WorkloadClaim};
use herder::state::{StateSnapshot, Table};
use herder::structs::{AllocId, Node};
use herder_client::alloc_runner::persisted_alloc;
use herder_server::server_api::acl::{
    constant_time_eq, resolve_token, ResolvedToken, PERMISSION_DENIED,
};
use herder_server::server_api::ServerApiError;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a route requires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Nothing: anyone may call it (health, leader, bootstrap).
    Public,
    /// A real token (not anonymous); the handler narrows it down.
    Token,
    Management,
    /// A capability in the request's namespace (`?namespace=`, `default`
    /// when absent; `*` needs a grant on the `*` glob).
    Ns(Capability),
    /// A list: any namespace (`*` included) may be asked for; the answer
    /// keeps the items whose namespace grants the capability.
    NsList(Capability),
    /// The namespace is in the body (a job): the handler checks.
    NsBody(Capability),
    /// A capability in the namespace of the allocation in the path.
    Alloc(Capability),
    /// ... of the evaluation in the path.
    Eval(Capability),
    /// ... of the deployment in the path.
    Deployment(Capability),
    NodeRead,
    NodeWrite,
    AgentRead,
    AgentWrite,
    OperatorRead,
    OperatorWrite,
    /// The node's own `SecretID` (its client), or `node:write`.
    NodeSecret,
    /// The node's own `SecretID`, or `node:read`.
    NodeSecretOrRead,
    /// The node registering: the handler checks its secret.
    NodeRegister,
    /// The node's own `SecretID` and nothing else: a client agent's calls
    /// no user token stands in for (resolving a user's token).
    NodeSecretOnly,
    /// The event stream: any token; events are filtered by topic and
    /// namespace in the handler.
    Stream,
    /// The namespace list: any token; the answer keeps the namespaces the
    /// token holds any capability in (Nomad's `AllowNamespace`).
    NamespaceList,
    /// One namespace (`{name}`): any capability in it.
    NamespaceRead,
    /// The variable at `{path:.*}` in the request's namespace: the
    /// operation on it (or, for a read, a workload's own path).
    Variable(VariableOp),
    /// The variable list: any token; the answer keeps the variables whose
    /// path grants `list`.
    VariableList,
}

/// Methods as a bit set.
pub const GET: u8 = 1;
pub const PUT: u8 = 2;
pub const POST: u8 = 4;
pub const DELETE: u8 = 8;
/// A write: Nomad accepts PUT and POST alike.
pub const WRITE: u8 = PUT | POST;

/// Every route of the API and what it requires.
pub const RULES: &[(u8, &str, Rule)] = &[
    // agent
    (GET, "/v1/agent/health", Rule::Public),
    (GET, "/v1/agent/self", Rule::AgentRead),
    (GET, "/v1/agent/members", Rule::NodeRead),
    (GET, "/v1/agent/servers", Rule::AgentRead),
    (WRITE, "/v1/agent/servers", Rule::AgentWrite),
    (WRITE, "/v1/agent/join", Rule::AgentWrite),
    (WRITE, "/v1/agent/force-leave", Rule::AgentWrite),
    (GET, "/v1/agent/schedulers", Rule::AgentRead),
    (GET, "/v1/agent/schedulers/config", Rule::AgentRead),
    (WRITE, "/v1/agent/schedulers/config", Rule::AgentWrite),
    (WRITE, "/v1/agent/schedulers/pause", Rule::AgentWrite),
    (WRITE, "/v1/agent/schedulers/resume", Rule::AgentWrite),
    (GET, "/v1/metrics", Rule::Public),
    (GET, "/v1/regions", Rule::Public),
    (GET, "/v1/status/leader", Rule::Public),
    (GET, "/v1/status/peers", Rule::Public),
    (GET, "/v1/agent/monitor", Rule::AgentRead),
    (GET, "/v1/agent/host", Rule::AgentRead),
    // Profiles: agent:write under ACLs (without ACLs, `enable_debug`).
    (GET, "/v1/agent/pprof/profile", Rule::AgentWrite),
    (GET, "/v1/agent/pprof/heap", Rule::AgentWrite),
    (GET, "/v1/agent/pprof/goroutine", Rule::AgentWrite),
    // namespaces
    (GET, "/v1/namespaces", Rule::NamespaceList),
    (GET, "/v1/namespace/{name}", Rule::NamespaceRead),
    (WRITE, "/v1/namespace", Rule::Management),
    (WRITE | DELETE, "/v1/namespace/{name}", Rule::Management),
    // variables: by their namespace's `variables` path rules
    (GET, "/v1/vars", Rule::VariableList),
    (GET, "/v1/var/{path:.*}", Rule::Variable(VariableOp::Read)),
    (
        WRITE,
        "/v1/var/{path:.*}",
        Rule::Variable(VariableOp::Write),
    ),
    (
        DELETE,
        "/v1/var/{path:.*}",
        Rule::Variable(VariableOp::Destroy),
    ),
    (GET, "/v1/operator/keyring/keys", Rule::Management),
    (WRITE, "/v1/operator/keyring/rotate", Rule::Management),
    (DELETE, "/v1/operator/keyring/key/{id}", Rule::Management),
    (GET | WRITE, "/v1/operator/snapshot", Rule::Management),
    // ACLs
    (WRITE, "/v1/acl/bootstrap", Rule::Public),
    (GET, "/v1/acl/policies", Rule::Token),
    (GET, "/v1/acl/policy/{name}", Rule::Token),
    (WRITE | DELETE, "/v1/acl/policy/{name}", Rule::Management),
    (GET, "/v1/acl/tokens", Rule::Management),
    (WRITE, "/v1/acl/token", Rule::Management),
    (GET, "/v1/acl/token/self", Rule::Token),
    (GET, "/v1/acl/token/{accessor}", Rule::Token),
    (WRITE | DELETE, "/v1/acl/token/{accessor}", Rule::Management),
    (GET, "/v1/acl/roles", Rule::Token),
    (WRITE, "/v1/acl/role", Rule::Management),
    (GET, "/v1/acl/role/name/{name}", Rule::Token),
    (GET, "/v1/acl/role/{id}", Rule::Token),
    (WRITE | DELETE, "/v1/acl/role/{id}", Rule::Management),
    // jobs
    (GET, "/v1/jobs", Rule::NsList(ListJobs)),
    (WRITE, "/v1/jobs", Rule::NsBody(SubmitJob)),
    (WRITE, "/v1/jobs/parse", Rule::Ns(ParseJob)),
    (WRITE, "/v1/validate/job", Rule::NsBody(ReadJob)),
    (GET, "/v1/job/{id}", Rule::Ns(ReadJob)),
    (WRITE, "/v1/job/{id}", Rule::NsBody(SubmitJob)),
    (DELETE, "/v1/job/{id}", Rule::Ns(SubmitJob)),
    (GET, "/v1/job/{id}/allocations", Rule::Ns(ReadJob)),
    (GET, "/v1/job/{id}/evaluations", Rule::Ns(ReadJob)),
    (GET, "/v1/job/{id}/summary", Rule::Ns(ReadJob)),
    (GET, "/v1/job/{id}/versions", Rule::Ns(ReadJob)),
    (GET, "/v1/job/{id}/deployments", Rule::Ns(ReadJob)),
    (GET, "/v1/job/{id}/deployment", Rule::Ns(ReadJob)),
    (WRITE, "/v1/job/{id}/plan", Rule::NsBody(SubmitJob)),
    (WRITE, "/v1/job/{id}/evaluate", Rule::Ns(SubmitJob)),
    (WRITE, "/v1/job/{id}/periodic/force", Rule::Ns(SubmitJob)),
    (GET, "/v1/job/{id}/scale", Rule::Ns(ReadJobScaling)),
    (WRITE, "/v1/job/{id}/scale", Rule::Ns(ScaleJob)),
    (WRITE, "/v1/job/{id}/dispatch", Rule::Ns(DispatchJob)),
    (WRITE, "/v1/job/{id}/revert", Rule::Ns(SubmitJob)),
    (WRITE, "/v1/job/{id}/stable", Rule::Ns(SubmitJob)),
    (
        GET,
        "/v1/scaling/policies",
        Rule::NsList(ListScalingPolicies),
    ),
    (GET, "/v1/scaling/policy/{id}", Rule::Ns(ReadScalingPolicy)),
    (WRITE, "/v1/search", Rule::Ns(ListJobs)),
    (WRITE, "/v1/search/fuzzy", Rule::Ns(ListJobs)),
    // evaluations, allocations, deployments, services, events
    (GET, "/v1/evaluations", Rule::NsList(ReadJob)),
    (GET, "/v1/evaluation/{id}", Rule::Eval(ReadJob)),
    (GET, "/v1/evaluation/{id}/allocations", Rule::Eval(ReadJob)),
    (GET, "/v1/allocations", Rule::NsList(ReadJob)),
    (GET, "/v1/allocation/{id}", Rule::Alloc(ReadJob)),
    (
        WRITE,
        "/v1/allocation/{id}/stop",
        Rule::Alloc(AllocLifecycle),
    ),
    (GET, "/v1/deployments", Rule::NsList(ReadJob)),
    (GET, "/v1/deployment/{id}", Rule::Deployment(ReadJob)),
    (
        GET,
        "/v1/deployment/allocations/{id}",
        Rule::Deployment(ReadJob),
    ),
    (
        WRITE,
        "/v1/deployment/promote/{id}",
        Rule::Deployment(SubmitJob),
    ),
    (
        WRITE,
        "/v1/deployment/fail/{id}",
        Rule::Deployment(SubmitJob),
    ),
    (
        WRITE,
        "/v1/deployment/pause/{id}",
        Rule::Deployment(SubmitJob),
    ),
    (
        WRITE,
        "/v1/deployment/allocation-health/{id}",
        Rule::Deployment(SubmitJob),
    ),
    (GET, "/v1/services", Rule::NsList(ReadJob)),
    (GET, "/v1/service/{name}", Rule::Ns(ReadJob)),
    (DELETE, "/v1/service/{name}/{id}", Rule::Ns(SubmitJob)),
    (GET, "/v1/event/stream", Rule::Stream),
    // nodes, and their clients' own traffic
    (GET, "/v1/nodes", Rule::NodeRead),
    (GET, "/v1/node/{id}", Rule::NodeRead),
    (WRITE, "/v1/node/{id}/eligibility", Rule::NodeWrite),
    (WRITE, "/v1/node/{id}/drain", Rule::NodeWrite),
    (WRITE, "/v1/node/{id}/evaluate", Rule::NodeWrite),
    (WRITE, "/v1/node/{id}/purge", Rule::NodeWrite),
    (WRITE, "/v1/node/register", Rule::NodeRegister),
    (WRITE, "/v1/node/{id}/heartbeat", Rule::NodeSecret),
    (GET, "/v1/node/{id}/allocations", Rule::NodeSecretOrRead),
    (PUT, "/v1/node/{id}/allocations", Rule::NodeSecret),
    (PUT, "/v1/node/{id}/services", Rule::NodeSecret),
    (PUT, "/v1/node/{id}/services/deregister", Rule::NodeSecret),
    (PUT, "/v1/node/{id}/acl/resolve-token", Rule::NodeSecretOnly),
    // a client agent's allocations
    (
        GET,
        "/v1/client/allocation/{id}/checks",
        Rule::Alloc(ReadJob),
    ),
    (
        GET,
        "/v1/client/allocation/{id}/stats",
        Rule::Alloc(ReadJob),
    ),
    (
        WRITE,
        "/v1/client/allocation/{id}/restart",
        Rule::Alloc(AllocLifecycle),
    ),
    (
        WRITE,
        "/v1/client/allocation/{id}/signal",
        Rule::Alloc(AllocLifecycle),
    ),
    (
        GET | WRITE,
        "/v1/client/allocation/{id}/gc",
        Rule::Alloc(SubmitJob),
    ),
    (
        GET,
        "/v1/client/allocation/{id}/exec",
        Rule::Alloc(AllocExec),
    ),
    (GET, "/v1/client/fs/ls/{alloc_id}", Rule::Alloc(ReadFs)),
    (GET, "/v1/client/fs/stat/{alloc_id}", Rule::Alloc(ReadFs)),
    (GET, "/v1/client/fs/cat/{alloc_id}", Rule::Alloc(ReadFs)),
    (GET, "/v1/client/fs/readat/{alloc_id}", Rule::Alloc(ReadFs)),
    (GET, "/v1/client/fs/stream/{alloc_id}", Rule::Alloc(ReadFs)),
    (GET, "/v1/client/fs/logs/{alloc_id}", Rule::Alloc(ReadLogs)),
    (GET, "/v1/client/stats", Rule::NodeRead),
    (GET | WRITE, "/v1/client/gc", Rule::NodeWrite),
    // operator and system
    (
        GET,
        "/v1/operator/scheduler/configuration",
        Rule::OperatorRead,
    ),
    (
        WRITE,
        "/v1/operator/scheduler/configuration",
        Rule::OperatorWrite,
    ),
    (GET, "/v1/operator/quarantine", Rule::OperatorRead),
    (
        GET,
        "/v1/operator/autopilot/configuration",
        Rule::OperatorRead,
    ),
    (
        PUT,
        "/v1/operator/autopilot/configuration",
        Rule::OperatorWrite,
    ),
    (GET, "/v1/operator/autopilot/health", Rule::OperatorRead),
    (GET, "/v1/operator/raft/configuration", Rule::OperatorRead),
    (DELETE, "/v1/operator/raft/peer", Rule::OperatorWrite),
    (WRITE, "/v1/system/gc", Rule::Management),
    (WRITE, "/v1/system/reconcile/summaries", Rule::Management),
    // the web UI: static files only, its data comes through the API above
    (GET, "/", Rule::Public),
    (GET, "/ui", Rule::Public),
    (GET, "/ui/{tail:.*}", Rule::Public),
];

/// The bit of an HTTP method (0: one no route serves).
pub fn method_bit(method: &str) -> u8 {
    match method {
        "GET" | "HEAD" => GET,
        "PUT" => PUT,
        "POST" => POST,
        "DELETE" => DELETE,
        _ => 0,
    }
}

/// The rule of a route, `None` when the table has none (refused).
pub fn rule_for(method: &str, pattern: &str) -> Option<Rule> {
    let bit = method_bit(method);
    RULES
        .iter()
        .find(|(methods, path, _)| methods & bit != 0 && *path == pattern)
        .map(|(_, _, rule)| *rule)
}

/// The secret a request carries: `X-Nomad-Token`, else `Authorization:
/// Bearer <secret>`; empty when none.
pub fn request_secret(req: &HttpRequest) -> String {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    if let Some(token) = header("X-Nomad-Token") {
        return token.to_string();
    }
    header("Authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

/// The resolved token of a request under ACLs; `None` when ACLs are off.
pub fn caller(req: &HttpRequest) -> Option<ResolvedToken> {
    req.extensions().get::<ResolvedToken>().cloned()
}

/// Refuses unless the request's token grants `cap` in `namespace` (always
/// allowed with ACLs off).
pub fn require_namespace(
    req: &HttpRequest,
    namespace: &str,
    cap: Capability,
) -> Result<(), ApiError> {
    match caller(req) {
        Some(c) if !c.acl.allow_namespace_op(namespace, cap) => Err(denied()),
        _ => Ok(()),
    }
}

/// Refuses unless the request's token is a management token (always
/// allowed with ACLs off).
pub fn require_management(req: &HttpRequest) -> Result<(), ApiError> {
    match caller(req) {
        Some(c) if !c.acl.is_management() => Err(denied()),
        _ => Ok(()),
    }
}

pub fn denied() -> ApiError {
    ApiError::Forbidden(PERMISSION_DENIED.into())
}

/// Resolved ACLs by secret, valid while the ACL tables stay at the
/// indexes they were resolved at (on a client-only agent, for the TTL:
/// `acl_remote`); and the failed-authentication buckets by client
/// address. One per HTTP server.
#[derive(Default)]
pub struct AclState {
    cache: Mutex<HashMap<String, (AclIndexes, ResolvedToken)>>,
    failures: Mutex<HashMap<IpAddr, Bucket>>,
    /// A client-only agent's: what servers said tokens resolve to.
    remote: RemoteTokens,
}

type AclIndexes = [u64; 3];
/// Most resolved tokens kept (the cache is emptied when it is full).
const CACHE_ENTRIES: usize = 4096;
/// Failed authentications a client address may make at once ...
const FAILURE_BURST: f64 = 10.0;
/// ... and how many more per second after that.
const FAILURES_PER_SECOND: f64 = 1.0;

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl AclState {
    fn resolve(&self, snap: &StateSnapshot, secret: &str) -> Result<ResolvedToken, ServerApiError> {
        let indexes = [
            snap.table_index(Table::AclPolicies),
            snap.table_index(Table::AclTokens),
            snap.table_index(Table::AclRoles),
        ];
        let now = chrono::Utc::now();
        if let Ok(cache) = self.cache.lock() {
            if let Some((at, resolved)) = cache.get(secret) {
                let expired = resolved.token.as_ref().is_some_and(|t| t.is_expired(now));
                if *at == indexes && !expired {
                    return Ok(resolved.clone());
                }
            }
        }
        let resolved = resolve_token(snap, secret, now)?;
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(secret.to_string(), (indexes, resolved.clone()));
        }
        Ok(resolved)
    }

    /// Whether `addr` may try again: false once its bucket is empty.
    fn may_try(&self, addr: Option<IpAddr>) -> bool {
        let (Some(addr), Ok(mut failures)) = (addr, self.failures.lock()) else {
            return true;
        };
        failures.get_mut(&addr).is_none_or(|b| refill(b) >= 1.0)
    }

    /// Takes one failure out of `addr`'s bucket.
    fn record_failure(&self, addr: Option<IpAddr>) {
        let (Some(addr), Ok(mut failures)) = (addr, self.failures.lock()) else {
            return;
        };
        if failures.len() >= CACHE_ENTRIES {
            failures.retain(|_, b| refill(b) < FAILURE_BURST);
        }
        let bucket = failures.entry(addr).or_insert(Bucket {
            tokens: FAILURE_BURST,
            at: Instant::now(),
        });
        refill(bucket);
        bucket.tokens = (bucket.tokens - 1.0).max(0.0);
    }
}

fn refill(b: &mut Bucket) -> f64 {
    let now = Instant::now();
    let earned = now.duration_since(b.at).as_secs_f64() * FAILURES_PER_SECOND;
    b.tokens = (b.tokens + earned).min(FAILURE_BURST);
    b.at = now;
    b.tokens
}

/// The middleware: with ACLs on, the request's rule is checked before the
/// handler runs.
pub async fn enforce(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let Some(info) = req.app_data::<web::Data<AgentInfo>>().cloned() else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    if !info.config.acl.enabled {
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    let Some(pattern) = req.match_pattern() else {
        // No route: the default service answers 404 and serves nothing.
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    let rule = rule_for(req.method().as_str(), &pattern);
    let addr = req.peer_addr().map(|a| a.ip());
    let state = req.app_data::<web::Data<AclState>>().cloned();
    let verdict = match (rule, state) {
        (Some(Rule::Public), _) => Verdict::Allow(None),
        (Some(rule), Some(state)) => verdict_here(&info, &state, req.request(), rule, addr).await,
        // No rule: refused.
        _ => Verdict::Deny(denied()),
    };
    match verdict {
        Verdict::Allow(resolved) => {
            let filter = match (rule, &resolved) {
                (Some(Rule::NsList(cap)), Some(r)) if !r.acl.is_management() => {
                    Some((r.clone(), ListFilter::Items(cap)))
                }
                (Some(Rule::NamespaceList), Some(r)) if !r.acl.is_management() => {
                    Some((r.clone(), ListFilter::Namespaces))
                }
                (Some(Rule::VariableList), Some(r)) if !r.acl.is_management() => {
                    Some((r.clone(), ListFilter::Variables))
                }
                _ => None,
            };
            if let Some(resolved) = resolved {
                req.extensions_mut().insert(resolved);
            }
            let res = next.call(req).await?.map_into_boxed_body();
            match filter {
                Some((resolved, filter)) => filter_list(res, &resolved, filter).await,
                None => Ok(res),
            }
        }
        Verdict::Deny(e) => Ok(req.error_response(e).map_into_boxed_body()),
        Verdict::Throttle => {
            let res = HttpResponse::TooManyRequests()
                .insert_header(("Retry-After", RETRY_AFTER.as_secs().to_string()))
                .content_type("text/plain; charset=utf-8")
                .body("Too many failed authentication attempts");
            Ok(req.into_response(res).map_into_boxed_body())
        }
    }
}

enum Verdict {
    Allow(Option<ResolvedToken>),
    Deny(ApiError),
    Throttle,
}

/// The verdict of this agent: a server's from its state, a client-only
/// agent's from a server's word on the token and its own allocations.
async fn verdict_here(
    info: &AgentInfo,
    state: &AclState,
    req: &HttpRequest,
    rule: Rule,
    addr: Option<IpAddr>,
) -> Verdict {
    match (&info.server, info.client.get()) {
        (Some(server), _) => {
            let authority = ServerAuthority {
                snap: server.store.snapshot(),
                state,
            };
            check(state, &authority, req, rule, addr).await
        }
        (None, Some(client)) => {
            let authority = ClientAuthority {
                info,
                client,
                state,
                hop: Hop::of(req),
            };
            check(state, &authority, req, rule, addr).await
        }
        // Neither: nothing to resolve a token against.
        (None, None) => Verdict::Deny(denied()),
    }
}

/// An object a path may name, whose namespace decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Object {
    Alloc,
    Eval,
    Deployment,
}

/// Where an object named in the path lives, as this agent knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// In this namespace.
    Found(String),
    /// Nowhere this agent knows of: only a management token goes on (to
    /// the handler's 404).
    Missing,
    /// Not here, and the request goes on to an agent that checks it
    /// against its own copy (a client-only agent asking its server).
    Elsewhere,
}

/// What the checks ask of the agent they run on: who a secret is, and
/// what the path names. A server answers from its state
/// ([`ServerAuthority`]); a client-only agent asks a server who the secret
/// is and reads the allocations it runs ([`ClientAuthority`]). The
/// checks themselves ([`check`], [`allows`]) are the same on both.
pub(crate) trait Authority {
    /// The token `secret` (empty: none) resolves to.
    async fn resolve(&self, secret: &str) -> Result<ResolvedToken, Refusal>;
    /// The namespace of object `id`.
    fn namespace_of(&self, object: Object, id: &str) -> Lookup;
    /// Whether `secret` is the `SecretID` of node `node_id`.
    fn is_node_secret(&self, node_id: &str, secret: &str) -> bool;
    /// For a node's `SecretID`: whether its workloads may read the
    /// variable at `path` in `namespace`; `None` when it is no node's.
    fn workload_reads(&self, secret: &str, namespace: &str, path: &str) -> Option<bool>;
}

/// A server's answers: its state store's snapshot.
struct ServerAuthority<'a> {
    snap: StateSnapshot,
    state: &'a AclState,
}

impl Authority for ServerAuthority<'_> {
    async fn resolve(&self, secret: &str) -> Result<ResolvedToken, Refusal> {
        self.state
            .resolve(&self.snap, secret)
            .map_err(|e| Refusal::Token(ApiError::from(e)))
    }

    fn namespace_of(&self, object: Object, id: &str) -> Lookup {
        let snap = &self.snap;
        let namespace = match object {
            Object::Alloc => id
                .parse()
                .ok()
                .and_then(|id| snap.alloc(&id))
                .map(|a| a.namespace.to_string()),
            Object::Eval => id
                .parse()
                .ok()
                .and_then(|id| snap.eval(&id))
                .map(|e| e.namespace.clone()),
            Object::Deployment => id
                .parse()
                .ok()
                .and_then(|id| snap.deployment(&id))
                .map(|d| d.namespace.clone()),
        };
        namespace.map_or(Lookup::Missing, Lookup::Found)
    }

    fn is_node_secret(&self, node_id: &str, secret: &str) -> bool {
        let node = node_id.parse().ok().and_then(|id| self.snap.node(&id));
        node.is_some_and(|n| {
            !secret.is_empty() && constant_time_eq(n.secret_id.as_bytes(), secret.as_bytes())
        })
    }

    fn workload_reads(&self, secret: &str, namespace: &str, path: &str) -> Option<bool> {
        let node = node_by_secret(&self.snap, secret)?;
        Some(workload_reads(&self.snap, node, namespace, path))
    }
}

/// A client-only agent's answers: a server's word on the token
/// (`acl_remote`, cached for the TTL), and the allocations its client
/// keeps (their namespace).
struct ClientAuthority<'a> {
    info: &'a AgentInfo,
    client: &'a ClientHandle,
    state: &'a AclState,
    hop: Hop,
}

impl Authority for ClientAuthority<'_> {
    async fn resolve(&self, secret: &str) -> Result<ResolvedToken, Refusal> {
        self.state
            .remote
            .resolve(self.info, self.client, secret)
            .await
    }

    fn namespace_of(&self, object: Object, id: &str) -> Lookup {
        let local = match (object, id.parse::<AllocId>()) {
            (Object::Alloc, Ok(id)) => persisted_alloc(&self.info.data_dir, &id).ok().flatten(),
            _ => None,
        };
        match local {
            Some((alloc, _)) => Lookup::Found(alloc.namespace.to_string()),
            // Straight from a user: the request goes on to a server, which
            // checks the object it knows.
            None if object == Object::Alloc && self.hop == Hop::Direct => Lookup::Elsewhere,
            None => Lookup::Missing,
        }
    }

    fn is_node_secret(&self, node_id: &str, secret: &str) -> bool {
        // The node routes are a server's; this agent's own node only.
        self.client.node_id.to_string() == node_id
            && !secret.is_empty()
            && constant_time_eq(self.client.node_secret.as_bytes(), secret.as_bytes())
    }

    fn workload_reads(&self, _secret: &str, _namespace: &str, _path: &str) -> Option<bool> {
        // Variables are a server's to serve.
        None
    }
}

async fn check(
    state: &AclState,
    authority: &impl Authority,
    req: &HttpRequest,
    rule: Rule,
    addr: Option<IpAddr>,
) -> Verdict {
    let secret = request_secret(req);
    if !state.may_try(addr) {
        return Verdict::Throttle;
    }
    // A registering node's secret is not an ACL token: its handler checks
    // it (against the node's stored secret, or the body's for a new node).
    if rule == Rule::NodeRegister {
        return Verdict::Allow(None);
    }
    // A node's own secret is not an ACL token: node routes check it first.
    let node_secret =
        || authority.is_node_secret(&path_param(req, "id").unwrap_or_default(), &secret);
    if matches!(
        rule,
        Rule::NodeSecret | Rule::NodeSecretOrRead | Rule::NodeSecretOnly
    ) && node_secret()
    {
        return Verdict::Allow(None);
    }
    if rule == Rule::NodeSecretOnly {
        state.record_failure(addr);
        return Verdict::Deny(denied());
    }
    let resolved = match authority.resolve(&secret).await {
        Ok(r) => r,
        Err(Refusal::NoServer(e)) => return Verdict::Deny(e),
        Err(Refusal::Token(e)) => {
            // Not a token: a client agent reading its workloads' variables
            // with its node's secret (not a failed login).
            if rule == Rule::Variable(VariableOp::Read) {
                let (namespace, path) = (request_namespace(req), variable_path(req));
                if let Some(allowed) = authority.workload_reads(&secret, &namespace, &path) {
                    return if allowed {
                        Verdict::Allow(None)
                    } else {
                        Verdict::Deny(denied())
                    };
                }
            }
            state.record_failure(addr);
            return Verdict::Deny(e);
        }
    };
    if allows(authority, req, rule, &resolved) {
        Verdict::Allow(Some(resolved))
    } else {
        Verdict::Deny(denied())
    }
}

/// Whether `resolved` satisfies `rule` for this request.
fn allows(
    authority: &impl Authority,
    req: &HttpRequest,
    rule: Rule,
    resolved: &ResolvedToken,
) -> bool {
    let acl = &resolved.acl;
    let namespace = || request_namespace(req);
    let path_id = || {
        path_param(req, "id")
            .or_else(|| path_param(req, "alloc_id"))
            .unwrap_or_default()
    };
    let object = |object: Object, cap: Capability| {
        object_namespace(authority.namespace_of(object, &path_id()), acl, cap)
    };
    match rule {
        Rule::Public | Rule::NodeRegister => true,
        Rule::NodeSecretOnly => false,
        Rule::NamespaceList => true,
        Rule::NamespaceRead => path_param(req, "name").is_some_and(|ns| acl.allow_namespace(&ns)),
        Rule::Variable(op) => acl.allow_variable_op(&namespace(), &variable_path(req), op),
        Rule::Token | Rule::Stream | Rule::NsBody(_) | Rule::NsList(_) | Rule::VariableList => {
            rule != Rule::Token || resolved.token.is_some()
        }
        Rule::Management => acl.is_management(),
        Rule::Ns(cap) => acl.allow_namespace_op(&namespace(), cap),
        Rule::Alloc(cap) => object(Object::Alloc, cap),
        Rule::Eval(cap) => object(Object::Eval, cap),
        Rule::Deployment(cap) => object(Object::Deployment, cap),
        Rule::NodeRead | Rule::NodeSecretOrRead => acl.allow_node_read(),
        Rule::NodeWrite | Rule::NodeSecret => acl.allow_node_write(),
        Rule::AgentRead => acl.allow_agent_read(),
        Rule::AgentWrite => acl.allow_agent_write(),
        Rule::OperatorRead => acl.allow_operator_read(),
        Rule::OperatorWrite => acl.allow_operator_write(),
    }
}

/// An object's namespace grants `cap`; an object not found is left to
/// the handler's 404 only for a management token; one known elsewhere is
/// checked there.
fn object_namespace(lookup: Lookup, acl: &herder::acl::Acl, cap: Capability) -> bool {
    match lookup {
        Lookup::Found(ns) => acl.allow_namespace_op(&ns, cap),
        Lookup::Missing => acl.is_management(),
        Lookup::Elsewhere => true,
    }
}

/// A `{name}` segment of the request's path. The middleware runs before
/// the router fills in `match_info`, so the path is read against its
/// pattern here (the patterns of [`RULES`] hold whole segments only).
fn path_param(req: &HttpRequest, name: &str) -> Option<String> {
    let pattern = req.match_pattern()?;
    let wanted = format!("{{{name}}}");
    let at = pattern.split('/').position(|seg| seg == wanted)?;
    let raw = req.path().split('/').nth(at)?;
    percent_decode(raw)
}

/// `%XX` escapes decoded (IDs are plain, but a name may be escaped).
fn percent_decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `?namespace=`, `default` when absent.
fn request_namespace(req: &HttpRequest) -> String {
    web::Query::<HashMap<String, String>>::from_query(req.query_string())
        .ok()
        .and_then(|q| q.into_inner().remove("namespace"))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// The variable path of a `/v1/var/{path:.*}` request, as its handler
/// reads it (decoded, without leading or trailing slashes).
fn variable_path(req: &HttpRequest) -> String {
    let raw = req.path().strip_prefix("/v1/var/").unwrap_or_default();
    percent_decode(raw)
        .unwrap_or_default()
        .trim_matches('/')
        .to_string()
}

/// The node whose `SecretID` is `secret` (compared in constant time).
fn node_by_secret<'a>(snap: &'a StateSnapshot, secret: &str) -> Option<&'a Node> {
    if secret.is_empty() {
        return None;
    }
    snap.nodes()
        .find(|n| constant_time_eq(n.secret_id.as_bytes(), secret.as_bytes()))
        .map(|n| &**n)
}

/// Whether `node` runs a live allocation whose workload may read the
/// variable at `path` in `namespace` (its job's, group's or task's own
/// path, or `nomad/jobs`).
fn workload_reads(snap: &StateSnapshot, node: &Node, namespace: &str, path: &str) -> bool {
    snap.allocs_by_node(&node.id)
        .filter(|a| !a.is_terminal() && &*a.namespace == namespace)
        .any(|alloc| {
            let job = snap.job_by_version(&alloc.namespace, &alloc.job_id, alloc.job_version);
            let tasks: Vec<&str> = job
                .and_then(|j| j.task_groups.iter().find(|g| *g.name == *alloc.task_group))
                .map(|g| g.tasks.iter().map(|t| t.name.as_str()).collect())
                .unwrap_or_default();
            let claim = WorkloadClaim {
                namespace: &alloc.namespace,
                job: &alloc.job_id,
                group: &alloc.task_group,
                tasks: &tasks,
            };
            workload_may_read(&claim, namespace, path)
        })
}

/// Which items of a list answer a token sees.
#[derive(Clone, Copy)]
enum ListFilter {
    /// Those whose `Namespace` grants the capability.
    Items(Capability),
    /// The namespaces (by `Name`) the token holds any capability in.
    Namespaces,
    /// The variables whose `Namespace` and `Path` grant `list`.
    Variables,
}

impl ListFilter {
    fn keeps(self, item: &serde_json::Value, acl: &herder::acl::Acl) -> bool {
        let field = |name: &str| item.get(name).and_then(|n| n.as_str());
        match self {
            ListFilter::Items(cap) => {
                field("Namespace").is_some_and(|ns| acl.allow_namespace_op(ns, cap))
            }
            ListFilter::Namespaces => field("Name").is_some_and(|ns| acl.allow_namespace(ns)),
            ListFilter::Variables => match (field("Namespace"), field("Path")) {
                (Some(ns), Some(path)) => acl.allow_variable_op(ns, path, VariableOp::List),
                _ => false,
            },
        }
    }
}

/// Keeps the items of a JSON list answer the token may see.
async fn filter_list(
    res: ServiceResponse<BoxBody>,
    resolved: &ResolvedToken,
    filter: ListFilter,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    if !res.status().is_success() {
        return Ok(res);
    }
    let (req, res) = res.into_parts();
    let (head, body) = res.into_parts();
    let bytes = actix_web::body::to_bytes(body)
        .await
        .map_err(|_| actix_web::error::ErrorInternalServerError("reading the answer"))?;
    let filtered = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Array(items)) => {
            let kept: Vec<serde_json::Value> = items
                .into_iter()
                .filter(|item| filter.keeps(item, &resolved.acl))
                .collect();
            serde_json::to_vec(&kept).map_err(actix_web::error::ErrorInternalServerError)?
        }
        _ => bytes.to_vec(),
    };
    let mut head = head;
    head.headers_mut()
        .remove(actix_web::http::header::CONTENT_LENGTH);
    let res = head.set_body(BoxBody::new(filtered));
    Ok(ServiceResponse::new(req, res))
}

/// How long a throttled client is told to wait (one failure's refill).
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
