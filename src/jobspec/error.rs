//! Why a job file could not be turned into a job, and which of the
//! `HclLimits` a file exceeded. Apart from `jobspec/mod.rs`'s entry points
//! so that the parser's parts, which those entry points call, can answer
//! with it without importing them back.

use crate::structs::ValidationError;

/// Why a job file could not be turned into a job.
///
/// Every variant names the file; the positional ones carry a one-based
/// line and column. Display reads like a compiler diagnostic:
/// `web.nomad.hcl:12:5: unknown block "nework" in group "frontend"`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum JobspecError {
    /// The text is not well-formed HCL.
    #[error("{file}:{line}:{column}: {message}")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// Well-formed HCL that is not a valid job specification: an unknown
    /// block or attribute, a value of the wrong type, a bad duration, a
    /// missing label or an undefined variable.
    #[error("{file}:{line}:{column}: {message}")]
    Spec {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// Malformed JSON, or JSON whose fields have the wrong types.
    #[error("{file}:{line}:{column}: {message}")]
    Json {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// The file exceeds one of the [`HclLimits`](super::HclLimits): it is too large, nests
    /// too deeply, or its evaluation would build too much. The message
    /// names the setting that raises the limit (`limit.setting()`); the
    /// position is where the limit was passed.
    #[error("{file}:{line}:{column}: {message}")]
    Limit {
        file: String,
        line: usize,
        column: usize,
        limit: LimitKind,
        message: String,
    },
    /// The job parsed but fails [`Job::validate`](crate::structs::Job::validate).
    #[error("{file}: {source}")]
    Validation {
        file: String,
        source: ValidationError,
    },
}

impl JobspecError {
    /// The one-based (line, column) the error points at, when it has one.
    pub fn location(&self) -> Option<(usize, usize)> {
        match self {
            JobspecError::Syntax { line, column, .. }
            | JobspecError::Spec { line, column, .. }
            | JobspecError::Json { line, column, .. }
            | JobspecError::Limit { line, column, .. } => Some((*line, *column)),
            JobspecError::Validation { .. } => None,
        }
    }
}

/// Which of the [`HclLimits`](super::HclLimits) a job file exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// [`HclLimits::max_source_bytes`](super::HclLimits::max_source_bytes).
    SourceBytes,
    /// [`HclLimits::max_nesting_depth`](super::HclLimits::max_nesting_depth).
    NestingDepth,
    /// [`HclLimits::max_expansion_bytes`](super::HclLimits::max_expansion_bytes).
    ExpansionBytes,
}

impl LimitKind {
    /// The name of the setting that raises this limit, as error messages
    /// give it (`hcl_max_nesting_depth`).
    pub fn setting(self) -> &'static str {
        match self {
            LimitKind::SourceBytes => "hcl_max_source_bytes",
            LimitKind::NestingDepth => "hcl_max_nesting_depth",
            LimitKind::ExpansionBytes => "hcl_max_expansion_bytes",
        }
    }
}
