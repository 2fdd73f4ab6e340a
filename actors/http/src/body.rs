//! Request bodies, read within the agent's `[limits]`, and CPU-heavy work
//! kept off the HTTP workers.
//!
//! Every handler that takes a body takes a [`Body`]: the bytes, read with
//! a size cap (413 past `http_max_body_bytes`, refused from the
//! `Content-Length` header before anything is read), a deadline (408 when
//! a client sends headers and then no body, instead of holding a
//! connection open forever) and a nesting bound (400 past
//! `json_max_nesting_depth`, checked by a linear scan before any parser
//! recurses into the bytes). actix's own `Bytes` and `Json` extractors
//! have no deadline, which is why none of them is used.
//!
//! [`off_worker`] runs parsing, validation and planning on the blocking
//! pool with a deadline: an HTTP worker thread serves many connections,
//! and one expensive request must not stall the others.

use super::errors::ApiError;
use crate::AgentInfo;
use actix_web::dev::Payload;
use actix_web::web::{self, Bytes, BytesMut};
use actix_web::{FromRequest, HttpRequest};
use futures::future::LocalBoxFuture;
use futures::StreamExt;
use herder_common::config::Limits;
use std::ops::Deref;

/// A request body read within the limits.
#[derive(Debug)]
pub struct Body(Bytes);

impl Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl FromRequest for Body {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Body, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let limits = limits(req);
        let declared = req
            .headers()
            .get(actix_web::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let payload = payload.take();
        Box::pin(async move {
            let max = (limits.http_max_body_bytes, "http_max_body_bytes");
            let bytes = read_within(payload, declared, max, &limits).await?;
            check_nesting(&bytes, limits.json_max_nesting_depth)?;
            Ok(Body(bytes))
        })
    }
}

/// Reads a body of at most `max.0` bytes (`max.1` names the limit),
/// within `http_body_read_timeout`; refused from its `declared` length
/// before anything is read when that is already too large.
pub async fn read_within(
    payload: Payload,
    declared: Option<u64>,
    max: (usize, &'static str),
    limits: &Limits,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::PayloadTooLarge(format!(
            "the request body is larger than {} bytes (limits.{})",
            max.0, max.1
        ))
    };
    if declared.is_some_and(|n| n > max.0 as u64) {
        return Err(too_large());
    }
    let read = read_all(payload, max.0);
    tokio::time::timeout(limits.http_body_read_timeout, read)
        .await
        .map_err(|_| {
            ApiError::RequestTimeout(format!(
                "the request body did not arrive within {:?} (limits.http_body_read_timeout)",
                limits.http_body_read_timeout
            ))
        })?
        .map_err(|e| match e {
            ReadError::TooLarge => too_large(),
            ReadError::Payload(e) => {
                ApiError::BadRequest(format!("could not read the request body: {e}"))
            }
        })
}

/// The limits in force: the agent's, or the documented defaults for an
/// app built without an agent (tests of single handlers).
pub fn limits(req: &HttpRequest) -> Limits {
    match req.app_data::<web::Data<AgentInfo>>() {
        Some(info) => info.config.limits.clone(),
        None => Limits::default(),
    }
}

enum ReadError {
    TooLarge,
    Payload(actix_web::error::PayloadError),
}

async fn read_all(mut payload: Payload, max: usize) -> Result<Bytes, ReadError> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(ReadError::Payload)?;
        if buf.len().saturating_add(chunk.len()) > max {
            return Err(ReadError::TooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Refuses JSON nested deeper than `max` (objects and arrays), outside
/// strings. Linear and allocation-free: it runs before any parser, whose
/// recursion is what deep nesting attacks. Bytes that are not JSON are
/// scanned the same way; the parser refuses them afterwards.
pub fn check_nesting(bytes: &[u8], max: usize) -> Result<(), ApiError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (offset, &b) in bytes.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return Err(ApiError::BadRequest(format!(
                        "the request body nests deeper than {max} levels at byte {offset} \
                         (limits.json_max_nesting_depth)"
                    )));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Runs CPU-heavy work (parsing, validating, planning a job) on the
/// blocking pool, answering 503 past `limits.http_cpu_work_timeout`. The
/// work itself is bounded by the other limits; the deadline is the
/// backstop that keeps a request from holding its client forever.
pub async fn off_worker<T, F>(info: &AgentInfo, work: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    let deadline = info.config.limits.http_cpu_work_timeout;
    match tokio::time::timeout(deadline, web::block(work)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => Err(ApiError::Internal(format!("the work failed: {e}"))),
        Err(_) => Err(ApiError::Unavailable(format!(
            "the request took longer than {deadline:?} (limits.http_cpu_work_timeout)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::check_nesting;

    #[test]
    fn nesting_is_counted_outside_strings_only() {
        assert!(check_nesting(br#"{"a": [[{"b": 1}]]}"#, 4).is_ok());
        assert!(check_nesting(br#"{"a": [[{"b": 1}]]}"#, 3).is_err());
        // Brackets inside strings, escaped quotes included, do not count.
        assert!(check_nesting(br#"{"a": "[[[[\"[[[["}"#, 1).is_ok());
        let deep = "[".repeat(100_000);
        assert!(check_nesting(deep.as_bytes(), 64).is_err());
    }
}
