//! What a simulated node does with an allocation: the mock driver's
//! semantics reduced to one outcome per allocation, with nothing run.
//!
//! The servers send each allocation with its whole job; a simulated node
//! only needs the task group's tasks and their `mock_driver` config, so it
//! reads a narrow view of the JSON (serde skips the rest without building
//! it).
//!
//! A simulated allocation of a service job reports its health with its
//! first status, as a real client does once the deployment's `update` (or
//! the group's `migrate`) checks pass: healthy as soon as it runs,
//! unhealthy when it cannot start. The simulation skips `min_healthy_time`
//! (nothing runs, so there is nothing to wait for), which lets deployments
//! and drains progress in `herder sim` and `herder bench`.

use herder::state::AllocClientUpdate;
use herder::structs::{
    AllocDeploymentStatus, AllocId, ClientStatus, DesiredStatus, TaskState, VecMap,
};
use herder_client::driver::mock::{MockConfig, NAME as MOCK_DRIVER};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The parts of an allocation (as `GET /v1/node/:id/allocations` sends it)
/// a simulated node reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AllocView {
    #[serde(rename = "ID")]
    pub id: AllocId,
    #[serde(default)]
    pub desired_status: DesiredStatus,
    #[serde(default)]
    pub client_status: ClientStatus,
    #[serde(default)]
    pub task_group: String,
    #[serde(default, rename = "DeploymentID")]
    pub deployment_id: Option<String>,
    #[serde(default)]
    pub job: Option<JobView>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobView {
    #[serde(rename = "Type")]
    pub job_type: Option<String>,
    pub task_groups: Option<Vec<GroupView>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct GroupView {
    pub name: String,
    pub update: Option<UpdateView>,
    pub tasks: Option<Vec<TaskView>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct UpdateView {
    pub health_check: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskView {
    pub name: String,
    pub driver: String,
    pub config: Option<BTreeMap<String, serde_json::Value>>,
}

/// How an allocation will go on a simulated node.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A task cannot start (`start_error`, bad config, another driver): the
    /// allocation fails at once.
    FailsToStart(String),
    /// Every task has a `run_for`: the allocation ends after the longest,
    /// failed when a task exits non-zero.
    RunsFor { duration: Duration, failed: bool },
    /// A task without `run_for` keeps running until the servers stop it.
    RunsUntilStopped,
}

impl AllocView {
    /// The task names of the allocation's group, in job order.
    pub fn task_names(&self) -> Vec<String> {
        self.group()
            .and_then(|g| g.tasks.as_ref())
            .map(|tasks| tasks.iter().map(|t| t.name.clone()).collect())
            .unwrap_or_default()
    }

    /// Whether its client decides its health: a service job's (Nomad's
    /// client watches the health of service allocations only), unless a
    /// deployment leaves it to a user (`health_check = "manual"`).
    pub fn reports_health(&self) -> bool {
        let service = self
            .job
            .as_ref()
            .and_then(|j| j.job_type.as_deref())
            .is_some_and(|t| t == "service");
        let manual = self
            .group()
            .and_then(|g| g.update.as_ref())
            .and_then(|u| u.health_check.as_deref())
            .is_some_and(|h| h == "manual");
        let in_deployment = self.deployment_id.as_deref().is_some_and(|d| !d.is_empty());
        service && !(in_deployment && manual)
    }

    fn group(&self) -> Option<&GroupView> {
        self.job
            .as_ref()?
            .task_groups
            .as_ref()?
            .iter()
            .find(|g| g.name == self.task_group)
    }

    /// What running the group with the mock driver would do.
    pub fn outcome(&self) -> Outcome {
        let Some(tasks) = self.group().and_then(|g| g.tasks.as_ref()) else {
            return Outcome::FailsToStart(format!(
                "task group {:?} not found in the allocation's job",
                self.task_group
            ));
        };
        let mut longest = Duration::ZERO;
        let mut forever = false;
        let mut failed = false;
        for task in tasks {
            if task.driver != MOCK_DRIVER {
                return Outcome::FailsToStart(format!(
                    "task {:?}: driver {:?} is not available on a simulated node",
                    task.name, task.driver
                ));
            }
            let config = match MockConfig::parse(task.config.as_ref().unwrap_or(&BTreeMap::new())) {
                Ok(c) => c,
                Err(e) => return Outcome::FailsToStart(format!("task {:?}: {e}", task.name)),
            };
            if !config.start_error.is_empty() {
                return Outcome::FailsToStart(format!(
                    "task {:?}: {}",
                    task.name, config.start_error
                ));
            }
            if config.run_for.is_zero() {
                forever = true;
            }
            longest = longest.max(config.run_for);
            failed |= config.exit_code != 0 || config.exit_signal != 0;
        }
        if forever {
            Outcome::RunsUntilStopped
        } else {
            Outcome::RunsFor {
                duration: longest,
                failed,
            }
        }
    }
}

/// The report of an allocation whose tasks are all in `state` ("running"
/// or "dead"); `failed` marks dead tasks as failed.
pub fn report(
    id: AllocId,
    tasks: &[String],
    status: ClientStatus,
    description: &str,
    started_at: i64,
) -> AllocClientUpdate {
    let now = herder_client::now_nanos();
    let running = status == ClientStatus::Running;
    let mut task_states = VecMap::new();
    for name in tasks {
        task_states.insert(
            name.clone(),
            TaskState {
                state: if running { "running" } else { "dead" }.to_string(),
                failed: status == ClientStatus::Failed,
                started_at: (started_at > 0).then_some(started_at),
                finished_at: (!running).then_some(now),
                ..Default::default()
            },
        );
    }
    AllocClientUpdate {
        id,
        client_status: status,
        client_description: description.to_string(),
        task_states,
        node_failure: false,
        modify_time: now,
        deployment_status: None,
    }
}

/// `update` with the allocation's health decided now.
pub fn with_health(mut update: AllocClientUpdate, healthy: bool) -> AllocClientUpdate {
    update.deployment_status = Some(AllocDeploymentStatus {
        healthy: Some(healthy),
        timestamp: Some(update.modify_time),
        ..Default::default()
    });
    update
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alloc(tasks: serde_json::Value) -> AllocView {
        serde_json::from_value(json!({
            "ID": "0b5f3d2e-54f5-4d0e-9a43-f3c6b1e1d001",
            "DesiredStatus": "run",
            "ClientStatus": "pending",
            "TaskGroup": "g",
            "Job": {"ID": "j", "TaskGroups": [
                {"Name": "other", "Tasks": [{"Name": "x", "Driver": "raw_exec"}]},
                {"Name": "g", "Tasks": tasks},
            ]},
            "AllocatedResources": {"Tasks": {}},
        }))
        .unwrap()
    }

    #[test]
    fn run_for_completes_or_fails_on_the_exit_code() {
        let ok = alloc(json!([
            {"Name": "a", "Driver": "mock_driver", "Config": {"run_for": "100ms"}},
            {"Name": "b", "Driver": "mock_driver", "Config": {"run_for": "2s"}},
        ]));
        assert_eq!(
            ok.outcome(),
            Outcome::RunsFor {
                duration: Duration::from_secs(2),
                failed: false
            }
        );
        assert_eq!(ok.task_names(), vec!["a", "b"]);
        let bad = alloc(json!([
            {"Name": "a", "Driver": "mock_driver", "Config": {"run_for": "1s", "exit_code": 3}},
        ]));
        assert_eq!(
            bad.outcome(),
            Outcome::RunsFor {
                duration: Duration::from_secs(1),
                failed: true
            }
        );
    }

    #[test]
    fn start_errors_other_drivers_and_endless_tasks() {
        let start = alloc(json!([
            {"Name": "a", "Driver": "mock_driver", "Config": {"start_error": "boom"}},
        ]));
        assert!(matches!(start.outcome(), Outcome::FailsToStart(m) if m.contains("boom")));
        let raw = alloc(json!([{"Name": "a", "Driver": "raw_exec", "Config": null}]));
        assert!(matches!(raw.outcome(), Outcome::FailsToStart(m) if m.contains("raw_exec")));
        let endless = alloc(json!([
            {"Name": "a", "Driver": "mock_driver", "Config": {"run_for": "1s"}},
            {"Name": "b", "Driver": "mock_driver"},
        ]));
        assert_eq!(endless.outcome(), Outcome::RunsUntilStopped);
    }

    #[test]
    fn a_report_marks_every_task() {
        let a = alloc(json!([{"Name": "a", "Driver": "mock_driver"}]));
        let r = report(a.id, &a.task_names(), ClientStatus::Failed, "x", 5);
        let state = r.task_states.get("a").unwrap();
        assert_eq!(
            (state.state.as_str(), state.failed, state.started_at),
            ("dead", true, Some(5))
        );
        assert!(state.finished_at.is_some());
    }

    #[test]
    fn a_service_allocation_reports_its_health_a_batch_one_does_not() {
        let mut a = alloc(json!([{"Name": "a", "Driver": "mock_driver"}]));
        assert!(!a.reports_health(), "no job type: not a service");
        a.job.as_mut().unwrap().job_type = Some("service".into());
        assert!(a.reports_health());
        let r = report(a.id, &a.task_names(), ClientStatus::Running, "up", 5);
        let r = with_health(r, true);
        let status = r.deployment_status.unwrap();
        assert_eq!(status.healthy, Some(true));
        assert_eq!(status.timestamp, Some(r.modify_time));
        a.deployment_id = Some("0b5f3d2e-54f5-4d0e-9a43-f3c6b1e1d002".into());
        a.job.as_mut().unwrap().task_groups.as_mut().unwrap()[1].update = Some(UpdateView {
            health_check: Some("manual".into()),
        });
        assert!(!a.reports_health(), "manual health is a user's to set");
        a.deployment_id = None;
        assert!(
            a.reports_health(),
            "outside a deployment: the migrate block"
        );
        a.job.as_mut().unwrap().job_type = Some("batch".into());
        assert!(!a.reports_health());
    }
}
