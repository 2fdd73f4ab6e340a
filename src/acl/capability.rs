//! The fine-grained namespace capabilities, the coarse levels of the other
//! rules (`node`, `agent`, `operator`, ...), and how a namespace's
//! `policy = "..."` shorthand expands into capabilities (Nomad's table).

/// One namespace capability. The discriminant is the bit in
/// [`Capabilities`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    Deny,
    ListJobs,
    ParseJob,
    ReadJob,
    SubmitJob,
    DispatchJob,
    ReadLogs,
    ReadFs,
    AllocExec,
    AllocNodeExec,
    AllocLifecycle,
    SentinelOverride,
    CsiRegisterPlugin,
    CsiWriteVolume,
    CsiReadVolume,
    CsiListVolume,
    CsiMountVolume,
    ListScalingPolicies,
    ReadScalingPolicy,
    ReadJobScaling,
    ScaleJob,
    SubmitRecommendation,
}

impl Capability {
    pub const ALL: [Capability; 22] = [
        Capability::Deny,
        Capability::ListJobs,
        Capability::ParseJob,
        Capability::ReadJob,
        Capability::SubmitJob,
        Capability::DispatchJob,
        Capability::ReadLogs,
        Capability::ReadFs,
        Capability::AllocExec,
        Capability::AllocNodeExec,
        Capability::AllocLifecycle,
        Capability::SentinelOverride,
        Capability::CsiRegisterPlugin,
        Capability::CsiWriteVolume,
        Capability::CsiReadVolume,
        Capability::CsiListVolume,
        Capability::CsiMountVolume,
        Capability::ListScalingPolicies,
        Capability::ReadScalingPolicy,
        Capability::ReadJobScaling,
        Capability::ScaleJob,
        Capability::SubmitRecommendation,
    ];

    /// Nomad's name of the capability.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Deny => "deny",
            Capability::ListJobs => "list-jobs",
            Capability::ParseJob => "parse-job",
            Capability::ReadJob => "read-job",
            Capability::SubmitJob => "submit-job",
            Capability::DispatchJob => "dispatch-job",
            Capability::ReadLogs => "read-logs",
            Capability::ReadFs => "read-fs",
            Capability::AllocExec => "alloc-exec",
            Capability::AllocNodeExec => "alloc-node-exec",
            Capability::AllocLifecycle => "alloc-lifecycle",
            Capability::SentinelOverride => "sentinel-override",
            Capability::CsiRegisterPlugin => "csi-register-plugin",
            Capability::CsiWriteVolume => "csi-write-volume",
            Capability::CsiReadVolume => "csi-read-volume",
            Capability::CsiListVolume => "csi-list-volume",
            Capability::CsiMountVolume => "csi-mount-volume",
            Capability::ListScalingPolicies => "list-scaling-policies",
            Capability::ReadScalingPolicy => "read-scaling-policy",
            Capability::ReadJobScaling => "read-job-scaling",
            Capability::ScaleJob => "scale-job",
            Capability::SubmitRecommendation => "submit-recommendation",
        }
    }

    pub fn parse(name: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// A set of capabilities (a bit mask). A set holding `deny` grants
/// nothing, whatever else it holds: deny always wins, as in Nomad.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Capabilities(u32);

impl Capabilities {
    pub fn of(caps: &[Capability]) -> Self {
        let mut set = Capabilities::default();
        for c in caps {
            set.insert(*c);
        }
        set
    }

    pub fn insert(&mut self, cap: Capability) {
        self.0 |= 1 << cap as u32;
    }

    pub fn union(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 | other.0)
    }

    pub fn contains(self, cap: Capability) -> bool {
        self.0 & (1 << cap as u32) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether the set grants `cap`: it holds it and no `deny`.
    pub fn grants(self, cap: Capability) -> bool {
        !self.contains(Capability::Deny) && self.contains(cap)
    }

    /// Whether the set grants anything at all.
    pub fn grants_any(self) -> bool {
        !self.contains(Capability::Deny) && !self.is_empty()
    }

    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL
            .into_iter()
            .filter(move |c| self.contains(*c))
    }
}

/// What a namespace's `policy = "..."` stands for.
pub fn expand_namespace_policy(level: Level) -> Capabilities {
    use Capability::*;
    const READ: [Capability; 8] = [
        ListJobs,
        ParseJob,
        ReadJob,
        CsiListVolume,
        CsiReadVolume,
        ReadJobScaling,
        ListScalingPolicies,
        ReadScalingPolicy,
    ];
    const WRITE_MORE: [Capability; 10] = [
        ScaleJob,
        SubmitJob,
        DispatchJob,
        ReadLogs,
        ReadFs,
        AllocExec,
        AllocLifecycle,
        CsiMountVolume,
        CsiWriteVolume,
        SubmitRecommendation,
    ];
    match level {
        Level::Deny => Capabilities::of(&[Deny]),
        Level::Read | Level::List => Capabilities::of(&READ),
        Level::Write => Capabilities::of(&READ).union(Capabilities::of(&WRITE_MORE)),
        Level::Scale => Capabilities::of(&[
            ListScalingPolicies,
            ReadScalingPolicy,
            ReadJobScaling,
            ScaleJob,
        ]),
    }
}

/// A coarse policy level: `node`, `agent`, `operator`, `quota`, `plugin`
/// and a namespace's shorthand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Deny,
    /// `plugin` only: less than read.
    List,
    /// A namespace's shorthand only: the scaling capabilities.
    Scale,
    Read,
    Write,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Deny => "deny",
            Level::List => "list",
            Level::Scale => "scale",
            Level::Read => "read",
            Level::Write => "write",
        }
    }

    pub fn parse(text: &str) -> Option<Level> {
        [
            Level::Deny,
            Level::List,
            Level::Scale,
            Level::Read,
            Level::Write,
        ]
        .into_iter()
        .find(|l| l.as_str() == text)
    }

    /// Two policies' levels for one rule merged: `deny` wins, otherwise
    /// the most privilege.
    pub fn merge(a: Option<Level>, b: Option<Level>) -> Option<Level> {
        match (a, b) {
            (Some(Level::Deny), _) | (_, Some(Level::Deny)) => Some(Level::Deny),
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether a rule at `level` allows reading.
    pub fn allows_read(level: Option<Level>) -> bool {
        matches!(level, Some(Level::Read | Level::Write))
    }

    /// Whether a rule at `level` allows writing.
    pub fn allows_write(level: Option<Level>) -> bool {
        matches!(level, Some(Level::Write))
    }
}
