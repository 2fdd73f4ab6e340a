//! `herder namespace list|status|apply|delete`: namespaces, as Nomad's
//! `namespace` verbs print and write them.

use super::flags::{ApiFlags, TemplateFlag};
use super::output;
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use herder::jobspec::parse_namespace_spec;
use herder::structs::Namespace;
use herder_api_client::{path_segment, ApiClient};
use std::io::{Read, Write};

#[derive(Debug, Args)]
pub struct NamespaceArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: NamespaceCommand,
}

#[derive(Debug, Subcommand)]
pub enum NamespaceCommand {
    /// List the namespaces.
    List(NamespaceListArgs),
    /// Show one namespace (a unique prefix of its name will do).
    Status(NamespaceNameArgs),
    /// Create or update a namespace: from a file (`-` for stdin; HCL, or
    /// JSON with -json or a `.json` name), or by name with the flags.
    Apply(NamespaceApplyArgs),
    /// Delete a namespace (refused while it has jobs that are not dead).
    Delete(NamespaceNameArgs),
}

#[derive(Debug, Args)]
pub struct NamespaceListArgs {
    /// Print the API's JSON answer.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub template: TemplateFlag,
}

#[derive(Debug, Args)]
pub struct NamespaceNameArgs {
    /// The namespace's name.
    pub name: String,
}

#[derive(Debug, Args)]
pub struct NamespaceApplyArgs {
    /// A namespace name, or a specification file.
    pub input: String,
    /// The namespace's description.
    #[arg(long)]
    pub description: Option<String>,
    /// The quota to attach (kept, not enforced).
    #[arg(long)]
    pub quota: Option<String>,
    /// Read the file as a JSON `Namespace`.
    #[arg(long)]
    pub json: bool,
}

/// Runs one namespace verb and returns its exit status.
pub fn run(args: NamespaceArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let client = args.api.client()?;
    match args.command {
        NamespaceCommand::List(a) => list(&client, &a, out),
        NamespaceCommand::Status(a) => status(&client, &a.name, out),
        NamespaceCommand::Apply(a) => apply(&client, a, out),
        NamespaceCommand::Delete(a) => {
            let path = format!("/v1/namespace/{}", path_segment(&a.name));
            client
                .delete(&path, &[])
                .context("Error deleting namespace")?;
            writeln!(out, "Successfully deleted namespace {:?}!", a.name)?;
            Ok(0)
        }
    }
}

fn list(client: &ApiClient, args: &NamespaceListArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let answer = client
        .get("/v1/namespaces", &[])
        .context("Error retrieving namespaces")?;
    if args.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    if let Some(text) = args.template.render(false, &answer.body)? {
        writeln!(out, "{text}")?;
        return Ok(0);
    }
    let namespaces: Vec<Namespace> = answer.decode().context("reading the namespace list")?;
    write!(out, "{}", namespace_table(namespaces))?;
    Ok(0)
}

/// Nomad's `formatNamespaces`: name and description, by name.
fn namespace_table(mut namespaces: Vec<Namespace>) -> String {
    if namespaces.is_empty() {
        return "No namespaces found\n".into();
    }
    namespaces.sort_by(|a, b| a.name.cmp(&b.name));
    let rows: Vec<Vec<String>> = namespaces
        .into_iter()
        .map(|ns| vec![ns.name, ns.description])
        .collect();
    output::table(&["Name", "Description"], &rows)
}

fn status(client: &ApiClient, name: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    let answer = client
        .get("/v1/namespaces", &[("prefix", name.to_string())])
        .context("Error retrieving namespaces")?;
    let mut found: Vec<Namespace> = answer.decode().context("reading the namespace list")?;
    let ns = match found.iter().position(|ns| ns.name == name) {
        Some(exact) => found.swap_remove(exact),
        None if found.len() == 1 => found.remove(0),
        None if found.is_empty() => {
            bail!("Error retrieving namespaces: Namespace {name:?} matched no namespaces")
        }
        None => bail!(
            "Prefix matched multiple namespaces\n\n{}",
            namespace_table(found)
        ),
    };
    // Nomad's `formatKV` prints an empty value as `<none>`.
    let shown = |v: &str| {
        if v.is_empty() {
            "<none>".to_string()
        } else {
            v.to_string()
        }
    };
    let mut text = output::key_values(&[
        ("Name", ns.name.clone()),
        ("Description", shown(&ns.description)),
        ("Quota", shown(&ns.quota)),
    ]);
    if !ns.meta.is_empty() {
        let meta: Vec<(&str, String)> = ns
            .meta
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        text.push_str("\nMetadata\n");
        text.push_str(&output::key_values(&meta));
    }
    write!(out, "{text}")?;
    Ok(0)
}

fn apply(client: &ApiClient, args: NamespaceApplyArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let is_file = args.input == "-" || std::path::Path::new(&args.input).is_file();
    let namespace = if is_file {
        if args.description.is_some() || args.quota.is_some() {
            eprintln!("Flags are ignored when a file is specified!");
        }
        let json = args.json || args.input.ends_with(".json");
        let text = read_input(&args.input)?;
        parse_namespace_spec(&text, json)
            .map_err(|e| anyhow::anyhow!("Error parsing namespace specification: {e}"))?
    } else {
        by_name(client, &args)?
    };
    client
        .put("/v1/namespace", &[], &serde_json::to_value(&namespace)?)
        .context("Error applying namespace")?;
    writeln!(out, "Successfully applied namespace {:?}!", namespace.name)?;
    Ok(0)
}

/// The namespace named `args.input` as it is (or a new one), with the
/// flags' changes.
fn by_name(client: &ApiClient, args: &NamespaceApplyArgs) -> anyhow::Result<Namespace> {
    let path = format!("/v1/namespace/{}", path_segment(&args.input));
    let mut namespace = match client.get(&path, &[]) {
        Ok(answer) => answer.decode().context("reading the namespace")?,
        Err(e) if e.status() == Some(404) => Namespace {
            name: args.input.clone(),
            ..Default::default()
        },
        Err(e) => return Err(e).context("Error looking up namespace"),
    };
    if let Some(description) = &args.description {
        namespace.description = description.clone();
    }
    if let Some(quota) = &args.quota {
        namespace.quota = quota.clone();
    }
    Ok(namespace)
}

fn read_input(input: &str) -> anyhow::Result<String> {
    if input == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("Failed to read stdin")?;
        return Ok(text);
    }
    std::fs::read_to_string(input).context("Failed to read file")
}
