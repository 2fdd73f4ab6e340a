//! Unit tests of the search: contexts, limits, UUID prefixes, namespaces,
//! fuzzy scopes and ordering.

use super::*;
use crate::state::fixtures::{self, AllocBuilder};
use crate::state::{Command, PlanResults};
use crate::structs::{Evaluation, Node, TriggeredBy};
use std::collections::HashMap;

struct World {
    state: StateSnapshot,
}

impl World {
    fn new() -> Self {
        World {
            state: StateSnapshot::new(),
        }
    }

    fn apply(&mut self, cmd: Command) {
        let index = self.state.latest_index() + 1;
        self.state.apply(index, &cmd).expect("command applies");
    }

    fn namespace(&mut self, name: &str) {
        self.apply(Command::NamespaceUpsert {
            namespaces: vec![crate::structs::Namespace {
                name: name.into(),
                ..Default::default()
            }],
        });
    }

    fn register(&mut self, job: Job) -> Evaluation {
        let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1);
        self.apply(Command::JobRegister {
            job: Arc::new(job),
            eval: Some(eval.clone()),
            enforce_index: None,
        });
        eval
    }

    fn node(&mut self, name: &str) -> Node {
        let node = fixtures::node(name);
        self.apply(Command::NodeRegister {
            node: Arc::new(node.clone()),
        });
        node
    }

    fn place(&mut self, job: &Job, eval: &Evaluation, node: &Node, count: u32) {
        let builder = AllocBuilder::new(job, &job.task_groups[0].name);
        let allocs = (0..count)
            .map(|i| builder.build(i, node.id, eval.id, 1))
            .collect();
        self.apply(Command::ApplyPlanResults(PlanResults {
            eval_id: eval.id,
            job: Some(Arc::new(job.clone())),
            node_allocation: HashMap::from([(node.id, allocs)]),
            updated_at: 1,
            ..Default::default()
        }));
    }
}

fn ids(answer: &PrefixMatches, ctx: Context) -> Vec<String> {
    answer.matches[&ctx].clone().unwrap_or_default()
}

#[test]
fn contexts_are_nomads_and_unknown_ones_are_refused_with_nomads_message() {
    assert_eq!(Context::expand("all").unwrap().len(), 9);
    assert_eq!(
        Context::expand("deployment").unwrap(),
        vec![Context::Deployments]
    );
    let err = Context::expand("job").unwrap_err();
    assert_eq!(
        err.to_string(),
        "context must be one of [allocs jobs nodes evals deployment plugins volumes \
         scaling_policy namespaces] or 'all' for all contexts; got \"job\""
    );
    assert!(Context::expand("").is_err());
    assert!(Context::expand("groups").is_err(), "a fuzzy-only context");
    let snap = StateSnapshot::new();
    assert_eq!(
        fuzzy_search(&snap, "e", "jobs", "default").unwrap_err(),
        SearchError::TermTooShort(1)
    );
    assert_eq!(
        SearchError::TermTooShort(1).to_string(),
        "fuzzy search query must be at least 2 characters, got 1"
    );
}

#[test]
fn job_prefix_search_stops_at_twenty_and_keeps_to_its_namespace() {
    let mut w = World::new();
    for i in 0..25 {
        w.register(fixtures::job(
            "default",
            &format!("job-{i:02}"),
            &[("g", 1)],
        ));
    }
    w.namespace("other");
    w.register(fixtures::job("other", "job-other", &[("g", 1)]));
    let all = prefix_search(&w.state, "job-", "jobs", "default").unwrap();
    assert_eq!(ids(&all, Context::Jobs).len(), TRUNCATE_LIMIT);
    assert_eq!(ids(&all, Context::Jobs)[0], "job-00");
    assert!(all.truncations[&Context::Jobs]);
    assert_eq!(all.index, w.state.table_index(Table::Jobs));

    let some = prefix_search(&w.state, "job-1", "jobs", "default").unwrap();
    assert_eq!(ids(&some, Context::Jobs).len(), 10);
    assert!(!some.truncations[&Context::Jobs]);

    let other = prefix_search(&w.state, "job-", "jobs", "other").unwrap();
    assert_eq!(ids(&other, Context::Jobs), vec!["job-other"]);
    let none = prefix_search(&w.state, "nope", "jobs", "default").unwrap();
    assert_eq!(none.matches[&Context::Jobs], None, "no match is null");
    let every = prefix_search(&w.state, "job-o", "jobs", "*").unwrap();
    assert_eq!(ids(&every, Context::Jobs), vec!["job-other"]);
}

#[test]
fn a_name_searched_in_all_contexts_leaves_out_the_uuid_contexts() {
    let mut w = World::new();
    w.register(fixtures::job("default", "example", &[("cache", 1)]));
    let answer = prefix_search(&w.state, "example", "all", "default").unwrap();
    let contexts: Vec<&str> = answer.matches.keys().map(|c| c.name()).collect();
    assert_eq!(
        contexts,
        vec!["jobs", "plugins", "volumes", "scaling_policy", "namespaces"]
    );
    assert_eq!(ids(&answer, Context::Jobs), vec!["example"]);
    assert_eq!(answer.matches[&Context::Plugins], None);
    assert_eq!(answer.truncations.len(), answer.matches.len());
    let json = serde_json::to_value(&answer).unwrap();
    assert_eq!(json["Matches"]["jobs"], serde_json::json!(["example"]));
    assert_eq!(json["Matches"]["volumes"], serde_json::Value::Null);
    assert_eq!(json["Truncations"]["jobs"], false);

    // A hexadecimal prefix searches every context.
    let answer = prefix_search(&w.state, "ab", "all", "default").unwrap();
    assert_eq!(answer.matches.len(), 9);
}

#[test]
fn uuid_prefixes_are_read_as_nomads_uuid_index_reads_them() {
    assert_eq!(
        UuidPrefix::read(""),
        UuidPrefix::From(uuid::Uuid::nil()),
        "the empty prefix lists from the start"
    );
    assert_eq!(UuidPrefix::read("example"), UuidPrefix::Invalid);
    assert_eq!(UuidPrefix::read(&"a".repeat(37)), UuidPrefix::Invalid);
    assert_eq!(UuidPrefix::read("a-b-c-d-e-f"), UuidPrefix::Invalid);
    assert_eq!(UuidPrefix::read("ABC"), UuidPrefix::NoMatch);
    assert_eq!(UuidPrefix::read("ab-c"), UuidPrefix::NoMatch);
    assert_eq!(
        UuidPrefix::read("abc"),
        UuidPrefix::From(uuid::Uuid::parse_str("abc00000-0000-0000-0000-000000000000").unwrap())
    );
    assert_eq!(
        UuidPrefix::read("12345678-9a"),
        UuidPrefix::From(uuid::Uuid::parse_str("12345678-9a00-0000-0000-000000000000").unwrap())
    );
}

#[test]
fn evaluation_allocation_and_node_ids_are_found_by_any_prefix() {
    let mut w = World::new();
    let job = fixtures::job("default", "web", &[("g", 1)]);
    let eval = w.register(job.clone());
    let job = w.state.job("default", "web").unwrap().as_ref().clone();
    let node = w.node("lab-1");
    w.place(&job, &eval, &node, 3);
    let eval_id = eval.id.to_string();
    for len in [0, 1, 2, 5, 9, 10, 36] {
        let prefix = &eval_id[..len];
        let answer = prefix_search(&w.state, prefix, "evals", "default").unwrap();
        assert_eq!(
            ids(&answer, Context::Evals),
            vec![eval_id.clone()],
            "{prefix}"
        );
    }
    let other_ns = prefix_search(&w.state, &eval_id[..4], "evals", "other").unwrap();
    assert_eq!(other_ns.matches[&Context::Evals], None);
    let upper = prefix_search(&w.state, &eval_id[..4].to_uppercase(), "evals", "default");
    if eval_id[..4].chars().any(|c| c.is_ascii_alphabetic()) {
        assert_eq!(upper.unwrap().matches[&Context::Evals], None);
    }

    let alloc = w.state.allocs().next().unwrap().id.to_string();
    let answer = prefix_search(&w.state, &alloc[..6], "allocs", "default").unwrap();
    assert!(ids(&answer, Context::Allocs).contains(&alloc));
    assert!(ids(&answer, Context::Allocs)
        .iter()
        .all(|id| id.starts_with(&alloc[..6])));
    let everything = prefix_search(&w.state, "", "allocs", "default").unwrap();
    assert_eq!(ids(&everything, Context::Allocs).len(), 3);
    let node_id = node.id.to_string();
    let answer = prefix_search(&w.state, &node_id[..3], "nodes", "default").unwrap();
    assert_eq!(ids(&answer, Context::Nodes), vec![node_id]);
    assert_eq!(answer.index, w.state.table_index(Table::Nodes));
}

#[test]
fn namespaces_are_default_and_the_created_ones_in_order() {
    let mut w = World::new();
    for ns in ["zeta", "alpha"] {
        w.namespace(ns);
    }
    let answer = prefix_search(&w.state, "", "namespaces", "default").unwrap();
    assert_eq!(
        ids(&answer, Context::Namespaces),
        vec!["alpha", "default", "zeta"]
    );
    let empty = StateSnapshot::new();
    let answer = prefix_search(&empty, "de", "namespaces", "default").unwrap();
    assert_eq!(ids(&answer, Context::Namespaces), vec!["default"]);
}

/// The job of Nomad's documented fuzzy search example.
fn example_python() -> Job {
    let mut job = fixtures::job("default", "example-python", &[("my-spy-app", 1)]);
    job.name = "example-python".into();
    let task = &mut job.task_groups[0].tasks[0];
    task.name = "my-python-task".into();
    task.driver = "raw_exec".into();
    task.config
        .insert("command".into(), serde_json::json!("/usr/bin/python3"));
    job
}

#[test]
fn fuzzy_search_answers_jobs_groups_tasks_and_commands_with_their_scopes() {
    let mut w = World::new();
    let eval = w.register(example_python());
    let job = w
        .state
        .job("default", "example-python")
        .unwrap()
        .as_ref()
        .clone();
    let node = w.node("nomad-lab1");
    w.place(&job, &eval, &node, 1);

    let answer = fuzzy_search(&w.state, "PY", "jobs", "default").unwrap();
    let json = serde_json::to_value(&answer).unwrap();
    assert_eq!(
        json["Matches"],
        serde_json::json!({
            "jobs": [{"ID": "example-python", "Scope": ["default", "example-python"]}],
            "groups": [{"ID": "my-spy-app", "Scope": ["default", "example-python"]}],
            "tasks": [{"ID": "my-python-task",
                       "Scope": ["default", "example-python", "my-spy-app"]}],
            "commands": [{"ID": "/usr/bin/python3",
                          "Scope": ["default", "example-python", "my-spy-app", "my-python-task"]}],
        })
    );
    assert_eq!(json["Truncations"], serde_json::json!({"jobs": false}));

    let allocs = fuzzy_search(&w.state, "spy", "allocs", "default").unwrap();
    let alloc = w.state.allocs().next().unwrap();
    assert_eq!(
        allocs.matches[&Context::Allocs],
        vec![FuzzyMatch {
            id: "example-python.my-spy-app[0]".into(),
            scope: vec!["default".into(), alloc.id.to_string()],
        }]
    );
    let nodes = fuzzy_search(&w.state, "lab", "nodes", "default").unwrap();
    assert_eq!(
        nodes.matches[&Context::Nodes],
        vec![FuzzyMatch {
            id: "nomad-lab1".into(),
            scope: vec![node.id.to_string()],
        }]
    );
    let none = fuzzy_search(&w.state, "zz", "nodes", "default").unwrap();
    assert!(none.matches.is_empty());
    assert!(!none.truncations[&Context::Nodes]);
    let namespaces = fuzzy_search(&w.state, "fau", "namespaces", "default").unwrap();
    let json = serde_json::to_value(&namespaces).unwrap();
    assert_eq!(
        json["Matches"]["namespaces"],
        serde_json::json!([{"ID": "default"}])
    );
}

#[test]
fn fuzzy_search_of_all_prefix_matches_the_uuid_contexts() {
    let mut w = World::new();
    let eval = w.register(example_python());
    let answer = fuzzy_search(&w.state, &eval.id.to_string()[..4], "all", "default").unwrap();
    assert_eq!(
        answer.matches[&Context::Evals],
        vec![FuzzyMatch {
            id: eval.id.to_string(),
            scope: Vec::new()
        }]
    );
    for ctx in [
        Context::Deployments,
        Context::Volumes,
        Context::ScalingPolicies,
    ] {
        assert_eq!(answer.matches[&ctx], Vec::new());
    }
    let truncations: Vec<&str> = answer.truncations.keys().map(|c| c.name()).collect();
    assert_eq!(truncations.len(), 9, "{truncations:?}");
    let names = fuzzy_search(&w.state, "python", "all", "default").unwrap();
    assert_eq!(names.matches[&Context::Evals], Vec::new());
    assert_eq!(names.matches[&Context::Jobs][0].id, "example-python");
}

#[test]
fn fuzzy_search_looks_at_twenty_objects_and_orders_best_first() {
    let mut w = World::new();
    for i in 0..25 {
        let mut job = fixtures::job("default", &format!("svc-{i:02}"), &[("g", 1)]);
        job.name = format!("{}svc-{i:02}", "x".repeat(i % 3));
        w.register(job);
    }
    let answer = fuzzy_search(&w.state, "svc", "jobs", "default").unwrap();
    let jobs = &answer.matches[&Context::Jobs];
    assert_eq!(jobs.len(), FUZZY_LIMIT_QUERY, "the first 20 jobs looked at");
    assert!(answer.truncations[&Context::Jobs]);
    // Earliest match first, then the shorter name, then alphabetically.
    assert_eq!(jobs[0].id, "svc-00");
    assert_eq!(jobs[1].id, "svc-03");
    assert_eq!(jobs[6].id, "svc-18");
    assert!(jobs[7].id.starts_with("xsvc-"), "{jobs:?}");
    assert!(jobs[19].id.starts_with("xxsvc-"), "{jobs:?}");
    // The last job looked at did not match: nothing is marked truncated.
    let few = fuzzy_search(&w.state, "svc-0", "jobs", "default").unwrap();
    assert_eq!(few.matches[&Context::Jobs].len(), 10);
    assert!(!few.truncations[&Context::Jobs]);
}
