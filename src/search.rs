//! Nomad's search API over a state snapshot: prefix search (`/v1/search`)
//! and fuzzy search (`/v1/search/fuzzy`), with Nomad 1.1's contexts,
//! limits, scopes and ordering.
//!
//! Every search is bounded work, whatever the state holds: a prefix search
//! stops at [`TRUNCATE_LIMIT`] matches per context and looks at no more
//! than [`SCAN_LIMIT`] objects of a context; a fuzzy search looks at the
//! first [`FUZZY_LIMIT_QUERY`] objects of a context and answers at most
//! [`FUZZY_LIMIT_RESULTS`] matches per context. A context answered short
//! says so in `Truncations`.
//!
//! Contexts herder has no objects for (CSI plugins and volumes, scaling
//! policies) are searched and answered empty, as a Nomad
//! cluster without them answers.

use crate::state::{StateSnapshot, Table};
use crate::structs::Job;
use serde::{Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Matches per context a prefix search answers (Nomad's `truncateLimit`).
pub const TRUNCATE_LIMIT: usize = 20;
/// Objects per context a fuzzy search looks at (Nomad's default
/// `search.limit_query`).
pub const FUZZY_LIMIT_QUERY: usize = 20;
/// Matches per context a fuzzy search answers (Nomad's default
/// `search.limit_results`).
pub const FUZZY_LIMIT_RESULTS: usize = 100;
/// The shortest fuzzy search term, in bytes (Nomad's default
/// `search.min_term_length`).
pub const FUZZY_MIN_TERM_LENGTH: usize = 2;
/// Objects of one context a prefix search looks at, matching or not (one
/// in another namespace is looked at and passed over); past it the answer
/// is marked truncated.
pub const SCAN_LIMIT: usize = 10_000;

/// What a search looks for: one kind of object. The last six are the parts
/// of a job a fuzzy search of `jobs` answers as well.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Context {
    Allocs,
    Jobs,
    Nodes,
    Evals,
    Deployments,
    Plugins,
    Volumes,
    ScalingPolicies,
    Namespaces,
    Groups,
    Services,
    Tasks,
    Images,
    Commands,
    Classes,
}

/// The contexts a request may name, in Nomad's order; `all` is all of them.
pub const SEARCH_CONTEXTS: [Context; 9] = [
    Context::Allocs,
    Context::Jobs,
    Context::Nodes,
    Context::Evals,
    Context::Deployments,
    Context::Plugins,
    Context::Volumes,
    Context::ScalingPolicies,
    Context::Namespaces,
];

impl Context {
    /// The context's name in requests and answers.
    pub fn name(self) -> &'static str {
        match self {
            Context::Allocs => "allocs",
            Context::Jobs => "jobs",
            Context::Nodes => "nodes",
            Context::Evals => "evals",
            Context::Deployments => "deployment",
            Context::Plugins => "plugins",
            Context::Volumes => "volumes",
            Context::ScalingPolicies => "scaling_policy",
            Context::Namespaces => "namespaces",
            Context::Groups => "groups",
            Context::Services => "services",
            Context::Tasks => "tasks",
            Context::Images => "images",
            Context::Commands => "commands",
            Context::Classes => "classes",
        }
    }

    /// The contexts a request's `Context` stands for: the one it names, or
    /// every one for `all`.
    pub fn expand(asked: &str) -> Result<Vec<Context>, SearchError> {
        if asked == "all" {
            return Ok(SEARCH_CONTEXTS.to_vec());
        }
        SEARCH_CONTEXTS
            .iter()
            .find(|c| c.name() == asked)
            .map(|c| vec![*c])
            .ok_or_else(|| SearchError::UnknownContext(asked.to_string()))
    }

    /// The table whose index an answer about this context carries.
    fn table(self) -> Option<Table> {
        match self {
            Context::Allocs => Some(Table::Allocs),
            Context::Nodes => Some(Table::Nodes),
            Context::Evals => Some(Table::Evals),
            Context::Deployments => Some(Table::Deployments),
            Context::Jobs => Some(Table::Jobs),
            Context::Namespaces => Some(Table::Namespaces),
            _ => None,
        }
    }
}

impl Serialize for Context {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// A search request the API refuses, with Nomad's messages.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum SearchError {
    #[error("context must be one of [{names}] or 'all' for all contexts; got {0:?}", names = context_names())]
    UnknownContext(String),
    #[error("fuzzy search query must be at least {FUZZY_MIN_TERM_LENGTH} characters, got {0}")]
    TermTooShort(usize),
}

fn context_names() -> String {
    SEARCH_CONTEXTS.map(Context::name).join(" ")
}

/// A prefix search's answer: the matching IDs of each context searched
/// (`None`, JSON `null`, when nothing matched, as Nomad answers) and
/// whether more matched than the list holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct PrefixMatches {
    pub matches: BTreeMap<Context, Option<Vec<String>>>,
    pub truncations: BTreeMap<Context, bool>,
    /// The newest index of the tables searched (Nomad's `Index`).
    pub index: u64,
}

/// The IDs (job IDs, namespace names, UUIDs) that start with `prefix`, in
/// each context `context` stands for, in `namespace` (`*`: every one).
///
/// As in Nomad, a context keyed by UUID (allocations, evaluations, nodes,
/// deployments) is left out of the answer when `prefix` cannot begin a
/// UUID (it is not hexadecimal): searching `all` for a job name answers
/// the contexts a name can be found in.
pub fn prefix_search(
    snap: &StateSnapshot,
    prefix: &str,
    context: &str,
    namespace: &str,
) -> Result<PrefixMatches, SearchError> {
    let contexts = Context::expand(context)?;
    let mut answer = PrefixMatches {
        index: index_of(snap, &contexts),
        ..Default::default()
    };
    for ctx in contexts {
        if let Some((ids, truncated)) = prefix_matches(snap, ctx, prefix, namespace) {
            answer.matches.insert(ctx, (!ids.is_empty()).then_some(ids));
            answer.truncations.insert(ctx, truncated);
        }
    }
    Ok(answer)
}

/// The first matches of one context and whether more matched, or `None`
/// when Nomad leaves the context out.
fn prefix_matches(
    snap: &StateSnapshot,
    ctx: Context,
    prefix: &str,
    namespace: &str,
) -> Option<(Vec<String>, bool)> {
    let every_namespace = namespace == "*";
    let wanted = |ns: &str| every_namespace || ns == namespace;
    let found = match ctx {
        Context::Jobs if every_namespace => first_matches(
            snap.jobs()
                .map(|job| job.id.starts_with(prefix).then(|| job.id.clone())),
        ),
        Context::Jobs => first_matches(
            snap.jobs_from(namespace, prefix)
                .take_while(|job| job.id.starts_with(prefix))
                .map(|job| Some(job.id.clone())),
        ),
        Context::Namespaces => {
            first_matches(namespaces(snap).map(|ns| ns.starts_with(prefix).then(|| ns.to_string())))
        }
        Context::Evals => uuid_matches(prefix, |from| {
            snap.evals_from(from)
                .map(|eval| (eval.id, wanted(&eval.namespace)))
        })?,
        Context::Allocs => uuid_matches(prefix, |from| {
            snap.allocs_from(from)
                .map(|alloc| (alloc.id, wanted(&alloc.namespace)))
        })?,
        Context::Nodes => uuid_matches(prefix, |from| snap.nodes_from(from).map(|n| (n.id, true)))?,
        Context::Deployments => uuid_matches(prefix, |from| {
            snap.deployments_from(from)
                .map(|d| (d.id, wanted(&d.namespace)))
        })?,
        // Keyed by name in Nomad: always answered, and herder has none.
        Context::Plugins | Context::Volumes | Context::ScalingPolicies => (Vec::new(), false),
        // Parts of jobs: only a fuzzy search answers them.
        Context::Groups
        | Context::Services
        | Context::Tasks
        | Context::Images
        | Context::Commands
        | Context::Classes => return None,
    };
    Some(found)
}

/// Up to `TRUNCATE_LIMIT` matches from `candidates` (`Some(id)` a match,
/// `None` an object looked at and passed over), and whether more may
/// exist: a further match, or the scan stopped at `SCAN_LIMIT`.
fn first_matches(candidates: impl Iterator<Item = Option<String>>) -> (Vec<String>, bool) {
    let mut matches = Vec::new();
    for (looked, candidate) in candidates.enumerate() {
        if looked == SCAN_LIMIT {
            return (matches, true);
        }
        if let Some(id) = candidate {
            if matches.len() == TRUNCATE_LIMIT {
                return (matches, true);
            }
            matches.push(id);
        }
    }
    (matches, false)
}

/// The smallest UUID whose text begins with `prefix`, if one does: where a
/// list by ID filtered by that prefix starts.
pub fn uuid_prefix_floor(prefix: &str) -> Option<uuid::Uuid> {
    match UuidPrefix::read(prefix) {
        UuidPrefix::From(start) => Some(start),
        UuidPrefix::Invalid | UuidPrefix::NoMatch => None,
    }
}

/// How a prefix reads as the beginning of a UUID.
#[derive(Debug, PartialEq)]
enum UuidPrefix {
    /// Not hexadecimal, longer than a UUID or with more than four hyphens:
    /// Nomad's UUID index refuses it.
    Invalid,
    /// Hexadecimal, but no UUID's text begins with it (capitals, hyphens
    /// out of place).
    NoMatch,
    /// The smallest UUID whose text begins with it.
    From(uuid::Uuid),
}

impl UuidPrefix {
    fn read(prefix: &str) -> UuidPrefix {
        let hex_or_hyphen = |c: char| c.is_ascii_hexdigit() || c == '-';
        if prefix.len() > 36
            || prefix.matches('-').count() > 4
            || !prefix.chars().all(hex_or_hyphen)
        {
            return UuidPrefix::Invalid;
        }
        let canonical = prefix.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        });
        if !canonical {
            return UuidPrefix::NoMatch;
        }
        let mut digits: String = prefix.chars().filter(|c| *c != '-').collect();
        while digits.len() < 32 {
            digits.push('0');
        }
        match uuid::Uuid::try_parse(&digits) {
            Ok(from) => UuidPrefix::From(from),
            Err(_) => UuidPrefix::NoMatch,
        }
    }
}

/// The first UUIDs beginning with `prefix`: `from(start)` lists objects
/// by ID from `start` on, each with whether it is wanted (its namespace).
/// `None` when `prefix` cannot begin a UUID.
fn uuid_matches<I>(prefix: &str, from: impl FnOnce(uuid::Uuid) -> I) -> Option<(Vec<String>, bool)>
where
    I: Iterator<Item = (uuid::Uuid, bool)>,
{
    match UuidPrefix::read(prefix) {
        UuidPrefix::Invalid => None,
        UuidPrefix::NoMatch => Some((Vec::new(), false)),
        UuidPrefix::From(start) => Some(first_matches(
            from(start)
                .map(|(id, wanted)| (id.to_string(), wanted))
                .take_while(|(id, _)| id.starts_with(prefix))
                .map(|(id, wanted)| wanted.then_some(id)),
        )),
    }
}

/// The namespaces that exist, by name (`default` always does).
fn namespaces(snap: &StateSnapshot) -> impl Iterator<Item = Arc<str>> {
    snap.namespaces_by_prefix("")
        .into_iter()
        .map(|ns| Arc::from(ns.name.as_str()))
}

/// The newest index of the tables behind `contexts`.
fn index_of(snap: &StateSnapshot, contexts: &[Context]) -> u64 {
    contexts
        .iter()
        .filter_map(|c| c.table())
        .map(|t| snap.table_index(t))
        .max()
        .unwrap_or(0)
}

/// One fuzzy match: the name that matched and the IDs that locate it,
/// from the namespace down to its parent (Nomad's `FuzzyMatch`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FuzzyMatch {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Scope", skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
}

/// A fuzzy search's answer: the matches of each context that has any
/// (the UUID contexts searched by prefix always, possibly empty), best
/// first, and whether each list was cut short.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct FuzzyMatches {
    pub matches: BTreeMap<Context, Vec<FuzzyMatch>>,
    pub truncations: BTreeMap<Context, bool>,
    /// The newest index of the tables searched (Nomad's `Index`).
    pub index: u64,
}

/// The names containing `text` (case-insensitive) in each context
/// `context` stands for, in `namespace` (`*`: every one), as Nomad's fuzzy
/// search: jobs answer their name, groups, tasks and driver commands,
/// images and classes too; allocations and nodes their name; evaluations
/// and deployments, known only by UUID, the IDs that begin with `text`.
pub fn fuzzy_search(
    snap: &StateSnapshot,
    text: &str,
    context: &str,
    namespace: &str,
) -> Result<FuzzyMatches, SearchError> {
    if text.len() < FUZZY_MIN_TERM_LENGTH {
        return Err(SearchError::TermTooShort(text.len()));
    }
    let contexts = Context::expand(context)?;
    let lower = text.to_lowercase();
    let every_namespace = namespace == "*";
    let mut answer = FuzzyMatches {
        index: index_of(snap, &contexts),
        ..Default::default()
    };
    let mut found = Found::default();
    for &ctx in &contexts {
        match ctx {
            Context::Evals | Context::Deployments | Context::ScalingPolicies | Context::Volumes => {
                let (ids, truncated) =
                    prefix_matches(snap, ctx, text, namespace).unwrap_or_default();
                let matches = ids
                    .into_iter()
                    .map(|id| FuzzyMatch {
                        id,
                        scope: Vec::new(),
                    })
                    .collect();
                answer.matches.insert(ctx, matches);
                answer.truncations.insert(ctx, truncated);
                continue;
            }
            Context::Jobs if every_namespace => {
                found.scan(snap.jobs(), |job| job_matches(job, &lower));
            }
            Context::Jobs => {
                found.scan(snap.jobs_from(namespace, ""), |job| {
                    job_matches(job, &lower)
                });
            }
            Context::Allocs => {
                let alloc_match = |alloc: &&Arc<crate::structs::Allocation>| {
                    let scope = vec![alloc.namespace.to_string(), alloc.id.to_string()];
                    scored(Context::Allocs, &alloc.name, &lower, scope)
                        .into_iter()
                        .collect()
                };
                if every_namespace {
                    found.scan(snap.allocs(), alloc_match);
                } else {
                    found.scan(snap.allocs_in_namespace(namespace), alloc_match);
                }
            }
            Context::Nodes => found.scan(snap.nodes(), |node| {
                let scope = vec![node.id.to_string()];
                scored(Context::Nodes, &node.name, &lower, scope)
                    .into_iter()
                    .collect()
            }),
            Context::Namespaces => found.scan(namespaces(snap), |ns| {
                scored(Context::Namespaces, ns, &lower, Vec::new())
                    .into_iter()
                    .collect()
            }),
            _ => {}
        }
        // Searched by name: answered in `Truncations` even without a match.
        answer.truncations.insert(ctx, false);
    }
    found.finish(&mut answer);
    Ok(answer)
}

/// A fuzzy match with its score: where in the name the text begins.
#[derive(Debug)]
struct Scored {
    id: String,
    scope: Vec<String>,
    score: usize,
}

/// `name` as a match of `ctx` when it contains `lower` (lower case).
fn scored(ctx: Context, name: &str, lower: &str, scope: Vec<String>) -> Option<(Context, Scored)> {
    let score = name.to_lowercase().find(lower)?;
    Some((
        ctx,
        Scored {
            id: name.to_string(),
            scope,
            score,
        },
    ))
}

/// Every fuzzy match in a job: its name (scope: namespace, job ID), its
/// groups (namespace, job ID), tasks (namespace, job ID, group) and their
/// driver's command, image or class (namespace, job ID, group, task).
fn job_matches(job: &Job, lower: &str) -> Vec<(Context, Scored)> {
    let scope = |parts: &[&str]| {
        std::iter::once(job.namespace.as_str())
            .chain(parts.iter().copied())
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let mut matches = Vec::new();
    matches.extend(scored(Context::Jobs, &job.name, lower, scope(&[&job.id])));
    for group in &job.task_groups {
        matches.extend(scored(
            Context::Groups,
            &group.name,
            lower,
            scope(&[&job.id]),
        ));
        for task in &group.tasks {
            let parents = [job.id.as_str(), group.name.as_str()];
            matches.extend(scored(Context::Tasks, &task.name, lower, scope(&parents)));
            let (ctx, key) = match task.driver.as_str() {
                "docker" => (Context::Images, "image"),
                "exec" | "raw_exec" => (Context::Commands, "command"),
                "java" => (Context::Classes, "class"),
                _ => continue,
            };
            if let Some(value) = task.config.get(key).and_then(|v| v.as_str()) {
                let parents = [job.id.as_str(), group.name.as_str(), task.name.as_str()];
                matches.extend(scored(ctx, value, lower, scope(&parents)));
            }
        }
    }
    matches
}

/// Fuzzy matches being gathered, by context.
#[derive(Default)]
struct Found {
    lists: BTreeMap<Context, Vec<Scored>>,
    truncated: BTreeSet<Context>,
}

impl Found {
    /// Looks at the first `FUZZY_LIMIT_QUERY` objects. When more remain,
    /// the contexts the last one matched in are marked truncated (Nomad's
    /// rule: the search stopped there).
    fn scan<T>(
        &mut self,
        objects: impl Iterator<Item = T>,
        matches_of: impl Fn(&T) -> Vec<(Context, Scored)>,
    ) {
        let mut objects = objects.peekable();
        let mut looked = 0;
        while let Some(object) = objects.next() {
            looked += 1;
            let last = looked == FUZZY_LIMIT_QUERY;
            let limited = last && objects.peek().is_some();
            for (ctx, m) in matches_of(&object) {
                self.add(ctx, m, limited);
            }
            if last {
                break;
            }
        }
    }

    fn add(&mut self, ctx: Context, m: Scored, limited: bool) {
        let list = self.lists.entry(ctx).or_default();
        if list.len() >= FUZZY_LIMIT_RESULTS {
            self.truncated.insert(ctx);
            return;
        }
        list.push(m);
        if limited {
            self.truncated.insert(ctx);
        }
    }

    /// Sorts each list best first (earliest match, then shortest name,
    /// then alphabetically) into the answer.
    fn finish(self, answer: &mut FuzzyMatches) {
        for (ctx, mut list) in self.lists {
            list.sort_by(|a, b| (a.score, a.id.len(), &a.id).cmp(&(b.score, b.id.len(), &b.id)));
            let matches = list
                .into_iter()
                .map(|m| FuzzyMatch {
                    id: m.id,
                    scope: m.scope,
                })
                .collect();
            answer.matches.insert(ctx, matches);
        }
        for ctx in self.truncated {
            answer.truncations.insert(ctx, true);
        }
    }
}

#[cfg(test)]
#[path = "search_tests.rs"]
mod tests;
