//! An in-memory [`StateMachineTarget`]: the applied batches in order.
//!
//! The tests of the crate's own machinery (election, replication, faults)
//! use it instead of the state store (`store_target`). It keeps what a
//! test needs to see: every applied batch with its index, and how many
//! snapshots were installed. Its state is lost with it, so a restarted
//! node rebuilds it from its own log.

use crate::entry::CommandResult;
use crate::state_machine::{StateMachineTarget, TargetError, TargetSnapshot};
use herder::state::Command;
use serde::{Deserialize, Serialize};
use std::sync::{Mutex, MutexGuard};

/// One applied batch of commands and the index it was applied at.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppliedBatch {
    pub index: u64,
    pub commands: Vec<Command>,
}

#[derive(Default)]
struct Inner {
    batches: Vec<AppliedBatch>,
    /// `None` until the first entry (openraft's first is at index 0).
    applied_index: Option<u64>,
    position: Option<Vec<u8>>,
    snapshots_installed: u64,
}

/// The in-memory target.
#[derive(Default)]
pub struct MemoryTarget {
    inner: Mutex<Inner>,
}

impl MemoryTarget {
    pub fn new() -> MemoryTarget {
        MemoryTarget::default()
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // Every change under the lock is a whole assignment or push.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The batches applied so far (empty ones, of membership and no-op
    /// entries, are not kept), in order.
    pub fn batches(&self) -> Vec<AppliedBatch> {
        self.inner().batches.clone()
    }

    /// Every applied command in order.
    pub fn commands(&self) -> Vec<Command> {
        let inner = self.inner();
        inner
            .batches
            .iter()
            .flat_map(|b| b.commands.iter().cloned())
            .collect()
    }

    /// The index of the last applied entry.
    pub fn applied_index(&self) -> Option<u64> {
        self.inner().applied_index
    }

    /// How many snapshots from other servers were installed.
    pub fn snapshots_installed(&self) -> u64 {
        self.inner().snapshots_installed
    }
}

impl StateMachineTarget for MemoryTarget {
    fn apply_batch(
        &self,
        index: u64,
        commands: &[Command],
        position: &[u8],
    ) -> Result<Vec<CommandResult>, TargetError> {
        let mut inner = self.inner();
        if !commands.is_empty() {
            inner.batches.push(AppliedBatch {
                index,
                commands: commands.to_vec(),
            });
        }
        inner.applied_index = Some(index);
        inner.position = Some(position.to_vec());
        Ok(vec![CommandResult::Applied; commands.len()])
    }

    fn applied_position(&self) -> Result<Option<Vec<u8>>, TargetError> {
        Ok(self.inner().position.clone())
    }

    fn export_snapshot(&self) -> Result<TargetSnapshot, TargetError> {
        let inner = self.inner();
        let data = serde_json::to_vec(&(inner.applied_index, &inner.batches))
            .map_err(|e| TargetError(format!("encoding the snapshot: {e}")))?;
        Ok(TargetSnapshot {
            position: inner.position.clone().unwrap_or_default(),
            data,
        })
    }

    fn import_snapshot(&self, snapshot: &TargetSnapshot) -> Result<(), TargetError> {
        let (applied_index, batches): (Option<u64>, Vec<AppliedBatch>) =
            serde_json::from_slice(&snapshot.data)
                .map_err(|e| TargetError(format!("decoding a snapshot: {e}")))?;
        let mut inner = self.inner();
        inner.batches = batches;
        inner.applied_index = applied_index;
        inner.position = Some(snapshot.position.clone());
        inner.snapshots_installed += 1;
        Ok(())
    }

    /// The checkpoint is this target's own export (`export_snapshot`'s
    /// data): its batches replace the applied ones, at `index`.
    fn restore(&self, index: u64, checkpoint: &[u8], position: &[u8]) -> Result<(), TargetError> {
        let (_, batches): (Option<u64>, Vec<AppliedBatch>) = serde_json::from_slice(checkpoint)
            .map_err(|e| TargetError(format!("decoding a restored checkpoint: {e}")))?;
        let mut inner = self.inner();
        inner.batches = batches;
        inner.applied_index = Some(index);
        inner.position = Some(position.to_vec());
        Ok(())
    }
}
