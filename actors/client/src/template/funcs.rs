//! The functions a task's template may call: consul-template's that need
//! neither Consul nor Vault, Nomad's native service catalog
//! (`nomadService`) and variables (`nomadVar`, `nomadVarExists`,
//! `nomadVarList`, in the job's namespace, read with the node's SecretID),
//! read from the client's servers.
//!
//! `env` reads the task's environment, and Nomad's node variables
//! (`node.unique.name`, `attr.kernel.name`, `meta.rack`, ...) the way
//! Nomad's task environment offers them to templates. Functions that need
//! Consul or Vault refuse the template with a message naming them.

use super::engine::{print_value, Funcs};
use crate::task_dir::interpolate;
use base64::Engine as _;
use herder::structs::unhonoured::CONSUL_VAULT_FUNCTIONS;
use herder::structs::Node;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The most services `nomadService` reads for one name, and the most a
/// variable or a variable list may weigh.
const MAX_SERVICE_ANSWER_BYTES: u64 = 4 << 20;

/// Where `nomadService` reads the catalog: the client's servers, shared
/// with the link that keeps them (an operator may replace them).
#[derive(Clone)]
pub struct ServiceCatalog {
    servers: Arc<RwLock<Vec<String>>>,
    http: ureq::Agent,
}

impl Default for ServiceCatalog {
    /// A catalog with no server: `nomadService` fails (tests, simulated
    /// nodes).
    fn default() -> Self {
        ServiceCatalog::new(Vec::new())
    }
}

impl ServiceCatalog {
    pub fn new(servers: Vec<String>) -> Self {
        let http = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .build();
        ServiceCatalog {
            servers: Arc::new(RwLock::new(servers)),
            http,
        }
    }

    /// Replaces the servers asked (`http://host:port` each).
    pub fn set_servers(&self, servers: Vec<String>) {
        if let Ok(mut s) = self.servers.write() {
            *s = servers;
        }
    }

    /// The registrations of `name` in `namespace`, in consul-template's
    /// shape for `nomadService` (`.Name`, `.Address`, `.Port`, `.Tags`, ...).
    /// Blocking: called on the blocking pool.
    pub fn lookup(&self, namespace: &str, name: &str) -> Result<Value, String> {
        let path = format!("/v1/service/{}", encode_path(name));
        let answer = self.get_json(&path, &[("namespace", namespace)], None)?;
        let regs: Vec<Value> = serde_json::from_value(answer.unwrap_or(Value::Null))
            .map_err(|e| format!("the catalog answer: {e}"))?;
        Ok(Value::Array(
            regs.into_iter().map(as_nomad_service).collect(),
        ))
    }

    /// One variable's items (`nomadVar`) in `namespace`, read with the
    /// node's SecretID; `None` when there is no such variable.
    pub fn variable(
        &self,
        namespace: &str,
        path: &str,
        secret_id: &str,
    ) -> Result<Option<Value>, String> {
        let segments: Vec<String> = path.trim_matches('/').split('/').map(encode_path).collect();
        let url_path = format!("/v1/var/{}", segments.join("/"));
        let answer = self.get_json(&url_path, &[("namespace", namespace)], Some(secret_id))?;
        Ok(answer.map(|v| v.get("Items").cloned().unwrap_or_else(|| json!({}))))
    }

    /// The metadata of the variables under `prefix` (`nomadVarList`).
    pub fn variables(
        &self,
        namespace: &str,
        prefix: &str,
        secret_id: &str,
    ) -> Result<Value, String> {
        let query = [("namespace", namespace), ("prefix", prefix)];
        Ok(self
            .get_json("/v1/vars", &query, Some(secret_id))?
            .unwrap_or_else(|| json!([])))
    }

    /// GETs `path` from the first server that answers; `None` on a 404.
    fn get_json(
        &self,
        path: &str,
        query: &[(&str, &str)],
        token: Option<&str>,
    ) -> Result<Option<Value>, String> {
        let servers = self.servers.read().map(|s| s.clone()).unwrap_or_default();
        if servers.is_empty() {
            return Err("no server is known to read the service catalog from".into());
        }
        let mut last = String::new();
        for server in servers {
            let mut request = self.http.get(&format!("{server}{path}"));
            for (k, v) in query {
                request = request.query(k, v);
            }
            if let Some(token) = token {
                request = request.set("X-Nomad-Token", token);
            }
            match request.call() {
                Ok(r) => {
                    let mut body = String::new();
                    use std::io::Read as _;
                    r.into_reader()
                        .take(MAX_SERVICE_ANSWER_BYTES)
                        .read_to_string(&mut body)
                        .map_err(|e| format!("reading {path} from {server}: {e}"))?;
                    return serde_json::from_str(&body)
                        .map(Some)
                        .map_err(|e| format!("the answer to {path} from {server}: {e}"));
                }
                Err(ureq::Error::Status(404, _)) => return Ok(None),
                Err(e) => last = format!("{server}: {e}"),
            }
        }
        Err(format!("cannot read {path} from the servers: {last}"))
    }
}

/// A registration as consul-template's `NomadService` names its fields.
fn as_nomad_service(mut reg: Value) -> Value {
    if let Value::Object(m) = &mut reg {
        if let Some(name) = m.get("ServiceName").cloned() {
            m.insert("Name".into(), name);
        }
    }
    reg
}

fn encode_path(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The functions of one task's templates.
pub struct TaskFuncs<'a> {
    pub env: &'a BTreeMap<String, String>,
    pub node: &'a Node,
    pub namespace: &'a str,
    pub catalog: &'a ServiceCatalog,
}

impl Funcs for TaskFuncs<'_> {
    fn call(&mut self, name: &str, args: Vec<Value>) -> Option<Result<Value, String>> {
        if CONSUL_VAULT_FUNCTIONS.contains(&name) {
            return Some(Err(
                "needs Consul or Vault, which herder does not have".into()
            ));
        }
        Some(match name {
            "env" => one_str(&args).map(|k| Value::String(self.env_value(&k))),
            "nomadService" => match args.as_slice() {
                [Value::String(n)] => self.catalog.lookup(self.namespace, n),
                _ => Err("takes one service name".into()),
            },
            "nomadVar" | "nomadVarExists" | "nomadVarList" => self.variable_func(name, &args),
            _ => return string_func(name, &args),
        })
    }
}

impl TaskFuncs<'_> {
    /// `nomadVar "path"` (the items, `{{ .key }}`), `nomadVarExists
    /// "path"`, `nomadVarList ["prefix"]`, in the job's namespace.
    fn variable_func(&self, name: &str, args: &[Value]) -> Result<Value, String> {
        let secret = self.node.secret_id.as_str();
        match (name, args) {
            ("nomadVar", [Value::String(path)]) => self
                .catalog
                .variable(self.namespace, path, secret)?
                .ok_or_else(|| format!("variable {path:?} not found")),
            ("nomadVarExists", [Value::String(path)]) => Ok(Value::Bool(
                self.catalog
                    .variable(self.namespace, path, secret)?
                    .is_some(),
            )),
            ("nomadVarList", []) => self.catalog.variables(self.namespace, "", secret),
            ("nomadVarList", [Value::String(prefix)]) => {
                self.catalog.variables(self.namespace, prefix, secret)
            }
            _ => Err("takes one variable path".into()),
        }
    }

    /// A task variable, else a node variable (`node.*`, `attr.*`,
    /// `meta.*`), else empty, as Nomad's template environment answers.
    fn env_value(&self, key: &str) -> String {
        if let Some(v) = self.env.get(key) {
            return v.clone();
        }
        let node_scoped = ["node.", "attr.", "meta."]
            .iter()
            .any(|p| key.starts_with(p));
        if !node_scoped {
            return String::new();
        }
        let reference = format!("${{{key}}}");
        let value = interpolate(&reference, self.env, self.node);
        if value == reference {
            String::new()
        } else {
            value
        }
    }
}

fn one_str(args: &[Value]) -> Result<String, String> {
    match args {
        [v] => Ok(print_value(v)),
        _ => Err(format!("takes one argument, got {}", args.len())),
    }
}

fn strs<const N: usize>(args: &[Value]) -> Result<[String; N], String> {
    let v: Vec<String> = args.iter().map(print_value).collect();
    v.try_into()
        .map_err(|v: Vec<String>| format!("takes {N} arguments, got {}", v.len()))
}

/// The string, list and encoding functions (consul-template's argument
/// order: the piped value comes last, `{{ "a,b" | split "," }}`).
fn string_func(name: &str, args: &[Value]) -> Option<Result<Value, String>> {
    let s = |r: Result<String, String>| r.map(Value::String);
    Some(match name {
        "toUpper" => s(one_str(args).map(|a| a.to_uppercase())),
        "toLower" => s(one_str(args).map(|a| a.to_lowercase())),
        "trimSpace" => s(one_str(args).map(|a| a.trim().to_string())),
        // consul-template trims the text first: a trailing newline from a
        // file makes no empty last element.
        "split" => strs::<2>(args).map(|[sep, text]| {
            let text = text.trim();
            if text.is_empty() {
                return json!([]);
            }
            json!(text.split(sep.as_str()).collect::<Vec<_>>())
        }),
        "join" => match args {
            [sep, Value::Array(items)] => Ok(Value::String(
                items
                    .iter()
                    .map(print_value)
                    .collect::<Vec<_>>()
                    .join(&print_value(sep)),
            )),
            _ => Err("takes a separator and a list".into()),
        },
        "contains" => match args {
            [needle, Value::Array(items)] => Ok(Value::Bool(items.contains(needle))),
            [needle, Value::Object(m)] => Ok(Value::Bool(m.contains_key(&print_value(needle)))),
            [needle, hay] => Ok(Value::Bool(print_value(hay).contains(&print_value(needle)))),
            _ => Err("takes a value and a list or string".into()),
        },
        "replaceAll" => s(strs::<3>(args).map(|[from, to, text]| text.replace(&from, &to))),
        "parseInt" => one_str(args).and_then(|a| {
            a.trim()
                .parse::<i64>()
                .map(Value::from)
                .map_err(|e| format!("{a:?}: {e}"))
        }),
        "parseBool" => one_str(args).and_then(|a| match a.trim() {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(Value::Bool(true)),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(Value::Bool(false)),
            other => Err(format!("{other:?} is not a boolean")),
        }),
        "toJSON" => match args {
            [v] => serde_json::to_string(v)
                .map(Value::String)
                .map_err(|e| e.to_string()),
            _ => Err("takes one argument".into()),
        },
        "base64Encode" => {
            s(one_str(args).map(|a| base64::engine::general_purpose::STANDARD.encode(a)))
        }
        "base64Decode" => one_str(args).and_then(|a| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(a.trim())
                .map_err(|e| e.to_string())?;
            String::from_utf8(bytes)
                .map(Value::String)
                .map_err(|_| "the decoded bytes are not UTF-8".to_string())
        }),
        _ => return None,
    })
}
