//! The version gate: a kind of log entry is written only when every server
//! of the cluster runs a version that applies it.
//!
//! A server that cannot decode an entry cannot apply it, and a replicated
//! log with an entry one replica skips is a split state. So the leader
//! checks the versions every server advertises before it proposes an entry
//! of a kind, and refuses the write with an error that names the servers
//! that hold it back (as Nomad's `ServersMeetMinimumVersion`).

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
        let new_enough =
            semver::Version::parse(server.version.trim()).is_ok_and(|version| version >= required);
        if !new_enough {
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
}
