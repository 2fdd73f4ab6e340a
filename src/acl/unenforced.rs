//! What a policy grants that herder accepts but does not act on.
//!
//! Nomad's policies must load on herder unchanged, so rules for features
//! herder does not have (quotas, CSI plugins and volumes, host volume
//! mounts checked at submit, Sentinel, recommendations) are accepted and
//! kept. A user must not believe they are in effect: the policy write's
//! answer names each one present in its `Warnings`, as a job's answer
//! names its unhonoured fields (`structs::unhonoured`). When herder starts
//! enforcing one, its line goes.

use super::capability::Capability;
use super::policy::raw_blocks;

/// One warning per rule of `rules` herder does not enforce, naming where
/// it is. Rules that do not parse have none (their write is refused).
pub fn unenforced_rules(rules: &str) -> Vec<String> {
    if rules.is_empty() {
        return Vec::new();
    }
    let Ok(blocks) = raw_blocks(rules) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for block in &blocks {
        let label = block.label.as_deref().unwrap_or_default();
        match block.kind.as_str() {
            "host_volume" => out.push(format!(
                "host_volume {label:?}: not enforced by herder; a job may mount any host volume \
                 a client offers, whatever this rule says"
            )),
            "quota" => out.push(
                "quota: not enforced by herder, which has no resource quotas; the rule is kept"
                    .into(),
            ),
            "plugin" => out.push(
                "plugin: not enforced by herder, which has no CSI plugins; the rule is kept".into(),
            ),
            "namespace" => {
                for cap in block.capabilities.iter().flatten() {
                    if let Some(why) = Capability::parse(cap).and_then(unenforced_capability) {
                        out.push(format!("namespace {label:?}: capability {cap:?} {why}"));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Why herder does not act on `cap`, for the capabilities no route checks.
fn unenforced_capability(cap: Capability) -> Option<&'static str> {
    use Capability::*;
    match cap {
        SentinelOverride => Some("is not enforced by herder, which has no Sentinel policies"),
        CsiRegisterPlugin | CsiWriteVolume | CsiReadVolume | CsiListVolume | CsiMountVolume => {
            Some("is not enforced by herder, which has no CSI volumes or plugins")
        }
        SubmitRecommendation => Some("is not enforced by herder, which has no recommendations"),
        Deny | ListJobs | ParseJob | ReadJob | SubmitJob | DispatchJob | ReadLogs | ReadFs
        | AllocExec | AllocNodeExec | AllocLifecycle | ListScalingPolicies | ReadScalingPolicy
        | ReadJobScaling | ScaleJob => None,
    }
}

#[cfg(test)]
mod tests {
    use super::unenforced_rules;

    #[test]
    fn rules_herder_does_not_enforce_are_named_and_the_others_are_not() {
        let rules = r#"
namespace "default" {
  policy = "write"
  capabilities = ["read-logs", "csi-mount-volume", "sentinel-override"]
}
host_volume "certs" { policy = "read" }
quota  { policy = "read" }
plugin { policy = "list" }
node   { policy = "read" }
"#;
        let warnings = unenforced_rules(rules);
        assert_eq!(warnings.len(), 5, "{warnings:#?}");
        assert!(
            warnings[0].contains("\"csi-mount-volume\""),
            "{warnings:#?}"
        );
        assert!(
            warnings[1].contains("\"sentinel-override\""),
            "{warnings:#?}"
        );
        assert!(warnings[2].starts_with("host_volume \"certs\""));
        assert!(warnings[3].starts_with("quota:"));
        assert!(warnings[4].starts_with("plugin:"));
        // The shorthand's CSI capabilities are not the user's words: no
        // warning for a plain `policy = "write"`.
        assert!(unenforced_rules(r#"namespace "*" { policy = "write" }"#).is_empty());
        let json = r#"{"quota": {"policy": "write"}}"#;
        assert_eq!(unenforced_rules(json).len(), 1);
    }
}
