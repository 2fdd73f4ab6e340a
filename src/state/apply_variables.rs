//! How the keyring's commands change the `variables` and `root_keys`
//! tables: check-and-set and lock rules decided here, at apply, so that a
//! check and its write are one step of the log on every server; the keys'
//! invariants (exactly one active key; no key removed while something is
//! sealed with it) kept the same way.
//!
//! Rows arrive sealed: nothing here sees or needs a variable's items.

use super::super::changes::{RowKey, VariableKey};
use super::super::command::VariableLockOp;
use super::super::ApplyError;
use super::Txn;
use crate::structs::{RootKey, RootKeyState, VariableEncrypted, VariableLock};
use std::sync::Arc;

impl Txn {
    /// `VariableUpsert`: the check-and-set and lock rules, then the row,
    /// `CreateIndex`/`CreateTime` kept from the row it replaces.
    pub(super) fn variable_upsert(
        &mut self,
        variable: &VariableEncrypted,
        cas: Option<u64>,
        lock_id: Option<&str>,
        now: i64,
    ) -> Result<(), ApplyError> {
        let key = VariableKey::new(&variable.meta.namespace, &variable.meta.path);
        self.check_key_known(&variable.data.key_id)?;
        let old = self.t.variables.get(&key).cloned();
        check_cas(old.as_deref(), cas)?;
        check_unlocked(old.as_deref(), lock_id, now)?;
        let mut row = variable.clone();
        row.meta.lock = old.as_ref().and_then(|o| live_lock(o, now)).cloned();
        self.write_variable(key, row, old.as_deref(), now);
        Ok(())
    }

    /// `VariableDelete`, with the same rules.
    pub(super) fn variable_delete(
        &mut self,
        key: VariableKey,
        cas: Option<u64>,
        lock_id: Option<&str>,
        now: i64,
    ) -> Result<(), ApplyError> {
        let old = self.t.variables.get(&key).cloned();
        check_cas(old.as_deref(), cas)?;
        check_unlocked(old.as_deref(), lock_id, now)?;
        if old.is_some() {
            self.t.variables.remove(&key);
            self.touched.insert(RowKey::Variable(key));
        }
        Ok(())
    }

    /// `VariableLock`: acquire (creating the variable if need be), renew,
    /// release.
    pub(super) fn variable_lock(
        &mut self,
        op: &VariableLockOp,
        now: i64,
    ) -> Result<(), ApplyError> {
        match op {
            VariableLockOp::Acquire { variable, lock } => {
                let key = VariableKey::new(&variable.meta.namespace, &variable.meta.path);
                self.check_key_known(&variable.data.key_id)?;
                let old = self.t.variables.get(&key).cloned();
                if let Some(held) = old.as_deref().and_then(|o| live_lock(o, now)) {
                    return Err(ApplyError::VariableLocked(format!(
                        "variable {:?} is already locked (lock {})",
                        key.path, held.id
                    )));
                }
                let mut row = (**variable).clone();
                row.meta.lock = Some(lock.clone());
                self.write_variable(key, row, old.as_deref(), now);
                Ok(())
            }
            VariableLockOp::Renew {
                namespace,
                path,
                lock_id,
                expires_at,
            } => self.with_held_lock(namespace, path, lock_id, now, |lock| {
                lock.expires_at = *expires_at;
                Some(lock.clone())
            }),
            VariableLockOp::Release {
                namespace,
                path,
                lock_id,
            } => self.with_held_lock(namespace, path, lock_id, now, |_| None),
        }
    }

    /// Changes the lock `lock_id` holds on a variable (`change` answers
    /// the lock to keep, `None` to free it); refused when it holds none.
    fn with_held_lock(
        &mut self,
        namespace: &str,
        path: &str,
        lock_id: &str,
        now: i64,
        change: impl FnOnce(&mut VariableLock) -> Option<VariableLock>,
    ) -> Result<(), ApplyError> {
        let key = VariableKey::new(namespace, path);
        let Some(old) = self.t.variables.get(&key).cloned() else {
            return Err(ApplyError::KeyringNotFound("variable not found".into()));
        };
        let mut held = match live_lock(&old, now) {
            Some(lock) if lock.id == lock_id => lock.clone(),
            _ => {
                return Err(ApplyError::VariableLocked(format!(
                    "variable {path:?} is not locked by lock {lock_id}"
                )))
            }
        };
        let mut row = (*old).clone();
        row.meta.lock = change(&mut held);
        row.meta.modify_index = self.index;
        self.t.variables.insert(key.clone(), Arc::new(row));
        self.touched.insert(RowKey::Variable(key));
        Ok(())
    }

    /// `VariableRekey`: new sealed data for variables unchanged since the
    /// server read them; their indexes stay (their items did not change).
    pub(super) fn variable_rekey(
        &mut self,
        variables: &[VariableEncrypted],
    ) -> Result<(), ApplyError> {
        for variable in variables {
            self.check_key_known(&variable.data.key_id)?;
            let key = VariableKey::new(&variable.meta.namespace, &variable.meta.path);
            let Some(old) = self.t.variables.get(&key).cloned() else {
                continue;
            };
            if old.meta.modify_index != variable.meta.modify_index {
                continue;
            }
            let mut row = (*old).clone();
            row.data = variable.data.clone();
            self.t.variables.insert(key.clone(), Arc::new(row));
            self.touched.insert(RowKey::Variable(key));
        }
        Ok(())
    }

    /// Stores `row` under `key`, stamped with this index and `now`.
    fn write_variable(
        &mut self,
        key: VariableKey,
        mut row: VariableEncrypted,
        old: Option<&VariableEncrypted>,
        now: i64,
    ) {
        (row.meta.create_index, row.meta.create_time) = match old {
            Some(old) => (old.meta.create_index, old.meta.create_time),
            None => (self.index, now),
        };
        row.meta.modify_index = self.index;
        row.meta.modify_time = now;
        self.t.variables.insert(key.clone(), Arc::new(row));
        self.touched.insert(RowKey::Variable(key));
    }

    fn check_key_known(&self, key_id: &str) -> Result<(), ApplyError> {
        if self.t.root_keys.contains_key(key_id) {
            Ok(())
        } else {
            Err(ApplyError::KeyringRefused(format!(
                "root key {key_id} is not in the keyring"
            )))
        }
    }

    // ---- root keys ------------------------------------------------------

    /// `RootKeyInit`: the first key, only into an empty keyring.
    pub(super) fn root_key_init(&mut self, key: &RootKey) {
        if self.t.root_keys.is_empty() {
            let mut key = key.clone();
            key.meta.state = RootKeyState::Active;
            self.put_root_key(key);
        }
    }

    /// `RootKeyRotate`: `key` becomes the one active key.
    pub(super) fn root_key_rotate(&mut self, key: &RootKey) -> Result<(), ApplyError> {
        if self.t.root_keys.contains_key(&key.meta.key_id) {
            return Err(ApplyError::KeyringRefused(format!(
                "root key {} already exists",
                key.meta.key_id
            )));
        }
        let active: Vec<Arc<RootKey>> = self
            .t
            .root_keys
            .values()
            .filter(|k| k.meta.state == RootKeyState::Active)
            .cloned()
            .collect();
        for old in active {
            let mut old = (*old).clone();
            old.meta.state = RootKeyState::Inactive;
            self.put_root_key(old);
        }
        let mut key = key.clone();
        key.meta.state = RootKeyState::Active;
        self.put_root_key(key);
        Ok(())
    }

    /// `RootKeySetState`: only between inactive and deprecated; the active
    /// key changes by rotation alone.
    pub(super) fn root_key_set_state(
        &mut self,
        key_id: &str,
        state: RootKeyState,
    ) -> Result<(), ApplyError> {
        let key = self.root_key(key_id)?;
        if key.meta.state == RootKeyState::Active || state == RootKeyState::Active {
            return Err(ApplyError::KeyringRefused(
                "the active root key changes only by rotation".into(),
            ));
        }
        let mut key = (*key).clone();
        key.meta.state = state;
        self.put_root_key(key);
        Ok(())
    }

    /// `RootKeyDelete`: refused for the active key and for a key that
    /// still seals a variable.
    pub(super) fn root_key_delete(&mut self, key_id: &str) -> Result<(), ApplyError> {
        let key = self.root_key(key_id)?;
        if key.meta.state == RootKeyState::Active {
            return Err(ApplyError::KeyringRefused(
                "active root key cannot be deleted".into(),
            ));
        }
        let in_use = self
            .t
            .variables
            .values()
            .filter(|v| v.data.key_id == key_id)
            .count();
        if in_use > 0 {
            return Err(ApplyError::KeyringRefused(format!(
                "root key {key_id} is in use by {in_use} variable(s); rotate with full=true first"
            )));
        }
        self.t.root_keys.remove(key_id);
        self.touched.insert(RowKey::RootKey(key_id.to_string()));
        Ok(())
    }

    fn root_key(&self, key_id: &str) -> Result<Arc<RootKey>, ApplyError> {
        self.t
            .root_keys
            .get(key_id)
            .cloned()
            .ok_or_else(|| ApplyError::KeyringNotFound(format!("root key {key_id} not found")))
    }

    fn put_root_key(&mut self, mut key: RootKey) {
        let id = key.meta.key_id.clone();
        key.meta.create_index = match self.t.root_keys.get(&id) {
            Some(old) => old.meta.create_index,
            None => self.index,
        };
        key.meta.modify_index = self.index;
        self.t.root_keys.insert(id.clone(), Arc::new(key));
        self.touched.insert(RowKey::RootKey(id));
    }
}

/// The check-and-set rule: `cas` is the `ModifyIndex` the writer last saw
/// (0: it must not exist).
fn check_cas(old: Option<&VariableEncrypted>, cas: Option<u64>) -> Result<(), ApplyError> {
    let Some(expected) = cas else {
        return Ok(());
    };
    let actual = old.map_or(0, |o| o.meta.modify_index);
    if actual == expected {
        Ok(())
    } else {
        Err(ApplyError::VariableConflict { expected, actual })
    }
}

/// A write to a locked variable must come from the lock's holder.
fn check_unlocked(
    old: Option<&VariableEncrypted>,
    lock_id: Option<&str>,
    now: i64,
) -> Result<(), ApplyError> {
    match old.and_then(|o| live_lock(o, now)) {
        Some(lock) if Some(lock.id.as_str()) != lock_id => {
            Err(ApplyError::VariableLocked(format!(
                "variable {:?} is locked",
                old.map_or("", |o| o.meta.path.as_str())
            )))
        }
        _ => Ok(()),
    }
}

/// The variable's lock, unless its TTL ran out before `now`.
fn live_lock(variable: &VariableEncrypted, now: i64) -> Option<&VariableLock> {
    variable
        .meta
        .lock
        .as_ref()
        .filter(|lock| lock.expires_at == 0 || lock.expires_at > now)
}
