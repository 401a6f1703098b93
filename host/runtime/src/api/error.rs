//! API errors: a 4xx that names the problem, or a generic 5xx whose cause is
//! only logged.

use axum::Json;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use nimbus_manager::ManagerError;
use nimbus_transport::AdminError;

/// What the body of an internal error says: nothing internal.
const INTERNAL_MESSAGE: &str = "internal error in the nimbus host; the host log has the cause";

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is wrong; the message names what and is returned.
    #[error("{message}")]
    Client {
        /// The HTTP status (4xx).
        status: StatusCode,
        /// What is wrong.
        message: String,
    },
    /// The host failed; the cause is logged, not returned.
    #[error("internal error: {0}")]
    Internal(String),
    /// The host could not answer in time (503); the message says why and
    /// is both returned and logged.
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
    /// 400 Bad Request naming the problem.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::Client {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// 404 Not Found naming what is missing.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::Client {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    /// 409 Conflict: the request is well formed but the state forbids it.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::Client {
            status: StatusCode::CONFLICT,
            message: message.into(),
        }
    }

    /// 501 Not Implemented: what the bus the host runs on cannot do (an
    /// entity listing on Service Bus), naming it.
    pub fn not_implemented(message: impl Into<String>) -> ApiError {
        ApiError::Client {
            status: StatusCode::NOT_IMPLEMENTED,
            message: message.into(),
        }
    }

    /// 503 Service Unavailable naming why (logged and returned).
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::Unavailable(message.into())
    }

    /// An internal failure with its cause (logged, never returned).
    pub fn internal(cause: impl Into<String>) -> ApiError {
        ApiError::Internal(cause.into())
    }
}

impl From<ManagerError> for ApiError {
    fn from(e: ManagerError) -> ApiError {
        let message = e.to_string();
        match e {
            ManagerError::UnknownEvent { .. }
            | ManagerError::NotAtEndpoint { .. }
            | ManagerError::UnknownEndpoint { .. }
            | ManagerError::NoSuchEndpoint { .. }
            | ManagerError::DeadLetterNotFound { .. } => ApiError::not_found(message),
            ManagerError::NotJson { .. }
            | ManagerError::MissingErrorText
            | ManagerError::AmbiguousEndpoint { .. }
            | ManagerError::AmbiguousMessage { .. }
            | ManagerError::AmbiguousDeadLetter { .. }
            | ManagerError::InvalidSelection { .. }
            | ManagerError::UnknownDeadLetterQueue { .. } => ApiError::bad_request(message),
            ManagerError::NotPendingHandoff { .. }
            | ManagerError::EventAlreadySettled { .. }
            | ManagerError::EventNotRecorded { .. }
            | ManagerError::DeadLetterStillNeeded { .. }
            | ManagerError::NotReplayable { .. }
            | ManagerError::NotForwarded { .. }
            | ManagerError::SeenInThisPass { .. }
            | ManagerError::MissingCoordinate { .. }
            | ManagerError::MissingPayload { .. }
            | ManagerError::BlockerOnlyNamed { .. } => ApiError::conflict(message),
            ManagerError::ReadEndpoint {
                source: AdminError::Unsupported { .. },
                ..
            }
            | ManagerError::ListForwarders {
                source: AdminError::Unsupported { .. },
                ..
            } => ApiError::not_implemented(message),
            _ => ApiError::internal(message),
        }
    }
}

/// The cause of a 5xx, carried from the handler to the logging middleware
/// in the response's extensions.
#[derive(Clone, Debug)]
struct InternalCause(String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Client { status, message } => {
                (status, Json(serde_json::json!({ "error": message }))).into_response()
            }
            ApiError::Internal(cause) => {
                let mut response = (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Json(serde_json::json!({ "error": INTERNAL_MESSAGE })),
                )
                    .into_response();
                response.extensions_mut().insert(InternalCause(cause));
                response
            }
            ApiError::Unavailable(message) => {
                let mut response = (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(serde_json::json!({ "error": message })),
                )
                    .into_response();
                response.extensions_mut().insert(InternalCause(message));
                response
            }
        }
    }
}

/// The cause a 5xx carries for the log, if any.
pub(crate) fn internal_cause(response: &Response) -> Option<&str> {
    response
        .extensions()
        .get::<InternalCause>()
        .map(|cause| cause.0.as_str())
}

/// Logs every 5xx with the request and its cause; 4xx are the caller's
/// business, and 501 (what the bus cannot do) says why in its answer:
/// both logged at debug only.
pub(crate) async fn log_internal_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let status = response.status();
    // axum's own answer to an oversized body is plain text; every refusal
    // of this API is `{"error": ...}`, naming the problem.
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::Client {
            status,
            message: format!(
                "the request body is larger than the API takes ({} MiB)",
                crate::api::MAX_REQUEST_BODY / (1024 * 1024)
            ),
        }
        .into_response();
    }
    if status == StatusCode::NOT_IMPLEMENTED {
        // What the bus cannot do, named in the answer: nothing failed.
        tracing::debug!(%method, %path, %status, "API request not served on this bus");
    } else if status.is_server_error() {
        let cause = response
            .extensions()
            .get::<InternalCause>()
            .map_or("(no cause recorded)", |c| c.0.as_str());
        tracing::error!(%method, %path, %status, cause, "API request failed");
    } else if status.is_client_error() {
        tracing::debug!(%method, %path, %status, "API request refused");
    }
    response
}

pub(crate) async fn not_found(request: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route {} {}; see the README's HTTP API section",
        request.method(),
        request.uri().path()
    ))
}

pub(crate) async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::Client {
        status: StatusCode::METHOD_NOT_ALLOWED,
        message: format!(
            "method {} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    }
}
