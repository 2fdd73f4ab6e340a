//! herder's domain core: what to decide, never when or over which wire.
//!
//! - [`acl`]: the ACL policy language and the compiled checks (pure).
//! - [`structs`]: the Nomad-shaped data model and job validation.
//! - [`state`]: the state store (indexed tables, commands, snapshots, sled).
//! - [`view`]: what a scheduler reads of a snapshot (the `State` trait, the
//!   node catalog and usage column a snapshot keeps for it), below both the
//!   store and the scheduler, so that neither names the other.
//! - [`scheduler`]: pure scheduling logic over a snapshot.
//! - [`jobspec`]: HCL and JSON job files into validated jobs.
//! - [`deployment_failure`]: what failing a deployment writes (auto-revert).
//! - [`plan_eval`]: the plan applier's check of a plan against the newest state.
//! - [`search`]: Nomad's prefix and fuzzy search over a snapshot.
//!
//! The core performs no I/O except through the state store's sled files and
//! uses no async runtime: the actors crate drives it.

pub mod acl;
pub mod deployment_failure;
pub mod jobspec;
pub mod plan_eval;
pub mod scheduler;
pub mod search;
pub mod state;
pub mod structs;
pub mod view;

#[cfg(test)]
mod scheduler_on_store_tests;
