//! What every side of a herder agent reads alike: the layered agent
//! configuration ([`config`]) and the board of figures published under
//! Nomad's metric names ([`nomad_metrics`]). The server, the client and the
//! HTTP API all depend on this crate and on nothing of each other's.

pub mod config;
pub mod nomad_metrics;
