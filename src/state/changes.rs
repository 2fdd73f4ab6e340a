//! Table names, row keys, and the record of what one command changed.
//!
//! `AppliedChanges` is the single description of a command's effect: the
//! persistence layer writes exactly these rows, blocking queries wake on
//! these tables, and the event stream publishes these rows.

use super::acl_tables::{AclKey, AclRow};
use crate::structs::AutopilotConfiguration;
use crate::structs::{
    AllocId, Allocation, Deployment, DeploymentId, EvalId, Evaluation, Job, JobScalingEvents,
    JobSummary, Namespace, Node, NodeId, RootKey, SchedulerConfiguration, ServiceRegistration,
    SharedStr, VariableEncrypted,
};
use equivalent::{Comparable, Equivalent};
use std::cmp::Ordering;
use std::sync::Arc;

/// The tables that carry their own latest-change index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// Jobs and their versions.
    Jobs,
    JobSummaries,
    Allocs,
    Evals,
    Nodes,
    SchedulerConfig,
    /// Each job's scaling events (Nomad's `scaling_event` table).
    ScalingEvents,
    Deployments,
    /// The native service catalog (Nomad's `service_registrations`).
    Services,
    /// Namespaces (Nomad's `namespaces`).
    Namespaces,
    /// Variables, sealed (Nomad's `variables`).
    Variables,
    /// The keyring's root keys (Nomad's `root_keys`).
    RootKeys,
    /// ACL policies (Nomad's `acl_policy`).
    AclPolicies,
    /// ACL tokens and the bootstrap mark (Nomad's `acl_token`).
    AclTokens,
    /// ACL roles (Nomad's `acl_roles`).
    AclRoles,
    /// Autopilot's settings (Nomad's `autopilot-config`).
    AutopilotConfig,
}

impl Table {
    pub const ALL: [Table; 16] = [
        Table::Jobs,
        Table::JobSummaries,
        Table::Allocs,
        Table::Evals,
        Table::Nodes,
        Table::SchedulerConfig,
        Table::ScalingEvents,
        Table::Deployments,
        Table::Services,
        Table::Namespaces,
        Table::Variables,
        Table::RootKeys,
        Table::AclPolicies,
        Table::AclTokens,
        Table::AclRoles,
        Table::AutopilotConfig,
    ];

    pub(crate) fn slot(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Table::Jobs => "jobs",
            Table::JobSummaries => "job_summary",
            Table::Allocs => "allocs",
            Table::Evals => "evals",
            Table::Nodes => "nodes",
            Table::SchedulerConfig => "scheduler_config",
            Table::ScalingEvents => "scaling_event",
            Table::Deployments => "deployment",
            Table::Services => "service_registrations",
            Table::Namespaces => "namespaces",
            Table::Variables => "variables",
            Table::RootKeys => "root_keys",
            Table::AclPolicies => "acl_policy",
            Table::AclTokens => "acl_token",
            Table::AclRoles => "acl_roles",
            Table::AutopilotConfig => "autopilot_config",
        }
    }
}

/// A small set of tables (a bit mask).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TableSet(u32);

impl TableSet {
    pub fn of(tables: &[Table]) -> Self {
        let mut set = TableSet::default();
        for t in tables {
            set.insert(*t);
        }
        set
    }
    pub fn all() -> Self {
        TableSet::of(&Table::ALL)
    }
    pub fn insert(&mut self, table: Table) {
        self.0 |= 1 << table.slot();
    }
    pub fn contains(self, table: Table) -> bool {
        self.0 & (1 << table.slot()) != 0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn iter(self) -> impl Iterator<Item = Table> {
        Table::ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

/// A job's identity: (namespace, ID). The strings are shared with the
/// allocations that reference the job.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobKey {
    pub namespace: SharedStr,
    pub id: SharedStr,
}

impl JobKey {
    pub fn new(namespace: &str, id: &str) -> Self {
        JobKey {
            namespace: SharedStr::from(namespace),
            id: SharedStr::from(id),
        }
    }
    pub fn of_job(job: &Job) -> Self {
        JobKey::new(&job.namespace, &job.id)
    }
    pub fn of_alloc(alloc: &Allocation) -> Self {
        JobKey {
            namespace: alloc.namespace.clone(),
            id: alloc.job_id.clone(),
        }
    }
    pub fn borrowed(&self) -> JobRef<'_> {
        JobRef::new(&self.namespace, &self.id)
    }
}

/// A borrowed job key, for lookups without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobRef<'a> {
    pub namespace: &'a str,
    pub id: &'a str,
}

impl<'a> JobRef<'a> {
    pub fn new(namespace: &'a str, id: &'a str) -> Self {
        JobRef { namespace, id }
    }
}

impl Equivalent<JobKey> for JobRef<'_> {
    fn equivalent(&self, key: &JobKey) -> bool {
        self.namespace == &*key.namespace && self.id == &*key.id
    }
}

impl Comparable<JobKey> for JobRef<'_> {
    fn compare(&self, key: &JobKey) -> Ordering {
        (self.namespace, self.id).cmp(&(&*key.namespace, &*key.id))
    }
}

/// One stored version of a job.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobVersionKey {
    pub job: JobKey,
    pub version: u64,
}

/// A borrowed job version key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JobVersionRef<'a> {
    pub job: JobRef<'a>,
    pub version: u64,
}

impl Equivalent<JobVersionKey> for JobVersionRef<'_> {
    fn equivalent(&self, key: &JobVersionKey) -> bool {
        self.version == key.version && self.job.equivalent(&key.job)
    }
}

impl Comparable<JobVersionKey> for JobVersionRef<'_> {
    fn compare(&self, key: &JobVersionKey) -> Ordering {
        self.job
            .compare(&key.job)
            .then(self.version.cmp(&key.version))
    }
}

/// The key of one row of one table.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowKey {
    Job(JobKey),
    JobVersion(JobVersionKey),
    JobSummary(JobKey),
    /// Allocations are stored under their create index first, so that the
    /// rows a plan writes (all created at one index) sit side by side on
    /// disk instead of at random places in the tree.
    Alloc {
        create_index: u64,
        id: AllocId,
    },
    Eval(EvalId),
    Node(NodeId),
    SchedulerConfig,
    AutopilotConfig,
    ScalingEvents(JobKey),
    Deployment(DeploymentId),
    /// A service registration, under its allocation first so that an
    /// allocation's services are one range of the table.
    Service(ServiceKey),
    /// A row of the ACL tables (`acl_tables`).
    Acl(AclKey),
    /// A namespace, by name.
    Namespace(String),
    /// A variable, by namespace then path (a prefix is one range).
    Variable(VariableKey),
    /// A root key, by its ID.
    RootKey(String),
}

/// The key of a variable: its namespace, then its path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VariableKey {
    pub namespace: String,
    pub path: String,
}

impl VariableKey {
    pub fn new(namespace: &str, path: &str) -> Self {
        VariableKey {
            namespace: namespace.to_string(),
            path: path.to_string(),
        }
    }
}

/// The key of a service registration: its allocation, then its ID.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    pub alloc_id: AllocId,
    pub id: String,
}

impl RowKey {
    pub fn table(&self) -> Table {
        match self {
            RowKey::Job(_) | RowKey::JobVersion(_) => Table::Jobs,
            RowKey::JobSummary(_) => Table::JobSummaries,
            RowKey::Alloc { .. } => Table::Allocs,
            RowKey::Eval(_) => Table::Evals,
            RowKey::Node(_) => Table::Nodes,
            RowKey::SchedulerConfig => Table::SchedulerConfig,
            RowKey::AutopilotConfig => Table::AutopilotConfig,
            RowKey::ScalingEvents(_) => Table::ScalingEvents,
            RowKey::Deployment(_) => Table::Deployments,
            RowKey::Service(_) => Table::Services,
            RowKey::Namespace(_) => Table::Namespaces,
            RowKey::Variable(_) => Table::Variables,
            RowKey::RootKey(_) => Table::RootKeys,
            RowKey::Acl(AclKey::Policy(_)) => Table::AclPolicies,
            RowKey::Acl(AclKey::Token(_) | AclKey::Bootstrap) => Table::AclTokens,
            RowKey::Acl(AclKey::Role(_)) => Table::AclRoles,
        }
    }
}

/// The value of one row (shared with the snapshot it came from).
#[derive(Clone, Debug, PartialEq)]
pub enum Row {
    Job(Arc<Job>),
    JobVersion(Arc<Job>),
    JobSummary(Arc<JobSummary>),
    Alloc(Arc<Allocation>),
    Eval(Arc<Evaluation>),
    Node(Arc<Node>),
    SchedulerConfig(Arc<SchedulerConfiguration>),
    AutopilotConfig(Arc<AutopilotConfiguration>),
    ScalingEvents(Arc<JobScalingEvents>),
    Deployment(Arc<Deployment>),
    Service(Arc<ServiceRegistration>),
    Namespace(Arc<Namespace>),
    Variable(Arc<VariableEncrypted>),
    RootKey(Arc<RootKey>),
    Acl(AclRow),
}

/// A row's new value, or `None` when the row was deleted.
#[derive(Clone, Debug, PartialEq)]
pub struct RowChange {
    pub key: RowKey,
    pub row: Option<Row>,
}

/// What one command changed, at which index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AppliedChanges {
    pub index: u64,
    /// The name of the command that made the changes (`Command::name`):
    /// the event stream names its events after it, as Nomad does.
    pub command: &'static str,
    pub tables: TableSet,
    /// Each changed row once, with its value after the command, in key
    /// order.
    pub changes: Vec<RowChange>,
}

impl AppliedChanges {
    /// The changed rows of one kind, e.g. every upserted evaluation.
    pub fn evals(&self) -> impl Iterator<Item = &Arc<Evaluation>> {
        self.changes.iter().filter_map(|c| match &c.row {
            Some(Row::Eval(e)) => Some(e),
            _ => None,
        })
    }
    pub fn allocs(&self) -> impl Iterator<Item = &Arc<Allocation>> {
        self.changes.iter().filter_map(|c| match &c.row {
            Some(Row::Alloc(a)) => Some(a),
            _ => None,
        })
    }
    pub fn jobs(&self) -> impl Iterator<Item = &Arc<Job>> {
        self.changes.iter().filter_map(|c| match &c.row {
            Some(Row::Job(j)) => Some(j),
            _ => None,
        })
    }
    pub fn deployments(&self) -> impl Iterator<Item = &Arc<Deployment>> {
        self.changes.iter().filter_map(|c| match &c.row {
            Some(Row::Deployment(d)) => Some(d),
            _ => None,
        })
    }
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<Node>> {
        self.changes.iter().filter_map(|c| match &c.row {
            Some(Row::Node(n)) => Some(n),
            _ => None,
        })
    }
}
