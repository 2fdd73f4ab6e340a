//! How a `ServerApi` call is refused, and how the store's errors map onto
//! those classes. Its own file so that the write path and the cluster's
//! leader link, which both answer in these terms, need nothing else of
//! the front door.

use herder::state::{ApplyError, StoreError};
use std::time::Duration;

/// Why a call was refused. The class decides the HTTP status when the
/// call came over HTTP: `Invalid` 400, `NotFound` 404, `Forbidden` 403,
/// `Unavailable` 503, `Internal` 500.
#[derive(Debug, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ServerApiError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

/// A write's outcome from the store: rejections are the caller's fault,
/// a closed or failed store is the server's.
pub fn store_error(e: StoreError) -> ServerApiError {
    match e {
        StoreError::Rejected(ApplyError::JobNotFound { .. }) => {
            ServerApiError::NotFound("job not found".into())
        }
        StoreError::Rejected(ApplyError::NodeNotFound(_)) => {
            ServerApiError::NotFound("node not found".into())
        }
        StoreError::Rejected(ApplyError::KeyringNotFound(text)) => ServerApiError::NotFound(text),
        StoreError::Rejected(ApplyError::DeploymentNotFound(_)) => {
            ServerApiError::NotFound("deployment not found".into())
        }
        // Nomad's deployment refusals are plain RPC errors, which its HTTP
        // agent answers with 500 and the bare text; clients match on it.
        StoreError::Rejected(ApplyError::DeploymentRefused(text)) => ServerApiError::Internal(text),
        StoreError::Rejected(ApplyError::AclBootstrapDone { reset_index }) => {
            ServerApiError::Invalid(format!(
                "ACL bootstrap already done (reset index: {reset_index})"
            ))
        }
        StoreError::Rejected(r) => {
            let message = r.to_string();
            // Nomad's check-and-set refusal reads "Enforcing job modify
            // index ..."; the store's sentences are lower-case.
            if message.starts_with("enforcing") {
                ServerApiError::Invalid(capitalize(&message))
            } else {
                ServerApiError::Invalid(message)
            }
        }
        StoreError::Closed => shutting_down(),
        other => ServerApiError::Internal(other.to_string()),
    }
}

/// The refusal of a server whose store is closing.
pub(super) fn shutting_down() -> ServerApiError {
    ServerApiError::Unavailable("the server is shutting down".into())
}

/// Nomad's messages start with a capital ("Enforcing job modify index
/// ..."); the store's errors are lower-case sentences.
fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
