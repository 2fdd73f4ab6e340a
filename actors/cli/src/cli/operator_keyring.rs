//! `herder operator root keyring list|rotate|remove`: the root keys that
//! seal variables (Nomad 1.4+'s naming). Only metadata is ever shown; the
//! key material never leaves the servers.

use super::output;
use anyhow::Context;
use clap::{Args, Subcommand};
use herder::structs::RootKeyMeta;
use herder_api_client::{path_segment, ApiClient};
use serde_json::json;
use std::io::Write;

#[derive(Debug, Subcommand)]
pub enum RootCommand {
    /// The keyring's root keys.
    #[command(subcommand)]
    Keyring(KeyringCommand),
}

#[derive(Debug, Subcommand)]
pub enum KeyringCommand {
    /// List the root keys and their states.
    List(KeyringListArgs),
    /// Make a new active key; the others become inactive.
    Rotate(KeyringRotateArgs),
    /// Remove an inactive key no variable is sealed with.
    Remove(KeyringRemoveArgs),
}

#[derive(Debug, Args)]
pub struct KeyringListArgs {
    /// Print the API's raw JSON answer.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct KeyringRotateArgs {
    /// Re-encrypt every variable under the new key.
    #[arg(long)]
    pub full: bool,
}

#[derive(Debug, Args)]
pub struct KeyringRemoveArgs {
    /// The key's ID.
    pub key_id: String,
}

/// Runs one keyring verb and returns its exit status.
pub fn run(client: &ApiClient, command: &RootCommand, out: &mut dyn Write) -> anyhow::Result<u8> {
    let RootCommand::Keyring(command) = command;
    match command {
        KeyringCommand::List(a) => list(client, a, out),
        KeyringCommand::Rotate(a) => rotate(client, a, out),
        KeyringCommand::Remove(a) => {
            let path = format!("/v1/operator/keyring/key/{}", path_segment(&a.key_id));
            client.delete(&path, &[])?;
            writeln!(out, "Removed encryption key {}", a.key_id)?;
            Ok(0)
        }
    }
}

fn list(client: &ApiClient, args: &KeyringListArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let answer = client.get("/v1/operator/keyring/keys", &[])?;
    if args.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let keys: Vec<RootKeyMeta> = answer.decode().context("reading the keyring")?;
    write!(out, "{}", key_table(&keys))?;
    Ok(0)
}

fn rotate(client: &ApiClient, args: &KeyringRotateArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let query: Vec<(&str, String)> = if args.full {
        vec![("full", "true".to_string())]
    } else {
        Vec::new()
    };
    let answer = client.put("/v1/operator/keyring/rotate", &query, &json!({}))?;
    let key: RootKeyMeta =
        serde_json::from_value(answer.body["Key"].clone()).context("reading the new key")?;
    write!(out, "{}", key_table(&[key]))?;
    Ok(0)
}

fn key_table(keys: &[RootKeyMeta]) -> String {
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| {
            vec![
                k.key_id.clone(),
                k.state.as_str().to_string(),
                output::format_time(k.create_time),
            ]
        })
        .collect();
    output::table(&["Key", "State", "Create Time"], &rows)
}
