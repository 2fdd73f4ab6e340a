//! `service` and `check` blocks (of a group or a task) onto
//! [`Service`] and [`ServiceCheck`], Nomad's HCL names mapped onto its
//! JSON fields (`port` is `PortLabel`, `task` is `TaskName`).
//!
//! `connect` and `check_restart` are kept as their free-form objects so
//! that the registration answer can warn that they are not acted on.

use super::body::{BodyReader, Schema};
use super::describe::kind_of;
use super::JobspecError;
use crate::structs::{Service, ServiceCheck};
use serde_json::Value;
use std::collections::BTreeMap;

const SERVICE: Schema = Schema {
    attributes: &[
        "name",
        "port",
        "tags",
        "canary_tags",
        "enable_tag_override",
        "address_mode",
        "task",
        "meta",
        "canary_meta",
        "on_update",
        "provider",
    ],
    blocks: &["check", "meta", "canary_meta", "connect", "check_restart"],
    ignored: &["address", "tagged_addresses", "identity", "cluster"],
};

const CHECK: Schema = Schema {
    attributes: &[
        "name",
        "type",
        "command",
        "args",
        "path",
        "protocol",
        "port",
        "expose",
        "address_mode",
        "interval",
        "timeout",
        "initial_status",
        "tls_skip_verify",
        "method",
        "grpc_service",
        "grpc_use_tls",
        "task",
        "success_before_passing",
        "failures_before_critical",
        "body",
        "on_update",
    ],
    blocks: &["header", "check_restart"],
    ignored: &["tls_server_name", "notes"],
};

/// Every `service` block of a group's or task's body.
pub(super) fn services(r: &BodyReader) -> Result<Vec<Service>, JobspecError> {
    let mut out = Vec::new();
    for block in r.blocks("service") {
        let (s, _) = r.child(block, 0, "")?;
        out.push(service(&s)?);
    }
    Ok(out)
}

fn service(r: &BodyReader) -> Result<Service, JobspecError> {
    r.check(&SERVICE)?;
    let mut s = Service {
        name: r.string("name")?.unwrap_or_default(),
        port_label: r.string("port")?.unwrap_or_default(),
        tags: r.strings("tags")?.unwrap_or_default(),
        canary_tags: r.strings("canary_tags")?.unwrap_or_default(),
        enable_tag_override: r.bool("enable_tag_override")?.unwrap_or_default(),
        address_mode: r.string("address_mode")?.unwrap_or_default(),
        task_name: r.string("task")?.unwrap_or_default(),
        meta: r.string_map("meta")?,
        canary_meta: r.string_map("canary_meta")?,
        on_update: r.string("on_update")?.unwrap_or_default(),
        provider: r.string("provider")?.unwrap_or_default(),
        connect: free_form_block(r, "connect")?,
        ..Service::default()
    };
    // A service's `check_restart` is its checks' default, as in Nomad.
    let restart = free_form_block(r, "check_restart")?;
    s.check_restart.clone_from(&restart);
    for block in r.blocks("check") {
        let (c, _) = r.child(block, 0, "")?;
        let mut check = check(&c)?;
        if check.check_restart.is_none() {
            check.check_restart.clone_from(&restart);
        }
        s.checks.push(check);
    }
    Ok(s)
}

fn check(r: &BodyReader) -> Result<ServiceCheck, JobspecError> {
    r.check(&CHECK)?;
    Ok(ServiceCheck {
        name: r.string("name")?.unwrap_or_default(),
        r#type: r.string("type")?.unwrap_or_default(),
        command: r.string("command")?.unwrap_or_default(),
        args: r.strings("args")?.unwrap_or_default(),
        path: r.string("path")?.unwrap_or_default(),
        protocol: r.string("protocol")?.unwrap_or_default(),
        port_label: r.string("port")?.unwrap_or_default(),
        expose: r.bool("expose")?.unwrap_or_default(),
        address_mode: r.string("address_mode")?.unwrap_or_default(),
        interval: r.duration("interval")?.unwrap_or_default(),
        timeout: r.duration("timeout")?.unwrap_or_default(),
        initial_status: r.string("initial_status")?.unwrap_or_default(),
        tls_skip_verify: r.bool("tls_skip_verify")?.unwrap_or_default(),
        method: r.string("method")?.unwrap_or_default(),
        header: header(r)?,
        check_restart: free_form_block(r, "check_restart")?,
        grpc_service: r.string("grpc_service")?.unwrap_or_default(),
        grpc_use_tls: r.bool("grpc_use_tls")?.unwrap_or_default(),
        task_name: r.string("task")?.unwrap_or_default(),
        success_before_passing: r.int("success_before_passing")?.unwrap_or_default(),
        failures_before_critical: r.int("failures_before_critical")?.unwrap_or_default(),
        body: r.string("body")?.unwrap_or_default(),
        on_update: r.string("on_update")?.unwrap_or_default(),
    })
}

/// A block kept as written (its free-form object), or `None`.
fn free_form_block(r: &BodyReader, name: &str) -> Result<Option<Value>, JobspecError> {
    let Some(b) = r.single_child(name)? else {
        return Ok(None);
    };
    Ok(Some(Value::Object(b.free_form()?)))
}

/// `header { Authorization = ["Basic x"] }`: names to lists of values.
fn header(r: &BodyReader) -> Result<BTreeMap<String, Vec<String>>, JobspecError> {
    let Some(h) = r.single_child("header")? else {
        return Ok(BTreeMap::new());
    };
    let mut out = BTreeMap::new();
    for (name, value) in h.free_form()? {
        let values = match &value {
            Value::Array(items) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>(),
            _ => None,
        };
        let Some(values) = values else {
            return Err(h.src.error(
                h.at.clone(),
                format!(
                    "header {name:?} in {} must be a list of strings, got {}",
                    h.place,
                    kind_of(&value)
                ),
            ));
        };
        out.insert(name, values);
    }
    Ok(out)
}
