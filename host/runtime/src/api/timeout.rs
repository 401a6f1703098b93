//! The request timeout: a request whose handler (reading its body
//! included) runs past `[api] request_timeout` is answered 503 and its
//! work dropped, so a client that trickles a body, or a read stuck on a
//! busy store, holds no task and memory for ever.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::ApiError;

/// The middleware over every route.
pub(crate) async fn limit(
    State(timeout): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::unavailable(format!(
            "the request took longer than {} ([api] request_timeout) and was stopped; an \
             operation it asked for may have happened: look before asking again",
            humantime::format_duration(timeout)
        ))
        .into_response(),
    }
}
