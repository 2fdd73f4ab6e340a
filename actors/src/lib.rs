//! herder's running service: the actors that move evaluations through the
//! server, the HTTP API, the client agent, and the `herder` command line.
//!
//! Everything here is wiring and timing; the decisions live in the `herder`
//! core crate, which this crate drives.

pub mod agent;
pub mod api_client;
pub mod bench;
pub mod blocked_evals;
pub mod broker;
pub mod cli;
pub mod client;
pub mod config;
pub mod eval_router;
pub mod eval_writer;
pub mod feed;
pub mod gc;
pub mod http;
pub mod logging;
pub mod node_drainer;
pub mod node_lifecycle;
pub mod node_protocol;
pub mod node_tracker;
pub mod nomad_metrics;
pub mod periodic;
pub mod plan_applier;
pub mod server;
pub mod server_api;
pub mod server_metrics;
pub mod sim;
pub mod worker;
pub mod worker_supervisor;
