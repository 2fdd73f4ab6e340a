//! What the replicated log carries: a versioned batch of the state store's
//! commands, and what applying one answers.
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
}

impl EntryKind {
    /// Every kind, for the checks that must consider each one.
    pub const ALL: [EntryKind; 1] = [EntryKind::StateCommands];

    /// The oldest herder version that applies entries of this kind.
    pub fn required_version(self) -> semver::Version {
        match self {
            EntryKind::StateCommands => semver::Version::new(0, 1, 0),
        }
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
}

impl LogEntry {
    /// An entry of state commands in this build's encoding.
    pub fn commands(commands: Vec<Command>) -> LogEntry {
        LogEntry {
            version: COMMAND_VERSION,
            kind: EntryKind::StateCommands,
            commands,
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

/// The answer to a write: the index the entry was applied at and the
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
    fn an_entry_from_a_newer_command_encoding_is_not_understood() {
        let mut entry = LogEntry::commands(Vec::new());
        entry.version = COMMAND_VERSION + 1;
        assert!(!entry.is_understood());
    }
}
