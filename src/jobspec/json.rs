//! JSON jobs: `{"Job": {...}}` as `nomad job run -output` prints it and
//! `PUT /v1/jobs` takes it, or a bare job object as `/v1/jobs/parse` answers.
//!
//! The text is read twice: once as untyped JSON to tell the two shapes
//! apart, then straight into the typed job so that serde_json's line and
//! column point into the user's text for type errors too.
//!
//! Nomad's `api` structs use nil pointers for "not written", and its
//! `Canonicalize` fills some of those differently from a zero value: a
//! missing `Count` means 1 (an explicit 0 stays 0), and a group without an
//! `Update` takes the job's whole update block. herder's structs cannot
//! tell missing from zero, so those two are settled here from the raw JSON
//! before `Job::canonicalize` runs.

use super::JobspecError;
use crate::structs::Job;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct Wrapped {
    #[serde(rename = "Job")]
    job: Job,
}

pub(crate) fn parse(text: &str, file: &str) -> Result<Job, JobspecError> {
    let error = |e: serde_json::Error| JobspecError::Json {
        file: file.to_string(),
        line: e.line(),
        column: e.column(),
        message: e
            .to_string()
            .split(" at line ")
            .next()
            .unwrap_or("")
            .to_string(),
    };
    let value: Value = serde_json::from_str(text).map_err(error)?;
    let (mut job, raw) = match &value {
        Value::Object(map) => match map.get("Job") {
            Some(raw @ Value::Object(_)) => {
                let w = serde_json::from_str::<Wrapped>(text).map_err(error)?;
                (w.job, raw)
            }
            _ => (serde_json::from_str::<Job>(text).map_err(error)?, &value),
        },
        _ => {
            return Err(JobspecError::Json {
                file: file.to_string(),
                line: 1,
                column: 1,
                message: "a job must be a JSON object, either {\"Job\": {...}} or the job itself"
                    .to_string(),
            })
        }
    };
    apply_unset_defaults(&mut job, raw);
    Ok(job)
}

/// Nomad's defaults for fields the JSON left out (see the module notes).
fn apply_unset_defaults(job: &mut Job, raw: &Value) {
    let raw_groups = raw.get("TaskGroups").and_then(Value::as_array);
    for (i, tg) in job.task_groups.iter_mut().enumerate() {
        let raw_group = raw_groups.and_then(|g| g.get(i));
        let written = |field: &str| {
            raw_group
                .and_then(|g| g.get(field))
                .is_some_and(|v| !v.is_null())
        };
        if !written("Count") {
            tg.count = 1;
        }
        if tg.update.is_none() {
            tg.update = job.update.clone();
        }
    }
}
