//! What a node says about a constraint target (`${meta.rack}`,
//! `${node.class}`, ...) and whether it is in a job's datacenters: read by
//! the node catalog (attribute columns, datacenter groups) and by the
//! scheduler's feasibility checks alike, so it sits below both.

use crate::structs::Node;
use std::borrow::Cow;

/// The value of a constraint target on a node; literals resolve to
/// themselves, unknown `${...}` targets to nothing.
pub fn resolve_target<'a>(target: &'a str, node: &'a Node) -> Option<Cow<'a, str>> {
    let Some(inner) = target.strip_prefix("${").and_then(|t| t.strip_suffix('}')) else {
        return Some(Cow::Borrowed(target));
    };
    match inner {
        "node.unique.id" => Some(Cow::Owned(node.id.to_string())),
        "node.unique.name" => Some(Cow::Borrowed(&node.name)),
        "node.datacenter" => Some(Cow::Borrowed(&node.datacenter)),
        "node.class" => Some(Cow::Borrowed(&node.node_class)),
        "node.pool" => Some(Cow::Borrowed(&node.node_pool)),
        _ => {
            if let Some(attr) = inner.strip_prefix("attr.") {
                node.attributes.get(attr).map(|v| Cow::Borrowed(v.as_str()))
            } else if let Some(meta) = inner.strip_prefix("meta.") {
                node.meta.get(meta).map(|v| Cow::Borrowed(v.as_str()))
            } else {
                None
            }
        }
    }
}

/// Whether a datacenter matches one of the job's patterns (`*` globs).
pub fn datacenter_matches(patterns: &[String], dc: &str) -> bool {
    patterns.iter().any(|p| glob_match(p, dc))
}

fn glob_match(pattern: &str, text: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == text;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else if let Some(pos) = rest.find(part) {
            rest = &rest[pos + part.len()..];
        } else {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*", "dc1"));
        assert!(glob_match("dc*", "dc1"));
        assert!(!glob_match("dc*", "eu1"));
        assert!(glob_match("*-west", "us-west"));
        assert!(glob_match("us-*-1", "us-east-1"));
        assert!(!glob_match("us-*-1", "us-east-2"));
    }
}
