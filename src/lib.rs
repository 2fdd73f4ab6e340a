//! herder's domain core: what to decide, never when or over which wire.
//!
//! - [`structs`]: the Nomad-shaped data model and job validation.
//! - [`state`]: the state store (indexed tables, commands, snapshots, sled).
//! - [`scheduler`]: pure scheduling logic over a snapshot.
//! - [`jobspec`]: HCL and JSON job files into validated jobs.
//!
//! The core performs no I/O except through the state store's sled files and
//! uses no async runtime: the actors crate drives it.

pub mod scheduler;
pub mod structs;
