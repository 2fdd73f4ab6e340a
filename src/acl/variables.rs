//! Variable ACLs (Nomad 1.4+): a namespace block's
//! `variables { path "<glob>" { capabilities = [...] } }` rules, the
//! capabilities they grant (`read`, `write`, `list`, `destroy`, `deny`),
//! how a namespace's `policy = "..."` shorthand stands for a rule on every
//! path, and the paths a workload may read of its own job.

use super::capability::Level;

/// One operation on a variable. The discriminant is the bit in
/// [`VariableCapabilities`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VariableOp {
    Deny,
    Read,
    Write,
    List,
    Destroy,
}

impl VariableOp {
    pub const ALL: [VariableOp; 5] = [
        VariableOp::Deny,
        VariableOp::Read,
        VariableOp::Write,
        VariableOp::List,
        VariableOp::Destroy,
    ];

    /// Nomad's name of the capability.
    pub fn as_str(self) -> &'static str {
        match self {
            VariableOp::Deny => "deny",
            VariableOp::Read => "read",
            VariableOp::Write => "write",
            VariableOp::List => "list",
            VariableOp::Destroy => "destroy",
        }
    }

    pub fn parse(name: &str) -> Option<VariableOp> {
        VariableOp::ALL.into_iter().find(|op| op.as_str() == name)
    }
}

/// A set of variable capabilities (a bit mask). A set holding `deny`
/// grants nothing, whatever else it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VariableCapabilities(u8);

impl VariableCapabilities {
    pub fn of(ops: &[VariableOp]) -> Self {
        let mut set = VariableCapabilities::default();
        for op in ops {
            set.0 |= 1 << *op as u8;
        }
        set
    }

    pub fn union(self, other: VariableCapabilities) -> VariableCapabilities {
        VariableCapabilities(self.0 | other.0)
    }

    pub fn contains(self, op: VariableOp) -> bool {
        self.0 & (1 << op as u8) != 0
    }

    /// Whether the set grants `op`: it holds it and no `deny`.
    pub fn grants(self, op: VariableOp) -> bool {
        !self.contains(VariableOp::Deny) && self.contains(op)
    }

    /// Nomad's expansion of a path's list: `deny` alone stands for itself,
    /// and `read` brings `list` along.
    pub fn expanded(self) -> VariableCapabilities {
        if self.contains(VariableOp::Deny) {
            return VariableCapabilities::of(&[VariableOp::Deny]);
        }
        if self.contains(VariableOp::Read) {
            return self.union(VariableCapabilities::of(&[VariableOp::List]));
        }
        self
    }
}

/// A `path "<glob>" { capabilities = [...] }` rule of a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VariablePathRule {
    pub path: String,
    pub capabilities: VariableCapabilities,
}

/// The path every namespace shorthand's variable rule covers.
pub const ALL_PATHS: &str = "*";

/// What a namespace's `policy = "..."` grants on variables (on every
/// path): `read` reads and lists them, `write` does everything, `deny`
/// denies them; `scale` says nothing about them.
pub fn expand_shorthand(level: Level) -> Option<VariableCapabilities> {
    use VariableOp::*;
    match level {
        Level::Deny => Some(VariableCapabilities::of(&[Deny])),
        Level::Read | Level::List => Some(VariableCapabilities::of(&[Read, List])),
        Level::Write => Some(VariableCapabilities::of(&[Read, Write, List, Destroy])),
        Level::Scale => None,
    }
}

/// One running allocation's identity, as a workload reading variables is
/// known by (Nomad's workload identity claim).
#[derive(Clone, Copy, Debug)]
pub struct WorkloadClaim<'a> {
    pub namespace: &'a str,
    pub job: &'a str,
    pub group: &'a str,
    /// The tasks of its group.
    pub tasks: &'a [&'a str],
}

/// Whether a workload with `claim` may read the variable at `path` in
/// `namespace` without any policy: `nomad/jobs`, `nomad/jobs/<job>`,
/// `nomad/jobs/<job>/<group>` and `nomad/jobs/<job>/<group>/<task>` of
/// its own job (Nomad's automatic workload access).
pub fn workload_may_read(claim: &WorkloadClaim<'_>, namespace: &str, path: &str) -> bool {
    if namespace != claim.namespace {
        return false;
    }
    let Some(rest) = path.strip_prefix("nomad/jobs") else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    let Some(rest) = rest.strip_prefix('/') else {
        return false;
    };
    let segments: Vec<&str> = rest.split('/').collect();
    match segments.as_slice() {
        [job] => *job == claim.job,
        [job, group] => *job == claim.job && *group == claim.group,
        [job, group, task] => {
            *job == claim.job && *group == claim.group && claim.tasks.contains(task)
        }
        _ => false,
    }
}
