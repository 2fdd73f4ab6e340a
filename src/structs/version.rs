//! Version constraints for the `version` and `semver` constraint operands.
//!
//! `version` follows the lenient rules Nomad's go-version has: any number of
//! numeric segments (`1`, `1.2`, `1.2.3.4`), an optional `v` prefix, a
//! pre-release after `-`; `semver` is strict Semantic Versioning 2.0
//! (exactly three segments). Constraints are comma-separated clauses with
//! `=`, `!=`, `>`, `>=`, `<`, `<=` or the pessimistic `~>`.

use std::cmp::Ordering;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    segments: Vec<u64>,
    pre: Vec<String>,
}

impl Version {
    pub fn parse(text: &str, strict: bool) -> Result<Version, String> {
        let t = text.trim();
        let t = if strict {
            t
        } else {
            t.strip_prefix('v').unwrap_or(t)
        };
        let t = t.split('+').next().unwrap_or(t);
        let (core, pre) = match t.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (t, None),
        };
        if core.is_empty() {
            return Err(format!("{text:?} is not a version"));
        }
        let segments = core
            .split('.')
            .map(|s| {
                s.parse::<u64>()
                    .map_err(|_| format!("{text:?} is not a version"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if strict && segments.len() != 3 {
            return Err(format!(
                "{text:?} is not a semantic version (MAJOR.MINOR.PATCH)"
            ));
        }
        let pre = match pre {
            Some("") => return Err(format!("{text:?} has an empty pre-release")),
            Some(p) => p.split('.').map(str::to_string).collect(),
            None => Vec::new(),
        };
        Ok(Version { segments, pre })
    }

    fn segment(&self, i: usize) -> u64 {
        self.segments.get(i).copied().unwrap_or(0)
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let n = self.segments.len().max(other.segments.len());
        for i in 0..n {
            match self.segment(i).cmp(&other.segment(i)) {
                Ordering::Equal => {}
                o => return o,
            }
        }
        match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => compare_pre(&self.pre, &other.pre),
        }
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn compare_pre(a: &[String], b: &[String]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            (Ok(_), Err(_)) => Ordering::Less,
            (Err(_), Ok(_)) => Ordering::Greater,
            (Err(_), Err(_)) => x.cmp(y),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Pessimistic,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Clause {
    op: Op,
    version: Version,
}

/// A parsed constraint such as `">= 1.2, < 2"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionConstraint {
    clauses: Vec<Clause>,
    strict: bool,
}

impl VersionConstraint {
    pub fn parse(spec: &str, strict: bool) -> Result<VersionConstraint, String> {
        let mut clauses = Vec::new();
        for part in spec.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(format!("empty clause in {spec:?}"));
            }
            let (op, rest) = split_op(part);
            let version = Version::parse(rest, strict)?;
            clauses.push(Clause { op, version });
        }
        Ok(VersionConstraint { clauses, strict })
    }

    /// Whether `version` (a node attribute value) satisfies every clause.
    /// A value that is not a version never does.
    pub fn matches(&self, version: &str) -> bool {
        let Ok(v) = Version::parse(version, self.strict) else {
            return false;
        };
        self.clauses.iter().all(|c| clause_matches(c, &v))
    }
}

fn split_op(part: &str) -> (Op, &str) {
    for (sym, op) in [
        ("~>", Op::Pessimistic),
        (">=", Op::Ge),
        ("<=", Op::Le),
        ("!=", Op::Ne),
        ("=", Op::Eq),
        (">", Op::Gt),
        ("<", Op::Lt),
    ] {
        if let Some(rest) = part.strip_prefix(sym) {
            return (op, rest.trim());
        }
    }
    (Op::Eq, part)
}

fn clause_matches(c: &Clause, v: &Version) -> bool {
    // A pre-release only satisfies clauses that name a pre-release of the
    // same core version, as go-version and semver both rule.
    if !v.pre.is_empty() && (c.version.pre.is_empty() || c.version.segments != v.segments) {
        return false;
    }
    let o = v.cmp(&c.version);
    match c.op {
        Op::Eq => o == Ordering::Equal,
        Op::Ne => o != Ordering::Equal,
        Op::Gt => o == Ordering::Greater,
        Op::Ge => o != Ordering::Less,
        Op::Lt => o == Ordering::Less,
        Op::Le => o != Ordering::Greater,
        Op::Pessimistic => {
            // "~> 1.2.3" means >= 1.2.3, < 1.3; "~> 1.2" means >= 1.2, < 2.
            if o == Ordering::Less {
                return false;
            }
            let n = c.version.segments.len();
            let fixed = n.saturating_sub(1).max(1);
            (0..fixed.min(n)).all(|i| v.segment(i) == c.version.segment(i))
                || (n == 1 && v.segment(0) == c.version.segment(0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(spec: &str, v: &str) -> bool {
        VersionConstraint::parse(spec, false).unwrap().matches(v)
    }

    #[test]
    fn ranges_and_operators() {
        assert!(m(">= 1.2, < 2", "1.9.9"));
        assert!(!m(">= 1.2, < 2", "2.0"));
        assert!(m("= 1.2", "1.2.0"));
        assert!(m("!= 1.2", "1.3"));
        assert!(m("~> 1.2", "1.9"));
        assert!(!m("~> 1.2", "2.0"));
        assert!(m("~> 1.2.3", "1.2.9"));
        assert!(!m("~> 1.2.3", "1.3.0"));
        assert!(!m(">= 1.0", "not-a-version"));
    }

    #[test]
    fn prereleases_need_an_explicit_clause() {
        assert!(!m(">= 1.0", "1.5.0-beta1"));
        assert!(m(">= 1.5.0-beta1", "1.5.0-beta2"));
    }

    #[test]
    fn semver_is_strict() {
        assert!(VersionConstraint::parse(">= 1.2", true).is_err());
        let c = VersionConstraint::parse(">= 1.2.0", true).unwrap();
        assert!(c.matches("1.10.0"));
        assert!(!c.matches("1.10"));
    }
}
