//! herder's server: the actors that turn a registered job into placed
//! allocations (eval broker, blocked evals, scheduling workers, plan
//! applier), the ones that watch nodes and time (node tracker and
//! lifecycle, drainer, deployment watcher, periodic launcher, GC), the event stream, and
//! [`server_api::ServerApi`], the typed front door every write goes
//! through; and, on a server that is one of several, its place in the
//! cluster ([`cluster_member`]: the replica, the RPC port the servers talk
//! to each other on, the leader's duties following leadership). Knows
//! nothing of the HTTP API, the client agent or the CLI.

pub mod blocked_evals;
pub mod broker;
pub mod cluster_member;
pub mod deployment_watcher;
pub mod eval_router;
pub mod eval_writer;
pub mod events;
pub mod feed;
pub mod gc;
pub mod keyring;
pub mod leader_duties;
pub mod leader_link;
pub mod node_drainer;
pub mod node_lifecycle;
pub mod node_shares;
pub mod node_tracker;
pub mod periodic;
pub mod plan_applier;
pub mod ready_queue;
pub mod server;
pub mod server_api;
pub mod server_handle;
pub mod server_metrics;
pub mod worker;
pub mod worker_supervisor;
