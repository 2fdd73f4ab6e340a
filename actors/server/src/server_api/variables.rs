//! Variables and the keyring (Nomad's `Variables.*` and `Keyring.*`
//! RPCs): items are sealed here, on the server, before the command is
//! submitted, and opened here on read; the store only ever holds them
//! sealed. Check-and-set and locks are decided by the store at apply.
//!
//! The keyring's first root key is made when a write first needs one,
//! through `RootKeyInit`, which the store applies only to an empty
//! keyring: servers that race to make it end with exactly one. Keyring
//! commands are written through the version gate, so on a cluster with a
//! server older than 0.2.0 a variable write is refused, naming it, and
//! nothing is written that the old server could not apply.

use super::{ServerApi, ServerApiError};
use crate::keyring::{self, KeyringError};
use herder::state::{ApplyError, Command, StateSnapshot, StoreError, VariableLockOp};
use herder::structs::variable::validate_path;
use herder::structs::{
    RootKey, RootKeyMeta, RootKeyState, VariableDecrypted, VariableEncrypted, VariableLock,
};
use std::sync::Arc;
use std::time::Duration;

/// How many variables one re-sealing command carries in a full rotation.
const REKEY_BATCH: usize = 128;
/// A lock's TTL when none is given, and its bounds (Nomad's).
const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(15);
const MIN_LOCK_TTL: Duration = Duration::from_secs(10);
const MAX_LOCK_TTL: Duration = Duration::from_secs(24 * 3600);

/// What a variable write did.
#[derive(Debug)]
pub enum VariableWrite {
    /// The variable as stored now (items in the clear, new indexes).
    Written(VariableDecrypted),
    /// The variable is gone (or was not there), at this index.
    Deleted { index: u64 },
    /// The check-and-set or the lock refused the write: the variable as
    /// it is (`None`: there is none), which Nomad answers with a 409.
    Conflict(Option<VariableDecrypted>),
}

/// A variable write: the variable with its items, `cas` (the
/// `ModifyIndex` last seen, 0: must not exist) and the lock the writer
/// holds, if any.
#[derive(Debug)]
pub struct PutVariable {
    pub variable: VariableDecrypted,
    pub cas: Option<u64>,
    pub lock_id: Option<String>,
}

/// A lock operation on a variable.
#[derive(Debug)]
pub enum LockRequest {
    /// Takes the lock for `ttl` (default 15s), writing the items too.
    Acquire {
        variable: VariableDecrypted,
        ttl: Option<Duration>,
    },
    Renew {
        namespace: String,
        path: String,
        lock_id: String,
    },
    Release {
        namespace: String,
        path: String,
        lock_id: String,
    },
}

impl ServerApi {
    /// Writes a variable (create or update).
    pub async fn put_variable(
        &self,
        request: PutVariable,
    ) -> Result<VariableWrite, ServerApiError> {
        let PutVariable {
            variable,
            cas,
            lock_id,
        } = request;
        check_namespace(&variable.meta.namespace)?;
        variable.validate().map_err(invalid)?;
        let sealed = self.seal(&variable).await?;
        let (namespace, path) = (variable.meta.namespace.clone(), variable.meta.path.clone());
        let command = Command::VariableUpsert {
            variable: sealed,
            cas,
            lock_id,
            now: now_nanos(),
        };
        self.write_variable(command, &namespace, &path).await
    }

    /// Deletes a variable (with check-and-set and lock as on a write).
    pub async fn delete_variable(
        &self,
        namespace: &str,
        path: &str,
        cas: Option<u64>,
        lock_id: Option<String>,
    ) -> Result<VariableWrite, ServerApiError> {
        validate_path(path).map_err(invalid)?;
        let command = Command::VariableDelete {
            namespace: namespace.to_string(),
            path: path.to_string(),
            cas,
            lock_id,
            now: now_nanos(),
        };
        self.write_variable(command, namespace, path).await
    }

    /// Acquires, renews or releases a variable's lock. The answer of an
    /// acquire carries the lock's ID, which renew and release need.
    pub async fn lock_variable(
        &self,
        request: LockRequest,
    ) -> Result<VariableWrite, ServerApiError> {
        let now = now_nanos();
        let (op, namespace, path) = match request {
            LockRequest::Acquire { variable, ttl } => {
                check_namespace(&variable.meta.namespace)?;
                variable.validate().map_err(invalid)?;
                let ttl = lock_ttl(ttl)?;
                let lock = VariableLock {
                    id: uuid::Uuid::new_v4().to_string(),
                    ttl: format!("{}s", ttl.as_secs()),
                    lock_delay: format!("{}s", ttl.as_secs()),
                    expires_at: now.saturating_add(ttl.as_nanos() as i64),
                };
                let sealed = self.seal(&variable).await?;
                let (ns, path) = (variable.meta.namespace, variable.meta.path);
                (
                    VariableLockOp::Acquire {
                        variable: Box::new(sealed),
                        lock,
                    },
                    ns,
                    path,
                )
            }
            LockRequest::Renew {
                namespace,
                path,
                lock_id,
            } => {
                let snap = self.snapshot();
                let ttl = snap
                    .variable(&namespace, &path)
                    .and_then(|v| v.meta.lock.as_ref())
                    .and_then(|l| herder::jobspec::parse_go_duration(&l.ttl).ok())
                    .unwrap_or(DEFAULT_LOCK_TTL);
                let op = VariableLockOp::Renew {
                    namespace: namespace.clone(),
                    path: path.clone(),
                    lock_id,
                    expires_at: now.saturating_add(ttl.as_nanos() as i64),
                };
                (op, namespace, path)
            }
            LockRequest::Release {
                namespace,
                path,
                lock_id,
            } => (
                VariableLockOp::Release {
                    namespace: namespace.clone(),
                    path: path.clone(),
                    lock_id,
                },
                namespace,
                path,
            ),
        };
        let command = Command::VariableLock { op, now };
        self.write_variable(command, &namespace, &path).await
    }

    /// Submits a variable command; a refused check-and-set or lock is a
    /// `Conflict` with the variable as it is.
    async fn write_variable(
        &self,
        command: Command,
        namespace: &str,
        path: &str,
    ) -> Result<VariableWrite, ServerApiError> {
        let deleting = matches!(command, Command::VariableDelete { .. });
        match self.writes.submit_raw(command).await? {
            Ok(applied) if deleting => Ok(VariableWrite::Deleted {
                index: applied.index,
            }),
            Ok(_) => {
                let snap = self.snapshot();
                let stored = snap
                    .variable(namespace, path)
                    .ok_or_else(|| ServerApiError::Internal("variable vanished".into()))?;
                Ok(VariableWrite::Written(open_variable(&snap, stored)?))
            }
            Err(StoreError::Rejected(
                ApplyError::VariableConflict { .. } | ApplyError::VariableLocked(_),
            )) => {
                let snap = self.snapshot();
                let current = snap
                    .variable(namespace, path)
                    .map(|v| open_variable(&snap, v))
                    .transpose()?;
                Ok(VariableWrite::Conflict(current))
            }
            Err(e) => Err(super::store_error(e)),
        }
    }

    /// One variable with its items, or `None`.
    pub fn read_variable(
        &self,
        namespace: &str,
        path: &str,
    ) -> Result<Option<VariableDecrypted>, ServerApiError> {
        let snap = self.snapshot();
        snap.variable(namespace, path)
            .map(|v| open_variable(&snap, v))
            .transpose()
    }

    /// Seals `variable`'s items under the active key (made first if the
    /// keyring is empty).
    async fn seal(
        &self,
        variable: &VariableDecrypted,
    ) -> Result<VariableEncrypted, ServerApiError> {
        let key = self.active_root_key().await?;
        let data = keyring::seal(
            &key,
            &variable.meta.namespace,
            &variable.meta.path,
            &variable.items,
        )
        .map_err(keyring_error)?;
        Ok(VariableEncrypted {
            meta: variable.meta.clone(),
            data,
        })
    }

    /// The active root key; the keyring's first, made and replicated now,
    /// when there is none.
    async fn active_root_key(&self) -> Result<Arc<RootKey>, ServerApiError> {
        if let Some(key) = self.snapshot().active_root_key() {
            return Ok(key.clone());
        }
        let key = keyring::new_root_key(now_nanos()).map_err(keyring_error)?;
        self.writes.submit(Command::RootKeyInit { key }).await?;
        self.snapshot()
            .active_root_key()
            .cloned()
            .ok_or_else(|| ServerApiError::Internal("the keyring has no active key".into()))
    }

    // ---- the keyring ----------------------------------------------------

    /// Every root key's metadata (never its material), oldest first.
    pub fn root_keys(&self) -> Vec<RootKeyMeta> {
        root_key_metas(&self.snapshot())
    }

    /// A new active key; the others become inactive. With `full`, every
    /// variable is re-sealed under the new key, and the keys that then
    /// seal nothing are marked deprecated.
    pub async fn rotate_root_key(&self, full: bool) -> Result<RootKeyMeta, ServerApiError> {
        let key = keyring::new_root_key(now_nanos()).map_err(keyring_error)?;
        let key_id = key.meta.key_id.clone();
        self.writes.submit(Command::RootKeyRotate { key }).await?;
        if full {
            self.rekey_all(&key_id).await?;
        }
        self.snapshot()
            .root_key(&key_id)
            .map(|k| k.meta.clone())
            .ok_or_else(|| ServerApiError::Internal("the new root key vanished".into()))
    }

    /// Re-seals every variable not sealed under `key_id` with it.
    async fn rekey_all(&self, key_id: &str) -> Result<(), ServerApiError> {
        let snap = self.snapshot();
        let key = snap
            .root_key(key_id)
            .cloned()
            .ok_or_else(|| ServerApiError::Internal("the new root key vanished".into()))?;
        let stale: Vec<Arc<VariableEncrypted>> = snap
            .variables_by_prefix("*", "")
            .filter(|v| v.data.key_id != key_id)
            .cloned()
            .collect();
        for batch in stale.chunks(REKEY_BATCH) {
            let mut variables = Vec::with_capacity(batch.len());
            for old in batch {
                let opened = open_variable(&snap, old)?;
                let data = keyring::seal(&key, &old.meta.namespace, &old.meta.path, &opened.items)
                    .map_err(keyring_error)?;
                variables.push(VariableEncrypted {
                    meta: old.meta.clone(),
                    data,
                });
            }
            self.writes
                .submit(Command::VariableRekey { variables })
                .await?;
        }
        let snap = self.snapshot();
        let unused: Vec<String> = snap
            .root_keys()
            .filter(|k| k.meta.state == RootKeyState::Inactive)
            .filter(|k| {
                !snap
                    .variables_by_prefix("*", "")
                    .any(|v| v.data.key_id == k.meta.key_id)
            })
            .map(|k| k.meta.key_id.clone())
            .collect();
        for key_id in unused {
            self.writes
                .submit(Command::RootKeySetState {
                    key_id,
                    state: RootKeyState::Deprecated,
                })
                .await?;
        }
        Ok(())
    }

    /// Removes a root key; refused for the active key and for a key that
    /// still seals a variable.
    pub async fn remove_root_key(&self, key_id: &str) -> Result<u64, ServerApiError> {
        let outcome = self
            .writes
            .submit(Command::RootKeyDelete {
                key_id: key_id.to_string(),
            })
            .await?;
        Ok(outcome.index)
    }
}

/// Every root key's metadata in a state, oldest first.
pub fn root_key_metas(snap: &StateSnapshot) -> Vec<RootKeyMeta> {
    let mut keys: Vec<RootKeyMeta> = snap.root_keys().map(|k| k.meta.clone()).collect();
    keys.sort_by_key(|k| (k.create_index, k.key_id.clone()));
    keys
}

/// A stored variable with its items opened, by the key that sealed them.
pub fn open_variable(
    snap: &StateSnapshot,
    stored: &VariableEncrypted,
) -> Result<VariableDecrypted, ServerApiError> {
    let key = snap.root_key(&stored.data.key_id).ok_or_else(|| {
        ServerApiError::Internal(format!(
            "root key {} of variable {:?} is missing",
            stored.data.key_id, stored.meta.path
        ))
    })?;
    let items = keyring::open(key, &stored.meta.namespace, &stored.meta.path, &stored.data)
        .map_err(keyring_error)?;
    Ok(VariableDecrypted {
        meta: stored.meta.clone(),
        items,
    })
}

/// A variable lives in one namespace: not none, not every (`*`).
fn check_namespace(namespace: &str) -> Result<(), ServerApiError> {
    if namespace.is_empty() || namespace == "*" {
        return Err(ServerApiError::Invalid(format!(
            "a variable's namespace must be one namespace, not {namespace:?}"
        )));
    }
    Ok(())
}

fn lock_ttl(ttl: Option<Duration>) -> Result<Duration, ServerApiError> {
    let ttl = ttl.unwrap_or(DEFAULT_LOCK_TTL);
    if ttl < MIN_LOCK_TTL || ttl > MAX_LOCK_TTL {
        return Err(ServerApiError::Invalid(format!(
            "lock TTL must be between {MIN_LOCK_TTL:?} and {MAX_LOCK_TTL:?}"
        )));
    }
    Ok(ttl)
}

fn invalid(e: impl std::fmt::Display) -> ServerApiError {
    ServerApiError::Invalid(e.to_string())
}

fn keyring_error(e: KeyringError) -> ServerApiError {
    ServerApiError::Internal(e.to_string())
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}
