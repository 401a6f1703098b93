//! API errors: a 4xx that names the problem, or a generic 5xx whose cause is
//! only logged.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Json;
use axum::extract::{MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use nimbus_manager::ManagerError;
use nimbus_transport::{AdminError, FailureLog, PublishError};

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
    #[error("{message}")]
    Unavailable {
        /// Why, returned and logged.
        message: String,
        /// What to log instead of the message, if more.
        cause: Option<String>,
    },
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
        ApiError::Unavailable {
            message: message.into(),
            cause: None,
        }
    }

    /// 503 naming why (returned), with what the route met besides (logged
    /// beside it, never returned).
    pub(crate) fn unavailable_because(message: String, cause: &str) -> ApiError {
        ApiError::Unavailable {
            cause: Some(format!("{message}; the route met: {cause}")),
            message,
        }
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
            | ManagerError::MissingPayload { .. } => ApiError::conflict(message),
            // The control message was not taken for now (a dropped
            // connection, a broker that cannot write): ask again later.
            ManagerError::Publish {
                source: PublishError::Transient(_),
                ..
            } => ApiError::unavailable(message),
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
            ApiError::Unavailable { message, cause } => {
                let logged = cause.unwrap_or_else(|| message.clone());
                let mut response = (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(serde_json::json!({ "error": message })),
                )
                    .into_response();
                response.extensions_mut().insert(InternalCause(logged));
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

/// When 5xx answers are logged: per route and status, the first at once,
/// then one line a minute saying how many it stands for. A client that
/// retries while the disk is full (or a load balancer probing a failing
/// route) must not fill the disk with the host's log (issue 40).
#[derive(Debug, Default)]
pub(crate) struct ServerErrorLog {
    /// By `method route status`: a fixed set, since `route` is the route's
    /// pattern (`/api/events/{event_id}`), not the path asked for.
    by_route: Mutex<HashMap<String, Arc<FailureLog>>>,
}

impl ServerErrorLog {
    /// The log of failures of `key`.
    fn of(&self, key: String) -> Arc<FailureLog> {
        let mut by_route = self.by_route.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(by_route.entry(key).or_default())
    }
}

/// Logs 5xx answers with the request and its cause, as [`ServerErrorLog`]
/// lets through; 4xx are the caller's business, 501 (what the bus cannot
/// do) says why in its answer, and `/health` answering 503 is its answer,
/// not a failure: all logged at debug only.
pub(crate) async fn log_internal_errors(
    State(log): State<Arc<ServerErrorLog>>,
    request: Request,
    next: Next,
) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    // What the route is, for the log's limit; a path that matched none is
    // answered by the fallback, whatever it is.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "(no route)".to_owned(), |m| m.as_str().to_owned());
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
    } else if status == StatusCode::SERVICE_UNAVAILABLE && route == "/health" {
        tracing::debug!(%method, %path, %status, "the health probe answered unhealthy");
    } else if status.is_server_error() {
        let key = format!("{method} {route} {}", status.as_u16());
        if let Some(line) = log.of(key).failed(std::time::Instant::now()) {
            let cause = response
                .extensions()
                .get::<InternalCause>()
                .map_or("(no cause recorded)", |c| c.0.as_str());
            let held_back = line.held_back;
            tracing::error!(%method, %path, %status, cause, held_back, "API request failed (one line a minute for its route while it fails)");
        }
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
