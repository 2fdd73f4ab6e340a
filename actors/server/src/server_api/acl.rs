//! ACL operations (Nomad's `ACL.*` RPCs): bootstrap, policies, tokens and
//! roles, checked as Nomad checks them, each one `Command` through the
//! write path; and token resolution, what every request under ACLs starts
//! with (a secret into the compiled [`Acl`] of its policies and roles),
//! one implementation for both ends: a server compiles the
//! [`TokenResolution`] of its own state, a client-only agent the one a
//! server sends it.
//!
//! Secrets are random UUIDv4s made here, never by the store (commands
//! carry them, so every replica stores the same). They are compared in
//! constant time and never logged.

use super::{ServerApi, ServerApiError};
use herder::acl::{parse_policy, Acl, Policy};
use herder::state::{Command, StateSnapshot};
use herder::structs::acl::{
    AclLink, AclPolicy, AclRole, AclToken, ANONYMOUS_POLICY, TOKEN_CLIENT, TOKEN_MANAGEMENT,
};
use std::sync::Arc;
use std::time::Duration;

/// Nomad's answer to every refusal.
pub const PERMISSION_DENIED: &str = "Permission denied";
/// Nomad's answer to a secret no token has.
pub const TOKEN_NOT_FOUND: &str = "ACL token not found";
/// Nomad's answer to an expired token.
pub const TOKEN_EXPIRED: &str = "ACL token expired";
const MAX_NAME: usize = 256;
const MAX_DESCRIPTION: usize = 256;

/// What a request's token resolved to.
#[derive(Clone, Debug)]
pub struct ResolvedToken {
    pub acl: Arc<Acl>,
    /// `None` for a request without a token (the anonymous policy).
    pub token: Option<Arc<AclToken>>,
}

impl ServerApi {
    /// Resolves a secret (empty: no token) against the current state at
    /// `now`: an unknown secret or an expired token is refused.
    pub fn resolve_token(
        &self,
        secret: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<ResolvedToken, ServerApiError> {
        resolve_token(&self.snapshot(), secret, now)
    }

    /// What `secret` resolves to, for a client agent to compile (see
    /// [`TokenResolution`]).
    pub fn token_resolution(
        &self,
        secret: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<TokenResolution, ServerApiError> {
        token_resolution(&self.snapshot(), secret, now)
    }

    /// The first management token, or, with the reset index read from the
    /// data dir's `acl-bootstrap-reset` file, a new one.
    pub async fn acl_bootstrap(
        &self,
        reset_index: u64,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<AclToken, ServerApiError> {
        let done = self.snapshot().acl_bootstrap_index();
        if done > 0 && reset_index != done {
            return Err(ServerApiError::Invalid(format!(
                "ACL bootstrap already done (reset index: {done})"
            )));
        }
        let token = new_token(AclToken {
            name: "Bootstrap Token".into(),
            r#type: TOKEN_MANAGEMENT.into(),
            global: true,
            create_time: now.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
            ..AclToken::default()
        });
        let accessor = token.accessor_id.clone();
        self.writes
            .submit(Command::AclBootstrap { token, reset_index })
            .await?;
        self.stored_token(&accessor)
    }

    /// Creates or replaces policies, each checked as Nomad checks them.
    pub async fn upsert_acl_policies(
        &self,
        policies: Vec<AclPolicy>,
    ) -> Result<u64, ServerApiError> {
        for p in &policies {
            check_policy(p)?;
        }
        Ok(self
            .writes
            .submit(Command::AclPolicyUpsert { policies })
            .await?
            .index)
    }

    pub async fn delete_acl_policies(&self, names: Vec<String>) -> Result<u64, ServerApiError> {
        Ok(self
            .writes
            .submit(Command::AclPolicyDelete { names })
            .await?
            .index)
    }

    /// Creates a token (no `AccessorID`) or updates one (its secret,
    /// type and create time kept).
    pub async fn upsert_acl_token(
        &self,
        token: AclToken,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<AclToken, ServerApiError> {
        let snap = self.snapshot();
        let token = if token.accessor_id.is_empty() {
            let mut fresh = new_token(token);
            fresh.create_time = now.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
            set_expiry(&mut fresh, now)?;
            fresh
        } else {
            let old = snap.acl_token(&token.accessor_id).ok_or_else(|| {
                ServerApiError::NotFound(format!("cannot find token {}", token.accessor_id))
            })?;
            AclToken {
                secret_id: old.secret_id.clone(),
                create_time: old.create_time.clone(),
                expiration_time: old.expiration_time.clone(),
                expiration_ttl: old.expiration_ttl,
                ..token
            }
        };
        let token = check_token(&snap, token)?;
        let accessor = token.accessor_id.clone();
        self.writes
            .submit(Command::AclTokenUpsert {
                tokens: vec![token],
            })
            .await?;
        self.stored_token(&accessor)
    }

    pub async fn delete_acl_tokens(&self, accessors: Vec<String>) -> Result<u64, ServerApiError> {
        Ok(self
            .writes
            .submit(Command::AclTokenDelete {
                accessor_ids: accessors,
            })
            .await?
            .index)
    }

    /// Creates (no `ID`) or updates a role; its policies must exist.
    pub async fn upsert_acl_role(&self, mut role: AclRole) -> Result<AclRole, ServerApiError> {
        let snap = self.snapshot();
        if role.id.is_empty() {
            role.id = uuid::Uuid::new_v4().to_string();
        } else if snap.acl_role(&role.id).is_none() {
            return Err(ServerApiError::NotFound(format!(
                "cannot find role {}",
                role.id
            )));
        }
        check_name(&role.name, "role")?;
        if role.description.len() > MAX_DESCRIPTION {
            return Err(ServerApiError::Invalid(format!(
                "description longer than {MAX_DESCRIPTION}"
            )));
        }
        if role.policies.is_empty() {
            return Err(ServerApiError::Invalid(
                "at least one policy should be specified".into(),
            ));
        }
        for link in &role.policies {
            if snap.acl_policy(&link.name).is_none() {
                return Err(ServerApiError::Invalid(format!(
                    "cannot find policy {}",
                    link.name
                )));
            }
        }
        let id = role.id.clone();
        self.writes
            .submit(Command::AclRoleUpsert { roles: vec![role] })
            .await?;
        self.snapshot()
            .acl_role(&id)
            .map(|r| (**r).clone())
            .ok_or_else(|| ServerApiError::Internal("role written but not found".into()))
    }

    pub async fn delete_acl_roles(&self, ids: Vec<String>) -> Result<u64, ServerApiError> {
        Ok(self
            .writes
            .submit(Command::AclRoleDelete { ids })
            .await?
            .index)
    }

    fn stored_token(&self, accessor: &str) -> Result<AclToken, ServerApiError> {
        self.snapshot()
            .acl_token(accessor)
            .map(|t| (**t).clone())
            .ok_or_else(|| ServerApiError::Internal("token written but not found".into()))
    }
}

/// Resolution against one snapshot (see [`ServerApi::resolve_token`]).
pub fn resolve_token(
    snap: &StateSnapshot,
    secret: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<ResolvedToken, ServerApiError> {
    Ok(token_resolution(snap, secret, now)?.into_resolved(secret))
}

/// What a secret resolves to, as a server hands it to a client agent
/// (`PUT /v1/node/:id/acl/resolve-token`): the token without its secret
/// and the policies it holds, which the agent compiles as a server does
/// ([`TokenResolution::into_resolved`]).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TokenResolution {
    /// `None` for no secret (the anonymous policy).
    #[serde(default)]
    pub token: Option<AclToken>,
    /// Every policy the token holds, directly or by a role (for no
    /// secret, the `anonymous` policy when there is one). A policy deleted
    /// since is absent.
    #[serde(default)]
    pub policies: Vec<AclPolicy>,
}

impl TokenResolution {
    /// The compiled ACL, `secret` put back into the token. Rules that do
    /// not parse grant nothing.
    pub fn into_resolved(self, secret: &str) -> ResolvedToken {
        let management = self.token.as_ref().is_some_and(AclToken::is_management);
        let acl = if management {
            Acl::management()
        } else {
            let parsed: Vec<Policy> = self
                .policies
                .iter()
                .filter_map(|p| parse_policy(&p.rules).ok())
                .collect();
            Acl::compile(parsed.iter())
        };
        let token = self.token.map(|t| {
            Arc::new(AclToken {
                secret_id: secret.to_string(),
                ..t
            })
        });
        ResolvedToken {
            acl: Arc::new(acl),
            token,
        }
    }
}

/// What `secret` (empty: no token) resolves to at `now`: an unknown
/// secret or an expired token is refused with Nomad's text.
pub fn token_resolution(
    snap: &StateSnapshot,
    secret: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<TokenResolution, ServerApiError> {
    if secret.is_empty() {
        return Ok(TokenResolution {
            token: None,
            policies: snap
                .acl_policy(ANONYMOUS_POLICY)
                .map(|p| vec![(**p).clone()])
                .unwrap_or_default(),
        });
    }
    let token = snap
        .acl_token_by_secret(secret)
        .filter(|t| constant_time_eq(t.secret_id.as_bytes(), secret.as_bytes()))
        .ok_or_else(|| ServerApiError::Forbidden(TOKEN_NOT_FOUND.into()))?;
    if token.is_expired(now) {
        return Err(ServerApiError::Forbidden(TOKEN_EXPIRED.into()));
    }
    let policies = if token.is_management() {
        Vec::new()
    } else {
        token_policies(snap, token)
    };
    Ok(TokenResolution {
        token: Some(token.redacted()),
        policies,
    })
}

/// The policies of a token: its own and its roles'.
fn token_policies(snap: &StateSnapshot, token: &AclToken) -> Vec<AclPolicy> {
    let role_policies = token.roles.iter().flat_map(|link| {
        snap.acl_role(&link.id)
            .or_else(|| snap.acl_role_by_name(&link.name))
            .map(|r| {
                r.policies
                    .iter()
                    .map(|p| p.name.clone())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    });
    let mut names: Vec<String> = token
        .policies
        .iter()
        .cloned()
        .chain(role_policies)
        .collect();
    names.sort();
    names.dedup();
    names
        .iter()
        .filter_map(|n| snap.acl_policy(n))
        .map(|p| (**p).clone())
        .collect()
}

/// What a written token asks for that herder does not do: `Global`
/// (Nomad's tokens replicated to every region) means nothing with the one
/// region herder runs, where every token is valid everywhere already.
pub fn token_warnings(token: &AclToken) -> Vec<String> {
    if token.global {
        vec![
            "Global: herder runs a single region, where every token is valid already; \
              the flag is kept but changes nothing"
                .into(),
        ]
    } else {
        Vec::new()
    }
}

/// Equal bytes, in time that depends on the length only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn new_token(template: AclToken) -> AclToken {
    AclToken {
        accessor_id: uuid::Uuid::new_v4().to_string(),
        secret_id: uuid::Uuid::new_v4().to_string(),
        ..template
    }
}

/// `ExpirationTTL` into `ExpirationTime` at create time.
fn set_expiry(
    token: &mut AclToken,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), ServerApiError> {
    if token.expiration_ttl > Duration::ZERO {
        if token.expiration_time.is_some() {
            return Err(ServerApiError::Invalid(
                "Token cannot have both ExpirationTTL and ExpirationTime".into(),
            ));
        }
        let ttl = chrono::Duration::from_std(token.expiration_ttl)
            .map_err(|_| ServerApiError::Invalid("ExpirationTTL too large".into()))?;
        let at = now + ttl;
        token.expiration_time = Some(at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true));
    }
    if let Some(at) = &token.expiration_time {
        let at = chrono::DateTime::parse_from_rfc3339(at)
            .map_err(|e| ServerApiError::Invalid(format!("ExpirationTime: {e}")))?;
        if at <= now {
            return Err(ServerApiError::Invalid(
                "ExpirationTime cannot be in the past".into(),
            ));
        }
    }
    Ok(())
}

/// Nomad's `ACLToken.Validate`, and every role named exists (its link
/// filled in with both ID and name). Policies may be named before they
/// exist, as in Nomad: a missing one grants nothing.
fn check_token(snap: &StateSnapshot, mut token: AclToken) -> Result<AclToken, ServerApiError> {
    if token.name.len() > MAX_NAME {
        return Err(ServerApiError::Invalid("token name too long".into()));
    }
    match token.r#type.as_str() {
        TOKEN_CLIENT => {
            if token.policies.is_empty() && token.roles.is_empty() {
                return Err(ServerApiError::Invalid(
                    "client token missing policies or roles".into(),
                ));
            }
        }
        TOKEN_MANAGEMENT => {
            if !token.policies.is_empty() || !token.roles.is_empty() {
                return Err(ServerApiError::Invalid(
                    "management token cannot be associated with policies or roles".into(),
                ));
            }
        }
        _ => {
            return Err(ServerApiError::Invalid(
                "token type must be client or management".into(),
            ))
        }
    }
    for link in &mut token.roles {
        let role = snap
            .acl_role(&link.id)
            .or_else(|| snap.acl_role_by_name(&link.name))
            .ok_or_else(|| {
                ServerApiError::Invalid(format!("cannot find role {}{}", link.id, link.name))
            })?;
        *link = AclLink {
            id: role.id.clone(),
            name: role.name.clone(),
        };
    }
    Ok(token)
}

/// Nomad's `ACLPolicy.Validate`: name, description and parseable rules.
fn check_policy(p: &AclPolicy) -> Result<(), ServerApiError> {
    check_name(&p.name, "policy")?;
    if p.description.len() > MAX_DESCRIPTION {
        return Err(ServerApiError::Invalid(format!(
            "description longer than {MAX_DESCRIPTION}"
        )));
    }
    parse_policy(&p.rules)
        .map_err(|e| ServerApiError::Invalid(format!("failed to parse rules: {e}")))?;
    Ok(())
}

/// Nomad's `^[a-zA-Z0-9-]{1,128}$` for policy and role names.
fn check_name(name: &str, what: &str) -> Result<(), ServerApiError> {
    let valid = (1..=128).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(ServerApiError::Invalid(format!(
            "invalid {what} name '{name}'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
