//! herder's server: the actors that turn a registered job into placed
//! allocations (eval broker, blocked evals, scheduling workers, plan
//! applier), the ones that watch nodes and time (node tracker and
//! lifecycle, drainer, periodic launcher, GC), the event stream, and
//! [`server_api::ServerApi`], the typed front door every write goes
//! through. Knows nothing of HTTP, the client agent or the CLI.

pub mod blocked_evals;
pub mod broker;
pub mod eval_router;
pub mod eval_writer;
pub mod events;
pub mod feed;
pub mod gc;
pub mod leader_duties;
pub mod node_drainer;
pub mod node_lifecycle;
pub mod node_tracker;
pub mod periodic;
pub mod plan_applier;
pub mod server;
pub mod server_api;
pub mod server_metrics;
pub mod worker;
pub mod worker_supervisor;
