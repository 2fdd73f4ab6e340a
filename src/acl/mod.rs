//! Access control as Nomad has it: the policy language (`policy`: HCL or
//! JSON rules, checked and expanded into capabilities) and the compiled
//! [`Acl`] a request is checked against (`compiled`: several policies
//! merged, namespace globs resolved by the most specific match) and the
//! variable path rules (`variables`); what a policy may say that herder
//! does not act on (`unenforced`).
//!
//! Pure: parsing and checking only. Policies, tokens and roles are rows of
//! the state store (`crate::structs::acl`); which token a request carries,
//! and which capability a route needs, is the HTTP layer's business.

pub mod capability;
pub mod compiled;
pub mod policy;
pub mod unenforced;
pub mod variables;

pub use capability::{Capabilities, Capability, Level};
pub use compiled::Acl;
pub use policy::{parse_policy, NamespaceRule, Policy, PolicyError, MAX_RULES_BYTES};
pub use unenforced::unenforced_rules;
pub use variables::{VariableCapabilities, VariableOp, VariablePathRule, WorkloadClaim};

#[cfg(test)]
mod tests;
