//! herder's running service: the actors that move evaluations through the
//! server, the HTTP API, the client agent, and the `herder` command line.
//!
//! Everything here is wiring and timing; the decisions live in the `herder`
//! core crate, which this crate drives.

pub mod agent;
pub mod blocked_evals;
pub mod broker;
pub mod cli;
pub mod config;
pub mod http;
pub mod logging;
pub mod node_lifecycle;
pub mod plan_applier;
pub mod worker;
pub mod worker_supervisor;
