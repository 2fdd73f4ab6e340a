//! The one way a server reaches its leader's parts: the calls a
//! follower sends over the RPC port ([`LeaderCall`], answered at
//! [`LEADER_CALL_PATH`] with the cluster key's signature), and
//! [`LeaderLink`], the scheduling workers' view of the leader's queues.
//!
//! Nomad's workers run on every server: each dequeues an evaluation from
//! the leader's broker, waits until its own replica has caught up with
//! the leader (the seed's `snapshot_min_index` and its backoff), schedules
//! on that replica, and sends the plan to the leader's plan queue. The
//! link makes that the same code on the leader (local actors, no hop) and
//! on a follower (a call to the leader): a worker holds a `LeaderLink` and
//! never asks where the leader is.
//!
//! A call is re-sent only when it provably never reached a leader (no
//! connection, or a server that says it does not lead). A follower's
//! delivery carries the leader's state index at dequeue (`wait_index`), so
//! its worker schedules on a replica that has every plan the leader had
//! committed by then, and the leader's plan re-check catches whatever it
//! still missed.

use crate::blocked_evals::{BlockedEvals, Reblock};
use crate::broker::{
    Ack, BrokerError, Delivery, Dequeue, EvalBroker, Nack, Outstanding, PauseNackTimeout,
    ResumeNackTimeout, Token,
};
use crate::gc::GcReport;
use crate::node_tracker::NodeReply;
use crate::periodic::Launched;
use crate::plan_applier::{PlanAnswer, PlanApplier, PlanApplyError, SubmitPlan};
use crate::server_api::ServerApiError;
use actix::Addr;
use herder::state::AllocClientUpdate;
use herder::structs::{EvalId, Evaluation, JobType, Node, NodeId, Plan, PlanResult};
use herder_raft::http::HttpError;
use herder_raft::Cluster;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const LEADER_CALL_PATH: &str = "/v1/rpc/leader";

/// How long a call looks for a leader (an election takes 1-3 s).
const FIND_LEADER_FOR: Duration = Duration::from_secs(10);
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// A call only the leader answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum LeaderCall {
    // The duties' writes (see `server_api::forward`).
    RegisterNode(Box<Node>),
    Heartbeat {
        node_id: NodeId,
        secret_id: String,
        ready: bool,
    },
    UpdateAllocs {
        node_id: NodeId,
        secret_id: String,
        updates: Vec<AllocClientUpdate>,
    },
    ForcePeriodic {
        namespace: String,
        job_id: String,
    },
    ForceGc,
    // The scheduling workers' calls.
    Dequeue {
        schedulers: Vec<JobType>,
        timeout: Duration,
    },
    Ack {
        eval_id: EvalId,
        token: Token,
    },
    Nack {
        eval_id: EvalId,
        token: Token,
    },
    Outstanding {
        eval_id: EvalId,
    },
    PauseNack {
        eval_id: EvalId,
        token: Token,
    },
    ResumeNack {
        eval_id: EvalId,
        token: Token,
    },
    SubmitPlan(Box<Plan>),
    Reblock {
        eval: Box<Evaluation>,
        token: Token,
    },
    /// An operator's snapshot restore taken by a follower, checked there:
    /// the leader stops its duties, commits it and starts them again
    /// (`server_api::snapshot`).
    RestoreSnapshot(Box<herder_raft::entry::RestoreEntry>),
}

/// The leader's answer to a [`LeaderCall`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum LeaderAnswer {
    Node(NodeReply),
    Index(u64),
    Launched(Launched),
    Gc(GcReport),
    Delivery(Option<Box<RemoteDelivery>>),
    Done,
    Token(Option<Token>),
    /// A committed plan's result (answered once durable).
    Plan(Box<PlanResult>),
}

/// An evaluation delivered to a follower's worker.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RemoteDelivery {
    pub eval: Evaluation,
    pub token: Token,
    /// The leader's state index at dequeue.
    pub wait_index: u64,
}

/// Why the leader refused a call.
#[derive(Debug, Serialize, Deserialize, thiserror::Error)]
pub enum Refused {
    #[error("this server is not the leader")]
    NotLeader,
    #[error(transparent)]
    Api(#[from] ServerApiError),
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// The plan queue refused (the message of `PlanApplyError`).
    #[error("{0}")]
    Plan(String),
}

/// Why a call to the leader got no answer from it.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("No cluster leader")]
    NoLeader,
    #[error(transparent)]
    Refused(Refused),
    /// The exchange broke after the call may have arrived.
    #[error("forwarding to the leader: {0}")]
    Lost(HttpError),
}

/// Sends `call` to the leader and returns its answer.
pub async fn call_leader(cluster: &Cluster, call: &LeaderCall) -> Result<LeaderAnswer, CallError> {
    let deadline = Instant::now() + FIND_LEADER_FOR;
    loop {
        if cluster.is_stopping() {
            // A stopping server waits for no leader: its workers and
            // duties must wind down now, not after `FIND_LEADER_FOR`.
            return Err(CallError::NoLeader);
        }
        let leader = cluster.leader().filter(|l| l.id != cluster.id());
        let outcome = match &leader {
            None => None,
            Some(leader) => Some(
                cluster
                    .client()
                    .call::<_, Result<LeaderAnswer, Refused>>(&leader.addr, LEADER_CALL_PATH, call)
                    .await,
            ),
        };
        match outcome {
            Some(Ok(Ok(answer))) => return Ok(answer),
            Some(Ok(Err(Refused::NotLeader))) | Some(Err(HttpError::Unreachable { .. })) | None
                if Instant::now() < deadline =>
            {
                tokio::time::sleep(RETRY_PAUSE).await
            }
            Some(Ok(Err(Refused::NotLeader))) | Some(Err(HttpError::Unreachable { .. })) | None => {
                return Err(CallError::NoLeader)
            }
            Some(Ok(Err(refused))) => return Err(CallError::Refused(refused)),
            Some(Err(e)) => return Err(CallError::Lost(e)),
        }
    }
}

/// The leader's queues, as its scheduling workers use them.
#[derive(Clone)]
pub struct LeaderQueues {
    pub broker: Addr<EvalBroker>,
    pub blocked: Addr<BlockedEvals>,
    pub plan_applier: Addr<PlanApplier>,
}

impl LeaderQueues {
    /// Answers a worker's call here (this server leads). `None`: not a
    /// worker's call.
    pub async fn execute(
        &self,
        call: LeaderCall,
        state_index: u64,
    ) -> Option<Result<LeaderAnswer, Refused>> {
        let mailbox =
            |e: actix::MailboxError| Refused::Api(ServerApiError::Unavailable(e.to_string()));
        let answer = match call {
            LeaderCall::Dequeue {
                schedulers,
                timeout,
            } => match self
                .broker
                .send(Dequeue {
                    schedulers,
                    timeout,
                })
                .await
            {
                Ok(Ok(delivery)) => Ok(LeaderAnswer::Delivery(delivery.map(|d| {
                    Box::new(RemoteDelivery {
                        eval: (*d.eval).clone(),
                        token: d.token,
                        wait_index: state_index,
                    })
                }))),
                Ok(Err(e)) => Err(e.into()),
                Err(e) => Err(mailbox(e)),
            },
            LeaderCall::Ack { eval_id, token } => {
                done(self.broker.send(Ack { eval_id, token }).await)
            }
            LeaderCall::Nack { eval_id, token } => {
                done(self.broker.send(Nack { eval_id, token }).await)
            }
            LeaderCall::PauseNack { eval_id, token } => {
                done(self.broker.send(PauseNackTimeout { eval_id, token }).await)
            }
            LeaderCall::ResumeNack { eval_id, token } => {
                done(self.broker.send(ResumeNackTimeout { eval_id, token }).await)
            }
            LeaderCall::Outstanding { eval_id } => self
                .broker
                .send(Outstanding { eval_id })
                .await
                .map(LeaderAnswer::Token)
                .map_err(mailbox),
            LeaderCall::SubmitPlan(plan) => self.commit_plan(*plan).await,
            LeaderCall::Reblock { eval, token } => self
                .blocked
                .send(Reblock { eval: *eval, token })
                .await
                .map(|_| LeaderAnswer::Done)
                .map_err(mailbox),
            _ => return None,
        };
        Some(answer)
    }

    /// A follower's plan, answered once its write is durable: the
    /// follower's worker then waits for its own replica to reach it.
    async fn commit_plan(&self, plan: Plan) -> Result<LeaderAnswer, Refused> {
        let answer = self
            .plan_applier
            .send(SubmitPlan(Arc::new(plan)))
            .await
            .map_err(|e| Refused::Plan(e.to_string()))?
            .map_err(|e| Refused::Plan(e.to_string()))?;
        let PlanAnswer { mut result, write } = answer;
        if let Some(write) = write {
            match write.await {
                Ok(Ok(index)) => result.alloc_index = index,
                Ok(Err(e)) => return Err(Refused::Plan(format!("writing the plan: {e}"))),
                Err(_) => return Err(Refused::Plan("the plan applier stopped".into())),
            }
        }
        Ok(LeaderAnswer::Plan(Box::new(result)))
    }
}

fn done(
    answer: Result<Result<(), BrokerError>, actix::MailboxError>,
) -> Result<LeaderAnswer, Refused> {
    match answer {
        Ok(Ok(())) => Ok(LeaderAnswer::Done),
        Ok(Err(e)) => Err(e.into()),
        Err(e) => Err(Refused::Api(ServerApiError::Unavailable(e.to_string()))),
    }
}

/// A scheduling worker's way to the leader's queues: the local actors on
/// the leader (and a single server), a call to the leader on a follower.
#[derive(Clone)]
pub struct LeaderLink {
    local: LeaderQueues,
    cluster: Option<Cluster>,
    /// Remote calls run here, whichever thread makes them (the scheduler
    /// runs on the blocking pool).
    runtime: tokio::runtime::Handle,
}

/// A worker call that failed on the way (the answer's own refusals are
/// the inner results).
pub type LinkError = String;

/// The answer to an ack, nack or nack timer change.
pub type BrokerStep = Result<Result<(), BrokerError>, LinkError>;

impl LeaderLink {
    /// Must be made inside the runtime the server's actors run on.
    pub fn new(local: LeaderQueues, cluster: Option<Cluster>) -> LeaderLink {
        LeaderLink {
            local,
            cluster,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// This server's own queues (the ones in use while it leads).
    pub fn queues(&self) -> &LeaderQueues {
        &self.local
    }

    /// The leader's queues are elsewhere: this server follows.
    fn remote(&self) -> Option<Cluster> {
        self.cluster.clone().filter(|c| !c.is_leader())
    }

    async fn call(&self, cluster: Cluster, call: LeaderCall) -> Result<LeaderAnswer, CallError> {
        let running = self
            .runtime
            .spawn(async move { call_leader(&cluster, &call).await });
        running
            .await
            .unwrap_or_else(|e| Err(CallError::Refused(Refused::Plan(e.to_string()))))
    }

    /// An evaluation to schedule; a follower's waits until its replica
    /// reaches `Delivery::wait_index`.
    pub async fn dequeue(
        &self,
        request: Dequeue,
    ) -> Result<Result<Option<Delivery>, BrokerError>, LinkError> {
        let Some(cluster) = self.remote() else {
            return self
                .local
                .broker
                .send(request)
                .await
                .map_err(|e| e.to_string());
        };
        let call = LeaderCall::Dequeue {
            schedulers: request.schedulers,
            timeout: request.timeout,
        };
        match self.call(cluster, call).await {
            Ok(LeaderAnswer::Delivery(delivery)) => Ok(Ok(delivery.map(|d| Delivery {
                eval: Arc::new(d.eval),
                token: d.token,
                wait_index: d.wait_index,
            }))),
            Ok(_) => Err("the leader answered a dequeue with another kind".into()),
            // No leader to ask: as a disabled broker, so the worker waits.
            Err(CallError::NoLeader) => Ok(Err(BrokerError::Disabled)),
            Err(CallError::Refused(Refused::Broker(e))) => Ok(Err(e)),
            Err(e) => Err(e.to_string()),
        }
    }

    pub async fn ack(&self, eval_id: EvalId, token: Token) -> BrokerStep {
        let remote = LeaderCall::Ack { eval_id, token };
        self.broker_step(Ack { eval_id, token }, remote).await
    }

    pub async fn nack(&self, eval_id: EvalId, token: Token) -> BrokerStep {
        let remote = LeaderCall::Nack { eval_id, token };
        self.broker_step(Nack { eval_id, token }, remote).await
    }

    pub async fn pause_nack(&self, eval_id: EvalId, token: Token) -> BrokerStep {
        let remote = LeaderCall::PauseNack { eval_id, token };
        self.broker_step(PauseNackTimeout { eval_id, token }, remote)
            .await
    }

    pub async fn resume_nack(&self, eval_id: EvalId, token: Token) -> BrokerStep {
        let remote = LeaderCall::ResumeNack { eval_id, token };
        self.broker_step(ResumeNackTimeout { eval_id, token }, remote)
            .await
    }

    /// One step of a delivery's life at the leader's broker: `local` to
    /// this server's broker while it leads, `remote` to the leader's.
    async fn broker_step<M>(&self, local: M, remote: LeaderCall) -> BrokerStep
    where
        M: actix::Message<Result = Result<(), BrokerError>> + Send + 'static,
        EvalBroker: actix::Handler<M>,
    {
        match self.remote() {
            None => self
                .local
                .broker
                .send(local)
                .await
                .map_err(|e| e.to_string()),
            Some(c) => self.broker_done(c, remote).await,
        }
    }

    async fn broker_done(
        &self,
        cluster: Cluster,
        call: LeaderCall,
    ) -> Result<Result<(), BrokerError>, LinkError> {
        match self.call(cluster, call).await {
            Ok(_) => Ok(Ok(())),
            Err(CallError::Refused(Refused::Broker(e))) => Ok(Err(e)),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The token the leader's broker holds for `eval_id`.
    pub async fn outstanding(&self, eval_id: EvalId) -> Result<Option<Token>, LinkError> {
        let Some(cluster) = self.remote() else {
            return self
                .local
                .broker
                .send(Outstanding { eval_id })
                .await
                .map_err(|e| e.to_string());
        };
        match self
            .call(cluster, LeaderCall::Outstanding { eval_id })
            .await
        {
            Ok(LeaderAnswer::Token(token)) => Ok(token),
            Ok(_) => Err("the leader answered with another kind".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Sends a plan to the leader's plan queue. A follower's is answered
    /// once durable (no pending write); a missing leader is the queue's
    /// transient refusal, so the worker retries.
    pub async fn submit_plan(
        &self,
        plan: Arc<Plan>,
    ) -> Result<Result<PlanAnswer, PlanApplyError>, LinkError> {
        let Some(cluster) = self.remote() else {
            return self
                .local
                .plan_applier
                .send(SubmitPlan(plan))
                .await
                .map_err(|e| e.to_string());
        };
        match self
            .call(cluster, LeaderCall::SubmitPlan(Box::new((*plan).clone())))
            .await
        {
            Ok(LeaderAnswer::Plan(result)) => Ok(Ok(PlanAnswer {
                result: *result,
                write: None,
            })),
            Ok(_) => Err("the leader answered a plan with another kind".into()),
            Err(CallError::NoLeader) | Err(CallError::Refused(Refused::NotLeader)) => {
                Ok(Err(PlanApplyError::Disabled))
            }
            Err(CallError::Refused(Refused::Plan(message))) => {
                Ok(Err(PlanApplyError::Remote(message)))
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Hands a re-blocked evaluation to the leader's blocked evals.
    pub async fn reblock(&self, eval: Evaluation, token: Token) -> Result<(), LinkError> {
        let Some(cluster) = self.remote() else {
            return self
                .local
                .blocked
                .send(Reblock { eval, token })
                .await
                .map(|_| ())
                .map_err(|e| e.to_string());
        };
        let call = LeaderCall::Reblock {
            eval: Box::new(eval),
            token,
        };
        self.call(cluster, call)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
