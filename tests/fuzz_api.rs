//! Generated hostile requests against the real HTTP API (issue 15): random
//! and deeply nested JSON bodies, HCL job files and `?filter=` expressions,
//! sent to a running agent. Whatever arrives, the agent must not panic,
//! abort or answer 5xx; a refused request (4xx) must change nothing; memory
//! stays bounded; and the agent keeps answering.
//!
//! Each target runs a few hundred cases so that CI stays within a minute
//! or two; the longer, coverage-guided runs are the cargo-fuzz targets in
//! `fuzz/` (see the README).

use herder_tests::{get, peak_rss_mib, send_raw, server_config, temp_dir, url_encode, TestAgent};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};
use std::time::Duration;

fn agent(dir: &std::path::Path) -> TestAgent {
    let mut config = server_config(dir);
    config.server.num_schedulers = Some(0);
    config.limits.http_body_read_timeout = Duration::from_secs(2);
    TestAgent::start(config, false)
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Sends one request and checks what every answer must satisfy.
fn check(agent: &TestAgent, method: &str, path: &str, body: &str) -> Result<u16, TestCaseError> {
    let store = &agent.server.as_ref().expect("a server").store;
    let before = store.latest_index();
    let (code, answer) = send_raw(method, &agent.url(path), body);
    prop_assert!(
        (200..500).contains(&code),
        "{method} {path} answered {code}: {answer}\nbody: {}",
        truncated(body)
    );
    if code >= 400 {
        prop_assert_eq!(
            store.latest_index(),
            before,
            "a refused {} {} changed the state",
            method,
            path
        );
    }
    Ok(code)
}

fn truncated(s: &str) -> String {
    s.chars().take(300).collect()
}

/// JSON of any shape, a few levels deep, with Nomad's field names mixed in
/// so that some of it reaches the job decoder's deeper paths.
fn any_json() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("ID".to_string()),
        Just("Name".to_string()),
        Just("TaskGroups".to_string()),
        Just("Tasks".to_string()),
        Just("Count".to_string()),
        Just("Resources".to_string()),
        Just("CPU".to_string()),
        Just("Type".to_string()),
        Just("Datacenters".to_string()),
        Just("Driver".to_string()),
        "[A-Za-z]{1,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,20}".prop_map(Value::from),
        Just(json!("../../x")),
    ];
    leaf.prop_recursive(6, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Text made of the tokens the parsers recurse on, nested to any depth.
fn nested_text(tokens: &'static [&'static str]) -> impl Strategy<Value = String> {
    let run = (prop::sample::select(tokens), 0usize..6_000).prop_map(|(t, n)| t.repeat(n));
    prop::collection::vec(
        prop_oneof![run, prop::sample::select(tokens).prop_map(String::from)],
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

const HCL_TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    "${",
    "%{",
    "\"",
    "job \"x\" ",
    "group \"g\" ",
    "task \"t\" ",
    "locals ",
    "a = ",
    "local.a",
    "for x in ",
    ":",
    "!",
    "-",
    "1",
    "\n",
    "count = ",
    "upper(",
    ",",
    "?",
    "<<EOF\n",
    "EOF\n",
    "#",
    "/*",
    "*/",
    "var.",
    "&&",
    "||",
];

const FILTER_TOKENS: &[&str] = &[
    "(",
    ")",
    "not ",
    " and ",
    " or ",
    "Status",
    ".",
    "[\"a\"]",
    " == ",
    " != ",
    "\"x\"",
    "`y`",
    " contains ",
    " matches ",
    " in ",
    " is ",
    " empty",
    "1",
    "true",
    "Meta",
];

#[test]
fn random_job_bodies_never_crash_and_refusals_change_nothing() {
    let dir = temp_dir();
    let agent = agent(dir.path());
    runner(1000)
        .run(&any_json(), |job| {
            let body = json!({"Job": job}).to_string();
            check(&agent, "PUT", "/v1/jobs", &body)?;
            check(&agent, "PUT", "/v1/validate/job", &body)?;
            check(&agent, "PUT", "/v1/job/x/plan", &body)?;
            check(
                &agent,
                "PUT",
                "/v1/node/register",
                &json!({"Node": job}).to_string(),
            )?;
            Ok(())
        })
        .unwrap();
    assert_eq!(get(&agent.url("/v1/status/leader")).0, 200);
}

#[test]
fn deeply_nested_bodies_hcl_and_filters_are_refused_cleanly() {
    let dir = temp_dir();
    let agent = agent(dir.path());
    let json_tokens: &'static [&'static str] = &["[", "{\"a\":", "]", "}", "\"", ",", "1"];
    runner(150)
        .run(&nested_text(json_tokens), |text| {
            check(&agent, "PUT", "/v1/jobs", &text)?;
            check(&agent, "PUT", "/v1/jobs", &format!("{{\"Job\": {text}}}"))?;
            Ok(())
        })
        .unwrap();
    runner(150)
        .run(&nested_text(HCL_TOKENS), |text| {
            let body = json!({"JobHCL": text, "Canonicalize": true}).to_string();
            check(&agent, "PUT", "/v1/jobs/parse", &body)?;
            Ok(())
        })
        .unwrap();
    runner(150)
        .run(&nested_text(FILTER_TOKENS), |text| {
            let filter: String = url_encode(&text);
            for list in [
                "/v1/jobs",
                "/v1/nodes",
                "/v1/allocations",
                "/v1/evaluations",
            ] {
                let (code, answer) = get(&agent.url(&format!("{list}?filter={filter}")));
                // 431 is actix refusing a URL longer than its header limit.
                prop_assert!(
                    code == 200 || (400..500).contains(&code),
                    "{list} answered {code}: {}",
                    truncated(&answer)
                );
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(get(&agent.url("/v1/status/leader")).0, 200);
    let rss = peak_rss_mib();
    assert!(rss < 2048, "peak RSS {rss} MiB");
}
