//! Bounds on the work one HCL job file may cause, so that no request can
//! crash, stall or exhaust the server that parses it.
//!
//! Three things can go wrong with hostile (or absurd) job text:
//! - size: the text itself is too large to hold and scan;
//! - depth: `hcl-edit`'s parser, herder's evaluator and the code that walks
//!   their results recurse once per level of nesting, so a few kilobytes of
//!   `[[[[` or `!!!!` overflow the thread's stack and abort the process;
//! - expansion: each local, `for` expression or template can copy what
//!   another built, so a file of a kilobyte can describe gigabytes
//!   (`b = "${local.a}${local.a}"`, `c = "${local.b}${local.b}"`, ...).
//!
//! [`HclLimits`] bounds each of them; the size is checked first, the depth
//! and the size of the syntax tree by the linear scan of `scan.rs` before
//! any recursive code sees the text, and the expansion by a [`Budget`] that
//! the scan and then the evaluator charge *before* they build anything.

use super::error::{JobspecError, LimitKind};
use super::source::Source;
use std::cell::Cell;
use std::ops::Range;

/// Bounds on the work parsing one HCL job file may cause.
///
/// The defaults are far above what real Nomad jobs need and far below what
/// hurts a server; [`parse_hcl`](super::parse_hcl) and the other entry
/// points without a limits argument use them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HclLimits {
    /// The largest job file accepted, in bytes. Default 8 MiB
    /// ([`HclLimits::DEFAULT_MAX_SOURCE_BYTES`]): the same as a typical HTTP
    /// body limit, since jobs carry inline templates and scripts as heredocs.
    pub max_source_bytes: usize,
    /// How deeply constructs may nest: brackets, braces and parentheses,
    /// quoted strings, `${ }` interpolations and `%{ }` directives, plus the
    /// operators (`!`, `-`, `+`, `==`, `? :`, ...) chained in one expression,
    /// since each of those is a level of recursion in the parser and the
    /// evaluator. Values built by evaluation may not nest deeper either.
    /// Default 64 ([`HclLimits::DEFAULT_MAX_NESTING_DEPTH`]); a real job
    /// nests about a dozen levels (job, group, task, config, a list, a
    /// string, an interpolation, a function call).
    pub max_nesting_depth: usize,
    /// How many bytes the file may expand to while it is parsed and
    /// evaluated, in total: its syntax tree, estimated by the scan before
    /// parsing (320 bytes a token, plus the parser's work on large
    /// objects), and every value evaluating its variables, locals and
    /// attributes builds (its text plus 32 bytes for being a value; a
    /// reference to a local copies it and counts again). This bounds memory
    /// and time alike. Default 16 MiB
    /// ([`HclLimits::DEFAULT_MAX_EXPANSION_BYTES`]); a real job takes a few
    /// hundred kilobytes, plus its inline text.
    pub max_expansion_bytes: usize,
}

impl HclLimits {
    /// Default for [`HclLimits::max_source_bytes`]: 8 MiB.
    pub const DEFAULT_MAX_SOURCE_BYTES: usize = 8 << 20;
    /// Default for [`HclLimits::max_nesting_depth`]: 64 levels.
    pub const DEFAULT_MAX_NESTING_DEPTH: usize = 64;
    /// Default for [`HclLimits::max_expansion_bytes`]: 16 MiB.
    pub const DEFAULT_MAX_EXPANSION_BYTES: usize = 16 << 20;
}

impl Default for HclLimits {
    fn default() -> Self {
        HclLimits {
            max_source_bytes: Self::DEFAULT_MAX_SOURCE_BYTES,
            max_nesting_depth: Self::DEFAULT_MAX_NESTING_DEPTH,
            max_expansion_bytes: Self::DEFAULT_MAX_EXPANSION_BYTES,
        }
    }
}

/// What every value costs beyond its text, in bytes: roughly the memory
/// of one `hcl::Value`. Charging it for numbers, bools, empty lists and
/// each `for` iteration also bounds the *time* evaluation takes, since
/// every step of the evaluator builds at least one value.
pub(crate) const VALUE_OVERHEAD: usize = 32;

/// The running count of bytes of values built while evaluating one file.
///
/// Charged before a value is built, so a file that would exceed
/// [`HclLimits::max_expansion_bytes`] stops at the limit instead of
/// allocating first and checking after.
pub(crate) struct Budget {
    used: Cell<usize>,
    max: usize,
}

/// The budget ran out; the caller knows where, and turns this into
/// [`JobspecError::Limit`] with [`expansion_error`].
#[derive(Debug)]
pub(crate) struct Exhausted;

impl Budget {
    pub fn new(max: usize) -> Self {
        Budget {
            used: Cell::new(0),
            max,
        }
    }

    /// Counts `bytes` more, or refuses when that would pass the limit.
    pub fn charge(&self, bytes: usize) -> Result<(), Exhausted> {
        let used = self.used.get().saturating_add(bytes);
        if used > self.max {
            // Stay exhausted: later charges must fail too.
            self.used.set(usize::MAX);
            return Err(Exhausted);
        }
        self.used.set(used);
        Ok(())
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Bytes charged so far.
    #[cfg(test)]
    pub fn used(&self) -> usize {
        self.used.get()
    }
}

/// The error for a file larger than [`HclLimits::max_source_bytes`].
pub(crate) fn source_error(file: &str, len: usize, max: usize) -> JobspecError {
    let kind = LimitKind::SourceBytes;
    JobspecError::Limit {
        file: file.to_string(),
        line: 1,
        column: 1,
        limit: kind,
        message: format!(
            "the job file is {len} bytes, more than the {max} allowed (limits: {}); \
             shrink the file or raise the limit",
            kind.setting()
        ),
    }
}

/// The error for nesting deeper than [`HclLimits::max_nesting_depth`] at a
/// byte offset of the source; `what` names the construct (`nesting`,
/// `a value`).
pub(crate) fn depth_error(src: &Source, offset: usize, max: usize, what: &str) -> JobspecError {
    let kind = LimitKind::NestingDepth;
    let (line, column) = src.locate(offset);
    JobspecError::Limit {
        file: src.file.to_string(),
        line,
        column,
        limit: kind,
        message: format!(
            "{what} deeper than {max} levels at {line}:{column} (limits: {}); \
             flatten the brackets, strings and operator chains or raise the limit",
            kind.setting()
        ),
    }
}

/// The error for evaluation that would build more than
/// [`HclLimits::max_expansion_bytes`], pointing at the expression that was
/// being evaluated.
pub(crate) fn expansion_error(
    src: &Source,
    span: Option<Range<usize>>,
    max: usize,
) -> JobspecError {
    let kind = LimitKind::ExpansionBytes;
    let (line, column) = src.locate(span.map_or(0, |s| s.start));
    JobspecError::Limit {
        file: src.file.to_string(),
        line,
        column,
        limit: kind,
        message: format!(
            "evaluating this file builds more than {max} bytes (its syntax tree and the values \
             of its variables, locals and expressions) by {line}:{column} (limits: {}); a local \
             or `for` expression probably multiplies another one, or raise the limit",
            kind.setting()
        ),
    }
}

/// The error for text whose syntax tree alone would pass
/// [`HclLimits::max_expansion_bytes`], at the byte offset where it did.
pub(crate) fn syntax_size_error(src: &Source, offset: usize, max: usize) -> JobspecError {
    let kind = LimitKind::ExpansionBytes;
    let (line, column) = src.locate(offset);
    JobspecError::Limit {
        file: src.file.to_string(),
        line,
        column,
        limit: kind,
        message: format!(
            "the syntax tree of this file takes more than {max} bytes by {line}:{column} \
             (limits: {}); split the job, or raise the limit",
            kind.setting()
        ),
    }
}
