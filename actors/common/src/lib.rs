//! What every side of a herder agent reads alike: the layered agent
//! configuration ([`config`]), the agent's log handed to its watchers
//! ([`log_tap`]), the TLS configurations made from it
//! ([`tls`]), the board of figures published under
//! Nomad's metric names ([`nomad_metrics`]) and the operator snapshot's
//! file format ([`snapshot_archive`]). The server, the client and the
//! HTTP API all depend on this crate and on nothing of each other's.

pub mod config;
pub mod log_tap;
pub mod nomad_metrics;
pub mod snapshot_archive;
pub mod tls;
