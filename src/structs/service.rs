//! A group's or task's `service` blocks and their `check`s, in Nomad's
//! shape, and the registrations the native service catalog holds.
//!
//! herder registers every service in its own catalog (Nomad's
//! `provider = "nomad"`) whatever its `Provider` says, since it has no
//! Consul to hand them to; the client runs `http`, `tcp` and `script`
//! checks itself. What herder keeps but does not act on (gRPC checks,
//! Connect, `check_restart`) is named by [`super::unhonoured`].

use super::serde_util::{nanos, null_default, nullable};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The provider Nomad 1.3+ fills in when a service names none.
pub const DEFAULT_PROVIDER: &str = "consul";
/// The provider herder implements natively (and uses for every service).
pub const NOMAD_PROVIDER: &str = "nomad";

/// A `service` block.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Service {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
    /// The task a group service belongs to (for script checks), or the
    /// task whose block this is.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub task_name: String,
    /// A port label of the group's network, or a number.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub port_label: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub address_mode: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub enable_tag_override: bool,
    #[serde(with = "nullable")]
    pub tags: Vec<String>,
    #[serde(with = "nullable")]
    pub canary_tags: Vec<String>,
    #[serde(with = "nullable")]
    pub checks: Vec<ServiceCheck>,
    /// Consul Connect: kept as written, not acted on.
    pub connect: Option<serde_json::Value>,
    /// The checks' default `check_restart`: kept as written, not acted on.
    pub check_restart: Option<serde_json::Value>,
    #[serde(with = "nullable")]
    pub meta: BTreeMap<String, String>,
    #[serde(with = "nullable")]
    pub canary_meta: BTreeMap<String, String>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub on_update: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub provider: String,
}

/// The check types herder knows, and the ones it runs.
pub mod check_type {
    pub const HTTP: &str = "http";
    pub const TCP: &str = "tcp";
    pub const SCRIPT: &str = "script";
    pub const GRPC: &str = "grpc";
    /// Every type a job may name.
    pub const KNOWN: [&str; 4] = [HTTP, TCP, SCRIPT, GRPC];
}

/// A service's `check` block.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ServiceCheck {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
    /// `http`, `tcp`, `script` or `grpc`.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub r#type: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub command: String,
    #[serde(with = "nullable")]
    pub args: Vec<String>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub path: String,
    /// `http` (default) or `https`.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub protocol: String,
    /// The port to check; the service's when empty.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub port_label: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub expose: bool,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub address_mode: String,
    #[serde(with = "nanos")]
    pub interval: Duration,
    #[serde(with = "nanos")]
    pub timeout: Duration,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub initial_status: String,
    #[serde(
        rename = "TLSSkipVerify",
        deserialize_with = "null_default::deserialize"
    )]
    pub tls_skip_verify: bool,
    /// GET when empty.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub method: String,
    #[serde(with = "nullable")]
    pub header: BTreeMap<String, Vec<String>>,
    /// Kept as written, not acted on.
    pub check_restart: Option<serde_json::Value>,
    #[serde(rename = "GRPCService", deserialize_with = "null_default::deserialize")]
    pub grpc_service: String,
    #[serde(rename = "GRPCUseTLS", deserialize_with = "null_default::deserialize")]
    pub grpc_use_tls: bool,
    /// The task a script check runs in.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub task_name: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub success_before_passing: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub failures_before_critical: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub body: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub on_update: String,
}

impl Service {
    /// Nomad's defaults: provider `consul`, address mode `auto`, and
    /// check names `service: "<name>" check` when left out.
    pub fn canonicalize(&mut self) {
        if self.provider.is_empty() {
            self.provider = DEFAULT_PROVIDER.into();
        }
        if self.address_mode.is_empty() {
            self.address_mode = "auto".into();
        }
        if self.on_update.is_empty() {
            self.on_update = "require_healthy".into();
        }
        for check in &mut self.checks {
            if check.name.is_empty() {
                check.name = format!("service: {:?} check", self.name);
            }
            if check.on_update.is_empty() {
                check.on_update = self.on_update.clone();
            }
        }
    }
}

impl ServiceCheck {
    /// Whether the client runs this check (grpc is kept, not run).
    pub fn is_run(&self) -> bool {
        matches!(
            self.r#type.as_str(),
            check_type::HTTP | check_type::TCP | check_type::SCRIPT
        )
    }

    /// Whether the check has a port to reach (http, tcp, grpc).
    pub fn needs_port(&self) -> bool {
        self.r#type != check_type::SCRIPT
    }
}

/// One service instance in the native catalog: an allocation's service
/// at the address and port it runs on (Nomad's `ServiceRegistration`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ServiceRegistration {
    /// `_nomad-task-<alloc>-<group|task>-<service>-<port label>`, as Nomad.
    #[serde(rename = "ID", deserialize_with = "null_default::deserialize")]
    pub id: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub service_name: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub namespace: String,
    #[serde(rename = "NodeID", deserialize_with = "null_default::deserialize")]
    pub node_id: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub datacenter: String,
    #[serde(rename = "JobID", deserialize_with = "null_default::deserialize")]
    pub job_id: String,
    #[serde(rename = "AllocID", deserialize_with = "null_default::deserialize")]
    pub alloc_id: String,
    #[serde(with = "nullable")]
    pub tags: Vec<String>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub address: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub port: i64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub create_index: u64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub modify_index: u64,
}

impl ServiceRegistration {
    /// Nomad's ID of an allocation's service instance.
    pub fn make_id(alloc_id: &str, owner: &str, service: &str, port_label: &str) -> String {
        format!("_nomad-task-{alloc_id}-{owner}-{service}-{port_label}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_service_reads_and_writes_nomads_json() {
        let v = json!({
            "Name": "web", "PortLabel": "http", "Tags": ["a"], "Provider": "nomad",
            "Checks": [{"Name": "alive", "Type": "http", "Path": "/", "Interval": 10_000_000_000u64,
                "Timeout": 2_000_000_000u64, "Header": {"X": ["1"]}, "TLSSkipVerify": true,
                "GRPCService": "g"}]
        });
        let s: Service = serde_json::from_value(v).unwrap();
        assert_eq!(s.checks[0].interval, Duration::from_secs(10));
        assert_eq!(s.checks[0].header["X"], vec!["1".to_string()]);
        let back = serde_json::to_value(&s).unwrap();
        assert_eq!(back["Checks"][0]["TLSSkipVerify"], json!(true));
        assert_eq!(back["Checks"][0]["GRPCService"], json!("g"));
        assert_eq!(back["CanaryTags"], json!(null));
        let again: Service = serde_json::from_value(back).unwrap();
        assert_eq!(again, s);
    }

    #[test]
    fn canonicalize_names_checks_and_fills_the_provider() {
        let mut s = Service {
            name: "web".into(),
            checks: vec![ServiceCheck::default()],
            ..Default::default()
        };
        s.canonicalize();
        assert_eq!(s.provider, "consul");
        assert_eq!(s.checks[0].name, "service: \"web\" check");
    }
}
