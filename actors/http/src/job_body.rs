//! The `{"Job": {...}, ...}` bodies of job registration, validation and
//! planning, decoded into a job. Its own file because the job routes and
//! the plan route both read them, and the plan's diff is also the job
//! routes' (`/v1/job/:id/versions?diffs=true`).

use super::body::{off_worker, Body};
use super::errors::ApiError;
use super::query::{decode_json, server};
use crate::AgentInfo;
use herder::jobspec;
use herder::structs::Job;
use herder_server::server_api::check_job;
use serde_json::Value;

/// Reads `{"Job": {...}, ...}`: the job with Nomad's defaults filled in
/// and validated, or the 400 that says what to fix. Runs off the HTTP
/// workers (see [`off_worker`]).
pub(super) async fn decode_job_body(
    info: &AgentInfo,
    body: Body,
) -> Result<(Job, Value), ApiError> {
    let limits = server(info)?.job_limits;
    let max_job_bytes = info.config.limits.max_job_bytes;
    off_worker(info, move || {
        let (job, value) = parse_job_body(max_job_bytes, &body)?;
        check_job(&job, &limits)?;
        Ok((job, value))
    })
    .await
}

/// As [`decode_job_body`] without the validation, for registration,
/// where `ServerApi::register_job` validates (once) for every transport.
pub(super) fn parse_job_body(max_job_bytes: usize, body: &[u8]) -> Result<(Job, Value), ApiError> {
    let value: Value = decode_json(body)?;
    match value.get("Job") {
        None | Some(Value::Null) => {
            return Err(ApiError::BadRequest("Job must be specified".into()))
        }
        Some(job) if job.to_string().len() > max_job_bytes => {
            return Err(ApiError::BadRequest(format!(
                "job is larger than the limit of {max_job_bytes} bytes (limits.max_job_bytes)"
            )))
        }
        Some(_) => {}
    }
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::BadRequest(format!("Request body is not UTF-8: {e}")))?;
    let job = jobspec::parse_json(text).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok((job, value))
}
