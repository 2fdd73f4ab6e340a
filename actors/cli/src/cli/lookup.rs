//! Finding the object a user means from what they typed: a whole UUID or
//! a unique prefix of one, a job ID or a unique prefix of one, looked up
//! in the agent's lists as Nomad's CLI does.

use anyhow::{bail, Context};
use herder_api_client::ApiClient;

/// Resolves a UUID or a unique prefix of one (as Nomad's CLI does) with
/// `GET <list_path>?prefix=`. `kind` names the object in messages.
pub fn resolve_uuid_prefix(
    client: &ApiClient,
    list_path: &str,
    kind: &str,
    given: &str,
) -> anyhow::Result<String> {
    if uuid::Uuid::parse_str(given).is_ok() && given.len() == 36 {
        return Ok(given.to_string());
    }
    if given.len() < 2 {
        bail!("Identifier must contain at least two characters.");
    }
    // The server looks prefixes up as bytes of the UUID, so Nomad's CLI
    // drops an odd trailing hex digit; do the same to work against Nomad.
    let even = &given[..given.len() - given.len() % 2];
    let ids = list_ids(client, list_path, even)?;
    pick_unique(ids, kind, given, |_| false)
}

/// Resolves a job ID or a unique prefix of one; an exact match wins.
pub fn resolve_job_id(client: &ApiClient, given: &str) -> anyhow::Result<String> {
    let ids = list_ids(client, "/v1/jobs", given)?;
    pick_unique(ids, "job", given, |id| id == given)
}

fn list_ids(client: &ApiClient, list_path: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
    let answer = client.get(list_path, &[("prefix", prefix.to_string())])?;
    let items = answer
        .body
        .as_array()
        .with_context(|| format!("GET {list_path}: expected a JSON array"))?;
    Ok(items
        .iter()
        .filter_map(|item| item.get("ID").and_then(|id| id.as_str()))
        .filter(|id| id.starts_with(prefix))
        .map(str::to_string)
        .collect())
}

fn pick_unique(
    mut ids: Vec<String>,
    kind: &str,
    given: &str,
    exact: impl Fn(&str) -> bool,
) -> anyhow::Result<String> {
    if let Some(found) = ids.iter().find(|id| exact(id)) {
        return Ok(found.clone());
    }
    match ids.len() {
        0 => bail!("No {kind} with prefix or id {given:?} found"),
        1 => Ok(ids.remove(0)),
        _ => bail!(
            "Prefix {given:?} matched multiple {kind}s; use more characters:\n{}",
            ids.join("\n")
        ),
    }
}
