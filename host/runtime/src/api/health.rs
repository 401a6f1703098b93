//! `GET /health`, and what every route answers while the broker cannot
//! write its log (a full disk, an I/O error), or, on Service Bus, while
//! the namespace cannot be reached: 503 naming why, instead of `ok` and
//! opaque 500s (decisions 0134, 0138). A full disk clears by itself once
//! writes work; a failure for good says to restart; a namespace back is
//! connected to again at the next call. Nothing here restarts anything.

use std::sync::Arc;

use crate::api::error::internal_cause;
use crate::api::{ApiError, ApiState};
use crate::bus::Bus;
use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// `{"status": "ok"}`, or 503 `{"status": "unhealthy", "reason": ...}`
/// while the bus cannot take work, so a load balancer or supervisor sees
/// it. The reason is the bus's: whether it goes on by itself once writes
/// work (a full disk) or needs the host restarted (a failure for good), or
/// why the namespace cannot be reached.
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

/// Turns a 500 answered while the bus cannot take work into a 503 that
/// says so: the cause is the disk or the namespace, which the operator can
/// act on, not an internal error to dig out of the log.
pub(crate) async fn unavailable_while_unwritable(
    State(bus): State<Arc<Bus>>,
    request: Request,
    next: Next,
) -> Response {
    let response = next.run(request).await;
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return response;
    }
    match bus.failure() {
        // One line in the log for it, with the disk (or the namespace) as
        // its cause and the error the route met beside it, in case it was
        // something else (issue 40: two lines per refused request).
        Some(reason) => ApiError::unavailable_because(
            reason,
            internal_cause(&response).unwrap_or("(none given)"),
        )
        .into_response(),
        None => response,
    }
}
