//! herder's running service: the actors that move evaluations through the
//! server, the HTTP API, the client agent, and the `herder` command line.
//!
//! Everything here is wiring and timing; the decisions live in the `herder`
//! core crate, which this crate drives.

pub mod config;
pub mod cli;
pub mod agent;
pub mod client;
pub mod http;
pub mod logging;
