//! The jobs the load generator submits: a mix of service and batch jobs on
//! the mock driver, some with constraints (datacenter, node class, kernel)
//! and some spread over racks, each asking a known amount of CPU and
//! memory so the generator can check afterwards that no node holds more
//! than it has.

use serde_json::{json, Value};

/// What every task asks.
pub const TASK_CPU_MHZ: i64 = 100;
pub const TASK_MEMORY_MB: i64 = 256;

/// The shape of the cluster the jobs are written for.
#[derive(Clone, Debug)]
pub struct ClusterShape {
    pub datacenters: Vec<String>,
    pub classes: Vec<String>,
    pub racks: usize,
}

/// Job `index` of the mixed workload, as the JSON body of `PUT /v1/jobs`.
///
/// Seven in ten are services, the rest batch. By `index % 5`: no
/// constraint; a kernel constraint every node meets; a node-class
/// constraint (one class of the shape); a spread over racks; or the last
/// datacenter only.
pub fn mixed_job(index: usize, count: usize, shape: &ClusterShape) -> Value {
    let id = format!("bench-{index:05}");
    let job_type = if index % 10 < 7 { "service" } else { "batch" };
    let mut datacenters: Vec<String> = shape.datacenters.clone();
    let mut constraints = Vec::new();
    let mut spreads = Vec::new();
    match index % 5 {
        1 => constraints.push(json!({
            "LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="
        })),
        2 if !shape.classes.is_empty() => constraints.push(json!({
            "LTarget": "${node.class}",
            "RTarget": shape.classes[index % shape.classes.len()],
            "Operand": "="
        })),
        3 if shape.racks > 0 => spreads.push(json!({
            "Attribute": "${meta.rack}", "Weight": 50, "SpreadTarget": null
        })),
        4 if shape.datacenters.len() > 1 => {
            datacenters = vec![shape.datacenters[shape.datacenters.len() - 1].clone()];
        }
        _ => {}
    }
    job_body(&id, job_type, &datacenters, count, constraints, spreads)
}

/// Job `index` of the user mix, the shape of an outside load generator's
/// workload (issue 23): seven in ten services, the rest batch, and every
/// fourth job spread over `${meta.rack}` with a kernel-version
/// constraint every node meets.
pub fn user_job(index: usize, count: usize, shape: &ClusterShape) -> Value {
    let id = format!("bench-{index:05}");
    let job_type = if index % 10 < 7 { "service" } else { "batch" };
    let (constraints, spreads) = if index.is_multiple_of(4) && shape.racks > 0 {
        (
            vec![json!({
                "LTarget": "${attr.kernel.version}", "RTarget": ">= 5.4", "Operand": "version"
            })],
            vec![json!({"Attribute": "${meta.rack}", "Weight": 50, "SpreadTarget": null})],
        )
    } else {
        (vec![], vec![])
    };
    job_body(
        &id,
        job_type,
        &shape.datacenters,
        count,
        constraints,
        spreads,
    )
}

/// The latency probe's job: one service allocation anywhere, no
/// constraint, the default priority (the burst's).
pub fn probe_job(id: &str, datacenters: &[String]) -> Value {
    job_body(id, "service", datacenters, 1, vec![], vec![])
}

/// One system job, for the fan-out scenario: an allocation on every node.
pub fn system_job(id: &str, datacenters: &[String]) -> Value {
    job_body(id, "system", datacenters, 1, vec![], vec![])
}

fn job_body(
    id: &str,
    job_type: &str,
    datacenters: &[String],
    count: usize,
    constraints: Vec<Value>,
    spreads: Vec<Value>,
) -> Value {
    // Batch work would finish on a real client; the simulated nodes of a
    // placement benchmark run nothing, so the duration only matters when
    // they do.
    let run_for = if job_type == "batch" { "30s" } else { "" };
    let mut config = json!({});
    if !run_for.is_empty() {
        config["run_for"] = json!(run_for);
    }
    json!({
        "Job": {
            "ID": id,
            "Name": id,
            "Type": job_type,
            "Datacenters": datacenters,
            "Constraints": constraints,
            "Spreads": spreads,
            "TaskGroups": [{
                "Name": "g",
                "Count": count,
                "EphemeralDisk": {"SizeMB": 10},
                "Tasks": [{
                    "Name": "t",
                    "Driver": "mock_driver",
                    "Config": config,
                    "Resources": {"CPU": TASK_CPU_MHZ, "MemoryMB": TASK_MEMORY_MB}
                }]
            }]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use herder::jobspec;

    fn shape() -> ClusterShape {
        ClusterShape {
            datacenters: vec!["dc1".into(), "dc2".into()],
            classes: vec!["small".into(), "large".into()],
            racks: 4,
        }
    }

    #[test]
    fn every_fourth_user_job_spreads_with_a_kernel_constraint_the_sim_meets() {
        let node = &herder_sim::build_nodes(&herder_sim::SimConfig {
            count: 1,
            racks: 4,
            ..herder_sim::SimConfig::default()
        })[0];
        let kernel = node
            .attributes
            .get("kernel.version")
            .expect("fingerprinted");
        for i in 0..8 {
            let job = jobspec::parse_json(&user_job(i, 3, &shape()).to_string()).expect("parses");
            job.validate().expect("valid");
            assert_eq!(
                job.spreads.len(),
                usize::from(i.is_multiple_of(4)),
                "job {i}"
            );
            for c in &job.constraints {
                let spec = herder::structs::version::VersionConstraint::parse(&c.r_target, false)
                    .expect("a version constraint");
                assert!(spec.matches(kernel), "{kernel} meets {}", c.r_target);
            }
        }
    }

    #[test]
    fn every_generated_job_is_valid_and_the_mix_has_each_kind() {
        let mut kinds = std::collections::BTreeSet::new();
        for i in 0..20 {
            let body = mixed_job(i, 7, &shape());
            let job = jobspec::parse_json(&body.to_string()).expect("parses");
            job.validate().expect("valid");
            assert_eq!(job.task_groups[0].count, 7);
            kinds.insert(format!("{:?}", job.job_type));
            if i % 5 == 3 {
                assert_eq!(job.spreads.len(), 1);
            }
            if i % 5 == 4 {
                assert_eq!(job.datacenters, vec!["dc2".to_string()]);
            }
        }
        assert_eq!(kinds.len(), 2, "services and batch jobs: {kinds:?}");
        let system = jobspec::parse_json(&system_job("fan", &["dc1".into()]).to_string())
            .expect("system job parses");
        system.validate().expect("valid");
    }
}
