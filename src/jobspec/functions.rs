//! The HCL functions job files may call, with HCL's standard-library
//! semantics (the ones Nomad's job files use most: string case and
//! trimming, splitting and joining, list and map helpers, conversions).
//!
//! Functions that read files or the environment (`file`, `env`) are left
//! out on purpose: the core does no I/O, and a job must mean the same
//! wherever it is parsed.
//!
//! Each function is given its arguments (already charged to the file's
//! [`Budget`] by the evaluator) and charges what it builds *before*
//! building it: `join`, `replace` and `split` work out their result's size
//! first, so `join(local.big_separator, local.long_list)` stops at the
//! limit instead of allocating. The others move their arguments into their
//! result rather than copying them.

use super::describe::{brief, kind_of_hcl};
use super::limits::{Budget, Exhausted, VALUE_OVERHEAD};
use hcl::{Map, Value};

/// Why a function call failed.
pub(crate) enum FnError {
    /// A wrong argument; the message names the function.
    Message(String),
    /// The result would pass the budget.
    Exhausted,
}

impl From<Exhausted> for FnError {
    fn from(_: Exhausted) -> Self {
        FnError::Exhausted
    }
}

/// What an argument must be.
#[derive(Clone, Copy)]
enum Param {
    String,
    StringList,
    List,
    Map,
    Any,
}

impl Param {
    fn accepts(self, value: &Value) -> bool {
        match self {
            Param::String => value.is_string(),
            Param::StringList => value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
            Param::List => value.is_array(),
            Param::Map => value.is_object(),
            Param::Any => true,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Param::String => "a string",
            Param::StringList => "a list of strings",
            Param::List => "a list",
            Param::Map => "a map",
            Param::Any => "any value",
        }
    }
}

type Body = fn(Vec<Value>, &Budget) -> Result<Value, FnError>;

/// One function: its fixed parameters, the type of its variadic ones if it
/// takes any, and what it does.
pub(crate) struct Function {
    name: &'static str,
    params: &'static [Param],
    variadic: Option<Param>,
    body: Body,
}

const FUNCTIONS: [Function; 16] = [
    fixed("upper", &[Param::String], upper),
    fixed("lower", &[Param::String], lower),
    fixed("trimspace", &[Param::String], trimspace),
    fixed(
        "replace",
        &[Param::String, Param::String, Param::String],
        replace,
    ),
    fixed("split", &[Param::String, Param::String], split),
    variadic("join", &[Param::String], Param::StringList, join),
    variadic("concat", &[], Param::List, concat),
    fixed("length", &[Param::Any], length),
    variadic("coalesce", &[], Param::Any, coalesce),
    fixed(
        "lookup",
        &[Param::Map, Param::String, Param::Any],
        lookup_key,
    ),
    variadic("merge", &[], Param::Map, merge),
    fixed("contains", &[Param::List, Param::Any], contains),
    fixed("keys", &[Param::Map], keys),
    fixed("values", &[Param::Map], values),
    fixed("tostring", &[Param::Any], tostring),
    fixed("tonumber", &[Param::Any], tonumber),
];

const fn fixed(name: &'static str, params: &'static [Param], body: Body) -> Function {
    Function {
        name,
        params,
        variadic: None,
        body,
    }
}

const fn variadic(
    name: &'static str,
    params: &'static [Param],
    rest: Param,
    body: Body,
) -> Function {
    Function {
        name,
        params,
        variadic: Some(rest),
        body,
    }
}

/// The function a job file calls by `name`, if herder provides it.
pub(crate) fn lookup(name: &str) -> Option<&'static Function> {
    FUNCTIONS.iter().find(|f| f.name == name)
}

/// The names of every function, for "unknown function" messages.
pub(crate) fn names() -> String {
    FUNCTIONS
        .iter()
        .map(|f| f.name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Function {
    /// Checks the arguments' number and types, then calls the function.
    pub fn call(&self, args: Vec<Value>, budget: &Budget) -> Result<Value, FnError> {
        let name = self.name;
        let fixed = self.params.len();
        let count_ok = match self.variadic {
            Some(_) => args.len() >= fixed,
            None => args.len() == fixed,
        };
        if !count_ok {
            let at_least = if self.variadic.is_some() {
                "at least "
            } else {
                ""
            };
            return Err(FnError::Message(format!(
                "{name}: takes {at_least}{fixed} argument(s), got {}",
                args.len()
            )));
        }
        for (i, arg) in args.iter().enumerate() {
            let param = self.params.get(i).copied().or(self.variadic);
            if let Some(param) = param.filter(|p| !p.accepts(arg)) {
                return Err(FnError::Message(format!(
                    "{name}: argument {} must be {}, got {}",
                    i + 1,
                    param.describe(),
                    kind_of_hcl(arg)
                )));
            }
        }
        // Every call is a step of evaluation, whatever it builds.
        budget.charge(VALUE_OVERHEAD)?;
        (self.body)(args, budget)
    }
}

/// The string of argument `i` (its type was checked by [`Function::call`]).
fn text(args: &[Value], i: usize) -> &str {
    args.get(i).and_then(Value::as_str).unwrap_or_default()
}

/// Argument `i`, taken out of the list (its type was checked).
fn take(args: &mut [Value], i: usize) -> Value {
    args.get_mut(i).map(std::mem::take).unwrap_or(Value::Null)
}

fn upper(args: Vec<Value>, budget: &Budget) -> Result<Value, FnError> {
    let s = text(&args, 0);
    // Case mapping can lengthen text (`ß` is `SS`): charge the exact size.
    let len: usize = s
        .chars()
        .map(|c| c.to_uppercase().map(char::len_utf8).sum::<usize>())
        .sum();
    budget.charge(len)?;
    Ok(Value::from(s.to_uppercase()))
}

fn lower(args: Vec<Value>, budget: &Budget) -> Result<Value, FnError> {
    let s = text(&args, 0);
    let len: usize = s
        .chars()
        .map(|c| c.to_lowercase().map(char::len_utf8).sum::<usize>())
        .sum();
    budget.charge(len)?;
    Ok(Value::from(s.to_lowercase()))
}

fn trimspace(args: Vec<Value>, budget: &Budget) -> Result<Value, FnError> {
    let s = text(&args, 0).trim();
    budget.charge(s.len())?;
    Ok(Value::from(s))
}

fn replace(args: Vec<Value>, budget: &Budget) -> Result<Value, FnError> {
    let (s, from, to) = (text(&args, 0), text(&args, 1), text(&args, 2));
    if from.is_empty() {
        return Err(FnError::Message(
            "replace: the substring to replace must not be empty".into(),
        ));
    }
    // Each match can grow the text by `to`: size the result first.
    let matches = s.matches(from).count();
    let len = (s.len() - matches * from.len()).saturating_add(matches.saturating_mul(to.len()));
    budget.charge(len)?;
    Ok(Value::from(s.replace(from, to)))
}

fn split(args: Vec<Value>, budget: &Budget) -> Result<Value, FnError> {
    let (sep, s) = (text(&args, 0), text(&args, 1));
    if sep.is_empty() {
        return Err(FnError::Message(
            "split: the separator must not be empty".into(),
        ));
    }
    // Every piece is a value: an empty string's worth of separators is
    // many values.
    let pieces = s.matches(sep).count() + 1;
    budget.charge(
        s.len()
            .saturating_add(pieces.saturating_mul(VALUE_OVERHEAD)),
    )?;
    Ok(Value::Array(s.split(sep).map(Value::from).collect()))
}

fn join(args: Vec<Value>, budget: &Budget) -> Result<Value, FnError> {
    let sep = text(&args, 0);
    let parts: Vec<&str> = args
        .iter()
        .skip(1)
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    // The separator is repeated once per part: size the result first.
    let len = parts
        .iter()
        .fold(0usize, |n, p| n.saturating_add(p.len()))
        .saturating_add(sep.len().saturating_mul(parts.len().saturating_sub(1)));
    budget.charge(len)?;
    Ok(Value::from(parts.join(sep)))
}

fn concat(args: Vec<Value>, _: &Budget) -> Result<Value, FnError> {
    Ok(Value::Array(
        args.into_iter()
            .filter_map(|v| match v {
                Value::Array(items) => Some(items),
                _ => None,
            })
            .flatten()
            .collect(),
    ))
}

fn length(args: Vec<Value>, _: &Budget) -> Result<Value, FnError> {
    let n = match args.first() {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(items)) => items.len(),
        Some(Value::Object(map)) => map.len(),
        _ => {
            return Err(FnError::Message(
                "length: a string, list or map is required".into(),
            ))
        }
    };
    Ok(Value::from(n as u64))
}

fn coalesce(args: Vec<Value>, _: &Budget) -> Result<Value, FnError> {
    args.into_iter()
        .find(|v| !v.is_null() && v.as_str() != Some(""))
        .ok_or_else(|| FnError::Message("coalesce: no non-null, non-empty argument".into()))
}

fn lookup_key(mut args: Vec<Value>, _: &Budget) -> Result<Value, FnError> {
    let key = text(&args, 1).to_string();
    let found = match args.first_mut() {
        Some(Value::Object(map)) => map.swap_remove(&key),
        _ => None,
    };
    Ok(found.unwrap_or_else(|| take(&mut args, 2)))
}

fn merge(args: Vec<Value>, _: &Budget) -> Result<Value, FnError> {
    let mut out = Map::new();
    for arg in args {
        if let Value::Object(map) = arg {
            for (k, v) in map {
                out.insert(k, v);
            }
        }
    }
    Ok(Value::Object(out))
}

fn contains(args: Vec<Value>, _: &Budget) -> Result<Value, FnError> {
    let list = args.first().and_then(Value::as_array);
    let needle = args.get(1);
    Ok(Value::Bool(list.is_some_and(|items| {
        needle.is_some_and(|n| items.contains(n))
    })))
}

/// HCL returns a map's keys (and values) in lexical key order.
fn sorted_entries(mut args: Vec<Value>) -> Vec<(String, Value)> {
    let mut entries: Vec<(String, Value)> = match take(&mut args, 0) {
        Value::Object(map) => map.into_iter().collect(),
        _ => Vec::new(),
    };
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries
}

fn keys(args: Vec<Value>, budget: &Budget) -> Result<Value, FnError> {
    let entries = sorted_entries(args);
    // The keys become values of their own.
    let len = entries.iter().fold(0usize, |n, (k, _)| {
        n.saturating_add(k.len() + VALUE_OVERHEAD)
    });
    budget.charge(len)?;
    Ok(Value::Array(
        entries.into_iter().map(|(k, _)| Value::from(k)).collect(),
    ))
}

fn values(args: Vec<Value>, _: &Budget) -> Result<Value, FnError> {
    Ok(Value::Array(
        sorted_entries(args).into_iter().map(|(_, v)| v).collect(),
    ))
}

fn tostring(mut args: Vec<Value>, _: &Budget) -> Result<Value, FnError> {
    match take(&mut args, 0) {
        Value::String(s) => Ok(Value::from(s)),
        Value::Number(n) => Ok(Value::from(n.to_string())),
        Value::Bool(b) => Ok(Value::from(b.to_string())),
        _ => Err(FnError::Message(
            "tostring: a string, number or bool is required".into(),
        )),
    }
}

fn tonumber(args: Vec<Value>, _: &Budget) -> Result<Value, FnError> {
    match args.first() {
        Some(Value::Number(n)) => Ok(Value::Number(*n)),
        Some(Value::String(s)) => {
            if let Ok(i) = s.trim().parse::<i64>() {
                return Ok(Value::from(i));
            }
            s.trim()
                .parse::<f64>()
                .ok()
                .and_then(hcl::Number::from_f64)
                .map(Value::Number)
                .ok_or_else(|| FnError::Message(format!("tonumber: {} is not a number", brief(s))))
        }
        _ => Err(FnError::Message(
            "tonumber: a string or number is required".into(),
        )),
    }
}
