//! herder embedded in a Rust program: a Nomad-compatible scheduler (server,
//! optionally a client) running inside the application's own process.
//!
//! The items at the top of this crate are the embedding contract:
//!
//! - [`AgentConfig`] (start from [`AgentConfig::dev`] or load the layered
//!   configuration with [`AgentConfig::load`]) and [`Agent`], the handle
//!   of a running agent: its HTTP API (Nomad's), its [`ServerApi`], its
//!   [`EventStream`], and its shutdown;
//! - [`ServerApi`], typed async calls into the server with the same checks
//!   as the HTTP API (jobs, nodes, allocations, evaluations, the worker
//!   pool, the scheduler configuration), and their request and answer
//!   types;
//! - [`EventStream`] and [`EventFilter`], the server's events as a
//!   `futures::Stream`, with the HTTP event stream's topics and filters;
//! - [`NodeBuilder`], a node description to register without a client;
//! - the core crate's model and job parser, re-exported as [`herder`].
//!
//! Everything else is public only because herder's own binary and tests
//! use it; it is hidden from the documentation and may change at any time.
//!
//! # Runtime
//!
//! An agent runs on threads of its own: a `herder-agent` thread with its
//! own actix system (all of herder's actors), two actix-web workers for
//! the HTTP API, and the state store's writer and persister threads. The
//! caller's async runtime is never borrowed, so [`Agent::start`] works from
//! a multi-threaded `#[tokio::main]`, a current-thread runtime, an actix
//! system or `futures::executor::block_on`. [`ServerApi`]'s futures are
//! `Send`; its waits (`wait_until`, `wait_for_evaluation`) use tokio's
//! timer, so they need to be polled inside a tokio runtime with time
//! enabled (any `#[tokio::main]` or `#[actix_rt::main]` is).
//!
//! # Logging
//!
//! herder emits [`tracing`](https://docs.rs/tracing) events and installs no
//! subscriber: the application's subscriber (if any) decides what is shown.
//! [`AgentConfig::log_level`] is read only by the `herder` binary.
//!
//! # Example
//!
//! ```
//! use futures::StreamExt;
//! use herder_actors::{Agent, AgentConfig, EventFilter, NodeBuilder, RegisterJob, Topic};
//! use std::time::Duration;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let mut config = AgentConfig::dev()?; // API on a free loopback port
//!     config.client.enabled = false; // this program places work itself
//!     let agent = Agent::start(config, true).await?;
//!     let api = agent.api().ok_or("a dev agent runs a server")?;
//!     let mut events = agent.events(EventFilter::new().topic(Topic::Allocation, "*"))?;
//!
//!     // A node of the program's own (no client agent): it registers and
//!     // heartbeats as a client would.
//!     let node = NodeBuilder::new("worker-1").driver("mock_driver").build();
//!     api.register_node(node.clone()).await?;
//!     api.heartbeat(node.id, &node.secret_id, true).await?;
//!     let job = herder_actors::herder::jobspec::parse_hcl(
//!         r#"job "web" {
//!              group "g" {
//!                task "t" {
//!                  driver = "mock_driver"
//!                  resources {
//!                    cpu    = 100
//!                    memory = 64
//!                  }
//!                }
//!              }
//!            }"#,
//!         "web.hcl",
//!     )?;
//!     api.register_job(RegisterJob::new(job)).await?;
//!     let placed = tokio::time::timeout(Duration::from_secs(20), events.next())
//!         .await?
//!         .ok_or("the event stream ended")?;
//!     assert_eq!(placed.events[0].event_type, "AllocationCreated");
//!     agent.shutdown().await;
//!     Ok(())
//! }
//! ```

pub mod agent;
pub mod node_builder;

// The crates below the facade, under the module paths herder's binary and
// tests have always used (`herder_actors::config`, `herder_actors::server`,
// ...). The dependency arrows run one way: cli -> actors -> http ->
// server, client -> common.
#[doc(hidden)]
pub use herder_api_client as api_client;
#[doc(hidden)]
pub use herder_client as client;
#[doc(hidden)]
pub use herder_client::node_protocol;
pub use herder_common::config;
#[doc(hidden)]
pub use herder_common::nomad_metrics;
#[doc(hidden)]
pub use herder_http as http;
pub use herder_server::events;
pub use herder_server::server_api;
#[doc(hidden)]
pub use herder_server::{
    blocked_evals, broker, eval_router, eval_writer, feed, gc, node_drainer, node_lifecycle,
    node_tracker, periodic, plan_applier, server, server_metrics, worker, worker_supervisor,
};
#[doc(hidden)]
pub use herder_sim as sim;

/// herder's core: the Nomad-shaped model (`structs`), the job file parser
/// (`jobspec`) and the state a [`ServerApi::snapshot`] reads (`state`).
pub use herder;

pub use agent::{Agent, AgentError};
pub use config::{
    AgentConfig, ClientConfig, ConfigError, ConfigSources, FlagOverrides, HostVolumeConfig, Limits,
    Ports, ServerConfig,
};
pub use events::{Event, EventFilter, EventPayload, EventStream, Events, Topic};
pub use node_builder::NodeBuilder;
pub use server_api::{
    AllocStopResult, DeploymentUpdateResult, DispatchJob, DispatchResult, DrainNode, DrainSpec,
    GcReport, JobPlan, JobWriteResult, NodeReply, NodeWriteResult, PeriodicLaunch, PromoteCanaries,
    RegisterJob, ScaleJob, SchedulerConfigRead, SchedulerConfigWrite, ServerApi, ServerApiError,
    SetSchedulerConfig, SetWorkerConfig, WorkerConfigInfo, WorkerInfo, WorkerStatus, WorkersInfo,
};
