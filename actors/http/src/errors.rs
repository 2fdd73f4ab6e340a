//! API errors and their status codes.
//!
//! Nomad answers errors as plain text bodies with the status code carrying
//! the class; clients (python-nomad, the Go api package) read the text.

use actix_web::{http::StatusCode, HttpResponse, ResponseError};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    RequestTimeout(String),
    #[error("{0}")]
    NotImplemented(String),
    #[error("{0}")]
    Unavailable(String),
    /// Another agent this one forwarded the request to could not be
    /// reached.
    #[error("{0}")]
    BadGateway(String),
    /// Another agent this one forwarded the request to did not answer in
    /// time.
    #[error("{0}")]
    GatewayTimeout(String),
    #[error("{0}")]
    Internal(String),
    /// The answer of the agent a request was forwarded to, passed on as
    /// it came.
    #[error("{body}")]
    Forwarded { status: u16, body: String },
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ApiError::GatewayTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Forwarded { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
        }
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status_code())
            .content_type("text/plain; charset=utf-8")
            .body(self.to_string())
    }
}

impl From<herder_server::server_api::ServerApiError> for ApiError {
    fn from(e: herder_server::server_api::ServerApiError) -> ApiError {
        use herder_server::server_api::ServerApiError as E;
        match e {
            E::Invalid(m) => ApiError::BadRequest(m),
            E::NotFound(m) => ApiError::NotFound(m),
            E::Forbidden(m) => ApiError::Forbidden(m),
            E::Unavailable(m) => ApiError::Unavailable(m),
            E::Internal(m) => ApiError::Internal(m),
            timeout @ E::Timeout(_) => ApiError::Unavailable(timeout.to_string()),
        }
    }
}

/// Unknown paths: 404 with the path, as Nomad's mux answers.
pub async fn not_found(req: actix_web::HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound(format!(
        "Invalid URL path: {}",
        req.path()
    )))
}

/// A path segment that cannot be read is the client's mistake.
pub fn path_error(
    err: actix_web::error::PathError,
    _req: &actix_web::HttpRequest,
) -> actix_web::Error {
    ApiError::BadRequest(format!("Invalid path: {err}")).into()
}

/// actix answers a known path with an unsupported method with an empty
/// 405; say which method was refused instead.
pub fn explain_method_not_allowed<B>(
    res: actix_web::dev::ServiceResponse<B>,
) -> actix_web::Result<actix_web::middleware::ErrorHandlerResponse<B>> {
    let message = format!(
        "Method {} is not allowed on {}",
        res.request().method(),
        res.request().path()
    );
    let allow = res.headers().get(actix_web::http::header::ALLOW).cloned();
    let (req, _) = res.into_parts();
    let mut response = HttpResponse::MethodNotAllowed();
    if let Some(allow) = allow {
        response.insert_header((actix_web::http::header::ALLOW, allow));
    }
    let response = response
        .content_type("text/plain; charset=utf-8")
        .body(message);
    Ok(actix_web::middleware::ErrorHandlerResponse::Response(
        actix_web::dev::ServiceResponse::new(req, response).map_into_right_body(),
    ))
}
