//! `GET /health`, and what every route answers while the broker cannot
//! write its log (a full disk, an I/O error): 503 naming why, instead of
//! `ok` and opaque 500s (decision 0134). A full disk clears by itself once
//! writes work; a failure for good says to restart. Nothing here restarts
//! anything.

use std::sync::Arc;

use crate::bus::Bus;
use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::warn;

use crate::api::error::internal_cause;
use crate::api::{ApiError, ApiState};

/// `{"status": "ok"}`, or 503 `{"status": "unhealthy", "reason": ...}`
/// while the broker cannot write, so a load balancer or supervisor sees it.
/// The reason is the broker's: whether it goes on by itself once writes
/// work (a full disk) or needs the host restarted (a failure for good).
pub(crate) async fn health(State(state): State<ApiState>) -> Response {
    match state.bus.failure() {
        None => {
            Json(serde_json::json!({ "status": "ok", "version": crate::VERSION })).into_response()
        }
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({
                "status": "unhealthy",
                "version": crate::VERSION,
                "reason": reason,
            })),
        )
            .into_response(),
    }
}

/// Turns a 500 answered while the broker cannot write into a 503 that
/// says so: the cause is the disk, which the operator can act on, not an
/// internal error to dig out of the log.
pub(crate) async fn unavailable_while_unwritable(
    State(bus): State<Arc<Bus>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return response;
    }
    match bus.failure() {
        Some(reason) => {
            // The 503 is logged with the disk as its cause; the error the
            // route met is kept here, in case it was something else.
            warn!(
                %path,
                cause = internal_cause(&response).unwrap_or("(none given)"),
                "a request failed while the broker cannot write its log"
            );
            ApiError::unavailable(reason).into_response()
        }
        None => response,
    }
}
