//! Namespaces: the named partitions jobs (and everything that follows a
//! job: allocations, evaluations, deployments, services) live in, in
//! Nomad's shape (`GET /v1/namespace/:name`).
//!
//! The `default` namespace always exists: the store answers it even when
//! nobody wrote it (as Nomad's FSM creates it at the first index), and it
//! cannot be deleted.

use super::job::DEFAULT_NAMESPACE;
use super::serde_util::{null_default, nullable};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Nomad's `maxNamespaceDescriptionLength`.
pub const MAX_DESCRIPTION_LENGTH: usize = 256;
/// Nomad's `validNamespaceName`, for messages.
pub const NAME_PATTERN: &str = "^[a-zA-Z0-9-]{1,128}$";
/// The description Nomad gives the namespace it creates.
pub const DEFAULT_DESCRIPTION: &str = "Default shared namespace";

/// One namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Namespace {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub description: String,
    /// A quota specification's name (Nomad Enterprise); kept, not enforced.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub quota: String,
    #[serde(with = "nullable")]
    pub meta: BTreeMap<String, String>,
    pub create_index: u64,
    pub modify_index: u64,
}

impl Namespace {
    /// The `default` namespace as it is before anyone writes it.
    pub fn default_namespace() -> Namespace {
        Namespace {
            name: DEFAULT_NAMESPACE.to_string(),
            description: DEFAULT_DESCRIPTION.to_string(),
            create_index: 1,
            modify_index: 1,
            ..Default::default()
        }
    }

    /// Nomad's `Namespace.Validate`, with its words: every problem, one
    /// per line.
    pub fn validate(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if !valid_name(&self.name) {
            problems.push(format!(
                "invalid name {:?}. Must match regex {NAME_PATTERN}",
                self.name
            ));
        }
        if self.description.len() > MAX_DESCRIPTION_LENGTH {
            problems.push(format!("description longer than {MAX_DESCRIPTION_LENGTH}"));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    /// `self` with `other`'s indexes: equal to `other` when nothing but
    /// the indexes differ.
    pub fn with_indexes_of(&self, other: &Namespace) -> Namespace {
        Namespace {
            create_index: other.create_index,
            modify_index: other.modify_index,
            ..self.clone()
        }
    }
}

/// 1 to 128 ASCII letters, digits and dashes.
pub fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_nomads_pattern() {
        assert!(valid_name("api-prod"));
        assert!(valid_name(&"a".repeat(128)));
        assert!(!valid_name(""));
        assert!(!valid_name(&"a".repeat(129)));
        assert!(!valid_name("a_b"));
        assert!(!valid_name("a.b"));
        assert!(!valid_name("é"));
    }

    #[test]
    fn validation_names_each_problem() {
        let ns = Namespace {
            name: "bad name".into(),
            description: "x".repeat(257),
            ..Default::default()
        };
        let err = ns.validate().unwrap_err();
        assert!(
            err.contains(r#"invalid name "bad name". Must match regex"#),
            "{err}"
        );
        assert!(err.contains("description longer than 256"), "{err}");
        let ok = Namespace {
            name: "ok".into(),
            description: "x".repeat(256),
            ..Default::default()
        };
        assert_eq!(ok.validate(), Ok(()));
    }

    #[test]
    fn json_uses_nomads_field_names_and_accepts_nulls() {
        let ns: Namespace =
            serde_json::from_str(r#"{"Name":"api","Description":null,"Meta":null,"Quota":""}"#)
                .unwrap();
        assert_eq!(ns.name, "api");
        let text = serde_json::to_string(&Namespace::default_namespace()).unwrap();
        assert_eq!(
            text,
            r#"{"Name":"default","Description":"Default shared namespace","Quota":"","Meta":null,"CreateIndex":1,"ModifyIndex":1}"#
        );
    }
}
