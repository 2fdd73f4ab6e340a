//! herder's running service.

pub mod blocked_evals;
pub mod broker;
