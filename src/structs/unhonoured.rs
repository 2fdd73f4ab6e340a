//! What a job asks for that herder keeps but does not yet do.
//!
//! A valid Nomad job must register on herder, so blocks herder has no
//! implementation for yet (templates, Vault, Consul Connect, gRPC checks,
//! CSI, devices, multiregion, mounting volumes) are accepted and stored as written. A
//! user must not believe they are in effect: every registration, plan and
//! validation answer names each one present in its `Warnings`, and the
//! README lists them. When one of them is implemented, its line goes.

use super::job::{Job, Task, TaskGroup, VolumeRequest};
use super::service::{check_type, Service};

/// One warning per unhonoured field present in `job`, naming where it is.
pub fn unhonoured_fields(job: &Job) -> Vec<String> {
    let mut out = Vec::new();
    if job.multiregion.is_some() {
        out.push(
            "Job: multiregion is not supported by herder; the job runs in its own region only"
                .into(),
        );
    }
    for tg in &job.task_groups {
        group_warnings(tg, &mut out);
        for task in &tg.tasks {
            task_warnings(tg, task, &mut out);
        }
    }
    out
}

fn group_warnings(tg: &TaskGroup, out: &mut Vec<String>) {
    let at = format!("Group {:?}", tg.name);
    service_warnings(&at, &tg.services, out);
    for (name, v) in &tg.volumes {
        if v.volume_type == VolumeRequest::CSI {
            out.push(format!(
                "{at}: CSI volume {name:?} is not supported by herder; it is kept but not claimed or mounted"
            ));
        } else {
            out.push(format!(
                "{at}: host volume {name:?} places the group on nodes that offer {:?}, but herder's drivers do not mount it",
                v.source
            ));
        }
    }
}

fn task_warnings(tg: &TaskGroup, task: &Task, out: &mut Vec<String>) {
    let at = format!("Group {:?}, task {:?}", tg.name, task.name);
    let kept =
        |what: &str| format!("{at}: {what} is not supported by herder yet; it is kept but ignored");
    if !task.templates.is_empty() {
        out.push(kept("template"));
    }
    if !task.artifacts.is_empty() {
        out.push(kept("artifact"));
    }
    if task.vault.is_some() {
        out.push(kept("vault"));
    }
    service_warnings(&at, &task.services, out);
    if task.csi_plugin_config.is_some() {
        out.push(kept("csi_plugin"));
    }
    if !task.volume_mounts.is_empty() {
        out.push(kept("volume_mount"));
    }
    if !task.resources.devices.is_empty() {
        out.push(kept("device"));
    }
}

/// Services are registered and their http, tcp and script checks run;
/// what is left of them is named here.
fn service_warnings(at: &str, services: &[Service], out: &mut Vec<String>) {
    for s in services {
        let at = format!("{at}, service {:?}", s.name);
        if s.check_restart.is_some() {
            out.push(format!(
                "{at}: check_restart is not supported by herder yet; it is kept but ignored"
            ));
        }
        if s.connect.is_some() {
            out.push(format!(
                "{at}: connect is not supported by herder; it is kept but no sidecar runs"
            ));
        }
        for c in &s.checks {
            if c.r#type == check_type::GRPC {
                out.push(format!(
                    "{at}: grpc check {:?} is not supported by herder yet; it is kept but not run",
                    c.name
                ));
            }
            if c.check_restart.is_some() {
                out.push(format!(
                    "{at}: check_restart of check {:?} is not supported by herder yet; it is kept but ignored",
                    c.name
                ));
            }
        }
    }
}

/// Nomad's way of listing several warnings in one string (go-multierror).
pub fn join_warnings(warnings: &[String]) -> String {
    match warnings {
        [] => String::new(),
        [one] => one.clone(),
        many => {
            let mut s = format!("{} warnings:\n", many.len());
            for w in many {
                s.push_str("\n* ");
                s.push_str(w);
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_unhonoured_field_is_named_where_it_is() {
        let job: Job = serde_json::from_value(json!({
            "ID": "web",
            "Multiregion": {"Strategy": {}},
            "TaskGroups": [{"Name": "g",
                "Volumes": {"data": {"Type": "host", "Source": "fast-disk"}},
                "Services": [{"Name": "web", "Connect": {"SidecarService": {}},
                    "Checks": [{"Name": "c", "Type": "grpc"}, {"Name": "h", "Type": "http"}]}],
                "Tasks": [{"Name": "t", "Driver": "raw_exec",
                    "Templates": [{"EmbeddedTmpl": "x"}],
                    "Artifacts": [{"GetterSource": "https://example.invalid/x"}],
                    "Vault": {"Policies": ["p"]},
                    "VolumeMounts": [{"Volume": "data", "Destination": "/data"}],
                    "Resources": {"Devices": [{"Name": "nvidia/gpu"}]}}]}]
        }))
        .unwrap();
        let w = unhonoured_fields(&job);
        for want in [
            "multiregion",
            "Group \"g\", service \"web\": connect",
            "Group \"g\", service \"web\": grpc check \"c\"",
            "host volume \"data\" places the group on nodes that offer \"fast-disk\"",
            "task \"t\": template",
            "task \"t\": artifact",
            "task \"t\": vault",
            "task \"t\": volume_mount",
            "task \"t\": device",
        ] {
            assert!(w.iter().any(|l| l.contains(want)), "{want:?} not in {w:#?}");
        }
        assert_eq!(w.len(), 9);
        let plain: Job = serde_json::from_value(json!({"ID": "x", "TaskGroups": [
            {"Name": "g", "Services": [{"Name": "s", "Checks": [{"Type": "http"}]}],
             "Tasks": [{"Name": "t", "Driver": "raw_exec",
                "Services": [{"Name": "u", "Checks": [{"Type": "script"}]}]}]}]}))
        .unwrap();
        assert!(unhonoured_fields(&plain).is_empty());
        assert_eq!(join_warnings(&[]), "");
        assert!(join_warnings(&w).starts_with("9 warnings:\n\n* "));
    }
}
