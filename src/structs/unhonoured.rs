//! What a job asks for that herder keeps but does not yet do.
//!
//! A valid Nomad job must register on herder, so blocks herder has no
//! implementation for yet (templates, Vault, Consul services, CSI, devices,
//! multiregion, mounting volumes) are accepted and stored as written. A
//! user must not believe they are in effect: every registration, plan and
//! validation answer names each one present in its `Warnings`, and the
//! README lists them. When one of them is implemented, its line goes.

use super::job::{Job, Task, TaskGroup, VolumeRequest};

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
    if !tg.services.is_empty() {
        out.push(format!(
            "{at}: service is not supported by herder yet; it is kept but not registered"
        ));
    }
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
    if !task.services.is_empty() {
        out.push(format!(
            "{at}: service is not supported by herder yet; it is kept but not registered"
        ));
    }
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
                "Services": [{"Name": "web"}],
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
            "Group \"g\": service",
            "host volume \"data\" places the group on nodes that offer \"fast-disk\"",
            "task \"t\": template",
            "task \"t\": artifact",
            "task \"t\": vault",
            "task \"t\": volume_mount",
            "task \"t\": device",
        ] {
            assert!(w.iter().any(|l| l.contains(want)), "{want:?} not in {w:#?}");
        }
        assert_eq!(w.len(), 8);
        let plain: Job = serde_json::from_value(json!({"ID": "x", "TaskGroups": [
            {"Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec"}]}]}))
        .unwrap();
        assert!(unhonoured_fields(&plain).is_empty());
        assert_eq!(join_warnings(&[]), "");
        assert!(join_warnings(&w).starts_with("8 warnings:\n\n* "));
    }
}
