//! The HCL functions job files may call, with HCL's standard-library
//! semantics (the ones Nomad's job files use most: string case and
//! trimming, splitting and joining, list and map helpers, conversions).
//!
//! Functions that read files or the environment (`file`, `env`) are left
//! out on purpose: the core does no I/O, and a job must mean the same
//! wherever it is parsed.

use hcl::eval::{Context, FuncArgs, FuncDef, ParamType};
use hcl::{Map, Value};

/// Declares every function below in `ctx`.
pub(crate) fn declare_all(ctx: &mut Context) {
    let string = || ParamType::String;
    let strings = || ParamType::array_of(ParamType::String);
    let defs: [(&str, FuncDef); 16] = [
        ("upper", FuncDef::new(upper, [string()])),
        ("lower", FuncDef::new(lower, [string()])),
        ("trimspace", FuncDef::new(trimspace, [string()])),
        (
            "replace",
            FuncDef::new(replace, [string(), string(), string()]),
        ),
        ("split", FuncDef::new(split, [string(), string()])),
        (
            "join",
            FuncDef::builder()
                .param(string())
                .variadic_param(strings())
                .build(join),
        ),
        (
            "concat",
            FuncDef::builder()
                .variadic_param(ParamType::array_of(ParamType::Any))
                .build(concat),
        ),
        ("length", FuncDef::new(length, [ParamType::Any])),
        (
            "coalesce",
            FuncDef::builder()
                .variadic_param(ParamType::Any)
                .build(coalesce),
        ),
        (
            "lookup",
            FuncDef::new(
                lookup,
                [
                    ParamType::object_of(ParamType::Any),
                    string(),
                    ParamType::Any,
                ],
            ),
        ),
        (
            "merge",
            FuncDef::builder()
                .variadic_param(ParamType::object_of(ParamType::Any))
                .build(merge),
        ),
        (
            "contains",
            FuncDef::new(
                contains,
                [ParamType::array_of(ParamType::Any), ParamType::Any],
            ),
        ),
        (
            "keys",
            FuncDef::new(keys, [ParamType::object_of(ParamType::Any)]),
        ),
        (
            "values",
            FuncDef::new(values, [ParamType::object_of(ParamType::Any)]),
        ),
        ("tostring", FuncDef::new(tostring, [ParamType::Any])),
        ("tonumber", FuncDef::new(tonumber, [ParamType::Any])),
    ];
    for (name, def) in defs {
        ctx.declare_func(name, def);
    }
}

/// The string of argument `i` (its type was checked by the `FuncDef`).
fn text(args: &FuncArgs, i: usize) -> &str {
    args.get(i).and_then(Value::as_str).unwrap_or_default()
}

fn upper(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::from(text(&args, 0).to_uppercase()))
}

fn lower(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::from(text(&args, 0).to_lowercase()))
}

fn trimspace(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::from(text(&args, 0).trim()))
}

fn replace(args: FuncArgs) -> Result<Value, String> {
    let (s, from, to) = (text(&args, 0), text(&args, 1), text(&args, 2));
    if from.is_empty() {
        return Err("replace: the substring to replace must not be empty".into());
    }
    Ok(Value::from(s.replace(from, to)))
}

fn split(args: FuncArgs) -> Result<Value, String> {
    let (sep, s) = (text(&args, 0), text(&args, 1));
    if sep.is_empty() {
        return Err("split: the separator must not be empty".into());
    }
    Ok(Value::Array(s.split(sep).map(Value::from).collect()))
}

fn join(args: FuncArgs) -> Result<Value, String> {
    let sep = text(&args, 0);
    let parts: Vec<&str> = args
        .variadic_args()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    Ok(Value::from(parts.join(sep)))
}

fn concat(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::Array(
        args.into_values()
            .into_iter()
            .filter_map(|v| match v {
                Value::Array(items) => Some(items),
                _ => None,
            })
            .flatten()
            .collect(),
    ))
}

fn length(args: FuncArgs) -> Result<Value, String> {
    let n = match args.first() {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(items)) => items.len(),
        Some(Value::Object(map)) => map.len(),
        _ => return Err("length: a string, list or map is required".into()),
    };
    Ok(Value::from(n as u64))
}

fn coalesce(args: FuncArgs) -> Result<Value, String> {
    args.into_values()
        .into_iter()
        .find(|v| !v.is_null() && v.as_str() != Some(""))
        .ok_or_else(|| "coalesce: no non-null, non-empty argument".into())
}

fn lookup(args: FuncArgs) -> Result<Value, String> {
    let map = args.first().and_then(Value::as_object);
    let found = map.and_then(|m| m.get(text(&args, 1))).cloned();
    Ok(found.unwrap_or_else(|| args.get(2).cloned().unwrap_or(Value::Null)))
}

fn merge(args: FuncArgs) -> Result<Value, String> {
    let mut out = Map::new();
    for map in args.variadic_args().filter_map(Value::as_object) {
        for (k, v) in map {
            out.insert(k.clone(), v.clone());
        }
    }
    Ok(Value::Object(out))
}

fn contains(args: FuncArgs) -> Result<Value, String> {
    let list = args.first().and_then(Value::as_array);
    let needle = args.get(1);
    Ok(Value::Bool(list.is_some_and(|items| {
        needle.is_some_and(|n| items.contains(n))
    })))
}

/// HCL returns a map's keys (and values) in lexical key order.
fn sorted_entries(args: &FuncArgs) -> Vec<(&String, &Value)> {
    let mut entries: Vec<_> = args
        .first()
        .and_then(Value::as_object)
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

fn keys(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::Array(
        sorted_entries(&args)
            .into_iter()
            .map(|(k, _)| Value::from(k.as_str()))
            .collect(),
    ))
}

fn values(args: FuncArgs) -> Result<Value, String> {
    Ok(Value::Array(
        sorted_entries(&args)
            .into_iter()
            .map(|(_, v)| v.clone())
            .collect(),
    ))
}

fn tostring(args: FuncArgs) -> Result<Value, String> {
    match args.first() {
        Some(Value::String(s)) => Ok(Value::from(s.as_str())),
        Some(Value::Number(n)) => Ok(Value::from(n.to_string())),
        Some(Value::Bool(b)) => Ok(Value::from(b.to_string())),
        _ => Err("tostring: a string, number or bool is required".into()),
    }
}

fn tonumber(args: FuncArgs) -> Result<Value, String> {
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
                .ok_or_else(|| format!("tonumber: {s:?} is not a number"))
        }
        _ => Err("tonumber: a string or number is required".into()),
    }
}
