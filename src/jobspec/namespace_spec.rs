//! A namespace specification file, as `nomad namespace apply FILE` reads
//! it: HCL attributes `name`, `description`, `quota` and a `meta` block
//! (Enterprise's `capabilities` and similar blocks are read over), or the
//! API's JSON `Namespace` object.

use crate::structs::Namespace;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Reads a namespace from HCL, or from JSON when `json` is set.
pub fn parse_namespace_spec(src: &str, json: bool) -> Result<Namespace, String> {
    if json {
        return serde_json::from_str(src).map_err(|e| e.to_string());
    }
    let body: hcl::Value = hcl::from_str(src).map_err(|e| e.to_string())?;
    let Ok(Value::Object(fields)) = serde_json::to_value(body) else {
        return Err("error parsing: root should be an object".into());
    };
    Ok(Namespace {
        name: text(&fields, "name")?,
        description: text(&fields, "description")?,
        quota: text(&fields, "quota")?,
        meta: meta(&fields)?,
        ..Default::default()
    })
}

fn text(fields: &Map<String, Value>, key: &str) -> Result<String, String> {
    match fields.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("{key}: expected a string, got {other}")),
    }
}

/// `meta { key = "value" }`: values are taken as text (Nomad decodes
/// them weakly, so a number becomes its digits).
fn meta(fields: &Map<String, Value>) -> Result<BTreeMap<String, String>, String> {
    let Some(meta) = fields.get("meta") else {
        return Ok(BTreeMap::new());
    };
    let Value::Object(entries) = meta else {
        return Err("meta: expected a block of key = value".into());
    };
    entries
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            Value::Number(_) | Value::Bool(_) => Ok((k.clone(), v.to_string())),
            other => Err(format!("meta.{k}: expected a string, got {other}")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nomads_hcl_spec() {
        let ns = parse_namespace_spec(
            r#"
name        = "api-prod"
description = "Production API Servers"
capabilities {
  enabled_task_drivers = ["docker"]
}
meta {
  owner = "api-team"
  tier  = 1
}
"#,
            false,
        )
        .unwrap();
        assert_eq!(ns.name, "api-prod");
        assert_eq!(ns.description, "Production API Servers");
        assert_eq!(ns.meta["owner"], "api-team");
        assert_eq!(ns.meta["tier"], "1");
    }

    #[test]
    fn reads_json_and_refuses_nonsense() {
        let ns = parse_namespace_spec(r#"{"Name":"a","Description":"b"}"#, true).unwrap();
        assert_eq!((ns.name.as_str(), ns.description.as_str()), ("a", "b"));
        assert!(parse_namespace_spec("name = [1]", false).is_err());
        assert!(parse_namespace_spec("name = ", false).is_err());
    }
}

/// Whether a job file names its namespace itself (a `namespace`
/// attribute of its `job` block, or `Namespace` in JSON): when it does
/// not, `job run -namespace` / `NOMAD_NAMESPACE` choose it, as in Nomad.
pub fn job_text_names_namespace(text: &str, json: bool) -> bool {
    if json {
        let Ok(value) = serde_json::from_str::<Value>(text) else {
            return false;
        };
        let job = value.get("Job").unwrap_or(&value);
        return job
            .get("Namespace")
            .and_then(Value::as_str)
            .is_some_and(|ns| !ns.is_empty());
    }
    let Ok(body) = hcl::parse(text) else {
        return false;
    };
    body.blocks()
        .filter(|b| b.identifier() == "job")
        .any(|job| job.body.attributes().any(|a| a.key() == "namespace"))
}

#[cfg(test)]
mod job_namespace_tests {
    use super::job_text_names_namespace;

    #[test]
    fn only_the_job_blocks_own_namespace_counts() {
        let named = "job \"a\" {\n  namespace = \"x\"\n  group \"g\" {}\n}\n";
        let unnamed = "job \"a\" {\n  group \"g\" {\n    task \"t\" {\n      vault {\n        namespace = \"v\"\n      }\n    }\n  }\n}\n";
        assert!(job_text_names_namespace(named, false));
        assert!(!job_text_names_namespace(unnamed, false));
        assert!(job_text_names_namespace(
            r#"{"Job":{"Namespace":"x"}}"#,
            true
        ));
        assert!(!job_text_names_namespace(
            r#"{"Job":{"Namespace":null}}"#,
            true
        ));
    }
}
