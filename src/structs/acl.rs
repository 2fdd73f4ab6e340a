//! ACL policies, tokens and roles as Nomad's API and state hold them
//! (`ACLPolicy`, `ACLToken`, `ACLRole`; their JSON field names).
//!
//! A token's `SecretID` is a bearer credential: `Debug` never prints it,
//! and the list and read answers that must not show it use
//! [`AclToken::redacted`].

use super::serde_util::{nanos, null_default, nullable};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The policy that applies to requests carrying no token.
pub const ANONYMOUS_POLICY: &str = "anonymous";
/// A token type: every capability, no policies needed.
pub const TOKEN_MANAGEMENT: &str = "management";
/// A token type: what its policies and roles grant.
pub const TOKEN_CLIENT: &str = "client";

/// A named set of rules in the policy language (`crate::acl::policy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AclPolicy {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub description: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub rules: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub create_index: u64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub modify_index: u64,
}

/// A role's or token's reference to a role or policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AclLink {
    #[serde(rename = "ID", deserialize_with = "null_default::deserialize")]
    pub id: String,
    #[serde(rename = "Name", deserialize_with = "null_default::deserialize")]
    pub name: String,
}

/// A named group of policies tokens can be given at once.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AclRole {
    #[serde(rename = "ID", deserialize_with = "null_default::deserialize")]
    pub id: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub description: String,
    /// Only the `Name` of each link is used.
    #[serde(with = "nullable")]
    pub policies: Vec<AclPolicyLink>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub create_index: u64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub modify_index: u64,
}

/// A role's reference to a policy (`{"Name": "..."}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AclPolicyLink {
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
}

/// A token: its public `AccessorID` names it, its `SecretID` proves it.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AclToken {
    #[serde(rename = "AccessorID", deserialize_with = "null_default::deserialize")]
    pub accessor_id: String,
    #[serde(rename = "SecretID", deserialize_with = "null_default::deserialize")]
    pub secret_id: String,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub name: String,
    /// `client` or `management`.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub r#type: String,
    #[serde(with = "nullable")]
    pub policies: Vec<String>,
    #[serde(with = "nullable")]
    pub roles: Vec<AclLink>,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub global: bool,
    /// RFC 3339, set by the server when the token is created.
    #[serde(deserialize_with = "null_default::deserialize")]
    pub create_time: String,
    /// RFC 3339; after it the token is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    /// Asked for at create time instead of `ExpirationTime`.
    #[serde(rename = "ExpirationTTL", with = "nanos")]
    pub expiration_ttl: Duration,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub create_index: u64,
    #[serde(deserialize_with = "null_default::deserialize")]
    pub modify_index: u64,
}

impl AclToken {
    pub fn is_management(&self) -> bool {
        self.r#type == TOKEN_MANAGEMENT
    }

    /// The token without its secret, as lists show it.
    pub fn redacted(&self) -> AclToken {
        AclToken {
            secret_id: String::new(),
            ..self.clone()
        }
    }

    /// Whether the token has expired at `now`. An expiration
    /// time that cannot be read counts as expired: refusing is the safe
    /// side.
    pub fn is_expired(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        let Some(at) = &self.expiration_time else {
            return false;
        };
        match chrono::DateTime::parse_from_rfc3339(at) {
            Ok(at) => at <= now,
            Err(_) => true,
        }
    }
}

impl std::fmt::Debug for AclToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AclToken")
            .field("accessor_id", &self.accessor_id)
            .field("secret_id", &"<redacted>")
            .field("name", &self.name)
            .field("type", &self.r#type)
            .field("policies", &self.policies)
            .field("roles", &self.roles)
            .field("expiration_time", &self.expiration_time)
            .field("create_index", &self.create_index)
            .field("modify_index", &self.modify_index)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let token = AclToken {
            secret_id: "0b0b0b0b-s3cr3t".into(),
            ..AclToken::default()
        };
        assert!(!format!("{token:?}").contains("s3cr3t"));
    }

    #[test]
    fn json_uses_nomads_field_names() {
        let token = AclToken {
            accessor_id: "a".into(),
            secret_id: "s".into(),
            r#type: TOKEN_CLIENT.into(),
            ..AclToken::default()
        };
        let json = serde_json::to_value(&token).expect("serializes");
        for field in [
            "AccessorID",
            "SecretID",
            "Type",
            "Policies",
            "Roles",
            "ExpirationTTL",
        ] {
            assert!(json.get(field).is_some(), "{field} missing in {json}");
        }
    }

    #[test]
    fn expiry_is_checked_against_the_time_given() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .expect("valid")
            .with_timezone(&chrono::Utc);
        let token = |at: &str| AclToken {
            expiration_time: Some(at.to_string()),
            ..AclToken::default()
        };
        assert!(token("2025-12-31T23:59:59Z").is_expired(now));
        assert!(!token("2026-01-01T00:00:01Z").is_expired(now));
        assert!(token("garbage").is_expired(now));
        assert!(!AclToken::default().is_expired(now));
    }
}
