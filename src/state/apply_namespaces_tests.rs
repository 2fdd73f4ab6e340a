//! The namespace commands: create and update keep Nomad's indexes,
//! `default` is always there and never deleted, and jobs can neither be
//! written into a missing namespace nor leave one deletable while live.

use super::*;
use crate::structs::Namespace;

fn namespace(name: &str, description: &str) -> Namespace {
    Namespace {
        name: name.into(),
        description: description.into(),
        ..Default::default()
    }
}

fn upsert(h: &mut Harness, ns: Namespace) -> u64 {
    h.ok(Command::NamespaceUpsert {
        namespaces: vec![ns],
    })
}

fn refusal(h: &mut Harness, cmd: Command) -> String {
    match h.rejected(cmd) {
        ApplyError::NamespaceRefused(text) => text,
        other => panic!("refused for another reason: {other:?}"),
    }
}

fn names(h: &Harness, prefix: &str) -> Vec<String> {
    h.state
        .namespaces_by_prefix(prefix)
        .iter()
        .map(|ns| ns.name.clone())
        .collect()
}

#[test]
fn upsert_sets_indexes_and_keeps_create_index_across_updates() {
    let mut h = Harness::new();
    let created = upsert(&mut h, namespace("api-prod", "Production API Servers"));
    let ns = h.state.namespace("api-prod").expect("created");
    assert_eq!((ns.create_index, ns.modify_index), (created, created));
    assert_eq!(h.state.table_index(Table::Namespaces), created);

    let updated = upsert(&mut h, namespace("api-prod", "changed"));
    let ns = h.state.namespace("api-prod").expect("still there");
    assert_eq!(ns.description, "changed");
    assert_eq!((ns.create_index, ns.modify_index), (created, updated));

    // The same namespace again changes no row (but the command's index).
    let applied = h
        .apply(Command::NamespaceUpsert {
            namespaces: vec![namespace("api-prod", "changed")],
        })
        .expect("applies");
    assert!(applied.changes.is_empty(), "{applied:?}");
    assert_eq!(h.state.namespace("api-prod").unwrap().modify_index, updated);
}

#[test]
fn an_invalid_namespace_is_refused_with_nomads_words() {
    let mut h = Harness::new();
    let text = refusal(
        &mut h,
        Command::NamespaceUpsert {
            namespaces: vec![namespace("ok", ""), namespace("no spaces", "")],
        },
    );
    assert_eq!(
        text,
        r#"Invalid namespace "no spaces": invalid name "no spaces". Must match regex ^[a-zA-Z0-9-]{1,128}$"#
    );
    assert!(h.state.namespace("ok").is_none(), "all or nothing");
}

#[test]
fn default_is_always_listed_and_never_deleted() {
    let mut h = Harness::new();
    let default = h
        .state
        .namespace("default")
        .expect("present before any write");
    assert_eq!(default.description, "Default shared namespace");
    upsert(&mut h, namespace("api", ""));
    upsert(&mut h, namespace("batch", ""));
    assert_eq!(names(&h, ""), ["api", "batch", "default"]);
    assert_eq!(names(&h, "b"), ["batch"]);
    assert_eq!(names(&h, "de"), ["default"]);

    let text = refusal(
        &mut h,
        Command::NamespaceDelete {
            names: vec!["default".into()],
        },
    );
    assert_eq!(text, "can not delete default namespace");

    // Writing `default` stores it with the new description.
    upsert(&mut h, namespace("default", "ours"));
    assert_eq!(h.state.namespace("default").unwrap().description, "ours");
    assert_eq!(names(&h, ""), ["api", "batch", "default"]);
}

#[test]
fn a_job_into_a_missing_namespace_is_refused() {
    let mut h = Harness::new();
    let job = fixtures::job("team-a", "web", &[("frontend", 1)]);
    let text = refusal(
        &mut h,
        Command::JobRegister {
            job: Arc::new(job.clone()),
            eval: None,
            enforce_index: None,
        },
    );
    assert_eq!(text, r#"job "web" is in nonexistent namespace "team-a""#);
    let dispatched = Command::JobDispatch {
        job: Arc::new(job.clone()),
        eval: None,
    };
    refusal(&mut h, dispatched);

    upsert(&mut h, namespace("team-a", ""));
    h.register(&job);
    assert!(h.state.job("team-a", "web").is_some());
}

#[test]
fn a_namespace_with_a_live_job_cannot_be_deleted_until_the_job_is_gone() {
    let mut h = Harness::new();
    upsert(&mut h, namespace("team-a", ""));
    let job = fixtures::job("team-a", "web", &[("frontend", 1)]);
    h.register(&job);
    let delete = Command::NamespaceDelete {
        names: vec!["team-a".into()],
    };
    let text = refusal(&mut h, delete.clone());
    assert_eq!(
        text,
        "namespace \"team-a\" contains at least one non-terminal job \"web\". \
         All jobs must be terminal in namespace before it can be deleted"
    );

    h.ok(Command::JobDeregister {
        namespace: "team-a".into(),
        job_id: "web".into(),
        purge: true,
        eval: None,
    });
    let applied = h.apply(delete.clone()).expect("deletes");
    assert_eq!(applied.changes[0].key, RowKey::Namespace("team-a".into()));
    assert_eq!(applied.changes[0].row, None);
    assert!(h.state.namespace("team-a").is_none());
    assert!(!h.state.namespace_exists("team-a"));
    assert_eq!(h.state.table_index(Table::Namespaces), applied.index);

    let text = refusal(&mut h, delete);
    assert_eq!(text, r#"namespace "team-a" not found"#);
}

#[test]
fn namespace_commands_encode_with_their_type_tag() {
    let cmd = crate::state::CommandEnvelope::new(Command::NamespaceDelete {
        names: vec!["a".into()],
    });
    assert_eq!(
        serde_json::to_string(&cmd).unwrap(),
        r#"{"Version":1,"Command":{"Type":"NamespaceDelete","names":["a"]}}"#
    );
}
