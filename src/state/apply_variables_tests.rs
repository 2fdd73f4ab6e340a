//! The keyring's commands at apply: check-and-set, locks, one active key,
//! and no key removed while it seals a variable.

use super::*;
use crate::state::VariableLockOp;
use crate::structs::{
    EncryptedData, KeyMaterial, RootKey, RootKeyMeta, RootKeyState, VariableEncrypted,
    VariableLock, VariableMetadata,
};

fn key(id: &str) -> RootKey {
    RootKey {
        meta: RootKeyMeta {
            key_id: id.into(),
            algorithm: "aes256-gcm".into(),
            ..Default::default()
        },
        key: KeyMaterial(vec![7; 32]),
    }
}

fn sealed(path: &str, key_id: &str) -> VariableEncrypted {
    VariableEncrypted {
        meta: VariableMetadata {
            namespace: "default".into(),
            path: path.into(),
            ..Default::default()
        },
        data: EncryptedData {
            key_id: key_id.into(),
            nonce: vec![1; 12],
            ciphertext: vec![2; 20],
        },
    }
}

fn upsert(path: &str, key_id: &str, cas: Option<u64>) -> Command {
    Command::VariableUpsert {
        variable: sealed(path, key_id),
        cas,
        lock_id: None,
        now: 100,
    }
}

fn keyring() -> Harness {
    let mut h = Harness::new();
    h.ok(Command::RootKeyInit { key: key("k1") });
    h
}

#[test]
fn the_first_key_is_stored_once_even_when_servers_race() {
    let mut h = keyring();
    h.ok(Command::RootKeyInit { key: key("k2") });
    let ids: Vec<&str> = h
        .state
        .root_keys()
        .map(|k| k.meta.key_id.as_str())
        .collect();
    assert_eq!(ids, ["k1"]);
    assert_eq!(h.state.active_root_key().unwrap().meta.key_id, "k1");
}

#[test]
fn check_and_set_refuses_a_stale_index_and_keeps_the_create_index() {
    let mut h = keyring();
    let created = h.ok(upsert("a/b", "k1", Some(0)));
    assert_eq!(
        h.rejected(upsert("a/b", "k1", Some(0))),
        ApplyError::VariableConflict {
            expected: 0,
            actual: created
        }
    );
    let updated = h.ok(upsert("a/b", "k1", Some(created)));
    let row = h.state.variable("default", "a/b").unwrap();
    assert_eq!(
        (row.meta.create_index, row.meta.modify_index),
        (created, updated)
    );
    assert_eq!(
        h.rejected(Command::VariableDelete {
            namespace: "default".into(),
            path: "a/b".into(),
            cas: Some(created),
            lock_id: None,
            now: 100,
        }),
        ApplyError::VariableConflict {
            expected: created,
            actual: updated
        }
    );
    h.ok(Command::VariableDelete {
        namespace: "default".into(),
        path: "a/b".into(),
        cas: Some(updated),
        lock_id: None,
        now: 100,
    });
    assert!(h.state.variable("default", "a/b").is_none());
}

#[test]
fn a_variable_sealed_with_an_unknown_key_is_refused() {
    let mut h = keyring();
    assert!(matches!(
        h.rejected(upsert("a", "nope", None)),
        ApplyError::KeyringRefused(_)
    ));
}

#[test]
fn rotation_leaves_one_active_key_and_a_used_key_cannot_go() {
    let mut h = keyring();
    h.ok(upsert("a", "k1", None));
    h.ok(Command::RootKeyRotate { key: key("k2") });
    let states: Vec<(String, RootKeyState)> = h
        .state
        .root_keys()
        .map(|k| (k.meta.key_id.clone(), k.meta.state))
        .collect();
    assert_eq!(
        states,
        [
            ("k1".to_string(), RootKeyState::Inactive),
            ("k2".to_string(), RootKeyState::Active)
        ]
    );
    let refused = h.rejected(Command::RootKeyDelete {
        key_id: "k1".into(),
    });
    assert!(refused.to_string().contains("in use by 1"), "{refused}");
    assert!(matches!(
        h.rejected(Command::RootKeyDelete {
            key_id: "k2".into()
        }),
        ApplyError::KeyringRefused(_)
    ));
    let mut moved = sealed("a", "k2");
    moved.meta.modify_index = h.state.variable("default", "a").unwrap().meta.modify_index;
    h.ok(Command::VariableRekey {
        variables: vec![moved],
    });
    h.ok(Command::RootKeyDelete {
        key_id: "k1".into(),
    });
    assert!(h.state.root_key("k1").is_none());
}

#[test]
fn a_lock_keeps_others_out_until_released_or_expired() {
    let mut h = keyring();
    let lock = VariableLock {
        id: "L1".into(),
        ttl: "10s".into(),
        expires_at: 1_000,
        ..Default::default()
    };
    h.ok(Command::VariableLock {
        op: VariableLockOp::Acquire {
            variable: Box::new(sealed("lk", "k1")),
            lock,
        },
        now: 100,
    });
    assert!(matches!(
        h.rejected(upsert("lk", "k1", None)),
        ApplyError::VariableLocked(_)
    ));
    let mut holder = upsert("lk", "k1", None);
    if let Command::VariableUpsert { lock_id, .. } = &mut holder {
        *lock_id = Some("L1".into());
    }
    h.ok(holder);
    let release = |id: &str| Command::VariableLock {
        op: VariableLockOp::Release {
            namespace: "default".into(),
            path: "lk".into(),
            lock_id: id.into(),
        },
        now: 200,
    };
    assert!(matches!(
        h.rejected(release("L2")),
        ApplyError::VariableLocked(_)
    ));
    // Past its expiry the lock binds nobody.
    let mut late = upsert("lk", "k1", None);
    if let Command::VariableUpsert { now, .. } = &mut late {
        *now = 2_000;
    }
    h.ok(late);
    h.ok(upsert("x", "k1", None));
    let mut h = keyring();
    h.ok(Command::VariableLock {
        op: VariableLockOp::Acquire {
            variable: Box::new(sealed("lk", "k1")),
            lock: VariableLock {
                id: "L1".into(),
                expires_at: 1_000,
                ..Default::default()
            },
        },
        now: 100,
    });
    h.ok(release("L1"));
    assert!(h
        .state
        .variable("default", "lk")
        .unwrap()
        .meta
        .lock
        .is_none());
    h.ok(upsert("lk", "k1", None));
}
