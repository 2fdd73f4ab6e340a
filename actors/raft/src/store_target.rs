//! The state store as the replicated log's state machine: each committed
//! entry is a batch applied at the entry's log index, the log position is
//! stored in the same state store record as the rows it belongs to, a
//! snapshot is the store's checkpoint archive, and an operator's restore
//! entry puts its checkpoint in place at the entry's state index
//! (`StateStore::restore_checkpoint_at`).

use crate::entry::CommandResult;
use crate::state_machine::{BatchToApply, StateMachineTarget, TargetError, TargetSnapshot};
use herder::state::{BatchOutcome, Command, StateStore, StoreError};

fn target_error(what: &str, error: StoreError) -> TargetError {
    TargetError(format!("{what}: {error}"))
}

/// A batch's outcomes as the log's answer: a command the state refused is
/// a rejection every replica shares; a store failure stops the replica.
fn command_results(
    index: u64,
    outcome: Result<BatchOutcome, StoreError>,
) -> Result<Vec<CommandResult>, TargetError> {
    let outcomes =
        outcome.map_err(|e| target_error(&format!("applying the entry at {index}"), e))?;
    Ok(outcomes
        .into_iter()
        .map(|outcome| match outcome {
            Ok(_) => CommandResult::Applied,
            Err(rejected) => CommandResult::Rejected(rejected),
        })
        .collect())
}

impl StateMachineTarget for StateStore {
    fn apply_batch(
        &self,
        index: u64,
        commands: &[Command],
        position: &[u8],
    ) -> Result<Vec<CommandResult>, TargetError> {
        let outcome = self.apply_batch_at(index, commands.to_vec(), position.to_vec());
        command_results(index, outcome)
    }

    /// All at once: the store's group commit makes them durable with one
    /// sync.
    fn apply_batches(
        &self,
        batches: Vec<BatchToApply<'_>>,
    ) -> Result<Vec<Vec<CommandResult>>, TargetError> {
        let indexes: Vec<u64> = batches.iter().map(|b| b.index).collect();
        let queued = batches
            .into_iter()
            .map(|b| (b.index, b.commands.to_vec(), b.position))
            .collect();
        indexes
            .into_iter()
            .zip(self.apply_batches_at(queued))
            .map(|(index, outcome)| command_results(index, outcome))
            .collect()
    }

    fn applied_position(&self) -> Result<Option<Vec<u8>>, TargetError> {
        Ok(StateStore::applied_position(self))
    }

    fn export_snapshot(&self) -> Result<TargetSnapshot, TargetError> {
        let mut data = Vec::new();
        let position = self
            .export_checkpoint(&mut data)
            .map_err(|e| target_error("exporting a checkpoint", e))?;
        Ok(TargetSnapshot {
            position: position.unwrap_or_default(),
            data,
        })
    }

    fn import_snapshot(&self, snapshot: &TargetSnapshot) -> Result<(), TargetError> {
        self.import_checkpoint(&mut &snapshot.data[..], snapshot.position.clone())
            .map_err(|e| target_error("importing a checkpoint", e))
    }

    /// Decoded as strictly as the server that took the file checked it
    /// (`decode_checkpoint`), so every replica loads the same rows or
    /// stops.
    fn restore(&self, index: u64, checkpoint: &[u8], position: &[u8]) -> Result<(), TargetError> {
        let state = StateStore::decode_checkpoint(checkpoint)
            .map_err(|e| target_error("decoding a restored checkpoint", e))?;
        self.restore_checkpoint_at(state, index, position.to_vec())
            .map(|_| ())
            .map_err(|e| target_error(&format!("restoring a checkpoint at {index}"), e))
    }
}
