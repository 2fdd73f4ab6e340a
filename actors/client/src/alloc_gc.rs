//! A user's garbage collection of this node's finished allocations
//! (`/v1/client/allocation/:id/gc`, `/v1/client/gc`): each one's directory
//! is removed at once instead of when the servers forget it.
//!
//! As in Nomad, only an allocation whose tasks are all over (its client
//! status terminal) may be collected; a running one is refused. A collected
//! allocation's runner ends, but its entry stays in the manager until the
//! servers drop the allocation, so that no later sync starts it again.

use super::AllocManager;
use crate::alloc_runner::{Destroy, GetAllocState};
use actix::prelude::*;
use herder::structs::AllocId;

/// Collect one allocation; answers whether it was collected.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<(), GcError>")]
pub struct CollectAlloc(pub AllocId);

/// Collect every finished allocation; answers how many were.
#[derive(Clone, Debug, Message)]
#[rtype(result = "usize")]
pub struct CollectAll;

/// Why an allocation was not collected; the texts are Nomad's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GcError {
    #[error("Unknown allocation \"{0}\"")]
    UnknownAlloc(AllocId),
    #[error("No such allocation on client, or allocation not eligible for GC")]
    NotEligible,
}

/// Destroys the runner if its allocation is over; `Ok(false)` when it
/// still runs, `Err` when the runner is already gone.
async fn collect(runner: Addr<crate::alloc_runner::AllocRunner>) -> Result<bool, MailboxError> {
    let state = runner.send(GetAllocState).await?;
    if !state.client_status.is_terminal() {
        return Ok(false);
    }
    runner.send(Destroy).await?;
    Ok(true)
}

impl Handler<CollectAlloc> for AllocManager {
    type Result = ResponseFuture<Result<(), GcError>>;

    fn handle(&mut self, msg: CollectAlloc, _ctx: &mut Context<Self>) -> Self::Result {
        let id = msg.0;
        let runner = self.runners.get(&id).map(|e| e.runner.clone());
        Box::pin(async move {
            let runner = runner.ok_or(GcError::UnknownAlloc(id))?;
            match collect(runner).await {
                Ok(true) => Ok(()),
                // Not over yet, or collected before.
                Ok(false) | Err(_) => Err(GcError::NotEligible),
            }
        })
    }
}

impl Handler<CollectAll> for AllocManager {
    type Result = ResponseFuture<usize>;

    fn handle(&mut self, _: CollectAll, _ctx: &mut Context<Self>) -> Self::Result {
        let runners: Vec<_> = self.runners.values().map(|e| e.runner.clone()).collect();
        Box::pin(async move {
            let mut collected = 0;
            for runner in runners {
                if matches!(collect(runner).await, Ok(true)) {
                    collected += 1;
                }
            }
            collected
        })
    }
}
