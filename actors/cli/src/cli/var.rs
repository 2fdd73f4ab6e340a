//! `herder var list|get|put|purge`: variables, as Nomad 1.4+'s `var`
//! verbs print them. `put PATH k=v ...` writes the items given (the
//! variable's whole item set), `-check-index N` makes a write or purge
//! conditional on the variable's `ModifyIndex` (0: it must not exist).

use super::flags::{ApiFlags, ViewFlags};
use super::output;
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use herder::structs::{VariableDecrypted, VariableMetadata};
use herder_api_client::{path_segment, ApiClient, ApiError};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;

#[derive(Debug, Args)]
pub struct VarArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: VarCommand,
}

#[derive(Debug, Subcommand)]
pub enum VarCommand {
    /// List the variables under a path prefix (metadata only).
    List(VarListArgs),
    /// Show one variable with its items.
    Get(VarGetArgs),
    /// Create or replace a variable: `var put PATH key=value ...`.
    Put(VarPutArgs),
    /// Delete a variable.
    Purge(VarPurgeArgs),
}

#[derive(Debug, Args)]
pub struct VarListArgs {
    /// Only paths starting with this.
    pub prefix: Option<String>,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct VarGetArgs {
    pub path: String,
    /// Print only this item's value.
    #[arg(long = "item", value_name = "KEY")]
    pub item: Option<String>,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct VarPutArgs {
    pub path: String,
    /// The items, each `key=value`.
    pub items: Vec<String>,
    /// Write only if the variable's ModifyIndex is still N (0: only if it
    /// does not exist).
    #[arg(long = "check-index", value_name = "N")]
    pub check_index: Option<u64>,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct VarPurgeArgs {
    pub path: String,
    /// Delete only if the variable's ModifyIndex is still N.
    #[arg(long = "check-index", value_name = "N")]
    pub check_index: Option<u64>,
}

/// Runs one var verb and returns its exit status.
pub fn run(args: VarArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let client = args.api.client()?;
    match args.command {
        VarCommand::List(a) => list(&client, &a, out),
        VarCommand::Get(a) => get(&client, &a, out),
        VarCommand::Put(a) => put(&client, &a, out),
        VarCommand::Purge(a) => purge(&client, &a, out),
    }
}

/// `/v1/var/<path>`, each segment encoded (the path's `/` kept).
fn var_url(path: &str) -> String {
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(path_segment)
        .collect();
    format!("/v1/var/{}", segments.join("/"))
}

fn list(client: &ApiClient, args: &VarListArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let prefix = args.prefix.clone().unwrap_or_default();
    let answer = client.get("/v1/vars", &[("prefix", prefix)])?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let found: Vec<VariableMetadata> = answer.decode().context("reading the variable list")?;
    if found.is_empty() {
        writeln!(out, "No variables found")?;
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|v| {
            vec![
                v.namespace.clone(),
                v.path.clone(),
                output::format_time(v.modify_time),
            ]
        })
        .collect();
    write!(
        out,
        "{}",
        output::table(&["Namespace", "Path", "Last Updated"], &rows)
    )?;
    Ok(0)
}

fn get(client: &ApiClient, args: &VarGetArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let answer = match client.get(&var_url(&args.path), &[]) {
        Err(e) if e.status() == Some(404) => {
            writeln!(out, "Error retrieving variable: variable not found")?;
            return Ok(1);
        }
        other => other?,
    };
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let variable: VariableDecrypted = answer.decode().context("reading the variable")?;
    if let Some(key) = &args.item {
        match variable.items.get(key) {
            Some(value) => writeln!(out, "{value}")?,
            None => bail!("variable {:?} has no item {key:?}", variable.meta.path),
        }
        return Ok(0);
    }
    write!(out, "{}", describe(&variable))?;
    Ok(0)
}

/// A variable as `var get` prints it: its metadata, then its items.
fn describe(variable: &VariableDecrypted) -> String {
    let meta = &variable.meta;
    let mut text = output::key_values(&[
        ("Namespace", meta.namespace.clone()),
        ("Path", meta.path.clone()),
        ("Create Time", output::format_time(meta.create_time)),
        ("Check Index", meta.modify_index.to_string()),
    ]);
    text.push_str("\nItems\n");
    let items: Vec<(&str, String)> = variable
        .items
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    text.push_str(&output::key_values(&items));
    text
}

fn parse_items(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut items = BTreeMap::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("item {pair:?} is not key=value");
        };
        if key.is_empty() {
            bail!("item {pair:?} has an empty key");
        }
        items.insert(key.to_string(), value.to_string());
    }
    Ok(items)
}

fn put(client: &ApiClient, args: &VarPutArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let items = parse_items(&args.items)?;
    if items.is_empty() {
        bail!("a variable needs at least one item: var put PATH key=value ...");
    }
    let query: Vec<(&str, String)> = args
        .check_index
        .map(|n| ("cas", n.to_string()))
        .into_iter()
        .collect();
    let body = json!({ "Path": args.path, "Items": items });
    match client.put(&var_url(&args.path), &query, &body) {
        Ok(answer) => {
            if args.view.json {
                write!(out, "{}", output::json(&answer.body))?;
                return Ok(0);
            }
            let stored: VariableDecrypted = answer.decode().context("reading the answer")?;
            writeln!(
                out,
                "Created variable {:?} with modify index {}",
                stored.meta.path, stored.meta.modify_index
            )?;
            Ok(0)
        }
        Err(e) => conflict(e, out),
    }
}

fn purge(client: &ApiClient, args: &VarPurgeArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let query: Vec<(&str, String)> = args
        .check_index
        .map(|n| ("cas", n.to_string()))
        .into_iter()
        .collect();
    match client.delete(&var_url(&args.path), &query) {
        Ok(_) => {
            writeln!(out, "Successfully purged variable {:?}!", args.path)?;
            Ok(0)
        }
        Err(e) => conflict(e, out),
    }
}

/// A refused check-and-set (409) is reported with the variable's current
/// index, as Nomad's CLI does; any other error goes up.
fn conflict(e: ApiError, out: &mut dyn Write) -> anyhow::Result<u8> {
    let ApiError::Status {
        status: 409, body, ..
    } = &e
    else {
        return Err(e.into());
    };
    let current: Option<VariableMetadata> = serde_json::from_str(body).ok();
    match current.filter(|c| !c.path.is_empty()) {
        Some(c) => writeln!(
            out,
            "Check-and-Set conflict\n\nYour provided check-index did not match the variable's current modify index {} (or the variable is locked).",
            c.modify_index
        )?,
        None => writeln!(
            out,
            "Check-and-Set conflict\n\nThe variable does not exist."
        )?,
    }
    Ok(1)
}
