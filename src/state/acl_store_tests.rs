//! The ACL tables through the store: upserts keep their create index,
//! the bootstrap is refused a second time unless the reset index is
//! given, deletes of unknown rows fail, and every row survives a reopen
//! (through the log and through the checkpoint).

use super::{ApplyError, Command, StateStore, StoreError, StoreOptions, Table};
use crate::structs::{AclPolicy, AclRole, AclToken};

fn token(accessor: &str, secret: &str) -> AclToken {
    AclToken {
        accessor_id: accessor.into(),
        secret_id: secret.into(),
        r#type: "client".into(),
        policies: vec!["readonly".into()],
        ..AclToken::default()
    }
}

fn policy(name: &str) -> AclPolicy {
    AclPolicy {
        name: name.into(),
        rules: r#"namespace "default" { policy = "read" }"#.into(),
        ..AclPolicy::default()
    }
}

fn bootstrap(reset_index: u64, accessor: &str) -> Command {
    let mut t = token(accessor, &format!("secret-{accessor}"));
    t.r#type = "management".into();
    t.policies.clear();
    Command::AclBootstrap {
        token: t,
        reset_index,
    }
}

#[test]
fn bootstrap_once_then_only_with_the_reset_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let at = store.apply(bootstrap(0, "root")).unwrap().index;
    assert_eq!(store.snapshot().acl_bootstrap_index(), at);
    let again = store.apply(bootstrap(0, "root2"));
    assert!(
        matches!(again, Err(StoreError::Rejected(ApplyError::AclBootstrapDone { reset_index })) if reset_index == at),
        "{again:?}"
    );
    assert!(store.apply(bootstrap(at + 100, "root2")).is_err());
    let reset = store.apply(bootstrap(at, "root2")).unwrap().index;
    let snap = store.snapshot();
    assert_eq!(snap.acl_bootstrap_index(), reset);
    assert!(snap
        .acl_token_by_secret("secret-root2")
        .is_some_and(|t| t.is_management()));
}

#[test]
fn rows_survive_reopen_and_the_secret_index_follows_updates() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
        store
            .apply(Command::AclPolicyUpsert {
                policies: vec![policy("readonly"), policy("other")],
            })
            .unwrap();
        let created = store
            .apply(Command::AclTokenUpsert {
                tokens: vec![token("a1", "s1")],
            })
            .unwrap()
            .index;
        // A new secret for the same accessor: the old one stops working.
        let updated = store
            .apply(Command::AclTokenUpsert {
                tokens: vec![token("a1", "s2")],
            })
            .unwrap()
            .index;
        let snap = store.snapshot();
        let t = snap.acl_token("a1").unwrap();
        assert_eq!((t.create_index, t.modify_index), (created, updated));
        assert!(snap.acl_token_by_secret("s1").is_none());
        assert_eq!(snap.table_index(Table::AclTokens), updated);
        store
            .apply(Command::AclRoleUpsert {
                roles: vec![AclRole {
                    id: "r1".into(),
                    name: "ops".into(),
                    ..AclRole::default()
                }],
            })
            .unwrap();
        store
            .apply(Command::AclPolicyDelete {
                names: vec!["other".into()],
            })
            .unwrap();
        assert!(store
            .apply(Command::AclPolicyDelete {
                names: vec!["never".into()],
            })
            .is_err());
        store
            .apply(Command::AclTokenUpsert {
                tokens: vec![token("a2", "s3")],
            })
            .unwrap();
    }
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let snap = store.snapshot();
    assert_eq!(
        snap.acl_policies()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["readonly"]
    );
    assert_eq!(snap.acl_token_by_secret("s2").unwrap().accessor_id, "a1");
    assert_eq!(snap.acl_token_by_secret("s3").unwrap().accessor_id, "a2");
    assert_eq!(snap.acl_role_by_name("ops").unwrap().id, "r1");

    // A checkpoint (the Raft snapshot) carries them too.
    let mut archive = Vec::new();
    store.export_checkpoint(&mut archive).unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let other = StateStore::open(other_dir.path(), StoreOptions::default()).unwrap();
    other
        .import_checkpoint(&mut archive.as_slice(), Vec::new())
        .unwrap();
    assert_eq!(other.snapshot(), store.snapshot());
}

#[test]
fn a_role_name_is_unique() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path(), StoreOptions::default()).unwrap();
    let role = |id: &str| AclRole {
        id: id.into(),
        name: "ops".into(),
        ..AclRole::default()
    };
    store
        .apply(Command::AclRoleUpsert {
            roles: vec![role("r1")],
        })
        .unwrap();
    assert!(store
        .apply(Command::AclRoleUpsert {
            roles: vec![role("r2")],
        })
        .is_err());
}
