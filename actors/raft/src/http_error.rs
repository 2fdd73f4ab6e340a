//! The error of one HTTP exchange between servers, on its own so that
//! both the transport ([`crate::http`], which returns it) and the fault
//! injector ([`crate::faults`], which forges it) name it without either
//! importing the other: the transport consults the injector, never the
//! reverse. Re-exported as `http::HttpError`, where callers find it.

/// Why an HTTP exchange failed, before openraft's classification.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The request never reached the server (no connection).
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The exchange broke after the request may have arrived.
    #[error("{url}: no answer: {reason}")]
    Lost { url: String, reason: String },
    #[error("{url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{url}: the answer is not signed with the cluster key")]
    Unsigned { url: String },
    #[error("{url}: {reason}")]
    Body { url: String, reason: String },
}
