//! How error messages quote and name values: strings cut short so that
//! an error about a huge value is not itself huge, and a value's type as
//! the messages say it. Shared by the evaluator, the functions it calls
//! and the readers of its results.

use hcl::Value as Hcl;
use serde_json::Value;

/// A string for a message: quoted, and cut short when long, so that an
/// error about a huge value is not itself huge.
pub(crate) fn brief(s: &str) -> String {
    const MAX_CHARS: usize = 60;
    match s.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{:?}...", &s[..cut]),
        None => format!("{s:?}"),
    }
}

/// How error messages name a value's type.
pub(crate) fn kind_of(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("bool {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {}", brief(s)),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

pub(crate) fn kind_of_hcl(value: &Hcl) -> String {
    match value {
        Hcl::Null => "null".to_string(),
        Hcl::Bool(b) => format!("bool {b}"),
        Hcl::Number(n) => format!("number {n}"),
        Hcl::String(s) => format!("string {}", brief(s)),
        Hcl::Array(_) => "a list".to_string(),
        Hcl::Object(_) => "an object".to_string(),
    }
}
