//! What the replicated log carries: a versioned batch of the state store's
//! commands, or an operator's snapshot restore ([`RestoreEntry`]), and
//! what applying one answers.
//!
//! Membership changes and the leader's no-op entries are openraft's own
//! payloads (`EntryPayload::Membership`, `EntryPayload::Blank`); everything
//! herder writes is a [`LogEntry`]. Each entry names its [`EntryKind`], so a
//! kind that only newer servers understand can be held back until every
//! server runs such a version (`version_gate`).

use herder::state::{ApplyError, Command, COMMAND_VERSION};
use serde::{Deserialize, Serialize};

/// The kind of a log entry: what a server must understand to apply it.
///
/// A new kind (or a new `Command` variant that older servers cannot
/// decode) gets a new variant here with the first herder version that
/// applies it, in [`EntryKind::required_version`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub enum EntryKind {
    /// A batch of `herder::state::Command`s in the encoding of
    /// `COMMAND_VERSION` 1.
    StateCommands,
    /// A batch that holds keyring commands (variables and root keys,
    /// `Command::is_keyring`), which servers before 0.2.0 cannot decode.
    /// Held back until every server runs 0.2.0 (the seed's lesson from
    /// Nomad 1.4: a keyring entry written while a 1.3 server was still a
    /// member crashed it).
    Keyring,
    /// A batch that holds autopilot's configuration
    /// (`Command::is_autopilot`), which servers before 0.3.0 cannot decode.
    Autopilot,
    /// An operator's snapshot restore ([`RestoreEntry`]): a server before
    /// 0.3.0 would not know the field and apply an empty batch instead,
    /// leaving its state apart from the others'.
    SnapshotRestore,
}

impl EntryKind {
    /// Every kind, for the checks that must consider each one.
    pub const ALL: [EntryKind; 4] = [
        EntryKind::StateCommands,
        EntryKind::Keyring,
        EntryKind::Autopilot,
        EntryKind::SnapshotRestore,
    ];

    /// The oldest herder version that applies entries of this kind.
    pub fn required_version(self) -> semver::Version {
        match self {
            EntryKind::StateCommands => semver::Version::new(0, 1, 0),
            EntryKind::Keyring => semver::Version::new(0, 2, 0),
            EntryKind::Autopilot | EntryKind::SnapshotRestore => semver::Version::new(0, 3, 0),
        }
    }

    /// The kind a batch of commands needs: the newest any of them needs.
    pub fn of(commands: &[Command]) -> EntryKind {
        if commands.iter().any(Command::is_autopilot) {
            EntryKind::Autopilot
        } else if commands.iter().any(Command::is_keyring) {
            EntryKind::Keyring
        } else {
            EntryKind::StateCommands
        }
    }
}

/// An operator's snapshot restore carried by the log: the state store's
/// checkpoint, checked whole by the server that took the file, which
/// every replica puts in place of its state at the entry's index
/// (`state_machine`).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RestoreEntry {
    /// The index the snapshot was saved at: the restored state lands past
    /// it, so no row is newer than the state that holds it.
    pub saved_index: u64,
    /// `StateStore::encode_checkpoint`'s archive, base64 in the log's
    /// JSON (a third more than the bytes, against four times as an
    /// array of numbers).
    #[serde(with = "base64_bytes")]
    pub checkpoint: Vec<u8>,
}

impl std::fmt::Debug for RestoreEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestoreEntry")
            .field("saved_index", &self.saved_index)
            .field("checkpoint_bytes", &self.checkpoint.len())
            .finish()
    }
}

impl RestoreEntry {
    /// The most bytes an entry carrying a checkpoint of `checkpoint_bytes`
    /// takes in the log's JSON (base64, plus room for the envelope): what
    /// the transport between servers must let through.
    pub fn encoded_bound(checkpoint_bytes: usize) -> usize {
        checkpoint_bytes.div_ceil(3) * 4 + 4096
    }
}

mod base64_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(input)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

/// One replicated log entry: commands applied together at the entry's log
/// index, which is the state index they are applied at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct LogEntry {
    /// The command encoding version (`herder::state::COMMAND_VERSION`) of
    /// the writer. A server refuses to apply a newer one instead of
    /// guessing (the version gate keeps that from happening).
    pub version: u32,
    pub kind: EntryKind,
    pub commands: Vec<Command>,
    /// An operator's restore (kind `SnapshotRestore`, no commands); left
    /// out of the encoding otherwise, so other entries read as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreEntry>,
}

impl LogEntry {
    /// An entry of state commands in this build's encoding.
    pub fn commands(commands: Vec<Command>) -> LogEntry {
        LogEntry {
            version: COMMAND_VERSION,
            kind: EntryKind::of(&commands),
            commands,
            restore: None,
        }
    }

    /// An entry that replaces the whole state by a checked checkpoint.
    pub fn restore(restore: RestoreEntry) -> LogEntry {
        LogEntry {
            version: COMMAND_VERSION,
            kind: EntryKind::SnapshotRestore,
            commands: Vec::new(),
            restore: Some(restore),
        }
    }

    /// Whether this build can apply the entry.
    pub fn is_understood(&self) -> bool {
        self.version <= COMMAND_VERSION
    }
}

/// What became of one command of an applied entry. A rejected command
/// changed nothing (the store's `ApplyError`, typed: a forwarded write's
/// writer classifies it as if it had applied the command itself).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub enum CommandResult {
    Applied,
    Rejected(ApplyError),
}

/// The answer to a write: the state index the entry was applied at (the
/// entry's log index, moved on by every restore that had to land past
/// its log index, see `state_machine::Position::index_offset`) and the
/// outcome of each of its commands, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct WriteResponse {
    pub index: u64,
    pub results: Vec<CommandResult>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TypeConfig;
    use herder::state::fixtures;
    use herder::structs::TriggeredBy;
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
    use std::sync::Arc;

    #[test]
    fn a_log_entry_of_real_commands_survives_the_log_encoding() {
        let job = fixtures::job("default", "web", &[("frontend", 3)]);
        let eval = fixtures::eval(&job, TriggeredBy::JobRegister, 1_700_000_000);
        let node = fixtures::node("node-1");
        let entry = Entry::<TypeConfig> {
            log_id: LogId::new(CommittedLeaderId::new(3, 1), 42),
            payload: EntryPayload::Normal(LogEntry::commands(vec![
                Command::JobRegister {
                    job: Arc::new(job),
                    eval: Some(eval),
                    enforce_index: None,
                },
                Command::NodeRegister {
                    node: Arc::new(node),
                },
            ])),
        };
        let bytes = serde_json::to_vec(&entry).unwrap();
        let decoded: Entry<TypeConfig> = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(decoded.log_id, entry.log_id);
        match (decoded.payload, entry.payload) {
            (EntryPayload::Normal(decoded), EntryPayload::Normal(original)) => {
                assert_eq!(decoded, original);
                assert_eq!(decoded.kind, EntryKind::StateCommands);
                assert!(decoded.is_understood());
            }
            _ => panic!("the payload changed kind"),
        }
    }

    #[test]
    fn a_batch_with_a_keyring_command_is_of_the_keyring_kind() {
        let plain = LogEntry::commands(vec![Command::ReconcileJobSummaries]);
        assert_eq!(plain.kind, EntryKind::StateCommands);
        let keyring = LogEntry::commands(vec![
            Command::ReconcileJobSummaries,
            Command::RootKeyDelete { key_id: "k".into() },
        ]);
        assert_eq!(keyring.kind, EntryKind::Keyring);
        assert_eq!(
            keyring.kind.required_version(),
            semver::Version::new(0, 2, 0)
        );
    }

    #[test]
    fn a_restore_entry_is_gated_and_survives_the_log_encoding() {
        let entry = LogEntry::restore(RestoreEntry {
            saved_index: 42,
            checkpoint: vec![0, 1, 2, 250, 251, 252, 253],
        });
        assert_eq!(entry.kind.required_version(), semver::Version::new(0, 3, 0));
        let text = serde_json::to_string(&entry).unwrap();
        assert!(text.contains("\"Checkpoint\":\"AAEC+vv8/Q==\""), "{text}");
        assert!(text.len() <= RestoreEntry::encoded_bound(7), "{text}");
        let decoded: LogEntry = serde_json::from_str(&text).unwrap();
        assert_eq!(decoded, entry);
        let plain = serde_json::to_string(&LogEntry::commands(Vec::new())).unwrap();
        assert!(!plain.contains("Restore"), "{plain}");
    }

    #[test]
    fn a_batch_with_autopilots_configuration_needs_0_3_0() {
        let entry = LogEntry::commands(vec![Command::AutopilotConfigUpdate {
            config: Default::default(),
            cas_index: None,
        }]);
        assert_eq!(entry.kind, EntryKind::Autopilot);
        assert_eq!(entry.kind.required_version(), semver::Version::new(0, 3, 0));
    }

    #[test]
    fn an_entry_from_a_newer_command_encoding_is_not_understood() {
        let mut entry = LogEntry::commands(Vec::new());
        entry.version = COMMAND_VERSION + 1;
        assert!(!entry.is_understood());
    }
}
