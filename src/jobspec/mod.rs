//! Job files into jobs: Nomad's HCL2 job specification and its JSON form.
//!
//! `nomad job run web.nomad.hcl` and `POST /v1/jobs/parse` accept the same
//! job files herder must accept. This module maps an HCL2 body (parsed by
//! `hcl-rs`'s `hcl-edit` parser, which keeps byte spans) block by block onto
//! [`structs::Job`](crate::structs::Job), rejecting what Nomad rejects
//! (unknown blocks and attributes, wrong types, bad durations) with
//! `file:line:column` positions, and then canonicalizes the job the way
//! Nomad's `api` package does, so a parsed file reads back as Nomad shows it.
//!
//! The core does no file I/O: callers read the file and pass its text.
//!
//! HCL2 language support: `variable` blocks with defaults (`var.x`),
//! `locals` blocks (`local.x`), values for variables given by the caller
//! (the CLI's `-var name=value`), arithmetic, conditionals, `for`
//! expressions, splats, `%{ if }`/`%{ for }` template directives with `~`
//! whitespace stripping, and string interpolation of those, all evaluated
//! by herder itself (`eval.rs`).
//! Interpolations of anything else (`${attr.kernel.name}`,
//! `${NOMAD_PORT_http}`, `${meta.rack}`) are runtime references the client
//! resolves, so they stay literal text, exactly as Nomad keeps them.
//! A subset of HCL's function library is provided (`upper`, `lower`,
//! `trimspace`, `replace`, `split`, `join`, `concat`, `length`,
//! `coalesce`, `lookup`, `merge`, `contains`, `keys`, `values`,
//! `tostring`, `tonumber`); functions that read files or the environment
//! are not, since the core does no I/O.
//!
//! Limits, each a deliberate choice:
//! - Nomad blocks herder does not act on (`template`, `vault`,
//!   `volume`, `volume_mount`, `scaling`, `consul`, `multiregion`,
//!   `device`, ...) are accepted and ignored rather than refused, so valid
//!   Nomad jobs still run; they are listed in each block's schema.
//! - `dynamic` blocks and variable `validation` blocks are refused.
//! - Nested blocks inside a task's free-form `config` become lists of
//!   objects (`mount { ... }` -> `"mount": [{...}]`), the JSON form Nomad
//!   accepts; herder has no per-driver schema to tell single blocks apart.
//! - A heredoc that closes on its first line (`<<EOF` then `EOF`) is
//!   refused: the parser cannot tell it from one that ends at a later
//!   `EOF` line, and the nesting scan must read text as the parser does.
//!
//! Hostile input: a job file comes from an HTTP request, so parsing it
//! must not crash, stall or exhaust the server. [`HclLimits`] bounds the
//! file's size, how deeply it nests (checked by a linear scan before the
//! recursive parser sees the text, `scan.rs`) and how much its syntax tree
//! and evaluation may build (a budget charged before anything is built,
//! `limits.rs`); exceeding one is a [`JobspecError::Limit`] naming the
//! setting to raise. JSON jobs rely on serde_json's 128-level nesting limit;
//! nothing after it recurses deeper.

mod body;
mod describe;
mod duration;
mod error;
mod eval;
mod functions;
mod hcl_job;
mod hcl_service;
mod json;
pub(crate) mod limits;
mod namespace_spec;
pub(crate) mod scan;
mod source;

#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod tests;

use crate::structs::Job;
use std::collections::BTreeMap;

pub use duration::{format_go_duration, parse_go_duration};
pub use error::{JobspecError, LimitKind};
pub use limits::HclLimits;
pub use namespace_spec::{job_text_names_namespace, parse_namespace_spec};

/// Name used for JSON input that came without a file name (an API body).
pub const JSON_INPUT_NAME: &str = "<json>";

/// Parses an HCL2 job file into a canonicalized (not yet validated) job.
/// `filename` only labels error messages. `variable` blocks take their
/// defaults; see [`parse_hcl_with_vars`] to set them.
pub fn parse_hcl(src: &str, filename: &str) -> Result<Job, JobspecError> {
    parse_hcl_with_vars(src, filename, &BTreeMap::new())
}

/// [`parse_hcl`] with values for the file's `variable` blocks, as
/// `nomad job run -var name=value` gives them: text, taken literally for
/// string variables and read as an HCL expression (`3`, `true`, `["a"]`)
/// for variables of other types. A value for an undeclared variable is an
/// error, as in Nomad.
pub fn parse_hcl_with_vars(
    src: &str,
    filename: &str,
    vars: &BTreeMap<String, String>,
) -> Result<Job, JobspecError> {
    parse_hcl_with_limits(src, filename, vars, &HclLimits::default())
}

/// [`parse_hcl_with_vars`] under explicit [`HclLimits`] (the others use
/// [`HclLimits::default`]). Text larger than `max_source_bytes`, nesting
/// deeper than `max_nesting_depth` or evaluating to more than
/// `max_expansion_bytes` of values is refused with
/// [`JobspecError::Limit`], before it can exhaust the thread's stack or
/// the process's memory; the values given in `vars` are held to the same
/// limits.
pub fn parse_hcl_with_limits(
    src: &str,
    filename: &str,
    vars: &BTreeMap<String, String>,
    limits: &HclLimits,
) -> Result<Job, JobspecError> {
    let mut job = hcl_job::parse(src, filename, vars, limits)?;
    job.canonicalize();
    Ok(job)
}

/// Parses a JSON job, either `{"Job": {...}}` (what `nomad job run -output`
/// prints and `PUT /v1/jobs` takes; other keys beside `Job` are ignored)
/// or a bare job object, into a canonicalized (not yet validated) job.
/// Fields left out or `null` get Nomad's defaults field by field, as for
/// HCL (a partial `RestartPolicy` keeps the job type's other values).
pub fn parse_json(src: &str) -> Result<Job, JobspecError> {
    parse_json_named(src, JSON_INPUT_NAME)
}

fn parse_json_named(src: &str, filename: &str) -> Result<Job, JobspecError> {
    let mut job = json::parse(src, filename)?;
    job.canonicalize();
    Ok(job)
}

/// Parses a job file of either kind: `.json` files, and text whose first
/// non-blank character is `{`, are JSON; everything else is HCL.
pub fn parse_any(src: &str, filename: &str) -> Result<Job, JobspecError> {
    if looks_like_json(src, filename) {
        parse_json_named(src, filename)
    } else {
        parse_hcl(src, filename)
    }
}

/// [`parse_any`] followed by [`Job::validate`].
pub fn parse_and_validate(src: &str, filename: &str) -> Result<Job, JobspecError> {
    let job = parse_any(src, filename)?;
    job.validate().map_err(|source| JobspecError::Validation {
        file: filename.to_string(),
        source,
    })?;
    Ok(job)
}

fn looks_like_json(src: &str, filename: &str) -> bool {
    // An HCL body never starts with `{`, so the content decides when the
    // name does not (API bodies, `-` for stdin, extension-less files).
    filename.to_ascii_lowercase().ends_with(".json") || src.trim_start().starts_with('{')
}
