//! A small blocking client for the Nomad-compatible HTTP API, used by the
//! `herder` command line verbs, and by an agent forwarding a request to the
//! agent that can answer it (see `http::forward`).
//!
//! It speaks only what a Nomad server also answers (paths, PascalCase JSON,
//! `X-Nomad-Token`, `X-Nomad-Index` and blocking queries), so the CLI works
//! against herder and against Nomad alike. Answers are kept as raw JSON: the
//! verbs print them verbatim with `-json` and decode only the fields they
//! show, so fields one server has and the other lacks never break a verb.

use serde::de::DeserializeOwned;
use serde_json::Value;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

/// Where the CLI looks for an agent when nothing says otherwise.
pub const DEFAULT_ADDRESS: &str = "http://127.0.0.1:4646";

/// How long to wait for a TCP connection to the agent.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an ordinary (non-blocking) request may take in total.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Slack on top of a blocking query's `wait`: the server may add up to
/// wait/16 of jitter and then still has to answer.
const BLOCKING_SLACK: Duration = Duration::from_secs(10);

/// Why a request to the agent failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No HTTP answer at all: refused, timed out, name not resolved.
    #[error(
        "cannot reach the agent at {address} ({method} {path}): {reason}\n\
         Is a herder agent running there? Set HERDER_ADDR or pass -address."
    )]
    Unreachable {
        address: String,
        method: String,
        path: String,
        reason: String,
    },
    /// The agent answered with an error status; `body` is its text.
    #[error("{method} {path}: Unexpected response code: {status} ({body})")]
    Status {
        method: String,
        path: String,
        status: u16,
        body: String,
    },
    /// The agent answered 2xx with something that is not the expected JSON.
    #[error("{method} {path}: cannot read the answer: {reason}")]
    Decode {
        method: String,
        path: String,
        reason: String,
    },
    /// `-address` / `HERDER_ADDR` is not an http:// or https:// URL.
    #[error("invalid agent address {address:?}: {reason}")]
    BadAddress { address: String, reason: String },
}

impl ApiError {
    /// The HTTP status, when the agent answered with an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Where to connect and as whom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    pub address: String,
    pub token: Option<String>,
}

impl ClientConfig {
    /// Flags win over `HERDER_ADDR`/`HERDER_TOKEN`, which win over Nomad's
    /// `NOMAD_ADDR`/`NOMAD_TOKEN`, which win over the default address.
    /// `env` looks a variable up (std::env::var in the binary).
    pub fn resolve(
        address_flag: Option<&str>,
        token_flag: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let pick = |flag: Option<&str>, ours: &str, nomads: &str| {
            flag.map(str::to_string)
                .or_else(|| env(ours).filter(|v| !v.is_empty()))
                .or_else(|| env(nomads).filter(|v| !v.is_empty()))
        };
        ClientConfig {
            address: pick(address_flag, "HERDER_ADDR", "NOMAD_ADDR")
                .unwrap_or_else(|| DEFAULT_ADDRESS.to_string()),
            token: pick(token_flag, "HERDER_TOKEN", "NOMAD_TOKEN"),
        }
    }
}

/// One decoded answer: its JSON body (`Null` when empty) and the
/// `X-Nomad-Index` header (0 when absent).
#[derive(Clone, Debug)]
pub struct Answer {
    pub body: Value,
    pub index: u64,
}

impl Answer {
    /// Decodes the body into a view type. Explicit `null`s are dropped
    /// first, so Nomad's `"ClassFiltered": null` reads as the default.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        decode_lenient(&self.body)
    }

    /// [`decode`](Self::decode) for an answer read once: the nulls are
    /// dropped in place rather than from a copy (a large list, polled, was
    /// mostly copying).
    pub fn into_decoded<T: DeserializeOwned>(self) -> Result<T, serde_json::Error> {
        decode_owned(self.body)
    }
}

/// A raw answer (a file, not JSON): its bytes, `X-Nomad-Index` (0 when
/// absent) and every header.
#[derive(Clone, Debug)]
pub struct RawAnswer {
    pub body: Vec<u8>,
    pub index: u64,
    headers: Vec<(String, String)>,
}

impl RawAnswer {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What a request carries.
#[derive(Clone, Copy)]
enum RequestBody<'a> {
    Empty,
    Json(&'a Value),
    Bytes(&'a [u8]),
}

/// Decodes `value` after removing every `null` object member.
pub fn decode_lenient<T: DeserializeOwned>(value: &Value) -> Result<T, serde_json::Error> {
    decode_owned(value.clone())
}

/// [`decode_lenient`] of a value the caller gives up.
fn decode_owned<T: DeserializeOwned>(mut value: Value) -> Result<T, serde_json::Error> {
    strip_nulls(&mut value);
    serde_json::from_value(value)
}

fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// The blocking HTTP client.
#[derive(Clone, Debug)]
pub struct ApiClient {
    base: String,
    token: Option<String>,
    /// Sent as `?namespace=` / `?region=` with every request that does
    /// not name its own (the CLI's `-namespace` and `-region`).
    namespace: Option<String>,
    region: Option<String>,
    agent: ureq::Agent,
    timeout: Duration,
    /// Sent with every request besides the token.
    headers: Vec<(String, String)>,
}

impl ApiClient {
    /// Checks the address and builds a client; nothing is sent yet.
    pub fn new(config: ClientConfig) -> Result<Self, ApiError> {
        let base = normalize_address(&config.address)?;
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(CONNECT_TIMEOUT)
            .build();
        Ok(ApiClient {
            base,
            token: config.token,
            namespace: None,
            region: None,
            agent,
            timeout: DEFAULT_REQUEST_TIMEOUT,
            headers: Vec::new(),
        })
    }

    /// Every request asks for this namespace and region (unless its query
    /// names its own), as Nomad's CLI does with `-namespace`/`-region`.
    pub fn with_scope(mut self, namespace: Option<String>, region: Option<String>) -> Self {
        self.namespace = namespace.filter(|n| !n.is_empty());
        self.region = region.filter(|r| !r.is_empty());
        self
    }

    /// Sends `name: value` with every request (an agent marks the requests
    /// it forwards).
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Speaks TLS to `https://` addresses with `tls` (the CA to trust and
    /// the certificate to present: herder-common's `tls::client_config`)
    /// instead of the public roots.
    pub fn with_tls(mut self, tls: Arc<rustls::ClientConfig>) -> Self {
        self.agent = ureq::AgentBuilder::new()
            .timeout_connect(CONNECT_TIMEOUT)
            .tls_config(tls)
            .build();
        self
    }

    /// Overrides the per-request timeout of non-blocking requests.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The agent's base URL, e.g. `http://127.0.0.1:4646`.
    pub fn address(&self) -> &str {
        &self.base
    }

    /// The ACL token sent with each request, if any (for connections made
    /// outside this client, such as `alloc exec`'s websocket).
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    pub fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Answer, ApiError> {
        self.send("GET", path, query, None, self.timeout)
    }

    /// A blocking query: the agent answers once its index passes `index`
    /// or `wait` runs out.
    pub fn get_blocking(&self, path: &str, index: u64, wait: Duration) -> Result<Answer, ApiError> {
        let query = [
            ("index", index.to_string()),
            ("wait", format!("{}ms", wait.as_millis())),
        ];
        self.send("GET", path, &query, None, wait + BLOCKING_SLACK)
    }

    pub fn put(
        &self,
        path: &str,
        query: &[(&str, String)],
        body: &Value,
    ) -> Result<Answer, ApiError> {
        self.send("PUT", path, query, Some(body), self.timeout)
    }

    pub fn post(
        &self,
        path: &str,
        query: &[(&str, String)],
        body: &Value,
    ) -> Result<Answer, ApiError> {
        self.send("POST", path, query, Some(body), self.timeout)
    }

    /// A GET whose answer is a file (an operator snapshot), read whole.
    pub fn get_raw(&self, path: &str, query: &[(&str, String)]) -> Result<RawAnswer, ApiError> {
        let response = self.call("GET", path, query, RequestBody::Empty, Some(self.timeout))?;
        let headers = response
            .headers_names()
            .into_iter()
            .filter_map(|name| {
                let value = response.header(&name)?.to_string();
                Some((name, value))
            })
            .collect();
        let index = response
            .header("X-Nomad-Index")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let mut body = Vec::new();
        response
            .into_reader()
            .read_to_end(&mut body)
            .map_err(|e| ApiError::Decode {
                method: "GET".into(),
                path: path.to_string(),
                reason: format!("the answer broke off: {e}"),
            })?;
        Ok(RawAnswer {
            body,
            index,
            headers,
        })
    }

    /// A PUT whose body is a file (an operator snapshot), answered in JSON.
    pub fn put_raw(
        &self,
        path: &str,
        query: &[(&str, String)],
        body: &[u8],
    ) -> Result<Answer, ApiError> {
        let response = self.call(
            "PUT",
            path,
            query,
            RequestBody::Bytes(body),
            Some(self.timeout),
        )?;
        self.read_answer("PUT", path, response)
    }

    pub fn delete(&self, path: &str, query: &[(&str, String)]) -> Result<Answer, ApiError> {
        self.send("DELETE", path, query, None, self.timeout)
    }

    /// A GET whose answer is a stream (the logs API): the body is read as
    /// it arrives, with no overall timeout (a followed log never ends on
    /// its own); only connecting is bounded.
    pub fn get_stream(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Box<dyn Read + Send + Sync>, ApiError> {
        let response = self.call("GET", path, query, RequestBody::Empty, None)?;
        Ok(Box::new(response.into_reader()))
    }

    /// The same client (token, timeouts) talking to another agent, such as
    /// the one whose client runs an allocation.
    pub fn at_address(&self, address: &str) -> Result<ApiClient, ApiError> {
        Ok(ApiClient {
            base: normalize_address(address)?,
            ..self.clone()
        })
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Answer, ApiError> {
        let body = body.map_or(RequestBody::Empty, RequestBody::Json);
        let response = self.call(method, path, query, body, Some(timeout))?;
        self.read_answer(method, path, response)
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, String)],
        body: RequestBody<'_>,
        timeout: Option<Duration>,
    ) -> Result<ureq::Response, ApiError> {
        let mut request = self.agent.request(method, &format!("{}{path}", self.base));
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        if let Some(token) = &self.token {
            request = request.set("X-Nomad-Token", token);
        }
        for (name, value) in &self.headers {
            request = request.set(name, value);
        }
        for (key, value) in query {
            request = request.query(key, value);
        }
        for (key, scope) in [("namespace", &self.namespace), ("region", &self.region)] {
            if let Some(value) = scope
                .as_ref()
                .filter(|_| !query.iter().any(|(k, _)| *k == key))
            {
                request = request.query(key, value);
            }
        }
        let result = match body {
            RequestBody::Json(json) => request.send_json(json),
            RequestBody::Bytes(bytes) => request.send_bytes(bytes),
            RequestBody::Empty => request.call(),
        };
        match result {
            Ok(response) => Ok(response),
            Err(ureq::Error::Status(status, response)) => Err(ApiError::Status {
                method: method.to_string(),
                path: path.to_string(),
                status,
                body: read_text(response).trim().to_string(),
            }),
            Err(ureq::Error::Transport(transport)) => Err(ApiError::Unreachable {
                address: self.base.clone(),
                method: method.to_string(),
                path: path.to_string(),
                reason: transport.to_string(),
            }),
        }
    }

    fn read_answer(
        &self,
        method: &str,
        path: &str,
        response: ureq::Response,
    ) -> Result<Answer, ApiError> {
        let index = response
            .header("X-Nomad-Index")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let text = read_text(response);
        let body = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|e| ApiError::Decode {
                method: method.to_string(),
                path: path.to_string(),
                reason: e.to_string(),
            })?
        };
        Ok(Answer { body, index })
    }
}

fn read_text(response: ureq::Response) -> String {
    let mut text = String::new();
    // A truncated error body still says more than none, so a read error
    // here keeps what arrived.
    let _ = response.into_reader().read_to_string(&mut text);
    text
}

/// `127.0.0.1:4646` -> `http://127.0.0.1:4646`; trailing slashes dropped.
fn normalize_address(address: &str) -> Result<String, ApiError> {
    let trimmed = address.trim().trim_end_matches('/');
    let with_scheme = if trimmed.contains("://") {
        trimmed.to_string()
    } else {
        format!("http://{trimmed}")
    };
    let rest = with_scheme
        .strip_prefix("http://")
        .or_else(|| with_scheme.strip_prefix("https://"));
    if rest.is_none_or(str::is_empty) {
        return Err(ApiError::BadAddress {
            address: address.to_string(),
            reason: "expected http://host:port or https://host:port".to_string(),
        });
    }
    Ok(with_scheme)
}

/// Percent-encodes one path segment (a job ID may hold `/` or spaces).
pub fn path_segment(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |key| owned.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    /// Both ways of decoding read an explicit `null`, at any depth, as
    /// the field left out.
    #[test]
    fn nulls_read_as_defaults_borrowed_or_owned() {
        #[derive(serde::Deserialize, Debug, PartialEq, Default)]
        #[serde(rename_all = "PascalCase", default)]
        struct Inner {
            count: u64,
        }
        #[derive(serde::Deserialize, Debug, PartialEq, Default)]
        #[serde(rename_all = "PascalCase", default)]
        struct Outer {
            name: String,
            items: Vec<Inner>,
        }
        let answer = Answer {
            body: serde_json::json!({"Name": null, "Items": [{"Count": null}, {"Count": 3}]}),
            index: 7,
        };
        let want = Outer {
            name: String::new(),
            items: vec![Inner { count: 0 }, Inner { count: 3 }],
        };
        assert_eq!(answer.decode::<Outer>().unwrap(), want);
        assert_eq!(answer.into_decoded::<Outer>().unwrap(), want);
    }

    #[test]
    fn flags_beat_herder_env_which_beats_nomad_env() {
        let env = env_of(&[
            ("HERDER_ADDR", "http://h:1"),
            ("NOMAD_ADDR", "http://n:2"),
            ("NOMAD_TOKEN", "nt"),
        ]);
        let from_env = ClientConfig::resolve(None, None, &env);
        assert_eq!(from_env.address, "http://h:1");
        assert_eq!(from_env.token.as_deref(), Some("nt"));
        let from_flags = ClientConfig::resolve(Some("http://f:3"), Some("ft"), &env);
        assert_eq!(from_flags.address, "http://f:3");
        assert_eq!(from_flags.token.as_deref(), Some("ft"));
        let nomad_only = ClientConfig::resolve(None, None, env_of(&[("NOMAD_ADDR", "http://n:2")]));
        assert_eq!(nomad_only.address, "http://n:2");
        let nothing = ClientConfig::resolve(None, None, env_of(&[]));
        assert_eq!(nothing.address, DEFAULT_ADDRESS);
        assert_eq!(nothing.token, None);
    }

    #[test]
    fn addresses_are_normalized_http_or_https() {
        assert_eq!(
            normalize_address("127.0.0.1:4646/").unwrap(),
            "http://127.0.0.1:4646"
        );
        assert_eq!(normalize_address("https://x:1/").unwrap(), "https://x:1");
        assert!(normalize_address("ftp://x").is_err());
    }

    #[test]
    fn path_segments_escape_slashes_and_spaces() {
        assert_eq!(path_segment("a b/c"), "a%20b%2Fc");
        assert_eq!(path_segment("web-1.x_y"), "web-1.x_y");
    }

    #[test]
    fn unreachable_agent_names_the_address_and_the_env_var() {
        // A port that was just free: nothing listens there.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let client = ApiClient::new(ClientConfig {
            address: format!("http://127.0.0.1:{port}"),
            token: None,
        })
        .unwrap();
        let err = client.get("/v1/jobs", &[]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        assert!(text.contains("HERDER_ADDR"), "{text}");
    }
}
