//! The policy language and the compiled ACL, on Nomad's documented
//! examples.

use super::capability::{Capability::*, Level};
use super::compiled::glob_matches;
use super::*;

fn acl_of(rules: &[&str]) -> Acl {
    let policies: Vec<Policy> = rules
        .iter()
        .map(|r| parse_policy(r).unwrap_or_else(|e| panic!("{r}: {e}")))
        .collect();
    Acl::compile(&policies)
}

#[test]
fn read_shorthand_expands_to_read_capabilities_only() {
    let acl = acl_of(&[r#"namespace "default" { policy = "read" }
node { policy = "read" }"#]);
    assert!(acl.allow_namespace_op("default", ReadJob));
    assert!(acl.allow_namespace_op("default", ListJobs));
    assert!(!acl.allow_namespace_op("default", SubmitJob));
    assert!(!acl.allow_namespace_op("other", ReadJob));
    assert!(acl.allow_node_read());
    assert!(!acl.allow_node_write());
    assert!(!acl.allow_agent_read());
    assert!(!acl.is_management());
}

#[test]
fn write_shorthand_and_extra_capabilities_add_up() {
    let acl = acl_of(&[r#"
namespace "default" {
  policy = "read"
  capabilities = ["submit-job", "read-logs"]
}
namespace "prod" { policy = "write" }
agent { policy = "write" }
operator { policy = "read" }"#]);
    assert!(acl.allow_namespace_op("default", SubmitJob));
    assert!(acl.allow_namespace_op("default", ReadLogs));
    assert!(!acl.allow_namespace_op("default", AllocExec));
    assert!(acl.allow_namespace_op("prod", AllocExec));
    assert!(acl.allow_namespace_op("prod", ScaleJob));
    assert!(acl.allow_agent_write() && acl.allow_agent_read());
    assert!(acl.allow_operator_read() && !acl.allow_operator_write());
}

#[test]
fn scale_shorthand_grants_scaling_only() {
    let acl = acl_of(&[r#"namespace "default" { policy = "scale" }"#]);
    assert!(acl.allow_namespace_op("default", ScaleJob));
    assert!(acl.allow_namespace_op("default", ReadJobScaling));
    assert!(!acl.allow_namespace_op("default", ReadJob));
}

#[test]
fn deny_in_any_policy_wins() {
    let acl = acl_of(&[
        r#"namespace "default" { policy = "write" }
node { policy = "write" }"#,
        r#"namespace "default" { policy = "deny" }
node { policy = "deny" }"#,
    ]);
    assert!(!acl.allow_namespace_op("default", ReadJob));
    assert!(!acl.allow_namespace("default"));
    assert!(!acl.allow_node_read());
}

#[test]
fn most_privilege_wins_between_policies() {
    let acl = acl_of(&[
        r#"node { policy = "read" }"#,
        r#"node { policy = "write" }"#,
    ]);
    assert!(acl.allow_node_write());
}

#[test]
fn the_closest_glob_decides() {
    let acl = acl_of(&[r#"
namespace "*" { policy = "read" }
namespace "prod-*" { policy = "write" }
namespace "prod-api-*" { policy = "deny" }
namespace "dev" { policy = "deny" }"#]);
    assert!(acl.allow_namespace_op("anything", ReadJob));
    assert!(!acl.allow_namespace_op("anything", SubmitJob));
    assert!(acl.allow_namespace_op("prod-web", SubmitJob));
    assert!(!acl.allow_namespace_op("prod-api-1", ReadJob));
    assert!(!acl.allow_namespace_op("dev", ReadJob), "exact beats glob");
}

#[test]
fn globs_match_like_nomads() {
    assert!(glob_matches("*", ""));
    assert!(glob_matches("*", "abc"));
    assert!(glob_matches("a*c", "abbc"));
    assert!(glob_matches("a*c", "ac"));
    assert!(!glob_matches("a*c", "ab"));
    assert!(glob_matches("*-prod", "web-prod"));
    assert!(!glob_matches("*-prod", "web-prod2"));
    assert!(glob_matches("a*b*c", "a-b-c"));
    assert!(!glob_matches("abc", "abcd"));
}

#[test]
fn management_allows_everything() {
    let acl = Acl::management();
    assert!(acl.allow_namespace_op("x", AllocExec));
    assert!(acl.allow_operator_write() && acl.allow_node_write() && acl.allow_agent_write());
    assert!(!Acl::deny_all().allow_namespace("default"));
}

#[test]
fn json_rules_read_like_hcl() {
    let json = r#"{"namespace": {"default": {"policy": "write"}, "ops": [{"capabilities": ["read-job"]}]},
                   "node": {"policy": "read"}}"#;
    let hcl = r#"namespace "default" { policy = "write" }
namespace "ops" { capabilities = ["read-job"] }
node { policy = "read" }"#;
    let (from_json, from_hcl) = (parse_policy(json), parse_policy(hcl));
    assert_eq!(from_json, from_hcl);
    let policy = from_json.expect("valid");
    assert_eq!(policy.node, Some(Level::Read));
    assert_eq!(policy.namespaces.len(), 2);
}

#[test]
fn mistakes_are_refused_with_nomads_messages() {
    let cases = [
        (
            r#"namespace "default" { policy = "admin" }"#,
            "Invalid namespace policy",
        ),
        (
            r#"namespace "default" { capabilities = ["fly"] }"#,
            "Invalid namespace capability 'fly'",
        ),
        (
            r#"namespace "bad name" { policy = "read" }"#,
            "Invalid namespace name",
        ),
        (r#"node { policy = "scale" }"#, "Invalid node policy"),
        (r#"agent { policy = "list" }"#, "Invalid agent policy"),
        (r#"operator { }"#, "Invalid operator policy"),
        (r#"nodes { policy = "read" }"#, "Failed to parse ACL Policy"),
        (
            r#"namespace "default" { policy = "#,
            "Failed to parse ACL Policy",
        ),
        ("# nothing", "Invalid policy"),
    ];
    for (rules, message) in cases {
        match parse_policy(rules) {
            Ok(p) => panic!("{rules:?} accepted: {p:?}"),
            Err(e) => assert!(e.to_string().starts_with(message), "{rules:?}: {e}"),
        }
    }
}

#[test]
fn empty_rules_grant_nothing_as_in_nomad() {
    let acl = Acl::compile([&parse_policy("").expect("empty rules are a policy")]);
    assert!(!acl.allow_namespace("default") && !acl.allow_node_read());
}

#[test]
fn hostile_rules_are_bounded() {
    let long = format!("# {}", "x".repeat(MAX_RULES_BYTES));
    assert_eq!(parse_policy(&long), Err(PolicyError::TooLong(long.len())));
    let deep = format!(
        "namespace \"a\" {{ policy = {}\"read\"{} }}",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    assert!(matches!(parse_policy(&deep), Err(PolicyError::Parse(_))));
}

#[test]
fn plugin_quota_and_host_volume_blocks_are_accepted() {
    let policy = parse_policy(
        r#"plugin { policy = "list" }
quota { policy = "read" }
host_volume "ca-*" { policy = "write" }
namespace "default" {
  policy = "read"
  variables {
    path "*" {
      capabilities = ["read"]
    }
  }
}"#,
    )
    .expect("valid");
    assert_eq!(policy.plugin, Some(Level::List));
    assert_eq!(policy.host_volumes.len(), 1);
    let acl = Acl::compile([&policy]);
    assert!(acl.allow_quota_read());
    assert!(!acl.allow_plugin_read());
}

mod variables {
    use super::acl_of;
    use crate::acl::variables::{workload_may_read, WorkloadClaim};
    use crate::acl::{parse_policy, PolicyError, VariableOp::*};

    /// A policy with one variable path rule in one namespace.
    fn vars(namespace: &str, path: &str, capabilities: &str) -> String {
        format!(
            "namespace \"{namespace}\" {{\n  variables {{\n    path \"{path}\" {{\n      capabilities = {capabilities}\n    }}\n  }}\n}}"
        )
    }

    #[test]
    fn a_path_rule_grants_its_capabilities_and_read_brings_list() {
        let acl = acl_of(&[r#"namespace "ns" {
  variables {
    path "foo/bar" { capabilities = ["read"] }
  }
}"#]);
        assert!(acl.allow_variable_op("ns", "foo/bar", Read));
        assert!(acl.allow_variable_op("ns", "foo/bar", List));
        assert!(!acl.allow_variable_op("ns", "foo/bar", Write));
        assert!(!acl.allow_variable_op("ns", "foo/bar", Destroy));
        assert!(!acl.allow_variable_op("ns", "foo/baz", Read));
        assert!(!acl.allow_variable_op("ns-other", "foo/bar", Read));
        // Variable rules grant nothing on jobs.
        assert!(!acl.allow_namespace_op("ns", super::ReadJob));
    }

    #[test]
    fn the_longest_matching_glob_wins_and_deny_wins_within_a_rule() {
        let acl = acl_of(&[r#"namespace "ns" {
  variables {
    path "*"          { capabilities = ["list"] }
    path "foo/*"      { capabilities = ["read", "write"] }
    path "foo/priv/*" { capabilities = ["deny"] }
  }
}"#]);
        assert!(acl.allow_variable_op("ns", "bar", List));
        assert!(!acl.allow_variable_op("ns", "bar", Read));
        assert!(acl.allow_variable_op("ns", "foo/bar", Read));
        assert!(acl.allow_variable_op("ns", "foo/bar", Write));
        assert!(!acl.allow_variable_op("ns", "foo/priv/key", Read));
        assert!(!acl.allow_variable_op("ns", "foo/priv/key", List));
        // A second policy granting the same path cannot lift a deny.
        let acl = acl_of(&[
            vars("ns", "x", r#"["deny", "read"]"#).as_str(),
            vars("ns", "x", r#"["write"]"#).as_str(),
        ]);
        assert!(!acl.allow_variable_op("ns", "x", Read));
        assert!(!acl.allow_variable_op("ns", "x", Write));
    }

    #[test]
    fn namespace_globs_and_shorthands_cover_variables() {
        let acl = acl_of(&[
            vars("prod-*", "app/*", r#"["write"]"#).as_str(),
            r#"namespace "default" { policy = "read" }"#,
            r#"namespace "dev" { policy = "write" }"#,
            r#"namespace "ops" { policy = "deny" }"#,
        ]);
        assert!(acl.allow_variable_op("prod-eu", "app/db", Write));
        assert!(!acl.allow_variable_op("prod-eu", "app/db", Read));
        assert!(!acl.allow_variable_op("prod-eu", "other", Write));
        assert!(acl.allow_variable_op("default", "any/path", Read));
        assert!(acl.allow_variable_op("default", "any/path", List));
        assert!(!acl.allow_variable_op("default", "any/path", Write));
        for op in [Read, Write, List, Destroy] {
            assert!(acl.allow_variable_op("dev", "a/b", op), "{op:?}");
            assert!(!acl.allow_variable_op("ops", "a/b", op), "{op:?}");
            assert!(crate::acl::Acl::management().allow_variable_op("x", "y", op));
        }
    }

    #[test]
    fn json_rules_and_bad_variable_rules() {
        let policy = parse_policy(
            r#"{"namespace": {"default": {"variables": {"path": {"app/*": {"capabilities": ["read"]}}}}}}"#,
        )
        .expect("JSON rules");
        let acl = crate::acl::Acl::compile([&policy]);
        assert!(acl.allow_variable_op("default", "app/x", List));
        assert_eq!(
            parse_policy("namespace \"a\" {\n  variables {\n  }\n}"),
            Err(PolicyError::NoVariablePaths("a".into()))
        );
        assert_eq!(
            parse_policy(&vars("a", "x", r#"["sudo"]"#)),
            Err(PolicyError::VariableCapability {
                namespace: "a".into(),
                capability: "sudo".into()
            })
        );
        let misspelt = vars("a", "x", r#"["read"]"#).replace("path ", "paths ");
        assert!(parse_policy(&misspelt).is_err());
    }

    #[test]
    fn a_workload_reads_its_own_job_paths_only() {
        let claim = WorkloadClaim {
            namespace: "default",
            job: "web",
            group: "front",
            tasks: &["nginx"],
        };
        for path in [
            "nomad/jobs",
            "nomad/jobs/web",
            "nomad/jobs/web/front",
            "nomad/jobs/web/front/nginx",
        ] {
            assert!(workload_may_read(&claim, "default", path), "{path}");
            assert!(!workload_may_read(&claim, "other", path), "{path}");
        }
        for path in [
            "nomad/jobs/db",
            "nomad/jobs/web/back",
            "nomad/jobs/web/front/redis",
            "nomad/jobs/web/front/nginx/more",
            "nomad/jobsweb",
            "nomad/jobs/",
            "app/web",
        ] {
            assert!(!workload_may_read(&claim, "default", path), "{path}");
        }
    }
}
