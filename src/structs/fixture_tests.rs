//! Round trips against real Nomad 1.1.2 answers (`tests/fixtures/`): every
//! field herder writes must carry the value and encoding Nomad wrote.

use super::*;
use serde_json::Value;

/// A Nomad 1.1.2 fixture file's text.
pub(crate) fn fixture_text(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/nomad-1.1.2/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/nomad-1.1.2/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// Fields herder adds to Nomad's shapes (documented extensions).
const HERDER_FIELDS: &[&str] = &[
    "JobVersion",
    "LastSnapshotID",
    "NodePool",
    "MaxClientDisconnect",
    "Lifecycle",
    "Artifacts",
    "MinDynamicPort",
    "MaxDynamicPort",
    "RejectJobRegistration",
    "PauseEvalBroker",
    "SysBatchSchedulerEnabled",
    "ForceDeadline",
    "StartedAt",
    "CreateIndex",
    "Unknown",
];

/// Asserts every field in `ours` is in `nomad` with an equal value. Shared
/// by every test that compares herder's JSON with Nomad's.
pub(crate) fn assert_subset(ours: &Value, nomad: &Value, path: &str) {
    match (ours, nomad) {
        (Value::Object(o), Value::Object(n)) => {
            for (k, v) in o {
                match n.get(k) {
                    Some(nv) => assert_subset(v, nv, &format!("{path}.{k}")),
                    None => assert!(
                        HERDER_FIELDS.contains(&k.as_str()),
                        "{path}.{k} is written by herder but not by Nomad (value {v})"
                    ),
                }
            }
        }
        (Value::Array(o), Value::Array(n)) => {
            assert_eq!(o.len(), n.len(), "{path}: array length");
            for (i, (a, b)) in o.iter().zip(n).enumerate() {
                assert_subset(a, b, &format!("{path}[{i}]"));
            }
        }
        // Nomad's `api` package answers unset pointer fields (SubmitTime,
        // Status, ... in /v1/jobs/parse) with null where the server's
        // structs print the zero value; both mean "unset".
        (Value::Number(a), Value::Null) if a.as_f64() == Some(0.0) => {}
        (Value::String(a), Value::Null) if a.is_empty() => {}
        (Value::Bool(false), Value::Null) => {}
        (Value::Number(a), Value::Number(b)) => {
            assert_eq!(a.as_f64(), b.as_f64(), "{path}: number");
        }
        (a, b) => assert_eq!(a, b, "{path}"),
    }
}

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(nomad: &Value) -> (T, Value) {
    let parsed: T = serde_json::from_value(nomad.clone()).expect("parse Nomad JSON");
    let ours = serde_json::to_value(&parsed).unwrap();
    assert_subset(&ours, nomad, "$");
    (parsed, ours)
}

#[test]
fn job_round_trips() {
    let (job, ours): (Job, _) = round_trip(&fixture("job.json"));
    assert_eq!(job.id, "svc");
    assert_eq!(job.job_type, JobType::Service);
    assert_eq!(job.task_groups[0].count, 2);
    let task = &job.task_groups[0].tasks[0];
    assert_eq!(task.kill_timeout, std::time::Duration::from_secs(5));
    assert_eq!(task.resources.memory_mb, 64);
    // Go's nil slices stay null.
    assert!(ours["Constraints"].is_null());
}

#[test]
fn evaluation_round_trips_and_omits_empty_fields() {
    let (eval, ours): (Evaluation, _) = round_trip(&fixture("evaluation.json"));
    assert_eq!(eval.status, EvalStatus::Complete);
    assert_eq!(eval.triggered_by, TriggeredBy::JobRegister);
    assert_eq!(eval.queued_allocations.get("g"), Some(&0));
    assert!(ours.get("NodeID").is_none());
    assert!(ours.get("Wait").is_none());
}

#[test]
fn blocked_evaluations_round_trip() {
    let list = fixture("job-evaluations-blocked.json");
    for e in list.as_array().unwrap() {
        let (eval, _): (Evaluation, _) = round_trip(e);
        if eval.status == EvalStatus::Blocked {
            assert_eq!(eval.triggered_by, TriggeredBy::QueuedAllocs);
            let m = &eval.failed_tg_allocs["g"];
            assert_eq!(m.dimension_exhausted.get("cpu"), Some(&1));
            assert_eq!(eval.class_eligibility.len(), 1);
        }
    }
    let list = fixture("evaluations-list.json");
    for e in list.as_array().unwrap() {
        let _: (Evaluation, _) = round_trip(e);
    }
}

#[test]
fn node_round_trips() {
    let (node, _): (Node, _) = round_trip(&fixture("node.json"));
    assert_eq!(node.status, NodeStatus::Ready);
    assert_eq!(node.node_resources.cpu.cpu_shares, 5198);
    assert!(node.has_healthy_driver("mock_driver"));
    assert!(!node.has_healthy_driver("docker"));
    assert!(node.is_schedulable());
}

#[test]
fn allocation_round_trips_without_embedding_the_job() {
    let (alloc, ours): (Allocation, _) = round_trip(&fixture("allocation.json"));
    assert_eq!(alloc.client_status, ClientStatus::Running);
    assert_eq!(alloc.index(), Some(0));
    assert_eq!(alloc.allocated_resources.comparable().memory_mb, 64);
    assert!(ours.get("Job").is_none(), "allocations reference their job");
    assert_eq!(alloc.task_states.get("t").map(|s| s.events.len()), Some(3));
    let list = fixture("node-allocations.json");
    for a in list.as_array().unwrap() {
        let _: (Allocation, _) = round_trip(a);
    }
}

#[test]
fn scheduler_configuration_round_trips() {
    let nomad = fixture("operator-scheduler-configuration.json");
    let (cfg, _): (SchedulerConfiguration, _) = round_trip(&nomad["SchedulerConfig"]);
    assert_eq!(cfg.scheduler_algorithm, SchedulerAlgorithm::Binpack);
    assert!(cfg.preemption_config.system_scheduler_enabled);
    assert_eq!(cfg.preemption_config, PreemptionConfig::default());
}

#[test]
fn job_summary_round_trips() {
    let nomad = fixture("job-summary.json");
    let (s, _): (JobSummary, _) = round_trip(&nomad);
    assert!(!s.summary.is_empty());
}

#[test]
fn parsed_jobs_canonicalize_to_nomads_defaults() {
    // Nomad's /v1/jobs/parse output is already canonical; canonicalizing it
    // again must change nothing herder models.
    for name in [
        "parse-web.json",
        "parse-nightly.json",
        "parse-node-agent.json",
        "parse-cleanup.json",
    ] {
        let nomad = fixture(name);
        let mut job: Job = serde_json::from_value(nomad.clone()).unwrap();
        let mut before = job.clone();
        job.canonicalize();
        // Nomad 1.1.2 predates node pools; herder fills the default pool.
        assert_eq!(job.node_pool, "default");
        before.node_pool = job.node_pool.clone();
        assert_eq!(job, before, "{name}: canonicalize changed a canonical job");
        job.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_subset(&serde_json::to_value(&job).unwrap(), &nomad, name);
    }
}

#[test]
fn minimal_job_gets_nomads_defaults() {
    let mut job: Job = serde_json::from_value(serde_json::json!({
        "ID": "web", "Type": "batch",
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]
    }))
    .unwrap();
    job.canonicalize();
    job.validate().unwrap();
    assert_eq!(job.namespace, "default");
    assert_eq!(job.priority, 50);
    let tg = &job.task_groups[0];
    let rp = tg.restart_policy.as_ref().unwrap();
    assert_eq!((rp.attempts, rp.mode.as_str()), (3, "fail"));
    let rs = tg.reschedule_policy.as_ref().unwrap();
    assert_eq!((rs.attempts, rs.delay_function.as_str()), (1, "constant"));
    assert_eq!(tg.ephemeral_disk.as_ref().unwrap().size_mb, 300);
    assert_eq!(tg.tasks[0].resources.cpu, 100);
    assert_eq!(tg.tasks[0].resources.memory_mb, 300);
    assert!(tg.update.is_none(), "batch jobs have no rolling update");
}

fn job_with(f: impl FnOnce(&mut Job)) -> Result<(), String> {
    let mut job: Job = serde_json::from_value(serde_json::json!({
        "ID": "web",
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]
    }))
    .unwrap();
    job.canonicalize();
    f(&mut job);
    job.validate().map_err(|e| e.to_string())
}

#[test]
fn validation_names_the_field_for_every_user_mistake() {
    type Mutation = Box<dyn FnOnce(&mut Job)>;
    let cases: Vec<(&str, Mutation)> = vec![
        ("Missing job ID", Box::new(|j: &mut Job| j.id.clear())),
        (
            "Job priority must be between [1, 100]",
            Box::new(|j: &mut Job| j.priority = 101),
        ),
        (
            "Invalid job type: \"cron\"",
            Box::new(|j: &mut Job| j.job_type = JobType::parse("cron")),
        ),
        (
            "Count can't be negative",
            Box::new(|j: &mut Job| j.task_groups[0].count = -1),
        ),
        (
            "redefines 'g' from group 1",
            Box::new(|j: &mut Job| {
                let g = j.task_groups[0].clone();
                j.task_groups.push(g);
            }),
        ),
        (
            "redefines 't' from task 1",
            Box::new(|j: &mut Job| {
                let t = j.task_groups[0].tasks[0].clone();
                j.task_groups[0].tasks.push(t);
            }),
        ),
        (
            "unknown operand \"~=\"",
            Box::new(|j: &mut Job| {
                j.constraints
                    .push(Constraint::new("${attr.kernel.name}", "~=", "linux"))
            }),
        ),
        (
            "not a valid regexp",
            Box::new(|j: &mut Job| {
                j.constraints
                    .push(Constraint::new("${attr.kernel.name}", "regexp", "(["))
            }),
        ),
        (
            "not a valid version constraint",
            Box::new(|j: &mut Job| {
                j.constraints
                    .push(Constraint::new("${attr.os.version}", "version", ">= x.y"))
            }),
        ),
        (
            "minimum MemoryMB value is 10",
            Box::new(|j: &mut Job| j.task_groups[0].tasks[0].resources.memory_mb = 5),
        ),
        (
            "minimum CPU value is 1",
            Box::new(|j: &mut Job| j.task_groups[0].tasks[0].resources.cpu = -3),
        ),
        (
            "MemoryMaxMB value (100) should be larger",
            Box::new(|j: &mut Job| j.task_groups[0].tasks[0].resources.memory_max_mb = 100),
        ),
        (
            "Missing task driver",
            Box::new(|j: &mut Job| j.task_groups[0].tasks[0].driver.clear()),
        ),
        (
            "Missing tasks for task group",
            Box::new(|j: &mut Job| j.task_groups[0].tasks.clear()),
        ),
        (
            "Missing job task groups",
            Box::new(|j: &mut Job| j.task_groups.clear()),
        ),
        (
            "Weight must be non-zero",
            Box::new(|j: &mut Job| {
                j.affinities.push(Affinity {
                    l_target: "${node.class}".into(),
                    operand: "=".into(),
                    r_target: "x".into(),
                    weight: 0,
                })
            }),
        ),
        (
            "percentages add up to 150",
            Box::new(|j: &mut Job| {
                j.spreads.push(Spread {
                    attribute: "${node.datacenter}".into(),
                    weight: 50,
                    spread_target: vec![
                        SpreadTarget {
                            value: "a".into(),
                            percent: 100,
                        },
                        SpreadTarget {
                            value: "b".into(),
                            percent: 50,
                        },
                    ],
                })
            }),
        ),
        (
            "Periodic: Spec",
            Box::new(|j: &mut Job| {
                j.job_type = JobType::Batch;
                j.periodic = Some(PeriodicConfig {
                    enabled: true,
                    spec: "every day".into(),
                    ..Default::default()
                })
            }),
        ),
        (
            "static port \"http\" must be between 1 and 65535",
            Box::new(|j: &mut Job| {
                j.task_groups[0].networks.push(NetworkResource {
                    reserved_ports: vec![Port {
                        label: "http".into(),
                        value: 70000,
                        ..Default::default()
                    }],
                    ..Default::default()
                })
            }),
        ),
        (
            "Count must be 0 or 1 for system jobs",
            Box::new(|j: &mut Job| {
                j.job_type = JobType::System;
                j.task_groups[0].reschedule_policy = None;
                j.task_groups[0].count = 3;
            }),
        ),
        // Issue 15: sizes, names that become paths, and arithmetic.
        (
            "Count 2147483647 is more than the limit of 100000",
            Box::new(|j: &mut Job| j.task_groups[0].count = i32::MAX),
        ),
        (
            "more than the limit of 1000 (limits.max_task_groups)",
            Box::new(|j: &mut Job| {
                let g = j.task_groups[0].clone();
                j.task_groups = (0..1001)
                    .map(|i| TaskGroup {
                        name: format!("g{i}"),
                        ..g.clone()
                    })
                    .collect();
            }),
        ),
        (
            "more than the limit of 5000 (limits.max_tasks_per_job)",
            Box::new(|j: &mut Job| {
                let t = j.task_groups[0].tasks[0].clone();
                j.task_groups[0].tasks = vec![t; 5001];
            }),
        ),
        (
            "Job asks for 200000 allocations in all",
            Box::new(|j: &mut Job| {
                j.task_groups[0].count = 100_000;
                let mut g = j.task_groups[0].clone();
                g.name = "h".into();
                j.task_groups.push(g);
            }),
        ),
        (
            "Task name \"../../tmp/x\" cannot include slashes",
            Box::new(|j: &mut Job| j.task_groups[0].tasks[0].name = "../../tmp/x".into()),
        ),
        (
            "Task name \"..\" cannot be a relative path",
            Box::new(|j: &mut Job| j.task_groups[0].tasks[0].name = "..".into()),
        ),
        (
            "Task group name \"a\\\\b\" cannot include slashes",
            Box::new(|j: &mut Job| j.task_groups[0].name = "a\\b".into()),
        ),
        (
            "Job ID is 201 bytes long, more than the limit of 200",
            Box::new(|j: &mut Job| j.id = "x".repeat(201)),
        ),
        (
            "Resources: CPU must be at most 1099511627776",
            Box::new(|j: &mut Job| j.task_groups[0].tasks[0].resources.cpu = i64::MAX - 1),
        ),
        (
            "Resources: MemoryMB must be at most",
            Box::new(|j: &mut Job| j.task_groups[0].tasks[0].resources.memory_mb = i64::MAX),
        ),
        (
            "Resources: Cores must be between 0 and 65536",
            Box::new(|j: &mut Job| {
                j.task_groups[0].tasks[0].resources.cpu = 0;
                j.task_groups[0].tasks[0].resources.cores = i64::MAX;
            }),
        ),
        (
            "2147483647 attempts with a",
            Box::new(|j: &mut Job| {
                let rp = j.task_groups[0].restart_policy.as_mut().unwrap();
                rp.attempts = i32::MAX;
                rp.delay = std::time::Duration::from_secs(u64::MAX / 2);
            }),
        ),
    ];
    for (want, mutate) in cases {
        let err = job_with(mutate).expect_err(want);
        assert!(err.contains(want), "expected {want:?} in {err:?}");
    }
}

#[test]
fn validation_reports_every_error_at_once() {
    let err = job_with(|j| {
        j.priority = 0;
        j.task_groups[0].count = -1;
    })
    .unwrap_err();
    assert!(err.starts_with("2 errors occurred"), "{err}");
    assert!(
        err.contains("Task group \"g\": Count can't be negative"),
        "{err}"
    );
}

#[test]
fn computed_class_ignores_unique_attributes() {
    let mut a: Node = serde_json::from_value(fixture("node.json")).unwrap();
    let mut b = a.clone();
    b.id = new_id();
    b.attributes
        .insert("unique.hostname".into(), "other".into());
    a.compute_class();
    b.compute_class();
    assert_eq!(a.computed_class, b.computed_class);
    b.attributes.insert("kernel.name".into(), "darwin".into());
    b.compute_class();
    assert_ne!(a.computed_class, b.computed_class);
}

#[test]
fn group_without_update_copies_the_jobs_whole_update_block() {
    let mut job: Job = serde_json::from_value(serde_json::json!({
        "ID": "web",
        "Update": {"MaxParallel": 3, "Canary": 2, "AutoRevert": true},
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]
    }))
    .unwrap();
    job.canonicalize();
    let u = job.task_groups[0].update.as_ref().unwrap();
    assert_eq!((u.max_parallel, u.canary, u.auto_revert), (3, 2, true));
    assert_eq!(u.health_check, "checks");
    assert_eq!(u.min_healthy_time, std::time::Duration::from_secs(10));
}

/// Every object member of `value`, as JSON pointers.
fn member_pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(here.clone());
                member_pointers(v, here, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                member_pointers(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Issue 16: `null` means "not set" for every field of every type, as in
/// Nomad's Go API: the JSON `nomad job run -output` prints (nulls
/// included) reads, and so does each fixture with any one member turned to
/// `null`, which then takes the same value as when it is left out.
#[test]
fn null_is_not_set_for_every_field_of_every_job_fixture() {
    for name in [
        "job-run-output-example.json",
        "parse-web.json",
        "parse-nightly.json",
        "parse-node-agent.json",
        "parse-cleanup.json",
        "job.json",
    ] {
        let text = fixture_text(name);
        crate::jobspec::parse_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let original = fixture(name);
        let mut pointers = Vec::new();
        member_pointers(&original, String::new(), &mut pointers);
        for pointer in pointers {
            let mut nulled = original.clone();
            *nulled.pointer_mut(&pointer).unwrap() = Value::Null;
            let with_null = crate::jobspec::parse_json(&nulled.to_string())
                .unwrap_or_else(|e| panic!("{name} with {pointer} = null: {e}"));
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            let mut left_out = original.clone();
            let holder = if parent.is_empty() {
                &mut left_out
            } else {
                left_out.pointer_mut(parent).unwrap()
            };
            holder
                .as_object_mut()
                .unwrap()
                .remove(&key.replace("~1", "/").replace("~0", "~"));
            if let Ok(without) = crate::jobspec::parse_json(&left_out.to_string()) {
                assert_eq!(with_null, without, "{name}: {pointer} = null");
            }
        }
    }
}
