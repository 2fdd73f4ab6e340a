//! The ACL tables (Nomad's `acl_policy`, `acl_token`, `acl_roles`): their
//! row keys, values, the secret index, and how their rows are stored.
//!
//! Kept in one place so that the shared files (`changes`, `tables`,
//! `persist`, `apply`) name ACL rows through one variant each:
//! `RowKey::Acl`, `Row::Acl`, `Tables::acl`, and the `b'A'` key prefix
//! followed by a kind byte.

use crate::structs::{AclPolicy, AclRole, AclToken};
use imbl::OrdMap;
use std::sync::Arc;

/// The key of one ACL row.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclKey {
    Policy(String),
    /// A token, by its accessor ID (its secret is never a key on disk).
    Token(String),
    /// A role, by its ID.
    Role(String),
    /// The index the cluster was bootstrapped at (the reset procedure
    /// names it).
    Bootstrap,
}

/// The value of one ACL row.
#[derive(Clone, Debug, PartialEq)]
pub enum AclRow {
    Policy(Arc<AclPolicy>),
    Token(Arc<AclToken>),
    Role(Arc<AclRole>),
    Bootstrap(u64),
}

/// The ACL tables.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AclTables {
    pub policies: OrdMap<String, Arc<AclPolicy>>,
    pub tokens: OrdMap<String, Arc<AclToken>>,
    /// Secret ID → accessor ID (derived; rebuilt at load). A hash map
    /// with the process's random hash keys rather than an ordered one: a
    /// lookup compares hashes an attacker cannot predict, not the secret's
    /// bytes in order, so its timing tells nothing about the secret.
    pub tokens_by_secret: imbl::HashMap<String, String>,
    pub roles: OrdMap<String, Arc<AclRole>>,
    /// The index of the bootstrap, 0 before it.
    pub bootstrap_index: u64,
}

impl AclTables {
    pub(crate) fn row(&self, key: &AclKey) -> Option<AclRow> {
        match key {
            AclKey::Policy(name) => self.policies.get(name).cloned().map(AclRow::Policy),
            AclKey::Token(id) => self.tokens.get(id).cloned().map(AclRow::Token),
            AclKey::Role(id) => self.roles.get(id).cloned().map(AclRow::Role),
            AclKey::Bootstrap => Some(self.bootstrap_index)
                .filter(|i| *i > 0)
                .map(AclRow::Bootstrap),
        }
    }

    pub(crate) fn insert(&mut self, row: AclRow) {
        match row {
            AclRow::Policy(p) => {
                self.policies.insert(p.name.clone(), p);
            }
            AclRow::Token(t) => {
                if let Some(old) = self.tokens.get(&t.accessor_id) {
                    self.tokens_by_secret.remove(&old.secret_id);
                }
                self.tokens_by_secret
                    .insert(t.secret_id.clone(), t.accessor_id.clone());
                self.tokens.insert(t.accessor_id.clone(), t);
            }
            AclRow::Role(r) => {
                self.roles.insert(r.id.clone(), r);
            }
            AclRow::Bootstrap(index) => self.bootstrap_index = index,
        }
    }

    pub(crate) fn remove(&mut self, key: &AclKey) {
        match key {
            AclKey::Policy(name) => {
                self.policies.remove(name);
            }
            AclKey::Token(id) => {
                if let Some(old) = self.tokens.remove(id) {
                    self.tokens_by_secret.remove(&old.secret_id);
                }
            }
            AclKey::Role(id) => {
                self.roles.remove(id);
            }
            AclKey::Bootstrap => self.bootstrap_index = 0,
        }
    }

    /// Every row, for a checkpoint or a snapshot export.
    pub(crate) fn rows(&self) -> impl Iterator<Item = (AclKey, AclRow)> + '_ {
        let policies = self
            .policies
            .iter()
            .map(|(k, p)| (AclKey::Policy(k.clone()), AclRow::Policy(p.clone())));
        let tokens = self
            .tokens
            .iter()
            .map(|(k, t)| (AclKey::Token(k.clone()), AclRow::Token(t.clone())));
        let roles = self
            .roles
            .iter()
            .map(|(k, r)| (AclKey::Role(k.clone()), AclRow::Role(r.clone())));
        let bootstrap = self.row(&AclKey::Bootstrap).map(|r| (AclKey::Bootstrap, r));
        policies.chain(tokens).chain(roles).chain(bootstrap)
    }
}

/// The sled key prefix of every ACL row.
pub(crate) const ACL_PREFIX: u8 = b'A';

/// The sled key of an ACL row: the prefix, a kind byte, the name or ID.
pub(crate) fn encode_key(key: &AclKey) -> Vec<u8> {
    let (kind, name) = match key {
        AclKey::Policy(n) => (b'p', n.as_str()),
        AclKey::Token(n) => (b't', n.as_str()),
        AclKey::Role(n) => (b'r', n.as_str()),
        AclKey::Bootstrap => (b'b', ""),
    };
    let mut out = Vec::with_capacity(2 + name.len());
    out.extend_from_slice(&[ACL_PREFIX, kind]);
    out.extend_from_slice(name.as_bytes());
    out
}

/// The inverse of [`encode_key`], given the bytes after the prefix.
pub(crate) fn decode_key(rest: &[u8]) -> Result<AclKey, &'static str> {
    let (&kind, bytes) = rest.split_first().ok_or("no ACL row kind")?;
    let name = || {
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| "not UTF-8")
    };
    Ok(match kind {
        b'p' => AclKey::Policy(name()?),
        b't' => AclKey::Token(name()?),
        b'r' => AclKey::Role(name()?),
        b'b' if bytes.is_empty() => AclKey::Bootstrap,
        _ => return Err("not an ACL row kind"),
    })
}

/// A stored ACL row's bytes (JSON).
pub(crate) fn encode_row(out: &mut Vec<u8>, row: &AclRow) -> Result<(), serde_json::Error> {
    match row {
        AclRow::Policy(p) => serde_json::to_writer(out, &**p),
        AclRow::Token(t) => serde_json::to_writer(out, &**t),
        AclRow::Role(r) => serde_json::to_writer(out, &**r),
        AclRow::Bootstrap(index) => serde_json::to_writer(out, index),
    }
}

/// Decodes a stored row and checks that it belongs under its key.
pub(crate) fn decode_row(rest: &[u8], value: &[u8]) -> Result<(AclKey, AclRow), String> {
    let key = decode_key(rest)?;
    let parse_err = |e: serde_json::Error| e.to_string();
    let (own_key, row) = match &key {
        AclKey::Policy(_) => {
            let p: AclPolicy = serde_json::from_slice(value).map_err(parse_err)?;
            (AclKey::Policy(p.name.clone()), AclRow::Policy(Arc::new(p)))
        }
        AclKey::Token(_) => {
            let t: AclToken = serde_json::from_slice(value).map_err(parse_err)?;
            (
                AclKey::Token(t.accessor_id.clone()),
                AclRow::Token(Arc::new(t)),
            )
        }
        AclKey::Role(_) => {
            let r: AclRole = serde_json::from_slice(value).map_err(parse_err)?;
            (AclKey::Role(r.id.clone()), AclRow::Role(Arc::new(r)))
        }
        AclKey::Bootstrap => {
            let index: u64 = serde_json::from_slice(value).map_err(parse_err)?;
            (AclKey::Bootstrap, AclRow::Bootstrap(index))
        }
    };
    if own_key != key {
        return Err("the row does not belong under this key".into());
    }
    Ok((key, row))
}

/// The ACL tables' read API.
impl super::snapshot::StateSnapshot {
    pub fn acl_policies(&self) -> impl Iterator<Item = &Arc<AclPolicy>> + '_ {
        self.tables.acl.policies.values()
    }

    pub fn acl_policy(&self, name: &str) -> Option<&Arc<AclPolicy>> {
        self.tables.acl.policies.get(name)
    }

    pub fn acl_tokens(&self) -> impl Iterator<Item = &Arc<AclToken>> + '_ {
        self.tables.acl.tokens.values()
    }

    pub fn acl_token(&self, accessor_id: &str) -> Option<&Arc<AclToken>> {
        self.tables.acl.tokens.get(accessor_id)
    }

    /// The token a secret belongs to (looked up by a keyed hash; callers
    /// that answer a request compare the found secret in constant time).
    pub fn acl_token_by_secret(&self, secret_id: &str) -> Option<&Arc<AclToken>> {
        let accessor = self.tables.acl.tokens_by_secret.get(secret_id)?;
        self.tables.acl.tokens.get(accessor)
    }

    pub fn acl_roles(&self) -> impl Iterator<Item = &Arc<AclRole>> + '_ {
        self.tables.acl.roles.values()
    }

    pub fn acl_role(&self, id: &str) -> Option<&Arc<AclRole>> {
        self.tables.acl.roles.get(id)
    }

    pub fn acl_role_by_name(&self, name: &str) -> Option<&Arc<AclRole>> {
        self.tables.acl.roles.values().find(|r| r.name == name)
    }

    /// The index of the ACL bootstrap, 0 before it.
    pub fn acl_bootstrap_index(&self) -> u64 {
        self.tables.acl.bootstrap_index
    }
}
