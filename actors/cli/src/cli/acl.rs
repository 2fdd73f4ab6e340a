//! `herder acl bootstrap|policy|token|role ...`: the ACL API as Nomad's
//! `acl` verbs drive it. Every verb sends the shared `-token` flag (or
//! `NOMAD_TOKEN`) as `X-Nomad-Token`, through the shared API client.

use super::flags::ApiFlags;
use super::output;
use anyhow::Context;
use clap::{Args, Subcommand};
use herder_api_client::{path_segment, ApiClient};
use serde_json::{json, Value};
use std::io::{Read, Write};

#[derive(Debug, Args)]
pub struct AclArgs {
    #[command(flatten)]
    pub api: ApiFlags,
    #[command(subcommand)]
    pub command: AclCommand,
}

#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Make the first management token (once; again after the reset
    /// procedure).
    Bootstrap(JsonFlag),
    /// Policies: apply, list, info, delete.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Tokens: create, update, list, info, self, delete.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Roles: create, update, list, info, delete.
    #[command(subcommand)]
    Role(RoleCommand),
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print the API's JSON answer.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Create or replace a policy from a rules file (`-`: stdin).
    Apply {
        #[arg(long, default_value = "")]
        description: String,
        name: String,
        file: String,
    },
    List(JsonFlag),
    Info {
        name: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    Delete {
        name: String,
    },
}

/// What a token is made or changed with.
#[derive(Debug, Args)]
pub struct TokenFields {
    #[arg(long)]
    pub name: Option<String>,
    /// `client` or `management`.
    #[arg(long = "type")]
    pub token_type: Option<String>,
    /// A policy (repeatable).
    #[arg(long = "policy")]
    pub policies: Vec<String>,
    /// A role by name (repeatable).
    #[arg(long = "role-name")]
    pub role_names: Vec<String>,
    /// A role by ID (repeatable).
    #[arg(long = "role-id")]
    pub role_ids: Vec<String>,
    /// How long the token lives (`1h`, `30m`).
    #[arg(long)]
    pub ttl: Option<String>,
    /// Nomad's token replicated to every region; herder has one region,
    /// so it is kept but changes nothing (the answer warns).
    #[arg(long)]
    pub global: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    Create(TokenFields),
    Update {
        accessor: String,
        #[command(flatten)]
        fields: TokenFields,
    },
    List(JsonFlag),
    Info {
        accessor: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    #[command(name = "self")]
    Self_(JsonFlag),
    Delete {
        accessor: String,
    },
}

#[derive(Debug, Args)]
pub struct RoleFields {
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub description: Option<String>,
    /// A policy (repeatable).
    #[arg(long = "policy")]
    pub policies: Vec<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Debug, Subcommand)]
pub enum RoleCommand {
    Create(RoleFields),
    Update {
        id: String,
        #[command(flatten)]
        fields: RoleFields,
    },
    List(JsonFlag),
    Info {
        id: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    Delete {
        id: String,
    },
}

/// Runs one `acl` verb and returns its exit status.
pub fn run(args: AclArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let client = args.api.client()?;
    match args.command {
        AclCommand::Bootstrap(j) => {
            let answer = client.put("/v1/acl/bootstrap", &[], &json!({}))?;
            show_token(&answer.body, j.json, out)
        }
        AclCommand::Policy(cmd) => policy(&client, cmd, out),
        AclCommand::Token(cmd) => token(&client, cmd, out),
        AclCommand::Role(cmd) => role(&client, cmd, out),
    }
}

fn policy(client: &ApiClient, cmd: PolicyCommand, out: &mut dyn Write) -> anyhow::Result<u8> {
    match cmd {
        PolicyCommand::Apply {
            description,
            name,
            file,
        } => {
            let rules = read_rules(&file)?;
            let body = json!({"Name": name, "Description": description, "Rules": rules});
            let answer = client.put(
                &format!("/v1/acl/policy/{}", path_segment(&name)),
                &[],
                &body,
            )?;
            writeln!(out, "Successfully wrote {name:?} ACL policy!")?;
            print_warnings("Policy", &answer.body, false, out)?;
        }
        PolicyCommand::List(j) => {
            let answer = client.get("/v1/acl/policies", &[])?;
            if j.json {
                write!(out, "{}", output::json(&answer.body))?;
                return Ok(0);
            }
            writeln!(out, "Name  Description")?;
            for p in answer.body.as_array().into_iter().flatten() {
                writeln!(out, "{}  {}", text(&p["Name"]), text(&p["Description"]))?;
            }
        }
        PolicyCommand::Info { name, json } => {
            let answer = client.get(&format!("/v1/acl/policy/{}", path_segment(&name)), &[])?;
            if json.json {
                write!(out, "{}", output::json(&answer.body))?;
                return Ok(0);
            }
            let b = &answer.body;
            writeln!(out, "Name        = {}", text(&b["Name"]))?;
            writeln!(out, "Description = {}", text(&b["Description"]))?;
            writeln!(out, "CreateIndex = {}", b["CreateIndex"])?;
            writeln!(
                out,
                "ModifyIndex = {}\n\nRules\n\n{}",
                b["ModifyIndex"],
                text(&b["Rules"])
            )?;
        }
        PolicyCommand::Delete { name } => {
            client.delete(&format!("/v1/acl/policy/{}", path_segment(&name)), &[])?;
            writeln!(out, "Successfully deleted {name:?} ACL policy!")?;
        }
    }
    Ok(0)
}

fn read_rules(file: &str) -> anyhow::Result<String> {
    if file == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        return Ok(text);
    }
    std::fs::read_to_string(file).with_context(|| format!("reading {file}"))
}

fn token_body(fields: &TokenFields) -> anyhow::Result<Value> {
    let mut body = json!({
        "Policies": fields.policies,
        "Roles": fields.role_ids.iter().map(|id| json!({"ID": id}))
            .chain(fields.role_names.iter().map(|n| json!({"Name": n})))
            .collect::<Vec<_>>(),
        "Type": fields.token_type.clone().unwrap_or_else(|| "client".into()),
        "Global": fields.global,
    });
    if let Some(name) = &fields.name {
        body["Name"] = json!(name);
    }
    if let Some(ttl) = &fields.ttl {
        let ttl = herder::jobspec::parse_go_duration(ttl)
            .map_err(|e| anyhow::anyhow!("-ttl {ttl:?}: {e}"))?;
        body["ExpirationTTL"] = json!(ttl.as_nanos() as u64);
    }
    Ok(body)
}

fn token(client: &ApiClient, cmd: TokenCommand, out: &mut dyn Write) -> anyhow::Result<u8> {
    let one = |path: String| -> anyhow::Result<Value> { Ok(client.get(&path, &[])?.body) };
    match cmd {
        TokenCommand::Create(f) => {
            let answer = client.put("/v1/acl/token", &[], &token_body(&f)?)?;
            show_token(&answer.body, f.json.json, out)?;
            print_warnings("Token", &answer.body, f.json.json, out)
        }
        TokenCommand::Update { accessor, fields } => {
            let path = format!("/v1/acl/token/{}", path_segment(&accessor));
            let mut current = one(path.clone())?;
            let changes = token_body(&fields)?;
            if !fields.policies.is_empty() {
                current["Policies"] = changes["Policies"].clone();
            }
            if let Some(name) = &fields.name {
                current["Name"] = json!(name);
            }
            if fields.global {
                current["Global"] = json!(true);
            }
            let answer = client.put(&path, &[], &current)?;
            show_token(&answer.body, fields.json.json, out)?;
            print_warnings("Token", &answer.body, fields.json.json, out)
        }
        TokenCommand::List(j) => {
            let answer = client.get("/v1/acl/tokens", &[])?;
            if j.json {
                write!(out, "{}", output::json(&answer.body))?;
                return Ok(0);
            }
            writeln!(out, "Name  Type  Global  Accessor ID  Expiry Time")?;
            for t in answer.body.as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "{}  {}  {}  {}  {}",
                    text(&t["Name"]),
                    text(&t["Type"]),
                    t["Global"],
                    text(&t["AccessorID"]),
                    t.get("ExpirationTime")
                        .and_then(Value::as_str)
                        .unwrap_or("<none>"),
                )?;
            }
            Ok(0)
        }
        TokenCommand::Info { accessor, json } => show_token(
            &one(format!("/v1/acl/token/{}", path_segment(&accessor)))?,
            json.json,
            out,
        ),
        TokenCommand::Self_(j) => show_token(&one("/v1/acl/token/self".into())?, j.json, out),
        TokenCommand::Delete { accessor } => {
            client.delete(&format!("/v1/acl/token/{}", path_segment(&accessor)), &[])?;
            writeln!(out, "Token {accessor} successfully deleted")?;
            Ok(0)
        }
    }
}

/// The answer's `Warnings` (what herder kept but does not act on), as
/// `job run` prints a job's; nothing when there are none, or when the
/// answer was printed as JSON (which holds them). Exit code 0.
fn print_warnings(
    what: &str,
    answer: &Value,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let warnings = answer.get("Warnings").and_then(Value::as_str).unwrap_or("");
    if !warnings.is_empty() && !json {
        writeln!(out, "\n{what} Warnings:\n{}", warnings.trim_end())?;
    }
    Ok(0)
}

/// A token as `nomad acl token info` prints it.
fn show_token(t: &Value, json: bool, out: &mut dyn Write) -> anyhow::Result<u8> {
    if json {
        write!(out, "{}", output::json(t))?;
        return Ok(0);
    }
    let list = |v: &Value| {
        let names: Vec<String> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| x.as_str().map_or_else(|| text(&x["Name"]), str::to_string))
            .collect();
        if names.is_empty() {
            "n/a".to_string()
        } else {
            names.join(",")
        }
    };
    writeln!(out, "Accessor ID  = {}", text(&t["AccessorID"]))?;
    writeln!(out, "Secret ID    = {}", text(&t["SecretID"]))?;
    writeln!(out, "Name         = {}", text(&t["Name"]))?;
    writeln!(out, "Type         = {}", text(&t["Type"]))?;
    writeln!(out, "Global       = {}", t["Global"])?;
    writeln!(out, "Create Time  = {}", text(&t["CreateTime"]))?;
    let expiry = t
        .get("ExpirationTime")
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    writeln!(out, "Expiry Time  = {expiry}")?;
    writeln!(out, "Create Index = {}", t["CreateIndex"])?;
    writeln!(out, "Modify Index = {}", t["ModifyIndex"])?;
    writeln!(out, "Policies     = {}", list(&t["Policies"]))?;
    writeln!(out, "Roles        = {}", list(&t["Roles"]))?;
    Ok(0)
}

fn role(client: &ApiClient, cmd: RoleCommand, out: &mut dyn Write) -> anyhow::Result<u8> {
    let body = |f: &RoleFields, mut base: Value| {
        if let Some(n) = &f.name {
            base["Name"] = json!(n);
        }
        if let Some(d) = &f.description {
            base["Description"] = json!(d);
        }
        if !f.policies.is_empty() {
            base["Policies"] = json!(f
                .policies
                .iter()
                .map(|p| json!({"Name": p}))
                .collect::<Vec<_>>());
        }
        base
    };
    let answer = match cmd {
        RoleCommand::Create(f) => {
            let answer = client.put("/v1/acl/role", &[], &body(&f, json!({})))?;
            return show_role(&answer.body, f.json.json, out);
        }
        RoleCommand::Update { id, fields } => {
            let path = format!("/v1/acl/role/{}", path_segment(&id));
            let current = client.get(&path, &[])?.body;
            let answer = client.put(&path, &[], &body(&fields, current))?;
            return show_role(&answer.body, fields.json.json, out);
        }
        RoleCommand::Info { id, json } => {
            let answer = client.get(&format!("/v1/acl/role/{}", path_segment(&id)), &[])?;
            return show_role(&answer.body, json.json, out);
        }
        RoleCommand::Delete { id } => {
            client.delete(&format!("/v1/acl/role/{}", path_segment(&id)), &[])?;
            writeln!(out, "ACL role {id} successfully deleted")?;
            return Ok(0);
        }
        RoleCommand::List(j) => (client.get("/v1/acl/roles", &[])?, j.json),
    };
    let (answer, json) = answer;
    if json {
        write!(out, "{}", output::json(&answer.body))?;
        return Ok(0);
    }
    writeln!(out, "ID  Name  Description  Policies")?;
    for r in answer.body.as_array().into_iter().flatten() {
        writeln!(
            out,
            "{}  {}  {}  {}",
            text(&r["ID"]),
            text(&r["Name"]),
            text(&r["Description"]),
            policy_names(r)
        )?;
    }
    Ok(0)
}

fn policy_names(role: &Value) -> String {
    let names: Vec<String> = role["Policies"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| text(&p["Name"]))
        .collect();
    names.join(",")
}

fn show_role(r: &Value, json: bool, out: &mut dyn Write) -> anyhow::Result<u8> {
    if json {
        write!(out, "{}", output::json(r))?;
        return Ok(0);
    }
    writeln!(out, "ID           = {}", text(&r["ID"]))?;
    writeln!(out, "Name         = {}", text(&r["Name"]))?;
    writeln!(out, "Description  = {}", text(&r["Description"]))?;
    writeln!(out, "Policies     = {}", policy_names(r))?;
    writeln!(out, "Create Index = {}", r["CreateIndex"])?;
    writeln!(out, "Modify Index = {}", r["ModifyIndex"])?;
    Ok(0)
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}
