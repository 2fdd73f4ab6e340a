//! JSON jobs: `{"Job": {...}}` as `nomad job run -output` prints it and
//! `PUT /v1/jobs` takes it, or a bare job object as `/v1/jobs/parse` answers.
//!
//! The text is read twice: once as untyped JSON to tell the two shapes
//! apart, then straight into the typed job so that serde_json's line and
//! column point into the user's text for type errors too.

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
    match &value {
        Value::Object(map) if map.get("Job").is_some_and(Value::is_object) => {
            serde_json::from_str::<Wrapped>(text)
                .map(|w| w.job)
                .map_err(error)
        }
        Value::Object(_) => serde_json::from_str::<Job>(text).map_err(error),
        _ => Err(JobspecError::Json {
            file: file.to_string(),
            line: 1,
            column: 1,
            message: "a job must be a JSON object, either {\"Job\": {...}} or the job itself"
                .to_string(),
        }),
    }
}
