//! What a job asks for that herder keeps but does not yet do.
//!
//! A valid Nomad job must register on herder, so blocks herder has no
//! implementation for yet (Consul and Vault template functions, Vault, Consul Connect, gRPC checks,
//! CSI, devices, multiregion, mounting volumes) are accepted and stored as written. A
//! user must not believe they are in effect: every registration, plan and
//! validation answer names each one present in its `Warnings`, and the
//! README lists them. When one of them is implemented, its line goes.

use super::job::{Job, Task, TaskGroup, VolumeRequest};
use super::service::{check_type, Service};
use super::task_files::Template;

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
                "{at}: host volume {name:?} places the group on nodes that offer {:?}; only the exec driver mounts it",
                v.source
            ));
        }
    }
}

fn task_warnings(tg: &TaskGroup, task: &Task, out: &mut Vec<String>) {
    let at = format!("Group {:?}, task {:?}", tg.name, task.name);
    let kept =
        |what: &str| format!("{at}: {what} is not supported by herder yet; it is kept but ignored");
    template_warnings(&at, task, out);
    if task.vault.is_some() {
        out.push(kept("vault"));
    }
    service_warnings(&at, &task.services, out);
    if task.csi_plugin_config.is_some() {
        out.push(kept("csi_plugin"));
    }
    // The exec driver bind-mounts host volumes into its chroot.
    if !task.volume_mounts.is_empty() && task.driver != "exec" {
        out.push(format!(
            "{at}: volume_mount is mounted only by the exec driver; with {:?} it is kept but ignored",
            task.driver
        ));
    }
    if !task.resources.devices.is_empty() {
        out.push(kept("device"));
    }
}

/// Templates are rendered and artifacts fetched; what of them needs Consul,
/// Vault or a getter herder lacks is named here.
fn template_warnings(at: &str, task: &Task, out: &mut Vec<String>) {
    for (i, t) in task.templates.iter().enumerate() {
        let at = format!("{at}, template {}", i + 1);
        if let Some(f) = consul_or_vault_function(t) {
            out.push(format!(
                "{at}: function {f:?} needs Consul or Vault, which herder does not have; the task will fail to render it"
            ));
        }
        if !t.vault_grace.is_zero() {
            out.push(format!(
                "{at}: vault_grace is not supported by herder; it is kept but ignored"
            ));
        }
    }
    for (i, a) in task.artifacts.iter().enumerate() {
        let at = format!("{at}, artifact {}", i + 1);
        if !artifact_source_supported(&a.getter_source) {
            out.push(format!(
                "{at}: source {:?} is not supported by herder (http, https and file only); the task will fail to fetch it",
                a.getter_source
            ));
        }
        if a.chown {
            out.push(format!(
                "{at}: chown is not supported by herder; it is kept but ignored"
            ));
        }
    }
}

/// consul-template's functions that read Consul or Vault: warned about at
/// registration here, refused with a clear error by the client's template
/// engine.
pub const CONSUL_VAULT_FUNCTIONS: [&str; 16] = [
    "key",
    "keyExists",
    "keyOrDefault",
    "ls",
    "safeLs",
    "tree",
    "safeTree",
    "service",
    "services",
    "node",
    "nodes",
    "datacenters",
    "secret",
    "secrets",
    "caLeaf",
    "caRoots",
];

/// The first Consul or Vault function a template calls, by a word scan of
/// its actions (a template cannot hide a function call from it: names are
/// plain identifiers).
fn consul_or_vault_function(t: &Template) -> Option<&'static str> {
    let delim = |d: &'static str, set: &str| {
        if set.is_empty() {
            d.to_string()
        } else {
            set.to_string()
        }
    };
    let (left, right) = (delim("{{", &t.left_delim), delim("}}", &t.right_delim));
    t.embedded_tmpl
        .split(left.as_str())
        .skip(1)
        .find_map(|action| {
            let action = action.split(right.as_str()).next().unwrap_or("");
            action
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '"'))
                .find_map(|word| CONSUL_VAULT_FUNCTIONS.iter().find(|f| **f == word).copied())
        })
}

/// What the client's artifact fetcher handles: http(s) and local files,
/// with or without go-getter's `file::`/`http::` forcing prefix.
fn artifact_source_supported(source: &str) -> bool {
    let source = source
        .split_once("::")
        .filter(|(scheme, _)| matches!(*scheme, "http" | "https" | "file"))
        .map_or(source, |(_, rest)| rest);
    match source.split_once("://") {
        Some((scheme, _)) => matches!(scheme, "http" | "https" | "file"),
        None => source.starts_with('/') || source.starts_with("./") || !source.contains(':'),
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
        // herder's drivers share the host's network, so `driver` has no
        // address of its own to give (`alloc` is the host's, as in Nomad's
        // host network mode).
        let driver_mode = |what: String| {
            format!("{at}: {what} address_mode \"driver\" is not supported by herder (its drivers have no network of their own); the node's address is used")
        };
        if s.address_mode == "driver" {
            out.push(driver_mode("the service's".into()));
        }
        for c in &s.checks {
            if c.address_mode == "driver" {
                out.push(driver_mode(format!("check {:?}'s", c.name)));
            }
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
                    "Checks": [{"Name": "c", "Type": "grpc"}, {"Name": "h", "Type": "http", "AddressMode": "driver"}]}],
                "Tasks": [{"Name": "t", "Driver": "raw_exec",
                    "Templates": [{"EmbeddedTmpl": "x"}, {"EmbeddedTmpl": "{{ key \"a/b\" }}"}],
                    "Artifacts": [{"GetterSource": "https://example.invalid/x"},
                        {"GetterSource": "git::https://example.invalid/r"}],
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
            "task \"t\", template 2: function \"key\" needs Consul",
            "task \"t\", artifact 2: source \"git::https",
            "task \"t\": vault",
            "task \"t\": volume_mount",
            "task \"t\": device",
            "check \"h\"'s address_mode \"driver\" is not supported",
        ] {
            assert!(w.iter().any(|l| l.contains(want)), "{want:?} not in {w:#?}");
        }
        assert_eq!(w.len(), 10);
        let plain: Job = serde_json::from_value(json!({"ID": "x", "TaskGroups": [
            {"Name": "g", "Services": [{"Name": "s", "Checks": [{"Type": "http"}]}],
             "Tasks": [{"Name": "t", "Driver": "raw_exec",
                "Services": [{"Name": "u", "Checks": [{"Type": "script"}]}]}]}]}))
        .unwrap();
        assert!(unhonoured_fields(&plain).is_empty());
        assert_eq!(join_warnings(&[]), "");
        assert!(join_warnings(&w).starts_with("10 warnings:\n\n* "));
    }
}
