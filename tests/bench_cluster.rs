//! The cluster load generator at CI size, as a correctness test (not a
//! speed test): `herder bench cluster -preset ci` places 100 jobs x 200
//! allocations on 500 simulated nodes through a real server process; every
//! allocation must be placed, no node over-committed, and all of them
//! still there after the server restarts on its data dir. The same for a
//! system job fanned out onto every node, and with 5% of the nodes failing
//! and returning mid-run (every lost allocation replaced), and for the user
//! mix an outside client submits, followed by job summaries, with the
//! latency probe.

use herder_tests::herder_bin;
use serde_json::Value;
use std::process::Command;

fn bench(args: &[&str]) -> Value {
    let output = Command::new(herder_bin())
        .args(["bench", "cluster", "-verify", "-json"])
        .args(args)
        .output()
        .expect("herder bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("report is JSON ({e}): {stdout}"))
}

#[test]
fn ci_preset_places_everything_without_overcommit_and_it_survives_a_restart() {
    let report = bench(&["-preset", "ci"]);
    assert_eq!(report["expected_allocs"], 20_000);
    assert_eq!(report["placed_allocs"], 20_000);
    assert_eq!(report["all_placed"], true);
    assert_eq!(report["overcommitted_nodes"], 0);
    assert_eq!(report["allocs_after_restart"], 20_000);
    assert_eq!(report["jobs_registered"], 100);
    assert_eq!(report["evals_complete"], 100);
    assert_eq!(report["evals_failed"], 0);
}

#[test]
fn a_system_job_lands_once_on_every_node_and_survives_a_restart() {
    let report = bench(&["-scenario", "system", "-nodes", "300"]);
    assert_eq!(report["expected_allocs"], 300);
    assert_eq!(report["placed_allocs"], 300);
    assert_eq!(report["overcommitted_nodes"], 0);
    assert_eq!(report["allocs_after_restart"], 300);
}

#[test]
fn churn_loses_allocations_that_are_all_replaced_without_overcommit() {
    let report = bench(&["-preset", "ci", "-churn", "5"]);
    assert_eq!(report["churned_nodes"], 25);
    assert!(
        report["lost_allocs"].as_u64().unwrap_or(0) > 0,
        "failed nodes lose their allocations: {report}"
    );
    assert_eq!(report["placed_allocs"], 20_000, "every lost one replaced");
    assert_eq!(report["all_placed"], true);
    assert_eq!(report["overcommitted_nodes"], 0);
    assert_eq!(
        report["allocs_after_restart"],
        report["allocs_before_restart"]
    );
}

/// An outside client's way: the user mix (a quarter spread over 25 racks
/// with a kernel-version constraint), one submitter, progress from the
/// job summaries, and the latency probe: a small job sent once the burst
/// is registered is placed too, and its figures are in the report.
#[test]
fn the_user_mix_followed_by_summaries_places_everything_and_the_probe() {
    let report = bench(&[
        "-preset",
        "ci",
        "-mix",
        "user",
        "-racks",
        "25",
        "-submitters",
        "1",
        "-progress",
        "summaries",
        "-probe",
        "-no-restart",
        "-timeout",
        "3m",
    ]);
    assert_eq!(report["expected_allocs"], 20_001, "the burst and the probe");
    assert_eq!(report["placed_allocs"], 20_001);
    assert_eq!(report["all_placed"], true);
    assert_eq!(report["overcommitted_nodes"], 0);
    assert_eq!(report["evals_complete"], 101);
    assert_eq!(report["evals_failed"], 0);
    let probe = &report["probe"];
    assert!(
        probe["placed_ms"].as_f64().is_some(),
        "the probe was placed: {report}"
    );
    assert!(report["probe_eval_ms"].as_f64().is_some(), "{report}");
}
