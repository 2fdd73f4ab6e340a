//! Nomad's ACL policy language: HCL (or its JSON form) rules into a
//! checked [`Policy`].
//!
//! ```hcl
//! namespace "default" { policy = "read" }
//! namespace "web-*"   { capabilities = ["submit-job", "read-logs"] }
//! node     { policy = "read" }
//! agent    { policy = "write" }
//! operator { policy = "deny" }
//! ```
//!
//! Rules are text a user sends, so they are bounded before they cost
//! anything: at most [`MAX_RULES_BYTES`], and HCL is scanned for nesting
//! by the jobspec's scanner before the parser (which recurses) sees it.
//! A namespace's `variables { path "<glob>" { capabilities = [...] } }`
//! rules are checked and expanded as Nomad does ([`super::variables`]).
//! Blocks Nomad knows but herder does not enforce (`host_volume`,
//! `plugin`, `quota`) are accepted and kept, and named by
//! [`super::unenforced`] in the policy write's answer;
//! anything else is refused, so a misspelt block does not silently grant
//! nothing.

use super::capability::{expand_namespace_policy, Capabilities, Capability, Level};
use super::variables::{self, VariableCapabilities, VariableOp, VariablePathRule};
use crate::jobspec::limits::Budget;
use serde_json::Value as Json;

/// The longest rules text accepted (Nomad has no limit; a policy is a
/// few hundred bytes in practice).
pub const MAX_RULES_BYTES: usize = 64 * 1024;
/// Nesting deeper than this is refused before parsing.
const MAX_NESTING: usize = 16;
/// At most this many blocks in one policy.
const MAX_BLOCKS: usize = 1024;

/// A parsed and checked policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// One rule per `namespace` block, its shorthand already expanded.
    pub namespaces: Vec<NamespaceRule>,
    pub node: Option<Level>,
    pub agent: Option<Level>,
    pub operator: Option<Level>,
    pub quota: Option<Level>,
    pub plugin: Option<Level>,
    /// `host_volume` blocks: name and level (kept, not enforced: herder
    /// has no host volumes).
    pub host_volumes: Vec<(String, Option<Level>)>,
}

/// A `namespace "<name or glob>" { ... }` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceRule {
    pub name: String,
    pub capabilities: Capabilities,
    /// Its `variables` paths, the shorthand's rule on `*` included.
    pub variables: Vec<VariablePathRule>,
}

/// Why rules were refused, in Nomad's words where Nomad has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("Failed to parse ACL Policy: {0}")]
    Parse(String),
    #[error("Failed to parse ACL Policy: rules of {0} bytes are longer than the {MAX_RULES_BYTES} allowed")]
    TooLong(usize),
    #[error("Invalid policy: {0}")]
    Empty(String),
    #[error("Invalid namespace name: {0:?}")]
    NamespaceName(String),
    #[error("Invalid namespace policy: {policy:?} (namespace {namespace:?})")]
    NamespacePolicy { namespace: String, policy: String },
    #[error("Invalid namespace capability '{capability}': namespace {namespace:?}")]
    NamespaceCapability {
        namespace: String,
        capability: String,
    },
    #[error("Invalid variable policy: no variable paths in namespace {0}")]
    NoVariablePaths(String),
    #[error("Invalid missing variable path in namespace {0}")]
    MissingVariablePath(String),
    #[error("Invalid variable capability '{capability}' in namespace {namespace}")]
    VariableCapability {
        namespace: String,
        capability: String,
    },
    #[error("Invalid host volume name: {0:?}")]
    HostVolumeName(String),
    #[error("Invalid {rule} policy: {policy:?}")]
    Level { rule: &'static str, policy: String },
}

/// Parses rules in HCL or, when they start with `{`, JSON.
pub fn parse_policy(rules: &str) -> Result<Policy, PolicyError> {
    if rules.len() > MAX_RULES_BYTES {
        return Err(PolicyError::TooLong(rules.len()));
    }
    // Nomad's hot path: no rules at all is a policy that grants nothing
    // (only rules that say nothing are refused).
    if rules.is_empty() {
        return Ok(Policy::default());
    }
    let policy = check(raw_blocks(rules)?)?;
    if policy == Policy::default() && !rules.is_empty() {
        return Err(PolicyError::Empty(rules.to_string()));
    }
    Ok(policy)
}

/// The blocks of non-empty rules, bounded, in either syntax (HCL, or
/// JSON when they start with `{`), not yet checked.
pub(super) fn raw_blocks(rules: &str) -> Result<Vec<RawBlock>, PolicyError> {
    if rules.len() > MAX_RULES_BYTES {
        return Err(PolicyError::TooLong(rules.len()));
    }
    let blocks = if rules.trim_start().starts_with('{') {
        json_blocks(rules)?
    } else {
        hcl_blocks(rules)?
    };
    if blocks.len() > MAX_BLOCKS {
        return Err(PolicyError::Parse(format!("more than {MAX_BLOCKS} blocks")));
    }
    Ok(blocks)
}

/// One block of the rules, whatever syntax it came in.
#[derive(Debug)]
pub(super) struct RawBlock {
    pub(super) kind: String,
    pub(super) label: Option<String>,
    policy: Option<String>,
    pub(super) capabilities: Option<Vec<String>>,
    /// A namespace's `variables` block: its paths and their capabilities.
    variables: Option<Vec<RawPath>>,
}

/// A `path "<glob>" { capabilities = [...] }` of a `variables` block.
#[derive(Debug)]
struct RawPath {
    path: String,
    capabilities: Vec<String>,
}

fn hcl_blocks(rules: &str) -> Result<Vec<RawBlock>, PolicyError> {
    let budget = Budget::new(MAX_RULES_BYTES * 16);
    crate::jobspec::scan::scan(rules, MAX_NESTING, &budget)
        .map_err(|refused| PolicyError::Parse(format!("{refused:?}")))?;
    let body = hcl::parse(rules).map_err(|e| PolicyError::Parse(e.to_string()))?;
    if let Some(attr) = body.attributes().next() {
        return Err(PolicyError::Parse(format!(
            "unexpected attribute {:?} outside a block",
            attr.key()
        )));
    }
    body.blocks().map(hcl_block).collect()
}

fn hcl_block(block: &hcl::Block) -> Result<RawBlock, PolicyError> {
    let kind = block.identifier().to_string();
    let label = match block.labels() {
        [] => None,
        [one] => Some(one.as_str().to_string()),
        _ => return Err(PolicyError::Parse(format!("{kind}: more than one label"))),
    };
    let mut raw = RawBlock {
        kind,
        label,
        policy: None,
        capabilities: None,
        variables: None,
    };
    for attr in block.body().attributes() {
        match (attr.key(), attr.expr()) {
            ("policy", hcl::Expression::String(s)) => raw.policy = Some(s.clone()),
            ("capabilities", hcl::Expression::Array(items)) => {
                raw.capabilities = Some(hcl_strings(items)?);
            }
            (key, _) => return Err(unexpected(&raw.kind, key)),
        }
    }
    for inner in block.body().blocks() {
        // A namespace's `variables` block; anything else is a mistake.
        if raw.kind != "namespace" || inner.identifier() != "variables" {
            return Err(unexpected(&raw.kind, inner.identifier()));
        }
        let paths = raw.variables.get_or_insert_with(Vec::new);
        paths.extend(hcl_variable_paths(inner)?);
    }
    Ok(raw)
}

fn hcl_strings(items: &[hcl::Expression]) -> Result<Vec<String>, PolicyError> {
    items
        .iter()
        .map(|item| match item {
            hcl::Expression::String(s) => Ok(s.clone()),
            _ => Err(PolicyError::Parse(
                "capabilities must be a list of strings".into(),
            )),
        })
        .collect()
}

/// The `path` blocks of a `variables` block.
fn hcl_variable_paths(block: &hcl::Block) -> Result<Vec<RawPath>, PolicyError> {
    if let Some(attr) = block.body().attributes().next() {
        return Err(unexpected("variables", attr.key()));
    }
    let mut paths = Vec::new();
    for inner in block.body().blocks() {
        if inner.identifier() != "path" {
            return Err(unexpected("variables", inner.identifier()));
        }
        let path = match inner.labels() {
            [] => String::new(),
            [one] => one.as_str().to_string(),
            _ => return Err(PolicyError::Parse("path: more than one label".into())),
        };
        if let Some(nested) = inner.body().blocks().next() {
            return Err(unexpected("path", nested.identifier()));
        }
        let mut capabilities = Vec::new();
        for attr in inner.body().attributes() {
            match (attr.key(), attr.expr()) {
                ("capabilities", hcl::Expression::Array(items)) => {
                    capabilities = hcl_strings(items)?;
                }
                (key, _) => return Err(unexpected("path", key)),
            }
        }
        paths.push(RawPath { path, capabilities });
    }
    Ok(paths)
}

fn unexpected(block: &str, key: &str) -> PolicyError {
    PolicyError::Parse(format!("{block}: unexpected {key:?}"))
}

/// The JSON form: `{"namespace": {"default": {"policy": "read"}},
/// "node": {"policy": "read"}}`; as in HCL 1's JSON, a block may also be a
/// list of such objects.
fn json_blocks(rules: &str) -> Result<Vec<RawBlock>, PolicyError> {
    let value: Json = serde_json::from_str(rules).map_err(|e| PolicyError::Parse(e.to_string()))?;
    let Json::Object(top) = value else {
        return Err(PolicyError::Parse("rules must be an object".into()));
    };
    let mut blocks = Vec::new();
    for (kind, value) in top {
        for item in one_or_many(&value) {
            if labelled(&kind) {
                let Json::Object(by_label) = item else {
                    return Err(PolicyError::Parse(format!("{kind}: expected an object")));
                };
                for (label, body) in by_label {
                    for body in one_or_many(body) {
                        blocks.push(json_block(&kind, Some(label.clone()), body)?);
                    }
                }
            } else {
                blocks.push(json_block(&kind, None, item)?);
            }
        }
    }
    Ok(blocks)
}

fn labelled(kind: &str) -> bool {
    matches!(kind, "namespace" | "host_volume")
}

fn one_or_many(value: &Json) -> Vec<&Json> {
    match value {
        Json::Array(items) => items.iter().collect(),
        other => vec![other],
    }
}

fn json_block(kind: &str, label: Option<String>, body: &Json) -> Result<RawBlock, PolicyError> {
    let Json::Object(fields) = body else {
        return Err(PolicyError::Parse(format!("{kind}: expected an object")));
    };
    let mut raw = RawBlock {
        kind: kind.to_string(),
        label,
        policy: None,
        capabilities: None,
        variables: None,
    };
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("policy", Json::String(s)) => raw.policy = Some(s.clone()),
            ("capabilities", Json::Array(items)) => {
                let caps = items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        PolicyError::Parse("capabilities must be a list of strings".into())
                    })?;
                raw.capabilities = Some(caps);
            }
            ("variables", value) if kind == "namespace" => {
                let paths = raw.variables.get_or_insert_with(Vec::new);
                for block in one_or_many(value) {
                    paths.extend(json_variable_paths(block)?);
                }
            }
            (key, _) => return Err(unexpected(kind, key)),
        }
    }
    Ok(raw)
}

/// A `variables` object: `{"path": {"<glob>": {"capabilities": [...]}}}`
/// (each level may also be a list of such objects).
fn json_variable_paths(block: &Json) -> Result<Vec<RawPath>, PolicyError> {
    let Json::Object(fields) = block else {
        return Err(PolicyError::Parse("variables: expected an object".into()));
    };
    let mut paths = Vec::new();
    for (key, value) in fields {
        if key != "path" {
            return Err(unexpected("variables", key));
        }
        for by_path in one_or_many(value) {
            let Json::Object(by_path) = by_path else {
                return Err(PolicyError::Parse("path: expected an object".into()));
            };
            for (path, body) in by_path {
                for body in one_or_many(body) {
                    paths.push(json_variable_path(path, body)?);
                }
            }
        }
    }
    Ok(paths)
}

fn json_variable_path(path: &str, body: &Json) -> Result<RawPath, PolicyError> {
    let Json::Object(fields) = body else {
        return Err(PolicyError::Parse("path: expected an object".into()));
    };
    let mut capabilities = Vec::new();
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("capabilities", Json::Array(items)) => {
                capabilities = items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        PolicyError::Parse("capabilities must be a list of strings".into())
                    })?;
            }
            (key, _) => return Err(unexpected("path", key)),
        }
    }
    Ok(RawPath {
        path: path.to_string(),
        capabilities,
    })
}

/// Checks every block as Nomad does and expands the shorthands.
fn check(blocks: Vec<RawBlock>) -> Result<Policy, PolicyError> {
    let mut policy = Policy::default();
    for block in blocks {
        match block.kind.as_str() {
            "namespace" => policy.namespaces.push(namespace_rule(block)?),
            "host_volume" => {
                let name = block.label.clone().unwrap_or_default();
                if !valid_glob_name(&name) {
                    return Err(PolicyError::HostVolumeName(name));
                }
                let level = level_of(
                    "host volume",
                    &block,
                    &[Level::Deny, Level::Read, Level::Write],
                )?;
                policy.host_volumes.push((name, level));
            }
            "node" | "agent" | "operator" | "quota" | "plugin" => {
                let (rule, allowed): (&'static str, &[Level]) = match block.kind.as_str() {
                    "node" => ("node", &[Level::Deny, Level::Read, Level::Write]),
                    "agent" => ("agent", &[Level::Deny, Level::Read, Level::Write]),
                    "operator" => ("operator", &[Level::Deny, Level::Read, Level::Write]),
                    "quota" => ("quota", &[Level::Deny, Level::Read, Level::Write]),
                    _ => ("plugin", &[Level::Deny, Level::Read, Level::List]),
                };
                if block.label.is_some() || block.capabilities.is_some() {
                    return Err(PolicyError::Parse(format!("{rule}: takes only a policy")));
                }
                let level = level_of(rule, &block, allowed)?.ok_or_else(|| PolicyError::Level {
                    rule,
                    policy: String::new(),
                })?;
                let slot = match rule {
                    "node" => &mut policy.node,
                    "agent" => &mut policy.agent,
                    "operator" => &mut policy.operator,
                    "quota" => &mut policy.quota,
                    _ => &mut policy.plugin,
                };
                *slot = Level::merge(*slot, Some(level));
            }
            other => return Err(PolicyError::Parse(format!("unexpected block {other:?}"))),
        }
    }
    Ok(policy)
}

fn namespace_rule(block: RawBlock) -> Result<NamespaceRule, PolicyError> {
    let name = block.label.clone().unwrap_or_default();
    if !valid_glob_name(&name) {
        return Err(PolicyError::NamespaceName(name));
    }
    let mut capabilities = Capabilities::default();
    let mut variables = Vec::new();
    if let Some(policy) = &block.policy {
        let level = Level::parse(policy)
            .filter(|l| *l != Level::List)
            .ok_or_else(|| PolicyError::NamespacePolicy {
                namespace: name.clone(),
                policy: policy.clone(),
            })?;
        capabilities = expand_namespace_policy(level);
        if let Some(caps) = variables::expand_shorthand(level) {
            variables.push(VariablePathRule {
                path: variables::ALL_PATHS.to_string(),
                capabilities: caps,
            });
        }
    }
    if let Some(paths) = &block.variables {
        variables.extend(variable_rules(&name, paths)?);
    }
    for cap in block.capabilities.iter().flatten() {
        let parsed = Capability::parse(cap).ok_or_else(|| PolicyError::NamespaceCapability {
            namespace: name.clone(),
            capability: cap.clone(),
        })?;
        capabilities.insert(parsed);
    }
    Ok(NamespaceRule {
        name,
        capabilities,
        variables,
    })
}

/// A `variables` block's paths, checked and expanded as Nomad does.
fn variable_rules(
    namespace: &str,
    paths: &[RawPath],
) -> Result<Vec<VariablePathRule>, PolicyError> {
    if paths.is_empty() {
        return Err(PolicyError::NoVariablePaths(namespace.to_string()));
    }
    paths
        .iter()
        .map(|raw| {
            if raw.path.is_empty() {
                return Err(PolicyError::MissingVariablePath(namespace.to_string()));
            }
            let ops = raw
                .capabilities
                .iter()
                .map(|cap| {
                    VariableOp::parse(cap).ok_or_else(|| PolicyError::VariableCapability {
                        namespace: namespace.to_string(),
                        capability: cap.clone(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(VariablePathRule {
                path: raw.path.clone(),
                capabilities: VariableCapabilities::of(&ops).expanded(),
            })
        })
        .collect()
}

/// The block's `policy`, which must be one of `allowed` when present.
fn level_of(
    rule: &'static str,
    block: &RawBlock,
    allowed: &[Level],
) -> Result<Option<Level>, PolicyError> {
    let Some(text) = &block.policy else {
        return Ok(None);
    };
    Level::parse(text)
        .filter(|l| allowed.contains(l))
        .map(Some)
        .ok_or_else(|| PolicyError::Level {
            rule,
            policy: text.clone(),
        })
}

/// Nomad's `^[a-zA-Z0-9-*]{1,128}$` for namespace and volume names.
fn valid_glob_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'*')
}
