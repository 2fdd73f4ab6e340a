//! The version gate: a kind of log entry is written only when every server
//! of the cluster runs a version that applies it.
//!
//! A server that cannot decode an entry cannot apply it, and a replicated
//! log with an entry one replica skips is a split state. So the leader
//! checks the versions every server advertises before it proposes an entry
//! of a kind, and refuses the write with an error that names the servers
//! that hold it back (as Nomad's `ServersMeetMinimumVersion`).
//!
//! The other side of the same rule: a server may join only when it applies
//! every kind the members could already have written ([`can_join`]), so a
//! kind unlocked once never meets a server that cannot read it.

use crate::entry::EntryKind;
use crate::server_node::ServerNode;

/// Why an entry kind may not be written now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("no server versions are known; refusing to write {kind:?} entries")]
    NoServers { kind: EntryKind },
    #[error(
        "{kind:?} entries need every server at version {required} or newer; \
         older: {}",
        describe(.older)
    )]
    ServersTooOld {
        kind: EntryKind,
        required: semver::Version,
        /// The servers that hold the write back, as the membership
        /// records them.
        older: Vec<ServerNode>,
    },
    #[error(
        "{joiner} at version {} cannot join: every member applies {kind:?} entries, \
         which need {required} or newer; upgrade it first",
        describe_version(&joiner.version)
    )]
    JoinerTooOld {
        joiner: ServerNode,
        kind: EntryKind,
        required: semver::Version,
    },
}

fn describe_version(version: &str) -> &str {
    if version.is_empty() {
        "unknown"
    } else {
        version
    }
}

/// Whether `server` runs a version that applies entries of `kind`.
fn applies(server: &ServerNode, kind: EntryKind) -> bool {
    semver::Version::parse(server.version.trim()).is_ok_and(|v| v >= kind.required_version())
}

fn describe(older: &[ServerNode]) -> String {
    let parts: Vec<String> = older
        .iter()
        .map(|server| match server.version.as_str() {
            "" => format!("{server} at an unknown version"),
            version => format!("{server} at {version}"),
        })
        .collect();
    parts.join(", ")
}

/// Whether `kind` may be written in a cluster of `servers` (every member,
/// voters and learners: each of them applies the entry). Pre-release
/// versions count as older than their release (semver's order), so a
/// 0.2.0-dev server does not unlock what 0.2.0 brings; a server that
/// advertises no version, or one that is not semver, counts as too old.
pub fn can_write<'a>(
    kind: EntryKind,
    servers: impl IntoIterator<Item = &'a ServerNode>,
) -> Result<(), GateError> {
    let required = kind.required_version();
    let mut any = false;
    let mut older = Vec::new();
    for server in servers {
        any = true;
        if !applies(server, kind) {
            older.push(server.clone());
        }
    }
    if !any {
        return Err(GateError::NoServers { kind });
    }
    if older.is_empty() {
        Ok(())
    } else {
        Err(GateError::ServersTooOld {
            kind,
            required,
            older,
        })
    }
}

/// Whether `joiner` may join a cluster of `members`: it must apply every
/// kind the members may write today (a kind still held back by an old
/// member binds nobody).
pub fn can_join<'a>(
    joiner: &ServerNode,
    members: impl IntoIterator<Item = &'a ServerNode> + Clone,
) -> Result<(), GateError> {
    for kind in EntryKind::ALL {
        if can_write(kind, members.clone()).is_ok() && !applies(joiner, kind) {
            return Err(GateError::JoinerTooOld {
                joiner: joiner.clone(),
                kind,
                required: kind.required_version(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> semver::Version {
        semver::Version::parse(text).unwrap()
    }

    fn server(n: u32, version: &str) -> ServerNode {
        ServerNode {
            name: format!("s{n}.global"),
            ..ServerNode::at(format!("10.0.0.{n}:4647")).with_version(version)
        }
    }

    #[test]
    fn every_server_new_enough_may_write() {
        let cluster = [server(1, "0.1.0"), server(2, "0.3.2"), server(3, "1.0.0")];
        assert_eq!(can_write(EntryKind::StateCommands, &cluster), Ok(()));
    }

    #[test]
    fn one_old_server_blocks_the_kind_and_is_named() {
        let cluster = [server(1, "0.1.0"), server(2, "0.0.9"), server(3, "0.1.0")];
        let err = can_write(EntryKind::StateCommands, &cluster).unwrap_err();
        assert_eq!(
            err,
            GateError::ServersTooOld {
                kind: EntryKind::StateCommands,
                required: v("0.1.0"),
                older: vec![server(2, "0.0.9")],
            }
        );
        let message = err.to_string();
        assert!(
            message.contains("s2.global (10.0.0.2:4647) at 0.0.9"),
            "{message}"
        );
        assert!(message.contains("0.1.0 or newer"), "{message}");
    }

    #[test]
    fn a_pre_release_of_the_required_version_is_too_old() {
        let cluster = [server(1, "0.1.0"), server(2, "0.1.0-dev")];
        assert!(matches!(
            can_write(EntryKind::StateCommands, &cluster),
            Err(GateError::ServersTooOld { older, .. }) if older == vec![server(2, "0.1.0-dev")]
        ));
    }

    #[test]
    fn a_server_of_unknown_version_is_too_old() {
        let cluster = [server(1, "0.1.0"), server(2, ""), server(3, "latest")];
        let err = can_write(EntryKind::StateCommands, &cluster).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("s2.global (10.0.0.2:4647) at an unknown version"),
            "{message}"
        );
        assert!(
            message.contains("s3.global (10.0.0.3:4647) at latest"),
            "{message}"
        );
    }

    #[test]
    fn unknown_cluster_versions_refuse() {
        assert_eq!(
            can_write(EntryKind::StateCommands, &[]),
            Err(GateError::NoServers {
                kind: EntryKind::StateCommands
            })
        );
    }

    #[test]
    fn keyring_entries_wait_for_every_server_at_0_2_0() {
        let mixed = [server(1, "0.2.0"), server(2, "0.1.0"), server(3, "0.2.0")];
        let err = can_write(EntryKind::Keyring, &mixed).unwrap_err();
        assert!(
            matches!(&err, GateError::ServersTooOld { older, .. } if older == &vec![server(2, "0.1.0")]),
            "{err:?}"
        );
        assert_eq!(can_write(EntryKind::StateCommands, &mixed), Ok(()));
        let upgraded = [server(1, "0.2.0"), server(2, "0.2.1"), server(3, "0.2.0")];
        assert_eq!(can_write(EntryKind::Keyring, &upgraded), Ok(()));
        // Once it is unlocked, a 0.1.0 server may no longer join.
        assert!(can_join(&server(4, "0.1.0"), &upgraded).is_err());
    }

    #[test]
    fn a_server_too_old_for_what_the_members_write_may_not_join() {
        let current = [server(1, "0.1.0"), server(2, "0.2.0")];
        assert_eq!(can_join(&server(3, "0.1.0"), &current), Ok(()));
        let err = can_join(&server(3, "0.0.9"), &current).unwrap_err();
        assert!(
            matches!(
                err,
                GateError::JoinerTooOld {
                    kind: EntryKind::StateCommands,
                    ..
                }
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains("s3.global (10.0.0.3:4647) at version 0.0.9"),
            "{message}"
        );
        assert!(message.contains("upgrade it first"), "{message}");
        // A kind an old member still holds back binds nobody yet.
        let mixed = [server(1, "0.1.0"), server(2, "0.0.9")];
        assert_eq!(can_join(&server(3, "0.0.9"), &mixed), Ok(()));
    }
}
