//! The compiled ACL: a token's policies merged into one object a request
//! is checked against (Nomad's `acl.ACL`).
//!
//! Merging follows Nomad: a namespace's capabilities are the union of
//! every policy's, and `deny` anywhere wins; a coarse rule (`node`,
//! `agent`, ...) takes the most privilege granted, again unless one
//! policy denies it. A namespace is looked up exactly first; otherwise the
//! glob that matches it most closely (fewest characters left to the
//! wildcards) decides.
//!
//! Variable path rules are kept per namespace and path the same way: a
//! rule whose namespace and path hold no `*` is looked up exactly, else
//! the closest glob over `<namespace>\0<path>` decides (Nomad's key), so
//! the most specific (longest) path wins; capabilities of one rule merge
//! by union, and `deny` in it wins over the rest.

use super::capability::{Capabilities, Capability, Level};
use super::policy::Policy;
use super::variables::{VariableCapabilities, VariableOp};
use std::collections::BTreeMap;

/// What one token may do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acl {
    management: bool,
    /// Exact namespace names.
    namespaces: BTreeMap<String, Capabilities>,
    /// Namespace globs (names holding `*`).
    namespace_globs: BTreeMap<String, Capabilities>,
    /// Variable rules by exact (namespace, path).
    variables: BTreeMap<(String, String), VariableCapabilities>,
    /// Variable rules with a `*`, keyed `<namespace>\0<path>`.
    variable_globs: BTreeMap<String, VariableCapabilities>,
    node: Option<Level>,
    agent: Option<Level>,
    operator: Option<Level>,
    quota: Option<Level>,
    plugin: Option<Level>,
}

impl Acl {
    /// A management token's ACL: everything is allowed.
    pub fn management() -> Acl {
        Acl {
            management: true,
            ..Acl::default()
        }
    }

    /// An ACL that allows nothing (no token and no `anonymous` policy).
    pub fn deny_all() -> Acl {
        Acl::default()
    }

    /// Merges `policies` into one ACL.
    pub fn compile<'a>(policies: impl IntoIterator<Item = &'a Policy>) -> Acl {
        let mut acl = Acl::default();
        for policy in policies {
            for rule in &policy.namespaces {
                let table = if rule.name.contains('*') {
                    &mut acl.namespace_globs
                } else {
                    &mut acl.namespaces
                };
                let caps = table.entry(rule.name.clone()).or_default();
                *caps = caps.union(rule.capabilities);
                for path in &rule.variables {
                    let caps = if rule.name.contains('*') || path.path.contains('*') {
                        acl.variable_globs
                            .entry(variable_key(&rule.name, &path.path))
                            .or_default()
                    } else {
                        acl.variables
                            .entry((rule.name.clone(), path.path.clone()))
                            .or_default()
                    };
                    *caps = caps.union(path.capabilities);
                }
            }
            acl.node = Level::merge(acl.node, policy.node);
            acl.agent = Level::merge(acl.agent, policy.agent);
            acl.operator = Level::merge(acl.operator, policy.operator);
            acl.quota = Level::merge(acl.quota, policy.quota);
            acl.plugin = Level::merge(acl.plugin, policy.plugin);
        }
        acl
    }

    pub fn is_management(&self) -> bool {
        self.management
    }

    /// Whether `cap` is granted in namespace `namespace`.
    pub fn allow_namespace_op(&self, namespace: &str, cap: Capability) -> bool {
        self.management || self.namespace_capabilities(namespace).grants(cap)
    }

    /// Whether anything at all is granted in `namespace` (what a list
    /// filtered by namespace asks).
    pub fn allow_namespace(&self, namespace: &str) -> bool {
        self.management || self.namespace_capabilities(namespace).grants_any()
    }

    /// The capabilities that apply in `namespace`: its exact rule, else
    /// the closest glob's.
    pub fn namespace_capabilities(&self, namespace: &str) -> Capabilities {
        if let Some(caps) = self.namespaces.get(namespace) {
            return *caps;
        }
        closest_glob(&self.namespace_globs, namespace).unwrap_or_default()
    }

    /// Whether `op` is allowed on the variable at `path` in `namespace`
    /// (Nomad's `AllowVariableOperation`, without a workload's claim).
    pub fn allow_variable_op(&self, namespace: &str, path: &str, op: VariableOp) -> bool {
        self.management || self.variable_capabilities(namespace, path).grants(op)
    }

    /// The capabilities that apply to one variable: its exact rule, else
    /// the closest glob's.
    pub fn variable_capabilities(&self, namespace: &str, path: &str) -> VariableCapabilities {
        if let Some(caps) = self
            .variables
            .get(&(namespace.to_string(), path.to_string()))
        {
            return *caps;
        }
        let key = variable_key(namespace, path);
        closest_glob(&self.variable_globs, &key).unwrap_or_default()
    }

    pub fn allow_node_read(&self) -> bool {
        self.management || Level::allows_read(self.node)
    }
    pub fn allow_node_write(&self) -> bool {
        self.management || Level::allows_write(self.node)
    }
    pub fn allow_agent_read(&self) -> bool {
        self.management || Level::allows_read(self.agent)
    }
    pub fn allow_agent_write(&self) -> bool {
        self.management || Level::allows_write(self.agent)
    }
    pub fn allow_operator_read(&self) -> bool {
        self.management || Level::allows_read(self.operator)
    }
    pub fn allow_operator_write(&self) -> bool {
        self.management || Level::allows_write(self.operator)
    }
    pub fn allow_quota_read(&self) -> bool {
        self.management || Level::allows_read(self.quota)
    }
    pub fn allow_plugin_read(&self) -> bool {
        self.management || Level::allows_read(self.plugin)
    }
}

/// The value of the glob matching `name` most closely: the fewest
/// characters of `name` left to its wildcards.
fn closest_glob<T: Copy>(globs: &BTreeMap<String, T>, name: &str) -> Option<T> {
    globs
        .iter()
        .filter(|(glob, _)| glob_matches(glob, name))
        .min_by_key(|(glob, _)| name.len() - glob.chars().filter(|c| *c != '*').count())
        .map(|(_, value)| *value)
}

/// Nomad's key of a variable rule: namespace and path, NUL-separated.
fn variable_key(namespace: &str, path: &str) -> String {
    format!("{namespace}\0{path}")
}

/// `*` matches any run of characters (none included); everything else
/// matches itself.
pub fn glob_matches(glob: &str, name: &str) -> bool {
    let parts: Vec<&str> = glob.split('*').collect();
    let (first, rest) = match parts.split_first() {
        Some(split) => split,
        None => return name.is_empty(),
    };
    let Some(mut remaining) = name.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return remaining.is_empty();
    };
    for part in middle {
        match remaining.find(part) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last)
}
