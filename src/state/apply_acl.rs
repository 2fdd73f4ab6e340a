//! How the ACL commands change the ACL tables: upserts keep a row's
//! `CreateIndex`, deletes of rows not stored are refused (Nomad answers
//! them with an error too), and the bootstrap is allowed once, or again
//! with the reset index.

use super::super::acl_tables::{AclKey, AclRow};
use super::super::changes::RowKey;
use super::super::command::Command;
use super::super::ApplyError;
use super::Txn;
use crate::structs::{AclPolicy, AclRole, AclToken};
use std::sync::Arc;

impl Txn {
    /// Applies one of the ACL commands (any other is a bug of the caller).
    pub(super) fn apply_acl(&mut self, cmd: &Command) -> Result<(), ApplyError> {
        match cmd {
            Command::AclPolicyUpsert { policies } => {
                for p in policies {
                    self.upsert_acl_policy(p)?;
                }
                Ok(())
            }
            Command::AclPolicyDelete { names } => {
                self.delete_acl_rows(names.iter().map(|n| AclKey::Policy(n.clone())), "policy")
            }
            Command::AclTokenUpsert { tokens } => {
                for t in tokens {
                    self.upsert_acl_token(t)?;
                }
                Ok(())
            }
            Command::AclTokenDelete { accessor_ids } => self.delete_acl_rows(
                accessor_ids.iter().map(|id| AclKey::Token(id.clone())),
                "token",
            ),
            Command::AclBootstrap { token, reset_index } => self.acl_bootstrap(token, *reset_index),
            Command::AclRoleUpsert { roles } => {
                for r in roles {
                    self.upsert_acl_role(r)?;
                }
                Ok(())
            }
            Command::AclRoleDelete { ids } => {
                self.delete_acl_rows(ids.iter().map(|id| AclKey::Role(id.clone())), "role")
            }
            other => Err(ApplyError::Invalid(format!(
                "{} is not an ACL command",
                other.name()
            ))),
        }
    }

    fn upsert_acl_policy(&mut self, policy: &AclPolicy) -> Result<(), ApplyError> {
        if policy.name.is_empty() {
            return Err(ApplyError::Invalid("ACL policy without a name".into()));
        }
        let mut row = policy.clone();
        row.create_index = self
            .t
            .acl
            .policies
            .get(&policy.name)
            .map_or(self.index, |old| old.create_index);
        row.modify_index = self.index;
        self.put_acl(
            AclKey::Policy(row.name.clone()),
            AclRow::Policy(Arc::new(row)),
        );
        Ok(())
    }

    fn upsert_acl_token(&mut self, token: &AclToken) -> Result<(), ApplyError> {
        if token.accessor_id.is_empty() || token.secret_id.is_empty() {
            return Err(ApplyError::Invalid(
                "ACL token without an accessor or secret ID".into(),
            ));
        }
        let taken = self
            .t
            .acl
            .tokens_by_secret
            .get(&token.secret_id)
            .is_some_and(|owner| *owner != token.accessor_id);
        if taken {
            return Err(ApplyError::Invalid("ACL token secret ID in use".into()));
        }
        let mut row = token.clone();
        row.create_index = self
            .t
            .acl
            .tokens
            .get(&token.accessor_id)
            .map_or(self.index, |old| old.create_index);
        row.modify_index = self.index;
        self.put_acl(
            AclKey::Token(row.accessor_id.clone()),
            AclRow::Token(Arc::new(row)),
        );
        Ok(())
    }

    fn upsert_acl_role(&mut self, role: &AclRole) -> Result<(), ApplyError> {
        if role.id.is_empty() || role.name.is_empty() {
            return Err(ApplyError::Invalid("ACL role without an ID or name".into()));
        }
        let clash = self
            .t
            .acl
            .roles
            .values()
            .any(|r| r.name == role.name && r.id != role.id);
        if clash {
            return Err(ApplyError::Invalid(format!(
                "ACL role with name {:?} already exists",
                role.name
            )));
        }
        let mut row = role.clone();
        row.create_index = self
            .t
            .acl
            .roles
            .get(&role.id)
            .map_or(self.index, |old| old.create_index);
        row.modify_index = self.index;
        self.put_acl(AclKey::Role(row.id.clone()), AclRow::Role(Arc::new(row)));
        Ok(())
    }

    /// Nomad's rule: once bootstrapped, only the reset index (the index of
    /// the bootstrap, which the operator writes to the reset file) allows
    /// a new one.
    fn acl_bootstrap(&mut self, token: &AclToken, reset_index: u64) -> Result<(), ApplyError> {
        let done = self.t.acl.bootstrap_index;
        if done > 0 && reset_index != done {
            return Err(ApplyError::AclBootstrapDone { reset_index: done });
        }
        self.upsert_acl_token(token)?;
        self.put_acl(AclKey::Bootstrap, AclRow::Bootstrap(self.index));
        Ok(())
    }

    /// Deletes every key, or none when one is not stored.
    fn delete_acl_rows(
        &mut self,
        keys: impl Iterator<Item = AclKey>,
        what: &str,
    ) -> Result<(), ApplyError> {
        let keys: Vec<AclKey> = keys.collect();
        if let Some(missing) = keys.iter().find(|k| self.t.acl.row(k).is_none()) {
            let name = match missing {
                AclKey::Policy(n) | AclKey::Token(n) | AclKey::Role(n) => n.as_str(),
                AclKey::Bootstrap => "",
            };
            return Err(ApplyError::Invalid(format!(
                "ACL {what} {name:?} not found"
            )));
        }
        for key in keys {
            self.t.acl.remove(&key);
            self.touched.insert(RowKey::Acl(key));
        }
        Ok(())
    }

    fn put_acl(&mut self, key: AclKey, row: AclRow) {
        self.t.acl.insert(row);
        self.touched.insert(RowKey::Acl(key));
    }
}
