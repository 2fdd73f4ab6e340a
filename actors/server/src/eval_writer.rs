//! The EvalWriter actor: makes the broker's and BlockedEvals' evaluation
//! writes (failed, follow-up, canceled) durable in the state store.
//!
//! It only persists; routing the written evaluations onwards is the
//! EvalRouter's job, which sees them in the store's change feed like every
//! other write.

use crate::broker::{EvalWriteError, EvalWrites};
use actix::prelude::*;
use herder::state::{Command, StateStore};

pub struct EvalWriter {
    store: StateStore,
}

impl EvalWriter {
    pub fn new(store: StateStore) -> Self {
        EvalWriter { store }
    }
}

impl Actor for EvalWriter {
    type Context = Context<Self>;
}

impl Handler<EvalWrites> for EvalWriter {
    type Result = ResponseFuture<Result<u64, EvalWriteError>>;

    fn handle(&mut self, msg: EvalWrites, _ctx: &mut Context<Self>) -> Self::Result {
        let done = self
            .store
            .submit_as_leader(Command::EvalUpdate { evals: msg.evals });
        Box::pin(async move {
            match done.await {
                Ok(Ok(outcome)) => Ok(outcome.index),
                Ok(Err(e)) => Err(EvalWriteError(e.to_string())),
                Err(_) => Err(EvalWriteError("state store closed".into())),
            }
        })
    }
}
