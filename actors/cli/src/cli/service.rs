//! `herder service list|info`: the native service catalog, as Nomad's
//! `service` verbs print it.

use super::flags::{ApiFlags, ViewFlags};
use super::output;
use anyhow::Context;
use clap::{Args, Subcommand};
use herder::structs::ServiceRegistration;
use herder_api_client::{path_segment, ApiClient};
use serde::Deserialize;
use std::io::Write;

#[derive(Debug, Args)]
pub struct ServiceArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: ServiceCommand,
}

#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// List the registered services with their tags.
    List(ServiceListArgs),
    /// Show the instances of one service: address, port, allocation.
    Info(ServiceInfoArgs),
}

#[derive(Debug, Args)]
pub struct ServiceListArgs {
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Args)]
pub struct ServiceInfoArgs {
    /// The service's name.
    pub name: String,
    #[command(flatten)]
    pub view: ViewFlags,
}

/// One namespace's entry of `GET /v1/services`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct NamespaceServices {
    namespace: String,
    #[serde(default)]
    services: Vec<ServiceStub>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ServiceStub {
    service_name: String,
    #[serde(default)]
    tags: Option<Vec<String>>,
}

/// Runs one service verb (the namespace is the shared `-namespace`
/// flag's; `*` lists every namespace) and returns its exit status.
pub fn run(args: ServiceArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let client = args.api.client()?;
    let all = args.api.namespace.as_deref() == Some("*");
    match args.command {
        ServiceCommand::List(a) => list(&client, &a, all, out),
        ServiceCommand::Info(a) => info(&client, &a, out),
    }
}

fn list(
    client: &ApiClient,
    args: &ServiceListArgs,
    all: bool,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let answer = client.get("/v1/services", &[])?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let namespaces: Vec<NamespaceServices> = answer.decode().context("reading the service list")?;
    let mut rows = Vec::new();
    for ns in &namespaces {
        for s in &ns.services {
            let tags = format!("[{}]", s.tags.as_deref().unwrap_or_default().join(","));
            let mut row = vec![s.service_name.clone()];
            if all {
                row.push(ns.namespace.clone());
            }
            row.push(tags);
            rows.push(row);
        }
    }
    if rows.is_empty() {
        writeln!(out, "No service registrations found")?;
        return Ok(0);
    }
    let header: &[&str] = if all {
        &["Service Name", "Namespace", "Tags"]
    } else {
        &["Service Name", "Tags"]
    };
    write!(out, "{}", output::table(header, &rows))?;
    Ok(0)
}

fn info(client: &ApiClient, args: &ServiceInfoArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let path = format!("/v1/service/{}", path_segment(&args.name));
    let answer = client.get(&path, &[])?;
    if args.view.json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    let instances: Vec<ServiceRegistration> = answer
        .decode()
        .context("reading the service's registrations")?;
    if instances.is_empty() {
        writeln!(out, "No service registrations found")?;
        return Ok(0);
    }
    let verbose = args.view.verbose;
    if verbose {
        let blocks: Vec<String> = instances
            .iter()
            .map(|s| {
                output::key_values(&[
                    ("ID", s.id.clone()),
                    ("Service Name", s.service_name.clone()),
                    ("Namespace", s.namespace.clone()),
                    ("Job ID", s.job_id.clone()),
                    ("Alloc ID", s.alloc_id.clone()),
                    ("Node ID", s.node_id.clone()),
                    ("Datacenter", s.datacenter.clone()),
                    ("Address", format!("{}:{}", s.address, s.port)),
                    ("Tags", format!("[{}]", s.tags.join(","))),
                ])
            })
            .collect();
        write!(out, "{}", blocks.join("\n"))?;
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = instances
        .iter()
        .map(|s| {
            vec![
                s.job_id.clone(),
                format!("{}:{}", s.address, s.port),
                format!("[{}]", s.tags.join(",")),
                output::short_id(&s.node_id, false),
                output::short_id(&s.alloc_id, false),
            ]
        })
        .collect();
    write!(
        out,
        "{}",
        output::table(&["Job ID", "Address", "Tags", "Node ID", "Alloc ID"], &rows)
    )?;
    Ok(0)
}
