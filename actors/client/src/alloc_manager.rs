//! The allocation manager: the set of allocation runners of this node.
//!
//! The server-facing part feeds it what the servers assign to the node
//! ([`SyncAllocs`], the whole set, as a blocking query returns it) and it
//! starts, stops and destroys runners to match; every runner's updates go
//! to the one recipient given here. On start after a restart,
//! [`RestoreAll`] re-attaches to what the previous client left running.
//! [`ControlAlloc`] hands a user's restart or signal to the allocation's
//! runner; [`alloc_gc`]'s messages collect finished allocations.

#[path = "alloc_gc.rs"]
pub mod alloc_gc;

use crate::alloc_runner::health::GetChecks;
use crate::alloc_runner::{
    persisted_allocs, AllocRunner, AllocRunnerConfig, ControlTasks, Destroy, ExecTask,
    GetAllocState, Shutdown, Stop, UpdateAlloc,
};
use crate::checks::CheckResult;
use crate::driver::{DriverSet, ExecRequest, ExecSession};
use crate::{AllocControl, AllocUpdate, ControlError};
use actix::prelude::*;
use herder::structs::{AllocId, Allocation, Job, Node};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

/// The allocations the servers assign to this node now, each with its job.
/// The job is `None` when the servers no longer have it (a quarantined
/// job version): a running allocation still takes its updates (a stop
/// most of all), only a new one cannot start without it.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct SyncAllocs {
    pub allocs: Vec<AssignedAlloc>,
}

/// An allocation the servers assign to this node, with its job if they
/// still have it.
pub type AssignedAlloc = (Allocation, Option<Arc<Job>>);

/// Restores the allocations persisted by a previous client; answers with
/// the IDs of those it re-attached to (or reported lost).
#[derive(Clone, Debug, Message)]
#[rtype(result = "Vec<AllocId>")]
pub struct RestoreAll;

/// Detaches from every allocation (client shutdown; tasks keep running).
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct ShutdownAll;

/// Stops every allocation and waits (up to `timeout`) until their tasks
/// are dead: a `-dev` agent leaves nothing running behind its throwaway
/// data dir.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct StopAll {
    pub timeout: std::time::Duration,
}

/// A user's restart or signal for one allocation of this node; an
/// allocation this node has no runner for is `ControlError::UnknownAlloc`.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<(), ControlError>")]
pub struct ControlAlloc {
    pub alloc_id: AllocId,
    pub control: AllocControl,
}

/// `alloc exec`: runs a command beside a running task of an allocation
/// of this node.
#[derive(Debug, Message)]
#[rtype(result = "Result<ExecSession, ControlError>")]
pub struct ExecAlloc {
    pub alloc_id: AllocId,
    pub task: String,
    pub request: ExecRequest,
}

/// The latest results of one allocation's checks; `None` when this node
/// runs no such allocation.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Option<Vec<CheckResult>>")]
pub struct GetAllocChecks(pub AllocId);

/// The node's fingerprint changed (a new registration, drivers' health).
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct SetNode(pub Arc<Node>);

pub struct AllocManagerConfig {
    pub node: Arc<Node>,
    pub data_dir: PathBuf,
    pub drivers: DriverSet,
    pub host_env: Arc<BTreeMap<String, String>>,
    pub updates: Recipient<AllocUpdate>,
    /// Runners keep nothing on disk (simulated nodes).
    pub ephemeral: bool,
    /// Where templates read `nomadService` from.
    pub catalog: crate::template::funcs::ServiceCatalog,
}

struct Entry {
    runner: Addr<AllocRunner>,
    modify_index: u64,
}

pub struct AllocManager {
    config: AllocManagerConfig,
    runners: HashMap<AllocId, Entry>,
}

impl AllocManager {
    pub fn new(config: AllocManagerConfig) -> Self {
        AllocManager {
            config,
            runners: HashMap::new(),
        }
    }

    fn runner_config(&self, alloc: Allocation, job: Arc<Job>) -> AllocRunnerConfig {
        AllocRunnerConfig {
            alloc,
            job,
            node: self.config.node.clone(),
            data_dir: self.config.data_dir.clone(),
            drivers: self.config.drivers.clone(),
            host_env: self.config.host_env.clone(),
            updates: self.config.updates.clone(),
            ephemeral: self.config.ephemeral,
            catalog: self.config.catalog.clone(),
        }
    }

    /// The IDs of the allocations this manager runs.
    pub fn running(&self) -> impl Iterator<Item = &AllocId> {
        self.runners.keys()
    }
}

impl Actor for AllocManager {
    type Context = Context<Self>;
}

impl Handler<SyncAllocs> for AllocManager {
    type Result = ();

    fn handle(&mut self, msg: SyncAllocs, _ctx: &mut Context<Self>) {
        let present: HashSet<AllocId> = msg.allocs.iter().map(|(a, _)| a.id).collect();
        for (alloc, job) in msg.allocs {
            match self.runners.get_mut(&alloc.id) {
                Some(entry) => {
                    if alloc.modify_index != entry.modify_index {
                        entry.modify_index = alloc.modify_index;
                        entry.runner.do_send(UpdateAlloc(alloc, job));
                    }
                }
                // Nothing to run for an allocation that is already over.
                None if alloc.is_terminal() => {}
                None => {
                    let Some(job) = job else {
                        tracing::warn!(alloc = %alloc.id, job = %alloc.job_id,
                            "the servers sent an allocation without its job; not starting it");
                        continue;
                    };
                    let modify_index = alloc.modify_index;
                    let id = alloc.id;
                    let runner = AllocRunner::new(self.runner_config(alloc, job)).start();
                    self.runners.insert(
                        id,
                        Entry {
                            runner,
                            modify_index,
                        },
                    );
                }
            }
        }
        // Allocations the servers no longer list were garbage collected.
        self.runners.retain(|id, entry| {
            let keep = present.contains(id);
            if !keep {
                entry.runner.do_send(Destroy);
            }
            keep
        });
    }
}

impl Handler<RestoreAll> for AllocManager {
    type Result = MessageResult<RestoreAll>;

    fn handle(&mut self, _: RestoreAll, _ctx: &mut Context<Self>) -> Self::Result {
        let mut restored = Vec::new();
        for (alloc, job) in persisted_allocs(&self.config.data_dir) {
            // Finished ones are restored too: their runner re-reports the
            // final state (which may not have reached the servers) and keeps
            // a later sync from starting them again.
            if self.runners.contains_key(&alloc.id) {
                continue;
            }
            let (id, modify_index) = (alloc.id, alloc.modify_index);
            let runner = AllocRunner::restore(self.runner_config(alloc, job)).start();
            self.runners.insert(
                id,
                Entry {
                    runner,
                    modify_index,
                },
            );
            restored.push(id);
        }
        MessageResult(restored)
    }
}

impl Handler<ShutdownAll> for AllocManager {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: ShutdownAll, _ctx: &mut Context<Self>) -> Self::Result {
        let runners: Vec<Addr<AllocRunner>> = self.runners.drain().map(|(_, e)| e.runner).collect();
        Box::pin(async move {
            for r in runners {
                let _ = r.send(Shutdown).await;
            }
        })
    }
}

impl Handler<SetNode> for AllocManager {
    type Result = ();

    fn handle(&mut self, msg: SetNode, _ctx: &mut Context<Self>) {
        // Runners already started keep the node they were built with (their
        // environment is fixed at start, as in Nomad).
        self.config.node = msg.0;
    }
}

impl Handler<ControlAlloc> for AllocManager {
    type Result = ResponseFuture<Result<(), ControlError>>;

    fn handle(&mut self, msg: ControlAlloc, _ctx: &mut Context<Self>) -> Self::Result {
        let id = msg.alloc_id;
        let Some(runner) = self.runners.get(&id).map(|e| e.runner.clone()) else {
            return Box::pin(std::future::ready(Err(ControlError::UnknownAlloc(id))));
        };
        Box::pin(async move {
            runner
                .send(ControlTasks(msg.control))
                .await
                .unwrap_or(Err(ControlError::UnknownAlloc(id)))
        })
    }
}

impl Handler<ExecAlloc> for AllocManager {
    type Result = ResponseFuture<Result<ExecSession, ControlError>>;

    fn handle(&mut self, msg: ExecAlloc, _ctx: &mut Context<Self>) -> Self::Result {
        let id = msg.alloc_id;
        let runner = self.runners.get(&id).map(|e| e.runner.clone());
        Box::pin(async move {
            let runner = runner.ok_or(ControlError::UnknownAlloc(id))?;
            runner
                .send(ExecTask {
                    task: msg.task,
                    request: msg.request,
                })
                .await
                .unwrap_or(Err(ControlError::UnknownAlloc(id)))
        })
    }
}

impl Handler<GetAllocChecks> for AllocManager {
    type Result = ResponseFuture<Option<Vec<CheckResult>>>;

    fn handle(&mut self, msg: GetAllocChecks, _ctx: &mut Context<Self>) -> Self::Result {
        let runner = self.runners.get(&msg.0).map(|e| e.runner.clone());
        Box::pin(async move { runner?.send(GetChecks).await.ok() })
    }
}

impl Handler<StopAll> for AllocManager {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: StopAll, _ctx: &mut Context<Self>) -> Self::Result {
        let runners: Vec<Addr<AllocRunner>> = self.runners.drain().map(|(_, e)| e.runner).collect();
        for r in &runners {
            r.do_send(Stop {
                reason: "client shutting down".into(),
            });
        }
        let deadline = tokio::time::Instant::now() + msg.timeout;
        Box::pin(async move {
            for r in runners {
                while tokio::time::Instant::now() < deadline {
                    match r.send(GetAllocState).await {
                        Ok(state) if !state.client_status.is_terminal() => {
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await
                        }
                        _ => break,
                    }
                }
            }
        })
    }
}
