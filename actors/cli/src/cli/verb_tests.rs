//! The client verbs end to end against a fake agent: the exact requests
//! each verb sends (method, path, query, body, token) and what it prints
//! and exits with for real Nomad answers; plus argument parsing.

use super::fake_server::{fixture, FakeServer, Reply, Seen};
use super::*;
use herder_api_client::{ApiClient, ClientConfig};
use serde_json::{json, Value};

fn parse(args: &[&str]) -> Cli {
    let words = std::iter::once("herder").chain(args.iter().copied());
    Cli::try_parse_from(nomad_style_args(words.map(OsString::from)))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Runs `herder <args> -address <server>` and returns (result, stdout).
fn run_against(server: &FakeServer, args: &[&str]) -> (anyhow::Result<u8>, String) {
    let mut words: Vec<&str> = args.to_vec();
    words.extend(["-address", &server.address]);
    let cli = parse(&words);
    let mut out = Vec::new();
    let result = run(cli.command, &mut out);
    (result, String::from_utf8(out).unwrap())
}

const JOB_HCL: &str = r#"
variable "count" {
  type    = number
  default = 1
}
job "svc" {
  datacenters = ["dc1"]
  group "g" {
    count = var.count
    task "t" {
      driver = "mock_driver"
      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
"#;

fn job_file() -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new()
        .suffix(".nomad.hcl")
        .tempfile()
        .unwrap();
    std::io::Write::write_all(&mut file, JOB_HCL.as_bytes()).unwrap();
    file
}

const EVAL_ID: &str = "925359f9-67f7-723e-9032-64ace0d4eaf1";

fn pending_eval() -> String {
    let mut eval: Value = serde_json::from_str(&fixture("evaluation.json")).unwrap();
    eval["Status"] = json!("pending");
    eval.to_string()
}

/// An agent that registers the job and walks its eval pending -> complete
/// across one blocking query.
fn job_agent(final_eval: String) -> FakeServer {
    FakeServer::start(
        move |req: &Seen| match (req.method.as_str(), req.path.as_str()) {
            ("PUT", "/v1/jobs") => Reply::ok(fixture("register-response.json"), 10),
            // A Nomad server's answer for a job without deployments.
            ("GET", "/v1/job/svc/deployment") => Reply::ok("null", 12),
            ("GET", p) if p == format!("/v1/evaluation/{EVAL_ID}") => {
                if req.query.contains_key("index") {
                    Reply::ok(final_eval.clone(), 12)
                } else {
                    Reply::ok(pending_eval(), 10)
                }
            }
            ("GET", p) if p == format!("/v1/evaluation/{EVAL_ID}/allocations") => {
                if req.query.is_empty() {
                    Reply::ok(fixture("job-allocations-list.json"), 12)
                } else {
                    Reply::status(400, "unexpected query")
                }
            }
            _ => Reply::status(404, "no such path"),
        },
    )
}

#[test]
fn every_verb_parses_in_nomad_spelling() {
    let cases: &[&[&str]] = &[
        &[
            "job",
            "run",
            "-detach",
            "-var",
            "count=3",
            "-check-index",
            "7",
            "-json",
            "f.hcl",
        ],
        &["job", "plan", "-verbose", "f.hcl"],
        &["job", "status"],
        &["job", "status", "-verbose", "-json", "web"],
        &["job", "stop", "-purge", "-detach", "-yes", "web"],
        &["job", "inspect", "web"],
        &["job", "validate", "-var", "a=b", "f.hcl"],
        &["node", "status", "-verbose", "4380"],
        &[
            "node",
            "drain",
            "-enable",
            "-deadline",
            "30m",
            "-ignore-system",
            "-yes",
            "4380",
        ],
        &["node", "drain", "-disable", "-keep-ineligible", "4380"],
        &["node", "drain", "-enable", "-force", "4380"],
        &["deployment", "list", "-json"],
        &["deployment", "status", "-verbose", "0b23"],
        &["deployment", "promote", "-group", "g", "-detach", "0b23"],
        &["deployment", "fail", "-detach", "0b23"],
        &["deployment", "pause", "0b23"],
        &["deployment", "resume", "-detach", "0b23"],
        &["node", "eligibility", "-disable", "4380"],
        &["eval", "list", "-job", "web", "-status", "blocked"],
        &["eval", "status", "-json", "9253"],
        &["alloc", "status", "-verbose", "9aa2"],
        &["alloc", "stop", "-detach", "9aa2"],
        &[
            "alloc", "logs", "-stderr", "-f", "-tail", "-n", "20", "-task", "t", "9aa2",
        ],
        &["alloc", "logs", "-c", "512", "9aa2", "t"],
        &["alloc", "restart", "-verbose", "9aa2", "t"],
        &["alloc", "restart", "9aa2"],
        &["alloc", "signal", "-s", "SIGUSR1", "9aa2", "t"],
        &["alloc", "signal", "-verbose", "9aa2"],
        &["operator", "scheduler", "get-config", "-json"],
        &[
            "operator",
            "scheduler",
            "set-config",
            "-scheduler-algorithm",
            "spread",
            "-preempt-service-scheduler",
            "true",
            "-pause-eval-broker",
            "false",
            "-reject-job-registration",
            "true",
            "-check-index",
            "5",
        ],
        &["server", "workers"],
        &["server", "members", "-detailed"],
        &["server", "join", "10.0.0.1:4647", "10.0.0.2"],
        &["server", "force-leave", "s3.global"],
        &["operator", "raft", "list-peers", "-stale"],
        &[
            "operator",
            "raft",
            "remove-peer",
            "-peer-address=10.0.0.3:4647",
        ],
        &[
            "operator",
            "raft",
            "remove-peer",
            "-peer-id",
            "10.0.0.3:4647",
        ],
        &["operator", "gossip", "keygen"],
        &["operator", "keygen"],
        &[
            "server",
            "workers",
            "set",
            "4",
            "-schedulers",
            "service,batch,_core",
        ],
        &[
            "job",
            "status",
            "-address",
            "http://h:1",
            "-token",
            "t",
            "web",
        ],
    ];
    for case in cases {
        parse(case);
    }
    let cli = parse(&[
        "job",
        "run",
        "-detach",
        "-var",
        "count=3",
        "-check-index",
        "7",
        "f.hcl",
    ]);
    let Command::Job(job::JobArgs {
        command: job::JobCommand::Run(run),
        ..
    }) = cli.command
    else {
        panic!("not job run");
    };
    assert!(run.detach);
    assert_eq!(run.check_index, Some(7));
    assert_eq!(run.job.vars, ["count=3"]);
    let cli = parse(&[
        "server",
        "workers",
        "set",
        "4",
        "-schedulers",
        "service,batch",
    ]);
    let Command::Server(server::ServerArgs {
        command: server::ServerCommand::Workers(w),
        ..
    }) = cli.command
    else {
        panic!("not server workers");
    };
    let Some(server::WorkersAction::Set(set)) = w.action else {
        panic!("not set");
    };
    assert_eq!(
        (set.count, set.schedulers),
        (4, Some(vec!["service".into(), "batch".into()]))
    );
}

#[test]
fn invalid_flag_combinations_are_refused() {
    let refused: &[&[&str]] = &[
        &["node", "drain", "4380"],
        &["node", "drain", "-enable", "-disable", "4380"],
        &[
            "node",
            "drain",
            "-enable",
            "-force",
            "-deadline",
            "1h",
            "4380",
        ],
        &["node", "eligibility", "4380"],
        &[
            "operator",
            "scheduler",
            "set-config",
            "-scheduler-algorithm",
            "random",
        ],
        &[
            "operator",
            "scheduler",
            "set-config",
            "-pause-eval-broker",
            "maybe",
        ],
        &["server", "workers", "set", "-1"],
        &["server", "join"],
        &["server", "force-leave"],
        &["operator", "raft", "remove-peer"],
        &[
            "operator",
            "raft",
            "remove-peer",
            "-peer-address=a:1",
            "-peer-id=b",
        ],
    ];
    for case in refused {
        let words = std::iter::once("herder").chain(case.iter().copied());
        assert!(
            Cli::try_parse_from(nomad_style_args(words.map(OsString::from))).is_err(),
            "{case:?} parsed"
        );
    }
}

#[test]
fn job_run_registers_pascal_case_job_and_follows_the_eval_to_complete() {
    let server = job_agent(fixture("evaluation.json"));
    let file = job_file();
    let path = file.path().to_str().unwrap();
    let (result, out) = run_against(
        &server,
        &["job", "run", "-var", "count=2", "-token", "secret", path],
    );
    assert_eq!(result.unwrap(), 0, "{out}");
    let register = server.request("PUT", "/v1/jobs");
    assert_eq!(
        register.headers.get("x-nomad-token").map(String::as_str),
        Some("secret")
    );
    let body = register.json();
    assert_eq!(body["Job"]["ID"], "svc");
    assert_eq!(body["Job"]["TaskGroups"][0]["Count"], 2);
    assert_eq!(
        body["Job"]["TaskGroups"][0]["Tasks"][0]["Driver"],
        "mock_driver"
    );
    assert!(body.get("EnforceIndex").is_none());
    let blocking: Vec<Seen> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with(EVAL_ID) && r.query.contains_key("index"))
        .collect();
    assert_eq!(blocking.len(), 1);
    assert_eq!(blocking[0].query["index"], "10");
    assert!(blocking[0].query["wait"].ends_with("ms"));
    let expected = [
        "==> Monitoring evaluation \"925359f9\"",
        "    Evaluation triggered by job \"svc\"",
        "    Allocation \"9aa2a59e\" created: node \"4380b079\", group \"g\"",
        "    Allocation \"b3c25de0\" created: node \"4380b079\", group \"g\"",
        "    Evaluation status changed: \"pending\" -> \"complete\"",
        "==> Evaluation \"925359f9\" finished with status \"complete\"",
    ];
    for line in expected {
        assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
    }
    // Each allocation is announced once although it was listed twice.
    assert_eq!(out.matches("9aa2a59e").count(), 1, "{out}");
}

#[test]
fn job_run_with_unplaceable_groups_exits_2_and_explains_why() {
    let blocked: Value = serde_json::from_str(&fixture("job-evaluations-blocked.json")).unwrap();
    let mut register_eval = blocked[1].clone();
    register_eval["ID"] = json!(EVAL_ID);
    let server = job_agent(register_eval.to_string());
    let file = job_file();
    let (result, out) = run_against(&server, &["job", "run", file.path().to_str().unwrap()]);
    assert_eq!(result.unwrap(), 2, "{out}");
    assert!(out.contains(
        "==> Evaluation \"925359f9\" finished with status \"complete\" but failed to place all allocations:"
    ), "{out}");
    assert!(
        out.contains("    Task Group \"g\" (failed to place 2 allocations):"),
        "{out}"
    );
    assert!(
        out.contains("      * Dimension \"cpu\" exhausted on 1 nodes"),
        "{out}"
    );
    assert!(
        out.contains(
            "    Evaluation \"92d8f48f\" waiting for additional capacity to place remainder"
        ),
        "{out}"
    );
}

#[test]
fn job_run_detach_with_check_index_sends_enforce_index_and_does_not_monitor() {
    let server = job_agent(fixture("evaluation.json"));
    let file = job_file();
    let (result, out) = run_against(
        &server,
        &[
            "job",
            "run",
            "-detach",
            "-check-index",
            "0",
            file.path().to_str().unwrap(),
        ],
    );
    assert_eq!(result.unwrap(), 0);
    let body = server.request("PUT", "/v1/jobs").json();
    assert_eq!(body["EnforceIndex"], true);
    assert_eq!(body["JobModifyIndex"], 0);
    assert_eq!(
        out,
        format!("Job registration successful\nEvaluation ID: {EVAL_ID}\n")
    );
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn job_file_errors_name_file_line_and_column_before_any_request() {
    let server = FakeServer::start(|_| Reply::status(500, "should not be called"));
    let mut file = tempfile::Builder::new().suffix(".hcl").tempfile().unwrap();
    std::io::Write::write_all(
        &mut file,
        b"job \"x\" {\n  group \"g\" {\n    nework {}\n  }\n}\n",
    )
    .unwrap();
    let name = file.path().display().to_string();
    let (result, _) = run_against(&server, &["job", "run", &name]);
    let err = format!("{:#}", result.unwrap_err());
    assert!(err.contains(&format!("{name}:3:")), "{err}");
    let (result, _) = run_against(&server, &["job", "validate", &name]);
    assert!(format!("{:#}", result.unwrap_err()).starts_with("Job validation errors:"));
    let mut json_job = tempfile::Builder::new().suffix(".json").tempfile().unwrap();
    std::io::Write::write_all(&mut json_job, br#"{"Job": {"ID": "x"}}"#).unwrap();
    let json_name = json_job.path().display().to_string();
    let (result, _) = run_against(&server, &["job", "run", "-var", "a=b", &json_name]);
    assert!(result
        .unwrap_err()
        .to_string()
        .contains("-var applies to HCL job files"));
    assert!(server.requests().is_empty());
    let good = job_file();
    let (result, out) = run_against(&server, &["job", "validate", good.path().to_str().unwrap()]);
    assert_eq!(
        (result.unwrap(), out.as_str()),
        (0, "Job validation successful\n")
    );
}

#[test]
fn job_plan_posts_diff_true_and_exits_1_on_changes_255_on_errors() {
    let server = FakeServer::start(|req| match req.path.as_str() {
        "/v1/job/svc/plan" if req.method == "POST" => Reply::ok(fixture("plan-response.json"), 10),
        _ => Reply::status(404, "no such path"),
    });
    let file = job_file();
    let path = file.path().to_str().unwrap();
    let (result, out) = run_against(&server, &["job", "plan", path]);
    assert_eq!(result.unwrap(), 1, "{out}");
    let body = server.request("POST", "/v1/job/svc/plan").json();
    assert_eq!(body["Diff"], true);
    assert_eq!(body["Job"]["ID"], "svc");
    assert!(
        out.contains("+/- Count: \"2\" => \"4\" (forces create)"),
        "{out}"
    );

    let failing = FakeServer::start(|_| Reply::status(500, "rpc error: plan failed"));
    let (result, _) = run_against(&failing, &["job", "plan", path]);
    assert_eq!(result.unwrap(), job::EXIT_PLAN_ERROR);
}

#[test]
fn job_status_resolves_a_prefix_and_shows_summary_and_allocations() {
    let server = FakeServer::start(|req| match req.path.as_str() {
        "/v1/jobs" => Reply::ok(fixture("jobs-list.json"), 20),
        "/v1/job/svc" => Reply::ok(fixture("job.json"), 20),
        "/v1/job/svc/summary" => Reply::ok(fixture("job-summary.json"), 20),
        "/v1/job/svc/deployment" => Reply::ok(deployment_json("successful").to_string(), 20),
        "/v1/job/svc/allocations" => Reply::ok(fixture("job-allocations-list.json"), 20),
        _ => Reply::status(404, "job not found"),
    });
    let (result, out) = run_against(&server, &["job", "status", "sv"]);
    assert_eq!(result.unwrap(), 0);
    let latest = "Latest Deployment\n\
                  ID          = 0b23b149\n\
                  Status      = successful\n\
                  Description = Deployment completed successfully\n";
    assert!(out.contains(latest), "{out}");
    assert_eq!(server.request("GET", "/v1/jobs").query["prefix"], "sv");
    assert!(out.contains("ID            = svc"), "{out}");
    assert!(out.contains("Allocations\n"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("9aa2a59e  4380b079  g")),
        "{out}"
    );

    let (result, out) = run_against(&server, &["job", "status"]);
    assert_eq!(result.unwrap(), 0);
    assert!(out.lines().any(|l| l.starts_with("sysjob ")), "{out}");

    let (result, out) = run_against(&server, &["job", "inspect", "svc"]);
    assert_eq!(result.unwrap(), 0);
    let printed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(printed["Job"]["ID"], "svc");
}

#[test]
fn job_stop_purges_and_monitors_the_deregister_eval() {
    let dereg_eval = "500a15d6-7017-f1d6-c0ca-044865ddd3d8";
    let server = FakeServer::start(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/jobs") => Reply::ok(fixture("jobs-list.json"), 20),
        ("DELETE", "/v1/job/svc") => Reply::ok(fixture("deregister-response.json"), 21),
        ("GET", p) if p == format!("/v1/evaluation/{dereg_eval}") => {
            let mut eval: Value = serde_json::from_str(&fixture("evaluation.json")).unwrap();
            eval["ID"] = json!(dereg_eval);
            eval["TriggeredBy"] = json!("job-deregister");
            Reply::ok(eval.to_string(), 22)
        }
        ("GET", p) if p.ends_with("/allocations") => Reply::ok("[]", 22),
        _ => Reply::status(404, "not found"),
    });
    let (result, out) = run_against(&server, &["job", "stop", "-purge", "svc"]);
    assert_eq!(result.unwrap(), 0, "{out}");
    assert_eq!(
        server.request("DELETE", "/v1/job/svc").query["purge"],
        "true"
    );
    assert!(
        out.contains("==> Evaluation \"500a15d6\" finished with status \"complete\""),
        "{out}"
    );
}

#[test]
fn ambiguous_and_unknown_prefixes_are_errors_listing_matches() {
    let server = FakeServer::start(|req| match req.path.as_str() {
        "/v1/evaluations" => Reply::ok(fixture("evaluations-list.json"), 20),
        _ => Reply::status(404, "eval not found"),
    });
    let (result, _) = run_against(&server, &["eval", "status", "92"]);
    let err = result.unwrap_err().to_string();
    assert!(err.contains("matched multiple evaluations"), "{err}");
    assert!(
        err.contains(EVAL_ID) && err.contains("92d8f48f-6967-1e31-92fa-17536fe444d4"),
        "{err}"
    );
    let (result, _) = run_against(&server, &["eval", "status", "ffff"]);
    assert!(result
        .unwrap_err()
        .to_string()
        .contains("No evaluation with prefix or id \"ffff\""));
    // An odd trailing digit is dropped, as Nomad's CLI does.
    let _ = run_against(&server, &["eval", "status", "92d"]);
    assert!(server
        .requests()
        .iter()
        .any(|r| r.query.get("prefix").map(String::as_str) == Some("92")));
}

#[test]
fn eval_status_and_list_render_the_agents_answers() {
    let server = FakeServer::start(|req| match req.path.as_str() {
        "/v1/evaluations" => Reply::ok(fixture("job-evaluations-blocked.json"), 20),
        "/v1/evaluation/acbd1001-2d5d-1157-e2a0-47b1d8041ac2" => {
            let list: Value =
                serde_json::from_str(&fixture("job-evaluations-blocked.json")).unwrap();
            Reply::ok(list[1].to_string(), 20)
        }
        _ => Reply::status(404, "eval not found"),
    });
    let (result, out) = run_against(&server, &["eval", "status", "acbd"]);
    assert_eq!(result.unwrap(), 0);
    assert!(
        out.contains("Task Group \"g\" (failed to place 2 allocations):"),
        "{out}"
    );
    let (result, out) = run_against(&server, &["eval", "list", "-status", "blocked"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("92d8f48f"), "{out}");
}

#[test]
fn node_drain_sends_deadline_in_nanoseconds_and_disable_marks_eligible() {
    let node_id = "4380b079-b149-b4f3-5a9e-763bfe371b36";
    let server = FakeServer::start(|req| match req.path.as_str() {
        "/v1/nodes" => Reply::ok(fixture("nodes-list.json"), 9),
        _ if req.method == "POST" => Reply::ok(
            r#"{"NodeModifyIndex":30,"EvalIDs":[],"EvalCreateIndex":0,"Index":30}"#,
            30,
        ),
        _ => Reply::status(404, "node not found"),
    });
    let drain_path = format!("/v1/node/{node_id}/drain");
    let (result, out) = run_against(
        &server,
        &[
            "node",
            "drain",
            "-enable",
            "-deadline",
            "30m",
            "-ignore-system",
            "-yes",
            "-detach",
            "4380",
        ],
    );
    assert_eq!(result.unwrap(), 0);
    assert_eq!(out, format!("Node \"{node_id}\" drain strategy set\n"));
    assert_eq!(
        server.request("POST", &drain_path).json(),
        json!({
            "NodeID": node_id,
            "DrainSpec": {"Deadline": 1_800_000_000_000_i64, "IgnoreSystemJobs": true},
            "MarkEligible": false
        })
    );
    let (result, _) = run_against(&server, &["node", "drain", "-disable", "4380"]);
    assert_eq!(result.unwrap(), 0);
    let disable = server
        .requests()
        .into_iter()
        .filter(|r| r.path == drain_path)
        .nth(1)
        .unwrap();
    assert_eq!(
        disable.json(),
        json!({"NodeID": node_id, "DrainSpec": null, "MarkEligible": true})
    );
    let (result, _) = run_against(
        &server,
        &["node", "drain", "-enable", "-force", "-detach", "4380"],
    );
    assert_eq!(result.unwrap(), 0);
    let forced = server
        .requests()
        .into_iter()
        .filter(|r| r.path == drain_path)
        .nth(2)
        .unwrap();
    assert_eq!(forced.json()["DrainSpec"]["Deadline"], -1);

    let (result, _) = run_against(&server, &["node", "eligibility", "-disable", "4380"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(
        server
            .request("POST", &format!("/v1/node/{node_id}/eligibility"))
            .json(),
        json!({"NodeID": node_id, "Eligibility": "ineligible"})
    );
}

#[test]
fn node_status_shows_the_table_and_one_nodes_allocations() {
    let server = FakeServer::start(|req| match req.path.as_str() {
        "/v1/nodes" => Reply::ok(fixture("nodes-list.json"), 9),
        "/v1/node/4380b079-b149-b4f3-5a9e-763bfe371b36" => Reply::ok(fixture("node.json"), 9),
        "/v1/node/4380b079-b149-b4f3-5a9e-763bfe371b36/allocations" => {
            Reply::ok(fixture("node-allocations.json"), 9)
        }
        _ => Reply::status(404, "node not found"),
    });
    let (result, out) = run_against(&server, &["node", "status"]);
    assert_eq!(result.unwrap(), 0);
    assert!(
        out.lines().nth(1).unwrap().starts_with("4380b079  vm"),
        "{out}"
    );
    let (result, out) = run_against(&server, &["node", "status", "4380b079"]);
    assert_eq!(result.unwrap(), 0);
    assert!(out.contains("Name        = vm"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.contains(" run ")).count(),
        3,
        "{out}"
    );
    let (result, out) = run_against(&server, &["node", "status", "-json"]);
    assert_eq!(result.unwrap(), 0);
    let raw: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        raw,
        serde_json::from_str::<Value>(&fixture("nodes-list.json")).unwrap()
    );
}

#[test]
fn alloc_status_and_stop_use_the_allocation_endpoints() {
    let alloc_id = "9aa2a59e-6fa8-af5c-b7f9-17e6ea01f340";
    let server = FakeServer::start(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/allocations") => Reply::ok(fixture("job-allocations-list.json"), 12),
        ("GET", p) if p == format!("/v1/allocation/{alloc_id}") => {
            Reply::ok(fixture("allocation.json"), 12)
        }
        ("POST", p) if p == format!("/v1/allocation/{alloc_id}/stop") => Reply::ok(
            r#"{"EvalID":"0b7a1c2d-0000-0000-0000-000000000000","Index":40}"#,
            40,
        ),
        _ => Reply::status(404, "alloc not found"),
    });
    let (result, out) = run_against(&server, &["alloc", "status", "9aa2"]);
    assert_eq!(result.unwrap(), 0);
    assert!(out.contains("Task \"t\" is \"running\""), "{out}");
    let (result, out) = run_against(&server, &["alloc", "stop", "-detach", "9aa2a59e"]);
    assert_eq!(result.unwrap(), 0);
    assert!(
        out.contains("Evaluation ID: 0b7a1c2d-0000-0000-0000-000000000000"),
        "{out}"
    );
    assert!(server
        .request("POST", &format!("/v1/allocation/{alloc_id}/stop"))
        .json()
        .is_object());
}

#[test]
fn alloc_restart_and_signal_ask_the_agent_with_nomads_bodies() {
    let alloc_id = "9aa2a59e-6fa8-af5c-b7f9-17e6ea01f340";
    let server = FakeServer::start(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/allocations") => Reply::ok(fixture("job-allocations-list.json"), 12),
        ("GET", p) if p == format!("/v1/allocation/{alloc_id}") => {
            Reply::ok(fixture("allocation.json"), 12)
        }
        ("PUT", p) if p.starts_with(&format!("/v1/client/allocation/{alloc_id}/")) => {
            if req.json()["Signal"] == "SIGBOGUS" {
                Reply::status(400, "invalid signal \"SIGBOGUS\"")
            } else {
                Reply::ok(r#"{"Index":0}"#, 0)
            }
        }
        _ => Reply::status(404, "alloc not found"),
    });
    let restart_path = format!("/v1/client/allocation/{alloc_id}/restart");
    let signal_path = format!("/v1/client/allocation/{alloc_id}/signal");

    let (result, out) = run_against(&server, &["alloc", "restart", "9aa2"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(out, "", "silent on success, as Nomad's");
    assert_eq!(
        server.request("PUT", &restart_path).json(),
        json!({"TaskName": ""})
    );

    let (result, _) = run_against(&server, &["alloc", "signal", "-s", "SIGUSR1", "9aa2", "t"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(
        server.request("PUT", &signal_path).json(),
        json!({"Task": "t", "Signal": "SIGUSR1"})
    );
    // Nomad's default signal is SIGKILL.
    let (result, _) = run_against(&server, &["alloc", "signal", "9aa2a59e"]);
    assert_eq!(result.unwrap(), 0);
    let sent: Vec<Value> = server
        .requests()
        .iter()
        .filter(|r| r.path == signal_path)
        .map(Seen::json)
        .collect();
    assert_eq!(sent[1], json!({"Task": "", "Signal": "SIGKILL"}));

    // A task the allocation's group lacks is refused before anything is sent.
    let before = server.requests().len();
    let (result, _) = run_against(&server, &["alloc", "restart", "9aa2", "nope"]);
    let err = result.unwrap_err().to_string();
    assert!(err.contains("Could not find task named: nope"), "{err}");
    assert!(err.contains("* t"), "{err}");
    assert!(!server.requests()[before..]
        .iter()
        .any(|r| r.method == "PUT"));
    // The agent's refusal is shown.
    let (result, _) = run_against(&server, &["alloc", "signal", "-s", "SIGBOGUS", "9aa2"]);
    let err = format!("{:#}", result.unwrap_err());
    assert!(err.contains("Error signalling allocation"), "{err}");
    assert!(err.contains("invalid signal"), "{err}");
}

#[test]
fn set_config_keeps_unknown_fields_sends_cas_and_reports_a_lost_race() {
    let updated = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = updated.clone();
    let server = FakeServer::start(move |req| match req.method.as_str() {
        "GET" => Reply::ok(fixture("operator-scheduler-configuration.json"), 5),
        "PUT" => {
            let ok = flag.load(std::sync::atomic::Ordering::SeqCst);
            Reply::ok(format!(r#"{{"Updated":{ok},"Index":6}}"#), 6)
        }
        _ => Reply::status(405, "method not allowed"),
    });
    let args = [
        "operator",
        "scheduler",
        "set-config",
        "-scheduler-algorithm",
        "spread",
        "-preempt-service-scheduler",
        "true",
        "-pause-eval-broker",
        "true",
        "-check-index",
        "5",
    ];
    let (result, out) = run_against(&server, &args);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(out, "Scheduler configuration updated!\n");
    let put = server.request("PUT", "/v1/operator/scheduler/configuration");
    assert_eq!(put.query["cas"], "5");
    let body = put.json();
    assert_eq!(body["SchedulerAlgorithm"], "spread");
    assert_eq!(body["PauseEvalBroker"], true);
    assert_eq!(body["PreemptionConfig"]["ServiceSchedulerEnabled"], true);
    assert_eq!(body["PreemptionConfig"]["SystemSchedulerEnabled"], true);
    assert_eq!(body["MemoryOversubscriptionEnabled"], false);

    updated.store(false, std::sync::atomic::Ordering::SeqCst);
    let (result, _) = run_against(&server, &args);
    assert!(result
        .unwrap_err()
        .to_string()
        .contains("could not be atomically updated"));

    let (result, out) = run_against(&server, &["operator", "scheduler", "get-config"]);
    assert_eq!(result.unwrap(), 0);
    assert!(
        out.contains("Scheduler Algorithm           = binpack"),
        "{out}"
    );
}

#[test]
fn server_workers_set_sends_snake_case_and_keeps_enabled_schedulers() {
    let server = FakeServer::start(|req| match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/agent/schedulers/config") => Reply::ok(
            r#"{"server_id":"s1","num_schedulers":2,"enabled_schedulers":["service","_core"]}"#,
            0,
        ),
        ("PUT", "/v1/agent/schedulers/config") => {
            let mut body = req.json();
            body["server_id"] = json!("s1");
            Reply::ok(body.to_string(), 0)
        }
        ("GET", "/v1/agent/schedulers") => Reply::ok(
            r#"{"server_id":"s1","schedulers":[{"id":"w1","enabled_schedulers":["service"],"started":"2026-11-22T02:00:00Z","status":"Paused","workload_status":"Paused"}]}"#,
            0,
        ),
        _ => Reply::status(404, "not found"),
    });
    let (result, out) = run_against(&server, &["server", "workers", "set", "0"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(
        out,
        "Scheduler workers updated: 0 worker(s) for service,_core\n"
    );
    assert_eq!(
        server.request("PUT", "/v1/agent/schedulers/config").json(),
        json!({"num_schedulers": 0, "enabled_schedulers": ["service", "_core"]})
    );
    let (result, _) = run_against(
        &server,
        &[
            "server",
            "workers",
            "set",
            "3",
            "-schedulers",
            "batch,_core",
        ],
    );
    assert_eq!(result.unwrap(), 0);
    let last = server
        .requests()
        .into_iter()
        .rfind(|r| r.method == "PUT")
        .unwrap();
    assert_eq!(
        last.json(),
        json!({"num_schedulers": 3, "enabled_schedulers": ["batch", "_core"]})
    );
    let (result, out) = run_against(&server, &["server", "workers"]);
    assert_eq!(result.unwrap(), 0);
    assert!(out.contains("w1  Paused  Paused"), "{out}");
}

#[test]
fn error_answers_show_the_status_and_the_servers_text() {
    let server = FakeServer::start(|_| Reply::status(403, "Permission denied"));
    let (result, _) = run_against(&server, &["job", "status"]);
    let err = result.unwrap_err();
    let api = err.downcast_ref::<herder_api_client::ApiError>().unwrap();
    assert_eq!(api.status(), Some(403));
    assert!(err.to_string().contains("403 (Permission denied)"), "{err}");
}

#[test]
fn monitor_gives_up_at_the_overall_deadline() {
    let server = FakeServer::start(|req| {
        if req.path.ends_with("/allocations") {
            Reply::ok("[]", 10)
        } else {
            Reply::ok(pending_eval(), 10)
        }
    });
    let client = ApiClient::new(ClientConfig {
        address: server.address.clone(),
        token: None,
    })
    .unwrap();
    let options = monitor::MonitorOptions {
        wait: std::time::Duration::from_millis(20),
        overall: std::time::Duration::from_millis(200),
        poll: std::time::Duration::from_millis(20),
        verbose: false,
    };
    let mut out = Vec::new();
    let err = monitor::monitor(&client, EVAL_ID, &options, &mut out).unwrap_err();
    assert!(err.to_string().contains("still \"pending\""), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("herder eval status {EVAL_ID}")),
        "{err}"
    );
}

#[test]
fn monitor_polls_an_agent_without_blocking_queries_until_complete() {
    let reads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = reads.clone();
    let server = FakeServer::start(move |req| {
        if req.path.ends_with("/allocations") {
            return Reply::ok("[]", 0);
        }
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let body = if n < 2 {
            pending_eval()
        } else {
            fixture("evaluation.json")
        };
        // No X-Nomad-Index: the agent does not support blocking queries.
        Reply::ok(body, 0)
    });
    let client = ApiClient::new(ClientConfig {
        address: server.address.clone(),
        token: None,
    })
    .unwrap();
    let options = monitor::MonitorOptions {
        poll: std::time::Duration::from_millis(10),
        ..Default::default()
    };
    let mut out = Vec::new();
    assert_eq!(
        monitor::monitor(&client, EVAL_ID, &options, &mut out).unwrap(),
        0
    );
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text.matches("Evaluation status changed").count(),
        1,
        "{text}"
    );
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert!(server
        .requests()
        .iter()
        .all(|r| !r.query.contains_key("index")));
}

#[test]
fn job_run_json_prints_the_register_answer_without_monitoring() {
    let server = job_agent(fixture("evaluation.json"));
    let file = job_file();
    let (result, out) = run_against(
        &server,
        &["job", "run", "-json", file.path().to_str().unwrap()],
    );
    assert_eq!(result.unwrap(), 0);
    let printed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(printed["EvalID"], EVAL_ID);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn node_drain_follows_the_drain_until_the_strategy_clears_and_allocs_stop() {
    let node_id = "4380b079-b149-b4f3-5a9e-763bfe371b36";
    let reads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = reads.clone();
    let server = FakeServer::start(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/nodes") => Reply::ok(fixture("nodes-list.json"), 9),
        ("POST", _) => Reply::ok(r#"{"NodeModifyIndex":30,"Index":30}"#, 30),
        ("GET", p) if p.ends_with("/allocations") => {
            // After the second node read the drainer has stopped one
            // allocation and the client has reported it complete.
            let mut allocs: Value =
                serde_json::from_str(&fixture("node-allocations.json")).unwrap();
            if counter.load(std::sync::atomic::Ordering::SeqCst) >= 2 {
                allocs[1]["DesiredStatus"] = json!("stop");
                allocs[1]["ClientStatus"] = json!("complete");
            }
            Reply::ok(allocs.to_string(), 31)
        }
        ("GET", _) => {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut node: Value = serde_json::from_str(&fixture("node.json")).unwrap();
            if n < 1 {
                node["Drain"] = json!(true);
                node["DrainStrategy"] =
                    json!({"Deadline": 60_000_000_000_i64, "IgnoreSystemJobs": false});
            }
            Reply::ok(node.to_string(), 30 + n as u64)
        }
        _ => Reply::status(404, "not found"),
    });
    let (result, out) = run_against(&server, &["node", "drain", "-enable", "-yes", "4380"]);
    assert_eq!(result.unwrap(), 0, "{out}");
    assert!(
        out.contains(&format!("    Node \"{node_id}\" drain complete")),
        "{out}"
    );
    assert!(
        out.contains("    Allocation \"9aa2a59e\" marked for migration"),
        "{out}"
    );
    assert!(out.trim_end().ends_with("have stopped"), "{out}");
    let blocking = server
        .requests()
        .into_iter()
        .filter(|r| r.path == format!("/v1/node/{node_id}") && r.query.contains_key("index"))
        .count();
    assert!(blocking >= 1);
}

/// Nomad's stream frame for `data` read from a task's stdout.
fn log_frame(data: &str, end_offset: usize) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(data);
    format!(r#"{{"Offset":{end_offset},"Data":"{encoded}","File":"alloc/logs/t.stdout.0"}}"#)
}

#[test]
fn alloc_logs_reads_the_frames_from_the_agent_of_the_allocations_node() {
    let alloc_id = "9aa2a59e-6fa8-af5c-b7f9-17e6ea01f340";
    // The agent of the node that runs the allocation serves its logs: a
    // backlog, the heartbeat that ends it, then what the task wrote later.
    let node_agent = FakeServer::start(move |req| {
        if req.path != format!("/v1/client/fs/logs/{alloc_id}") {
            return Reply::status(404, "not here");
        }
        let body = [
            log_frame("one\ntwo\nthree\n", 14),
            "{}".to_string(),
            log_frame("four\n", 19),
        ]
        .join("\n");
        Reply::ok(body, 0)
    });
    let node_addr = node_agent.address.trim_start_matches("http://").to_string();
    let server = FakeServer::start(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/allocations") => Reply::ok(fixture("job-allocations-list.json"), 12),
        ("GET", p) if p == format!("/v1/allocation/{alloc_id}") => {
            Reply::ok(fixture("allocation.json"), 12)
        }
        ("GET", "/v1/node/4380b079-b149-b4f3-5a9e-763bfe371b36") => {
            let mut node: Value = serde_json::from_str(&fixture("node.json")).unwrap();
            node["HTTPAddr"] = json!(node_addr);
            Reply::ok(node.to_string(), 12)
        }
        _ => Reply::status(404, "alloc not found"),
    });

    let (result, out) = run_against(&server, &["alloc", "logs", "9aa2"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(
        out, "one\ntwo\nthree\nfour\n",
        "the group's only task, all of it"
    );
    let asked = node_agent.request("GET", &format!("/v1/client/fs/logs/{alloc_id}"));
    let q = |k: &str| asked.query.get(k).cloned().unwrap_or_default();
    assert_eq!(
        (q("task"), q("type"), q("follow"), q("origin"), q("offset")),
        (
            "t".into(),
            "stdout".into(),
            "false".into(),
            "start".into(),
            "0".into()
        )
    );

    // -n implies -tail: the last lines of the backlog, then the new output.
    let (result, out) = run_against(
        &server,
        &["alloc", "logs", "-stderr", "-f", "-n", "2", "9aa2a59e", "t"],
    );
    assert_eq!(result.unwrap(), 0);
    assert_eq!(out, "two\nthree\nfour\n");
    let asked = node_agent.requests().pop().unwrap();
    let q = |k: &str| asked.query.get(k).cloned().unwrap_or_default();
    assert_eq!(
        (q("type"), q("follow"), q("origin"), q("offset")),
        ("stderr".into(), "true".into(), "end".into(), "240".into())
    );

    let (result, _) = run_against(&server, &["alloc", "logs", "-task", "nope", "9aa2"]);
    let err = result.unwrap_err().to_string();
    assert!(err.contains("\"nope\" not found"), "{err}");
}

#[test]
fn alloc_logs_falls_back_to_the_cli_agent_and_shows_its_refusal() {
    let alloc_id = "9aa2a59e-6fa8-af5c-b7f9-17e6ea01f340";
    let server = FakeServer::start(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/allocations") => Reply::ok(fixture("job-allocations-list.json"), 12),
        ("GET", p) if p == format!("/v1/allocation/{alloc_id}") => {
            Reply::ok(fixture("allocation.json"), 12)
        }
        ("GET", "/v1/node/4380b079-b149-b4f3-5a9e-763bfe371b36") => {
            // An address nothing listens on.
            let mut node: Value = serde_json::from_str(&fixture("node.json")).unwrap();
            node["HTTPAddr"] = json!("127.0.0.1:1");
            Reply::ok(node.to_string(), 12)
        }
        ("GET", p) if p == format!("/v1/client/fs/logs/{alloc_id}") => {
            Reply::status(404, "task \"t\" not started yet. No logs available")
        }
        _ => Reply::status(404, "alloc not found"),
    });
    let (result, _) = run_against(&server, &["alloc", "logs", "-tail", "9aa2"]);
    let err = format!("{:#}", result.unwrap_err());
    assert!(
        err.contains("404") && err.contains("not started yet"),
        "{err}"
    );
    let asked = server.request("GET", &format!("/v1/client/fs/logs/{alloc_id}"));
    assert_eq!(asked.query.get("offset").map(String::as_str), Some("1200"));
}

#[test]
fn job_history_revert_dispatch_scale_periodic_and_system_gc_parse() {
    let cases: &[&[&str]] = &[
        &[
            "job", "history", "-p", "-full", "-version", "2", "-json", "web",
        ],
        &["job", "history", "-t", "{{.ID}}", "web"],
        &["job", "revert", "-detach", "web", "3"],
        &[
            "job",
            "dispatch",
            "-meta",
            "a=b",
            "-meta",
            "c=d",
            "-idempotency-token",
            "tok",
            "-detach",
            "batch",
            "-",
        ],
        &["job", "scale", "web", "5"],
        &["job", "scale", "-detach", "web", "g", "5"],
        &["job", "periodic", "force", "-detach", "nightly"],
        &[
            "job",
            "inspect",
            "-version",
            "1",
            "-t",
            "{{.Version}}",
            "web",
        ],
        &["system", "gc"],
        &["job", "status", "-namespace", "ops", "-region", "eu", "web"],
    ];
    for case in cases {
        parse(case);
    }
    let refused: &[&[&str]] = &[
        &["job", "scale", "web"],
        &["job", "scale", "web", "g", "1", "2"],
        &["job", "revert", "web"],
        &["job", "periodic", "web"],
    ];
    for case in refused {
        let words = std::iter::once("herder").chain(case.iter().copied());
        assert!(
            Cli::try_parse_from(nomad_style_args(words.map(OsString::from))).is_err(),
            "{case:?} parsed"
        );
    }
}

/// An agent for the job verbs added for issue 16: one job "web" with one
/// group "g", a parameterized job "batch", and write answers in Nomad's
/// shapes (the documented dispatch answer, a register answer).
fn jobs_agent() -> FakeServer {
    FakeServer::start(|req: &Seen| {
        let register =
            r#"{"EvalID":"","EvalCreateIndex":0,"JobModifyIndex":7,"Warnings":"","Index":7}"#;
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/v1/jobs") => Reply::ok(
                r#"[{"ID":"web","Name":"web"},{"ID":"batch","Name":"batch"}]"#,
                5,
            ),
            ("GET", "/v1/job/web/scale") => Reply::ok(
                r#"{"JobID":"web","TaskGroups":{"g":{"Desired":1,"Events":null}}}"#,
                5,
            ),
            ("POST", "/v1/job/web/scale") | ("PUT", "/v1/job/web/revert") => Reply::ok(register, 7),
            ("PUT", "/v1/job/batch/dispatch") => Reply::ok(
                r#"{"Index":13,"JobCreateIndex":12,"EvalCreateIndex":13,"EvalID":"e5f55fac-bc69-119d-528a-1fc7ade5e02c","DispatchedJobID":"batch/dispatch-1485408778-81644024"}"#,
                13,
            ),
            ("GET", "/v1/job/web/versions") => Reply::ok(
                r#"{"Versions":[{"ID":"web","Version":1,"Stable":true,"SubmitTime":0},{"ID":"web","Version":0,"Stable":false,"SubmitTime":0}],
                    "Diffs":[{"Type":"Edited","ID":"web","Fields":null,"Objects":null,"TaskGroups":[{"Type":"Edited","Name":"g","Fields":[{"Type":"Edited","Name":"Count","Old":"1","New":"3","Annotations":null}],"Objects":null,"Tasks":null}]}],
                    "Index":5}"#,
                5,
            ),
            ("PUT", "/v1/system/gc") => Reply::ok("", 0),
            ("POST", "/v1/job/web/periodic/force") => {
                Reply::status(400, "can't force launch non-periodic job")
            }
            _ => Reply::status(404, "unexpected request"),
        }
    })
}

#[test]
fn job_dispatch_sends_payload_meta_and_token_and_prints_the_child() {
    let server = jobs_agent();
    let mut input = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut input, b"hello").unwrap();
    let path = input.path().to_str().unwrap().to_string();
    let (result, out) = run_against(
        &server,
        &[
            "job",
            "dispatch",
            "-meta",
            "time=5",
            "-idempotency-token",
            "tok",
            "-detach",
            "batch",
            &path,
        ],
    );
    assert_eq!(result.unwrap(), 0, "{out}");
    assert!(
        out.contains("Dispatched Job ID = batch/dispatch-1485408778-81644024"),
        "{out}"
    );
    assert!(out.contains("Evaluation ID     = e5f55fac"), "{out}");
    let sent = server
        .requests()
        .into_iter()
        .find(|r| r.path == "/v1/job/batch/dispatch")
        .expect("dispatch sent");
    let body = sent.json();
    assert_eq!(body["Payload"], "aGVsbG8=");
    assert_eq!(body["Meta"], json!({"time": "5"}));
    assert_eq!(body["IdempotencyToken"], "tok");
    let (result, _) = run_against(&server, &["job", "dispatch", "-meta", "novalue", "batch"]);
    assert!(result
        .unwrap_err()
        .to_string()
        .contains("Error parsing meta value"));
}

#[test]
fn job_scale_picks_the_only_group_and_revert_and_history_use_their_endpoints() {
    let server = jobs_agent();
    let (result, out) = run_against(&server, &["job", "scale", "-detach", "web", "3"]);
    assert_eq!(result.unwrap(), 0, "{out}");
    let scale = server
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path == "/v1/job/web/scale")
        .expect("scale sent");
    assert_eq!(scale.json()["Count"], 3);
    assert_eq!(scale.json()["Target"], json!({"Job": "web", "Group": "g"}));
    let (result, _) = run_against(&server, &["job", "scale", "web", "other", "3"]);
    assert!(result
        .unwrap_err()
        .to_string()
        .contains("Group other not found"));

    let (result, out) = run_against(&server, &["job", "revert", "-detach", "web", "0"]);
    assert_eq!(result.unwrap(), 0, "{out}");
    let revert = server
        .requests()
        .into_iter()
        .find(|r| r.path == "/v1/job/web/revert")
        .expect("revert sent");
    assert_eq!(revert.json(), json!({"JobID": "web", "JobVersion": 0}));

    let (result, out) = run_against(&server, &["job", "history", "-p", "web"]);
    assert_eq!(result.unwrap(), 0);
    assert!(out.contains("Version     = 1\nStable      = true"), "{out}");
    assert!(out.contains("+/- Count: \"1\" => \"3\""), "{out}");
    let history = server
        .requests()
        .into_iter()
        .find(|r| r.path == "/v1/job/web/versions")
        .expect("versions read");
    assert_eq!(history.query.get("diffs").map(String::as_str), Some("true"));
    let (result, out) = run_against(
        &server,
        &[
            "job",
            "history",
            "-t",
            "{{.Version}}",
            "-version",
            "0",
            "web",
        ],
    );
    assert_eq!((result.unwrap(), out.as_str()), (0, "0\n"));
    let (result, _) = run_against(
        &server,
        &["job", "history", "-t", "{{range .}}x{{end}}", "web"],
    );
    assert!(result.unwrap_err().to_string().contains("not supported"));
}

#[test]
fn system_gc_and_periodic_force_and_scope_flags_reach_the_agent() {
    let server = jobs_agent();
    let (result, out) = run_against(&server, &["system", "gc"]);
    assert_eq!((result.unwrap(), out.as_str()), (0, ""));
    assert!(server
        .requests()
        .iter()
        .any(|r| r.method == "PUT" && r.path == "/v1/system/gc"));
    let (result, _) = run_against(&server, &["job", "periodic", "force", "web"]);
    let error = format!("{:#}", result.unwrap_err());
    assert!(
        error.contains("can't force launch non-periodic job"),
        "{error}"
    );

    let (result, _) = run_against(
        &server,
        &[
            "job",
            "history",
            "-namespace",
            "ops",
            "-region",
            "eu",
            "web",
        ],
    );
    result.unwrap();
    let versions = server
        .requests()
        .into_iter()
        .rfind(|r| r.path == "/v1/job/web/versions")
        .unwrap();
    assert_eq!(
        versions.query.get("namespace").map(String::as_str),
        Some("ops")
    );
    assert_eq!(versions.query.get("region").map(String::as_str), Some("eu"));
}

#[test]
fn nomad_namespace_and_region_variables_are_read_and_flags_win() {
    let server = jobs_agent();
    let env = |key: &str| match key {
        "NOMAD_ADDR" => Some(server.address.clone()),
        "NOMAD_NAMESPACE" => Some("from-env".to_string()),
        "NOMAD_REGION" => Some("r1".to_string()),
        _ => None,
    };
    let flags = ApiFlags::default();
    flags
        .client_with_env(env)
        .unwrap()
        .get("/v1/jobs", &[])
        .unwrap();
    let flags = ApiFlags {
        namespace: Some("flag".into()),
        ..ApiFlags::default()
    };
    flags
        .client_with_env(env)
        .unwrap()
        .get("/v1/jobs", &[("namespace", "*".to_string())])
        .unwrap();
    flags
        .client_with_env(env)
        .unwrap()
        .get("/v1/jobs", &[])
        .unwrap();
    let seen: Vec<(Option<String>, Option<String>)> = server
        .requests()
        .into_iter()
        .map(|r| {
            (
                r.query.get("namespace").cloned(),
                r.query.get("region").cloned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (Some("from-env".into()), Some("r1".into())),
            (Some("*".into()), Some("r1".into())),
            (Some("flag".into()), Some("r1".into())),
        ]
    );
}

#[test]
fn go_templates_render_field_paths_and_refuse_the_rest() {
    let value = json!({"ID": "web", "Version": 2, "Meta": {"a": "b"}, "Stop": false, "Gone": null});
    let text = output::go_template(
        "{{.ID}} v{{ .Version }} {{.Meta.a}} {{.Stop}} {{.Nope}}",
        &value,
    )
    .unwrap();
    assert_eq!(text, "web v2 b false <no value>");
    assert_eq!(
        output::go_template("{{.Meta}}", &value).unwrap(),
        r#"{"a":"b"}"#
    );
    for bad in [
        "{{range .}}{{end}}",
        "{{.ID | printf}}",
        "{{printf \"%s\" .ID}}",
        "{{.ID",
    ] {
        assert!(output::go_template(bad, &value).is_err(), "{bad}");
    }
}

/// Three servers as `/v1/agent/members` lists them in a cluster: s2 leads,
/// s3 has stopped answering.
const CLUSTER_MEMBERS: &str = r#"{"ServerName":"s1","ServerRegion":"global","ServerDC":"dc1","Members":[
 {"Name":"s3.global","Addr":"127.0.0.1","Port":4649,"Status":"failed","ProtocolCur":2,
  "Tags":{"role":"nomad","region":"global","dc":"dc2","build":"0.1.0","port":"4649","expect":"3"}},
 {"Name":"s1.global","Addr":"127.0.0.1","Port":4647,"Status":"alive","ProtocolCur":2,
  "Tags":{"role":"nomad","region":"global","dc":"dc1","build":"0.1.0","port":"4647","expect":"3"}},
 {"Name":"s2.global","Addr":"127.0.0.1","Port":4648,"Status":"alive","ProtocolCur":2,
  "Tags":{"role":"nomad","region":"global","dc":"dc1","build":"0.1.0","port":"4648","expect":"3"}}]}"#;

#[test]
fn server_members_prints_nomads_table_with_the_regions_leader() {
    let server = FakeServer::start(|req| match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/agent/members") => Reply::ok(CLUSTER_MEMBERS, 0),
        ("GET", "/v1/status/leader") => Reply::ok(r#""127.0.0.1:4648""#, 0),
        _ => Reply::status(404, "not found"),
    });
    let (result, out) = run_against(&server, &["server", "members"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(
        out,
        "Name       Address    Port  Status  Leader  Protocol  Build  Datacenter  Region\n\
         s1.global  127.0.0.1  4647  alive   false   2         0.1.0  dc1         global\n\
         s2.global  127.0.0.1  4648  alive   true    2         0.1.0  dc1         global\n\
         s3.global  127.0.0.1  4649  failed  false   2         0.1.0  dc2         global\n"
    );
    assert_eq!(
        server.request("GET", "/v1/status/leader").query["region"],
        "global"
    );
    let (result, out) = run_against(&server, &["server", "members", "-detailed"]);
    assert_eq!(result.unwrap(), 0);
    assert!(
        out.contains("s3.global  127.0.0.1  4649  build=0.1.0,dc=dc2,expect=3,port=4649"),
        "{out}"
    );
}

#[test]
fn server_join_sends_every_address_and_fails_on_the_agents_error() {
    let server = FakeServer::start(|req| match (req.method.as_str(), req.path.as_str()) {
        ("PUT", "/v1/agent/join") if req.raw_query.contains("bad") => Reply::ok(
            r#"{"num_joined":1,"error":"bad:4647: the server at bad:4647 belongs to no cluster yet"}"#,
            0,
        ),
        ("PUT", "/v1/agent/join") => Reply::ok(r#"{"num_joined":2,"error":""}"#, 0),
        _ => Reply::status(404, "not found"),
    });
    let (result, out) = run_against(&server, &["server", "join", "10.0.0.1:4647", "10.0.0.2"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(out, "Joined 2 servers successfully\n");
    assert_eq!(
        server.request("PUT", "/v1/agent/join").raw_query,
        "address=10.0.0.1%3A4647&address=10.0.0.2"
    );
    let (result, _) = run_against(&server, &["server", "join", "10.0.0.1", "bad"]);
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("Error joining: bad:4647: the server at bad:4647 belongs to no cluster yet"),
        "{err}"
    );
}

#[test]
fn server_force_leave_names_the_node_and_reports_a_refusal() {
    let server = FakeServer::start(|req| match req.query.get("node").map(String::as_str) {
        Some("s3.global") => Reply::ok("", 0),
        _ => Reply::status(400, "no server named \"s9\" in the cluster"),
    });
    let (result, out) = run_against(&server, &["server", "force-leave", "s3.global"]);
    assert_eq!((result.unwrap(), out.as_str()), (0, ""));
    let seen = server.request("PUT", "/v1/agent/force-leave");
    assert_eq!(seen.query["node"], "s3.global");
    let (result, _) = run_against(&server, &["server", "force-leave", "s9"]);
    let err = format!("{:#}", result.unwrap_err());
    assert!(err.contains("Error force-leaving server s9"), "{err}");
    assert!(err.contains("no server named"), "{err}");
}

#[test]
fn operator_raft_list_peers_prints_nomads_table_sorted_by_node() {
    let server = FakeServer::start(|req| match req.path.as_str() {
        "/v1/operator/raft/configuration" => Reply::ok(
            r#"{"Index":12,"Servers":[
              {"ID":"127.0.0.1:4648","Node":"s2.global","Address":"127.0.0.1:4648","Leader":false,"Voter":true,"RaftProtocol":"2"},
              {"ID":"127.0.0.1:4647","Node":"s1.global","Address":"127.0.0.1:4647","Leader":true,"Voter":true,"RaftProtocol":"2"},
              {"ID":"127.0.0.1:4649","Node":"s3.global","Address":"127.0.0.1:4649","Leader":false,"Voter":false,"RaftProtocol":"2"}]}"#,
            12,
        ),
        _ => Reply::status(404, "not found"),
    });
    let (result, out) = run_against(&server, &["operator", "raft", "list-peers"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(
        out,
        "Node       ID              Address         State     Voter  RaftProtocol\n\
         s1.global  127.0.0.1:4647  127.0.0.1:4647  leader    true   2\n\
         s2.global  127.0.0.1:4648  127.0.0.1:4648  follower  true   2\n\
         s3.global  127.0.0.1:4649  127.0.0.1:4649  follower  false  2\n"
    );
    assert!(!server.requests()[0].query.contains_key("stale"));
    let (result, _) = run_against(&server, &["operator", "raft", "list-peers", "-stale"]);
    assert_eq!(result.unwrap(), 0);
    assert!(server.requests()[1].query.contains_key("stale"));
}

#[test]
fn operator_raft_remove_peer_deletes_by_address_or_id() {
    let server = FakeServer::start(|req| match (req.method.as_str(), req.path.as_str()) {
        ("DELETE", "/v1/operator/raft/peer") => Reply::ok("", 0),
        _ => Reply::status(404, "not found"),
    });
    let (result, out) = run_against(
        &server,
        &[
            "operator",
            "raft",
            "remove-peer",
            "-peer-address=10.0.0.3:4647",
        ],
    );
    assert_eq!(result.unwrap(), 0);
    assert_eq!(out, "Removed peer with address \"10.0.0.3:4647\"\n");
    let (result, _) = run_against(
        &server,
        &["operator", "raft", "remove-peer", "-peer-id", "42"],
    );
    assert_eq!(result.unwrap(), 0);
    let seen = server.requests();
    assert_eq!(seen[0].query["address"], "10.0.0.3:4647");
    assert_eq!(seen[1].query["id"], "42");
    assert!(!seen[1].query.contains_key("address"));
}

#[test]
fn operator_gossip_keygen_prints_a_fresh_key_the_cluster_accepts() {
    use base64::Engine as _;
    let mut keys = Vec::new();
    for words in [
        &["operator", "gossip", "keygen"][..],
        &["operator", "keygen"],
    ] {
        let mut out = Vec::new();
        assert_eq!(run(parse(words).command, &mut out).unwrap(), 0);
        let key = String::from_utf8(out).unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(key.trim())
            .unwrap();
        assert_eq!(bytes.len(), operator_raft::KEY_BYTES);
        assert!(herder_raft::ClusterKey::from_base64(&key).is_ok(), "{key}");
        keys.push(key);
    }
    assert_ne!(keys[0], keys[1]);
}

#[test]
fn service_list_and_info_print_the_catalog() {
    let server = FakeServer::start(|seen| match seen.path.as_str() {
        "/v1/services" => Reply::ok(
            r#"[{"Namespace":"default","Services":[{"ServiceName":"web","Tags":["a","b"]}]}]"#,
            7,
        ),
        "/v1/service/web" => Reply::ok(
            r#"[{"ID":"_nomad-task-x","ServiceName":"web","Namespace":"default",
                 "NodeID":"4e6e0a4c-0000-0000-0000-000000000000","Datacenter":"dc1",
                 "JobID":"web","AllocID":"0c4ab8d2-0000-0000-0000-000000000000",
                 "Tags":["a"],"Address":"10.0.0.1","Port":23456,
                 "CreateIndex":5,"ModifyIndex":5}]"#,
            7,
        ),
        "/v1/service/none" => Reply::ok("[]", 7),
        _ => Reply::status(404, "not found"),
    });
    let (result, out) = run_against(&server, &["service", "list"]);
    assert_eq!(result.unwrap(), 0);
    assert!(out.starts_with("Service Name"), "{out}");
    assert!(out.contains("web") && out.contains("[a,b]"), "{out}");

    let (result, out) = run_against(&server, &["service", "info", "web"]);
    assert_eq!(result.unwrap(), 0);
    for want in [
        "Job ID",
        "Address",
        "10.0.0.1:23456",
        "[a]",
        "4e6e0a4c",
        "0c4ab8d2",
    ] {
        assert!(out.contains(want), "{want:?} not in {out}");
    }
    let (_, out) = run_against(&server, &["service", "info", "-verbose", "web"]);
    assert!(out.contains("_nomad-task-x"), "{out}");
    let (_, out) = run_against(&server, &["service", "info", "none"]);
    assert_eq!(out.trim(), "No service registrations found");
}

const DEPLOYMENT_ID: &str = "0b23b149-971d-1a5a-2f6b-b9d4b5c7c2f2";

/// A deployment of job "svc" version 2 (spec registered at index 10, as
/// `register-response.json` answers) in Nomad's JSON shape: group "g"
/// wants 3 with 1 canary, placed (and healthy unless still running).
fn deployment_json(status: &str) -> Value {
    let description = match status {
        "successful" => "Deployment completed successfully",
        "failed" => "Failed due to unhealthy allocations - rolling back to job version 1",
        "paused" => "Deployment is paused",
        _ => "Deployment is running but requires manual promotion",
    };
    json!({
        "ID": DEPLOYMENT_ID, "Namespace": "default", "JobID": "svc", "JobVersion": 2,
        "JobModifyIndex": 10, "JobSpecModifyIndex": 10, "JobCreateIndex": 7,
        "IsMultiregion": false, "Status": status, "StatusDescription": description,
        "EvalPriority": 50, "CreateIndex": 11, "ModifyIndex": 12,
        "TaskGroups": {"g": {
            "AutoRevert": true, "AutoPromote": false, "Promoted": status == "successful",
            "ProgressDeadline": 600000000000u64,
            "RequireProgressBy": "2021-07-01T10:20:30Z",
            "PlacedCanaries": ["9aa2a59e-6b31-5c8f-9d3a-0e4c2f1a8b7d"],
            "DesiredCanaries": 1, "DesiredTotal": 3, "PlacedAllocs": 1,
            "HealthyAllocs": u64::from(status != "running"), "UnhealthyAllocs": 0
        }}
    })
}

/// An agent with one deployment that answers the deployment verbs.
fn deployment_agent() -> FakeServer {
    FakeServer::start(|req: &Seen| {
        let one = format!("/v1/deployment/{DEPLOYMENT_ID}");
        let update = |reverted: Value, eval: &str| {
            json!({"EvalID": eval, "EvalCreateIndex": 20, "DeploymentModifyIndex": 20,
                   "RevertedJobVersion": reverted, "Index": 20})
            .to_string()
        };
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/v1/deployments") => {
                let list = json!([deployment_json("running")]);
                Reply::ok(list.to_string(), 12)
            }
            ("GET", p) if p == one => Reply::ok(deployment_json("running").to_string(), 12),
            ("PUT", p) if p.starts_with("/v1/deployment/fail/") => {
                Reply::ok(update(json!(1), EVAL_ID), 20)
            }
            ("PUT", p) if p.starts_with("/v1/deployment/") => {
                Reply::ok(update(Value::Null, ""), 20)
            }
            _ => Reply::status(404, "unexpected request"),
        }
    })
}

#[test]
fn deployment_list_and_status_show_nomads_columns() {
    let server = deployment_agent();
    let (result, out) = run_against(&server, &["deployment", "list"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(
        out,
        "ID        Job ID  Job Version  Status   Description\n\
         0b23b149  svc     2            running  Deployment is running but requires manual promotion\n"
    );
    let (result, out) = run_against(&server, &["deployment", "status", "0b23"]);
    assert_eq!(result.unwrap(), 0);
    assert!(server.requests().iter().any(|r| r.path == "/v1/deployments"
        && r.query.get("prefix").map(String::as_str) == Some("0b23")));
    assert_eq!(
        out,
        "ID          = 0b23b149\n\
         Job ID      = svc\n\
         Job Version = 2\n\
         Status      = running\n\
         Description = Deployment is running but requires manual promotion\n\
         \n\
         Deployed\n\
         Task Group  Auto Revert  Promoted  Desired  Canaries  Placed  Healthy  Unhealthy  Progress Deadline\n\
         g           true         false     3        1         1       0        0          2021-07-01T10:20:30Z\n"
    );
    let (result, out) = run_against(&server, &["deployment", "status", "-json", DEPLOYMENT_ID]);
    assert_eq!(result.unwrap(), 0);
    let printed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(printed["TaskGroups"]["g"]["DesiredCanaries"], 1);
}

#[test]
fn deployment_writes_send_nomads_bodies() {
    let server = deployment_agent();
    let path = |verb: &str| format!("/v1/deployment/{verb}/{DEPLOYMENT_ID}");

    let (result, out) = run_against(&server, &["deployment", "promote", "-detach", "0b23"]);
    assert_eq!(result.unwrap(), 0, "{out}");
    let body = server.request("PUT", &path("promote")).json();
    assert_eq!(
        body,
        json!({"DeploymentID": DEPLOYMENT_ID, "All": true, "Groups": []})
    );

    let (result, _) = run_against(
        &server,
        &[
            "deployment",
            "promote",
            "-group",
            "g",
            "-group",
            "h",
            "0b23",
        ],
    );
    assert_eq!(result.unwrap(), 0);
    let promotes: Vec<Value> = server
        .requests()
        .iter()
        .filter(|r| r.path == path("promote"))
        .map(Seen::json)
        .collect();
    assert_eq!(promotes[1]["All"], false);
    assert_eq!(promotes[1]["Groups"], json!(["g", "h"]));

    let (result, out) = run_against(&server, &["deployment", "fail", "-detach", "0b23"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(
        out,
        format!("Deployment \"0b23b149\" failed. Auto-reverted to job version 1.\nEvaluation ID: {EVAL_ID}\n")
    );

    let (result, out) = run_against(&server, &["deployment", "pause", "0b23"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(out, "Deployment \"0b23b149\" paused\n");
    let (result, out) = run_against(&server, &["deployment", "resume", "0b23"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(out, "Deployment \"0b23b149\" resumed\n");
    let pauses: Vec<Value> = server
        .requests()
        .iter()
        .filter(|r| r.path == path("pause"))
        .map(Seen::json)
        .collect();
    assert_eq!(
        pauses[0],
        json!({"DeploymentID": DEPLOYMENT_ID, "Pause": true})
    );
    assert_eq!(
        pauses[1],
        json!({"DeploymentID": DEPLOYMENT_ID, "Pause": false})
    );
}

#[test]
fn deployment_refusals_show_the_servers_text() {
    let server = FakeServer::start(|req: &Seen| match req.path.as_str() {
        p if p.starts_with("/v1/deployment/promote/") => {
            Reply::status(500, "can't promote terminal deployment")
        }
        _ => Reply::status(404, "deployment not found"),
    });
    let (result, _) = run_against(&server, &["deployment", "promote", DEPLOYMENT_ID]);
    let err = format!("{:#}", result.expect_err("refused"));
    assert!(err.starts_with("Error promoting deployment: "), "{err}");
    assert!(err.contains("can't promote terminal deployment"), "{err}");
}

/// An agent whose job "svc" registers, evaluates, and whose deployment
/// goes from running to `final_status` across one blocking query.
fn deploying_agent(final_status: &'static str) -> FakeServer {
    FakeServer::start(move |req: &Seen| {
        let one = format!("/v1/deployment/{DEPLOYMENT_ID}");
        match (req.method.as_str(), req.path.as_str()) {
            ("PUT", "/v1/jobs") => Reply::ok(fixture("register-response.json"), 10),
            ("GET", "/v1/job/svc/deployment") => {
                Reply::ok(deployment_json("running").to_string(), 12)
            }
            ("GET", p) if p == one && req.query.contains_key("index") => {
                Reply::ok(deployment_json(final_status).to_string(), 14)
            }
            ("GET", p) if p == one => Reply::ok(deployment_json("running").to_string(), 12),
            ("GET", p) if p == format!("/v1/evaluation/{EVAL_ID}") => {
                Reply::ok(fixture("evaluation.json"), 12)
            }
            ("GET", p) if p == format!("/v1/evaluation/{EVAL_ID}/allocations") => {
                Reply::ok("[]", 12)
            }
            _ => Reply::status(404, "unexpected request"),
        }
    })
}

#[test]
fn job_run_follows_the_new_deployment_to_its_end() {
    let file = job_file();
    let path = file.path().to_str().unwrap();
    let server = deploying_agent("successful");
    let (result, out) = run_against(&server, &["job", "run", path]);
    assert_eq!(result.unwrap(), 0, "{out}");
    let expected = [
        "==> Monitoring deployment \"0b23b149\"",
        "    Deployment \"running\": Deployment is running but requires manual promotion (g: 0/3 healthy, 0 unhealthy)",
        "    Deployment \"successful\": Deployment completed successfully (g: 1/3 healthy, 0 unhealthy)",
        "  ✓ Deployment \"0b23b149\" successful",
        "Status      = successful",
    ];
    for line in expected {
        assert!(out.lines().any(|l| l == line), "missing {line:?} in\n{out}");
    }
    let blocking = server
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with(DEPLOYMENT_ID) && r.query.contains_key("index"))
        .expect("a blocking query on the deployment");
    assert_eq!(blocking.query["index"], "12");

    let server = deploying_agent("failed");
    let (result, out) = run_against(&server, &["job", "run", path]);
    assert_eq!(
        result.unwrap(),
        1,
        "a failed deployment fails the run: {out}"
    );
    assert!(out.contains("  ! Deployment \"0b23b149\" failed"), "{out}");

    let server = deploying_agent("failed");
    let (result, out) = run_against(&server, &["job", "run", "-detach", path]);
    assert_eq!(result.unwrap(), 0);
    assert!(!out.contains("Monitoring"), "{out}");
    assert!(server
        .requests()
        .iter()
        .all(|r| !r.path.contains("deployment")));
}

#[test]
fn namespace_verbs_print_and_write_as_nomad() {
    let server = FakeServer::start(|seen| match (seen.method.as_str(), seen.path.as_str()) {
        ("GET", "/v1/namespaces")
            if seen.query.get("prefix").map(String::as_str) == Some("api") =>
        {
            Reply::ok(
                r#"[{"Name":"api-prod","Description":"Production API Servers","Quota":"","Meta":{"owner":"me"},"CreateIndex":5,"ModifyIndex":5}]"#,
                5,
            )
        }
        ("GET", "/v1/namespaces") => Reply::ok(
            r#"[{"Name":"default","Description":"Default shared namespace","CreateIndex":1,"ModifyIndex":1},
                {"Name":"api-prod","Description":"Production API Servers","CreateIndex":5,"ModifyIndex":5}]"#,
            5,
        ),
        ("GET", "/v1/namespace/new") => Reply::status(404, "Namespace not found"),
        ("PUT", "/v1/namespace") => Reply::ok("", 6),
        ("DELETE", "/v1/namespace/default") => {
            Reply::status(400, "can not delete default namespace")
        }
        _ => Reply::status(404, "not found"),
    });
    let (result, out) = run_against(&server, &["namespace", "list"]);
    assert_eq!(result.unwrap(), 0);
    assert_eq!(
        out,
        "Name      Description\napi-prod  Production API Servers\ndefault   Default shared namespace\n"
    );

    let (result, out) = run_against(&server, &["namespace", "status", "api"]);
    assert_eq!(result.unwrap(), 0);
    assert!(
        out.starts_with(
            "Name        = api-prod\nDescription = Production API Servers\nQuota       = <none>\n"
        ),
        "{out}"
    );
    assert!(out.contains("owner = me"), "{out}");

    let (result, out) = run_against(
        &server,
        &["namespace", "apply", "-description", "fresh", "new"],
    );
    assert_eq!(result.unwrap(), 0);
    assert_eq!(out, "Successfully applied namespace \"new\"!\n");
    let put = server
        .requests()
        .into_iter()
        .find(|r| r.method == "PUT")
        .expect("the namespace was written");
    assert_eq!(put.json()["Name"], "new");
    assert_eq!(put.json()["Description"], "fresh");

    let (result, _) = run_against(&server, &["namespace", "delete", "default"]);
    let err = format!("{:#}", result.unwrap_err());
    assert!(err.contains("can not delete default namespace"), "{err}");
}
