//! The version gate: a kind of log entry is written only when every server
//! of the cluster runs a version that applies it.
//!
//! A server that cannot decode an entry cannot apply it, and a replicated
//! log with an entry one replica skips is a split state. So the leader
//! checks the versions every server advertises before it proposes an entry
//! of a kind, and refuses the write with an error that names the servers
//! that hold it back (as Nomad's `ServersMeetMinimumVersion`).

use crate::entry::EntryKind;
use crate::NodeId;

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
        older: Vec<(NodeId, semver::Version)>,
    },
}

fn describe(older: &[(NodeId, semver::Version)]) -> String {
    let parts: Vec<String> = older
        .iter()
        .map(|(id, version)| format!("server {id} at {version}"))
        .collect();
    parts.join(", ")
}

/// Whether `kind` may be written in a cluster whose servers run
/// `cluster_versions` (one per voting server). Pre-release versions count
/// as older than their release (semver's order), so a 0.2.0-dev server
/// does not unlock what 0.2.0 brings.
pub fn can_write(
    kind: EntryKind,
    cluster_versions: &[(NodeId, semver::Version)],
) -> Result<(), GateError> {
    if cluster_versions.is_empty() {
        return Err(GateError::NoServers { kind });
    }
    let required = kind.required_version();
    let older: Vec<(NodeId, semver::Version)> = cluster_versions
        .iter()
        .filter(|(_, version)| *version < required)
        .cloned()
        .collect();
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

    #[test]
    fn every_server_new_enough_may_write() {
        let cluster = [(1, v("0.1.0")), (2, v("0.3.2")), (3, v("1.0.0"))];
        assert_eq!(can_write(EntryKind::StateCommands, &cluster), Ok(()));
    }

    #[test]
    fn one_old_server_blocks_the_kind_and_is_named() {
        let cluster = [(1, v("0.1.0")), (2, v("0.0.9")), (3, v("0.1.0"))];
        let err = can_write(EntryKind::StateCommands, &cluster).unwrap_err();
        assert_eq!(
            err,
            GateError::ServersTooOld {
                kind: EntryKind::StateCommands,
                required: v("0.1.0"),
                older: vec![(2, v("0.0.9"))],
            }
        );
        let message = err.to_string();
        assert!(message.contains("server 2 at 0.0.9"), "{message}");
        assert!(message.contains("0.1.0 or newer"), "{message}");
    }

    #[test]
    fn a_pre_release_of_the_required_version_is_too_old() {
        let cluster = [(1, v("0.1.0")), (2, v("0.1.0-dev"))];
        assert!(matches!(
            can_write(EntryKind::StateCommands, &cluster),
            Err(GateError::ServersTooOld { older, .. }) if older == vec![(2, v("0.1.0-dev"))]
        ));
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
